"""Chapter 15's figures, widgets and live training: how large the scores get and where the attention mass goes.

    softcap_figure(cap, scores)        the soft-cap curve c·tanh(s/c), and one row's weights before and after it
    softcap_widget()                   the same, with the cap on a slider
    first_token_mass_figure(mass)      (L, H) heatmap: each head's attention on the first token (SmolLM2)
    token_heatmaps_figure(w, labels)   a few heads' weights over a short text, token labels on both axes
    partial_rope_figure(Dh, f)         which dimensions of a head rotate with rope_fraction = f, and how fast
    partial_rope_widget()              the same, with f on a slider
    train_variants(variants)           chapter 11's model trained once per variant (plain, sinks, gate), with a
                                       status line per run; ``training_steps()`` steps, fewer under a test
    first_token_share(model, batch)    per layer: the mean weight on key 0, and the sink's share when it has sinks

Imported on use by the chapter (nothing here loads transformers).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..display.controls import float_slider, selection_slider
from ..display.plotting import DPI, LABEL_PT, SUPTITLE_PT, TITLE_PT
from ..language import gettext as _
from ..validation import check_int, check_positive_float, check_positive_int, check_tensor
from .rotary import AUTO_DISPLAY, _figure, _Line, training_steps

Tensor = torch.Tensor

#: one row of scaled scores, for the soft-cap figure: one key far ahead of the others (a logit that has grown)
SOFTCAP_ROW = (2.0, 0.5, -1.0, 1.5, 38.0, 3.0, 0.0, 30.0)


def _row(scores) -> Tensor:
    row = torch.as_tensor(SOFTCAP_ROW if scores is None else scores, dtype=torch.float64)
    if row.dim() != 1 or row.numel() < 2 or not torch.isfinite(row).all():
        raise ValueError(f"scores must be one row of at least 2 finite numbers, got shape {tuple(row.shape)}")
    return row


def softcap_figure(cap: float = 20.0, scores=None):
    """Left: the soft-cap ``cap·tanh(s / cap)`` against the score s (the identity dashed); right: the softmax weights
    of one row of scores (``SOFTCAP_ROW`` by default) without the cap and with it."""
    cap = check_positive_float("cap", cap)
    row = _row(scores)
    capped = cap * torch.tanh(row / cap)
    fig = _figure(9.8, 3.6)
    left, right = fig.subplots(1, 2)
    span = max(50.0, float(row.abs().max()) * 1.2)
    s = torch.linspace(-span, span, 401, dtype=torch.float64)
    left.plot(s, s, color="0.6", linestyle="--", linewidth=1.5, label=_("no cap: s"))
    left.plot(s, cap * torch.tanh(s / cap), color="#1f77b4", linewidth=2.5,
              label=_("soft-cap: c·tanh(s / c), c = {cap:g}").format(cap=cap))
    for level in (cap, -cap):
        left.axhline(level, color="#1f77b4", linewidth=0.8, linestyle=":")
    left.scatter(row, capped, color="#d62728", zorder=3, s=18, label=_("the row's scores"))
    left.set_ylim(-span, span)
    left.set_xlabel(_("score s (scaled)"), fontsize=TITLE_PT)
    left.set_ylabel(_("score after the cap"), fontsize=TITLE_PT)
    left.legend(fontsize=LABEL_PT, loc="upper left")
    keys = np.arange(row.numel())
    before, after = torch.softmax(row, -1).numpy(), torch.softmax(capped, -1).numpy()
    right.bar(keys - 0.2, before, width=0.4, color="0.6", label=_("no cap (largest {w:.2f})").format(w=before.max()))
    right.bar(keys + 0.2, after, width=0.4, color="#1f77b4",
              label=_("cap c = {cap:g} (largest {w:.2f})").format(cap=cap, w=after.max()))
    right.set_xticks(keys, [f"{v:g}" for v in row.tolist()], fontsize=LABEL_PT)
    right.set_xlabel(_("key (its score without the cap)"), fontsize=TITLE_PT)
    right.set_ylabel(_("attention weight"), fontsize=TITLE_PT)
    right.set_ylim(0, 1.05)
    right.legend(fontsize=LABEL_PT, loc="upper left")
    for ax in (left, right):
        ax.tick_params(labelsize=LABEL_PT)
        ax.grid(True, alpha=0.3)
    fig.suptitle(_("A soft-cap squashes every score into (-c, c): small scores pass, large ones stop near c"),
                 fontsize=SUPTITLE_PT)
    return fig


def softcap_widget(cap: float = 20.0, scores=None):
    """``softcap_figure`` with the cap c on a slider (1 to 50), redrawn on release."""
    from ipywidgets import interactive

    cap = check_positive_float("cap", cap)
    row = _row(scores)
    return interactive(lambda cap: softcap_figure(cap, row), AUTO_DISPLAY,
                       cap=float_slider(_("soft-cap c"), min(max(cap, 1.0), 50.0), 1.0, 50.0, 1.0,
                                        readout_format=".0f"))


def first_token_mass_figure(mass, *, title: str | None = None):
    """``mass`` ``(L, H)`` (``smollm2.first_token_mass``): one cell per layer and head, its mean weight on the first
    token; the layer's mean head written at the right."""
    mass = check_tensor("mass", torch.as_tensor(mass), ndim=2, layout="(L, H)").float()
    L, H = mass.shape
    fig = _figure(min(3.2 + 0.55 * H, 9.8), min(1.2 + 0.22 * L, 8.5))
    ax = fig.subplots()
    image = ax.imshow(mass.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(H), [str(h) for h in range(H)], fontsize=LABEL_PT)
    ax.set_yticks(range(L), [str(layer) for layer in range(L)], fontsize=LABEL_PT)
    ax.set_xlabel(_("head"), fontsize=TITLE_PT)
    ax.set_ylabel(_("layer"), fontsize=TITLE_PT)
    right = ax.secondary_yaxis("right")
    right.set_yticks(range(L), [f"{float(m):.2f}" for m in mass.mean(dim=1)], fontsize=LABEL_PT)
    right.set_ylabel(_("mean over the heads"), fontsize=TITLE_PT)
    bar = fig.colorbar(image, ax=ax, shrink=0.8, pad=0.02)
    bar.set_label(_("weight on the first token"), fontsize=TITLE_PT)
    bar.ax.tick_params(labelsize=LABEL_PT)
    ax.set_title(title or _("Attention on the first token, per layer and head"), fontsize=TITLE_PT)
    return fig


def token_heatmaps_figure(weights, labels, titles):
    """``weights`` ``(n, T, T)``: n heads' weights over one short text (row = query, column = key), each drawn with
    the token ``labels`` on both axes, under its title."""
    weights = check_tensor("weights", torch.as_tensor(weights), ndim=3, layout="(n, T, T)").float()
    n, T, _T = weights.shape
    if len(labels) != T or len(titles) != n:
        raise ValueError(f"need {T} labels and {n} titles, got {len(labels)} and {len(titles)}")
    side = min(9.8 / n, 0.8 + 0.26 * T)
    fig = _figure(side * n, side + 0.6)
    axes = np.atleast_1d(fig.subplots(1, n))
    shown = [repr(t)[1:-1] if t.strip() == t and t else repr(t)[1:-1].replace(" ", "␣") for t in labels]
    for index, (ax, title) in enumerate(zip(axes, titles)):
        ax.imshow(weights[index].numpy(), cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_xticks(range(T), shown, rotation=90, fontsize=LABEL_PT)
        ax.set_yticks(range(T), shown if index == 0 else [""] * T, fontsize=LABEL_PT)
        ax.set_title(title, fontsize=TITLE_PT)
        ax.set_xlabel(_("key"), fontsize=TITLE_PT)
        if index == 0:
            ax.set_ylabel(_("query"), fontsize=TITLE_PT)
    return fig


ROPE_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)


def partial_rope_figure(head_dim: int = 64, fraction: float = 0.25, theta: float = 10000.0):
    """Which of a head's ``head_dim`` dimensions rotate with ``rope_fraction=fraction`` (``MultiHeadAttention``'s
    rule: the first ``int(fraction·Dh)``, rotate-half within them, speeds θ^(-2i/rotating width)), and the
    wavelength of each rotating dimension in positions; the others are drawn grey: they carry no position.
    ``fraction = 0`` is a layer without positions (NoPE)."""
    head_dim = check_positive_int("head_dim", head_dim)
    if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be a number from 0 to 1, got {fraction!r}")
    theta = check_positive_float("theta", theta)
    rotating = int(fraction * head_dim)
    rotating -= rotating % 2
    dims = np.arange(head_dim)
    fig = _figure(9.8, 3.4)
    ax = fig.subplots()
    if rotating:
        half = rotating // 2
        pair = np.arange(rotating) % half  # rotate-half: dimension i and i + half turn together at speed i
        wavelength = 2 * math.pi * theta ** (2 * pair / rotating)
        ax.bar(dims[:rotating], wavelength, width=0.85, color="#1f77b4", label=_("rotates (RoPE)"))
    if rotating < head_dim:
        ax.axvspan(rotating - 0.5, head_dim - 0.5, color="0.85", label=_("passes unrotated: no position"))
    ax.set_yscale("log")
    ax.set_ylim(1, 2 * math.pi * theta * 3)
    ax.set_xlim(-1, head_dim)
    ax.set_xlabel(_("dimension of one query or key head"), fontsize=TITLE_PT)
    ax.set_ylabel(_("wavelength (positions, log)"), fontsize=TITLE_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=LABEL_PT, loc="upper right")
    ax.set_title(_("rope_fraction = {f:g}: {r} of {Dh} dimensions rotate, {rest} carry no position").format(
        f=fraction, r=rotating, Dh=head_dim, rest=head_dim - rotating), fontsize=TITLE_PT)
    return fig


def partial_rope_widget(head_dim: int = 64, fraction: float = 0.25, theta: float = 10000.0):
    """``partial_rope_figure`` with the fraction on a slider over ``ROPE_FRACTIONS`` (0: NoPE, 1: full RoPE)."""
    from ipywidgets import interactive

    head_dim = check_positive_int("head_dim", head_dim)
    return interactive(lambda fraction: partial_rope_figure(head_dim, fraction, theta), AUTO_DISPLAY,
                       fraction=selection_slider(_("rope_fraction f"), ROPE_FRACTIONS, fraction))


# --------------------------------------------------------------------------------------------------- training

@torch.no_grad()
def first_token_share(model, batch, *, start: int = 8) -> list[dict]:
    """Per layer of chapter 11's ``model`` on ``batch``: ``{"first": mean weight on key 0, "sink": the sink's mean
    share of the weight (0 without sinks)}``, over the queries at positions ``>= start``."""
    from ..induction.model import _evaluating

    start = check_int("start", start, low=1)
    with _evaluating(model):
        _logits, weights = model(batch.tokens, return_weights=True)  # L × (B, H, T, T)
    rows = []
    for w in weights:
        rows.append({"first": float(w[:, :, start:, 0].mean()),
                     "sink": float(1 - w[:, :, start:, :].sum(-1).mean())})
    return rows


def train_variants(variants: dict, steps: int | None = None, *, seed: int = 0) -> dict:
    """Train chapter 11's two-layer model once per entry of ``variants`` (name -> ``attention`` options for every
    layer, None for the plain model), each from the same seed, on the same data, as chapter 11 trains it
    (``induction.train``, one thread). Shows one status line per run, updated after every evaluation (every 50
    steps). ``steps``: ``training_steps()`` by default (chapter 11's 3,000, fewer under a test).
    Returns ``{name: (model, log)}``."""
    from IPython import get_ipython
    from IPython.display import display

    from ..induction.model import AttentionOnlyTransformer, InductionTask, train
    from ..induction.trainer import status_html

    if not isinstance(variants, dict) or not variants:
        raise TypeError(f"variants must be a non-empty dict name -> attention options, got {type(variants).__name__}")
    steps = training_steps() if steps is None else check_positive_int("steps", steps)
    in_notebook = get_ipython() is not None
    results = {}
    for name, options in variants.items():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AttentionOnlyTransformer(InductionTask(), attention=options)
        # The separator is translatable: Chinese puts a full-width colon after the name.
        label = _("{name}: ").format(name=name)
        handle = display(_Line(label + "…"), display_id=True) if in_notebook else None
        start = time.perf_counter()

        def callback(step, log, label=label, handle=handle, start=start):
            if handle is not None:
                handle.update(_Line(label + status_html(step, steps, log.eval_loss[-1], time.perf_counter() - start)))

        log, _snapshots = train(model, steps, seed=seed, callback=callback)
        line = _Line(label + status_html(steps, steps, log.eval_loss[-1], time.perf_counter() - start, done=True))
        if handle is not None:
            handle.update(line)
        else:
            print(repr(line))
        results[name] = (model, log)
    return results


__all__ = ["ROPE_FRACTIONS", "SOFTCAP_ROW", "first_token_mass_figure", "first_token_share", "partial_rope_figure",
           "partial_rope_widget", "softcap_figure", "softcap_widget", "token_heatmaps_figure", "train_variants"]
