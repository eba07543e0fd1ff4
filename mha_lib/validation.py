"""Argument checks shared by every public function and module.

Every check raises ``TypeError`` (wrong kind of object) or ``ValueError`` (right kind, wrong value) with a
message that names the argument, shows what it got and says what was expected. Students read these messages,
so they also hint at the usual fix.
"""

from __future__ import annotations

import numbers
from typing import Sequence

import torch

Tensor = torch.Tensor


def _shape(x: Tensor) -> str:
    return "(" + ", ".join(str(n) for n in x.shape) + ")"


def check_positive_int(name: str, value) -> int:
    """``value`` must be an int >= 1 (bools are rejected: ``True`` heads is a bug, not a count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int (>= 1), got {value}")
    return int(value)


def check_probability(name: str, value) -> float:
    """``value`` must be a real number in [0, 1): a dropout probability of 1 would zero every weight."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def check_positive_float(name: str, value) -> float:
    """``value`` must be a finite real number > 0 (used for temperature and scale)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive float, got {type(value).__name__} {value!r}")
    if not (value > 0 and value != float("inf")):
        raise ValueError(f"{name} must be a finite float > 0, got {value}")
    return float(value)


def check_divisible(name: str, value: int, by_name: str, by: int) -> None:
    if value % by != 0:
        raise ValueError(
            f"{name} ({value}) must be divisible by {by_name} ({by}): every head gets {name} // {by_name} "
            f"features; try {by_name} in {divisors(value)}"
        )


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n``: the head counts a model width ``n`` allows."""
    return [d for d in range(1, n + 1) if n % d == 0]


def check_tensor(name: str, x, *, ndim: int | None = None, layout: str | None = None) -> Tensor:
    """``x`` must be a tensor; with ``ndim``, of that many dimensions. ``layout`` names them in messages."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        expected = f"{ndim}-D {layout}" if layout else f"{ndim}-D"
        hint = ""
        if layout and layout.startswith("(B,") and x.dim() == ndim - 1:
            hint = f"; for a single sequence add a batch dimension: {name}.unsqueeze(0)"
        raise ValueError(f"{name} must be {expected}, got {x.dim()}-D shape {_shape(x)}{hint}")
    return x


def check_floating(name: str, x: Tensor) -> Tensor:
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {x.dtype}; convert it with {name}.float()"
        )
    return x


def check_last_dim(name: str, x: Tensor, expected: int, what: str) -> None:
    if x.shape[-1] != expected:
        raise ValueError(
            f"{name} has last dimension {x.shape[-1]} (shape {_shape(x)}), expected {what}={expected}"
        )


def check_same_device_dtype(names: Sequence[str], tensors: Sequence[Tensor]) -> None:
    first_name, first = names[0], tensors[0]
    for name, t in zip(names[1:], tensors[1:]):
        if t.dtype != first.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but {first_name} has {first.dtype}; they must match")
        if t.device != first.device:
            raise ValueError(
                f"{name} is on {t.device} but {first_name} is on {first.device}; move both to one device"
            )


def check_bool_mask(name: str, mask, shape: tuple[int, ...], layout: str) -> Tensor:
    """A boolean mask of exactly ``shape`` (named by ``layout``, e.g. ``"(B, S)"``)."""
    check_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a torch.bool tensor of shape {layout}, got dtype {mask.dtype}; "
            f"build it with a comparison, e.g. tokens == pad_id"
        )
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(
            f"{name} must have shape {layout} = ({', '.join(map(str, shape))}), got {_shape(mask)}"
        )
    return mask


def check_keep_mask(name: str, mask, target: tuple[int, ...]) -> Tensor:
    """A ``torch.bool`` keep mask (``True`` = attend) that broadcasts to the scores' shape ``target`` (..., T, S).

    A mask with more (or longer) dimensions than the scores is refused: it would silently enlarge the result.
    """
    check_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a torch.bool keep mask (True = attend), got dtype {mask.dtype}; "
            f"convert a 0/1 mask with mha_lib.mask_from_allowed({name}) (1 = attend, e.g. a tril buffer) or "
            f"mha_lib.mask_from_blocked({name}) (1 = blocked, e.g. triu(..., diagonal=1) or nn.MultiheadAttention)"
        )
    if not _broadcasts_to(tuple(mask.shape), tuple(target)):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the scores' shape (..., T, S) = "
            f"{tuple(target)}"
        )
    return mask


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """True when a tensor of ``shape`` broadcasts to exactly ``target``.

    Plain Python on purpose: the first ``torch.broadcast_shapes`` call imports sympy (about 1 s in a notebook).
    """
    return len(shape) <= len(target) and all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def check_sequence(name: str, x, width: int, *, max_len: int | None = None, width_name: str = "d_in") -> Tensor:
    """A batch of sequences ``(B, T, width)`` of floats, with ``T <= max_len`` when a maximum is given."""
    check_tensor(name, x, ndim=3, layout=f"(B, T, {width_name})")
    check_floating(name, x)
    check_last_dim(name, x, width, width_name)
    if x.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one token, got shape {_shape(x)}")
    if max_len is not None and x.shape[1] > max_len:
        raise ValueError(
            f"{name} has {x.shape[1]} tokens (shape {_shape(x)}) but context_length is {max_len}; "
            f"build the module with context_length >= {x.shape[1]} or shorten the sequence"
        )
    return x


def check_matches_weights(name: str, x: Tensor, weight: Tensor) -> None:
    """The input must live where the module's weights live, in the same dtype."""
    if x.dtype != weight.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the module's weights are {weight.dtype}; convert one of them, "
            f"e.g. {name}.to({weight.dtype}) or module.to({x.dtype})"
        )
    if x.device != weight.device:
        raise ValueError(
            f"{name} is on {x.device} but the module's weights are on {weight.device}; "
            f"move them together, e.g. module.to({name}.device)"
        )
