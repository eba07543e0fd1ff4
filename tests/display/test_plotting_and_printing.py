"""Heatmaps (``plot_heads``, ``plot_stages``) and device-independent printing (``show``, ``format_value``)."""

from __future__ import annotations

import io
import subprocess
import sys
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import mha_lib
from mha_lib.display import plotting
from mha_lib.display.printing import format_value, rounded

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
    first, second = _image_axes(fig)
    assert [t.get_text() for t in first.get_yticklabels()] == LABELS  # rows: queries
    assert [t.get_text() for t in first.get_xticklabels()] == keys  # columns: keys
    assert [t.get_text() for t in second.get_xticklabels()] == keys
    assert second.get_yticklabels() == []  # the panels of a row share the query labels of the first one
    grid = _image_axes(mha_lib.plot_heads(_weights(8, 3, 4), LABELS, keys, ncols=4))
    assert [bool(ax.get_xticklabels()) for ax in grid] == [False] * 4 + [True] * 4  # key labels: lowest row
    assert [bool(ax.get_yticklabels()) for ax in grid] == [True, False, False, False] * 2
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


def _rgb(fig) -> "np.ndarray":
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3]


def _cell_pixel(fig, ax, t, s):
    """The RGB colour drawn at the centre of entry (t, s) of a heatmap panel."""
    rgb = _rgb(fig)
    x, y = ax.transData.transform((s, t))
    return tuple(int(v) for v in rgb[rgb.shape[0] - int(round(y)), int(round(x))])


def _causal_weights(heads=2, tokens=4):
    scores = torch.randn(heads, tokens, tokens)
    return mha_lib.masked_softmax(scores, mha_lib.causal_mask(tokens))


def test_weights_use_the_sequential_map_from_zero_and_scores_a_diverging_one_centred_on_zero():
    torch.manual_seed(0)
    weights = _weights(2, 3, 3)
    image = _image_axes(mha_lib.plot_heads(weights, LABELS))[0].images[0]
    assert image.cmap.name.startswith("viridis") and image.get_clim() == (0.0, pytest.approx(weights.max().item()))
    scores = torch.tensor([[[2.0, -0.5, 1.0], [0.3, -1.5, 0.2], [1.1, 0.4, -0.9]]])
    fig = mha_lib.plot_heads(scores, LABELS)  # negative values: scores, automatically
    image = _image_axes(fig)[0].images[0]
    assert image.cmap.name.startswith("RdBu_r") and image.get_clim() == (-2.0, 2.0)
    assert fig.axes[-1].get_ylabel() == "score"
    assert mha_lib.plot_heads(scores, vmax=3.0).axes[0].images[0].get_clim() == (-3.0, 3.0)  # mirrored
    positive = mha_lib.plot_heads(scores.abs(), quantity="scores").axes[0].images[0]
    assert positive.get_clim() == (-2.0, 2.0)  # all-positive scores still centred on 0 when asked


def test_masked_entries_are_grey():
    weights = _causal_weights()
    fig = mha_lib.plot_heads(weights, ["a", "b", "c", "d"])  # mask="auto": the zero upper triangle is causal
    ax = _image_axes(fig)[0]
    assert _cell_pixel(fig, ax, 0, 3) == plotting.MASKED_RGB
    assert _cell_pixel(fig, ax, 3, 0) != plotting.MASKED_RGB
    assert "grey: masked" in fig._supxlabel.get_text()
    plain = mha_lib.plot_heads(weights, mask=None)  # no mask inferred: the zeros take the map's colour
    assert _cell_pixel(plain, _image_axes(plain)[0], 0, 3) != plotting.MASKED_RGB
    scores = torch.randn(1, 4, 4).masked_fill(~mha_lib.causal_mask(4), float("-inf"))
    fig = mha_lib.plot_heads(scores)
    assert _cell_pixel(fig, _image_axes(fig)[0], 1, 2) == plotting.MASKED_RGB  # −inf
    keep = torch.tensor([True, True, False, True])  # an explicit key padding mask, broadcast over rows
    fig = mha_lib.plot_heads(_weights(1, 4, 4), mask=keep)
    assert _cell_pixel(fig, _image_axes(fig)[0], 3, 2) == plotting.MASKED_RGB


def test_a_row_with_a_single_key_is_left_out_of_the_range_and_the_figure_says_so():
    torch.manual_seed(1)
    weights = _causal_weights(heads=4, tokens=6)  # row 0 is 1 in every head
    fig = mha_lib.plot_heads(weights, mha_lib.JOURNEY_TOKENS)
    rest = weights[:, 1:].max().item()
    image = _image_axes(fig)[-1].images[0]  # the image the colour bar was made from
    assert image.get_clim() == (0.0, pytest.approx(rest))
    assert 'row "Your" left out of the colour range' in fig._supxlabel.get_text()
    assert image.colorbar.extend == "max"  # the colour bar's arrow: values above the range
    fig = mha_lib.plot_heads(weights, robust=False)
    image = _image_axes(fig)[-1].images[0]
    assert image.get_clim() == (0.0, 1.0) and image.colorbar.extend == "neither"
    fig = mha_lib.plot_heads(weights, vmax=1.0)  # fixed limits are kept as given
    assert _image_axes(fig)[0].images[0].get_clim() == (0.0, 1.0)


def test_nan_is_refused_or_drawn_hatched():
    weights = _weights(1, 3, 3)
    weights[0, 1] = float("nan")
    with pytest.raises(ValueError, match="nan='show'"):
        mha_lib.plot_heads(weights)
    fig = mha_lib.plot_heads(weights, LABELS, nan="show")
    ax = _image_axes(fig)[0]
    assert "red hatching: NaN (3 entries)" in fig._supxlabel.get_text()
    assert len(ax.collections) == 1 and ax.collections[0].get_hatch() == "xxx"
    assert _cell_pixel(fig, ax, 1, 1) != _cell_pixel(fig, ax, 0, 0)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(weights=[[0.5, 0.5]]), TypeError, "weights must be a torch.Tensor, got list"),
        (dict(query_labels="abc"), TypeError, "query_labels must be a list of str (one per token), got the str 'abc'"),
        (dict(key_labels="abc"), TypeError, "key_labels must be a list of str (one per token), got the str"),
        (dict(query_labels=["a", "b"]), ValueError, "query_labels must have 3 entries (one per token), got 2"),
        (dict(head_titles="head"), TypeError, "head_titles must be a list of str (one per head), got str 'head'"),
        (dict(head_titles=["a"]), ValueError, "head_titles must have 2 entries (one per head), got 1"),
        (dict(batch_index=0.0, weights=torch.rand(2, 2, 3, 3)), TypeError, "batch_index must be an int, got float"),
        (dict(batch_index=True, weights=torch.rand(2, 2, 3, 3)), TypeError, "batch_index must be an int, got bool"),
        (dict(ncols=2.0), TypeError, "ncols must be a positive int, got float 2.0"),
        (dict(ncols=0), ValueError, "ncols must be a positive int (>= 1), got 0"),
        (dict(panel_size="big"), TypeError, "panel_size must be a number of inches, got str 'big'"),
        (dict(panel_size=0.1), ValueError, "panel_size must be between 0.5 and 10 inches, got 0.1"),
        (dict(vmin="0"), TypeError, "vmin must be a number or None, got str '0'"),
        (dict(vmax=float("nan")), ValueError, "vmax must be finite, got nan"),
        (dict(vmin=1.0, vmax=0.5), ValueError, "vmin must be smaller than vmax, got vmin=1.0 and vmax=0.5"),
        (dict(quantity="probabilities"), ValueError, "quantity must be one of ['auto', 'weights', 'scores']"),
        (dict(mask=torch.ones(3, 3)), TypeError, "mask must be a torch.bool keep mask (True = attend), got dtype"),
        (dict(mask=torch.ones(4, 4, dtype=torch.bool)), ValueError, "mask of shape (4, 4) does not broadcast"),
        (dict(mask="causal"), ValueError, "mask must be a torch.bool keep mask, 'auto' or None, got 'causal'"),
        (dict(nan="zero"), ValueError, "nan must be 'raise' or 'show', got 'zero'"),
        (dict(cmap="no-such-map"), ValueError, "cmap must be a matplotlib colour map name, got 'no-such-map'"),
        (dict(title=3), TypeError, "title must be a str or None, got int 3"),
        (dict(weights=torch.rand(2, 3, 3) > 0.5), TypeError, "weights must be a real-valued tensor, got dtype"),
        (dict(weights=torch.rand(0, 3, 3)), ValueError, "weights must not be empty"),
        (dict(weights=torch.rand(3)), ValueError, "weights must be (T, S), (H, T, S) or (B, H, T, S), got 1-D"),
        (dict(robust=1), TypeError, "robust must be True or False, got int 1"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, error, message):
    arguments = {"weights": _weights(2, 3, 3), **kwargs}
    with pytest.raises(error) as info:
        mha_lib.plot_heads(**arguments)
    assert message in str(info.value)


# --- plot_stages ----------------------------------------------------------------------------------------------


CJK_16 = ["LL", "M", "with", "me", ".", "郭", "同", "学", "热", "爱", "AI", "喜", "欢", "游", "戏",
          "<|endoftext|>"]  # chapter 8's 16 tokens


def _stages(B=2, H=3, T=16, Dh=8, seed=0):
    """The four stages of causal attention, computed step by step, and the context SDPA computes from them."""
    torch.manual_seed(seed)
    q, k, v = torch.randn(3, B, H, T, Dh).unbind(0)  # each (B, H, T, Dh)
    scores = q @ k.transpose(-2, -1)  # (B, H, T, T)
    scaled = scores / Dh ** 0.5
    masked = scaled.masked_fill(~mha_lib.causal_mask(T), float("-inf"))
    weights = torch.softmax(masked, dim=-1)
    stages = {"raw scores": scores, "scaled": scaled, "masked": masked, "weights": weights}
    return stages, (weights @ v, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))


def _grid(fig, n_cols):
    """The heatmap panels of a stage grid, as rows of panels (subplots are created row by row)."""
    panels = _image_axes(fig)
    return [panels[i:i + n_cols] for i in range(0, len(panels), n_cols)]


def test_plot_stages_gives_each_stage_its_own_scale():
    from mha_lib.display.widgets import attention_stages

    s = attention_stages("Your journey starts with one step", d_model=16, num_heads=4)
    fig = plotting.plot_stages({"raw scores": s.scores, "masked": s.masked, "weights": s.weights}, s.tokens,
                               heads=[0, 2])
    grid = _grid(fig, 3)  # one column per stage, one row per head
    assert [len(row) for row in grid] == [3, 3]
    assert [ax.get_title() for ax in grid[0]] == ["raw scores", "masked", "weights"]  # stages named once, on top
    assert [row[0].get_ylabel() for row in grid] == ["head 0", "head 2"]  # heads named once, on the left
    bound = s.scores[[0, 2]].abs().max().item()
    assert grid[0][0].images[0].get_clim() == (pytest.approx(-bound), pytest.approx(bound))
    assert grid[1][0].images[0].get_clim() == grid[0][0].images[0].get_clim()  # one scale per stage, all heads
    assert grid[0][2].images[0].cmap.name.startswith("viridis")
    assert _cell_pixel(fig, grid[0][1], 0, 5) == plotting.MASKED_RGB
    assert _cell_pixel(fig, grid[1][2], 0, 5) == plotting.MASKED_RGB  # the blocked weights too
    assert _cell_pixel(fig, grid[1][2], 5, 0) != plotting.MASKED_RGB
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert [bar.get_xlabel() for bar in bars] == ["raw scores", "masked", "weights"]  # under each stage's column
    assert "grey: masked (−∞ before the softmax, weight 0 after it)" in fig._supxlabel.get_text()


def test_plot_stages_draws_the_values_computed():
    stages, (context, reference) = _stages()
    assert torch.allclose(context, reference, atol=1e-5)  # the stages are attention's, checked against SDPA
    fig = plotting.plot_stages(stages, CJK_16, heads=[2, 0], batch_index=1)
    grid = _grid(fig, 4)
    causal = mha_lib.causal_mask(16)
    for col, (name, values) in enumerate(stages.items()):
        for row, head in enumerate([2, 0]):
            drawn = grid[row][col].images[0].get_array()  # a masked array: grey where masked
            expected = values[1, head]  # sequence 1 of the batch
            assert torch.equal(torch.as_tensor(drawn.data), expected.double()), (name, head)
            hidden = torch.as_tensor(np.ma.getmaskarray(drawn))
            assert torch.equal(hidden, ~causal if name in ("masked", "weights") else torch.zeros(16, 16, dtype=bool))


def test_plot_stages_labels_all_16_tokens_in_order():
    stages, _ = _stages()
    fig = plotting.plot_stages(stages, CJK_16, heads=[0, 1])  # chapter 8's grid: 2 heads × 4 stages
    grid = _grid(fig, 4)
    for ax in grid[-1]:  # key labels under the lowest row, every token
        assert [t.get_text() for t in ax.get_xticklabels()] == CJK_16
        assert list(ax.get_xticks()) == list(range(16))
    for row in grid:  # query labels beside the first column only
        assert [t.get_text() for t in row[0].get_yticklabels()] == CJK_16
        assert list(row[0].get_yticks()) == list(range(16))
        assert all(list(ax.get_yticks()) == [] for ax in row[1:])
    assert all(list(ax.get_xticks()) == [] for ax in grid[0])
    long = [t for t in grid[-1][0].get_xticklabels() if t.get_text() == "<|endoftext|>"]
    assert long[0].get_rotation() == 90  # too wide for its column: upright
    three = plotting.plot_stages(stages, CJK_16)  # the default: up to 4 heads, here 3 rows of panels
    assert [t.get_text() for t in _grid(three, 4)[0][0].get_yticklabels()] == CJK_16
    four = plotting.plot_stages(_stages(H=4)[0], CJK_16)  # 4 rows cannot hold 16 labels within 900 px ...
    assert [t.get_text() for t in _grid(four, 4)[0][0].get_yticklabels()] == CJK_16[::2]  # ... every other one
    rows = plotting.plot_stages({"weights": stages["weights"]}, CJK_16, heads=[0, 1, 2], layout="rows")
    assert [t.get_text() for t in _image_axes(rows)[0].get_yticklabels()] == CJK_16


def test_plot_stages_keeps_its_footnote_and_titles_inside_the_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    stages, _ = _stages()
    # the narrowest grid with the longest footnote: robust note, fixed range and grey, in the old row layout
    for kwargs in (dict(heads=[0], layout="rows"), dict(heads=[0, 1], limits={"scaled": (-0.5, 0.5)}),
                   dict(heads=[0], title="A title as long as the figure is wide, or longer than that")):
        fig = plotting.plot_stages(stages, CJK_16, **kwargs)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        width, height = canvas.get_width_height()
        assert width <= 1200 and height <= 900
        footnote = fig._supxlabel.get_window_extent(canvas.get_renderer())
        assert 0 <= footnote.x0 and footnote.x1 <= width and 0 <= footnote.y0 and footnote.y1 <= height, kwargs
        # the labels of ticks beyond a colour bar's ends are artists that are never drawn
        hidden = {id(label) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
                  for tick in axis.get_major_ticks() for label in (tick.label1, tick.label2)
                  if not min(axis.get_view_interval()) - 1e-9 <= tick.get_loc() <= max(axis.get_view_interval()) + 1e-9}
        texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in hidden]
        boxes = [t.get_window_extent(canvas.get_renderer()) for t in texts]
        outside = [t.get_text() for t, b in zip(texts, boxes)
                   if b.x0 < -1 or b.y0 < -1 or b.x1 > width + 1 or b.y1 > height + 1]
        assert not outside, (kwargs, outside)
    assert 'weights: row "LL" left out of the colour range' in fig._supxlabel.get_text()


def test_plot_stages_limits_fix_a_stage_range_and_stage_scales_reports_it():
    stages, _ = _stages()
    limits = {"weights": (0.0, 0.4)}
    fig = plotting.plot_stages(stages, CJK_16, heads=[0, 1], limits=limits)
    grid = _grid(fig, 4)
    assert grid[0][3].images[0].get_clim() == (0.0, 0.4)
    assert grid[-1][3].images[0].colorbar.extend == "max"  # weights above 0.4 exist: the bar's arrow
    assert ("weights: colour range fixed at 0 to 0.4; larger values take the end colour (the arrow on its colour "
            "bar)") in fig._supxlabel.get_text()
    scales = plotting.stage_scales(stages, CJK_16, heads=[0, 1], limits=limits)
    assert list(scales) == list(stages)
    for col, (name, scale) in enumerate(scales.items()):
        assert grid[0][col].images[0].get_clim() == (scale.vmin, scale.vmax)
    bound = stages["raw scores"][0, :2].abs().max().item()  # sequence 0, heads 0 and 1
    assert (scales["raw scores"].vmin, scales["raw scores"].vmax) == (pytest.approx(-bound), pytest.approx(bound))
    finite = stages["masked"][0, :2][torch.isfinite(stages["masked"][0, :2])]
    assert scales["masked"].vmax == pytest.approx(finite.abs().max().item())  # −∞ does not stretch the scale
    assert scales["scaled"].vmax == pytest.approx(bound / 8 ** 0.5)  # √Dh = √8: the picture, 1/√8 the range
    assert scales["weights"].cmap == "viridis" and scales["raw scores"].cmap == "RdBu_r"
    rows = plotting.plot_stages(stages, CJK_16, heads=[0, 1], layout="rows")
    assert [ax.get_title() for ax in _grid(rows, 2)[0]] == ["head 0", "head 1"]
    assert [row[0].get_ylabel() for row in _grid(rows, 2)] == list(stages)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(stages=[torch.rand(2, 3, 3)]), TypeError, "stages must be a non-empty dict name -> tensor, got list"),
        (dict(stages={}), TypeError, "stages must be a non-empty dict name -> tensor, got dict"),
        (dict(stages={0: torch.rand(2, 3, 3)}), TypeError, "stages must have str names, got int 0"),
        (dict(stages={"w": [[0.5]]}), TypeError, "stages['w'] must be a torch.Tensor, got list"),
        (dict(stages={"w": torch.rand(3, 3)}), ValueError,
         "stages['w'] must be (H, T, S) or (B, H, T, S), got shape (3, 3)"),
        (dict(stages={"a": torch.rand(2, 3, 3), "b": torch.rand(2, 4, 4)}), ValueError,
         "stages must all have one shape, got [(2, 3, 3), (2, 4, 4)]"),
        (dict(stages={"w": torch.full((2, 3, 3), float("nan"))}), ValueError, "stages contain NaN"),
        (dict(tokens="abc"), TypeError, "tokens must be a list of str (one per token), got the str 'abc'"),
        (dict(tokens=["a"]), ValueError, "tokens must have 3 entries (one per token), got 1"),
        (dict(heads=[0.0]), TypeError, "heads must be a list of ints, got [0.0]"),
        (dict(heads=2), TypeError, "heads must be a list of ints, got 2"),
        (dict(heads=[]), ValueError, "heads must be a non-empty list of head indices in [0, 1], got []"),
        (dict(heads=[2]), ValueError, "heads must be a non-empty list of head indices in [0, 1], got [2]"),
        (dict(stages={"w": torch.rand(2, 2, 3, 3)}, batch_index=2), ValueError,
         "batch_index must be in [0, 1], got 2"),
        (dict(panel_size=20), ValueError, "panel_size must be between 0.5 and 10 inches, got 20"),
        (dict(title=["t"]), TypeError, "title must be a str or None, got list ['t']"),
        (dict(limits=(0, 1)), TypeError, "limits must be a dict stage name -> (vmin, vmax) or None, got tuple (0, 1)"),
        (dict(limits={"weight": (0, 1)}), ValueError,
         "limits names 'weight', which is not a stage; the stages are ['w']"),
        (dict(limits={"w": 0.4}), TypeError, "limits['w'] must be a pair (vmin, vmax), got 0.4"),
        (dict(limits={"w": (0, "1")}), TypeError, "limits['w'] vmax must be a number or None, got str '1'"),
        (dict(limits={"w": (0, float("inf"))}), ValueError, "limits['w'] vmax must be finite, got inf"),
        (dict(limits={"w": (1, 0.5)}), ValueError, "limits['w'] must have vmin < vmax, got (1, 0.5)"),
        (dict(layout="grid"), ValueError, "layout must be 'columns' (one column per stage) or 'rows' (one row per "
                                          "stage), got 'grid'"),
    ],
)
def test_plot_stages_bad_arguments_name_themselves(kwargs, error, message):
    arguments = {"stages": {"w": _weights(2, 3, 3)}, **kwargs}
    with pytest.raises(error) as info:
        plotting.plot_stages(**arguments)
    assert message in str(info.value)
    if "layout" not in kwargs and "title" not in kwargs and "panel_size" not in kwargs:
        with pytest.raises(error) as info:  # stage_scales checks its inputs the same way
            plotting.stage_scales(**{k: v for k, v in arguments.items()})
        assert message in str(info.value)


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


# --- display width: pad, show_table ---------------------------------------------------------------------------


def test_display_width_counts_a_cjk_character_as_two_columns():
    from mha_lib.display.printing import display_width

    assert display_width("head") == 4
    assert display_width("权重") == 4
    assert display_width("头 0：") == 6  # the ideographs and the full-width colon take two columns each
    assert display_width("e\u0301") == 1  # a combining accent takes none
    assert display_width("÷ 8 × 2") == 7  # ambiguous-width signs take one, as in a notebook's Latin font
    assert display_width("") == 0
    with pytest.raises(TypeError, match="text must be a str, got int 3"):
        display_width(3)


def test_pad_fills_display_columns_and_matches_str_padding_on_ascii():
    from mha_lib.display.printing import pad

    assert pad("权重", 7) == "权重   "
    assert pad("权重", 7, ">") == "   权重"
    assert pad("权重", 7, "^") == " 权重  "
    assert "权重".rjust(7) == "     权重"  # what str.rjust does: counts characters, two columns too far right
    assert pad("raw", 7, ">") == "raw".rjust(7) and pad("raw", 7) == "raw".ljust(7)
    assert pad("掩蔽后的分数", 4) == "掩蔽后的分数"  # already wider: returned whole, never cut


@pytest.mark.parametrize(
    "args, error, message",
    [
        (("权重", 4, "left"), ValueError, r"align must be '<', '>' or '\^', got 'left'"),
        (("权重", 4.0), TypeError, "width must be an int, got float 4.0"),
        (("权重", True), TypeError, "width must be an int, got bool True"),
        (("权重", -1), ValueError, r"width must be an int in \[0, inf\], got -1"),
        ((7, 4), TypeError, "text must be a str, got int 7"),
    ],
)
def test_pad_bad_align_or_width_names_itself(args, error, message):
    from mha_lib.display.printing import pad

    with pytest.raises(error, match=message):
        pad(*args)


def test_show_table_lines_up_a_chinese_header_over_numbers(capsys):
    from mha_lib.display.printing import display_width

    mha_lib.show_table([["缩放后", 0.25, 3], ["softmax 权重", 1.0, 12]], header=["阶段", "最大值", "头数"])
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "阶段          最大值  头数",
        "缩放后        0.2500     3",
        "softmax 权重  1.0000    12",
    ]
    # every right-aligned column ends at the same display column in every line, header included
    assert {display_width(line) for line in lines} == {26}
    middle = zip(lines, ["最大值", "0.2500", "1.0000"])
    assert {display_width(line[: line.index(value) + len(value)]) for line, value in middle} == {20}


def test_show_table_bad_rows_or_align_name_themselves(capsys):
    with pytest.raises(ValueError, match=r"rows must all have 2 cells \(the first row's\), got lengths \[2, 1\]"):
        mha_lib.show_table([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"align must give one of '<', '>', '\^' per column \(3\), got '<>'"):
        mha_lib.show_table([[1, 2, 3]], align="<>")
    with pytest.raises(ValueError, match=r"align must be '<', '>' or '\^', got 'x'"):
        mha_lib.show_table([[1, 2, 3]], align="<>x")
    mha_lib.show_table([])  # no rows: nothing printed
    assert capsys.readouterr().out == ""
