"""Figures and the widget of chapter 12: query heads that share key/value heads, and the KV cache.

    grouped_heads_figure(weights, tokens, num_kv_heads)   per-head heatmaps, one frame colour per kv head
    sharing_figure(num_kv_heads)                          a published shape (Llama-2-7B) with G kv heads: the
                                                          grouping, the attention parameters, the cache per token
    sharing_widget()                                      the same, with a slider over G (1 up to H, left to right)
    generation_steps_figure(weights, tokens, steps=...)   the score matrix filling row by row while a model
                                                          generates; the cached keys each new query reads
    cache_speedup_figure(result)                          the saved benchmark: generation time with and without
                                                          the cache, and the speed-up, against T
    aten_ops(run)                                         the PyTorch operations a call runs (the profiler): which
                                                          back-end SDPA chose, whether it copied the kv heads

Every figure is a plain ``matplotlib.figure.Figure`` at 100 dpi with labels of at least 10 px, within
1000 × 900 px as a notebook shows it (the series' sizes, ``mha_lib.display.plotting``). Heads are counted from 0;
query heads ``h`` share key/value head ``h // (H / G)`` (Llama's ``repeat_kv`` order, ``mha_lib.expand_kv_heads``).
"""

from __future__ import annotations

import numbers
import os

import numpy as np
import torch

from ..display.controls import selection_slider
from ..display.plotting import COLORMAPS, DPI, LABEL_PT, MASKED_RGB, MAX_HEIGHT_IN, SUPTITLE_PT, \
    TITLE_PT, plot_heads
from ..language import gettext as _, ngettext
from ..sizes import DECODER_CONFIGS, attention_parameter_count, decoder_config, kv_cache_bytes
from ..validation import check_positive_int, check_tensor, divisors
from .rotary import WIDEST_IN

Tensor = torch.Tensor

# one colour per key/value head (tab10, then tab20's light shades): a group keeps its colour in every figure
GROUP_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
                 "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")
FRAME_WIDTH = 3.5  # points: a group's frame must read from the back of a room
CACHE_RGB = "#ff7f0e"  # the cached keys in the generation picture
NEW_RGB = "#d62728"  # the new token's own key
WIDGET_MODEL = "llama-2-7b"  # the shape the G slider varies: 32 query heads of 128, 32 layers, G = 32 as published


def _figure(width: float, height: float):
    """A figure of whole pixels at 100 dpi, within the series' 1000 × 900 px as a notebook shows it (``WIDEST_IN``:
    the inline backend's crop adds ~8 px to a figure MAX_WIDTH_IN wide)."""
    from matplotlib.figure import Figure

    width, height = min(width, WIDEST_IN), min(height, MAX_HEIGHT_IN)
    fig = Figure(figsize=(round(width * DPI) / DPI, round(height * DPI) / DPI), dpi=DPI, layout="constrained")
    fig.get_layout_engine().set(h_pad=0.06, w_pad=0.06)
    return fig


def _check_title(title) -> str | None:
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__} {title!r}")
    return title


def _check_groups(num_heads: int, num_kv_heads) -> int:
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads must divide the {num_heads} query heads (each key/value head serves the same "
                         f"number of query heads), got {num_kv_heads}; try one of {divisors(num_heads)}")
    return num_kv_heads


def group_colour(kv_head: int) -> str:
    """The colour of key/value head ``kv_head`` (the same in every figure of the chapter)."""
    return GROUP_COLOURS[_index(kv_head) % len(GROUP_COLOURS)]


def _index(value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise TypeError(f"kv_head must be an int >= 0, got {type(value).__name__} {value!r}")
    return int(value)


def kv_head_of(query_head: int, num_heads: int, num_kv_heads: int) -> int:
    """The key/value head that query head ``query_head`` reads: ``query_head // (H / G)``."""
    num_heads = check_positive_int("num_heads", num_heads)
    num_kv_heads = _check_groups(num_heads, num_kv_heads)
    return _index(query_head) // (num_heads // num_kv_heads)


# --------------------------------------------------------------------------------------------- what a kernel runs


def aten_ops(run) -> list[str]:
    """The PyTorch operations that ``run()`` calls, by name (``"aten::..."``), each once, in the order of its first
    call: what PyTorch's profiler records on the CPU side (``torch.autograd.profiler.profile``, which
    ``torch.profiler`` builds on; the legacy recorder starts in milliseconds where ``torch.profiler`` can take
    seconds). Chapter 12 reads from it which back-end ``F.scaled_dot_product_attention`` dispatched to
    (``aten::_scaled_dot_product_flash_attention_for_cpu``, ``aten::_scaled_dot_product_attention_math``, ...) and
    whether it copied the key/value heads (``aten::repeat_interleave``).

    The profiler's trace library (Kineto) prints timestamped log lines to the process's stderr, which a notebook
    shows under the cell: unless ``KINETO_LOG_LEVEL`` is already set, it is raised to silence while the profiler
    starts (the level is read when the library first starts, so a process that profiled before keeps its own).
    The result of ``run()`` is discarded.
    """
    if not callable(run):
        raise TypeError(f"run must be a function of no arguments (what to profile), got {type(run).__name__}")
    silenced = "KINETO_LOG_LEVEL" not in os.environ
    if silenced:
        os.environ["KINETO_LOG_LEVEL"] = "6"  # above FATAL: no log line
    try:
        with torch.autograd.profiler.profile(use_kineto=False) as profile:
            run()
    finally:
        if silenced:
            os.environ.pop("KINETO_LOG_LEVEL", None)
    return list(dict.fromkeys(event.name for event in profile.function_events))


# --------------------------------------------------------------------------------------------- grouped heatmaps


def grouped_heads_figure(weights: Tensor, tokens, num_kv_heads: int, *, title: str | None = None,
                         ncols: int | None = None):
    """One heatmap per query head, framed in the colour of the key/value head it shares.

    weights ``(H, T, T)`` (or ``(1, H, T, T)``): one layer's attention weights. Panel titles read
    ``head h · kv g``. Heads that share a kv head read the same keys with different queries: their rows differ,
    but any difference between two heads of one group comes from their queries alone.
    """
    check_tensor("weights", weights)
    if weights.dim() == 4 and weights.shape[0] == 1:
        weights = weights[0]  # (1, H, T, S) -> (H, T, S)
    if weights.dim() != 3:
        raise ValueError(f"weights must be (H, T, S) or (1, H, T, S), got shape {tuple(weights.shape)}")
    H = weights.shape[0]
    G = _check_groups(H, num_kv_heads)
    per_group = H // G
    titles = [_("head {h} · kv {g}").format(h=h, g=h // per_group) for h in range(H)]
    fig = plot_heads(weights, tokens, head_titles=titles, title=_check_title(title), ncols=ncols)
    for h, ax in enumerate(_head_axes(fig, H)):
        colour = GROUP_COLOURS[(h // per_group) % len(GROUP_COLOURS)]
        for spine in ax.spines.values():
            spine.set_edgecolor(colour)
            spine.set_linewidth(FRAME_WIDTH)
        ax.title.set_color(colour)
        ax.title.set_fontweight("bold")
    return fig


def _head_axes(fig, H: int) -> list:
    """The H heatmap panels of a ``plot_heads`` figure (its visible image axes, in head order)."""
    return [ax for ax in fig.axes if ax.images and ax.get_visible()][:H]


# --------------------------------------------------------------------------------------------- the G slider


def sharing_numbers(num_kv_heads: int, config=WIDGET_MODEL) -> dict:
    """What G changes in one published shape: the widths of W_k and W_v, the layer's parameters, the cache.

    Returns ``{"num_heads", "num_kv_heads", "per_group", "kv_width", "parameters", "parameters_mha",
    "projections" ({"W_q", "W_k", "W_v", "W_o"}: weights of one layer), "cache_per_token"}`` (bytes per token for
    the whole model in float16, ``kv_cache_bytes``). The layer has no biases (as Llama).
    """
    config = decoder_config(config)
    H, Dh, D = config.num_heads, config.head_dim, config.d_model
    G = _check_groups(H, num_kv_heads)
    kv_width = G * Dh
    return {
        "num_heads": H, "num_kv_heads": G, "per_group": H // G, "kv_width": kv_width,
        "projections": {"W_q": D * H * Dh, "W_k": D * kv_width, "W_v": D * kv_width, "W_o": H * Dh * D},
        "parameters": attention_parameter_count(D, False, num_heads=H, num_kv_heads=G, head_dim=Dh),
        "parameters_mha": attention_parameter_count(D, False, num_heads=H, num_kv_heads=H, head_dim=Dh),
        "cache_per_token": kv_cache_bytes(config.n_layers, G, Dh, 1),
    }


def _grouping_strip(ax, H: int, G: int) -> None:
    """H query heads on top, G key/value heads below, a line from each query head to the kv head it reads."""
    from matplotlib.patches import Rectangle

    import matplotlib

    per_group = H // G
    box = 0.8
    # more kv heads than the palette: distinct hues from a cyclic map, so that no two kv heads share a colour
    colours = GROUP_COLOURS[:G] if G <= len(GROUP_COLOURS) else [
        matplotlib.colormaps["hsv"](g / G) for g in range(G)]
    kv_x = [(g + 0.5) * H / G - 0.5 for g in range(G)]  # each kv head under the middle of its group
    for h in range(H):
        g = h // per_group
        colour = colours[g]
        ax.add_patch(Rectangle((h - box / 2, 1.6), box, box, color=colour))
        ax.plot([h, kv_x[g]], [1.6, 0.4], color=colour, lw=1.0)  # down to the top of its kv head
    for g, x in enumerate(kv_x):
        colour = colours[g]
        width = max(box, per_group - 0.2)
        ax.add_patch(Rectangle((x - width / 2, -0.4 + box * 0.5 - box / 2), width, box, color=colour))
    ax.set_xlim(-1, H)
    ax.set_ylim(-0.6, 2.9)
    ax.set_yticks([0.3, 2.0], [_("kv heads"), _("query heads")], fontsize=LABEL_PT)
    step = max(1, H // 8)
    ax.set_xticks(range(0, H, step), [str(h) for h in range(0, H, step)], fontsize=LABEL_PT)
    ax.set_xlabel(_("query head"), fontsize=TITLE_PT)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(ngettext("{H} query heads share {G} kv head ({per_group} per group)",
                          "{H} query heads share {G} kv heads ({per_group} per group)", G).format(
        H=H, G=G, per_group=per_group), fontsize=TITLE_PT)


def sharing_figure(num_kv_heads: int = 32, config=WIDGET_MODEL, *, title: str | None = None):
    """One published attention shape (default Llama-2-7B: D = 4,096, 32 query heads of 128, 32 layers) with
    G = ``num_kv_heads`` key/value heads: who shares what, the weights of one layer's four projections (grey
    outline: G = H), and the model's KV cache per token in float16 for every G (the chosen G in colour)."""
    config = decoder_config(config)
    numbers_ = sharing_numbers(num_kv_heads, config)
    H, G = numbers_["num_heads"], numbers_["num_kv_heads"]
    mha = sharing_numbers(H, config)
    fig = _figure(11.5, 3.6)
    strip, params, cache = fig.subplots(1, 3, width_ratios=[2.2, 1.3, 1.5])
    _grouping_strip(strip, H, G)

    names = list(numbers_["projections"])
    now = [numbers_["projections"][n] / 1e6 for n in names]
    full = [mha["projections"][n] / 1e6 for n in names]
    y = np.arange(len(names))[::-1]
    params.barh(y, full, color="none", edgecolor="0.6", lw=1.2, label=f"G = {H}")
    params.barh(y, now, color="#4c72b0", height=0.6, label=f"G = {G}")
    for yi, value in zip(y, now):
        params.text(value + 0.4, yi, f"{value:.1f} M", va="center", fontsize=LABEL_PT)
    params.set_yticks(y, names, fontsize=LABEL_PT)
    params.set_xlim(0, max(full) * 1.45)
    params.tick_params(labelsize=LABEL_PT)
    params.set_xlabel(_("weights of one layer (millions)"), fontsize=TITLE_PT)
    params.set_title(_("one layer: {parameters:.1f} M (G = {H}: {parameters_mha:.1f} M)").format(
        parameters=numbers_["parameters"] / 1e6, H=H, parameters_mha=mha["parameters"] / 1e6), fontsize=TITLE_PT)

    options = divisors(H)  # ascending: G grows to the right, as on the widget's slider
    kib = [sharing_numbers(g, config)["cache_per_token"] / 1024 for g in options]
    colours = ["#4c72b0" if g == G else "0.8" for g in options]
    x = np.arange(len(options))
    cache.bar(x, kib, color=colours)
    for xi, g, value in zip(x, options, kib):
        if g == G:
            cache.text(xi, value * 1.04 + max(kib) * 0.02, f"{value:,.0f} KiB", ha="center", fontsize=LABEL_PT)
    cache.set_xticks(x, [str(g) for g in options], fontsize=LABEL_PT)
    cache.set_ylim(0, max(kib) * 1.2)
    cache.tick_params(labelsize=LABEL_PT)
    cache.set_xlabel(_("G, key/value heads"), fontsize=TITLE_PT)
    cache.set_ylabel(_("KiB per token (fp16)"), fontsize=TITLE_PT)
    cache.set_title(_("KV cache, all {layers} layers").format(layers=config.n_layers), fontsize=TITLE_PT)
    name = next((k for k, v in DECODER_CONFIGS.items() if v == config), None)
    default = (_("{name} shape with G = {G}: W_k and W_v are {rows} × {columns} each") if name else
               _("this model shape with G = {G}: W_k and W_v are {rows} × {columns} each"))
    fig.suptitle(_check_title(title) or default.format(name=name, G=G, rows=f"{config.d_model:,}",
                                                       columns=f"{numbers_['kv_width']:,}"), fontsize=SUPTITLE_PT)
    return fig


def sharing_widget(config=WIDGET_MODEL, num_kv_heads: int | None = None):
    """``sharing_figure`` with a slider over G, the divisors of H from 1 (left) to H (right); redraws on release."""
    from ipywidgets import interactive

    config = decoder_config(config)
    value = config.num_kv_heads if num_kv_heads is None else _check_groups(config.num_heads, num_kv_heads)
    slider = selection_slider(_("G (kv heads)"), divisors(config.num_heads), value)
    # auto_display: the figure goes into the widget's output area (as ``interact`` does), where a saved notebook
    # keeps it for its static copy (mha_lib.display.static_widgets)
    return interactive(lambda num_kv_heads: sharing_figure(num_kv_heads, config), {"auto_display": True},
                       num_kv_heads=slider)


# --------------------------------------------------------------------------------------------- generation


def generation_steps_figure(weights: Tensor, tokens, *, prompt_length: int, steps, title: str | None = None,
                            panel: float = 2.6):
    """The score matrix of one head filling up while a model generates, one panel per step.

    weights ``(T, T)``: one head's causal attention weights over the whole sequence (a cached run computes the
    very same rows, one step at a time). Panel 0 is the prompt: its ``prompt_length`` rows are computed in one
    pass. Each later panel is one generation step: the new token's query row in colour, the rows of earlier
    steps faded (computed before, never again), later rows empty (those tokens do not exist yet). Above the
    row, the keys it reads: the cached ones (orange, projected in earlier steps) and its own new key (red).
    """
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle
    import matplotlib

    check_tensor("weights", weights, ndim=2, layout="(T, T)")
    T = weights.shape[0]
    if weights.shape[1] != T:
        raise ValueError(f"weights must be square (T, T), got shape {tuple(weights.shape)}")
    labels = [str(t) for t in tokens]
    if len(labels) != T:
        raise ValueError(f"tokens must have one label per row of weights ({T}), got {len(labels)}")
    prompt_length = check_positive_int("prompt_length", prompt_length)
    if prompt_length > T:
        raise ValueError(f"prompt_length must be at most T = {T}, got {prompt_length}")
    steps = [_index(s) for s in steps]
    bad = [s for s in steps if not prompt_length <= s < T]
    if bad:
        raise ValueError(f"steps must be query rows from prompt_length = {prompt_length} to T - 1 = {T - 1} (the "
                         f"generated tokens), got {bad}")
    data = weights.detach().cpu().double().numpy()
    cmap = matplotlib.colormaps[COLORMAPS["weights"]]
    norm = Normalize(0.0, 1.0)
    panels = [("prompt", list(range(prompt_length)))] + [(f"step {s}", [s]) for s in steps]
    n = len(panels)
    fig = _figure(min(WIDEST_IN, 0.35 + n * (panel + 0.25)), panel + 1.9)
    axes = fig.subplots(1, n, squeeze=False)[0]
    masked = np.array(MASKED_RGB) / 255
    for i, (ax, (name, rows)) in enumerate(zip(axes, panels)):
        image = np.ones((T, T, 3))  # white: not computed yet
        first = rows[0]
        for r in range(T):
            if r > rows[-1]:
                continue  # a token that does not exist yet
            colour = cmap(norm(data[r]))[:, :3]  # (T, 3)
            if r < first:
                colour = 1 - 0.3 * (1 - colour)  # an earlier step: faded, it is never computed again
            colour[r + 1:] = masked  # the future: masked
            image[r] = colour
        ax.imshow(image, aspect="equal", interpolation="nearest")
        for r in rows:
            ax.add_patch(Rectangle((-0.5, r - 0.5), r + 1, 1, fill=False, ec="black", lw=1.5))
        if name != "prompt":
            s = rows[0]
            ax.add_patch(Rectangle((-0.5, -1.7), s, 0.8, color=CACHE_RGB))
            ax.add_patch(Rectangle((s - 0.5, -1.7), 1, 0.8, color=NEW_RGB))
            ax.set_title(_("step {step}: {cached} cached keys + 1 new").format(step=s, cached=s), fontsize=TITLE_PT)
        else:
            ax.add_patch(Rectangle((-0.5, -1.7), prompt_length, 0.8, color=NEW_RGB))
            ax.set_title(_("prompt: {count} new keys").format(count=prompt_length), fontsize=TITLE_PT)
        ax.set_xticks(range(T), labels, fontsize=LABEL_PT, rotation=90 if max(map(len, labels)) > 2 else 0)
        ax.set_yticks(range(T), labels if i == 0 else [""] * T, fontsize=LABEL_PT)
        ax.tick_params(length=0, pad=2)
        ax.set_xlim(-0.5, T - 0.5)
        ax.set_ylim(T - 0.5, -1.9)  # room above row 0 for the bar of keys
        ax.spines["top"].set_visible(False)
        ax.plot([-0.5, T - 0.5], [-0.5, -0.5], color="black", lw=0.8)  # the matrix's top edge
        if i == 0:
            ax.set_ylabel(_("query (row)"), fontsize=TITLE_PT)
            ax.set_xlabel(_("key"), fontsize=TITLE_PT)
    notes = _("framed, in colour: the rows computed at this step · faded: earlier steps (never recomputed) · white: "
              "not generated yet · grey: masked\nbar above the keys: orange = read from the cache, red = projected at "
              "this step (and appended to the cache)")
    fig.supxlabel(notes, fontsize=TITLE_PT, color="0.25")
    if title:
        fig.suptitle(_check_title(title), fontsize=SUPTITLE_PT)
    return fig


# --------------------------------------------------------------------------------------------- the benchmark


def _check_result(result) -> dict:
    if not isinstance(result, dict):
        raise TypeError(f"result must be a dict (mha_lib.results.load('kv_cache')['cpu']), got {type(result).__name__}")
    missing = [k for k in ("device", "threads", "model", "points") if k not in result]
    if missing:
        raise ValueError(f"result lacks {missing}: pass one device's result, mha_lib.results.load('kv_cache')['cpu']")
    points = result["points"]
    if not isinstance(points, list) or not points:
        raise ValueError("result['points'] must be a non-empty list of {'tokens', 'no_cache_s', 'cache_s', ...}")
    for p in points:
        if not isinstance(p, dict) or any(k not in p for k in ("tokens", "no_cache_s", "cache_s")):
            raise ValueError(f"every point needs 'tokens', 'no_cache_s' and 'cache_s', got {p!r}")
    return result


STATISTICS = ("median", "fastest")  # which of a point's rounds cache_speedup_figure draws


def _fastest(point: dict, way: str) -> float:
    """The fastest of a point's rounds of one way ("no_cache" or "cache"), or its saved median without rounds."""
    rounds = point.get(f"{way}_samples_s")
    return min(rounds) if rounds else point[f"{way}_s"]


def cache_speedup_figure(result: dict, *, statistic: str = "median", title: str | None = None):
    """The saved benchmark: seconds to generate T tokens with and without the cache (log–log), and their ratio.

    ``statistic``: "median" draws the saved medians (and the saved speed-up); "fastest" the fastest round of each
    way, the one least slowed by other programs on a shared machine, and the ratio of those two."""
    result = _check_result(result)
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    points = sorted(result["points"], key=lambda p: p["tokens"])
    T = np.array([p["tokens"] for p in points], dtype=float)
    if statistic == "fastest":
        without = np.array([_fastest(p, "no_cache") for p in points], dtype=float)
        with_cache = np.array([_fastest(p, "cache") for p in points], dtype=float)
        ratio = without / with_cache
    else:
        without = np.array([p["no_cache_s"] for p in points], dtype=float)
        with_cache = np.array([p["cache_s"] for p in points], dtype=float)
        ratio = np.array([p.get("speedup", p["no_cache_s"] / p["cache_s"]) for p in points], dtype=float)  # saved
    fig = _figure(10.5, 3.9)
    times, speedup = fig.subplots(1, 2)
    times.loglog(T, without, "o-", color="#d62728", label=_("without cache (whole sequence every step)"))
    times.loglog(T, with_cache, "o-", color="#1f77b4", label=_("with cache (one token per step)"))
    times.set_xlabel(_("T, tokens generated"), fontsize=TITLE_PT)
    times.set_ylabel(_("seconds"), fontsize=TITLE_PT)
    times.legend(fontsize=LABEL_PT, loc="upper left")
    rounds = result.get("repeats")
    if not rounds:
        heading = _("time to generate T tokens")
    elif statistic == "fastest":
        heading = _("time to generate T tokens (fastest of {rounds} rounds)").format(rounds=rounds)
    else:
        heading = _("time to generate T tokens (median of {rounds})").format(rounds=rounds)
    times.set_title(heading, fontsize=TITLE_PT)
    speedup.plot(T, ratio, "o-", color="#2ca02c")
    for t, r in zip(T, ratio):
        speedup.annotate(f"×{r:.1f}", (t, r), textcoords="offset points", xytext=(0, 7), ha="center",
                         fontsize=LABEL_PT)
    speedup.set_xscale("log")
    speedup.set_ylim(0, ratio.max() * 1.25)
    speedup.set_xlabel(_("T, tokens generated"), fontsize=TITLE_PT)
    speedup.set_ylabel(_("speed-up (without / with)"), fontsize=TITLE_PT)
    speedup.set_title(_("speed-up: time without the cache / time with it"), fontsize=TITLE_PT)
    for ax in (times, speedup):
        ax.set_xticks(T, [f"{int(t):,}" for t in T])
        ax.minorticks_off()
        ax.tick_params(labelsize=LABEL_PT)
        ax.grid(alpha=0.3)
    model = result["model"]
    threads = result["threads"]
    default = ngettext("measured on {machine} ({device}, {threads} thread), a {layers}-layer model, {parameters} "
                       "parameters",
                       "measured on {machine} ({device}, {threads} threads), a {layers}-layer model, {parameters} "
                       "parameters", 1 if threads == 1 else 2).format(
        machine=result.get("machine", result["device"]), device=result["device"], threads=threads,
        layers=model.get("layers", "?"), parameters=f"{model.get('parameters', 0):,}")
    fig.suptitle(_check_title(title) or default, fontsize=SUPTITLE_PT)
    return fig


__all__ = [
    "GROUP_COLOURS", "aten_ops", "cache_speedup_figure", "generation_steps_figure", "group_colour",
    "grouped_heads_figure", "kv_head_of", "sharing_figure", "sharing_numbers", "sharing_widget",
]
