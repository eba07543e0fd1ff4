"""Figures and widgets of chapter 14: attention at scale, FlashAttention's tiles and DeepSeek's latent attention.

    online_softmax_trace(scores_row, values, b)   the online softmax's state after each block of b keys (one row)
    online_softmax_figure(...) / _widget(...)     the running max, the running sum, each step's rescale factor and
                                                  the partial output converging to the exact row
    tile_status(T, S, b, causal) / tile_grid_figure(...)   which (query block, key block) tiles a causal kernel
                                                  computes, masks on the diagonal, or skips (wholly in the future)
    memory_wall_rows(result) / memory_wall_figure(result)   the saved benchmark (``mha_lib.results``,
                                                  "memory_wall"): peak memory and time of one call against T
    design_costs(design, ...) / design_figure / design_widget   MHA, GQA, MQA, MLA in one model's shape: cache
                                                  bytes per token, parameters per layer, attention FLOPs per token
    design_table()                                the published decoders of ``mha_lib.sizes.DECODER_CONFIGS``
    mla_forms(config, queries=, keys=)            MLA's absorbed and expanded forms per layer (per latent, per
                                                  query, per pair, and in all): why decoding runs absorbed and a
                                                  prompt expanded
    refusal_message(error)                        a refusal of mha_lib the chapter shows on purpose, in the
                                                  language of ``mha_lib.set_language`` (the exception stays English)

The algorithm lives in the core (``mha_lib.functional``: ``online_softmax_step``, ``flash_attention``), the masks
and the sizes too (``mha_lib.masks``, ``mha_lib.sizes``); this module only walks, counts and draws them. Every
figure is a plain ``matplotlib.figure.Figure`` at 100 dpi, labels of at least 10 px, within 1000 × 900 px as a notebook
shows it (``rotary.WIDEST_IN``).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import numpy as np
import torch

from ..display.plotting import LABEL_PT, MASKED_RGB, SUPTITLE_PT, TITLE_PT
from ..functional import masked_softmax, online_softmax_start, online_softmax_step
from ..language import N_, gettext as _, ngettext
from ..masks import causal_mask_at
from ..sizes import (
    DECODER_CONFIGS,
    DecoderAttention,
    attention_parameter_count,
    decoder_config,
    kv_cache_bytes,
    latent_attention_parameter_count,
)
from ..validation import check_flag, check_int, check_positive_int, check_tensor, divisors
from ..display.controls import dropdown, int_slider, selection_slider
from .rotary import AUTO_DISPLAY, KEPT_RGB, WIDEST_IN, _figure  # the series' figure size

Tensor = torch.Tensor

SEEN_RGB = "#1f77b4"  # keys already folded into the state
CURRENT_RGB = "#ff7f0e"  # the block taken in at this step
UNSEEN_RGB = "#c8c8c8"  # keys not read yet
PARTIAL_RGB = (53, 183, 121)  # viridis' green: a tile computed with a mask (it crosses the diagonal)
KERNEL_STYLES = {  # kernel of the memory-wall benchmark -> (colour, marker, label)
    "explicit": ("#d62728", "o", N_("explicit (builds T × S)")),
    "flash": ("#1f77b4", "s", N_("flash_attention (tiles, Python loop)")),
    "sdpa": ("#2ca02c", "^", N_("SDPA (PyTorch's fused kernel)")),
    "sdpa_math": ("#ff7f0e", "d", N_("SDPA, math back-end")),
}
SKIPPED, PARTIAL, FULL = 0, 1, 2  # tile_status: never computed / computed with a mask / computed whole
DESIGNS = ("MHA", "GQA", "MQA", "MLA")
DESIGN_MODEL = "deepseek-v3"  # the shape the design widget varies: 61 layers, 128 heads, D = 7,168
# The queries' latent width (config.json's q_lora_rank), which the cache sizes of DECODER_CONFIGS do not need
_Q_LORA_RANKS = {"deepseek-v3": 1536}


# ------------------------------------------------------------------------------------- the online softmax


class TraceStep(NamedTuple):
    """The online softmax's state after one block of keys, for one query row (plain numbers and ``(Dv,)`` tensors).

    ``keys`` the block's keys ``(start, stop)``; ``block_max`` its largest score; ``max`` m, ``total`` ℓ and
    ``rescale`` exp(m_old − m_new) as in ``OnlineSoftmaxState``; ``output`` the unnormalised o; ``result`` o / ℓ.
    """

    keys: tuple[int, int]
    block_max: float
    max: float
    total: float
    rescale: float
    output: Tensor
    result: Tensor


def _row_and_values(scores_row, values) -> tuple[Tensor, Tensor]:
    check_tensor("scores_row", scores_row, ndim=1, layout="(S,): one query's scaled scores")
    check_tensor("values", values, ndim=2, layout="(S, Dv)")
    for name, x in (("scores_row", scores_row), ("values", values)):
        if not x.is_floating_point():
            raise TypeError(f"{name} must hold floating-point numbers, got {x.dtype}")
    if values.shape[0] != scores_row.shape[0]:
        raise ValueError(f"values must have one row per score: scores_row has {scores_row.shape[0]} keys, values "
                         f"{tuple(values.shape)}")
    if scores_row.shape[0] == 0:
        raise ValueError("scores_row must have at least one key, got 0")
    if bool(torch.isnan(scores_row).any()) or bool((scores_row == float("inf")).any()):
        raise ValueError("scores_row must not hold NaN or +inf (-inf marks a masked key)")
    if not bool(torch.isfinite(values).all()):
        raise ValueError("values must be finite (no NaN or inf)")
    return scores_row.detach().cpu(), values.detach().cpu().to(scores_row.dtype)


def online_softmax_trace(scores_row, values, block_size: int) -> list[TraceStep]:
    """Walk one query row's keys in blocks of ``block_size`` with the core's ``online_softmax_step``.

    ``scores_row`` ``(S,)`` scaled scores (``-inf`` = masked key), ``values`` ``(S, Dv)``. One ``TraceStep`` per
    block, the last one's ``result`` being ``softmax(scores_row) @ values``.
    """
    scores_row, values = _row_and_values(scores_row, values)
    block_size = check_positive_int("block_size", block_size)
    S, Dv = values.shape
    state = online_softmax_start((1,), Dv, dtype=scores_row.dtype)  # one row: max (1, 1), output (1, Dv)
    steps = []
    for start in range(0, S, block_size):
        stop = min(start + block_size, S)
        block = scores_row[start:stop][None]  # (Sb,) -> (1, Sb): one row of scores, Tb = 1
        state = online_softmax_step(state, block, values[start:stop])  # (1, Sb) with (Sb, Dv)
        steps.append(TraceStep((start, stop), float(block.max()), float(state.max), float(state.total),
                               float(state.rescale), state.output[0].clone(), state.result()[0].clone()))
    return steps


def exact_row(scores_row, values) -> Tensor:
    """``softmax(scores_row) @ values``, ``(Dv,)``: what the online softmax must arrive at (0 if every key is masked)."""
    scores_row, values = _row_and_values(scores_row, values)
    keep = scores_row > float("-inf")  # (S,)
    return masked_softmax(scores_row, keep) @ values  # (S,) @ (S, Dv) -> (Dv,)


def online_softmax_figure(scores_row, values, block_size: int = 3, step: int | None = None):
    """One query row walked block by block, after ``step`` blocks (default: all of them).

    Top left: the scores (blue: folded in, orange: this step's block, grey: not read yet) and the running max m.
    Top right: the running sum ℓ after each step, the rescale factor exp(m_old − m_new) written above its bar.
    Bottom left: the output so far, o / ℓ, beside the exact output. Bottom right: how far o / ℓ still is from it.
    """
    trace = online_softmax_trace(scores_row, values, block_size)
    exact = exact_row(scores_row, values).double().numpy()
    n = len(trace)
    step = n if step is None else check_int("step", step, low=1)
    step = min(step, n)  # the widget's slider may go past the last block of a larger block_size
    now = trace[step - 1]
    scores = scores_row.detach().cpu().double().numpy()
    S = scores.shape[0]

    fig = _figure(11.5, 7.4)
    (row, sums), (out, gap) = fig.subplots(2, 2)
    colours = [SEEN_RGB if k < now.keys[0] else CURRENT_RGB if k < now.keys[1] else UNSEEN_RGB for k in range(S)]
    finite = np.isfinite(scores)
    low = float(scores[finite].min()) if finite.any() else 0.0
    row.bar(np.arange(S)[finite], scores[finite], color=np.array(colours, dtype=object)[finite], width=0.8)
    for k in np.flatnonzero(~finite):
        row.text(k, 0, "−∞", ha="center", va="bottom", fontsize=LABEL_PT, color="0.3")
    for t, s in enumerate(trace[:step]):  # the running max after each block, over the keys seen by then
        row.plot([-0.5, s.keys[1] - 0.5], [s.max, s.max], "-", color="black", lw=1.6 if t == step - 1 else 0.8,
                 alpha=1.0 if t == step - 1 else 0.35)
    row.text(-0.4, now.max, f"m = {now.max:.2f}", va="bottom", ha="left", fontsize=LABEL_PT)
    for boundary in range(block_size, S, block_size):
        row.axvline(boundary - 0.5, color="0.6", lw=0.8, ls=":")
    row.axhline(0, color="0.7", lw=0.8)
    row.set_xlim(-0.7, S - 0.3)
    row.set_ylim(min(low, 0) - 0.4, max(float(scores[finite].max()) if finite.any() else 1.0, 0) + 0.9)
    row.set_xticks(range(S), [str(k) for k in range(S)], fontsize=LABEL_PT)
    row.set_xlabel(_("key (blocks of {b}, dotted lines)").format(b=block_size), fontsize=TITLE_PT)
    row.set_ylabel(_("scaled score"), fontsize=TITLE_PT)
    row.set_title(_("one query's scores; black: running max m after each block"), fontsize=TITLE_PT)

    x = np.arange(1, n + 1)
    totals = [s.total for s in trace]
    sums.bar(x, totals, color=[SEEN_RGB if t < step - 1 else CURRENT_RGB if t == step - 1 else "none"
                               for t in range(n)], edgecolor=[UNSEEN_RGB] * n, width=0.7)
    top = max(totals) or 1.0
    for t in range(step):
        sums.text(x[t], totals[t] + 0.03 * top, f"×{trace[t].rescale:.2f}", ha="center", va="bottom",
                  fontsize=LABEL_PT, rotation=90 if n > 8 else 0)
    sums.set_ylim(0, top * (1.45 if n > 8 else 1.25))
    sums.set_xticks(x, [str(t) for t in x], fontsize=LABEL_PT)
    sums.set_xlim(0.4, n + 0.6)
    sums.set_xlabel(_("step (blocks read)"), fontsize=TITLE_PT)
    sums.set_ylabel(_("running sum ℓ"), fontsize=TITLE_PT)
    sums.set_title(_("ℓ after each step; above: the rescale factor exp(m_old − m_new)"), fontsize=TITLE_PT)

    dims = np.arange(exact.shape[0])
    partial = now.result.double().numpy()
    out.bar(dims - 0.2, partial, width=0.4, color=CURRENT_RGB if step < n else SEEN_RGB,
            label=_("o / ℓ after {step} of {n} blocks").format(step=step, n=n))
    out.bar(dims + 0.2, exact, width=0.4, color="none", edgecolor="black", lw=1.2, label=_("exact: softmax(s) @ V"))
    out.axhline(0, color="0.7", lw=0.8)
    out.set_xticks(dims, [str(d) for d in dims], fontsize=LABEL_PT)
    out.set_xlabel(_("dimension of the output (Dv = {Dv})").format(Dv=exact.shape[0]), fontsize=TITLE_PT)
    out.set_ylabel(_("value"), fontsize=TITLE_PT)
    out.legend(fontsize=LABEL_PT, loc="best")
    out.set_title(_("the output so far, normalised, beside the exact one"), fontsize=TITLE_PT)

    floor = 1e-9
    errors = [max(float(np.abs(s.result.double().numpy() - exact).max()), floor) for s in trace]
    gap.semilogy(x[step - 1:], errors[step - 1:], "o:", color=UNSEEN_RGB, lw=1)  # the steps still to come
    gap.semilogy(x[:step], errors[:step], "o-", color=SEEN_RGB, lw=2)
    gap.axhline(1e-6, color="0.6", lw=0.8, ls="--")
    gap.text(0.5, 1.3e-6, _("float32 rounding"), fontsize=TITLE_PT, color="0.3", va="bottom")  # grey, yet legible
    gap.set_xticks(x, [str(t) for t in x], fontsize=LABEL_PT)
    gap.set_xlim(0.4, n + 0.6)
    top = max(max(errors) * 4, 1e-5)
    gap.set_ylim(floor / 2, top)
    gap.set_yticks([10.0 ** e for e in range(-8, int(math.log10(top)) + 1, 2)])  # only ticks inside the range
    gap.minorticks_off()
    gap.set_xlabel(_("step (blocks read)"), fontsize=TITLE_PT)
    gap.set_ylabel(_("largest |o / ℓ − exact|"), fontsize=TITLE_PT)
    gap.set_title(_("distance to the exact output (0 drawn at 1e-9)"), fontsize=TITLE_PT)
    for ax in (row, sums, out, gap):
        ax.tick_params(labelsize=LABEL_PT)
    fig.suptitle(_("Online softmax, block {step} of {n} (keys {first}..{last}): m = {m:.3f}, ℓ = {total:.3f}, "
                   "rescale ×{rescale:.3f}").format(step=step, n=n, first=now.keys[0], last=now.keys[1] - 1,
                                                   m=now.max, total=now.total, rescale=now.rescale),
                 fontsize=SUPTITLE_PT)
    return fig


def section_row() -> tuple[Tensor, Tensor]:
    """Chapter 14's section-2 example: one query's scaled scores over 12 keys ``(12,)`` and the keys' values
    ``(12, 4)``, each drawn from its own seeded generator (6 and 7; the global random numbers are not touched)."""
    row = torch.randn(12, generator=torch.Generator().manual_seed(6)) * 2
    values = torch.randn(12, 4, generator=torch.Generator().manual_seed(7))
    return row, values


def online_softmax_widget(scores_row=None, values=None, block_size: int = 4, step: int = 2):
    """Two sliders, the block size and the step, redrawing ``online_softmax_figure`` on release. The step slider
    runs from 1 to the number of blocks, ``ceil(S / b)``: a larger block size shortens it (a step past the new last
    block moves to it). Without ``scores_row`` and ``values``: section 2's row (``section_row``)."""
    from ipywidgets import interactive

    if (scores_row is None) != (values is None):
        raise ValueError("give both scores_row and values, or neither (section 2's row)")
    if scores_row is None:
        scores_row, values = section_row()
    scores_row, values = _row_and_values(scores_row, values)
    S = scores_row.shape[0]
    block_size = check_int("block_size", block_size, low=1, high=S)
    blocks = math.ceil(S / block_size)
    block_slider = int_slider(_("block size b"), block_size, 1, S)
    step_slider = int_slider(_("step (blocks read)"), check_int("step", step, low=1, high=blocks), 1, blocks)

    def fit_steps(change):  # registered before interactive's own observer: the step is in range when it redraws
        step_slider.max = math.ceil(S / change["new"])  # ipywidgets lowers a value above the new max to it

    block_slider.observe(fit_steps, names="value")
    return interactive(lambda block_size, step: online_softmax_figure(scores_row, values, block_size, step),
                       AUTO_DISPLAY, block_size=block_slider, step=step_slider)


# ------------------------------------------------------------------------------------------------- tiles


def _tile_sizes(T, S, block_size) -> tuple[int, int, int]:
    return check_positive_int("T", T), check_positive_int("S", S), check_positive_int("block_size", block_size)


def tile_status(T: int, S: int, block_size: int, causal: bool = True, *, top_left: bool = False) -> Tensor:
    """``(ceil(T/b), ceil(S/b))`` int tensor: ``FULL`` (2) a tile computed whole, ``PARTIAL`` (1) computed with a
    mask (it crosses the diagonal), ``SKIPPED`` (0) never computed (every pair in it is in the future).

    Counted from the pair-level mask: with ``causal``, query t sits at position S − T + t (bottom right, as
    after a KV cache, ``flash_attention``'s convention), or at t with ``top_left=True`` (``is_causal=True``).
    """
    T, S, block_size = _tile_sizes(T, S, block_size)
    causal, top_left = check_flag("causal", causal), check_flag("top_left", top_left)
    rows, cols = math.ceil(T / block_size), math.ceil(S / block_size)
    if not causal:
        return torch.full((rows, cols), FULL, dtype=torch.int64)
    first = 0 if top_left else S - T
    keep = causal_mask_at(torch.arange(first, first + T), torch.arange(S))  # (T, S) keep mask of every pair
    padded = torch.zeros(rows * block_size, cols * block_size, dtype=torch.int64)
    padded[:T, :S] = keep
    inside = torch.zeros_like(padded)
    inside[:T, :S] = 1  # pairs that exist (the last tiles may be cut short)
    # (rows·b, cols·b) -> (rows, b, cols, b): sum each tile's pairs
    kept = padded.view(rows, block_size, cols, block_size).sum(dim=(1, 3))
    pairs = inside.view(rows, block_size, cols, block_size).sum(dim=(1, 3))
    return torch.where(kept == 0, SKIPPED, torch.where(kept == pairs, FULL, PARTIAL))


def _draw_tiles(ax, status: Tensor, T: int, block_size: int, first: int | None, title: str, show_rows: bool):
    """One grid of tiles; ``first`` is the position of query 0 (None: not causal, no diagonal)."""
    grid = status.numpy()
    image = np.empty(grid.shape + (3,), dtype=np.uint8)
    image[grid == FULL] = KEPT_RGB
    image[grid == PARTIAL] = PARTIAL_RGB
    image[grid == SKIPPED] = MASKED_RGB
    rows, cols = grid.shape
    ax.imshow(image, interpolation="nearest", extent=(-0.5, cols - 0.5, rows - 0.5, -0.5))
    # the diagonal: query row t (position first + t) sees keys up to first + t, so at the row's middle, t + 1/2,
    # the boundary is the right edge of key first + t; in tile units (a tile's centre is at its index)
    if first is not None:
        t = np.array([0, T])
        x, y = (first + t + 0.5) / block_size - 0.5, t / block_size - 0.5
        ax.plot(x, y, color="white", lw=2.2)
        ax.plot(x, y, color="black", lw=1.0, ls="--")
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    every = max(1, math.ceil(cols / 12))
    ax.set_xticks(range(0, cols, every), [str(j * block_size) for j in range(0, cols, every)], fontsize=LABEL_PT)
    every = max(1, math.ceil(rows / 12))
    ax.set_yticks(range(0, rows, every), [str(i * block_size) if show_rows else "" for i in range(0, rows, every)],
                  fontsize=LABEL_PT)
    ax.set_xticks(np.arange(-0.5, cols), minor=True)
    ax.set_yticks(np.arange(-0.5, rows), minor=True)
    ax.grid(True, which="minor", color="white", lw=1.5)
    ax.tick_params(which="both", length=0)
    ax.set_xlabel(_("key block (first key)"), fontsize=TITLE_PT)
    if show_rows:
        ax.set_ylabel(_("query block (first query)"), fontsize=TITLE_PT)
    computed = int((status != SKIPPED).sum())
    ax.set_title(title + "\n" + _("{computed} of {total} tiles computed ({share:.0%}), {partial} with a mask").format(
        computed=computed, total=status.numel(), share=computed / status.numel(), partial=int((status == PARTIAL).sum())),
        fontsize=TITLE_PT)


def tile_grid_figure(T: int, S: int, block_size: int, causal: bool = True, *, compare_top_left: bool = False):
    """The (query block, key block) tiles of one attention call: dark computed whole, green computed with a mask
    (on the diagonal), grey skipped (wholly in the future). Dashed: the diagonal, query t sees keys up to it.

    ``causal`` aligns bottom right (query t at position S − T + t, ``flash_attention``'s convention);
    ``compare_top_left=True`` draws ``is_causal=True``'s top-left triangle beside it (wrong after a KV cache when
    S > T: the chunk's first query would see only the first key).
    """
    from matplotlib.patches import Patch

    T, S, block_size = _tile_sizes(T, S, block_size)
    causal, compare_top_left = check_flag("causal", causal), check_flag("compare_top_left", compare_top_left)
    if compare_top_left and not causal:
        raise ValueError("compare_top_left=True compares two causal alignments: it needs causal=True")
    panels = [(tile_status(T, S, block_size, causal), S - T if causal else None,
               _("causal, bottom right: query t at position S − T + t") if causal else _("not causal: every pair"))]
    if compare_top_left:
        panels.append((tile_status(T, S, block_size, top_left=True), 0,
                       _("top left (is_causal=True): query t at position t")))
    rows, cols = panels[0][0].shape
    side = min(5.2, max(3.2, 0.42 * max(rows, cols) + 1.6))
    fig = _figure(min(WIDEST_IN, side * cols / max(rows, cols) * len(panels) + 1.6 * len(panels) + 0.4),
                  side * rows / max(rows, cols) + 2.4)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for n, (ax, (status, first, title)) in enumerate(zip(axes, panels)):
        _draw_tiles(ax, status, T, block_size, first, title, n == 0)
    handles = [Patch(color=np.array(KEPT_RGB) / 255, label=_("computed whole")),
               Patch(color=np.array(PARTIAL_RGB) / 255, label=_("computed with a mask")),
               Patch(color=np.array(MASKED_RGB) / 255, label=_("skipped: wholly in the future"))]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=LABEL_PT, frameon=False)
    fig.suptitle(_("T = {T} queries, S = {S} keys, tiles of {b} × {b}").format(T=T, S=S, b=block_size),
                 fontsize=SUPTITLE_PT)
    return fig


# ------------------------------------------------------------------------------------------ the memory wall


def _check_memory_result(result) -> dict:
    if not isinstance(result, dict):
        raise TypeError(f"result must be a dict (mha_lib.results.load('memory_wall')['cpu']), got "
                        f"{type(result).__name__}")
    if "points" not in result or "device" not in result:
        raise ValueError("result lacks 'device' or 'points': pass one device's result, "
                         "mha_lib.results.load('memory_wall')['cpu']")
    points = result["points"]
    if not isinstance(points, list) or not points:
        raise ValueError("result['points'] must be a non-empty list of {'kernel', 'T', 'peak_mb', 'seconds'}")
    for p in points:
        if not isinstance(p, dict) or any(k not in p for k in ("kernel", "T", "peak_mb", "seconds")):
            raise ValueError(f"every point needs 'kernel', 'T', 'peak_mb' and 'seconds', got {p!r}")
    return result


def memory_wall_rows(result: dict) -> list[dict]:
    """The saved points as one row per T: ``{"T", "peak_mb": {kernel: MB}, "seconds": {kernel: s}}``, by T."""
    result = _check_memory_result(result)
    rows: dict[int, dict] = {}
    for p in result["points"]:
        row = rows.setdefault(int(p["T"]), {"T": int(p["T"]), "peak_mb": {}, "seconds": {}})
        row["peak_mb"][p["kernel"]] = float(p["peak_mb"])
        row["seconds"][p["kernel"]] = float(p["seconds"])
    return [rows[T] for T in sorted(rows)]


def _kernels(rows: list[dict]) -> list[str]:
    seen = {k for row in rows for k in row["peak_mb"]}
    return [k for k in KERNEL_STYLES if k in seen] + sorted(seen - set(KERNEL_STYLES))


def memory_wall_figure(result: dict, *, title: str | None = None):
    """The saved benchmark, log–log against T = S: left, the peak memory growth of one call in MiB (dotted: slope
    2, T², through the explicit kernel's first point; dash-dotted: slope 1, T, through the flash kernel's last
    point); right, its time. Peaks below 0.1 MiB are drawn at 0.1."""
    result = _check_memory_result(result)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__}")
    rows = memory_wall_rows(result)
    T = np.array([row["T"] for row in rows], dtype=float)
    fig = _figure(11.5, 4.6)
    memory, time = fig.subplots(1, 2)
    floor = 0.1
    for kernel in _kernels(rows):
        colour, marker, label = KERNEL_STYLES.get(kernel, ("0.4", "x", kernel))
        xs = np.array([row["T"] for row in rows if kernel in row["peak_mb"]], dtype=float)
        peaks = np.array([max(row["peak_mb"][kernel], floor) for row in rows if kernel in row["peak_mb"]])
        seconds = np.array([row["seconds"][kernel] for row in rows if kernel in row["seconds"]])
        memory.loglog(xs, peaks, marker + "-", color=colour, lw=2, label=_(label))
        below = kernel == "flash"  # the lowest curve: its label under the point, clear of SDPA's just above it
        memory.annotate(f"{peaks[-1]:,.1f} MiB", (xs[-1], peaks[-1]), textcoords="offset points",
                        xytext=(-4, -8 if below else 6), ha="right", va="top" if below else "baseline",
                        fontsize=LABEL_PT, color=colour)
        time.loglog(xs, seconds, marker + "-", color=colour, lw=2, label=_(label))
        time.annotate(f"{seconds[-1]:.2g} s", (xs[-1], seconds[-1]), textcoords="offset points", xytext=(-4, 6),
                      ha="right", fontsize=LABEL_PT, color=colour)
    anchor = next((k for k in ("explicit", *_kernels(rows)) if k in rows[0]["peak_mb"]), None)
    if anchor is not None:
        start = max(rows[0]["peak_mb"][anchor], floor)
        memory.loglog(T, start * (T / T[0]) ** 2, ":", color="black", lw=1.2, label=_("slope 2: memory ∝ T²"))
    if "flash" in rows[-1]["peak_mb"]:
        end = max(rows[-1]["peak_mb"]["flash"], floor)
        memory.loglog(T, end * T / T[-1], "-.", color="0.4", lw=1.2, label=_("slope 1: memory ∝ T"))
    memory.set_ylabel(_("peak memory growth of the call (MiB)"), fontsize=TITLE_PT)
    memory.set_title(_("memory: T² with a T × S matrix, about T with tiles"), fontsize=TITLE_PT)
    time.set_ylabel(_("seconds per call"), fontsize=TITLE_PT)
    time.set_title(_("time on this CPU: a Python loop of tiles is slower"), fontsize=TITLE_PT)
    for ax in (memory, time):
        ax.set_xticks(T, [f"{int(t):,}" for t in T])
        ax.minorticks_off()
        ax.set_xlabel(_("T = S (tokens)"), fontsize=TITLE_PT)
        ax.tick_params(labelsize=LABEL_PT)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=LABEL_PT, loc="upper left")
    machine, threads = _machine_and_threads(result)
    if threads is None:
        default = _("One attention call, measured on {machine} ({device}), each point in a fresh process").format(
            machine=machine, device=result["device"])
    else:
        default = ngettext("One attention call, measured on {machine} ({device}, {threads} thread), each point in a "
                           "fresh process",
                           "One attention call, measured on {machine} ({device}, {threads} threads), each point in "
                           "a fresh process", threads).format(machine=machine, device=result["device"], threads=threads)
    fig.suptitle(title or default, fontsize=SUPTITLE_PT)
    return fig


_THREADS_SUFFIX = re.compile(r",\s*(\d+)\s+threads?\s*$")  # the benchmark writes "AMD EPYC, 2 threads"


def _machine_and_threads(result: dict) -> tuple[str, int | None]:
    """The machine's name without the benchmark's English ", N threads" suffix, and the number of threads (the
    result's ``threads``, else the suffix's, else None): the figure says it in the student's language."""
    machine = str(result.get("device_name") or result.get("machine") or "?")
    threads = result.get("threads")
    suffix = _THREADS_SUFFIX.search(machine)
    if suffix:
        machine = machine[:suffix.start()]
        threads = threads if threads is not None else int(suffix.group(1))
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"result['threads'] must be a positive int, got {threads!r}")
    return machine, threads


# ------------------------------------------------------------------------------------------------- designs


def _per_head(config: DecoderAttention) -> tuple[int, int, int]:
    """(Dh, r, dr): the key/value head width of the MHA/GQA/MQA designs, and MLA's defaults for this shape.

    For an MLA model (DeepSeek) ``head_dim`` is ``qk_nope + qk_rope``: the other designs get heads of
    ``qk_nope`` (128 for DeepSeek-V3, its ``v_head_dim`` too), as DeepSeek-V2's comparison (its table 1) counts
    them. For another model MLA gets DeepSeek-V2's proportions: r = 4·Dh, dr = Dh / 2.
    """
    if config.kv_lora_rank is not None:
        return config.head_dim - config.qk_rope_head_dim, config.kv_lora_rank, config.qk_rope_head_dim
    return config.head_dim, 4 * config.head_dim, max(2, config.head_dim // 2)


def design_costs(design: str, *, num_kv_heads: int | None = None, kv_lora_rank: int | None = None,
                 qk_rope_head_dim: int | None = None, q_lora_rank: int | None = None, context: int = 4096,
                 config=DESIGN_MODEL, bytes_per_element: int = 2) -> dict:
    """What one attention design costs in a published model's shape (``config``: default DeepSeek-V3's).

    ``design``: "MHA" (G = H key/value heads), "GQA" (``num_kv_heads`` G), "MQA" (G = 1) or "MLA" (a latent of
    ``kv_lora_rank`` r and a shared rotary key of ``qk_rope_head_dim`` dr; its queries go through a latent of
    ``q_lora_rank``, by default the published model's own: 1,536 for DeepSeek-V3, none, that is queries projected
    directly, for a model that has none). Returns::

        {"design", "label", "cache_numbers" (per token and layer), "cache_bytes_per_token" (all layers,
         kv_cache_bytes), "parameters" (one layer: attention_parameter_count or latent_attention_parameter_count,
         no biases, norms included), "q_lora_rank" (MLA's, None for the others), "flops_per_token" (one new token
         against ``context`` cached tokens, all layers: 2 FLOPs per multiply-add, the scores and the weighted sum
         over the cache only, projections excluded), "cache_bytes_read" (the cache read for that token),
         "flops_per_byte"}

    MLA's FLOPs are those of its absorbed form (what decoding runs: each head scores r + dr numbers per cached token
    and sums r): more arithmetic than MHA, on a cache a fraction of the size.
    """
    config = decoder_config(config)
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {list(DESIGNS)}, got {design!r}")
    context = check_positive_int("context", context)
    bytes_per_element = check_positive_int("bytes_per_element", bytes_per_element)
    L, H, D = config.n_layers, config.num_heads, config.d_model
    Dh, r, dr = _per_head(config)
    if design == "MLA":
        if num_kv_heads is not None:
            raise ValueError("num_kv_heads is for GQA; MLA takes kv_lora_rank and qk_rope_head_dim")
        r = r if kv_lora_rank is None else check_positive_int("kv_lora_rank", kv_lora_rank)
        dr = dr if qk_rope_head_dim is None else check_positive_int("qk_rope_head_dim", qk_rope_head_dim)
        if q_lora_rank is None:
            name = next((k for k, v in DECODER_CONFIGS.items() if v == config), None)
            q_lora_rank = _Q_LORA_RANKS.get(name)  # None: queries projected directly
        else:
            q_lora_rank = check_positive_int("q_lora_rank", q_lora_rank)
        numbers_ = r + dr
        cache = kv_cache_bytes(L, tokens=1, kv_lora_rank=r, qk_rope_head_dim=dr, bytes_per_element=bytes_per_element)
        parameters = latent_attention_parameter_count(D, H, r, Dh, dr, Dh, q_lora_rank)
        per_layer = 2 * H * context * (r + dr) + 2 * H * context * r  # q̃·[c, k_rope] and Σ p c, per head
        label = _("MLA (r = {r}, dr = {dr})").format(r=r, dr=dr)
    else:
        if kv_lora_rank is not None or qk_rope_head_dim is not None or q_lora_rank is not None:
            raise ValueError(f"kv_lora_rank, qk_rope_head_dim and q_lora_rank are for MLA, not {design}")
        if design == "GQA":
            if num_kv_heads is None:
                raise TypeError("GQA needs num_kv_heads, the number G of key/value heads")
            G = check_positive_int("num_kv_heads", num_kv_heads)
            if H % G:
                raise ValueError(f"num_kv_heads must divide the {H} query heads, got {G}; try one of {divisors(H)}")
        else:
            if num_kv_heads is not None:
                raise ValueError(f"num_kv_heads is for GQA; {design} has G = {H if design == 'MHA' else 1}")
            G = H if design == "MHA" else 1
        numbers_ = 2 * G * Dh
        cache = kv_cache_bytes(L, G, Dh, 1, bytes_per_element=bytes_per_element)
        parameters = attention_parameter_count(D, False, out_bias=False, num_heads=H, num_kv_heads=G, head_dim=Dh)
        per_layer = 2 * H * context * Dh * 2  # q·k and Σ p v: Dh multiply-adds per head and cached token, twice
        label = {"MHA": _("MHA (G = {G})"), "GQA": _("GQA (G = {G})"), "MQA": _("MQA (G = 1)")}[design].format(G=G)
    flops = L * per_layer
    read = cache * context
    return {"design": design, "label": label, "cache_numbers": numbers_, "cache_bytes_per_token": cache,
            "parameters": parameters, "q_lora_rank": q_lora_rank if design == "MLA" else None, "flops_per_token": flops, "cache_bytes_read": read,
            "flops_per_byte": flops / read}


def design_figure(design: str = "MLA", *, num_kv_heads: int = 8, kv_lora_rank: int | None = None,
                  context: int = 4096, config=DESIGN_MODEL):
    """MHA, GQA (G = ``num_kv_heads``), MQA and MLA (r = ``kv_lora_rank``) in one model's shape, ``design``
    highlighted: the KV cache per token (all layers, 2 bytes a number), the parameters of one attention layer (MLA's
    queries through the published model's latent), and the FLOPs of one new token's attention over ``context``
    cached tokens, all layers, projections excluded."""
    config = decoder_config(config)
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {list(DESIGNS)}, got {design!r}")
    costs = [design_costs("MHA", context=context, config=config),
             design_costs("GQA", num_kv_heads=num_kv_heads, context=context, config=config),
             design_costs("MQA", context=context, config=config),
             design_costs("MLA", kv_lora_rank=kv_lora_rank, context=context, config=config)]
    fig = _figure(11.5, 4.3)
    panels = fig.subplots(1, 3)
    y = np.arange(len(costs))[::-1]
    colours = ["#4c72b0" if c["design"] == design else "0.75" for c in costs]
    measures = ((lambda c: c["cache_bytes_per_token"] / 1024, _("KV cache per token,\n{layers} layers (KiB)"),
                 "{:,.0f}"),
                (lambda c: c["parameters"] / 1e6, _("attention parameters\nof one layer (M)"), "{:,.1f}"),
                (lambda c: c["flops_per_token"] / 1e9,
                 _("GFLOPs of one new token's attention\nover {context:,} cached tokens,\n{layers} layers, no "
                   "projections"), "{:,.2f}"))
    for n, (ax, (value, name, fmt)) in enumerate(zip(panels, measures)):
        values = [value(c) for c in costs]
        ax.barh(y, values, color=colours)
        for yi, v in zip(y, values):
            ax.text(v + max(values) * 0.02, yi, fmt.format(v), va="center", fontsize=LABEL_PT)
        ax.set_xlim(0, max(values) * 1.35)
        ax.set_yticks(y, [c["label"] for c in costs] if n == 0 else [""] * len(costs), fontsize=LABEL_PT)
        ax.set_title(name.format(layers=config.n_layers, context=context), fontsize=TITLE_PT)
        ax.tick_params(labelsize=LABEL_PT)
        ax.grid(axis="x", alpha=0.3)
    name = next((k for k, v in DECODER_CONFIGS.items() if v == config), _("this model"))
    chosen = next(c for c in costs if c["design"] == design)
    ratio = costs[0]["cache_numbers"] / chosen["cache_numbers"]
    if design == "MHA":
        verdict = _("{label}: {numbers:,} numbers per token and layer, the reference the other designs are "
                    "compared with")
    elif chosen["cache_numbers"] == costs[0]["cache_numbers"]:  # GQA with G = H
        verdict = _("{label}: {numbers:,} numbers per token and layer, as many as MHA (G = H is MHA)")
    else:
        verdict = _("{label}: {numbers:,} numbers per token and layer, {ratio:.1f}× fewer than MHA")
    shape = _("{name}'s shape (D = {D:,}, {H} heads, {layers} layers)").format(
        name=name, D=config.d_model, H=config.num_heads, layers=config.n_layers)
    fig.suptitle(shape + "\n" + verdict.format(label=chosen["label"], numbers=chosen["cache_numbers"], ratio=ratio),
                 fontsize=SUPTITLE_PT)
    return fig


def design_widget(config=DESIGN_MODEL, *, design: str = "MLA", num_kv_heads: int = 8,
                  kv_lora_rank: int | None = None, context: int = 4096):
    """``design_figure`` with a menu (the design to highlight) and sliders for G, r and the context length."""
    from ipywidgets import interactive

    config = decoder_config(config)
    default_rank = _per_head(config)[1]
    rank = default_rank if kv_lora_rank is None else check_positive_int("kv_lora_rank", kv_lora_rank)
    ranks = {64, 128, 256, 512, 1024, 2048, rank}
    contexts = {1024, 4096, 16384, 65536, config.context_length, check_positive_int("context", context)}
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {list(DESIGNS)}, got {design!r}")
    if num_kv_heads not in divisors(config.num_heads):
        raise ValueError(f"num_kv_heads must divide the {config.num_heads} query heads, got {num_kv_heads!r}; try "
                         f"one of {divisors(config.num_heads)}")
    return interactive(  # every slider: smallest on the left (G grows to the right, as in chapter 12)
        lambda design, num_kv_heads, kv_lora_rank, context: design_figure(
            design, num_kv_heads=num_kv_heads, kv_lora_rank=kv_lora_rank, context=context, config=config),
        AUTO_DISPLAY,
        design=dropdown(_("design"), list(DESIGNS), design),
        num_kv_heads=selection_slider(_("GQA: G (kv heads)"), divisors(config.num_heads), num_kv_heads),
        kv_lora_rank=selection_slider(_("MLA: latent width r"), ranks, rank),
        context=selection_slider(_("context (tokens)"), contexts, context))


def mla_forms(config=DESIGN_MODEL, *, queries: int = 1, keys: int = 4096) -> dict:
    """What MLA's two forms cost in a published model's shape (default DeepSeek-V3's: H = 128 heads, r = 512,
    dr = 64, dn = dv = 128), per layer, in FLOPs, 2 per multiply-add, every head::

        {"re_expand": pushing one cached latent back through W_uk and W_uv: 2·r·H·(dn + dv),
         "per_query": what the absorbed form pays once per query: W_uk[h]ᵀq before the scores and W_uv after the
                      softmax, 2·H·r·(dn + dv), the same matrices as re_expand and the same count,
         "absorbed": one (query, key) pair in the absorbed form: 2·H·(r + dr) for the score, 2·H·r for the
                     weighted sum of latents,
         "expanded": one pair in the expanded form, once the key and value exist: 2·H·(dn + dr) + 2·H·dv,
         "queries", "keys", "pairs": ``queries`` new tokens after ``keys - queries`` cached ones, causal (query t
                     at position keys − queries + t reads keys 0 … keys − queries + t),
         "absorbed_total": queries·per_query + pairs·absorbed,
         "expanded_total": keys·re_expand + pairs·expanded (every key expanded once, the cached ones again)}

    A decoding step (``queries=1``) pays ``per_query`` once absorbed and ``re_expand`` for every cached key
    expanded (about 120 times an absorbed pair in DeepSeek-V3): decoding runs absorbed, or would need an MHA-sized
    cache of expanded keys and values. A prompt (``queries == keys``) pays the same for its queries absorbed as for
    its keys expanded, and the expanded pairs are cheaper: a prompt is cheaper expanded at any length. The
    projections that make q and the latent cost the same in both forms and are left out, as in
    :func:`design_costs`. For a model without MLA, MLA gets DeepSeek-V2's proportions (``design_costs``).
    """
    config = decoder_config(config)
    keys = check_positive_int("keys", keys)
    queries = check_int("queries", queries, low=1, high=keys)
    H = config.num_heads
    Dh, r, dr = _per_head(config)  # dn = dv = Dh
    re_expand = 2 * r * H * (Dh + Dh)
    per_query = 2 * H * r * (Dh + Dh)  # W_uk[h]ᵀ q (dn × r) and W_uv[h] (dv × r) applied to the latents' sum
    absorbed = 2 * H * (r + dr) + 2 * H * r
    expanded = 2 * H * (Dh + dr) + 2 * H * Dh
    pairs = queries * (keys - queries) + queries * (queries + 1) // 2  # causal, bottom right
    return {"re_expand": re_expand, "per_query": per_query, "absorbed": absorbed, "expanded": expanded,
            "queries": queries, "keys": keys, "pairs": pairs,
            "absorbed_total": queries * per_query + pairs * absorbed,
            "expanded_total": keys * re_expand + pairs * expanded}


def design_table(tokens: int | None = None) -> list[dict]:
    """The published decoders of ``DECODER_CONFIGS``: ``{"model", "layers", "design", "numbers_per_layer",
    "bytes_per_token", "bytes"}`` with bytes in float16 for all layers (``bytes``: at ``tokens``, default each
    model's own context length; a window caps what is held)."""
    rows = []
    for name, config in DECODER_CONFIGS.items():
        length = config.context_length if tokens is None else check_int("tokens", tokens, low=0)
        if config.kv_lora_rank is not None:
            design = _("MLA (r = {r}, dr = {dr})").format(r=config.kv_lora_rank, dr=config.qk_rope_head_dim)
        elif config.num_kv_heads == config.num_heads:
            design = _("MHA (G = {G})").format(G=config.num_kv_heads)
        else:
            design = _("GQA (G = {G})").format(G=config.num_kv_heads)
        if config.window is not None:
            design += " " + _("+ window {W:,}").format(W=config.window)
        rows.append({"model": name, "layers": config.n_layers, "design": design,
                     "numbers_per_layer": config.cache_numbers_per_token,
                     "bytes_per_token": config.kv_cache_bytes(1),
                     "context": length, "bytes": config.kv_cache_bytes(length)})
    return rows


# ----------------------------------------------------------------------------------- refusals, translated

# mha_lib's exceptions stay in English (what people search for; mha_lib/language.py). The refusals chapter 14
# shows on purpose are also given in the student's language: the English text (a pattern) -> the message to
# translate, its {fields} taken from the pattern's groups.
_REFUSALS = (
    (re.compile(r"return_weights=True needs kernel='explicit': kernel='flash' computes attention tile by tile and "
                r"never holds the whole weight matrix \(that is the point of it, chapter 14\)"),
     N_("return_weights=True needs kernel='explicit': kernel='flash' computes attention tile by tile and never "
        "holds the whole weight matrix (that is the point of it, chapter 14)")),
    (re.compile(r"return_weights=True needs kernel='explicit': kernel='sdpa' calls F\.scaled_dot_product_attention, "
                r"which never returns the attention weights \(its fused back-ends never build them\)"),
     N_("return_weights=True needs kernel='explicit': kernel='sdpa' calls F.scaled_dot_product_attention, which "
        "never returns the attention weights (its fused back-ends never build them)")),
    (re.compile(r"return_weights=True needs kernel='explicit': kernel=(?P<kernel>'\w+') never returns the "
                r"attention weights"),
     N_("return_weights=True needs kernel='explicit': kernel={kernel} never returns the attention weights")),
)


def refusal_message(error: BaseException) -> str:
    """The message of ``error``, an exception raised by ``mha_lib``, in the language of ``mha_lib.set_language``.

    ``mha_lib`` raises in English (what people search for); a chapter that shows a refusal on purpose prints this,
    so that a Chinese reader reads it in Chinese. Covered: ``return_weights=True`` refused by the ``"flash"`` and
    ``"sdpa"`` kernels of ``MultiHeadAttention`` and by ``MultiHeadLatentAttention``'s fused kernels. Any other
    message is returned as it is (in English).
    """
    if not isinstance(error, BaseException):
        raise TypeError(f"error must be an exception (caught with `except ... as error`), got "
                        f"{type(error).__name__}")
    text = str(error)
    for pattern, message in _REFUSALS:
        match = pattern.fullmatch(text)
        if match:
            return _(message).format(**match.groupdict())
    return text


__all__ = [
    "DESIGNS", "FULL", "PARTIAL", "SKIPPED", "TraceStep", "design_costs", "design_figure", "design_table",
    "design_widget", "exact_row", "memory_wall_figure", "memory_wall_rows", "mla_forms", "online_softmax_figure",
    "online_softmax_trace", "online_softmax_widget", "refusal_message", "section_row", "tile_grid_figure",
    "tile_status",
]
