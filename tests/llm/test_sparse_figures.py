"""Chapter 17's figures, widgets and measurements (mha_lib/llm/sparse_figures.py): readable on a projector, widgets
that redraw when the slider moves, numbers computed from the layer and the configs, and clear errors for bad input."""

from __future__ import annotations

import os

import pytest
import torch

import mha_lib
from mha_lib.llm import sparse_figures as sf
from figure_checks import _check_readable, _check_size  # tests/figure_checks.py: the projector rules


def _readable(fig):
    _check_size(fig)
    _check_readable(fig)


def test_topk_mass_of_one_hot_and_uniform_rows():
    one_hot = torch.eye(4)[None, None]  # (1, 1, 4, 4): each query on itself
    assert torch.allclose(sf.topk_mass(one_hot, [1, 2]), torch.tensor([[1.0, 1.0]]))
    uniform = torch.full((2, 3, 5, 10), 0.1)
    assert torch.allclose(sf.topk_mass(uniform, [1, 5, 20], first_query=2), torch.tensor([[0.1, 0.5, 1.0]] * 2))
    with pytest.raises(ValueError):
        sf.topk_mass(uniform, [0])


def test_topk_mass_shared_picks_one_set_for_all_heads():
    weights = torch.zeros(1, 2, 1, 4)
    weights[0, 0, 0] = torch.tensor([0.6, 0.4, 0.0, 0.0])  # head 0 wants key 0, head 1 key 3
    weights[0, 1, 0] = torch.tensor([0.0, 0.3, 0.0, 0.7])
    assert torch.allclose(sf.topk_mass(weights, [1, 2]), torch.tensor([[0.65, 1.0]]))
    assert torch.allclose(sf.topk_mass(weights, [1, 2], shared=True), torch.tensor([[0.35, 0.7]]))
    random = torch.softmax(torch.randn(3, 4, 6, 6), -1)
    assert (sf.topk_mass(random, [1, 2, 3], shared=True) <= sf.topk_mass(random, [1, 2, 3]) + 1e-6).all()


def test_mass_figure_is_readable():
    mass = sf.topk_mass(torch.softmax(torch.randn(3, 2, 8, 8), -1), [1, 2, 4, 8])
    _readable(sf.mass_figure(mass, [1, 2, 4, 8], visible=8))


def test_indexer_costs_of_deepseek_v32():
    costs = sf.indexer_costs()
    assert costs["attention_macs"] == 128 * (576 + 512) and costs["indexer_macs"] == 64 * 128 + 64
    assert (costs["latent_numbers"], costs["indexer_numbers"]) == (576, 128)
    assert costs["dense_read"] == 61 * 131072 * 576 * 2
    assert costs["sparse_read"] == 61 * (131072 * 128 + 2048 * 576) * 2


def test_selection_grid_and_figure_with_a_cache_agree():
    layer, x = sf.demo_layer(4), sf.demo_input(16)
    with torch.no_grad():
        grid = sf.selection_grid(layer.select(x)[0], 16)
    assert grid.sum(-1).tolist() == [min(t + 1, 4) for t in range(16)]
    assert not grid.triu(1).any()  # no future key
    fig = sf.selection_figure(layer, x, past=10)
    _readable(fig)
    assert len(fig.axes) == 2 and "after a cache of 10" in fig.axes[1].get_title()
    with pytest.raises(ValueError):
        sf.selection_figure(layer, x, past=16)


def test_sparse_errors_fall_to_zero_at_k_equal_t_and_match_the_layer():
    layer, x = sf.demo_layer(4), sf.demo_input(12)
    errors = sf.sparse_errors(layer, x, [1, 4, 12])
    assert errors[-1] < 1e-6 and errors[0] > 0.01
    weights, values = sf._dense_parts(layer, x)
    with torch.no_grad():
        keep = torch.stack([sf.selection_grid(rows, 12) for rows in layer.select(x)])
        assert torch.allclose(sf._output_reading(layer, weights, values, keep), layer(x, sparse=True), atol=1e-6)
    assert layer.index_topk == 4  # restored


def test_read_numbers_count_indexer_keys_and_k_latents():
    layer = sf.demo_layer(4)
    assert sf.read_numbers(layer, 16, 4) == {"dense": 16 * 20, "sparse": 16 * 8 + 4 * 20}


def test_selection_widget_redraws_when_k_moves():
    widget = sf.selection_widget(k=4)
    assert widget.result.axes[0].get_title() == "k = 4: the keys each query reads"
    widget.children[0].value = 9
    assert widget.result.axes[0].get_title() == "k = 9: the keys each query reads"
    _readable(widget.result)
    with pytest.raises(ValueError):
        sf.selection_widget(k=0)


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc to reset the peak RSS")
def test_measure_paths_in_fresh_processes_and_the_figure():
    result = sf.measure_paths([512], k=32, paths=("masked", "gathered"))
    assert [p["path"] for p in result["points"]] == ["masked", "gathered"]
    assert all(p["seconds"] > 0 and p["peak_mb"] >= 0 for p in result["points"])
    rows = sf.paths_rows(result)
    assert rows[0][:2] == ["512", "1"] and len(rows[0]) == len(sf.paths_header(result)) == 6
    _readable(sf.paths_figure(result))
    with pytest.raises(ValueError, match="paths must be"):
        sf.measure_paths([512], paths=("sparse",))


def test_paths_figure_of_a_saved_result():
    points = [{"path": p, "T": T, "seconds": 0.001 * T, "peak_mb": m * T / 1024} for T in (1024, 2048)
              for p, m in (("dense", 40), ("masked", 45), ("gathered", 1))]
    _readable(sf.paths_figure({"k": 256, "threads": 1, "lengths": [1024, 2048], "points": points}))


def test_the_tiny_deepseek_v32_is_reproduced_with_its_indices():
    pytest.importorskip("transformers")
    module, config = sf.tiny_deepseek_v32(seed=1)
    ours = mha_lib.attention_from_transformers(module, config)
    x = torch.randn(1, 9, config.hidden_size, generator=torch.Generator().manual_seed(1))
    expected, indices = sf.deepseek_v32_reference(module, config, x)
    with torch.no_grad():
        assert (ours(x, sparse=True) - expected).abs().max() <= 1e-5 * expected.abs().max()
        picked = ours.select(x)
    for t in range(9):
        assert set(picked[0, t][picked[0, t] >= 0].tolist()) == set(indices[0, t][indices[0, t] <= t].tolist())


def test_tiny_deepseek_v32_takes_a_config_and_names_what_it_refuses():
    pytest.importorskip("transformers")
    _module, config = sf.tiny_deepseek_v32(seed=0, index_topk=3)
    module, same = sf.tiny_deepseek_v32(seed=2, config=config)
    assert same is config and module.indexer.index_topk == 3 and config._attn_implementation == "eager"
    with pytest.raises(TypeError, match="config: expected a transformers DeepseekV32Config, got SimpleNamespace"):
        from types import SimpleNamespace
        sf.tiny_deepseek_v32(config=SimpleNamespace())


def test_v4_cache_numbers_from_a_config():
    from types import SimpleNamespace

    config = SimpleNamespace(sliding_window=8, head_dim=32, index_head_dim=16,
                             compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
                             layer_types=["compressed_sparse_attention", "heavily_compressed_attention"] * 2)
    found = sf.v4_cache_numbers(config)
    assert found["window"] == 256
    assert found["compressed_sparse_attention"] == {"layers": 2, "rate": 4, "per_token": 12.0}
    assert found["heavily_compressed_attention"] == {"layers": 2, "rate": 8, "per_token": 4.0}


@pytest.mark.parametrize("kind", ["csa", "hca"])
def test_v4_reads_figure_shows_the_window_and_the_entries_each_query_reads(kind):
    pytest.importorskip("transformers")
    from mha_lib.llm import deepseek_v4

    module, config = deepseek_v4.tiny_deepseek_v4(kind, seed=0)
    layer = mha_lib.attention_from_transformers(module, config)
    T, m, W, k = 24, layer.compress_rate, layer.sliding_window, layer.index_topk
    x = torch.randn(1, T, config.hidden_size, generator=torch.Generator().manual_seed(0))
    fig = sf.v4_reads_figure(layer, x)
    _readable(fig)
    tokens, entries = (torch.as_tensor(ax.images[0].get_array()) for ax in fig.axes[:2])
    t = torch.arange(T)[:, None]
    assert torch.equal(tokens == 0, (torch.arange(T)[None] <= t) & (torch.arange(T)[None] > t - W))  # the window
    assert torch.equal(tokens == 2, torch.arange(T)[None] > t)  # the future
    complete = (t + 1) // m  # entries whose window is complete at t
    assert torch.equal((entries != 2).sum(1), complete[:, 0])
    read = (entries == 0).sum(1)
    expected = torch.clamp(complete[:, 0], max=k) if kind == "csa" else complete[:, 0]
    assert torch.equal(read, expected)
    if kind == "csa":  # the entries read are the ones select picks
        picked = layer.select(x)[0]
        assert torch.equal(sf.selection_grid(picked, entries.shape[1]), entries == 0)


def test_v4_reads_figure_refuses_a_layer_without_entries():
    pytest.importorskip("transformers")
    from mha_lib.llm import deepseek_v4

    module, config = deepseek_v4.tiny_deepseek_v4("sliding", seed=0)
    layer = mha_lib.attention_from_transformers(module, config)
    with pytest.raises(ValueError, match=r"layer must be a compressed CompressedAttention .*compress_rate=None"):
        sf.v4_reads_figure(layer, torch.zeros(1, 8, config.hidden_size))

