"""Checkers for chapter 4, why the scores are divided by √Dh.

    check_softmax_jacobian(fn)      fn(p)                          -> ∂p/∂s = diag(p) - p pᵀ          (S, S)
    check_scaled_head_scores(fn)    fn(x, w_q, w_k, num_heads)     -> per-head scores / √Dh           (B, H, T, T)

Each checker draws its own inputs from a private generator (the notebook's random state is left alone), runs the
student's function, compares it with a reference and, when the answer is wrong, names the mistake it reproduces.
The widths of ``check_scaled_head_scores`` are all different on purpose (D_in = 12, D = 8, Dh = 4): dividing by
the input width (the key-padding tutorial's slip), by the model width or by Dh then each gives a tensor of its own.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..functional import attention_scores, scale_factor, split_heads
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed, passed

Tensor = torch.Tensor

# The messages a student reads; the tests assert them, so they are named once here.
JACOBIAN_NO_DIAGONAL = N_("you wrote -p pᵀ only: the diagonal term is missing. ∂p_i/∂s_j = p_i (δ_ij - p_j), "
                           "so J = diag(p) - p pᵀ.")
JACOBIAN_DIAGONAL_ONLY = N_("you wrote diag(p) only: subtract the outer product p pᵀ (every p_i depends on every s_j).")
JACOBIAN_SIGN = N_("the sign is flipped: J = diag(p) - p pᵀ, not p pᵀ - diag(p).")
JACOBIAN_NO_OFF_DIAGONAL = N_("your diagonal p_i (1 - p_i) is right, but the off-diagonal entries -p_i p_j are "
                               "missing: raising one score lowers every other weight.")
JACOBIAN_ELEMENTWISE = N_("you subtracted p * p (element by element, broadcast over the rows) where the outer "
                           "product p[:, None] * p[None, :] (or torch.outer(p, p)) was meant.")

NO_SCALE = N_("you forgot the scaling: divide the scores by √Dh, the width of one head.")
SCALED_BY_MODEL_WIDTH = N_("you divided by √D, the width of all heads together (q.shape[-1] *before* the split), "
                            "instead of √Dh, the width of one head.")
SCALED_BY_INPUT_WIDTH = N_("you divided by √D_in, the width of the input x, instead of √Dh, the width of one head. "
                            "The key-padding tutorial makes this slip (key_dim ** 0.5).")
DIVIDED_BY_DH = N_("you divided by Dh instead of √Dh: the scale is 1 / math.sqrt(Dh).")
MULTIPLIED_BY_ROOT = N_("you multiplied by √Dh instead of dividing by it.")
NOT_SPLIT = N_("you computed one score matrix over the full width: split q and k into num_heads heads first, "
                "(B, T, D) -> (B, H, T, Dh), e.g. with mha_lib.split_heads.")
VIEWED_WITHOUT_TRANSPOSE = N_("you reshaped straight to (B, H, T, Dh), which mixes features of different tokens into "
                               "one head: view as (B, T, H, Dh) first, then transpose(1, 2) (chapter 3).")


def _softmax_jacobian(scores: Tensor) -> Tensor:
    """∂softmax(s)/∂s for one row of scores, by autograd (an independent reference)."""
    return torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), scores)  # (S,) -> (S, S)


def check_softmax_jacobian(student_fn: Callable[[Tensor], Tensor]) -> Feedback:
    """``student_fn(p)`` must return the Jacobian ``J[i, j] = ∂p_i/∂s_j`` of ``p = softmax(s)``, shape ``(S, S)``.

    Two rows: an ordinary one, then a nearly saturated one (a score far above the others), where J is nearly 0.
    """
    name = "softmax_jacobian"
    generator = torch.Generator().manual_seed(4)  # a CPU generator: the same numbers on every machine
    ordinary = torch.randn(5, generator=generator).double()
    saturated = torch.tensor([0.5, 9.0, -1.0, 0.0], dtype=torch.float64)
    for scores in (ordinary, saturated):
        p = torch.softmax(scores, dim=-1)  # (S,)
        expected = _softmax_jacobian(scores)  # (S, S), before the student's function runs
        outer = p[:, None] * p[None, :]  # (S, 1) * (1, S) -> (S, S)
        mistakes = {
            JACOBIAN_NO_DIAGONAL: -outer,
            JACOBIAN_DIAGONAL_ONLY: torch.diag(p),
            JACOBIAN_SIGN: outer - torch.diag(p),
            JACOBIAN_NO_OFF_DIAGONAL: torch.diag(p * (1 - p)),
            JACOBIAN_ELEMENTWISE: torch.diag(p) - p * p,
        }
        answer = attempt(name, student_fn, p)  # a copy of p
        if isinstance(answer, Feedback):
            return answer
        verdict = compare(name, answer, expected, mistakes=mistakes, atol=1e-6)
        if not verdict:
            return verdict
    return passed(name, N_("correct: J = diag(p) - p pᵀ. Each row sums to 0, and J is nearly 0 once p is one-hot."))


def _head_scores_mistakes(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> dict[str, Tensor]:
    """What the usual slips produce for the per-head scaled scores, keyed by the message that names them."""
    B, T, D_in = x.shape
    D = w_q.shape[1]
    Dh = D // num_heads
    q, k = x @ w_q, x @ w_k  # (B, T, D_in) @ (D_in, D) -> (B, T, D)
    scores = attention_scores(split_heads(q, num_heads), split_heads(k, num_heads))  # (B, H, T, T)
    q_mixed, k_mixed = (t.reshape(B, num_heads, T, Dh) for t in (q, k))  # (B, T, D) -> (B, H, T, Dh): wrong
    return {
        NO_SCALE: scores,
        SCALED_BY_MODEL_WIDTH: scores / math.sqrt(D),
        SCALED_BY_INPUT_WIDTH: scores / math.sqrt(D_in),
        DIVIDED_BY_DH: scores / Dh,
        MULTIPLIED_BY_ROOT: scores * math.sqrt(Dh),
        NOT_SPLIT: attention_scores(q, k) / math.sqrt(Dh),  # (B, T, T)
        VIEWED_WITHOUT_TRANSPOSE: attention_scores(q_mixed, k_mixed) / math.sqrt(Dh),
    }


def check_scaled_head_scores(student_fn: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> Feedback:
    """``student_fn(x, w_q, w_k, num_heads)`` must return ``q_h k_hᵀ / √Dh`` for every head, ``(B, H, T, T)``.

    x ``(B, T, D_in)``; w_q, w_k ``(D_in, D)`` (math layout: ``q = x @ w_q``); ``Dh = D // num_heads``.
    Two runs with different sizes, so that hard-coded numbers are caught.
    """
    name = "scaled_head_scores"
    generator = torch.Generator().manual_seed(5)  # a CPU generator: the same numbers on every machine
    for B, T, D_in, D, H in ((2, 5, 12, 8, 2), (1, 4, 10, 18, 3)):
        x = torch.randn(B, T, D_in, generator=generator)
        w_q, w_k = (torch.randn(D_in, D, generator=generator) / math.sqrt(D_in) for _ in range(2))  # (D_in, D)
        # expected and mistakes first; the student gets copies, so zeroing x or w_q in place changes nothing here
        q = split_heads(x @ w_q, H)  # (B, T, D) -> (B, H, T, Dh)
        k = split_heads(x @ w_k, H)
        expected = attention_scores(q, k) * scale_factor(D // H)  # (B, H, T, T)
        mistakes = _head_scores_mistakes(x, w_q, w_k, H)
        answer = attempt(name, student_fn, x, w_q, w_k, H)
        if isinstance(answer, Feedback):
            return answer
        verdict = compare(name, answer, expected, mistakes=mistakes)
        if not verdict:
            return failed(name, _("(with B={B}, T={T}, D_in={D_in}, D={D}, num_heads={H}, so Dh={Dh}) {message}")
                          .format(B=B, T=T, D_in=D_in, D=D, H=H, Dh=D // H, message=verdict.message))
    return passed(name, N_("correct: every head's scores are divided by √Dh, the width of that head."))


__all__ = ["check_scaled_head_scores", "check_softmax_jacobian"]
