"""One way to print results, so that notebooks show the same text on a CPU and on a GPU.

Notebook outputs are checked character by character (``pytest --nbval``). Raw tensors print their device
(``device='cuda:0'``), their autograd history (``grad_fn=<...>``) and digits that differ in the last place
between devices. ``show`` prints a detached CPU copy rounded to ``decimals``, with ``-0.0000`` folded to
``0.0000``.
"""

from __future__ import annotations

import torch


def rounded(x: torch.Tensor, decimals: int = 4) -> torch.Tensor:
    """Detached CPU copy of ``x`` rounded to ``decimals`` places (floats only; other dtypes are copied)."""
    x = x.detach().cpu()
    if x.is_floating_point():
        x = torch.round(x, decimals=decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    return x


def format_value(value, decimals: int = 4) -> str:
    if isinstance(value, torch.Tensor):
        with torch._tensor_str.printoptions(precision=decimals, sci_mode=False):
            return repr(rounded(value, decimals))
    if isinstance(value, float):
        return f"{round(value, decimals) + 0.0:.{decimals}f}"  # + 0.0: -0.00001 prints 0.0000, as tensors do
    return str(value)


def show(*values, decimals: int = 4, sep: str = " ") -> None:
    """``print`` for notebooks: tensors are moved to the CPU, detached and rounded; floats are rounded."""
    print(sep.join(format_value(v, decimals) for v in values))
