"""Chapter 7 checkers: each passes the right answer, names every mistake it claims to know, and reports a stub."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mha_lib.exercises import ch07_output_projection as ch07


def stub(*args):
    raise NotImplementedError  # your code here


# --- concat + W_o ---------------------------------------------------------------------------------------------


def right_projection(context, weight, bias):
    B, H, T, Dh = context.shape
    merged = context.transpose(1, 2).reshape(B, T, H * Dh)  # (B, H, T, Dh) -> (B, T, H, Dh) -> (B, T, D)
    return merged @ weight.T + bias


def _merge(context):
    B, H, T, Dh = context.shape
    return context.transpose(1, 2).reshape(B, T, H * Dh)


@pytest.mark.parametrize("fn", [right_projection, lambda c, w, b: F.linear(_merge(c), w, b),
                                lambda c, w, b: torch.cat(c.unbind(dim=1), dim=-1) @ w.T + b])
def test_output_projection_accepts_right_answers(fn):
    verdict = ch07.check_output_projection(fn)
    assert verdict and "correct" in verdict.message


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda c, w, b: c.reshape(c.shape[0], c.shape[2], -1) @ w.T + b, ch07.NO_TRANSPOSE),
        (lambda c, w, b: _merge(c) @ w + b, ch07.WEIGHT_NOT_TRANSPOSED),
        (lambda c, w, b: _merge(c) @ w.T, ch07.NO_BIAS),
        (lambda c, w, b: _merge(c), ch07.CONCAT_ONLY),
    ],
)
def test_output_projection_names_the_mistake(fn, message):
    verdict = ch07.check_output_projection(fn)
    assert not verdict and verdict.message == message


@pytest.mark.parametrize("fn, message", [(lambda c, w, b: c.sum(dim=1), ch07.SUMMED_HEADS),
                                         (lambda c, w, b: c.mean(dim=1), ch07.AVERAGED_HEADS)])
def test_output_projection_names_shape_mistakes(fn, message):
    verdict = ch07.check_output_projection(fn)
    assert not verdict and verdict.message == f"{message} (got shape (2, 4, 2), expected (2, 4, 6))."


def test_output_projection_not_attempted():
    verdict = ch07.check_output_projection(stub)
    assert not verdict and not verdict.attempted


# --- parameter count ------------------------------------------------------------------------------------------


def right_count(d_model, num_heads, bias):
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


@pytest.mark.parametrize("fn", [right_count, lambda d, h, b: float(right_count(d, h, b)),
                                lambda d, h, b: torch.tensor(right_count(d, h, b)),
                                lambda d, h, b: sum(  # counting a real layer is right too
                                    p.numel() for p in torch.nn.MultiheadAttention(d, h, bias=b).parameters())])
def test_parameter_count_accepts_right_answers(fn):
    verdict = ch07.check_parameter_count(fn)
    assert verdict and "2,362,368" in verdict.message and "10,246,400" in verdict.message


def test_parameter_count_checks_gpt2_small_and_xl():
    asked = [(d, h) for d, h, bias in ch07.PARAMETER_CASES if bias]
    assert (768, 12) in asked and (1600, 25) in asked


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda d, h, b: 3 * d * d + 3 * d * b, ch07.FORGOT_WO),
        (lambda d, h, b: 4 * d * d, ch07.FORGOT_BIASES),
        (lambda d, h, b: 4 * d * d + 4 * d, ch07.BIASES_ALWAYS),
        (lambda d, h, b: 4 * d * d + 4 * d * d * b, ch07.BIAS_AS_MATRIX),
        (lambda d, h, b: h * right_count(d, h, b), ch07.PER_HEAD_FULL),
        (lambda d, h, b: 4 * d * (d // h) + 4 * (d // h) * b, ch07.ONE_HEAD_ONLY),
        (lambda d, h, b: 4 * d + 50257 * d, ch07.SEED_002),
        (lambda d, h, b: ((4 * d) + (1 * 50257 * d)) * 175, ch07.SEED_002_TIMES_175),
        (lambda d, h, b: 4 * d, ch07.FOUR_VECTORS),
    ],
)
def test_parameter_count_names_the_mistake(fn, message):
    verdict = ch07.check_parameter_count(fn)
    assert not verdict and verdict.message == message


def test_parameter_count_other_errors():
    assert ch07.check_parameter_count(lambda d, h, b: "many").message == "expected a number (an int), got str."
    verdict = ch07.check_parameter_count(lambda d, h, b: 5)
    assert verdict.message == "for d_model=768, num_heads=12, bias=True you returned 5, expected 2,362,368."


def test_parameter_count_not_attempted():
    verdict = ch07.check_parameter_count(stub)
    assert not verdict and not verdict.attempted
