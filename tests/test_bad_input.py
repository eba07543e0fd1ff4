"""Bad input fails early with a message a student can act on.

Every case checks the exception type *and* that the message names the argument, shows what it got and says
what was expected. A second group checks the one input that is legal but easy to get wrong: a query that may
attend to no key at all must give zeros, never NaN.
"""

from __future__ import annotations

import re

import pytest
import torch

import mha_lib
from mha_lib import (
    FusedMultiHeadAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    causal_mask,
    embed_tokens,
    explicit_attention,
    fused_from_split,
    journey_batch,
    masked_softmax,
    merge_heads,
    sdpa_attention,
    split_from_wrapper,
    split_heads,
    tokenize,
    torch_mha_from,
)

B, T, D, H = 2, 4, 6, 2  # batch, tokens, width, heads of the small layer most cases use


def small_mha(**kwargs) -> MultiHeadAttention:
    return MultiHeadAttention(D, D, T, 0.0, H, **kwargs)


def x_input(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype) if shape else torch.randn(B, T, D, dtype=dtype)


def qkv(q_shape=(2, 3, 4), k_shape=(2, 3, 4), v_shape=(2, 3, 4)):
    return torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape)


def plot_heads(*args, **kwargs):
    return mha_lib.plot_heads(*args, **kwargs)  # lazy attribute: matplotlib is imported on first use only


def esc(*parts: str) -> str:
    """Regex requiring the literal ``parts`` in this order (anything may lie between them)."""
    return ".*".join(re.escape(p) for p in parts)


CASES = [
    # --- constructor arguments -------------------------------------------------------------------------
    pytest.param(
        lambda: MultiHeadAttention(6, 10, 4, 0.0, 3),
        ValueError, esc("d_out (10) must be divisible by num_heads (3)", "try num_heads in [1, 2, 5, 10]"),
        id="d_out-not-divisible-lists-valid-head-counts",
    ),
    pytest.param(
        lambda: MultiHeadAttention(6, 6, 4, 0.0, 0),
        ValueError, esc("num_heads must be a positive int (>= 1), got 0"), id="num_heads-zero",
    ),
    pytest.param(
        lambda: MultiHeadAttention(6, 6, 4, 0.0, True),
        TypeError, esc("num_heads must be a positive int, got bool True"), id="num_heads-bool",
    ),
    pytest.param(
        lambda: MultiHeadAttention(6, 6, 4, 0.0, 2.0),
        TypeError, esc("num_heads must be a positive int, got float 2.0"), id="num_heads-float",
    ),
    pytest.param(
        lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.0, 0),
        ValueError, esc("num_heads must be a positive int (>= 1), got 0"), id="wrapper-num_heads-zero",
    ),
    pytest.param(
        lambda: MultiHeadAttention(6, 6, 4, -0.1, 2),
        ValueError, esc("dropout must be in [0, 1), got -0.1"), id="dropout-negative",
    ),
    pytest.param(
        lambda: MultiHeadAttention(6, 6, 4, 1.0, 2),
        ValueError, esc("dropout must be in [0, 1), got 1.0"), id="dropout-one",
    ),
    pytest.param(
        lambda: MultiHeadAttention(6, 6, 4, "0.1", 2),
        TypeError, esc("dropout must be a float in [0, 1), got str '0.1'"), id="dropout-str",
    ),
    pytest.param(
        lambda: MultiHeadAttention(6, 6, 0, 0.0, 2),
        ValueError, esc("context_length must be a positive int (>= 1), got 0"), id="context_length-zero",
    ),
    pytest.param(
        lambda: small_mha(qkv_bias=1),
        TypeError, esc("qkv_bias must be True or False, got int 1"), id="qkv_bias-int",
    ),
    pytest.param(
        lambda: small_mha(causal="yes"),
        TypeError, esc("causal must be True or False, got str 'yes'"), id="causal-str",
    ),
    pytest.param(
        lambda: small_mha(kernel="flash"),
        ValueError, esc("kernel must be one of ['explicit', 'sdpa'], got 'flash'"), id="kernel-unknown",
    ),
    pytest.param(
        lambda: FusedMultiHeadAttention(6, 6, 4, 0.0, 2, kernel="Explicit"),
        ValueError, esc("kernel must be one of ['explicit', 'sdpa'], got 'Explicit'"), id="fused-kernel-unknown",
    ),
    pytest.param(
        lambda: small_mha(d_kv_in=0),
        ValueError, esc("d_kv_in must be a positive int (>= 1), got 0"), id="d_kv_in-zero",
    ),
    # --- the input sequence ----------------------------------------------------------------------------
    pytest.param(
        lambda: small_mha()(x_input(B, T + 1, D)),
        ValueError, esc("x has 5 tokens (shape (2, 5, 6)) but context_length is 4", "context_length >= 5"),
        id="sequence-longer-than-context_length",
    ),
    pytest.param(
        lambda: small_mha()(x_input(B, T, D - 1)),
        ValueError, esc("x has last dimension 5 (shape (2, 4, 5)), expected d_in=6"), id="input-wrong-width",
    ),
    pytest.param(
        lambda: small_mha()(x_input(T, D)),
        ValueError, esc("x must be 3-D (B, T, d_in), got 2-D shape (4, 6)", "x.unsqueeze(0)"),
        id="input-2d-suggests-unsqueeze",
    ),
    pytest.param(
        lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2)(journey_batch()[0]),
        ValueError, esc("x must be 3-D (B, T, d_in), got 2-D shape (6, 3)", "x.unsqueeze(0)"),
        id="wrapper-input-2d-suggests-unsqueeze",
    ),
    pytest.param(
        lambda: small_mha()(x_input(1, B, T, D)),
        ValueError, esc("x must be 3-D (B, T, d_in), got 4-D shape (1, 2, 4, 6)"), id="input-4d",
    ),
    pytest.param(
        lambda: small_mha()(x_input(B, 0, D)),
        ValueError, esc("x must hold at least one token, got shape (2, 0, 6)"), id="input-no-tokens",
    ),
    pytest.param(
        lambda: small_mha()(torch.ones(B, T, D, dtype=torch.long)),
        TypeError, esc("x must be a floating-point tensor, got dtype torch.int64", "x.float()"),
        id="input-integer-dtype",
    ),
    pytest.param(
        lambda: small_mha()(x_input(dtype=torch.float64)),
        TypeError,
        esc("x has dtype torch.float64 but the module's weights are torch.float32", "module.to(torch.float64)"),
        id="input-float64-into-float32-module",
    ),
    pytest.param(
        lambda: small_mha()(x_input().tolist()),
        TypeError, esc("x must be a torch.Tensor, got list"), id="input-list",
    ),
    pytest.param(
        lambda: small_mha(causal=False)(x_input(), x_input(B + 1, T, D)),
        ValueError, esc("kv must have the same batch size as x, got kv (3, 4, 6) and x (2, 4, 6)"),
        id="kv-different-batch",
    ),
    pytest.param(
        lambda: small_mha(causal=False, d_kv_in=5)(x_input(), x_input(B, T, D)),
        ValueError, esc("kv has last dimension 6 (shape (2, 4, 6)), expected d_kv_in=5"), id="kv-wrong-width",
    ),
    # --- padding: key_padding_mask and valid_lens ------------------------------------------------------
    pytest.param(
        lambda: small_mha()(x_input(), key_padding_mask=torch.zeros(B, T - 1, dtype=torch.bool)),
        ValueError, esc("key_padding_mask must have shape (B, S) = (2, 4), got (2, 3)"),
        id="key_padding_mask-wrong-shape",
    ),
    pytest.param(
        lambda: small_mha()(x_input(), key_padding_mask=torch.zeros(B, T)),
        TypeError, esc("key_padding_mask must be a torch.bool tensor of shape (B, S), got dtype torch.float32"),
        id="key_padding_mask-float",
    ),
    pytest.param(
        lambda: small_mha()(x_input(), key_padding_mask=torch.zeros(B, T, dtype=torch.long)),
        TypeError, esc("key_padding_mask must be a torch.bool tensor of shape (B, S), got dtype torch.int64"),
        id="key_padding_mask-int",
    ),
    pytest.param(
        lambda: small_mha()(
            x_input(), key_padding_mask=torch.zeros(B, T, dtype=torch.bool), valid_lens=torch.tensor([1, 2])
        ),
        ValueError, esc("pass either key_padding_mask or valid_lens, not both"),
        id="key_padding_mask-and-valid_lens",
    ),
    pytest.param(
        lambda: small_mha()(x_input(), valid_lens=torch.tensor([1.0, 2.0])),
        TypeError, esc("valid_lens must be an integer tensor, got dtype torch.float32"), id="valid_lens-float",
    ),
    pytest.param(
        lambda: small_mha()(x_input(), valid_lens=torch.tensor([1, T + 1])),
        ValueError, esc("valid_lens must lie in [0, 4] (the number of keys), got values from 1 to 5"),
        id="valid_lens-too-large",
    ),
    pytest.param(
        lambda: small_mha()(x_input(), valid_lens=torch.tensor([-1, 2])),
        ValueError, esc("valid_lens must lie in [0, 4] (the number of keys), got values from -1 to 2"),
        id="valid_lens-negative",
    ),
    pytest.param(
        lambda: small_mha()(x_input(), valid_lens=torch.ones(B, T - 1, dtype=torch.long)),
        ValueError, esc("valid_lens of shape (B, T) must have T = 4 (the number of queries), got shape (2, 3)"),
        id="valid_lens-BT-wrong-T",
    ),
    pytest.param(
        lambda: small_mha()(x_input(), valid_lens=torch.tensor([1, 2, 3])),
        ValueError, esc("valid_lens must have one entry per sequence, shape (2,) or (2, 4), got (3,)"),
        id="valid_lens-wrong-batch",
    ),
    pytest.param(
        lambda: small_mha()(x_input(), valid_lens=torch.ones(B, T, 1, dtype=torch.long)),
        ValueError, esc("valid_lens must be 1-D (B,) or 2-D (B, T), got 3-D"), id="valid_lens-3d",
    ),
    pytest.param(
        lambda: small_mha(kernel="sdpa")(x_input(), return_weights=True),
        ValueError, esc("return_weights=True needs kernel='explicit'", "kernel='sdpa'"),
        id="return_weights-with-sdpa",
    ),
    # --- the kernels -----------------------------------------------------------------------------------
    pytest.param(
        lambda: explicit_attention(*qkv(k_shape=(2, 3, 5), v_shape=(2, 3, 5))),
        ValueError, esc("q and k must have the same feature width", "got q (2, 3, 4) and k (2, 3, 5)"),
        id="kernel-q-k-width-mismatch",
    ),
    pytest.param(
        lambda: sdpa_attention(*qkv(v_shape=(2, 5, 4))),
        ValueError, esc("k and v must have the same length S", "got k (2, 3, 4) and v (2, 5, 4)"),
        id="kernel-k-v-length-mismatch",
    ),
    pytest.param(
        lambda: explicit_attention(*qkv(k_shape=(3, 3, 4), v_shape=(3, 3, 4))),
        ValueError, esc("q, k and v must share their leading (batch, head) dimensions, got q (2, 3, 4)"),
        id="kernel-leading-dims-mismatch",
    ),
    pytest.param(
        lambda: explicit_attention(*qkv(), mask=torch.ones(3, 3)),
        TypeError, esc("mask must be a torch.bool keep mask (True = attend), got dtype torch.float32",
            "mha_lib.mask_from_allowed(mask) (1 = attend", "mha_lib.mask_from_blocked(mask) (1 = blocked"),
        id="kernel-mask-not-bool",
    ),
    pytest.param(
        lambda: sdpa_attention(*qkv(), mask=torch.ones(4, 4, dtype=torch.bool)),
        ValueError, esc("mask of shape (4, 4) does not broadcast to the scores' shape (..., T, S) = (2, 3, 3)"),
        id="kernel-mask-not-broadcastable",
    ),
    pytest.param(
        # broadcast_shapes accepts it, but it would silently grow the output from (2, 3, 4) to (5, 2, 3, 4)
        lambda: explicit_attention(*qkv(), mask=torch.ones(5, 1, 3, 3, dtype=torch.bool)),
        ValueError, esc("mask of shape (5, 1, 3, 3) does not broadcast to the scores' shape (..., T, S) = (2, 3, 3)"),
        id="kernel-mask-larger-than-scores",
    ),
    pytest.param(
        lambda: explicit_attention(torch.ones(2, 3, 4, dtype=torch.long), *qkv()[1:]),
        TypeError, esc("q must be a floating-point tensor, got dtype torch.int64"), id="kernel-q-integer",
    ),
    pytest.param(
        lambda: explicit_attention(torch.randn(2, 3, 4), torch.randn(2, 3, 4).double(), torch.randn(2, 3, 4)),
        TypeError, esc("k has dtype torch.float64 but q has torch.float32; they must match"),
        id="kernel-dtype-mismatch",
    ),
    pytest.param(
        lambda: explicit_attention(*qkv(), scale=0.0),
        ValueError, esc("scale must be a finite float > 0, got 0.0"), id="kernel-scale-zero",
    ),
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), torch.ones(3, 3, dtype=torch.long)),
        TypeError, esc("mask must be a torch.bool keep mask (True = attend), got dtype torch.int64"),
        id="masked_softmax-mask-not-bool",
    ),
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), torch.ones(4, 4, dtype=torch.bool)),
        ValueError, esc("mask of shape (4, 4) does not broadcast to the scores' shape (..., T, S) = (3, 3)"),
        id="masked_softmax-mask-not-broadcastable",
    ),
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), temperature=0.0),
        ValueError, esc("temperature must be a finite float > 0, got 0.0"), id="temperature-zero",
    ),
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), temperature=-2.0),
        ValueError, esc("temperature must be a finite float > 0, got -2.0"), id="temperature-negative",
    ),
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), temperature="hot"),
        TypeError, esc("temperature must be a positive float, got str 'hot'"), id="temperature-str",
    ),
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), temperature=True),
        TypeError, esc("temperature must be a positive float, got bool True"), id="temperature-bool",
    ),
    # --- masks and head reshapes -----------------------------------------------------------------------
    pytest.param(
        lambda: causal_mask(0),
        ValueError, esc("num_queries must be a positive int (>= 1), got 0"), id="causal_mask-zero",
    ),
    pytest.param(
        lambda: split_heads(torch.randn(2, 3, 7), 2),
        ValueError, esc("x.shape[-1] (7) must be divisible by num_heads (2)", "try num_heads in [1, 7]"),
        id="split_heads-width-not-divisible",
    ),
    pytest.param(
        lambda: merge_heads(torch.randn(2, 3, 8)),
        ValueError,
        esc("x must be 4-D (B, H, T, Dh), got 3-D shape (2, 3, 8); for D2L's (B·H, T, Dh) layout use merge_heads_flat"),
        id="merge_heads-3d",
    ),
    # --- plotting --------------------------------------------------------------------------------------
    pytest.param(
        lambda: plot_heads(torch.rand(2, 3, 3), ["a", "b"]),
        ValueError, esc("query_labels must have 3 entries (one per token), got 2"), id="plot_heads-label-count",
    ),
    pytest.param(
        lambda: plot_heads(torch.rand(2, 3, 4), ["a", "b", "c"], ["k"]),
        ValueError, esc("key_labels must have 4 entries (one per token), got 1"), id="plot_heads-key-label-count",
    ),
    pytest.param(
        lambda: plot_heads(torch.tensor([[[0.5, float("nan")], [1.0, 0.0]]])),
        ValueError, esc("weights contain NaN", "fully masked row"), id="plot_heads-nan",
    ),
    pytest.param(
        lambda: plot_heads(torch.rand(2, 2, 3, 3), batch_index=2),
        ValueError, esc("batch_index must be in [0, 1], got 2"), id="plot_heads-batch_index-out-of-range",
    ),
    # --- data ------------------------------------------------------------------------------------------
    pytest.param(
        lambda: journey_batch(0),
        ValueError, esc("batch_size must be a positive int (>= 1), got 0"), id="journey_batch-zero",
    ),
    pytest.param(
        lambda: tokenize(""),
        ValueError, esc("text must contain at least one word or symbol, got ''"), id="tokenize-empty",
    ),
    pytest.param(
        lambda: tokenize(42),
        TypeError, esc("text must be a str, got int"), id="tokenize-int",
    ),
    pytest.param(
        lambda: embed_tokens("step", 4),
        TypeError, esc("tokens must be a list of str, got the str 'step'", "tokenize(text)"),
        id="embed_tokens-str-instead-of-list",
    ),
    pytest.param(
        lambda: embed_tokens(["a", 7], 4),
        TypeError, esc("tokens must be a list of str, got int 7 at position 1"), id="embed_tokens-non-str-token",
    ),
    # --- conversions -----------------------------------------------------------------------------------
    pytest.param(
        lambda: split_from_wrapper(small_mha()),
        TypeError, esc("wrapper must be a MultiHeadAttentionWrapper, got MultiHeadAttention"),
        id="split_from_wrapper-wrong-type",
    ),
    pytest.param(
        lambda: fused_from_split(MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2)),
        TypeError, esc("mha must be a MultiHeadAttention, got MultiHeadAttentionWrapper"),
        id="fused_from_split-wrong-type",
    ),
    pytest.param(
        lambda: torch_mha_from(FusedMultiHeadAttention(6, 6, 4, 0.0, 2)),
        TypeError, esc("mha must be a MultiHeadAttention, got FusedMultiHeadAttention"),
        id="torch_mha_from-wrong-type",
    ),
    pytest.param(
        lambda: fused_from_split(small_mha(d_kv_in=5)),
        ValueError, esc("a fused layer needs d_kv_in == d_in", "got 5"), id="fused_from_split-cross-attention",
    ),
    pytest.param(
        lambda: torch_mha_from(MultiHeadAttention(3, 4, 6, 0.0, 2)),
        ValueError, esc("nn.MultiheadAttention needs d_in == d_out (embed_dim), got 3 and 4"),
        id="torch_mha_from-d_in-not-d_out",
    ),
]


@pytest.mark.parametrize(("call", "error", "message"), CASES)
def test_bad_input_raises_a_clear_error(call, error, message):
    with pytest.raises(error, match=message) as info:
        call()
    assert type(info.value) is error  # not a subclass that merely happens to match


def test_there_are_enough_distinct_cases():
    ids = [case.id for case in CASES]
    assert len(set(ids)) == len(ids) >= 25


# --- fully masked rows: zeros, never NaN ----------------------------------------------------------------

# query 1 may attend to nothing; queries 0 and 2 are ordinary rows
DEAD_ROW_MASK = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])


def _qkv_leaves(shape=(2, 2, 3, 4)):
    return [torch.randn(shape, requires_grad=True) for _ in range(3)]


def test_explicit_kernel_fully_masked_row_gives_zero_weights_context_and_finite_grads():
    q, k, v = _qkv_leaves()
    context, weights = explicit_attention(q, k, v, mask=DEAD_ROW_MASK)
    assert torch.equal(weights[..., 1, :], torch.zeros(2, 2, 3))
    assert torch.equal(context[..., 1, :], torch.zeros(2, 2, 4))
    torch.testing.assert_close(weights[..., [0, 2], :].sum(-1), torch.ones(2, 2, 2))  # live rows still sum to 1
    (context.sum() + weights.sum()).backward()
    for name, leaf in zip("qkv", (q, k, v)):
        assert torch.isfinite(leaf.grad).all(), name
    assert torch.equal(q.grad[..., 1, :], torch.zeros(2, 2, 4))  # the dead query influences nothing


def test_sdpa_kernel_fully_masked_row_gives_zero_context_and_finite_grads():
    q, k, v = _qkv_leaves()
    context, weights = sdpa_attention(q, k, v, mask=DEAD_ROW_MASK)
    assert weights is None
    assert torch.equal(context[..., 1, :], torch.zeros(2, 2, 4))
    expected, _ = explicit_attention(q, k, v, mask=DEAD_ROW_MASK)
    torch.testing.assert_close(context, expected)
    context.sum().backward()
    for name, leaf in zip("qkv", (q, k, v)):
        assert torch.isfinite(leaf.grad).all(), name


def _context_before_out_proj(module):
    """Registers a hook that records the input of ``module.out_proj`` (the merged heads' context)."""
    seen = []
    module.out_proj.register_forward_pre_hook(lambda _, args: seen.append(args[0].detach().clone()))
    return seen


@pytest.mark.parametrize("kernel", ["explicit", "sdpa"])
@pytest.mark.parametrize(
    "padding",
    [
        pytest.param({"valid_lens": torch.tensor([0, 3])}, id="valid_lens-with-0"),
        pytest.param(
            {"key_padding_mask": torch.tensor([[True, True, True, True], [False, False, False, True]])},
            id="key_padding_mask-whole-sequence",
        ),
    ],
)
def test_multi_head_attention_with_a_fully_padded_sequence_stays_finite(kernel, padding):
    mha = MultiHeadAttention(D, D, T, 0.0, H, causal=False, kernel=kernel)
    x = torch.randn(B, T, D, requires_grad=True)
    seen = _context_before_out_proj(mha)
    out = mha(x, **padding)
    context = seen[0]  # (B, T, D)
    assert torch.equal(context[0], torch.zeros(T, D))  # sequence 0 has no key to look at
    assert context[1].abs().sum() > 0  # sequence 1 is ordinary
    torch.testing.assert_close(out[0], mha.out_proj.bias.expand(T, D))  # zero context -> the bias only
    if kernel == "explicit":
        _, weights = mha(x, **padding, return_weights=True)
        assert torch.equal(weights[0], torch.zeros(H, T, T))
        torch.testing.assert_close(weights[1].sum(-1), torch.ones(H, T))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.equal(x.grad[0], torch.zeros(T, D))
    for name, param in mha.named_parameters():
        assert torch.isfinite(param.grad).all(), name
