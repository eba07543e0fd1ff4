"""Bad input fails early with a message a student can act on.

Every case checks the exception type *and* that the message names the argument, shows what it got and says
what was expected. A second group checks the one input that is legal but easy to get wrong: a query that may
attend to no key at all must give zeros, never NaN.
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
import torch

import mha_lib
from mha_lib.exercises import ch08_putting_it_together as ch08
from mha_lib.exercises import ch09_efficiency as ch09
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
        lambda: small_mha(kernel="tiled"),
        ValueError, esc("kernel must be one of ['explicit', 'flash', 'sdpa'], got 'tiled'"), id="kernel-unknown",
    ),
    pytest.param(
        lambda: FusedMultiHeadAttention(6, 6, 4, 0.0, 2, kernel="Explicit"),
        ValueError, esc("kernel must be one of ['explicit', 'flash', 'sdpa'], got 'Explicit'"), id="fused-kernel-unknown",
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
    # --- issue 12: functions that used to check nothing -------------------------------------------------
    pytest.param(
        lambda: mha_lib.attention_scores(np.ones((2, 3)), np.ones((2, 3))),  # used to compute a @ b, not a @ bᵀ
        TypeError, esc("q must be a torch.Tensor, got ndarray"), id="attention_scores-numpy",
    ),
    pytest.param(
        lambda: mha_lib.attention_scores(torch.ones(2, 3), torch.ones(2, 4)),
        ValueError, esc("q and k must have the same feature width", "got q (2, 3) and k (2, 4)"),
        id="attention_scores-width-mismatch",
    ),
    pytest.param(
        lambda: mha_lib.attention_scores(torch.ones(3), torch.ones(3)),
        ValueError, esc("q must be at least 2-D (..., T, Dh), got 1-D shape (3,)"), id="attention_scores-1d",
    ),
    pytest.param(
        lambda: mha_lib.attention_scores(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float64)),
        TypeError, esc("k has dtype torch.float64 but q has torch.float32; they must match"),
        id="attention_scores-dtype-mismatch",
    ),
    pytest.param(
        lambda: mha_lib.attention_scores(torch.ones(2, 3, 4), torch.ones(5, 3, 4)),
        ValueError, esc("q and k must have leading (batch, head) dimensions that broadcast", "(2, 3, 4)", "(5, 3, 4)"),
        id="attention_scores-batch-mismatch",
    ),
    pytest.param(
        lambda: mha_lib.stable_softmax([1.0, 2.0]),
        TypeError, esc("x must be a torch.Tensor, got list"), id="stable_softmax-list",
    ),
    pytest.param(
        lambda: mha_lib.stable_softmax(torch.tensor([1, 2])),
        TypeError, esc("x must be a floating-point tensor, got dtype torch.int64", "x.float()"),
        id="stable_softmax-int",
    ),
    pytest.param(
        lambda: mha_lib.stable_softmax(torch.ones(2, 3), dim=2),
        ValueError, esc("dim must be in [-2, 1] for x of shape (2, 3), got 2"), id="stable_softmax-dim-out-of-range",
    ),
    pytest.param(
        lambda: mha_lib.stable_softmax(torch.ones(2, 3), dim=True),
        TypeError, esc("dim must be an int, got bool True"), id="stable_softmax-dim-bool",
    ),
    pytest.param(
        lambda: mha_lib.stable_softmax(torch.ones(2, 0)),
        ValueError, esc("x must have at least one entry along dim=-1", "(2, 0)"), id="stable_softmax-empty-row",
    ),
    pytest.param(
        lambda: mha_lib.scale_scores(np.ones((2, 2)), 4),
        TypeError, esc("scores must be a torch.Tensor, got ndarray"), id="scale_scores-numpy",
    ),
    pytest.param(
        lambda: mha_lib.scale_scores(torch.ones(2, 2), 4.0),
        TypeError, esc("head_dim must be a positive int, got float 4.0"), id="scale_scores-float-head_dim",
    ),
    pytest.param(
        lambda: mha_lib.scale_scores(torch.ones(2, 2, dtype=torch.complex64), 4),
        TypeError, esc("scores must be a real floating-point tensor, got dtype torch.complex64"),
        id="scale_scores-complex",
    ),
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), dim=-3),
        ValueError, esc("dim must be in [-2, 1] for scores of shape (3, 3), got -3"), id="masked_softmax-dim",
    ),
    pytest.param(
        lambda: mha_lib.combine_masks(causal_mask(3), torch.ones(3, 3, dtype=torch.long)),
        TypeError, esc("masks[1] must be a torch.bool keep mask (True = attend), got dtype torch.int64"),
        id="combine_masks-int-mask",
    ),
    pytest.param(
        lambda: mha_lib.combine_masks(causal_mask(3), causal_mask(4)),
        ValueError, esc("masks[1] of shape (4, 4) does not broadcast with the masks before it, of shape (3, 3)"),
        id="combine_masks-shapes",
    ),
    pytest.param(
        lambda: mha_lib.combine_masks("causal"),
        TypeError, esc("masks[0] must be a torch.Tensor, got str"), id="combine_masks-str",
    ),
    pytest.param(
        lambda: mha_lib.invert_mask(torch.tensor([0.0, 0.3, 1.0])),
        ValueError, esc("mask must hold only 0 and 1 (or be torch.bool), got other values such as 0.3"),
        id="invert_mask-0.3",
    ),
    pytest.param(
        lambda: mha_lib.invert_mask(torch.tensor([0.0, float("-inf")])),
        ValueError, esc("mask must hold only 0 and 1", "this looks like an additive mask"),
        id="invert_mask-additive",
    ),
    pytest.param(
        lambda: mha_lib.additive_mask(causal_mask(3), torch.int64),
        TypeError,
        esc("dtype must be a floating torch.dtype such as torch.float32 (it must hold -inf), got torch.int64"),
        id="additive_mask-int-dtype",
    ),
    pytest.param(
        lambda: mha_lib.additive_mask(causal_mask(3), torch.bool),
        TypeError, esc("dtype must be a floating torch.dtype", "got torch.bool"), id="additive_mask-bool-dtype",
    ),
    pytest.param(
        lambda: mha_lib.additive_mask(causal_mask(3), "float32"),
        TypeError, esc("dtype must be a floating torch.dtype", "got 'float32'"), id="additive_mask-str-dtype",
    ),
    pytest.param(
        lambda: mha_lib.mask_from_valid_lens(torch.tensor([1, 2]), 3.0, 4),
        TypeError, esc("num_queries must be a positive int, got float 3.0"), id="mask_from_valid_lens-float-T",
    ),
    pytest.param(
        lambda: mha_lib.mask_from_valid_lens(torch.tensor([1, 2]), 3, 0),
        ValueError, esc("num_keys must be a positive int (>= 1), got 0"), id="mask_from_valid_lens-zero-S",
    ),
    pytest.param(
        # used to say "must have shape (B, S) = (2.5, 5), got (2, 5)"
        lambda: mha_lib.mask_from_key_padding(torch.zeros(2, 5, dtype=torch.bool), 2.5, 5),
        TypeError, esc("batch_size must be a positive int, got float 2.5"), id="mask_from_key_padding-float-B",
    ),
    pytest.param(
        lambda: mha_lib.mask_from_key_padding(torch.zeros(2, 5, dtype=torch.bool), 2, "5"),
        TypeError, esc("num_keys must be a positive int, got str '5'"), id="mask_from_key_padding-str-S",
    ),
    pytest.param(
        lambda: causal_mask(2.0),
        TypeError, esc("num_queries must be a positive int, got float 2.0"), id="causal_mask-float",
    ),
    pytest.param(
        lambda: mha_lib.merge_heads_flat(torch.randn(5, 3, 2), 2),
        ValueError, esc("x.shape[0] (5) must be divisible by num_heads (2)"), id="merge_heads_flat-not-divisible",
    ),
    # --- strict flags: a truthy stand-in is not True ------------------------------------------------------
    pytest.param(
        lambda: small_mha()(x_input(), return_weights="False"),
        TypeError, esc("return_weights must be True or False, got str 'False'"), id="return_weights-str",
    ),
    pytest.param(
        lambda: mha_lib.SelfAttention(3, 2)(journey_batch(), return_weights=1),
        TypeError, esc("return_weights must be True or False, got int 1"), id="self_attention-return_weights-int",
    ),
    pytest.param(
        lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2)(journey_batch(), return_weights="yes"),
        TypeError, esc("return_weights must be True or False, got str 'yes'"), id="wrapper-return_weights-str",
    ),
    pytest.param(
        lambda: explicit_attention(*qkv(), is_causal="False"),
        TypeError, esc("is_causal must be True or False, got str 'False'"), id="explicit-is_causal-str",
    ),
    pytest.param(
        lambda: sdpa_attention(*qkv(), is_causal=1),
        TypeError, esc("is_causal must be True or False, got int 1"), id="sdpa-is_causal-int",
    ),
    pytest.param(
        lambda: mha_lib.ProjectionHeads(4, 2, bias="False"),
        TypeError, esc("bias must be True or False, got str 'False'"), id="projection_heads-bias-str",
    ),
    pytest.param(
        lambda: mha_lib.GroupedConvHeads(4, 2, bias=0),
        TypeError, esc("bias must be True or False, got int 0"), id="grouped_conv_heads-bias-int",
    ),
    pytest.param(
        lambda: mha_lib.attention_parameter_count(768, "True"),
        TypeError, esc("bias must be True or False, got str 'True'"), id="parameter_count-bias-str",
    ),
    # --- cross-attention without kv --------------------------------------------------------------------
    pytest.param(
        lambda: small_mha(causal=False, d_kv_in=5)(x_input()),
        ValueError, esc("kv is needed: this layer was built with d_kv_in=5 (cross-attention) but forward got x only",
                        "layer(x, kv) with kv of shape (B, S, 5)"),
        id="d_kv_in-without-kv",
    ),
    # --- temperature and scale that would overflow -----------------------------------------------------
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), temperature=1e-300),
        ValueError, esc("temperature=1e-300 is too small for torch.float32 tensors",
                        "torch.finfo(torch.float32).tiny"),
        id="temperature-below-float32-tiny",
    ),
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), temperature=float("nan")),
        ValueError, esc("temperature must be a finite float > 0, got nan"), id="temperature-nan",
    ),
    pytest.param(
        lambda: masked_softmax(torch.randn(3, 3), temperature=10**400),
        ValueError, esc("temperature must be a finite float > 0, got 10000000000000000000... (401 characters)"),
        id="temperature-huge-int",
    ),
    pytest.param(
        lambda: explicit_attention(*(torch.full((1, 2, 4), 10.0),) * 3, scale=1e37),
        ValueError, esc("scale=1e+37 is too large for these q and k: the scaled scores overflow torch.float32 (inf)",
                        "the usual one is 1/√Dh = 0.5"),
        id="explicit-scale-overflows",
    ),
    pytest.param(
        lambda: sdpa_attention(*(torch.full((1, 2, 4), 10.0),) * 3, scale=1e37),
        ValueError, esc("scale=1e+37 is too large for these q and k"), id="sdpa-scale-overflows",
    ),
    pytest.param(
        lambda: explicit_attention(*qkv(), scale=1e39),
        ValueError, esc("scale=1e+39 is too large for torch.float32 tensors", "torch.finfo(torch.float32).max"),
        id="scale-beyond-float32",
    ),
    pytest.param(
        lambda: MultiHeadAttention(6, 6, 4, float("nan"), 2),
        ValueError, esc("dropout must be in [0, 1), got nan"), id="dropout-nan",
    ),
    # --- tensors that are not real, dense floats --------------------------------------------------------
    pytest.param(
        lambda: small_mha()(x_input().to(torch.complex64)),
        TypeError, esc("x must be a real floating-point tensor, got dtype torch.complex64"), id="input-complex",
    ),
    pytest.param(
        lambda: small_mha()(x_input().to_sparse()),
        TypeError, esc("x must be a dense tensor, got layout torch.sparse_coo; convert it with x.to_dense()"),
        id="input-sparse",
    ),
    pytest.param(
        lambda: small_mha()(torch.ones(B, T, D, dtype=torch.bool)),
        TypeError, esc("x must be a floating-point tensor, got dtype torch.bool"), id="input-bool",
    ),
    pytest.param(
        lambda: explicit_attention(torch.randn(2, 3, 4).to_sparse(), *qkv()[1:]),
        TypeError, esc("q must be a dense tensor, got layout torch.sparse_coo"), id="kernel-q-sparse",
    ),
    pytest.param(
        lambda: MultiHeadAttention(6, 6, 4, 0.0, 10**400),
        ValueError, esc("num_heads must be at most 2**63 - 1 (torch stores sizes as int64), "
                        "got 10000000000000000000... (401 characters)"),
        id="num_heads-huge",
    ),
    # --- helpers: seeds, printing, divisors -------------------------------------------------------------
    pytest.param(
        lambda: mha_lib.divisors(-6),
        ValueError, esc("n must be a positive int (>= 1), got -6"), id="divisors-negative",
    ),
    pytest.param(
        lambda: mha_lib.divisors(6.0),
        TypeError, esc("n must be a positive int, got float 6.0"), id="divisors-float",
    ),
    pytest.param(
        lambda: mha_lib.make_reproducible("123"),
        TypeError, esc("seed must be an int in [0, 2**64 - 1], got str '123'"), id="make_reproducible-str",
    ),
    pytest.param(
        lambda: mha_lib.make_reproducible(True),
        TypeError, esc("seed must be an int in [0, 2**64 - 1], got bool True"), id="make_reproducible-bool",
    ),
    pytest.param(
        lambda: mha_lib.make_reproducible(1.5),
        TypeError, esc("seed must be an int in [0, 2**64 - 1], got float 1.5"), id="make_reproducible-float",
    ),
    pytest.param(
        lambda: mha_lib.make_reproducible(-1),
        ValueError, esc("seed must be an int in [0, 2**64 - 1], got -1"), id="make_reproducible-negative",
    ),
    pytest.param(
        lambda: mha_lib.make_reproducible(2**64),
        ValueError, esc("seed must be an int in [0, 2**64 - 1], got 18446744073709551616"),
        id="make_reproducible-too-large",
    ),
    pytest.param(
        lambda: embed_tokens(["a"], 4, seed=-3),
        ValueError, esc("seed must be an int in [0, 2**64 - 1], got -3"), id="embed_tokens-negative-seed",
    ),
    pytest.param(
        lambda: embed_tokens(torch.tensor([1, 2]), 4),
        TypeError, esc("tokens must be a list of str, got Tensor"), id="embed_tokens-tensor",
    ),
    pytest.param(
        lambda: mha_lib.show(torch.ones(2), decimals=2.5),
        TypeError, esc("decimals must be an int, got float 2.5"), id="show-decimals-float",
    ),
    pytest.param(
        lambda: mha_lib.show(torch.ones(2), decimals=-1),
        ValueError, esc("decimals must be an int in [0, 16], got -1"), id="show-decimals-negative",
    ),
    pytest.param(
        lambda: mha_lib.show(torch.ones(2), decimals="4"),
        TypeError, esc("decimals must be an int, got str '4'"), id="show-decimals-str",
    ),
    pytest.param(
        lambda: mha_lib.show(torch.ones(2), sep=0),
        TypeError, esc("sep must be a str, got int 0"), id="show-sep-int",
    ),
    pytest.param(
        lambda: journey_batch("2"),
        TypeError, esc("batch_size must be a positive int, got str '2'"), id="journey_batch-str",
    ),
    pytest.param(
        lambda: mha_lib.make_head_former(3, 4, 2),
        ValueError, esc("kind must be one of ['direct split', 'grouped conv', 'projection'], got 3"),
        id="make_head_former-int-kind",
    ),
    pytest.param(
        lambda: masked_softmax(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.bool, device="meta")),
        ValueError, esc("mask is on meta but the scores are on cpu; move the mask with mask.to('cpu')"),
        id="masked_softmax-mask-other-device",
    ),
    pytest.param(
        lambda: explicit_attention(*qkv(), mask=torch.ones(3, 3, dtype=torch.bool, device="meta")),
        ValueError, esc("mask is on meta but the scores are on cpu"), id="kernel-mask-other-device",
    ),
    pytest.param(
        lambda: ch08.forward_variant(small_mha(), x_input(), mask="Causal"),
        ValueError, esc("mask must be one of ['causal', 'none', 'diagonal', 'after'], got 'Causal'"),
        id="forward_variant-mask-kind",
    ),
    pytest.param(
        lambda: ch08.forward_variant(torch.nn.Linear(2, 2), x_input()),
        TypeError, esc("layer must be a mha_lib.MultiHeadAttention, got Linear"), id="forward_variant-layer",
    ),
    pytest.param(
        lambda: ch09.count_new_tensors(len, [1], rows=0),
        ValueError, esc("rows must be a positive int (>= 1), got 0"), id="count_new_tensors-rows",
    ),
    pytest.param(
        lambda: ch09.count_new_tensors("fn", rows=3),
        TypeError, esc("fn must be a function to run, got str"), id="count_new_tensors-not-callable",
    ),
    pytest.param(
        lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.0, 10**20),  # used to loop building 10**20 heads
        ValueError, esc("num_heads must be at most 2**63 - 1 (torch stores sizes as int64), got 100000000000000000000"),
        id="wrapper-num_heads-beyond-int64",
    ),
    pytest.param(
        lambda: causal_mask(10**19),
        ValueError, esc("num_queries must be at most 2**63 - 1"), id="causal_mask-beyond-int64",
    ),
    pytest.param(
        lambda: mha_lib.invert_mask(torch.ones(2, 2, device="meta")),
        ValueError, esc("mask is on the meta device: it has no values to read as 0/1"), id="invert_mask-meta",
    ),
    pytest.param(
        lambda: mha_lib.gpt_parameter_count(768, 0),
        ValueError, esc("n_layers must be a positive int (>= 1), got 0"), id="gpt_parameter_count-zero-layers",
    ),
]


@pytest.mark.parametrize(("call", "error", "message"), CASES)
def test_bad_input_raises_a_clear_error(call, error, message):
    with pytest.raises(error, match=message) as info:
        call()
    assert type(info.value) is error  # not a subclass that merely happens to match


def test_there_are_enough_distinct_cases():
    ids = [case.id for case in CASES]
    assert len(set(ids)) == len(ids) >= 130


# --- issue 12: the right result where a value is legal but used to go wrong -----------------------------------


def test_a_bad_d_out_of_a_billion_is_reported_at_once():
    start = time.perf_counter()
    with pytest.raises(ValueError, match=esc("d_out (1000000000) must be divisible by num_heads (7)",
                                             "[1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 40, 50, ...] (100 divisors in all)")):
        MultiHeadAttention(6, 10**9, 4, 0.0, 7)
    assert time.perf_counter() - start < 1.0  # the old O(n) divisor loop took 54 s


def test_divisors_of_large_numbers_are_exact_and_sorted():
    assert mha_lib.divisors(1) == [1]
    assert mha_lib.divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert mha_lib.divisors(10**12 + 39) == [1, 10**12 + 39]  # a prime: 10**6 steps, not 10**12
    assert len(mha_lib.divisors(10**9)) == 100


def test_show_prints_special_values_without_failing(capsys):
    mha_lib.show(float("nan"), float("-inf"), torch.ones(2, device="meta"), torch.eye(2).to_sparse(), decimals=1)
    assert capsys.readouterr().out == (
        "nan -inf tensor(..., device='meta', size=(2,)) tensor([[1., 0.],\n        [0., 1.]])\n")


def test_a_tiny_but_representable_temperature_gives_the_one_hot_argmax_not_nan():
    scores = torch.tensor([[1.0, 3.0, 2.0], [5.0, 5.0, -1.0]])
    weights = masked_softmax(scores, temperature=1e-30)
    torch.testing.assert_close(weights, torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]]))
    masked = masked_softmax(scores, torch.tensor([True, False, True]), temperature=1e-30)
    torch.testing.assert_close(masked, torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))


def test_a_huge_temperature_gives_the_uniform_row():
    weights = masked_softmax(torch.tensor([[1e30, -1e30, 0.0]]), temperature=3e38)
    torch.testing.assert_close(weights, torch.full((1, 3), 1 / 3))


def test_nan_in_gives_nan_out_in_that_row_only():
    scores = torch.tensor([[1.0, float("nan")], [1.0, 2.0]])
    for weights in (masked_softmax(scores), masked_softmax(scores, temperature=0.5), mha_lib.stable_softmax(scores)):
        assert torch.isnan(weights[0]).all() and torch.isfinite(weights[1]).all()


@pytest.mark.parametrize("convert", [mha_lib.fused_from_split, mha_lib.torch_mha_from])
@pytest.mark.parametrize("training", [False, True])
def test_conversions_keep_train_or_eval_mode(convert, training):
    assert convert(small_mha().train(training)).training is training


@pytest.mark.parametrize("training", [False, True])
def test_split_from_wrapper_keeps_train_or_eval_mode(training):
    wrapper = MultiHeadAttentionWrapper(3, 2, 6, 0.1, 2).train(training)
    assert split_from_wrapper(wrapper).training is training


@pytest.mark.parametrize(("text", "tokens"), [
    ("I ❤️ 👩🏽‍💻!", ["I", "❤️", "👩🏽\u200d💻", "!"]),  # variation selector; skin tone + ZWJ sequence
    ("👍🏽 ok", ["👍🏽", "ok"]),  # skin-tone modifier
    ("👨‍👩‍👧 🇫🇷", ["👨\u200d👩\u200d👧", "🇫🇷"]),  # a family (two ZWJ), a flag (two regional indicators)
    ("cafe\u0301 noe\u0308l", ["cafe\u0301", "noe\u0308l"]),  # combining accents stay in their word
    ("x \ufe0f \u200d y", ["x", "y"]),  # stray selector / joiner after a space: no blank token
    ("LLM with me.郭同学", ["LLM", "with", "me", ".", "郭", "同", "学"]),
])
def test_tokenize_keeps_grapheme_clusters_whole(text, tokens):
    assert tokenize(text) == tokens


def test_fully_stray_joiners_are_not_a_token():
    with pytest.raises(ValueError, match=esc("text must contain at least one word or symbol")):
        tokenize("\u200d \ufe0f")


def test_validation_keeps_the_forward_pass_cheap():
    """The checks are attribute reads: no tensor pass and no device sync on the modules' path (measured in the
    issue-12 note, CPU time of a (2, 8, 16) forward: 77 -> 80 µs explicit, 44 -> 46 µs sdpa). Here: the
    explicit-scale overflow check, the only one that reads tensor values, is not run by the modules."""
    mha = small_mha().eval()
    calls = []
    original = torch.isfinite

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    torch.isfinite = spy
    try:
        with torch.no_grad():
            mha(x_input())
    finally:
        torch.isfinite = original
    assert calls == []


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


# --- a sweep: every public function, every argument, every hostile value ---------------------------------------
# Each call must either work (NaN in -> NaN out, an int 0/1 mask, ...) or raise TypeError/ValueError whose message
# names the argument. Before issue 12, 301 of these 2,002 calls failed deep inside torch or Python (or hung);
# a new public function belongs in SWEEP.

HOSTILE = {
    "None": lambda: None, "str": lambda: "3", "bool": lambda: True, "float": lambda: 2.5, "negative": lambda: -2,
    "zero": lambda: 0, "huge": lambda: 10**20, "nan": lambda: float("nan"), "inf": lambda: float("inf"),
    "list": lambda: [1.0, 2.0], "ndarray": lambda: np.ones((2, 3, 4), dtype=np.float32),
    "int64": lambda: torch.ones(2, 3, 4, dtype=torch.long),
    "bool-tensor": lambda: torch.ones(2, 3, 4, dtype=torch.bool),
    "complex": lambda: torch.ones(2, 3, 4, dtype=torch.complex64), "sparse": lambda: torch.ones(2, 3, 4).to_sparse(),
    "0-d": lambda: torch.tensor(1.0), "1-d": lambda: torch.ones(4), "5-d": lambda: torch.ones(1, 1, 2, 3, 4),
    "empty": lambda: torch.ones(2, 0, 4), "meta": lambda: torch.ones(2, 3, 4, device="meta"),
    "float16": lambda: torch.ones(2, 3, 4, dtype=torch.float16), "nan-tensor": lambda: torch.full((2, 3, 4), math.nan),
}


def _mha_forward(x, kv, key_padding_mask, valid_lens, return_weights):
    return small_mha(causal=False)(x, kv, key_padding_mask=key_padding_mask, valid_lens=valid_lens,
                                   return_weights=return_weights)


SWEEP = {
    "attention_scores": (mha_lib.attention_scores, lambda: dict(q=torch.randn(2, 3, 4), k=torch.randn(2, 3, 4))),
    "scale_scores": (mha_lib.scale_scores, lambda: dict(scores=torch.randn(2, 3, 3), head_dim=4)),
    "scale_factor": (mha_lib.scale_factor, lambda: dict(head_dim=4)),
    "stable_softmax": (mha_lib.stable_softmax, lambda: dict(x=torch.randn(2, 3, 3), dim=-1)),
    "masked_softmax": (masked_softmax, lambda: dict(scores=torch.randn(2, 3, 3), mask=causal_mask(3),
                                                    temperature=1.0, dim=-1)),
    "split_heads": (split_heads, lambda: dict(x=torch.randn(2, 3, 4), num_heads=2)),
    "merge_heads": (merge_heads, lambda: dict(x=torch.randn(2, 2, 3, 2))),
    "split_heads_flat": (mha_lib.split_heads_flat, lambda: dict(x=torch.randn(2, 3, 4), num_heads=2)),
    "merge_heads_flat": (mha_lib.merge_heads_flat, lambda: dict(x=torch.randn(4, 3, 2), num_heads=2)),
    "explicit_attention": (explicit_attention, lambda: dict(q=torch.randn(2, 3, 4), k=torch.randn(2, 3, 4),
                                                            v=torch.randn(2, 3, 4), mask=None, scale=None,
                                                            dropout_p=0.0, is_causal=False)),
    "sdpa_attention": (sdpa_attention, lambda: dict(q=torch.randn(2, 3, 4), k=torch.randn(2, 3, 4),
                                                    v=torch.randn(2, 3, 4), mask=None, scale=None, dropout_p=0.0,
                                                    is_causal=False)),
    "causal_mask": (causal_mask, lambda: dict(num_queries=3, num_keys=3)),
    "invert_mask": (mha_lib.invert_mask, lambda: dict(mask=causal_mask(3))),
    "mask_from_blocked": (mha_lib.mask_from_blocked, lambda: dict(blocked=causal_mask(3))),
    "mask_from_allowed": (mha_lib.mask_from_allowed, lambda: dict(allowed=causal_mask(3))),
    "mask_from_valid_lens": (mha_lib.mask_from_valid_lens,
                             lambda: dict(valid_lens=torch.tensor([1, 2]), num_queries=3, num_keys=3)),
    "mask_from_key_padding": (mha_lib.mask_from_key_padding, lambda: dict(
        key_padding_mask=torch.zeros(2, 3, dtype=torch.bool), batch_size=2, num_keys=3)),
    "additive_mask": (mha_lib.additive_mask, lambda: dict(keep=causal_mask(3), dtype=torch.float32)),
    "MultiHeadAttention.forward": (_mha_forward, lambda: dict(x=torch.randn(B, T, D), kv=None, key_padding_mask=None,
                                                              valid_lens=None, return_weights=False)),
    "MultiHeadAttention": (MultiHeadAttention, lambda: dict(d_in=4, d_out=4, context_length=3, dropout=0.0,
                                                           num_heads=2)),
    "MultiHeadAttentionWrapper": (MultiHeadAttentionWrapper, lambda: dict(d_in=4, d_out=4, context_length=3,
                                                                         dropout=0.0, num_heads=2)),
    "SelfAttention": (mha_lib.SelfAttention, lambda: dict(d_in=4, d_out=4)),
    "FusedMultiHeadAttention": (FusedMultiHeadAttention, lambda: dict(d_in=4, d_out=4, context_length=3,
                                                                     dropout=0.0, num_heads=2)),
    "ProjectionHeads": (mha_lib.ProjectionHeads, lambda: dict(d_model=4, num_heads=2)),
    "ProjectionHeads.forward": (lambda x: mha_lib.ProjectionHeads(4, 2)(x), lambda: dict(x=torch.randn(2, 3, 4))),
    "make_head_former": (mha_lib.make_head_former, lambda: dict(kind="projection", d_model=4, num_heads=2)),
    "attention_parameter_count": (mha_lib.attention_parameter_count, lambda: dict(d_model=4, bias=True)),
    "gpt_parameter_count": (mha_lib.gpt_parameter_count, lambda: dict(d_model=4, n_layers=2, vocab_size=10,
                                                                      context_length=5)),
    "tokenize": (tokenize, lambda: dict(text="hi")),
    "embed_tokens": (embed_tokens, lambda: dict(tokens=["a"], d_model=3, seed=0)),
    "toy_sentence": (mha_lib.toy_sentence, lambda: dict(text="hi you", d_model=4, seed=0)),
    "journey_batch": (journey_batch, lambda: dict(batch_size=2)),
    "show": (lambda x, decimals: mha_lib.show(x, decimals=decimals), lambda: dict(x=torch.randn(2), decimals=2)),
    "make_reproducible": (mha_lib.make_reproducible, lambda: dict(seed=1)),
    "divisors": (mha_lib.divisors, lambda: dict(n=12)),
    "fused_from_split": (fused_from_split, lambda: dict(mha=small_mha())),
    "torch_mha_from": (torch_mha_from, lambda: dict(mha=small_mha())),
    "split_from_wrapper": (split_from_wrapper, lambda: dict(wrapper=MultiHeadAttentionWrapper(4, 2, 3, 0.0, 2))),
}


@pytest.mark.parametrize("function", list(SWEEP))
def test_every_argument_of_every_public_function_fails_clearly_or_works(function, capsys):
    fn, good = SWEEP[function]
    cryptic = []
    for argument in good():
        for label, make in HOSTILE.items():
            kwargs = good()
            kwargs[argument] = make()
            try:
                fn(**kwargs)
            except (TypeError, ValueError) as error:
                if type(error) not in (TypeError, ValueError) or argument not in str(error):
                    cryptic.append(f"{argument}={label}: {type(error).__name__}: {str(error)[:120]}")
            except Exception as error:  # noqa: BLE001 - collected and reported below
                cryptic.append(f"{argument}={label}: {type(error).__name__}: {str(error)[:120]}")
    capsys.readouterr()  # show() printed the values it accepted
    assert cryptic == []


# --- issue 19 §6: four inputs that got a wrong or cryptic answer ----------------------------------------------


@pytest.mark.parametrize("convert", [fused_from_split, torch_mha_from])
def test_a_converted_eval_layer_with_dropout_gives_the_same_output(convert):
    torch.manual_seed(0)
    source = MultiHeadAttention(D, D, T, 0.5, H, qkv_bias=True).eval()
    copy = convert(source)
    assert copy.training is False and all(not m.training for m in copy.modules())
    x = x_input()
    with torch.no_grad():
        out = copy(x) if convert is fused_from_split else copy(
            x, x, x, attn_mask=mha_lib.invert_mask(causal_mask(T)), need_weights=False)[0]
        torch.testing.assert_close(out, source(x))


@pytest.mark.parametrize("convert", [fused_from_split, torch_mha_from])
def test_a_converted_training_layer_stays_in_training_mode_with_its_submodules(convert):
    copy = convert(MultiHeadAttention(D, D, T, 0.5, H).train())
    assert copy.training is True and all(m.training for m in copy.modules())


def test_a_conversion_copies_a_submodule_mode_that_differs_from_the_layer():
    source = MultiHeadAttention(D, D, T, 0.5, H).train()
    source.out_proj.eval()  # unusual, but the copy must be in exactly the source's modes
    fused = fused_from_split(source)
    assert fused.training is True and fused.W_qkv.training is True and fused.out_proj.training is False


@pytest.mark.parametrize("make", [
    lambda n: mha_lib.CausalAttention(4, 2, n, 0.0),
    lambda n: MultiHeadAttentionWrapper(4, 2, n, 0.0, 2),
], ids=["CausalAttention", "MultiHeadAttentionWrapper"])
def test_a_context_length_too_long_for_the_mask_buffer_is_refused_before_allocating(make):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=esc(
            "context_length must be at most 32768 for CausalAttention, got 10000000",
            "keeps a (context_length, context_length) causal mask in a buffer, which would take 93,132 GiB",
            "use mha_lib.MultiHeadAttention, which builds no buffer")):
        make(10**7)
    assert time.perf_counter() - start < 1.0  # refused, not allocated


def test_the_longest_buffered_context_length_is_accepted(monkeypatch):
    built = []
    monkeypatch.setattr(mha_lib.modules, "causal_mask", lambda n: built.append(n) or causal_mask(4))  # not 1 GiB
    assert mha_lib.CausalAttention(4, 2, 2**15, 0.0).context_length == 2**15 and built == [2**15]
    with pytest.raises(ValueError, match=esc("at most 32768 for CausalAttention, got 32769")):
        mha_lib.CausalAttention(4, 2, 2**15 + 1, 0.0)


@pytest.mark.parametrize("cls", [MultiHeadAttention, FusedMultiHeadAttention])
def test_the_multi_head_layers_keep_no_buffer_and_accept_a_huge_context_length(cls):
    layer = cls(D, D, 10**7, 0.0, H)
    assert list(layer.buffers()) == []
    assert layer(x_input()).shape == (B, T, D)


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("q_dims", [2, 3, 4])
def test_a_0d_mask_gives_both_kernels_the_result_of_its_broadcast(keep, q_dims):
    shape = (2, 2, 3, 4)[4 - q_dims:]
    q, k, v = (torch.randn(shape) for _ in range(3))
    mask = torch.tensor(keep)
    broadcast = mask.expand(*shape[:-1], shape[-2])  # (..., T, S) with S = T here
    for kernel in (explicit_attention, sdpa_attention):
        torch.testing.assert_close(kernel(q, k, v, mask=mask)[0], kernel(q, k, v, mask=broadcast)[0])
    torch.testing.assert_close(sdpa_attention(q, k, v, mask=mask)[0], explicit_attention(q, k, v, mask=mask)[0])
    if not keep:  # nothing may be attended to: every row is the fully masked row, all zeros
        assert torch.equal(sdpa_attention(q, k, v, mask=mask)[0], torch.zeros(shape))


def test_cross_attention_keys_with_rope_are_refused_when_the_layer_is_built():
    # d_kv_in != d_in: every call needs kv, and kv cannot take RoPE; a layer no call can use is refused at once
    with pytest.raises(ValueError, match=re.escape(
            "d_kv_in=8 (keys and values from another sequence, cross-attention) cannot be combined with "
            "rope_theta=10000: RoPE rotates queries and keys by their positions in one shared sequence, so no call "
            "of this layer could run; drop one of the two")):
        mha_lib.MultiHeadAttention(6, 8, 10, 0.0, 2, d_kv_in=8, rope_theta=1e4)
    # either one alone builds a working layer; d_kv_in equal to d_in is self-attention, where RoPE belongs
    assert mha_lib.MultiHeadAttention(6, 8, 10, 0.0, 2, d_kv_in=8)(torch.randn(1, 3, 6), torch.randn(1, 4, 8)).shape \
        == (1, 3, 8)
    assert mha_lib.MultiHeadAttention(8, 8, 10, 0.0, 2, d_kv_in=8, rope_theta=1e4)(torch.randn(1, 3, 8)).shape \
        == (1, 3, 8)
