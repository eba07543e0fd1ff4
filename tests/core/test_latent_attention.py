"""``MultiHeadLatentAttention`` and ``attention_from_deepseek`` (chapter 14) against transformers' own eager
``DeepseekV3Attention``, built offline from tiny random configs (``mha_lib.llm.deepseek``: nothing downloaded).

Random configurations, 32 (``random.Random(seed)``): 1 to 8 heads, q_lora_rank None or set, rope_interleave
True/False, attention_bias, default RoPE or YaRN (factor, mscale, mscale_all_dim, 0 included), batch 1-3, T 1-16.
Compared, float32:

    output     ≤ 1e-5 × max|DeepSeek's output|; weights ≤ 1e-5; the absorbed form equals the standard one
    cache      token by token and in uneven chunks through a KVCache, equal to the full forward; after every chunk
               the cache holds exactly two tensors, the latent (B, S, r) and the rotary key (B, S, dr), and
               cache.nbytes == B × S × (r + dr) × 4
    kernels    explicit, sdpa and flash give the same output
    the conversion matters   skipping the interleave permutation, or ignoring YaRN, is caught
    YaRN       YaRN.speeds and rope_gain equal transformers' _compute_yarn_parameters
    sizes      latent_attention_parameter_count == the parameters of our layer and of DeepSeek's
    bad input  each ValueError / TypeError names the argument, what it got and what it expected
"""

from __future__ import annotations

import random
import re

import pytest
import torch

import mha_lib
from mha_lib import KVCache, MultiHeadLatentAttention, YaRN, conversions
from mha_lib.sizes import latent_attention_parameter_count

pytest.importorskip("transformers")
from mha_lib.llm.deepseek import deepseek_forward, tiny_deepseek_attention  # noqa: E402

YARNS = [
    None,
    YaRN(4.0, 32),  # mscale 1, mscale_all_dim 0: rope gain from the factor alone, softmax scale unchanged
    YaRN(40.0, 16, mscale=1.0, mscale_all_dim=1.0),  # DeepSeek-V3's own mscales (rope gain 1)
    YaRN(8.0, 24, beta_fast=16.0, beta_slow=2.0, mscale=0.707, mscale_all_dim=0.9),
    YaRN(2.5, 40, mscale=1.2, mscale_all_dim=0.0, truncate=False),
    YaRN(16.0, 12, mscale=0.0, mscale_all_dim=1.3),  # mscale 0: rope gain from the factor, the softmax's from 1.3
]


def random_config(seed: int) -> dict:
    rng = random.Random(seed)
    num_heads = rng.randint(1, 8)
    return dict(
        hidden_size=rng.choice([16, 24, 32, 48]), num_heads=num_heads,
        q_lora_rank=None if seed % 2 else rng.choice([6, 12, 24]), kv_lora_rank=rng.choice([4, 8, 16]),
        qk_nope_head_dim=rng.choice([2, 4, 6, 12]), qk_rope_head_dim=rng.choice([2, 4, 8]),
        v_head_dim=rng.choice([3, 4, 10]), rope_interleave=seed % 4 < 2, attention_bias=rng.random() < 0.5,
        rope_theta=rng.choice([10000.0, 500.0, 1e6]), yarn=YARNS[seed % len(YARNS)], max_positions=64, seed=seed)


def close_to(actual: torch.Tensor, expected: torch.Tensor, relative: float = 1e-5) -> float:
    bound = relative * expected.abs().max().item()
    difference = (actual - expected).abs().max().item()
    assert difference <= bound, f"max |difference| {difference:.3g} > {bound:.3g}"
    return difference


def twin(layer: MultiHeadLatentAttention, **changes) -> MultiHeadLatentAttention:
    """The same layer (same arguments and weights) with some arguments changed, e.g. the kernel."""
    args = dict(
        kv_lora_rank=layer.kv_lora_rank, qk_nope_head_dim=layer.qk_nope_head_dim,
        qk_rope_head_dim=layer.qk_rope_head_dim, v_head_dim=layer.v_head_dim, q_lora_rank=layer.q_lora_rank,
        context_length=layer.context_length, rope_theta=layer.rope_theta, yarn=layer.yarn,
        bias=layer.kv_down.bias is not None, norm_eps=layer.kv_norm.eps, kernel=layer.kernel)
    other = MultiHeadLatentAttention(layer.d_model, layer.num_heads, **{**args, **changes})
    other.load_state_dict(layer.state_dict())
    return other.train(layer.training)


def numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_the_configs_cover_what_they_claim():
    configs = [random_config(seed) for seed in range(32)]
    assert {c["num_heads"] for c in configs} >= {1, 8} and len({c["num_heads"] for c in configs}) >= 6
    assert {c["q_lora_rank"] is None for c in configs} == {True, False}
    assert {(c["rope_interleave"], c["yarn"] is None) for c in configs} == {(a, b) for a in (1, 0) for b in (1, 0)}
    assert {c["attention_bias"] for c in configs} == {True, False}
    assert {c["yarn"] for c in configs} == set(YARNS)


# --- equal to DeepSeek's eager attention -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(32))
def test_attention_from_deepseek_equals_deepseek_v3_attention(seed):
    config_args = random_config(seed)
    reference, config = tiny_deepseek_attention(**config_args)
    layer = mha_lib.attention_from_deepseek(reference, config)
    assert isinstance(layer, MultiHeadLatentAttention) and not layer.training
    assert layer.yarn == config_args["yarn"]
    rng = random.Random(seed)
    B, T = rng.randint(1, 3), rng.randint(1, 16)
    x = torch.randn(B, T, config.hidden_size, generator=torch.Generator().manual_seed(seed))
    expected, expected_weights = deepseek_forward(reference, config, x)
    with torch.no_grad():
        out, weights = layer(x, return_weights=True)
        close_to(out, expected)
        torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-5)
        close_to(layer(x, absorbed=True), expected)  # W_uk folded into the query, W_uv after the softmax
        for kernel in ("sdpa", "flash"):
            close_to(twin(layer, kernel=kernel)(x), expected)
            close_to(twin(layer, kernel=kernel)(x, absorbed=True), expected)


@pytest.mark.parametrize("seed", range(0, 32, 3))
@pytest.mark.parametrize("absorbed", [False, True])
def test_a_latent_cache_token_by_token_and_in_chunks_equals_the_full_forward(seed, absorbed):
    config_args = random_config(seed)
    reference, config = tiny_deepseek_attention(**config_args)
    layer = mha_lib.attention_from_deepseek(reference, config)
    r, dr = config_args["kv_lora_rank"], config_args["qk_rope_head_dim"]
    rng = random.Random(seed)
    B, T = rng.randint(1, 3), rng.randint(2, 14)
    x = torch.randn(B, T, config.hidden_size, generator=torch.Generator().manual_seed(seed))
    expected, _ = deepseek_forward(reference, config, x)
    uneven = []
    while sum(uneven) < T:
        uneven.append(min(rng.randint(1, 5), T - sum(uneven)))
    with torch.no_grad():
        # every kernel: a chunk after the cache is the bottom-right triangle, which flash and sdpa take as positions
        for model in (layer, twin(layer, kernel="sdpa"), twin(layer, kernel="flash")):
            for sizes in ([1] * T, uneven):
                cache, pieces, start = KVCache(), [], 0
                for size in sizes:
                    pieces.append(model(x[:, start:start + size], kv_cache=cache, absorbed=absorbed))
                    start += size
                    assert len(cache.tensors) == 2  # the latent and the shared rotary key: nothing else
                    assert [tuple(t.shape) for t in cache.tensors] == [(B, start, r), (B, start, dr)]
                    assert cache.nbytes == B * start * (r + dr) * 4
                close_to(torch.cat(pieces, dim=1), expected)


def test_the_cache_holds_the_normalised_latent_and_the_rotated_key():
    reference, config = tiny_deepseek_attention(q_lora_rank=12, rope_interleave=False)
    layer = mha_lib.attention_from_deepseek(reference, config)
    x = torch.randn(2, 5, config.hidden_size, generator=torch.Generator().manual_seed(0))
    cache = KVCache()
    with torch.no_grad():
        layer(x, kv_cache=cache)
        latent, k_rope = layer.kv_down(x).split([16, 8], dim=-1)  # (B, T, r), (B, T, dr)
        torch.testing.assert_close(cache.tensors[0], layer.kv_norm(latent), rtol=0, atol=0)
        torch.testing.assert_close(cache.tensors[1], mha_lib.apply_rope(k_rope, torch.arange(5)), rtol=0, atol=1e-6)


def test_w_uk_and_w_uv_are_views_of_kv_up_per_head():
    layer = MultiHeadLatentAttention(16, 3, kv_lora_rank=5, qk_nope_head_dim=4, qk_rope_head_dim=2, v_head_dim=6)
    per_head = layer.kv_up.weight.view(3, 4 + 6, 5)  # (H·(dn + dv), r) -> (H, dn + dv, r)
    assert layer.W_uk.shape == (3, 4, 5) and layer.W_uv.shape == (3, 6, 5)
    assert torch.equal(layer.W_uk, per_head[:, :4]) and torch.equal(layer.W_uv, per_head[:, 4:])
    assert layer.W_uk.data_ptr() == layer.kv_up.weight.data_ptr()  # a view: no copy to keep in sync
    assert layer.scale == pytest.approx((4 + 2) ** -0.5)


def test_the_weights_are_deepseeks_and_the_mode_is_kept():
    reference, config = tiny_deepseek_attention(q_lora_rank=24, rope_interleave=False, attention_bias=True)
    layer = mha_lib.attention_from_deepseek(reference, config)
    pairs = [("q_down", "q_a_proj"), ("q_norm", "q_a_layernorm"), ("q_up", "q_b_proj"),
             ("kv_down", "kv_a_proj_with_mqa"), ("kv_norm", "kv_a_layernorm"), ("kv_up", "kv_b_proj"),
             ("out_proj", "o_proj")]
    for ours, theirs in pairs:  # without the interleave, nothing is permuted: the weights are copied as they are
        for name, p in getattr(layer, ours).named_parameters():
            assert torch.equal(p, getattr(getattr(reference, theirs), name)), f"{ours}.{name}"
    assert layer.kv_norm.eps == reference.kv_a_layernorm.variance_epsilon == 1e-6
    assert mha_lib.attention_from_deepseek(reference.train(), config).training
    assert numel(layer) == numel(reference)


# --- the conversion matters: tests that fail when a step is skipped ---------------------------------------------


def test_skipping_the_interleave_permutation_is_caught(monkeypatch):
    reference, config = tiny_deepseek_attention(q_lora_rank=None, rope_interleave=True, seed=3)
    x = torch.randn(2, 10, config.hidden_size, generator=torch.Generator().manual_seed(3))
    expected, _ = deepseek_forward(reference, config, x)
    with torch.no_grad():
        close_to(mha_lib.attention_from_deepseek(reference, config)(x), expected)
        monkeypatch.setattr(conversions, "_deinterleave_rotary_rows", lambda layer: None)
        skipped = mha_lib.attention_from_deepseek(reference, config)(x)
    with pytest.raises(AssertionError, match="max |difference|"):
        close_to(skipped, expected)
    assert (skipped - expected).abs().max() > 1e-3 * expected.abs().max()  # far beyond rounding
    with torch.no_grad():  # position 0 has no rotation: the first query's output cannot tell the layouts apart
        torch.testing.assert_close(skipped[:, 0], expected[:, 0], rtol=0, atol=1e-5)


def test_ignoring_yarn_is_caught():
    yarn = YaRN(8.0, 16, mscale=0.8, mscale_all_dim=1.0)
    reference, config = tiny_deepseek_attention(yarn=yarn, seed=4)
    layer = mha_lib.attention_from_deepseek(reference, config)
    x = torch.randn(1, 24, config.hidden_size, generator=torch.Generator().manual_seed(4))
    expected, _ = deepseek_forward(reference, config, x)
    with torch.no_grad():
        close_to(layer(x), expected)
        plain = twin(layer, yarn=None)(x)
        gains_only = twin(layer, yarn=yarn._replace(factor=1.0))(x)  # factor 1: no stretch, no gain
    for wrong in (plain, gains_only):
        with pytest.raises(AssertionError, match="max |difference|"):
            close_to(wrong, expected)
    assert layer.scale == pytest.approx(20 ** -0.5 * (0.1 * 1.0 * torch.log(torch.tensor(8.0)).item() + 1) ** 2)


def test_an_explicit_attention_factor_is_honoured():
    reference, config = tiny_deepseek_attention(yarn=YaRN(4.0, 32), seed=5)
    config.rope_parameters["attention_factor"] = 1.3  # transformers uses it instead of the one from the mscales
    x = torch.randn(1, 8, config.hidden_size, generator=torch.Generator().manual_seed(5))
    expected, _ = deepseek_forward(reference, config, x)
    layer = mha_lib.attention_from_deepseek(reference, config)
    assert layer.rope_gain == 1.3
    with torch.no_grad():
        close_to(layer(x), expected)


# --- YaRN against transformers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("yarn", [y for y in YARNS if y] + [YaRN(40.0, 4096, mscale=1.0, mscale_all_dim=1.0)])
@pytest.mark.parametrize("head_dim, theta", [(8, 10000.0), (64, 10000.0), (16, 500.0), (6, 1e6)])
def test_yarn_equals_transformers_compute_yarn_parameters(yarn, head_dim, theta):
    from transformers import DeepseekV3Config
    from transformers.modeling_rope_utils import _compute_yarn_parameters

    rope = {"rope_type": "yarn", "rope_theta": theta, "factor": yarn.factor,
            "original_max_position_embeddings": yarn.original_context_length, "beta_fast": yarn.beta_fast,
            "beta_slow": yarn.beta_slow, "mscale": yarn.mscale, "mscale_all_dim": yarn.mscale_all_dim,
            "truncate": yarn.truncate}
    config = DeepseekV3Config(hidden_size=32, num_attention_heads=2, num_key_value_heads=2, qk_rope_head_dim=head_dim,
                              max_position_embeddings=yarn.original_context_length * 4, rope_parameters=rope)
    speeds, attention_factor = _compute_yarn_parameters(config)
    assert speeds.shape == (head_dim // 2,)
    torch.testing.assert_close(yarn.speeds(head_dim, theta), speeds, rtol=1e-6, atol=0)
    assert yarn.rope_gain == pytest.approx(attention_factor, rel=1e-12)
    # and the softmax gain is DeepSeek's: yarn_get_mscale(factor, mscale_all_dim)² (1 when mscale_all_dim is 0)
    expected_gain = mha_lib.yarn_mscale(yarn.factor, yarn.mscale_all_dim) ** 2 if yarn.mscale_all_dim else 1.0
    assert yarn.softmax_gain == pytest.approx(expected_gain)


def test_yarn_keeps_the_fast_pairs_and_slows_the_slow_ones():
    speeds, plain = YaRN(40.0, 4096).speeds(64, 10000.0), mha_lib.rope_frequencies(64, 10000.0)
    assert torch.equal(speeds[:4], plain[:4])  # many turns over 4,096 tokens: unchanged
    torch.testing.assert_close(speeds[-4:], plain[-4:] / 40)  # less than one turn: slowed by the factor
    assert YaRN(40.0, 4096, mscale=1.0, mscale_all_dim=1.0).rope_gain == 1.0
    assert mha_lib.yarn_mscale(0.5, 3.0) == 1.0 and mha_lib.yarn_mscale(40.0) == pytest.approx(1.3689, abs=1e-4)


# --- sizes ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_latent_attention_parameter_count_is_the_layers(seed):
    config_args = random_config(seed)
    sizes = dict(kv_lora_rank=config_args["kv_lora_rank"], qk_nope_head_dim=config_args["qk_nope_head_dim"],
                 qk_rope_head_dim=config_args["qk_rope_head_dim"], v_head_dim=config_args["v_head_dim"],
                 q_lora_rank=config_args["q_lora_rank"])
    D, H, bias = config_args["hidden_size"], config_args["num_heads"], config_args["attention_bias"]
    count = latent_attention_parameter_count(D, H, **sizes, bias=bias)
    assert numel(MultiHeadLatentAttention(D, H, **sizes, bias=bias)) == count
    reference, _ = tiny_deepseek_attention(**config_args)
    assert numel(reference) == count  # DeepSeek's own layer holds the same parameters


def test_latent_attention_parameter_count_of_deepseek_v3():
    # DeepSeek-V3's config.json: D 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, dn 128, dr 64, dv 128
    count = latent_attention_parameter_count(7168, 128, 512, 128, 64, 128, q_lora_rank=1536)
    by_hand = (7168 * 1536 + 1536 + 1536 * 128 * 192) + (7168 * 576 + 512 + 512 * 128 * 256) + 128 * 128 * 7168
    assert count == by_hand == 187_107_328


# --- bad input ----------------------------------------------------------------------------------------------------

SIZES = dict(kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=3)


def esc(text: str) -> str:
    return re.escape(text)


@pytest.mark.parametrize(
    "changes, error, text",
    [
        ({"qk_rope_head_dim": 3}, ValueError, "qk_rope_head_dim must be even (RoPE turns the dimensions in pairs), "
                                              "got 3"),
        ({"yarn": (4.0, 64)}, TypeError, "yarn must be a mha_lib.YaRN or None, got tuple"),
        ({"kernel": "tiled"}, ValueError, "kernel must be one of ['explicit', 'flash', 'sdpa'], got 'tiled'"),
        ({"q_lora_rank": 0}, ValueError, "q_lora_rank must be a positive int (>= 1), got 0"),
        ({"kv_lora_rank": 2.0}, TypeError, "kv_lora_rank must be a positive int, got float 2.0"),
        ({"dropout": 1.0}, ValueError, "dropout must be in [0, 1), got 1.0"),
        ({"bias": 1}, TypeError, "bias must be True or False, got int 1"),
    ],
    ids=["odd-rope", "yarn-tuple", "kernel", "q-rank", "kv-rank-float", "dropout", "bias-int"],
)
def test_bad_construction_is_named(changes, error, text):
    with pytest.raises(error, match=esc(text)):
        MultiHeadLatentAttention(16, 2, **{**SIZES, **changes})


def test_bad_calls_are_named():
    layer = MultiHeadLatentAttention(16, 2, **SIZES, context_length=6)
    x = torch.randn(1, 3, 16)
    for kernel in ("sdpa", "flash"):
        with pytest.raises(ValueError, match=esc(f"return_weights=True needs kernel='explicit': kernel={kernel!r} "
                                                 f"never returns the attention weights")):
            twin(layer, kernel=kernel)(x, return_weights=True)
    with pytest.raises(ValueError, match=esc("x has last dimension 15 (shape (1, 3, 15)), expected d_model=16")):
        layer(torch.randn(1, 3, 15))
    with pytest.raises(ValueError, match=esc("x must be 3-D (B, T, d_model), got 2-D shape (3, 16)")):
        layer(torch.randn(3, 16))
    with pytest.raises(ValueError, match=esc("x has 7 tokens (shape (1, 7, 16)) but context_length is 6")):
        layer(torch.randn(1, 7, 16))
    with pytest.raises(TypeError, match=esc("absorbed must be True or False, got int 1")):
        layer(x, absorbed=1)
    with pytest.raises(TypeError, match=esc("kv_cache must be a mha_lib.KVCache or None, got str")):
        layer(x, kv_cache="cache")

    cache = KVCache()
    layer(x, kv_cache=cache)
    with pytest.raises(ValueError, match=esc("kv_cache already holds another layer's keys and values: give each "
                                             "layer its own KVCache()")):
        twin(layer)(x, kv_cache=cache)
    with pytest.raises(ValueError, match=esc("kv_cache holds a batch of 1 sequences but x has 2")):
        layer(torch.randn(2, 1, 16), kv_cache=cache)
    with pytest.raises(ValueError, match=esc("kv_cache has seen 3 tokens and x brings 4 more: 7 positions exceed "
                                             "context_length = 6")):
        layer(torch.randn(1, 4, 16), kv_cache=cache)
    assert (cache.seen, cache.nbytes) == (3, 3 * (8 + 4) * 4)  # a refused chunk leaves the cache as it was
    layer(torch.randn(1, 3, 16), kv_cache=cache)  # and the cache goes on to the end of the context
    assert cache.seen == 6


def test_attention_from_deepseek_refuses_what_is_not_deepseek():
    from mha_lib.llm.llama import tiny_llama_attention

    reference, config = tiny_deepseek_attention(hidden_size=16, num_heads=2)
    llama, llama_config = tiny_llama_attention(hidden_size=16, num_heads=2, num_kv_heads=1)
    with pytest.raises(TypeError, match=esc("deepseek_v3_attention must be a transformers DeepseekV3Attention (with "
                                            "kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), got Linear "
                                            "without kv_a_proj_with_mqa")):
        mha_lib.attention_from_deepseek(torch.nn.Linear(2, 2), config)
    with pytest.raises(TypeError, match=esc("got LlamaAttention without kv_a_proj_with_mqa")):
        mha_lib.attention_from_deepseek(llama, config)
    with pytest.raises(TypeError, match=esc("config must be a transformers DeepseekV3Config, got dict without "
                                            "hidden_size")):
        mha_lib.attention_from_deepseek(reference, {})
    with pytest.raises(TypeError, match=esc("config must be a transformers DeepseekV3Config, got LlamaConfig "
                                            "without kv_lora_rank")):
        mha_lib.attention_from_deepseek(reference, llama_config)
    _, other = tiny_deepseek_attention(hidden_size=16, num_heads=4)
    with pytest.raises(ValueError, match=esc("pass the config the layer was built from")):
        mha_lib.attention_from_deepseek(reference, other)


@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "llama3"])
def test_a_rope_type_other_than_default_or_yarn_is_refused(rope_type):
    reference, config = tiny_deepseek_attention(hidden_size=16, num_heads=2)
    config.rope_parameters = {"rope_type": rope_type, "rope_theta": 10000.0, "factor": 2.0}
    with pytest.raises(ValueError, match=esc(f"attention_from_deepseek supports rope_type 'default' and 'yarn', got "
                                             f"'{rope_type}'")):
        mha_lib.attention_from_deepseek(reference, config)


def test_a_yarn_config_without_its_original_context_length_is_refused_by_name():
    reference, config = tiny_deepseek_attention(hidden_size=16, num_heads=2, yarn=YaRN(4.0, 16))
    assert config.rope_parameters["original_max_position_embeddings"] == 16
    for value in ("missing", None):
        config.rope_parameters = {k: v for k, v in config.rope_parameters.items()
                                  if k != "original_max_position_embeddings"}
        if value is None:
            config.rope_parameters["original_max_position_embeddings"] = None
        with pytest.raises(ValueError, match=esc(
                "config.rope_parameters has rope_type 'yarn' but no original_max_position_embeddings (the context "
                "length the model was trained with before YaRN stretched it): pass the config the layer was built "
                "from")):
            mha_lib.attention_from_deepseek(reference, config)
    for value in (0, -16, 2.5, "16", True):
        config.rope_parameters["original_max_position_embeddings"] = value
        with pytest.raises(ValueError, match=esc(f"config.rope_parameters['original_max_position_embeddings'] must "
                                                 f"be a whole number of positions >= 1, got {value!r}")):
            mha_lib.attention_from_deepseek(reference, config)
    config.rope_parameters["original_max_position_embeddings"] = 16
    assert mha_lib.attention_from_deepseek(reference, config).yarn == YaRN(4.0, 16)
