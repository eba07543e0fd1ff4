"""Shared test set-up: full-precision float32 matmuls, as in the notebooks; a kernel with Colab's ipywidgets."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

import mha_lib

# One thread per pytest-xdist worker, and per kernel it starts (they inherit OMP_NUM_THREADS). By default every
# worker runs torch on as many threads as the machine has cores: two workers on two cores oversubscribe them, and
# OpenMP threads waiting for each other make small tensor operations up to 100 times slower (measured: the
# core, exercise and induction tests took 56 s with the default, 27 s with one thread per worker).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

# Google Colab's ipywidgets 7.7, installed beside the environment by `make install` (see the Makefile)
IPYWIDGETS7_DIR = Path(__file__).resolve().parents[1] / ".venv-ipywidgets7"


@pytest.fixture(autouse=True)
def _reproducible():
    mha_lib.make_reproducible(0)
    yield


@pytest.fixture
def device():
    """The device the library would pick (cuda, mps or cpu)."""
    return mha_lib.get_device()


@pytest.fixture(scope="module")
def ipywidgets7_kernel():
    """A real Jupyter kernel whose ``import ipywidgets`` finds 7.7.1 (first on PYTHONPATH); the rest is ours."""
    if not (IPYWIDGETS7_DIR / "ipywidgets").is_dir():
        pytest.skip(f"{IPYWIDGETS7_DIR.name}/ is missing: `make install` creates it (ipywidgets 7.7.1, as on Colab)")
    from jupyter_client.manager import start_new_kernel

    pythonpath = os.pathsep.join([str(IPYWIDGETS7_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    # the kernel's own log (stderr) would add jupyter_client's "running over TCP" notice; the code's stderr
    # comes back as messages, which the tests read
    manager, client = start_new_kernel(kernel_name="python3", env={**os.environ, "PYTHONPATH": pythonpath},
                                       stderr=subprocess.DEVNULL, startup_timeout=120)
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run_in_kernel(client, code: str) -> tuple[list[dict], dict]:
    """Run ``code`` in the kernel; it must succeed, write nothing to stderr and print a JSON object last.

    Returns every message the kernel sent (what a browser would receive) and that JSON object.
    """
    messages: list[dict] = []
    reply = client.execute_interactive(code, timeout=300, output_hook=messages.append)
    errors = ["\n".join(m["content"]["traceback"]) for m in messages if m["msg_type"] == "error"]
    assert reply["content"]["status"] == "ok", "\n".join(errors)
    stderr = [m["content"]["text"] for m in messages if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"]
    assert not stderr, "".join(stderr)
    stdout = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    return messages, json.loads(stdout.strip().splitlines()[-1])


def pytest_report_header(config):
    return f"torch {torch.__version__}, mha_lib device: {mha_lib.get_device()}"



@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist (or without xdist) still runs
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs pytest-xdist with `--dist loadfile`: each test file, and each notebook (nbval runs a
    notebook's cells in order in one kernel), stays whole on one worker. One exception, so that both workers share
    the slowest file: each notebook of test_standalone.py is a unit of its own. (pytest-xdist's own `loadgroup`
    cannot do this under pytest 9: it renames items through an attribute pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndStandaloneNotebooks(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if "::test_notebook_runs_alone_from_the_wheel[" in nodeid:
                return nodeid
            return nodeid.split("::", 1)[0]

    return FilesAndStandaloneNotebooks(config, log)
