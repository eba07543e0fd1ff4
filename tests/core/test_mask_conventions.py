"""Every mask convention of chapter 5's table, converted to mha_lib's keep mask, gives the *native* weights.

"Native" means: computed the way the code that uses the convention computes it — by hand with ``masked_fill``
(LLMs-from-scratch, nanoGPT, seed 001), by ``d2l.masked_softmax`` (D2L), by ``nn.MultiheadAttention`` and by
``F.scaled_dot_product_attention``. mha_lib's side is always ``masked_softmax(scores, keep)`` (or the explicit
kernel) with ``keep`` produced by a converter from ``mha_lib.masks``.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from d2l import torch as d2l

import mha_lib
from mha_lib.functional import attention_scores, explicit_attention, masked_softmax, scale_scores, split_heads
from mha_lib.masks import (
    causal_mask,
    invert_mask,
    mask_from_allowed,
    mask_from_blocked,
    mask_from_key_padding,
    mask_from_valid_lens,
)

NEG_INF = float("-inf")


def _scores(*shape: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype) * 2


def _assert_close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-10)


# --- the converters themselves ----------------------------------------------------------------------------------


@pytest.mark.parametrize("T", [1, 2, 5, 9])
def test_every_causal_convention_converts_to_the_same_keep_mask(T):
    expected = causal_mask(T)
    triu_blocked = torch.triu(torch.ones(T, T), diagonal=1)  # LLMs-from-scratch: 1 = blocked (float)
    tril_buffer = torch.tril(torch.ones(T, T)).view(1, 1, T, T)  # nanoGPT: 0 = blocked (float, 4-D)
    torch_mha_blocked = ~torch.ones(T, T, dtype=torch.bool).tril()  # nn.MultiheadAttention: True = blocked
    per_query_lens = torch.arange(1, T + 1)[None]  # D2L (B, T) valid_lens: query t sees t + 1 keys

    assert torch.equal(mask_from_blocked(triu_blocked), expected)
    assert torch.equal(mask_from_allowed(tril_buffer), expected.view(1, 1, T, T))
    assert torch.equal(mask_from_blocked(torch_mha_blocked), expected)
    assert torch.equal(mask_from_valid_lens(per_query_lens, T, T), expected.view(1, 1, T, T))


def test_converters_return_bool_keep_masks_of_the_same_shape_and_leave_their_input_alone():
    blocked = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    before = blocked.clone()
    keep = mask_from_blocked(blocked)
    assert keep.dtype == torch.bool and keep.shape == blocked.shape
    assert keep.tolist() == [[True, False, False], [True, True, False]]
    assert torch.equal(blocked, before)

    allowed = torch.tensor([[1, 0], [1, 1]], dtype=torch.int64)  # integer 0/1 masks are read too
    assert mask_from_allowed(allowed).tolist() == [[True, False], [True, True]]
    sdpa_mask = torch.tensor([[True, False], [True, True]])
    assert mask_from_allowed(sdpa_mask) is sdpa_mask  # already a keep mask: unchanged
    assert torch.equal(mask_from_blocked(sdpa_mask), invert_mask(sdpa_mask))


def test_mask_from_blocked_and_allowed_are_inverses():
    gen = torch.Generator().manual_seed(0)
    mask = torch.rand(3, 4, 5, generator=gen) < 0.5
    assert torch.equal(mask_from_blocked(mask), ~mask_from_allowed(mask))
    assert torch.equal(mask_from_allowed(mask_from_blocked(mask).float()), ~mask)


@pytest.mark.parametrize("convert, name", [(mask_from_blocked, "blocked"), (mask_from_allowed, "allowed")])
def test_an_additive_mask_is_refused_with_a_hint(convert, name):
    additive = torch.tensor([[0.0, NEG_INF], [0.0, 0.0]])
    with pytest.raises(ValueError, match=rf"^{name} must hold only 0 and 1 \(or be torch.bool\), got other values "
                                         rf"such as -inf \(-inf: this looks like an additive mask"):
        convert(additive)


@pytest.mark.parametrize("convert, name", [(mask_from_blocked, "blocked"), (mask_from_allowed, "allowed")])
def test_bad_inputs_name_the_argument(convert, name):
    with pytest.raises(ValueError, match=rf"^{name} must hold only 0 and 1 \(or be torch.bool\), got other values "
                                         r"such as 0.5$"):
        convert(torch.tensor([0.0, 0.5, 1.0]))
    with pytest.raises(TypeError, match=rf"^{name} must be a torch.Tensor, got list$"):
        convert([[0, 1]])
    with pytest.raises(TypeError, match=rf"^{name} must be a torch.bool or a 0/1 tensor, got dtype torch.complex64$"):
        convert(torch.zeros(2, dtype=torch.complex64))


# --- each convention against its native computation --------------------------------------------------------------


def test_llms_from_scratch_triu_mask():
    # seed 000: mask = triu(ones, diagonal=1); scores.masked_fill(mask.bool(), -inf); softmax
    T = 6
    scores = _scores(2, T, T)
    blocked = torch.triu(torch.ones(T, T), diagonal=1)
    native = torch.softmax(scores.masked_fill(blocked.bool(), NEG_INF), dim=-1)
    _assert_close(masked_softmax(scores, mask_from_blocked(blocked)), native)


def test_nanogpt_tril_buffer_cut_to_the_current_length():
    # seed 003: a (1, 1, C, C) tril buffer, cut to [:, :, :T, :T], blocked where it is 0
    C, T = 8, 5
    buffer = torch.tril(torch.ones(C, C)).view(1, 1, C, C)
    scores = _scores(2, 3, T, T, seed=1)  # (B, H, T, T)
    native = torch.softmax(scores.masked_fill(buffer[:, :, :T, :T] == 0, NEG_INF), dim=-1)
    _assert_close(masked_softmax(scores, mask_from_allowed(buffer[:, :, :T, :T])), native)


@pytest.mark.parametrize("lens", [[3, 2], [[1, 2, 3, 4], [4, 4, 1, 2]]], ids=["(B,)", "(B, T)"])
def test_d2l_valid_lens(lens):
    # D2L 10.5: d2l.masked_softmax fills -1e6 beyond each valid length (heads folded into the batch)
    B, T, S = 2, 4, 6
    scores = _scores(B, T, S, seed=2)
    valid_lens = torch.tensor(lens)
    native = d2l.masked_softmax(scores.clone(), valid_lens)  # clone: it writes into its input
    ours = masked_softmax(scores, mask_from_valid_lens(valid_lens, T, S)[:, 0])  # (B, 1, T, S) -> (B, T, S)
    _assert_close(ours, native)


def test_seed001_key_padding_mask_in_cross_attention():
    # seed 001: mask (N, T_k), True = padded, repeated over heads and queries, filled with -inf; T_q != T_k
    H, N, T_q, T_k = 2, 3, 2, 6
    scores = _scores(H, N, T_q, T_k, seed=3)  # seed 001's layout (h, N, T_q, T_k)
    padded = torch.tensor([[False] * 4 + [True] * 2, [False] * 3 + [True] * 3, [False] * 6])
    seed_mask = padded.unsqueeze(1).unsqueeze(0).repeat(H, 1, T_q, 1)  # (N, T_k) -> (h, N, T_q, T_k)
    native = torch.softmax(scores.masked_fill(seed_mask, NEG_INF), dim=-1)
    keep = mask_from_key_padding(padded, N, T_k)  # (N, 1, 1, T_k), broadcasts over (N, h, T_q, T_k)
    ours = masked_softmax(scores.transpose(0, 1), keep).transpose(0, 1)  # computed in mha_lib's (B, H, T, S)
    _assert_close(ours, native)


def _torch_mha_and_heads(d_model=8, num_heads=2, T=5, seed=4):
    torch.manual_seed(seed)
    ours = mha_lib.MultiHeadAttention(d_model, d_model, T, 0.0, num_heads, qkv_bias=True, causal=False).double()
    theirs = mha_lib.torch_mha_from(ours).eval()
    x = torch.randn(2, T, d_model, dtype=torch.float64)
    q = split_heads(ours.W_query(x), num_heads)  # (B, T, D) -> (B, H, T, Dh)
    k = split_heads(ours.W_key(x), num_heads)
    scores = scale_scores(attention_scores(q, k), d_model // num_heads)  # (B, H, T, T)
    return ours, theirs, x, scores


def test_torch_multihead_attention_boolean_attn_mask():
    # nn.MultiheadAttention: boolean attn_mask (T, S), True = NOT allowed to attend
    _, theirs, x, scores = _torch_mha_and_heads()
    T = x.shape[1]
    blocked = torch.rand(T, T, generator=torch.Generator().manual_seed(5)) < 0.4
    blocked.fill_diagonal_(False)  # no fully blocked row: PyTorch gives NaN there, mha_lib gives 0
    with torch.no_grad():
        _, native = theirs(x, x, x, attn_mask=blocked, need_weights=True, average_attn_weights=False)
    _assert_close(masked_softmax(scores, mask_from_blocked(blocked)).detach(), native)


def test_torch_multihead_attention_key_padding_mask():
    _, theirs, x, scores = _torch_mha_and_heads(seed=6)
    B, T = x.shape[:2]
    padded = torch.tensor([[False] * T, [False] * (T - 2) + [True] * 2])
    with torch.no_grad():
        _, native = theirs(x, x, x, key_padding_mask=padded, need_weights=True, average_attn_weights=False)
    _assert_close(masked_softmax(scores, mask_from_key_padding(padded, B, T)).detach(), native)


@pytest.mark.parametrize("T, S", [(4, 4), (3, 6)])
def test_sdpa_boolean_mask_is_already_a_keep_mask(T, S):
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(2, 3, T, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 3, S, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 3, S, 5, generator=gen, dtype=torch.float64)
    keep = torch.rand(T, S, generator=gen) < 0.6
    keep[:, 0] = True  # every query keeps at least one key
    native = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    context, weights = explicit_attention(q, k, v, mask=mask_from_allowed(keep))
    _assert_close(context, native)
    # and the weights agree with softmax(q kᵀ / √Dh) filled with -inf by hand
    by_hand = torch.softmax((q @ k.mT / math.sqrt(4)).masked_fill(~keep, NEG_INF), dim=-1)
    _assert_close(weights, by_hand)
