"""``attention_from_transformers(DeepseekV32Attention, config)`` against transformers' own eager DeepSeek-V3.2
attention (latent attention + lightning indexer, chapter 17), built offline from tiny random configs.

Random configurations, 24 (``random.Random(seed)``): 1 to 6 heads, attention_bias, default RoPE or YaRN, 12 to 24
indexer heads of width dr .. 3·dr, batch 1-2, T 1-14, and index_topk below, equal to and above T. Compared, float32:

    output     ≤ 1e-5 × max|transformers' output| on both paths (masked and gathered), absorbed or not; the masked
               path's weights ≤ 1e-5 (0 off the selection, as transformers')
    indices    the keys each query reads equal transformers' top-k (its future keys, picked when a query sees fewer
               than k, dropped): the inputs are checked tie-free first (GUIDE §13: ReLU gives exact-zero ties)
    cache      token by token through a KVCache, equal to transformers' full output; three tensors per token
    layout     the indexer's half-split rotary is needed (MLA's interleave on it is caught)
"""

from __future__ import annotations

import random

import pytest
import torch

import mha_lib
from mha_lib import KVCache, MultiHeadLatentAttention, YaRN

pytest.importorskip("transformers")
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as v32  # noqa: E402

from mha_lib.llm.sparse_figures import tiny_deepseek_v32  # noqa: E402

YARNS = [None, YaRN(4.0, 32), YaRN(40.0, 16, mscale=1.0, mscale_all_dim=1.0)]


def random_sizes(seed: int) -> dict:
    rng = random.Random(seed)
    dr = rng.choice([2, 4, 8])
    return dict(hidden_size=rng.choice([16, 32, 48]), num_heads=rng.randint(1, 6), q_lora_rank=rng.choice([8, 12, 24]),
                kv_lora_rank=rng.choice([4, 8, 16]), qk_nope_head_dim=rng.choice([2, 4, 12]), qk_rope_head_dim=dr,
                v_head_dim=rng.choice([3, 4, 10]), attention_bias=rng.random() < 0.5,
                index_heads=rng.choice([12, 16, 24]), index_head_dim=dr * rng.choice([1, 2, 3]),
                yarn=YARNS[seed % len(YARNS)], seed=seed)


def tiny_v32(*, hidden_size=32, num_heads=4, q_lora_rank=12, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4,
             v_head_dim=4, attention_bias=False, index_topk=4, index_heads=16, index_head_dim=8, yarn=None, seed=0):
    """``(DeepseekV32Attention, DeepseekV32Config)`` with random weights (seeded), eval mode, eager attention (left
    at None, the top-k is silently dropped: GUIDE §13). Norm weights and the indexer's LayerNorm drawn too."""
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if yarn is not None:
        rope.update(rope_type="yarn", factor=yarn.factor, original_max_position_embeddings=yarn.original_context_length,
                    beta_fast=yarn.beta_fast, beta_slow=yarn.beta_slow, mscale=yarn.mscale,
                    mscale_all_dim=yarn.mscale_all_dim)
    config = v32.DeepseekV32Config(
        hidden_size=hidden_size, num_attention_heads=num_heads, num_key_value_heads=num_heads,
        q_lora_rank=q_lora_rank, kv_lora_rank=kv_lora_rank, qk_nope_head_dim=qk_nope_head_dim,
        qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim, attention_bias=attention_bias,
        index_topk=index_topk, index_n_heads=index_heads, index_head_dim=index_head_dim, max_position_embeddings=64,
        rope_parameters=rope)
    return tiny_deepseek_v32(seed, config=config)  # eager, the weights drawn as the chapter draws them


def reference(module, config, x):
    """transformers' eager forward at positions 0..T-1 with an additive float causal mask (a bool one is added to
    the scores, None crashes: GUIDE §13), and the indexer's own top-k. Returns (output, weights, indices)."""
    B, T, _ = x.shape
    positions = torch.arange(T)[None].expand(B, -1)
    cos_sin = v32.DeepseekV32RotaryEmbedding(config)(x, positions)
    mask = mha_lib.additive_mask(mha_lib.causal_mask(T))[None, None].expand(B, 1, T, T)
    with torch.no_grad():
        out, weights = module(x, position_embeddings=cos_sin, attention_mask=mask)
        q_resid = module.q_a_layernorm(module.q_a_proj(x))
        indices = module.indexer(x, q_resid, cos_sin, mask[:, 0], positions)
    return out, weights, indices.long()


def close_to(actual, expected, relative=1e-5):
    bound = relative * expected.abs().max().item()
    difference = (actual - expected).abs().max().item()
    assert difference <= bound, f"max |difference| {difference:.3g} > {bound:.3g}"


def assert_tie_free(layer, x, k):
    """Each query's k-th and (k+1)-th best visible index scores differ: the selection is not a matter of rounding."""
    scores = layer.index_scores(x)  # (B, T, T), -inf on the future
    T = x.shape[1]
    for t in range(k, T):  # query t sees t + 1 keys; with k or fewer, it reads them all
        best = scores[:, t, : t + 1].sort(dim=-1, descending=True).values
        gap = (best[:, k - 1] - best[:, k]).abs().min().item()
        assert gap > 1e-4 * best[:, 0].abs().max().item(), f"near tie at query {t}: the inputs are not tie-free"


def equal_selection(ours, theirs, T):
    """Ours (B, T, min(k, T)), -1 padded, against transformers' top-k, which picks future keys for early queries."""
    assert ours.shape == theirs.shape
    visible = theirs <= torch.arange(T)[None, :, None]  # drop the future keys transformers fills the top-k with
    for b in range(ours.shape[0]):
        for t in range(T):
            assert sorted(ours[b, t][ours[b, t] >= 0].tolist()) == sorted(theirs[b, t][visible[b, t]].tolist()), (b, t)
    assert bool(((ours >= 0).sum(-1) == visible.sum(-1)).all())


@pytest.mark.parametrize("seed", range(24))
def test_the_layer_equals_deepseek_v32_attention_with_top_k_below_at_and_above_t(seed):
    rng = random.Random(seed)
    B, T = rng.randint(1, 2), rng.randint(1, 14)
    k = [max(1, T - rng.randint(1, 5)), T, T + rng.randint(1, 4)][seed % 3]  # below, equal to, above T
    module, config = tiny_v32(index_topk=k, **random_sizes(seed))
    layer = mha_lib.attention_from_transformers(module, config)
    assert isinstance(layer, MultiHeadLatentAttention) and not layer.training
    assert (layer.index_topk, layer.indexer.num_heads, layer.indexer.head_dim) == (
        k, config.index_n_heads, config.index_head_dim)
    x = torch.randn(B, T, config.hidden_size, generator=torch.Generator().manual_seed(seed))
    expected, expected_weights, indices = reference(module, config, x)
    with torch.no_grad():
        if k < T:
            assert_tie_free(layer, x, k)
        equal_selection(layer.select(x), indices, T)
        out, weights = layer(x, return_weights=True)
        close_to(out, expected)
        torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-5)
        for absorbed in (False, True):
            close_to(layer(x, absorbed=absorbed, sparse=True), expected)
            close_to(layer(x, absorbed=absorbed), expected)


@pytest.mark.parametrize("seed", range(0, 24, 5))
def test_token_by_token_through_the_cache_equals_transformers_full_forward(seed):
    rng = random.Random(seed)
    B, T = rng.randint(1, 2), rng.randint(6, 12)
    k = rng.randint(2, T - 2)
    sizes = random_sizes(seed)
    module, config = tiny_v32(index_topk=k, **sizes)
    layer = mha_lib.attention_from_transformers(module, config)
    x = torch.randn(B, T, config.hidden_size, generator=torch.Generator().manual_seed(seed))
    expected, _, _ = reference(module, config, x)
    assert_tie_free(layer, x, k)
    with torch.no_grad():
        for sparse in (False, True):
            cache = KVCache()
            pieces = [layer(x[:, t:t + 1], kv_cache=cache, sparse=sparse) for t in range(T)]
            close_to(torch.cat(pieces, dim=1), expected)
            r, dr, di = sizes["kv_lora_rank"], sizes["qk_rope_head_dim"], sizes["index_head_dim"]
            assert [tuple(t.shape) for t in cache.tensors] == [(B, T, r), (B, T, dr), (B, T, di)]
            assert cache.nbytes == B * T * (r + dr + di) * 4


def test_the_indexer_rotates_its_first_dims_in_halves_unlike_mla():
    module, config = tiny_v32(index_topk=3, qk_rope_head_dim=4, index_head_dim=8, seed=3)
    layer = mha_lib.attention_from_transformers(module, config)
    x = torch.randn(1, 10, config.hidden_size, generator=torch.Generator().manual_seed(3))
    _, _, indices = reference(module, config, x)
    equal_selection(layer.select(x), indices, 10)
    right = layer.index_scores(x)
    order = mha_lib.interleaved_order(4)  # as if the indexer's rotary rows were de-interleaved like MLA's
    with torch.no_grad():
        layer.indexer.W_key.weight[:4] = layer.indexer.W_key.weight[:4][order]
        per_head = layer.indexer.W_query.weight.view(config.index_n_heads, 8, -1)
        per_head[:, :4] = per_head[:, :4][:, order]
    wrong = layer.index_scores(x)
    visible = right.isfinite()
    assert (wrong[visible] - right[visible]).abs().max() > 1e-2 * right[visible].abs().max()


def test_the_reader_refuses_a_module_without_an_indexer():
    module, config = tiny_v32(seed=1)
    del module.indexer
    with pytest.raises(TypeError, match="the DeepSeek-V3.2 reader reads DeepseekV32Attention's indexer"):
        mha_lib.attention_from_transformers(module, config)
