"""The figures and explorers of chapters 6, 7 and 9 (mha_lib/display/softmax_figures.py,
output_projection_figures.py, efficiency_figures.py): the example each explorer rebuilds is the chapter's, the
figures draw what is computed, fit the notebook panel once cropped, and read >= 10 px; the explorers are built
with the series' controls (display/controls.py), so that each widget cell runs on its own."""

from __future__ import annotations

import io

import pytest
import torch

pytest.importorskip("matplotlib")
pytest.importorskip("ipywidgets")

import mha_lib  # noqa: E402
from mha_lib.display import controls  # noqa: E402
from mha_lib.display import efficiency_figures as efficiency  # noqa: E402
from mha_lib.display import output_projection_figures as projection  # noqa: E402
from mha_lib.display import softmax_figures as softmax  # noqa: E402
from figure_checks import SCREEN_WIDTH_PX, _check_readable, _check_size  # noqa: E402


def _cropped_width(fig) -> int:
    """The width of the PNG the notebook stores: the inline backend crops to the content (bbox_inches="tight")."""
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return Image.open(buffer).size[0]


def _fits(fig) -> None:
    _check_size(fig)
    _check_readable(fig)
    assert _cropped_width(fig) <= SCREEN_WIDTH_PX


def _series_layout(control) -> None:
    assert control.style.description_width == controls.LABEL_WIDTH
    assert control.layout.width == controls.CONTROL_WIDTH


# --- chapter 6 ------------------------------------------------------------------------------------------------


def test_example_scores_are_section_1_s_and_leave_the_caller_s_random_numbers_alone():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    tokens, scores = softmax.example_scores()
    assert torch.equal(torch.rand(3), before)  # fork_rng: the notebook's draws are unchanged
    assert tokens == ["Your", "journey", "starts", "with", "one", "step"]
    _, embeddings = mha_lib.toy_sentence("Your journey starts with one step", d_model=16)
    torch.manual_seed(0)
    layer = mha_lib.MultiHeadAttention(16, 16, 6, 0.0, 4, causal=False)
    with torch.no_grad():
        _, weights = layer(embeddings[None], return_weights=True)  # (1, H, T, S)
    assert scores.shape == (1, 4, 6, 6)
    assert torch.allclose(torch.softmax(scores, dim=-1), weights, atol=1e-6)


def test_temperature_figure_gives_each_head_s_mean_entropy():
    tokens, scores = softmax.example_scores()
    fig = softmax.temperature_figure(scores, tokens, temperature=0.1)
    weights = torch.softmax(scores[0] / 0.1, dim=-1)  # (H, T, S)
    entropy = -(weights * weights.log()).sum(dim=-1).mean(dim=-1)  # (H,)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title().startswith("head")]
    assert titles == [f"head {h} · entropy {entropy[h]:.2f}" for h in range(4)]
    _fits(fig)
    with pytest.raises(ValueError, match="temperature"):
        softmax.temperature_figure(scores, tokens, temperature=0.0)


def test_dropout_figure_repeats_the_chapter_s_draw():
    tokens, scores = softmax.example_scores()
    weights = torch.softmax(scores, dim=-1)  # (1, H, T, S)
    fig = softmax.dropout_figure(weights, tokens, p=0.5, seed=1)
    torch.manual_seed(1)
    dropped = torch.nn.functional.dropout(weights[0], p=0.5)  # the chapter's own draw
    sums = dropped.sum(dim=-1)
    titles = [ax.get_title().replace("\n", " ") for ax in fig.axes if ax.get_title().startswith("head")]
    assert titles[0] == f"head 0 · row sums {sums[0].min():.2f}–{sums[0].max():.2f}"
    _fits(fig)
    with pytest.raises(ValueError, match="p must be a probability"):
        softmax.dropout_figure(weights, tokens, p=1.0)


def test_dropout_figure_leaves_the_global_generator_as_it_was():
    tokens, scores = softmax.example_scores()
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    softmax.dropout_figure(torch.softmax(scores, dim=-1), tokens)
    assert torch.equal(torch.rand(2), expected)


def test_the_chapter_6_explorers_use_the_series_controls_and_redraw():
    explorer = softmax.temperature_explorer()
    (slider,) = explorer.kwargs_widgets
    assert slider.description == "temperature τ" and slider.continuous_update is False
    _series_layout(slider)
    slider.value = 0.1  # redraws without an error
    explorer = softmax.dropout_explorer()
    assert [w.description for w in explorer.kwargs_widgets] == ["dropout p", "random seed"]
    for control in explorer.kwargs_widgets:
        _series_layout(control)
    with pytest.raises(ValueError, match="both weights and tokens"):
        softmax.dropout_explorer(weights=torch.rand(1, 2, 3, 3))


# --- chapter 7 ------------------------------------------------------------------------------------------------


def test_silencing_a_head_moves_only_its_slice_without_w_o_and_every_feature_with_it():
    tokens, layer, context = projection.example_heads()
    assert context.shape == (1, 4, 6, 4) and len(tokens) == 6
    changes = projection.silenced_changes(layer, context, head=1)
    moved = (changes["concat"][0].amax(dim=0) > 0).nonzero().flatten().tolist()
    assert moved == [4, 5, 6, 7]  # head 1's features, nothing else
    assert (changes["projected"][0].amax(dim=0) > 0).all()  # all 16 with W_o
    with pytest.raises(ValueError, match="head must be an int from 0 to 3"):
        projection.silenced_changes(layer, context, head=4)


def test_head_change_figure_fits_and_reads_in_both_languages():
    tokens, layer, context = projection.example_heads()
    try:
        for language in ("en", "zh-CN"):
            mha_lib.set_language(language)
            fig = projection.head_change_figure(layer, context, tokens, head=2)
            _fits(fig)
        assert fig.axes[0].get_title() == "只拼接（没有 W_o）"
    finally:
        mha_lib.set_language("en")
    explorer = projection.silenced_head_explorer()
    (menu,) = explorer.kwargs_widgets
    assert list(menu.options) == [0, 1, 2, 3] and menu.value == 1
    _series_layout(menu)


# --- chapter 9 ------------------------------------------------------------------------------------------------


def test_weight_sizes_are_the_formulas_of_section_5():
    sizes = list(efficiency.weight_sizes(T=1024, B=8, D=768, H=12).values())
    assert sizes == [24.0, 96.0, 384.0, 1152.0]  # MiB: x, q/k/v/context, weights, training
    fig = efficiency.weight_sizes_figure(T=8192, B=32, D=1600, H=25)
    assert "weights = 32.0 ×" in fig.axes[0].get_title()
    _fits(fig)
    explorer = efficiency.weight_sizes_explorer()
    assert [w.description for w in explorer.kwargs_widgets] == ["sequence length T", "batch size B",
                                                                "model width D", "heads H"]
    for control in explorer.kwargs_widgets:
        _series_layout(control)
