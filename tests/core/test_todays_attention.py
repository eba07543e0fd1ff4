"""Today's attention inside ``MultiHeadAttention`` (chapters 12 and 13) equals references written out here.

Every configuration is drawn from its own seed (``random.Random(seed)`` for sizes and flags,
``torch.Generator().manual_seed(seed)`` for tensors), float32, tolerance 1e-5 as in test_reference_equivalence.

    GQA        num_kv_heads=None / =num_heads is the 2017 layer exactly (same seed: same parameters, same output);
               G = 1 (MQA) and 1 < G < H equal a hand-written layer (repeat_interleave) and SDPA's enable_gqa,
               both kernels, with weights, key_padding_mask / valid_lens, head_dim with H·Dh ≠ d_out, out_bias
    RoPE       apply_rope equals transformers' apply_rotary_pos_emb (Llama); the interleaved layout equals the
               rotate-half one after interleaved_order; scores depend on the offset only; norms are kept;
               sinusoidal_positions equals the 2017 formula
    window     window=W equals attention with the band mask; W >= T is plain causal; W = 1 sees itself only
    sizes      kv_cache_bytes' published numbers, attention_parameter_count == the layer's parameters
    bad input  each ValueError / TypeError names the argument, what it got and what it expected
"""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

import mha_lib
from mha_lib import MultiHeadAttention

KERNELS = ("explicit", "sdpa")
TOL = {"rtol": 1e-5, "atol": 1e-5}


def divisors_of(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# --- references written out here (no mha_lib function inside) ---------------------------------------------------


def reference_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE from the formula: pair (i, i + Dh/2) of token t turns by positions[t]·θ^(-2i/Dh)."""
    Dh = x.shape[-1]
    speeds = 1.0 / theta ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)  # (Dh/2,)
    angles = positions.double()[:, None] * speeds  # (T, Dh/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : Dh // 2], x[..., Dh // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def reference_layer(layer: MultiHeadAttention, x: torch.Tensor, keep: torch.Tensor | None = None,
                    positions: torch.Tensor | None = None):
    """The layer's forward from its weights: project, split, RoPE, repeat_interleave the kv heads, masked
    softmax (a row with nothing to see gives 0), merge, out_proj. ``keep`` broadcasts to (B, H, T, T)."""
    B, T, _ = x.shape
    H, G, Dh = layer.num_heads, layer.num_kv_heads, layer.head_dim
    q = F.linear(x, layer.W_query.weight, layer.W_query.bias).view(B, T, H, Dh).transpose(1, 2)
    k = F.linear(x, layer.W_key.weight, layer.W_key.bias).view(B, T, G, Dh).transpose(1, 2)
    v = F.linear(x, layer.W_value.weight, layer.W_value.bias).view(B, T, G, Dh).transpose(1, 2)
    if layer.rope_theta is not None:
        positions = torch.arange(T) if positions is None else positions
        q, k = reference_rope(q, positions, layer.rope_theta), reference_rope(k, positions, layer.rope_theta)
    k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)  # Llama's repeat_kv order
    scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if keep is not None:
        weights = torch.where(keep.any(-1, keepdim=True), weights, torch.zeros_like(weights))
    context = (weights @ v).transpose(1, 2).reshape(B, T, H * Dh)
    return F.linear(context, layer.out_proj.weight, layer.out_proj.bias), weights


def band(T: int, window: int | None) -> torch.Tensor:
    """(T, T) keep mask: s <= t, and s > t - window when a window is given."""
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
    keep = s <= t
    return keep if window is None else keep & (s > t - window)


def twin(layer: MultiHeadAttention, kernel: str) -> MultiHeadAttention:
    """The same layer (same weights, same options) with another kernel."""
    other = MultiHeadAttention(
        layer.d_in, layer.d_out, layer.context_length, 0.0, layer.num_heads, layer.W_query.bias is not None,
        kernel=kernel, causal=layer.causal, num_kv_heads=layer.num_kv_heads, head_dim=layer.head_dim,
        rope_theta=layer.rope_theta, window=layer.window, out_bias=layer.out_proj.bias is not None,
    )
    other.load_state_dict(layer.state_dict())
    return other.eval()


def random_layer(rng: random.Random, *, d_in: int, H: int, G: int, **options) -> MultiHeadAttention:
    """A layer of random sizes: d_out = d_in with head size d_in / H, or a free head width (H·Dh ≠ d_out)."""
    head_dim = rng.choice([None, rng.randint(1, 4) * 2])
    if head_dim is None and (d_in % H or (options.get("rope_theta") and (d_in // H) % 2)):
        head_dim = 2  # RoPE needs an even head size
    d_out = d_in if head_dim is None else rng.randint(1, 12)
    return MultiHeadAttention(d_in, d_out, 16, 0.0, H, rng.random() < 0.5, num_kv_heads=G, head_dim=head_dim,
                              out_bias=rng.random() < 0.7, **options).eval()


# --- GQA --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_num_kv_heads_none_or_h_is_the_2017_layer_exactly(seed):
    rng = random.Random(seed)
    H = rng.choice([1, 2, 3, 4, 6])
    d = H * rng.randint(1, 4)
    qkv_bias, kernel, causal = rng.random() < 0.5, rng.choice(KERNELS), rng.random() < 0.7
    layers = []
    for extra in ({}, {"num_kv_heads": None}, {"num_kv_heads": H}):
        torch.manual_seed(seed)
        layers.append(MultiHeadAttention(d, d, 12, 0.0, H, qkv_bias, kernel=kernel, causal=causal, **extra))
    x = torch.randn(2, rng.randint(1, 12), d, generator=torch.Generator().manual_seed(seed))
    plain = layers[0]
    for layer in layers[1:]:
        assert layer.num_kv_heads == H
        shapes = [(n, p.shape) for n, p in layer.named_parameters()]
        assert shapes == [(n, p.shape) for n, p in plain.named_parameters()]
        for (_, p), (_, q) in zip(layer.named_parameters(), plain.named_parameters()):
            assert torch.equal(p, q)
        assert torch.equal(layer(x), plain(x))
        assert "num_kv_heads" not in repr(layer)


@pytest.mark.parametrize("seed", range(40))
def test_gqa_and_mqa_equal_repeat_interleave_and_sdpa_enable_gqa(seed):
    rng = random.Random(1000 + seed)
    gen = torch.Generator().manual_seed(1000 + seed)
    H = rng.choice([2, 3, 4, 6, 8])
    G = 1 if seed % 3 == 0 else rng.choice([g for g in divisors_of(H) if g < H])  # MQA, or 1 < G < H when it can
    d_in = rng.randint(1, 4) * H
    torch.manual_seed(seed)
    layer = random_layer(rng, d_in=d_in, H=H, G=G, causal=rng.random() < 0.7)
    B, T = rng.randint(1, 3), rng.randint(1, 12)
    x = torch.randn(B, T, d_in, generator=gen)
    keep = band(T, None) if layer.causal else None
    expected, expected_weights = reference_layer(layer, x, keep)
    out, weights = layer(x, return_weights=True)
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(weights, expected_weights, **TOL)
    assert weights.shape == (B, H, T, T)
    torch.testing.assert_close(twin(layer, "sdpa")(x), expected, **TOL)
    assert layer.W_key.weight.shape == layer.W_value.weight.shape == (G * layer.head_dim, d_in)
    # SDPA's own GQA (torch >= 2.5) on the layer's projections, G key/value heads never expanded by us
    Dh = layer.head_dim
    q = layer.W_query(x).view(B, T, H, Dh).transpose(1, 2)
    k = layer.W_key(x).view(B, T, G, Dh).transpose(1, 2)
    v = layer.W_value(x).view(B, T, G, Dh).transpose(1, 2)
    context = F.scaled_dot_product_attention(q, k, v, is_causal=layer.causal, enable_gqa=True)
    torch.testing.assert_close(layer.out_proj(context.transpose(1, 2).reshape(B, T, H * Dh)), expected, **TOL)


def test_the_wrong_pairing_of_repeat_differs_from_the_layer():
    """k.repeat tiles the kv heads (0, 1, 0, 1): it runs, and it is not the layer (chapter 12's misconception)."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 16, 8, 0.0, 4, num_kv_heads=2).eval()
    x = torch.randn(1, 5, 16)
    k = layer.W_key(x).view(1, 5, 2, 4).transpose(1, 2)
    assert torch.equal(mha_lib.expand_kv_heads(k, 4), k[:, [0, 0, 1, 1]])
    assert not torch.allclose(mha_lib.expand_kv_heads(k, 4), k.repeat(1, 2, 1, 1))


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("padding", ["key_padding", "valid_lens"])
def test_gqa_with_padding_equals_the_reference_on_both_kernels(seed, padding):
    rng = random.Random(2000 + seed)
    gen = torch.Generator().manual_seed(2000 + seed)
    H = rng.choice([2, 4, 6])
    G = rng.choice(divisors_of(H))
    torch.manual_seed(seed)
    layer = random_layer(rng, d_in=H * rng.randint(1, 3), H=H, G=G, causal=rng.random() < 0.5,
                         rope_theta=rng.choice([None, 10000.0]))
    B, T = rng.randint(1, 3), rng.randint(2, 10)
    x = torch.randn(B, T, layer.d_in, generator=gen)
    lens = torch.randint(1, T + 1, (B,), generator=gen)  # at least one key: no row is empty
    pad = torch.arange(T)[None, :] >= lens[:, None]  # (B, T): True = padded
    keep = ~pad[:, None, None, :]
    if layer.causal:
        keep = keep & band(T, None)
    kwargs = {"key_padding_mask": pad} if padding == "key_padding" else {"valid_lens": lens}
    expected, expected_weights = reference_layer(layer, x, keep)
    out, weights = layer(x, return_weights=True, **kwargs)
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(weights, expected_weights, **TOL)
    torch.testing.assert_close(twin(layer, "sdpa")(x, **kwargs), expected, **TOL)


@pytest.mark.parametrize("kernel", KERNELS)
def test_head_width_other_than_d_out_and_no_out_bias(kernel):
    torch.manual_seed(3)
    layer = MultiHeadAttention(12, 10, 16, 0.0, 4, num_kv_heads=2, head_dim=6, out_bias=False, kernel=kernel).eval()
    assert layer.W_query.weight.shape == (24, 12) and layer.W_key.weight.shape == (12, 12)
    assert layer.out_proj.weight.shape == (10, 24) and layer.out_proj.bias is None
    x = torch.randn(2, 7, 12)
    out = layer(x)
    assert out.shape == (2, 7, 10)
    torch.testing.assert_close(out, reference_layer(layer, x, band(7, None))[0], **TOL)
    assert sum(p.numel() for p in layer.parameters()) == 12 * 24 + 2 * 12 * 12 + 24 * 10  # W_q, W_k, W_v, W_o


# --- RoPE -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(16))
def test_apply_rope_equals_transformers_apply_rotary_pos_emb(seed):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    rng = random.Random(3000 + seed)
    gen = torch.Generator().manual_seed(3000 + seed)
    Dh, H, B, T = rng.choice([2, 4, 8, 16, 32]), rng.randint(1, 4), rng.randint(1, 3), rng.randint(1, 20)
    theta = rng.choice([10000.0, 500000.0, 100.0, 1e6])
    config = LlamaConfig(hidden_size=Dh * H, num_attention_heads=H, num_key_value_heads=H, head_dim=Dh,
                         max_position_embeddings=4096,
                         rope_parameters={"rope_type": "default", "rope_theta": theta})
    q, k = torch.randn(B, H, T, Dh, generator=gen), torch.randn(B, H, T, Dh, generator=gen)
    start = rng.randint(0, 2000)
    positions = torch.arange(start, start + T)  # a chunk after a cache: positions do not start at 0
    cos, sin = LlamaRotaryEmbedding(config)(q, positions[None].expand(B, -1))
    q_llama, k_llama = apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(mha_lib.apply_rope(q, positions, theta), q_llama, rtol=0, atol=1e-6)
    torch.testing.assert_close(mha_lib.apply_rope(k, positions, theta), k_llama, rtol=0, atol=1e-6)
    # and the formula written out here (float64 angles; small positions, where float32 angles lose no digit)
    first = torch.arange(T)
    torch.testing.assert_close(mha_lib.apply_rope(q, first, theta), reference_rope(q, first, theta), **TOL)


@pytest.mark.parametrize("seed", range(10))
def test_interleaved_layout_equals_rotate_half_after_interleaved_order(seed):
    rng = random.Random(3500 + seed)
    gen = torch.Generator().manual_seed(3500 + seed)
    Dh, T = rng.choice([2, 4, 6, 8, 16]), rng.randint(1, 12)
    theta = rng.choice([10000.0, 500000.0])
    x = torch.randn(2, 3, T, Dh, generator=gen)
    positions = torch.randint(0, 500, (T,), generator=gen)
    order = mha_lib.interleaved_order(Dh)
    assert sorted(order.tolist()) == list(range(Dh))
    torch.testing.assert_close(mha_lib.apply_rope(x[..., order], positions, theta),
                               mha_lib.apply_rope_interleaved(x, positions, theta)[..., order], rtol=0, atol=1e-6)
    # the same scores once q and k are permuted alike
    q, k = torch.randn(T, Dh, generator=gen), torch.randn(T, Dh, generator=gen)
    interleaved = mha_lib.apply_rope_interleaved(q, positions, theta) @ mha_lib.apply_rope_interleaved(
        k, positions, theta).T
    half = mha_lib.apply_rope(q[:, order], positions, theta) @ mha_lib.apply_rope(k[:, order], positions, theta).T
    torch.testing.assert_close(half, interleaved, **TOL)


def test_interleaved_order_of_8_is_even_then_odd():
    assert mha_lib.interleaved_order(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]


@pytest.mark.parametrize("seed", range(12))
def test_rope_scores_depend_only_on_the_offset_and_norms_are_kept(seed):
    rng = random.Random(4000 + seed)
    gen = torch.Generator().manual_seed(4000 + seed)
    Dh, T = rng.choice([2, 4, 8, 16, 64]), rng.randint(1, 16)
    theta = rng.choice([10000.0, 500000.0, 10.0])
    q = F.normalize(torch.randn(T, Dh, generator=gen), dim=-1)  # unit vectors: scores in [-1, 1]
    k = F.normalize(torch.randn(T, Dh, generator=gen), dim=-1)
    positions = torch.randint(0, 50, (T,), generator=gen)
    scores = mha_lib.apply_rope(q, positions, theta) @ mha_lib.apply_rope(k, positions, theta).T
    for c in (1, 7, rng.randint(1, 50)):
        shifted = mha_lib.apply_rope(q, positions + c, theta) @ mha_lib.apply_rope(k, positions + c, theta).T
        torch.testing.assert_close(shifted, scores, rtol=0, atol=1e-5)
    # a rotation keeps every pair's length, so the vector's norm too
    x = torch.randn(3, T, Dh, generator=gen)
    turned = mha_lib.apply_rope(x, positions, theta)
    torch.testing.assert_close(turned.norm(dim=-1), x.norm(dim=-1), rtol=1e-5, atol=1e-5)
    half = Dh // 2
    pair_norms = lambda t: t[..., :half] ** 2 + t[..., half:] ** 2  # noqa: E731
    torch.testing.assert_close(pair_norms(turned), pair_norms(x), rtol=1e-5, atol=1e-5)
    # position 0 is no rotation at all
    torch.testing.assert_close(mha_lib.apply_rope(x, torch.zeros(T, dtype=torch.long), theta), x, rtol=0, atol=0)


@pytest.mark.parametrize("T, D, base", [(1, 2, 10000.0), (17, 8, 10000.0), (50, 16, 10000.0), (9, 6, 100.0)])
def test_sinusoidal_positions_follow_the_2017_formula(T, D, base):
    table = mha_lib.sinusoidal_positions(T, D, base)
    assert table.shape == (T, D) and table.dtype == torch.float32
    expected = torch.empty(T, D, dtype=torch.float64)
    for pos in range(T):
        for i in range(D // 2):
            angle = pos / base ** (2 * i / D)
            expected[pos, 2 * i], expected[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    torch.testing.assert_close(table.double(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("seed", range(16))
def test_rope_layer_equals_the_reference_on_both_kernels(seed):
    rng = random.Random(4500 + seed)
    gen = torch.Generator().manual_seed(4500 + seed)
    H = rng.choice([1, 2, 4])
    G = rng.choice(divisors_of(H))
    Dh = rng.choice([2, 4, 8])
    torch.manual_seed(seed)
    layer = MultiHeadAttention(H * Dh, rng.randint(2, 10), 16, 0.0, H, rng.random() < 0.5, num_kv_heads=G,
                               head_dim=Dh, rope_theta=rng.choice([10000.0, 500000.0, 50.0]),
                               window=rng.choice([None, rng.randint(1, 6)])).eval()
    T = rng.randint(1, 16)
    x = torch.randn(2, T, H * Dh, generator=gen)
    expected, expected_weights = reference_layer(layer, x, band(T, layer.window))
    out, weights = layer(x, return_weights=True)
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(weights, expected_weights, **TOL)
    torch.testing.assert_close(twin(layer, "sdpa")(x), expected, **TOL)


# --- sliding window ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_window_equals_attention_with_the_band_mask(seed):
    rng = random.Random(5000 + seed)
    gen = torch.Generator().manual_seed(5000 + seed)
    H = rng.choice([1, 2, 4])
    T = rng.randint(1, 16)
    W = rng.randint(1, T + 2)
    torch.manual_seed(seed)
    layer = MultiHeadAttention(H * 2, H * 2, 16, 0.0, H, num_kv_heads=rng.choice(divisors_of(H)), window=W).eval()
    x = torch.randn(rng.randint(1, 3), T, H * 2, generator=gen)
    expected, expected_weights = reference_layer(layer, x, band(T, W))
    out, weights = layer(x, return_weights=True)
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(weights, expected_weights, **TOL)
    assert torch.equal(weights > 0, band(T, W).expand_as(weights))  # exactly the band, nothing outside it
    torch.testing.assert_close(twin(layer, "sdpa")(x), expected, **TOL)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("extra", [0, 1, 5])
def test_a_window_as_long_as_the_sequence_is_plain_causal(kernel, extra):
    torch.manual_seed(1)
    T = 9
    windowed = MultiHeadAttention(8, 8, 16, 0.0, 2, kernel=kernel, window=T + extra).eval()
    plain = MultiHeadAttention(8, 8, 16, 0.0, 2, kernel=kernel).eval()
    plain.load_state_dict(windowed.state_dict())
    x = torch.randn(2, T, 8)
    torch.testing.assert_close(windowed(x), plain(x), **TOL)


def test_window_of_one_sees_itself_only():
    torch.manual_seed(2)
    layer = MultiHeadAttention(8, 8, 16, 0.0, 2, window=1).eval()
    x = torch.randn(2, 6, 8)
    out, weights = layer(x, return_weights=True)
    assert torch.equal(weights, torch.eye(6).expand(2, 2, 6, 6))
    torch.testing.assert_close(out, layer.out_proj(layer.W_value(x)), **TOL)  # each token: its own value
    torch.testing.assert_close(twin(layer, "sdpa")(x), out, **TOL)


def test_causal_mask_at_and_sliding_window_mask_draw_the_band():
    assert torch.equal(mha_lib.sliding_window_mask(5, 2), band(5, 2))
    keep = mha_lib.causal_mask_at(torch.arange(3, 5), torch.arange(1, 5), window=2)  # queries 3, 4; keys 1..4
    assert keep.tolist() == [[False, True, True, False], [False, False, True, True]]


# --- sizes ------------------------------------------------------------------------------------------------------


def test_kv_cache_bytes_of_published_decoders():
    configs = mha_lib.DECODER_CONFIGS
    assert configs["llama-2-7b"].kv_cache_bytes(1) == 524_288  # 32 layers × 2 × 32 heads × 128 × 2 bytes
    assert configs["llama-3-8b"].kv_cache_bytes(1) == 131_072  # 8 kv heads: a quarter
    assert configs["gpt2-small"].kv_cache_bytes(1) == 36_864  # 12 × 2 × 12 × 64 × 2
    mistral = configs["mistral-7b"]
    assert mistral.kv_cache_bytes(4096) == 131_072 * 4096 == 512 * 2**20
    assert mistral.kv_cache_bytes(32768) == mistral.kv_cache_bytes(4096)  # capped by its 4,096-token window
    assert mistral.kv_cache_bytes(100) == 131_072 * 100
    assert configs["llama-3-8b"].kv_cache_bytes(8192) == 2**30  # 1 GiB for a full 8,192-token context
    assert mha_lib.kv_cache_bytes(32, 32, 128, 4096, batch_size=2, bytes_per_element=4) == 524_288 * 4096 * 4
    assert mha_lib.kv_cache_bytes(2, 1, 8, 0) == 0


@pytest.mark.parametrize("call, error, message", [
    (lambda: mha_lib.kv_cache_bytes(0, 1, 8, 10), ValueError, r"n_layers must be a positive int \(>= 1\), got 0"),
    (lambda: mha_lib.kv_cache_bytes(2, 1.5, 8, 10), TypeError, r"num_kv_heads must be a positive int, got float"),
    (lambda: mha_lib.kv_cache_bytes(2, 1, 8, -1), ValueError, r"tokens must be an int in \[0, inf\], got -1"),
    (lambda: mha_lib.kv_cache_bytes(2, 1, 8, True), TypeError, r"tokens must be an int, got bool"),
    (lambda: mha_lib.kv_cache_bytes(2, 1, 8, 10, window=0), ValueError, r"window must be a positive int .*got 0"),
    (lambda: mha_lib.kv_cache_bytes(2, 1, 8, 10, bytes_per_element=0), ValueError, r"bytes_per_element .*got 0"),
    (lambda: mha_lib.attention_parameter_count(8, num_heads=4, num_kv_heads=3), ValueError,
     r"num_kv_heads must divide num_heads = 4, got 3"),
    (lambda: mha_lib.attention_parameter_count(8, num_kv_heads=2), ValueError, r"num_heads is needed"),
    (lambda: mha_lib.attention_parameter_count(10, num_heads=4), ValueError,
     r"d_model \(10\) must be divisible by num_heads \(4\), or give head_dim"),
])
def test_sizes_refuse_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("seed", range(30))
def test_attention_parameter_count_equals_the_layers_parameters(seed):
    rng = random.Random(6000 + seed)
    H = rng.choice([1, 2, 3, 4, 6, 8])
    G = rng.choice(divisors_of(H))
    head_dim = rng.choice([None, rng.randint(1, 9)])
    d = H * rng.randint(1, 5) if head_dim is None else rng.randint(1, 40)
    qkv_bias, out_bias = rng.random() < 0.5, rng.random() < 0.5
    layer = MultiHeadAttention(d, d, 8, 0.0, H, qkv_bias, num_kv_heads=G, head_dim=head_dim, out_bias=out_bias)
    count = mha_lib.attention_parameter_count(d, qkv_bias, out_bias=out_bias, num_heads=H, num_kv_heads=G,
                                              head_dim=head_dim)
    assert count == sum(p.numel() for p in layer.parameters())
    if G == H and head_dim is None:  # the 2017 layer: the heads change nothing
        assert count == mha_lib.attention_parameter_count(d, qkv_bias, out_bias=out_bias)


# --- bad input --------------------------------------------------------------------------------------------------


def _mha(**options):
    return lambda: MultiHeadAttention(8, 8, 10, 0.0, 4, **options)


@pytest.mark.parametrize("call, error, message", [
    (_mha(num_kv_heads=3), ValueError,
     r"num_kv_heads must divide num_heads = 4 \(.*\), got 3; try one of \[1, 2, 4\]"),
    (_mha(num_kv_heads=0), ValueError, r"num_kv_heads must be a positive int \(>= 1\), got 0"),
    (_mha(num_kv_heads=-2), ValueError, r"num_kv_heads must be a positive int \(>= 1\), got -2"),
    (_mha(num_kv_heads=8), ValueError, r"num_kv_heads must divide num_heads = 4 .*got 8"),
    (_mha(num_kv_heads=2.0), TypeError, r"num_kv_heads must be a positive int, got float"),
    (_mha(num_kv_heads=True), TypeError, r"num_kv_heads must be a positive int, got bool"),
    (_mha(rope_theta=0), ValueError, r"rope_theta must be a finite float > 0, got 0"),
    (_mha(rope_theta=-10000.0), ValueError, r"rope_theta must be a finite float > 0, got -10000.0"),
    (_mha(rope_theta=float("nan")), ValueError, r"rope_theta must be a finite float > 0, got nan"),
    (_mha(rope_theta=float("inf")), ValueError, r"rope_theta must be a finite float > 0, got inf"),
    (_mha(rope_theta="10000"), TypeError, r"rope_theta must be a positive float, got str '10000'"),
    (lambda: MultiHeadAttention(6, 6, 10, 0.0, 2, rope_theta=10000.0), ValueError,
     r"rope_theta needs an even head size \(.*\), got head_dim = 3"),
    (_mha(head_dim=5, rope_theta=10000.0), ValueError, r"rope_theta needs an even head size .*got head_dim = 5"),
    (_mha(window=0), ValueError, r"window must be an int in \[1, inf\], got 0"),
    (_mha(window=-3), ValueError, r"window must be an int in \[1, inf\], got -3"),
    (_mha(window=2.5), TypeError, r"window must be an int, got float"),
    (_mha(window=3, causal=False), ValueError, r"window needs causal=True"),
    (_mha(head_dim=0), ValueError, r"head_dim must be a positive int \(>= 1\), got 0"),
    (_mha(out_bias="yes"), TypeError, r"out_bias"),
    (lambda: MultiHeadAttention(8, 8, 10, 0.0, 4, rope_theta=100.0)(torch.randn(1, 3, 8), torch.randn(1, 3, 8)),
     ValueError, r"kv \(cross-attention\) cannot be used with rope_theta"),
    (lambda: mha_lib.expand_kv_heads(torch.randn(1, 3, 2, 4), 4), ValueError,
     r"num_heads \(4\) must be a multiple of the 3 key/value heads"),
    (lambda: mha_lib.apply_rope(torch.randn(3, 5), torch.arange(3)), ValueError,
     r"x.shape\[-1\] \(the head size\) must be even, got 5"),
    (lambda: mha_lib.apply_rope(torch.randn(3, 4), torch.arange(2)), ValueError,
     r"positions must hold one position per token: x has T = 3 tokens, got 2 positions"),
    (lambda: mha_lib.apply_rope(torch.randn(3, 4), torch.arange(3.0)), TypeError,
     r"positions must be an integer tensor"),
    (lambda: mha_lib.apply_rope(torch.randn(3, 4), torch.arange(3), 0.0), ValueError,
     r"theta must be a finite float > 0, got 0.0"),
])
def test_todays_options_refuse_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("convert", [mha_lib.fused_from_split, mha_lib.torch_mha_from])
@pytest.mark.parametrize("options, shown", [
    ({"num_kv_heads": 2}, "num_kv_heads=2"), ({"num_kv_heads": 1}, "num_kv_heads=1"),
    ({"rope_theta": 10000.0}, "rope_theta=10000.0"), ({"window": 3}, "window=3"),
    ({"head_dim": 4}, "head_dim=4"), ({"out_bias": False}, "out_bias=False"),
])
def test_converters_refuse_todays_options(convert, options, shown):
    layer = MultiHeadAttention(8, 8, 10, 0.0, 4, **options)
    with pytest.raises(ValueError, match=rf"{convert.__name__} converts the 2017 layer, but mha was built with "
                                         rf"{shown}: the target layer has no such option"):
        convert(layer)


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_window_on_causal_cross_attention_is_the_band_over_the_keys(kernel):
    """Causal cross-attention (kv given, causal=True) lets query t see keys 0..t; a window W keeps t - W + 1..t."""
    torch.manual_seed(4)
    layer = MultiHeadAttention(8, 8, 16, 0.0, 2, kernel=kernel, window=2).eval()
    x, kv = torch.randn(1, 3, 8), torch.randn(1, 5, 8)
    keep = mha_lib.causal_mask_at(torch.arange(3), torch.arange(5), window=2)  # (T, S)
    q = layer.W_query(x).view(1, 3, 2, 4).transpose(1, 2)
    k = layer.W_key(kv).view(1, 5, 2, 4).transpose(1, 2)
    v = layer.W_value(kv).view(1, 5, 2, 4).transpose(1, 2)
    weights = torch.softmax((q @ k.transpose(-2, -1) / 2.0).masked_fill(~keep, float("-inf")), dim=-1)
    expected = layer.out_proj((weights @ v).transpose(1, 2).reshape(1, 3, 8))
    torch.testing.assert_close(layer(x, kv), expected, **TOL)
