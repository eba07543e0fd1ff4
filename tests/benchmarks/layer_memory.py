"""The memory promise inside the layers: peak memory of ONE call of each layer × kernel × case (chapter 14).

    python tests/benchmarks/layer_memory.py                          # CPU (and CUDA when present), about 2 min
    python tests/benchmarks/layer_memory.py --out mha_lib/benchmark_results  # ... and save layer_memory_<device>.json
    python tests/benchmarks/layer_memory.py --quick                  # T = 128: a smoke test
    python tests/benchmarks/layer_memory.py --layers mla --kernels flash sdpa   # some of the points

``memory_wall.py`` measures the bare functions: the tiled kernel never holds a ``T × S`` matrix. This script
checks that the *layers* keep that promise on every path, masks included: one call of

    gqa           mha_lib.MultiHeadAttention(32, 32, H=4, num_kv_heads=2, rope_theta=1e4)     (chapters 12-13)
    mla           mha_lib.MultiHeadLatentAttention(32, H=4, r=16, dn=8, dr=4, dv=8)            (chapter 14)
    mla_absorbed  the same layer called with absorbed=True

under ``torch.no_grad`` with B = 1 and T = 8,192 query tokens, in each case

    causal        the sequence from position 0 (keys = queries)
    window        gqa only: a sliding window of --window keys (default 1,024)
    cache         after a KV cache that already holds --prefill tokens (default 1,024): S = prefill + T
    window_cache  gqa only: both (the cache keeps the last window - 1 tokens: S = window - 1 + T)

with each kernel: ``explicit`` (builds the ``(B, H, T, S)`` weights: the control), ``sdpa`` and ``flash``. One
float32 ``T × S`` matrix is 256 MiB at T = S = 8,192; the flash and sdpa paths must stay far below it (the test
``tests/core/test_layer_memory.py`` runs a few of these points with bounds: < 25 MB for flash and sdpa, > 256 MB
for explicit).

Memory: chapter 9's ``attention_memory.peak_growth``, used as ``memory_wall.py`` uses it: on the CPU each point
runs in a fresh Python process that builds the layer, warms it up on 8 tokens, fills the cache (cache cases),
resets the resident-memory high-water mark and reads ``VmHWM - VmRSS`` around the call; on CUDA
``torch.cuda.max_memory_allocated`` minus the memory allocated before it. It includes everything the call
creates: projections, rotations, the heads' outputs, the output ``(B, T, D)``. ``seconds`` is that one call's time.
A benchmark, not a test: it prints numbers and judges nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import mha_lib

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from attention_memory import (  # noqa: E402  (chapter 9's)
    MIB, json_from_child, measure_devices, peak_growth, weights_bytes,
)
from attention_speed import cpu_pressure, result_header, wait_for_quiet  # noqa: E402

KERNELS = ("explicit", "sdpa", "flash")
LAYERS = ("gqa", "mla", "mla_absorbed")
CASES = {"gqa": ("causal", "window", "cache", "window_cache"), "mla": ("causal", "cache"),
         "mla_absorbed": ("causal", "cache")}
SEQ_LEN, PREFILL, WINDOW = 8192, 1024, 1024
QUICK_SEQ_LEN, QUICK_PREFILL, QUICK_WINDOW = 128, 32, 32
WIDTH, HEADS, KV_HEADS = 32, 4, 2
MLA_SHAPE = {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}
QUIET_WAIT_S = 30.0
SEED = 0


def key_length(case: str, T: int, prefill: int, window: int) -> int:
    """S, the number of keys the call's queries are scored against."""
    if case == "cache":
        return prefill + T
    if case == "window_cache":
        return min(prefill, window - 1) + T  # the cache keeps the last window - 1 tokens
    return T


def build_layer(layer: str, kernel: str, case: str, context_length: int, window: int):
    """The layer of one point (weights drawn from the seed, the same for every kernel)."""
    mha_lib.make_reproducible(SEED)
    if layer == "gqa":
        return mha_lib.MultiHeadAttention(
            WIDTH, WIDTH, context_length, 0.0, HEADS, kernel=kernel, num_kv_heads=KV_HEADS, rope_theta=1e4,
            window=window if case in ("window", "window_cache") else None,
        )
    return mha_lib.MultiHeadLatentAttention(WIDTH, HEADS, context_length=context_length, kernel=kernel, **MLA_SHAPE)


def measure_point(layer: str, case: str, kernel: str, args, device: torch.device) -> dict:
    """Peak memory growth and time of one call (on the CPU: run this in a fresh process)."""
    T, prefill, window = args.seq_len, args.prefill, args.window
    uses_cache = case in ("cache", "window_cache")
    module = build_layer(layer, kernel, case, prefill + T, window).to(device)
    gen = torch.Generator().manual_seed(SEED)  # drawn on the CPU, as everywhere in the series
    x = torch.randn(1, prefill + T, WIDTH, generator=gen).to(device)
    call_kwargs = {"absorbed": True} if layer == "mla_absorbed" else {}
    with torch.no_grad():
        warm_cache = mha_lib.KVCache()  # warm-up on 8 tokens, twice through a cache: kernels, threads, buffers
        module(x[:, :4], kv_cache=warm_cache, **call_kwargs)
        module(x[:, 4:8], kv_cache=warm_cache, **call_kwargs)
        module(x[:, :8], **call_kwargs)
        del warm_cache
        cache = None
        if uses_cache:
            cache = mha_lib.KVCache()
            module(x[:, :prefill], kv_cache=cache, **call_kwargs)  # the tokens already seen, before the reset
        chunk = x[:, prefill:].clone() if uses_cache else x[:, :T].clone()  # (1, T, D)
        del x
        extra = {"kv_cache": cache} if uses_cache else {}
        seconds = []

        def call():
            start = time.perf_counter()
            module(chunk, **extra, **call_kwargs)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)

        peak, method = peak_growth(call, device)
    S = key_length(case, T, prefill, window)
    return {
        "layer": layer,
        "case": case,
        "kernel": kernel,
        "T": T,
        "S": S,
        "peak_mb": round(peak / MIB, 3),
        "peak_bytes": peak,
        "seconds": round(seconds[0], 4),
        "scores_mb": weights_bytes(1, 1, T, S) / MIB,  # one float32 (T, S) matrix: what the bounds exclude
        "method": method,
    }


def run_point_in_subprocess(layer: str, case: str, kernel: str, args) -> dict:
    """One point in a fresh Python process (the CPU's way to measure a peak); returns its JSON line."""
    command = [
        sys.executable, str(HERE), "--point", layer, case, kernel, "-T", str(args.seq_len), "--prefill",
        str(args.prefill), "--window", str(args.window), "--device", "cpu",
    ]
    return json_from_child(command, f"{layer} {case} {kernel}")


def measure(args, device: torch.device) -> dict:
    points = []
    for layer in args.layers:
        for case in CASES[layer]:
            for kernel in args.kernels:
                wait_for_quiet(args.quiet_below, QUIET_WAIT_S)
                pressure = cpu_pressure()
                if device.type == "cpu":
                    point = run_point_in_subprocess(layer, case, kernel, args)
                else:
                    point = measure_point(layer, case, kernel, args, device)
                point["cpu_pressure"] = pressure
                points.append(point)
                print(f"  {layer:<13} {case:<13} {kernel:<9} S={point['S']:<6} peak {point['peak_mb']:9.1f} MiB "
                      f"{point['seconds']:8.3f} s", flush=True)
    return {
        **result_header("layer_memory", device),
        "shape": {"B": 1, "T": args.seq_len, "width": WIDTH, "heads": HEADS, "kv_heads": KV_HEADS,
                  "mla": MLA_SHAPE, "dtype": "float32", "grad": False},
        "prefill": args.prefill,
        "window": args.window,
        "layers": list(args.layers),
        "cases": {layer: list(CASES[layer]) for layer in args.layers},
        "kernels": list(args.kernels),
        "threads": torch.get_num_threads(),
        "method": points[0]["method"],
        "units": {"peak_mb": "MiB (2**20 bytes) above the memory in use before the call",
                  "seconds": "the measured call, once", "scores_mb": "one float32 (T, S) matrix, MiB"},
        "points": points,
        "command": "python tests/benchmarks/layer_memory.py " + " ".join(sys.argv[1:]),
    }


def table_rows(result: dict) -> list[list[str]]:
    """One row per (layer, case): S, one T × S float32 matrix, then each kernel's peak MiB (for show_table)."""
    by_key = {(p["layer"], p["case"], p["kernel"]): p for p in result["points"]}
    rows = []
    for layer in result["layers"]:
        for case in result["cases"][layer]:
            first = by_key[(layer, case, result["kernels"][0])]
            rows.append([layer, case, f"{first['S']:,}", f"{first['scores_mb']:.1f}"]
                        + [f"{by_key[(layer, case, k)]['peak_mb']:.1f}" for k in result["kernels"]])
    return rows


def format_table(result: dict) -> str:
    s = result["shape"]
    header = ["layer", "case", "S", "T·S·4"] + [f"{k} MiB" for k in result["kernels"]]
    rows = [header] + table_rows(result)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        f"{result['device']}: {result['device_name']} · torch {result['torch']}",
        f"one call, no grad: B={s['B']} T={s['T']} width {s['width']}, {s['heads']} heads; cache prefill "
        f"{result['prefill']}, window {result['window']}",
        f"peak memory above baseline (MiB), {result['method']}",
        "",
    ]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(row, widths))))
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-T", "--seq-len", type=int, default=SEQ_LEN, help=f"query tokens T (default {SEQ_LEN})")
    parser.add_argument("--prefill", type=int, default=PREFILL,
                        help=f"tokens in the cache before the call, cache cases (default {PREFILL})")
    parser.add_argument("--window", type=int, default=WINDOW, help=f"sliding window, window cases (default {WINDOW})")
    parser.add_argument("--quick", action="store_true", help=f"T = {QUICK_SEQ_LEN}: a smoke test")
    parser.add_argument("--layers", nargs="+", choices=LAYERS, default=list(LAYERS), help="default: all three")
    parser.add_argument("--kernels", nargs="+", choices=KERNELS, default=list(KERNELS), help="default: all three")
    parser.add_argument("--quiet-below", type=float, metavar="PCT",
                        help="shared Linux machine: start each point only when the CPU pressure "
                             "(/proc/pressure/cpu avg10) is below PCT percent (waits up to 30 s per point)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--out", type=Path, help="folder to save layer_memory_<device>.json in")
    parser.add_argument("--point", nargs=3, metavar=("LAYER", "CASE", "KERNEL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seq_len, args.prefill, args.window = QUICK_SEQ_LEN, QUICK_PREFILL, QUICK_WINDOW
    args.layers = [layer for layer in LAYERS if layer in args.layers]  # the table's order, each once
    args.kernels = [kernel for kernel in KERNELS if kernel in args.kernels]
    for name in ("seq_len", "prefill", "window"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.point:
        layer, case, kernel = args.point
        if layer not in LAYERS or case not in CASES[layer] or kernel not in KERNELS:
            parser.error(f"--point: LAYER in {LAYERS}, CASE in {CASES.get(layer, CASES)}, KERNEL in {KERNELS}; "
                         f"got {args.point}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.point:  # the child process of one CPU point: print one JSON line
        print(json.dumps(measure_point(*args.point, args, torch.device("cpu"))))
        return
    measure_devices(args, measure, format_table, "layer_memory")


if __name__ == "__main__":
    main()
