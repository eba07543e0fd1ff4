"""What does ``import mha_lib`` cost on top of ``import torch``? (budget: 0.3 s)

    python tests/benchmarks/import_time.py                       # median of 7 fresh processes each
    python tests/benchmarks/import_time.py --out mha_lib/benchmark_results  # ... and save import_time.json

Every measurement is a fresh Python process (a module is imported only once per process, and a warm file cache
is the realistic case). Two kinds of process alternate, so a busy moment of the machine hits both alike:

    torch     time of ``import torch``
    mha_lib   time of ``import torch`` and, separately, of ``import mha_lib`` right after it

The figure that matters is the second part of the second kind: what the library adds once torch is loaded
(a notebook imports torch anyway). The last line printed is ``mha_lib_extra_s=<median seconds>``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch  # only for the version written to the results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_speed import save_result  # noqa: E402  (shared with the other benchmarks)

SCHEMA = 1
BUDGET_S = 0.3

TORCH_ONLY = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
TORCH_THEN_LIB = (
    "import time; t = time.perf_counter(); import torch; t1 = time.perf_counter(); import mha_lib; "
    "t2 = time.perf_counter(); print(t1 - t, t2 - t1)"
)


def run(code: str) -> list[float]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return [float(v) for v in out.split()]


def measure(repeats: int) -> dict:
    run(TORCH_THEN_LIB)  # warm the file cache once, untimed
    torch_only, torch_first, lib_extra = [], [], []
    for _ in range(repeats):
        torch_only.append(run(TORCH_ONLY)[0])
        t_torch, t_lib = run(TORCH_THEN_LIB)
        torch_first.append(t_torch)
        lib_extra.append(t_lib)
    return {
        "benchmark": "import_time",
        "schema": SCHEMA,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "repeats": repeats,
        "import_torch_s": round(statistics.median(torch_only), 4),
        "import_mha_lib_after_torch_s": round(statistics.median(lib_extra), 4),
        "import_torch_then_mha_lib_s": round(statistics.median(a + b for a, b in zip(torch_first, lib_extra)), 4),
        "budget_s": BUDGET_S,
        "samples": {"torch": torch_only, "mha_lib_after_torch": lib_extra},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="fresh processes of each kind (default 7)")
    parser.add_argument("--out", type=Path, help="folder to save import_time.json in (e.g. mha_lib/benchmark_results)")
    args = parser.parse_args(argv)
    result = measure(args.repeats)
    print(f"import torch                      {result['import_torch_s']:.3f} s  (median of {args.repeats})")
    print(f"import torch, then import mha_lib {result['import_torch_then_mha_lib_s']:.3f} s")
    verdict = "within" if result["import_mha_lib_after_torch_s"] <= BUDGET_S else "OVER"
    print(f"mha_lib on top of torch           {result['import_mha_lib_after_torch_s']:.3f} s  "
          f"({verdict} the {BUDGET_S} s budget)")
    if args.out:
        print(f"saved {save_result(result, args.out / 'import_time.json')}")
    print(f"mha_lib_extra_s={result['import_mha_lib_after_torch_s']:.4f}")


if __name__ == "__main__":
    main()
