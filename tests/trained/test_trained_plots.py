"""Chapter 10's figures: one image for 72 heads, whole-pixel sizes, the best head marked, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

from mha_lib.trained.plots import _mosaic, head_grid_figure, layer_head_figure  # noqa: E402


def test_the_mosaic_puts_each_head_in_its_place_with_gaps():
    weights = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).view(2, 3, 2, 2).numpy()  # (L, H, T, T)
    image = _mosaic(weights, gap=1)
    assert image.shape == (2 * 3 - 1, 3 * 3 - 1)
    assert np.array_equal(image[3:5, 6:8], weights[1, 2])  # layer 1, head 2
    assert np.isnan(image[2]).all() and np.isnan(image[:, 2]).all()  # the gaps


def test_head_grid_is_one_image_of_whole_pixels():
    fig = head_grid_figure(torch.rand(6, 12, 16, 16), [f"t{i}" for i in range(16)], title="grid")
    assert len(fig.axes) == 2  # the mosaic and its colour bar, not 72 axes
    assert repr(fig) == "<Figure size 980x530 with 2 Axes>"  # 12 heads shrink to fit 1,000 px
    with pytest.raises(ValueError, match=r"tokens must have one label per position \(T = 16\), got 3"):
        head_grid_figure(torch.rand(6, 12, 16, 16), ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"weights must be 4-D \(L, H, T, T\)"):
        head_grid_figure(torch.rand(12, 16, 16), ["a"] * 16)


def test_layer_head_figure_marks_the_largest_or_smallest_head():
    values = torch.zeros(6, 12)
    values[4, 5] = 0.9
    values[1, 2] = -0.5
    fig = layer_head_figure({"high": values, "low": values}, best={"low": "min"}, vmin=-1.0, vmax=1.0)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["high\nlargest: layer 4 head 5 (0.90)", "low\nsmallest: layer 1 head 2 (-0.50)"]
    assert "." not in repr(fig).split(" with")[0]  # whole pixels: the sanitizer's Figure pattern matches
    with pytest.raises(ValueError, match=r"panels must be a non-empty dict"):
        layer_head_figure({})
