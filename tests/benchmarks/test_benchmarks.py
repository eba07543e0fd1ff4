"""The benchmarks of chapters 9, 12 and 14: they run (on tiny shapes, in seconds), print what they promise, save what
the notebook reads; and the explicit kernel's speed-ups (scale q, mask and softmax in place) change no result.

Each script's ``main`` runs in the test's process (its command line as arguments, its printout captured): a fresh
process would only import torch once more. The processes a benchmark starts itself (a memory point, an import time)
are started as in a real measurement.

The timings themselves are not tested (a shared machine makes them noise); `tests/benchmarks/run_all.py` measures.
"""

from __future__ import annotations

import importlib
import json
import math
import re
import statistics
import sys
from pathlib import Path

import pytest
import torch

import mha_lib

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "tests" / "benchmarks"
RESULTS = ROOT / "mha_lib" / "benchmark_results"
VARIANTS = ["wrapper", "textbook", "explicit", "fused", "sdpa", "torch_mha", "reference"]


def _run(capsys, script: str, *args: str) -> str:
    """What ``python tests/benchmarks/<script> <args>`` prints, run in this process (``main(args)``)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    module = importlib.import_module(script.removesuffix(".py"))
    capsys.readouterr()
    module.main(list(args))
    return capsys.readouterr().out


def _check_speed_json(result: dict) -> None:
    assert result["benchmark"] == "attention_speed" and result["schema"] == 1
    assert {"device", "device_name", "torch", "date", "shape", "repeats", "variants", "ratios",
            "forward_ops_ms", "max_disagreement"} <= set(result)
    assert set(result["shape"]) == {"B", "T", "D", "H", "causal", "dtype"}
    assert [v["name"] for v in result["variants"]] == VARIANTS
    for v in result["variants"]:
        assert {"label", "returns_weights", "fwd_ms", "fwd_vs_reference", "fwd_samples_ms"} <= set(v)
        assert v["fwd_ms"] > 0 and len(v["fwd_samples_ms"]) == result["repeats"]
    by_name = {v["name"]: v for v in result["variants"]}
    assert by_name["reference"]["fwd_vs_reference"] == 1.0
    assert result["ratios"] == {"sdpa_vs_reference": by_name["sdpa"]["fwd_vs_reference"],
                                "explicit_vs_reference": by_name["explicit"]["fwd_vs_reference"]}
    assert result["max_disagreement"] < 1e-4  # the seven layers compute the same function
    assert set(result["forward_ops_ms"]) == {"textbook", "explicit"}


def _check_memory_json(result: dict) -> None:
    assert result["benchmark"] == "attention_memory" and result["schema"] == 1
    assert {"device", "device_name", "torch", "shape", "seq_lens", "modes", "method", "points"} <= set(result)
    keys = {(p["mode"], p["kernel"], p["T"]) for p in result["points"]}
    assert keys == {(m, k, t) for m in result["modes"] for k in ("explicit", "sdpa") for t in result["seq_lens"]}
    for p in result["points"]:
        s = result["shape"]
        assert p["weights_bytes"] == s["B"] * s["H"] * p["T"] ** 2 * 4 and p["peak_bytes"] >= 0


def test_speed_benchmark_prints_a_table_and_two_ratios_last(tmp_path, capsys):
    out = _run(capsys, "attention_speed.py", "-B", "1", "-T", "16", "-D", "16", "-H", "2", "--repeats", "2",
               "--warmup", "0", "--no-backward", "--device", "cpu", "--out", str(tmp_path))
    lines = out.rstrip("\n").splitlines()
    assert any(line.startswith("layer") and "forward ms" in line for line in lines)
    assert any(line.startswith('MultiHeadAttention(kernel="explicit")') for line in lines)
    assert re.fullmatch(r"sdpa_vs_reference=\d+\.\d+", lines[-2])
    assert re.fullmatch(r"explicit_vs_reference=\d+\.\d+", lines[-1])
    saved = json.loads((tmp_path / "speed_cpu.json").read_text())
    assert float(lines[-2].split("=")[1]) == pytest.approx(saved["ratios"]["sdpa_vs_reference"], abs=1e-3)
    _check_speed_json(saved)


def test_memory_benchmark_saves_one_point_per_kernel_mode_and_length_and_sees_the_weights(tmp_path, capsys):
    # One run serves both checks (each point is measured in a fresh process, as the benchmark does: a test
    # worker's heap may already hold freed memory to reuse). T = 768 is big enough for the explicit kernel's
    # weights (27 MiB) to stand far above the noise of the resident size.
    sys.path.insert(0, str(BENCH))
    from attention_memory import weights_bytes

    assert weights_bytes(8, 12, 1024) == 384 * 2**20
    T = 768
    out = _run(capsys, "attention_memory.py", "-B", "1", "-T", str(T), "-D", "48", "-H", "12", "--modes", "inference",
               "--device", "cpu", "--out", str(tmp_path))
    assert "B·H·T²·4" in out
    result = json.loads((tmp_path / "memory_cpu.json").read_text())
    _check_memory_json(result)
    peak = {p["kernel"]: p["peak_bytes"] for p in result["points"]}
    assert peak["explicit"] > 0.8 * weights_bytes(1, 12, T) > peak["sdpa"]


def test_import_time_script_reports_the_extra_cost(tmp_path, capsys):
    out = _run(capsys, "import_time.py", "--repeats", "1", "--out", str(tmp_path))
    assert re.fullmatch(r"mha_lib_extra_s=\d+\.\d+", out.rstrip("\n").splitlines()[-1])
    saved = json.loads((tmp_path / "import_time.json").read_text())
    assert {"import_torch_s", "import_mha_lib_after_torch_s", "budget_s"} <= set(saved)


def test_induction_training_benchmark_prints_both_thread_counts_and_saves_them(tmp_path, capsys):
    out = _run(capsys, "induction_training.py", "--steps", "20", "--out", str(tmp_path))
    lines = out.rstrip("\n").splitlines()
    assert re.fullmatch(r"steps_per_s_1_thread=\d+\.\d+", lines[-1])
    assert any(line.startswith("seconds_2_vs_1_threads = ") for line in lines)
    saved = json.loads((tmp_path / "induction_training_cpu.json").read_text())
    assert saved["benchmark"] == "induction_training" and [r["threads"] for r in saved["runs"]] == [1, 2]
    for run in saved["runs"]:
        assert run["steps"] == 20 and run["steps_per_s"] > 0 and run["final_eval_loss"] > 0
        assert len(run["final_induction_layer1"]) == 4 and set(run) >= {"induction_0.5", "previous_token_0.9"}
    assert float(lines[-1].split("=")[1]) == saved["runs"][0]["steps_per_s"]
    assert saved["max_weight_difference_between_runs"] < 1e-3  # the same run, whatever the threads


KV_CACHE_TOKENS = [64, 128, 256, 512, 1024]


def _check_kv_cache_json(result: dict, tokens: list[int]) -> None:
    """The file chapter 12 reads through ``mha_lib.results.load("kv_cache")["cpu"]``: its schema, and the same
    tokens with and without the cache. The speed-ups are measured, never asserted (a shared machine)."""
    assert result["benchmark"] == "kv_cache_generation" and result["schema"] == 1
    assert {"device", "torch", "threads", "machine", "model", "prompt_tokens", "repeats", "points"} <= set(result)
    assert result["device"] == "cpu" and result["prompt_tokens"] == 1
    assert isinstance(result["threads"], int) and result["threads"] >= 1 and result["repeats"] >= 1
    model = result["model"]
    assert set(model) == {"layers", "d_model", "heads", "vocab", "parameters", "description"}
    assert (model["layers"], model["d_model"], model["heads"], model["vocab"]) == (4, 256, 8, 512)
    # token (512 × 256) and position (1,100 × 256) embeddings, 4 layers of 4·256² + 256, unembedding 256 × 512
    assert model["parameters"] == 512 * 256 + 1100 * 256 + 4 * (4 * 256 * 256 + 256) + 256 * 512 == 1_593_344
    assert [p["tokens"] for p in result["points"]] == tokens
    for p in result["points"]:
        assert {"tokens", "no_cache_s", "cache_s", "speedup", "same_tokens"} <= set(p)
        assert p["no_cache_s"] > 0 and p["cache_s"] > 0
        assert p["speedup"] == pytest.approx(p["no_cache_s"] / p["cache_s"], rel=0.01, abs=0.01)
        assert p["same_tokens"] is True  # with and without the cache, token for token the same
        assert len(p["no_cache_samples_s"]) == len(p["cache_samples_s"]) == result["repeats"]


def test_kv_cache_benchmark_prints_a_table_and_saves_what_chapter_12_reads(tmp_path, capsys):
    out = _run(capsys, "kv_cache_generation.py", "--tokens", "3", "9", "--repeats", "2", "--out", str(tmp_path))
    lines = out.rstrip("\n").splitlines()
    assert any(line.split() == ["new", "tokens", "no", "cache", "s", "cache", "s", "speed-up", "same", "tokens"]
               for line in lines)
    assert "1,593,344 parameters" in out
    assert re.fullmatch(r"speedup_at_9=\d+\.\d+", lines[-1])
    saved = json.loads((tmp_path / "kv_cache_cpu.json").read_text())
    _check_kv_cache_json(saved, [3, 9])
    assert float(lines[-1].split("=")[1]) == saved["points"][-1]["speedup"]


def test_the_saved_results_the_notebook_reads_are_complete():
    speed = sorted(RESULTS.glob("speed_*.json"))
    memory = sorted(p for p in RESULTS.glob("memory_*.json") if not p.name.startswith("memory_wall_"))
    assert RESULTS / "speed_cpu.json" in speed and RESULTS / "memory_cpu.json" in memory
    for path in speed:
        result = json.loads(path.read_text())
        _check_speed_json(result)
        assert path.stem == f"speed_{result['device']}"
        assert result["shape"] == {"B": 8, "T": 1024, "D": 768, "H": 12, "causal": True, "dtype": "float32"}
    for path in memory:
        result = json.loads(path.read_text())
        _check_memory_json(result)
        assert path.stem == f"memory_{result['device']}"
        assert result["seq_lens"] == [256, 512, 1024, 2048, 4096] and result["modes"] == ["inference", "training"]
    from mha_lib.results import load

    assert [r["benchmark"] for r in load("memory").values()] == ["attention_memory"] * len(memory)  # no memory_wall
    kv_cache = load("kv_cache")
    assert list(kv_cache) == ["cpu"]
    _check_kv_cache_json(kv_cache["cpu"], KV_CACHE_TOKENS)
    imports = json.loads((RESULTS / "import_time.json").read_text())
    assert imports["import_mha_lib_after_torch_s"] <= imports["budget_s"]


# --- chapter 14: the memory wall ---------------------------------------------------------------------------------

MEMORY_WALL_KERNELS = ["explicit", "flash", "sdpa", "sdpa_math"]


def _check_memory_wall_json(result: dict, seq_lens: list[int]) -> None:
    """The file chapter 14 reads through ``mha_lib.results.load("memory_wall")["cpu"]``: every kernel at every T,
    the analytic T·S·4 bytes, and the time ratios recomputable from the points."""
    assert result["benchmark"] == "memory_wall" and result["schema"] == 1
    assert {"device", "device_name", "torch", "date", "shape", "block_size", "seq_lens", "kernels", "sdpa_backend",
            "threads", "method", "repeats", "budget_s", "points", "ratios", "command"} <= set(result)
    assert result["shape"] == {"B": 1, "H": 1, "Dh": 64, "causal": False, "dtype": "float32"}
    assert result["kernels"] == MEMORY_WALL_KERNELS and result["seq_lens"] == seq_lens
    assert [(p["kernel"], p["T"]) for p in result["points"]] == [(k, T) for T in seq_lens for k in MEMORY_WALL_KERNELS]
    for p in result["points"]:
        assert {"peak_mb", "peak_bytes", "seconds", "runs", "samples_s", "scores_mb", "method"} <= set(p)
        assert p["scores_mb"] == p["T"] ** 2 * 4 / 2**20  # one float32 (T, S) matrix, T = S, in MiB
        assert p["peak_mb"] == pytest.approx(p["peak_bytes"] / 2**20, abs=1e-3) and p["peak_bytes"] >= 0
        assert min(3, result["repeats"]) <= p["runs"] == len(p["samples_s"]) <= result["repeats"]
        assert min(p["samples_s"]) > 0 and p["seconds"] == pytest.approx(statistics.median(p["samples_s"]), abs=2e-6)
    seconds = {(p["kernel"], p["T"]): p["seconds"] for p in result["points"]}
    assert [r["T"] for r in result["ratios"]] == seq_lens
    for r in result["ratios"]:
        for kernel in ("explicit", "flash", "sdpa_math"):
            expected = seconds[(kernel, r["T"])] / seconds[("sdpa", r["T"])]
            assert r[f"{kernel}_vs_sdpa"] == pytest.approx(expected, rel=0.01, abs=0.001)


def test_memory_wall_benchmark_runs_and_saves_what_chapter_14_reads(tmp_path, capsys):
    # one length, one run per point (--quick has two lengths): each kernel's point in a process of its own
    out = _run(capsys, "memory_wall.py", "-T", "64", "--repeats", "1", "--device", "cpu", "--out", str(tmp_path))
    lines = out.rstrip("\n").splitlines()
    header = next(line for line in lines if line.split()[:2] == ["T", "T·S·4"])
    assert header.split()[-2:] == ["flash/sdpa", "explicit/sdpa"]
    assert re.fullmatch(r"flash_vs_sdpa_at_64=\d+\.\d+", lines[-1])
    saved = json.loads((tmp_path / "memory_wall_cpu.json").read_text())
    _check_memory_wall_json(saved, [64])
    assert all(p["runs"] == 1 for p in saved["points"])  # --repeats 1: one run per point
    assert float(lines[-1].split("=")[1]) == saved["ratios"][-1]["flash_vs_sdpa"]


def test_memory_wall_refuses_bad_arguments_by_name(capsys):
    sys.path.insert(0, str(BENCH))
    from memory_wall import QUICK_SEQ_LENS, parse_args

    quick = parse_args(["--quick"])
    assert (quick.seq_lens, quick.repeats) == (sorted(QUICK_SEQ_LENS), 1)  # the smoke test of the docstring
    for argv, message in [(["--block-size", "0"], "--block-size must be >= 1, got 0"),
                          (["-T", "64", "0"], "every --seq-lens value must be >= 1, got [64, 0]"),
                          (["--budget-s", "-1"], "--budget-s must be >= 0, got -1.0")]:
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert message in capsys.readouterr().err


def test_the_saved_memory_wall_shows_t_squared_against_t():
    """Asserted on the SAVED file (the measurement is not re-run here): the explicit kernel and SDPA's math path
    build the T × S matrix (their peak grows ~T², about 256x from T = 1,024 to 16,384, and reaches the matrix's
    size), while the tiled kernel and SDPA's fused one grow at most as T (their output and per-row state)."""
    from mha_lib.results import load

    saved = load("memory_wall")
    assert list(saved) == ["cpu"]
    result = saved["cpu"]
    _check_memory_wall_json(result, [1024, 2048, 4096, 8192, 16384])
    assert result["block_size"] == 64 and result["sdpa_backend"] == "FLASH_ATTENTION"
    peak = {(p["kernel"], p["T"]): p["peak_mb"] for p in result["points"]}
    scores = {p["T"]: p["scores_mb"] for p in result["points"]}
    small, large = 1024, 16384
    for kernel in ("explicit", "sdpa_math"):
        assert peak[(kernel, large)] >= 50 * peak[(kernel, small)]
        assert peak[(kernel, large)] >= 0.95 * scores[large]  # it holds the whole 1 GiB matrix at once
    for kernel in ("flash", "sdpa"):
        assert peak[(kernel, large)] <= 2 * (large / small) * max(peak[(kernel, small)], 1.0)  # at most ~linear
        assert peak[(kernel, large)] < 0.02 * scores[large]  # far below the T × S matrix: under 20 MiB of 1,024


# --- the explicit kernel's speed-ups change no result -----------------------------------------------------------


def _textbook(q, k, v, keep):
    """The kernel as usually written, out of place at every step (the reference for the in-place one)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    weights = weights.nan_to_num(0.0)  # a query with nothing to attend to: 0, as mha_lib documents
    return weights @ v, weights


@pytest.mark.parametrize("grad", [False, True], ids=["no-autograd", "autograd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_explicit_kernel_equals_the_textbook_kernel(grad, dtype):
    gen = torch.Generator().manual_seed(3)
    B, H, T, S, Dh = 2, 3, 5, 7, 6
    q, k, v = (torch.randn(B, H, n, Dh, generator=gen, dtype=dtype) for n in (T, S, S))
    keep = torch.rand(B, 1, T, S, generator=gen) > 0.3
    keep[0, 0, 1] = False  # one query that may attend to nothing
    inputs = [t.clone().requires_grad_(grad) for t in (q, k, v)]
    with torch.set_grad_enabled(grad):
        context, weights = mha_lib.explicit_attention(*inputs, mask=keep)
    expected_context, expected_weights = _textbook(q, k, v, keep)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(weights.detach(), expected_weights, **tol)
    torch.testing.assert_close(context.detach(), expected_context, **tol)
    for given, original in zip(inputs, (q, k, v)):
        torch.testing.assert_close(given.detach(), original, rtol=0, atol=0)  # inputs untouched
    if grad:
        grad_out = torch.randn(context.shape, generator=gen, dtype=dtype)
        (context * grad_out).sum().backward()
        reference = [t.clone().requires_grad_(True) for t in (q, k, v)]
        (_textbook(*reference, keep)[0] * grad_out).sum().backward()
        for mine, theirs in zip(inputs, reference):
            torch.testing.assert_close(mine.grad, theirs.grad, **tol)


def test_explicit_kernel_writes_the_weights_in_place_without_autograd_only():
    from mha_lib.exercises.ch09_efficiency import count_new_tensors

    q, k, v = (torch.randn(2, 3, 9, 4) for _ in range(3))
    with torch.no_grad():
        lean = count_new_tensors(mha_lib.explicit_attention, q, k, v, is_causal=True, rows=9)
    assert [op for op, _ in lean.big] == ["matmul"]  # Q Kᵀ; the mask and the softmax write into it
    with_grad = count_new_tensors(mha_lib.explicit_attention, q.requires_grad_(), k, v, is_causal=True, rows=9)
    assert [op for op, _ in with_grad.big] == ["matmul", "softmax"]  # autograd keeps the softmax output


def test_masked_softmax_leaves_its_input_alone():
    scores = torch.randn(2, 4, 4)
    before = scores.clone()
    keep = mha_lib.causal_mask(4)
    for temperature in (1.0, 2.0):
        with torch.no_grad():
            weights = mha_lib.masked_softmax(scores, keep, temperature=temperature)
        torch.testing.assert_close(scores, before, rtol=0, atol=0)
        expected = torch.softmax((before / temperature).masked_fill(~keep, float("-inf")), dim=-1)
        torch.testing.assert_close(weights, expected)


def test_benchmark_layers_compute_the_same_function():
    sys.path.insert(0, str(BENCH))
    from attention_speed import build_variants, max_disagreement

    variants = build_variants(2, 12, 24, 4, torch.device("cpu"))
    assert [v.name for v in variants] == VARIANTS
    assert max_disagreement(variants, torch.randn(2, 12, 24)) < 1e-5
