"""Diagrams of chapter 3 (weight splitting), drawn with matplotlib so they can be edited and regenerated.

    python assets/draw/ch03_weight_splitting.py

writes
    assets/ch03_split_heads.png   (T, D) -> view (T, H, Dh) -> transpose (H, T, Dh), and the wrong direct view
    assets/ch03_weight_rows.png   the wrapper's per-head weights stacked into one W_query, then into W_qkv
    assets/ch03_three_ways.png    the (D, D) matrix behind each way to form heads: full, identity, block-diagonal

Colour = head everywhere: a cell is coloured by the head its feature (or weight row) belongs to.
"""

from __future__ import annotations

from pathlib import Path

import torch
from _common import canvas as _canvas
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

ASSETS = Path(__file__).resolve().parents[1]
HEAD_COLOURS = ("#8fb8de", "#f4b183", "#a9d18e", "#d5a6e6")  # head 0, 1, 2, 3
TOKENS = ("Your", "journey", "starts", "with")
DPI = 120


def _save(fig: Figure, name: str) -> None:
    fig.savefig(ASSETS / name, dpi=DPI, metadata={"Software": None})
    print(f"assets/{name}: written")


def _cell(ax, x: float, y: float, text: str, colour: str, *, w: float = 1.0, h: float = 1.0, size: float = 8):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="white", linewidth=1.2))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size)


def _arrow(ax, x0: float, x1: float, y: float, label: str, colour: str = "black"):
    ax.add_patch(FancyArrowPatch((x0, y), (x1, y), arrowstyle="-|>", mutation_scale=14, color=colour, lw=1.4))
    ax.text((x0 + x1) / 2, y - 0.35, label, ha="center", va="bottom", fontsize=8.5, color=colour,
            family="monospace")


# --- 1. the reshape -------------------------------------------------------------------------------------------


def draw_split_heads() -> None:
    T, H, Dh = 4, 3, 2
    D = H * Dh
    initial = [token[0] for token in TOKENS]
    label = [[f"{initial[t]}{f}" for f in range(D)] for t in range(T)]  # token initial + feature index
    fig, ax = _canvas(13.0, 6.2, (-2.2, 30.5), (-1.6, 12.8))

    def matrix(x0: float, y0: float, title: str):
        ax.text(x0 + D / 2, y0 - 0.5, title, ha="center", fontsize=9.5)
        for t in range(T):
            ax.text(x0 - 0.2, y0 + t + 0.5, TOKENS[t], ha="right", va="center", fontsize=8.5)
            for f in range(D):
                _cell(ax, x0 + f, y0 + t, label[t][f], HEAD_COLOURS[f // Dh])

    def heads(x0: float, y0: float, rows, gap: float = 0.9, row_labels=TOKENS):
        """H blocks of (T, Dh) side by side; ``rows[h][t]`` lists the flat feature positions (t', f) shown."""
        for h in range(H):
            left = x0 + h * (Dh + gap)
            ax.text(left + Dh / 2, y0 - 0.5, f"head {h}", ha="center", fontsize=9)
            for t in range(T):
                if h == 0 and row_labels:
                    ax.text(left - 0.2, y0 + t + 0.5, row_labels[t], ha="right", va="center", fontsize=8.5)
                for d, (src_t, src_f) in enumerate(rows[h][t]):
                    _cell(ax, left + d, y0 + t, label[src_t][src_f], HEAD_COLOURS[src_f // Dh])

    # top row: the right way
    ax.text(-2.1, -1.2, "right:  view to (T, H, Dh), then transpose to (H, T, Dh)", fontsize=10.5,
            fontweight="bold", color="#1a7f37")
    matrix(0, 0.6, "x: (T, D) = (4, 6)")
    _arrow(ax, 6.4, 9.6, 2.6, "view(T, H, Dh)")
    ax.text(13.0, 0.1, "(T, H, Dh) = (4, 3, 2)", ha="center", fontsize=9.5)
    for t in range(T):  # the same memory, read as H groups of Dh per token
        for h in range(H):
            for d in range(Dh):
                f = h * Dh + d
                _cell(ax, 10 + h * (Dh + 0.3) + d, 0.6 + t, label[t][f], HEAD_COLOURS[h])
    _arrow(ax, 16.8, 19.8, 2.6, "transpose(1, 2)")
    right = [[[(t, h * Dh + d) for d in range(Dh)] for t in range(T)] for h in range(H)]
    heads(21.6, 0.6, right)
    ax.text(25.4, 5.25, "each head: every token, its own Dh features", ha="center", fontsize=8.5, style="italic")

    # bottom row: the wrong way
    top = 7.5
    ax.text(-2.1, top - 1.2, "wrong:  view straight to (H, T, Dh)", fontsize=10.5, fontweight="bold",
            color="#c0392b")
    matrix(0, top + 0.6, "x: (T, D) = (4, 6)")
    _arrow(ax, 6.4, 19.8, top + 2.6, "view(H, T, Dh)   # no transpose", colour="#c0392b")
    flat = [(t, f) for t in range(T) for f in range(D)]  # memory order: token by token
    wrong = [[flat[(h * T + t) * Dh:(h * T + t + 1) * Dh] for t in range(T)] for h in range(H)]
    heads(21.6, top + 0.6, wrong, row_labels=[f"pos {t}" for t in range(T)])
    ax.text(25.4, top + 5.25, "'pos 1' of head 0 is not a token: it is features 2, 3 of \"Your\"",
            ha="center", fontsize=8.5, style="italic", color="#c0392b")
    _save(fig, "ch03_split_heads.png")


# --- 2. stacking weights ------------------------------------------------------------------------------------------


def draw_weight_rows() -> None:
    d_in, H, Dh = 3, 2, 2
    D = H * Dh
    fig, ax = _canvas(11.5, 7.4, (-1.4, 28.2), (-2.0, 15.2))
    names = {"q": "W_query", "k": "W_key", "v": "W_value"}

    def rows_block(x0: float, y0: float, letter: str, head: int, first_row: int):
        for r in range(Dh):
            for c in range(d_in):
                _cell(ax, x0 + c, y0 + r, f"{letter}{first_row + r},{c}", HEAD_COLOURS[head], size=7.5)

    # wrapper: one small W_query per head
    ax.text(1.5, -1.3, "wrapper:\none W_query per head", ha="center", fontsize=9.5, fontweight="bold")
    for h in range(H):
        y0 = 1.0 + h * (Dh + 1.6)
        ax.text(1.5, y0 - 0.3, f"head {h}: ({Dh}, {d_in})", ha="center", fontsize=8)
        rows_block(0, y0, "q", h, first_row=h * Dh)
    _arrow(ax, 3.6, 7.4, 3.3, "torch.cat(dim=0)")

    # split layer: one W_query, head h owns rows h·Dh ... (h+1)·Dh - 1
    ax.text(9.5, -1.3, "split layer:\none W_query", ha="center", fontsize=9.5, fontweight="bold")
    ax.text(9.5, 0.7, f"(D, d_in) = ({D}, {d_in})", ha="center", fontsize=8)
    for h in range(H):
        rows_block(8, 1.0 + h * Dh, "q", h, first_row=h * Dh)
        ax.text(11.2, 1.0 + h * Dh + Dh / 2, f"head {h}", va="center", fontsize=8)
    _arrow(ax, 13.2, 17.2, 3.3, "+ W_key, W_value")

    # fused: W_query, W_key, W_value stacked row-wise
    ax.text(19.5, -1.3, "fused layer:\none W_qkv", ha="center", fontsize=9.5, fontweight="bold")
    ax.text(19.5, 0.7, f"(3·D, d_in) = ({3 * D}, {d_in})", ha="center", fontsize=8)
    for part, letter in enumerate("qkv"):
        for h in range(H):
            rows_block(18, 1.0 + part * D + h * Dh, letter, h, first_row=h * Dh)
        ax.text(21.2, 1.0 + part * D + D / 2, names[letter], va="center", fontsize=8)
    ax.text(23.6, 7.0, "x @ W_qkvᵀ   (T, 3·D)\n.split(D, dim=-1)\n→ q, k, v    (T, D) each\n→ split_heads\n"
            "→ (H, T, Dh) each", ha="left", va="center", fontsize=8, family="monospace", linespacing=1.6)
    ax.text(-0.4, 14.4, "Colour = head; q2,1 is row 2, column 1 of the stacked W_query (row 0 of head 1's own).\n"
            "A Linear stores one row per output feature, so stacking the heads' rows makes one wide projection\n"
            "whose output features h·Dh … (h+1)·Dh − 1 are head h's.", fontsize=8.5, va="top")
    _save(fig, "ch03_weight_rows.png")


# --- 3. three ways to form heads ----------------------------------------------------------------------------------


def draw_three_ways() -> None:
    from mha_lib.heads import DirectSplitHeads, GroupedConvHeads, ProjectionHeads

    D, H = 12, 3
    torch.manual_seed(0)  # CPU generator: the same picture on every machine
    formers = [
        ("projection: Linear(D, D)", ProjectionHeads(D, H)),
        ("direct split: no parameters", DirectSplitHeads(D, H)),
        ("grouped conv: Conv1d(D, D, 1, groups=H)", GroupedConvHeads(D, H)),
    ]
    fig = Figure(figsize=(11.0, 4.3), layout="constrained")
    axes = fig.subplots(1, 3)
    limit = max(float(former.effective_weight().abs().max()) for _, former in formers)
    for ax, (title, former) in zip(axes, formers):
        weight = former.effective_weight()
        image = ax.imshow(weight.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit)
        params = sum(p.numel() for p in former.parameters())
        ax.set_title(f"{title}\n{params} parameters", fontsize=9.5)
        Dh = D // H
        for h in range(1, H):  # head boundaries
            ax.axhline(h * Dh - 0.5, color="black", lw=0.8)
            ax.axvline(h * Dh - 0.5, color="black", lw=0.8, ls=":")
        centres = [h * Dh + Dh / 2 - 0.5 for h in range(H)]
        ax.set_yticks(centres, [f"head {h}" for h in range(H)], fontsize=8)
        ax.set_xticks(centres, [f"in {h * Dh}–{(h + 1) * Dh - 1}" for h in range(H)], fontsize=8)
        ax.tick_params(length=0)
    axes[0].set_ylabel("output feature (row)", fontsize=8.5)
    axes[1].set_xlabel("input feature (column)", fontsize=8.5)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="weight")
    fig.suptitle(f"The (D, D) matrix in front of split_heads, D = {D}, H = {H}: "
                 "head h uses rows h·Dh … (h+1)·Dh − 1", fontsize=10.5)
    _save(fig, "ch03_three_ways.png")


def main() -> None:
    draw_split_heads()
    draw_weight_rows()
    draw_three_ways()


if __name__ == "__main__":
    main()
