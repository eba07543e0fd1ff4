"""Heatmaps of attention matrices, one panel per head, with the tokens on both axes.

matplotlib is imported here only, so ``import mha_lib`` stays light. The figure is a plain
``matplotlib.figure.Figure`` (not a pyplot figure): nothing global is touched, nothing is shown twice, and the
caller decides what to do with it (a notebook displays it when it is the cell's last value).

The colour rules of the whole series live here (the explorers in ``widgets.py`` use the same ones):

* one colour map per quantity: attention **weights** use the sequential ``viridis`` from 0 up; **scores**
  (raw, scaled, masked: anything signed) use the diverging ``RdBu_r`` with limits ``±bound``, so 0 is always
  the white middle;
* masked entries (−∞ scores, or weights the mask blocked) are light grey, ``MASKED_RGB``, whatever the map;
* NaN is never drawn as a number: ``plot_heads`` refuses it unless asked to show it (``nan="show"``: red
  hatching and a note);
* one row must not wash out the rest: a row that is off the scale (a query with a single key to attend to,
  whose weight is 1 by construction; a row of scores far larger than all others) is left out of the colour
  range, drawn in the end colour, and a note under the figure says so;
* sizes for a projector, at the 100 dpi a notebook shows the figure at: labels ≥ 10 px (8 pt = 11 px),
  titles 12.5 px, and no figure taller than ``MAX_HEIGHT_IN`` (900 px) or wider than ``MAX_WIDTH_IN``
  (1000 px): panels shrink, or more of them go in a row, and long token lists are labelled every k-th token.
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from typing import NamedTuple, Sequence

import numpy as np
import torch

from .fonts import use_cjk_fallback
from ..language import gettext as _, ngettext
from ..validation import check_positive_int, check_tensor

#: One colour map per quantity, across the series (plot_heads, the explorers, the chapters' own figures).
COLORMAPS = {"weights": "viridis", "scores": "RdBu_r"}
QUANTITIES = ("auto", "weights", "scores")
MASKED_RGB = (205, 205, 205)  # masked (−∞ / blocked) entries: light grey
MASKED_STRIPE_RGB = (140, 140, 140)  # the explorer's stripes over them
NAN_RGB = (214, 39, 40)  # NaN: red hatching

DPI = 100  # what a notebook shows: 1 inch = 100 px, so a font of p points is p × 100/72 px
LABEL_PT = 8.0  # tick and token labels: 11.1 px
TITLE_PT = 9.0  # panel titles, axis names, colour-bar label, notes: 12.5 px
SUPTITLE_PT = 11.0
MIN_LABEL_PX = 10.0
MAX_HEIGHT_IN = 9.0  # 900 px: fits a 1080-line screen or projector below the notebook's toolbar
MAX_WIDTH_IN = 10.0  # 1000 px: the notebook panel beside JupyterLab's file browser at 1,440 px shows it unscaled
MAX_COLUMNS = 8
PAD_IN = 0.1  # margin around the figure's content: the inline backend's tight crop pads 0.1 in too, so the stored PNG keeps the figure's width
# A row is left out of an automatic range when the rest of the data spans less than this share of it: a row of
# weights with a single key (weight 1 by construction, it says nothing) as soon as that gains 10 % of contrast;
# a row of scores only when it is a real outlier (1.5 × every other row).
OFF_SCALE = {"weights": 0.9, "scores": 2 / 3}


def px(points: float, dpi: float = DPI) -> float:
    """The height in pixels of a ``points`` font drawn at ``dpi`` (what the readability tests measure)."""
    return points * dpi / 72


# --- colour scales (no matplotlib needed) ---------------------------------------------------------------------


class Scale(NamedTuple):
    """How one quantity is coloured: the map, its limits, the overflow arrows and a note for the reader."""

    quantity: str  # "weights" or "scores"
    cmap: str
    vmin: float
    vmax: float
    extend: str  # "neither", "min", "max", "both": data beyond the limits (drawn in the end colours)
    note: str | None  # says which row was left out of the range, when one was


def colour_scale(
    values,
    quantity: str = "auto",
    *,
    keep=None,
    vmin: float | None = None,
    vmax: float | None = None,
    robust: bool = True,
    labels: Sequence[str] | None = None,
) -> Scale:
    """The colour scale of ``values`` ``(H, T, S)`` (a tensor or numpy array; NaN and −∞ are ignored).

    ``quantity``: ``"weights"`` (0 up to the largest value, ``viridis``), ``"scores"`` (``±`` the largest
    ``|value|``, ``RdBu_r``, centred on 0) or ``"auto"`` (scores when anything is negative or −∞, else
    weights). ``keep``: a boolean array broadcastable to ``values``; blocked entries do not count. ``vmin`` /
    ``vmax``: fixed limits (for scores, one of them is mirrored: the scale stays centred). ``robust``: leave one
    off-scale row out of an automatic range (see the module's docstring); ``labels`` names the rows in the note.
    """
    quantity = _check_quantity(quantity)
    array = np.asarray(values.detach().cpu().float() if isinstance(values, torch.Tensor) else values, float)
    if array.ndim == 2:
        array = array[None]  # (T, S) -> (1, T, S)
    usable = np.isfinite(array) if keep is None else np.isfinite(array) & np.broadcast_to(keep, array.shape)
    if quantity == "auto":
        quantity = "scores" if np.isneginf(array).any() or (array[usable] < 0).any() else "weights"
    vmin, vmax = _check_limit("vmin", vmin), _check_limit("vmax", vmax)
    if not isinstance(robust, bool):
        raise TypeError(f"robust must be True or False, got {type(robust).__name__} {robust!r}")
    names = list(labels) if labels is not None else [str(t) for t in range(array.shape[1])]

    note = None
    if quantity == "weights":
        lo = 0.0 if vmin is None else vmin
        hi = vmax
        if hi is None:
            full = float(array[usable].max()) if usable.any() else lo + 1.0
            hi = full
            if robust:
                # a row whose only non-zero entry is its weight 1: a query with one key to attend to
                single = ((array != 0) & usable).sum(-1) == 1  # (H, T)
                rows = np.flatnonzero(single.all(0))
                rest = usable.copy()
                rest[:, rows] = False
                if len(rows) and rest.any() and lo < float(array[rest].max()) < OFF_SCALE["weights"] * full:
                    hi = float(array[rest].max())
                    which = ", ".join(f'"{names[t]}"' for t in rows[:3]) + (" …" if len(rows) > 3 else "")
                    note = ngettext("row {which} left out of the colour range: one key to attend to, weight "
                                    "{weight:.2f} (drawn in the top colour)",
                                    "rows {which} left out of the colour range: one key to attend to, weight "
                                    "{weight:.2f} (drawn in the top colour)", len(rows)).format(which=which,
                                                                                                 weight=full)
            if not hi > lo:
                hi = lo + 1.0
    else:
        if vmin is not None and vmax is not None:
            lo, hi = vmin, vmax
        elif vmin is not None or vmax is not None:
            bound = abs(vmax if vmax is not None else vmin)
            lo, hi = -bound, bound
        else:
            magnitude = np.where(usable, np.abs(np.where(usable, array, 0.0)), 0.0)  # (H, T, S)
            rows = magnitude.max(axis=(0, 2))  # (T,): the largest |value| of each query row, all heads
            bound = float(rows.max()) if rows.size else 0.0
            if robust and rows.size > 2:
                top = int(rows.argmax())
                rest = float(np.delete(rows, top).max())
                if 0 < rest < OFF_SCALE["scores"] * bound:
                    note = _('row "{name}" left out of the colour range: |value| up to {bound:.3g} '
                             "(drawn in the end colours)").format(name=names[top], bound=bound)
                    bound = rest
            bound = bound if bound > 0 else 1.0  # an all-zero matrix still gets a usable scale
            lo, hi = -bound, bound
    if not hi > lo:
        raise ValueError(f"vmin must be smaller than vmax, got vmin={lo} and vmax={hi}")
    data = array[usable]
    above, below = bool((data > hi).any()), bool((data < lo).any())
    extend = {(True, True): "both", (True, False): "max", (False, True): "min"}.get((above, below), "neither")
    return Scale(quantity, COLORMAPS[quantity], float(lo), float(hi), extend, note)


def _check_quantity(quantity) -> str:
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity must be one of {list(QUANTITIES)}, got {quantity!r}")
    return quantity


def _check_limit(name: str, value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number or None, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


# --- plot_heads -----------------------------------------------------------------------------------------------


def plot_heads(
    weights: torch.Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    batch_index: int = 0,
    title: str | None = None,
    head_titles: Sequence[str] | None = None,
    ncols: int | None = None,
    cmap=None,
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar_label: str | None = None,
    panel_size: float = 2.6,
    quantity: str = "auto",
    mask="auto",
    robust: bool = True,
    nan: str = "raise",
):
    """Draw one heatmap per head and return the ``Figure``.

    weights: ``(T, S)`` one matrix, ``(H, T, S)`` one per head, or ``(B, H, T, S)`` (``batch_index`` picks
    the sequence). Row ``t`` is what query token ``t`` attends to. All panels share one colour scale, shown by
    one colour bar, chosen by ``quantity`` (see ``colour_scale``): ``"weights"`` 0 … max in ``viridis``,
    ``"scores"`` ±max in ``RdBu_r`` centred on 0, ``"auto"`` (scores when any value is negative or −∞).
    ``vmin`` / ``vmax`` fix the limits; ``cmap`` overrides the map (the series uses one map per quantity:
    leave it out). ``robust`` leaves one off-scale row out of the automatic range and says so under the figure.

    mask: which entries were blocked, drawn grey. A ``torch.bool`` keep mask (``True`` = attend) that
    broadcasts to ``weights``; ``"auto"`` (for weights: an upper triangle that is exactly 0 in every head is a
    causal mask, a key column that is exactly 0 everywhere is padding); ``None``: none. −∞ is always grey.

    nan: ``"raise"`` (a ``ValueError``: NaN weights mean a bug upstream, usually a fully masked row) or
    ``"show"`` (NaN entries hatched red, with a note). Labels are lists of strings (one per token); panels
    shrink (or ``ncols`` grows, when not given) so that the figure stays within 1200 × 900 px.
    """
    from matplotlib.figure import Figure  # lazy: plotting is optional

    check_tensor("weights", weights)
    if weights.is_complex() or weights.dtype == torch.bool:
        raise TypeError(f"weights must be a real-valued tensor, got dtype {weights.dtype}")
    if weights.dim() not in (2, 3, 4):
        raise ValueError(f"weights must be (T, S), (H, T, S) or (B, H, T, S), got {weights.dim()}-D "
                         f"shape {tuple(weights.shape)}")
    if weights.numel() == 0:
        raise ValueError(f"weights must not be empty, got shape {tuple(weights.shape)}")
    keep = _keep_mask(mask, weights)  # broadcast to the shape of weights, or None
    if weights.dim() == 4:
        weights = _one_sequence(weights, batch_index)  # (B, H, T, S) -> (H, T, S)
        keep = None if keep is None else keep[batch_index]  # (B, H, T, S) -> (H, T, S)
    elif weights.dim() == 2:
        weights = weights[None]  # (T, S) -> (1, T, S)
        keep = None if keep is None else keep[None]  # (T, S) -> (1, T, S)
    data = weights.detach().cpu().double().numpy()  # (H, T, S)
    H, T, S = data.shape
    keep = None if keep is None else keep.cpu().numpy()  # (H, T, S)
    if nan not in ("raise", "show"):
        raise ValueError(f"nan must be 'raise' or 'show', got {nan!r}")
    nans = np.isnan(data)
    if nans.any() and nan == "raise":
        raise ValueError("weights contain NaN (a fully masked row is the usual cause); fix the computation, or "
                         "pass nan='show' to draw them hatched")
    query_labels = _labels("query_labels", query_labels, T)
    key_labels = query_labels if key_labels is None and S == T else _labels("key_labels", key_labels, S)
    head_titles = _titles(head_titles, H)
    for name, value in (("title", title), ("colorbar_label", colorbar_label)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, got {type(value).__name__} {value!r}")
    if ncols is not None:
        ncols = check_positive_int("ncols", ncols)
    panel_size = _check_size("panel_size", panel_size)

    if isinstance(mask, str) and _check_quantity(quantity) != "scores":  # mask="auto"
        keep = _inferred_keep(data)
    scale = colour_scale(data, quantity, keep=keep, vmin=vmin, vmax=vmax, robust=robust, labels=query_labels)
    blocked = np.isneginf(data) if keep is None else np.isneginf(data) | ~keep
    label = colorbar_label if colorbar_label is not None else (
        _("attention weight") if scale.quantity == "weights" else _("score"))
    notes = []
    if blocked.any():
        notes.append(_("grey: masked"))
    if nans.any():
        notes.append(_("red hatching: NaN ({n} entries)").format(n=int(nans.sum())))
    if scale.note:
        notes.append(scale.note)

    use_cjk_fallback()  # tokens in any script get real glyphs, not boxes
    lay = _layout(H, ncols, panel_size, query_labels, key_labels, head_titles, title, len(notes))
    wrapped = _wrap(head_titles, lay.panel)  # long panel titles on several lines, not into their neighbours
    if wrapped != head_titles:
        head_titles = wrapped
        lay = _layout(H, ncols, panel_size, query_labels, key_labels, head_titles, title, len(notes))
    fig = Figure(figsize=lay.size, dpi=DPI, layout="constrained")
    fig.get_layout_engine().set(h_pad=PAD_IN, w_pad=PAD_IN)  # rotated labels can settle a few px further out
    axes = fig.subplots(lay.rows, lay.cols, squeeze=False)
    colours = _colormap(cmap, scale.cmap)
    norm = _norm(scale)
    shown = np.ma.masked_array(data, mask=blocked | nans)  # masked entries take the map's "bad" colour (grey)
    rotate = any(_text_width(label, LABEL_PT) > 0.9 * lay.panel / S for label in key_labels)  # wider than a column
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.set_visible(False)
            continue
        image = ax.imshow(shown[h], cmap=colours, norm=norm, aspect="equal", interpolation="nearest")
        if nans[h].any():
            _hatch(ax, nans[h])
        ax.set_title(head_titles[h] if head_titles else (_("head {h}").format(h=h) if H > 1 else _("attention")),
                     fontsize=TITLE_PT)
        # the panels share their axes (as in the explorer): query labels on the first column, key labels under
        # the lowest panel of each column, which leaves the room to the matrices
        _ticks(ax.xaxis, key_labels if h + lay.cols >= H else None, lay.panel, 90 if rotate else 0)
        _ticks(ax.yaxis, query_labels if h % lay.cols == 0 else None, lay.panel, 0)
        ax.tick_params(length=0, pad=2)
        if h % lay.cols == 0:
            ax.set_ylabel(_("query (row attends …)"), fontsize=TITLE_PT)
        if h + lay.cols >= H:
            ax.set_xlabel(_("key (… to column)"), fontsize=TITLE_PT)
    if title:
        fig.suptitle(title, fontsize=SUPTITLE_PT)
    bar = fig.colorbar(image, ax=list(axes.flat), shrink=0.9 if lay.rows == 1 else 0.8,
                       extend=scale.extend, aspect=25)
    bar.set_label(label, fontsize=TITLE_PT)
    bar.ax.tick_params(labelsize=LABEL_PT)
    if notes:
        fig.supxlabel("\n".join(notes), fontsize=TITLE_PT, color="0.25")
    return fig


STAGE_LAYOUTS = ("columns", "rows")


def stage_scales(
    stages: dict,
    tokens: Sequence[str] | None = None,
    *,
    heads: Sequence[int] | None = None,
    batch_index: int = 0,
    limits: dict | None = None,
    robust: bool = True,
) -> dict[str, Scale]:
    """The colour scale ``plot_stages`` gives each stage, for the heads it shows: ``{name: Scale}``.

    The arguments mean what they mean for ``plot_stages``; print the scales' ``vmin`` / ``vmax`` beside the
    figure to put its colour bars' ranges in the notebook's text.
    """
    arrays, labels, _keys, heads, limits = _stage_inputs(stages, tokens, heads, batch_index, limits)
    return {name: _stage_scale(name, array[heads], limits.get(name), robust, labels)[0]
            for name, array in arrays.items()}


def plot_stages(
    stages: dict,
    tokens: Sequence[str] | None = None,
    *,
    heads: Sequence[int] | None = None,
    batch_index: int = 0,
    title: str | None = None,
    panel_size: float = 2.3,
    robust: bool = True,
    limits: dict | None = None,
    layout: str = "columns",
):
    """A grid of stages × heads, each stage with its own colour scale and colour bar.

    ``stages``: an ordered dict ``name -> tensor`` of ``(H, T, S)`` or ``(B, H, T, S)`` (e.g. raw scores,
    scaled, masked, weights). Each stage is coloured as ``plot_heads`` colours it (``quantity="auto"``: a
    stage named "weights" or holding probabilities uses the weights' map, signed ones the scores' map; −∞
    scores and the weights they block grey). ``heads``: which heads to show (default: up to the first 4).
    ``limits``: ``{name: (vmin, vmax)}`` fixes a stage's colour range (``None`` for an automatic end), e.g.
    ``{"weights": (0.0, 0.4)}`` keeps the first rows' large weights from washing out the rest; values beyond
    it take the end colour and an arrow on the colour bar. ``layout``: ``"columns"`` (one column per stage,
    read left to right like the computation, one row per head, the colour bars underneath) or ``"rows"``
    (one row per stage, one column per head, the colour bars on the right). The panels are as large as the
    caps allow, so that every token gets its label (16 tokens fit in up to 3 rows of panels); a grid too
    large for that labels every k-th token.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    arrays, labels, keys, heads, limits = _stage_inputs(stages, tokens, heads, batch_index, limits)
    panel_size = _check_size("panel_size", panel_size)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__} {title!r}")
    if layout not in STAGE_LAYOUTS:
        raise ValueError(f"layout must be 'columns' (one column per stage) or 'rows' (one row per stage), "
                         f"got {layout!r}")

    drawn, notes = {}, []
    for name, array in arrays.items():
        data = array[heads]  # (heads, T, S)
        scale, blocked = _stage_scale(name, data, limits.get(name), robust, labels)
        drawn[name] = (np.ma.masked_array(data, mask=blocked), scale)  # masked entries: the map's grey
        if scale.note:
            notes.append(_("{name}: {note}").format(name=name, note=scale.note))
        if name in limits:
            beyond = {"max": _("; larger values take the end colour (the arrow on its colour bar)"),
                      "min": _("; smaller values take the end colour (the arrow on its colour bar)"),
                      "both": _("; values beyond it take the end colour (the arrow on its colour bar)")}
            notes.append(_("{name}: colour range fixed at {vmin:g} to {vmax:g}").format(
                name=name, vmin=scale.vmin, vmax=scale.vmax) + beyond.get(scale.extend, ""))
    if any(np.ma.getmaskarray(shown).any() for shown, _mask in drawn.values()):
        notes.insert(0, _("grey: masked (−∞ before the softmax, weight 0 after it)"))

    use_cjk_fallback()  # tokens in any script get real glyphs, not boxes
    by_columns = layout == "columns"
    n_rows, n_cols = (len(heads), len(drawn)) if by_columns else (len(drawn), len(heads))
    grid = _fit_stage_grid(n_rows, n_cols, by_columns, panel_size, labels, keys, title, notes)
    fig = Figure(figsize=grid.size, dpi=DPI, layout="constrained")
    fig.get_layout_engine().set(h_pad=PAD_IN, w_pad=PAD_IN)  # rotated labels can settle a few px further out
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    for s, (name, (shown, scale)) in enumerate(drawn.items()):
        colours, norm = _colormap(None, scale.cmap), _norm(scale)
        for h, head in enumerate(heads):
            row, col = (h, s) if by_columns else (s, h)
            ax = axes[row, col]
            image = ax.imshow(shown[h], cmap=colours, norm=norm, aspect="equal", interpolation="nearest")
            # a table: stage or head named once, over the top row and beside the first column
            if row == 0:
                ax.set_title(name if by_columns else _("head {h}").format(h=head), fontsize=TITLE_PT)
            if col == 0:
                ax.set_ylabel(_("head {h}").format(h=head) if by_columns else name, fontsize=TITLE_PT)
            _ticks(ax.xaxis, keys if row == n_rows - 1 else None, grid.panel, 90 if grid.rotate else 0)
            _ticks(ax.yaxis, labels if col == 0 else None, grid.panel, 0)
            ax.tick_params(length=0, pad=2)
        group = axes[:, s] if by_columns else axes[s, :]
        bar = fig.colorbar(image, ax=group.tolist(), location="bottom" if by_columns else "right",
                           extend=scale.extend, shrink=0.9, aspect=20 if by_columns else 12,
                           fraction=0.05 if by_columns else 0.15, pad=0.02)
        bar.set_label(name, fontsize=TITLE_PT)
        bar.ax.tick_params(labelsize=LABEL_PT)
        bar.locator = MaxNLocator(nbins=5 if by_columns else 6, steps=[1, 2, 2.5, 5, 10])  # short bar: few ticks
        bar.update_ticks()
    if title:
        fig.suptitle(title, fontsize=SUPTITLE_PT)
    if grid.notes:
        fig.supxlabel("\n".join(grid.notes), fontsize=TITLE_PT, color="0.25")
    return fig


def _stage_inputs(stages, tokens, heads, batch_index, limits):
    """``plot_stages``' inputs checked: ``(arrays (H, T, S) by name, query labels, key labels, heads,
    limits by name)``."""
    if not isinstance(stages, dict) or not stages:
        raise TypeError(f"stages must be a non-empty dict name -> tensor, got {type(stages).__name__}")
    arrays = {}
    for name, values in stages.items():
        if not isinstance(name, str):
            raise TypeError(f"stages must have str names, got {type(name).__name__} {name!r}")
        check_tensor(f"stages[{name!r}]", values)
        if values.dim() == 4:
            values = _one_sequence(values, batch_index)  # (B, H, T, S) -> (H, T, S)
        if values.dim() != 3:
            raise ValueError(f"stages[{name!r}] must be (H, T, S) or (B, H, T, S), got shape {tuple(values.shape)}")
        arrays[name] = values.detach().cpu().double().numpy()
    shapes = {a.shape for a in arrays.values()}
    if len(shapes) != 1:
        raise ValueError(f"stages must all have one shape, got {sorted(shapes)}")
    H, T, S = shapes.pop()
    if any(np.isnan(a).any() for a in arrays.values()):
        raise ValueError("stages contain NaN (a fully masked row is the usual cause)")
    labels = _labels("tokens", tokens, T)
    keys = labels if S == T else [str(s) for s in range(S)]
    if heads is None:
        heads = list(range(min(H, 4)))
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence) or not all(
            isinstance(h, numbers.Integral) and not isinstance(h, bool) for h in heads):
        raise TypeError(f"heads must be a list of ints, got {heads!r}")
    heads = [int(h) for h in heads]
    if not heads or not all(0 <= h < H for h in heads):
        raise ValueError(f"heads must be a non-empty list of head indices in [0, {H - 1}], got {heads}")
    if limits is None:
        limits = {}
    if not isinstance(limits, dict):
        raise TypeError(f"limits must be a dict stage name -> (vmin, vmax) or None, got {type(limits).__name__} "
                        f"{limits!r}")
    checked = {}
    for name, pair in limits.items():
        if name not in arrays:
            raise ValueError(f"limits names {name!r}, which is not a stage; the stages are {list(arrays)}")
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"limits[{name!r}] must be a pair (vmin, vmax), got {pair!r}")
        low, high = _check_limit(f"limits[{name!r}] vmin", pair[0]), _check_limit(f"limits[{name!r}] vmax", pair[1])
        if low is not None and high is not None and not low < high:
            raise ValueError(f"limits[{name!r}] must have vmin < vmax, got {pair!r}")
        checked[name] = (low, high)
    return arrays, labels, keys, heads, checked


def _stage_scale(name, data, limit, robust, labels) -> tuple[Scale, np.ndarray]:
    """One stage's colour scale and its blocked entries (−∞, or weights a causal / padding mask blocked)."""
    quantity = "weights" if "weight" in name.lower() else "auto"
    keep = _inferred_keep(data) if quantity == "weights" or (data >= 0).all() else None
    vmin, vmax = limit if limit is not None else (None, None)
    scale = colour_scale(data, quantity, keep=keep, vmin=vmin, vmax=vmax, robust=robust, labels=labels)
    blocked = np.isneginf(data) if keep is None else np.isneginf(data) | ~keep
    return scale, blocked


# --- helpers --------------------------------------------------------------------------------------------------


def _labels(name: str, labels, n: int) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    if isinstance(labels, (str, bytes)):
        raise TypeError(f"{name} must be a list of str (one per token), got the str {labels!r}; "
                        f"split it first, e.g. mha_lib.tokenize(text)")
    if isinstance(labels, torch.Tensor) or not isinstance(labels, Sequence):
        raise TypeError(f"{name} must be a list of str (one per token), got {type(labels).__name__}")
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name} must have {n} entries (one per token), got {len(labels)}")
    return labels


def _titles(head_titles, heads: int) -> list[str] | None:
    if head_titles is None:
        return None
    if isinstance(head_titles, (str, bytes)) or not isinstance(head_titles, Sequence):
        raise TypeError(f"head_titles must be a list of str (one per head), got {type(head_titles).__name__} "
                        f"{head_titles!r}")
    if len(head_titles) != heads:
        raise ValueError(f"head_titles must have {heads} entries (one per head), got {len(head_titles)}")
    return [str(t) for t in head_titles]


def _check_size(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of inches, got {type(value).__name__} {value!r}")
    if not (math.isfinite(value) and 0.5 <= value <= 10):
        raise ValueError(f"{name} must be between 0.5 and 10 inches, got {value}")
    return float(value)


def _keep_mask(mask, weights: torch.Tensor) -> torch.Tensor | None:
    """The explicit keep mask, checked (``"auto"`` and ``None`` give ``None`` here)."""
    if mask is None or (isinstance(mask, str) and mask == "auto"):
        return None
    if isinstance(mask, str):
        raise ValueError(f"mask must be a torch.bool keep mask, 'auto' or None, got {mask!r}")
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.bool keep mask, 'auto' or None, got {type(mask).__name__} {mask!r}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a torch.bool keep mask (True = attend), got dtype {mask.dtype}")
    pairs = zip(reversed(mask.shape), reversed(weights.shape))
    if mask.dim() > weights.dim() or any(m not in (1, w) for m, w in pairs):
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to weights of shape "
                         f"{tuple(weights.shape)}")
    return mask.expand(weights.shape)


def _inferred_keep(data: np.ndarray) -> np.ndarray | None:
    """For weights ``(H, T, S)``: a causal mask (upper triangle exactly 0 in every head) and padded keys
    (columns exactly 0 in every row and head); ``None`` when neither is there."""
    H, T, S = data.shape
    if (data < 0).any() or not np.isfinite(data[~np.isnan(data)]).all():
        return None
    keep = np.ones((T, S), bool)
    if T == S > 1:
        above = np.triu(np.ones((T, S), bool), 1)
        if (data[:, above] == 0).all():
            keep &= ~above
    if T > 1:
        keep &= ~(data == 0).all(axis=(0, 1))[None, :]
    return None if keep.all() else keep


def _colormap(cmap, default: str):
    """The colour map (a name or a Colormap), with masked entries grey."""
    from matplotlib import colormaps
    from matplotlib.colors import Colormap

    if cmap is None:
        cmap = default
    if isinstance(cmap, str):
        if cmap not in colormaps:
            raise ValueError(f"cmap must be a matplotlib colour map name, got {cmap!r}")
        cmap = colormaps[cmap]
    elif not isinstance(cmap, Colormap):
        raise TypeError(f"cmap must be a colour map name or a matplotlib Colormap, got {type(cmap).__name__}")
    return cmap.with_extremes(bad=[c / 255 for c in MASKED_RGB])


def _norm(scale: Scale):
    from matplotlib.colors import Normalize, TwoSlopeNorm

    if scale.quantity == "scores" and scale.vmin < 0 < scale.vmax and scale.vmin != -scale.vmax:
        return TwoSlopeNorm(0.0, scale.vmin, scale.vmax)  # asymmetric limits given: 0 stays the middle colour
    return Normalize(scale.vmin, scale.vmax)


def _hatch(ax, nans: np.ndarray) -> None:
    """Red hatching over NaN entries (one rectangle per run of NaN in a row)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    patches = []
    for t, row in enumerate(nans):
        s = 0
        while s < len(row):
            if row[s]:
                end = s
                while end < len(row) and row[end]:
                    end += 1
                patches.append(Rectangle((s - 0.5, t - 0.5), end - s, 1))
                s = end
            else:
                s += 1
    colour = [c / 255 for c in NAN_RGB]
    ax.add_collection(PatchCollection(patches, facecolor="white", edgecolor=colour, hatch="xxx", linewidth=0))


def _wrap(titles: list[str] | None, panel_in: float) -> list[str] | None:
    """Panel titles wrapped at the panel's width (their own line breaks kept)."""
    if titles is None:
        return None
    import textwrap

    chars = max(10, int(panel_in * 72 / (0.6 * TITLE_PT)))  # an average character is about 0.55 em wide
    return ["\n".join(textwrap.fill(line, chars) if _text_width(line, TITLE_PT) > panel_in else line
                      for line in title.split("\n")) for title in titles]


def _text_width(text: str, points: float) -> float:
    """Rough width in inches of ``text`` at ``points``: wide (CJK) characters 1 em, others 0.6 em."""
    em = points / 72
    return sum(em if unicodedata.east_asian_width(c) in "WF" else 0.6 * em for c in text)


def _ticks(axis, labels, panel_in: float, rotation: int) -> None:
    """Token labels on an axis, every k-th one when a token gets fewer pixels than a label needs."""
    if labels is None:
        axis.set_ticks([])
        return
    per_token = 0.95 * panel_in * DPI / max(len(labels), 1)  # pixels per token (the layout may take a few)
    step = max(1, math.ceil(px(LABEL_PT) * 0.95 / per_token))  # glyphs are a little shorter than the em
    positions = list(range(0, len(labels), step))
    axis.set_ticks(positions, [labels[i] for i in positions], fontsize=LABEL_PT, rotation=rotation)
    if rotation:
        for text in axis.get_ticklabels():  # one character (a CJK token, a digit) reads best upright
            if len(text.get_text()) == 1:
                text.set_rotation(0)


class _Layout(NamedTuple):
    rows: int
    cols: int
    panel: float  # inches per panel side
    size: tuple[float, float]  # figure (width, height) in inches


def _layout(H, ncols, panel_size, query_labels, key_labels, head_titles, title, notes) -> _Layout:
    """Columns and panel size so that the figure fits ``MAX_WIDTH_IN`` × ``MAX_HEIGHT_IN``.

    With ``ncols`` not given, the preferred grid (at most 4 a row, 3 when that fills every row) is kept
    unless its panels would be too small to label every token; then the grid with the largest panels.
    """
    query_label = max(_text_width(label, LABEL_PT) for label in query_labels)
    key_label = max(_text_width(label, LABEL_PT) for label in key_labels)
    title_lines = max((t.count("\n") + 1 for t in head_titles), default=1) if head_titles else 1
    per_col = 0.12  # the gap between panels
    extra_w = query_label + 0.1 + 0.3 + 1.1  # query labels and axis name; the colour bar, its ticks and label
    fixed_h = key_label + 0.35 + (0.3 * (title.count("\n") + 1) if title else 0) + 0.22 * notes + 0.15
    row_h = 0.2 * title_lines + 0.12  # a panel title and the gap above it

    def fit(cols: int) -> tuple[float, int]:
        rows = math.ceil(H / cols)
        wide = (MAX_WIDTH_IN - extra_w) / cols - per_col
        high = (MAX_HEIGHT_IN - fixed_h - rows * row_h) / rows
        return max(0.5, min(panel_size, wide, high)), rows

    if ncols is None:
        preferred = 3 if H % 3 == 0 and H % 4 != 0 and H <= 9 else min(H, 4)
        # enough room for every token's label, and not smaller than 1.5 inches
        needed = min(panel_size, max(1.5, max(len(query_labels), len(key_labels)) * px(LABEL_PT) * 1.15 / DPI))
        if fit(preferred)[0] < needed:  # too small: the grid that gives the largest panels (most columns on a tie)
            ncols = max(range(1, min(H, MAX_COLUMNS) + 1), key=lambda c: (round(fit(c)[0], 2), c))
        else:
            ncols = preferred
    ncols = min(ncols, H)
    panel, rows = fit(ncols)
    width = min(MAX_WIDTH_IN, ncols * (panel + per_col) + extra_w)
    height = min(MAX_HEIGHT_IN, rows * (panel + row_h) + fixed_h)
    return _Layout(rows, ncols, panel, _whole_pixels(width, height))


class _StageGrid(NamedTuple):
    panel: float  # inches per panel side
    rotate: bool  # key labels turned upright (one is wider than its column)
    notes: list[str]  # the footnote's lines, wrapped at the figure's width
    size: tuple[float, float]  # figure (width, height) in inches


def _fit_stage_grid(n_rows, n_cols, by_columns, panel_size, labels, keys, title, notes) -> _StageGrid:
    """Panel and figure size of a stage grid within ``MAX_WIDTH_IN`` × ``MAX_HEIGHT_IN``: large enough to label
    every token when the caps allow it; the footnote wrapped so that it never runs past the figure's edge."""
    import textwrap

    label_w = max(_text_width(label, LABEL_PT) for label in labels) + 0.1  # query labels and their pad
    key_w = max(_text_width(k, LABEL_PT) for k in keys) + 0.1
    line = px(TITLE_PT) * 1.3 / DPI  # one line of a title, an axis name or the footnote
    bar = 0.1 + 0.2 + line + 0.1  # a horizontal colour bar: the bar, its tick labels, its name, the gap
    fixed_w = label_w + line + 0.12 * (n_cols - 1) + 2 * PAD_IN + 0.15 + (0 if by_columns else 1.0)
    width = min(MAX_WIDTH_IN, n_cols * panel_size + fixed_w)
    chars = max(20, int((width - 2 * PAD_IN) * 72 / (0.62 * TITLE_PT)))  # an average character is ~0.55 em
    wrapped = [part for note in notes for part in textwrap.wrap(note, chars)]

    def fit(key_h: float) -> tuple[float, float]:
        fixed_h = (line + 0.15 if title else 0) + line + 0.1 * (n_rows - 1) + key_h + 0.1 + (
            bar if by_columns else 0) + len(wrapped) * line + 2 * PAD_IN + 0.15
        panel = max(0.5, min(panel_size, (MAX_WIDTH_IN - fixed_w) / n_cols, (MAX_HEIGHT_IN - fixed_h) / n_rows))
        return panel, fixed_h

    S = len(keys)
    panel, fixed_h = fit(line)  # key labels side by side: one line under the panels
    rotate = any(_text_width(k, LABEL_PT) > 0.9 * panel / S for k in keys)
    if rotate:  # upright labels take their width in height: smaller panels
        panel, fixed_h = fit(key_w)
        rotate = True
    return _StageGrid(panel, rotate, wrapped, _whole_pixels(min(MAX_WIDTH_IN, n_cols * panel + fixed_w),
                                                            min(MAX_HEIGHT_IN, n_rows * panel + fixed_h)))


def _whole_pixels(width: float, height: float) -> tuple[float, float]:
    """A figure size in inches that is a whole number of pixels (its repr, "<Figure size 1200x690 …>", is what
    the notebooks' sanitizer recognises; "690.333" would not be)."""
    return round(width * DPI) / DPI, round(height * DPI) / DPI


def _one_sequence(values: torch.Tensor, batch_index) -> torch.Tensor:
    """Sequence ``batch_index`` of a ``(B, H, T, S)`` tensor, as ``(H, T, S)``; a clear error for a bad index."""
    if isinstance(batch_index, bool) or not isinstance(batch_index, numbers.Integral):
        raise TypeError(f"batch_index must be an int, got {type(batch_index).__name__} {batch_index!r}")
    if not 0 <= batch_index < values.shape[0]:
        raise ValueError(f"batch_index must be in [0, {values.shape[0] - 1}], got {batch_index}")
    return values[batch_index]  # (B, H, T, S) -> (H, T, S)
