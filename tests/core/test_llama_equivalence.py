"""``attention_from_llama`` against transformers' own ``LlamaAttention`` (eager, float32), built offline from tiny
random configs (``mha_lib.llm.llama``: nothing downloaded).

Random configurations, 40 (``random.Random(seed)``): H, G among H's divisors (G = 1, 1 < G < H and G = H all
drawn), a hidden size divisible by H, a head width that may differ from ``hidden / H`` (H · head_dim ≠ hidden),
with and without biases, rope_theta among 10,000 / 500,000 / 1e6 / 100, batch 1-3, T 1-24. Compared:

    output   ≤ 1e-5 × max|Llama's output| (transformers' own float32 error grows with the output's size)
    weights  ≤ 1e-5
    cache    the same layer fed in uneven chunks through a KVCache equals Llama's full output (same bound)
"""

from __future__ import annotations

import random

import pytest
import torch

import mha_lib
from mha_lib import KVCache

pytest.importorskip("transformers")
from mha_lib.llm.llama import llama_forward, tiny_llama_attention  # noqa: E402


def divisors_of(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def random_config(seed: int) -> dict:
    rng = random.Random(seed)
    H = rng.choice([1, 2, 4, 6, 8])
    kv_choices = divisors_of(H)
    G = kv_choices[seed % len(kv_choices)]  # cycle through 1 .. H so that G = 1, G < H and G = H all occur
    head_dim = rng.choice([2, 4, 8, 16])
    # LlamaConfig wants hidden divisible by H; head_dim is free (H·Dh ≠ hidden too, as Gemma and Qwen3)
    hidden = H * (head_dim if rng.random() < 0.5 else rng.choice([1, 2, 3, 4, 6]))
    return dict(hidden_size=hidden, num_heads=H, num_kv_heads=G, head_dim=head_dim,
                rope_theta=rng.choice([10000.0, 500000.0, 1e6, 100.0]), attention_bias=rng.random() < 0.5,
                max_positions=32, seed=seed)


def close_to(actual: torch.Tensor, expected: torch.Tensor, relative: float = 1e-5) -> float:
    bound = relative * expected.abs().max().item()
    difference = (actual - expected).abs().max().item()
    assert difference <= bound, f"max |difference| {difference:.3g} > {bound:.3g}"
    return difference


def test_the_configs_cover_mqa_gqa_mha_biases_and_free_head_widths():
    configs = [random_config(seed) for seed in range(40)]
    kinds = {("mqa" if c["num_kv_heads"] == 1 < c["num_heads"] else
              "mha" if c["num_kv_heads"] == c["num_heads"] else "gqa") for c in configs}
    assert kinds == {"mqa", "gqa", "mha"}
    assert {c["attention_bias"] for c in configs} == {True, False}
    assert any(c["num_heads"] * c["head_dim"] != c["hidden_size"] for c in configs)
    assert {c["rope_theta"] for c in configs} >= {10000.0, 500000.0}


@pytest.mark.parametrize("seed", range(40))
def test_attention_from_llama_equals_llama_attention(seed):
    config_args = random_config(seed)
    reference, config = tiny_llama_attention(**config_args)
    layer = mha_lib.attention_from_llama(reference, config)
    assert (layer.num_heads, layer.num_kv_heads, layer.head_dim, layer.rope_theta) == (
        config_args["num_heads"], config_args["num_kv_heads"], config_args["head_dim"], config_args["rope_theta"])
    assert (layer.W_query.bias is not None) == (layer.out_proj.bias is not None) == config_args["attention_bias"]
    assert not layer.training
    rng = random.Random(seed)
    B, T = rng.randint(1, 3), rng.randint(1, 24)
    x = torch.randn(B, T, config.hidden_size, generator=torch.Generator().manual_seed(seed))
    expected, expected_weights = llama_forward(reference, config, x)
    with torch.no_grad():
        out, weights = layer(x, return_weights=True)
        close_to(out, expected)
        torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-5)
        # the same layer, fed in uneven chunks through a cache, gives Llama's full output too
        cache, pieces, start = KVCache(), [], 0
        while start < T:
            n = min(rng.randint(1, 6), T - start)
            pieces.append(layer(x[:, start:start + n], kv_cache=cache))
            start += n
        close_to(torch.cat(pieces, dim=1), expected)
        assert cache.nbytes == B * config_args["num_kv_heads"] * T * config_args["head_dim"] * 2 * 4
        # and the sdpa kernel
        sdpa = mha_lib.MultiHeadAttention(
            config.hidden_size, config.hidden_size, 32, 0.0, layer.num_heads, layer.W_query.bias is not None,
            kernel="sdpa", num_kv_heads=layer.num_kv_heads, head_dim=layer.head_dim, rope_theta=layer.rope_theta,
            out_bias=layer.out_proj.bias is not None)
        sdpa.load_state_dict(layer.state_dict())
        close_to(sdpa.eval()(x), expected)


def test_attention_from_llama_keeps_the_weights_and_the_mode():
    reference, config = tiny_llama_attention(hidden_size=32, num_heads=4, num_kv_heads=2, attention_bias=True)
    layer = mha_lib.attention_from_llama(reference, config)
    for ours, theirs in (("W_query", "q_proj"), ("W_key", "k_proj"), ("W_value", "v_proj"), ("out_proj", "o_proj")):
        assert torch.equal(getattr(layer, ours).weight, getattr(reference, theirs).weight)
    assert layer.W_key.weight.shape == (2 * 8, 32)
    assert not layer.training
    assert mha_lib.attention_from_llama(reference.train(), config).training


def test_a_rope_type_other_than_default_is_refused():
    reference, config = tiny_llama_attention(hidden_size=16, num_heads=2, num_kv_heads=1)
    for rope_type in ("linear", "llama3", "yarn"):
        config.rope_parameters = {"rope_type": rope_type, "rope_theta": 10000.0, "factor": 2.0}
        with pytest.raises(ValueError, match=rf"attention_from_llama supports Llama's default RoPE only, got "
                                             rf"rope_type='{rope_type}'"):
            mha_lib.attention_from_llama(reference, config)


def test_attention_from_llama_refuses_what_is_not_llama():
    reference, config = tiny_llama_attention(hidden_size=16, num_heads=2, num_kv_heads=1)
    with pytest.raises(TypeError, match=r"llama_attention must be a transformers LlamaAttention .*got Linear "
                                        r"without q_proj"):
        mha_lib.attention_from_llama(torch.nn.Linear(2, 2), config)
    with pytest.raises(TypeError, match=r"config must be a transformers LlamaConfig, got dict without hidden_size"):
        mha_lib.attention_from_llama(reference, {})
    _, other = tiny_llama_attention(hidden_size=16, num_heads=2, num_kv_heads=2)
    with pytest.raises(ValueError, match=r"llama_attention.k_proj.weight has shape \(8, 16\) but config implies "
                                         r"\(16, 16\)"):
        mha_lib.attention_from_llama(reference, other)


def test_a_config_without_rope_theta_is_refused_not_turned_into_a_layer_without_positions():
    from types import SimpleNamespace

    reference, config = tiny_llama_attention(hidden_size=16, num_heads=2, num_kv_heads=1)
    sizes = dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    message = (r"config must be a transformers LlamaConfig, got SimpleNamespace without rope_theta \(nor "
               r"rope_parameters\['rope_theta'\]\): Llama rotates q and k by RoPE")
    for extra in ({}, {"rope_parameters": None}, {"rope_parameters": {"rope_type": "default"}}, {"rope_theta": None}):
        with pytest.raises(TypeError, match=message):
            mha_lib.attention_from_llama(reference, SimpleNamespace(**sizes, **extra))
    # every size and a theta, as transformers 4 kept it (an attribute) or 5 (in rope_parameters): a rotary layer
    for extra in ({"rope_theta": 500_000.0}, {"rope_parameters": {"rope_type": "default", "rope_theta": 500_000.0}}):
        layer = mha_lib.attention_from_llama(reference, SimpleNamespace(**sizes, **extra))
        assert layer.rope_theta == 500_000.0
    with pytest.raises(TypeError, match=r"config.rope_parameters must be a dict \(rope_type, rope_theta, ...\), got "
                                        r"list"):
        mha_lib.attention_from_llama(reference, SimpleNamespace(**sizes, rope_parameters=[10_000.0]))
