"""Chapter 3's checkers: the right answer passes, each mistake they claim to recognise is named, a stub is "not
attempted", and checking leaves the notebook's random numbers alone."""

from __future__ import annotations

import pytest
import torch

from mha_lib import merge_heads, split_heads
from mha_lib.exercises.ch03_weight_splitting import (
    FIX_MERGE,
    FIX_SPLIT,
    NOT_CONTIGUOUS,
    check_merge_heads,
    check_split_heads,
    check_stack_head_weights,
)


def stub(*args):
    raise NotImplementedError  # your code here


def _split_transposing(i, j):
    def split(x, num_heads):
        B, T, D = x.shape
        return x.view(B, T, num_heads, D // num_heads).transpose(i, j)

    return split


# --- split_heads ----------------------------------------------------------------------------------------------


def split_solution(x, num_heads):
    B, T, D = x.shape
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)  # (B, T, H, Dh) -> (B, H, T, Dh)


def split_with_reshape_and_permute(x, num_heads):
    return x.reshape(x.shape[0], x.shape[1], num_heads, -1).permute(0, 2, 1, 3)  # D2L's spelling


@pytest.mark.parametrize("fn", [split_solution, split_with_reshape_and_permute, split_heads])
def test_split_heads_accepts_correct_answers(fn):
    feedback = check_split_heads(fn)
    assert feedback.passed and feedback.attempted, str(feedback)
    assert str(feedback).startswith("✅ split_heads: correct")


SPLIT_MISTAKES = [
    pytest.param(lambda x, H: x.view(x.shape[0], H, x.shape[1], -1), "you viewed straight to (B, H, T, Dh)",
                 id="view-straight-to-BHTDh"),
    pytest.param(lambda x, H: x.view(x.shape[0], x.shape[1], H, -1), "you forgot the transpose",
                 id="no-transpose"),
    pytest.param(lambda x, H: x.view(x.shape[0], x.shape[1], -1, H).permute(0, 3, 1, 2),
                 "you cut the features as (Dh, H) instead of (H, Dh)", id="strided-heads"),
    pytest.param(_split_transposing(2, 3), "you transposed dimensions 2 and 3 (H and Dh)", id="transpose-2-3"),
    pytest.param(_split_transposing(1, 3), "you transposed dimensions 1 and 3 (T and Dh)", id="transpose-1-3"),
    pytest.param(_split_transposing(0, 1), "you transposed dimensions 0 and 1 (B and T)", id="transpose-0-1"),
    pytest.param(lambda x, H: x.transpose(1, 2).view(x.shape[0], H, x.shape[1], -1),
                 NOT_CONTIGUOUS + FIX_SPLIT, id="view-after-transpose"),
]


@pytest.mark.parametrize(("fn", "named"), SPLIT_MISTAKES)
def test_split_heads_names_the_mistake(fn, named):
    feedback = check_split_heads(fn)
    assert not feedback.passed and feedback.attempted
    assert named in feedback.message, feedback.message


def test_split_heads_shape_mistakes_also_print_the_shapes():
    message = check_split_heads(lambda x, H: x.view(x.shape[0], x.shape[1], H, -1)).message
    assert message.endswith("(got shape (2, 5, 3, 4), expected (2, 3, 5, 4)).")


def test_split_heads_unknown_wrong_values_are_reported_as_such():
    feedback = check_split_heads(lambda x, H: split_solution(x, H) * 2)
    assert not feedback.passed
    assert feedback.message.startswith("right shape (2, 3, 5, 4), wrong values")


def test_split_heads_hard_coded_sizes_crash_into_feedback():
    feedback = check_split_heads(lambda x, H: x.view(1, 5, 3, 4))
    assert not feedback.passed and "your function raised RuntimeError" in feedback.message


# --- merge_heads ----------------------------------------------------------------------------------------------


def merge_solution(heads):
    B, H, T, Dh = heads.shape
    return heads.transpose(1, 2).contiguous().view(B, T, H * Dh)  # (B, T, H, Dh) -> (B, T, D)


@pytest.mark.parametrize(
    "fn",
    [merge_solution, merge_heads, lambda h: torch.cat(h.unbind(1), dim=-1),
     lambda h: h.transpose(1, 2).reshape(h.shape[0], h.shape[2], -1)],
)
def test_merge_heads_accepts_correct_answers(fn):
    feedback = check_merge_heads(fn)
    assert feedback.passed, str(feedback)


MERGE_MISTAKES = [
    pytest.param(lambda h: h.transpose(1, 2).view(h.shape[0], h.shape[2], -1), NOT_CONTIGUOUS + FIX_MERGE,
                 id="no-contiguous"),
    pytest.param(lambda h: h.reshape(h.shape[0], h.shape[2], -1),
                 "you flattened (B, H, T, Dh) straight to (B, T, D)", id="no-transpose"),
    pytest.param(lambda h: h.transpose(1, 2), "did not glue them together", id="no-flatten"),
    pytest.param(lambda h: h.transpose(2, 3).reshape(h.shape[0], h.shape[2], -1), "you transposed T and Dh",
                 id="transpose-2-3"),
    pytest.param(lambda h: h.permute(0, 2, 3, 1).reshape(h.shape[0], h.shape[2], -1), "you put Dh before H",
                 id="interleaved"),
    pytest.param(lambda h: torch.cat(h.unbind(1), dim=1), "along the token axis", id="cat-tokens"),
]


@pytest.mark.parametrize(("fn", "named"), MERGE_MISTAKES)
def test_merge_heads_names_the_mistake(fn, named):
    feedback = check_merge_heads(fn)
    assert not feedback.passed and feedback.attempted
    assert named in feedback.message, feedback.message


# --- stack_head_weights ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [lambda ws: torch.cat(ws, dim=0), lambda ws: torch.cat(ws)])
def test_stack_head_weights_accepts_correct_answers(fn):
    assert check_stack_head_weights(fn).passed


STACK_MISTAKES = [
    pytest.param(lambda ws: torch.cat(ws, dim=1), "along the input axis (dim=1)", id="cat-dim-1"),
    pytest.param(lambda ws: torch.stack(ws), "you stacked into a new axis", id="stack"),
    pytest.param(lambda ws: torch.cat([w.T for w in ws], dim=1), "you built the transposed matrix", id="transposed"),
    pytest.param(lambda ws: torch.cat(ws[::-1]), "reverse order", id="reversed"),
    pytest.param(lambda ws: torch.stack(ws, dim=1).flatten(0, 1), "the rows are interleaved", id="interleaved"),
]


@pytest.mark.parametrize(("fn", "named"), STACK_MISTAKES)
def test_stack_head_weights_names_the_mistake(fn, named):
    feedback = check_stack_head_weights(fn)
    assert not feedback.passed and feedback.attempted
    assert named in feedback.message, feedback.message


# --- all three --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("check", [check_split_heads, check_merge_heads, check_stack_head_weights])
def test_a_stub_is_not_attempted_yet(check):
    feedback = check(stub)
    assert not feedback.passed and not feedback.attempted
    assert str(feedback).startswith("⏳") and "not attempted yet" in feedback.message


@pytest.mark.parametrize("check", [check_split_heads, check_merge_heads, check_stack_head_weights])
def test_checking_does_not_move_the_global_random_numbers(check):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check(lambda *args: torch.zeros(1))
    assert torch.equal(torch.rand(3), expected)


SOLUTIONS = {check_split_heads: split_solution, check_merge_heads: merge_solution, check_stack_head_weights: torch.cat}


@pytest.mark.parametrize("check", list(SOLUTIONS))
def test_a_function_that_overwrites_its_input_cannot_fool_the_checker(check):
    # it zeroes its input, then answers correctly for the zeros: the checker must still compare with the original
    def vandal(first, *rest):
        for t in first if isinstance(first, list) else [first]:
            t.zero_()
        return SOLUTIONS[check](first, *rest)

    assert not check(vandal).passed
    assert check(SOLUTIONS[check]).passed
