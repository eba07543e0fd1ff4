"""Checkers for chapter 3, weight splitting: cutting features into heads, gluing them back, stacking weights.

    check_split_heads(fn)          fn(x, num_heads): (B, T, D) -> (B, H, T, Dh)
    check_merge_heads(fn)          fn(heads):        (B, H, T, Dh) -> (B, T, D)
    check_stack_head_weights(fn)   fn(head_weights): H × (Dh, d_in) -> (H·Dh, d_in), the wrapper's rows stacked

The inputs use four different sizes (B=2, T=5, H=3, Dh=4), so a mix-up of two axes shows up in the shape, and
they are drawn from a private generator, so checking does not move the notebook's random numbers.
"""

from __future__ import annotations

import torch

from ..functional import merge_heads, split_heads
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed

B, T, H, Dh, D_IN = 2, 5, 3, 4, 5
D = H * Dh

NOT_CONTIGUOUS = (
    N_("`view` refused a non-contiguous tensor: after `transpose` the elements are no longer stored in the order "
       "that `view` reads them in.")
)
FIX_SPLIT = N_(" In split_heads, view first, (B, T, D) -> (B, T, H, Dh), and transpose after.")
FIX_MERGE = N_(" Call `.contiguous()` before `.view(...)` (or use `.reshape(...)`, which copies when it must).")


def _random(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _attempt(exercise: str, fix: str, student_fn, *args):
    """``attempt``, plus a name for the most common crash of this chapter: ``view`` after ``transpose``."""
    answer = attempt(exercise, student_fn, *args)
    if isinstance(answer, Feedback) and answer.attempted and "view size is not compatible" in answer.message:
        return failed(exercise, _(NOT_CONTIGUOUS) + _(fix))
    return answer


def _transposed_wrong(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """``view(B, T, H, Dh)`` followed by every transpose except the right one, (1, 2)."""
    names = ("B", "T", "H", "Dh")
    viewed = x.view(B, T, H, Dh)
    return {
        _("you transposed dimensions {i} and {j} ({first} and {second}); after view(B, T, H, Dh) swap T and H "
          "with .transpose(1, 2)").format(i=i, j=j, first=names[i], second=names[j]): viewed.transpose(i, j)
        for i, j in ((0, 1), (0, 2), (0, 3), (1, 3), (2, 3))
    }


def check_split_heads(student_fn) -> Feedback:
    """``student_fn(x, num_heads)`` must turn ``(B, T, D)`` into ``(B, H, T, Dh)`` as ``mha_lib.split_heads`` does."""
    exercise = "split_heads"
    x = _random(B, T, D, seed=3)
    expected = split_heads(x, H)  # (B, H, T, Dh), before the student's function runs
    mistakes = {
        N_("you viewed straight to (B, H, T, Dh): that cuts the token axis, not the features, so a 'head' holds "
           "pieces of several tokens. View to (B, T, H, Dh) first, then .transpose(1, 2)"): x.view(B, H, T, Dh),
        N_("you forgot the transpose: this is (B, T, H, Dh). Bring the heads in front of the tokens with "
           ".transpose(1, 2)"): x.view(B, T, H, Dh),
        N_("you cut the features as (Dh, H) instead of (H, Dh): head h got every H-th feature instead of the "
           "contiguous slice h·Dh … (h+1)·Dh - 1"): x.view(B, T, Dh, H).permute(0, 3, 1, 2),
        **_transposed_wrong(x),
    }
    answer = _attempt(exercise, FIX_SPLIT, student_fn, x, H)  # attempt hands over a copy of x
    if isinstance(answer, Feedback):
        return answer
    return compare(exercise, answer, expected, mistakes=mistakes,
                   success=N_("correct: head h of token t holds x[b, t, h·Dh:(h+1)·Dh]."))


def check_merge_heads(student_fn) -> Feedback:
    """``student_fn(heads)`` must turn ``(B, H, T, Dh)`` back into ``(B, T, H·Dh)`` as ``mha_lib.merge_heads``."""
    exercise = "merge_heads"
    heads = _random(B, H, T, Dh, seed=4)  # contiguous, like the output of weights @ v
    expected = merge_heads(heads)  # (B, T, D)
    mistakes = {
        N_("you flattened (B, H, T, Dh) straight to (B, T, D) without moving the heads back behind the tokens: "
           "each output row now mixes pieces of several tokens. Call .transpose(1, 2) first"): heads.reshape(B, T, D),
        N_("you moved the heads back but did not glue them together: (B, T, H, Dh) still needs "
           ".contiguous().view(B, T, H * Dh)"): heads.transpose(1, 2),
        N_("you transposed T and Dh (dimensions 2 and 3) instead of H and T (dimensions 1 and 2)"):
            heads.transpose(2, 3).reshape(B, T, D),
        N_("you put Dh before H: the output interleaves the heads (feature 0 of every head, then feature 1, …) "
           "instead of head 0's block, then head 1's"): heads.permute(0, 2, 3, 1).reshape(B, T, D),
        N_("you concatenated the heads along the token axis; concatenate along the features (dim=-1)"):
            torch.cat(heads.unbind(1), dim=1),
    }
    answer = _attempt(exercise, FIX_MERGE, student_fn, heads)
    if isinstance(answer, Feedback):
        return answer
    return compare(exercise, answer, expected, mistakes=mistakes,
                   success=N_("correct: merge_heads(split_heads(x, H)) gives x back."))


def check_stack_head_weights(student_fn) -> Feedback:
    """``student_fn(head_weights)`` must stack H per-head ``(Dh, d_in)`` weights into one ``(H·Dh, d_in)``."""
    exercise = "stack_head_weights"
    head_weights = [_random(Dh, D_IN, seed=10 + h) for h in range(H)]
    expected = torch.cat(head_weights, dim=0)  # (H·Dh, d_in)
    mistakes = {
        N_("you concatenated along the input axis (dim=1). A Linear's weight is (out_features, in_features): the "
           "heads' rows stack along dim=0"): torch.cat(head_weights, dim=1),
        N_("you stacked into a new axis, (H, Dh, d_in); concatenate the rows instead with torch.cat(..., dim=0)"):
            torch.stack(head_weights),
        N_("you built the transposed matrix (d_in, H·Dh); nn.Linear stores (out_features, in_features)"):
            torch.cat(head_weights, dim=0).T,
        N_("the heads are in reverse order: head 0's rows must come first"): torch.cat(head_weights[::-1], dim=0),
        N_("the rows are interleaved (row 0 of every head, then row 1, …): each head must own one block of Dh "
           "consecutive rows"): torch.stack(head_weights, dim=1).reshape(D, D_IN),
    }
    answer = attempt(exercise, student_fn, head_weights)  # a new list of copies
    if isinstance(answer, Feedback):
        return answer
    return compare(exercise, answer, expected, mistakes=mistakes,
                   success=N_("correct: head h owns rows h·Dh … (h+1)·Dh - 1, as in mha_lib.split_from_wrapper."))


__all__ = ["check_merge_heads", "check_split_heads", "check_stack_head_weights"]
