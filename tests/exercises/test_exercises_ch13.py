"""Chapter 13's checkers: they pass the right answer, name each mistake they claim to know, wait for the stub,
and never say "correct" to a hostile answer.

Every wrong answer below is written the way a student would write it (not built from the checker's own
reference tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import math

import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK, Feedback
from mha_lib.exercises import ch13_rotary_positions_and_windows as ch13
from mha_lib.llm.rotary import receptive_field


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_apply_rope ---------------------------------------------------------------------------------------------


def _cos_sin(positions, Dh, theta, exponent=2):
    speeds = 1.0 / theta ** (torch.arange(0, Dh // 2, dtype=torch.float32) * exponent / Dh)  # (Dh/2,)
    angles = positions.float()[:, None] * speeds  # (T, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, Dh)
    return angles.cos(), angles.sin()


def _half_turn(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-x2, x1], dim=-1)


def rope_solution(x, positions, theta):
    cos, sin = _cos_sin(positions, x.shape[-1], theta)
    return x * cos + _half_turn(x) * sin


def gpt_j(x, positions, theta):
    cos, sin = _cos_sin(positions, x.shape[-1], theta)
    cos, sin = cos[:, : x.shape[-1] // 2], sin[:, : x.shape[-1] // 2]  # (T, Dh/2): one angle per pair
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
    return out


def _with(formula):
    def student(x, positions, theta):
        cos, sin = _cos_sin(positions, x.shape[-1], theta)
        return formula(x, cos, sin)
    return student


def missing_two(x, positions, theta):
    cos, sin = _cos_sin(positions, x.shape[-1], theta, exponent=1)
    return x * cos + _half_turn(x) * sin


WRONG_ROPE = {
    "GPT-J's layout": gpt_j,
    "the wrong way": _with(lambda x, c, s: x * c - _half_turn(x) * s),
    "without multiplying x by cos": _with(lambda x, c, s: x + _half_turn(x) * s),
    "multiplied x by sin without turning it": _with(lambda x, c, s: x * c + x * s),
    "you added a position vector": _with(lambda x, c, s: x + c + s),
    "the exponent needs the 2": missing_two,
    "not the positions you were given": lambda x, p, theta: rope_solution(x, torch.arange(x.shape[-2]), theta),
    "whatever theta was given": lambda x, p, theta: rope_solution(x, p, 10000.0),
    "the positions 0 .. T-1 and θ = 10,000": lambda x, p, theta: rope_solution(x, torch.arange(x.shape[-2]), 10000.0),
    "you returned x unchanged": lambda x, p, theta: x,
}


def test_apply_rope_accepts_the_solution_and_the_library():
    feedback = ch13.check_apply_rope(rope_solution)
    assert feedback.passed, str(feedback)
    assert str(feedback).startswith(f"{PASS_MARK} apply_rope: correct")
    assert ch13.check_apply_rope(mha_lib.apply_rope)
    # the same rotation written with complex numbers (RoFormer's / Meta's form), after reordering the halves
    def complex_form(x, positions, theta):
        half = x.shape[-1] // 2
        z = torch.complex(x[..., :half], x[..., half:])  # pair (x[i], x[i + Dh/2]) as one complex number
        speeds = 1.0 / theta ** (torch.arange(0, x.shape[-1], 2, dtype=torch.float32) / x.shape[-1])
        turned = z * torch.polar(torch.ones(()), positions.float()[:, None] * speeds)
        return torch.cat([turned.real, turned.imag], dim=-1)
    assert ch13.check_apply_rope(complex_form)


@pytest.mark.parametrize("phrase", list(WRONG_ROPE))
def test_apply_rope_names_the_mistake(phrase):
    feedback = ch13.check_apply_rope(WRONG_ROPE[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert str(feedback).startswith(FAIL_MARK)


def test_apply_rope_the_gpt_j_message_says_whose_llama_code_pairs_the_halves():
    message = ch13.check_apply_rope(gpt_j).message
    assert "transformers' Llama code (and the checkpoints converted for it) pairs dimension i with i + Dh/2" in message


def test_apply_rope_wrong_values_on_leading_dimensions_get_no_broadcasting_tip():
    both = ch13.check_apply_rope(WRONG_ROPE["the positions 0 .. T-1 and θ = 10,000"]).message
    assert "but not for x of shape (2, 3, 5, 12)" in both and "Tip:" not in both

    def unknown_slip(x, positions, theta):  # right on the first case, wrong values (not a named slip) on the second
        return rope_solution(x, positions, theta) * (1.0 if x.ndim == 2 else 1.5)
    feedback = ch13.check_apply_rope(unknown_slip)
    assert not feedback.passed and "wrong values" in feedback.message and "Tip:" not in feedback.message


def test_apply_rope_a_call_that_raises_on_leading_dimensions_gets_the_tip():
    def two_dims_only(x, positions, theta):
        T, Dh = x.shape  # raises for (2, 3, 5, 12)
        return rope_solution(x, positions, theta)
    feedback = ch13.check_apply_rope(two_dims_only)
    assert not feedback.passed and feedback.attempted
    assert "your function raised ValueError" in feedback.message and "Tip:" in feedback.message


def test_apply_rope_a_named_slip_gets_no_shape_tip_but_a_hard_coded_shape_does():
    ignored = ch13.check_apply_rope(WRONG_ROPE["not the positions you were given"]).message
    assert "but not for x of shape (2, 3, 5, 12)" in ignored and "Tip:" not in ignored

    def only_2d(x, positions, theta):
        cos, sin = _cos_sin(positions, x.shape[-1], theta)
        return (x.reshape(-1, x.shape[-1]) * cos[:1] + _half_turn(x).reshape(-1, x.shape[-1]) * sin[:1])
    feedback = ch13.check_apply_rope(only_2d)
    assert not feedback.passed and feedback.attempted

    def flattened(x, positions, theta):  # right values, but the leading dimensions flattened away
        return rope_solution(x, positions, theta).reshape(-1, x.shape[-1])
    feedback = ch13.check_apply_rope(flattened)
    assert "wrong shape: got (30, 12)" in feedback.message and "Tip:" in feedback.message, feedback.message


def test_apply_rope_stub_is_not_attempted():
    feedback = ch13.check_apply_rope(_stub)
    assert not feedback.passed and not feedback.attempted
    assert str(feedback).startswith(TODO_MARK)


# --- check_window_mask --------------------------------------------------------------------------------------------


def window_solution(T, W):
    t = torch.arange(T)
    offset = t[:, None] - t[None, :]  # (T, T): how far back key s is
    return (offset >= 0) & (offset < W)


def _offsets(T):
    t = torch.arange(T)
    return t[:, None] - t[None, :]


WRONG_WINDOW = {
    "each query sees W + 1 keys": lambda T, W: (_offsets(T) >= 0) & (_offsets(T) <= W),
    "each query sees only W - 1 keys": lambda T, W: (_offsets(T) >= 0) & (_offsets(T) < W - 1),
    "reaches into the future": lambda T, W: _offsets(T).abs() < W,
    "the window is missing": lambda T, W: torch.ones(T, T, dtype=torch.bool).tril(),
    "you blocked the diagonal": lambda T, W: (_offsets(T) > 0) & (_offsets(T) < W),
    "your mask is inverted": lambda T, W: ~window_solution(T, W),
    "upside down": lambda T, W: window_solution(T, W).T,
}


def test_window_mask_accepts_the_solution_and_the_library():
    feedback = ch13.check_window_mask(window_solution)
    assert feedback.passed, str(feedback)
    assert ch13.check_window_mask(mha_lib.sliding_window_mask)
    # tril minus a lower tril: another common spelling
    assert ch13.check_window_mask(lambda T, W: torch.ones(T, T).tril().bool() & ~torch.ones(T, T).tril(-W).bool())


@pytest.mark.parametrize("phrase", list(WRONG_WINDOW))
def test_window_mask_names_the_mistake(phrase):
    feedback = ch13.check_window_mask(WRONG_WINDOW[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


def test_window_mask_refuses_floats_and_hostile_answers():
    assert "torch.bool" in ch13.check_window_mask(lambda T, W: window_solution(T, W).float()).message
    assert "sparse" in ch13.check_window_mask(lambda T, W: window_solution(T, W).to_sparse()).message
    assert "tuple" in ch13.check_window_mask(lambda T, W: (window_solution(T, W),)).message
    assert not ch13.check_window_mask(lambda T, W: window_solution(6, 3))  # hard-coded size
    assert not ch13.check_window_mask(lambda T, W: Feedback("window_mask", True, "correct."))
    assert not ch13.check_window_mask(_stub).attempted


# --- check_reach --------------------------------------------------------------------------------------------------


def test_the_reach_formula_is_what_the_masks_give():
    for layers, window in ((1, 1), (1, 4), (3, 4), (2, 7), (5, 1), (4, 3)):
        assert receptive_field(layers, window) == layers * (window - 1) + 1


def test_reach_accepts_the_solution_in_several_spellings():
    assert ch13.check_reach(lambda L, W: L * (W - 1) + 1)
    assert ch13.check_reach(lambda L, W: float(L * (W - 1) + 1))
    assert ch13.check_reach(lambda L, W: torch.tensor(L * (W - 1) + 1))
    assert "131,041" in ch13.check_reach(lambda L, W: L * (W - 1) + 1).message


WRONG_REACH = {
    "you counted W new positions per layer": lambda L, W: L * W,
    "you forgot the token itself": lambda L, W: L * (W - 1),
    "windows do not multiply": lambda L, W: W ** L,
    "you answered for one layer": lambda L, W: W,
    "you counted the window as the Mistral 7B paper does": lambda L, W: L * W + 1,
}


@pytest.mark.parametrize("phrase", list(WRONG_REACH))
def test_reach_names_the_mistake(phrase):
    feedback = ch13.check_reach(WRONG_REACH[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


@pytest.mark.parametrize("answer, phrase", [
    (True, "expected a number"), ("12", "expected a number"), (None, "expected a number"),
    (math.nan, "finite whole number"), (math.inf, "finite whole number"), (2.5, "finite whole number"),
    (torch.ones(2), "expected a number"), (10 ** 400, "a number of 401 digits"),
])
def test_reach_hostile_answers_are_wrong_with_a_message(answer, phrase):
    feedback = ch13.check_reach(lambda L, W: answer)
    assert not feedback.passed and feedback.attempted, str(feedback)
    assert phrase in feedback.message, feedback.message


def test_reach_unknown_mistake_names_the_case():
    feedback = ch13.check_reach(lambda L, W: L * (W - 1) + 2)
    assert "for layers = 1, window = 4 you returned 5, expected 4." in feedback.message


# --- every checker: hostile functions ----------------------------------------------------------------------------


CHECKERS = {
    "apply_rope": (ch13.check_apply_rope, rope_solution),
    "window_mask": (ch13.check_window_mask, window_solution),
    "reach": (ch13.check_reach, lambda L, W: L * (W - 1) + 1),
}


@pytest.mark.parametrize("name", list(CHECKERS))
@pytest.mark.parametrize("error", [SystemExit(3), ZeroDivisionError("x"), MemoryError()],
                         ids=lambda e: type(e).__name__)
def test_any_exception_becomes_feedback(name, error):
    def student(*args):
        raise error
    feedback = CHECKERS[name][0](student)
    assert not feedback.passed and feedback.attempted and f"your function raised {type(error).__name__}" in \
        feedback.message


@pytest.mark.parametrize("name", list(CHECKERS))
def test_not_callable_and_wrong_signature_give_feedback(name):
    check = CHECKERS[name][0]
    assert "expected your function itself" in check(42).message
    assert "cannot be called the way the exercise calls it" in check(lambda a: None).message


@pytest.mark.parametrize("name", ["apply_rope", "window_mask"])
def test_a_correct_answer_that_then_wrecks_its_inputs_still_passes(name):
    check, solution = CHECKERS[name]

    def student(*args):
        answer = solution(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        for a in args:
            if isinstance(a, torch.Tensor):
                a.fill_(7)
        return answer

    assert check(student)


def test_apply_rope_hostile_answers_never_pass():
    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.allclose, torch.equal):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    assert not ch13.check_apply_rope(lambda x, p, t: torch.zeros_like(x).as_subclass(Liar))
    assert "complex" in ch13.check_apply_rope(lambda x, p, t: rope_solution(x, p, t).to(torch.complex64)).message
    assert "NaN" in ch13.check_apply_rope(lambda x, p, t: torch.full_like(x, math.nan)).message
    assert not ch13.check_apply_rope(lambda x, p, t: (rope_solution(x, p, t) * 1e6).long())
    assert ch13.check_apply_rope(lambda x, p, t: rope_solution(x, p, t).double().requires_grad_())

    def zeroing(x, positions, theta):
        x.zero_()
        return rope_solution(x, positions, theta)
    assert not ch13.check_apply_rope(zeroing)
