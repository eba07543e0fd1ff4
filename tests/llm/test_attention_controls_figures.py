"""Chapter 15's figures, widgets and live training (mha_lib/llm/attention_controls.py): readable on a projector,
widgets that redraw when a slider moves, numbers computed from the data, and clear errors for bad input."""

from __future__ import annotations

import pytest
import torch

from mha_lib.induction.model import AttentionOnlyTransformer, InductionTask, held_out_batch
from mha_lib.llm import attention_controls as controls
from figure_checks import _check_readable, _check_size  # tests/figure_checks.py: the projector rules


def _readable(fig):
    _check_size(fig)
    _check_readable(fig)


def test_softcap_figure_shows_the_largest_weight_before_and_after_the_cap():
    fig = controls.softcap_figure(20.0)
    _readable(fig)
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    row = torch.tensor(controls.SOFTCAP_ROW, dtype=torch.float64)
    capped = torch.softmax(20 * torch.tanh(row / 20), -1).max()
    assert labels == ["no cap (largest 1.00)", f"cap c = 20 (largest {capped:.2f})"]
    with pytest.raises(ValueError, match="cap"):
        controls.softcap_figure(0.0)
    with pytest.raises(ValueError, match="scores must be one row"):
        controls.softcap_figure(5.0, [[1.0, 2.0]])


def test_softcap_widget_redraws_when_the_cap_moves():
    widget = controls.softcap_widget()
    slider = widget.children[0]
    before = [t.get_text() for t in widget.result.axes[1].get_legend().get_texts()][1]
    slider.value = 5.0
    after = [t.get_text() for t in widget.result.axes[1].get_legend().get_texts()][1]
    assert before != after and after.startswith("cap c = 5 ")
    _readable(widget.result)


def test_first_token_mass_figure_writes_each_layer_s_mean():
    mass = torch.rand(30, 9, generator=torch.Generator().manual_seed(0))
    fig = controls.first_token_mass_figure(mass)
    _readable(fig)
    right = [ax for ax in fig.axes[0].child_axes if ax.get_ylabel() == "mean over the heads"]
    assert right and [t.get_text() for t in right[0].get_yticklabels()][:2] == \
        [f"{mass[0].mean():.2f}", f"{mass[1].mean():.2f}"]
    with pytest.raises(ValueError):
        controls.first_token_mass_figure(torch.rand(3))


def test_token_heatmaps_figure_labels_both_axes():
    fig = controls.token_heatmaps_figure(torch.softmax(torch.randn(2, 4, 4), -1), ["The", " cap", " of", "x"],
                                         ["a", "b"])
    _readable(fig)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["The", "␣cap", "␣of", "x"]
    with pytest.raises(ValueError, match="need 4 labels and 2 titles"):
        controls.token_heatmaps_figure(torch.rand(2, 4, 4), ["a"], ["a", "b"])


@pytest.mark.parametrize("fraction, rotating", [(0.25, 16), (0.5, 32), (1.0, 64), (0.0, 0)])
def test_partial_rope_figure_counts_the_rotating_dimensions_as_the_layer_does(fraction, rotating):
    fig = controls.partial_rope_figure(64, fraction)
    _readable(fig)
    assert f"{rotating} of 64 dimensions rotate" in fig.axes[0].get_title()
    if fraction:
        from mha_lib import MultiHeadAttention
        assert MultiHeadAttention(64, 64, 8, 0.0, 1, rope_theta=1e4, rope_fraction=fraction).rope_dim == rotating


def test_partial_rope_widget_redraws():
    widget = controls.partial_rope_widget(64)
    widget.children[0].value = 0.5
    assert "32 of 64" in widget.result.axes[0].get_title()
    with pytest.raises(ValueError):
        controls.partial_rope_figure(64, 1.5)


def test_train_variants_trains_each_from_the_same_seed_and_first_token_share_reads_the_sink():
    runs = controls.train_variants({"plain": None, "sinks": {"sinks": True}}, steps=3)
    assert set(runs) == {"plain", "sinks"}
    plain, sinks = runs["plain"][0], runs["sinks"][0]
    assert isinstance(plain, AttentionOnlyTransformer) and sinks.layers[0].sinks is not None
    batch = held_out_batch()
    share = controls.first_token_share(plain, batch)
    assert len(share) == 2 and all(abs(layer["sink"]) < 1e-5 for layer in share)
    assert all(layer["sink"] > 0 for layer in controls.first_token_share(sinks, batch))
    with pytest.raises(TypeError, match="variants"):
        controls.train_variants({})


def test_first_token_share_of_a_model_is_its_weight_on_key_0():
    torch.manual_seed(0)
    model = AttentionOnlyTransformer(InductionTask())
    batch = held_out_batch()
    with torch.no_grad():
        _, weights = model(batch.tokens, return_weights=True)
    assert controls.first_token_share(model, batch, start=8)[1]["first"] == pytest.approx(
        float(weights[1][:, :, 8:, 0].mean()))
