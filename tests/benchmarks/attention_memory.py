"""Peak memory of one attention layer against the sequence length T: explicit kernel vs SDPA (chapter 9).

    python tests/benchmarks/attention_memory.py                          # CPU (and CUDA when present)
    python tests/benchmarks/attention_memory.py --out mha_lib/benchmark_results  # ... and save memory_<device>.json
    python tests/benchmarks/attention_memory.py -T 256 512 --modes inference

For every T, the layer ``mha_lib.MultiHeadAttention(kernel=...)`` (B=1, D=768, H=12 by default, causal) runs
once, in two modes: *inference* (forward under ``torch.no_grad``) and *training* (forward + backward). The
script reports the peak memory the call needed **above** what was already in use before it (the input, the
weights, PyTorch itself), and the analytic size of the explicit kernel's weights tensor, ``B·H·T²·4`` bytes.

How the peak is measured:

* CUDA: ``torch.cuda.max_memory_allocated()`` after ``torch.cuda.reset_peak_memory_stats()``, minus the
  memory allocated before the call. Exact for tensors.
* CPU: PyTorch keeps no allocator statistics on the CPU, so the script asks the operating system. Each point runs
  in a fresh Python process (nothing left over from the previous point: no cached pages, no fragmented heap),
  which builds the layer and the input, warms the kernels up on a tiny input, then resets the process's
  resident-memory high-water mark (Linux: ``/proc/self/clear_refs``) and reads the resident size (``VmRSS``),
  runs the call, and reads the high-water mark (``VmHWM``). Peak - baseline is the memory the call touched
  at its worst moment: tensors, plus the scratch buffers of oneDNN/MKL and the allocator's slack. Large tensors
  are mapped and unmapped straight from the OS by glibc, so for the T×T tensors this is close to the tensor
  bytes; for small T it is dominated by a few MB of noise. (Other systems: ``ru_maxrss`` of the fresh process
  minus the resident size before the call, a slight overestimate.)
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import torch

import mha_lib

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from attention_speed import result_header, save_result  # noqa: E402  (shared with the speed benchmark)

MIB = 2**20


def weights_bytes(B: int, H: int, T: int, S: int | None = None, bytes_per_float: int = 4) -> int:
    """Size of the attention weights ``(B, H, T, S)`` that the explicit kernel materialises."""
    return B * H * T * (T if S is None else S) * bytes_per_float


def proc_status(field: str) -> int | None:
    """A field of /proc/self/status in bytes (Linux), or None elsewhere."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, flags=re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def reset_high_water_mark() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # "5" resets VmHWM to the current VmRSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def peak_growth(call, device: torch.device) -> tuple[int, str]:
    """Bytes of the peak above the baseline while ``call()`` runs once, and how they were measured: CUDA's allocator, or Linux's VmHWM
    after a high-water-mark reset (run it in a fresh process), or ru_maxrss elsewhere."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
        call()
        torch.cuda.synchronize()
        return max(torch.cuda.max_memory_allocated(device) - baseline, 0), "torch.cuda.max_memory_allocated"
    if reset_high_water_mark() and proc_status("VmRSS") is not None:
        baseline = proc_status("VmRSS")
        call()
        return max(proc_status("VmHWM") - baseline, 0), "VmHWM - VmRSS (fresh process, high-water mark reset)"
    baseline = proc_status("VmRSS") or 0
    call()
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    return max(peak - baseline, 0), "ru_maxrss - RSS (fresh process)"


def measure_point(kernel: str, T: int, B: int, D: int, H: int, mode: str, device: torch.device) -> dict:
    """Peak bytes above baseline of one call of the layer (run this in a fresh process on the CPU)."""
    mha_lib.make_reproducible(0)
    layer = mha_lib.MultiHeadAttention(D, D, T, 0.0, H, kernel=kernel).to(device)
    x = torch.randn(B, T, D).to(device)
    grad_out = torch.randn(B, T, D).to(device) if mode == "training" else None

    def call(inp):
        if mode == "inference":
            with torch.no_grad():
                layer(inp)
        else:
            layer(inp.requires_grad_(True)).backward(grad_out[:, : inp.shape[1]])
            layer.zero_grad(set_to_none=True)

    call(x[:, :8].clone())  # warm-up on 8 tokens: load the kernels, start the threads, allocate their buffers
    peak_bytes, method = peak_growth(lambda: call(x), device)
    return {"kernel": kernel, "T": T, "mode": mode, "peak_bytes": peak_bytes, "method": method}


def json_from_child(command: list[str], what: str) -> dict:
    """Run one measurement point in a fresh Python process (the CPU's way to measure a peak); its last line of
    output is the point's JSON. ``what`` names the point if it fails."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"point {what} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_point_in_subprocess(kernel: str, T: int, args) -> dict:
    command = [
        sys.executable, str(HERE), "--point", kernel, str(T), "-B", str(args.batch), "-D", str(args.width),
        "-H", str(args.heads), "--modes", args.current_mode, "--device", "cpu",
    ]
    return json_from_child(command, f"{kernel} T={T}")


def measure(args, device: torch.device) -> dict:
    points = []
    for mode in args.modes:
        args.current_mode = mode
        for T in args.seq_lens:
            for kernel in ("explicit", "sdpa"):
                if device.type == "cpu":
                    point = run_point_in_subprocess(kernel, T, args)
                else:
                    point = measure_point(kernel, T, args.batch, args.width, args.heads, mode, device)
                point["weights_bytes"] = weights_bytes(args.batch, args.heads, T)
                points.append(point)
                print(f"  {mode:<9} T={T:<5} {kernel:<8} peak {point['peak_bytes'] / MIB:8.1f} MiB", flush=True)
    return {
        **result_header("attention_memory", device),
        "shape": {"B": args.batch, "D": args.width, "H": args.heads, "causal": True, "dtype": "float32"},
        "seq_lens": list(args.seq_lens),
        "modes": list(args.modes),
        "method": points[0]["method"],
        "points": points,
        "command": "python tests/benchmarks/attention_memory.py " + " ".join(sys.argv[1:]),
    }


def format_table(result: dict) -> str:
    """Peak MiB per T, one column per (mode, kernel), next to the analytic size of the weights."""
    s = result["shape"]
    lines = [
        f"{result['device']}: {result['device_name']} · torch {result['torch']}",
        f"B={s['B']} D={s['D']} H={s['H']} causal {s['dtype']} · peak memory above baseline, MiB",
        f"method: {result['method']}",
        "",
    ]
    columns = [(mode, kernel) for mode in result["modes"] for kernel in ("explicit", "sdpa")]
    header = f"{'T':>5} {'B·H·T²·4':>9}" + "".join(f" {mode[:5] + ' ' + kernel:>16}" for mode, kernel in columns)
    lines.append(header)
    by_key = {(p["mode"], p["kernel"], p["T"]): p for p in result["points"]}
    for T in result["seq_lens"]:
        analytic = weights_bytes(s["B"], s["H"], T) / MIB
        row = f"{T:>5} {analytic:>9.1f}"
        row += "".join(f" {by_key[(mode, kernel, T)]['peak_bytes'] / MIB:>16.1f}" for mode, kernel in columns)
        lines.append(row)
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-T", "--seq-lens", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("-B", "--batch", type=int, default=1, help="batch size (default 1)")
    parser.add_argument("-D", "--width", type=int, default=768, help="model width (default 768)")
    parser.add_argument("-H", "--heads", type=int, default=12, help="number of heads (default 12)")
    parser.add_argument("--modes", nargs="+", choices=("inference", "training"), default=["inference", "training"])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--out", type=Path, help="folder to save memory_<device>.json in (e.g. mha_lib/benchmark_results)")
    parser.add_argument("--point", nargs=2, metavar=("KERNEL", "T"), help=argparse.SUPPRESS)  # one CPU point
    args = parser.parse_args(argv)
    if args.width % args.heads:
        parser.error(f"--width ({args.width}) must be divisible by --heads ({args.heads})")
    return args


def devices_to_measure(choice: str) -> list[torch.device]:
    """``--device auto|cpu|cuda``: the CPU always (unless "cuda" alone), then CUDA when asked for or present."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    if choice == "cuda":
        return [torch.device("cuda")]
    if choice == "auto" and torch.cuda.is_available():
        return [torch.device("cpu"), torch.device("cuda")]
    return [torch.device("cpu")]


def measure_devices(args, measure, format_table, stem: str) -> list[dict]:
    """The memory benchmarks' driver: ``measure(args, device)`` on each device of ``--device``, its table printed
    and, with ``--out``, saved as ``<stem>_<device>.json``; returns the results in device order."""
    results = []
    for device in devices_to_measure(args.device):
        print(f"measuring on {device.type} ...")
        result = measure(args, device)
        results.append(result)
        print()
        print(format_table(result))
        print()
        if args.out:
            print(f"saved {save_result(result, args.out / f'{stem}_{device.type}.json')}")
    return results


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.point:  # the child process of one CPU point: print one JSON line
        kernel, T = args.point[0], int(args.point[1])
        print(json.dumps(measure_point(kernel, T, args.batch, args.width, args.heads, args.modes[0],
                                       torch.device("cpu"))))
        return
    measure_devices(args, measure, format_table, "memory")


if __name__ == "__main__":
    main()
