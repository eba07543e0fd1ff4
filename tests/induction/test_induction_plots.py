"""Chapter 11's figures: the values drawn are the values computed, sizes fit a projector, bad input is named."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

from mha_lib.induction import model as induction  # noqa: E402
from mha_lib.induction import plots  # noqa: E402
from mha_lib.induction.trainer import EXAMPLE_TOKENS, example_weights  # noqa: E402
from figure_checks import _check_readable, _check_size  # noqa: E402


@pytest.fixture(scope="module")
def run():
    return induction.load_run("two_layer")


def _readable(fig) -> None:
    """The series' projector rules (tests/figure_checks.py): text >= 10 px inside the figure, which fits
    1200 × 900 px."""
    _check_size(fig)
    _check_readable(fig)


def test_heads_over_training_draws_every_head_of_every_row(run):
    rows = {f"step {step}": example_weights(model) for step, model in run.snapshots.items() if step in (60, 3000)}
    tokens = induction.token_labels(list(EXAMPLE_TOKENS))
    fig = plots.heads_over_training_figure(rows, tokens, title="heads")
    heatmaps = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    assert len(heatmaps) == 2 * 8  # rows × layer·head
    T = len(EXAMPLE_TOKENS)
    shown = heatmaps[8 + 4 + 2].images[0].get_array()  # row "step 3000", column L1 H2
    expected = rows["step 3000"][1, 2].numpy()
    lower = np.tril(np.ones((T, T), dtype=bool))
    assert np.allclose(shown.data[lower], expected[lower]) and shown.mask[~lower].all()  # the future is masked
    assert heatmaps[0].get_title() == "L0 H0" and heatmaps[7].get_title() == "L1 H3"
    assert heatmaps[8].get_ylabel() == "step 3000"
    assert [t.get_text() for t in heatmaps[8].get_xticklabels()] == tokens  # every letter, on the bottom row
    assert [t.get_text() for t in heatmaps[0].get_yticklabels()] == tokens
    assert heatmaps[0].images[0].norm.vmin == 0.0 and heatmaps[0].images[0].norm.vmax == 1.0  # one 0…1 scale
    _readable(fig)


def test_loss_curves_draw_the_held_out_loss_and_the_chance_line(run):
    fig = plots.loss_curves_figure({"2 layers": run.log}, chance=math.log(32), marks=(150,))
    ax = fig.axes[0]
    held_out = [line for line in ax.lines if line.get_label().startswith("2 layers")][0]
    assert list(held_out.get_xdata()) == run.log.steps
    assert np.allclose(held_out.get_ydata(), run.log.eval_loss)
    assert ax.get_yscale() == "log"
    chance = [line for line in ax.lines if np.allclose(line.get_ydata(), math.log(32))]
    assert chance, "no line at ln 32"
    assert any(t.get_text() == "chance: ln 32 = 3.47" for t in ax.texts)
    _readable(fig)


def test_score_curves_draw_each_head_s_scores(run):
    fig = plots.score_curves_figure(run.log)
    left, right = fig.axes[:2]
    line = {l.get_label(): l for l in left.lines}["L0 H3"]
    assert np.allclose(line.get_ydata(), run.log.scores("previous_token")[:, 0, 3].numpy())
    line = {l.get_label(): l for l in right.lines}["L1 H2"]
    assert np.allclose(line.get_ydata(), run.log.scores("induction")[:, 1, 2].numpy())
    assert line.get_linestyle() == "--"  # layer 1 dashed
    _readable(fig)


def test_training_progress_draws_the_best_previous_token_head_and_the_mean_induction(run):
    fig = plots.training_progress_figure(run.log, run.log, total_steps=3000)
    right = fig.axes[1]
    ours = [l for l in right.lines if l.get_label().startswith("this run")]
    assert np.allclose(ours[0].get_ydata(), run.log.scores("previous_token")[:, 0].max(dim=1).values.numpy())
    assert np.allclose(ours[1].get_ydata(), run.log.scores("induction")[:, 1].mean(dim=1).numpy())
    _readable(fig)


def test_knockout_bars_are_the_losses_given():
    losses = {"nothing": 0.03, "L0 H3": torch.tensor(2.18), "all of layer 1": 3.84}
    fig = plots.knockout_figure(losses, chance=math.log(32), title="knock-outs")
    ax = fig.axes[0]
    assert [round(bar.get_width(), 2) for bar in ax.patches] == [0.03, 2.18, 3.84]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(losses)
    assert {t.get_text() for t in ax.texts} >= {"0.03", "2.18", "3.84", "chance 3.47"}
    _readable(fig)


def test_score_bars_are_the_scores_of_each_run(run):
    batch = induction.repeated_sequences(run.model.task, 64, torch.Generator().manual_seed(5))
    trained = induction.evaluate(run.model, batch)
    early = induction.evaluate(run.snapshots[60], batch)
    fig = plots.score_bars_figure({"trained": trained, "step 60": early})
    left, right = fig.axes[:2]
    heights = [bar.get_height() for bar in left.patches]
    assert np.allclose(heights[:8], trained["previous_token"].reshape(-1).numpy())
    assert np.allclose(heights[8:], early["previous_token"].reshape(-1).numpy())
    assert np.allclose([bar.get_height() for bar in right.patches][:8], trained["induction"].reshape(-1).numpy())
    assert [t.get_text() for t in left.get_xticklabels()][3] == "L0 H3"
    _readable(fig)


def test_head_names_count_from_zero():
    assert plots.head_name(0, 3) == "L0 H3"


@pytest.mark.parametrize("call, error, message", [
    (lambda: plots.heads_over_training_figure({}, None), TypeError, r"weights must be a non-empty dict"),
    (lambda: plots.heads_over_training_figure({"a": torch.rand(4, 5, 5)}, None), ValueError,
     r"weights\['a'\] must be 4-D \(L, H, T, T\)"),
    (lambda: plots.heads_over_training_figure({"a": torch.rand(1, 2, 5, 5)}, list("abc")), ValueError,
     r"tokens must have one label per position \(T = 5\), got 3"),
    (lambda: plots.heads_over_training_figure({"a": torch.rand(1, 2, 5, 5), "b": torch.rand(1, 2, 4, 4)}, None),
     ValueError, r"weights must all have one shape"),
    (lambda: plots.heads_over_training_figure({1: torch.rand(1, 2, 5, 5)}, None), TypeError,
     r"weights must have str keys \(the labels\), got int 1"),
    (lambda: plots.heads_over_training_figure({"a": torch.full((1, 2, 5, 5), float("nan"))}, None), ValueError,
     r"weights contain NaN"),
    (lambda: plots.heads_over_training_figure({"a": torch.rand(1, 2, 5, 5)}, 5), TypeError,
     r"tokens must be a list of labels \(one per position\) or None, got int"),
    (lambda: plots.loss_curves_figure({"a": [1.0, 0.5]}), TypeError,
     r"logs\['a'\] must be a TrainingLog \(run.log\), got list"),
    (lambda: plots.loss_curves_figure({"a": induction.TrainingLog()}), ValueError,
     r"logs\['a'\] must hold at least one evaluation"),
    (lambda: plots.score_curves_figure(None), TypeError, r"log must be a TrainingLog"),
    (lambda: plots.knockout_figure({"x": -1.0}), ValueError, r"losses\['x'\] must be a finite number >= 0, got -1.0"),
    (lambda: plots.knockout_figure({"x": float("nan")}), ValueError, r"losses\['x'\] must be a finite number"),
    (lambda: plots.score_bars_figure({"a": {"loss": 1}}), ValueError,
     r"scores\['a'\] must be a dict with 'previous_token' and 'induction'"),
    (lambda: plots.score_curves_figure(induction.load_run("two_layer").log, title=3), TypeError,
     r"title must be a str or None, got int 3"),
])
def test_bad_input_is_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_training_progress_names_the_run_it_draws(run):
    fig = plots.training_progress_figure(run.log, label="shipped run", title="before a press")
    assert [l.get_label() for l in fig.axes[0].lines] == ["shipped run"]
    assert fig._suptitle.get_text() == "before a press"
    with pytest.raises(TypeError, match=r"label must be a str, got int 3"):
        plots.training_progress_figure(run.log, label=3)
    with pytest.raises(ValueError, match=r"total_steps must be a positive int or None, got 0"):
        plots.training_progress_figure(run.log, total_steps=0)
