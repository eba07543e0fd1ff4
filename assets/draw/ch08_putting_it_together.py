"""Diagram of chapter 8 (the whole layer at GPT-2-small size), drawn with matplotlib so it can be edited.

    python assets/draw/ch08_putting_it_together.py [--language zh-CN]

writes (in Chinese: assets/zh-CN/ch08_pipeline.png)
    assets/ch08_pipeline.png   x [4, 16, 768] -> Q, K, V [4, 16, 768] -> heads [4, 12, 16, 64] -> scores, scaled,
                               masked, weights [4, 12, 16, 16] -> context [4, 12, 16, 64] -> merged [4, 16, 768]
                               -> W_o -> output [4, 16, 768], every box with its shape; under the four score
                               stages, head 0 of sentence 0 as a small picture (the chapter's own layer),
                               coloured by the series' rules (mha_lib.display.plotting); 996 × 743 px, landscape

Colour = kind of tensor: blue (B, T, D) one row per token, orange (B, H, T, Dh) one row per token and head,
purple (B, H, T, T) one number per query-key pair and head.
"""

from __future__ import annotations

import torch
from _common import monospace, run, save, texts
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

import mha_lib
from mha_lib.data import WALKTHROUGH_TOKENS
from mha_lib.display.fonts import use_cjk_fallback
from mha_lib.display.plotting import MASKED_RGB, colour_scale

DPI = 83  # 12 in × 83 = 996 px: the notebook panel beside JupyterLab's file browser; 9 pt = 10.4 px
B, T, D, H = 4, 16, 768, 12
Dh = D // H
KIND_COLOURS = {"BTD": ("#dbe8f6", "#4a78a8"), "heads": ("#fde3cc", "#c8742c"), "TT": ("#e8def3", "#7d5aa6")}
BOX_W, BOX_H = 3.3, 1.45
TEXTS = {  # every word drawn: (English, Chinese)
    "title": ("One attention layer at GPT-2-small size", "GPT-2 small 尺寸的一个注意力层"),
    "x": ("x  (embeddings)", "x（嵌入）"),
    "heads": ("{name} heads", "{name} 的各个头"),
    "projections": ("three projections,\n768 × 768 each, + bias", "三个投影，\n各 768 × 768，+ 偏置"),
    "stages": (("scores", "scaled", "masked", "weights"), ("分数", "缩放后", "掩蔽后", "权重")),
    "ops": (("÷ √64 = 8", "causal mask\n−inf above\nthe diagonal", "softmax\nover each row"),
            ("÷ √64 = 8", "因果掩码：\n对角线以上\n填入 −inf", "对每一行\n做 softmax")),
    "under": ("under each stage: head 0 of the first sentence, in its own colour range\n"
              "(scores centred on 0; grey = masked; +: the first row, weight 1, is above the range)",
              "每个阶段下方：第一个句子的头 0，各用自己的颜色范围\n"
              "（分数以 0 为中心；灰色 = 被掩蔽；+：第一行的权重为 1，超出了范围）"),
    "weights_v": ("weights @ V", "权重 @ V"),
    "context": ("context", "上下文"),
    "merged": ("merged heads", "合并后的头"),
    "output": ("output", "输出"),
    "legend": ("B = 4 sentences   T = 16 tokens   D = 768   H = 12 heads   Dh = 768 / 12 = 64\n"
               "blue    [B, T, D]       a row per token\norange  [B, H, T, Dh]   a row per token, per head\n"
               "purple  [B, H, T, T]    a number per query–key pair",
               "B = 4 个句子   T = 16 个词元   D = 768   H = 12 个头   Dh = 768 / 12 = 64\n"
               "蓝色  [B, T, D]       每个词元一行\n橙色  [B, H, T, Dh]   每个词元、每个头一行\n"
               "紫色  [B, H, T, T]    每个查询–键对一个数"),
}


def head0_stages() -> list[torch.Tensor]:
    """Scores, scaled, masked, weights of head 0, sentence 0: the chapter's layer (seeds 0 and 1, default init)."""
    torch.manual_seed(0)
    layer = mha_lib.MultiHeadAttention(D, D, context_length=1024, dropout=0.0, num_heads=H, qkv_bias=True)
    x = mha_lib.embed_tokens(WALKTHROUGH_TOKENS, D)  # (T, D): sentence 0 of the chapter's batch
    with torch.no_grad():
        q = mha_lib.split_heads(layer.W_query(x[None]), H)[0, 0]  # (1, T, D) -> (1, H, T, Dh) -> (T, Dh)
        k = mha_lib.split_heads(layer.W_key(x[None]), H)[0, 0]
    scores = mha_lib.attention_scores(q, k)  # (T, T)
    scaled = mha_lib.scale_scores(scores, Dh)
    masked = scaled.masked_fill(~mha_lib.causal_mask(T), float("-inf"))
    return [scores, scaled, masked, torch.softmax(masked, dim=-1)]


def _canvas(width: float, height: float, xlim: tuple[float, float], ylim: tuple[float, float]):
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(*xlim)
    ax.set_ylim(ylim[1], ylim[0])  # y grows downwards: the flow reads top to bottom
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def _box(ax, cx: float, cy: float, name: str, shape: str, kind: str, *, w: float = BOX_W) -> None:
    face, edge = KIND_COLOURS[kind]
    ax.add_patch(FancyBboxPatch((cx - w / 2, cy - BOX_H / 2), w, BOX_H, boxstyle="round,pad=0.06,rounding_size=0.25",
                                facecolor=face, edgecolor=edge, lw=1.6))
    ax.text(cx, cy - 0.28, name, ha="center", va="center", fontsize=10.5, fontweight="bold")
    ax.text(cx, cy + 0.33, shape, ha="center", va="center", fontsize=10, family="monospace")


def _arrow(ax, start, end, label: str = "", *, ha: str = "left", dx: float = 0.2, dy: float = 0.0,
           size: float = 9.0, colour: str = "#333333") -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.3, color=colour,
                                 shrinkA=0, shrinkB=2))
    if label:
        mid = ((start[0] + end[0]) / 2 + dx, (start[1] + end[1]) / 2 + dy)
        ax.text(*mid, label, ha=ha, va="center", fontsize=size, color="#222222", linespacing=1.25)


def _thumbnail(ax, x0: float, y0: float, size: float, values: torch.Tensor, quantity: str,
               blocked: torch.Tensor) -> None:
    """A T×T matrix as a small picture, coloured by the series' rules (``mha_lib.display.plotting.colour_scale``):
    scores in the diverging map centred on 0, weights in the sequential map from 0 (the first row, one key and
    weight 1, left out of the range: drawn in the top colour), masked entries (``blocked``) light grey."""
    scale = colour_scale(values[None], quantity)  # (T, T) -> (1, T, T): one head
    colours = colormaps[scale.cmap]
    masked = [c / 255 for c in MASKED_RGB]
    cell = size / values.shape[0]
    for r in range(values.shape[0]):
        for c in range(values.shape[1]):
            value = float(values[r, c])
            level = min(max((value - scale.vmin) / (scale.vmax - scale.vmin), 0.0), 1.0)
            face = masked if blocked[r, c] else colours(level)
            ax.add_patch(Rectangle((x0 + c * cell, y0 + r * cell), cell, cell, facecolor=face, lw=0))
    ax.add_patch(Rectangle((x0, y0), size, size, fill=False, edgecolor="#555555", lw=0.8))
    above = "+" if scale.extend in ("max", "both") else ""
    text = f"{scale.vmin:+.1f} … {scale.vmax:+.1f}" if quantity == "scores" else f"0 … {scale.vmax:.2f}{above}"
    ax.text(x0 + size / 2, y0 + size + 0.25, text, ha="center", va="top", fontsize=9, color="#444444")


def draw_pipeline(language: str = "en") -> None:
    tx = texts(TEXTS, language)
    # landscape, 996 × 743 px: fits the notebook panel; y grows downwards
    fig, ax = _canvas(12.0, 8.95, (0, 26), (0, 19.4))
    lanes = {"Q": 2.4, "K": 6.8, "V": 21.5}
    stage_x = [2.4, 6.8, 11.2, 15.6]
    ys = {"x": 1.4, "proj": 4.5, "heads": 7.7, "stages": 11.0, "thumbs": 13.4, "merged": 14.3, "out": 17.6}

    ax.text(0.2, 0.15, tx.title, fontsize=13, fontweight="bold", va="top")
    _box(ax, 11.6, ys["x"], tx.x, "[4, 16, 768]", "BTD", w=3.8)

    # projections and the cut into heads
    for name, cx in lanes.items():
        _arrow(ax, (11.6, ys["x"] + BOX_H / 2 + 0.08), (cx, ys["proj"] - BOX_H / 2 - 0.08))
        _box(ax, cx, ys["proj"], name, "[4, 16, 768]", "BTD")
        ax.text(cx + (0.3 if name != "V" else -0.3), ys["proj"] - 1.15, f"× W_{name.lower()}", fontsize=9.5,
                ha="left" if name != "V" else "right", va="center")
        _arrow(ax, (cx, ys["proj"] + BOX_H / 2 + 0.08), (cx, ys["heads"] - BOX_H / 2 - 0.08))
        _box(ax, cx, ys["heads"], tx.heads.format(name=name), "[4, 12, 16, 64]", "heads")
    ax.text(0.3, 2.3, tx.projections, fontsize=9, ha="left", va="center")
    ax.text(lanes["K"] + 0.25, 6.1, "split_heads:\nview [4, 16, 12, 64]\ntranspose(1, 2)", fontsize=9,
            ha="left", va="center", family="monospace")

    # Q and K meet in the scores; the four stages side by side, head 0 of sentence 0 under each
    _arrow(ax, (lanes["Q"], ys["heads"] + BOX_H / 2 + 0.08), (stage_x[0], ys["stages"] - BOX_H / 2 - 0.08))
    _arrow(ax, (lanes["K"], ys["heads"] + BOX_H / 2 + 0.08), (stage_x[0] + 0.9, ys["stages"] - BOX_H / 2 - 0.08),
           "Q @ Kᵀ", dx=-0.4, dy=0.15, ha="right")
    stages = list(zip(tx.stages, ("scores", "scores", "scores", "weights")))  # (name drawn, quantity)
    ops = tx.ops
    for i, (name, _) in enumerate(stages):
        _box(ax, stage_x[i], ys["stages"], name, "[4, 12, 16, 16]", "TT", w=3.5)
    for i, op in enumerate(ops):
        _arrow(ax, (stage_x[i] + 1.8, ys["stages"]), (stage_x[i + 1] - 1.8, ys["stages"]))
        ax.text((stage_x[i] + stage_x[i + 1]) / 2, ys["stages"] + 1.0, op, fontsize=9, ha="center", va="top")
    pictures = head0_stages()
    blocked = torch.isneginf(pictures[2])  # (T, T): what the causal mask removed, grey in the weights too
    for i, ((_, quantity), values) in enumerate(zip(stages, pictures)):
        _thumbnail(ax, stage_x[i] - 1.2, ys["thumbs"], 2.4, values, quantity, blocked if i >= 2 else blocked & False)
    ax.text(0.3, ys["thumbs"] + 3.55, tx.under, fontsize=9,
            color="#444444", va="center", linespacing=1.3)

    # weights @ V, merge, W_o: the right-hand column
    _arrow(ax, (lanes["V"], ys["heads"] + BOX_H / 2 + 0.08), (lanes["V"], ys["stages"] - BOX_H / 2 - 0.08),
           "V", dx=0.2)
    _arrow(ax, (stage_x[3] + 1.85, ys["stages"]), (lanes["V"] - 1.75, ys["stages"]), tx.weights_v,
           ha="center", dx=0.0, dy=-0.45)
    _box(ax, lanes["V"], ys["stages"], tx.context, "[4, 12, 16, 64]", "heads")
    _arrow(ax, (lanes["V"], ys["stages"] + BOX_H / 2 + 0.08), (lanes["V"], ys["merged"] - BOX_H / 2 - 0.08),
           "merge_heads:\ntranspose(1, 2)\nview [4, 16, 768]", ha="right", dx=-0.3, size=9)
    _box(ax, lanes["V"], ys["merged"], tx.merged, "[4, 16, 768]", "BTD")
    _arrow(ax, (lanes["V"], ys["merged"] + BOX_H / 2 + 0.08), (lanes["V"], ys["out"] - BOX_H / 2 - 0.08),
           "× W_o (out_proj)", ha="right", dx=-0.3)
    _box(ax, lanes["V"], ys["out"], tx.output, "[4, 16, 768]", "BTD")

    ax.text(0.3, 18.45, tx.legend, fontsize=9, family=monospace(language), va="center", linespacing=1.35)
    save(fig, "ch08_pipeline.png", language, DPI)


def main(language: str = "en") -> None:
    use_cjk_fallback()  # the legend names Chinese tokens
    draw_pipeline(language)


if __name__ == "__main__":
    run(main)
