"""How long the attention explorer takes to redraw, next to the naive matplotlib route it replaces.

    .venv/bin/python tests/benchmarks/widget_redraw.py           # in a Jupyter kernel, as in a notebook
    .venv/bin/python tests/benchmarks/widget_redraw.py --here    # in this process (no kernel, for profiling)

A benchmark, not a test: it prints numbers and judges nothing. The explorer shows 12 heads × 16 tokens
(width 768, 12 heads of 64, as GPT-2 small); the script changes one control at a time — causal mask, scaling,
temperature, stage, heads 12 → 6 → 12 — and times each change from setting the control's value until the
explorer has put the new PNG into its image widget (the comm message to the browser goes out then). One tour
of the controls comes first and is reported apart ("first views": the frame of a new layout is drawn and
cached then). For the "before" figure it times the route of the first notebooks on the same data: a new
``plot_heads`` figure rendered to PNG per redraw, and ``set_data`` on the existing images plus a PNG render.

The last line is ``redraw_ms_median=<number>``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import time
from pathlib import Path

SENTENCE = "Every head reads the same sentence, but each one learns to notice different words."  # 16 tokens
D_MODEL, HEADS = 768, 12
TIMED_ROUNDS = 8  # tours of the controls timed after the first one
NAIVE_REPEATS = 5


def _tour(explorer):
    """One tour of the controls: (name, new value) pairs, each a redraw."""
    c = explorer.controls
    return [
        ("causal", not c["causal"].value), ("causal", c["causal"].value),
        ("scaled", not c["scaled"].value), ("scaled", c["scaled"].value),
        ("temperature", 0.5), ("temperature", 2.0), ("temperature", 1.0),
        ("stage", "scores"), ("stage", "scaled"), ("stage", "masked"), ("stage", "weights"),
        ("num_heads", 6), ("num_heads", HEADS),
    ]


def time_explorer():
    """Milliseconds per redraw: first tour, timed tours, timed tours by control, CPU of the timed tours."""
    from mha_lib.display.widgets import attention_explorer

    explorer = attention_explorer([SENTENCE], d_model=D_MODEL, num_heads=HEADS)
    finished = []
    explorer.image.observe(lambda change: finished.append(time.perf_counter()), names="value")

    cpu = []  # CPU time of this thread per redraw: what the redraw costs when other programs share the CPU

    def change(name, value):
        count = len(finished)
        start, start_cpu = time.perf_counter(), time.thread_time()
        explorer.controls[name].value = value
        cpu.append((time.thread_time() - start_cpu) * 1e3)
        assert len(finished) == count + 1, f"changing {name} did not redraw exactly once"
        return (finished[-1] - start) * 1e3

    first = [change(name, value) for name, value in _tour(explorer)]
    timed, by_control = [], {}
    for _ in range(TIMED_ROUNDS):
        for name, value in _tour(explorer):
            ms = change(name, value)
            timed.append(ms)
            by_control.setdefault(name, []).append(ms)
    return first, timed, by_control, cpu[len(first):]


def time_naive_matplotlib() -> tuple[list[float], list[float]]:
    """Milliseconds per redraw of the matplotlib route: a new figure each time, and ``set_data`` + render."""
    import torch

    from mha_lib import plot_heads
    from mha_lib.display.widgets import attention_stages

    frames = [attention_stages(SENTENCE, d_model=D_MODEL, num_heads=HEADS, temperature=t) for t in (0.5, 1.0, 2.0)]
    tokens = frames[0].tokens

    def png(fig) -> bytes:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()

    recreate = []
    for i in range(NAIVE_REPEATS):
        start = time.perf_counter()
        png(plot_heads(frames[i % 3].weights, tokens, title="12 heads", vmin=0.0, vmax=1.0))
        recreate.append((time.perf_counter() - start) * 1e3)

    fig = plot_heads(frames[0].weights, tokens, title="12 heads", vmin=0.0, vmax=1.0)
    png(fig)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    set_data = []
    for i in range(NAIVE_REPEATS):
        start = time.perf_counter()
        weights: torch.Tensor = frames[(i + 1) % 3].weights
        for image, matrix in zip(images, weights):
            image.set_data(matrix.numpy())
        png(fig)
        set_data.append((time.perf_counter() - start) * 1e3)
    return recreate, set_data


def report() -> None:
    """Run both measurements here and print the results (the last line is the headline number)."""
    recreate, set_data = time_naive_matplotlib()
    first, timed, by_control, cpu = time_explorer()
    med = statistics.median
    print(f"naive matplotlib, new figure + PNG: median {med(recreate):.0f} ms over {len(recreate)} redraws")
    print(f"naive matplotlib, set_data + PNG:   median {med(set_data):.0f} ms over {len(set_data)} redraws")
    print(f"explorer, first views (new layouts): median {med(first):.1f} ms, max {max(first):.0f} ms")
    for name, values in by_control.items():
        print(f"explorer, {name:<12} median {med(values):5.1f} ms, max {max(values):5.1f} ms")
    print(f"explorer: {len(timed)} timed redraws of {HEADS} heads x 16 tokens, "
          f"p90 {sorted(timed)[int(0.9 * len(timed))]:.1f} ms, CPU per redraw median {med(cpu):.1f} ms")
    print(f"naive_recreate_ms_median={med(recreate):.0f}")
    print(f"naive_set_data_ms_median={med(set_data):.0f}")
    print(f"redraw_ms_median={med(timed):.1f}")


def run_in_kernel(module: str = "widget_redraw") -> str:
    """Run ``<module>.report()`` inside a fresh Jupyter kernel (the notebook's situation); return what it printed."""
    from jupyter_client.manager import start_new_kernel

    # the kernel's stderr would only add jupyter_client's "running over TCP" notice; errors come back below
    manager, client = start_new_kernel(kernel_name="python3", stderr=subprocess.DEVNULL)
    try:
        here = Path(__file__).resolve()
        code = f"import sys; sys.path.insert(0, {str(here.parent)!r})\nimport {module}\n{module}.report()"
        printed, errors = [], []

        def collect(message):
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                (printed if content["name"] == "stdout" else errors).append(content["text"])
            elif kind == "error":
                errors.append("\n".join(content["traceback"]))

        reply = client.execute_interactive(code, timeout=600, output_hook=collect)
        if reply["content"]["status"] != "ok" or errors:
            raise SystemExit("the benchmark failed in the kernel:\n" + "".join(errors))
        return "".join(printed)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def kernel_main(argv: list[str], doc: str, module: str, report, final_key: str) -> None:
    """The command line of a redraw benchmark: measure in a kernel (or ``--here``), the ``final_key=`` line last."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--here", action="store_true", help="measure in this process instead of a kernel")
    args = parser.parse_args(argv)
    if args.here:
        report()
        return
    lines = run_in_kernel(module).strip().splitlines()
    final = [line for line in lines if line.startswith(f"{final_key}=")]
    print("\n".join([line for line in lines if line not in final] + final[-1:]))


def main(argv: list[str]) -> None:
    kernel_main(argv, __doc__, "widget_redraw", report, "redraw_ms_median")


if __name__ == "__main__":
    main(sys.argv[1:])
