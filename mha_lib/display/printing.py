"""One way to print results, so that notebooks show the same text on a CPU and on a GPU.

Notebook outputs are checked character by character (``pytest --nbval``). Raw tensors print their device
(``device='cuda:0'``), their autograd history (``grad_fn=<...>``) and digits that differ in the last place
between devices. ``show`` prints a detached CPU copy rounded to ``decimals``, with ``-0.0000`` folded to
``0.0000``.
"""

from __future__ import annotations

import torch

from ..validation import check_int, check_tensor

#: More places than float64 holds (about 16 significant digits) only print noise.
MAX_DECIMALS = 16


def _check_decimals(decimals) -> int:
    return check_int("decimals", decimals, low=0, high=MAX_DECIMALS)


def rounded(x: torch.Tensor, decimals: int = 4) -> torch.Tensor:
    """Detached CPU copy of ``x`` rounded to ``decimals`` places (floats only; other dtypes are copied).

    ``decimals`` is an int in ``[0, 16]``. NaN and ±inf stay as they are.
    """
    check_tensor("x", x)
    decimals = _check_decimals(decimals)
    x = x.detach().cpu()
    if x.is_floating_point():
        x = torch.round(x, decimals=decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    return x


def format_value(value, decimals: int = 4) -> str:
    """The text ``show`` prints for one value: tensors and floats rounded to ``decimals`` places, others ``str``."""
    decimals = _check_decimals(decimals)
    if isinstance(value, torch.Tensor) and value.device.type == "meta":
        return repr(value)  # shapes only: a meta tensor has no values to round
    if isinstance(value, torch.Tensor) and value.layout is not torch.strided:
        value = value.to_dense()  # a sparse tensor prints as its dense values, like any other
    if isinstance(value, torch.Tensor):
        with torch._tensor_str.printoptions(precision=decimals, sci_mode=False):
            return repr(rounded(value, decimals))
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)  # nan, inf, -inf: round() would fail on them
        return f"{round(value, decimals) + 0.0:.{decimals}f}"  # + 0.0: -0.00001 prints 0.0000, as tensors do
    return str(value)


def show(*values, decimals: int = 4, sep: str = " ") -> None:
    """``print`` for notebooks: tensors are moved to the CPU, detached and rounded; floats are rounded.

    ``decimals`` is an int in ``[0, 16]`` (``decimals=2.5`` or ``"2"`` is a TypeError); ``sep`` a str.
    """
    decimals = _check_decimals(decimals)
    if not isinstance(sep, str):
        raise TypeError(f"sep must be a str, got {type(sep).__name__} {sep!r}")
    print(sep.join(format_value(v, decimals) for v in values))
