"""Chapter 16's checkers: they pass the right answers written several ways, name each mistake they claim to know,
wait for the stub, and never say "correct" to a wrong or hostile answer.

Every wrong answer below is written the way a student would write it (not built from the checker's own
reference tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import math

import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch16_a_state_instead_of_a_cache as ch16


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_delta_step --------------------------------------------------------------------------------------------

def step_solution(S, k, v, beta, g):
    S = torch.exp(g) * S  # decay first
    return S + beta * torch.outer(k, v - S.T @ k)


def step_by_hand(S, k, v, beta, g):  # the same with the expanded form S − β k kᵀS + β k vᵀ
    S = S * g.exp()
    k = k[:, None]
    return S - beta * k @ (k.T @ S) + beta * k @ v[None, :]


WRONG_STEP = {
    "that is linear attention's write": lambda S, k, v, b, g: g.exp() * S + b * torch.outer(k, v),
    "you decayed the state after the write": lambda S, k, v, b, g: g.exp() * (S + b * torch.outer(k, v - S.T @ k)),
    "you left out the decay": lambda S, k, v, b, g: S + b * torch.outer(k, v - S.T @ k),
    "you multiplied the state by g itself": lambda S, k, v, b, g: step_solution(S * g, k, v, b, torch.tensor(0.0)),
    "computed the correction from the state before the decay":
        lambda S, k, v, b, g: g.exp() * S + b * torch.outer(k, v - S.T @ k),
    "you subtracted the correction": lambda S, k, v, b, g: (lambda D: D - b * torch.outer(k, v - D.T @ k))(g.exp() * S),
    "you left out β": lambda S, k, v, b, g: step_solution(S, k, v, torch.tensor(1.0), g),
    "you read S k instead of Sᵀ k": lambda S, k, v, b, g: (lambda D: D + b * torch.outer(k, v - D @ k))(g.exp() * S),
    "your outer product is the wrong way round":
        lambda S, k, v, b, g: (lambda D: D + b * torch.outer(v - D.T @ k, k))(g.exp() * S),
}


def test_delta_step_accepts_the_solution_written_two_ways():
    for solution in (step_solution, step_by_hand):
        feedback = ch16.check_delta_step(solution)
        assert feedback.passed, str(feedback)
    assert str(ch16.check_delta_step(step_solution)) == f"{PASS_MARK} delta_step: correct."


@pytest.mark.parametrize("phrase", list(WRONG_STEP))
def test_delta_step_names_the_mistake(phrase):
    feedback = ch16.check_delta_step(WRONG_STEP[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert str(feedback).startswith(FAIL_MARK)


def test_delta_step_agrees_with_the_library_over_several_tokens():
    torch.manual_seed(0)
    k = torch.nn.functional.normalize(torch.randn(1, 1, 5, 4), dim=-1)
    v, beta, g = torch.randn(1, 1, 5, 3), torch.rand(1, 1, 5), -torch.rand(1, 1, 5)
    _out, state = mha_lib.delta_rule(k, k, v, beta, g=g, output_final_state=True)
    S = torch.zeros(4, 3)
    for t in range(5):
        S = step_solution(S, k[0, 0, t], v[0, 0, t], beta[0, 0, t], g[0, 0, t])
    assert torch.allclose(S, state[0, 0], atol=1e-6)


def test_delta_step_waits_for_the_stub():
    feedback = ch16.check_delta_step(_stub)
    assert not feedback.passed and not feedback.attempted and str(feedback).startswith(TODO_MARK)


# --- check_state_bytes -------------------------------------------------------------------------------------------

def state_solution(config, tokens, bytes_per_element):
    linear = config.layer_types.count("linear_attention")
    return (linear * config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim
            * bytes_per_element)


def _sizes(c, per_layer):
    return sum(per_layer(c) for kind in c.layer_types if kind == "linear_attention")


WRONG_STATE = {
    "you multiplied by the number of tokens": lambda c, t, b: state_solution(c, t, b) * t,
    "you counted every layer": lambda c, t, b: len(c.layer_types) * c.linear_num_value_heads
    * c.linear_key_head_dim * c.linear_value_head_dim * b,
    "you counted the key heads": lambda c, t, b: _sizes(
        c, lambda c: c.linear_num_key_heads * c.linear_key_head_dim * c.linear_value_head_dim) * b,
    "you counted two matrices per head": lambda c, t, b: 2 * state_solution(c, t, b),
    "your state is not Dk × Dv": lambda c, t, b: _sizes(
        c, lambda c: c.linear_num_value_heads * c.linear_key_head_dim ** 2) * b,
    "you counted bits": lambda c, t, b: 8 * state_solution(c, t, b),
}


def test_state_bytes_accepts_an_int_a_float_or_a_tensor_and_agrees_with_kv_cache_bytes():
    assert ch16.check_state_bytes(state_solution).passed
    assert ch16.check_state_bytes(lambda c, t, b: float(state_solution(c, t, b))).passed
    assert ch16.check_state_bytes(lambda c, t, b: torch.tensor(state_solution(c, t, b))).passed
    qwen = mha_lib.HYBRID_CONFIGS["qwen3-next-80b-a3b"]  # the library's published config, as a student reads it
    config = ch16.hybrid_config(["linear_attention" if k == "linear" else "full_attention" for k in qwen.layer_types],
                                16, 32, 128, 128)
    no_conv = qwen.linear._replace(conv_size=None)  # the state alone, without the conv's inputs
    only_states = list(qwen.layer_types).count("linear") * no_conv.nbytes()
    assert state_solution(config, 32768, 2) == only_states


@pytest.mark.parametrize("phrase", list(WRONG_STATE))
def test_state_bytes_names_the_mistake(phrase):
    feedback = ch16.check_state_bytes(WRONG_STATE[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


@pytest.mark.parametrize("answer, phrase", [
    (math.nan, "a finite whole number"), (2.5, "a finite whole number"), ("65536", "expected a number (an int), got str"),
    (None, "got NoneType"), (10**400, "a number of 401 digits"), (-1, "you returned -1"),
])
def test_state_bytes_answers_that_are_not_counts(answer, phrase):
    feedback = ch16.check_state_bytes(lambda c, t, b: answer)
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


# --- check_form_for ----------------------------------------------------------------------------------------------

def form_solution(tokens, chunk_size):
    return "recurrent" if tokens == 1 else "chunked"


def test_form_for_accepts_either_form_between_one_token_and_a_chunk():
    assert ch16.check_form_for(form_solution).passed
    assert ch16.check_form_for(lambda t, c: "recurrent" if t < c else "chunked").passed


@pytest.mark.parametrize("student, phrase", [
    (lambda t, c: "chunked", "for a single token you chose \"chunked\""),
    (lambda t, c: "recurrent", "for 4,096 tokens at once you chose \"recurrent\""),
    (lambda t, c: "Recurrent" if t == 1 else "chunked", "return one of the strings"),
    (lambda t, c: 0, "got int"),
    (lambda t, c: ("recurrent",), "got tuple"),
])
def test_form_for_names_the_mistake(student, phrase):
    feedback = ch16.check_form_for(student)
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


def test_the_library_decodes_one_token_by_the_recurrence_and_both_forms_agree():
    torch.manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(1, 2, 70, 8, dtype=torch.float64), dim=-1) for _ in range(2))
    v, beta, g = torch.randn(1, 2, 70, 8, dtype=torch.float64), torch.rand(1, 2, 70, dtype=torch.float64), \
        -torch.rand(1, 2, 70, dtype=torch.float64)
    a, sa = mha_lib.delta_rule(q, k, v, beta, g=g, output_final_state=True)
    b, sb = mha_lib.delta_rule(q, k, v, beta, g=g, chunk_size=64, output_final_state=True)
    assert torch.allclose(a, b, atol=1e-10) and torch.allclose(sa, sb, atol=1e-10)


@pytest.mark.parametrize("check", [ch16.check_delta_step, ch16.check_state_bytes, ch16.check_form_for])
def test_every_checker_waits_for_the_stub_and_survives_hostile_answers(check):
    assert not check(_stub).attempted
    for hostile in (lambda *a: None, lambda *a: (torch.zeros(1),), lambda *a: 1 / 0, lambda *a: torch.tensor(float("nan"))):
        feedback = check(hostile)
        assert not feedback.passed and feedback.attempted, str(feedback)
    assert not check("not a function").passed
