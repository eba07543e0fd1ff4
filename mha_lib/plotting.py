"""Heatmaps of attention matrices, one panel per head, with the tokens on both axes.

matplotlib is imported here only, so ``import mha_lib`` stays light. The figure is a plain
``matplotlib.figure.Figure`` (not a pyplot figure): nothing global is touched, nothing is shown twice, and the
caller decides what to do with it (a notebook displays it when it is the cell's last value).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from .fonts import use_cjk_fallback
from .validation import check_positive_int, check_tensor


def plot_heads(
    weights: torch.Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    batch_index: int = 0,
    title: str | None = None,
    head_titles: Sequence[str] | None = None,
    ncols: int | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar_label: str = "attention weight",
    panel_size: float = 2.6,
):
    """Draw one heatmap per head and return the ``Figure``.

    weights: ``(T, S)`` one matrix, ``(H, T, S)`` one per head, or ``(B, H, T, S)`` (``batch_index`` picks
    the sequence). Row ``t`` is what query token ``t`` attends to. All panels share one colour scale (default:
    0 to the largest value, or the data's range when it has negative entries), shown by one colour bar.
    """
    from matplotlib.figure import Figure  # lazy: plotting is optional

    use_cjk_fallback()  # tokens in any script get real glyphs, not boxes

    check_tensor("weights", weights)
    if weights.dim() == 4:
        if not 0 <= batch_index < weights.shape[0]:
            raise ValueError(f"batch_index must be in [0, {weights.shape[0] - 1}], got {batch_index}")
        weights = weights[batch_index]  # (B, H, T, S) -> (H, T, S)
    elif weights.dim() == 2:
        weights = weights[None]  # (T, S) -> (1, T, S)
    elif weights.dim() != 3:
        raise ValueError(f"weights must be (T, S), (H, T, S) or (B, H, T, S), got {weights.dim()}-D")
    data = weights.detach().float().cpu()
    if torch.isnan(data).any():
        raise ValueError("weights contain NaN; a fully masked row is the usual cause")
    H, T, S = data.shape
    query_labels = _labels("query_labels", query_labels, T)
    key_labels = query_labels if key_labels is None and S == T else _labels("key_labels", key_labels, S)
    if head_titles is not None and len(head_titles) != H:
        raise ValueError(f"head_titles must have {H} entries (one per head), got {len(head_titles)}")

    finite = data[torch.isfinite(data)]
    lo = float(finite.min()) if finite.numel() else 0.0
    hi = float(finite.max()) if finite.numel() else 1.0
    vmin = (0.0 if lo >= 0 else lo) if vmin is None else vmin
    vmax = (hi if hi > vmin else vmin + 1.0) if vmax is None else vmax

    ncols = min(H, 4) if ncols is None else check_positive_int("ncols", ncols)
    nrows = math.ceil(H / ncols)
    size = (panel_size * ncols + 1.0, panel_size * nrows + (0.5 if title else 0.2))  # + colour bar, title
    fig = Figure(figsize=size, dpi=100, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    fontsize = 8 if max(T, S) <= 12 else 6
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.set_visible(False)
            continue
        image = ax.imshow(data[h].numpy(), cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal")
        ax.set_title(head_titles[h] if head_titles else (f"head {h}" if H > 1 else "attention"), fontsize=9)
        ax.set_xticks(range(S), key_labels, rotation=90, fontsize=fontsize)
        ax.set_yticks(range(T), query_labels, fontsize=fontsize)
        ax.tick_params(length=0)
        if h % ncols == 0:
            ax.set_ylabel("query (row attends ...)", fontsize=8)
        if h + ncols >= H:
            ax.set_xlabel("key (... to column)", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.colorbar(image, ax=list(axes.flat), shrink=0.8, label=colorbar_label)
    return fig


def _labels(name: str, labels, n: int) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name} must have {n} entries (one per token), got {len(labels)}")
    return labels
