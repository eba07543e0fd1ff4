"""Chapter 6 diagrams: why softmax subtracts the row maximum, and what temperature does to one row of scores.

    python assets/draw/ch06_softmax.py   ->  assets/ch06_stable_softmax.png, assets/ch06_temperature.png
    python assets/draw/ch06_softmax.py --language zh-CN   ->  the same names in assets/zh-CN/
"""

from __future__ import annotations

import math

from _common import run, save, texts
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

RED, GREEN, GREY, BLUE = "#c0392b", "#1e8449", "#555555", "#2e86c1"
TEXTS = {  # every word drawn: (English, Chinese)
    "naive": ("naive:  exp(z) / Σ exp(z)", "朴素：exp(z) / Σ exp(z)"),
    "scores": ("scores z", "分数 z"),
    "divide_sum": ("÷ sum = inf", "÷ 总和 = inf"),
    "weights": ("weights", "权重"),
    "overflow": ("inf / inf = NaN:\nexp overflows float32\nabove z = 88.72",
                 "inf / inf = NaN：\nz 超过 88.72 时，\nexp 在 float32 中溢出"),
    "stable": ("stable:  exp(z − max z) / Σ exp(z − max z)", "稳定：exp(z − max z) / Σ exp(z − max z)"),
    "unit_interval": ("all in (0, 1]", "都在 (0, 1] 内"),
    "weights_sum": ("weights, sum 1", "权重，和为 1"),
    "no_overflow": ("nothing above\nexp(0) = 1,\nso no overflow", "没有大于\nexp(0) = 1 的数，\n所以不会溢出"),
    "same_result": ("Same result in exact arithmetic: the factor exp(−max z) cancels between numerator and "
                    "denominator.", "精确计算时结果完全相同：因子 exp(−max z) 在分子和分母之间约掉了。"),
    "moods": (("sharper", "plain softmax", "flatter"), ("更尖锐", "普通 softmax", "更平坦")),
    "temperature": ("temperature τ = {t:g} ({mood})\nentropy {entropy:.2f} nats (max ln 5 = {ln5:.2f})",
                    "温度 τ = {t:g}（{mood}）\n熵 {entropy:.2f} 奈特（最大 ln 5 = {ln5:.2f}）"),
    "keys": ("keys (scores 2, 1, 0.5, 0, −1)", "键（分数 2、1、0.5、0、−1）"),
    "weight_formula": ("weight = softmax(z / τ)", "权重 = softmax(z / τ)"),
    "temperature_title": ("One row of scores, three temperatures: same order, different sharpness",
                          "同一行分数，三种温度：顺序不变，尖锐程度不同"),
}


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


def draw_stable_softmax(language: str = "en") -> None:
    tx = texts(TEXTS, language)
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
    ax.text(0.15, 5.7, tx.naive, fontsize=12, color=RED, weight="bold", va="center")
    _column(ax, 1.0, top, [f"{s:.0f}" for s in scores], title=tx.scores)
    _arrow(ax, 1.6, 3.3, top - 0.62, "exp")
    _column(ax, 3.9, top, ["inf"] * 3, color="#fdedec", edge=RED, text_color=RED, title="exp(z)  (float32)")
    _arrow(ax, 4.5, 6.2, top - 0.62, tx.divide_sum)
    _column(ax, 6.8, top, ["NaN"] * 3, color="#fdedec", edge=RED, text_color=RED, title=tx.weights)
    ax.text(7.6, top - 0.62, tx.overflow, fontsize=9,
            color=RED, va="center")

    # lane 2: subtract the row maximum first
    top = 1.95
    ax.text(0.15, 2.9, tx.stable, fontsize=12, color=GREEN, weight="bold",
            va="center")
    _column(ax, 1.0, top, [f"{s:.0f}" for s in scores], title=tx.scores)
    _arrow(ax, 1.6, 2.9, top - 0.62, "− 1000")
    _column(ax, 3.5, top, [f"{s:.0f}" for s in shifted], title="z − max z")
    _arrow(ax, 4.1, 5.4, top - 0.62, "exp")
    _column(ax, 6.0, top, [f"{e:.3f}" for e in exps], title=tx.unit_interval)
    _arrow(ax, 6.6, 7.9, top - 0.62, f"÷ {total:.3f}")
    _column(ax, 8.5, top, [f"{w:.3f}" for w in weights], color="#e9f7ef", edge=GREEN, text_color=GREEN,
            title=tx.weights_sum)
    ax.text(9.15, top - 0.62, tx.no_overflow, fontsize=9, color=GREEN, va="center")
    ax.text(5.5, 0.15, tx.same_result, ha="center", fontsize=9, color=GREY)
    save(fig, "ch06_stable_softmax.png", language, 90)  # 11 in × 90 = 990 px (the notebook panel); 8.5 pt = 10.6 px


def draw_temperature(language: str = "en") -> None:
    tx = texts(TEXTS, language)
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
        mood = dict(zip(temperatures, tx.moods))[t]
        ax.set_title(tx.temperature.format(t=t, mood=mood, entropy=entropy, ln5=math.log(5)), fontsize=10)
        ax.set_ylim(0, 1.08)
        ax.set_xlabel(tx.keys, fontsize=9)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_ylabel(tx.weight_formula)
    fig.suptitle(tx.temperature_title, fontsize=11)
    save(fig, "ch06_temperature.png", language, 95)  # 10.5 in × 95 = 998 px (the notebook panel); 8 pt = 10.6 px


def main(language: str = "en") -> None:
    draw_stable_softmax(language)
    draw_temperature(language)


if __name__ == "__main__":
    run(main)
