"""Checkers for chapter 5, causal and padding masks.

    check_causal_weights(fn)        fn(scores)                  -> softmax over the keys, future blocked  (..., T, T)
    check_padded_causal_mask(fn)    fn(key_padding_mask, T)     -> keep mask, causal AND not padding    (B, 1, T, T)

Each checker draws its own inputs from a private generator, runs the student's function, compares it with
``mha_lib``'s own masks and ``masked_softmax`` and, when the answer is wrong, names the mistake it reproduces
("a whole row is -inf: did you mask the diagonal?", "you passed the keep mask straight to masked_fill").
"""

from __future__ import annotations

from typing import Callable

import torch

from ..functional import masked_softmax
from ..masks import causal_mask, mask_from_key_padding
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed, passed, refuse

Tensor = torch.Tensor
NEG_INF = float("-inf")

# The messages a student reads; the tests assert them, so they are named once here.
MASKED_DIAGONAL_NAN = N_("row 0 is all NaN: a whole row was -inf. Did you mask the diagonal? Query t may see keys "
                          "0..t, itself included: block only the strict upper triangle, "
                          "torch.triu(..., diagonal=1) (or keep torch.tril(...)).")
MASKED_DIAGONAL_FINITE = N_("you masked the diagonal too: every token lost its own key, and row 0, with every key "
                             "blocked, spread its weight evenly over all the keys, the future included. Block only "
                             "the strict upper triangle, torch.triu(..., diagonal=1).")
INVERTED = N_("your mask is upside down: each query sees the future and not the past. Keep torch.tril(...) (the "
               "lower triangle), or block torch.triu(..., diagonal=1).")
ZERO_FILL = N_("you filled the blocked scores with 0: exp(0) = 1, so future tokens still get weight. Fill with "
                "float('-inf'): exp(-inf) = 0.")
AFTER_SOFTMAX = N_("you zeroed the future weights after the softmax without renormalising: the rows no longer sum "
                    "to 1. Mask the scores with -inf before the softmax (or divide each row by its new sum).")
KEEP_MASK_FILLED = N_("the last row is all NaN: you passed the keep mask (True = may attend) straight to masked_fill, "
                       "which fills where the mask is True. Every query lost its past and itself, and the last query, "
                       "whose keys are all in its past, had nothing left. Fill where the keep mask is False: "
                       "scores.masked_fill(~keep, float('-inf')), or block torch.triu(..., diagonal=1).")
KEEP_MASK_FILLED_FINITE = N_("you passed the keep mask (True = may attend) straight to masked_fill, which fills where "
                              "the mask is True: every query lost its past and itself and sees only the future (the "
                              "last query, with every key filled, spread its weight evenly). Fill where the keep mask "
                              "is False: scores.masked_fill(~keep, ...), or block torch.triu(..., diagonal=1).")
NO_MASK = N_("you applied no mask: every query still sees the future. Fill the scores above the diagonal with -inf.")
SOFTMAX_COLUMNS = N_("softmax over the wrong dimension: each query's row must sum to 1, use dim=-1.")
BATCH_TIP = N_("Tip: build the mask from scores.shape[-2] and scores.shape[-1] (queries, keys), and let it "
                "broadcast over the leading dimensions.")

NOT_BOOL = N_("return a torch.bool keep mask (True = may attend), got dtype {dtype}.")
THREE_D = N_("return a 4-D mask (B, 1, T, T): a 3-D (B, T, T) mask would line its batch axis up with the heads "
              "axis of the scores (B, H, T, S).")
PADDING_NOT_INVERTED = N_("in key_padding_mask True means *padding*: you used it as if True meant keep. Invert it "
                           "(~key_padding_mask) before combining it with the causal mask.")
USED_OR = N_("you combined the masks with OR: a key must be both in the past AND not padding. Use & "
              "(mha_lib.combine_masks does the same).")
PADDING_ON_QUERIES = N_("you blocked the padded *queries* (rows) instead of the padded *keys* (columns): the padding "
                         "mask is (B, S) over keys, so it becomes (B, 1, 1, S).")
CAUSAL_INVERTED = N_("your causal part is upside down: keep the lower triangle, torch.tril(...).")
NO_CAUSAL = N_("the causal part is missing: padding alone still lets every query see the future.")
NO_PADDING = N_("the padding part is missing: queries may still attend to the padded keys.")
DIAGONAL_BLOCKED = N_("you blocked the diagonal: every query must keep its own key (torch.tril keeps it; "
                       "triu(..., diagonal=1) is what is blocked).")


def _causal_weights_mistakes(scores: Tensor) -> dict[str, Tensor]:
    T, S = scores.shape[-2:]
    keep = causal_mask(T, S)  # (T, S)
    strict_upper = ~torch.ones(T, S, dtype=torch.bool).tril(diagonal=-1)  # keeps the diagonal and the future
    softmax = torch.softmax(scores, dim=-1)
    return {
        MASKED_DIAGONAL_FINITE: torch.softmax(scores.masked_fill(~keep.tril(diagonal=-1), -1e9), dim=-1),
        INVERTED: torch.softmax(scores.masked_fill(~strict_upper, NEG_INF), dim=-1),
        KEEP_MASK_FILLED_FINITE: torch.softmax(scores.masked_fill(keep, -1e9), dim=-1),
        ZERO_FILL: torch.softmax(scores.masked_fill(~keep, 0.0), dim=-1),
        AFTER_SOFTMAX: softmax.masked_fill(~keep, 0.0),
        NO_MASK: softmax,
        SOFTMAX_COLUMNS: torch.softmax(scores.masked_fill(~keep, NEG_INF), dim=-2),
    }


def _diagonal_masked_with_inf(scores: Tensor) -> Tensor:
    """The GPT-2-sized walkthrough's slip: the upper triangle *and* the diagonal at -inf; row 0 becomes NaN."""
    blocked = torch.ones(scores.shape[-2:], dtype=torch.bool).triu()  # diagonal included
    return torch.softmax(scores.masked_fill(blocked, NEG_INF), dim=-1)


def _keep_mask_filled_with_inf(scores: Tensor) -> Tensor:
    """The keep mask handed straight to masked_fill: the past and the diagonal at -inf; the last row becomes NaN."""
    keep = causal_mask(*scores.shape[-2:])  # (T, S), True = may attend
    return torch.softmax(scores.masked_fill(keep, NEG_INF), dim=-1)


def _judge_causal_weights(name: str, answer, scores: Tensor, expected: Tensor, mistakes: dict) -> Feedback:
    """``expected`` and ``mistakes`` come from the checker's own copy of ``scores``, made before the call."""
    # the GPT-2-sized walkthrough's slip makes NaN rows; compare() names it through its NaN-aware mistake matching
    return compare(name, answer, expected, mistakes={MASKED_DIAGONAL_NAN: _diagonal_masked_with_inf(scores),
                                                     KEEP_MASK_FILLED: _keep_mask_filled_with_inf(scores),
                                                     **mistakes})


def check_causal_weights(student_fn: Callable[[Tensor], Tensor]) -> Feedback:
    """``student_fn(scores)`` must return ``softmax`` of ``scores (..., T, T)`` with every future key blocked.

    Two runs: one (5, 5) matrix, then a batch of heads ``(2, 3, 6, 6)`` that catches hard-coded sizes.
    """
    name = "causal_weights"
    generator = torch.Generator().manual_seed(6)  # a CPU generator: the same numbers on every machine
    for shape in ((5, 5), (2, 3, 6, 6)):
        scores = torch.randn(*shape, generator=generator) * 2
        expected = masked_softmax(scores, causal_mask(scores.shape[-1]))  # (..., T, T), before the call
        mistakes = _causal_weights_mistakes(scores)
        answer = attempt(name, student_fn, scores)  # a copy: masking it in place changes nothing here
        if isinstance(answer, Feedback) and not answer.attempted:
            return answer
        verdict = answer if isinstance(answer, Feedback) else _judge_causal_weights(
            name, answer, scores, expected, mistakes)
        if not verdict:
            if len(shape) > 2:
                return failed(name, _("right for one (5, 5) matrix, but not for scores of shape {shape}: "
                                      "{message} {tip}").format(shape=shape, message=verdict.message,
                                                                tip=_(BATCH_TIP)))
            return verdict
    return passed(name, N_("correct: each row sums to 1 over the keys 0..t, and the future gets exactly 0."))


def _padded_causal_candidates(padding: Tensor, T: int) -> tuple[Tensor, dict[str, Tensor]]:
    B = padding.shape[0]
    causal = causal_mask(T)  # (T, T)
    keys_kept = mask_from_key_padding(padding, B, T)  # (B, 1, 1, T)
    queries_kept = ~padding[:, None, :, None]  # (B, 1, T, 1): the wrong axis
    expected = causal & keys_kept  # (T, T) & (B, 1, 1, T) -> (B, 1, T, T)
    full = torch.ones(B, 1, T, T, dtype=torch.bool)
    mistakes = {
        PADDING_NOT_INVERTED: causal & ~keys_kept,
        USED_OR: causal | keys_kept,
        PADDING_ON_QUERIES: causal & queries_kept,
        CAUSAL_INVERTED: causal.T & keys_kept,
        NO_CAUSAL: full & keys_kept,
        NO_PADDING: full & causal,
        DIAGONAL_BLOCKED: causal.tril(diagonal=-1) & keys_kept,
    }
    return expected, {message: wrong.float() for message, wrong in mistakes.items()}


def check_padded_causal_mask(student_fn: Callable[[Tensor, int], Tensor]) -> Feedback:
    """``student_fn(key_padding_mask, T)`` must return the keep mask of a padded decoder batch, ``(B, 1, T, T)``.

    key_padding_mask ``(B, T)``, ``True`` = padding (the key-padding tutorial's and
    ``nn.MultiheadAttention``'s convention).
    Query t of sequence b may attend to key s when ``s <= t`` **and** key s is not padding. Any shape that
    broadcasts to ``(B, 1, T, T)`` with the batch first is accepted.
    """
    name = "padded_causal_mask"
    cases = (
        torch.tensor([[False] * 5, [False] * 3 + [True] * 2]),  # lengths 5 and 3
        torch.tensor([[False] * 2 + [True] * 4, [False] * 6, [False] * 4 + [True] * 2]),  # 2, 6, 4
    )
    for padding in cases:
        B, T = padding.shape
        expected, mistakes = _padded_causal_candidates(padding, T)  # before the call
        answer = attempt(name, student_fn, padding, T)  # a copy of padding
        if isinstance(answer, Feedback):
            return answer
        refused = refuse(name, answer, torch.ones(1, dtype=torch.bool))  # tuple, sparse, complex, not a tensor
        if refused is not None:  # a Feedback is falsy when failed: test for None
            return refused
        if answer.dtype != torch.bool:
            return failed(name, _(NOT_BOOL).format(dtype=answer.dtype))
        if answer.dim() == 3 and answer.shape[0] == B:
            return failed(name, THREE_D)
        if answer.dim() == 4 and answer.shape[0] in (1, B):
            try:
                answer = answer.expand(B, 1, T, T)  # accept (B, 1, 1, T)-style shapes that broadcast
            except RuntimeError:
                pass
        verdict = compare(name, answer.float(), expected.float(), mistakes=mistakes)
        if not verdict:
            return failed(name, _("(key_padding_mask of shape {shape}) {message}").format(
                shape=tuple(padding.shape), message=verdict.message))
    return passed(name, N_("correct: each query sees its past and itself, and never a padded key."))


__all__ = ["check_causal_weights", "check_padded_causal_mask"]
