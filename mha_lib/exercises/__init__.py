"""Instant feedback for the chapters' exercises.

Each chapter has a module here (``ch01_single_head``, ``ch02_stacking_heads``, ...) whose ``check_*`` functions
take the student's function, run it on fresh inputs and compare it with ``mha_lib``'s own answer. When the answer
is wrong, they try the mistakes students usually make and name the one that matches, so the message says
*what* went wrong ("you divided by √D instead of √Dh"), not just that something did.

A checker returns a :class:`Feedback`. It is truthy when the answer is right and prints as one readable
paragraph, so a notebook cell that ends with ``check_something(my_function)`` shows the verdict. An unfinished
stub (``raise NotImplementedError``) is reported as "not attempted yet" rather than as an error.

The checkers cannot be fooled, and never crash, because they all go through two functions: ``attempt`` (calls the
student's function on private copies of the inputs and turns every failure into a Feedback) and ``compare``
(refuses tuples, complex, sparse and non-finite answers with a message, and never names a mistake that gives
the right answer on its inputs). Each checker computes its expected answer before calling the student.

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

import copy as copy_module
import inspect
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from ..language import N_, gettext as _, ngettext

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
        # the separator is translated too: Chinese puts a full-width colon between the name and the message
        return _("{mark} {exercise}: {message}").format(mark=mark, exercise=self.exercise, message=self.message)

    __repr__ = __str__  # a notebook shows the verdict, not a dataclass dump


def passed(exercise: str, message: str = N_("correct.")) -> Feedback:
    """A right answer. ``message`` is shown in the current language (a message named with ``N_`` is translated
    here; one already built with ``_(...).format(...)`` is shown as it is)."""
    return Feedback(exercise, True, _(message))


def failed(exercise: str, message: str) -> Feedback:
    """A wrong answer; ``message`` is translated as in :func:`passed`."""
    return Feedback(exercise, False, _(message))


NOT_CALLABLE = N_("expected your function itself (something you can call), got {kind}. Pass the function without "
                   "calling it: check(my_function), not check(my_function(...)).")
# singular and plural (mha_lib.language.ngettext picks one for n)
WRONG_PARAMETERS = ("your function cannot be called the way the exercise calls it, with {n} argument ({args}): "
                    "{error}. Give it exactly the parameters the exercise names.",
                    "your function cannot be called the way the exercise calls it, with {n} arguments ({args}): "
                    "{error}. Give it exactly the parameters the exercise names.")
RETURNED_FEEDBACK = N_("your function returned a Feedback (a checker's verdict), not an answer: return the answer.")
NOT_A_TENSOR = N_("expected a torch.Tensor, got {kind}.")
TUPLE_ANSWER = ("expected a torch.Tensor, got {kind} ({n} item): return the one result tensor only, not several "
                "values in a {kind}.",
                "expected a torch.Tensor, got {kind} ({n} items): return the one result tensor only, not several "
                "values in a {kind}.")
COMPLEX_ANSWER = N_("your result is complex (dtype {dtype}): every number here is real. Did a complex value sneak in "
                     "(torch.complex, a 1j, torch.fft)?")
SPARSE_ANSWER = N_("your result is a sparse tensor (layout {layout}): return an ordinary dense tensor "
                    "(.to_dense()); the checker compares every entry.")
NO_VALUES = N_("your result lives on the 'meta' device: it has a shape but no values to check.")
NOT_FLOATING = N_("your result has dtype {dtype}, expected floating-point numbers ({expected}): an integer or bool "
                   "tensor cannot hold these values. Compute with floats.")
NOT_FINITE = N_("your result contains NaN or ±inf; the expected one has none.")


def attempt(exercise: str, student_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the student's function on private copies of the inputs; return its answer or a :class:`Feedback`.

    Nothing the student does can change what the checker compares with, or crash the checker:

    * every tensor argument is a fresh copy (``detach().clone()``, modules a ``deepcopy``), so in-place edits
      such as ``w_q /= math.sqrt(Dh)`` change nothing outside the function;
    * something that is not callable, or a function whose parameters do not fit the call, gives a Feedback;
    * any exception, ``SystemExit`` included, becomes a Feedback (only ``KeyboardInterrupt`` goes through, so
      that the stop button still stops); a bare ``raise NotImplementedError`` (the stub) is "not attempted yet",
      but a NotImplementedError from torch itself (an operation a sparse tensor lacks) is a real error;
    * the notebook's random state, default dtype and grad mode are the same after the call as before.
    """
    if not callable(student_fn):
        return failed(exercise, _(NOT_CALLABLE).format(kind=_describe(student_fn)))
    problem = _signature_problem(student_fn, args, kwargs)
    if problem:
        return failed(exercise, problem)
    args, kwargs = _private_copy(args), _private_copy(kwargs)
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    try:
        with torch.random.fork_rng(devices=[]):
            answer = student_fn(*args, **kwargs)
    except KeyboardInterrupt:
        raise
    except NotImplementedError as error:
        if _is_stub(error):
            return Feedback(exercise, False, _("not attempted yet: replace `raise NotImplementedError` with your "
                                               "code, then run this cell again."), attempted=False)
        return failed(exercise, _("your function raised NotImplementedError: {error}").format(error=_short(error)))
    except BaseException as error:  # noqa: BLE001 - any crash (SystemExit too) is feedback for the student
        return failed(exercise, _("your function raised {kind}: {error}").format(kind=type(error).__name__,
                                                                                   error=_short(error)))
    finally:
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
    if isinstance(answer, Feedback):
        return failed(exercise, RETURNED_FEEDBACK)
    return answer


def as_count(answer: Any) -> int | float | None:
    """A student's count (parameters, bytes, positions) as an exact int: an int, a whole float or a 1-element
    tensor holding one. A float that is NaN, infinite or has a fraction comes back as that float, for the checker
    to say what is wrong in its own words; anything that is not a real number gives None. Ints stay exact,
    however large (``float(10**400)`` would overflow)."""
    if isinstance(answer, torch.Tensor):
        if answer.numel() != 1 or answer.layout is not torch.strided or answer.is_complex() or \
                answer.device.type == "meta":
            return None
        answer = answer.detach().cpu().item()
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return None
    if isinstance(answer, numbers.Integral):
        return int(answer)
    value = float(answer)
    return int(value) if math.isfinite(value) and value.is_integer() else value


# the messages of every checker whose answer is a count (parameters, bytes, positions)
NOT_A_NUMBER = N_("expected a number (an int), got {kind}.")
NOT_WHOLE_BYTES = N_("your function returned {value}: a number of bytes is a finite whole number.")


def count_answers(exercise: str, student_fn: Callable[..., Any], cases, *, not_whole: str | Callable = NOT_WHOLE_BYTES,
                  where: Callable[..., str] | None = None) -> "list[int] | Feedback":
    """The student's counts for each argument tuple in ``cases``, as exact ints, or the Feedback that ends the
    check: the function's own failure (``attempt``), an answer that is not a number, or one that is not a finite
    whole number: ``not_whole`` formatted with ``value`` (the answer), or a function of the float that gives the
    message. ``where(message, *case)``, when given, says for which case (``"for d_model=8, ...: {message}"``)."""
    answers = []
    for args in cases:
        answer = attempt(exercise, student_fn, *args)
        if isinstance(answer, Feedback):
            return answer
        value = as_count(answer)
        if value is None:
            return failed(exercise, _(NOT_A_NUMBER).format(kind=type(answer).__name__))
        if isinstance(value, float):
            message = not_whole(value) if callable(not_whole) else _(not_whole).format(value=answer)
            return failed(exercise, where(message, *args) if where else message)
        answers.append(value)
    return answers


def named_mistake(answers: list, expected: list, tables: "list[Mapping[str, Any]]") -> str | None:
    """The one mistake (a key of ``tables[i]``, which maps each message to what that mistake gives on case i)
    that explains every wrong answer, or None when none does, or several do (the checker cannot tell which slip
    it was, and never names a wrong one). A case the student got right may coincide with the mistake."""
    wrong = [i for i, (value, right) in enumerate(zip(answers, expected)) if value != right]
    named = [message for message in tables[0] if all(answers[i] == tables[i][message] for i in wrong)]
    return named[0] if wrong and len(named) == 1 else None


def shown_count(value: int) -> str:
    """A student's count as the feedback quotes it: with thousands separators, or its length if it is huge."""
    return _("a number of {digits} digits").format(digits=len(str(value))) if len(str(value)) > 30 else f"{value:,}"


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 43 else text}"


def _short(error: BaseException) -> str:
    text = str(error) or _("(no message)")
    return text if len(text) <= 300 else text[:300] + " ..."


def _signature_problem(fn: Callable[..., Any], args: tuple, kwargs: dict) -> str | None:
    """Why ``fn(*args, **kwargs)`` cannot bind (too many or too few parameters), or None."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature: just call them
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        described = [_argument_name(a) for a in args] + [f"{k}=" + _argument_name(v) for k, v in kwargs.items()]
        n = len(described)
        return ngettext("your function cannot be called the way the exercise calls it, with {n} argument ({args}): "
                        "{error}. Give it exactly the parameters the exercise names.",
                        "your function cannot be called the way the exercise calls it, with {n} arguments ({args}): "
                        "{error}. Give it exactly the parameters the exercise names.", n).format(
            n=n, args=", ".join(described), error=error)
    return None


def _argument_name(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return _("a tensor {shape}").format(shape=tuple(value.shape))
    if isinstance(value, (list, tuple)):
        return _("a {kind} of {n}").format(kind=type(value).__name__, n=len(value))
    return type(value).__name__


def _private_copy(value: Any) -> Any:
    """A copy the student may change at will: tensors cloned, modules deep-copied, containers rebuilt."""
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        return copy.requires_grad_() if value.requires_grad else copy
    if isinstance(value, torch.nn.Module):
        return copy_module.deepcopy(value)
    if isinstance(value, tuple):
        items = (_private_copy(v) for v in value)
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a NamedTuple keeps its fields
    if isinstance(value, list):
        return [_private_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _private_copy(v) for k, v in value.items()}
    return value  # numbers, strings, None: immutable


def _is_stub(error: NotImplementedError) -> bool:
    """The notebook's stub (``raise NotImplementedError``, with or without a note) — not one raised by torch."""
    text = str(error)
    if any(marker in text for marker in ("Could not run", "aten::", "backend", "not implemented for")):
        return False  # torch's own "this operation does not exist for this tensor" (sparse, meta, ...)
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is None or _TORCH_DIR not in frame.tb_frame.f_code.co_filename


_TORCH_DIR = str(Path(torch.__file__).parent)


def _answer_problem(answer: Any, expected: torch.Tensor) -> str | None:
    """What makes ``answer`` impossible to compare with ``expected`` (or None): the messages a student reads."""
    if isinstance(answer, (tuple, list)):
        n = len(answer)
        return ngettext("expected a torch.Tensor, got {kind} ({n} item): return the one result tensor only, not "
                        "several values in a {kind}.",
                        "expected a torch.Tensor, got {kind} ({n} items): return the one result tensor only, not "
                        "several values in a {kind}.", n).format(kind=type(answer).__name__, n=n)
    if not isinstance(answer, torch.Tensor):
        return _(NOT_A_TENSOR).format(kind=type(answer).__name__)
    answer = _plain(answer)
    if answer.layout is not torch.strided:
        return _(SPARSE_ANSWER).format(layout=answer.layout)
    if answer.device.type == "meta":
        return NO_VALUES
    if answer.is_complex():
        return _(COMPLEX_ANSWER).format(dtype=answer.dtype)
    if expected.is_floating_point() and not answer.is_floating_point():
        return _(NOT_FLOATING).format(dtype=answer.dtype, expected=expected.dtype)
    return None


def _plain(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a plain ``torch.Tensor``: a subclass cannot override the comparisons (``__torch_function__``,
    a fake ``.shape``) once it is turned back into the base class."""
    if type(x) is torch.Tensor:
        return x
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor.as_subclass(x, torch.Tensor)


def compare(
    exercise: str,
    answer: Any,
    expected: torch.Tensor,
    *,
    mistakes: Mapping[str, torch.Tensor] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    success: str = N_("correct."),
) -> Feedback:
    """Compare a student's tensor with the expected one and, when it differs, name the mistake it matches.

    ``mistakes`` maps a message ("you forgot the scaling") to the tensor that mistake produces; the first one
    that the answer equals is reported. A mistake that gives the expected tensor itself on these inputs is
    dropped: it cannot be told apart, so it must never be named. Shapes are compared first, since a wrong shape
    is the most common slip. Tuples, non-tensors, complex, sparse, integer (for a float answer) and
    non-finite answers are refused with a message; nothing here raises.
    """
    problem = _answer_problem(answer, expected)
    if problem:
        return failed(exercise, problem)
    answer, expected = _plain(answer).detach(), _plain(expected).detach()
    candidates = {}
    for message, wrong in (mistakes or {}).items():
        wrong = _plain(wrong).detach()
        if wrong.shape == expected.shape and _close(wrong, expected, atol, rtol):
            continue  # on these inputs this slip gives the right answer: never report it
        candidates[message] = wrong
    if answer.shape != expected.shape:
        for message, wrong in candidates.items():
            if wrong.shape == answer.shape and _close(answer, wrong, atol, rtol):
                return failed(exercise, _("{message} (got shape {got}, expected {expected}).").format(
                    message=_(message), got=tuple(answer.shape), expected=tuple(expected.shape)))
        return failed(exercise, _("wrong shape: got {got}, expected {expected}.").format(
            got=tuple(answer.shape), expected=tuple(expected.shape)))
    if not bool(_isfinite(answer.cpu()).all()) and bool(_isfinite(expected.cpu()).all()):
        for message, wrong in candidates.items():  # a known slip that makes NaN in the same places
            if not bool(_isfinite(wrong.cpu()).all()) and _close(answer, wrong, atol, rtol):
                return failed(exercise, message)
        return failed(exercise, NOT_FINITE)
    if _close(answer, expected, atol, rtol):
        return passed(exercise, success)
    for message, wrong in candidates.items():
        if wrong.shape == answer.shape and _close(answer, wrong, atol, rtol):
            return failed(exercise, message)
    gap = (answer.cpu().double() - expected.cpu().double()).abs().max().item()
    return failed(exercise, _("right shape {shape}, wrong values (largest difference {gap:.3g}).").format(
        shape=tuple(expected.shape), gap=gap))


# Taken once, at import: a student's cell that rebinds torch.allclose or torch.isfinite cannot change a verdict.
_allclose, _isfinite = torch.allclose, torch.isfinite


def _close(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    """Equal within tolerance, NaN matching NaN; False (never an error) for shapes or dtypes that cannot match."""
    a, b = _plain(a).detach().cpu(), _plain(b).detach().cpu()
    if a.shape != b.shape or a.layout is not torch.strided or b.layout is not torch.strided:
        return False
    if a.is_complex() or b.is_complex():
        return False
    return bool(_allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True))


def refuse(exercise: str, answer: Any, expected: torch.Tensor) -> Feedback | None:
    """The Feedback for an answer that cannot be compared at all (tuple, complex, sparse, ...), or None.

    For checkers that inspect an answer (its NaN pattern, its dtype) before handing it to ``compare``.
    """
    problem = _answer_problem(answer, expected)
    return failed(exercise, problem) if problem else None


__all__ = ["Feedback", "NOT_A_NUMBER", "NOT_WHOLE_BYTES", "as_count", "attempt", "compare", "count_answers", "failed",
           "named_mistake", "passed", "refuse", "shown_count"]
