"""Chapter 1's checkers: they pass the right answer, name each mistake they claim to know, and wait for the stub.

Every wrong answer below is written the way a student would write it (not built from the checker's own
reference tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import math

import pytest
import torch

from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch01_single_head as ch01


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_attention_weights ----------------------------------------------------------------------------------


def weights_solution(q, k):
    scores = q @ k.transpose(-2, -1)  # (..., T, Dh) @ (..., Dh, S) -> (..., T, S)
    return torch.softmax(scores / math.sqrt(q.shape[-1]), dim=-1)


WRONG_WEIGHTS = {
    "forgot to transpose k": lambda q, k: torch.softmax(q @ k / math.sqrt(q.shape[-1]), dim=-1),
    "you computed k @ qᵀ": lambda q, k: torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1),
    "you forgot the scaling": lambda q, k: torch.softmax(q @ k.transpose(-2, -1), dim=-1),
    "divided by Dh instead of √Dh": lambda q, k: torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], dim=-1),
    "multiplied by √Dh instead of dividing": lambda q, k: torch.softmax(
        q @ k.transpose(-2, -1) * q.shape[-1] ** 0.5, dim=-1),
    "scaled after the softmax": lambda q, k: torch.softmax(q @ k.transpose(-2, -1), dim=-1) / q.shape[-1] ** 0.5,
    "softmax over the wrong dimension": lambda q, k: torch.softmax(
        q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-2),
    "you returned the scaled scores": lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5,
    "you returned the raw scores": lambda q, k: q @ k.transpose(-2, -1),
}


def test_attention_weights_accepts_the_solution():
    feedback = ch01.check_attention_weights(weights_solution)
    assert feedback.passed and bool(feedback)
    assert str(feedback).startswith(f"{PASS_MARK} attention_weights: correct")


def test_attention_weights_accepts_the_library_and_other_correct_spellings():
    import mha_lib

    assert ch01.check_attention_weights(lambda q, k: mha_lib.masked_softmax(
        mha_lib.scale_scores(mha_lib.attention_scores(q, k), q.shape[-1])))
    assert ch01.check_attention_weights(lambda q, k: (q @ k.mT * q.shape[-1] ** -0.5).softmax(-1))


@pytest.mark.parametrize("phrase", list(WRONG_WEIGHTS))
def test_attention_weights_names_the_mistake(phrase):
    feedback = ch01.check_attention_weights(WRONG_WEIGHTS[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert str(feedback).startswith(FAIL_MARK)


def test_attention_weights_catches_k_dot_T_on_a_batch():
    # right for a 2-D k, but k.T reverses all three dimensions of a batched k
    def with_dot_t(q, k):
        return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)

    with pytest.warns(UserWarning):  # torch deprecates .T on 3-D tensors
        feedback = ch01.check_attention_weights(with_dot_t)
    assert not feedback.passed
    assert "not for a batch" in feedback.message and "raised" in feedback.message
    assert "k.transpose(-2, -1)" in feedback.message


def test_attention_weights_catches_a_hard_coded_scale():
    feedback = ch01.check_attention_weights(lambda q, k: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(5), -1))
    assert not feedback.passed
    assert "not for a batch" in feedback.message and "wrong values" in feedback.message


def test_attention_weights_reports_the_stub_as_not_attempted():
    feedback = ch01.check_attention_weights(_stub)
    assert not feedback.passed and not feedback.attempted
    assert str(feedback).startswith(f"{TODO_MARK} attention_weights: not attempted yet")


def test_attention_weights_reports_a_crash_and_a_non_tensor():
    assert "raised ZeroDivisionError" in ch01.check_attention_weights(lambda q, k: 1 / 0).message
    assert "expected a torch.Tensor, got list" in ch01.check_attention_weights(lambda q, k: [1.0]).message


def test_checkers_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    ch01.check_attention_weights(weights_solution)
    ch01.check_single_head(single_head_solution)
    assert torch.equal(torch.random.get_rng_state(), before)


# --- check_single_head ----------------------------------------------------------------------------------------


def single_head_solution(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (T, D) @ (D, Dh) -> (T, Dh)
    weights = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)  # (T, T)
    return weights @ v  # (T, T) @ (T, Dh) -> (T, Dh)


def _head(x, w_q, w_k, w_v, *, scale=None, dim=-1, swap=False):
    q, k = x @ w_q, x @ w_k
    scores = k @ q.T if swap else q @ k.T
    scale = math.sqrt(q.shape[-1]) if scale is None else scale
    return torch.softmax(scores / scale, dim=dim)


WRONG_HEADS = {
    "you returned the attention weights": lambda x, w_q, w_k, w_v: _head(x, w_q, w_k, w_v),
    "multiplied the weights by x instead of by the values": lambda x, w_q, w_k, w_v: _head(x, w_q, w_k, w_v) @ x,
    "you divided by √D, the width of the input": lambda x, w_q, w_k, w_v: _head(
        x, w_q, w_k, w_v, scale=math.sqrt(x.shape[-1])) @ (x @ w_v),
    "you forgot the scaling": lambda x, w_q, w_k, w_v: _head(x, w_q, w_k, w_v, scale=1.0) @ (x @ w_v),
    "divided by Dh instead of √Dh": lambda x, w_q, w_k, w_v: _head(
        x, w_q, w_k, w_v, scale=w_q.shape[-1]) @ (x @ w_v),
    "softmax over the wrong dimension": lambda x, w_q, w_k, w_v: _head(x, w_q, w_k, w_v, dim=0) @ (x @ w_v),
    "you computed k @ qᵀ": lambda x, w_q, w_k, w_v: _head(x, w_q, w_k, w_v, swap=True) @ (x @ w_v),
    "you multiplied Aᵀ by V": lambda x, w_q, w_k, w_v: _head(x, w_q, w_k, w_v).T @ (x @ w_v),
}


def test_single_head_accepts_the_solution_and_the_library():
    import mha_lib

    assert ch01.check_single_head(single_head_solution)
    assert ch01.check_single_head(lambda x, w_q, w_k, w_v: mha_lib.explicit_attention(x @ w_q, x @ w_k, x @ w_v)[0])


@pytest.mark.parametrize("phrase", list(WRONG_HEADS))
def test_single_head_names_the_mistake(phrase):
    feedback = ch01.check_single_head(WRONG_HEADS[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


def test_single_head_reports_the_stub_as_not_attempted():
    feedback = ch01.check_single_head(_stub)
    assert not feedback.attempted and "not attempted yet" in feedback.message


def test_single_head_reports_an_unknown_mistake_with_the_largest_difference():
    feedback = ch01.check_single_head(lambda x, w_q, w_k, w_v: single_head_solution(x, w_q, w_k, w_v) + 0.1)
    assert not feedback.passed
    assert feedback.message == "right shape (5, 3), wrong values (largest difference 0.1)."


# --- the notebook's hidden solutions --------------------------------------------------------------------------


def notebook_solutions(name: str) -> dict:
    """Run the ```python blocks of a notebook's "Solution" cells and return what they define."""
    import re
    from pathlib import Path

    import nbformat

    import mha_lib

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / name, as_version=4)
    namespace = {"math": math, "torch": torch, "nn": torch.nn, "mha_lib": mha_lib}
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "<summary>Solution</summary>" in cell.source:
            for block in re.findall(r"```python\n(.*?)```", cell.source, flags=re.DOTALL):
                exec(block, namespace)  # noqa: S102 - our own notebook's text
    return namespace


def test_the_notebooks_hidden_solutions_pass():
    solutions = notebook_solutions("01_single_head_attention.ipynb")
    assert ch01.check_attention_weights(solutions["attention_weights"])
    assert ch01.check_single_head(solutions["single_head"])
