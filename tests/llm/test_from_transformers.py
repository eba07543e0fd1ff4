"""``attention_from_transformers`` against each family's own attention from transformers (eager, float32), built
offline from random tiny configs (``mha_lib.llm.families``: nothing downloaded).

For every family and every kind of layer it has (full and sliding; Llama 4's RoPE and NoPE layers; Qwen3-Next with
``partial_rotary_factor`` 0.25 and 0.5), over a handful of seeds that draw the heads, key/value heads, head width,
hidden size, biases, window and sequence length:

    output   ≤ 1e-5 × max|transformers' output|
    weights  ≤ 1e-5 (with gpt-oss's sinks: the real keys' weights, rows summing to less than 1)
    cache    the same layer fed in uneven chunks through a KVCache equals transformers' full output
    power    each family's own option matters: without it (no norm weight, w for 1 + w, no sink, no gate, the full
             head rotating, the pairs not reordered, no window, no soft-cap) the difference is far above the bound
    dispatch an unsupported class is a TypeError naming it and the supported ones; refused configs say why
"""

from __future__ import annotations

import random
import re

import pytest
import torch

import mha_lib
from mha_lib import KVCache

pytest.importorskip("transformers")
from mha_lib.llm.families import LAYER_KINDS, reference_forward, tiny_attention  # noqa: E402

CASES = [(family, kind) for family, kinds in LAYER_KINDS.items() for kind in kinds] + [
    ("qwen3_next", "partial 0.5")]
SEEDS = range(4)


def random_sizes(family: str, kind: str, seed: int) -> dict:
    rng = random.Random(f"{family} {kind} {seed}")
    H = rng.choice([2, 4])
    G = rng.choice([g for g in (1, 2, 4) if H % g == 0])
    Dh = rng.choice([8, 16] if family == "qwen3_next" else [4, 8, 16])  # a quarter of Dh must be even
    sizes = dict(num_heads=H, num_kv_heads=G, head_dim=Dh, hidden_size=H * rng.choice([2, 3, 4, 8]),
                 window=rng.choice([1, 2, 3, 5]), attention_bias=rng.random() < 0.5,
                 rope_theta=rng.choice([100.0, 10000.0]), seed=seed)
    if family == "qwen3_next":
        sizes["partial_rotary_factor"] = 0.5 if kind == "partial 0.5" else 0.25
    return sizes


def build(family: str, kind: str, seed: int):
    module, config = tiny_attention(family, layer="full" if kind.startswith("partial") else kind,
                                    **random_sizes(family, kind, seed))
    return module, config, mha_lib.attention_from_transformers(module, config)


def bound(expected: torch.Tensor) -> float:
    return 1e-5 * expected.abs().max().item()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family, kind", CASES)
def test_each_reader_equals_the_family_on_its_layers(family, kind, seed):
    module, config, layer = build(family, kind, seed)
    assert not layer.training
    rng = random.Random(seed)
    B, T = rng.randint(1, 3), rng.randint(6, 12)  # longer than every window drawn
    x = torch.randn(B, T, config.hidden_size, generator=torch.Generator().manual_seed(seed))
    expected, expected_weights = reference_forward(module, config, x)
    with torch.no_grad():
        out, weights = layer(x, return_weights=True)
        assert (out - expected).abs().max().item() <= bound(expected)
        assert (weights - expected_weights).abs().max().item() <= 1e-5
        # the same layer, fed in uneven chunks through a cache, gives the family's full output too
        cache, pieces, start = KVCache(), [], 0
        while start < T:
            n = min(rng.randint(1, 4), T - start)
            pieces.append(layer(x[:, start:start + n], kv_cache=cache))
            start += n
        assert (torch.cat(pieces, dim=1) - expected).abs().max().item() <= bound(expected)
    if kind == "sliding":
        assert layer.window == config.sliding_window
        t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
        assert expected_weights.masked_select(s <= t - layer.window).abs().max() == 0
    if family == "gpt_oss":
        assert bool((weights.sum(-1) < 1).all())  # the sink's share is not in the weights


def test_what_each_reader_maps():
    """The options each family's layer gets, read from one tiny config per family."""
    seen = {}
    for family, kind in CASES:
        if family == "deepseek_v3":
            continue
        _, config, layer = build(family, kind, 0)
        seen[family, kind] = (layer.qk_norm, layer.scale is not None, layer.softcap, layer.sinks is not None,
                              layer.gate, layer.rope_fraction, layer.rope_theta is not None, layer.window is not None)
    assert seen["llama", "full"] == (None, False, None, False, None, 1.0, True, False)
    assert seen["qwen3", "sliding"] == ("head", False, None, False, None, 1.0, True, True)
    assert seen["olmo3", "sliding"][0] == seen["olmo2", "full"][0] == "projection"
    assert seen["gemma2", "full"] == (None, True, 5.0, False, None, 1.0, True, False)
    assert seen["gemma3", "sliding"] == ("head", True, None, False, None, 1.0, True, True)
    assert seen["gpt_oss", "sliding"] == (None, False, None, True, None, 1.0, True, True)
    assert seen["qwen3_next", "full"] == ("head", False, None, False, "elementwise", 0.25, True, False)
    assert seen["qwen3_next", "partial 0.5"][5] == 0.5
    assert seen["llama4", "rope"] == ("l2", False, None, False, None, 1.0, True, False)
    assert seen["llama4", "nope"] == (None, False, None, False, None, 1.0, False, False)
    assert isinstance(build("deepseek_v3", "full", 0)[2], mha_lib.MultiHeadLatentAttention)


def _difference(layer, module, config, x) -> float:
    expected, _ = reference_forward(module, config, x)
    with torch.no_grad():
        return (layer(x) - expected).abs().max().item() / expected.abs().max().item()


def test_each_familys_own_option_matters():
    """Without the option its reader sets, the layer is far from the family: the comparison has the power to see."""
    x = torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(0))

    def without(family, kind, change, **sizes):
        module, config = tiny_attention(family, layer=kind, seed=3, **sizes)
        layer = mha_lib.attention_from_transformers(module, config)
        assert _difference(layer, module, config, x) < 1e-5
        with torch.no_grad():
            change(layer, module)
        return _difference(layer, module, config, x)

    def ones(norm):
        norm.weight.fill_(1.0)

    assert without("qwen3", "full", lambda l, m: ones(l.q_norm)) > 1e-3
    assert without("olmo3", "full", lambda l, m: ones(l.k_norm)) > 1e-3
    assert without("gemma3", "full", lambda l, m: l.q_norm.weight.sub_(1.0)) > 1e-3  # w where 1 + w belongs
    assert without("gpt_oss", "full", lambda l, m: l.sinks.fill_(-1e4)) > 1e-3  # a sink that never takes anything
    assert without("qwen3_next", "full", lambda l, m: l.W_gate.weight.zero_()) > 1e-3  # a gate of 1/2 everywhere
    assert without("llama4", "rope", lambda l, m: l.W_query.weight.copy_(m.q_proj.weight)) > 1e-3  # pairs kept
    assert without("gemma2", "full", lambda l, m: setattr(l, "softcap", None)) > 1e-3
    assert without("gemma2", "full", lambda l, m: setattr(l, "scale", None)) > 1e-3
    for family in ("qwen3", "gemma2", "gemma3", "gpt_oss", "olmo3"):  # the window, on a sliding layer
        assert without(family, "sliding", lambda l, m: setattr(l, "window", None)) > 1e-3, family
    module, config = tiny_attention("qwen3_next", seed=3, head_dim=16)  # a quarter of the head rotates, not all
    layer = mha_lib.attention_from_transformers(module, config)
    d = config.hidden_size
    full = mha_lib.MultiHeadAttention(d, d, 64, 0.0, 4, num_kv_heads=2, head_dim=16, rope_theta=1e4, out_bias=False,
                                      qk_norm="head", gate="elementwise")
    full.load_state_dict(layer.state_dict())
    x = torch.randn(2, 10, d, generator=torch.Generator().manual_seed(1))
    assert _difference(layer, module, config, x) < 1e-5
    assert _difference(full.eval(), module, config, x) > 1e-3


def test_gpt_oss_with_its_own_yarn_rope_and_the_flash_kernel():
    """gpt-oss's default rope is YaRN (factor 32 over 4,096 positions, θ 150,000): read, and run by the tiled kernel
    too (a sink rescales each finished row by sigmoid(lse - sink))."""
    module, config = tiny_attention("gpt_oss", layer="sliding", seed=5, attention_bias=True)
    config.rope_parameters = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                              "beta_slow": 1.0, "original_max_position_embeddings": 4, "truncate": False}
    layer = mha_lib.attention_from_transformers(module, config)
    assert layer.yarn is not None and layer.yarn.rope_gain > 1
    x = torch.randn(2, 11, config.hidden_size, generator=torch.Generator().manual_seed(5))
    expected, expected_weights = reference_forward(module, config, x)
    flash = mha_lib.MultiHeadAttention(32, 32, 64, 0.0, 4, True, kernel="flash", num_kv_heads=2, head_dim=8,
                                       rope_theta=150000.0, window=4, sinks=True, yarn=layer.yarn)
    flash.load_state_dict(layer.state_dict())
    with torch.no_grad():
        out, weights = layer(x, return_weights=True)
        assert (out - expected).abs().max().item() <= bound(expected)
        assert (weights - expected_weights).abs().max().item() <= 1e-5
        assert (flash.eval()(x) - expected).abs().max().item() <= bound(expected)


def test_llama_4s_layers_stop_where_chunks_and_temperature_tuning_begin():
    module, config = tiny_attention("llama4", layer="rope", seed=0, max_positions=64)
    config.attention_chunk_size = 16
    assert mha_lib.attention_from_transformers(module, config).context_length == 16
    module, config = tiny_attention("llama4", layer="nope", seed=0, max_positions=64)
    config.floor_scale = 10
    layer = mha_lib.attention_from_transformers(module, config)
    assert layer.context_length == 9  # positions 0..8: (position + 1) / 10 < 1, so the query scale is exactly 1
    with pytest.raises(ValueError, match=re.escape("x has 10 tokens (shape (1, 10, 32)) but context_length is 9")):
        layer(torch.randn(1, 10, 32))


def test_attention_from_llama_and_from_deepseek_are_entries_of_the_table():
    assert mha_lib.TRANSFORMERS_READERS["LlamaAttention"] is mha_lib.attention_from_llama
    assert mha_lib.TRANSFORMERS_READERS["DeepseekV3Attention"] is mha_lib.attention_from_deepseek
    assert list(mha_lib.TRANSFORMERS_READERS) == [
        "LlamaAttention", "Qwen3Attention", "Olmo2Attention", "Olmo3Attention", "Gemma2Attention", "Gemma3Attention",
        "GptOssAttention", "Qwen3NextAttention", "Llama4TextAttention", "DeepseekV3Attention", "DeepseekV32Attention", "Qwen3NextGatedDeltaNet",
        "DeepseekV4Attention"]


def test_an_unsupported_class_is_named_with_the_supported_ones():
    from transformers import MistralConfig
    from transformers.models.mistral.modeling_mistral import MistralAttention

    config = MistralConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    with pytest.raises(TypeError, match=re.escape("attention_from_transformers has no reader for MistralAttention: it "
                                                  "reads LlamaAttention, Qwen3Attention, Olmo2Attention")):
        mha_lib.attention_from_transformers(MistralAttention(config, 0), config)
    with pytest.raises(TypeError, match=re.escape("has no reader for Linear")):
        mha_lib.attention_from_transformers(torch.nn.Linear(2, 2), config)


def test_configs_the_readers_refuse_say_why():
    module, config = tiny_attention("qwen3", seed=0)
    config.rope_parameters = {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}
    with pytest.raises(ValueError, match=re.escape("the Qwen3 reader reads rope_type 'default' and 'yarn', got "
                                                   "'linear'")):
        mha_lib.attention_from_transformers(module, config)
    module, config = tiny_attention("gemma3", seed=0)
    config.use_bidirectional_attention = True
    with pytest.raises(ValueError, match=re.escape("the Gemma 3 reader reads a causal decoder's attention, but "
                                                   "config.use_bidirectional_attention is True")):
        mha_lib.attention_from_transformers(module, config)
    module, config = tiny_attention("olmo3", layer="sliding", seed=0)
    config.layer_types = ["full_attention", "chunked_attention"]
    with pytest.raises(ValueError, match=re.escape("the OLMo reader reads layers of kind 'full_attention' or "
                                                   "'sliding_attention', got 'chunked_attention' for layer 1")):
        mha_lib.attention_from_transformers(module, config)
    module, config = tiny_attention("gemma2", seed=0)
    with pytest.raises(TypeError, match=re.escape("config must be the transformers config the module was built "
                                                  "from, got dict without hidden_size")):
        mha_lib.attention_from_transformers(module, {})
    _, other = tiny_attention("gemma2", seed=0, num_kv_heads=4)
    with pytest.raises(ValueError, match=re.escape("k_proj.weight has shape (16, 32) but config implies (32, 32)")):
        mha_lib.attention_from_transformers(module, other)


def test_the_family_helpers():
    from mha_lib.llm.families import family_of, layer_kind, max_differences

    module, config = tiny_attention("gemma3", layer="sliding", seed=1)
    assert (family_of(module), layer_kind(module, config)) == ("gemma3", "sliding")
    module, config = tiny_attention("llama4", layer="nope", seed=1)
    assert (family_of(module), layer_kind(module, config)) == ("llama4", "nope")
    layer = mha_lib.attention_from_transformers(module, config)
    difference, largest, weights = max_differences(layer, module, config, torch.randn(1, 5, 32))
    assert difference <= 1e-5 * largest and weights <= 1e-5
    with pytest.raises(ValueError, match=re.escape("family must be one of ['llama', 'qwen3', 'olmo2'")):
        tiny_attention("mistral")
    with pytest.raises(ValueError, match=re.escape("layer must be one of ['full'] for qwen3_next, got 'sliding'")):
        tiny_attention("qwen3_next", layer="sliding")
    with pytest.raises(TypeError, match=re.escape("module must be one of the attention classes of FAMILIES, got "
                                                  "Linear")):
        family_of(torch.nn.Linear(2, 2))


def test_a_qwen3_next_config_of_other_sizes_is_refused():
    module, _ = tiny_attention("qwen3_next", seed=0, num_heads=4)
    _, other = tiny_attention("qwen3_next", seed=0, num_heads=2, hidden_size=32)
    with pytest.raises(ValueError, match=re.escape("q_proj.weight has 64 rows but config implies 2 × 2 heads × 8 = 32 "
                                                   "(each head's query, then its gate)")):
        mha_lib.attention_from_transformers(module, other)
