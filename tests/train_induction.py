"""Train chapter 11's three runs on the CPU and save them in mha_lib/induction/checkpoints/ (``make checkpoints``).

Deterministic: one thread, fixed seeds, data drawn from a CPU generator, so the same machine writes the same
files. The notebook reads these files (strict nbval compares its stored outputs against them), and a teacher
can retrain live in class with the same function (``mha_lib.induction.model.train_run``).
"""

from __future__ import annotations

import time

from mha_lib.induction.model import CHECKPOINTS, RUN_SETTINGS, SNAPSHOT_STEPS, TRAIN_STEPS, save_run, train_run


def main() -> None:
    CHECKPOINTS.mkdir(exist_ok=True)
    for name in RUN_SETTINGS:
        start = time.perf_counter()
        run = train_run(name, TRAIN_STEPS, snapshot_steps=SNAPSHOT_STEPS if name == "two_layer" else (TRAIN_STEPS,))
        save_run(run, CHECKPOINTS / f"{name}.pt")
        log = run.log
        print(f"{name}: {TRAIN_STEPS} steps in {time.perf_counter() - start:.1f} s, "
              f"held-out loss {log.eval_loss[0]:.2f} -> {log.eval_loss[-1]:.3f}")


if __name__ == "__main__":
    main()
