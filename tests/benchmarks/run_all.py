"""Re-run the benchmarks of chapters 9, 12 and 14, save the results, and refresh the chapters that print them.

    python tests/benchmarks/run_all.py            # on a quiet machine: CPU always, CUDA too when present
    python tests/benchmarks/run_all.py --quick    # tiny shapes, a smoke test (do not commit its results)

Writes ``mha_lib/benchmark_results/speed_<device>.json``, ``memory_<device>.json``, ``import_time.json``,
``kv_cache_cpu.json`` (chapter 12: generation with and without a KV cache), ``memory_wall_<device>.json``
(chapter 14: peak memory and time of one attention call, T = 1,024 … 16,384) and ``layer_memory_<device>.json``
(chapter 14: one call of each layer × kernel × case at T = 8,192), then re-executes
``notebooks/09_efficiency.ipynb``, ``notebooks/12_sharing_keys_and_values.ipynb`` and
``notebooks/14_attention_at_scale.ipynb`` and their Chinese twins where present (their stored outputs print those
files, so they must be refreshed together). On a GPU machine the new ``speed_cuda.json``, ``memory_cuda.json``,
``memory_wall_cuda.json`` and ``layer_memory_cuda.json`` are saved beside the CPU's.
Takes about 12 minutes on a quiet 2-core CPU (the KV-cache benchmark about 2.5 of them, the memory wall about 1.5,
the layer memory about 2; longer on a busy one).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RESULTS = ROOT / "mha_lib" / "benchmark_results"
NOTEBOOKS = [ROOT / "notebooks" / folder / name for folder in ("", "zh-CN")
             for name in ("09_efficiency.ipynb", "12_sharing_keys_and_values.ipynb", "14_attention_at_scale.ipynb")]


def step(title: str, command: list[str]) -> None:
    print(f"\n=== {title}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    print(f"=== {title}: {time.perf_counter() - start:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, written to --out (default /tmp)")
    parser.add_argument("--out", type=Path, help="where to save the JSON files (default mha_lib/benchmark_results)")
    parser.add_argument("--quiet-below", metavar="PCT",
                        help="passed to the speed, KV-cache and memory-wall benchmarks (shared machines)")
    parser.add_argument("--no-notebook", dest="notebook", action="store_false", help="skip the notebook refresh")
    args = parser.parse_args(argv)
    out = args.out or (Path("/tmp/mha_lib_benchmarks") if args.quick else RESULTS)
    python = sys.executable
    speed = [python, str(HERE / "attention_speed.py"), "--out", str(out)]
    memory = [python, str(HERE / "attention_memory.py"), "--out", str(out)]
    imports = [python, str(HERE / "import_time.py"), "--out", str(out)]
    kv_cache = [python, str(HERE / "kv_cache_generation.py"), "--out", str(out)]
    memory_wall = [python, str(HERE / "memory_wall.py"), "--out", str(out)]
    layer_memory = [python, str(HERE / "layer_memory.py"), "--out", str(out)]
    if args.quick:
        speed += ["-B", "2", "-T", "128", "-D", "64", "-H", "4", "--repeats", "3", "--warmup", "1"]
        memory += ["-T", "64", "128", "-D", "64", "-H", "4"]
        imports += ["--repeats", "2"]
        kv_cache += ["--tokens", "16", "32", "--repeats", "1"]
        memory_wall += ["--quick"]
        layer_memory += ["--quick"]
    else:
        speed += ["--repeats", "9"]
    if args.quiet_below:
        speed += ["--quiet-below", args.quiet_below]
        kv_cache += ["--quiet-below", args.quiet_below]
        memory_wall += ["--quiet-below", args.quiet_below]
        layer_memory += ["--quiet-below", args.quiet_below]
    start = time.perf_counter()
    step("speed", speed)
    step("memory", memory)
    step("import time", imports)
    step("kv cache", kv_cache)
    step("memory wall", memory_wall)
    step("layer memory", layer_memory)
    if args.notebook and not args.quick and out.resolve() == RESULTS.resolve():
        existing = [str(path) for path in NOTEBOOKS if path.exists()]
        step("notebooks", [python, str(ROOT / "tests" / "refresh_notebooks.py"), *existing])
    print(f"\nall done in {time.perf_counter() - start:.0f} s; results in {out}")


if __name__ == "__main__":
    main()
