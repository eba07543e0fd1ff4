"""Checkers for chapter 1, one attention head built by hand.

    check_attention_weights(fn)   fn(q, k)            -> softmax(q kᵀ / √Dh) over the keys   (..., T, S)
    check_single_head(fn)         fn(x, w_q, w_k, w_v) -> the context vectors               (T, Dh)

Each checker draws its own inputs from a private generator (the notebook's random state is left alone), runs the
student's function, compares it with ``mha_lib.functional`` and, when the answer is wrong, names the mistake it
reproduces. Inputs are chosen so that the usual mistakes give *different* tensors: the first check of
``check_attention_weights`` uses a square case (T = S = Dh) on purpose, so that ``q @ k`` (no transpose) runs and
can be recognised instead of crashing.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..functional import attention_scores, explicit_attention, masked_softmax, scale_scores
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed, passed

Tensor = torch.Tensor

# The messages a student reads; the tests assert them, so they are named once here. A message that can come with a
# wrong shape has no final period: compare() appends "(got shape ..., expected ...)." to it.
FORGOT_TRANSPOSE = N_("you forgot to transpose k: q @ k is not q @ kᵀ. Use k.transpose(-2, -1) (or k.T for a 2-D k).")
SWAPPED_QK = N_("you computed k @ qᵀ: row i then belongs to key i, not to query i. The scores are q @ kᵀ, "
                 "one row per query.")
NO_SCALE = N_("you forgot the scaling: divide the scores by √Dh (math.sqrt(q.shape[-1])) before the softmax.")
DIVIDED_BY_DH = N_("you divided by Dh instead of √Dh: the scale is 1 / math.sqrt(Dh).")
MULTIPLIED_BY_ROOT = N_("you multiplied by √Dh instead of dividing by it.")
SCALED_AFTER_SOFTMAX = N_("you scaled after the softmax: divide the scores first, then take the softmax.")
SOFTMAX_COLUMNS = N_("softmax over the wrong dimension: yours makes every column sum to 1. Each query's row must "
                      "sum to 1: use dim=-1, the keys' axis.")
NO_SOFTMAX = N_("you returned the scaled scores: apply torch.softmax(..., dim=-1) to turn them into weights.")
NO_SOFTMAX_NO_SCALE = N_("you returned the raw scores q @ kᵀ: scale them by 1/√Dh, then take the softmax over dim=-1.")
BATCH_TIP = N_("Tip: k.T reverses *every* dimension of a 3-D tensor; k.transpose(-2, -1) swaps the last two only, "
                "for one sequence and for a batch alike.")

RETURNED_WEIGHTS = N_("you returned the attention weights: multiply them by V = x @ w_v to get the context vectors")
WEIGHTS_TIMES_X = N_("you multiplied the weights by x instead of by the values V = x @ w_v")
SCALED_BY_INPUT_WIDTH = N_("you divided by √D, the width of the input x, instead of √Dh, the width of one head "
                            "(q.shape[-1]).")
TRANSPOSED_WEIGHTS = N_("you multiplied Aᵀ by V: use the weights as they are, A @ V, so that row i mixes the values "
                         "for query i.")


def _weights_mistakes(q: Tensor, k: Tensor) -> dict[str, Tensor]:
    """What the usual slips produce for ``softmax(q kᵀ / √Dh)``, keyed by the message that names them."""
    dh = q.shape[-1]
    root = math.sqrt(dh)
    scores = attention_scores(q, k)  # (..., T, S)
    mistakes = {}
    if q.shape[-1] == k.shape[-2]:  # q @ k only runs when Dh = S (the square first check)
        mistakes[FORGOT_TRANSPOSE] = torch.softmax(q @ k / root, dim=-1)
    return mistakes | {
        SWAPPED_QK: torch.softmax(attention_scores(k, q) / root, dim=-1),
        NO_SCALE: torch.softmax(scores, dim=-1),
        DIVIDED_BY_DH: torch.softmax(scores / dh, dim=-1),
        MULTIPLIED_BY_ROOT: torch.softmax(scores * root, dim=-1),
        SCALED_AFTER_SOFTMAX: torch.softmax(scores, dim=-1) / root,
        SOFTMAX_COLUMNS: torch.softmax(scores / root, dim=-2),
        NO_SOFTMAX: scores / root,
        NO_SOFTMAX_NO_SCALE: scores,
    }


def check_attention_weights(student_fn: Callable[[Tensor, Tensor], Tensor]) -> Feedback:
    """``student_fn(q, k)`` must return ``softmax(q kᵀ / √Dh, dim=-1)`` for q ``(..., T, Dh)``, k ``(..., S, Dh)``.

    Two runs: one square sequence (T = S = Dh = 5, where every usual mistake gives a recognisable tensor), then a
    batch ``(2, 6, 4)`` that catches hard-coded sizes and ``k.T`` on 3-D tensors.
    """
    name = "attention_weights"
    generator = torch.Generator().manual_seed(1)  # on the CPU: the same inputs on every machine
    q, k = torch.randn(2, 5, 5, generator=generator)  # (T, Dh) each, T = S = Dh
    expected = masked_softmax(scale_scores(attention_scores(q, k), q.shape[-1]))  # (T, S)
    mistakes = _weights_mistakes(q, k)
    answer = attempt(name, student_fn, q, k)  # the student gets copies: q and k stay as drawn
    if isinstance(answer, Feedback):
        return answer
    verdict = compare(name, answer, expected, mistakes=mistakes)
    if not verdict:
        return verdict

    qb, kb = torch.randn(2, 2, 6, 4, generator=generator)  # (B, T, Dh) each
    expected = masked_softmax(scale_scores(attention_scores(qb, kb), qb.shape[-1]))  # (B, T, S)
    mistakes = _weights_mistakes(qb, kb)
    answer = attempt(name, student_fn, qb, kb)
    verdict = answer if isinstance(answer, Feedback) else compare(name, answer, expected, mistakes=mistakes)
    if not verdict:
        return failed(name, _("right for one (5, 5) sequence, but not for a batch q, k of shape (2, 6, 4): "
                              "{message} {tip}").format(message=verdict.message, tip=_(BATCH_TIP)))
    return passed(name, N_("correct: one row of weights per query, and every row sums to 1."))


def check_single_head(student_fn: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> Feedback:
    """``student_fn(x, w_q, w_k, w_v)`` must return the context vectors of one unmasked head.

    x ``(T, D)``; w_q, w_k, w_v ``(D, Dh)`` (math layout: ``q = x @ w_q``). Expected ``softmax(q kᵀ/√Dh) v``,
    shape ``(T, Dh)``. D ≠ Dh on purpose, so that scaling by the input width is told apart from the right scale.
    """
    name = "single_head"
    generator = torch.Generator().manual_seed(2)  # on the CPU: the same inputs on every machine
    T, D, Dh = 5, 8, 3
    x = torch.randn(T, D, generator=generator)
    w_q, w_k, w_v = torch.randn(3, D, Dh, generator=generator) / math.sqrt(D)  # (D, Dh) each

    # the expected answer first, from tensors the student never sees (attempt hands over copies)
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (T, D) @ (D, Dh) -> (T, Dh)
    expected, weights = explicit_attention(q, k, v)  # (T, Dh), (T, T)
    scores = attention_scores(q, k)  # (T, T)
    mistakes = {
        RETURNED_WEIGHTS: weights,
        WEIGHTS_TIMES_X: weights @ x,
        SCALED_BY_INPUT_WIDTH: torch.softmax(scores / math.sqrt(D), dim=-1) @ v,
        NO_SCALE: torch.softmax(scores, dim=-1) @ v,
        DIVIDED_BY_DH: torch.softmax(scores / Dh, dim=-1) @ v,
        SOFTMAX_COLUMNS: torch.softmax(scale_scores(scores, Dh), dim=-2) @ v,
        SWAPPED_QK: torch.softmax(scale_scores(attention_scores(k, q), Dh), dim=-1) @ v,
        TRANSPOSED_WEIGHTS: weights.mT @ v,
    }
    answer = attempt(name, student_fn, x, w_q, w_k, w_v)
    if isinstance(answer, Feedback):
        return answer
    return compare(name, answer, expected, mistakes=mistakes,
                   success=N_("correct: each context vector is a weighted average of the value vectors."))


__all__ = ["check_attention_weights", "check_single_head"]
