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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Parallel runs (`make test`: pytest-xdist, `--dist loadgroup`): every test file, notebooks included, is one
    group that runs on one worker in order (nbval must run a notebook's cells in one kernel), except the tests
    that name their own `xdist_group` (test_standalone.py: one group per notebook, so both workers run them)."""
    for item in items:
        if not any(True for _ in item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
