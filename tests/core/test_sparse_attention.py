"""DeepSeek-V3.2's sparse attention inside ``MultiHeadLatentAttention(index_topk=...)`` (chapter 17), on its own
(transformers' reference: ``tests/llm/test_deepseek_v32_from_transformers.py``).

    paths      masked (every kernel) and gathered (``sparse=True``), absorbed or not, give one output over random
               shapes (batch, length, k, widths, compressed query or not, YaRN, biases)
    selection  causal (never a future key), k per query or all it sees then -1s, the top k of ``index_scores``
    cache      token by token and in uneven chunks = the full forward, on both paths; ``select`` after a cache = the
               full selection's rows, and leaves the cache as it was
    top-k ≥ T  the dense layer (same weights) exactly on the masked path; an indexer-free layer draws chapter 14's
               weights (the indexer is created last)
    memory     structural: no tensor of the gathered path's call holds T·S elements (a dispatch mode records every
               tensor torch creates), where the masked path's does; and the peak RSS growth of one call at
               T = 8,192, k = 256 in a fresh process stays far below one float32 T × S matrix (256 MiB)
    bad input  each ValueError / TypeError names the argument, what it got and what was expected
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import mha_lib
from mha_lib import KVCache, MultiHeadLatentAttention, YaRN


def random_layer(seed: int, **changes) -> MultiHeadLatentAttention:
    rng = random.Random(seed)
    dr = rng.choice([2, 4, 6])
    args = dict(kv_lora_rank=rng.choice([4, 8, 12]), qk_nope_head_dim=rng.choice([2, 4, 8]), qk_rope_head_dim=dr,
                v_head_dim=rng.choice([2, 5, 8]), q_lora_rank=None if seed % 3 == 0 else rng.choice([6, 12]),
                bias=rng.random() < 0.5, yarn=None if seed % 4 else YaRN(4.0, 16), context_length=64,
                index_topk=rng.randint(1, 12), index_heads=rng.choice([8, 16]), index_head_dim=dr + rng.choice([0, 2, 6]))
    torch.manual_seed(seed)
    layer = MultiHeadLatentAttention(rng.choice([8, 16, 24]), rng.randint(1, 4), **{**args, **changes}).eval()
    with torch.no_grad():  # norms away from their initial 1 and 0, so that every weight takes part
        for norm in (layer.kv_norm, layer.indexer.key_norm):
            norm.weight.uniform_(0.5, 1.5)
        layer.indexer.key_norm.bias.uniform_(-0.5, 0.5)
    return layer


def close_to(actual, expected, relative=1e-5):
    bound = relative * expected.abs().max().item()
    difference = (actual - expected).abs().max().item()
    assert difference <= bound, f"max |difference| {difference:.3g} > {bound:.3g}"


def twin(layer: MultiHeadLatentAttention, **changes) -> MultiHeadLatentAttention:
    args = dict(kv_lora_rank=layer.kv_lora_rank, qk_nope_head_dim=layer.qk_nope_head_dim,
                qk_rope_head_dim=layer.qk_rope_head_dim, v_head_dim=layer.v_head_dim, q_lora_rank=layer.q_lora_rank,
                context_length=layer.context_length, yarn=layer.yarn, bias=layer.kv_down.bias is not None,
                kernel=layer.kernel, index_topk=layer.index_topk, index_heads=layer.indexer.num_heads,
                index_head_dim=layer.indexer.head_dim)
    other = MultiHeadLatentAttention(layer.d_model, layer.num_heads, **{**args, **changes})
    other.load_state_dict(layer.state_dict(), strict=changes.get("index_topk", 1) is not None)
    return other.eval()


@pytest.mark.parametrize("seed", range(24))
def test_the_masked_and_the_gathered_path_give_one_output(seed):
    layer = random_layer(seed)
    rng = random.Random(seed)
    x = torch.randn(rng.randint(1, 3), rng.randint(1, 20), layer.d_model, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = layer(x)
        for absorbed in (False, True):
            close_to(layer(x, sparse=True, absorbed=absorbed), expected)
            for kernel in ("explicit", "sdpa", "flash"):
                close_to(twin(layer, kernel=kernel)(x, absorbed=absorbed), expected)


@pytest.mark.parametrize("seed", range(8))
def test_the_selection_is_causal_and_is_the_top_k_of_the_index_scores(seed):
    layer = random_layer(seed)
    B, T, k = 2, 17, layer.index_topk
    x = torch.randn(B, T, layer.d_model, generator=torch.Generator().manual_seed(seed))
    selected, scores = layer.select(x), layer.index_scores(x)
    assert selected.dtype == torch.int64 and selected.shape == (B, T, min(k, T))
    query = torch.arange(T)[None, :, None]
    assert bool((selected <= query).all()), "a query selected a key in its future"
    assert bool((scores.isinf() == (torch.arange(T)[None, None, :] > query)).all())  # -inf exactly on the future
    for t in range(T):
        row = selected[:, t]
        wanted = min(k, t + 1)  # a query sees t + 1 keys
        assert bool((row[:, :wanted] >= 0).all()) and bool((row[:, wanted:] == -1).all())
        assert all(len(set(r[:wanted].tolist())) == wanted for r in row)  # no key twice
        best = scores[:, t].topk(wanted, dim=-1).values
        torch.testing.assert_close(scores[:, t].gather(-1, row[:, :wanted]), best, rtol=0, atol=0)  # best first


@pytest.mark.parametrize("seed", range(0, 24, 4))
@pytest.mark.parametrize("sparse", [False, True])
def test_the_cache_token_by_token_and_in_chunks_equals_the_full_forward(seed, sparse):
    layer = random_layer(seed, index_topk=random.Random(seed).randint(1, 5))
    rng = random.Random(seed)
    B, T = rng.randint(1, 2), rng.randint(3, 14)
    x = torch.randn(B, T, layer.d_model, generator=torch.Generator().manual_seed(seed))
    uneven = []
    while sum(uneven) < T:
        uneven.append(min(rng.randint(1, 5), T - sum(uneven)))
    with torch.no_grad():
        expected, full_selection = layer(x), layer.select(x)
        for sizes in ([1] * T, uneven):
            cache, pieces, start = KVCache(), [], 0
            for size in sizes:
                chunk = x[:, start:start + size]
                if start:  # select after a cache: the full selection's rows, the cache untouched
                    before = [t.clone() for t in cache.tensors]
                    chosen = layer.select(chunk, kv_cache=cache)
                    assert all(torch.equal(a, b) for a, b in zip(before, cache.tensors)) and cache.seen == start
                    k = chosen.shape[-1]
                    assert torch.equal(chosen, full_selection[:, start:start + size, :k])
                pieces.append(layer(chunk, kv_cache=cache, sparse=sparse))
                start += size
                widths = [layer.kv_lora_rank, layer.qk_rope_head_dim, layer.indexer.head_dim]
                assert [tuple(t.shape) for t in cache.tensors] == [(B, start, w) for w in widths]
            close_to(torch.cat(pieces, dim=1), expected)


@pytest.mark.parametrize("seed", range(6))
def test_with_top_k_at_least_the_keys_held_it_is_dense_mla(seed):
    rng = random.Random(seed)
    T = rng.randint(1, 12)
    layer = random_layer(seed, index_topk=T + rng.randint(0, 3))
    dense = twin(layer, index_topk=None, index_heads=None, index_head_dim=None)
    x = torch.randn(2, T, layer.d_model, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        assert torch.equal(layer(x), dense(x))  # the masked path: the dense layer, bit for bit
        for absorbed in (False, True):
            close_to(layer(x, sparse=True, absorbed=absorbed), dense(x))
    selected = layer.select(x)
    assert sorted(selected[0, -1].tolist()) == list(range(T))  # the last query reads every key


def test_an_indexer_free_layer_draws_chapter_14s_weights():
    args = dict(kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4, q_lora_rank=6)
    torch.manual_seed(0)
    dense = MultiHeadLatentAttention(16, 2, **args)
    torch.manual_seed(0)
    sparse = MultiHeadLatentAttention(16, 2, **args, index_topk=3, index_heads=2, index_head_dim=8)
    assert dense.indexer is None and "index" not in repr(dense)
    for name, tensor in dense.state_dict().items():
        assert torch.equal(tensor, sparse.state_dict()[name])
    assert {name for name in sparse.state_dict() if name not in dense.state_dict()} == {
        "indexer.W_query.weight", "indexer.W_key.weight", "indexer.key_norm.weight", "indexer.key_norm.bias",
        "indexer.W_head_weights.weight"}


def test_the_indexer_gets_no_gradient_and_the_attention_does():
    layer = random_layer(1).train()
    x = torch.randn(1, 9, layer.d_model, requires_grad=True)
    for sparse in (False, True):
        layer.zero_grad()
        layer(x, sparse=sparse).sum().backward()
        assert all(p.grad is None for p in layer.indexer.parameters())
        assert layer.kv_down.weight.grad is not None and layer.kv_down.weight.grad.abs().sum() > 0


# --- memory --------------------------------------------------------------------------------------------------------


class LargestTensor(TorchDispatchMode):
    """Records the largest storage (in elements of its dtype) of every tensor an aten op returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes() // t.element_size())
        return out


def test_the_gathered_path_creates_no_tensor_of_t_by_s_elements_where_the_masked_one_does():
    T = 4096
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(16, 2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4,
                                     q_lora_rank=8, context_length=T, kernel="sdpa", index_topk=64, index_heads=2,
                                     index_head_dim=8).eval()
    x = torch.randn(1, T, 16)
    with torch.no_grad():
        for sparse in (True, False):
            for absorbed in (False, True):
                with LargestTensor() as seen:
                    layer(x, sparse=sparse, absorbed=absorbed)
                if sparse:
                    assert seen.largest <= mha_lib.latent.BLOCK_NUMBERS <= T * T // 8, (absorbed, seen.largest)
                else:  # the selection as a (T, S) keep mask: the hook does see T × S when it exists
                    assert seen.largest >= T * T
        with LargestTensor() as seen:
            layer.select(x)
        assert seen.largest <= mha_lib.latent.BLOCK_NUMBERS


PEAK = """
import torch
torch.set_num_threads(1)
from mha_lib import MultiHeadLatentAttention
def high_water():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) * 1024
T = 8192
torch.manual_seed(0)
layer = MultiHeadLatentAttention(32, 4, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                                 q_lora_rank=16, context_length=T, index_topk=256, index_heads=4,
                                 index_head_dim=16).eval()
x = torch.randn(1, T, 32)
with torch.no_grad():
    layer(x[:, :300], sparse=True)
    open("/proc/self/clear_refs", "w").write("5")
    base = high_water()
    layer(x, sparse=True)
    print(high_water() - base)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc to reset the peak RSS")
def test_one_gathered_call_at_t_8192_grows_peak_memory_far_below_one_t_by_s_matrix():
    result = subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True, timeout=120, check=True)
    growth = int(result.stdout.split()[-1])
    assert growth < 64 * 2**20, f"peak RSS grew by {growth / 2**20:.0f} MiB; one float32 T × S matrix is 256 MiB"


# --- bad input -----------------------------------------------------------------------------------------------------


ARGS = dict(kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4)


@pytest.mark.parametrize("changes, error, message", [
    (dict(index_topk=0, index_heads=2, index_head_dim=8), ValueError,
     "index_topk must be >= 1 (the keys each query reads; None: dense attention), got 0"),
    (dict(index_topk=-3, index_heads=2, index_head_dim=8), ValueError, "index_topk must be >= 1"),
    (dict(index_topk=2.0, index_heads=2, index_head_dim=8), TypeError,
     "index_topk must be a positive int (the keys each query reads) or None, got float 2.0"),
    (dict(index_topk=True, index_heads=2, index_head_dim=8), TypeError, "index_topk must be a positive int"),
    (dict(index_topk=4, index_head_dim=8), ValueError, "index_topk=4 needs index_heads too, got None"),
    (dict(index_topk=4, index_heads=2), ValueError, "index_topk=4 needs index_head_dim too, got None"),
    (dict(index_topk=4, index_heads=0, index_head_dim=8), ValueError,
     "index_heads must be a positive int (>= 1), got 0"),
    (dict(index_topk=4, index_heads=2, index_head_dim=2), ValueError,
     "index_head_dim must be at least qk_rope_head_dim = 4 (the indexer rotates its first qk_rope_head_dim "
     "dimensions), got 2"),
    (dict(index_heads=2), ValueError, "index_heads=2 needs index_topk, got index_topk=None"),
    (dict(index_heads=2, index_head_dim=8), ValueError, "index_heads=2 and index_head_dim=8 needs index_topk"),
])
def test_bad_indexer_options_are_named(changes, error, message):
    with pytest.raises(error, match=re.escape(message)):
        MultiHeadLatentAttention(16, 2, **ARGS, **changes)


def test_bad_calls_are_named():
    dense = MultiHeadLatentAttention(16, 2, **ARGS)
    layer = MultiHeadLatentAttention(16, 2, **ARGS, index_topk=3, index_heads=2, index_head_dim=8)
    x = torch.randn(1, 5, 16)
    with pytest.raises(ValueError, match=re.escape("sparse=True needs the lightning indexer: build the layer with "
                                                   "index_topk=k")):
        dense(x, sparse=True)
    for method in ("select", "index_scores"):
        with pytest.raises(ValueError, match=re.escape(f"{method} needs the lightning indexer")):
            getattr(dense, method)(x)
    with pytest.raises(TypeError, match=re.escape("sparse must be True or False, got str 'yes'")):
        layer(x, sparse="yes")
    with pytest.raises(ValueError, match=re.escape("return_weights=True needs sparse=False")):
        layer(x, sparse=True, return_weights=True)
    with pytest.raises(ValueError, match=re.escape("x has last dimension 12 (shape (1, 5, 12)), expected d_model=16")):
        layer.select(torch.randn(1, 5, 12))
    with pytest.raises(TypeError, match=re.escape("kv_cache must be a mha_lib.KVCache or None, got dict")):
        layer.select(x, kv_cache={})
    cache = KVCache()
    dense(x, kv_cache=cache)
    with pytest.raises(ValueError, match=re.escape("kv_cache already holds another layer's keys and values")):
        layer.select(x, kv_cache=cache)
