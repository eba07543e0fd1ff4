"""Chapter 9's checker and counter: the lean kernel passes, each named mistake is recognised, the stub waits.

The wrong answers are written the way a student would write them, not built from the checker's own tensors.
"""

from __future__ import annotations

import math

import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch09_efficiency as ch09


def _stub(q, k, v):
    raise NotImplementedError  # your code here


def lean_solution(q, k, v):
    T = q.shape[-2]
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)  # (B, H, T, Dh) @ (B, H, Dh, T) -> (B, H, T, T)
    scores.masked_fill_(~mha_lib.causal_mask(T), float("-inf"))
    weights = torch.softmax(scores, dim=-1, out=scores)
    return weights @ v, weights


def wasteful(q, k, v):  # the usual way of writing it: four (B, H, T, T) tensors
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mha_lib.causal_mask(T), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _causal(scores):
    T = scores.shape[-1]
    return scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))


WRONG = {
    ch09.NO_SCALE: lambda q, k, v: (lambda w: (w @ v, w))(torch.softmax(_causal(q @ k.mT), -1)),
    ch09.DIVIDED_BY_DH: lambda q, k, v: (lambda w: (w @ v, w))(torch.softmax(_causal(q @ k.mT / q.shape[-1]), -1)),
    ch09.NO_MASK: lambda q, k, v: (lambda w: (w @ v, w))(torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, -1)),
    ch09.SOFTMAX_COLUMNS: lambda q, k, v: (lambda w: (w @ v, w))(
        torch.softmax(_causal(q @ k.mT / q.shape[-1] ** 0.5), -2)),
    ch09.MASKED_DIAGONAL: lambda q, k, v: (lambda w: (w @ v, w))(torch.softmax(
        (q @ k.mT / q.shape[-1] ** 0.5).masked_fill(torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).triu(),
                                                     float("-inf")), -1)),
    ch09.CONTEXT_WRONG: lambda q, k, v: (lambda w: (w @ q, w))(
        torch.softmax(_causal(q @ k.mT / q.shape[-1] ** 0.5), -1)),
    ch09.NOT_A_PAIR: lambda q, k, v: lean_solution(q, k, v)[0],
}


def test_accepts_the_lean_solution_and_the_library():
    feedback = ch09.check_lean_attention(lean_solution)
    assert feedback.passed, str(feedback)
    assert str(feedback).startswith(f"{PASS_MARK} lean_attention: correct, and lean")
    assert ch09.check_lean_attention(lambda q, k, v: mha_lib.explicit_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("message", list(WRONG), ids=lambda m: m[:40])
def test_names_the_mistake(message):
    feedback = ch09.check_lean_attention(WRONG[message])
    assert not feedback.passed
    assert str(feedback).startswith(f"{FAIL_MARK} lean_attention:")
    assert message in feedback.message, feedback.message


def test_right_values_but_too_many_tensors_is_named():
    feedback = ch09.check_lean_attention(wasteful)
    assert not feedback.passed
    assert feedback.message.startswith("right values, but your function created 4 tensors of shape (..., T, S)")
    assert "(matmul, div, masked_fill, softmax)" in feedback.message


def test_the_stub_is_not_attempted():
    feedback = ch09.check_lean_attention(_stub)
    assert not feedback.passed and not feedback.attempted
    assert str(feedback).startswith(f"{TODO_MARK} lean_attention: not attempted yet")


def test_a_crash_is_feedback_not_an_error():
    feedback = ch09.check_lean_attention(lambda q, k, v: q @ k)
    assert not feedback.passed and "raised RuntimeError" in feedback.message


def test_count_new_tensors_sees_allocations_not_views_or_in_place_writes():
    x = torch.randn(2, 3, 5, 5)
    count = ch09.count_new_tensors(lambda t: t.transpose(-2, -1).clone().masked_fill_(t > 0, 0.0).softmax(-1), x,
                                   rows=5)
    assert [name for name, _ in count.big] == ["clone", "softmax"]  # transpose is a view, masked_fill_ in place
    assert count.big_bytes == 2 * x.numel() * 4
    count = ch09.count_new_tensors(lambda t: torch.softmax(t, -1, out=t), x.clone(), rows=5)
    assert count.big == []
    small = ch09.count_new_tensors(lambda: torch.ones(5, 5).tril(), rows=5)  # a (T, S) mask is not counted
    assert small.big == []


def test_count_new_tensors_counts_the_layers_work():
    """The numbers the chapter prints: the explicit kernel creates one (B, H, T, T) tensor, SDPA none."""
    B, T, D, H = 2, 10, 12, 3
    x = torch.randn(B, T, D)
    explicit = mha_lib.MultiHeadAttention(D, D, T, 0.0, H)
    sdpa = mha_lib.MultiHeadAttention(D, D, T, 0.0, H, kernel="sdpa")
    with torch.no_grad():
        lean = ch09.count_new_tensors(explicit, x, rows=T)
        fused = ch09.count_new_tensors(sdpa, x, rows=T)
    assert [shape for _, shape in lean.big] == [(B, H, T, T)] and lean.matrix_products == 6
    assert fused.big == [] and fused.fused_attention == 1 and fused.matrix_products == 4
    with_grad = ch09.count_new_tensors(explicit, x, rows=T)  # autograd keeps the scores' softmax: two tensors
    assert len(with_grad.big) == 2
