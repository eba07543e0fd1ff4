"""mha_lib.linear (chapter 16): linear attention's two forms, the delta rule's two forms, transformers' Qwen3-Next
kernels under their conventions, GatedDeltaNet's cache, and the refusals.

    forms      quadratic = recurrent (linear attention); recurrent = chunked (delta rule), float64, many shapes,
               T not a multiple of the chunk, an initial state, gradients
    reference  transformers' torch_recurrent_gated_delta_rule / torch_chunk_gated_delta_rule: they L2-normalise q
               and k (flag) and always scale q by Dk^-½, so they get q·√Dk of our unit queries
    layer      token by token (and uneven chunks) through a StateCache = the full forward; nbytes constant in T
"""

from __future__ import annotations

import random
import re

import pytest
import torch

import mha_lib
from mha_lib import GatedDeltaNet, StateCache, delta_rule, linear_attention, linear_attention_weights
from mha_lib.linear import l2_normalize

F64 = torch.float64


def qkv(B, H, T, Dk, Dv, seed, dtype=F64):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, d, generator=gen, dtype=dtype) for d in (Dk, Dk, Dv))


def gates(B, H, T, seed, strength=1.0, dtype=F64):
    gen = torch.Generator().manual_seed(seed + 1)
    beta = torch.rand(B, H, T, generator=gen, dtype=dtype)
    g = -strength * torch.rand(B, H, T, generator=gen, dtype=dtype)
    return beta, g


# --- linear attention ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_linear_attention_forms_are_equal(seed):
    rng = random.Random(seed)
    B, H, T, Dk, Dv = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 40), rng.randint(1, 9), rng.randint(1, 9)
    q, k, v = qkv(B, H, T, Dk, Dv, seed)
    for causal in (True, False):
        for fmap in ("elu+1", "relu"):
            a = linear_attention(q, k, v, causal=causal, feature_map=fmap)
            b = linear_attention(q, k, v, causal=causal, feature_map=fmap, form="recurrent")
            assert a.shape == (B, H, T, Dv)
            assert (a - b).abs().max().item() < 1e-12
    weights = linear_attention_weights(q, k)
    assert (weights @ v - linear_attention(q, k, v)).abs().max().item() < 1e-12
    assert (weights.sum(-1) - 1).abs().max().item() < 1e-3  # rows sum to 1 up to eps / (φ(q)·Σφ(k) + eps)
    assert (weights.triu(1) == 0).all()  # causal: nothing above the diagonal


def test_linear_attention_by_hand_and_the_normaliser_matters():
    q, k, v = qkv(1, 1, 5, 3, 2, 7)
    phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    t = 3
    scores = phi(q[0, 0, t]) @ phi(k[0, 0, : t + 1]).T  # (t+1,)
    expected = scores @ v[0, 0, : t + 1] / (scores.sum() + 1e-6)
    out = linear_attention(q, k, v)
    assert torch.allclose(out[0, 0, t], expected, atol=1e-14)
    # the first token reads only itself: its own value, whatever the scores
    assert torch.allclose(out[0, 0, 0], v[0, 0, 0], atol=1e-5)
    # without the normaliser the outputs would grow with t: check that ours are averages (inside the values' range)
    assert (out <= v.max(-2, keepdim=True).values + 1e-9).all()


# --- the delta rule -----------------------------------------------------------------------------------------------


def test_one_delta_step_by_hand():
    S = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]], dtype=F64)  # (1, 1, Dk=2, Dv=2)
    k = torch.tensor([0.6, 0.8], dtype=F64)
    v = torch.tensor([1.0, -1.0], dtype=F64)
    q = torch.tensor([1.0, 0.0], dtype=F64)
    beta, g = 0.5, -0.1
    decayed = torch.exp(torch.tensor(g, dtype=F64)) * S[0, 0]
    delta = beta * (v - decayed.T @ k)
    new = decayed + torch.outer(k, delta)
    out, state = delta_rule(q.view(1, 1, 1, 2), k.view(1, 1, 1, 2), v.view(1, 1, 1, 2),
                            torch.full((1, 1, 1), beta, dtype=F64), g=torch.full((1, 1, 1), g, dtype=F64),
                            initial_state=S, output_final_state=True)
    assert torch.allclose(state[0, 0], new, atol=1e-14)
    assert torch.allclose(out[0, 0, 0], new.T @ q, atol=1e-14)  # read after the write
    # a unit key with β = 1 overwrites: the state then returns exactly v for k
    _, state = delta_rule(k.view(1, 1, 1, 2), k.view(1, 1, 1, 2), v.view(1, 1, 1, 2), torch.ones(1, 1, 1, dtype=F64),
                          initial_state=S, output_final_state=True)
    assert torch.allclose(state[0, 0].T @ k, v, atol=1e-14)


@pytest.mark.parametrize("seed", range(16))
def test_delta_rule_recurrent_equals_chunked(seed):
    rng = random.Random(seed)
    B, H, T = rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 50)
    Dk, Dv, C = rng.randint(1, 8), rng.randint(1, 8), rng.choice([1, 2, 3, 7, 16, 64])
    q, k, v = qkv(B, H, T, Dk, Dv, seed)
    k = l2_normalize(k)
    beta, g = gates(B, H, T, seed, strength=rng.choice([0.1, 2.0]))
    beta = beta * rng.choice([1.0, 2.0])  # β up to 2 is allowed (negative eigenvalues)
    state0 = torch.randn(B, H, Dk, Dv, dtype=F64) if seed % 2 else None
    for decay in (None, g):
        o1, s1 = delta_rule(q, k, v, beta, g=decay, initial_state=state0, output_final_state=True)
        o2, s2 = delta_rule(q, k, v, beta, g=decay, chunk_size=C, initial_state=state0, output_final_state=True)
        assert o1.shape == (B, H, T, Dv) and s1.shape == (B, H, Dk, Dv)
        assert (o1 - o2).abs().max().item() < 1e-10
        assert (s1 - s2).abs().max().item() < 1e-10


def test_delta_rule_strong_decays_stay_finite_and_equal():
    q, k, v = qkv(1, 2, 40, 4, 3, 5)
    k = l2_normalize(k)
    beta, _ = gates(1, 2, 40, 5)
    g = -20 - 10 * torch.rand(1, 2, 40, dtype=F64)  # e^-20 … e^-30 per token: cumulative sums past float32
    o1, s1 = delta_rule(q, k, v, beta, g=g, output_final_state=True)
    for dtype in (F64, torch.float32):
        o2, s2 = delta_rule(*(x.to(dtype) for x in (q, k, v, beta)), g=g.to(dtype), chunk_size=16,
                            output_final_state=True)
        assert torch.isfinite(o2).all() and torch.isfinite(s2).all()
        assert (o1 - o2.double()).abs().max().item() < (1e-10 if dtype == F64 else 1e-5)
    # with that decay a token reads almost only its own write: o_t ≈ β_t (k_t·q_t) v_t
    own = beta[..., None] * (k * q).sum(-1, keepdim=True) * v
    assert (o1 - own).abs().max().item() < 1e-6


def test_chunked_gradients_equal_recurrent_ones():
    q, k, v = qkv(1, 2, 13, 3, 4, 11)
    beta, g = gates(1, 2, 13, 11)
    grads = []
    for chunk in (None, 4):
        leaves = [x.clone().requires_grad_() for x in (q, k, v, beta, g)]
        out, state = delta_rule(leaves[0], l2_normalize(leaves[1]), *leaves[2:4], g=leaves[4], chunk_size=chunk,
                                output_final_state=True)
        (out.square().sum() + state.sum()).backward()
        grads.append([x.grad for x in leaves])
    for a, b in zip(*grads):
        assert (a - b).abs().max().item() < 1e-10
    assert all(x.abs().max() > 0 for x in grads[0])


def test_delta_rule_keeps_the_input_dtype():
    q, k, v = qkv(1, 1, 6, 4, 4, 0, dtype=torch.bfloat16)
    beta = torch.rand(1, 1, 6).to(torch.bfloat16)
    out, state = delta_rule(q, k, v, beta, chunk_size=4, output_final_state=True)
    assert out.dtype == torch.bfloat16 and state.dtype == torch.float32


# --- transformers' kernels ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_delta_rule_equals_transformers_kernels(seed):
    qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    rng = random.Random(seed)
    B, Hk, T, Dk, Dv = rng.randint(1, 2), rng.randint(1, 2), rng.randint(1, 30), rng.choice([4, 8]), rng.choice([4, 6])
    r = rng.choice([1, 2])  # value heads per key head
    Hv = Hk * r
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, Hk, T, Dk, generator=gen) for _ in range(2))
    v = torch.randn(B, Hv, T, Dv, generator=gen)
    beta = torch.rand(B, Hv, T, generator=gen)
    g = -torch.rand(B, Hv, T, generator=gen) * rng.choice([0.1, 3.0])
    state0 = torch.randn(B, Hv, Dk, Dv, generator=gen)
    # ours: the plain rule on unit keys and unit queries scaled by Dk^-½, heads expanded to Hv
    qe, ke = (mha_lib.expand_kv_heads(l2_normalize(x.double()), Hv) for x in (q, k))
    ours, our_state = delta_rule(qe * Dk ** -0.5, ke, v.double(), beta.double(), g=g.double(),
                                 initial_state=state0.double(), output_final_state=True)
    # theirs: (B, T, H, D), normalising inside (flag) and always scaling q by Dk^-½: give them the raw q and k
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    for kernel, extra in ((qwen3_next.torch_recurrent_gated_delta_rule, {}),
                          (qwen3_next.torch_chunk_gated_delta_rule, {"chunk_size": rng.choice([4, 64])})):
        theirs, their_state = kernel(t(q), t(k), t(v), g=t(g), beta=t(beta), initial_state=state0,
                                     output_final_state=True, use_qk_l2norm_in_kernel=True, **extra)
        scale = ours.abs().max().item()
        assert (t(theirs).double() - ours).abs().max().item() <= 1e-5 * scale
        assert (their_state.double() - our_state).abs().max().item() <= 1e-5 * our_state.abs().max().item()
    # without the flag: the q we give delta_rule (already scaled by Dk^-½) is scaled once more inside theirs ...
    ours_q = qe * Dk ** -0.5
    theirs, _ = qwen3_next.torch_recurrent_gated_delta_rule(t(ours_q).float(), t(ke).float(), t(v), g=t(g),
                                                            beta=t(beta), initial_state=state0)
    assert (t(theirs).double() - ours).abs().max().item() > 1e-2 * ours.abs().max().item()  # scaled twice
    # ... so they must get q·√Dk
    theirs, _ = qwen3_next.torch_recurrent_gated_delta_rule(t(ours_q * Dk ** 0.5).float(), t(ke).float(), t(v),
                                                            g=t(g), beta=t(beta), initial_state=state0)
    assert (t(theirs).double() - ours).abs().max().item() <= 1e-5 * ours.abs().max().item()


# --- the layer and its cache ----------------------------------------------------------------------------------------


LAYERS = [dict(rule="gated_delta"), dict(rule="gated_delta", num_value_heads=4, value_head_dim=3),
          dict(rule="delta", conv_size=None), dict(rule="linear", conv_size=None), dict(rule="linear", conv_size=2),
          dict(rule="delta", conv_size=1)]


@pytest.mark.parametrize("options", LAYERS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_layer_token_by_token_equals_the_full_forward(options):
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, chunk_size=4, **options).double()
    x = torch.randn(2, 11, 16, dtype=F64)
    full = layer(x)
    assert full.shape == (2, 11, 16)
    for sizes in ([1] * 11, [3, 1, 5, 2]):
        cache, pieces, start = StateCache(), [], 0
        sizes_seen = []
        for n in sizes:
            pieces.append(layer(x[:, start:start + n], kv_cache=cache))
            start += n
            sizes_seen.append(cache.nbytes)
        assert cache.seen == 11
        assert (torch.cat(pieces, dim=1) - full).abs().max().item() < 1e-12
        assert len(set(sizes_seen)) == 1 and sizes_seen[0] > 0  # the same bytes after 1 token and after 11
    cache.clear()
    assert cache.nbytes == 0 and cache.seen == 0


def test_state_bytes_match_the_sizes_and_the_guide():
    layer = GatedDeltaNet(64, 4)  # d = 64, 4 heads of 16, float32, conv 4
    cache = StateCache()
    for T in (1, 100):
        layer(torch.randn(1, T, 64), kv_cache=cache)
        assert cache.nbytes == 6400  # state 4 × 16 × 16 × 4 B = 4,096 + conv inputs 3 × 192 × 4 B = 2,304
    assert mha_lib.LinearAttentionSizes(4, 4, 16, 16, 4).nbytes(bytes_per_element=4) == 6400
    assert StateCache().nbytes == 0


def test_float64_layer_and_gradients():
    layer = GatedDeltaNet(8, 2, num_value_heads=4).double()
    x = torch.randn(1, 7, 8, dtype=F64, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad.dtype == F64 and x.grad.abs().max() > 0
    assert layer.A_log.grad is not None and layer.A_log.grad.abs().max() > 0


def test_the_rules_differ_and_build_only_their_parameters():
    names = {rule: {n for n, _ in GatedDeltaNet(8, 2, rule=rule).named_parameters()} for rule in
             ("gated_delta", "delta", "linear")}
    assert {"A_log", "dt_bias", "W_decay.weight", "W_beta.weight"} <= names["gated_delta"]
    assert "A_log" not in names["delta"] and "W_beta.weight" in names["delta"]
    assert "W_beta.weight" not in names["linear"]
    assert "conv.weight" not in {n for n, _ in GatedDeltaNet(8, 2, conv_size=None).named_parameters()}
    # the initial decay is slow: exp(g) per token well above 0 for the typical input
    layer = GatedDeltaNet(8, 2, num_value_heads=8)
    g = -layer.A_log.exp() * torch.nn.functional.softplus(layer.dt_bias)
    assert (g <= 0).all() and g.exp().min() > 0.1


# --- refusals -------------------------------------------------------------------------------------------------------


def test_return_weights_is_refused_with_the_reason():
    layer = GatedDeltaNet(8, 2)
    with pytest.raises(ValueError, match=r"return_weights=True: a GatedDeltaNet layer has no attention weights to "
                                         r"return\. It never scores query against key"):
        layer(torch.randn(1, 3, 8), return_weights=True)


def test_bad_inputs_name_the_argument():
    q, k, v = qkv(1, 2, 5, 3, 4, 0)
    beta, g = gates(1, 2, 5, 0)
    with pytest.raises(ValueError, match=re.escape("q must be 4-D (B, H, T, Dk), got 3-D shape (2, 5, 3)")):
        delta_rule(q[0], k, v, beta)
    with pytest.raises(ValueError, match=re.escape("v must have the (B, H, T) of k, (1, 2, 5), got v (1, 2, 4, 4)")):
        delta_rule(q, k, v[:, :, :4], beta)
    with pytest.raises(ValueError, match=re.escape("beta must have shape (B, H, T) = (1, 2, 5), one number per head "
                                                   "and token, got (1, 2, 4)")):
        delta_rule(q, k, v, beta[..., :4])
    with pytest.raises(ValueError, match=re.escape("chunk_size must be a positive int (>= 1), got 0")):
        delta_rule(q, k, v, beta, chunk_size=0)
    with pytest.raises(ValueError, match=r"g must be <= 0 everywhere, got a maximum of 0\.5: g is a log-decay"):
        delta_rule(q, k, v, beta, g=g.clamp(max=0).index_fill(2, torch.tensor([1]), 0.5))
    with pytest.raises(TypeError, match=re.escape("k must be a floating-point tensor, got dtype torch.int64")):
        delta_rule(q, k.long(), v, beta)
    with pytest.raises(TypeError, match=re.escape("beta has dtype torch.float32 but k has torch.float64")):
        delta_rule(q, k, v, beta.float())
    with pytest.raises(ValueError, match=re.escape("initial_state must have shape (B, H, Dk, Dv) = (1, 2, 3, 4), "
                                                   "got (1, 2, 4, 3)")):
        delta_rule(q, k, v, beta, initial_state=torch.zeros(1, 2, 4, 3, dtype=F64))
    out, state = delta_rule(q, k, v, beta * 2)  # β in (0, 2) is allowed
    assert torch.isfinite(out).all() and state is None
    with pytest.raises(ValueError, match=re.escape("form must be one of ['quadratic', 'recurrent'], got 'tiled'")):
        linear_attention(q, k, v, form="tiled")
    with pytest.raises(ValueError, match=re.escape("feature_map must be one of ['elu+1', 'relu'] or a function")):
        linear_attention(q, k, v, feature_map="softmax")
    with pytest.raises(ValueError, match=re.escape("rule must be one of ['gated_delta', 'delta', 'linear'], got 'x'")):
        GatedDeltaNet(8, 2, rule="x")
    with pytest.raises(ValueError, match=re.escape("num_value_heads must be a multiple of num_key_heads = 2")):
        GatedDeltaNet(8, 2, num_value_heads=3)
    layer = GatedDeltaNet(8, 2)
    with pytest.raises(TypeError, match=re.escape("kv_cache must be a mha_lib.StateCache or None")):
        layer(torch.randn(1, 3, 8), kv_cache=mha_lib.KVCache())
    cache = StateCache()
    layer(torch.randn(1, 3, 8), kv_cache=cache)
    with pytest.raises(ValueError, match="kv_cache belongs to another layer"):
        GatedDeltaNet(8, 2)(torch.randn(1, 3, 8), kv_cache=cache)
    with pytest.raises(ValueError, match=re.escape("kv_cache holds the state of 1 sequences but x has 2")):
        layer(torch.randn(2, 1, 8), kv_cache=cache)
    with pytest.raises(ValueError, match=re.escape("x has last dimension 7 (shape (1, 3, 7)), expected d_model=8")):
        layer(torch.randn(1, 3, 7))
