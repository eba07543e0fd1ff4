"""One way to print results, so that notebooks show the same text on a CPU and on a GPU.

Notebook outputs are checked character by character (``pytest --nbval``). Raw tensors print their device
(``device='cuda:0'``), their autograd history (``grad_fn=<...>``) and digits that differ in the last place
between devices. ``show`` prints a detached CPU copy rounded to ``decimals``, with ``-0.0000`` folded to
``0.0000``.
"""

from __future__ import annotations

import unicodedata

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


def display_width(text: str) -> int:
    """The columns ``text`` takes in a notebook's monospaced output: two for a wide (CJK) character, none for a
    combining mark, one for anything else (Unicode's East Asian Width, so ``str.ljust`` is not enough)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__} {text!r}")
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in text)


def pad(text: str, width: int, align: str = "<") -> str:
    """``text`` padded with spaces to ``width`` display columns: ``align`` is ``"<"`` (left), ``">"`` (right) or
    ``"^"`` (centred). Text already wider is returned as it is."""
    if align not in ("<", ">", "^"):
        raise ValueError(f"align must be '<', '>' or '^', got {align!r}")
    missing = max(check_int("width", width, low=0) - display_width(text), 0)
    left = {"<": 0, ">": missing, "^": missing // 2}[align]
    return " " * left + text + " " * (missing - left)


def show_table(rows, *, header=None, align: str | None = None, sep: str = "  ") -> None:
    """Print ``rows`` (a list of rows, each a list of values) as columns aligned by display width, so a Chinese
    header lines up with its numbers. Values go through :func:`format_value` unless they are already strings.

    ``header``: an optional first row; ``align``: one of ``<``, ``>``, ``^`` per column (default: the first column
    left, the others right); ``sep``: what separates two columns.
    """
    rows = [list(row) for row in rows]
    if header is not None:
        rows.insert(0, list(header))
    if not rows:
        return
    n = len(rows[0])
    if any(len(row) != n for row in rows):
        raise ValueError(f"rows must all have {n} cells (the first row's), got lengths {[len(r) for r in rows]}")
    align = align or "<" + ">" * (n - 1)
    if len(align) != n:
        raise ValueError(f"align must give one of '<', '>', '^' per column ({n}), got {align!r}")
    cells = [[v if isinstance(v, str) else format_value(v) for v in row] for row in rows]
    widths = [max(display_width(row[j]) for row in cells) for j in range(n)]
    for row in cells:
        print(sep.join(pad(c, w, a) for c, w, a in zip(row, widths, align)).rstrip())
