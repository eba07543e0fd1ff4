"""Chapter 7 diagram: heads concatenated, then W_o mixing them; and the parameter count of the layer.

    python assets/draw/ch07_output_projection.py   ->  assets/ch07_output_projection.png
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

ASSETS = Path(__file__).resolve().parents[1]
HEAD_COLORS = ("#2e86c1", "#e67e22", "#27ae60")  # head 0, 1, 2
GREY = "#555555"
CELL = 0.32  # side of one matrix cell, in axes units


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


def draw(path: Path) -> None:
    T, H, Dh = 4, 3, 2
    D = H * Dh
    fig = Figure(figsize=(13.6, 5.6), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 13.6)
    ax.set_ylim(0, 5.6)
    ax.axis("off")

    # the heads' outputs, stacked vertically
    ax.text(0.2, 5.3, "1. each head's context  (T × Dh)", fontsize=11, weight="bold")
    for h in range(H):
        _matrix(ax, 0.45, 4.75 - h * 1.6, T, Dh, [HEAD_COLORS[h]] * Dh, label=None)
        ax.text(0.35, 4.75 - h * 1.6 - T * CELL / 2, f"head {h}", ha="right", va="center", fontsize=9,
                rotation=90, color=HEAD_COLORS[h])
    y_mid = 4.75 - 1.6 - T * CELL / 2

    _arrow(ax, 1.35, 2.35, y_mid, "concat")
    concat_colors = [HEAD_COLORS[c // Dh] for c in range(D)]
    _matrix(ax, 2.5, y_mid + T * CELL / 2, T, D, concat_colors, label="2. concat  (T × D)",
            sublabel="feature j comes from\nhead j // Dh only")

    _arrow(ax, 4.55, 5.45, y_mid, "matmul")
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
    ax.text(5.6 + D * CELL / 2, y_mid - D * CELL / 2 - 0.12, "column j: one weight for\nevery feature of every head",
            ha="center", va="top", fontsize=8.5, color=GREY)

    _arrow(ax, 7.65, 8.55, y_mid, "+ b_o")
    _matrix(ax, 8.7, y_mid + T * CELL / 2, T, D, [list(HEAD_COLORS)] * D, label="4. output  (T × D)",
            sublabel="every feature mixes\nall the heads")

    ax.text(5.5, 0.25, f"toy sizes: T = {T} tokens, H = {H} heads of width Dh = {Dh}, D = {D}", ha="center",
            fontsize=9, color=GREY)

    # the parameter receipt
    x0, y0 = 10.85, 5.3
    ax.text(x0, y0, "Parameters, GPT-2 small", fontsize=11, weight="bold")
    ax.text(x0, y0 - 0.3, "D = 768, H = 12, Dh = 64", fontsize=9, color=GREY)
    rows = [("W_q, W_k, W_v", "3 × 768²", "1,769,472"), ("W_o", "768²", "589,824"),
            ("4 biases", "4 × 768", "3,072")]
    y = y0 - 0.75
    for name, formula, value in rows:
        ax.text(x0, y, name, fontsize=9.5)
        ax.text(x0 + 2.3, y, value, fontsize=9.5, ha="right", family="monospace")
        ax.text(x0, y - 0.22, formula, fontsize=8.5, color=GREY)
        y -= 0.6
    ax.plot([x0, x0 + 2.3], [y + 0.3, y + 0.3], color=GREY, linewidth=0.8)
    ax.text(x0, y, "total", fontsize=9.5, weight="bold")
    ax.text(x0 + 2.3, y, "2,362,368", fontsize=9.5, ha="right", weight="bold", family="monospace")
    ax.text(x0, y - 0.3, "= 4·D² + 4·D", fontsize=8.5, color=GREY)
    ax.text(x0, y - 0.75, "GPT-2 XL (D = 1600, H = 25):\n4·1600² + 4·1600 = 10,246,400", fontsize=8.5,
            va="top")
    heads_note = ("H appears nowhere: the heads share\nout the D output features of W_q,\n"
                  "W_k, W_v: head h owns 64 rows of\neach stored weight (12 × 64 = 768).")
    ax.text(x0, y - 1.55, heads_note, fontsize=8.5, va="top", color=HEAD_COLORS[0])
    fig.savefig(path, dpi=110, metadata={"Software": None})


def main() -> None:
    draw(ASSETS / "ch07_output_projection.png")


if __name__ == "__main__":
    main()
