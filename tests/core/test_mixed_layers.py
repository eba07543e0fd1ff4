"""Decoders whose layers mix a sliding window and full attention (chapter 15): ``kv_cache_bytes(..., layer_types=)``,
``interleaved_layer_types`` and the published configs of ``MIXED_WINDOW_CONFIGS``.

    bytes      a sliding layer holds min(tokens, W), a full one every token: the sum over the layers, checked against
               the formula, against layers built with those windows and their KV caches, and with transformers'
               spellings of the kinds
    patterns   transformers' rule (full when (i + 1) % n == 0): Gemma 3's 5 : 1, OLMo 3's 3 : 1, gpt-oss's 1 : 1
    configs    the published shapes, and the table a chapter prints from them
    bad input  each error names the argument, what it got and what it expected
"""

from __future__ import annotations

import random
import re

import pytest
import torch

import mha_lib
from mha_lib import KVCache, MultiHeadAttention, interleaved_layer_types, kv_cache_bytes


def test_interleaved_layer_types_follow_transformers_rule():
    assert interleaved_layer_types(6, 6) == ("sliding",) * 5 + ("full",)
    assert interleaved_layer_types(8, 4) == ("sliding", "sliding", "sliding", "full") * 2
    assert interleaved_layer_types(4, 2) == ("sliding", "full", "sliding", "full")
    assert interleaved_layer_types(3, 1) == ("full",) * 3
    pytest.importorskip("transformers")
    from transformers import Gemma3TextConfig, GptOssConfig, Olmo3Config

    for config, every in ((Gemma3TextConfig(num_hidden_layers=14), 6), (Olmo3Config(num_hidden_layers=9), 4),
                          (GptOssConfig(num_hidden_layers=5), 2)):
        ours = interleaved_layer_types(config.num_hidden_layers, every)
        assert [kind + "_attention" for kind in ours] == list(config.layer_types)


@pytest.mark.parametrize("seed", range(12))
def test_kv_cache_bytes_adds_each_layers_tokens(seed):
    rng = random.Random(seed)
    L, G, Dh, W = rng.randint(1, 8), rng.randint(1, 4), rng.choice([2, 8, 64]), rng.randint(1, 20)
    kinds = [rng.choice(["sliding", "full"]) for _ in range(L)]
    tokens, b, batch = rng.randint(0, 50), rng.choice([1, 2, 4]), rng.randint(1, 3)
    expected = sum(2 * G * Dh * (tokens if kind == "full" else min(tokens, W)) * b * batch for kind in kinds)
    assert kv_cache_bytes(L, G, Dh, tokens, window=W, layer_types=kinds, bytes_per_element=b,
                          batch_size=batch) == expected
    spelled = [kind + "_attention" for kind in kinds]  # transformers' config.layer_types, pasted as they are
    assert kv_cache_bytes(L, G, Dh, tokens, window=W, layer_types=spelled, bytes_per_element=b,
                          batch_size=batch) == expected
    # every layer sliding is the window of chapter 12; every layer full is no window
    assert kv_cache_bytes(L, G, Dh, tokens, window=W, layer_types=["sliding"] * L) == kv_cache_bytes(
        L, G, Dh, tokens, window=W)
    assert kv_cache_bytes(L, G, Dh, tokens, window=W, layer_types=("full",) * L) == kv_cache_bytes(L, G, Dh, tokens)
    # latent attention's cache follows the same per-layer rule
    assert kv_cache_bytes(L, tokens=tokens, kv_lora_rank=6, qk_rope_head_dim=2, window=W, layer_types=kinds) == sum(
        8 * (tokens if kind == "full" else min(tokens, W)) * 2 for kind in kinds)


def test_kv_cache_bytes_is_what_layers_with_those_windows_hold_while_they_read():
    torch.manual_seed(0)
    kinds, W, G, Dh = ("sliding", "full", "sliding", "sliding"), 3, 2, 4
    layers = [MultiHeadAttention(16, 16, 32, 0.0, 4, num_kv_heads=G, window=W if kind == "sliding" else None)
              for kind in kinds]
    caches = [KVCache() for _ in layers]
    x = torch.randn(1, 9, 16)
    for t in range(9):
        held = 0
        for layer, cache in zip(layers, caches):
            layer(x[:, t:t + 1], kv_cache=cache)
            held += cache.nbytes + (2 * G * Dh * 4 if layer.window is not None and t + 1 >= W else 0)
        # a sliding layer has dropped to W - 1 tokens after the step; while reading it held W (the current one too)
        assert held == kv_cache_bytes(4, G, Dh, t + 1, window=W, layer_types=kinds, bytes_per_element=4)


def test_the_published_mixed_configs_and_their_table():
    configs = mha_lib.MIXED_WINDOW_CONFIGS
    assert list(configs) == ["gemma-3-27b", "gpt-oss-120b", "gpt-oss-20b", "olmo-3-7b"]
    gemma, oss, olmo = configs["gemma-3-27b"], configs["gpt-oss-120b"], configs["olmo-3-7b"]
    assert (gemma.n_layers, gemma.num_kv_heads, gemma.head_dim, gemma.window) == (62, 16, 128, 1024)
    assert gemma.layer_types.count("full") == 10 and gemma.layer_types[:6] == ("sliding",) * 5 + ("full",)
    assert (oss.n_layers, oss.num_kv_heads, oss.head_dim, oss.window) == (36, 8, 64, 128)
    assert oss.layer_types.count("full") == 18 and oss.layer_types[:2] == ("sliding", "full")
    assert (olmo.n_layers, olmo.num_kv_heads, olmo.head_dim, olmo.window) == (32, 32, 128, 4096)
    assert olmo.layer_types.count("full") == 8
    for name, c in configs.items():
        assert len(c.layer_types) == c.n_layers
        full = c._replace(window=None, layer_types=None)  # the same model with every layer full
        at_context = c.kv_cache_bytes(c.context_length)
        assert at_context < full.kv_cache_bytes(c.context_length)
        # past the window only the full layers grow: one more token costs what the full layers add
        per_token = 2 * c.num_kv_heads * c.head_dim * 2
        grow = c.kv_cache_bytes(c.window + 1) - c.kv_cache_bytes(c.window)
        assert grow == c.layer_types.count("full") * per_token, name
    # gpt-oss at 128K tokens: half its layers hold 128 tokens, so the cache is about half of the all-full one
    ratio = oss.kv_cache_bytes(131072) / oss._replace(window=None, layer_types=None).kv_cache_bytes(131072)
    assert 0.5 < ratio < 0.501
    assert mha_lib.DECODER_CONFIGS["mistral-7b"].layer_types is None  # chapters 12-14's shapes keep one rule


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: kv_cache_bytes(2, 1, 4, 5, window=3, layer_types="sliding"), TypeError,
         "layer_types must be a list of 'sliding' / 'full' / 'linear', one per layer, got str 'sliding'"),
        (lambda: kv_cache_bytes(2, 1, 4, 5, window=3, layer_types=["sliding"]), ValueError,
         "layer_types must name each of the n_layers = 2 layers, got 1 entries"),
        (lambda: kv_cache_bytes(2, 1, 4, 5, window=3, layer_types=["sliding", "global"]), ValueError,
         "layer_types entries must be 'sliding', 'full' or 'linear' (or transformers' 'sliding_attention' / "
         "'full_attention' / 'linear_attention'), got 'global'"),
        (lambda: kv_cache_bytes(2, 1, 4, 5, layer_types=["sliding", "full"]), ValueError,
         "layer_types has 1 sliding layers but window is None"),
        (lambda: kv_cache_bytes(2, 1, 4, 5, window=0, layer_types=["sliding", "full"]), ValueError,
         "window must be a positive int (>= 1), got 0"),
        (lambda: interleaved_layer_types(0, 2), ValueError, "n_layers must be a positive int (>= 1), got 0"),
        (lambda: interleaved_layer_types(4, 2.0), TypeError, "full_every must be a positive int, got float 2.0"),
    ],
)
def test_bad_input(call, error, text):
    with pytest.raises(error, match=re.escape(text)):
        call()


@pytest.mark.parametrize("seed", range(12))
def test_attention_parameter_count_counts_chapter_15s_controls(seed):
    rng = random.Random(seed)
    H = rng.choice([1, 2, 4])
    G = rng.choice([g for g in (1, 2, 4) if H % g == 0])
    Dh, d, bias = rng.choice([2, 4, 8]), rng.choice([4, 8, 12]), rng.random() < 0.5
    controls = dict(qk_norm=rng.choice([None, "head", "projection", "l2"]),
                    gate=rng.choice([None, "elementwise", "head"]),
                    sinks=rng.random() < 0.5)
    layer = MultiHeadAttention(d, d, 8, 0.0, H, bias, num_kv_heads=G, head_dim=Dh, out_bias=bias, **controls)
    assert mha_lib.attention_parameter_count(d, bias, num_heads=H, num_kv_heads=G, head_dim=Dh, **controls) == sum(
        p.numel() for p in layer.parameters())


def test_attention_parameter_count_refuses_unknown_controls():
    with pytest.raises(ValueError, match=re.escape("gate must be None or one of ['elementwise', 'head'], got 'x'")):
        mha_lib.attention_parameter_count(8, num_heads=2, gate="x")
    with pytest.raises(ValueError, match=re.escape("num_heads is needed with num_kv_heads, head_dim, qk_norm, gate or "
                                                   "sinks")):
        mha_lib.attention_parameter_count(8, sinks=True)
    with pytest.raises(TypeError, match=re.escape("sinks must be True or False, got int 1")):
        mha_lib.attention_parameter_count(8, num_heads=2, sinks=1)
