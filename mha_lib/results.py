"""Saved measurements of the core's own code (chapters 9 and 12), in the core beside what they measure (stdlib only).

They ship inside the package, so a notebook reads them anywhere (Colab, a copied notebook).

    mha_lib.results.load("speed")    # {"cpu": {...}, "cuda": {...}}: every device measured, CPU first
    mha_lib.results.load("import_time")
    mha_lib.results.load("kv_cache")["cpu"]    # chapter 12: generating with and without a KV cache
    mha_lib.results.load("memory_wall")["cpu"]    # chapter 14: peak memory and time of one call against T
    mha_lib.results.load("layer_memory")["cpu"]    # chapter 14: one call of each layer × kernel × case, T = 8,192

`tests/benchmarks/run_all.py` writes these files (``benchmark_results/<kind>_<device>.json`` or
``<kind>.json``); nothing is downloaded at run time.
"""

from __future__ import annotations

import json
from importlib import resources

KINDS = ("speed", "memory", "import_time", "kv_cache", "memory_wall", "layer_memory")


def _folder():
    return resources.files("mha_lib") / "benchmark_results"


def load(kind: str) -> dict:
    """Every saved result of one benchmark, keyed by device (CPU first); ``import_time`` is one result."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "import_time":
        return json.loads((_folder() / "import_time.json").read_text(encoding="utf-8"))
    # "<kind>_<device>.json" exactly: "memory" must not pick up "memory_wall_cpu.json"
    files = (f for f in _folder().iterdir() if f.suffix == ".json" and f.stem.rpartition("_")[0] == kind)
    found = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    found.sort(key=lambda r: (r["device"] != "cpu", r["device"]))
    return {r["device"]: r for r in found}
