"""Chapter 11's live trainer: nothing runs until the button is pressed; a press trains the two-layer run, and
the widget shows exactly what training and evaluation compute; bad arguments and failures are said clearly."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from mha_lib.induction import model as induction  # noqa: E402
from mha_lib.induction.trainer import (EXAMPLE_TOKENS, example_weights, status_html,  # noqa: E402
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
    held_out = induction.held_out_batch()
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
    # the first evaluation always redraws, the final picture too; the evaluations at steps 50 and 60 only when
    # drawing took less than a tenth of the time since (the widget never spends more than that on pictures)
    assert 2 <= widget.redraw_count <= 4


def test_example_weights_are_the_model_s_weights_on_the_example_sequence():
    model = induction.load_run("two_layer").model
    weights = example_weights(model)
    batch = induction.sequence(list(EXAMPLE_TOKENS))
    with torch.no_grad():
        _, expected = model(batch.tokens, return_weights=True)
    assert weights.shape == (2, 4, len(EXAMPLE_TOKENS), len(EXAMPLE_TOKENS))
    torch.testing.assert_close(weights[1, 2], expected[1][0, 2], rtol=0, atol=0)


def test_example_weights_name_a_bad_model():
    with pytest.raises(TypeError, match=r"model must be an induction.AttentionOnlyTransformer, got Linear"):
        example_weights(torch.nn.Linear(2, 2))


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


KERNEL_CODE = r"""
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import ipywidgets
    from mha_lib.induction.trainer import training_widget

    widget = training_widget(steps=120, short_steps=20, redraw_seconds=0)
    display(widget)
    widget.controls["train"].click()  # what a press does: the handler runs inside the kernel
print(json.dumps({"version": ipywidgets.__version__, "progress_id": widget.progress.model_id,
                  "status_id": widget.status.model_id, "value": widget.progress.value,
                  "children": len(widget.children),
                  "ours": [f"{w.category.__name__}: {w.message}" for w in caught if "mha_lib" in w.filename]}))
"""


def test_a_press_updates_the_browser_while_it_trains_under_ipywidgets_7(ipywidgets7_kernel):
    """In a real kernel with ipywidgets 7.7 (Colab's): the progress bar and the status line are sent to the
    browser at every evaluation, during the run, not only at its end; nothing goes to stderr."""
    from datetime import datetime

    from conftest import run_in_kernel

    messages, result = run_in_kernel(ipywidgets7_kernel, KERNEL_CODE)
    assert result["version"].startswith("7.7."), result
    assert result["ours"] == [] and result["value"] == 120 and result["children"] == 5, result

    def updates(model_id, key):
        return [(m["content"]["data"]["state"][key], m["header"]["date"]) for m in messages
                if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == model_id
                and key in m["content"]["data"].get("state", {})]

    progress = updates(result["progress_id"], "value")
    assert [value for value, _ in progress] == [50, 100, 120]  # every evaluation (0 was already the value)
    sent = [date if isinstance(date, datetime) else datetime.fromisoformat(date) for _, date in progress]
    assert (sent[-1] - sent[0]).total_seconds() > 0.1  # sent as the steps went by, not all at the end
    statuses = [value for value, _ in updates(result["status_id"], "value")]
    assert any("step 50 of 120" in s for s in statuses) and "done" in statuses[-1]
