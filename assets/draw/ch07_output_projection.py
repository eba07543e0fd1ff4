"""Chapter 7 diagram: heads concatenated, then W_o mixing them; and the parameter count of the layer.

    python assets/draw/ch07_output_projection.py   ->  assets/ch07_output_projection.png
    python assets/draw/ch07_output_projection.py --language zh-CN   ->  assets/zh-CN/ch07_output_projection.png
"""

from __future__ import annotations

from _common import run, save, texts
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

HEAD_COLORS = ("#2e86c1", "#e67e22", "#27ae60")  # head 0, 1, 2
GREY = "#555555"
CELL = 0.32  # side of one matrix cell, in axes units (inches)
DPI = 92  # 10.8 in × 92 = 994 px: the notebook panel beside JupyterLab's file browser; 8.5 pt = 10.9 px
TEXTS = {  # every word drawn: (English, Chinese)
    "contexts": ("1. each head's context  (T × Dh)", "1. 每个头的上下文  (T × Dh)"),
    "head": ("head {h}", "头 {h}"),
    "concat": ("concat", "拼接"),
    "concat_title": ("2. concat  (T × D)", "2. 拼接  (T × D)"),
    "one_head": ("feature j comes from\nhead j // Dh only", "特征 j 只来自\n头 j // Dh"),
    "matmul": ("matmul", "矩阵乘法"),
    "column": ("column j: one weight for\nevery feature of every head", "第 j 列：每个头的每个特征\n各有一个权重"),
    "output": ("4. output  (T × D)", "4. 输出  (T × D)"),
    "mixes": ("every feature mixes\nall the heads", "每个特征都混合了\n所有的头"),
    "toy": ("toy sizes: T = {T} tokens, H = {H} heads of width Dh = {Dh}, D = {D}",
            "玩具尺寸：T = {T} 个词元，H = {H} 个头，头维度 Dh = {Dh}，D = {D}"),
    "receipt": ("Parameters, GPT-2 small", "参数量，GPT-2 small"),
    "biases": ("4 biases", "4 个偏置"),
    "total": ("total", "合计"),
    "xl": ("GPT-2 XL (D = 1600, H = 25):  4·1600² + 4·1600 = 10,246,400",
           "GPT-2 XL（D = 1600，H = 25）：4·1600² + 4·1600 = 10,246,400"),
    "heads_note": ("H appears nowhere: the heads share out the D output\nfeatures of W_q, W_k, W_v: head h owns 64 rows of\n"
                   "each stored weight (12 × 64 = 768).",
                   "公式里没有 H：各个头瓜分了 W_q、W_k、W_v 的\nD 个输出特征：头 h 占有每个存储权重的 64 行\n"
                   "（12 × 64 = 768）。"),
}


def _matrix(ax, x, y, rows, cols, colors, *, label=None, sublabel=None):
    """A rows × cols grid with its top-left corner at (x, y); ``colors[c]`` fills column c (a list = stripes)."""
    for r in range(rows):
        for c in range(cols):
            fill = colors[c]
            x0, y0 = x + c * CELL, y - (r + 1) * CELL
            if isinstance(fill, (list, tuple)):  # a mixed cell: one thin stripe per head
                width = CELL / len(fill)
                for i, color in enumerate(fill):
                    ax.add_patch(Rectangle((x0 + i * width, y0), width, CELL, facecolor=color, edgecolor="none",
                                           alpha=0.8))
                ax.add_patch(Rectangle((x0, y0), CELL, CELL, facecolor="none", edgecolor="white", linewidth=1.2))
            else:
                ax.add_patch(Rectangle((x0, y0), CELL, CELL, facecolor=fill, edgecolor="white", linewidth=1.2,
                                       alpha=0.8))
    middle = x + cols * CELL / 2
    if label:
        ax.text(middle, y + 0.12, label, ha="center", va="bottom", fontsize=10, weight="bold")
    if sublabel:
        ax.text(middle, y - rows * CELL - 0.12, sublabel, ha="center", va="top", fontsize=8.5, color=GREY)


def _arrow(ax, x0, x1, y, label):
    ax.add_patch(FancyArrowPatch((x0, y), (x1, y), arrowstyle="-|>", mutation_scale=14, color=GREY, linewidth=1.2))
    ax.text((x0 + x1) / 2, y + 0.1, label, ha="center", va="bottom", fontsize=9.5)


def draw(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    T, H, Dh = 4, 3, 2
    D = H * Dh
    # the layer on top, the parameter receipt in a band below it: 10.8 in × 92 dpi = 994 px, the notebook panel
    # beside JupyterLab's file browser (8.5 pt = 10.9 px)
    fig = Figure(figsize=(10.8, 7.6), dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 10.8)
    ax.set_ylim(0, 7.6)
    ax.axis("off")
    up = 2.0  # the layer's drawing sits above the receipt's band

    # the heads' outputs, stacked vertically
    ax.text(0.2, 5.3 + up, tx.contexts, fontsize=11, weight="bold")
    for h in range(H):
        _matrix(ax, 0.45, 4.75 + up - h * 1.6, T, Dh, [HEAD_COLORS[h]] * Dh, label=None)
        ax.text(0.35, 4.75 + up - h * 1.6 - T * CELL / 2, tx.head.format(h=h), ha="right", va="center", fontsize=9,
                rotation=90, color=HEAD_COLORS[h])
    y_mid = 4.75 + up - 1.6 - T * CELL / 2

    _arrow(ax, 1.35, 2.35, y_mid, tx.concat)
    concat_colors = [HEAD_COLORS[c // Dh] for c in range(D)]
    _matrix(ax, 2.5, y_mid + T * CELL / 2, T, D, concat_colors, label=tx.concat_title,
            sublabel=tx.one_head)

    _arrow(ax, 4.55, 5.45, y_mid, tx.matmul)
    # W_oᵀ: rows = input features (tinted by the head they read), columns = output features
    w_rows = []
    for r in range(D):
        w_rows.append(HEAD_COLORS[r // Dh])
    for r in range(D):
        for c in range(D):
            ax.add_patch(Rectangle((5.6 + c * CELL, y_mid + D * CELL / 2 - (r + 1) * CELL), CELL, CELL,
                                   facecolor=w_rows[r], edgecolor="white", linewidth=1.2, alpha=0.35))
    ax.text(5.6 + D * CELL / 2, y_mid + D * CELL / 2 + 0.12, "3. W_oᵀ  (D × D)", ha="center", va="bottom",
            fontsize=10, weight="bold")
    ax.text(5.6 + D * CELL / 2, y_mid - D * CELL / 2 - 0.12, tx.column, ha="center", va="top", fontsize=8.5, color=GREY)

    _arrow(ax, 7.65, 8.55, y_mid, "+ b_o")
    _matrix(ax, 8.7, y_mid + T * CELL / 2, T, D, [list(HEAD_COLORS)] * D, label=tx.output,
            sublabel=tx.mixes)

    ax.text(5.5, 0.3 + up, tx.toy.format(T=T, H=H, Dh=Dh, D=D), ha="center", fontsize=9, color=GREY)
    ax.plot([0.2, 10.6], [up, up], color="#cccccc", linewidth=0.8)

    # the parameter receipt: a table on the left, GPT-2 XL and where the heads are on the right
    x0, y0 = 0.2, 1.65
    ax.text(x0, y0, tx.receipt, fontsize=11, weight="bold")
    ax.text(x0 + 2.55, y0, "D = 768, H = 12, Dh = 64", fontsize=9, color=GREY)
    rows = [("W_q, W_k, W_v", "3 × 768²", "1,769,472"), ("W_o", "768²", "589,824"),
            (tx.biases, "4 × 768", "3,072")]
    y = y0 - 0.38
    for name, formula, value in rows:
        ax.text(x0, y, name, fontsize=9.5)
        ax.text(x0 + 1.55, y, formula, fontsize=9, color=GREY)
        ax.text(x0 + 4.2, y, value, fontsize=9.5, ha="right", family="monospace")
        y -= 0.3
    ax.plot([x0, x0 + 4.2], [y + 0.2, y + 0.2], color=GREY, linewidth=0.8)
    y -= 0.08
    ax.text(x0, y, tx.total, fontsize=9.5, weight="bold")
    ax.text(x0 + 1.55, y, "4·D² + 4·D", fontsize=9, color=GREY)
    ax.text(x0 + 4.2, y, "2,362,368", fontsize=9.5, ha="right", weight="bold", family="monospace")
    ax.text(5.0, y0 + 0.1, tx.xl, fontsize=9, va="top")
    ax.text(5.0, y0 - 0.62, tx.heads_note, fontsize=9, va="top", color=HEAD_COLORS[0], linespacing=1.35)
    save(fig, "ch07_output_projection.png", language, DPI)


def main(language: str = "en") -> None:
    draw(language)


if __name__ == "__main__":
    run(main)
