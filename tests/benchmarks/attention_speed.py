"""How fast is each way of computing the same multi-head attention layer? (chapter 9)

    python tests/benchmarks/attention_speed.py                          # CPU, and CUDA when present
    python tests/benchmarks/attention_speed.py --out mha_lib/benchmark_results  # ... and save speed_<device>.json there
    python tests/benchmarks/attention_speed.py -T 256 --repeats 3       # quicker
    python tests/benchmarks/attention_speed.py --profile explicit       # where the time goes, op by op

Seven layers that compute the same function (the weights are copied from one to the next, and the script checks
that their outputs agree) are timed side by side in one process, forward (under ``torch.no_grad``) and
forward + backward:

    wrapper     mha_lib.MultiHeadAttentionWrapper          H heads, each with its own small matmuls   (chapter 2)
    textbook    split heads + the kernel as usually written scale, mask, softmax: each a new T×T tensor
    explicit    mha_lib.MultiHeadAttention("explicit")     split heads, weights materialised          (chapter 3)
    fused       mha_lib.FusedMultiHeadAttention            one Linear for Q, K, V; explicit kernel    (chapter 3)
    sdpa        mha_lib.MultiHeadAttention("sdpa")         split heads, F.scaled_dot_product_attention
    torch_mha   nn.MultiheadAttention(need_weights=False)  PyTorch's own layer
    reference   fused QKV + F.scaled_dot_product_attention the plain fast path, written in 10 lines here

Timing: rounds of ``--warmup`` + ``--repeats``; every round times every layer once, in a rotating order, so a
slow moment of a shared machine hits all layers alike; the medians of the timed rounds are reported (with
``--quiet-below``, each round also waits for other programs to leave the CPU). On the CPU
a call is timed with ``time.perf_counter``; on CUDA with CUDA events around the call followed by
``torch.cuda.synchronize()`` (kernels run asynchronously: a wall clock would time the launch only).

The last two lines printed are the forward ratios of the first device measured (the CPU unless ``--device cuda``):

    sdpa_vs_reference=<median time of MultiHeadAttention(kernel="sdpa") / median time of the reference>
    explicit_vs_reference=<median time of MultiHeadAttention(kernel="explicit") / median time of the reference>
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

import mha_lib

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = 1


class ReferenceSDPA(nn.Module):
    """The plain fast path the others are measured against: one fused QKV projection and PyTorch's fused kernel."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, D // self.num_heads)  # (B, T, 3·D) -> (B, T, 3, H, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # -> 3 × (B, H, T, Dh)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))  # (B, T, H, Dh) -> (B, T, D) -> (B, T, D)


def textbook_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention as the nanoGPT-style walkthrough and nanoGPT's slow path write it: every step (scores,
    scale, mask, softmax) makes a new (B, H, T, T) tensor, four in all. (Raschka's book masks in place and scales
    inside the softmax call: three.)"""
    T = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, T), twice: product, then quotient
    scores = scores.masked_fill(~mha_lib.causal_mask(T, device=q.device), float("-inf"))  # a third
    weights = torch.softmax(scores, dim=-1)  # a fourth
    return weights @ v, weights  # (B, H, T, T) @ (B, H, T, Dh) -> (B, H, T, Dh)


class TextbookMHA(nn.Module):
    """``MultiHeadAttention``'s projections (shared with it) around ``textbook_attention``: the "before"."""

    def __init__(self, split: mha_lib.MultiHeadAttention):
        super().__init__()
        self.split = split

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.split
        q, k, v = (mha_lib.split_heads(p(x), m.num_heads) for p in (m.W_query, m.W_key, m.W_value))  # (B, H, T, Dh)
        context, _ = textbook_attention(q, k, v)
        return m.out_proj(mha_lib.merge_heads(context))  # (B, H, T, Dh) -> (B, T, D) -> (B, T, D)


@dataclass
class Variant:
    name: str  # short key, used in the JSON file and in the notebook
    label: str  # what a student reads
    returns_weights: bool
    module: nn.Module
    call: Callable[[nn.Module, torch.Tensor], torch.Tensor]


def build_variants(B: int, T: int, D: int, H: int, device: torch.device) -> list[Variant]:
    """The seven layers, all holding the same weights (drawn on the CPU, then moved), in eval mode."""
    torch.manual_seed(0)
    wrapper = mha_lib.MultiHeadAttentionWrapper(D, D // H, T, 0.0, H)
    explicit = mha_lib.split_from_wrapper(wrapper)  # out_proj = identity: same cost as any other D × D matrix
    fused = mha_lib.fused_from_split(explicit)
    sdpa = mha_lib.MultiHeadAttention(D, D, T, 0.0, H, kernel="sdpa")
    sdpa.load_state_dict(explicit.state_dict())
    torch_mha = mha_lib.torch_mha_from(explicit)
    reference = ReferenceSDPA(D, H)
    with torch.no_grad():
        reference.qkv.weight.copy_(fused.W_qkv.weight)
        reference.proj.load_state_dict(fused.out_proj.state_dict())
    blocked = mha_lib.invert_mask(mha_lib.causal_mask(T)).to(device)  # nn.MultiheadAttention: True = blocked

    def torch_mha_call(m, x):
        return m(x, x, x, attn_mask=blocked, is_causal=True, need_weights=False)[0]

    def plain_call(m, x):
        return m(x)

    variants = [
        Variant("wrapper", "MultiHeadAttentionWrapper", True, wrapper, plain_call),
        Variant("textbook", "explicit kernel as usually written", True, TextbookMHA(explicit), plain_call),
        Variant("explicit", 'MultiHeadAttention(kernel="explicit")', True, explicit, plain_call),
        Variant("fused", "FusedMultiHeadAttention (explicit)", True, fused, plain_call),
        Variant("sdpa", 'MultiHeadAttention(kernel="sdpa")', False, sdpa, plain_call),
        Variant("torch_mha", "nn.MultiheadAttention(need_weights=False)", False, torch_mha, torch_mha_call),
        Variant("reference", "reference: fused QKV + F.sdpa", False, reference, plain_call),
    ]
    for variant in variants:
        variant.module.to(device).eval()
    return variants


def max_disagreement(variants: list[Variant], x: torch.Tensor) -> float:
    """Largest |difference| between any layer's output and the reference's: they must compute the same thing."""
    with torch.no_grad():
        outputs = [v.call(v.module, x) for v in variants]
    return max((out - outputs[-1]).abs().max().item() for out in outputs)


def cpu_pressure() -> float | None:
    """Linux's CPU pressure (share of the last 10 s in which some task waited for a CPU), or None elsewhere."""
    try:
        first_line = Path("/proc/pressure/cpu").read_text().splitlines()[0]  # "some avg10=1.23 avg60=..."
    except (OSError, IndexError):
        return None
    return float(first_line.split()[1].split("=")[1])


def wait_for_quiet(limit: float | None, max_wait_s: float = 120.0) -> None:
    """On a shared machine: before a round, wait (at most ``max_wait_s``) until the CPU pressure is below
    ``limit`` percent, so that rounds run when other programs leave the cores alone. No-op without ``limit``."""
    if limit is None:
        return
    deadline = time.monotonic() + max_wait_s
    while time.monotonic() < deadline:
        pressure = cpu_pressure()
        if pressure is None or pressure < limit:
            return
        time.sleep(2.0)


def make_timer(device: torch.device) -> Callable[[Callable[[], None]], float]:
    """A function that runs ``fn`` once and returns its duration in milliseconds, measured the device's way."""
    if device.type == "cuda":

        def cuda_time(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()  # nothing else in flight when the clock starts
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()  # the kernels are asynchronous: wait for them before reading the clock
            return start.elapsed_time(end)

        return cuda_time

    def cpu_time(fn):
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1000.0

    return cpu_time


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {torch.get_num_threads()} threads"


def result_header(benchmark: str, device: torch.device) -> dict:
    """The first keys of every saved result: what was measured, where, with which versions, when."""
    return {
        "benchmark": benchmark,
        "schema": SCHEMA,
        "device": device.type,
        "device_name": device_name(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }


def save_result(result: dict, path: Path) -> Path:
    """Write one result as indented JSON (one file per benchmark and device: the notebook globs them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return path


def measure(args, device: torch.device) -> dict:
    """Time every variant on one device; return the results as a JSON-ready dict."""
    B, T, D, H = args.batch, args.seq_len, args.width, args.heads
    variants = build_variants(B, T, D, H, device)
    variants_by_name = {v.name: v for v in variants}
    torch.manual_seed(1)
    x = torch.randn(B, T, D).to(device)  # drawn on the CPU, as everywhere in the series
    grad_out = torch.randn(B, T, D).to(device)
    disagreement = max_disagreement(variants, x)
    x_train = x.detach().clone().requires_grad_(True)  # a layer inside a network also passes the gradient back
    timer = make_timer(device)
    modes = ("fwd", "fwd_bwd") if args.backward else ("fwd",)
    times = {v.name: {mode: [] for mode in modes} for v in variants}

    def forward(v):
        with torch.no_grad():
            v.call(v.module, x)

    def forward_backward(v):
        v.call(v.module, x_train).backward(grad_out)

    for round_ in range(args.warmup + args.repeats):
        wait_for_quiet(args.quiet_below)
        shift = round_ % len(variants)
        for v in variants[shift:] + variants[:shift]:  # rotate the order: no layer always runs after the same one
            for mode in modes:
                v.module.zero_grad(set_to_none=True)
                x_train.grad = None
                ms = timer(lambda: forward(v)) if mode == "fwd" else timer(lambda: forward_backward(v))
                if round_ >= args.warmup:
                    times[v.name][mode].append(ms)

    breakdown = {name: op_breakdown(variants_by_name[name], x, device) for name in ("textbook", "explicit")}
    reference = times["reference"]
    results = []
    for v in variants:
        entry = {"name": v.name, "label": v.label, "returns_weights": v.returns_weights}
        for mode in modes:
            samples = times[v.name][mode]
            median = statistics.median(samples)
            entry[f"{mode}_ms"] = round(median, 3)
            entry[f"{mode}_min_ms"] = round(min(samples), 3)
            entry[f"{mode}_samples_ms"] = [round(s, 3) for s in samples]
            entry[f"{mode}_vs_reference"] = round(median / statistics.median(reference[mode]), 4)
            # the ratio inside each round (neighbours in time), a cross-check that is less sensitive to drift
            paired = [s / r for s, r in zip(samples, reference[mode])]
            entry[f"{mode}_vs_reference_paired"] = round(statistics.median(paired), 4)
        results.append(entry)
    by_name = {e["name"]: e for e in results}
    return {
        **result_header("attention_speed", device),
        "shape": {"B": B, "T": T, "D": D, "H": H, "causal": True, "dtype": "float32"},
        "repeats": args.repeats,
        "warmup": args.warmup,
        "quiet_below": args.quiet_below,
        "max_disagreement": disagreement,
        "variants": results,
        "forward_ops_ms": breakdown,
        "ratios": {
            "sdpa_vs_reference": by_name["sdpa"]["fwd_vs_reference"],
            "explicit_vs_reference": by_name["explicit"]["fwd_vs_reference"],
        },
        "command": "python tests/benchmarks/attention_speed.py " + " ".join(sys.argv[1:]),
    }


def _profile_forward(v: Variant, x: torch.Tensor, device: torch.device, calls: int = 1):
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.no_grad():
        v.call(v.module, x)  # warm-up
        with profile(activities=activities, profile_memory=True) as prof:
            for _ in range(calls):
                v.call(v.module, x)
    return prof


def op_breakdown(v: Variant, x: torch.Tensor, device: torch.device, calls: int = 3, top: int = 8) -> dict:
    """Milliseconds per forward call spent in each PyTorch operation (its own time, not its children's)."""
    prof = _profile_forward(v, x, device, calls)
    attribute = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    per_op = {e.key: getattr(e, attribute) / 1000.0 / calls for e in prof.key_averages()}  # µs -> ms per call
    ranked = sorted(per_op.items(), key=lambda item: -item[1])
    return {name: round(ms, 2) for name, ms in ranked[:top] if ms > 0}


def format_table(result: dict) -> str:
    """The results as a fixed-width text table (the notebook prints the saved files with this function too)."""
    s = result["shape"]
    has_bwd = "fwd_bwd_ms" in result["variants"][0]
    lines = [
        f"{result['device']}: {result['device_name']} · torch {result['torch']}",
        f"B={s['B']} T={s['T']} D={s['D']} H={s['H']} causal {s['dtype']} · median of {result['repeats']} runs",
        "",
        f"{'layer':<42} {'weights':>7} {'forward ms':>11} {'x ref':>6}"
        + (f" {'fwd+bwd ms':>11} {'x ref':>6}" if has_bwd else ""),
    ]
    for v in result["variants"]:
        line = f"{v['label']:<42} {'yes' if v['returns_weights'] else 'no':>7} {v['fwd_ms']:>11.1f} "
        line += f"{v['fwd_vs_reference']:>6.2f}"
        if has_bwd:
            line += f" {v['fwd_bwd_ms']:>11.1f} {v['fwd_bwd_vs_reference']:>6.2f}"
        lines.append(line)
    return "\n".join(lines)


def profile(args, device: torch.device) -> None:
    """Print torch.profiler's table for one layer's forward: which operations take the time (and the memory)."""
    variants = {v.name: v for v in build_variants(args.batch, args.seq_len, args.width, args.heads, device)}
    v = variants[args.profile]
    x = torch.randn(args.batch, args.seq_len, args.width).to(device)
    prof = _profile_forward(v, x, device)
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"{v.label} on {device_name(device)}, forward:")
    print(prof.key_averages().table(sort_by=sort, row_limit=15))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-B", "--batch", type=int, default=8, help="batch size (default 8)")
    parser.add_argument("-T", "--seq-len", type=int, default=1024, help="sequence length (default 1024)")
    parser.add_argument("-D", "--width", type=int, default=768, help="model width (default 768)")
    parser.add_argument("-H", "--heads", type=int, default=12, help="number of heads (default 12)")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds; medians are reported (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto",
        help="auto (default): the CPU, then CUDA when available",
    )
    parser.add_argument(
        "--quiet-below", type=float, metavar="PCT",
        help="shared Linux machine: start each round only when the CPU pressure (/proc/pressure/cpu avg10) is "
             "below PCT percent (waits up to 2 minutes per round)",
    )
    parser.add_argument("--no-backward", dest="backward", action="store_false", help="time the forward pass only")
    parser.add_argument("--out", type=Path, help="folder to save speed_<device>.json in (e.g. mha_lib/benchmark_results)")
    parser.add_argument(
        "--profile", choices=("wrapper", "textbook", "explicit", "fused", "sdpa", "torch_mha", "reference"),
        help="print torch.profiler's table for this layer's forward instead of timing",
    )
    args = parser.parse_args(argv)
    if args.width % args.heads:
        parser.error(f"--width ({args.width}) must be divisible by --heads ({args.heads})")
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be >= 1 and --warmup >= 0")
    return args


def devices_for(choice: str) -> list[torch.device]:
    if choice == "cpu":
        return [torch.device("cpu")]
    if choice == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device is available")
        return [torch.device("cuda")]
    return [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    mha_lib.make_reproducible()  # full float32 everywhere (no TF32 on GPUs): the same arithmetic as on the CPU
    devices = devices_for(args.device)
    if args.profile:
        profile(args, devices[-1])
        return
    results = []
    for device in devices:
        result = measure(args, device)
        results.append(result)
        print(format_table(result))
        print(f"all {len(result['variants'])} layers agree: largest |difference| from the reference = "
              f"{result['max_disagreement']:.1e}")
        print()
        if args.out:
            print(f"saved {save_result(result, args.out / f'speed_{device.type}.json')}")
            print()
    first = results[0]
    print(f"ratios below: forward, {first['device']}, mha_lib layer / reference")
    print(f"sdpa_vs_reference={first['ratios']['sdpa_vs_reference']:.3f}")
    print(f"explicit_vs_reference={first['ratios']['explicit_vs_reference']:.3f}")


if __name__ == "__main__":
    main()
