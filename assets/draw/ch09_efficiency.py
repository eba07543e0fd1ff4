"""Diagram of chapter 9 (efficiency), drawn with matplotlib so it can be edited and regenerated.

    python assets/draw/ch09_efficiency.py [--language zh-CN]

writes (in Chinese: assets/zh-CN/ch09_memory_flow.png)
    assets/ch09_memory_flow.png   where the (T, S) scores live. Left, the explicit kernel: every step (Q Kᵀ, mask,
                                  softmax, · V) is a separate trip between the cores and main memory through a
                                  B·H·T·S tensor. Right, a fused flash-style kernel: tiles of Q, K and V pass
                                  through a small on-chip buffer with a running max and sum; only Q, K, V (read; K
                                  and V once per block of queries) and O (written) touch main memory, and the
                                  (T, S) weights never exist.
"""

from __future__ import annotations

from _common import run, save, texts
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

DPI = 76  # 13 in × 76 = 988 px: the notebook panel beside JupyterLab's file browser
SMALL = 9.9  # pt, the smallest text: 10.5 px at 76 dpi
MEMORY = "#eeeeee"  # main memory band
CORES = "#fff4d6"  # compute band
QKV = ("#8fb8de", "#f4b183", "#a9d18e")  # q, k, v: the palette of the other chapters' diagrams
BIG = "#d9534f"  # the (T, S) tensor
OUT = "#c5b3e6"
TEXTS = {  # every word drawn: (English, Chinese)
    "read": ("read from memory", "从内存读取"),
    "write": ("write to memory  ·", "写入内存  ·"),
    "legend_gap": (3.3, 2.3),  # not a word: how far the "write" label ends left of the "read" label's end
    "cores": ("compute cores (registers, caches)", "计算核心（寄存器、缓存）"),
    "memory": ("main memory", "主存"),
    "explicit": ("explicit kernel: returns the weights", "显式内核：返回权重"),
    "scores_weights": ("scores → weights\n(B, H, T, S)", "分数 → 权重\n(B, H, T, S)"),
    "bytes": ("B·H·T·S·4 bytes\n384 MiB at B=8, H=12,\nT=S=1024", "B·H·T·S·4 字节\nB=8、H=12、T=S=1024 时\n为 384 MiB"),
    "ops": (("Q Kᵀ · scale", "mask", "softmax", "· V"), ("Q Kᵀ · 缩放", "掩蔽", "softmax", "· V")),
    "trips": ("6 trips of the whole (T, S) tensor through main memory:\n1 write, 2 × (read + write), "
              "1 read = 6 × 384 MiB = 2.25 GiB at that size",
              "整个 (T, S) 张量在主存里往返 6 趟：\n1 次写，2 × (读 + 写)，1 次读 = 6 × 384 MiB，"
              "这个尺寸下共 2.25 GiB"),
    "fused": ("fused kernel (flash-style): no weights", "融合内核（flash 风格）：不返回权重"),
    "never_stored": ("(T, S) weights:\nnever stored", "(T, S) 权重：\n从不存储"),
    "tile": ("tile", "分块"),
    "loop": ("for each query block, each key block:", "对每个查询块、每个键块："),
    "tile_work": ("scores of one tile, running max m,\nrunning sum ℓ, rescale O so far",
                  "算一个分块的分数，更新当前最大值 m\n和当前总和 ℓ，重新缩放已有的 O"),
    "fused_caption": ("Q read and O written once; K and V re-read for every block of queries.\n"
                      "No (T, S) tensor: the memory it needs grows like T, not like T²",
                      "Q 只读一次，O 只写一次；K 和 V 对每一块查询都要重读。\n"
                      "没有 (T, S) 张量：所需内存按 T 增长，而不是按 T²"),
}


def _canvas(width: float, height: float, xlim, ylim):
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(*xlim)
    ax.set_ylim(ylim[1], ylim[0])  # y grows downwards
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def _arrow(ax, start, end, *, colour="#333333", rad=0.0, lw=1.4, style="-|>"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=13, lw=lw, color=colour,
                                 connectionstyle=f"arc3,rad={rad}"))


def _op(ax, x, y, text, *, width=2.6):
    ax.add_patch(FancyBboxPatch((x - width / 2, y - 0.45), width, 0.9, boxstyle="round,pad=0.05,rounding_size=0.3",
                                facecolor="white", edgecolor="#333333", lw=1.1))
    ax.text(x, y, text, ha="center", va="center", fontsize=10)


def _matrix(ax, x, y, w, h, colour, label, *, dashed=False, fontsize=SMALL, label_inside=True):
    ax.add_patch(Rectangle((x, y), w, h, facecolor="none" if dashed else colour, edgecolor=colour if dashed else
                           "#555555", lw=1.6 if dashed else 0.8, linestyle="--" if dashed else "-"))
    if label_inside:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=fontsize)
    else:
        ax.text(x + w / 2, y + h + 0.25, label, ha="center", va="top", fontsize=fontsize)


def _legend(ax, x_right, tx):
    """Arrow colours, in the bottom-right corner of the memory band."""
    ax.text(x_right - 0.2, 11.4, tx.read, color="#1f4e79", fontsize=SMALL, ha="right", va="bottom")
    ax.text(x_right - tx.legend_gap, 11.4, tx.write, color=BIG, fontsize=SMALL, ha="right", va="bottom")


def _bands(ax, x0, x1, title, tx):
    ax.text((x0 + x1) / 2, 0.35, title, ha="center", va="center", fontsize=12.5, weight="bold")
    ax.add_patch(Rectangle((x0, 1.0), x1 - x0, 3.3, facecolor=CORES, edgecolor="none"))
    ax.add_patch(Rectangle((x0, 5.4), x1 - x0, 6.2, facecolor=MEMORY, edgecolor="none"))
    ax.text(x0 + 0.2, 1.25, tx.cores, ha="left", va="top", fontsize=SMALL, color="#7a5c00")
    ax.text(x0 + 0.2, 11.4, tx.memory, ha="left", va="bottom", fontsize=SMALL, color="#555555")


def draw_memory_flow(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    fig, ax = _canvas(13.0, 7.0, (-0.2, 26.2), (-0.2, 13.8))

    # --- left: the explicit kernel -------------------------------------------------------------------------
    _bands(ax, 0.0, 12.6, tx.explicit, tx)
    _matrix(ax, 0.5, 6.0, 0.9, 3.6, QKV[0], "Q", fontsize=SMALL)
    _matrix(ax, 1.7, 6.0, 0.9, 3.6, QKV[1], "K", fontsize=SMALL)
    _matrix(ax, 11.2, 6.0, 0.9, 3.6, QKV[2], "V", fontsize=SMALL)
    ax.add_patch(Rectangle((4.2, 5.9), 5.2, 5.2, facecolor=BIG, alpha=0.3, edgecolor=BIG, lw=1.6))
    ax.text(6.8, 8.2, tx.scores_weights, ha="center", va="center", fontsize=10.5, linespacing=1.4)
    ax.text(6.8, 9.9, tx.bytes, ha="center", va="center", fontsize=SMALL,
            linespacing=1.3, color="#5a1d1b")
    ops = tuple(zip(tx.ops, (2.2, 5.05, 7.9, 10.6), (("w",), ("r", "w"), ("r", "w"), ("r",))))
    for i, (text, x, trips) in enumerate(ops):
        _op(ax, x, 2.6, f"{i + 1}  {text}", width=2.5)
        for trip in trips:
            dx = -0.35 if trip == "r" and len(trips) == 2 else (0.35 if len(trips) == 2 else 0.0)
            target_x = min(max(x + dx, 4.5), 9.1)
            if trip == "w":
                _arrow(ax, (x + dx, 3.1), (target_x, 5.85), colour=BIG)
            else:
                _arrow(ax, (target_x, 5.85), (x + dx, 3.1), colour="#1f4e79")
    _arrow(ax, (0.95, 5.95), (1.6, 3.1), colour="#1f4e79")  # Q, K read by the first matmul
    _arrow(ax, (2.15, 5.95), (2.2, 3.1), colour="#1f4e79")
    _arrow(ax, (11.6, 5.95), (10.9, 3.1), colour="#1f4e79")  # V read by the last
    ax.text(6.3, 12.3, tx.trips, ha="center", va="center", fontsize=SMALL, linespacing=1.4)
    _legend(ax, 12.6, tx)

    # --- right: a fused flash-style kernel ------------------------------------------------------------------
    x0 = 13.4
    _bands(ax, x0, 26.0, tx.fused, tx)
    _matrix(ax, x0 + 0.5, 6.0, 0.9, 3.6, QKV[0], "Q", fontsize=SMALL)
    _matrix(ax, x0 + 1.7, 6.0, 0.9, 3.6, QKV[1], "K", fontsize=SMALL)
    _matrix(ax, x0 + 2.9, 6.0, 0.9, 3.6, QKV[2], "V", fontsize=SMALL)
    _matrix(ax, x0 + 11.0, 6.0, 0.9, 3.6, OUT, "O", fontsize=SMALL)
    ax.add_patch(Rectangle((x0 + 4.8, 5.9), 5.2, 5.2, facecolor="none", edgecolor=BIG, lw=1.6, linestyle="--"))
    ax.text(x0 + 7.4, 8.5, tx.never_stored, ha="center", va="center", fontsize=10.5, color=BIG,
            linespacing=1.4)
    # the tile loop in the cores
    ax.add_patch(FancyBboxPatch((x0 + 2.6, 1.9), 7.8, 2.3, boxstyle="round,pad=0.05,rounding_size=0.3",
                                facecolor="white", edgecolor="#333333", lw=1.1))
    ax.add_patch(Rectangle((x0 + 2.9, 2.3), 1.3, 1.3, facecolor=BIG, alpha=0.3, edgecolor=BIG, lw=1.2))
    ax.text(x0 + 3.55, 2.95, tx.tile, ha="center", va="center", fontsize=SMALL)
    ax.text(x0 + 4.5, 2.4, tx.loop, ha="left", va="top", fontsize=SMALL)
    ax.text(x0 + 4.5, 2.95, tx.tile_work, ha="left", va="top", fontsize=SMALL, linespacing=1.3)
    _arrow(ax, (x0 + 0.95, 5.95), (x0 + 2.75, 4.0), colour="#1f4e79")
    _arrow(ax, (x0 + 2.15, 5.95), (x0 + 3.3, 4.25), colour="#1f4e79")
    _arrow(ax, (x0 + 3.35, 5.95), (x0 + 3.9, 4.25), colour="#1f4e79")
    _arrow(ax, (x0 + 10.4, 3.05), (x0 + 11.45, 5.95), colour=BIG)
    ax.text(x0 + 6.3, 12.3, tx.fused_caption, ha="center", va="center",
            fontsize=SMALL, linespacing=1.4)
    _legend(ax, 26.0, tx)

    save(fig, "ch09_memory_flow.png", language, DPI)


def main(language: str = "en") -> None:
    draw_memory_flow(language)


if __name__ == "__main__":
    run(main)
