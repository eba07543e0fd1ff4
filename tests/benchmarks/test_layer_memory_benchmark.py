"""Chapter 14's memory matrix (``tests/benchmarks/layer_memory.py``): it runs (on a tiny shape), prints its table,
saves what the chapter reads, and the SAVED file shows every flash and sdpa path of both layers below a tenth of
one ``T × S`` matrix while the explicit kernel holds one. ``tests/core/test_layer_memory.py`` re-measures a few
points; the timings are not tested.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent
CASES = {"gqa": ["causal", "window", "cache", "window_cache"], "mla": ["causal", "cache"],
         "mla_absorbed": ["causal", "cache"]}


def _run(capsys, *args: str) -> str:
    """What ``python tests/benchmarks/layer_memory.py <args>`` prints, run in this process (``main(args)``); each
    point still runs in a process of its own, as in a real measurement."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    module = importlib.import_module("layer_memory")
    capsys.readouterr()
    module.main(list(args))
    return capsys.readouterr().out


def _check_layer_memory_json(result: dict, T: int, layers: list[str], kernels: list[str]) -> None:
    """The file chapter 14 reads through ``mha_lib.results.load("layer_memory")["cpu"]``: every layer × case ×
    kernel asked for, in the table's order, with S and one T × S matrix's MiB."""
    assert result["benchmark"] == "layer_memory" and result["schema"] == 1
    assert {"device", "device_name", "torch", "date", "shape", "prefill", "window", "layers", "cases", "kernels",
            "threads", "method", "units", "points", "command"} <= set(result)
    assert result["shape"]["T"] == T and result["shape"]["B"] == 1 and result["shape"]["grad"] is False
    assert result["layers"] == layers and result["kernels"] == kernels
    assert result["cases"] == {layer: CASES[layer] for layer in layers}
    expected = [(layer, case, kernel) for layer in layers for case in CASES[layer] for kernel in kernels]
    assert [(p["layer"], p["case"], p["kernel"]) for p in result["points"]] == expected
    prefill, window = result["prefill"], result["window"]
    for p in result["points"]:
        S = {"cache": prefill + T, "window_cache": min(prefill, window - 1) + T}.get(p["case"], T)
        assert (p["T"], p["S"]) == (T, S) and p["scores_mb"] == T * S * 4 / 2**20
        assert p["peak_mb"] == pytest.approx(p["peak_bytes"] / 2**20, abs=1e-3) and p["peak_bytes"] >= 0
        assert p["seconds"] > 0


def test_the_benchmark_runs_and_saves_what_chapter_14_reads(tmp_path, capsys):
    out = _run(capsys, "--quick", "--layers", "mla", "--kernels", "flash", "sdpa", "--device", "cpu", "--out",
               str(tmp_path))
    assert "layer  case      S  T·S·4  sdpa MiB  flash MiB" in out  # the table's header, kernels in its order
    saved = json.loads((tmp_path / "layer_memory_cpu.json").read_text())
    _check_layer_memory_json(saved, 128, ["mla"], ["sdpa", "flash"])


def test_bad_arguments_are_refused_by_name(capsys):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    from layer_memory import QUICK_SEQ_LEN, parse_args

    assert parse_args(["--quick"]).seq_len == QUICK_SEQ_LEN
    for argv, message in [(["--window", "0"], "--window must be >= 1, got 0"),
                          (["--point", "mla", "window", "flash"], "--point: LAYER in"),
                          (["--kernels", "tiled"], "invalid choice: 'tiled'")]:
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert message in capsys.readouterr().err


def test_the_saved_matrix_keeps_the_promise_of_each_kernel():
    """Asserted on the SAVED file: at T = 8,192 every flash and sdpa path of both layers grows the peak by less than
    25 MiB, a tenth of one float32 T × S matrix, while the explicit kernel, which builds the (B, H, T, S) weights,
    grows it by more than one such matrix."""
    from mha_lib.results import load

    saved = load("layer_memory")
    assert list(saved) == ["cpu"]
    result = saved["cpu"]
    _check_layer_memory_json(result, 8192, ["gqa", "mla", "mla_absorbed"], ["explicit", "sdpa", "flash"])
    for p in result["points"]:
        if p["kernel"] == "explicit":
            assert p["peak_mb"] > p["scores_mb"] >= 256, p
        else:
            assert p["peak_mb"] < 25, p
