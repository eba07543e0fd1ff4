"""Chapter 15's controls of ``MultiHeadAttention`` (QK-norm, scale, soft-cap, sinks, gate, partial RoPE, YaRN) equal
a reference written out here, on every kernel that can run them, with the weights and through the KV cache.

Every configuration is drawn from its own seed (``random.Random(seed)`` for sizes and options,
``torch.Generator().manual_seed(seed)`` for tensors), float32, tolerance 1e-5.

    defaults   every control at its default is the layer of chapters 1-14: same parameters, same random draws, same
               output (bit for bit)
    reference  the forward from the weights, in plain torch: norms where each model puts them (before / after RoPE),
               partial rotate-half RoPE, scale, c·tanh(s/c) before the mask, a sink column dropped after the
               softmax, the gate on each head's output; explicit, sdpa and flash wherever the maths allows
    cache      token by token and in uneven chunks == one full forward, with a window too
    kernels    softcap needs explicit, sinks explicit or flash: refused with a message that says why
    bad input  each ValueError / TypeError names the argument, what it got and what it expected
"""

from __future__ import annotations

import math
import random
import re

import pytest
import torch
import torch.nn.functional as F

import mha_lib
from mha_lib import KVCache, MultiHeadAttention

TOL = {"rtol": 1e-5, "atol": 1e-5}


def esc(text: str) -> str:
    return re.escape(text)


# --- the reference: the layer's forward from its weights, no mha_lib function inside ------------------------------


def rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x if weight is None else x * weight


def rope_part(x: torch.Tensor, positions: torch.Tensor, theta: float, rot: int, speeds=None, gain=1.0):
    """Rotate-half RoPE on the first ``rot`` dims, speeds θ^(-2i/rot); the rest unchanged."""
    turning, passing = x[..., :rot], x[..., rot:]
    if speeds is None:
        speeds = 1.0 / theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    angles = positions.double()[:, None] * speeds.double()  # (T, rot/2)
    cos, sin = angles.cos().to(x.dtype) * gain, angles.sin().to(x.dtype) * gain
    a, b = turning[..., : rot // 2], turning[..., rot // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, passing], dim=-1)


def reference(layer: MultiHeadAttention, x: torch.Tensor, past: int = 0, keys=None, first_key: int = 0):
    """``(out, weights, (k, v))`` of the layer on ``x`` at positions ``past ..``; ``keys`` = cached (k, v) before."""
    B, T, _ = x.shape
    H, G, Dh = layer.num_heads, layer.num_kv_heads, layer.head_dim
    q = F.linear(x, layer.W_query.weight, layer.W_query.bias)
    k = F.linear(x, layer.W_key.weight, layer.W_key.bias)
    v = F.linear(x, layer.W_value.weight, layer.W_value.bias).view(B, T, G, Dh).transpose(1, 2)
    if layer.qk_norm == "projection":
        q, k = rms(q, layer.q_norm.weight, layer.norm_eps), rms(k, layer.k_norm.weight, layer.norm_eps)
    q, k = q.view(B, T, H, Dh).transpose(1, 2), k.view(B, T, G, Dh).transpose(1, 2)
    if layer.qk_norm == "head":
        q, k = rms(q, layer.q_norm.weight, layer.norm_eps), rms(k, layer.k_norm.weight, layer.norm_eps)
    positions = torch.arange(past, past + T)
    if layer.rope_theta is not None:
        speeds = gain = None
        if layer.yarn is not None:
            speeds, gain = layer.yarn.speeds(layer.rope_dim, layer.rope_theta), layer.yarn.rope_gain
        q = rope_part(q, positions, layer.rope_theta, layer.rope_dim, speeds, gain or 1.0)
        k = rope_part(k, positions, layer.rope_theta, layer.rope_dim, speeds, gain or 1.0)
    if layer.qk_norm == "l2":
        q, k = rms(q, None, layer.norm_eps), rms(k, None, layer.norm_eps)
    if keys is not None:
        k, v = torch.cat([keys[0], k], dim=2), torch.cat([keys[1], v], dim=2)
    new_keys = (k, v)
    S = k.shape[2]
    k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
    scale = layer.scale if layer.scale is not None else 1 / math.sqrt(Dh)
    scores = q @ k.transpose(-2, -1) * scale  # (B, H, T, S)
    if layer.softcap is not None:
        scores = layer.softcap * torch.tanh(scores / layer.softcap)
    if layer.causal:
        m, n = positions[:, None], torch.arange(first_key, first_key + S)[None, :]
        keep = n <= m
        if layer.window is not None:
            keep &= n > m - layer.window
        scores = scores.masked_fill(~keep, float("-inf"))
    if layer.sinks is not None:
        sink = layer.sinks[:, None, None].expand(B, H, T, 1)
        weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        weights = torch.softmax(scores, dim=-1)
    context = weights @ v  # (B, H, T, Dh)
    if layer.gate == "elementwise":
        context = context * torch.sigmoid(F.linear(x, layer.W_gate.weight, layer.W_gate.bias)).view(
            B, T, H, Dh).transpose(1, 2)
    elif layer.gate == "head":
        context = context * torch.sigmoid(F.linear(x, layer.W_gate.weight, layer.W_gate.bias)).transpose(1, 2)[
            ..., None]
    out = F.linear(context.transpose(1, 2).reshape(B, T, H * Dh), layer.out_proj.weight, layer.out_proj.bias)
    return out, weights, new_keys


def random_options(rng: random.Random) -> dict:
    """One random mix of the controls (each on or off), and sizes they allow."""
    H = rng.choice([1, 2, 4])
    G = rng.choice([g for g in (1, 2, 4) if H % g == 0])
    Dh = rng.choice([4, 8, 12, 16])
    options = dict(num_kv_heads=G, head_dim=Dh, qk_norm=rng.choice([None, "head", "projection", "l2"]),
                   norm_eps=rng.choice([1e-6, 1e-5]), scale=rng.choice([None, 0.05, 0.3]),
                   softcap=rng.choice([None, None, 1.5, 20.0]), sinks=rng.random() < 0.5,
                   gate=rng.choice([None, "elementwise", "head"]), window=rng.choice([None, None, 1, 3]))
    if rng.random() < 0.8:
        options["rope_theta"] = rng.choice([100.0, 10000.0])
        fractions = [f for f in (1.0, 0.5, 0.25) if int(Dh * f) >= 2 and int(Dh * f) % 2 == 0]
        options["rope_fraction"] = rng.choice(fractions)
        if rng.random() < 0.3:
            options["yarn"] = mha_lib.YaRN(factor=rng.choice([2.0, 8.0]), original_context_length=8,
                                           truncate=rng.random() < 0.5)
    options["causal"] = options["window"] is not None or rng.random() < 0.8  # an encoder now and then
    return dict(d_in=rng.choice([8, 12]), d_out=rng.choice([8, 10]), H=H, qkv_bias=rng.random() < 0.5,
                out_bias=rng.random() < 0.5, **options)


def build(options: dict, kernel: str = "explicit", seed: int = 0) -> MultiHeadAttention:
    options = dict(options)
    d_in, d_out, H, bias = options.pop("d_in"), options.pop("d_out"), options.pop("H"), options.pop("qkv_bias")
    torch.manual_seed(seed)
    layer = MultiHeadAttention(d_in, d_out, 32, 0.0, H, bias, kernel=kernel, **options).eval()
    with torch.no_grad():  # every parameter away from its starting value, so that each takes part
        for name, p in layer.named_parameters():
            if "norm" in name or name == "sinks":
                p.copy_(torch.rand(p.shape, generator=torch.Generator().manual_seed(seed + len(name))) + 0.5)
    return layer


def kernels_for(layer: MultiHeadAttention) -> list[str]:
    if layer.softcap is not None:
        return ["explicit"]
    return ["explicit", "flash"] if layer.sinks is not None else ["explicit", "sdpa", "flash"]


# --- defaults: the layer of chapters 1-14 -------------------------------------------------------------------------


DEFAULTS = dict(qk_norm=None, norm_eps=1e-6, scale=None, softcap=None, sinks=False, gate=None, rope_fraction=1.0,
                yarn=None)


@pytest.mark.parametrize("seed", range(6))
def test_every_control_at_its_default_is_the_layer_of_chapters_1_to_14(seed):
    rng = random.Random(seed)
    H = rng.choice([1, 2, 4])
    d = 4 * H
    base = dict(kernel=rng.choice(["explicit", "sdpa", "flash"]), rope_theta=rng.choice([None, 10000.0]),
                window=rng.choice([None, 3]))
    torch.manual_seed(seed)
    plain = MultiHeadAttention(d, d, 16, 0.0, H, rng.random() < 0.5, **base)
    after_plain = torch.random.get_rng_state()
    torch.manual_seed(seed)
    spelled = MultiHeadAttention(d, d, 16, 0.0, H, plain.W_query.bias is not None, **base, **DEFAULTS)
    assert torch.equal(torch.random.get_rng_state(), after_plain)  # no extra random draw
    assert [n for n, _ in spelled.named_parameters()] == [n for n, _ in plain.named_parameters()]
    assert list(spelled.state_dict()) == list(plain.state_dict())
    assert [n for n, _ in plain.named_parameters()][:6:2] == ["W_query.weight", "W_key.weight", "W_value.weight"] or \
        plain.W_query.bias is None
    for p, q in zip(spelled.parameters(), plain.parameters()):
        assert torch.equal(p, q)
    # the four Linears in the book's order, nothing else drawn: the same random numbers as four bare Linears
    torch.manual_seed(seed)
    bias = plain.W_query.bias is not None
    for shape in ((d, d, bias), (d, d, bias), (d, d, bias), (d, d, True)):
        torch.nn.Linear(*shape)
    assert torch.equal(torch.random.get_rng_state(), after_plain)
    x = torch.randn(2, 9, d, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(spelled(x), plain(x))
    assert repr(spelled) == repr(plain)


# --- against the reference -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_the_controls_equal_the_reference_on_every_kernel_that_can_run_them(seed):
    rng = random.Random(seed)
    options = random_options(rng)
    layer = build(options, seed=seed)
    B, T = rng.randint(1, 3), rng.randint(1, 12)
    x = torch.randn(B, T, layer.d_in, generator=torch.Generator().manual_seed(seed))
    expected, expected_weights, _ = reference(layer, x)
    with torch.no_grad():
        out, weights = layer(x, return_weights=True)
        torch.testing.assert_close(out, expected, **TOL)
        torch.testing.assert_close(weights, expected_weights, **TOL)
        for kernel in kernels_for(layer)[1:]:
            other = build(options, kernel, seed)
            other.load_state_dict(layer.state_dict())
            torch.testing.assert_close(other(x), expected, **TOL)
    if layer.sinks is not None:  # the weights cover the real keys: each row's sum is 1 minus the sink's share
        assert bool((weights.sum(-1) < 1).all())


def test_the_mix_of_controls_covers_each_choice():
    drawn = [random_options(random.Random(seed)) for seed in range(40)]
    assert {o["qk_norm"] for o in drawn} == {None, "head", "projection", "l2"}
    assert {o["gate"] for o in drawn} == {None, "elementwise", "head"}
    assert {o["sinks"] for o in drawn} == {True, False}
    assert {o.get("rope_fraction") for o in drawn} >= {1.0, 0.5, 0.25}
    assert any(o.get("yarn") for o in drawn) and any(o["softcap"] for o in drawn) and any(o["scale"] for o in drawn)
    assert any(o["window"] for o in drawn) and not all(o["causal"] for o in drawn)


@pytest.mark.parametrize("seed", range(24))
def test_the_cache_token_by_token_and_in_chunks_equals_the_full_forward(seed):
    rng = random.Random(100 + seed)
    options = {**random_options(rng), "causal": True}  # a cache serves a decoder
    layer = build(options, kernel="explicit", seed=seed)
    T = rng.randint(2, 14)
    x = torch.randn(2, T, layer.d_in, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full, full_weights = layer(x, return_weights=True)
        for kernel in kernels_for(layer):
            other = build(options, kernel, seed)
            other.load_state_dict(layer.state_dict())
            for chunked in (False, True):
                cache, pieces, start = KVCache(), [], 0
                while start < T:
                    n = rng.randint(1, 4) if chunked else 1
                    n = min(n, T - start)
                    if kernel == "explicit":
                        first = cache.start  # the oldest key the chunk sees (a window's cache drops the older)
                        out, w = other(x[:, start:start + n], kv_cache=cache, return_weights=True)
                        torch.testing.assert_close(w, full_weights[:, :, start:start + n, first:start + n], **TOL)
                    else:
                        out = other(x[:, start:start + n], kv_cache=cache)
                    pieces.append(out)
                    start += n
                torch.testing.assert_close(torch.cat(pieces, dim=1), full, **TOL)


def test_qk_norm_sits_where_each_model_puts_it():
    """'head' and 'projection' before RoPE, 'l2' after it. With a learned weight the order matters (the weight scales
    the two dimensions of a turning pair differently); without one it does not (a rotation keeps the mean square)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 6, 16, generator=gen)
    positions = torch.arange(6)
    for qk_norm in ("head", "projection", "l2"):
        layer = build(dict(d_in=16, d_out=16, H=2, qkv_bias=False, qk_norm=qk_norm, rope_theta=100.0), seed=1)
        torch.testing.assert_close(layer(x), reference(layer, x)[0], **TOL)
    # the misconception: the same weights, normalised after RoPE, give other queries
    q = torch.randn(1, 2, 6, 8, generator=gen)
    w = torch.rand(8, generator=gen) + 0.5
    before = rope_part(rms(q, w, 1e-6), positions, 100.0, 8)
    after = rms(rope_part(q, positions, 100.0, 8), w, 1e-6)
    assert (before - after).abs().max() > 1e-2
    torch.testing.assert_close(rope_part(rms(q, None, 1e-6), positions, 100.0, 8),
                               rms(rope_part(q, positions, 100.0, 8), None, 1e-6), **TOL)
    # Llama 4's "L2" norm is an RMS norm: each head vector ends with length √Dh (minus eps), not 1
    torch.testing.assert_close(F.rms_norm(q, (8,), eps=1e-6).norm(dim=-1), torch.full((1, 2, 6), math.sqrt(8)),
                               rtol=1e-4, atol=1e-4)


def test_a_gemma_style_one_plus_w_norm_is_a_head_norm_with_weight_one_plus_w():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 16, 16, 0.0, 2, qk_norm="head", rope_theta=1e4).eval()
    w = torch.randn(8) * 0.1  # Gemma stores w and computes x·(1 + w), with w starting at 0
    with torch.no_grad():
        layer.q_norm.weight.copy_(1 + w)
    x = torch.randn(2, 8)
    gemma = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w)
    torch.testing.assert_close(layer.q_norm(x), gemma, **TOL)


def test_softcap_comes_before_the_mask_and_bounds_every_score():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 5, 5) * 40
    capped = mha_lib.softcap_scores(scores, 5.0)
    assert capped.abs().max() <= 5.0  # (-5, 5), and ±5 where float32 rounds tanh to ±1
    torch.testing.assert_close(mha_lib.softcap_scores(torch.tensor([1e-3]), 5.0), torch.tensor([1e-3]))
    # the misconception: a cap after the mask turns -inf into -cap, and the blocked keys get weight
    keep = torch.ones(5, 5, dtype=torch.bool).tril()
    wrong = torch.softmax(mha_lib.softcap_scores(scores.masked_fill(~keep, float("-inf")), 5.0), dim=-1)
    assert wrong.masked_select(~keep).min() > 0
    right = mha_lib.masked_softmax(capped, keep)
    assert right.masked_select(~keep).abs().max() == 0


def test_sinks_take_a_share_of_each_row_and_a_row_without_keys_gives_everything_to_the_sink():
    torch.manual_seed(0)
    scores = torch.randn(1, 2, 4, 4)
    sinks = torch.tensor([0.0, 3.0])
    weights = mha_lib.softmax_with_sinks(scores, sinks)
    share = 1 - weights.sum(-1)  # (1, 2, 4)
    expected = torch.exp(sinks)[None, :, None] / (torch.exp(sinks)[None, :, None] + scores.exp().sum(-1))
    torch.testing.assert_close(share, expected, **TOL)
    assert share[0, 1].min() > share[0, 0].max()  # a larger sink logit takes more
    keep = torch.ones(4, 4, dtype=torch.bool).tril()
    keep[0] = False  # query 0 sees no key
    weights = mha_lib.softmax_with_sinks(scores, sinks, keep)
    assert weights[..., 0, :].abs().max() == 0 and not weights.isnan().any()
    # flash (rows rescaled by sigmoid(lse - sink)) equals explicit (one more column), values and gradients
    q, k, v = (torch.randn(2, 2, 6, 4, requires_grad=True) for _ in range(3))
    s = torch.randn(2, requires_grad=True)
    ours, _ = mha_lib.explicit_attention(q, k, v, is_causal=True, sinks=s)
    tiled = mha_lib.flash_attention(q, k, v, causal=True, sinks=s, block_size=4)
    torch.testing.assert_close(tiled, ours, **TOL)
    g = torch.randn_like(ours)
    grads = torch.autograd.grad(ours, (q, k, v, s), g)
    tiled_grads = torch.autograd.grad(tiled, (q, k, v, s), g)
    for a, b in zip(grads, tiled_grads):
        torch.testing.assert_close(a, b, **TOL)


def test_the_new_parameters_learn():
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 8, 16, 0.0, 2, qk_norm="head", sinks=True, gate="head", rope_theta=1e4,
                               rope_fraction=0.5, kernel="flash")
    layer(torch.randn(2, 5, 8)).square().sum().backward()
    for name in ("q_norm.weight", "k_norm.weight", "sinks", "W_gate.weight"):
        grad = dict(layer.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name
    assert layer.W_gate.weight.shape == (2, 8) and layer.sinks.shape == (2,)
    assert torch.equal(MultiHeadAttention(8, 8, 16, 0.0, 2, sinks=True).sinks.detach(), torch.zeros(2))  # starts at 0


def test_partial_rope_turns_the_first_dims_only_and_its_speeds_span_the_rotating_width():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 16, 32, 0.0, 1, rope_theta=100.0, rope_fraction=0.25)  # Dh 16: dims 0-3 turn
    assert layer.rope_dim == 4
    x = torch.randn(1, 1, 7, 16)
    turned = layer._rope(x, torch.arange(7))
    assert torch.equal(turned[..., 4:], x[..., 4:])
    torch.testing.assert_close(turned[..., :4], mha_lib.apply_rope(x[..., :4], torch.arange(7), 100.0))
    assert not torch.allclose(turned[..., :4], mha_lib.apply_rope(x, torch.arange(7), 100.0)[..., :4])


# --- kernels and bad input ---------------------------------------------------------------------------------------


def test_the_layer_refuses_a_kernel_that_cannot_run_a_control():
    with pytest.raises(ValueError, match=esc("softcap=50 needs kernel='explicit', got kernel='sdpa': the cap is a tanh "
                                             "of every score, which SDPA never exposes")):
        MultiHeadAttention(8, 8, 16, 0.0, 2, kernel="sdpa", softcap=50.0)
    with pytest.raises(ValueError, match=esc("softcap=50 needs kernel='explicit', got kernel='flash'")):
        MultiHeadAttention(8, 8, 16, 0.0, 2, kernel="flash", softcap=50.0)
    with pytest.raises(ValueError, match=esc("sinks=True needs kernel='explicit' or kernel='flash', got "
                                             "kernel='sdpa'")):
        MultiHeadAttention(8, 8, 16, 0.0, 2, kernel="sdpa", sinks=True)
    layer = MultiHeadAttention(8, 8, 16, 0.0, 2, sinks=True)
    layer.kernel = "sdpa"  # changed after construction: the forward checks again
    with pytest.raises(ValueError, match=esc("sinks=True needs kernel='explicit' or kernel='flash'")):
        layer(torch.randn(1, 3, 8))
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=esc("sdpa_attention cannot apply softcap, got softcap=5.0")):
        mha_lib.sdpa_attention(q, q, q, softcap=5.0)
    with pytest.raises(ValueError, match=esc("sdpa_attention cannot apply sinks, got a sinks tensor")):
        mha_lib.sdpa_attention(q, q, q, sinks=torch.zeros(2))
    with pytest.raises(ValueError, match=esc("flash_kernel cannot apply softcap, got softcap=5.0")):
        mha_lib.flash_kernel(q, q, q, softcap=5.0)


@pytest.mark.parametrize(
    "options, error, text",
    [
        (dict(qk_norm="rms"), ValueError, "qk_norm must be None or one of ['head', 'projection', 'l2'], got 'rms'"),
        (dict(qk_norm=True), TypeError, "qk_norm must be None or one of ['head', 'projection', 'l2'], got bool True"),
        (dict(qk_norm="head", norm_eps=0), ValueError, "norm_eps must be a finite float > 0, got 0"),
        (dict(scale=0.0), ValueError, "scale must be a finite float > 0, got 0.0"),
        (dict(scale="0.1"), TypeError, "scale must be a positive float, got str '0.1'"),
        (dict(softcap=-1.0), ValueError, "softcap must be a finite float > 0, got -1.0"),
        (dict(softcap=float("inf")), ValueError, "softcap must be a finite float > 0, got inf"),
        (dict(sinks=1), TypeError, "sinks must be True or False, got int 1"),
        (dict(sinks="yes"), TypeError, "sinks must be True or False, got str 'yes'"),
        (dict(gate="sigmoid"), ValueError, "gate must be None or one of ['elementwise', 'head'], got 'sigmoid'"),
        (dict(gate=1), TypeError, "gate must be None or one of ['elementwise', 'head'], got int 1"),
        (dict(rope_theta=1e4, rope_fraction=0), ValueError, "rope_fraction must be in (0, 1] (the share of each "
                                                            "head's dimensions that rotate), got 0"),
        (dict(rope_theta=1e4, rope_fraction=1.5), ValueError, "rope_fraction must be in (0, 1]"),
        (dict(rope_theta=1e4, rope_fraction="0.5"), TypeError, "rope_fraction must be a float in (0, 1], got str "
                                                               "'0.5'"),
        (dict(rope_theta=1e4, rope_fraction=True), TypeError, "rope_fraction must be a float in (0, 1], got bool"),
        (dict(rope_fraction=0.5), ValueError, "rope_fraction=0.5 needs rope_theta: without rotary positions (a NoPE "
                                              "layer, rope_theta=None) no dimension rotates"),
        (dict(rope_theta=1e4, rope_fraction=0.25), ValueError, "rope_fraction=0.25 rotates int(0.25 × head_dim 4) = 1 "
                                                               "dimensions, expected an even number >= 2"),
        (dict(rope_theta=1e4, rope_fraction=0.75), ValueError, "rope_fraction=0.75 rotates int(0.75 × head_dim 4) = 3 "
                                                               "dimensions"),
        (dict(yarn=(2.0, 8)), TypeError, "yarn must be a mha_lib.YaRN or None, got tuple"),
        (dict(yarn=mha_lib.YaRN(2.0, 8)), ValueError, "yarn stretches rotary positions: it needs rope_theta"),
    ],
)
def test_bad_controls_name_the_argument_what_it_got_and_what_was_expected(options, error, text):
    with pytest.raises(error, match=esc(text)):
        MultiHeadAttention(8, 8, 16, 0.0, 2, **options)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: mha_lib.softcap_scores(torch.ones(2), 0), ValueError, "cap must be a finite float > 0, got 0"),
        (lambda: mha_lib.softcap_scores(torch.ones(2, dtype=torch.long), 1.0), TypeError,
         "scores must be a floating-point tensor"),
        (lambda: mha_lib.softmax_with_sinks(torch.ones(2, 3, 3), torch.zeros(3)), ValueError,
         "sinks must hold one logit per head: scores (2, 3, 3) has H = 2 at dim -3, got sinks (3,)"),
        (lambda: mha_lib.softmax_with_sinks(torch.ones(3, 3), torch.zeros(3)), ValueError,
         "scores must be at least 3-D (..., H, T, S), got 2-D shape (3, 3)"),
        (lambda: mha_lib.softmax_with_sinks(torch.ones(1, 2, 3, 3), torch.zeros(2, 1)), ValueError,
         "sinks must be 1-D (H,), got 2-D shape (2, 1)"),
        (lambda: mha_lib.explicit_attention(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4),
                                            sinks=torch.zeros(3)), ValueError,
         "sinks must hold one logit per head: q (1, 2, 3, 4) has H = 2 at dim -3, got sinks (3,)"),
        (lambda: mha_lib.explicit_attention(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4),
                                            softcap="50"), TypeError, "softcap must be a positive float, got str '50'"),
        (lambda: mha_lib.flash_attention(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4),
                                         sinks=torch.zeros(2, dtype=torch.long)), TypeError,
         "sinks must be a floating-point tensor"),
    ],
)
def test_bad_input_to_the_functions(call, error, text):
    with pytest.raises(error, match=esc(text)):
        call()


@pytest.mark.parametrize("causal", [True, False])
def test_sinks_and_a_gate_with_padding_agree_on_explicit_and_flash(causal):
    options = dict(d_in=12, d_out=12, H=4, qkv_bias=True, num_kv_heads=2, head_dim=4, qk_norm="head", sinks=True,
                   gate="head", causal=causal, rope_theta=1e4 if causal else None)
    explicit, flash = build(options, "explicit", 7), build(options, "flash", 7)
    flash.load_state_dict(explicit.state_dict())
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 9, 12, generator=gen)
    pad = torch.arange(9)[None, :] >= torch.tensor([9, 5, 1])[:, None]  # (B, S): True = padded
    with torch.no_grad():
        out, weights = explicit(x, key_padding_mask=pad, return_weights=True)
        torch.testing.assert_close(flash(x, key_padding_mask=pad), out, **TOL)
    assert weights.masked_select(pad[:, None, None, :]).abs().max() == 0
    assert bool((weights.sum(-1) < 1).all())
