"""How much time does a KV cache save when a model generates? (chapter 12)

    python tests/benchmarks/kv_cache_generation.py                          # T = 64 … 1,024, about 2.5 min
    python tests/benchmarks/kv_cache_generation.py --out mha_lib/benchmark_results   # ... and save kv_cache_cpu.json
    python tests/benchmarks/kv_cache_generation.py --tokens 16 32 --repeats 1        # a smoke test, seconds

A benchmark, not a test: it prints numbers and judges nothing. The model is chapter 11's attention-only transformer
scaled up (``AttentionOnlyTransformer(InductionTask(vocab_size=512, seq_len=1100), num_layers=4, d_model=256,
num_heads=8)``, seeded random weights: 1,593,344 parameters). From a 1-token prompt it writes T new tokens
greedily with ``mha_lib.induction.model.generate`` twice:

    no cache   every step runs the whole sequence so far through the model (``use_cache=False``)
    cache      every step runs the newest token only; each layer's ``KVCache`` holds the past keys and values

Timing: one untimed warm-up (both ways, the smallest T), then ``--repeats`` rounds; every round times both ways for
every T, the two side by side (which goes first alternates from round to round), so a slow moment of a shared
machine hits both alike (with ``--quiet-below``, each pair also waits, at most 30 s, for other programs to leave
the CPU; the CPU pressure before each pair is saved). The medians are reported, and
``speedup = median no-cache time / median cache time``. Both ways must write the same tokens (``same_tokens``,
checked on every round). Torch runs on its default number of threads (the machine's cores, as in the other
benchmarks; ``--threads`` changes it); the JSON says how many. On a busy 2-core machine two threads wait for each
other and single runs may take many times longer: measure on a quiet machine (``make benchmarks`` passes
``--quiet-below 10``).

The last line printed is ``speedup_at_<largest T>=<ratio>``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from mha_lib.induction.model import AttentionOnlyTransformer, InductionTask, generate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_speed import cpu_pressure, save_result, wait_for_quiet  # noqa: E402  (shared)

SCHEMA = 1
TOKENS = (64, 128, 256, 512, 1024)
REPEATS = 3
QUIET_WAIT_S = 30.0  # --quiet-below: the longest wait for a quiet CPU before one pair of measurements
SEED = 0
PROMPT_TOKEN = 0  # the 1-token prompt
MODEL = dict(num_layers=4, d_model=256, num_heads=8)
TASK = dict(vocab_size=512, seq_len=1100)  # 1,100 learned positions: room for the prompt and 1,024 new tokens


def build_model(seed: int = SEED) -> AttentionOnlyTransformer:
    """The benchmark's model: seeded random weights (nothing trained), in eval mode, on the CPU."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AttentionOnlyTransformer(InductionTask(**TASK), **MODEL).eval()


def describe_model(model: AttentionOnlyTransformer) -> dict:
    return {
        "layers": model.num_layers,
        "d_model": model.config.d_model,
        "heads": model.num_heads,
        "vocab": model.task.vocab_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "description": (
            f"chapter 11's AttentionOnlyTransformer scaled up: {model.num_layers} layers of "
            f"MultiHeadAttention (kernel='explicit', {model.num_heads} heads, d_model {model.config.d_model}) "
            f"added to the residual stream, no MLP, no LayerNorm; {model.task.vocab_size}-token vocabulary, "
            f"{model.task.seq_len} learned positions; random weights (torch.manual_seed({SEED})), float32"
        ),
    }


def machine_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def timed_generation(model, prompt, tokens: int, use_cache: bool) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    out = generate(model, prompt, tokens, use_cache=use_cache)
    return time.perf_counter() - start, out


def measure(tokens: list[int], repeats: int, quiet_below: float | None = None) -> dict:
    model = build_model()
    prompt = torch.tensor([[PROMPT_TOKEN]])
    for use_cache in (False, True):  # the warm-up: allocator, first calls, nothing timed
        generate(model, prompt, min(tokens), use_cache=use_cache)
    times = {T: {"no_cache": [], "cache": []} for T in tokens}
    same = {T: True for T in tokens}
    pressures = {T: [] for T in tokens}
    for round_ in range(repeats):
        order = (False, True) if round_ % 2 == 0 else (True, False)  # alternate which way goes first
        for T in tokens:
            wait_for_quiet(quiet_below, max_wait_s=QUIET_WAIT_S)  # before each pair: both ways see the same CPU
            pressures[T].append(cpu_pressure())
            written = {}
            for use_cache in order:
                seconds, out = timed_generation(model, prompt, T, use_cache)
                times[T]["cache" if use_cache else "no_cache"].append(seconds)
                written[use_cache] = out
            same[T] = same[T] and torch.equal(written[True], written[False])
            print(f"round {round_ + 1}/{repeats}, T = {T}: no cache {times[T]['no_cache'][-1]:.3f} s, "
                  f"cache {times[T]['cache'][-1]:.3f} s", file=sys.stderr, flush=True)  # progress, off stdout
    points = []
    for T in tokens:
        no_cache, cache = statistics.median(times[T]["no_cache"]), statistics.median(times[T]["cache"])
        points.append({
            "tokens": T,
            "no_cache_s": round(no_cache, 6),
            "cache_s": round(cache, 6),
            "speedup": round(no_cache / cache, 2),
            "same_tokens": same[T],
            "no_cache_samples_s": [round(s, 6) for s in times[T]["no_cache"]],
            "cache_samples_s": [round(s, 6) for s in times[T]["cache"]],
            "cpu_pressure_pct": pressures[T],  # Linux's CPU pressure (avg10) before each pair: how busy the CPU was
        })
    return {
        "benchmark": "kv_cache_generation",
        "schema": SCHEMA,
        "device": "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": machine_name(),
        "date": time.strftime("%Y-%m-%d"),
        "model": describe_model(model),
        "prompt_tokens": prompt.shape[1],
        "repeats": repeats,
        "warmup": 1,
        "quiet_below": quiet_below,
        "points": points,
        "command": "python tests/benchmarks/kv_cache_generation.py " + " ".join(sys.argv[1:]),
    }


def format_table(result: dict) -> str:
    m = result["model"]
    lines = [
        f"cpu: {result['machine']}, {result['threads']} thread{'s' if result['threads'] != 1 else ''} · "
        f"torch {result['torch']}",
        f"{m['layers']} layers, d_model {m['d_model']}, {m['heads']} heads, vocab {m['vocab']}, "
        f"{m['parameters']:,} parameters · prompt {result['prompt_tokens']} token · "
        f"median of {result['repeats']} runs",
        "",
        f"{'new tokens':>10} {'no cache s':>11} {'cache s':>9} {'speed-up':>9} {'same tokens':>12}",
    ]
    for p in result["points"]:
        lines.append(f"{p['tokens']:>10} {p['no_cache_s']:>11.3f} {p['cache_s']:>9.3f} {p['speedup']:>8.1f}x "
                     f"{'yes' if p['same_tokens'] else 'NO':>12}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS),
                        help="numbers of new tokens T (default 64 128 256 512 1024)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"timed rounds; medians (default {REPEATS})")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own, the number of cores)")
    parser.add_argument("--quiet-below", type=float, metavar="PCT",
                        help="before each pair, wait (at most 30 s) until Linux's CPU pressure is below PCT percent")
    parser.add_argument("--out", type=Path, help="folder to save kv_cache_cpu.json in (e.g. mha_lib/benchmark_results)")
    args = parser.parse_args(argv)
    limit = TASK["seq_len"] - 1  # the prompt takes one position
    if args.repeats < 1 or any(not 1 <= T <= limit for T in args.tokens):
        parser.error(f"--repeats must be >= 1 and every --tokens value in 1..{limit}")
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    result = measure(sorted(set(args.tokens)), args.repeats, args.quiet_below)
    print(format_table(result))
    if args.out:
        print(f"saved {save_result(result, args.out / 'kv_cache_cpu.json')}")
    last = result["points"][-1]
    print(f"speedup_at_{last['tokens']}={last['speedup']}")


if __name__ == "__main__":
    main()
