"""The figures and explorers of chapters 1 to 5 (mha_lib.display.single_head, stacking_heads, weight_splitting,
scaling, causal_masking): the numbers the chapters print, figures readable within 1,000 × 900 px, controls built
with mha_lib.display.controls, and the words in Chinese once the twin selects it (issue 32: each "Try it" cell
runs on its own, so what it shows lives in the library)."""

from __future__ import annotations

import math

import pytest
import torch

import mha_lib
from mha_lib.display import causal_masking, controls, scaling, single_head, stacking_heads, weight_splitting

from figure_checks import _check_readable, _check_size


@pytest.fixture
def chinese():
    mha_lib.set_language("zh-CN")
    yield
    mha_lib.set_language("en")


def _texts(fig) -> str:
    """Every text of the figure, white space (plot_heads wraps long panel titles) made single spaces."""
    texts = (t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_fontsize")))
    return " ".join(" ".join(texts).split())


# --- chapter 1 -------------------------------------------------------------------------------------------------


def test_ch01_head_weights_are_rows_of_weights_and_the_same_head_for_the_same_width():
    weights = single_head.head_weights(8)
    assert weights.shape == (6, 6)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(6))
    torch.testing.assert_close(single_head.head_weights(8), weights)  # seeded: one width, one head


def test_ch01_the_scale_keeps_rows_soft_and_its_absence_saturates_them():
    for width in single_head.HEAD_WIDTHS:  # the chapter's table: 0.23 to 0.26 with the scale
        assert 0.2 < single_head.head_weights(width).amax(dim=-1).mean().item() < 0.3
    unscaled = [single_head.head_weights(w, scaled=False).amax(dim=-1).mean().item() for w in (2, 128, 512)]
    assert unscaled[0] < unscaled[1] < unscaled[2] and unscaled[2] > 0.8


def test_ch01_row_figure_is_readable_and_names_the_query():
    fig = single_head.row_figure(128, scaled=False, query="journey")
    _check_size(fig)
    _check_readable(fig)
    assert 'what "journey" takes from each token' in _texts(fig) and "NOT scaled" in _texts(fig)
    with pytest.raises(ValueError, match="query must be one of"):
        single_head.row_figure(query="nobody")


def test_ch01_row_figure_in_chinese(chinese):
    words = _texts(single_head.row_figure(2, scaled=True))
    assert "行 = 查询，列 = 键" in words and '"journey" 从每个词元各取多少' in words and "按 1/√Dh 缩放" in words


# --- chapter 2 -------------------------------------------------------------------------------------------------


def test_ch02_heads_figure_counts_width_and_weights():
    fig = stacking_heads.heads_figure(4, 4)
    _check_size(fig)
    _check_readable(fig)
    assert "4 heads of width 4: output width 16, 768 weights" in _texts(fig)  # 4 × 3 × 16 × 4
    assert "1 head of width 2: output width 2, 96 weights" in _texts(stacking_heads.heads_figure(1, 2))


def test_ch02_heads_figure_in_chinese(chinese):
    assert "4 个头，头维度 4：输出维度 16，共 768 个权重" in _texts(stacking_heads.heads_figure(4, 4))


# --- chapter 3 -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(mha_lib.heads.HEAD_FORMERS))
def test_ch03_head_maps_are_weights_per_head(kind):
    maps = weight_splitting.head_maps(kind, 3)
    assert maps.shape == (3, 6, 6)
    torch.testing.assert_close(maps.sum(dim=-1), torch.ones(3, 6))


def test_ch03_the_direct_split_favours_the_diagonal():
    maps = weight_splitting.head_maps("direct split", 3)  # a token's query is its key: |x_t|² tends to win
    diagonal = maps.diagonal(dim1=-2, dim2=-1).mean().item()
    assert diagonal > maps.mean().item()


@pytest.mark.parametrize("kind, num_heads, params", [("projection", 3, 432), ("projection", 12, 432),
                                                     ("direct split", 4, 0), ("grouped conv", 3, 144),
                                                     ("grouped conv", 12, 36)])
def test_ch03_ways_figure_names_shapes_parameters_and_rows(kind, num_heads, params):
    fig = weight_splitting.ways_figure(kind, num_heads)
    _check_size(fig)
    _check_readable(fig)
    dh = 12 // num_heads
    text = _texts(fig)
    assert f"{kind}: (1, 6, 12) → (1, {num_heads}, 6, {dh}), {params} parameters for Q, K, V" in text
    assert f"head {num_heads - 1}: W[{12 - dh}:12]" in text


def test_ch03_ways_figure_in_chinese(chinese):
    text = _texts(weight_splitting.ways_figure("grouped conv", 3))
    assert "grouped conv：(1, 6, 12) → (1, 3, 6, 4)，Q、K、V 共 144 个参数" in text and "头 0：W[0:4]" in text


# --- chapter 4 -------------------------------------------------------------------------------------------------


def test_ch04_entropy_is_zero_for_one_hot_and_ln_s_for_uniform():
    rows = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    torch.testing.assert_close(scaling.entropy(rows), torch.tensor([0.0, math.log(4)]))


def test_ch04_head_weights_unscaled_wide_heads_are_sharp_scaled_ones_soft():
    unscaled, scaled = scaling.head_weights(256, scaled=False), scaling.head_weights(256)
    assert unscaled.shape == scaled.shape == (4, 6, 6)
    assert scaling.entropy(unscaled).mean() < 0.5 < 1.0 < scaling.entropy(scaled).mean() < math.log(6)


def test_ch04_scaling_figure_titles_give_each_heads_entropy():
    fig = scaling.scaling_figure(64, scaled=False)
    _check_size(fig)
    _check_readable(fig)
    text = _texts(fig)
    entropies = scaling.entropy(scaling.head_weights(64, scaled=False)).mean(dim=-1)
    assert "Four heads of width 64, no scaling" in text
    assert f"no scaling, head 3: {entropies[3].item():.2f} nats" in text
    assert "÷√16, head 0" in _texts(scaling.scaling_figure(16, scaled=True))


def test_ch04_scaling_figure_in_chinese(chinese):
    text = _texts(scaling.scaling_figure(64, scaled=False))
    assert "四个宽度为 64 的头，不缩放" in text and "不缩放，头 0：" in text and "奈特" in text


# --- chapter 5 -------------------------------------------------------------------------------------------------


def test_ch05_sentence_scores_are_the_chapters_four_heads():
    tokens, scores = causal_masking.sentence_scores()
    assert tokens == list(mha_lib.JOURNEY_TOKENS) and scores.shape == (1, 4, 6, 6)


@pytest.mark.parametrize("valid_len", [1, 4, 6])
def test_ch05_masked_weights_block_what_each_mask_blocks(valid_len):
    _, scores = causal_masking.sentence_scores()
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    causal = causal_masking.masked_weights(scores, "causal", valid_len)
    assert (causal[..., future] == 0).all()
    padding = causal_masking.masked_weights(scores, "padding", valid_len)
    assert (padding[..., valid_len:] == 0).all()
    both = causal_masking.masked_weights(scores, "causal + padding", valid_len)
    assert (both[..., future] == 0).all() and (both[..., valid_len:] == 0).all()
    torch.testing.assert_close(causal_masking.masked_weights(scores, "none", valid_len), torch.softmax(scores, -1))


def test_ch05_the_walkthroughs_diagonal_slip():
    _, scores = causal_masking.sentence_scores()
    with_inf = causal_masking.masked_weights(scores, "diagonal too (-inf)", 4)
    assert with_inf[..., 0, :].isnan().all() and not with_inf[..., 1:, :].isnan().any()  # row 0: NaN
    quiet = causal_masking.masked_weights(scores, "diagonal too (-1e9)", 4)
    torch.testing.assert_close(quiet[..., 0, :], torch.full((1, 4, 6), 1 / 6))  # row 0: uniform, reads the future
    with pytest.raises(ValueError, match="mask_type must be one of"):
        causal_masking.masked_weights(scores, "sideways", 4)


@pytest.mark.parametrize("mask_type", causal_masking.MASK_TYPES)
def test_ch05_mask_figure_is_readable(mask_type):
    fig = causal_masking.mask_figure(mask_type, 4)
    _check_size(fig)
    _check_readable(fig)
    assert f"mask: {mask_type}" in _texts(fig)


def test_ch05_mask_names_in_chinese(chinese):
    assert [causal_masking.mask_name(m) for m in causal_masking.MASK_TYPES] == [
        "无", "因果", "填充", "因果 + 填充", "连同对角线（-inf）", "连同对角线（-1e9）"]
    assert "掩码：因果 + 填充，valid_len = 4" in _texts(causal_masking.mask_figure("causal + padding", 4))


# --- the explorers ---------------------------------------------------------------------------------------------

EXPLORERS = {
    "ch01": (single_head.row_explorer, {"head_width": 128, "scaled": True, "query": "journey"}),
    "ch02": (stacking_heads.heads_explorer, {"num_heads": 4, "head_width": 4}),
    "ch03": (weight_splitting.ways_explorer, {"kind": "grouped conv", "num_heads": 3}),
    "ch04": (scaling.scaling_explorer, {"head_dim": 64, "scaled": False}),
    "ch05": (causal_masking.mask_explorer, {"mask_type": "causal + padding", "valid_len": 4}),
}


@pytest.mark.parametrize("chapter", list(EXPLORERS))
def test_explorers_use_the_series_controls_and_start_where_asked(chapter):
    pytest.importorskip("ipywidgets")
    explorer, start = EXPLORERS[chapter]
    widget = explorer(**start)
    inputs = widget.children[:-1]  # the last child is the output area
    assert {c.style.description_width for c in inputs} == {controls.LABEL_WIDTH}
    assert {c.layout.width for c in inputs} == {controls.CONTROL_WIDTH}
    assert all(getattr(c, "continuous_update", False) is False for c in inputs if hasattr(c, "continuous_update"))
    assert widget.kwargs == start
    for control in inputs:
        options = [o[1] if isinstance(o, tuple) else o for o in getattr(control, "options", ())]
        if type(control).__name__ == "SelectionSlider":
            assert options == sorted(options)  # smallest on the left


def test_explorer_labels_in_chinese(chinese):
    pytest.importorskip("ipywidgets")
    labels = [c.description for e, s in EXPLORERS.values() for c in e(**s).children[:-1]]
    assert labels == ["头维度 Dh", "按 1/√Dh 缩放", "查询（行）", "头数 H", "头维度 Dh", "形成头的方式", "头数 H",
                      "头维度 Dh", "按 1/√Dh 缩放", "掩码", "有效长度 valid_len"]
