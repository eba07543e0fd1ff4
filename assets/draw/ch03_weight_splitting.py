"""Diagrams of chapter 3 (weight splitting), drawn with matplotlib so they can be edited and regenerated.

    python assets/draw/ch03_weight_splitting.py [--language zh-CN]

writes (in Chinese: the same names in assets/zh-CN/)
    assets/ch03_split_heads.png   (T, D) -> view (T, H, Dh) -> transpose (H, T, Dh), and the wrong direct view
    assets/ch03_weight_rows.png   the wrapper's per-head weights stacked into one W_query, then into W_qkv
    assets/ch03_three_ways.png    the (D, D) matrix behind each way to form heads: full, identity, block-diagonal

Colour = head everywhere: a cell is coloured by the head its feature (or weight row) belongs to.
"""

from __future__ import annotations

import torch
from _common import canvas as _canvas
from _common import monospace, run, save, texts
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

HEAD_COLOURS = ("#8fb8de", "#f4b183", "#a9d18e", "#d5a6e6")  # head 0, 1, 2, 3
TOKENS = ("Your", "journey", "starts", "with")
DPI = 80  # the reshape: 12.4 in × 80 = 992 px, the notebook panel beside JupyterLab's file browser
SMALL = 9.5  # pt, the reshape's smallest text: 10.6 px at 80 dpi
TEXTS = {  # every word drawn: (English, Chinese)
    "head": ("head {h}", "头 {h}"),
    # the reshape
    "right": ("right:  view to (T, H, Dh), then transpose to (H, T, Dh)",
              "正确：先 view 成 (T, H, Dh)，再转置成 (H, T, Dh)"),
    "each_head": ("each head: every token, its own Dh features", "每个头：所有词元，各取自己的 Dh 个特征"),
    "wrong": ("wrong:  view straight to (H, T, Dh)", "错误：直接 view 成 (H, T, Dh)"),
    "no_transpose": ("view(H, T, Dh)   # no transpose", "view(H, T, Dh)   # 没有转置"),
    "pos": ("pos {t}", "位置 {t}"),
    "not_a_token": ("'pos 1' of head 0 is not a token:\nit is features 2, 3 of \"Your\"",
                    "头 0 的“位置 1”不是一个词元：\n它是“Your”的特征 2、3"),
    # stacking weights
    "wrapper": ("wrapper:\none W_query per head", "包装器：\n每个头一个 W_query"),
    "head_shape": ("head {h}: ({Dh}, {d_in})", "头 {h}：({Dh}, {d_in})"),
    "split_layer": ("split layer:\none W_query", "拆分层：\n一个 W_query"),
    "fused_layer": ("fused layer:\none W_qkv", "融合层：\n一个 W_qkv"),
    "fused_steps": ("x @ W_qkvᵀ   (T, 3·D)\n.split(D, dim=-1)\n→ q, k, v    (T, D) each\n→ split_heads\n"
                    "→ (H, T, Dh) each",
                    "x @ W_qkvᵀ   (T, 3·D)\n.split(D, dim=-1)\n→ q, k, v    各为 (T, D)\n→ split_heads\n"
                    "→ 各为 (H, T, Dh)"),
    "rows_caption": ("Colour = head; q2,1 is row 2, column 1 of the stacked W_query (row 0 of head 1's own).\n"
                     "A Linear stores one row per output feature, so stacking the heads' rows makes one wide "
                     "projection\nwhose output features h·Dh … (h+1)·Dh − 1 are head h's.",
                     "颜色 = 头；q2,1 是堆叠后的 W_query 的第 2 行、第 1 列（即头 1 自己的第 0 行）。\n"
                     "Linear 为每个输出特征存一行，所以把各个头的行堆叠起来，就得到一个宽投影，\n"
                     "它的输出特征 h·Dh … (h+1)·Dh − 1 属于头 h。"),
    # three ways to form heads
    "projection": ("projection: Linear(D, D)", "投影：Linear(D, D)"),
    "direct": ("direct split: no parameters", "直接切分：没有参数"),
    "grouped": ("grouped conv: Conv1d(D, D, 1, groups=H)", "分组卷积：Conv1d(D, D, 1, groups=H)"),
    "parameters": ("{params} parameters", "{params} 个参数"),
    "inputs": ("in {a}–{b}", "输入 {a}–{b}"),
    "output_feature": ("output feature (row)", "输出特征（行）"),
    "input_feature": ("input feature (column)", "输入特征（列）"),
    "weight": ("weight", "权重"),
    "three_title": ("The (D, D) matrix in front of split_heads, D = {D}, H = {H}: head h uses rows h·Dh … (h+1)·Dh − 1",
                    "split_heads 之前的 (D, D) 矩阵，D = {D}，H = {H}：头 h 用第 h·Dh … (h+1)·Dh − 1 行"),
}


def _cell(ax, x: float, y: float, text: str, colour: str, *, w: float = 1.0, h: float = 1.0, size: float = SMALL):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="white", linewidth=1.2))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size)


def _arrow(ax, x0: float, x1: float, y: float, label: str, colour: str = "black", family="monospace"):
    ax.add_patch(FancyArrowPatch((x0, y), (x1, y), arrowstyle="-|>", mutation_scale=14, color=colour, lw=1.4))
    ax.text((x0 + x1) / 2, y - 0.35, label, ha="center", va="bottom", fontsize=SMALL, color=colour,
            family=family)


# --- 1. the reshape -------------------------------------------------------------------------------------------


def draw_split_heads(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    T, H, Dh = 4, 3, 2
    D = H * Dh
    initial = [token[0] for token in TOKENS]
    label = [[f"{initial[t]}{f}" for f in range(D)] for t in range(T)]  # token initial + feature index
    xlim, ylim = (-1.9, 28.6), (-2.0, 13.6)
    fig, ax = _canvas(12.4, 12.4 * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0]), xlim, ylim)
    middle, right_x = 9.2, 20.8  # left edges of the (T, H, Dh) view and of the heads

    def matrix(x0: float, y0: float, title: str):
        ax.text(x0 + D / 2, y0 - 0.5, title, ha="center", fontsize=10)
        for t in range(T):
            ax.text(x0 - 0.2, y0 + t + 0.5, TOKENS[t], ha="right", va="center", fontsize=SMALL)
            for f in range(D):
                _cell(ax, x0 + f, y0 + t, label[t][f], HEAD_COLOURS[f // Dh])

    def heads(x0: float, y0: float, rows, gap: float = 0.7, row_labels=TOKENS):
        """H blocks of (T, Dh) side by side; ``rows[h][t]`` lists the flat feature positions (t', f) shown."""
        for h in range(H):
            left = x0 + h * (Dh + gap)
            ax.text(left + Dh / 2, y0 - 0.5, tx.head.format(h=h), ha="center", fontsize=10)
            for t in range(T):
                if h == 0 and row_labels:
                    ax.text(left - 0.2, y0 + t + 0.5, row_labels[t], ha="right", va="center", fontsize=SMALL)
                for d, (src_t, src_f) in enumerate(rows[h][t]):
                    _cell(ax, left + d, y0 + t, label[src_t][src_f], HEAD_COLOURS[src_f // Dh])

    # top row: the right way
    ax.text(-1.6, -1.2, tx.right, fontsize=11, fontweight="bold", color="#1a7f37")
    matrix(0, 0.6, "x: (T, D) = (4, 6)")
    _arrow(ax, 6.3, 8.9, 2.6, "view(T, H, Dh)")
    ax.text(middle + 3.3, 0.1, "(T, H, Dh) = (4, 3, 2)", ha="center", fontsize=10)
    for t in range(T):  # the same memory, read as H groups of Dh per token
        for h in range(H):
            for d in range(Dh):
                f = h * Dh + d
                _cell(ax, middle + h * (Dh + 0.3) + d, 0.6 + t, label[t][f], HEAD_COLOURS[h])
    _arrow(ax, 16.1, 19.0, 2.6, "transpose(1, 2)")
    right = [[[(t, h * Dh + d) for d in range(Dh)] for t in range(T)] for h in range(H)]
    heads(right_x, 0.6, right)
    ax.text(right_x + 3.7, 5.3, tx.each_head, ha="center", fontsize=SMALL, style="italic")

    # bottom row: the wrong way
    top = 7.5
    ax.text(-1.6, top - 1.2, tx.wrong, fontsize=11, fontweight="bold", color="#c0392b")
    matrix(0, top + 0.6, "x: (T, D) = (4, 6)")
    _arrow(ax, 6.3, 19.0, top + 2.6, tx.no_transpose, colour="#c0392b", family=monospace(language))
    flat = [(t, f) for t in range(T) for f in range(D)]  # memory order: token by token
    wrong = [[flat[(h * T + t) * Dh:(h * T + t + 1) * Dh] for t in range(T)] for h in range(H)]
    heads(right_x, top + 0.6, wrong, row_labels=[tx.pos.format(t=t) for t in range(T)])
    ax.text(right_x + 3.7, top + 5.3, tx.not_a_token, ha="center", va="top", fontsize=SMALL, style="italic",
            color="#c0392b", linespacing=1.3)
    save(fig, "ch03_split_heads.png", language, DPI)


# --- 2. stacking weights ------------------------------------------------------------------------------------------


def draw_weight_rows(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    d_in, H, Dh = 3, 2, 2
    D = H * Dh
    xlim, ylim = (-1.2, 23.6), (-2.9, 16.0)
    fig, ax = _canvas(11.5, 11.5 * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0]), xlim, ylim)
    dpi, small = 86, 8.8  # 11.5 in × 86 = 989 px (the notebook panel); 8.8 pt = 10.5 px
    names = {"q": "W_query", "k": "W_key", "v": "W_value"}

    def rows_block(x0: float, y0: float, letter: str, head: int, first_row: int):
        for r in range(Dh):
            for c in range(d_in):
                _cell(ax, x0 + c, y0 + r, f"{letter}{first_row + r},{c}", HEAD_COLOURS[head], size=small)

    # wrapper: one small W_query per head
    ax.text(1.5, -1.3, tx.wrapper, ha="center", fontsize=10, fontweight="bold")
    for h in range(H):
        y0 = 1.0 + h * (Dh + 1.6)
        ax.text(1.5, y0 - 0.3, tx.head_shape.format(h=h, Dh=Dh, d_in=d_in), ha="center", fontsize=small)
        rows_block(0, y0, "q", h, first_row=h * Dh)
    _arrow(ax, 3.6, 7.4, 3.3, "torch.cat(dim=0)")

    # split layer: one W_query, head h owns rows h·Dh ... (h+1)·Dh - 1
    ax.text(9.5, -1.3, tx.split_layer, ha="center", fontsize=10, fontweight="bold")
    ax.text(9.5, 0.7, f"(D, d_in) = ({D}, {d_in})", ha="center", fontsize=small)
    for h in range(H):
        rows_block(8, 1.0 + h * Dh, "q", h, first_row=h * Dh)
        ax.text(11.2, 1.0 + h * Dh + Dh / 2, tx.head.format(h=h), va="center", fontsize=small)
    _arrow(ax, 13.2, 17.2, 3.3, "+ W_key, W_value")

    # fused: W_query, W_key, W_value stacked row-wise
    ax.text(19.5, -1.3, tx.fused_layer, ha="center", fontsize=10, fontweight="bold")
    ax.text(19.5, 0.7, f"(3·D, d_in) = ({3 * D}, {d_in})", ha="center", fontsize=small)
    for part, letter in enumerate("qkv"):
        for h in range(H):
            rows_block(18, 1.0 + part * D + h * Dh, letter, h, first_row=h * Dh)
        ax.text(21.2, 1.0 + part * D + D / 2, names[letter], va="center", fontsize=small)
    # how the fused layer is used, beside its W_key and W_value rows (the space under the split layer is free)
    ax.text(17.4, 10.2, tx.fused_steps, ha="right", va="center", multialignment="left", fontsize=small,
            family=monospace(language), linespacing=1.6)
    ax.text(-0.4, 14.4, tx.rows_caption, fontsize=small, va="top")
    save(fig, "ch03_weight_rows.png", language, dpi)


# --- 3. three ways to form heads ----------------------------------------------------------------------------------


def draw_three_ways(language: str = "en") -> None:
    from mha_lib.heads import DirectSplitHeads, GroupedConvHeads, ProjectionHeads

    tx = texts(TEXTS, language)
    D, H = 12, 3
    torch.manual_seed(0)  # CPU generator: the same picture on every machine
    formers = [
        (tx.projection, ProjectionHeads(D, H)),
        (tx.direct, DirectSplitHeads(D, H)),
        (tx.grouped, GroupedConvHeads(D, H)),
    ]
    fig = Figure(figsize=(10.0, 4.1), layout="constrained")  # 1,000 px wide at 100 dpi: the notebook panel
    axes = fig.subplots(1, 3)
    limit = max(float(former.effective_weight().abs().max()) for _, former in formers)
    for ax, (title, former) in zip(axes, formers):
        weight = former.effective_weight()
        image = ax.imshow(weight.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit)
        params = sum(p.numel() for p in former.parameters())
        ax.set_title(f"{title}\n{tx.parameters.format(params=params)}", fontsize=9.5)
        Dh = D // H
        for h in range(1, H):  # head boundaries
            ax.axhline(h * Dh - 0.5, color="black", lw=0.8)
            ax.axvline(h * Dh - 0.5, color="black", lw=0.8, ls=":")
        centres = [h * Dh + Dh / 2 - 0.5 for h in range(H)]
        ax.set_yticks(centres, [tx.head.format(h=h) for h in range(H)], fontsize=8)
        ax.set_xticks(centres, [tx.inputs.format(a=h * Dh, b=(h + 1) * Dh - 1) for h in range(H)], fontsize=8)
        ax.tick_params(length=0)
    axes[0].set_ylabel(tx.output_feature, fontsize=8.5)
    axes[1].set_xlabel(tx.input_feature, fontsize=8.5)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label=tx.weight)
    fig.suptitle(tx.three_title.format(D=D, H=H), fontsize=10.5)
    save(fig, "ch03_three_ways.png", language, 100)  # 8 pt = 11.1 px


def main(language: str = "en") -> None:
    draw_split_heads(language)
    draw_weight_rows(language)
    draw_three_ways(language)


if __name__ == "__main__":
    run(main)
