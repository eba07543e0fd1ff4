"""Where the tensors live, and the settings that make printed numbers the same on every device."""

from __future__ import annotations

import torch


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
    """
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if seed is not None:
        torch.manual_seed(seed)
