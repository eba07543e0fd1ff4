"""Chapter 10 diagram: a trained BERT layer's attention block copied into MultiHeadAttention, the rest kept.

    python assets/draw/ch10_trained_heads.py   ->  assets/ch10_converter.png
    python assets/draw/ch10_trained_heads.py --language zh-CN   ->  assets/zh-CN/ch10_converter.png
"""

from __future__ import annotations

import sys
from pathlib import Path

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import canvas, run, save, texts  # noqa: E402

BLUE, ORANGE, GREY, LIGHT = "#2e86c1", "#e67e22", "#555555", "#f2f2f2"
PAIRS = (  # (the model's module, mha_lib's attribute)
    ("attention.self.query", "W_query"),
    ("attention.self.key", "W_key"),
    ("attention.self.value", "W_value"),
    ("attention.output.dense", "out_proj"),
)
TEXTS = {  # every word drawn: (English, Chinese)
    "layer": ("one layer of all-MiniLM-L6-v2 (transformers' BertLayer)",
              "all-MiniLM-L6-v2 的一层（transformers 的 BertLayer）"),
    "linear": ("Linear(384, 384) + bias", "Linear(384, 384) + 偏置"),  # what each of the four modules is
    "copy": ("copy weight & bias", "复制权重和偏置"),
    "same": ("scores / √32, softmax over the keys (no causal mask), weights · values, 12 heads merged:\n"
             "the same computation in both, so the weights and outputs agree to float32 rounding (~1e-6)",
             "分数 / √32，对键做 softmax（没有因果掩码），权重 · 值，合并 12 个头：\n"
             "两边的计算完全相同，所以权重和输出在 float32 的舍入误差内一致（~1e-6）"),
    "kept": ("kept from the model: embeddings · residual + LayerNorm · feed-forward (not attention)  →  "
             "StudentEncoder runs all 6 layers",
             "沿用模型自己的：嵌入 · 残差 + 层规范化 · 前馈块（不是注意力）  →  StudentEncoder 运行全部 6 层"),
}


def _box(ax, x, y, w, h, text, color, *, fill="white", size=11, weight="normal"):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12", facecolor=fill,
                                edgecolor=color, linewidth=1.6))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, weight=weight, color="#222222")


def draw(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    fig, ax = canvas(12.0, 6.0, (0, 12.0), (0, 6.0))
    ax.text(0.3, 0.45, tx.layer, fontsize=12.5, weight="bold",
            color=ORANGE, va="center")
    ax.text(7.0, 0.45, "mha_lib", fontsize=12.5, weight="bold", color=BLUE, va="center")
    ax.text(7.0, 0.95, "MultiHeadAttention(384, 384, 512, 0.0, 12,\n    qkv_bias=True, causal=False)",
            fontsize=10.5, family="monospace", va="top", color=BLUE)
    for i, (theirs, ours) in enumerate(PAIRS):
        y = 1.35 + i * 0.78
        _box(ax, 0.4, y, 3.6, 0.58, theirs, ORANGE, size=10.5)
        _box(ax, 7.2, y + 0.5, 2.0, 0.58, ours, BLUE, size=10.5)
        ax.add_patch(FancyArrowPatch((4.05, y + 0.29), (7.15, y + 0.79), arrowstyle="-|>", mutation_scale=14,
                                     color=GREY, linewidth=1.3))
        ax.text(5.6, y + 0.47, tx.copy, fontsize=9.5, color=GREY, ha="center", va="bottom",
                rotation=-9, rotation_mode="anchor")  # along the arrow (y grows downwards)
        ax.text(9.35, y + 0.79, tx.linear, fontsize=9.5, color=GREY, va="center")
    ax.text(0.4, 4.62, tx.same, fontsize=10, color="#222222", va="top")
    _box(ax, 0.4, 5.25, 11.2, 0.55, tx.kept, GREY, fill=LIGHT, size=10.5)
    save(fig, "ch10_converter.png", language, 83)  # 12 in × 83 = 996 px (the notebook panel); 9.5 pt = 11 px


def main(language: str = "en") -> None:
    draw(language)


if __name__ == "__main__":
    run(main)
