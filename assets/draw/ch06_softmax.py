"""Chapter 6 diagrams: why softmax subtracts the row maximum, and what temperature does to one row of scores.

    python assets/draw/ch06_softmax.py   ->  assets/ch06_stable_softmax.png, assets/ch06_temperature.png
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ASSETS = Path(__file__).resolve().parents[1]
RED, GREEN, GREY, BLUE = "#c0392b", "#1e8449", "#555555", "#2e86c1"


def _column(ax, x, y_top, values, *, color="#f4f6f7", edge=GREY, text_color="black", title=None):
    """One vector drawn as a column of boxes (one box per entry), centred on ``x``."""
    for i, value in enumerate(values):
        y = y_top - i * 0.62
        ax.add_patch(FancyBboxPatch((x - 0.5, y - 0.25), 1.0, 0.5, boxstyle="round,pad=0.02",
                                    facecolor=color, edgecolor=edge, linewidth=1.0))
        ax.text(x, y, value, ha="center", va="center", fontsize=10, color=text_color, family="monospace")
    if title:
        ax.text(x, y_top + 0.55, title, ha="center", va="bottom", fontsize=8.5, color=GREY)


def _arrow(ax, x0, x1, y, label):
    ax.add_patch(FancyArrowPatch((x0, y), (x1, y), arrowstyle="-|>", mutation_scale=14, color=GREY, linewidth=1.2))
    ax.text((x0 + x1) / 2, y + 0.18, label, ha="center", va="bottom", fontsize=9)


def draw_stable_softmax(path: Path) -> None:
    scores = [1000.0, 999.0, 998.0]
    shifted = [s - max(scores) for s in scores]
    exps = [math.exp(s) for s in shifted]
    total = sum(exps)
    weights = [e / total for e in exps]

    fig = Figure(figsize=(11.0, 6.0), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 11.0)
    ax.set_ylim(0, 6.0)
    ax.axis("off")

    # lane 1: the formula as written
    top = 4.75
    ax.text(0.15, 5.7, "naive:  exp(z) / Σ exp(z)", fontsize=12, color=RED, weight="bold", va="center")
    _column(ax, 1.0, top, [f"{s:.0f}" for s in scores], title="scores z")
    _arrow(ax, 1.6, 3.3, top - 0.62, "exp")
    _column(ax, 3.9, top, ["inf"] * 3, color="#fdedec", edge=RED, text_color=RED, title="exp(z)  (float32)")
    _arrow(ax, 4.5, 6.2, top - 0.62, "÷ sum = inf")
    _column(ax, 6.8, top, ["NaN"] * 3, color="#fdedec", edge=RED, text_color=RED, title="weights")
    ax.text(7.6, top - 0.62, "inf / inf = NaN:\nexp overflows float32\nabove z = 88.72", fontsize=9,
            color=RED, va="center")

    # lane 2: subtract the row maximum first
    top = 1.95
    ax.text(0.15, 2.9, "stable:  exp(z − max z) / Σ exp(z − max z)", fontsize=12, color=GREEN, weight="bold",
            va="center")
    _column(ax, 1.0, top, [f"{s:.0f}" for s in scores], title="scores z")
    _arrow(ax, 1.6, 2.9, top - 0.62, "− 1000")
    _column(ax, 3.5, top, [f"{s:.0f}" for s in shifted], title="z − max z")
    _arrow(ax, 4.1, 5.4, top - 0.62, "exp")
    _column(ax, 6.0, top, [f"{e:.3f}" for e in exps], title="all in (0, 1]")
    _arrow(ax, 6.6, 7.9, top - 0.62, f"÷ {total:.3f}")
    _column(ax, 8.5, top, [f"{w:.3f}" for w in weights], color="#e9f7ef", edge=GREEN, text_color=GREEN,
            title="weights, sum 1")
    ax.text(9.15, top - 0.62, "nothing above\nexp(0) = 1,\nso no overflow", fontsize=9, color=GREEN, va="center")
    ax.text(5.5, 0.15, "Same result in exact arithmetic: the factor exp(−max z) cancels between numerator and "
            "denominator.", ha="center", fontsize=9, color=GREY)
    fig.savefig(path, dpi=110, metadata={"Software": None})


def draw_temperature(path: Path) -> None:
    scores = [2.0, 1.0, 0.5, 0.0, -1.0]
    labels = ["k0", "k1", "k2", "k3", "k4"]
    temperatures = [0.25, 1.0, 4.0]
    fig = Figure(figsize=(10.5, 3.3), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(temperatures), sharey=True)
    for ax, t in zip(axes, temperatures):
        exps = [math.exp((s - max(scores)) / t) for s in scores]
        weights = [e / sum(exps) for e in exps]
        entropy = -sum(w * math.log(w) for w in weights if w > 0)
        color = {0.25: RED, 1.0: BLUE, 4.0: GREEN}[t]
        bars = ax.bar(labels, weights, color=color, alpha=0.85)
        for bar, w in zip(bars, weights):
            ax.text(bar.get_x() + bar.get_width() / 2, w + 0.02, f"{w:.2f}", ha="center", fontsize=8)
        mood = {0.25: "sharper", 1.0: "plain softmax", 4.0: "flatter"}[t]
        ax.set_title(f"temperature τ = {t:g} ({mood})\nentropy {entropy:.2f} nats (max ln 5 = {math.log(5):.2f})",
                     fontsize=10)
        ax.set_ylim(0, 1.08)
        ax.set_xlabel("keys (scores 2, 1, 0.5, 0, −1)", fontsize=9)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_ylabel("weight = softmax(z / τ)")
    fig.suptitle("One row of scores, three temperatures: same order, different sharpness", fontsize=11)
    fig.savefig(path, dpi=110, metadata={"Software": None})


def main() -> None:
    draw_stable_softmax(ASSETS / "ch06_stable_softmax.png")
    draw_temperature(ASSETS / "ch06_temperature.png")


if __name__ == "__main__":
    main()
