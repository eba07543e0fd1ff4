"""Diagram of chapter 1 (one attention head), drawn with matplotlib so it can be edited and regenerated.

    python assets/draw/ch01_single_head.py [--language zh-CN]

writes (in Chinese: assets/zh-CN/ch01_pipeline.png)
    assets/ch01_pipeline.png   X -> Q, K, V -> scores Q Kᵀ -> ÷√Dh and softmax -> weights A -> context A V,
                               every matrix drawn cell by cell with the numbers of the chapter's worked example
                               (the book's six tokens, weights from torch.manual_seed(123) and torch.rand)

The row of "journey" is outlined in every matrix that has one row per query: it is the row the chapter reads.
"""

from __future__ import annotations

import math

import torch
from matplotlib import colormaps
from _common import canvas as _canvas
from _common import run, save, texts
from matplotlib.patches import FancyArrowPatch, Rectangle

import mha_lib
from mha_lib.display.plotting import COLORMAPS

DPI = 86  # 11.6 in × 86 = 998 px: the notebook panel beside JupyterLab's file browser; 8.8 pt = 10.5 px
TOKENS = mha_lib.JOURNEY_TOKENS
READ_ROW = 1  # "journey"
# colour = which matrix (a light tint, so the digits stay readable); the scores and the weights use the maps the
# whole series uses for them (mha_lib.display.plotting.COLORMAPS): diverging centred on 0, and sequential from 0
COLOURS = {"X": "Greys", "Q": "Blues", "K": "Oranges", "V": "Greens", "S": COLORMAPS["scores"],
           "A": COLORMAPS["weights"], "Z": "BuGn"}
TEXTS = {  # every word drawn: (English, Chinese); a Chinese line has no $…$ (mathtext draws CJK as boxes)
    "each": ("each (D, Dh) = (3, 2)", "每个 (D, Dh) = (3, 2)"),
    "roles": ("Q: what each token looks for\nK: what each token offers\nV: what each token hands on",
              "Q：每个词元要找什么\nK：每个词元提供什么\nV：每个词元传递什么"),
    "scores": (r"scores $S = QK^\top$  (T, T)", "分数 S = QKᵀ  (T, T)"),
    "weights": ("weights A  (T, T)\nevery row sums to 1", "权重 A  (T, T)\n每一行之和为 1"),
    "context": ("context $Z = AV$\n(T, Dh) = (6, 2)", "上下文 Z = AV\n(T, Dh) = (6, 2)"),
    "per_row": ("softmax\nper row", "逐行\nsoftmax"),
    "caption": ("The outlined row follows one query, “journey”, through every step: its scores against all "
                "six keys, its weights, and its context vector.",
                "加框的一行跟着一个查询“journey”走完每一步：它对全部六个键的分数、它的权重和它的上下文向量。"),
}


def worked_example() -> dict[str, torch.Tensor]:
    """The chapter's numbers: X (6, 3); W_q, W_k, W_v (3, 2) drawn with torch.rand after seed 123."""
    x = mha_lib.journey_inputs()  # (T, D) = (6, 3)
    generator = torch.Generator().manual_seed(123)  # the same draws as torch.manual_seed(123); torch.rand(...)
    w_q, w_k, w_v = (torch.rand(3, 2, generator=generator) for _ in range(3))  # (D, Dh) each
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (T, Dh) each
    scores = mha_lib.attention_scores(q, k)  # (T, T)
    weights = torch.softmax(scores / math.sqrt(q.shape[-1]), dim=-1)  # (T, T), rows sum to 1
    return {"X": x, "Q": q, "K": k, "V": v, "S": scores, "A": weights, "Z": weights @ v}


def _matrix(ax, x0: float, y0: float, values: torch.Tensor, name: str, title: str, *, row_labels=None,
            col_labels=None, outline_row: int | None = None) -> None:
    """Draw ``values`` cell by cell, tinted by value, with a title above and optional token labels."""
    cmap = colormaps[COLOURS[name]]
    lo, hi = float(values.min()), float(values.max())
    bound = max(abs(lo), abs(hi)) or 1.0
    rows, cols = values.shape
    for r in range(rows):
        for c in range(cols):
            value = float(values[r, c])
            if name == "S":  # scores: centred on 0, as every score heatmap of the series (kept light: digits)
                level = 0.5 + 0.35 * value / bound
            elif name == "A":  # weights: 0 … the largest weight, the full sequential map
                level = value / (hi if hi > 0 else 1.0)
            else:
                level = 0.08 + 0.5 * (value - lo) / (hi - lo if hi > lo else 1.0)  # light enough for the digits
            face = cmap(level)
            dark = 0.299 * face[0] + 0.587 * face[1] + 0.114 * face[2] < 0.5  # white digits on dark cells
            ax.add_patch(Rectangle((x0 + c, y0 + r), 1, 1, facecolor=face, edgecolor="white", lw=1.2))
            ax.text(x0 + c + 0.5, y0 + r + 0.5, f"{value:.2f}", ha="center", va="center", fontsize=8.8,
                    color="white" if dark else "black")
    if row_labels:
        for r, label in enumerate(row_labels):
            ax.text(x0 - 0.15, y0 + r + 0.5, label, ha="right", va="center", fontsize=9)
    if col_labels:
        for c, label in enumerate(col_labels):
            ax.text(x0 + c + 0.5, y0 - 0.15, label, ha="left", va="bottom", fontsize=8.8, rotation=50)
    top = y0 - (1.45 if col_labels else 0.25)
    ax.text(x0 + cols / 2, top, title, ha="center", va="bottom", fontsize=10.5)
    if outline_row is not None:
        ax.add_patch(Rectangle((x0 - 0.06, y0 + outline_row - 0.06), cols + 0.12, 1.12, fill=False,
                               edgecolor="#c0392b", lw=2.0))


def _arrow(ax, start, end, label: str = "", *, offset=(0.0, -0.25), ha: str = "center", rad: float = 0.0):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=15, lw=1.4, color="#333333",
                                 connectionstyle=f"arc3,rad={rad}"))
    if label:
        mid = ((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1])
        ax.text(*mid, label, ha=ha, va="bottom", fontsize=9.5, linespacing=1.3)


def draw_pipeline(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    m = worked_example()
    fig, ax = _canvas(11.6, 8.1, (-2.2, 24.2), (-1.0, 17.4))

    # row 1: X -> Q, K, V
    _matrix(ax, 0, 1, m["X"], "X", "X  (T, D) = (6, 3)", row_labels=TOKENS, outline_row=READ_ROW)
    projections = r"$\times W_q,\ \times W_k,\ \times W_v$" + "\n" + tx.each
    _arrow(ax, (3.3, 4), (7.2, 4), projections, offset=(0, -0.35))
    for i, name in enumerate("QKV"):
        _matrix(ax, 7.6 + 3.4 * i, 1, m[name], name, f"${name} = XW_{name.lower()}$\n(T, Dh) = (6, 2)",
                outline_row=READ_ROW if name == "Q" else None)
    ax.text(17.6, 4.0, tx.roles, ha="left", va="center", fontsize=9.5, linespacing=1.6)

    # row 2: scores -> weights -> context
    _matrix(ax, 0, 10.4, m["S"], "S", tx.scores, row_labels=TOKENS, col_labels=TOKENS,
            outline_row=READ_ROW)
    _matrix(ax, 10.2, 10.4, m["A"], "A", tx.weights, row_labels=TOKENS,
            col_labels=TOKENS, outline_row=READ_ROW)
    _matrix(ax, 19.6, 10.4, m["Z"], "Z", tx.context, outline_row=READ_ROW)
    _arrow(ax, (6.3, 13.4), (8.6, 13.4), r"$\div\sqrt{D_h} = \sqrt{2}$" + "\n" + tx.per_row, offset=(0, -1.25))
    _arrow(ax, (16.5, 13.4), (19.2, 13.4), r"$A\,V$", offset=(0, -0.3))

    # Q and K meet in the scores, V comes down to the context
    ax.plot([8.6, 8.6, 12.0, 12.0], [7.2, 7.6, 7.6, 7.2], color="#333333", lw=1.4)  # Q and K meet ...
    _arrow(ax, (10.3, 7.6), (3.6, 8.2))  # ... in the scores
    ax.text(6.6, 7.75, r"$QK^\top$", ha="center", va="bottom", fontsize=9.5)
    _arrow(ax, (15.6, 7.2), (20.6, 8.7))
    ax.text(18.3, 7.75, "V", ha="center", va="bottom", fontsize=9.5)

    ax.text(11.0, 17.0, tx.caption, ha="center", va="center", fontsize=9.5,
            color="#c0392b")
    save(fig, "ch01_pipeline.png", language, DPI)


def main(language: str = "en") -> None:
    draw_pipeline(language)


if __name__ == "__main__":
    run(main)
