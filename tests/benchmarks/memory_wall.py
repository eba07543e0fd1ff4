"""The memory wall, measured: peak memory and time of ONE attention call against T = S (chapter 14).

    python tests/benchmarks/memory_wall.py                          # CPU (and CUDA when present), about 1.5 min
    python tests/benchmarks/memory_wall.py --out mha_lib/benchmark_results  # ... and save memory_wall_<device>.json
    python tests/benchmarks/memory_wall.py --quick                  # T = 64, 128: a smoke test, 20 s

One call of scaled dot-product attention on q, k, v of shape ``(B, H, T, Dh) = (1, 1, T, 64)``, float32, no mask
(not causal: every kernel then does the same T × S work, and the explicit kernel builds exactly one T × S
tensor, so its peak can be read against the analytic ``T·S·4`` bytes), T = S in 1,024 … 16,384, four ways:

    explicit    mha_lib.explicit_attention        builds the (T, S) weights                        (chapter 3)
    flash       mha_lib.flash_attention           tiles of block_size × block_size, online softmax  (chapter 14)
    sdpa        F.scaled_dot_product_attention    PyTorch's default back-end (on a CPU: its fused kernel)
    sdpa_math   the same under sdpa_kernel(SDPBackend.MATH): PyTorch's unfused fallback, builds (T, S)

Why H = 1 and Dh = 64: one head is the smallest call that shows the wall (more heads multiply every kernel's
memory alike), and 64 is the head size of GPT-2 and most models of its family. The tiled kernel's own memory
still grows with T, but only as T·Dh (its output, 4 MiB at T = 16,384, and one query block's running state),
not as T·S (1 GiB).

Memory: the growth of the peak above what was in use before the call (q, k and v, PyTorch itself), measured as
chapter 9's ``attention_memory.py`` does and with its functions: on the CPU each point runs in a fresh Python
process that warms the kernel up on 8 tokens, resets the resident-memory high-water mark and reads ``VmHWM -
VmRSS`` around the call; on CUDA ``torch.cuda.max_memory_allocated`` minus the memory allocated before it.
It includes the call's output ``(T, Dh)``.

Time: in the same process, the call whose memory was measured is timed, then repeated until ``--repeats`` runs
or ``--budget-s`` seconds of runs, whichever comes first, but at least 3 runs (fewer only if ``--repeats`` says
so); ``seconds`` is the median of those runs (``runs`` says how many: 3 for the slowest points, e.g. the Python
loop over 65,536 tiles at T = 16,384, 5 for the fast ones). On CUDA, CUDA events around the call. Torch uses its
default number of threads (the machine's cores; the JSON says how many). On a shared machine, ``--quiet-below
PCT`` waits (at most 30 s) before each point until Linux's CPU pressure is below PCT percent (``make benchmarks``
passes 10); the pressure when each point started is saved with it.

The table gives the time ratios flash / sdpa and explicit / sdpa side by side per T; the last line printed is
``flash_vs_sdpa_at_<largest T>=<ratio>``. A benchmark, not a test: it prints numbers and judges nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import mha_lib

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
# chapter 9's memory measurement and the series' result header, shared with the other benchmarks
from attention_memory import (  # noqa: E402  (chapter 9's measurement, shared)
    MIB, json_from_child, measure_devices, peak_growth, weights_bytes,
)
from attention_speed import cpu_pressure, make_timer, result_header, wait_for_quiet  # noqa: E402

KERNELS = ("explicit", "flash", "sdpa", "sdpa_math")
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (64, 128)
HEADS, HEAD_DIM, BLOCK_SIZE = 1, 64, 64
REPEATS, BUDGET_S = 5, 3.0
MIN_RUNS = 3  # a median of 3 shrugs off one run stalled by another program
QUIET_WAIT_S = 30.0  # --quiet-below: the longest wait for a quiet CPU before one point
SEED = 0


def attention_call(kernel: str, q, k, v, block_size: int):
    """The one call measured: a function of no arguments that computes attention on q, k, v with ``kernel``."""
    if kernel == "explicit":
        return lambda: mha_lib.explicit_attention(q, k, v)
    if kernel == "flash":
        return lambda: mha_lib.flash_attention(q, k, v, block_size=block_size)
    if kernel == "sdpa":
        return lambda: F.scaled_dot_product_attention(q, k, v)

    def sdpa_math():
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v)

    return sdpa_math


def measure_point(kernel: str, T: int, args, device: torch.device) -> dict:
    """Peak memory growth and time of one call at T = S (on the CPU: run this in a fresh process)."""
    mha_lib.make_reproducible()  # full float32 matmuls everywhere (no TF32 on GPUs)
    gen = torch.Generator().manual_seed(SEED)  # drawn on the CPU, as everywhere in the series
    shape = (1, args.heads, T, args.head_dim)  # (B, H, T, Dh), T = S
    q, k, v = (torch.randn(shape, generator=gen).to(device) for _ in range(3))
    timer = make_timer(device)  # milliseconds, measured the device's way
    with torch.no_grad():  # one inference call: nothing kept for a backward
        attention_call(kernel, *(x[..., :8, :] for x in (q, k, v)), args.block_size)()  # warm-up on 8 tokens
        call = attention_call(kernel, q, k, v, args.block_size)
        samples = []
        peak, method = peak_growth(lambda: samples.append(timer(call) / 1000.0), device)  # the first run, timed
        while len(samples) < args.repeats and (len(samples) < MIN_RUNS or sum(samples) < args.budget_s):
            samples.append(timer(call) / 1000.0)
    return {
        "kernel": kernel,
        "T": T,
        "peak_mb": round(peak / MIB, 3),
        "peak_bytes": peak,
        "seconds": round(statistics.median(samples), 6),
        "runs": len(samples),
        "samples_s": [round(s, 6) for s in samples],
        "scores_mb": weights_bytes(1, args.heads, T, T) / MIB,  # the analytic T·S·4 bytes of one (T, S) matrix
        "method": method,
    }


def run_point_in_subprocess(kernel: str, T: int, args) -> dict:
    command = [
        sys.executable, str(HERE), "--point", kernel, str(T), "--heads", str(args.heads), "--head-dim",
        str(args.head_dim), "--block-size", str(args.block_size), "--repeats", str(args.repeats), "--budget-s",
        str(args.budget_s), "--device", "cpu",
    ]
    return json_from_child(command, f"{kernel} T={T}")


def sdpa_backend(args, device: torch.device) -> str:
    """The back-end SDPA's default path picks for this call here (on a CPU, float32: its fused flash kernel)."""
    q = torch.zeros(1, args.heads, 8, args.head_dim, device=device)  # (B, H, T, Dh): only the shape matters
    try:
        return SDPBackend(torch._fused_sdp_choice(q, q, q)).name  # the dispatcher's own choice (a private API)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return "default"


def time_ratios(points: list[dict]) -> list[dict]:
    """Per T, each kernel's median time divided by SDPA's (default path)."""
    seconds = {(p["kernel"], p["T"]): p["seconds"] for p in points}
    ratios = []
    for T in sorted({p["T"] for p in points}):
        row = {"T": T}
        for kernel in KERNELS:
            if kernel != "sdpa" and (kernel, T) in seconds:
                row[f"{kernel}_vs_sdpa"] = round(seconds[(kernel, T)] / seconds[("sdpa", T)], 3)
        ratios.append(row)
    return ratios


def measure(args, device: torch.device) -> dict:
    points = []
    for T in args.seq_lens:
        for kernel in KERNELS:
            wait_for_quiet(args.quiet_below, QUIET_WAIT_S)
            pressure = cpu_pressure()
            if device.type == "cpu":
                point = run_point_in_subprocess(kernel, T, args)
            else:
                point = measure_point(kernel, T, args, device)
            point["cpu_pressure"] = pressure  # % of the last 10 s some task waited for a CPU (None: not Linux)
            points.append(point)
            print(f"  T={T:<6} {kernel:<10} peak {point['peak_mb']:9.1f} MiB  {point['seconds']:9.4f} s "
                  f"(median of {point['runs']})", flush=True)
    return {
        **result_header("memory_wall", device),
        "shape": {"B": 1, "H": args.heads, "Dh": args.head_dim, "causal": False, "dtype": "float32"},
        "block_size": args.block_size,
        "seq_lens": list(args.seq_lens),
        "kernels": list(KERNELS),
        "sdpa_backend": sdpa_backend(args, device),
        "threads": torch.get_num_threads(),
        "method": points[0]["method"],
        "units": {"peak_mb": "MiB (2**20 bytes) above the memory in use before the call", "seconds": "median "
                  "of `runs` calls in one process: 3 to `repeats`, no further call after `budget_s` seconds"},
        "repeats": args.repeats,
        "budget_s": args.budget_s,
        "quiet_below": args.quiet_below,
        "points": points,
        "ratios": time_ratios(points),
        "command": "python tests/benchmarks/memory_wall.py " + " ".join(sys.argv[1:]),
    }


def format_table(result: dict) -> str:
    """Peak MiB and seconds per T for every kernel, next to T·S·4 bytes, and the time ratios to SDPA."""
    s = result["shape"]
    kernels = result["kernels"]
    lines = [
        f"{result['device']}: {result['device_name']} · torch {result['torch']}",
        f"one call: B={s['B']} H={s['H']} T=S Dh={s['Dh']} {s['dtype']}, not causal, flash block "
        f"{result['block_size']}, sdpa = {result['sdpa_backend']}",
        f"peak memory above baseline (MiB), {result['method']}; seconds: median of up to {result['repeats']} runs",
        "",
        f"{'T':>6} {'T·S·4':>7}" + "".join(f" {k + ' MiB':>14}" for k in kernels)
        + "".join(f" {k + ' s':>12}" for k in kernels) + f" {'flash/sdpa':>11} {'explicit/sdpa':>14}",
    ]
    by_key = {(p["kernel"], p["T"]): p for p in result["points"]}
    ratios = {r["T"]: r for r in result["ratios"]}
    for T in result["seq_lens"]:
        row = f"{T:>6} {by_key[(kernels[0], T)]['scores_mb']:>7.1f}"
        row += "".join(f" {by_key[(k, T)]['peak_mb']:>14.1f}" for k in kernels)
        row += "".join(f" {by_key[(k, T)]['seconds']:>12.4f}" for k in kernels)
        row += f" {ratios[T]['flash_vs_sdpa']:>11.1f} {ratios[T]['explicit_vs_sdpa']:>14.1f}"
        lines.append(row)
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-T", "--seq-lens", type=int, nargs="+", default=list(SEQ_LENS),
                        help="sequence lengths T = S (default 1024 2048 4096 8192 16384)")
    parser.add_argument("--quick", action="store_true", help="T = 64 128, one run each: a smoke test")
    parser.add_argument("--heads", type=int, default=HEADS, help=f"heads H (default {HEADS})")
    parser.add_argument("--head-dim", type=int, default=HEAD_DIM, help=f"head size Dh (default {HEAD_DIM})")
    parser.add_argument("--block-size", type=int, default=BLOCK_SIZE,
                        help=f"flash_attention's tile size (default {BLOCK_SIZE})")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"most timed runs per point (default {REPEATS})")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help=f"no further run once a point's runs add up to this many seconds (default {BUDGET_S})")
    parser.add_argument("--quiet-below", type=float, metavar="PCT",
                        help="shared Linux machine: start each point only when the CPU pressure "
                             "(/proc/pressure/cpu avg10) is below PCT percent (waits up to 30 s per point)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--out", type=Path, help="folder to save memory_wall_<device>.json in")
    parser.add_argument("--point", nargs=2, metavar=("KERNEL", "T"), help=argparse.SUPPRESS)  # one CPU point
    args = parser.parse_args(argv)
    if args.quick:
        args.seq_lens, args.repeats = list(QUICK_SEQ_LENS), 1
    for name in ("heads", "head_dim", "block_size", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if any(T < 1 for T in args.seq_lens):
        parser.error(f"every --seq-lens value must be >= 1, got {args.seq_lens}")
    if args.budget_s < 0:
        parser.error(f"--budget-s must be >= 0, got {args.budget_s}")
    if args.point and args.point[0] not in KERNELS:
        parser.error(f"--point: kernel must be one of {KERNELS}, got {args.point[0]!r}")
    args.seq_lens = sorted(set(args.seq_lens))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.point:  # the child process of one CPU point: print one JSON line
        print(json.dumps(measure_point(args.point[0], int(args.point[1]), args, torch.device("cpu"))))
        return
    results = measure_devices(args, measure, format_table, "memory_wall")
    last = results[0]["ratios"][-1]
    print(f"flash_vs_sdpa_at_{last['T']}={last['flash_vs_sdpa']}")


if __name__ == "__main__":
    main()
