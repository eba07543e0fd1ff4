"""Chapter 16's figures, widgets and live training (mha_lib/llm/linear_state.py): readable on a projector, widgets
that redraw when a slider moves, numbers computed from the data, and clear errors for bad input."""

from __future__ import annotations

import pytest
import torch

import mha_lib
from mha_lib.llm import linear_state as ls
from figure_checks import _check_readable, _check_size  # tests/figure_checks.py: the projector rules


def _readable(fig):
    _check_size(fig)
    _check_readable(fig)


def test_implicit_weights_figure_draws_rows_that_sum_to_one():
    torch.manual_seed(0)
    q, k = torch.randn(2, 10, 8).unbind(0)
    fig = ls.implicit_weights_figure(q, k)
    _readable(fig)
    linear = fig.axes[1].images[0].get_array()
    assert abs(float(linear.sum(axis=-1).mean()) - 1.0) < 1e-5
    with pytest.raises(ValueError, match="same shape"):
        ls.implicit_weights_figure(q, k[:, :4])


def test_store_pairs_sum_and_delta_as_the_maths_says():
    keys = torch.eye(3, dtype=torch.float64)
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=torch.float64)
    for rule in ls.WRITES:  # orthonormal keys: both writes read back exactly
        assert torch.allclose(keys @ ls.store_pairs(keys, values, rule), values)
    again = torch.cat([keys[:1], keys[:1]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    assert torch.allclose(ls.store_pairs(*again, "sum")[0], torch.tensor([1.0, 1.0], dtype=torch.float64))
    assert torch.allclose(ls.store_pairs(*again, "delta")[0], torch.tensor([0.0, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="rule must be one of"):
        ls.store_pairs(keys, values, "add")


def test_recall_errors_the_delta_rule_reads_its_last_pair_exactly_and_the_curve_matches():
    errors = ls.recall_errors(24)
    assert errors["delta"][-1] < 1e-12 and errors["sum"][-1] > 0.1
    curve = ls._mean_errors(24, 16, 16)
    assert curve["sum"][23] == pytest.approx(float(errors["sum"].mean()))
    assert curve["delta"][3] == pytest.approx(float(ls.recall_errors(4)["delta"].mean()))


def test_state_filling_figure_and_widget_redraw():
    _readable(ls.state_filling_figure(24))
    widget = ls.state_filling_widget(n=8)
    assert widget.result.axes[0].get_title() == "8 pairs in a 16 × 16 state"
    widget.children[0].value = 30
    assert widget.result.axes[0].get_title() == "30 pairs in a 16 × 16 state"
    _readable(widget.result)
    with pytest.raises(ValueError):
        ls.state_filling_figure(0)


def test_delta_steps_overwrite_a_repeated_key_and_the_sum_piles_it_up():
    runs = ls.delta_steps(1.0)
    fourth = ls.DELTA_STEPS[3]
    assert fourth[0] == 0  # write 4 stores a new value under key 0
    assert torch.allclose(runs["delta"][3]["after"], torch.tensor(fourth[1], dtype=torch.float64))
    assert runs["sum"][3]["after"][0] > 0.5  # the old value is still there
    assert runs["sum"][-1]["error"] > runs["delta"][-1]["error"]
    with pytest.raises(ValueError, match="beta"):
        ls.delta_steps(1.5)


def test_delta_step_figure_and_widget_redraw_when_the_write_moves():
    _readable(ls.delta_step_figure(4))
    widget = ls.delta_step_widget()
    titles = lambda: [ax.get_title() for ax in widget.result.axes]
    assert "write 1: key 0 (β = 1)" in titles()
    widget.children[0].value = 4
    assert "write 4: key 0 (β = 1)" in titles()
    widget.children[1].value = 0.5
    assert "write 4: key 0 (β = 0.5)" in titles()
    _readable(widget.result)


def test_chunk_figure_is_readable_and_refuses_a_ragged_grid():
    fig = ls.chunk_figure(16, 4)
    _readable(fig)
    assert "4 chunks of C = 4" in fig.axes[1].get_title()
    with pytest.raises(ValueError, match="multiple of C"):
        ls.chunk_figure(10, 4)


def test_time_forms_measures_three_forms_and_the_figure_draws_them():
    times = ls.time_forms((64, 128), repeats=1)
    assert times["lengths"] == [64, 128] and all(len(times[k]) == 2 for k in ("recurrent", "chunked", "softmax"))
    _readable(ls.timing_figure(times))


def test_memory_figure_and_generation_memory():
    memory = ls.generation_memory((128, 256), chunk=64)
    assert memory["softmax"] == [2 * 4 * 16 * 128 * 4 * 1, 2 * 4 * 16 * 256 * 4]  # K and V, 4 heads of 16, float32
    assert memory["gated_delta"][0] == memory["gated_delta"][1] == 6400
    qwen = mha_lib.HYBRID_CONFIGS["qwen3-next-80b-a3b"]
    fig = ls.memory_figure([4096, 32768], {"hybrid": [qwen.kv_cache_bytes(t) for t in (4096, 32768)],
                                           "full": [1, 2]})
    _readable(fig)
    with pytest.raises(ValueError, match="2 contexts"):
        ls.memory_figure([1, 2], {"a": [1]})


def test_train_mixers_trains_each_mixer_and_seed_and_reports_rows():
    results = ls.train_mixers(("softmax", "delta"), seeds=(0, 1), steps=2)
    assert list(results) == ["softmax", "delta"] and [r["seed"] for r in results["delta"]] == [0, 1]
    assert all(0 <= r["accuracy"] <= 1 for runs in results.values() for r in runs)
    rows = ls.recall_rows(results)
    assert rows[0][0] == "softmax" and len(rows[0]) == 4
    with pytest.raises(ValueError, match="mixers"):
        ls.train_mixers(("attention",))
    assert ls.recall_steps() == ls.TEST_RECALL_STEPS  # under a test: a short run


def test_tiny_qwen3_next_deltanet_is_reproduced():
    pytest.importorskip("transformers")
    module, config = ls.tiny_qwen3_next_deltanet(0, grouped=True)
    layer = mha_lib.attention_from_transformers(module, config)
    x = torch.randn(1, 20, config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = module(x)
        assert (layer(x) - expected).abs().max() <= 1e-5 * expected.abs().max()


def test_tiny_qwen3_next_deltanet_takes_a_config_and_names_what_it_refuses():
    pytest.importorskip("transformers")
    _module, config = ls.tiny_qwen3_next_deltanet(0, grouped=True)
    module, same = ls.tiny_qwen3_next_deltanet(3, config=config)
    assert same is config and module.num_v_heads == 2 * module.num_k_heads
    with pytest.raises(ValueError, match=r"grouped: .*got grouped=True with config="):
        ls.tiny_qwen3_next_deltanet(0, grouped=True, config=config)
    with pytest.raises(TypeError, match="config: expected a transformers Qwen3NextConfig, got dict"):
        ls.tiny_qwen3_next_deltanet(0, config={})
