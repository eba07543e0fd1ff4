"""Chapter 10 diagram: a trained BERT layer's attention block copied into MultiHeadAttention, the rest kept.

    python assets/draw/ch10_trained_heads.py   ->  assets/ch10_converter.png
"""

from __future__ import annotations

import sys
from pathlib import Path

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import canvas  # noqa: E402

ASSETS = Path(__file__).resolve().parents[1]
BLUE, ORANGE, GREY, LIGHT = "#2e86c1", "#e67e22", "#555555", "#f2f2f2"
PAIRS = (  # (the model's module, mha_lib's attribute, what it is)
    ("attention.self.query", "W_query", "Linear(384, 384) + bias"),
    ("attention.self.key", "W_key", "Linear(384, 384) + bias"),
    ("attention.self.value", "W_value", "Linear(384, 384) + bias"),
    ("attention.output.dense", "out_proj", "Linear(384, 384) + bias"),
)


def _box(ax, x, y, w, h, text, color, *, fill="white", size=11, weight="normal"):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12", facecolor=fill,
                                edgecolor=color, linewidth=1.6))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, weight=weight, color="#222222")


def draw(path: Path) -> None:
    fig, ax = canvas(12.0, 6.0, (0, 12.0), (0, 6.0))
    ax.text(0.3, 0.45, "one layer of all-MiniLM-L6-v2 (transformers' BertLayer)", fontsize=12.5, weight="bold",
            color=ORANGE, va="center")
    ax.text(7.0, 0.45, "mha_lib", fontsize=12.5, weight="bold", color=BLUE, va="center")
    ax.text(7.0, 0.95, "MultiHeadAttention(384, 384, 512, 0.0, 12,\n    qkv_bias=True, causal=False)",
            fontsize=10.5, family="monospace", va="top", color=BLUE)
    for i, (theirs, ours, what) in enumerate(PAIRS):
        y = 1.35 + i * 0.78
        _box(ax, 0.4, y, 3.6, 0.58, theirs, ORANGE, size=10.5)
        _box(ax, 7.2, y + 0.5, 2.0, 0.58, ours, BLUE, size=10.5)
        ax.add_patch(FancyArrowPatch((4.05, y + 0.29), (7.15, y + 0.79), arrowstyle="-|>", mutation_scale=14,
                                     color=GREY, linewidth=1.3))
        ax.text(5.6, y + 0.47, "copy weight & bias", fontsize=9.5, color=GREY, ha="center", va="bottom",
                rotation=-9, rotation_mode="anchor")  # along the arrow (y grows downwards)
        ax.text(9.35, y + 0.79, what, fontsize=9.5, color=GREY, va="center")
    ax.text(0.4, 4.62, "scores / √32, softmax over the keys (no causal mask), weights · values, 12 heads merged:\n"
            "the same computation in both, so the weights and outputs agree to float32 rounding (~1e-6)",
            fontsize=10, color="#222222", va="top")
    _box(ax, 0.4, 5.25, 11.2, 0.55, "kept from the model: embeddings · residual + LayerNorm · feed-forward "
         "(not attention)  →  StudentEncoder runs all 6 layers", GREY, fill=LIGHT, size=10.5)
    fig.savefig(path, dpi=100, metadata={"Software": None})


if __name__ == "__main__":
    draw(ASSETS / "ch10_converter.png")
