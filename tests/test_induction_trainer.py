"""Chapter 11's live trainer: nothing runs until the button is pressed; a press trains the two-layer run, and
the widget shows exactly what training and evaluation compute; bad arguments and failures are said clearly."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from mha_lib import induction  # noqa: E402
from mha_lib.induction_trainer import (EXAMPLE_TOKENS, example_weights, held_out_batch, status_html,  # noqa: E402
                                       training_widget)

PNG = b"\x89PNG\r\n\x1a\n"
STEPS = 60  # a tiny run: evaluations at steps 0, 50 and 60


@pytest.fixture(scope="module")
def pressed():
    """A widget whose button was pressed once (a 60-step run), and the same run trained directly."""
    widget = training_widget(steps=STEPS, short_steps=20, redraw_seconds=0)
    widget.controls["train"].click()
    return widget, induction.train_run("two_layer", STEPS)


def test_nothing_trains_until_the_button_is_pressed():
    widget = training_widget(steps=STEPS, short_steps=20)
    assert widget.run is None and widget.scores is None and widget.redraw_count == 0
    assert widget.progress.value == 0 and widget.progress.max == STEPS
    assert "press <b>Train</b>" in widget.status.value
    assert bytes(widget.curves.value).startswith(PNG)  # the shipped run's curves: a picture before any press
    assert len(widget.children) == 3  # controls, progress, curves: no empty result pictures yet
    assert widget.controls["short"].description == "short run (20 steps)"


def test_a_press_trains_the_shipped_run_s_recipe_and_shows_its_numbers(pressed):
    widget, direct = pressed
    assert widget.progress.value == STEPS == widget.progress.max
    assert widget.run.log.steps == direct.log.steps == [0, 50, 60]
    assert widget.run.log.loss == direct.log.loss  # one thread, same seed: bit for bit
    held_out = held_out_batch()
    yours = induction.evaluate(direct.model, held_out)
    shipped = induction.evaluate(induction.load_run("two_layer").model, held_out)
    for key in ("loss", "accuracy", "previous_token", "induction"):
        torch.testing.assert_close(widget.scores["your run"][key], yours[key], rtol=0, atol=0)
        torch.testing.assert_close(widget.scores["shipped run"][key], shipped[key], rtol=0, atol=0)
    assert status_html(STEPS, STEPS, direct.log.eval_loss[-1], 0.0, done=True).split(" · ")[:2] == \
        widget.status.value.split(" · ")[:2]  # "done: step 60 of 60", the held-out loss
    assert f"your run: loss {yours['loss'].item():.3f}, accuracy {yours['accuracy'].item():.1%}" in widget.status.value
    assert f"shipped: loss {shipped['loss'].item():.3f}" in widget.status.value
    assert widget.controls["train"].disabled is False and widget.controls["train"].description == "Train"


def test_the_result_pictures_appear_after_a_run(pressed):
    widget, _ = pressed
    assert len(widget.children) == 5
    assert widget.children[3] is widget.heads and widget.children[4] is widget.bars
    assert all(bytes(image.value).startswith(PNG) for image in (widget.curves, widget.heads, widget.bars))
    # every redraw is counted: three evaluations (steps 0, 50, 60) with no throttle, and the final picture
    assert widget.redraw_count == 4


def test_example_weights_are_the_model_s_weights_on_the_example_sequence():
    model = induction.load_run("two_layer").model
    weights = example_weights(model)
    batch = induction.sequence(list(EXAMPLE_TOKENS))
    with torch.no_grad():
        _, expected = model(batch.tokens, return_weights=True)
    assert weights.shape == (2, 4, len(EXAMPLE_TOKENS), len(EXAMPLE_TOKENS))
    torch.testing.assert_close(weights[1, 2], expected[1][0, 2], rtol=0, atol=0)


def test_redraws_are_throttled_and_the_short_run_box_changes_the_length():
    widget = training_widget(steps=STEPS, short_steps=20, redraw_seconds=60)
    widget.controls["short"].value = True
    run = widget.train()
    assert widget.progress.max == 20 and run.log.steps == [0, 20]
    assert widget.redraw_count == 2  # the first evaluation, then nothing for 60 s, then the final picture


def test_a_failure_is_said_in_the_widget_and_the_button_comes_back(monkeypatch):
    widget = training_widget(steps=STEPS, short_steps=20)

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(induction, "train_run", broken)
    with pytest.raises(RuntimeError, match="out of memory"):
        widget.train()
    assert "training stopped: RuntimeError(&#x27;out of memory&#x27;)" in widget.status.value
    assert widget.controls["train"].disabled is False and widget.run is None


@pytest.mark.parametrize("kwargs, error, message", [
    ({"steps": 0}, ValueError, r"steps must be a positive int \(>= 1\), got 0"),
    ({"steps": 2.5}, TypeError, r"steps must be a positive int, got float"),
    ({"steps": True}, TypeError, r"steps must be a positive int, got bool"),
    ({"steps": 10 ** 6}, ValueError, r"steps must be at most 20000 \(a live run in class\), got 1000000"),
    ({"short_steps": -3}, ValueError, r"short_steps must be a positive int \(>= 1\), got -3"),
    ({"redraw_seconds": "1"}, TypeError, r"redraw_seconds must be a number of seconds, got str '1'"),
    ({"redraw_seconds": -1}, ValueError, r"redraw_seconds must be from 0 to 60 seconds, got -1"),
    ({"redraw_seconds": float("nan")}, ValueError, r"redraw_seconds must be from 0 to 60 seconds, got nan"),
])
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        training_widget(**kwargs)
