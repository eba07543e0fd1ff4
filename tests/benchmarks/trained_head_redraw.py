"""How fast the real-head explorer of chapter 10 redraws, next to the chapters' explorer on the same picture size.

    .venv/bin/python tests/benchmarks/trained_head_redraw.py           # in a Jupyter kernel, as in a notebook
    .venv/bin/python tests/benchmarks/trained_head_redraw.py --here    # in this process

A benchmark, not a test: it prints numbers and judges nothing. Both explorers draw 12 heads × 16 tokens with
the same engine (``display.render``). The real-head explorer (``mha_lib.trained.explorer``) shows one layer of
all-MiniLM-L6-v2 for the chapter's example sentence (16 word pieces with [CLS] and [SEP]); the script moves the
layer through 0 … 5 and back, and the head through 0 … 11, each change timed from setting the control until the
explorer has finished its redraw (picture and text). A first tour comes apart ("first views": the frame of a new
layout is drawn then). It also times a new sentence, which runs the encoder once (all six layers, through mha_lib's
``MultiHeadAttention``) before the picture. For comparison, the chapters' explorer is timed with
``widget_redraw.time_explorer`` (12 heads × 16 tokens, one control at a time).

The last line is ``trained_redraw_ms_median=<number>``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark's helpers
from widget_redraw import kernel_main, time_explorer  # noqa: E402

TIMED_ROUNDS = 6
NEW_SENTENCES = (
    "My grandmother keeps her old letters in a wooden box under the bed.",
    "The engineers tested the bridge before they opened it to traffic.",
    "Every head reads the same sentence, but each one notices different words.",
)


def _tour():
    return [("layer", layer) for layer in (1, 2, 3, 4, 5, 4, 3, 2, 1, 0)] + [("head", h) for h in (*range(1, 12), 0)]


def time_trained_explorer():
    """Milliseconds per redraw: first tour, timed tours by control, and new (uncached) sentences."""
    from mha_lib.trained.corpus import EXAMPLE_SENTENCE
    from mha_lib.trained.explorer import TrainedHeads, trained_head_explorer

    heads = TrainedHeads()
    explorer = trained_head_explorer(heads, [EXAMPLE_SENTENCE], layer=0, head=0)

    def change(name, value):
        count = explorer.redraw_count
        start = time.perf_counter()
        explorer.controls[name].value = value
        assert explorer.redraw_count == count + 1, f"changing {name} did not redraw exactly once"
        return (time.perf_counter() - start) * 1e3

    first = [change(name, value) for name, value in _tour()]
    by_control = {}
    for _ in range(TIMED_ROUNDS):
        for name, value in _tour():
            by_control.setdefault(name, []).append(change(name, value))
    typed = [change("typed", sentence) for sentence in NEW_SENTENCES]
    return first, by_control, typed


def report() -> None:
    _, chapters_timed, _, _ = time_explorer()
    first, by_control, typed = time_trained_explorer()
    med = statistics.median
    timed = [ms for values in by_control.values() for ms in values]
    print(f"chapters' explorer (random heads, 12 × 16): median {med(chapters_timed):.1f} ms "
          f"over {len(chapters_timed)} redraws")
    print(f"real-head explorer, first views: median {med(first):.1f} ms, max {max(first):.0f} ms")
    for name, values in by_control.items():
        print(f"real-head explorer, {name:<6} median {med(values):5.1f} ms, max {max(values):5.1f} ms "
              f"over {len(values)} redraws")
    print(f"real-head explorer, a new typed sentence (runs the 6-layer encoder): "
          + ", ".join(f"{ms:.0f} ms" for ms in typed))
    print(f"chapters_redraw_ms_median={med(chapters_timed):.1f}")
    print(f"trained_redraw_ms_median={med(timed):.1f}")


def main(argv: list[str]) -> None:
    kernel_main(argv, __doc__, "trained_head_redraw", report, "trained_redraw_ms_median")


if __name__ == "__main__":
    main(sys.argv[1:])
