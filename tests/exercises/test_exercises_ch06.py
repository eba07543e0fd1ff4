"""Chapter 6 checkers: each passes the right answer, names every mistake it claims to know, and reports a stub."""

from __future__ import annotations

import pytest
import torch

from mha_lib.exercises import ch06_softmax as ch06


def stub(*args):
    raise NotImplementedError  # your code here


def _normalise(e, dim=-1):
    return e / e.sum(dim=dim, keepdim=True)


# --- stable softmax -------------------------------------------------------------------------------------------


def right_softmax(x):
    return _normalise((x - x.amax(dim=-1, keepdim=True)).exp())


@pytest.mark.parametrize("fn", [right_softmax, lambda x: torch.softmax(x, dim=-1),
                                lambda x: _normalise((x - x.max(dim=-1, keepdim=True).values).exp())])
def test_stable_softmax_accepts_right_answers(fn):
    verdict = ch06.check_stable_softmax(fn)
    assert verdict and verdict.passed and "correct" in str(verdict)


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda x: _normalise(x.exp()), ch06.NAIVE),
        (lambda x: _normalise((x - x.max()).exp()), ch06.GLOBAL_MAX),
        (lambda x: _normalise((x - x.amax(dim=-1)).exp()), ch06.NO_KEEPDIM),
        (lambda x: _normalise((x - x.amax(dim=-2, keepdim=True)).exp(), dim=-2), ch06.WRONG_DIM),
        (lambda x: torch.softmax(x, dim=0), ch06.WRONG_DIM),
        (lambda x: _normalise((x - x.amax(dim=1, keepdim=True)).exp(), dim=1), ch06.BATCH_DIM),
        (lambda x: (x - x.amax(dim=-1, keepdim=True)).exp(), ch06.NOT_NORMALISED),
        (lambda x: x / x.sum(dim=-1, keepdim=True), ch06.NO_EXP),
        (lambda x: torch.log_softmax(x, dim=-1), ch06.LOG_SOFTMAX),
    ],
)
def test_stable_softmax_names_the_mistake(fn, message):
    verdict = ch06.check_stable_softmax(fn)
    assert not verdict
    assert verdict.attempted
    assert verdict.message == message


def test_stable_softmax_reports_other_errors():
    assert "wrong values" in ch06.check_stable_softmax(lambda x: torch.softmax(2 * x, dim=-1)).message
    assert "wrong shape" in ch06.check_stable_softmax(lambda x: x.sum(dim=-1)).message
    assert "raised ZeroDivisionError" in ch06.check_stable_softmax(lambda x: 1 / 0).message


def test_stable_softmax_not_attempted():
    verdict = ch06.check_stable_softmax(stub)
    assert not verdict and not verdict.attempted
    assert str(verdict).startswith("⏳ stable_softmax: not attempted yet")


def test_the_mistakes_are_distinct_on_the_probes():
    # the checker can only name a mistake whose tensor differs from the right answer and from the others
    x = 2.0 * torch.randn(5, 5, generator=torch.Generator().manual_seed(6))
    tensors = [torch.softmax(x, dim=-1), *ch06._softmax_mistakes(x).values()]
    for i, a in enumerate(tensors):
        for b in tensors[i + 1:]:
            assert not torch.allclose(a, b, atol=1e-3)


# --- temperature ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [lambda x, t: torch.softmax(x / t, dim=-1),
                                lambda x, t: right_softmax(x * (1 / t))])
def test_temperature_accepts_right_answers(fn):
    assert ch06.check_softmax_temperature(fn)


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda x, t: torch.softmax(x * t, dim=-1), ch06.MULTIPLIED),
        (lambda x, t: torch.softmax(x, dim=-1), ch06.IGNORED_TEMPERATURE),
        (lambda x, t: torch.softmax(x, dim=-1) / t, ch06.AFTER_SOFTMAX),
        (lambda x, t: torch.softmax(x / t, dim=-2), ch06.TEMPERATURE_WRONG_DIM),
    ],
)
def test_temperature_names_the_mistake(fn, message):
    verdict = ch06.check_softmax_temperature(fn)
    assert not verdict
    assert verdict.message == f"with temperature=2.0: {message}"


def test_temperature_checks_both_sides_of_one():
    # right for T = 2 only (e.g. a hard-coded 2) is caught by the second run with T = 0.5
    verdict = ch06.check_softmax_temperature(lambda x, t: torch.softmax(x / 2.0, dim=-1))
    assert not verdict and verdict.message.startswith("with temperature=0.5: ")


def test_temperature_not_attempted():
    verdict = ch06.check_softmax_temperature(stub)
    assert not verdict and not verdict.attempted


# --- dropout --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [lambda w, keep, p: w * keep / (1 - p),
                                lambda w, keep, p: torch.where(keep, w / (1 - p), torch.zeros_like(w))])
def test_dropout_accepts_right_answers(fn):
    assert ch06.check_weight_dropout(fn)


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda w, keep, p: w * keep, ch06.NO_RESCALE),
        (lambda w, keep, p: w * keep * (1 - p), ch06.TIMES_KEEP_PROB),
        (lambda w, keep, p: w * keep / p, ch06.DIVIDED_BY_P),
        (lambda w, keep, p: w * ~keep / (1 - p), ch06.INVERTED_KEEP),
        (lambda w, keep, p: w * keep / (w * keep).sum(dim=-1, keepdim=True), ch06.RENORMALISED),
    ],
)
def test_dropout_names_the_mistake(fn, message):
    verdict = ch06.check_weight_dropout(fn)
    assert not verdict
    assert verdict.message == message


def test_dropout_not_attempted():
    verdict = ch06.check_weight_dropout(stub)
    assert not verdict and not verdict.attempted


def test_checkers_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    ch06.check_stable_softmax(right_softmax)
    ch06.check_softmax_temperature(lambda x, t: torch.softmax(x / t, dim=-1))
    ch06.check_weight_dropout(lambda w, keep, p: w * keep / (1 - p))
    assert torch.equal(before, torch.get_rng_state())


def test_in_place_answers_are_judged_fairly():
    # a student who shifts the scores in place must not corrupt the checker's own inputs
    def in_place(x):
        x.sub_(x.amax(dim=-1, keepdim=True))
        return _normalise(x.exp_())

    assert ch06.check_stable_softmax(in_place)


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda x: (lambda e: e / e.sum(dim=-1))((x - x.amax(dim=-1, keepdim=True)).exp()), ch06.NO_KEEPDIM_SUM),
        (lambda x: (lambda e: e / e.sum(dim=-1))((x - x.amax(dim=-1)).exp()), ch06.NO_KEEPDIM_BOTH),
    ],
)
def test_stable_softmax_names_a_missing_keepdim_on_the_sum(fn, message):
    verdict = ch06.check_stable_softmax(fn)
    assert not verdict and verdict.attempted
    assert verdict.message == message
