"""No hidden ``T × S``: one call of each layer keeps the memory promise of its kernel (chapter 14).

The reduced form of the memory matrix of ``tests/benchmarks/layer_memory.py``: a few layer × kernel × case points
at T = 8,192 (B = 1, widths 32, 4 heads), each measured by that script in a fresh Python process (the peak of the
resident memory above what was in use before the call: ``attention_memory.peak_growth``). One float32 ``T × S``
matrix is 256 MiB there. Bounds:

    flash, sdpa   < 25 MiB   a tenth of one T × S matrix: no T × S tensor of any dtype (an int64 or a float mask
                             would be 512 or 256 MiB, a boolean one 64)
    explicit      > 256 MiB  the control: it builds the (B, H, T, S) weights, so the measurement must see them

The flash paths are the tiled kernel's own triangle (bottom-right, and its window), the sdpa paths SDPA's
(``is_causal``, or blocks of queries: ``sdpa_attention``); the in-process tests below check that they compute what
the mask computes.
About 30 s on a quiet 2-core machine (8 processes, one thread each).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mha_lib
from mha_lib import KVCache, MultiHeadAttention, MultiHeadLatentAttention
from mha_lib.functional import explicit_attention, flash_attention, sdpa_attention

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "benchmarks" / "layer_memory.py"
T = 8192
BOUND_MIB = 25  # flash and sdpa: a tenth of one float32 (T, T) matrix, 256 MiB
CONTROL_MIB = 256  # explicit: at least one float32 (T, S) matrix
POINTS = [  # (layer, case, kernel): every layer and case once, each kernel's hardest paths
    ("gqa", "window", "flash"),
    ("gqa", "cache", "flash"),
    ("mla", "causal", "flash"),
    ("mla_absorbed", "cache", "flash"),
    ("gqa", "window_cache", "sdpa"),
    ("mla", "cache", "sdpa"),
    ("mla_absorbed", "causal", "sdpa"),
    ("gqa", "causal", "explicit"),
]


def _can_measure() -> bool:
    """Linux's high-water mark can be reset (``/proc/self/clear_refs``): elsewhere the peak is not one call's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return "VmHWM" in Path("/proc/self/status").read_text()
    except OSError:
        return False


def measure(layer: str, case: str, kernel: str) -> dict:
    """One point of the benchmark, in its own process with one thread (the peak is that process's)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--point", layer, case, kernel, "-T", str(T), "--device", "cpu"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not _can_measure(), reason="needs Linux's /proc/self/clear_refs to measure one call's peak")
@pytest.mark.parametrize("layer, case, kernel", POINTS, ids=["-".join(p) for p in POINTS])
def test_one_call_at_8192_tokens_holds_no_t_by_s_tensor(layer, case, kernel):
    point = measure(layer, case, kernel)
    assert (point["T"], point["S"] >= T) == (T, True)
    what = (f"{layer} {case} kernel={kernel}: one call at T={T}, S={point['S']} grew the peak by "
            f"{point['peak_mb']:.1f} MiB")
    if kernel == "explicit":
        assert point["peak_mb"] > CONTROL_MIB, f"{what}; the control must show its (B, H, T, S) weights"
    else:
        assert point["peak_mb"] < BOUND_MIB, f"{what}, more than {BOUND_MIB} MiB: a (T, S) tensor was built"


# --- the positional paths compute what the mask computes --------------------------------------------------------


def _positional_mask(T: int, S: int, diagonal: int, window: int | None) -> torch.Tensor:
    """Query i sees key j when j <= i + diagonal (and j > i + diagonal - window): causal_mask_at's rule."""
    return mha_lib.causal_mask_at(torch.arange(diagonal, diagonal + T), torch.arange(S), window=window)


@pytest.mark.parametrize("seed", range(40))
def test_sdpa_with_a_diagonal_and_a_window_equals_the_masked_explicit_kernel(seed, monkeypatch):
    monkeypatch.setattr(mha_lib.functional, "_SDPA_BLOCK_PAIRS", random.Random(seed).choice([1, 30, 2**20]))
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    Tq, S = rng.randint(1, 20), rng.randint(1, 24)
    diagonal = rng.choice([0, S - Tq, rng.randint(-4, 26)])
    window = rng.choice([None, rng.randint(1, 12)])
    width_qk, width_v = rng.choice([(8, 8), (6, 4), (4, 6)])  # latent attention's values are narrower
    q = torch.randn(2, 3, Tq, width_qk, generator=gen, requires_grad=True)
    k = torch.randn(2, 3, S, width_qk, generator=gen, requires_grad=True)
    v = torch.randn(2, 3, S, width_v, generator=gen, requires_grad=True)
    padding = rng.choice([None, torch.rand(2, 1, 1, S, generator=gen) > 0.3, torch.rand(Tq, S, generator=gen) > 0.3])
    scale = rng.choice([None, 0.4])
    keep = _positional_mask(Tq, S, diagonal, window)
    expected, _ = explicit_attention(q, k, v, mask=keep if padding is None else keep & padding, scale=scale)
    out, weights = sdpa_attention(q, k, v, mask=padding, scale=scale, is_causal=True, diagonal=diagonal, window=window)
    assert weights is None
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    if out.requires_grad:  # not when no query sees any key (all zeros, as masked_softmax gives)
        grad = torch.randn(expected.shape, generator=gen)
        theirs = torch.autograd.grad(expected, (q, k, v), grad)
        for mine, reference in zip(torch.autograd.grad(out, (q, k, v), grad), theirs):
            torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(20))
def test_flash_with_a_window_equals_the_masked_explicit_kernel(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    Tq, S, window = rng.randint(1, 30), rng.randint(1, 40), rng.randint(1, 20)
    q = torch.randn(2, 2, Tq, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, S, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, S, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    keep = _positional_mask(Tq, S, S - Tq, window)  # bottom-right, as flash_attention aligns it
    expected, _ = explicit_attention(q, k, v, mask=keep)
    out = flash_attention(q, k, v, causal=True, window=window, block_size=rng.choice([1, 4, 7, 64]))
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    grad = torch.randn(expected.shape, generator=gen, dtype=torch.float64)
    for mine, theirs in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(expected, (q, k, v), grad)):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kernel", ["sdpa", "flash"])
def test_padding_and_windows_in_the_layer_give_the_explicit_output(kernel, monkeypatch):
    monkeypatch.setattr(mha_lib.functional, "_SDPA_BLOCK_PAIRS", 16)
    x = torch.randn(2, 9, 8, generator=torch.Generator().manual_seed(0))
    padding = torch.tensor([[False] * 9, [False] * 6 + [True] * 3])
    for options in ({}, {"window": 3}, {"num_kv_heads": 1, "rope_theta": 1e4, "window": 4}):
        torch.manual_seed(0)
        explicit = MultiHeadAttention(8, 8, 16, 0.0, 2, **options).eval()
        torch.manual_seed(0)
        other = MultiHeadAttention(8, 8, 16, 0.0, 2, kernel=kernel, **options).eval()
        for kwargs in ({"key_padding_mask": padding}, {"valid_lens": torch.tensor([9, 5])}):
            torch.testing.assert_close(other(x, **kwargs), explicit(x, **kwargs), rtol=1e-5, atol=1e-5)


def test_a_latent_layer_after_a_cache_gives_the_same_output_with_every_kernel():
    x = torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(1))
    outputs = []
    for kernel in ("explicit", "sdpa", "flash"):
        torch.manual_seed(1)
        layer = MultiHeadLatentAttention(16, 2, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=2,
                                         v_head_dim=3, kernel=kernel)
        for absorbed in (False, True):
            cache = KVCache()
            with torch.no_grad():
                outputs.append(torch.cat([layer(x[:, a:b], kv_cache=cache, absorbed=absorbed)
                                          for a, b in ((0, 7), (7, 9), (9, 12))], dim=1))
    for out in outputs[1:]:
        torch.testing.assert_close(out, outputs[0], rtol=1e-5, atol=1e-5)


# --- named errors ------------------------------------------------------------------------------------------------


def test_causal_mask_at_names_the_positions_on_another_device():
    with pytest.raises(ValueError, match="key_positions is on meta but query_positions is on cpu"):
        mha_lib.causal_mask_at(torch.arange(3), torch.arange(5, device="meta"))
    with pytest.raises(ValueError, match="key_positions is on cpu but query_positions is on meta"):
        mha_lib.causal_mask_at(torch.arange(3, device="meta"), torch.arange(5))


def test_a_triangle_that_moves_needs_causality():
    q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="diagonal and window move and narrow the causal triangle: they need "
                                         "is_causal=True, got diagonal=2, window=None"):
        sdpa_attention(q, q, q, diagonal=2)
    with pytest.raises(ValueError, match="window needs causal=True"):
        flash_attention(q, q, q, window=2)
    with pytest.raises(ValueError, match=r"window must be a positive int \(>= 1\), got 0"):
        sdpa_attention(q, q, q, is_causal=True, window=0)
