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
