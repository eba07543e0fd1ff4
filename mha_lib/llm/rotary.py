"""Figures and widgets of chapter 13: rotary positions (RoPE) and sliding windows (matplotlib, loaded lazily).

    rotation_figure(vector, speeds)            one pair of dimensions turned at positions 0, 1, 2, ...: arrows
    frequencies_figure(head_dim, thetas)       the speeds θ^(-2i/Dh) and their wavelengths, θ = 10,000 vs 500,000
    rope_scores(q, k, positions, theta)        the score of q at m with k at n, for every (m, n)
    offset_figure(q, k, m, n) / offset_widget  move both positions: the score depends only on m - n
    offset_explorer(m, n)                      offset_widget on section 3's query and key (section_query_key)
    window_masks_figure(tokens, window)        the causal mask beside the sliding-window mask
    reach_matrix(layers, window, T)            which inputs can reach each position after 1..L windowed layers
    reach_figure(layers, window) / reach_widget  how far information travels: L·(W - 1) + 1 positions
    cache_growth_figure({"no window": [...]})  a KV cache's length while tokens are fed one by one
    rotary_induction_model() / evaluate_at_length(model, T)  chapter 11's model with RoPE instead of learned
                                               positions, and its held-out scores on longer sequences
    train_with_progress(model, reference=log)  chapter 11's training, its progress shown in the cell as it goes
                                               (a status line and the curves); a short run under a test

The rotation itself lives in the core (``mha_lib.positions``: ``apply_rope``, ``rope_frequencies``), the masks
too (``mha_lib.sliding_window_mask``); this module only draws them. Every figure is a plain
``matplotlib.figure.Figure`` at 100 dpi, labels of at least 10 px, within 1000 × 900 px as a notebook shows it.
"""

from __future__ import annotations

import html
import math
import numbers
import os
import re
import time

import numpy as np
import torch

from ..display.controls import int_slider
from ..display.plotting import COLORMAPS, DPI, LABEL_PT, MASKED_RGB, MAX_HEIGHT_IN, MAX_WIDTH_IN, SUPTITLE_PT, TITLE_PT
from ..language import gettext as _, ngettext, pgettext
from ..masks import causal_mask, sliding_window_mask
from ..positions import apply_rope, rope_frequencies
from ..validation import check_int, check_positive_float, check_positive_int, check_tensor

Tensor = torch.Tensor

KEPT_RGB = (68, 1, 84)  # viridis' dark end: a key the query may see
AUTO_DISPLAY = {"auto_display": True}  # interactive's options: show the figure the callback returns (as interact does)
LLAMA3_THETA = 500000.0  # Llama 3's rope_theta (its config.json); Llama 2 and the RoFormer paper use 10,000
TEST_STEPS = 100  # what train_with_progress trains under a test instead of chapter 11's 3,000 steps (seconds, not a minute)


# JupyterLab's inline backend crops a figure to its artists plus 0.1 in a side (bbox_inches="tight"); constrained
# layout leaves only 0.06 in a side, so a figure MAX_WIDTH_IN wide would come out ~8 px wider than the panel
CROP_IN = 0.2
WIDEST_IN = MAX_WIDTH_IN - CROP_IN  # the widest figure of chapters 13 and 14: 980 px, ~990 px once cropped


def _figure(width: float, height: float):
    """A figure of whole pixels at 100 dpi, within the projector limits (``WIDEST_IN``: ~990 px once cropped)."""
    from matplotlib.figure import Figure

    width, height = min(width, WIDEST_IN), min(height, MAX_HEIGHT_IN)
    fig = Figure(figsize=(round(width * DPI) / DPI, round(height * DPI) / DPI), dpi=DPI, layout="constrained")
    fig.get_layout_engine().set(h_pad=0.06, w_pad=0.06)
    return fig


def _vector(name: str, value, length: int | None = None) -> Tensor:
    if not isinstance(value, Tensor):
        try:
            value = torch.tensor(value, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name} must be a 1-D tensor or a list of numbers, got {type(value).__name__}") from None
    check_tensor(name, value, ndim=1, layout="(Dh,)")
    if not value.is_floating_point():
        raise TypeError(f"{name} must hold floating-point numbers, got {value.dtype}")
    if length is not None and value.shape[0] != length:
        raise ValueError(f"{name} must have {length} entries, got {value.shape[0]}")
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return value.detach().float().cpu()


def _check_even_vector(name: str, value) -> Tensor:
    value = _vector(name, value)
    if value.shape[0] < 2 or value.shape[0] % 2:
        raise ValueError(f"{name} must have an even number of entries (RoPE turns them in pairs), got "
                         f"{value.shape[0]}")
    return value


# ----------------------------------------------------------------------------------------------- the rotation


def rotation_figure(vector=(1.0, 0.35), speeds=(1.0, 0.25), positions=range(6)):
    """One pair of dimensions ``(x_i, x_{i + Dh/2})`` turned by ``position × speed``, one panel per speed.

    Each arrow is the same pair at another position ``m``: its length never changes, only its angle
    ``m · speed`` (radians). A fast pair (speed 1) turns almost a sixth of a circle per token; a pair of speed 0.25
    turns four times more slowly (1.25 rad, about a fifth of a circle, from m = 0 to m = 5).
    """
    pair = _vector("vector", vector, 2)
    if not isinstance(speeds, (list, tuple)) or not speeds:
        raise TypeError(f"speeds must be a non-empty list or tuple of numbers, got {type(speeds).__name__}")
    speeds = [check_positive_float("speeds[i]", s) for s in speeds]
    positions = [check_int("positions[i]", p, low=0) for p in positions]
    if not positions:
        raise ValueError("positions must not be empty")
    from matplotlib import colormaps

    colours = colormaps[COLORMAPS["weights"]](np.linspace(0.0, 0.85, len(positions)))
    radius = float(pair.norm())
    fig = _figure(3.6 * len(speeds) + 0.4, 4.0)
    axes = fig.subplots(1, len(speeds), squeeze=False)[0]
    for ax, speed in zip(axes, speeds):
        for colour, m in zip(colours, positions):
            angle = m * speed
            c, s = math.cos(angle), math.sin(angle)
            x, y = c * pair[0].item() - s * pair[1].item(), s * pair[0].item() + c * pair[1].item()
            ax.annotate("", xy=(x, y), xytext=(0, 0),
                        arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2.0, "shrinkA": 0, "shrinkB": 0})
            ax.text(1.13 * x, 1.13 * y, f"m={m}", fontsize=LABEL_PT, ha="center", va="center", color=colour)
        circle = np.linspace(0, 2 * math.pi, 200)
        ax.plot(radius * np.cos(circle), radius * np.sin(circle), color="0.8", lw=1, zorder=0)
        limit = 1.35 * radius
        ax.set_xlim(-limit, limit)
        ax.set_ylim(-limit, limit)
        ax.set_aspect("equal")
        ax.axhline(0, color="0.85", lw=0.8, zorder=0)
        ax.axvline(0, color="0.85", lw=0.8, zorder=0)
        ax.set_title(_("speed {speed:g} rad per token").format(speed=speed), fontsize=TITLE_PT)
        ax.set_xlabel(_("dimension {index}").format(index="i"), fontsize=TITLE_PT)
        ax.set_ylabel(_("dimension {index}").format(index="i + Dh/2"), fontsize=TITLE_PT)
        ax.tick_params(labelsize=LABEL_PT)
    fig.suptitle(_("One pair of a query, rotated by position × speed (same length at every position)"),
                 fontsize=SUPTITLE_PT)
    return fig


def wavelengths(head_dim: int, theta: float) -> Tensor:
    """Tokens per full turn of each pair, ``2π / θ^(-2i/Dh)``, ``(Dh/2,)``."""
    return 2 * math.pi / rope_frequencies(head_dim, theta).double()


def frequencies_figure(head_dim: int = 128, thetas=(10000.0, LLAMA3_THETA)):
    """Left: the speed of each pair, ``θ^(-2i/Dh)`` (log scale). Right: its wavelength in tokens, ``2π / speed``.

    A larger θ lowers every speed but the first: the slow pairs turn slower still, and their wavelengths grow.
    """
    head_dim = check_positive_int("head_dim", head_dim)
    if not isinstance(thetas, (list, tuple)) or not thetas:
        raise TypeError(f"thetas must be a non-empty list or tuple of numbers, got {type(thetas).__name__}")
    thetas = [check_positive_float("thetas[i]", t) for t in thetas]
    fig = _figure(11.0, 4.2)
    left, right = fig.subplots(1, 2)
    pairs = np.arange(head_dim // 2)
    styles = ("-", "--", ":", "-.")
    for n, theta in enumerate(thetas):
        speeds = rope_frequencies(head_dim, theta).double().numpy()
        label = f"θ = {theta:,.0f}"
        left.plot(pairs, speeds, styles[n % 4], lw=2, label=label)
        right.plot(pairs, 2 * math.pi / speeds, styles[n % 4], lw=2, label=label)
        longest = 2 * math.pi / speeds[-1]
        right.annotate(_("{count} tokens").format(count=f"{longest:,.0f}"), xy=(pairs[-1], longest),
                       xytext=(-8, 6 if n == len(thetas) - 1 else -14), textcoords="offset points", ha="right",
                       fontsize=LABEL_PT)
    left.set_title(_("speed of pair i: θ^(-2i/Dh) radians per token"), fontsize=TITLE_PT)
    right.set_title(_("wavelength of pair i: 2π / speed, tokens per turn"), fontsize=TITLE_PT)
    for ax in (left, right):
        ax.set_yscale("log")
        ax.set_xlabel(_("pair i (0 .. {last}), Dh = {head_dim}").format(last=head_dim // 2 - 1, head_dim=head_dim),
                      fontsize=TITLE_PT)
        ax.grid(True, which="major", color="0.9")
        ax.tick_params(labelsize=LABEL_PT)
        ax.legend(fontsize=LABEL_PT)
    top = max(float(wavelengths(head_dim, t)[-1]) for t in thetas)
    right.set_ylim(top=top * 12)  # room for the labels of the longest wavelengths
    left.set_ylabel(_("radians per token"), fontsize=TITLE_PT)
    right.set_ylabel(pgettext("axis label: a wavelength, in tokens per full turn", "tokens"), fontsize=TITLE_PT)
    fig.suptitle(_("RoPE's frequencies: a larger θ turns the slow pairs slower (longer wavelengths)"),
                 fontsize=SUPTITLE_PT)
    return fig


# --------------------------------------------------------------------------------------- the offset widget


def rope_scores(q, k, positions, theta: float = 10000.0) -> Tensor:
    """``S[m, n] = rope(q, m) · rope(k, n)`` for every pair of ``positions``, ``(P, P)``: one query, one key."""
    q, k = _check_even_vector("q", q), _check_even_vector("k", k)
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same size, got {tuple(q.shape)} and {tuple(k.shape)}")
    check_tensor("positions", positions, ndim=1, layout="(P,)")
    P = positions.shape[0]
    turned_q = apply_rope(q.expand(P, -1), positions, theta)  # (Dh,) -> (P, Dh): q at every position
    turned_k = apply_rope(k.expand(P, -1), positions, theta)  # (P, Dh): k at every position
    return turned_q @ turned_k.T  # (P, Dh) @ (Dh, P) -> (P, P)


def offset_figure(q, k, m: int, n: int, *, theta: float = 10000.0, num_positions: int = 16):
    """Left: the first pair of q at position m and of k at position n. Right: the score of q at every position
    with k at every position, ``(num_positions, num_positions)``, (m, n) framed, its diagonal (same m - n) dashed.

    Every diagonal of the right panel has one colour: the score depends only on the offset m - n.
    """
    num_positions = check_positive_int("num_positions", num_positions)
    m = check_int("m", m, low=0)
    n = check_int("n", n, low=0)
    if m >= num_positions or n >= num_positions:
        raise ValueError(f"m and n must be below num_positions = {num_positions}, got m = {m}, n = {n}")
    q, k = _check_even_vector("q", q), _check_even_vector("k", k)
    theta = check_positive_float("theta", theta)
    positions = torch.arange(num_positions)
    scores = rope_scores(q, k, positions, theta).numpy()  # (P, P)
    half = q.shape[0] // 2
    turned_q = apply_rope(q[None], torch.tensor([m]), theta)[0]  # (Dh,)
    turned_k = apply_rope(k[None], torch.tensor([n]), theta)[0]

    fig = _figure(10.0, 4.6)
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.25])
    radius = max(float(q[[0, half]].norm()), float(k[[0, half]].norm()), 1e-6)
    for vector, colour, label in ((turned_q, "#d62728", _("q at m = {m}").format(m=m)),
                                  (turned_k, "#1f77b4", _("k at n = {n}").format(n=n))):
        x, y = vector[0].item(), vector[half].item()
        left.annotate("", xy=(x, y), xytext=(0, 0),
                      arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2.5, "shrinkA": 0, "shrinkB": 0})
        left.plot([], [], color=colour, lw=2.5, label=label)
    circle = np.linspace(0, 2 * math.pi, 200)
    for vector in (q, k):
        r = float(vector[[0, half]].norm())
        left.plot(r * np.cos(circle), r * np.sin(circle), color="0.85", lw=1, zorder=0)
    limit = 1.25 * radius
    left.set_xlim(-limit, limit)
    left.set_ylim(-limit, limit)
    left.set_aspect("equal")
    left.legend(fontsize=LABEL_PT, loc="lower left")
    left.set_title(_("pair 0 (speed 1 rad per token): q turned by {m} rad, k by {n}").format(m=m, n=n),
                   fontsize=TITLE_PT)
    left.set_xlabel(_("dimension {index}").format(index=0), fontsize=TITLE_PT)
    left.set_ylabel(_("dimension {index}").format(index=half), fontsize=TITLE_PT)
    left.tick_params(labelsize=LABEL_PT)

    bound = float(np.abs(scores).max()) or 1.0
    image = right.imshow(scores, cmap=COLORMAPS["scores"], vmin=-bound, vmax=bound, interpolation="nearest")
    right.plot([n], [m], marker="s", markersize=14, markerfacecolor="none", markeredgecolor="black",
               markeredgewidth=2.5)
    offset = m - n
    line = [(j + offset, j) for j in range(num_positions) if 0 <= j + offset < num_positions]
    right.plot([j for _, j in line], [i for i, _ in line], "--", color="black", lw=1.2)
    right.set_title(_("score of q at m with k at n (dashed: the same m - n)"), fontsize=TITLE_PT)
    right.set_xlabel(_("key position n"), fontsize=TITLE_PT)
    right.set_ylabel(_("query position m"), fontsize=TITLE_PT)
    right.tick_params(labelsize=LABEL_PT)
    bar = fig.colorbar(image, ax=right, shrink=0.9)
    bar.set_label(_("score"), fontsize=TITLE_PT)
    bar.ax.tick_params(labelsize=LABEL_PT)
    fig.suptitle(_("m = {m}, n = {n}, offset m - n = {offset}: score {score:.4f} (θ = {theta:,.0f}, Dh = {Dh})")
                 .format(m=m, n=n, offset=offset, score=scores[m, n], theta=theta, Dh=q.shape[0]), fontsize=SUPTITLE_PT)
    return fig


def offset_widget(q, k, *, theta: float = 10000.0, num_positions: int = 16, m: int = 5, n: int = 2):
    """Two sliders, query position m and key position n, redrawing ``offset_figure`` on release."""
    from ipywidgets import interactive

    num_positions = check_positive_int("num_positions", num_positions)
    q, k = _check_even_vector("q", q), _check_even_vector("k", k)
    return interactive(lambda m, n: offset_figure(q, k, m, n, theta=theta, num_positions=num_positions), AUTO_DISPLAY,
                       m=int_slider(_("query position m"), m, 0, num_positions - 1),
                       n=int_slider(_("key position n"), n, 0, num_positions - 1))


def section_query_key() -> tuple[Tensor, Tensor]:
    """Chapter 13's head-0 query of "journey" and key of "step", ``(8,)`` each, before any rotation: section 3's
    layer, ``MultiHeadAttention(16, 16, 2048, 0.0, 2, rope_theta=10000.0)`` built after ``torch.manual_seed(7)``,
    on ``toy_sentence()``. Built inside ``torch.random.fork_rng``: the caller's random numbers are left as they were."""
    from ..data import toy_sentence
    from ..modules import MultiHeadAttention

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        layer = MultiHeadAttention(16, 16, 2048, 0.0, 2, rope_theta=10000.0)
    x = toy_sentence()[1]  # (6, 16): the journey sentence
    with torch.no_grad():  # head 0 = columns 0..7; token 1 = "journey", token 5 = "step"
        return layer.W_query(x)[1, :8], layer.W_key(x)[5, :8]


def offset_explorer(m: int = 5, n: int = 2, *, theta: float = 10000.0, num_positions: int = 16):
    """``offset_widget`` on section 3's query of "journey" and key of "step" (``section_query_key``)."""
    q, k = section_query_key()
    return offset_widget(q, k, theta=theta, num_positions=num_positions, m=m, n=n)


# ----------------------------------------------------------------------------------------- sliding windows


def _draw_mask(ax, keep: np.ndarray, labels, title: str, show_queries: bool) -> None:
    image = np.empty(keep.shape + (3,), dtype=np.uint8)
    image[keep] = KEPT_RGB
    image[~keep] = MASKED_RGB
    ax.imshow(image, interpolation="nearest")
    T = keep.shape[0]
    ax.set_xticks(range(T), labels, rotation=90, fontsize=LABEL_PT)
    ax.set_yticks(range(T), labels if show_queries else [""] * T, fontsize=LABEL_PT)
    ax.set_xticks(np.arange(-0.5, T), minor=True)
    ax.set_yticks(np.arange(-0.5, T), minor=True)
    ax.grid(True, which="minor", color="white", lw=1)
    ax.tick_params(which="both", length=0)
    ax.set_title(title, fontsize=TITLE_PT)
    ax.set_xlabel(_("key (… to column)"), fontsize=TITLE_PT)
    if show_queries:
        ax.set_ylabel(_("query (row attends …)"), fontsize=TITLE_PT)


def _labels(tokens) -> list[str]:
    if isinstance(tokens, numbers.Integral) and not isinstance(tokens, bool):
        return [str(t) for t in range(check_positive_int("tokens", tokens))]
    if not isinstance(tokens, (list, tuple)) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"tokens must be a number of tokens or a non-empty list of str, got {type(tokens).__name__}")
    return list(tokens)


def window_masks_figure(tokens, window: int):
    """The causal mask beside the sliding-window mask of width ``window`` (dark: the query may see that key).

    ``tokens``: the token labels (or a number of tokens, labelled 0, 1, 2, ...).
    """
    labels = _labels(tokens)
    window = check_positive_int("window", window)
    T = len(labels)
    fig = _figure(min(2.0 + 0.42 * T, 5.5) * 2, min(1.6 + 0.42 * T, 6.0))
    left, right = fig.subplots(1, 2)
    _draw_mask(left, causal_mask(T).numpy(), labels, _("causal: query t sees keys 0 .. t"), True)
    _draw_mask(right, sliding_window_mask(T, window).numpy(), labels,
               _("sliding window W = {window}: keys t - {back} .. t").format(window=window, back=window - 1), False)
    fig.suptitle(_("Dark: the query may attend to that key; grey: masked"), fontsize=SUPTITLE_PT)
    return fig


def reach_matrix(layers: int, window: int, num_tokens: int) -> Tensor:
    """``R[l, t, s]``: can input token s reach position t's vector after l + 1 windowed layers? ``(L, T, T)`` bool.

    Computed from the masks, not from a formula: one layer moves information along the window mask (query t
    reads keys t - W + 1 .. t); L layers compose it L times.
    """
    layers = check_positive_int("layers", layers)
    window = check_positive_int("window", window)
    num_tokens = check_positive_int("num_tokens", num_tokens)
    one = sliding_window_mask(num_tokens, window).to(torch.int64)  # (T, T): t reads s in one layer
    reach, steps = torch.eye(num_tokens, dtype=torch.int64), []
    for _ in range(layers):
        reach = ((one @ reach) > 0).to(torch.int64)  # (T, T) @ (T, T): through any key of the window
        steps.append(reach.bool())
    return torch.stack(steps)  # L × (T, T) -> (L, T, T)


def receptive_field(layers: int, window: int, num_tokens: int | None = None) -> int:
    """How many input positions the last token can read after ``layers`` windowed layers, counted from the masks
    (``reach_matrix``) on a sequence long enough (default ``layers · window + 1`` tokens)."""
    layers = check_positive_int("layers", layers)
    window = check_positive_int("window", window)
    num_tokens = layers * window + 1 if num_tokens is None else check_positive_int("num_tokens", num_tokens)
    return int(reach_matrix(layers, window, num_tokens)[-1, -1].sum())


def reach_figure(layers: int, window: int, num_tokens: int | None = None, *, rows: int | None = None):
    """Rows: after layer 1 .. L; columns: input positions. Dark: that input can reach the last token's vector.

    Each layer reaches ``W - 1`` positions further back: after L layers, ``L·(W - 1) + 1`` positions.
    ``rows``: draw room for that many layers (at least ``layers``; the rows below layer L stay empty), so that a
    widget's picture keeps one size whatever L is (``reach_widget`` passes its largest L). Default: ``layers``.
    """
    layers = check_positive_int("layers", layers)
    window = check_positive_int("window", window)
    if num_tokens is None:
        num_tokens = min(max(layers * (window - 1) + 4, 24), 60)
    num_tokens = check_positive_int("num_tokens", num_tokens)
    reach = reach_matrix(layers, window, num_tokens)[:, -1].numpy()  # (L, T): what the last token reads
    image = np.empty(reach.shape + (3,), dtype=np.uint8)
    image[reach] = KEPT_RGB
    image[~reach] = MASKED_RGB
    fixed = rows is not None  # a widget's picture: one size for every L and W
    rows = layers if rows is None else check_int("rows", rows, low=layers)
    width = WIDEST_IN if fixed else min(max(2.2 + 0.19 * num_tokens, 8.0), WIDEST_IN)
    fig = _figure(width, 1.9 + 0.36 * rows)
    ax = fig.subplots()
    ax.imshow(image, interpolation="nearest", aspect="auto", extent=(-0.5, num_tokens - 0.5, layers - 0.5, -0.5))
    ax.set_xlim(-0.5, num_tokens - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)  # rows below layer L: empty
    every = max(1, math.ceil(num_tokens / 30))
    ticks = [t for t in range(num_tokens) if (num_tokens - 1 - t) % every == 0]
    ax.set_xticks(ticks, [str(t) for t in ticks], fontsize=LABEL_PT, rotation=90 if num_tokens > 30 else 0)
    ax.set_yticks(range(layers), [_("after layer {layer}").format(layer=l + 1) for l in range(layers)],
                  fontsize=LABEL_PT)
    ax.set_xticks(np.arange(-0.5, num_tokens), minor=True)
    ax.set_yticks(np.arange(-0.5, layers), minor=True)
    ax.grid(True, which="minor", color="white", lw=0.8)
    ax.tick_params(which="both", length=0)
    if rows > layers:  # room for more layers below: the positions on top, next to the rows they number
        ax.xaxis.tick_top()
        ax.xaxis.set_label_position("top")
        for spine in ax.spines.values():
            spine.set_visible(False)
    ax.set_xlabel(_("input position (the last token is {last})").format(last=num_tokens - 1), fontsize=TITLE_PT)
    counted = int(reach[-1].sum())
    title = (ngettext("W = {window}, L = {layers}: the last token reads {count} position = L·(W - 1) + 1 = "
                      "{layers}·{back} + 1",
                      "W = {window}, L = {layers}: the last token reads {count} positions = L·(W - 1) + 1 = "
                      "{layers}·{back} + 1", counted) if counted == layers * (window - 1) + 1 else
             ngettext("W = {window}, L = {layers}: the last token reads {count} position = L·(W - 1) + 1 = "
                      "{layers}·{back} + 1 (cut by the sequence's start)",
                      "W = {window}, L = {layers}: the last token reads {count} positions = L·(W - 1) + 1 = "
                      "{layers}·{back} + 1 (cut by the sequence's start)", counted))
    ax.set_title(title.format(window=window, layers=layers, count=counted, back=window - 1), fontsize=TITLE_PT)
    fig.suptitle(_("How far back information can travel through stacked sliding windows"), fontsize=SUPTITLE_PT)
    return fig


def reach_widget(layers: int = 3, window: int = 4, *, max_layers: int = 8, max_window: int = 8):
    """Two sliders, layers L and window W, redrawing ``reach_figure`` on release, in one picture size: room for
    ``max_layers`` rows whatever L is, so that the notebook below it does not move when L changes."""
    from ipywidgets import interactive

    max_layers = check_positive_int("max_layers", max_layers)
    max_window = check_positive_int("max_window", max_window)
    return interactive(lambda layers, window: reach_figure(layers, window, rows=max_layers), AUTO_DISPLAY,
                       layers=int_slider(_("layers L"), check_int("layers", layers, low=1, high=max_layers), 1,
                                         max_layers),
                       window=int_slider(_("window W"), check_int("window", window, low=1, high=max_window), 1,
                                         max_window))


# --------------------------------------------------------------------------------------------- the cache


def cache_growth_figure(lengths: dict, *, ylabel: str | None = None):
    """One line per cache: what it holds after each token fed, ``{"no window": [1, 2, 3, ...], ...}``.

    ``ylabel``: the y axis's label (default: "tokens held (cache.length)", in the current language)."""
    if not isinstance(lengths, dict) or not lengths:
        raise TypeError(f"lengths must be a non-empty dict {{label: [values]}}, got {type(lengths).__name__}")
    fig = _figure(7.0, 3.6)
    ax = fig.subplots()
    styles = ("-o", "--s", ":^", "-.d")
    for n, (label, values) in enumerate(lengths.items()):
        if not isinstance(label, str):
            raise TypeError(f"lengths must have str keys (the labels), got {type(label).__name__}")
        values = list(values)
        if not values or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
            raise TypeError(f"lengths[{label!r}] must be a non-empty list of numbers")
        ax.plot(range(1, len(values) + 1), values, styles[n % 4], lw=2, markersize=4, label=label)
    ax.set_xlabel(_("tokens fed"), fontsize=TITLE_PT)
    ax.set_ylabel(_("tokens held (cache.length)") if ylabel is None else ylabel, fontsize=TITLE_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(True, color="0.9")
    ax.legend(fontsize=LABEL_PT)
    ax.set_title(_("A KV cache while tokens are fed one by one"), fontsize=TITLE_PT)
    return fig


# ------------------------------------------------------------------------------- chapter 11's model with RoPE


class NoPositions(torch.nn.Module):
    """Stands in for a model's position table: adds nothing (RoPE puts the positions into every layer instead)."""

    def forward(self, positions: Tensor) -> Tensor:
        return torch.zeros((), device=positions.device)  # broadcasts: token embeddings + 0


def rotary_induction_model(task=None, *, theta: float = 10000.0, context_length: int = 1024, seed: int = 0):
    """Chapter 11's 2-layer attention-only model (``mha_lib.induction.model``), with RoPE instead of learned
    positions: no position table, and every layer ``MultiHeadAttention(..., rope_theta=theta)``.

    The same class, task, training (``induction.train``) and scores as chapter 11, seeded the same way. The
    positions change, and so do the attention layers' starting weights: the RoPE layers are drawn afresh after the
    model is built, so they do not start from chapter 11's initial weights. Without a table of ``seq_len``
    positions it runs on sequences longer than it trained on (up to ``context_length``): ``evaluate_at_length``.
    """
    from ..induction.model import AttentionOnlyTransformer, InductionTask
    from ..modules import MultiHeadAttention
    from ..validation import check_seed

    task = InductionTask() if task is None else task
    theta = check_positive_float("theta", theta)
    context_length = check_positive_int("context_length", context_length)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_seed("seed", seed))
        model = AttentionOnlyTransformer(task, num_layers=2)
        d_model, heads = model.config.d_model, model.config.num_heads
        model.position_embedding = NoPositions()
        model.layers = torch.nn.ModuleList([
            MultiHeadAttention(d_model, d_model, context_length, 0.0, heads, rope_theta=theta) for _ in model.layers
        ])
    return model


def evaluate_at_length(model, seq_len: int, *, size: int = 512, seed: int = 123) -> dict:
    """``induction.evaluate`` on ``size`` held-out sequences of ``seq_len`` tokens (the chapter's task otherwise:
    the same vocabulary and periods, so the segment repeats more often). ``{"loss", "accuracy", "previous_token",
    "induction"}``. A model with a learned position table cannot run beyond its table: a ``ValueError`` says so.
    """
    from dataclasses import replace

    from ..induction.model import AttentionOnlyTransformer, evaluate, repeated_sequences

    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an induction AttentionOnlyTransformer, got {type(model).__name__}")
    seq_len = check_positive_int("seq_len", seq_len)
    if not isinstance(model.position_embedding, NoPositions) and seq_len > model.position_embedding.num_embeddings:
        raise ValueError(f"this model learned {model.position_embedding.num_embeddings} position vectors and has "
                         f"none for positions {model.position_embedding.num_embeddings} to {seq_len - 1}: it cannot "
                         f"read {seq_len} tokens")
    longest = min(layer.context_length for layer in model.layers)
    if seq_len > longest:
        raise ValueError(f"seq_len must be at most the layers' context_length = {longest}, got {seq_len}")
    task = replace(model.task, seq_len=seq_len)
    batch = repeated_sequences(task, check_positive_int("size", size), torch.Generator().manual_seed(seed))
    trained_task = model.task
    model.task = task  # the model checks token lengths against its task
    try:
        return evaluate(model, batch)
    finally:
        model.task = trained_task


def under_test() -> bool:
    """Whether a test runs this code: pytest sets ``PYTEST_CURRENT_TEST`` while a test runs, and a notebook kernel
    that a test starts (strict nbval, the standalone run of ``tests/notebooks/test_standalone.py``) inherits it."""
    return "PYTEST_CURRENT_TEST" in os.environ


def training_steps() -> int:
    """How many steps ``train_with_progress`` trains by default: chapter 11's ``TRAIN_STEPS`` (3,000), or
    ``TEST_STEPS`` under a test (``under_test``), so that no notebook cell a test runs needs more than seconds."""
    from ..induction.model import TRAIN_STEPS

    return TEST_STEPS if under_test() else TRAIN_STEPS


class _Line:
    """One line of HTML that a notebook shows as HTML and a plain-text viewer as its text."""

    def __init__(self, markup: str):
        self.markup = markup

    def _repr_html_(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", self.markup))


def train_with_progress(model, steps: int | None = None, *, reference=None, redraw_seconds: float = 2.0):
    """Train ``model`` as chapter 11 trains its models (``induction.train``: the same task, seed, optimiser and
    evaluations, one thread) and show how far it is in the cell's output, as chapter 11's trainer does: a status
    line (step, held-out loss, seconds: ``trainer.status_html``) after every evaluation, every 50 steps, and the
    loss and score curves (``plots.training_progress_figure``, ``reference`` drawn grey behind), redrawn at most
    every ``redraw_seconds`` and never for more than a tenth of the time. Both are updated in place (IPython display
    handles), so a saved notebook keeps the finished line and the final curves. Returns the ``TrainingLog``.

    ``steps``: by default ``training_steps()``: 3,000 (about 45 s on a quiet 2-core CPU, two to three times longer on
    a busy one; the status line ends with the seconds it took), or ``TEST_STEPS`` under a test. ``reference``: a
    finished ``TrainingLog`` (chapter 11's shipped run, ``induction.load_run("two_layer").log``) or None.
    """
    from IPython import get_ipython
    from IPython.display import display

    from ..induction.model import SEED, train
    from ..induction.plots import training_progress_figure
    from ..induction.trainer import status_html

    steps = training_steps() if steps is None else check_positive_int("steps", steps)
    if not isinstance(redraw_seconds, numbers.Real) or isinstance(redraw_seconds, bool):
        raise TypeError(f"redraw_seconds must be a number of seconds, got {type(redraw_seconds).__name__} "
                        f"{redraw_seconds!r}")
    if not 0 <= redraw_seconds <= 60:  # NaN fails this too
        raise ValueError(f"redraw_seconds must be from 0 to 60 seconds, got {redraw_seconds!r}")
    title = _("Chapter 11's model with RoPE, trained on this CPU; grey: the shipped run with learned positions")

    def picture(log):
        return training_progress_figure(log, reference, label="RoPE", total_steps=steps, title=title)

    shown = {}  # what is on screen: IPython display handles of the status line and of the curves
    in_notebook = get_ipython() is not None  # a plain Python process prints the status lines and draws nothing

    def put(name, value):
        if not in_notebook:
            print(repr(value))
        elif name in shown:
            shown[name].update(value)
        else:
            shown[name] = display(value, display_id=True)

    start, next_redraw = time.perf_counter(), -math.inf

    def callback(step, log):  # after each evaluation, the first at step 0
        nonlocal next_redraw
        now = time.perf_counter()
        put("status", _Line(status_html(step, steps, log.eval_loss[-1], now - start)))
        if in_notebook and now >= next_redraw:
            put("curves", picture(log))
            done = time.perf_counter()
            # at most every redraw_seconds, and drawing never takes more than a tenth of the time
            next_redraw = done + max(redraw_seconds, 9 * (done - now))

    log, _snapshots = train(model, steps, seed=SEED, callback=callback)
    put("status", _Line(status_html(steps, steps, log.eval_loss[-1], time.perf_counter() - start, done=True)))
    if in_notebook:
        put("curves", picture(log))
    return log


__all__ = [
    "LLAMA3_THETA", "NoPositions", "TEST_STEPS", "cache_growth_figure", "evaluate_at_length", "frequencies_figure",
    "offset_explorer", "offset_figure", "offset_widget", "reach_figure", "reach_matrix", "reach_widget",
    "receptive_field", "rope_scores", "rotary_induction_model", "rotation_figure", "section_query_key",
    "train_with_progress", "training_steps", "under_test", "wavelengths", "window_masks_figure",
]
