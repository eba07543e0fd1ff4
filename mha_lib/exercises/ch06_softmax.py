"""Checkers for chapter 6, the softmax that turns scores into weights.

    check_stable_softmax(fn)          fn(scores)               -> softmax over the last dim, safe for any scores
    check_softmax_temperature(fn)     fn(scores, temperature)  -> softmax(scores / temperature) over the last dim
    check_weight_dropout(fn)          fn(weights, keep, p)     -> dropout of the weights with the given keep mask

Each checker draws its inputs from a private generator (the notebook's random state is left alone), runs the
student's function and compares it with ``mha_lib``'s answer; when the answer is wrong it names the mistake it
reproduces. ``check_stable_softmax`` runs twice: on ordinary scores first (where every formula slip gives a
different tensor), then on rows with scores near +1000 and near -1000, where only a stable version survives.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..functional import masked_softmax, stable_softmax
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed, passed

Tensor = torch.Tensor

# The messages a student reads; the tests assert them, so they are named once here.
WRONG_DIM = N_("softmax over the wrong dimension: your columns sum to 1, not your rows. Each query's row of "
                "scores must become weights that sum to 1: take the max and the sum over dim=-1, the keys' axis.")
NO_KEEPDIM = N_("you subtracted the row maxima without keepdim=True: x.amax(dim=-1) has lost the last axis, so it "
                 "broadcasts along the wrong one (row i's max is subtracted from column i). Use "
                 "x.amax(dim=-1, keepdim=True).")
NO_KEEPDIM_SUM = N_("you divided by the row sums without keepdim=True: exps.sum(dim=-1) has lost the last axis, so "
                     "it broadcasts along the wrong one (column i is divided by row i's sum) and the rows do not sum "
                     "to 1. Use exps.sum(dim=-1, keepdim=True).")
NO_KEEPDIM_BOTH = N_("you left out keepdim=True twice, in the max and in the sum: both have lost the last axis, so "
                      "they broadcast along the wrong one (row i's max and row i's sum land on column i). Use "
                      "x.amax(dim=-1, keepdim=True) and exps.sum(dim=-1, keepdim=True).")
NOT_NORMALISED = N_("you forgot to normalise: exp(x - max) must be divided by its sum over the row, "
                     "so that the row sums to 1.")
NO_EXP = N_("you forgot the exponential: dividing the scores by their sum is not a softmax (weights could be "
             "negative). Take .exp() of the shifted scores first.")
LOG_SOFTMAX = N_("you returned log-probabilities (log_softmax): the weights are their exponential.")
NAIVE = N_("you forgot to subtract the max: exp(1000) overflows to inf in float32 (anything above 88.7 does), and "
            "inf / inf = NaN. Subtract each row's maximum before .exp(): the result is mathematically the same.")
GLOBAL_MAX = N_("you subtracted the max of the whole tensor (x.max()) instead of each row's max: a row far below "
                 "the global max underflows to exp(-1000) = 0 everywhere, and 0 / 0 = NaN. Use "
                 "x.amax(dim=-1, keepdim=True).")
BATCH_DIM = N_("right for one (T, S) matrix, wrong for a batch (B, T, S): you fixed dim=1 (or 0). The keys are "
                "always the *last* axis: use dim=-1.")

MULTIPLIED = N_("you multiplied by the temperature instead of dividing: a temperature above 1 must flatten the "
                 "weights, yours sharpens them. Use softmax(scores / temperature).")
IGNORED_TEMPERATURE = N_("you ignored the temperature: divide the scores by it before the softmax.")
AFTER_SOFTMAX = N_("you divided after the softmax: the rows no longer sum to 1. The temperature divides the "
                    "*scores*, before the softmax.")
TEMPERATURE_WRONG_DIM = N_("softmax over the wrong dimension: each row (dim=-1) must sum to 1, not each column.")

NO_RESCALE = N_("you forgot to rescale the surviving weights by 1 / (1 - p): with p = 0.25 the context vectors "
                 "would shrink by a quarter on average in training and be full size at inference.")
TIMES_KEEP_PROB = N_("you multiplied by (1 - p) instead of dividing by it: the surviving weights must *grow*, "
                      "by 1 / (1 - p), to make up for the dropped ones.")
DIVIDED_BY_P = N_("you divided by p, the drop probability; the survivors are divided by 1 - p, the keep probability.")
INVERTED_KEEP = N_("you dropped the weights that `keep` marks True: True means kept; multiply by keep, not by ~keep.")
RENORMALISED = N_("you renormalised the rows to sum to 1 after the dropout: dropout does not do that. It divides by "
                   "the constant 1 - p, so that every weight keeps its *expected* value; rows sum to 1 on average only.")


def _randn(*shape: int, generator: torch.Generator) -> Tensor:
    return torch.randn(*shape, generator=generator)  # CPU: the same numbers on every machine


def _softmax_mistakes(x: Tensor) -> dict[str, Tensor]:
    """What the usual slips give on ordinary, square scores ``(T, T)``, keyed by the message that names them."""
    exps = (x - x.amax(dim=-1, keepdim=True)).exp()  # right shift, no division
    wrong_shift = (x - x.amax(dim=-1)).exp()  # (T, T) - (T,): row i's max lands on column i
    return {
        WRONG_DIM: torch.softmax(x, dim=-2),
        NO_KEEPDIM: wrong_shift / wrong_shift.sum(dim=-1, keepdim=True),
        NO_KEEPDIM_SUM: exps / exps.sum(dim=-1),  # (T, S) / (S,): row i's sum divides column i
        NO_KEEPDIM_BOTH: wrong_shift / wrong_shift.sum(dim=-1),
        NOT_NORMALISED: exps,
        NO_EXP: x / x.sum(dim=-1, keepdim=True),
        LOG_SOFTMAX: torch.log_softmax(x, dim=-1),
    }


def _extreme_scores(generator: torch.Generator) -> Tensor:
    """``(2, 3, 5)`` scores: ordinary rows, a row near +1000 and a row near -1000."""
    x = _randn(2, 3, 5, generator=generator)
    x[0, 1] += 1000.0  # exp overflows: only a max-subtracted softmax survives
    x[1, 2] -= 1000.0  # far below the rest: subtracting the *global* max underflows it to 0 / 0
    return x


def _naive(x: Tensor, dim: int = -1) -> Tensor:
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)


def check_stable_softmax(student_fn: Callable[[Tensor], Tensor]) -> Feedback:
    """``student_fn(scores)`` must return the softmax over the last dim, without NaN for any finite scores."""
    name = "stable_softmax"
    generator = torch.Generator().manual_seed(6)
    x = 2.0 * _randn(5, 5, generator=generator)  # (T, S), square so that a missing keepdim still runs
    expected, mistakes = stable_softmax(x), _softmax_mistakes(x)  # before the call
    answer = attempt(name, student_fn, x)  # a copy: an in-place slip must not change our reference
    if isinstance(answer, Feedback):
        return answer
    verdict = compare(name, answer, expected, mistakes=mistakes)
    if not verdict:
        return verdict

    xb = _extreme_scores(generator)  # (B, T, S) with a row near +1000 and a row near -1000
    expected = stable_softmax(xb)
    # the two NaN-making slips are matched NaN for NaN by compare()
    mistakes = {NAIVE: _naive(xb), GLOBAL_MAX: _naive(xb - xb.max()), BATCH_DIM: stable_softmax(xb, dim=1)}
    answer = attempt(name, student_fn, xb)
    if isinstance(answer, Feedback):
        return answer
    verdict = compare(name, answer, expected, mistakes=mistakes)
    if not verdict:
        return verdict
    return passed(name, N_("correct: every row sums to 1, even with scores near +1000 or -1000."))


def check_softmax_temperature(student_fn: Callable[[Tensor, float], Tensor]) -> Feedback:
    """``student_fn(scores, temperature)`` must return ``softmax(scores / temperature, dim=-1)``."""
    name = "softmax_temperature"
    generator = torch.Generator().manual_seed(7)
    x = _randn(2, 4, 6, generator=generator)  # (B, T, S)
    for temperature in (2.0, 0.5):
        expected = masked_softmax(x, temperature=temperature)  # before the call
        mistakes = {
            MULTIPLIED: torch.softmax(x * temperature, dim=-1),
            IGNORED_TEMPERATURE: torch.softmax(x, dim=-1),
            AFTER_SOFTMAX: torch.softmax(x, dim=-1) / temperature,
            TEMPERATURE_WRONG_DIM: torch.softmax(x / temperature, dim=-2),
        }
        answer = attempt(name, student_fn, x, temperature)  # a copy of x
        if isinstance(answer, Feedback):
            return answer
        verdict = compare(name, answer, expected, mistakes=mistakes)
        if not verdict:
            return failed(name, _("with temperature={temperature}: {message}").format(temperature=temperature,
                                                                                      message=verdict.message))
    return passed(name, N_("correct: temperature 2 flattens the weights, temperature 0.5 sharpens them."))


def check_weight_dropout(student_fn: Callable[[Tensor, Tensor, float], Tensor]) -> Feedback:
    """``student_fn(weights, keep, p)`` must zero the weights where ``keep`` is False and scale the rest by
    ``1 / (1 - p)``, as ``F.dropout`` does (here the random keep mask is given, so the answer is checkable)."""
    name = "weight_dropout"
    generator = torch.Generator().manual_seed(8)
    p = 0.25
    weights = torch.softmax(_randn(2, 4, 6, generator=generator), dim=-1)  # (B, T, S), rows sum to 1
    keep = torch.rand(weights.shape, generator=generator) >= p  # True = kept, with probability 1 - p
    kept = weights * keep
    mistakes = {
        NO_RESCALE: kept,
        TIMES_KEEP_PROB: kept * (1 - p),
        DIVIDED_BY_P: kept / p,
        INVERTED_KEEP: weights * ~keep / (1 - p),
        RENORMALISED: kept / kept.sum(dim=-1, keepdim=True),
    }
    expected = kept / (1 - p)
    answer = attempt(name, student_fn, weights, keep, p)  # copies of weights and keep
    if isinstance(answer, Feedback):
        return answer
    return compare(name, answer, expected, mistakes=mistakes,
                   success=N_("correct: dropped weights are 0, the others grow by 1 / (1 - p), the expectation "
                              "is unchanged."))


__all__ = ["check_softmax_temperature", "check_stable_softmax", "check_weight_dropout"]
