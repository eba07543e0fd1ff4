"""Where the tensors live, the settings that make printed numbers the same on every device, and where files
built once per machine are kept (``cache_folder``)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

import torch

from .validation import check_seed


def get_device() -> torch.device:
    """The best device present: ``cuda``, then Apple's ``mps``, then ``cpu``."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def make_reproducible(seed: int | None = None) -> None:
    """Full-precision float32 matmuls everywhere (no TF32 on GPUs), then ``torch.manual_seed(seed)``.

    Create weights and random inputs *on the CPU* right after this call and move them to the device
    afterwards: the CPU generator gives the same numbers on every machine, GPU generators do not.

    ``seed`` is ``None`` (no reseeding) or an int in ``[0, 2**64 - 1]``; a bool, a float or a str is refused
    (``make_reproducible("123")`` would otherwise fail deep inside torch, ``make_reproducible(True)`` seed 1).
    The checks come first, so a bad seed changes no setting.
    """
    if seed is not None:
        seed = check_seed("seed", seed)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if seed is not None:
        torch.manual_seed(seed)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread for a moment: the chapters' matrices are tiny, and waking a second thread costs
    more than the work itself (milliseconds per operation when other programs keep the CPU busy). One thread
    also makes a CPU training run repeat bit for bit (chapter 11)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def cache_folder(name: str) -> Path:
    """The folder ``mha_lib/<name>`` for files built once per machine (the Regular CJK font cut, SmolLM2's
    float32 copy), created if needed: beside the environment when it is writable (``sys.prefix/share``: a venv,
    Colab), else the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name:
        raise ValueError(f"name must be one folder name such as 'fonts', got {name!r}")
    shared = Path(sys.prefix, "share", "mha_lib", name)
    try:
        shared.mkdir(parents=True, exist_ok=True)
        if os.access(shared, os.W_OK):
            return shared
    except OSError:
        pass
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "mha_lib", name)
    user.mkdir(parents=True, exist_ok=True)
    return user
