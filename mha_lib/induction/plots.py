"""Figures of chapter 11: heads that form while a tiny model trains (matplotlib, loaded lazily).

    heads_over_training_figure({"step 60": w60, ...}, tokens)   rows = steps (or runs), columns = layer·head
    loss_curves_figure({"2 layers": log, ...}, chance=ln 32)     held-out loss against the step, log scale
    score_curves_figure(log)                                     previous-token and induction score per head
    knockout_figure({"none": 0.03, "L0 H3": 2.18, ...})          held-out loss with heads knocked out
    score_bars_figure({"your run": scores, "shipped run": ...})  each head's two scores, run beside run

Every figure is a plain ``matplotlib.figure.Figure`` at 100 dpi with labels of at least 10 px, within
1000 × 900 px once the notebook has cropped it to its content (the series' sizes, ``mha_lib.display.plotting``:
the notebook panel beside JupyterLab's file browser). Layers and heads are counted from 0.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from ..display.plotting import COLORMAPS, DPI, LABEL_PT, MAX_HEIGHT_IN, MAX_WIDTH_IN, SUPTITLE_PT, TITLE_PT
from ..language import Messages, N_, gettext as _, pgettext
from ..validation import check_tensor

Tensor = torch.Tensor

SCORE_TITLES = Messages({"previous_token": N_("previous-token score"), "induction": N_("induction score")})
# one colour per head, the same in every figure of the chapter; layer 0 solid, layer 1 dashed
HEAD_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
LAYER_STYLES = ("-", "--", ":", "-.")
TICK_PT = 7.25  # heatmap token letters: 10.1 px, so that 12 tokens fit a 1.2-inch panel one letter each
#: a figure's width at most: the notebook crops a figure to its content plus a margin, which may add a few pixels
WIDTH_IN = MAX_WIDTH_IN - 0.2


def _figure(width: float, height: float):
    """A figure of whole pixels at 100 dpi (its repr, which the notebooks' sanitizer matches, has no decimals)."""
    from matplotlib.figure import Figure

    width, height = min(width, WIDTH_IN), min(height, MAX_HEIGHT_IN)
    fig = Figure(figsize=(round(width * DPI) / DPI, round(height * DPI) / DPI), dpi=DPI, layout="constrained")
    fig.get_layout_engine().set(h_pad=0.06, w_pad=0.06)
    return fig


def head_name(layer: int, head: int) -> str:
    """``"L0 H3"``: layer 0, head 3 (both counted from 0)."""
    return f"L{layer} H{head}"


def _check_title(title) -> str | None:
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__} {title!r}")
    return title


def _check_dict(name: str, value, what: str) -> dict:
    if not isinstance(value, dict) or not value:
        raise TypeError(f"{name} must be a non-empty dict {what}, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise TypeError(f"{name} must have str keys (the labels), got {type(key).__name__} {key!r}")
    return value


def _check_log(name: str, log):
    from .model import TrainingLog

    if not isinstance(log, TrainingLog):
        raise TypeError(f"{name} must be a TrainingLog (run.log), got {type(log).__name__}")
    if not log.steps or not log.eval_loss:
        raise ValueError(f"{name} must hold at least one evaluation, got an empty TrainingLog")
    return log


# --------------------------------------------------------------------------------------------------- heatmaps


def _label_width_px(label: str) -> float:
    """The width of ``label`` drawn at ``TICK_PT`` in pixels (the glyphs' advance widths, matplotlib's own font)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    width, _height, _descent = TextToPath().get_text_width_height_descent(label, FontProperties(size=TICK_PT),
                                                                          ismath=False)
    return width * DPI / 72


def _letter_ticks(axis, labels, panel: float) -> None:
    """Token labels at ``TICK_PT`` (10.1 px): every token while the widest label (its advance width, side
    bearings included) and one more pixel fit a token's share of the panel, else every k-th: neighbours never
    touch."""
    if labels is None:
        axis.set_ticks([])
        return
    per_token = 0.97 * panel * DPI / len(labels)  # pixels per token (the layout may take a few)
    widest = max(_label_width_px(label) for label in set(labels))
    step = max(1, math.ceil((widest + 1) / per_token))
    positions = list(range(0, len(labels), step))
    axis.set_ticks(positions, [labels[i] for i in positions], fontsize=TICK_PT)


def heads_over_training_figure(weights: dict, tokens, *, title: str | None = None, panel: float = 1.2):
    """Every head at several moments: one row per entry of ``weights`` (``{"step 60": (L, H, T, T)}``), one
    column per layer·head, one shared 0 … 1 colour scale (its bar under the grid); token letters on both axes
    (rows: queries). ``panel``: a panel's side at most, in inches; smaller when the columns would not fit
    ``WIDTH_IN``."""
    weights = _check_dict("weights", weights, "{row label: (L, H, T, T) tensor}")
    arrays = {}
    for label, values in weights.items():
        values = check_tensor(f"weights[{label!r}]", values, ndim=4, layout="(L, H, T, T)")
        arrays[label] = values.detach().float().cpu().numpy()
    shapes = {a.shape for a in arrays.values()}
    if len(shapes) != 1:
        raise ValueError(f"weights must all have one shape (L, H, T, T), got {sorted(shapes)}")
    L, H, T, S = shapes.pop()
    if T != S:
        raise ValueError(f"weights must be square (T = S), got {T} queries and {S} keys")
    if any(np.isnan(a).any() for a in arrays.values()):
        raise ValueError("weights contain NaN (a fully masked row is the usual cause); fix the computation first")
    if tokens is not None and not isinstance(tokens, (list, tuple)):
        raise TypeError(f"tokens must be a list of labels (one per position) or None, got {type(tokens).__name__}")
    tokens = [str(t) for t in tokens] if tokens is not None else [str(i) for i in range(T)]
    if len(tokens) != T:
        raise ValueError(f"tokens must have one label per position (T = {T}), got {len(tokens)}")
    if not isinstance(panel, numbers.Real) or not 0.5 <= panel <= 3:
        raise ValueError(f"panel must be a size in inches from 0.5 to 3, got {panel!r}")
    _check_title(title)
    rows, cols = len(arrays), L * H
    panel = min(panel, (WIDTH_IN - 0.5) / cols - 0.03)  # the row labels and the query letters: 0.5 in
    fig = _figure(cols * (panel + 0.03) + 0.5,
                  rows * (panel + 0.27) + 0.3 + 0.75 + (0.35 if title else 0))  # letters; the bar below
    fig.get_layout_engine().set(w_pad=0.02, wspace=0.01)  # narrow gaps: wider panels, room for every letter
    axes = fig.subplots(rows, cols, squeeze=False)
    cmap = __import__("matplotlib").colormaps[COLORMAPS["weights"]]
    image = None
    for r, (label, array) in enumerate(arrays.items()):
        for layer in range(L):
            for head in range(H):
                ax = axes[r, layer * H + head]
                image = ax.imshow(np.ma.masked_array(array[layer, head], mask=np.triu(np.ones((T, T)), 1) > 0),
                                  cmap=cmap.with_extremes(bad=(0.8, 0.8, 0.8)), vmin=0.0, vmax=1.0,
                                  interpolation="nearest", aspect="equal")
                ax.set_title(f"{label} · {head_name(layer, head)}" if cols == 1 else
                             (head_name(layer, head) if r == 0 else ""), fontsize=TITLE_PT)
                _letter_ticks(ax.xaxis, tokens if r == rows - 1 else None, panel)
                _letter_ticks(ax.yaxis, tokens if layer * H + head == 0 else None, panel)
                ax.tick_params(length=0, pad=1)
        axes[r, 0].set_ylabel(label, fontsize=TITLE_PT, weight="bold")
    bar = fig.colorbar(image, ax=axes, location="bottom", shrink=0.5, aspect=40, pad=0.01)
    bar.set_label(_("attention weight (query row → key column)"), fontsize=TITLE_PT)
    bar.ax.tick_params(labelsize=LABEL_PT)
    if title:
        fig.suptitle(title, fontsize=SUPTITLE_PT)
    return fig


# --------------------------------------------------------------------------------------------------- curves


def loss_curves_figure(logs: dict, *, chance: float | None = None, marks=(), title: str | None = None,
                       width: float = 9.0, height: float = 4.2):
    """Held-out loss against the training step, one line per run (``{"2 layers": log}``), log scale.

    The training loss of each step is drawn faintly behind (it is noisier: one batch of 64). ``chance``: a
    dotted line at the loss of a uniform guess (``ln vocab``); ``marks``: steps to mark with a thin line.
    """
    logs = _check_dict("logs", logs, "{label: TrainingLog}")
    for label, log in logs.items():
        _check_log(f"logs[{label!r}]", log)
    _check_title(title)
    fig = _figure(width, height)
    ax = fig.add_subplot()
    for i, (label, log) in enumerate(logs.items()):
        colour = ("#222222", "#d62728", "#1f77b4", "#2ca02c")[i % 4]
        if log.loss:
            ax.plot(range(1, len(log.loss) + 1), np.maximum(log.loss, 1e-4), color=colour, alpha=0.18,
                    linewidth=0.8)
        ax.plot(log.steps, np.maximum(log.eval_loss, 1e-4), color=colour, linewidth=2.2,
                label=_("{label} (held-out; faint: training batches)").format(label=label), marker="o",
                markersize=3)
    if chance is not None:
        ax.axhline(chance, color="0.35", linestyle=":", linewidth=1.5)
        ax.text(0.99, chance * 1.08, _("chance: ln 32 = {chance:.2f}").format(chance=chance)
                if abs(chance - math.log(32)) < 1e-9 else _("chance: {chance:.2f}").format(chance=chance),
                transform=ax.get_yaxis_transform(), ha="right", va="bottom",
                fontsize=TITLE_PT, color="0.25")
    for step in marks:
        ax.axvline(step, color="0.6", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    ax.set_xlabel(_("training step"), fontsize=TITLE_PT)
    ax.set_ylabel(_("loss on the predictable tokens (log scale)"), fontsize=TITLE_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=LABEL_PT, loc="lower left")
    if title:
        ax.set_title(title, fontsize=SUPTITLE_PT)
    return fig


def score_curves_figure(log, *, marks=(), title: str | None = None, width: float = 11.0, height: float = 4.4):
    """Two panels: each head's previous-token score and induction score against the training step.

    One colour per head, a line style per layer (layer 0 solid, layer 1 dashed); the legend names them
    ``L0 H3`` (layer 0, head 3, counted from 0).
    """
    log = _check_log("log", log)
    _check_title(title)
    fig = _figure(width, height)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, kind in zip(axes, ("previous_token", "induction")):
        scores = log.scores(kind).numpy()  # (n_evals, L, H)
        L, H = scores.shape[1:]
        for layer in range(L):
            for head in range(H):
                ax.plot(log.steps, scores[:, layer, head], color=HEAD_COLOURS[head % len(HEAD_COLOURS)],
                        linestyle=LAYER_STYLES[layer % len(LAYER_STYLES)], linewidth=2,
                        label=head_name(layer, head))
        for step in marks:
            ax.axvline(step, color="0.6", linewidth=0.8, linestyle="--")
        ax.set_title(SCORE_TITLES[kind], fontsize=TITLE_PT + 1)
        ax.set_xlabel(_("training step"), fontsize=TITLE_PT)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=LABEL_PT)
    axes[0].set_ylabel(_("mean weight (1 = always exactly there)"), fontsize=TITLE_PT)
    axes[1].legend(fontsize=LABEL_PT, loc="center left", bbox_to_anchor=(1.01, 0.5),
                   title=_("layer 0 solid\nlayer 1 dashed"), title_fontsize=LABEL_PT)
    if title:
        fig.suptitle(title, fontsize=SUPTITLE_PT)
    return fig


def training_progress_figure(log, reference=None, *, label: str | None = None, total_steps: int | None = None,
                             title: str | None = None, width: float = 10.0, height: float = 3.6):
    """The training widget's live picture: loss (left) and the best layer-0 previous-token score and the mean
    layer-1 induction score (right) against the step; ``reference`` (a finished log) drawn grey behind.
    ``label`` names ``log`` in the legends (default: "this run", in the current language)."""
    log = _check_log("log", log)
    if reference is not None:
        reference = _check_log("reference", reference)
    label = _("this run") if label is None else label
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__} {label!r}")
    _check_title(title)
    if total_steps is not None and (isinstance(total_steps, bool) or not isinstance(total_steps, numbers.Integral)
                                    or total_steps < 1):
        raise ValueError(f"total_steps must be a positive int or None, got {total_steps!r}")
    fig = _figure(width, height + (0.3 if title else 0))
    left, right = fig.subplots(1, 2)
    if title:
        fig.suptitle(title, fontsize=SUPTITLE_PT)
    for source, colour, label in ((reference, "0.65", _("shipped run")), (log, "#d62728", label)):
        if source is None:
            continue
        left.plot(source.steps, np.maximum(source.eval_loss, 1e-4), color=colour, linewidth=2, label=label)
        previous, induction = source.scores("previous_token"), source.scores("induction")  # (n, L, H)
        right.plot(source.steps, previous[:, 0].max(dim=1).values.numpy(), color=colour, linewidth=2,
                   label=_("{label}: best layer-0 previous-token head").format(label=label))
        if previous.shape[1] > 1:
            right.plot(source.steps, induction[:, -1].mean(dim=1).numpy(), color=colour, linewidth=2,
                       linestyle="--", label=_("{label}: mean last-layer induction score").format(label=label))
    left.set_yscale("log")
    left.set_ylabel(_("held-out loss (log scale)"), fontsize=TITLE_PT)
    right.set_ylabel(pgettext("a head's previous-token or induction score", "score"), fontsize=TITLE_PT)
    right.set_ylim(-0.02, 1.02)
    for ax in (left, right):
        ax.set_xlabel(_("training step"), fontsize=TITLE_PT)
        ax.tick_params(labelsize=LABEL_PT)
        ax.grid(True, alpha=0.3)
        if total_steps:
            ax.set_xlim(0, total_steps)
    left.legend(fontsize=LABEL_PT, loc="upper right")
    right.legend(fontsize=LABEL_PT, loc="lower right")
    return fig


# --------------------------------------------------------------------------------------------------- bars


def knockout_figure(losses: dict, *, chance: float | None = None, title: str | None = None,
                    width: float = 9.0):
    """Held-out loss with the named heads knocked out, one bar each (``{"nothing": 0.03, "L0 H3": 2.18}``),
    with the value written at the end of each bar and ``chance`` as a dotted line."""
    losses = _check_dict("losses", losses, "{label: loss}")
    values = []
    for label, value in losses.items():
        if isinstance(value, Tensor):
            value = value.item() if value.numel() == 1 else value
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise ValueError(f"losses[{label!r}] must be a finite number >= 0, got {value!r}")
        values.append(float(value))
    _check_title(title)
    n = len(values)
    fig = _figure(width, 0.42 * n + 1.2 + (0.3 if title else 0))
    ax = fig.add_subplot()
    y = np.arange(n)
    top = max(values + [chance or 0.0])
    colours = ["#d62728" if chance is not None and v > 0.5 * chance else "#2e86c1" for v in values]
    ax.barh(y, values, color=colours, height=0.65)
    for i, v in enumerate(values):
        ax.text(v + 0.01 * top, i, f"{v:.2f}", va="center", ha="left", fontsize=LABEL_PT)
    if chance is not None:
        ax.axvline(chance, color="0.3", linestyle=":", linewidth=1.5)
        ax.text(chance, -0.75, _("chance {chance:.2f}").format(chance=chance), ha="center", va="bottom", fontsize=LABEL_PT, color="0.25")
    ax.set_yticks(y, list(losses), fontsize=LABEL_PT + 1)
    ax.set_ylim(n - 0.5, -1.0)  # first entry on top, room for the chance label
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel(_("held-out loss (0 = perfect)"), fontsize=TITLE_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(True, axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=SUPTITLE_PT)
    return fig


def score_bars_figure(scores: dict, *, title: str | None = None, width: float = 10.0, height: float = 3.4):
    """Each head's previous-token and induction scores (two panels), one bar per run side by side:
    ``scores = {"your run": {"previous_token": (L, H), "induction": (L, H)}, "shipped run": {...}}``."""
    scores = _check_dict("scores", scores, "{label: {'previous_token': (L, H), 'induction': (L, H)}}")
    tables = {}
    for label, entry in scores.items():
        if not isinstance(entry, dict) or not all(k in entry for k in SCORE_TITLES):
            raise ValueError(f"scores[{label!r}] must be a dict with 'previous_token' and 'induction' (L, H) "
                             f"tensors (what induction.evaluate returns), got {entry!r:.80}")
        tables[label] = {k: check_tensor(f"scores[{label!r}][{k!r}]", entry[k], ndim=2, layout="(L, H)")
                         .detach().float().cpu().numpy() for k in SCORE_TITLES}
    shapes = {t[k].shape for t in tables.values() for k in SCORE_TITLES}
    if len(shapes) != 1:
        raise ValueError(f"scores must all have one shape (L, H), got {sorted(shapes)}")
    L, H = shapes.pop()
    _check_title(title)
    fig = _figure(width, height)
    axes = fig.subplots(1, 2, sharey=True)
    n = len(tables)
    x = np.arange(L * H)
    names = [head_name(layer, head) for layer in range(L) for head in range(H)]
    for ax, kind in zip(axes, SCORE_TITLES):
        for i, (label, table) in enumerate(tables.items()):
            ax.bar(x + (i - (n - 1) / 2) * 0.8 / n, table[kind].reshape(-1), width=0.8 / n, label=label,
                   color=("#d62728", "0.6", "#1f77b4", "#2ca02c")[i % 4])
        ax.set_xticks(x, names, fontsize=LABEL_PT, rotation=90 if L * H > 8 else 0)
        ax.set_title(SCORE_TITLES[kind], fontsize=TITLE_PT + 1)
        ax.set_ylim(0, 1.05)
        ax.grid(True, axis="y", alpha=0.3)
        ax.tick_params(labelsize=LABEL_PT)
    axes[0].set_ylabel(_("mean weight"), fontsize=TITLE_PT)
    axes[1].legend(fontsize=LABEL_PT, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=SUPTITLE_PT)
    return fig


__all__ = ["HEAD_COLOURS", "SCORE_TITLES", "head_name", "heads_over_training_figure", "knockout_figure",
           "loss_curves_figure", "score_bars_figure", "score_curves_figure", "training_progress_figure"]
