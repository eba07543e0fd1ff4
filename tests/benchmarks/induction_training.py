"""How long chapter 11's live training takes on the CPU: one full ``two_layer`` run with 1 thread, then with 2.

    python tests/benchmarks/induction_training.py                      # 3,000 steps per thread count (~3 min)
    python tests/benchmarks/induction_training.py --quick              # 150 steps, a smoke test
    python tests/benchmarks/induction_training.py --out mha_lib/benchmark_results   # ... and save the JSON

A benchmark, not a test: it prints numbers and judges nothing. Each run is ``mha_lib.induction.model.train`` exactly as
the chapter calls it (seed 0, batch 64, a held-out evaluation of 256 sequences every 50 steps, which the
timings include), on a fresh ``new_model("two_layer")``. ``train`` runs on one thread (``runtime.one_thread``);
for the 2-thread run this script swaps that for a 2-thread context, nothing else changes. The callback after each
evaluation records when the best layer-1 head first reaches an induction score of 0.5 and when the best layer-0
head first reaches a previous-token score of 0.9 (seconds from the start of ``train``, and the step: an
evaluation happens every 50 steps, so a time is at most 50 steps late).

Printed per thread count: steps per second, those two times, the final training and held-out losses; then the
2-thread/1-thread ratios and the largest weight difference between the two runs (threads may add in another
order). The last line is ``steps_per_s_1_thread=<number>``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch

import mha_lib.induction.model as induction

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_speed import cpu_pressure, result_header, save_result, wait_for_quiet  # noqa: E402  (shared)

INDUCTION_TARGET = 0.5  # the best layer-1 head's induction score
PREVIOUS_TARGET = 0.9  # the best layer-0 head's previous-token score
QUICK_STEPS = 150


@contextlib.contextmanager
def threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_run(steps: int, num_threads: int, quiet_below: float | None = None) -> dict:
    """Train ``two_layer`` for ``steps`` on ``num_threads`` threads; the figures, and the final weights."""
    reached: dict[str, tuple[int, float] | None] = {"induction": None, "previous_token": None}
    start = 0.0

    def callback(step, log):
        elapsed = time.perf_counter() - start
        best_induction = max(log.induction[-1][-1])  # the last layer's heads
        best_previous = max(log.previous_token[-1][0])  # layer 0's heads
        if reached["induction"] is None and best_induction >= INDUCTION_TARGET:
            reached["induction"] = (step, elapsed)
        if reached["previous_token"] is None and best_previous >= PREVIOUS_TARGET:
            reached["previous_token"] = (step, elapsed)

    model = induction.new_model("two_layer")
    wait_for_quiet(quiet_below)  # on a shared machine: start when the others leave the cores alone (at most 2 min)
    pressure = cpu_pressure()
    original = induction.one_thread
    induction.one_thread = lambda: threads(num_threads)  # train() enters this around its loop
    try:
        start = time.perf_counter()
        log, _ = induction.train(model, steps, seed=induction.SEED, callback=callback)
        seconds = time.perf_counter() - start
    finally:
        induction.one_thread = original

    def when(key):
        return None if reached[key] is None else {"step": reached[key][0], "seconds": round(reached[key][1], 2)}

    return {
        "threads": num_threads,
        "steps": steps,
        "seconds": round(seconds, 2),
        "steps_per_s": round(steps / seconds, 1),
        "induction_0.5": when("induction"),
        "previous_token_0.9": when("previous_token"),
        "final_train_loss": round(log.loss[-1], 4),
        "final_eval_loss": round(log.eval_loss[-1], 4),
        "final_induction_layer1": [round(v, 3) for v in log.induction[-1][-1]],
        "final_previous_token_layer0": [round(v, 3) for v in log.previous_token[-1][0]],
        "cpu_pressure_before_pct": pressure,
    }, model.state_dict()


def _largest_difference(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def measure(steps: int, thread_counts: list[int], quiet_below: float | None = None) -> dict:
    runs, states = [], []
    for n in thread_counts:
        figures, state = one_run(steps, n, quiet_below)
        runs.append(figures)
        states.append(state)
    result = result_header("induction_training", torch.device("cpu"))
    result.update({"steps": steps, "eval_every": 50, "batch_size": 64, "targets": {
        "induction": INDUCTION_TARGET, "previous_token": PREVIOUS_TARGET}, "runs": runs})
    if len(runs) >= 2:
        first, second = runs[0], runs[1]
        result["ratios"] = {
            f"seconds_{second['threads']}_vs_{first['threads']}_threads":
                round(second["seconds"] / first["seconds"], 3),
            f"steps_per_s_{second['threads']}_vs_{first['threads']}_threads":
                round(second["steps_per_s"] / first["steps_per_s"], 3),
        }
        result["max_weight_difference_between_runs"] = _largest_difference(states[0], states[1])
    if steps == induction.TRAIN_STEPS and thread_counts[0] == 1:
        shipped = induction.load_run("two_layer").model.state_dict()
        result["max_weight_difference_vs_shipped"] = _largest_difference(states[0], shipped)
    return result


def _reached(entry) -> str:
    return "not reached" if entry is None else f"{entry['seconds']:6.1f} s (step {entry['step']})"


def _pressure(value) -> str:
    return "unknown" if value is None else f"{value:.0f} %"


def format_table(result: dict) -> str:
    lines = [f"two_layer, {result['steps']} steps, {result['device_name']}",
             f"{'threads':>7}  {'seconds':>7}  {'steps/s':>7}  {'induction >= 0.5':>22}  {'previous-token >= 0.9':>22}"
             f"  {'train loss':>10}  {'held-out loss':>13}  {'CPU pressure before':>19}"]
    for run in result["runs"]:
        lines.append(f"{run['threads']:>7}  {run['seconds']:7.1f}  {run['steps_per_s']:7.1f}  "
                     f"{_reached(run['induction_0.5']):>22}  {_reached(run['previous_token_0.9']):>22}  "
                     f"{run['final_train_loss']:10.4f}  {run['final_eval_loss']:13.4f}  "
                     f"{_pressure(run['cpu_pressure_before_pct']):>19}")
    for name, value in result.get("ratios", {}).items():
        lines.append(f"{name} = {value:.3f}")
    if "max_weight_difference_between_runs" in result:
        lines.append(f"largest weight difference between the runs: {result['max_weight_difference_between_runs']:.3g}")
    if "max_weight_difference_vs_shipped" in result:
        lines.append(f"largest weight difference, 1-thread run vs the shipped checkpoint: "
                     f"{result['max_weight_difference_vs_shipped']:.3g}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, help=f"training steps per run (default {induction.TRAIN_STEPS}, "
                                                   f"--quick {QUICK_STEPS})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps: a smoke test, not a measurement")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts, in order (default 1 2)")
    parser.add_argument("--out", type=Path, help="folder to save induction_training_cpu.json in")
    parser.add_argument("--quiet-below", type=float, metavar="PCT",
                        help="before each run, wait (at most 2 min) until Linux's CPU pressure is below PCT percent")
    args = parser.parse_args(argv)
    steps = args.steps or (QUICK_STEPS if args.quick else induction.TRAIN_STEPS)
    if steps < 1 or any(n < 1 for n in args.threads):
        parser.error("--steps and --threads must be positive")
    result = measure(steps, args.threads, args.quiet_below)
    print(format_table(result))
    if args.out:
        print(f"saved {save_result(result, args.out / 'induction_training_cpu.json')}")
    print(f"steps_per_s_{result['runs'][0]['threads']}_thread{'s' if result['runs'][0]['threads'] > 1 else ''}="
          f"{result['runs'][0]['steps_per_s']}")


if __name__ == "__main__":
    main()
