"""Chapter 13's figures and widgets (mha_lib/llm/rotary.py): the right artists and labels, readable on a projector,
widgets that redraw when a slider moves, the reach computed from the masks, and clear errors for bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.image import AxesImage
from matplotlib.text import Annotation

import mha_lib
from mha_lib.llm import rotary
from figure_checks import _check_readable, _check_size  # tests/figure_checks.py: the projector rules

Q = torch.randn(8, generator=torch.Generator().manual_seed(0))
K = torch.randn(8, generator=torch.Generator().manual_seed(1))


def _titles(fig):
    return [ax.get_title() for ax in fig.axes]


def _readable(fig):
    _check_size(fig)
    _check_readable(fig)


# --- the rotation and the frequencies -----------------------------------------------------------------------------


def test_rotation_figure_draws_one_arrow_per_position_per_speed_all_of_the_same_length():
    fig = rotary.rotation_figure(vector=(1.0, 0.35), speeds=(1.0, 0.25), positions=range(6))
    _readable(fig)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["speed 1 rad per token", "speed 0.25 rad per token"]
    for ax, speed in zip(panels, (1.0, 0.25)):
        arrows = [a for a in ax.texts if isinstance(a, Annotation)]
        assert len(arrows) == 6
        lengths = {round(math.hypot(*a.xy), 6) for a in arrows}
        assert lengths == {round(math.hypot(1.0, 0.35), 6)}  # a rotation keeps the length
        angles = [math.atan2(a.xy[1], a.xy[0]) for a in arrows]
        steps = [(b - a + math.pi) % (2 * math.pi) - math.pi for a, b in zip(angles, angles[1:])]
        assert np.allclose(steps, speed)
        assert [t.get_text() for t in ax.texts if not isinstance(t, Annotation)] == [f"m={m}" for m in range(6)]


def test_frequencies_figure_plots_speeds_and_wavelengths_for_each_theta():
    fig = rotary.frequencies_figure(128, thetas=(10000.0, 500000.0))
    _readable(fig)
    left, right = fig.axes
    assert [line.get_label() for line in left.lines] == ["θ = 10,000", "θ = 500,000"]
    speeds = left.lines[1].get_ydata()
    assert np.allclose(speeds, mha_lib.rope_frequencies(128, 500000.0).double().numpy())
    assert np.allclose(right.lines[0].get_ydata(), 2 * math.pi / mha_lib.rope_frequencies(128, 10000.0).double())
    labels = [t.get_text() for t in right.texts]
    assert labels == ["54,410 tokens", "2,559,196 tokens"]
    assert left.get_yscale() == right.get_yscale() == "log"


def test_wavelengths_are_two_pi_over_the_speeds():
    assert float(rotary.wavelengths(8, 10000.0)[0]) == pytest.approx(2 * math.pi)
    assert float(rotary.wavelengths(128, 500000.0)[-1]) == pytest.approx(2_559_196, rel=1e-6)


# --- the offset --------------------------------------------------------------------------------------------------


def test_rope_scores_depend_only_on_the_offset():
    scores = rotary.rope_scores(Q, K, torch.arange(12))  # (12, 12)
    for offset in range(-11, 12):
        diagonal = torch.diagonal(scores, offset=-offset)  # m - n = offset
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-5)
    assert scores[5, 2] == pytest.approx(float(mha_lib.apply_rope(Q[None], torch.tensor([5]))[0]
                                               @ mha_lib.apply_rope(K[None], torch.tensor([2]))[0]), abs=1e-5)


def test_offset_figure_frames_m_n_and_titles_the_score():
    fig = rotary.offset_figure(Q, K, 5, 2)
    _readable(fig)
    expected = float(rotary.rope_scores(Q, K, torch.arange(16))[5, 2])
    assert f"m = 5, n = 2, offset m - n = 3: score {expected:.4f}" in fig._suptitle.get_text()
    heatmap = next(ax for ax in fig.axes if ax.images)
    assert heatmap.images[0].get_array().shape == (16, 16)
    frame = heatmap.lines[0]
    assert (frame.get_xdata()[0], frame.get_ydata()[0]) == (2, 5)  # column n, row m
    assert heatmap.images[0].get_cmap().name == "RdBu_r"


def test_offset_widget_redraws_when_a_slider_moves():
    widget = rotary.offset_widget(Q, K, m=5, n=2)
    m_slider, n_slider = widget.children[:2]
    assert (m_slider.value, n_slider.value) == (5, 2)
    first = widget.result
    assert "offset m - n = 3" in first._suptitle.get_text()
    m_slider.value = 9
    assert widget.result is not first
    assert "m = 9, n = 2, offset m - n = 7" in widget.result._suptitle.get_text()
    n_slider.value = 6  # the same offset as before: the same score
    assert f"score {float(rotary.rope_scores(Q, K, torch.arange(16))[5, 2]):.4f}" in \
        widget.result._suptitle.get_text()


# --- windows -----------------------------------------------------------------------------------------------------


def test_window_masks_figure_shows_the_causal_and_the_window_mask_with_token_labels():
    fig = rotary.window_masks_figure(list(mha_lib.JOURNEY_TOKENS), window=3)
    _readable(fig)
    causal, window = fig.axes
    assert causal.get_title() == "causal: query t sees keys 0 .. t"
    assert window.get_title() == "sliding window W = 3: keys t - 2 .. t"
    assert [t.get_text() for t in causal.get_xticklabels()] == list(mha_lib.JOURNEY_TOKENS)
    image = window.images[0].get_array()  # (T, T, 3)
    kept = (np.asarray(image) == rotary.KEPT_RGB).all(-1)
    assert np.array_equal(kept, mha_lib.sliding_window_mask(6, 3).numpy())


@pytest.mark.parametrize("layers, window", [(1, 1), (1, 4), (2, 3), (3, 4), (4, 2), (5, 7)])
def test_reach_from_the_masks_is_l_times_w_minus_1_plus_1(layers, window):
    assert rotary.receptive_field(layers, window) == layers * (window - 1) + 1


def test_reach_matrix_is_the_composition_of_the_window_masks():
    reach = rotary.reach_matrix(3, 3, 6)
    assert reach.shape == (3, 6, 6) and reach.dtype == torch.bool
    assert torch.equal(reach[0], mha_lib.sliding_window_mask(6, 3))
    assert reach[1, 5].tolist() == [False, True, True, True, True, True]
    assert reach[2, 5].all()
    assert not reach.triu(1).any()  # never the future


def test_reach_figure_counts_what_it_draws_and_says_when_the_start_cuts_it():
    fig = rotary.reach_figure(3, 4)
    _readable(fig)
    ax = fig.axes[0]
    assert "the last token reads 10 positions = L·(W - 1) + 1 = 3·3 + 1" in ax.get_title()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["after layer 1", "after layer 2", "after layer 3"]
    short = rotary.reach_figure(3, 4, num_tokens=6)
    assert "cut by the sequence's start" in short.axes[0].get_title()
    _readable(rotary.reach_figure(8, 8))  # the widget's largest setting fits the screen


def test_reach_widget_redraws_when_a_slider_moves():
    widget = rotary.reach_widget(layers=3, window=4)
    layers, window = widget.children[:2]
    assert "reads 10 positions" in widget.result.axes[0].get_title()
    size = widget.result.get_size_inches().tolist()
    window.value = 8
    assert "reads 22 positions" in widget.result.axes[0].get_title()
    layers.value = 1
    assert "reads 8 positions" in widget.result.axes[0].get_title()
    window.value = 1
    assert "reads 1 position =" in widget.result.axes[0].get_title()  # one position, not "1 positions"
    layers.value = 8
    assert widget.result.get_size_inches().tolist() == size  # one size for every L and W: the page never jumps
    _readable(widget.result)


def test_reach_figure_with_room_for_more_layers_keeps_the_size_of_the_largest():
    small, large = rotary.reach_figure(1, 2, rows=8), rotary.reach_figure(8, 8, rows=8)
    assert small.get_size_inches().tolist() == large.get_size_inches().tolist()
    assert [t.get_text() for t in small.axes[0].get_yticklabels()] == ["after layer 1"]  # the other rows empty
    _readable(small)
    with pytest.raises(ValueError, match="rows must be an int in \\[3,"):
        rotary.reach_figure(3, 4, rows=2)


def test_reach_figure_says_position_in_the_singular_in_both_languages():
    assert "reads 1 position =" in rotary.reach_figure(3, 1).axes[0].get_title()
    mha_lib.set_language("zh-CN")
    try:
        title = rotary.reach_figure(3, 1).axes[0].get_title()
        assert "1 个位置" in title and "reads" not in title
    finally:
        mha_lib.set_language("en")


def test_cache_growth_figure_draws_one_line_per_cache():
    fig = rotary.cache_growth_figure({"no window": [1, 2, 3, 4], "window W = 4": [1, 2, 3, 3]})
    _readable(fig)
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == ["no window", "window W = 4"]
    assert list(ax.lines[1].get_ydata()) == [1, 2, 3, 3]


# --- the library the chapter relies on ----------------------------------------------------------------------------


def test_a_windowed_cache_stops_growing_and_matches_the_full_forward():
    torch.manual_seed(0)
    layer = mha_lib.MultiHeadAttention(16, 16, 64, 0.0, 4, rope_theta=10000.0, window=4)
    x = torch.randn(1, 12, 16)
    cache, outs, lengths = mha_lib.KVCache(), [], []
    with torch.no_grad():
        for t in range(12):
            outs.append(layer(x[:, t:t + 1], kv_cache=cache))
            lengths.append(cache.length)
        assert torch.allclose(torch.cat(outs, dim=1), layer(x), atol=1e-6)
    assert lengths == [1, 2, 3] + [3] * 9


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, phrase", [
    (lambda: rotary.rotation_figure(vector=(1.0, 2.0, 3.0)), ValueError, "vector must have 2 entries"),
    (lambda: rotary.rotation_figure(speeds=()), TypeError, "speeds must be a non-empty list"),
    (lambda: rotary.rotation_figure(speeds=(0.0,)), ValueError, "speeds[i]"),
    (lambda: rotary.frequencies_figure(128, thetas=(-1.0,)), ValueError, "thetas[i]"),
    (lambda: rotary.offset_figure(Q, K, 16, 2), ValueError, "m and n must be below num_positions = 16"),
    (lambda: rotary.offset_figure(Q[:7], K[:7], 1, 2), ValueError, "even number of entries"),
    (lambda: rotary.offset_figure(Q, K[:6], 1, 2), ValueError, "q and k must have the same size"),
    (lambda: rotary.offset_figure(Q, K, -1, 2), ValueError, "m must be an int"),
    (lambda: rotary.offset_figure("q", K, 1, 2), TypeError, "q must be a 1-D tensor"),
    (lambda: rotary.offset_figure(torch.full((8,), math.nan), K, 1, 2), ValueError, "q must be finite"),
    (lambda: rotary.window_masks_figure("Your journey", 3), TypeError, "tokens must be a number of tokens"),
    (lambda: rotary.window_masks_figure(6, 0), ValueError, "window must be a positive int"),
    (lambda: rotary.reach_figure(0, 3), ValueError, "layers must be a positive int"),
    (lambda: rotary.reach_matrix(2, 3.0, 6), TypeError, "window must be a positive int"),
    (lambda: rotary.cache_growth_figure({}), TypeError, "lengths must be a non-empty dict"),
    (lambda: rotary.cache_growth_figure({"a": ["x"]}), TypeError, "must be a non-empty list of numbers"),
    (lambda: rotary.train_with_progress(rotary.rotary_induction_model(), 0), ValueError,
     "steps must be a positive int"),
    (lambda: rotary.train_with_progress(rotary.rotary_induction_model(), 5, redraw_seconds=-1), ValueError,
     "redraw_seconds must be from 0 to 60"),
    (lambda: rotary.train_with_progress(rotary.rotary_induction_model(), 5, redraw_seconds="2"), TypeError,
     "redraw_seconds must be a number of seconds"),
])
def test_bad_input_names_the_argument(call, error, phrase):
    with pytest.raises(error) as caught:
        call()
    assert phrase in str(caught.value)


# --- chapter 11's model with RoPE ----------------------------------------------------------------------------------


def test_the_rotary_induction_model_is_chapter_11s_model_without_a_position_table():
    from mha_lib.induction import model as induction

    rope = rotary.rotary_induction_model()
    learned = induction.new_model("two_layer")
    assert isinstance(rope.position_embedding, rotary.NoPositions)
    assert all(layer.rope_theta == 10000.0 and layer.causal for layer in rope.layers)
    table = learned.position_embedding.weight.numel()  # 25 × 64
    assert sum(p.numel() for p in rope.parameters()) == sum(p.numel() for p in learned.parameters()) - table
    # the same seed draws the same token embeddings as chapter 11's run
    assert torch.equal(rope.token_embedding.weight, learned.token_embedding.weight)
    again = rotary.rotary_induction_model()
    assert all(torch.equal(a, b) for a, b in zip(rope.state_dict().values(), again.state_dict().values()))


def test_evaluate_at_length_runs_rope_beyond_the_training_length_and_refuses_a_learned_table():
    from mha_lib.induction import model as induction

    rope = rotary.rotary_induction_model()
    result = rotary.evaluate_at_length(rope, 60, size=8)
    assert set(result) == {"loss", "accuracy", "previous_token", "induction"}
    assert result["induction"].shape == (2, 4)
    assert rope.task.seq_len == 25  # the model's own task is put back
    learned = induction.load_run("two_layer").model
    at_25 = rotary.evaluate_at_length(learned, 25)
    assert at_25["accuracy"] == induction.evaluate(learned, induction.held_out_batch())["accuracy"]
    with pytest.raises(ValueError, match="learned 25 position vectors and has none for positions 25 to 49"):
        rotary.evaluate_at_length(learned, 50)
    with pytest.raises(ValueError, match="at most the layers' context_length = 1024"):
        rotary.evaluate_at_length(rope, 2000)
    with pytest.raises(TypeError, match="model must be an induction AttentionOnlyTransformer"):
        rotary.evaluate_at_length(torch.nn.Linear(2, 2), 25)


def test_a_test_trains_a_short_run_and_a_student_chapter_11s_3000_steps(monkeypatch):
    from mha_lib.induction import model as induction

    assert rotary.under_test() and rotary.training_steps() == rotary.TEST_STEPS == 100  # pytest sets the variable
    monkeypatch.delenv("PYTEST_CURRENT_TEST")  # what a kernel started by Jupyter sees
    assert not rotary.under_test() and rotary.training_steps() == induction.TRAIN_STEPS == 3000


TRAINING_IN_A_KERNEL = r"""
%matplotlib inline
import json
from mha_lib.induction import model as induction
from mha_lib.llm import rotary

model = rotary.rotary_induction_model()
log = rotary.train_with_progress(model, 120, reference=induction.load_run("two_layer").log, redraw_seconds=0)
again = rotary.rotary_induction_model()
plain, _ = induction.train(again, 120, seed=induction.SEED)
print(json.dumps({"steps": log.steps, "same": log.eval_loss == plain.eval_loss}))
"""


def test_training_shows_its_progress_in_place_a_status_line_and_the_curves(ipywidgets7_kernel):
    from conftest import run_in_kernel

    messages, result = run_in_kernel(ipywidgets7_kernel, TRAINING_IN_A_KERNEL)
    assert result == {"steps": [0, 50, 100, 120], "same": True}  # chapter 11's training, evaluated every 50 steps
    shown = [m for m in messages if m["msg_type"] == "display_data"]
    updates = [m for m in messages if m["msg_type"] == "update_display_data"]
    assert len(shown) == 2  # one status line and one picture, each then updated in place
    status_id, curves_id = (m["content"]["transient"]["display_id"] for m in shown)
    lines = [m["content"]["data"]["text/plain"] for m in shown + updates
             if m["content"]["transient"]["display_id"] == status_id]
    assert [line.split(" · ")[0] for line in lines] == [
        "training: step 0 of 120", "training: step 50 of 120", "training: step 100 of 120",
        "training: step 120 of 120", "done: step 120 of 120"]
    assert all("<b>" in m["content"]["data"]["text/html"] for m in shown + updates
               if m["content"]["transient"]["display_id"] == status_id)
    pictures = [m for m in shown + updates if m["content"]["transient"]["display_id"] == curves_id]
    assert len(pictures) >= 2 and all("image/png" in m["content"]["data"] for m in pictures)  # the first, the last


def test_no_positions_adds_nothing():
    out = rotary.NoPositions()(torch.arange(5))
    assert out.shape == () and float(out) == 0.0


def test_only_a_layer_with_neither_a_mask_nor_positions_is_order_blind():
    """Chapter 13, section 1: shuffling the tokens only shuffles the outputs of a layer without a mask and without
    positions; the same weights with a causal mask already give other outputs (each token sees other tokens)."""
    tokens, x = mha_lib.toy_sentence()
    x = x[None]
    order = torch.tensor([5, 2, 0, 4, 1, 3])
    gaps = {}
    for causal in (False, True):
        torch.manual_seed(123)
        layer = mha_lib.MultiHeadAttention(16, 16, 64, 0.0, 4, causal=causal)
        with torch.no_grad():
            gaps[causal] = float((layer(x[:, order]) - layer(x)[:, order]).abs().max())
    assert gaps[False] < 1e-6
    assert gaps[True] > 0.1  # 0.597 in the chapter: the mask alone moves the outputs (how far depends on the weights)


def test_offset_explorer_uses_section_3s_query_and_key_and_leaves_the_rng_alone():
    from mha_lib import MultiHeadAttention, toy_sentence

    torch.manual_seed(7)
    layer = MultiHeadAttention(16, 16, 2048, 0.0, 2, rope_theta=10000.0)  # the chapter's section 3
    x = toy_sentence()[1]
    with torch.no_grad():
        expected = layer.W_query(x)[1, :8], layer.W_key(x)[5, :8]
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    q, k = rotary.section_query_key()
    assert torch.equal(torch.random.get_rng_state(), before)
    assert torch.equal(q, expected[0]) and torch.equal(k, expected[1])
    widget = rotary.offset_explorer(m=9, n=6)
    assert (widget.children[0].value, widget.children[1].value) == (9, 6)
    score = float(rotary.rope_scores(q, k, torch.arange(16))[9, 6])
    assert f"m = 9, n = 6, offset m - n = 3: score {score:.4f}" in widget.result._suptitle.get_text()
