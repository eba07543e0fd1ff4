"""The KV cache (chapter 12): a layer fed token by token, or in uneven chunks, through a ``KVCache`` gives what
one full causal forward gives, and the cache says exactly what it holds.

Random configurations (``random.Random(seed)`` for sizes and flags, ``torch.Generator().manual_seed(seed)`` for
tensors): G among the divisors of H, RoPE on/off, a window or none, all three kernels, head widths ≠ d_out, biases.
Each is fed in uneven random chunks and token by token; the concatenated outputs must equal the full forward
to 1e-5 (float32), and after every chunk ``seen``, ``length``, ``start`` and ``nbytes`` must be exact:
``nbytes = B · G · held · Dh · 2 (K and V) · 4 (float32)``, where a window holds at most ``W - 1`` tokens.
"""

from __future__ import annotations

import random

import pytest
import torch

import mha_lib
from mha_lib import KVCache, MultiHeadAttention

KERNELS = ("explicit", "sdpa", "flash")
TOL = {"rtol": 1e-5, "atol": 1e-5}


def divisors_of(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def random_chunks(rng: random.Random, T: int) -> list[int]:
    sizes = []
    while sum(sizes) < T:
        sizes.append(min(rng.randint(1, 5), T - sum(sizes)))
    return sizes


def held(seen: int, window: int | None) -> int:
    """Tokens a cache holds between chunks: everything, or the W - 1 the next query may still see."""
    return seen if window is None else min(seen, window - 1)


def feed(layer, x, sizes, check=None):
    """Run x through the layer chunk by chunk with one cache; returns the outputs concatenated and the cache."""
    cache, outputs, start = KVCache(), [], 0
    for n in sizes:
        outputs.append(layer(x[:, start:start + n], kv_cache=cache))
        start += n
        if check is not None:
            check(cache, start)
    return torch.cat(outputs, dim=1), cache


@pytest.mark.parametrize("seed", range(48))
def test_a_cache_fed_in_chunks_gives_the_full_causal_forward(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    H = rng.choice([1, 2, 3, 4, 6])
    G = rng.choice(divisors_of(H))
    Dh = rng.choice([2, 4, 6])
    d_in = rng.randint(2, 12)
    T = rng.randint(1, 20)
    window = rng.choice([None, None, rng.randint(1, 8)])
    torch.manual_seed(seed)
    layer = MultiHeadAttention(
        d_in, rng.randint(2, 12), 24, 0.0, H, rng.random() < 0.5, kernel=KERNELS[seed % 3], num_kv_heads=G,
        head_dim=Dh, rope_theta=rng.choice([None, 10000.0, 500000.0]), window=window,
        out_bias=rng.random() < 0.7,
    ).eval()
    B = rng.randint(1, 3)
    x = torch.randn(B, T, d_in, generator=gen)
    full = layer(x)

    def check(cache, seen):
        assert cache.seen == seen
        assert cache.length == held(seen, window)
        assert cache.start == seen - cache.length
        assert cache.nbytes == B * G * cache.length * Dh * 2 * 4
        assert cache.positions().tolist() == list(range(cache.start, seen))
        assert [tuple(t.shape) for t in cache.tensors] == [(B, G, cache.length, Dh)] * 2  # G heads only, K and V

    for sizes in (random_chunks(rng, T), [1] * T, [T]):
        out, _ = feed(layer, x, sizes, check)
        torch.testing.assert_close(out, full, **TOL)


@pytest.mark.parametrize("seed", range(12))
def test_every_kernel_gives_the_explicit_output_chunk_by_chunk(seed, monkeypatch):
    """flash and sdpa receive a chunk's triangle as positions (the first query's, the first key's, the window), not
    as a (T, S) mask; SDPA then goes by blocks of queries (made tiny here, so that a chunk takes several)."""
    monkeypatch.setattr(mha_lib.functional, "_SDPA_BLOCK_PAIRS", 24)
    rng = random.Random(seed)
    H = rng.choice([2, 4])
    options = dict(num_kv_heads=rng.choice([1, H]), rope_theta=rng.choice([None, 10000.0]),
                   window=rng.choice([None, rng.randint(1, 9)]))
    T = rng.randint(10, 30)
    x = torch.randn(rng.randint(1, 2), T, 8, generator=torch.Generator().manual_seed(seed))
    sizes = []  # uneven chunks of 1 to 12 tokens: the cached tokens are fewer, as many or more than the chunk's
    while sum(sizes) < T:
        sizes.append(min(rng.randint(1, 12), T - sum(sizes)))
    outputs = {}
    for kernel in KERNELS:
        torch.manual_seed(seed)
        layer = MultiHeadAttention(8, 8, 32, 0.0, H, kernel=kernel, **options).eval()
        outputs[kernel] = (feed(layer, x, sizes)[0], layer(x))
    for kernel in ("sdpa", "flash"):
        torch.testing.assert_close(outputs[kernel][0], outputs["explicit"][0], **TOL)
        torch.testing.assert_close(outputs[kernel][1], outputs["explicit"][1], **TOL)


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_cached_keys_are_the_rotated_keys_of_g_heads(kernel):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 16, 16, 0.0, 4, num_kv_heads=2, rope_theta=10000.0, kernel=kernel).eval()
    x = torch.randn(1, 5, 16)
    _, cache = feed(layer, x, [2, 3])
    k = layer.W_key(x).view(1, 5, 2, 4).transpose(1, 2)  # (B, G, T, Dh): Dh = 16 / 4
    v = layer.W_value(x).view(1, 5, 2, 4).transpose(1, 2)
    torch.testing.assert_close(cache.tensors[0], mha_lib.apply_rope(k, torch.arange(5), 10000.0), **TOL)
    torch.testing.assert_close(cache.tensors[1], v, **TOL)  # values carry no position


@pytest.mark.parametrize("window", [1, 2, 5])
def test_with_a_window_the_cache_stops_growing(window):
    torch.manual_seed(1)
    B, G, Dh = 2, 2, 4
    layer = MultiHeadAttention(16, 16, 64, 0.0, 4, num_kv_heads=G, window=window).eval()  # Dh = 16 / 4
    x = torch.randn(B, 40, 16)
    sizes = []
    out, cache = feed(layer, x, [1] * 40, lambda c, seen: sizes.append(c.nbytes))
    torch.testing.assert_close(out, layer(x), **TOL)
    cap = B * G * (window - 1) * Dh * 2 * 4
    assert sizes[-30:] == [cap] * 30  # flat once the window is full
    assert max(sizes) == cap and cache.length == window - 1 and cache.seen == 40 and cache.start == 40 - window + 1


def test_a_cache_without_a_window_grows_by_the_bytes_per_token():
    torch.manual_seed(2)
    layer = MultiHeadAttention(16, 16, 32, 0.0, 8, num_kv_heads=2).eval()  # Dh = 2, G = 2
    cache = KVCache()
    assert (cache.seen, cache.length, cache.start, cache.nbytes, cache.batch_size) == (0, 0, 0, 0, None)
    for step in range(1, 6):
        layer(torch.randn(3, 1, 16), kv_cache=cache)
        assert cache.nbytes == step * 3 * 2 * 2 * 2 * 4 and cache.batch_size == 3
    assert "KVCache(seen=5, length=5, nbytes=480" in repr(cache)
    cache.clear()
    assert (cache.seen, cache.length, cache.nbytes) == (0, 0, 0)
    layer(torch.randn(1, 2, 16), kv_cache=cache)  # a new sequence, a new batch size: fine after clear()
    assert cache.seen == 2


def test_a_chunk_sees_every_cached_key_it_may_see():
    """The misconception of chapter 12: is_causal=True on a chunk after a cache aligns the triangle top-left."""
    torch.manual_seed(3)
    layer = MultiHeadAttention(8, 8, 16, 0.0, 2).eval()
    x = torch.randn(1, 6, 8)
    cache = KVCache()
    layer(x[:, :4], kv_cache=cache)
    _, weights = layer(x[:, 4:], kv_cache=cache, return_weights=True)  # queries 4, 5; keys 0..5
    assert weights.shape == (1, 2, 2, 6)
    assert (weights[..., 0, :5] > 0).all() and (weights[..., 0, 5] == 0).all()
    assert (weights[..., 1, :] > 0).all()
    _, full_weights = layer(x, return_weights=True)
    torch.testing.assert_close(weights, full_weights[:, :, 4:], **TOL)


# --- errors ------------------------------------------------------------------------------------------------------


def _layer(**options):
    torch.manual_seed(0)
    return MultiHeadAttention(8, 8, 10, 0.0, 4, **options).eval()


def test_feeding_more_than_context_length_is_refused_and_leaves_the_cache_alone():
    layer, cache = _layer(), KVCache()
    layer(torch.randn(1, 7, 8), kv_cache=cache)
    with pytest.raises(ValueError, match=r"kv_cache has seen 7 tokens and x brings 4 more: 11 positions exceed "
                                         r"context_length = 10; build the layer with a larger context_length"):
        layer(torch.randn(1, 4, 8), kv_cache=cache)
    assert cache.seen == 7 and cache.length == 7
    layer(torch.randn(1, 3, 8), kv_cache=cache)  # exactly full is fine
    assert cache.seen == 10


def test_a_window_does_not_lift_the_context_length():
    layer, cache = _layer(window=2), KVCache()
    layer(torch.randn(1, 10, 8), kv_cache=cache)
    with pytest.raises(ValueError, match=r"kv_cache has seen 10 tokens and x brings 1 more"):
        layer(torch.randn(1, 1, 8), kv_cache=cache)


def test_another_batch_size_is_refused():
    layer, cache = _layer(), KVCache()
    layer(torch.randn(2, 3, 8), kv_cache=cache)
    with pytest.raises(ValueError, match=r"kv_cache holds a batch of 2 sequences but x has 3: .*start a new "
                                         r"KVCache\(\) for a new batch"):
        layer(torch.randn(3, 1, 8), kv_cache=cache)
    assert cache.seen == 3


def test_one_cache_for_two_layers_is_refused():
    first, second, cache = _layer(), _layer(), KVCache()
    first(torch.randn(1, 2, 8), kv_cache=cache)
    with pytest.raises(ValueError, match=r"kv_cache already holds another layer's keys and values: give each "
                                         r"layer its own KVCache\(\)"):
        second(torch.randn(1, 1, 8), kv_cache=cache)
    assert cache.seen == 2


@pytest.mark.parametrize("call, error, message", [
    (lambda c: _layer(causal=False)(torch.randn(1, 2, 8), kv_cache=c), ValueError, r"kv_cache needs causal=True"),
    (lambda c: _layer()(torch.randn(1, 2, 8), torch.randn(1, 2, 8), kv_cache=c), ValueError,
     r"kv_cache is for self-attention: pass x only"),
    (lambda c: _layer()(torch.randn(1, 2, 8), key_padding_mask=torch.zeros(1, 2, dtype=torch.bool), kv_cache=c),
     ValueError, r"kv_cache cannot be combined with key_padding_mask or valid_lens"),
    (lambda c: _layer()(torch.randn(1, 2, 8), valid_lens=torch.tensor([1]), kv_cache=c), ValueError,
     r"kv_cache cannot be combined with key_padding_mask or valid_lens"),
    (lambda c: _layer()(torch.randn(1, 2, 8), kv_cache={}), TypeError,
     r"kv_cache must be a mha_lib.KVCache or None, got dict"),
    (lambda c: _layer()(torch.randn(1, 2, 8), kv_cache=[c]), TypeError,
     r"kv_cache must be a mha_lib.KVCache or None, got list"),
    (lambda c: _layer(kernel="sdpa")(torch.randn(1, 2, 8), kv_cache=c, return_weights=True), ValueError,
     r"return_weights=True needs kernel='explicit'"),
    (lambda c: c.append(), ValueError, r"append needs at least one tensor"),
    (lambda c: c.append(torch.zeros(3)), TypeError, r"chunk\[0\] must be a tensor with tokens along dim -2, got a 1-D"),
    (lambda c: c.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4)), ValueError,
     r"every tensor of a chunk must hold the same number of tokens"),
    (lambda c: c.keep_last(-1), ValueError, r"tokens must be an int in \[0, inf\], got -1"),
])
def test_misuse_of_a_cache_is_refused_and_leaves_it_empty(call, error, message):
    cache = KVCache()
    with pytest.raises(error, match=message):
        call(cache)
    assert cache.seen == 0 and cache.nbytes == 0


def test_append_refuses_chunks_that_do_not_fit():
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"this cache holds 2 tensors per token, got 1"):
        cache.append(torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match=r"chunk\[1\] of shape \(1, 2, 1, 5\) does not fit the cached \(1, 2, 3, 4\)"):
        cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 5))
    with pytest.raises(ValueError, match=r"chunk\[0\] is torch.float64 on cpu but the cache holds torch.float32"):
        cache.append(torch.zeros(1, 2, 1, 4, dtype=torch.float64), torch.zeros(1, 2, 1, 4, dtype=torch.float64))
    assert cache.seen == 3 and cache.length == 3


def _step_with_a_new_layer(kind: str, x, cache, ids: list):
    """The trap: a helper that builds its layer anew at every step (the previous one already freed) and passes the
    same cache. Python reuses a freed object's id(), so the new layer often lands where the old one was."""
    if kind == "mha":
        layer = MultiHeadAttention(8, 8, 10, 0.0, 4)
    else:
        layer = mha_lib.MultiHeadLatentAttention(8, 2, kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2,
                                                 v_head_dim=3, context_length=10)
    ids.append(id(layer))  # the number only: the layer itself is freed when this returns
    return layer(x, kv_cache=cache)


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_a_layer_built_anew_at_every_step_cannot_fill_the_freed_layers_cache(kind):
    # with the layer remembered by id(), the later steps were accepted in most trials: keys of four layers with
    # different weights in one cache, a silent wrong answer. The cache keeps a weak reference: refused every time.
    # (No pytest.raises between the steps: its own objects would take the freed layer's address.)
    reused, messages = 0, []
    for _trial in range(60):
        cache, ids = KVCache(), []
        steps = [torch.randn(1, 2, 8)] + [torch.randn(1, 1, 8) for _ in range(3)]
        _step_with_a_new_layer(kind, steps[0], cache, ids)
        for x in steps[1:]:
            try:
                _step_with_a_new_layer(kind, x, cache, ids)
            except ValueError as error:
                messages.append(str(error))
            else:
                messages.append("accepted")
        assert cache.seen == 2  # nothing appended by the refused steps
        reused += ids[1] == ids[0]
    assert len(messages) == 180
    for message in messages:
        assert message.startswith("kv_cache belongs to a layer that no longer exists: ") and \
            "Build the layers once and give each its own KVCache()" in message, message
    assert reused > 0, "no trial rebuilt the layer at the freed one's address: this test no longer sets the trap"

def test_the_layer_that_filled_a_cache_is_not_kept_alive_by_it():
    import gc
    import weakref

    layer, cache = _layer(), KVCache()
    layer(torch.randn(1, 2, 8), kv_cache=cache)
    alive = weakref.ref(layer)
    del layer
    gc.collect()
    assert alive() is None  # the cache does not keep a deleted model's layers in memory
    assert cache.seen == 2 and cache.length == 2
