"""Chapter 4's checkers: they pass the right answer, name each mistake they claim to know, and wait for the stub.

Every wrong answer below is written the way a student would write it (not built from the checker's own
reference tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import math

import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch04_scaling as ch04


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_softmax_jacobian -----------------------------------------------------------------------------------


def jacobian_solution(p):
    return torch.diag(p) - torch.outer(p, p)  # (S, S)


WRONG_JACOBIANS = {
    "the diagonal term is missing": lambda p: -torch.outer(p, p),
    "you wrote diag(p) only": lambda p: torch.diag(p),
    "the sign is flipped": lambda p: torch.outer(p, p) - torch.diag(p),
    "the off-diagonal entries -p_i p_j are missing": lambda p: torch.diag(p - p ** 2),
    "you subtracted p * p (element by element": lambda p: torch.diag(p) - p * p,
}


def test_softmax_jacobian_accepts_the_solution_and_other_spellings():
    feedback = ch04.check_softmax_jacobian(jacobian_solution)
    assert feedback.passed
    assert str(feedback).startswith(f"{PASS_MARK} softmax_jacobian: correct")
    assert ch04.check_softmax_jacobian(lambda p: p[:, None] * (torch.eye(len(p), dtype=p.dtype) - p[None, :]))
    assert ch04.check_softmax_jacobian(lambda p: torch.diag_embed(p) - p.unsqueeze(-1) @ p.unsqueeze(-2))


@pytest.mark.parametrize("phrase", list(WRONG_JACOBIANS))
def test_softmax_jacobian_names_the_mistake(phrase):
    feedback = ch04.check_softmax_jacobian(WRONG_JACOBIANS[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert str(feedback).startswith(FAIL_MARK)


def test_softmax_jacobian_rejects_zeros_and_reports_the_stub():
    zeros = ch04.check_softmax_jacobian(lambda p: torch.zeros(len(p), len(p), dtype=p.dtype))
    assert not zeros.passed and "wrong values" in zeros.message
    feedback = ch04.check_softmax_jacobian(_stub)
    assert not feedback.attempted
    assert str(feedback).startswith(f"{TODO_MARK} softmax_jacobian: not attempted yet")


# --- check_scaled_head_scores ---------------------------------------------------------------------------------


def _split(t, num_heads):
    B, T, D = t.shape
    return t.view(B, T, num_heads, D // num_heads).transpose(1, 2)  # (B, T, D) -> (B, H, T, Dh)


def head_scores_solution(x, w_q, w_k, num_heads):
    q, k = _split(x @ w_q, num_heads), _split(x @ w_k, num_heads)  # (B, H, T, Dh)
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)


def _scores_scaled_by(scale_of):
    """A student's answer that splits correctly and divides by ``scale_of(x, w_q, num_heads)``."""
    def student(x, w_q, w_k, num_heads):
        q, k = _split(x @ w_q, num_heads), _split(x @ w_k, num_heads)
        return q @ k.transpose(-2, -1) / scale_of(x, w_q, num_heads)
    return student


def _not_split(x, w_q, w_k, num_heads):
    q, k = x @ w_q, x @ w_k  # (B, T, D)
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1] // num_heads)


def _viewed_without_transpose(x, w_q, w_k, num_heads):
    q, k = x @ w_q, x @ w_k
    B, T, D = q.shape
    q, k = q.view(B, num_heads, T, D // num_heads), k.view(B, num_heads, T, D // num_heads)
    return q @ k.transpose(-2, -1) / math.sqrt(D // num_heads)


WRONG_HEAD_SCORES = {
    "you forgot the scaling": _scores_scaled_by(lambda x, w_q, h: 1.0),
    "you divided by √D, the width of all heads together": _scores_scaled_by(
        lambda x, w_q, h: math.sqrt(w_q.shape[1])),
    "you divided by √D_in, the width of the input x": _scores_scaled_by(lambda x, w_q, h: x.shape[-1] ** 0.5),
    "you divided by Dh instead of √Dh": _scores_scaled_by(lambda x, w_q, h: w_q.shape[1] // h),
    "you multiplied by √Dh instead of dividing": _scores_scaled_by(
        lambda x, w_q, h: 1 / math.sqrt(w_q.shape[1] // h)),
    "one score matrix over the full width": _not_split,
    "you reshaped straight to (B, H, T, Dh)": _viewed_without_transpose,
}


def test_scaled_head_scores_accepts_the_solution_and_the_library():
    feedback = ch04.check_scaled_head_scores(head_scores_solution)
    assert feedback.passed
    assert str(feedback).startswith(f"{PASS_MARK} scaled_head_scores: correct")

    def with_library(x, w_q, w_k, num_heads):
        q, k = mha_lib.split_heads(x @ w_q, num_heads), mha_lib.split_heads(x @ w_k, num_heads)
        return mha_lib.scale_scores(mha_lib.attention_scores(q, k), q.shape[-1])

    assert ch04.check_scaled_head_scores(with_library)


@pytest.mark.parametrize("phrase", list(WRONG_HEAD_SCORES))
def test_scaled_head_scores_names_the_mistake(phrase):
    feedback = ch04.check_scaled_head_scores(WRONG_HEAD_SCORES[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert "D_in=12, D=8, num_heads=2, so Dh=4" in feedback.message  # the first, small case


def test_seed001s_slip_is_named_after_the_seed():
    feedback = ch04.check_scaled_head_scores(WRONG_HEAD_SCORES["you divided by √D_in, the width of the input x"])
    assert "key-padding tutorial" in feedback.message


def test_scaled_head_scores_catches_hard_coded_sizes():
    feedback = ch04.check_scaled_head_scores(lambda x, w_q, w_k, h: head_scores_solution(x, w_q, w_k, 2))
    assert not feedback.passed
    assert "num_heads=3" in feedback.message


def test_scaled_head_scores_reports_the_stub_and_crashes():
    assert not ch04.check_scaled_head_scores(_stub).attempted
    assert "raised ZeroDivisionError" in ch04.check_scaled_head_scores(lambda *a: 1 / 0).message


def test_checkers_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    ch04.check_softmax_jacobian(jacobian_solution)
    ch04.check_scaled_head_scores(head_scores_solution)
    assert torch.equal(torch.random.get_rng_state(), before)
