"""Chapter 9, efficiency: count the big tensors a function creates, and check a lean attention kernel.

    count_new_tensors(fn, *args, rows=T, cols=S)   -> TensorCount: the new (..., T, S) tensors fn allocated
    check_lean_attention(fn)                       fn(q, k, v) -> (context, weights), causal, with at most
                                                   one new (..., T, S) tensor (the weights it returns)

``count_new_tensors`` watches every torch function a piece of code calls (``torch.overrides.TorchFunctionMode``
sees ``@``, ``F.linear``, ``masked_fill_``, ``softmax`` ... as they happen) and records each result whose last two
dimensions are ``(T, S)`` and whose memory is new. An in-place operation (``masked_fill_``,
``torch.softmax(x, dim, out=x)``) returns a tensor that lives in memory already seen, so it is not counted; a view
(``transpose``) neither. Masks ``(T, S)`` without batch or head dimensions are smaller than ``min_numel`` and are
left out: the chapter is about the ``B·H·T·S`` tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from ..functional import explicit_attention
from ..validation import check_int, check_positive_int
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed, passed, refuse

Tensor = torch.Tensor

MATRIX_PRODUCTS = frozenset({"linear", "matmul", "__matmul__", "bmm", "mm", "addmm", "baddbmm", "einsum"})
FUSED_ATTENTION = frozenset({"scaled_dot_product_attention", "multi_head_attention_forward"})


@dataclass
class TensorCount:
    """What ``count_new_tensors`` saw: every call by name, and the new ``(..., T, S)`` tensors."""

    calls: list[str] = field(default_factory=list)
    big: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # (function, shape) of each new one
    big_bytes: int = 0
    result: object = None

    @property
    def matrix_products(self) -> int:
        return sum(name in MATRIX_PRODUCTS for name in self.calls)

    @property
    def fused_attention(self) -> int:
        return sum(name in FUSED_ATTENTION for name in self.calls)


class _Watcher(TorchFunctionMode):
    def __init__(self, count: TensorCount, rows: int, cols: int, min_numel: int, inputs: tuple):
        super().__init__()
        self.count, self.rows, self.cols, self.min_numel = count, rows, cols, min_numel
        # the memory the inputs already own is not new (a view of an input is not an allocation); storages seen
        # are kept alive until the end, so that a freed address reused by a later tensor is still counted as new
        self.seen = {t.untyped_storage().data_ptr(): t.untyped_storage() for t in inputs
                     if isinstance(t, Tensor) and t.layout is torch.strided}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "") or str(func)
        if name != "__get__":  # attribute reads such as .shape are not operations
            self.count.calls.append(name)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if (isinstance(t, Tensor) and t.layout is torch.strided and t.device.type != "meta"  # has storage
                    and t.dim() >= 2 and tuple(t.shape[-2:]) == (self.rows, self.cols)
                    and t.numel() >= self.min_numel and t.is_floating_point()):
                address = t.untyped_storage().data_ptr()
                if address not in self.seen:  # in-place results and views share memory already seen
                    self.seen[address] = t.untyped_storage()
                    self.count.big.append((name, tuple(t.shape)))
                    self.count.big_bytes += t.untyped_storage().nbytes()
        return out


def count_new_tensors(fn: Callable, *args, rows: int, cols: int | None = None, min_numel: int | None = None,
                      **kwargs) -> TensorCount:
    """Run ``fn(*args, **kwargs)`` and count the new floating tensors of shape ``(..., rows, cols)`` it creates.

    ``min_numel`` (default ``2 · rows · cols``) leaves out plain ``(T, S)`` masks and score matrices without a
    batch or head dimension. The result of ``fn`` is kept in ``.result``.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function to run, got {type(fn).__name__}")
    rows = check_positive_int("rows", rows)
    cols = rows if cols is None else check_positive_int("cols", cols)
    if min_numel is not None:
        min_numel = check_int("min_numel", min_numel, low=0)
    count = TensorCount()
    inputs = (*args, *kwargs.values())
    with _Watcher(count, rows, cols, 2 * rows * cols if min_numel is None else min_numel, inputs):
        count.result = fn(*args, **kwargs)
    return count


# --- the exercise ---------------------------------------------------------------------------------------------

NOT_A_PAIR = N_("return two tensors, (context, weights), in that order.")
NO_SCALE = N_("you forgot the scaling: multiply q (or the scores) by 1/√Dh, Dh = q.shape[-1].")
DIVIDED_BY_DH = N_("you divided by Dh instead of √Dh: the scale is 1 / math.sqrt(Dh).")
NO_MASK = N_("the future is not masked: block every key s > t with the causal mask before the softmax.")
SOFTMAX_COLUMNS = N_("softmax over the wrong dimension: each query's row must sum to 1, use dim=-1.")
MASKED_DIAGONAL = N_("row 0 is NaN: you blocked the diagonal too, so query 0 may attend to nothing (the GPT-2-sized "
                      "walkthrough's slip). A query may attend to itself: mha_lib.causal_mask(T) keeps the diagonal.")
CONTEXT_WRONG = N_("your weights are right but the context is not: it is weights @ v.")
TOO_MANY = N_("right values, but your function created {n} tensors of shape (..., T, S) ({what}); the weights it "
               "returns are the only one it needs. Scale q instead of the scores, then write the mask and the "
               "softmax in place: scores.masked_fill_(...), torch.softmax(scores, dim=-1, out=scores).")


def _lean_reference(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    return explicit_attention(q, k, v, is_causal=True)


def _weights_mistakes(q: Tensor, k: Tensor) -> dict[str, Tensor]:
    T, dh = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1)  # (..., T, S)
    blocked = ~torch.ones(T, T, dtype=torch.bool).tril()
    return {
        NO_SCALE: torch.softmax(scores.masked_fill(blocked, -math.inf), dim=-1),
        DIVIDED_BY_DH: torch.softmax((scores / dh).masked_fill(blocked, -math.inf), dim=-1),
        NO_MASK: torch.softmax(scores / math.sqrt(dh), dim=-1),
        SOFTMAX_COLUMNS: torch.softmax((scores / math.sqrt(dh)).masked_fill(blocked, -math.inf), dim=-2),
    }


def check_lean_attention(student_fn: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]) -> Feedback:
    """``student_fn(q, k, v)`` with ``q, k, v (B, H, T, Dh)`` must return ``(context, weights)`` of *causal*
    scaled dot-product attention, and create at most one new ``(B, H, T, T)`` tensor while doing it (run
    without autograd, as at inference)."""
    name = "lean_attention"
    generator = torch.Generator().manual_seed(9)  # a CPU generator: the same numbers on every machine
    B, H, T, Dh = 2, 3, 7, 4  # T != Dh, so that a (T, T) tensor cannot be confused with a (T, Dh) one
    q, k, v = (torch.randn(B, H, T, Dh, generator=generator) for _ in range(3))
    with torch.no_grad():
        expected_context, expected_weights = _lean_reference(q, k, v)  # before the call
        mistakes = _weights_mistakes(q, k)
        count = count_new_tensors(attempt, name, student_fn, q, k, v, rows=T)  # attempt hands over copies
        answer = count.result
        if isinstance(answer, Feedback):
            return answer
        if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
            return failed(name, NOT_A_PAIR)
        context, weights = answer
        for part, expected in ((weights, expected_weights), (context, expected_context)):
            refused = refuse(name, part, expected)  # not a tensor, complex, sparse, integer
            if refused is not None:  # a Feedback is falsy when failed: test for None
                return refused
        row0_nan = weights.shape == expected_weights.shape and bool(torch.isnan(weights[..., 0, :]).all())
        if row0_nan:  # compare() would stop at "contains NaN"; this NaN has a known cause
            return failed(name, MASKED_DIAGONAL)
        verdict = compare(name, weights, expected_weights, mistakes=mistakes)
        if not verdict:
            return failed(name, _("(the weights) {message}").format(message=verdict.message))
        verdict = compare(name, context, expected_context)
        if not verdict:
            return failed(name, CONTEXT_WRONG if isinstance(context, Tensor) and context.shape ==
                          expected_context.shape else _("(the context) {message}").format(message=verdict.message))
    if len(count.big) > 1:
        what = ", ".join(function for function, _ in count.big)
        return failed(name, _(TOO_MANY).format(n=len(count.big), what=what))
    return passed(name, N_("correct, and lean: the weights are the only (B, H, T, T) tensor your function created."))


__all__ = ["TensorCount", "check_lean_attention", "count_new_tensors"]
