"""Heatmaps (``plot_heads``) and device-independent printing (``show``, ``format_value``)."""

from __future__ import annotations

import io
import subprocess
import sys
import warnings

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.figure import Figure

import mha_lib
from mha_lib.printing import format_value, rounded

LABELS = ["Your", "journey", "starts"]


def _image_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.images]


def _weights(*shape) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape), dim=-1)


# --- plot_heads -----------------------------------------------------------------------------------------------


def test_plot_heads_returns_a_figure_that_pyplot_does_not_track():
    fig = mha_lib.plot_heads(_weights(2, 3, 3), LABELS)
    assert isinstance(fig, Figure)
    assert plt.get_fignums() == []  # a pyplot figure would be shown (and leak) a second time


def test_one_panel_per_head_with_the_heads_data():
    weights = _weights(3, 3, 3)
    fig = mha_lib.plot_heads(weights, LABELS)
    panels = _image_axes(fig)
    assert len(panels) == 3
    for h, ax in enumerate(panels):
        assert torch.equal(torch.as_tensor(ax.images[0].get_array()), weights[h])
        assert ax.get_title() == f"head {h}"


def test_batched_weights_pick_the_sequence_given_by_batch_index():
    weights = _weights(2, 4, 3, 3)
    fig = mha_lib.plot_heads(weights, LABELS, batch_index=1)
    panels = _image_axes(fig)
    assert len(panels) == 4
    for h, ax in enumerate(panels):
        assert torch.equal(torch.as_tensor(ax.images[0].get_array()), weights[1, h])


def test_tick_labels_are_the_tokens_on_both_axes():
    keys = ["k0", "k1", "k2", "k3"]
    fig = mha_lib.plot_heads(_weights(2, 3, 4), LABELS, keys)
    for ax in _image_axes(fig):
        assert [t.get_text() for t in ax.get_yticklabels()] == LABELS  # rows: queries
        assert [t.get_text() for t in ax.get_xticklabels()] == keys  # columns: keys
    square = mha_lib.plot_heads(_weights(1, 3, 3), LABELS)  # T == S: the keys reuse the query labels
    ax = _image_axes(square)[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == LABELS


def test_all_panels_share_one_colour_scale_and_one_colour_bar():
    weights = _weights(3, 3, 3)
    weights[2] = weights[2] * 0.5  # a head with smaller values must still use the common scale
    fig = mha_lib.plot_heads(weights, LABELS)
    clims = [ax.images[0].get_clim() for ax in _image_axes(fig)]
    assert clims == [(0.0, pytest.approx(weights.max().item()))] * 3
    assert sum(ax.get_label() == "<colorbar>" for ax in fig.axes) == 1


def test_unused_grid_cells_are_hidden():
    fig = mha_lib.plot_heads(_weights(5, 3, 3), LABELS)  # 4 columns -> 2 rows, 3 empty cells
    grid = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(grid) == 8
    assert [ax.get_visible() for ax in grid] == [True] * 5 + [False] * 3
    assert len(_image_axes(fig)) == 5


def test_figure_renders_to_png_without_warnings():
    fig = mha_lib.plot_heads(_weights(2, 6, 6, 6), mha_lib.JOURNEY_TOKENS, title="journey", batch_index=1)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.savefig(buffer, format="png")
    assert buffer.getvalue().startswith(b"\x89PNG")


# --- show and format_value ------------------------------------------------------------------------------------


def test_format_value_drops_autograd_history(device):
    x = torch.tensor([0.5, 0.25], requires_grad=True, device=device)
    y = x * 2
    assert "grad_fn" in repr(y)  # what format_value must hide
    assert format_value(y) == "tensor([1.0000, 0.5000])"
    assert not rounded(y).requires_grad
    assert rounded(y).device == torch.device("cpu")


def test_format_value_rounds_to_four_places_and_folds_negative_zero():
    assert format_value(torch.tensor([0.123456, 1.99996, -0.33333])) == "tensor([ 0.1235,  2.0000, -0.3333])"
    assert format_value(torch.tensor([-0.00001, 0.5])) == "tensor([0.0000, 0.5000])"  # no "-0.0000"
    assert not torch.signbit(rounded(torch.tensor(-0.00001)))
    assert format_value(torch.tensor([0.123456, 1.0]), decimals=2) == "tensor([0.12, 1.00])"


def test_format_value_formats_python_floats_ints_and_other_values():
    assert format_value(1 / 3) == "0.3333"
    assert format_value(-0.00001) == "0.0000"
    assert format_value(2.5, decimals=1) == "2.5"
    assert format_value(7) == "7"
    assert format_value("tokens") == "tokens"
    assert format_value(torch.Size([2, 6, 4])) == "torch.Size([2, 6, 4])"


def test_format_value_keeps_dtype_and_integer_tensors():
    assert format_value(torch.tensor([0.123456], dtype=torch.float64)) == "tensor([0.1235], dtype=torch.float64)"
    assert format_value(torch.tensor([3, -1])) == "tensor([ 3, -1])"
    assert format_value(torch.tensor([True, False])) == "tensor([ True, False])"


def test_format_value_leaves_the_global_print_options_alone():
    x = torch.tensor([0.123456789])
    before = repr(x)
    format_value(x, decimals=2)
    assert repr(x) == before


def test_show_prints_values_separated_by_spaces(capsys):
    mha_lib.show("weights:", torch.tensor([[0.33333, 0.66667]]), 0.5)
    mha_lib.show(1, 2, sep=", ")
    assert capsys.readouterr().out == "weights: tensor([[0.3333, 0.6667]]) 0.5000\n1, 2\n"


# --- lazy imports ---------------------------------------------------------------------------------------------


def test_matplotlib_is_imported_only_when_plot_heads_is_used():
    code = (
        "import sys, torch, mha_lib\n"
        "heavy = ('matplotlib', 'ipywidgets')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "fig = mha_lib.plot_heads(torch.eye(2))\n"
        "print('matplotlib' in sys.modules, 'matplotlib.pyplot' in sys.modules, type(fig).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["[]", "True False Figure"]
