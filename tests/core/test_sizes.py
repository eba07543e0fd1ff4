"""Parameter counts and KV cache sizes (mha_lib.sizes) against what real layers hold."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import mha_lib
from mha_lib.sizes import (
    GPT_CONFIGS,
    DecoderAttention,
    attention_parameter_count,
    gpt_parameter_count,
    kv_cache_bytes,
    latent_attention_parameter_count,
)


def numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("d_model, num_heads", [(768, 12), (1600, 25)])
def test_gpt2_attention_block_small_and_xl(d_model, num_heads):
    expected = {768: 2_362_368, 1600: 10_246_400}[d_model]  # 4·D² + 4·D, by hand
    assert attention_parameter_count(d_model) == expected
    ours = mha_lib.MultiHeadAttention(d_model, d_model, 8, 0.0, num_heads, qkv_bias=True)
    assert numel(ours) == expected
    assert numel(nn.MultiheadAttention(d_model, num_heads)) == expected


@pytest.mark.parametrize("d_model, num_heads", [(6, 1), (6, 2), (6, 3), (6, 6), (20, 4), (20, 5)])
@pytest.mark.parametrize("qkv_bias", [True, False])
def test_matches_every_layer_and_ignores_the_number_of_heads(d_model, num_heads, qkv_bias):
    # mha_lib's out_proj always has a bias (as in the book); nn.MultiheadAttention's bias flag covers all four
    expected = attention_parameter_count(d_model, qkv_bias, out_bias=True)
    for cls in (mha_lib.MultiHeadAttention, mha_lib.FusedMultiHeadAttention):
        assert numel(cls(d_model, d_model, 4, 0.0, num_heads, qkv_bias=qkv_bias)) == expected
    assert numel(nn.MultiheadAttention(d_model, num_heads, bias=qkv_bias)) == attention_parameter_count(
        d_model, qkv_bias
    )
    assert expected == 4 * d_model**2 + (4 if qkv_bias else 1) * d_model


def test_bias_flags():
    assert attention_parameter_count(10, False) == 400
    assert attention_parameter_count(10, False, out_bias=True) == 410
    assert attention_parameter_count(10, True, out_bias=False) == 430
    assert attention_parameter_count(10) == 440


class _TinyGPT(nn.Module):
    """GPT-2's layout built from torch modules, to check gpt_parameter_count's formula term by term."""

    def __init__(self, d: int, n_layers: int, vocab: int, context: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({
                "ln_1": nn.LayerNorm(d),
                "attn": nn.MultiheadAttention(d, 2),
                "ln_2": nn.LayerNorm(d),
                "mlp": nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)),
            })
            for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied: parameters() yields it once


@pytest.mark.parametrize("d, n_layers, vocab, context", [(8, 1, 11, 5), (12, 3, 50, 7)])
def test_gpt_count_matches_a_built_model(d, n_layers, vocab, context):
    model = _TinyGPT(d, n_layers, vocab, context)
    assert numel(model) == gpt_parameter_count(d, n_layers, vocab_size=vocab, context_length=context)


def test_published_gpt_sizes():
    counts = {
        name: gpt_parameter_count(c.d_model, c.n_layers, vocab_size=c.vocab_size, context_length=c.context_length)
        for name, c in GPT_CONFIGS.items()
    }
    # the sizes of the released GPT-2 checkpoints (Hugging Face "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
    assert counts["gpt2-small"] == 124_439_808
    assert counts["gpt2-medium"] == 354_823_168
    assert counts["gpt2-large"] == 774_030_080
    assert counts["gpt2-xl"] == 1_557_611_200
    assert round(counts["gpt3-175b"] / 1e9) == 175
    for c in GPT_CONFIGS.values():
        assert c.d_model % c.num_heads == 0


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: attention_parameter_count(0), ValueError, "d_model must be a positive int (>= 1), got 0"),
        (lambda: attention_parameter_count(7.5), TypeError, "d_model must be a positive int, got float 7.5"),
        (lambda: attention_parameter_count(8, 1), TypeError, "bias must be True or False, got int 1"),
        (lambda: attention_parameter_count(8, out_bias="no"), TypeError, "out_bias must be True or False"),
        (lambda: gpt_parameter_count(8, 0), ValueError, "n_layers must be a positive int (>= 1), got 0"),
        (lambda: gpt_parameter_count(8, 2, vocab_size=torch.tensor(3)), TypeError, "vocab_size must be a positive int"),
    ],
)
def test_bad_input(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)


# --- the KV cache of published decoders, latent attention included (chapters 12 and 14) -------------------------


def test_the_published_decoders_are_unchanged():
    configs = mha_lib.DECODER_CONFIGS
    assert list(configs) == ["gpt2-small", "llama-2-7b", "llama-3-8b", "mistral-7b", "deepseek-v3"]
    assert configs["gpt2-small"] == DecoderAttention(12, 12, 12, 64, 768, 1024)
    assert configs["llama-2-7b"] == DecoderAttention(32, 32, 32, 128, 4096, 4096)
    assert configs["llama-3-8b"] == DecoderAttention(32, 32, 8, 128, 4096, 8192)
    assert configs["mistral-7b"] == DecoderAttention(32, 32, 8, 128, 4096, 32768, window=4096)
    for name in ("gpt2-small", "llama-2-7b", "llama-3-8b", "mistral-7b"):
        assert configs[name].kv_lora_rank is None and configs[name].qk_rope_head_dim is None
    per_token = {name: c.kv_cache_bytes(1) for name, c in configs.items()}
    assert per_token == {"gpt2-small": 36_864, "llama-2-7b": 524_288, "llama-3-8b": 131_072, "mistral-7b": 131_072,
                         "deepseek-v3": 70_272}


def test_deepseek_v3_caches_576_numbers_per_token_and_layer():
    v3 = mha_lib.DECODER_CONFIGS["deepseek-v3"]
    assert (v3.n_layers, v3.num_heads, v3.d_model, v3.context_length) == (61, 128, 7168, 163_840)
    assert (v3.kv_lora_rank, v3.qk_rope_head_dim, v3.head_dim) == (512, 64, 128 + 64)
    assert v3.cache_numbers_per_token == 512 + 64 == 576
    assert v3.kv_cache_bytes(1) == 61 * 576 * 2 == 70_272  # bfloat16
    assert kv_cache_bytes(61, tokens=1, kv_lora_rank=512, qk_rope_head_dim=64) == 70_272
    # plain multi-head attention with 128 heads of 192 numbers would cache 2 × 128 × 192 per token and layer:
    # MLA keeps about 1.2 % of that
    assert v3.kv_cache_bytes(1) / kv_cache_bytes(61, 128, 192, 1) < 0.02
    assert v3.kv_cache_bytes(v3.context_length) == 70_272 * 163_840  # a full context: about 10.7 GiB per sequence
    assert v3.kv_cache_bytes(10, bytes_per_element=4, batch_size=3) == 61 * 576 * 10 * 4 * 3


def test_cache_numbers_per_token():
    configs = mha_lib.DECODER_CONFIGS
    assert configs["gpt2-small"].cache_numbers_per_token == 2 * 12 * 64
    assert configs["llama-3-8b"].cache_numbers_per_token == 2 * 8 * 128  # the kv heads, not the query heads
    for c in configs.values():
        assert c.kv_cache_bytes(1) == c.n_layers * c.cache_numbers_per_token * 2


def test_mla_kv_cache_bytes_formula_and_window():
    assert kv_cache_bytes(2, tokens=5, kv_lora_rank=16, qk_rope_head_dim=8) == 2 * 24 * 5 * 2
    assert kv_cache_bytes(2, tokens=0, kv_lora_rank=16, qk_rope_head_dim=8) == 0
    assert kv_cache_bytes(3, tokens=9, kv_lora_rank=4, qk_rope_head_dim=2, window=4, batch_size=2,
                          bytes_per_element=4) == 3 * 6 * 4 * 2 * 4  # the window caps the tokens held


@pytest.mark.parametrize("index_head_dim", [None, 10])
def test_mla_kv_cache_bytes_is_what_the_layers_caches_hold(index_head_dim):
    """Two MLA layers, each with its own KVCache, fed 7 tokens in chunks: the caches' bytes are the formula's; with
    DeepSeek-V3.2's indexer (chapter 17), its key too, on the masked and the gathered path alike."""
    indexer = {} if index_head_dim is None else dict(index_topk=2, index_heads=2, index_head_dim=index_head_dim)
    layers = [mha_lib.MultiHeadLatentAttention(16, 2, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4,
                                               v_head_dim=3, **indexer) for _ in range(2)]
    caches = [mha_lib.KVCache() for _ in layers]
    x = torch.randn(3, 7, 16)
    with torch.no_grad():
        for start, stop in ((0, 2), (2, 3), (3, 7)):
            h = x[:, start:stop]
            for layer, cache in zip(layers, caches):
                h = layer(h, kv_cache=cache, sparse=bool(indexer) and start > 0)
            expected = kv_cache_bytes(2, tokens=stop, kv_lora_rank=6, qk_rope_head_dim=4, bytes_per_element=4,
                                      batch_size=3, index_head_dim=index_head_dim)
            assert sum(cache.nbytes for cache in caches) == expected


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: kv_cache_bytes(61, kv_lora_rank=512, qk_rope_head_dim=64), TypeError,
         "kv_cache_bytes needs tokens, the number of tokens the cache holds"),
        (lambda: kv_cache_bytes(61, 8, tokens=1, kv_lora_rank=512, qk_rope_head_dim=64), ValueError,
         "give either num_kv_heads and head_dim (keys and values per head) or kv_lora_rank and qk_rope_head_dim "
         "(latent attention), not both"),
        (lambda: kv_cache_bytes(61, None, 128, 1, kv_lora_rank=512, qk_rope_head_dim=64), ValueError, "not both"),
        (lambda: kv_cache_bytes(61, tokens=1, kv_lora_rank=512), ValueError,
         "latent attention needs both kv_lora_rank and qk_rope_head_dim (the latent and the shared rotary key), got "
         "kv_lora_rank=512, qk_rope_head_dim=None"),
        (lambda: kv_cache_bytes(61, tokens=1, qk_rope_head_dim=64), ValueError, "got kv_lora_rank=None, "
                                                                                 "qk_rope_head_dim=64"),
        (lambda: kv_cache_bytes(61, tokens=1, kv_lora_rank=0, qk_rope_head_dim=64), ValueError,
         "kv_lora_rank must be a positive int (>= 1), got 0"),
        (lambda: kv_cache_bytes(61, tokens=1, kv_lora_rank=512, qk_rope_head_dim=6.4), TypeError,
         "qk_rope_head_dim must be a positive int, got float 6.4"),
        (lambda: kv_cache_bytes(61, tokens=1), TypeError,
         "kv_cache_bytes needs num_kv_heads and head_dim (or, for latent attention, kv_lora_rank and "
         "qk_rope_head_dim)"),
        (lambda: kv_cache_bytes(61, 8, tokens=1), TypeError, "kv_cache_bytes needs num_kv_heads and head_dim"),
        (lambda: latent_attention_parameter_count(16, 2, 8, 4, 4, 0), ValueError,
         "v_head_dim must be a positive int (>= 1), got 0"),
        (lambda: latent_attention_parameter_count(16, 2, 8, 4, 4, 3, q_lora_rank=2.5), TypeError,
         "q_lora_rank must be a positive int, got float 2.5"),
        (lambda: latent_attention_parameter_count(16, 2, 8, 4, 4, 3, bias=1), TypeError,
         "bias must be True or False, got int 1"),
    ],
)
def test_bad_mla_sizes(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)


# --- sparse attention: the indexer's key beside the latent (chapter 17) ---------------------------------------------


def test_deepseek_v32_caches_576_plus_128_numbers_per_token_and_layer():
    v32 = mha_lib.SPARSE_CONFIGS["deepseek-v3.2"]
    assert list(mha_lib.SPARSE_CONFIGS) == ["deepseek-v3.2"]
    assert v32.attention == mha_lib.DECODER_CONFIGS["deepseek-v3"]  # V3's latent attention, unchanged
    assert (v32.index_heads, v32.index_head_dim, v32.index_topk) == (64, 128, 2048)
    assert v32.cache_numbers_per_token == 576 + 128 == 704
    assert v32.kv_cache_bytes(1) == 61 * 704 * 2
    assert v32.kv_cache_bytes(1000, bytes_per_element=4, batch_size=2) == kv_cache_bytes(
        61, tokens=1000, kv_lora_rank=512, qk_rope_head_dim=64, index_head_dim=128, bytes_per_element=4, batch_size=2)
    # a step reads every indexer key but only 2,048 latents: at 128K tokens, 24 % of dense MLA's bytes
    assert v32.step_read_bytes(1000) == v32.step_read_bytes(1000, sparse=False) + 61 * 1000 * 128 * 2
    assert v32.step_read_bytes(131_072) == 61 * (131_072 * 128 + 2048 * 576) * 2
    assert 0.23 < v32.step_read_bytes(131_072) / v32.step_read_bytes(131_072, sparse=False) < 0.25
    transformers = pytest.importorskip("transformers")
    ref = transformers.DeepseekV32Config()
    assert (ref.num_hidden_layers, ref.hidden_size, ref.kv_lora_rank, ref.qk_rope_head_dim, ref.index_n_heads,
            ref.index_head_dim, ref.index_topk) == (61, 7168, 512, 64, 64, 128, 2048)


def test_kv_cache_bytes_counts_the_indexers_key():
    assert kv_cache_bytes(2, 4, 8, 5, index_head_dim=3, bytes_per_element=1) == 2 * (2 * 4 * 8 + 3) * 5
    with pytest.raises(ValueError, match=re.escape("index_head_dim must be a positive int (>= 1), got 0")):
        kv_cache_bytes(2, tokens=1, kv_lora_rank=6, qk_rope_head_dim=4, index_head_dim=0)


@pytest.mark.parametrize("q_lora_rank", [None, 6])
def test_the_parameter_count_includes_the_indexer(q_lora_rank):
    layer = mha_lib.MultiHeadLatentAttention(16, 2, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4,
                                             v_head_dim=3, q_lora_rank=q_lora_rank, index_topk=2, index_heads=3,
                                             index_head_dim=10)
    assert numel(layer) == latent_attention_parameter_count(16, 2, 6, 4, 4, 3, q_lora_rank, index_heads=3,
                                                            index_head_dim=10)
    assert numel(layer.indexer) == numel(layer) - latent_attention_parameter_count(16, 2, 6, 4, 4, 3, q_lora_rank)
    with pytest.raises(ValueError, match=re.escape("the indexer needs both index_heads and index_head_dim, got "
                                                   "index_heads=3, index_head_dim=None")):
        latent_attention_parameter_count(16, 2, 6, 4, 4, 3, index_heads=3)


# --- hybrids: linear-attention layers keep a fixed state (chapter 16) ------------------------------------------------


def test_qwen3_next_80b_at_32k_tokens_in_bfloat16():
    from mha_lib import HYBRID_CONFIGS, LinearAttentionSizes

    config = HYBRID_CONFIGS["qwen3-next-80b-a3b"]
    MiB = 2**20
    kinds = config.layer_types
    assert len(kinds) == 48 and kinds.count("full") == 12 and kinds[:4] == ("linear", "linear", "linear", "full")
    full = kv_cache_bytes(12, config.num_kv_heads, config.head_dim, 32768)  # 12 × 2 × 2 × 256 × 32,768 × 2 B
    assert full == 768 * MiB
    linear = 36 * config.linear.nbytes()  # 36 × (32 × 128 × 128 + 3 × (2·16·128 + 32·128)) × 2 B
    assert linear == 36 * (32 * 128 * 128 + 3 * 8192) * 2 and round(linear / MiB) == 38
    assert config.kv_cache_bytes(32768) == full + linear
    assert kv_cache_bytes(48, 2, 256, 32768) == 3 * 2**30  # all 48 layers full attention
    # the linear layers' share does not grow: a token more adds only the 12 full layers' keys and values
    assert config.kv_cache_bytes(32769) - config.kv_cache_bytes(32768) == 12 * 2 * 2 * 256 * 2
    assert config.kv_cache_bytes(0) == linear
    # transformers' own Qwen3NextConfig() defaults are these sizes
    transformers = pytest.importorskip("transformers")
    ref = transformers.Qwen3NextConfig()
    assert config.linear == LinearAttentionSizes(ref.linear_num_key_heads, ref.linear_num_value_heads,
                                                 ref.linear_key_head_dim, ref.linear_value_head_dim,
                                                 ref.linear_conv_kernel_dim)
    assert tuple(t.replace("_attention", "") for t in ref.layer_types) == kinds
    assert (config.n_layers, config.num_heads, config.num_kv_heads, config.head_dim, config.d_model) == (
        ref.num_hidden_layers, ref.num_attention_heads, ref.num_key_value_heads, ref.head_dim, ref.hidden_size)


def test_state_bytes_equal_what_a_gated_deltanet_layer_holds():
    from mha_lib import GatedDeltaNet, LinearAttentionSizes, StateCache

    for sizes in (LinearAttentionSizes(2, 4, 8, 6, 4), LinearAttentionSizes(3, 3, 4, 4, None)):
        layer = GatedDeltaNet(12, sizes.num_key_heads, sizes.key_head_dim, num_value_heads=sizes.num_value_heads,
                              value_head_dim=sizes.value_head_dim, conv_size=sizes.conv_size)
        cache = StateCache()
        layer(torch.randn(3, 5, 12), kv_cache=cache)
        assert cache.nbytes == sizes.nbytes(bytes_per_element=4, batch_size=3)
    # the transformers spelling is read; a hybrid without the linear sizes, or sizes without layer kinds, is refused
    sizes = LinearAttentionSizes(1, 1, 2, 2, None)
    assert kv_cache_bytes(2, 1, 2, 10, layer_types=["linear_attention", "full_attention"], linear=sizes,
                          bytes_per_element=1) == 4 + 2 * 2 * 10
    with pytest.raises(ValueError, match=r"layer_types has 1 linear-attention layers but linear is None"):
        kv_cache_bytes(2, 1, 2, 10, layer_types=["linear", "full"])
    with pytest.raises(ValueError, match=r"linear gives the sizes of linear-attention layers, but layer_types is None"):
        kv_cache_bytes(2, 1, 2, 10, linear=sizes)
    with pytest.raises(TypeError, match=r"linear must be a LinearAttentionSizes"):
        kv_cache_bytes(2, 1, 2, 10, layer_types=["linear", "full"], linear=(1, 1, 2, 2))
    with pytest.raises(ValueError, match=re.escape("layer_types entries must be 'sliding', 'full' or 'linear'")):
        kv_cache_bytes(2, 1, 2, 10, layer_types=["linear", "mamba"], linear=sizes)
