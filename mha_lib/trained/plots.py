"""Figures of chapter 10: many heads of a trained model at once (matplotlib, loaded lazily).

    head_grid_figure(weights, tokens)        every head of every layer as a thumbnail, one shared 0 … 1 scale
    layer_head_figure({"title": scores})     one (layers × heads) map per score, the best head marked

Both draw a single image per panel (a mosaic for the grid), so 72 heads cost one ``imshow``, not 72 axes.
Layers and heads are counted from 0, as everywhere in the series. Both stay within the series' width
(``display.plotting.MAX_WIDTH_IN``, 1,000 px): their cells shrink to fit it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..display.plotting import MAX_WIDTH_IN
from ..language import gettext as _
from ..validation import check_tensor

Tensor = torch.Tensor


#: the figures' width at most, a little under MAX_WIDTH_IN: the notebook crops a figure to its content plus a
#: margin, which may add a few pixels
WIDTH_IN = MAX_WIDTH_IN - 0.2


def _figure(width_inches: float, height_inches: float):
    """A figure of whole pixels at 100 dpi (its repr, which the notebooks' sanitizer matches, has no decimals)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(round(width_inches * 100) / 100, round(height_inches * 100) / 100), dpi=100,
                  layout="constrained")


def _mosaic(weights: np.ndarray, gap: int) -> np.ndarray:
    """``(L, H, T, T)`` -> one ``(L·(T+gap) - gap, H·(T+gap) - gap)`` image with NaN gaps between the heads."""
    L, H, T, S = weights.shape
    image = np.full((L * (T + gap) - gap, H * (S + gap) - gap), np.nan)
    for layer in range(L):
        for head in range(H):
            top, left = layer * (T + gap), head * (S + gap)
            image[top:top + T, left:left + S] = weights[layer, head]
    return image


def head_grid_figure(weights: Tensor, tokens, *, title: str | None = None, cell_inches: float = 0.85):
    """Every head as a thumbnail: rows are layers, columns heads, all on the same 0 … 1 colour scale.

    ``cell_inches``: a thumbnail's side at most; smaller when the heads would not fit ``WIDTH_IN``."""
    weights = check_tensor("weights", weights, ndim=4, layout="(L, H, T, T)")
    L, H, T, _S = weights.shape
    cell_inches = min(cell_inches, (WIDTH_IN - 1.4) / H)
    if len(tokens) != T:
        raise ValueError(f"tokens must have one label per position (T = {T}), got {len(tokens)}")
    gap = max(1, math.ceil(T / 6))
    image = _mosaic(weights.detach().float().cpu().numpy(), gap)
    fig = _figure(H * cell_inches + 1.4, L * cell_inches + 1.1)
    ax = fig.add_subplot()
    cmap = __import__("matplotlib").colormaps["viridis"].with_extremes(bad="white")
    shown = ax.imshow(np.ma.masked_invalid(image), cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks([h * (T + gap) + (T - 1) / 2 for h in range(H)], [_("head {h}").format(h=h) for h in range(H)], fontsize=10)
    ax.set_yticks([l * (T + gap) + (T - 1) / 2 for l in range(L)], [_("layer {l}").format(l=l) for l in range(L)], fontsize=10)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    bar = fig.colorbar(shown, ax=ax, shrink=0.8, pad=0.01)
    bar.set_label(_("attention weight (query row → key column)"), fontsize=10)
    if title:
        fig.suptitle(title, fontsize=12)
    return fig


def layer_head_figure(panels: dict, *, title: str | None = None, cmap: str = "viridis", ncols: int = 3,
                      best: str = "max", vmin: float | None = 0.0, vmax: float | None = None,
                      colorbar_label: str | None = None, cell_inches: float = 0.25):
    """One (layers × heads) map per entry of ``panels`` (``{title: (L, H) tensor}``); a box marks the best head.

    With both ``vmin`` and ``vmax`` given, all panels share one colour bar; otherwise each has its own.

    ``best``: ``"max"`` or ``"min"`` (for entropy, the most focused head is the one with the smallest value),
    or a dict ``{title: "max" / "min"}``.
    """
    from matplotlib.patches import Rectangle

    if not isinstance(panels, dict) or not panels:
        raise ValueError("panels must be a non-empty dict {title: (L, H) tensor}")
    ncols = min(ncols, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    shared = vmin is not None and vmax is not None  # a fixed range: every panel uses the same colours
    first = next(iter(panels.values()))
    L, H = first.shape
    # cells shrink so that the columns fit WIDTH_IN; a single panel can afford larger cells
    cell_inches = min(cell_inches, (WIDTH_IN / ncols - 0.85) / H)
    fig = _figure(ncols * (H * cell_inches + 0.85), nrows * (L * cell_inches + 1.3))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, (name, values) in zip(axes.flat, panels.items()):
        values = check_tensor(name, values, ndim=2, layout="(L, H)").detach().float().cpu().numpy()
        lo = values.min() if vmin is None else vmin
        hi = values.max() if vmax is None else vmax
        shown = ax.imshow(values, cmap=cmap, vmin=lo, vmax=hi, aspect="equal")
        rule = best.get(name, "max") if isinstance(best, dict) else best
        flat = values.argmin() if rule == "min" else values.argmax()
        layer, head = divmod(int(flat), H)
        ax.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        best_text = (_("smallest: layer {layer} head {head} ({value:.2f})") if rule == "min" else
                     _("largest: layer {layer} head {head} ({value:.2f})")).format(
            layer=layer, head=head, value=values[layer, head])
        ax.set_title(f"{name}\n{best_text}", fontsize=10)
        ax.set_xticks(range(0, H, 2), [str(h) for h in range(0, H, 2)], fontsize=10)
        ax.set_yticks(range(L), [str(l) for l in range(L)], fontsize=10)
        ax.set_xlabel(_("head"), fontsize=10)
        ax.set_ylabel(_("layer"), fontsize=10)
        if not shared:
            fig.colorbar(shown, ax=ax, shrink=0.85).ax.tick_params(labelsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if shared:  # one colour bar for all panels: fewer axes, a faster figure, and one scale to read
        bar = fig.colorbar(shown, ax=axes, shrink=0.8, pad=0.02)
        bar.ax.tick_params(labelsize=10)
        if colorbar_label:
            bar.set_label(colorbar_label, fontsize=10)
    if title:
        fig.suptitle(title, fontsize=12)
    return fig


__all__ = ["head_grid_figure", "layer_head_figure"]
