"""Shared test set-up: full-precision float32 matmuls, as in the notebooks."""

import pytest
import torch

import mha_lib


@pytest.fixture(autouse=True)
def _reproducible():
    mha_lib.make_reproducible(0)
    yield


@pytest.fixture
def device():
    """The device the library would pick (cuda, mps or cpu)."""
    return mha_lib.get_device()


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
