"""Diagrams of chapter 5 (causal and padding masks), drawn with matplotlib so they can be edited.

    python assets/draw/ch05_causal_masking.py [--language zh-CN]

writes (in Chinese: the same names in assets/zh-CN/)
    assets/ch05_causal_steps.png   a 4×4 example: scores -> blocked scores set to -inf -> softmax weights; below it
                                   the GPT-2-sized walkthrough's slip (diagonal blocked too): row 0 is all -inf, NaN
    assets/ch05_conventions.png    the same causal pattern (and two padding patterns) written in the conventions
                                   of six code bases, cell by cell: raw value printed, colour = what it means

Colours mean the same thing everywhere: teal = the query may attend to that key, grey = blocked.
"""

from __future__ import annotations

import torch
from _common import canvas as _canvas
from _common import monospace, run, save, texts
from matplotlib.patches import FancyArrowPatch, Rectangle

import mha_lib
from mha_lib.display.plotting import MASKED_RGB

DPI = 78  # 12.8 in × 78 = 998 px: the notebook panel beside JupyterLab's file browser
SMALL = 9.6  # pt, the smallest text: 10.4 px at 78 dpi
KEEP, NAN = "#8fd3c7", "#f4a6a6"
BLOCKED = "#{:02x}{:02x}{:02x}".format(*MASKED_RGB)  # blocked cells: the series' grey
TOKENS = ("The", "cat", "sat", "down")
SCORES = torch.tensor([[1.2, 0.3, -0.5, 2.0],
                       [0.4, 1.1, 0.9, -1.3],
                       [-0.2, 0.8, 1.5, 0.6],
                       [0.7, -0.6, 0.2, 1.0]])
TEXTS = {  # every word drawn: (English, Chinese); a Chinese line has no $…$ (mathtext draws CJK as boxes)
    "causal": ("causal mask: block the future (above the diagonal)", "因果掩码：掩蔽未来（对角线以上）"),
    "slip": ("the GPT-2-sized walkthrough's slip:\nblock the diagonal too",
             "GPT-2 尺寸全流程教程的失误：\n连对角线也掩蔽"),
    "scores": ("scores  $QK^T/\\sqrt{D_h}$", "分数  QKᵀ/√Dh"),
    "per_row": ("softmax per row", "逐行 softmax"),
    "nan": ("← exp(−inf) = 0 in every\n    cell: 0 / 0 = NaN", "← 每一格都是\n    exp(−inf) = 0：\n    0 / 0 = NaN"),
    "legend_steps": ("teal: may attend    grey: blocked    red: a row with nothing left to attend to",
                     "青色：可以关注    灰色：被掩蔽    红色：没有任何键可以关注的一行"),
    "keep_mask": ("keep mask (mha_lib, SDPA)\nTrue = attend", "保留掩码（mha_lib、SDPA）\nTrue = 关注"),
    "triu": ("triu(ones, diagonal=1)\n1 = blocked  (Raschka's book)", "triu(ones, diagonal=1)\n1 = 掩蔽（Raschka 的书）"),
    "tril": ("tril(ones) buffer\n0 = blocked  (nanoGPT style)", "tril(ones) 缓冲区\n0 = 掩蔽（nanoGPT 风格）"),
    "nn_mha": ("nn.MultiheadAttention\nTrue = blocked", "nn.MultiheadAttention\nTrue = 掩蔽"),
    "additive": ("additive float mask\n0 = attend, −inf = blocked", "加性浮点掩码\n0 = 关注，−inf = 掩蔽"),
    "builds_it": ("additive_mask(keep)  builds it", "additive_mask(keep)  生成它"),
    "padding": ("padding (B = 2 sequences of lengths 6 and 2, S = 6 keys):",
                "填充（B = 2 条序列，长度为 6 和 2，S = 6 个键）："),
    "key_padding": ("key_padding_mask (B, S)\nTrue = padded\n(key-padding tutorial, nn.MHA)",
                    "key_padding_mask (B, S)\nTrue = 填充位\n（键填充教程、nn.MHA）"),
    "valid_lens": ("valid_lens (B,)\n(D2L, fill −1e6)", "valid_lens (B,)\n（D2L，填入 −1e6）"),
    "keep_sequence": ("keep mask, sequence {b}\n(T_q = 2 queries × S = 6 keys)",
                      "保留掩码，序列 {b}\n（T_q = 2 个查询 × S = 6 个键）"),
    "both": ("both converters give this (B, 1, T_q, S) keep mask: whole key columns blocked",
             "两个转换函数都给出这个 (B, 1, T_q, S) 保留掩码：键的整列被掩蔽"),
    "legend_conventions": ("teal: may attend    grey: blocked    (the raw values differ from one convention to the "
                           "next; the meaning is the same)",
                           "青色：可以关注    灰色：被掩蔽    （原始值因约定而异，含义相同）"),
}


def _grid(ax, x0: float, y0: float, texts, keep: torch.Tensor, title: str, *, row_labels=None, col_labels=None,
          nan_rows=(), fontsize: float = SMALL, cell: float = 1.0) -> None:
    """Cells coloured by ``keep`` (teal = attend, grey = blocked; rows in ``nan_rows`` red), raw text inside."""
    rows, cols = keep.shape
    for r in range(rows):
        for c in range(cols):
            colour = NAN if r in nan_rows else (KEEP if keep[r, c] else BLOCKED)
            ax.add_patch(Rectangle((x0 + c * cell, y0 + r * cell), cell, cell, facecolor=colour,
                                   edgecolor="white", lw=1.5))
            ax.text(x0 + (c + 0.5) * cell, y0 + (r + 0.5) * cell, texts[r][c], ha="center", va="center",
                    fontsize=fontsize)
    if row_labels:
        for r, label in enumerate(row_labels):
            ax.text(x0 - 0.12, y0 + (r + 0.5) * cell, label, ha="right", va="center", fontsize=SMALL)
    if col_labels:
        for c, label in enumerate(col_labels):
            ax.text(x0 + (c + 0.5) * cell, y0 - 0.1, label, ha="center", va="bottom", fontsize=SMALL)
    top = y0 - (0.55 if col_labels else 0.15)
    ax.text(x0 + cols * cell / 2, top, title, ha="center", va="bottom", fontsize=10, linespacing=1.35)


def _arrow(ax, start, end, label: str = "") -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.3, color="#333333"))
    if label:
        ax.text((start[0] + end[0]) / 2, start[1] - 0.2, label, ha="center", va="bottom", fontsize=SMALL,
                linespacing=1.3)


def _fmt(x: float) -> str:
    if x != x:  # NaN
        return "NaN"
    if x == float("-inf"):
        return "−inf"
    return f"{x:.2f}".replace("-", "−")


def draw_causal_steps(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    T = len(TOKENS)
    keep = mha_lib.causal_mask(T)
    wrong_keep = keep.tril(diagonal=-1)  # the GPT-2-sized walkthrough: the diagonal blocked as well
    fig, ax = _canvas(12.8, 6.84, (-1.6, 20.8), (-1.3, 10.6))
    for y0, mask, label in ((0.4, keep, tx.causal), (6.0, wrong_keep, tx.slip)):
        masked = SCORES.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(masked, dim=-1)
        nan_rows = [r for r in range(T) if not mask[r].any()]
        all_kept = torch.ones(T, T, dtype=torch.bool)
        _grid(ax, 0, y0, [[_fmt(v) for v in row] for row in SCORES.tolist()], all_kept, tx.scores,
              row_labels=TOKENS, col_labels=TOKENS)
        _grid(ax, 6.6, y0, [[_fmt(v) for v in row] for row in masked.tolist()], mask, label,
              col_labels=TOKENS, nan_rows=())
        _grid(ax, 13.2, y0, [[_fmt(v) for v in row] for row in weights.tolist()], mask, tx.per_row,
              col_labels=TOKENS, nan_rows=nan_rows)
        _arrow(ax, (4.3, y0 + 2), (6.3, y0 + 2), "masked_fill\n(−inf)")
        _arrow(ax, (10.9, y0 + 2), (12.9, y0 + 2), "softmax")
    ax.text(17.35, 6.9, tx.nan, ha="left", va="center", fontsize=SMALL,
            color="#c0392b")
    ax.text(9.6, 10.25, tx.legend_steps, ha="center", va="center", fontsize=SMALL)
    save(fig, "ch05_causal_steps.png", language, DPI)


def draw_conventions(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    T = 4
    keep = mha_lib.causal_mask(T)
    fig, ax = _canvas(12.8, 6.4, (-0.8, 30.2), (-1.9, 13.2))

    def booleans(mask):
        return [["True" if v else "False" for v in row] for row in mask.tolist()]

    def numbers(mask):
        return [[f"{v:g}" for v in row] for row in mask.float().tolist()]

    additive = mha_lib.additive_mask(keep)
    row_one = (
        (booleans(keep), tx.keep_mask, "mha_lib.causal_mask(4)"),
        (numbers(~keep), tx.triu, "mask_from_blocked(m)"),
        (numbers(keep), tx.tril, "mask_from_allowed(m)"),
        (booleans(~keep), tx.nn_mha, "mask_from_blocked(m)"),
        ([[_fmt(v) for v in row] for row in additive.tolist()], tx.additive, tx.builds_it),
    )
    for i, (cells, title, converter) in enumerate(row_one):
        x0 = i * 6.0
        _grid(ax, x0, 0, cells, keep, title, fontsize=SMALL, cell=1.15)
        ax.text(x0 + 2.3, 4.95, converter, ha="center", va="center", fontsize=SMALL, family=monospace(language))

    # row two: padding, for a batch of two key sequences of lengths 6 and 2 (S = 6), two queries each
    S, lens = 6, torch.tensor([6, 2])
    padded = torch.arange(S)[None, :] >= lens[:, None]  # (B, S), True = padding
    pad_keep = ~padded
    ax.text(-0.6, 6.3, tx.padding, ha="left", va="center",
            fontsize=10)
    _grid(ax, 0, 8.7, booleans(padded), pad_keep, tx.key_padding, fontsize=SMALL, cell=1.15)
    ax.text(3.45, 11.45, "mask_from_key_padding(m, B, S)", ha="center", va="center", fontsize=SMALL,
            family="monospace")
    _grid(ax, 9.6, 8.7, [[str(int(v))] for v in lens], torch.ones(2, 1, dtype=torch.bool),
          tx.valid_lens, fontsize=SMALL, cell=1.15)
    ax.text(10.2, 11.45, "mask_from_valid_lens(v, T, S)", ha="center", va="center", fontsize=SMALL,
            family="monospace")
    for b in range(2):
        x0 = 15.4 + b * 7.3
        rows = pad_keep[b].expand(2, S)  # (T_q = 2, S): every query row sees the same keys
        _grid(ax, x0, 8.7, booleans(rows), rows, tx.keep_sequence.format(b=b), fontsize=SMALL, cell=1.15)
    _arrow(ax, (11.7, 10.4), (15.1, 10.4))
    ax.text(22.55, 11.45, tx.both, ha="center", va="center", fontsize=SMALL)
    ax.text(14.7, 12.7, tx.legend_conventions, ha="center", va="center", fontsize=SMALL)
    save(fig, "ch05_conventions.png", language, DPI)


def main(language: str = "en") -> None:
    draw_causal_steps(language)
    draw_conventions(language)


if __name__ == "__main__":
    run(main)
