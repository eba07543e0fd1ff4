"""Instant feedback for the chapters' exercises.

Each chapter has a module here (``ch01_single_head``, ``ch02_stacking_heads``, ...) whose ``check_*`` functions
take the student's function, run it on fresh inputs and compare it with ``mha_lib``'s own answer. When the answer
is wrong, they try the mistakes students usually make and name the one that matches, so the message says
*what* went wrong ("you divided by √D instead of √Dh"), not just that something did.

A checker returns a :class:`Feedback`. It is truthy when the answer is right and prints as one readable
paragraph, so a notebook cell that ends with ``check_something(my_function)`` shows the verdict. An unfinished
stub (``raise NotImplementedError``) is reported as "not attempted yet" rather than as an error.

Writing a checker::

    def check_scaled_scores(student_fn) -> Feedback:
        q, k = _inputs()
        answer = attempt("scaled_scores", student_fn, q, k)
        if isinstance(answer, Feedback):          # not attempted, or it raised
            return answer
        return compare("scaled_scores", answer, q @ k.mT / q.shape[-1] ** 0.5,
                       mistakes={"you forgot to divide by √Dh": q @ k.mT})
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

PASS_MARK = "✅"
FAIL_MARK = "❌"
TODO_MARK = "⏳"


@dataclass(frozen=True)
class Feedback:
    """The verdict of one check: ``passed`` plus the message a student reads."""

    exercise: str
    passed: bool
    message: str
    attempted: bool = True

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        mark = PASS_MARK if self.passed else (FAIL_MARK if self.attempted else TODO_MARK)
        return f"{mark} {self.exercise}: {self.message}"

    __repr__ = __str__  # a notebook shows the verdict, not a dataclass dump


def passed(exercise: str, message: str = "correct.") -> Feedback:
    return Feedback(exercise, True, message)


def failed(exercise: str, message: str) -> Feedback:
    return Feedback(exercise, False, message)


def attempt(exercise: str, student_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the student's function; turn "not written yet" and crashes into a Feedback instead of a traceback."""
    if not callable(student_fn):
        raise TypeError(f"{exercise}: expected your function, got {type(student_fn).__name__}")
    try:
        return student_fn(*args, **kwargs)
    except NotImplementedError:
        return Feedback(exercise, False, "not attempted yet: replace `raise NotImplementedError` with your code, "
                        "then run this cell again.", attempted=False)
    except Exception as error:  # noqa: BLE001 - any crash is feedback for the student
        return failed(exercise, f"your function raised {type(error).__name__}: {error}")


def compare(
    exercise: str,
    answer: Any,
    expected: torch.Tensor,
    *,
    mistakes: Mapping[str, torch.Tensor] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    success: str = "correct.",
) -> Feedback:
    """Compare a student's tensor with the expected one and, when it differs, name the mistake it matches.

    ``mistakes`` maps a message ("you forgot the scaling") to the tensor that mistake produces; the first one
    that the answer equals is reported. Shapes are compared first, since a wrong shape is the most common slip.
    """
    if not isinstance(answer, torch.Tensor):
        return failed(exercise, f"expected a torch.Tensor, got {type(answer).__name__}.")
    candidates = dict(mistakes or {})
    if answer.shape != expected.shape:
        for message, wrong in candidates.items():
            if wrong.shape == answer.shape and _close(answer, wrong, atol, rtol):
                return failed(exercise, f"{message} (got shape {tuple(answer.shape)}, "
                                        f"expected {tuple(expected.shape)}).")
        return failed(exercise, f"wrong shape: got {tuple(answer.shape)}, expected {tuple(expected.shape)}.")
    if not torch.isfinite(answer).all() and torch.isfinite(expected).all():
        return failed(exercise, "your result contains NaN or ±inf; the expected one has none.")
    if _close(answer, expected, atol, rtol):
        return passed(exercise, success)
    for message, wrong in candidates.items():
        if wrong.shape == answer.shape and _close(answer, wrong, atol, rtol):
            return failed(exercise, message)
    gap = (answer.detach().double() - expected.detach().double()).abs().max().item()
    return failed(exercise, f"right shape {tuple(expected.shape)}, wrong values (largest difference {gap:.3g}).")


def _close(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.dtype != b.dtype:
        a, b = a.double(), b.double()
    return bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))


__all__ = ["Feedback", "attempt", "compare", "failed", "passed"]
