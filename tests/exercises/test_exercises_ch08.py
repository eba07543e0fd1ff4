"""Chapter 8's checker: correct forward passes pass, each mistake it claims to recognise is named, a stub is "not
attempted", calling the layer itself is refused, and checking leaves the notebook's random numbers alone."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import mha_lib
from mha_lib.exercises.ch08_putting_it_together import (
    CALLED_LAYER,
    DIAGONAL_NAN,
    MASK_AFTER_SOFTMAX,
    MERGE_NO_TRANSPOSE,
    NO_MASK,
    NO_OUT_PROJ,
    NO_SCALE,
    NO_SOFTMAX,
    SCALED_BY_D,
    SCALED_BY_DH,
    SOFTMAX_QUERIES,
    SOME_NAN,
    SPLIT_NO_TRANSPOSE,
    TUPLE,
    _layer_and_input,
    check_attention_forward,
    forward_variant,
)


def stub(layer, x):
    raise NotImplementedError  # your code here


# --- correct answers, written independently of the checker --------------------------------------------------


def solution(layer, x, *, scale_by=None, causal=True, diagonal=1, softmax=True, merge_transpose=True,
             split_transpose=True, out_proj=True, mask_after=False, softmax_dim=-1):
    """The notebook's solution, with the same switches written out here (not taken from the checker)."""
    B, T, D = x.shape
    H, Dh = layer.num_heads, layer.head_dim

    def split(t):
        if split_transpose:
            return t.view(B, T, H, Dh).transpose(1, 2)  # (B, T, D) -> (B, H, T, Dh)
        return t.view(B, H, T, Dh)

    q, k, v = split(layer.W_query(x)), split(layer.W_key(x)), split(layer.W_value(x))
    scores = q @ k.transpose(-2, -1) / math.sqrt(Dh if scale_by is None else scale_by)  # (B, H, T, T)
    blocked = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=diagonal)
    if causal and not mask_after:
        scores = scores.masked_fill(blocked, float("-inf"))
    weights = torch.softmax(scores, dim=softmax_dim) if softmax else scores
    if mask_after:
        weights = weights.masked_fill(blocked, 0.0)
    context = weights @ v  # (B, H, T, Dh)
    if merge_transpose:
        merged = context.transpose(1, 2).contiguous().view(B, T, D)
    else:
        merged = context.reshape(B, T, D)
    return layer.out_proj(merged) if out_proj else merged


def with_library_pieces(layer, x):
    H = layer.num_heads
    q, k, v = (mha_lib.split_heads(p(x), H) for p in (layer.W_query, layer.W_key, layer.W_value))
    context, _ = mha_lib.explicit_attention(q, k, v, is_causal=True)
    return layer.out_proj(mha_lib.merge_heads(context))


def with_sdpa(layer, x):
    H = layer.num_heads
    q, k, v = (mha_lib.split_heads(p(x), H) for p in (layer.W_query, layer.W_key, layer.W_value))
    return layer.out_proj(mha_lib.merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))


def with_tril_and_minus_1e9(layer, x):
    # a large negative number instead of -inf gives the same weights
    B, T, D = x.shape
    H, Dh = layer.num_heads, layer.head_dim
    q, k, v = (p(x).reshape(B, T, H, Dh).permute(0, 2, 1, 3) for p in (layer.W_query, layer.W_key, layer.W_value))
    scores = (q @ k.mT) * Dh ** -0.5
    scores = scores.masked_fill(torch.tril(torch.ones(T, T)) == 0, -1e9)
    out = torch.softmax(scores, dim=-1) @ v
    return layer.out_proj(out.permute(0, 2, 1, 3).reshape(B, T, D))


@pytest.mark.parametrize("fn", [solution, with_library_pieces, with_sdpa, with_tril_and_minus_1e9])
def test_correct_answers_pass(fn):
    feedback = check_attention_forward(fn)
    assert feedback.passed and feedback.attempted, str(feedback)
    assert str(feedback).startswith("✅ attention_forward: correct")


def test_the_variants_reproduce_the_layer_when_nothing_is_switched():
    torch.manual_seed(0)
    layer = mha_lib.MultiHeadAttention(12, 12, 7, 0.0, num_heads=3, qkv_bias=True).eval()
    x = torch.randn(3, 7, 12)
    with torch.no_grad():
        torch.testing.assert_close(forward_variant(layer, x), layer(x))
        torch.testing.assert_close(solution(layer, x), layer(x))


# --- each named mistake --------------------------------------------------------------------------------------


MISTAKES = [
    pytest.param(dict(out_proj=False), NO_OUT_PROJ, id="forgot-W_o"),
    pytest.param(dict(scale_by=1), NO_SCALE, id="forgot-scale"),
    pytest.param(dict(scale_by=24), SCALED_BY_D, id="scaled-by-sqrt-D"),
    pytest.param(dict(scale_by=36), SCALED_BY_DH, id="scaled-by-Dh"),
    pytest.param(dict(causal=False), NO_MASK, id="no-causal-mask"),
    pytest.param(dict(mask_after=True), MASK_AFTER_SOFTMAX, id="mask-after-softmax"),
    pytest.param(dict(merge_transpose=False), MERGE_NO_TRANSPOSE, id="merge-without-transpose"),
    pytest.param(dict(split_transpose=False), SPLIT_NO_TRANSPOSE, id="split-without-transpose"),
    pytest.param(dict(softmax_dim=-2), SOFTMAX_QUERIES, id="softmax-over-queries"),
    pytest.param(dict(softmax=False), NO_SOFTMAX, id="no-softmax"),
    pytest.param(dict(diagonal=0), DIAGONAL_NAN, id="seed-002-diagonal-mask"),
]


@pytest.mark.parametrize(("switches", "named"), MISTAKES)
def test_each_mistake_is_named(switches, named):
    feedback = check_attention_forward(lambda layer, x: solution(layer, x, **switches))
    assert not feedback.passed and feedback.attempted
    assert feedback.message == named, feedback.message


def test_the_mistakes_differ_from_each_other_and_from_the_answer():
    # otherwise a message could name the wrong mistake
    layer, x = _layer_and_input()
    with torch.no_grad():
        outputs = [layer(x)] + [solution(layer, x, **p.values[0]) for p in MISTAKES[:-1]]
    for i in range(len(outputs)):
        for j in range(i + 1, len(outputs)):
            assert not torch.allclose(outputs[i], outputs[j], atol=1e-4), (i, j)


def test_a_nan_that_is_not_the_diagonal_mask_gets_the_generic_message():
    def inverted_mask(layer, x):  # blocks the past and the diagonal: the last query has no key left
        B, T, D = x.shape
        H, Dh = layer.num_heads, layer.head_dim
        q, k, v = (mha_lib.split_heads(p(x), H) for p in (layer.W_query, layer.W_key, layer.W_value))
        scores = (q @ k.mT / Dh ** 0.5).masked_fill(torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        return layer.out_proj(mha_lib.merge_heads(torch.softmax(scores, dim=-1) @ v))

    feedback = check_attention_forward(inverted_mask)
    assert not feedback.passed and feedback.message == SOME_NAN


def test_calling_the_layer_is_refused():
    feedback = check_attention_forward(lambda layer, x: layer(x))
    assert not feedback.passed and feedback.attempted
    assert CALLED_LAYER in feedback.message


def test_returning_the_weights_too_is_named():
    feedback = check_attention_forward(lambda layer, x: (solution(layer, x), None))
    assert not feedback.passed and feedback.message == TUPLE


def test_wrong_values_of_unknown_origin_are_reported_as_such():
    feedback = check_attention_forward(lambda layer, x: solution(layer, x) * 2)
    assert not feedback.passed
    assert feedback.message.startswith("right shape (2, 5, 24), wrong values")


def test_wrong_shape_is_reported():
    feedback = check_attention_forward(lambda layer, x: solution(layer, x, out_proj=False)[:, :, :6])
    assert not feedback.passed and feedback.message.startswith("wrong shape: got (2, 5, 6)")


def test_stub_is_not_attempted():
    feedback = check_attention_forward(stub)
    assert not feedback.passed and not feedback.attempted
    assert str(feedback).startswith("⏳ attention_forward: not attempted yet")


def test_checking_does_not_move_the_random_numbers():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    check_attention_forward(solution)
    check_attention_forward(stub)
    assert torch.equal(torch.random.get_rng_state(), before)
