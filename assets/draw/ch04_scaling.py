"""Diagrams of chapter 4 (why the scores are divided by √Dh), drawn with matplotlib so they can be edited.

    python assets/draw/ch04_scaling.py [--language zh-CN]

writes (in Chinese: the same names in assets/zh-CN/)
    assets/ch04_variance.png     the spread of a score q·k for head widths 4, 16, 64 and 256 (std √Dh), and the
                                 same scores divided by √Dh: one curve for every width
    assets/ch04_saturation.png   one row of six scores turned into weights by softmax at the spread of a
                                 64-wide head, unscaled (×8) and scaled (×1): nearly one-hot vs. spread out,
                                 with the entropy, the largest weight and the size of the softmax's gradient

The curves are the normal densities the chapter's measurements approach (a sum of Dh products of independent
unit-variance numbers has variance Dh); the six scores are fixed numbers, so the picture never changes.
"""

from __future__ import annotations

import math

import numpy as np
from _common import run, save, texts
from matplotlib.figure import Figure

DPI = 100  # 10 in × 100 = 1,000 px: the notebook panel beside JupyterLab's file browser; 8 pt = 11.1 px
WIDTHS = (4, 16, 64, 256)
COLOURS = ("#1b9e77", "#7570b3", "#d95f02", "#e7298a")
SCORES = np.array([0.9, -0.4, 1.6, 0.2, -1.1, 0.5])  # one query's scores, spread of a unit-variance score
KEYS = ("Your", "journey", "starts", "with", "one", "step")
TEXTS = {  # every word drawn: (English, Chinese); a Chinese line has no $…$ (mathtext draws CJK as boxes)
    "std": ("Dh = {dh}:  std √{dh} = {std:g}", "Dh = {dh}：标准差 √{dh} = {std:g}"),
    "raw_title": (r"raw scores $q\cdot k$: the spread grows like $\sqrt{D_h}$", "原始分数 q·k：离散程度按 √Dh 增长"),
    "raw_xlabel": (r"$q\cdot k = \sum_{i=1}^{D_h} q_i k_i$   (entries of q, k: mean 0, variance 1)",
                   r"$q\cdot k = \sum_{i=1}^{D_h} q_i k_i$" + "\n（q、k 的元素：均值 0，方差 1）"),
    "how_often": ("how often", "出现频率"),
    "scaled_title": (r"divided by $\sqrt{D_h}$: variance 1 for every width", "除以 √Dh 之后：每种宽度的方差都是 1"),
    "coincide": ("the four curves coincide", "四条曲线重合"),
    "not_scaled": ("not scaled: scores spread like a 64-wide head (std 8)",
                   "未缩放：分数的离散程度与 64 维的头相同（标准差 8）"),
    "scaled": (r"scaled: the same scores $\div\sqrt{64} = 8$ (std 1)", "缩放后：同样的分数 ÷ √64 = 8（标准差 1）"),
    "summary": ("largest weight {largest:.2f}\nentropy {entropy:.2f} nats (max ln 6 = {ln6:.2f})\n‖∂p/∂s‖ = {norm:.3f}",
                "最大权重 {largest:.2f}\n熵 {entropy:.2f} 奈特（最大 ln 6 = {ln6:.2f}）\n‖∂p/∂s‖ = {norm:.3f}"),
    "softmax_weight": ("softmax weight", "softmax 权重"),
    "saturation_title": ("Softmax of one query's six scores: too wide a spread saturates it, and its gradient vanishes",
                         "对一个查询的六个分数做 softmax：离散程度太大会让它饱和，梯度随之消失"),
}


def _density(x: np.ndarray, std: float) -> np.ndarray:
    return np.exp(-0.5 * (x / std) ** 2) / (std * math.sqrt(2 * math.pi))


def draw_variance(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    fig = Figure(figsize=(10.0, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    x = np.linspace(-50, 50, 2001)
    for dh, colour in zip(WIDTHS, COLOURS):
        std = math.sqrt(dh)
        left.plot(x, _density(x, std), color=colour, lw=2, label=tx.std.format(dh=dh, std=std))
        left.fill_between(x, _density(x, std), color=colour, alpha=0.08)
    left.set_xlim(-50, 50)
    left.set_ylim(0, 0.21)
    left.set_title(tx.raw_title, fontsize=11)
    left.set_xlabel(tx.raw_xlabel)
    left.set_ylabel(tx.how_often)
    left.legend(fontsize=8.5, frameon=False, loc="upper right")

    z = np.linspace(-5, 5, 801)
    for dh, colour, style in zip(WIDTHS, COLOURS, ("-", "--", "-.", ":")):
        right.plot(z, _density(z, 1.0), color=colour, lw=2.2, ls=style, label=f"Dh = {dh}")
    right.set_xlim(-5, 5)
    right.set_ylim(0, 0.45)
    right.set_title(tx.scaled_title, fontsize=11)
    right.set_xlabel(r"$q\cdot k\,/\sqrt{D_h}$")
    right.legend(fontsize=8.5, frameon=False, loc="upper right", title=tx.coincide,
                 title_fontsize=8.5)
    for ax in (left, right):
        ax.spines[["top", "right"]].set_visible(False)
        ax.set_yticks([])
    save(fig, "ch04_variance.png", language, DPI)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max())
    return e / e.sum()


def _summary(p: np.ndarray, template: str) -> str:
    entropy = -(p * np.log(np.where(p > 0, p, 1.0))).sum()
    jacobian = np.diag(p) - np.outer(p, p)  # ∂p/∂s
    return template.format(largest=p.max(), entropy=entropy, ln6=math.log(6), norm=np.linalg.norm(jacobian))


def draw_saturation(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    fig = Figure(figsize=(10.0, 3.9), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    cases = (
        (SCORES * 8, tx.not_scaled, "#d95f02"),
        (SCORES, tx.scaled, "#1b9e77"),
    )
    for ax, (scores, title, colour) in zip(axes, cases):
        p = _softmax(scores)
        bars = ax.bar(range(6), p, color=colour, alpha=0.85)
        for bar, s in zip(bars, scores):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + 0.02, f"s = {s:.1f}", ha="center",
                    fontsize=8)
        ax.set_xticks(range(6), KEYS, fontsize=9)
        ax.set_ylim(0, 1.18)
        ax.set_title(title, fontsize=10.5)
        ax.text(0.98, 0.95, _summary(p, tx.summary), transform=ax.transAxes, ha="right", va="top", fontsize=8.5,
                bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "#999999"})
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_ylabel(tx.softmax_weight)
    fig.suptitle(tx.saturation_title, fontsize=11)
    save(fig, "ch04_saturation.png", language, DPI)


def main(language: str = "en") -> None:
    draw_variance(language)
    draw_saturation(language)


if __name__ == "__main__":
    run(main)
