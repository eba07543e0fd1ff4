"""Diagram of chapter 2 (stacking heads), drawn with matplotlib so it can be edited and regenerated.

    python assets/draw/ch02_stacking_heads.py [--language zh-CN]

writes (in Chinese: assets/zh-CN/ch02_wrapper.png)
    assets/ch02_wrapper.png   one input X feeds H = 3 independent causal heads; each head has its own W_q, W_k, W_v,
                              its own (T, T) weights (real ones, from mha_lib with seed 123) and its own (T, Dh)
                              output; torch.cat(..., dim=-1) puts the outputs side by side: (T, H·Dh)

Colour = head everywhere: a head's box, its projections and its columns of the output share one colour.
"""

from __future__ import annotations

import torch
from matplotlib import colormaps
from _common import canvas as _canvas
from _common import run, save, texts
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

import mha_lib
from mha_lib.display.plotting import MASKED_RGB

MASKED = "#{:02x}{:02x}{:02x}".format(*MASKED_RGB)  # masked cells: the series' grey
DPI = 84  # 11.8 in × 84 = 991 px: the notebook panel beside JupyterLab's file browser; 9 pt = 10.5 px
HEAD_COLOURS = ("#8fb8de", "#f4b183", "#a9d18e")  # head 0, 1, 2 (the palette of the other chapters' diagrams)
H, DH, D = 3, 2, 16
TOKENS = mha_lib.JOURNEY_TOKENS
T = len(TOKENS)
TEXTS = {  # every word drawn: (English, Chinese)
    "head": ("head {h}", "头 {h}"),
    "each": ("(D, Dh)\neach", "各为\n(D, Dh)"),
    "weights": ("weights (T, T)", "权重 (T, T)"),
    "cost": ("Cost: H heads × 3 projections of width Dh, then H × 2 small matmuls (Q Kᵀ and A V), "
             "one head after the other.",
             "代价：H 个头 × 3 个宽为 Dh 的投影，再加 H × 2 次小矩阵乘法（Q Kᵀ 和 A V），一个头接一个头地算。"),
}


def head_weights() -> torch.Tensor:
    """The (H, T, T) causal weights of three wrapper heads on the toy 16-wide embedding of the book's sentence."""
    _, x = mha_lib.toy_sentence(" ".join(TOKENS), d_model=D)  # (T, D)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)
        wrapper = mha_lib.MultiHeadAttentionWrapper(D, DH, context_length=T, dropout=0.0, num_heads=H)
    with torch.no_grad():
        _, weights = wrapper(x.unsqueeze(0), return_weights=True)  # (1, T, D) -> (1, H, T, T)
    return weights[0]


def _grid(ax, x0: float, y0: float, rows: int, cols: int, colour, *, cell: float = 1.0, text=None) -> None:
    """A rows × cols block of cells; ``colour(r, c)`` or one colour for all; optional ``text(r, c)``."""
    for r in range(rows):
        for c in range(cols):
            face = colour(r, c) if callable(colour) else colour
            ax.add_patch(Rectangle((x0 + c * cell, y0 + r * cell), cell, cell, facecolor=face, edgecolor="white",
                                   lw=1.0))
            if text is not None:
                ax.text(x0 + (c + 0.5) * cell, y0 + (r + 0.5) * cell, text(r, c), ha="center", va="center",
                        fontsize=9)


def _arrow(ax, start, end, *, rad: float = 0.0, colour: str = "#333333") -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.3, color=colour,
                                 connectionstyle=f"arc3,rad={rad}"))


def draw_wrapper(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    weights = head_weights()
    viridis = colormaps["viridis"]
    fig, ax = _canvas(11.8, 8.0, (-2.4, 30.6), (-1.6, 20.9))

    # the input
    x_top = 6.0
    ax.text(1.5, x_top - 0.4, "X  (T, D)", ha="center", va="bottom", fontsize=10.5)
    _grid(ax, 0, x_top, T, 3, "#d9d9d9")
    for t, token in enumerate(TOKENS):
        ax.text(-0.15, x_top + t + 0.5, token, ha="right", va="center", fontsize=9)

    # the heads: own projections, own weights, own output
    box_h, cell = 5.9, 0.72
    out_left = 17.6
    cat_x = 21.7  # the centre of the "cat" node
    for h in range(H):
        top = h * (box_h + 0.8)
        ax.add_patch(FancyBboxPatch((5.4, top), 14.4, box_h, boxstyle="round,pad=0.1,rounding_size=0.4",
                                    facecolor=HEAD_COLOURS[h], alpha=0.25, edgecolor=HEAD_COLOURS[h], lw=1.5))
        ax.text(5.8, top + 0.55, tx.head.format(h=h), ha="left", va="center", fontsize=10.5, weight="bold")
        for i, name in enumerate("qkv"):
            y = top + 1.3 + i * 1.45
            ax.add_patch(Rectangle((5.9, y), 1.6, 1.1, facecolor=HEAD_COLOURS[h], edgecolor="#555555", lw=0.8))
            ax.text(6.7, y + 0.55, rf"$W_{name}^{{({h})}}$", ha="center", va="center", fontsize=9.5)
        ax.text(8.0, top + 3.5, tx.each, ha="left", va="center", fontsize=9)
        # the head's causal weights: masked cells (exactly 0) light grey
        w = weights[h]
        _grid(ax, 10.6, top + 0.8, T, T, lambda r, c, w=w: viridis(float(w[r, c]) / float(weights.max()))
              if c <= r else MASKED, cell=cell)
        ax.text(10.6 + T * cell / 2, top + 0.7, tx.weights, ha="center", va="bottom", fontsize=9)
        _arrow(ax, (15.2, top + 3.0), (out_left - 0.2, top + 3.0))
        ax.text(16.4, top + 2.85, "· V", ha="center", va="bottom", fontsize=9)
        _grid(ax, out_left, top + 0.8, T, DH, HEAD_COLOURS[h], cell=cell)
        ax.text(out_left + DH * cell / 2, top + 0.7, "(T, Dh)", ha="center", va="bottom", fontsize=9)
        _arrow(ax, (3.3, x_top + 3.0), (5.3, top + box_h / 2), rad=0.0)  # X feeds every head
        # every head's output goes into one concatenation
        _arrow(ax, (out_left + DH * cell + 0.2, top + 3.0), (cat_x - 0.75, x_top + 3.0 + (h - 1) * 0.45),
               colour="#555555")

    # the concatenation
    ax.add_patch(FancyBboxPatch((cat_x - 0.7, x_top + 2.4), 1.4, 1.2, boxstyle="round,pad=0.05,rounding_size=0.5",
                                facecolor="white", edgecolor="#333333", lw=1.2))
    ax.text(cat_x, x_top + 3.0, "cat", ha="center", va="center", fontsize=10, family="monospace")
    _arrow(ax, (cat_x + 0.75, x_top + 3.0), (22.9, x_top + 3.0))
    _grid(ax, 23.0, x_top, T, H * DH, lambda r, c: HEAD_COLOURS[c // DH])
    for h in range(H):
        ax.text(23.0 + h * DH + DH / 2, x_top + T + 0.35, tx.head.format(h=h), ha="center", va="top", fontsize=9)
    ax.text(26.0, x_top + T + 1.3, "torch.cat(outputs, dim=-1)\n(T, H·Dh) = (6, 6)", ha="center", va="top",
            fontsize=10, linespacing=1.4)
    ax.text(12.6, 20.3, tx.cost, ha="center", va="center", fontsize=9.5)
    save(fig, "ch02_wrapper.png", language, DPI)


def main(language: str = "en") -> None:
    draw_wrapper(language)


if __name__ == "__main__":
    run(main)
