"""Chapter 12's figures and widget (mha_lib/llm/sharing.py): the values drawn are the values computed, groups keep
their colours, the widget redraws, sizes fit a projector, bad input is named; aten_ops names the operations a call
runs (which SDPA back-end, whether it copied the key/value heads)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

import mha_lib  # noqa: E402
from mha_lib.llm import sharing  # noqa: E402
from figure_checks import _check_readable, _check_size  # noqa: E402


def _readable(fig) -> None:
    """The series' projector rules (tests/figure_checks.py): text >= 10 px inside the figure, within 1200 × 900 px."""
    _check_size(fig)
    _check_readable(fig)


def _journey_weights(H=8, G=2, d=32):
    tokens, embeddings = mha_lib.toy_sentence("Your journey starts with one step", d_model=d)
    torch.manual_seed(0)
    layer = mha_lib.MultiHeadAttention(d, d, len(tokens), 0.0, H, num_kv_heads=G)
    with torch.no_grad():
        _, weights = layer(embeddings[None], return_weights=True)  # (1, H, T, T)
    return weights, tokens


# --- grouped heatmaps -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("H", "G"), [(8, 2), (8, 1), (4, 4), (6, 3)])
def test_grouped_heads_frame_each_head_in_its_kv_heads_colour(H, G):
    from matplotlib.colors import to_hex

    weights, tokens = _journey_weights(H, G, d=4 * H)
    fig = sharing.grouped_heads_figure(weights, tokens, G)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == H
    for h, ax in enumerate(panels):
        g = h // (H // G)
        assert ax.get_title() == f"head {h} · kv {g}"
        assert {to_hex(s.get_edgecolor()) for s in ax.spines.values()} == {sharing.GROUP_COLOURS[g]}
        drawn = np.ma.filled(ax.images[0].get_array(), np.nan)
        expected = weights[0, h].double().numpy()
        keep = ~np.isnan(drawn)
        np.testing.assert_allclose(drawn[keep], expected[keep], atol=1e-6)  # the masked future aside
    _readable(fig)


def test_grouped_heads_bad_input_is_named():
    weights, tokens = _journey_weights()
    with pytest.raises(ValueError, match="num_kv_heads must divide the 8 query heads.*got 3"):
        sharing.grouped_heads_figure(weights, tokens, 3)
    with pytest.raises(ValueError, match=r"weights must be \(H, T, S\) or \(1, H, T, S\)"):
        sharing.grouped_heads_figure(weights[0, 0], tokens, 1)
    with pytest.raises((TypeError, ValueError), match="num_kv_heads"):
        sharing.grouped_heads_figure(weights, tokens, 0)
    with pytest.raises(TypeError, match="title must be a str"):
        sharing.grouped_heads_figure(weights, tokens, 2, title=3)


def test_kv_head_of_is_llamas_order_and_expand_kv_heads_agrees():
    order = torch.arange(4)[None, :, None, None]  # four kv heads, numbered
    expanded = mha_lib.expand_kv_heads(order, 12).flatten().tolist()
    assert expanded == [sharing.kv_head_of(h, 12, 4) for h in range(12)] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    with pytest.raises(TypeError, match="kv_head must be an int >= 0"):
        sharing.group_colour(-1)


# --- the G slider ------------------------------------------------------------------------------------------------


def test_sharing_numbers_are_the_published_shapes():
    mha, gqa, mqa = (sharing.sharing_numbers(g, "llama-2-7b") for g in (32, 8, 1))
    assert mha["cache_per_token"] == 524_288 == mha_lib.DECODER_CONFIGS["llama-2-7b"].kv_cache_bytes(1)
    assert gqa["cache_per_token"] == 131_072 == mha_lib.DECODER_CONFIGS["llama-3-8b"].kv_cache_bytes(1)
    assert mqa["cache_per_token"] == 16_384
    assert gqa["projections"] == {"W_q": 4096 * 4096, "W_k": 4096 * 1024, "W_v": 4096 * 1024, "W_o": 4096 * 4096}
    assert gqa["parameters"] == sum(gqa["projections"].values()) == 41_943_040
    assert mha["parameters"] == gqa["parameters_mha"] == 4 * 4096**2


def test_sharing_numbers_match_a_built_layer():
    config = mha_lib.sizes.DecoderAttention(n_layers=2, num_heads=6, num_kv_heads=6, head_dim=4, d_model=20,
                                            context_length=16)
    for g in (6, 3, 2, 1):
        layer = mha_lib.MultiHeadAttention(20, 20, 16, 0.0, 6, num_kv_heads=g, head_dim=4, out_bias=False)
        assert sharing.sharing_numbers(g, config)["parameters"] == sum(p.numel() for p in layer.parameters())


@pytest.mark.parametrize("G", [32, 8, 1])
def test_sharing_figure_draws_the_chosen_g(G):
    fig = sharing.sharing_figure(G)
    strip, params, cache = fig.axes[:3]
    assert f"share {G} kv head" in strip.get_title()
    assert len(strip.patches) == 32 + G  # 32 query heads and G kv heads
    bars = [p.get_width() for p in params.patches]
    now = sharing.sharing_numbers(G)["projections"]
    assert bars[4:] == pytest.approx([now[n] / 1e6 for n in ("W_q", "W_k", "W_v", "W_o")])
    heights = {int(t.get_text()): p.get_height() for t, p in zip(cache.get_xticklabels(), cache.patches)}
    assert heights[G] == pytest.approx(sharing.sharing_numbers(G)["cache_per_token"] / 1024)
    assert f"G = {G}" in fig._suptitle.get_text()
    _readable(fig)


def test_sharing_figure_bad_input_is_named():
    with pytest.raises(ValueError, match="num_kv_heads must divide the 32 query heads.*got 5.*try one of"):
        sharing.sharing_figure(5)
    with pytest.raises(ValueError, match="config must be one of"):
        sharing.sharing_figure(8, "llama-9")
    with pytest.raises(TypeError, match="config must be a name"):
        sharing.sharing_figure(8, 7)


def test_sharing_widget_redraws_when_the_slider_moves():
    pytest.importorskip("ipywidgets")
    widget = sharing.sharing_widget(num_kv_heads=8)
    slider = widget.children[0]
    assert list(slider.options) == [1, 2, 4, 8, 16, 32] and slider.value == 8  # G grows to the right
    assert "G = 8" in widget.result._suptitle.get_text()
    slider.value = 2
    assert "G = 2" in widget.result._suptitle.get_text()
    assert widget.auto_display  # the figure goes into the output area, where the static copy finds it


# --- generation steps ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def induction_weights():
    from mha_lib.induction.model import load_run, token_labels

    model = load_run("two_layer").model
    sequence = torch.tensor([[8, 18, 3, 11, 20, 25, 8, 18, 3, 11, 20, 25]])
    with torch.no_grad():
        _, weights = model(sequence, return_weights=True)
    return weights[1][0, 2], token_labels(sequence[0])


def test_generation_steps_figure_one_new_row_per_step(induction_weights):
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    weights, labels = induction_weights
    fig = sharing.generation_steps_figure(weights, labels, prompt_length=7, steps=[7, 8, 11])
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["prompt: 7 new keys", "step 7: 7 cached keys + 1 new",
                                                 "step 8: 8 cached keys + 1 new", "step 11: 11 cached keys + 1 new"]
    for ax, rows in zip(panels, ([*range(7)], [7], [8], [11])):
        image = ax.images[0].get_array()  # (T, T, 3)
        below = rows[-1] + 1
        assert np.all(image[below:] == 1.0)  # tokens not generated yet: white
        framed = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
        assert sorted(round(p.get_y() + 0.5) for p in framed) == rows  # the rows computed at this step
        bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_fill()]
        colours = {to_hex(p.get_facecolor()): p.get_width() for p in bars}
        if rows != [*range(7)]:
            assert colours[sharing.CACHE_RGB] == rows[0]  # the cached keys: one per earlier token
            assert colours[sharing.NEW_RGB] == 1
    _readable(fig)


def test_generation_steps_figure_bad_input_is_named(induction_weights):
    weights, labels = induction_weights
    with pytest.raises(ValueError, match="steps must be query rows from prompt_length = 7 to T - 1 = 11.*\\[3\\]"):
        sharing.generation_steps_figure(weights, labels, prompt_length=7, steps=[3])
    with pytest.raises(ValueError, match="prompt_length must be at most T = 12"):
        sharing.generation_steps_figure(weights, labels, prompt_length=13, steps=[])
    with pytest.raises(ValueError, match="one label per row"):
        sharing.generation_steps_figure(weights, labels[:-1], prompt_length=7, steps=[8])
    with pytest.raises(ValueError, match="square"):
        sharing.generation_steps_figure(weights[:, :5], labels, prompt_length=7, steps=[8])


# --- the benchmark curve ---------------------------------------------------------------------------------------


RESULT = {"device": "cpu", "machine": "test CPU", "threads": 2, "torch": "x",
          "model": {"layers": 4, "parameters": 1_000},
          "points": [{"tokens": t, "no_cache_s": t * t / 1e4, "cache_s": t / 1e3, "speedup": round(t / 10, 2),
                      "same_tokens": True} for t in (64, 128, 256)]}


def test_cache_speedup_figure_draws_the_saved_numbers():
    fig = sharing.cache_speedup_figure(RESULT)
    times, speedup = fig.axes[:2]
    without, with_cache = times.get_lines()[:2]
    assert list(without.get_ydata()) == pytest.approx([p["no_cache_s"] for p in RESULT["points"]])
    assert list(with_cache.get_ydata()) == pytest.approx([p["cache_s"] for p in RESULT["points"]])
    assert list(speedup.get_lines()[0].get_ydata()) == pytest.approx([6.4, 12.8, 25.6])
    assert [t.get_text() for t in speedup.texts] == ["×6.4", "×12.8", "×25.6"]
    assert "test CPU" in fig._suptitle.get_text() and "2 threads" in fig._suptitle.get_text()
    _readable(fig)


def test_cache_speedup_figure_draws_the_fastest_round_when_asked():
    rounds = {**RESULT, "repeats": 3, "points": [
        {**p, "no_cache_samples_s": [p["no_cache_s"], p["no_cache_s"] / 2, 5.0], "cache_samples_s": [p["cache_s"]] * 3}
        for p in RESULT["points"]]}
    fig = sharing.cache_speedup_figure(rounds, statistic="fastest")
    times, speedup = fig.axes[:2]
    assert list(times.get_lines()[0].get_ydata()) == pytest.approx([p["no_cache_s"] / 2 for p in RESULT["points"]])
    assert list(speedup.get_lines()[0].get_ydata()) == pytest.approx([3.2, 6.4, 12.8])  # fastest / fastest
    assert "fastest of 3 rounds" in times.get_title()
    assert "median of 3" in sharing.cache_speedup_figure(rounds).axes[0].get_title()  # the default
    _readable(fig)
    fig = sharing.cache_speedup_figure(RESULT, statistic="fastest")  # no rounds saved: the medians
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == pytest.approx([p["no_cache_s"] for p in RESULT["points"]])
    with pytest.raises(ValueError, match="statistic must be one of"):
        sharing.cache_speedup_figure(RESULT, statistic="mean")


def test_cache_speedup_figure_reads_the_shipped_results():
    from mha_lib import results

    saved = results.load("kv_cache") if "kv_cache" in results.KINDS else {}
    if "cpu" not in saved:
        pytest.skip("no saved kv_cache benchmark yet (tests/benchmarks/kv_cache_generation.py)")
    _readable(sharing.cache_speedup_figure(saved["cpu"]))


@pytest.mark.parametrize(("bad", "error", "phrase"), [
    ([], TypeError, "result must be a dict"),
    ({"device": "cpu"}, ValueError, "result lacks"),
    ({**RESULT, "points": []}, ValueError, "non-empty list"),
    ({**RESULT, "points": [{"tokens": 4}]}, ValueError, "every point needs"),
])
def test_cache_speedup_figure_bad_input_is_named(bad, error, phrase):
    with pytest.raises(error, match=phrase):
        sharing.cache_speedup_figure(bad)


# --- what a kernel runs ----------------------------------------------------------------------------------------


def test_aten_ops_shows_which_back_end_ran_and_whether_it_copied_the_kv_heads(monkeypatch):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    q, k, v = torch.randn(1, 8, 6, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)  # H = 8, G = 2

    def grouped():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    dispatched = sharing.aten_ops(grouped)
    with sdpa_kernel(SDPBackend.MATH):
        math = sharing.aten_ops(grouped)
    assert dispatched[0] == math[0] == "aten::scaled_dot_product_attention"  # in the order of the first call
    assert len(set(math)) == len(math)  # each once
    # chapter 12's finding on a CPU: the fused kernel reads the G heads as they are, the math back-end copies them
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in dispatched
    assert "aten::repeat_interleave" not in dispatched and "aten::expand" not in dispatched
    assert "aten::_scaled_dot_product_attention_math" in math and "aten::repeat_interleave" in math
    assert "KINETO_LOG_LEVEL" not in os.environ  # silenced while it ran, then put back


def test_aten_ops_bad_input_is_named():
    with pytest.raises(TypeError, match="run must be a function of no arguments"):
        sharing.aten_ops(3)
