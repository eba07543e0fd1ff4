"""Diagram of chapter 8 (the whole layer at GPT-2-small size), drawn with matplotlib so it can be edited.

    python assets/draw/ch08_putting_it_together.py

writes
    assets/ch08_pipeline.png   x [4, 16, 768] -> Q, K, V [4, 16, 768] -> heads [4, 12, 16, 64] -> scores, scaled,
                               masked, weights [4, 12, 16, 16] -> context [4, 12, 16, 64] -> merged [4, 16, 768]
                               -> W_o -> output [4, 16, 768], every box with its shape; under the four score
                               stages, head 0 of sentence 0 as a small picture (the chapter's own layer)

Colour = kind of tensor: blue (B, T, D) one row per token, orange (B, H, T, Dh) one row per token and head,
purple (B, H, T, T) one number per query-key pair and head.
"""

from __future__ import annotations

from pathlib import Path

import torch
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

import mha_lib
from mha_lib.fonts import use_cjk_fallback
from mha_lib.data import SEED002_TOKENS

ASSETS = Path(__file__).resolve().parents[1]
DPI = 100
B, T, D, H = 4, 16, 768, 12
Dh = D // H
KIND_COLOURS = {"BTD": ("#dbe8f6", "#4a78a8"), "heads": ("#fde3cc", "#c8742c"), "TT": ("#e8def3", "#7d5aa6")}
BOX_W, BOX_H = 3.3, 1.45
WEIGHTS_CAP = 0.4  # colour range of the weights' picture, as in the chapter's heatmaps


def head0_stages() -> list[torch.Tensor]:
    """Scores, scaled, masked, weights of head 0, sentence 0: the chapter's layer (seeds 0 and 1, default init)."""
    torch.manual_seed(0)
    layer = mha_lib.MultiHeadAttention(D, D, context_length=1024, dropout=0.0, num_heads=H, qkv_bias=True)
    x = mha_lib.embed_tokens(SEED002_TOKENS, D)  # (T, D): sentence 0 of the chapter's batch
    with torch.no_grad():
        q = mha_lib.split_heads(layer.W_query(x[None]), H)[0, 0]  # (1, T, D) -> (1, H, T, Dh) -> (T, Dh)
        k = mha_lib.split_heads(layer.W_key(x[None]), H)[0, 0]
    scores = mha_lib.attention_scores(q, k)  # (T, T)
    scaled = mha_lib.scale_scores(scores, Dh)
    masked = scaled.masked_fill(~mha_lib.causal_mask(T), float("-inf"))
    return [scores, scaled, masked, torch.softmax(masked, dim=-1)]


def _canvas(width: float, height: float, xlim: tuple[float, float], ylim: tuple[float, float]):
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(*xlim)
    ax.set_ylim(ylim[1], ylim[0])  # y grows downwards: the flow reads top to bottom
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def _box(ax, cx: float, cy: float, name: str, shape: str, kind: str, *, w: float = BOX_W) -> None:
    face, edge = KIND_COLOURS[kind]
    ax.add_patch(FancyBboxPatch((cx - w / 2, cy - BOX_H / 2), w, BOX_H, boxstyle="round,pad=0.06,rounding_size=0.25",
                                facecolor=face, edgecolor=edge, lw=1.6))
    ax.text(cx, cy - 0.28, name, ha="center", va="center", fontsize=10.5, fontweight="bold")
    ax.text(cx, cy + 0.33, shape, ha="center", va="center", fontsize=10, family="monospace")


def _arrow(ax, start, end, label: str = "", *, ha: str = "left", dx: float = 0.2, dy: float = 0.0,
           size: float = 9.0, colour: str = "#333333") -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.3, color=colour,
                                 shrinkA=0, shrinkB=2))
    if label:
        mid = ((start[0] + end[0]) / 2 + dx, (start[1] + end[1]) / 2 + dy)
        ax.text(*mid, label, ha=ha, va="center", fontsize=size, color="#222222", linespacing=1.25)


def _thumbnail(ax, x0: float, y0: float, size: float, values: torch.Tensor, cmap: str, symmetric: bool) -> None:
    """A T×T matrix as a small picture; -inf entries are drawn grey (blocked).

    Scores get a symmetric range around 0; weights the range 0 … WEIGHTS_CAP, since the first rows (1, then
    about 1/2, 1/3, …) would otherwise wash out the rest.
    """
    finite = values[torch.isfinite(values)]
    if symmetric:
        bound = float(finite.abs().max())
        lo, hi = -bound, bound
    else:
        lo, hi = 0.0, WEIGHTS_CAP
    colours = colormaps[cmap]
    cell = size / values.shape[0]
    for r in range(values.shape[0]):
        for c in range(values.shape[1]):
            value = float(values[r, c])
            face = "#b0b0b0" if value == float("-inf") else colours(min((value - lo) / (hi - lo), 1.0))
            ax.add_patch(Rectangle((x0 + c * cell, y0 + r * cell), cell, cell, facecolor=face, lw=0))
    ax.add_patch(Rectangle((x0, y0), size, size, fill=False, edgecolor="#555555", lw=0.8))
    ax.text(x0 + size / 2, y0 + size + 0.3, f"{lo:+.1f} … {hi:+.1f}" if symmetric else f"0 … {hi:.1f}+",
            ha="center", va="top", fontsize=8, color="#444444")


def draw_pipeline() -> None:
    fig, ax = _canvas(11.0, 13.5, (0, 20), (0, 24.5))
    lanes = {"Q": 2.4, "K": 6.6, "V": 17.2}
    stage_x = [2.4, 6.6, 10.8, 15.0]
    ys = {"x": 1.3, "proj": 4.6, "heads": 8.0, "stages": 11.6, "thumbs": 13.2, "context": 18.0, "merged": 20.7,
          "out": 23.4}

    ax.text(0.2, 0.15, "One attention layer at GPT-2-small size", fontsize=13, fontweight="bold", va="top")
    _box(ax, 9.8, ys["x"], "x  (embeddings)", "[4, 16, 768]", "BTD", w=3.8)

    # projections and the cut into heads
    for name, cx in lanes.items():
        _arrow(ax, (9.8, ys["x"] + BOX_H / 2 + 0.08), (cx, ys["proj"] - BOX_H / 2 - 0.08))
        _box(ax, cx, ys["proj"], name, "[4, 16, 768]", "BTD")
        ax.text(cx + (0.3 if name != "V" else -0.3), ys["proj"] - 1.15, f"× W_{name.lower()}", fontsize=9.5,
                ha="left" if name != "V" else "right", va="center")
        _arrow(ax, (cx, ys["proj"] + BOX_H / 2 + 0.08), (cx, ys["heads"] - BOX_H / 2 - 0.08))
        _box(ax, cx, ys["heads"], f"{name} heads", "[4, 12, 16, 64]", "heads")
    ax.text(0.4, 2.35, "three projections,\n768 × 768 each, + bias", fontsize=9, ha="left", va="center")
    ax.text(lanes["K"] + 0.25, 6.3, "split_heads:\nview [4, 16, 12, 64]\ntranspose(1, 2)", fontsize=8.5,
            ha="left", va="center", family="monospace")

    # Q and K meet in the scores; the four stages side by side
    _arrow(ax, (lanes["Q"], ys["heads"] + BOX_H / 2 + 0.08), (stage_x[0], ys["stages"] - BOX_H / 2 - 0.08))
    _arrow(ax, (lanes["K"], ys["heads"] + BOX_H / 2 + 0.08), (stage_x[0] + 0.9, ys["stages"] - BOX_H / 2 - 0.08),
           "Q @ Kᵀ", dx=-0.4, dy=0.15, ha="right")
    stages = [("scores", "RdBu_r", True), ("scaled", "RdBu_r", True), ("masked", "RdBu_r", True),
              ("weights", "Purples", False)]
    ops = ["÷ √64 = 8", "causal mask\n−inf above\nthe diagonal", "softmax\nover each row"]
    for i, (name, _, _) in enumerate(stages):
        _box(ax, stage_x[i], ys["stages"], name, "[4, 12, 16, 16]", "TT", w=3.5)
    for i, op in enumerate(ops):
        _arrow(ax, (stage_x[i] + 1.8, ys["stages"]), (stage_x[i + 1] - 1.8, ys["stages"]))
        ax.text((stage_x[i] + stage_x[i + 1]) / 2, ys["stages"] + 1.25, op, fontsize=8.5, ha="center", va="top")
    for i, ((_, cmap, symmetric), values) in enumerate(zip(stages, head0_stages())):
        _thumbnail(ax, stage_x[i] - 1.2, ys["thumbs"] + 0.8, 2.4, values, cmap, symmetric)
    ax.text(0.4, ys["thumbs"] + 4.15, "below each stage: head 0 of the first sentence (LL, M, with, me, ., 郭, …), "
            "its own colour range; grey = −inf", fontsize=8.5, color="#444444", va="center")

    # weights @ V, merge, W_o
    cx = 15.0
    _arrow(ax, (lanes["V"], ys["heads"] + BOX_H / 2 + 0.08), (lanes["V"], ys["context"] - BOX_H / 2 - 0.08),
           "V", dx=0.2)
    _arrow(ax, (stage_x[3] + 1.85, ys["stages"] + 0.35), (lanes["V"] - 0.9, ys["context"] - BOX_H / 2 - 0.08),
           "weights @ V", dx=0.15, dy=-0.6, ha="left")
    _box(ax, lanes["V"] - 1.1, ys["context"], "context", "[4, 12, 16, 64]", "heads")
    _arrow(ax, (lanes["V"] - 1.1, ys["context"] + BOX_H / 2 + 0.08), (cx, ys["merged"] - BOX_H / 2 - 0.08),
           "merge_heads:\ntranspose(1, 2)\nview [4, 16, 768]", ha="right", dx=-0.7, size=8.5)
    _box(ax, cx, ys["merged"], "merged heads", "[4, 16, 768]", "BTD")
    _arrow(ax, (cx, ys["merged"] + BOX_H / 2 + 0.08), (cx, ys["out"] - BOX_H / 2 - 0.08),
           "× W_o (out_proj)", ha="right", dx=-0.3)
    _box(ax, cx, ys["out"], "output", "[4, 16, 768]", "BTD")

    legend = ("B = 4 sentences    T = 16 tokens\nD = 768 model width\nH = 12 heads    Dh = 768 / 12 = 64\n\n"
              "blue    [B, T, D]       a row per token\norange  [B, H, T, Dh]   a row per token, per head\n"
              "purple  [B, H, T, T]    a number per query–key pair")
    ax.text(0.4, 20.7, legend, fontsize=9, family="monospace", va="center", linespacing=1.35)
    fig.savefig(ASSETS / "ch08_pipeline.png", dpi=DPI, metadata={"Software": None})
    print("assets/ch08_pipeline.png: written")


def main() -> None:
    use_cjk_fallback()  # the legend names Chinese tokens
    draw_pipeline()


if __name__ == "__main__":
    main()
