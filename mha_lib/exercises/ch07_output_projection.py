"""Checkers for chapter 7, the output projection W_o and the parameter count of an attention layer.

    check_output_projection(fn)   fn(context, weight, bias)     -> concat the heads, then apply W_o   (B, T, D)
    check_parameter_count(fn)     fn(d_model, num_heads, bias)  -> parameters of one attention layer  int

``check_output_projection`` gives the heads' context vectors ``(B, H, T, Dh)`` and the weight and bias of an
``nn.Linear(D, D)`` (weight stored ``(out, in)``), with T ≠ H so that forgetting the transpose before the merge
gives a recognisable tensor. ``check_parameter_count`` asks for GPT-2 small, GPT-2 XL and a few other layers;
the number of heads is passed on purpose: whether it matters is part of the question.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..functional import merge_heads
from ..sizes import attention_parameter_count
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, count_answers, failed, named_mistake, passed, shown_count

Tensor = torch.Tensor

# The messages a student reads; the tests assert them, so they are named once here.
NO_TRANSPOSE = N_("you reshaped (B, H, T, Dh) straight to (B, T, D): that glues together features of different "
                   "tokens. Bring the heads next to their features first: x.transpose(1, 2) gives (B, T, H, Dh), "
                   "then .reshape(B, T, H * Dh).")
WEIGHT_NOT_TRANSPOSED = N_("you multiplied by the weight as stored: nn.Linear keeps it as (out, in) and computes "
                            "x @ weight.T + bias. Use weight.T (or torch.nn.functional.linear).")
NO_BIAS = N_("you forgot the bias of W_o: add it after the matrix product.")
CONCAT_ONLY = N_("you returned the concatenated heads without W_o: the projection is what lets every output feature "
                  "mix all the heads.")
SUMMED_HEADS = N_("you summed the heads: the heads are *concatenated* side by side (their features are not the "
                   "same features, so adding them mixes unrelated things), then W_o mixes them with learned weights.")
AVERAGED_HEADS = N_("you averaged the heads: concatenate them side by side instead, then apply W_o.")

PARAMETER_CASES = ((768, 12, True), (1600, 25, True), (768, 12, False), (64, 4, True), (64, 16, False))
FORGOT_WO = N_("you forgot W_o (and its bias): there are four projections, W_q, W_k, W_v and W_o, not three.")
FORGOT_BIASES = N_("you forgot the biases: with bias=True each of the four projections adds a vector of length D.")
BIASES_ALWAYS = N_("you counted the biases even with bias=False: then there are only the four D × D matrices.")
BIAS_AS_MATRIX = N_("you counted each bias as D × D: a bias is one number per output feature, a vector of length D.")
PER_HEAD_FULL = N_("you gave every head its own D × D matrices: the heads *share out* the D output features of W_q, "
                    "W_k and W_v (Dh rows of each stored weight, Dh = D / H), so the count does not depend on the "
                    "number of heads.")
ONE_HEAD_ONLY = N_("you counted one head's slice (Dh × D) only: H slices of Dh rows make the full D × D matrix; "
                    "the count does not depend on the number of heads.")
SEED_002 = N_("that is the GPT-2-sized walkthrough's formula: 4·768 is four *vectors* of length 768 (just the "
               "biases), and 50257·768 is the token-embedding table, which belongs to the whole model, not to an "
               "attention layer. Count the four D × D matrices, then the biases.")
SEED_002_TIMES_175 = N_("that is the GPT-2-sized walkthrough's formula: 4·768 is four *vectors* of length 768 (just "
                         "the biases), and 50257·768 is the token-embedding table, which belongs to the whole model, "
                         "not to an attention layer. Count the four D × D matrices, then the biases. (And 175 is not a "
                         "number of layers: GPT-3 has 96 blocks; 175 is its size in billions of parameters.)")
FOUR_VECTORS = N_("you counted four vectors of length D (4·D): each projection is a D × D matrix, 4·D² in all.")
NOT_FINITE = N_("your function returned {value}: a parameter count is a finite whole number.")
NOT_WHOLE = N_("your function returned {value}, which is not a whole number: a count of parameters has no fraction.")


def _randn(*shape: int, generator: torch.Generator) -> Tensor:
    return torch.randn(*shape, generator=generator)  # CPU: the same numbers on every machine


def check_output_projection(student_fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Feedback:
    """``student_fn(context, weight, bias)``: context ``(B, H, T, Dh)``, weight ``(D, D)`` stored (out, in),
    bias ``(D,)``; must return ``merge_heads(context) @ weight.T + bias``, shape ``(B, T, D)``."""
    name = "output_projection"
    generator = torch.Generator().manual_seed(7)
    B, H, T, Dh = 2, 3, 4, 2  # T ≠ H: a reshape without the transpose gives other numbers, not a crash
    D = H * Dh
    context = _randn(B, H, T, Dh, generator=generator)
    weight = _randn(D, D, generator=generator) / D**0.5  # (out, in), not symmetric
    bias = _randn(D, generator=generator)
    merged = merge_heads(context)  # (B, H, T, Dh) -> (B, T, D)
    mistakes = {
        NO_TRANSPOSE: context.reshape(B, T, D) @ weight.T + bias,
        WEIGHT_NOT_TRANSPOSED: merged @ weight + bias,
        NO_BIAS: merged @ weight.T,
        CONCAT_ONLY: merged,
        SUMMED_HEADS: context.sum(dim=1),  # (B, T, Dh)
        AVERAGED_HEADS: context.mean(dim=1),  # (B, T, Dh)
    }
    expected = merged @ weight.T + bias  # (B, T, D), before the call
    answer = attempt(name, student_fn, context, weight, bias)  # copies: in-place edits change nothing here
    if isinstance(answer, Feedback):
        return answer
    return compare(name, answer, expected, mistakes=mistakes,
                   success=N_("correct: heads side by side, then one matrix that mixes all of them."))


def _parameter_mistakes(d: int, h: int, bias: bool) -> dict[str, int]:
    right = attention_parameter_count(d, bias)
    return {
        FORGOT_WO: 3 * d * d + 3 * d * bias,
        FORGOT_BIASES: 4 * d * d,
        BIASES_ALWAYS: 4 * d * d + 4 * d,
        BIAS_AS_MATRIX: 4 * d * d + 4 * d * d * bias,
        PER_HEAD_FULL: h * right,
        ONE_HEAD_ONLY: right // h,
        SEED_002: 4 * d + 50257 * d,
        SEED_002_TIMES_175: (4 * d + 50257 * d) * 175,
        FOUR_VECTORS: 4 * d,
    }


def _not_whole(value: float) -> str:
    return _(NOT_FINITE if not math.isfinite(value) else NOT_WHOLE).format(value=value)


def check_parameter_count(student_fn: Callable[[int, int, bool], int]) -> Feedback:
    """``student_fn(d_model, num_heads, bias)`` must return the parameters of one attention layer:
    ``4·D² + 4·D`` with biases, ``4·D²`` without, for any number of heads."""
    name = "parameter_count"
    expected = [attention_parameter_count(d, bias) for d, _, bias in PARAMETER_CASES]  # before any call
    answers = count_answers(name, student_fn, PARAMETER_CASES, not_whole=_not_whole, where=lambda problem, d, h, bias:
                            _("for d_model={d}, num_heads={h}, bias={bias}: {problem}").format(
                                d=d, h=h, bias=bias, problem=problem))
    if isinstance(answers, Feedback):
        return answers
    if answers == expected:
        return passed(name, N_("correct: 2,362,368 for GPT-2 small, 10,246,400 for GPT-2 XL, whatever the heads."))
    mistake = named_mistake(answers, expected, [_parameter_mistakes(*case) for case in PARAMETER_CASES])
    if mistake:
        return failed(name, mistake)
    i = next(i for i, (value, right) in enumerate(zip(answers, expected)) if value != right)
    d, h, bias = PARAMETER_CASES[i]
    return failed(name, _("for d_model={d}, num_heads={h}, bias={bias} you returned {shown}, expected {expected}.")
                  .format(d=d, h=h, bias=bias, shown=shown_count(answers[i]), expected=f"{expected[i]:,}"))


__all__ = ["check_output_projection", "check_parameter_count"]
