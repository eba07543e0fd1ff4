"""Chapter 11 diagram: the two-head circuit that solves the repeated-segment task.

    python assets/draw/ch11_heads_learn.py   ->  assets/ch11_heads_learn.png
    python assets/draw/ch11_heads_learn.py --language zh-CN   ->  assets/zh-CN/ch11_heads_learn.png

Layer 0: a previous-token head writes "the token before me" into every position. Layer 1: an induction head at
query t looks for the key whose *previous* token equals its own token, and copies that key's token: the token
that followed the earlier occurrence.
"""

from __future__ import annotations

import sys
from pathlib import Path

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import canvas, run, save, texts  # noqa: E402

BLUE, ORANGE, GREEN, GREY, DARK = "#2e86c1", "#e67e22", "#27ae60", "#555555", "#222222"
TOKENS = "ISDLUZISD"  # the segment ISDLUZ, then its second copy up to the query
QUERY, MATCH = 8, 3  # query t = 8 (the second D); the key after the first D is s = 3 (L)
X0, DX, W = 2.2, 0.95, 0.78  # x of position 0, spacing, box width
TEXTS = {  # every word drawn: (English, Chinese)
    "title": ("The circuit two layers learn: find the earlier occurrence of the current token, copy what followed it",
              "两层学到的回路：找到当前词元早先出现的位置，复制紧跟在它后面的词元"),
    "tokens": ("tokens x", "词元 x"),
    "next": ("next", "下一个"),
    "layer0": ("layer 0\nprevious-token\nhead", "第 0 层\n前一词元头"),
    "holds": ("each position now also holds \"the token\nbefore me\": w[t, t−1] ≈ 1 (trained: L0 H3, 0.99)",
              "现在每个位置还存着“我前面的\n词元”：w[t, t−1] ≈ 1（训练所得：L0 H3，0.99）"),
    "layer1": ("layer 1\ninduction\nhead", "第 1 层\n诱导头"),
    "attends": ("attends to s = 3 (weight ≈ 1)", "关注 s = 3（权重 ≈ 1）"),
    "output": ("output at t = 8: the token L", "t = 8 处的输出：词元 L"),
    "copies": ("copies the value of s = 3", "复制 s = 3 的值"),
    "predicts": ("predicts\nL", "预测\nL"),
    "predicts_dx": (0.1, 0.42),  # not a word: "预测" sits clear of the green arrow
    "query": ("query t = 8 holds S→D: it looks for a key whose previous token is its own token D. Key s = 3 holds "
              "D→L, a match,\nso the head puts its weight there and copies L: the token that followed the first D.",
              "查询 t = 8 存着 S→D：它寻找前一个词元是它自己的词元 D 的键。键 s = 3 存着 D→L，正好匹配，\n"
              "于是这个头把权重放在那里，复制 L：紧跟在第一个 D 后面的词元。"),
    "why": ("Matching \"previous token = my token\" needs the previous token to be written into each position first: "
            "layer 0 does that,\nlayer 1 reads it. One layer alone cannot; without the causal mask the model reads the "
            "answer from position t+1 instead.\nElhage et al. 2021 (previous-token + induction heads), Olsson et al. "
            "2022. Positions, layers and heads counted from 0.",
            "要匹配“前一个词元 = 我的词元”，必须先把前一个词元写进每个位置：第 0 层做这件事，\n"
            "第 1 层读取它。只有一层做不到；没有因果掩码，模型会改为从位置 t+1 读出答案。\n"
            "Elhage et al. 2021（前一词元头 + 诱导头），Olsson et al. 2022。位置、层和头都从 0 开始计数。"),
}


def _x(position: int) -> float:
    return X0 + position * DX


def _box(ax, x, y, w, h, text, color, *, fill="white", size=12, weight="normal", lw=1.6):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.1",
                                facecolor=fill, edgecolor=color, linewidth=lw))
    ax.text(x, y, text, ha="center", va="center", fontsize=size, weight=weight, color=DARK)


def _arrow(ax, start, end, color, *, rad=0.0, lw=1.5, style="-|>"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=14, color=color, linewidth=lw,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=2, shrinkB=2))


def draw(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    fig, ax = canvas(12.0, 6.4, (0, 12.0), (0, 6.4))
    ax.text(0.25, 0.4, tx.title, fontsize=13, weight="bold", color=DARK, va="center")

    # row 1: the tokens, with their positions above
    y_tok = 1.35
    ax.text(0.25, y_tok, tx.tokens, fontsize=11, color=GREY, va="center")
    for t, token in enumerate(TOKENS):
        ax.text(_x(t), y_tok - 0.5, str(t), fontsize=10, color=GREY, ha="center", va="center")
        edge = ORANGE if t == QUERY else (GREEN if t == MATCH else GREY)
        _box(ax, _x(t), y_tok, W, 0.55, token, edge, size=13, weight="bold", lw=2.2 if t in (QUERY, MATCH) else 1.4)
    _box(ax, _x(len(TOKENS)), y_tok, W, 0.55, "?", ORANGE, size=13, weight="bold", fill="#fdf2e9")
    ax.text(_x(len(TOKENS)), y_tok - 0.5, tx.next, fontsize=10, color=ORANGE, ha="center", va="center")

    # layer 0: every position reads the one before it
    y_l0 = 2.45
    ax.text(0.25, y_l0 - 0.12, tx.layer0, fontsize=10.5, color=BLUE, va="center",
            weight="bold")
    for t in range(1, len(TOKENS)):
        _arrow(ax, (_x(t - 1), y_tok + 0.3), (_x(t), y_l0 - 0.27), BLUE, lw=1.3)
    # row 2: what each position holds after layer 0: the token before it, and itself
    for t, token in enumerate(TOKENS):
        before = TOKENS[t - 1] if t else "·"
        edge = ORANGE if t == QUERY else (GREEN if t == MATCH else BLUE)
        _box(ax, _x(t), y_l0, W, 0.5, f"{before}→{token}", edge, size=11, lw=2.2 if t in (QUERY, MATCH) else 1.2)
    ax.text(_x(0) - 0.45, y_l0 + 0.62, tx.holds, fontsize=10.5, color=BLUE, va="center")

    # layer 1: the induction head at the query
    y_l1 = 4.05
    ax.text(0.25, y_l1, tx.layer1, fontsize=10.5, color=ORANGE, va="center", weight="bold")
    _arrow(ax, (_x(QUERY), y_l0 + 0.27), (_x(MATCH), y_l0 + 0.27), ORANGE, rad=-0.3, lw=2.4)
    ax.text((_x(QUERY) + _x(MATCH)) / 2 + 0.2, y_l0 + 0.5, tx.attends, fontsize=10.5,
            color=ORANGE, ha="center", va="center")
    out_x = _x(QUERY) - 0.6
    _box(ax, out_x, y_l1, 3.1, 0.55, tx.output, GREEN, size=11, fill="#eafaf1")
    _arrow(ax, (_x(MATCH), y_l0 + 0.27), (out_x - 1.6, y_l1), GREEN, rad=0.2, lw=2.0)
    ax.text(_x(MATCH) - 0.1, y_l1 - 0.3, tx.copies, fontsize=10.5, color=GREEN, va="center",
            ha="right")
    _arrow(ax, (out_x + 1.6, y_l1), (_x(len(TOKENS)), y_tok + 0.3), GREEN, rad=0.25, lw=2.0)
    ax.text(_x(len(TOKENS)) + tx.predicts_dx, y_l0 + 0.55, tx.predicts, fontsize=11, weight="bold", color=GREEN,
            va="center", ha="left")
    ax.text(X0 - 0.4, y_l1 + 0.72, tx.query, fontsize=10.5, color=DARK, va="center")

    ax.text(0.25, 5.55, tx.why, fontsize=10.5, color=GREY, va="top")
    save(fig, "ch11_heads_learn.png", language, 83)  # 12 in × 83 = 996 px (the notebook panel); 10 pt = 11.5 px


def main(language: str = "en") -> None:
    draw(language)


if __name__ == "__main__":
    run(main)
