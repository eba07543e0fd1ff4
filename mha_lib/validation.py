"""Argument checks shared by every public function and module.

Every check raises ``TypeError`` (wrong kind of object) or ``ValueError`` (right kind, wrong value) with a
message that names the argument, shows what it got and says what was expected. Students read these messages,
so they also hint at the usual fix.
"""

from __future__ import annotations

import math
import numbers
from typing import Sequence

import torch

Tensor = torch.Tensor


def _shape(x: Tensor) -> str:
    return str(tuple(x.shape))  # (2, 5, 6); (3,) for one dimension


def _got(value) -> str:
    """``type value`` for a message, shortened so that a huge list or tensor does not flood the screen."""
    text = repr(value)
    if len(text) > 40:
        text = f"{text[:20]}... ({len(text)} characters)"
    return f"{type(value).__name__} {text}"


def _short(value) -> str:
    """``str(value)`` cut to 40 characters: an int of 400 digits is shown as its start and its length."""
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def check_flag(name: str, value) -> bool:
    """``value`` must be exactly ``True`` or ``False``.

    A truthy stand-in is refused on purpose: ``return_weights="False"`` would otherwise mean ``True``.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {_got(value)}")
    return value


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` must be an int (not a bool, not a float such as ``2.0``) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {_got(value)}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {_short(value)}")
    return value


#: Sizes are stored as int64 by torch: a larger one fails deep inside torch ("Overflow when unpacking long long").
MAX_SIZE = 2**63 - 1


def check_positive_int(name: str, value) -> int:
    """``value`` must be an int in ``[1, 2**63 - 1]`` (bools are rejected: ``True`` heads is a bug, not a count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {_got(value)}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int (>= 1), got {_short(value)}")
    if value > MAX_SIZE:
        raise ValueError(f"{name} must be at most 2**63 - 1 (torch stores sizes as int64), got {_short(value)}")
    return int(value)


def check_probability(name: str, value) -> float:
    """``value`` must be a real number in [0, 1): a dropout probability of 1 would zero every weight."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1), got {_got(value)}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {_short(value)}")
    return float(value)


def check_positive_float(name: str, value) -> float:
    """``value`` must be a finite real number > 0 (used for temperature and scale)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive float, got {_got(value)}")
    try:
        as_float = float(value)
    except OverflowError:  # an int beyond float's range, e.g. 10**400
        as_float = math.inf
    if not (as_float > 0 and as_float != math.inf):
        raise ValueError(f"{name} must be a finite float > 0, got {_short(value)}")
    return as_float


def check_float_fits(name: str, value: float, dtype: torch.dtype, *, divides: bool) -> float:
    """A positive factor must survive conversion to the tensor's ``dtype``, or the arithmetic breaks silently.

    ``divides=True``: ``x / value`` (a temperature); ``value`` below the dtype's smallest normal number rounds
    to 0 or a denormal and the division gives ±inf and NaN. ``divides=False``: ``x * value`` (a scale); ``value``
    above the dtype's largest number becomes inf. The message says which bound was crossed.
    """
    info = torch.finfo(dtype)
    if value < info.tiny:
        use = "divides" if divides else "multiplies"
        raise ValueError(
            f"{name}={value:g} is too small for {dtype} tensors (the smallest usable value is {info.tiny:.3g}, "
            f"torch.finfo({dtype}).tiny): it {use} the scores and would turn them into inf/NaN or 0"
        )
    if value > info.max:
        raise ValueError(
            f"{name}={value:g} is too large for {dtype} tensors (the largest value is {info.max:.3g}, "
            f"torch.finfo({dtype}).max): it would become inf and the weights NaN"
        )
    return value


def check_divisible(name: str, value: int, by_name: str, by: int) -> None:
    if value % by != 0:
        options = divisors(value)
        shown = str(options) if len(options) <= 24 else (
            "[" + ", ".join(map(str, options[:12])) + f", ...] ({len(options)} divisors in all)")
        raise ValueError(
            f"{name} ({_short(value)}) must be divisible by {by_name} ({_short(by)}): every head gets "
            f"{name} // {by_name} features; try {by_name} in {shown}"
        )


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n``, ascending: the head counts a model width ``n`` allows.

    Pairs ``d, n // d`` up to ``√n``: 31,623 steps for ``n = 10**9`` instead of a billion.
    """
    n = check_positive_int("n", n)
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


def check_tensor(
    name: str, x, *, ndim: int | None = None, layout: str | None = None, min_ndim: int | None = None
) -> Tensor:
    """``x`` must be a dense tensor; with ``ndim``, of that many dimensions (``min_ndim``: at least that many).

    ``layout`` names the dimensions in messages, e.g. ``"(B, T, d_in)"``. Sparse and other non-strided tensors
    are refused here, with the conversion to use: most of torch's operations used below do not support them.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout is not torch.strided:
        raise TypeError(f"{name} must be a dense tensor, got layout {x.layout}; convert it with {name}.to_dense()")
    if min_ndim is not None and x.dim() < min_ndim:
        expected = f"at least {min_ndim}-D {layout}" if layout else f"at least {min_ndim}-D"
        raise ValueError(f"{name} must be {expected}, got {x.dim()}-D shape {_shape(x)}")
    if ndim is not None and x.dim() != ndim:
        expected = f"{ndim}-D {layout}" if layout else f"{ndim}-D"
        hint = ""
        if layout and layout.startswith("(B,") and x.dim() == ndim - 1:
            hint = f"; for a single sequence add a batch dimension: {name}.unsqueeze(0)"
        raise ValueError(f"{name} must be {expected}, got {x.dim()}-D shape {_shape(x)}{hint}")
    return x


def check_floating(name: str, x: Tensor) -> Tensor:
    """A real floating-point dtype (float16/bfloat16/float32/float64): not int, bool or complex."""
    if x.is_complex():
        raise TypeError(
            f"{name} must be a real floating-point tensor, got dtype {x.dtype}; attention weights are real, "
            f"take {name}.real (or {name}.abs()) if that is what you meant"
        )
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {x.dtype}; convert it with {name}.float()"
        )
    return x


def check_float_tensor(
    name: str, x, *, ndim: int | None = None, layout: str | None = None, min_ndim: int | None = None
) -> Tensor:
    """``check_tensor`` and ``check_floating`` in one call."""
    return check_floating(name, check_tensor(name, x, ndim=ndim, layout=layout, min_ndim=min_ndim))


def check_dim(name: str, dim, x: Tensor, x_name: str) -> int:
    """``dim`` must be an int that indexes one of ``x``'s dimensions, counted from the front or the back."""
    dim = check_int(name, dim)
    if not -x.dim() <= dim < max(x.dim(), 1):
        raise ValueError(
            f"{name} must be in [{-x.dim()}, {x.dim() - 1}] for {x_name} of shape {_shape(x)}, got {dim}"
        )
    return dim


def check_seed(name: str, seed) -> int:
    """A seed for ``torch.manual_seed``: an int in ``[0, 2**64 - 1]`` (not a bool, not a float)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be an int in [0, 2**64 - 1], got {_got(seed)}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"{name} must be an int in [0, 2**64 - 1], got {_short(seed)}")
    return int(seed)


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
    check_same_device(names, tensors)


def check_same_device(names: Sequence[str], tensors: Sequence[Tensor], hint: str = "") -> None:
    """Every tensor on the first one's device; dtypes may differ (integer positions beside float activations).
    ``hint`` ends the message (e.g. ``", e.g. positions.to(x.device)"``)."""
    first_name, first = names[0], tensors[0]
    for name, t in zip(names[1:], tensors[1:]):
        if t.device != first.device:
            raise ValueError(
                f"{name} is on {t.device} but {first_name} is on {first.device}; move both to one device{hint}"
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


def check_keep_mask(name: str, mask, target: tuple[int, ...], device: torch.device | None = None) -> Tensor:
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
    if device is not None and mask.device != device:
        raise ValueError(
            f"{name} is on {mask.device} but the scores are on {device}; move the mask with {name}.to({device.type!r})"
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


def check_index_options(index_topk, index_heads, index_head_dim, rope_dim: int) -> int | None:
    """DeepSeek-V3.2's lightning indexer (``MultiHeadLatentAttention``): ``index_topk`` k >= 1 keys per query, or
    None (no indexer, and then neither ``index_heads`` nor ``index_head_dim``); with k, ``index_heads`` >= 1 and
    ``index_head_dim`` >= ``rope_dim`` (the indexer rotates its first ``qk_rope_head_dim`` dimensions)."""
    sizes = (("index_heads", index_heads), ("index_head_dim", index_head_dim))
    if index_topk is None:
        given = [f"{name}={value!r}" for name, value in sizes if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} needs index_topk, got index_topk=None: the lightning indexer "
                             f"(DeepSeek-V3.2) is built only when index_topk, the keys each query reads, is given")
        return None
    if isinstance(index_topk, bool) or not isinstance(index_topk, numbers.Integral):
        raise TypeError(f"index_topk must be a positive int (the keys each query reads) or None, got "
                        f"{_got(index_topk)}")
    if index_topk < 1:
        raise ValueError(f"index_topk must be >= 1 (the keys each query reads; None: dense attention), got "
                         f"{_short(index_topk)}")
    for name, value in sizes:
        if value is None:
            raise ValueError(f"index_topk={index_topk} needs {name} too, got None (DeepSeek-V3.2: index_heads=64, "
                             f"index_head_dim=128)")
        check_positive_int(name, value)
    if index_head_dim < rope_dim:
        raise ValueError(f"index_head_dim must be at least qk_rope_head_dim = {rope_dim} (the indexer rotates its "
                         f"first qk_rope_head_dim dimensions), got {index_head_dim}")
    return check_positive_int("index_topk", index_topk)


#: a layer's kind, as chapter 15's layer_types name it: ours, and transformers' ``config.layer_types`` spellings
LAYER_KINDS = {"sliding": "sliding", "full": "full", "sliding_attention": "sliding", "full_attention": "full"}
#: chapter 16's hybrids add linear-attention layers (a fixed state, no KV cache): Qwen3-Next's "linear_attention"
HYBRID_LAYER_KINDS = {**LAYER_KINDS, "linear": "linear", "linear_attention": "linear"}


def check_layer_types(layer_types, count: int, count_name: str = "n_layers", *, linear: bool = False) -> list[str]:
    """One kind per layer, ``"sliding"`` (a window) or ``"full"``; transformers' ``"sliding_attention"`` and
    ``"full_attention"`` read as those. ``count_name`` is the argument that says how many layers there are.
    ``linear=True`` also accepts ``"linear"`` (transformers' ``"linear_attention"``): a linear-attention layer."""
    kinds = HYBRID_LAYER_KINDS if linear else LAYER_KINDS
    ours = "'sliding' / 'full' / 'linear'" if linear else "'sliding' / 'full'"
    if isinstance(layer_types, str) or not isinstance(layer_types, (list, tuple)):
        raise TypeError(f"layer_types must be a list of {ours}, one per layer, got "
                        f"{type(layer_types).__name__} {str(layer_types)[:40]!r}")
    if len(layer_types) != count:
        raise ValueError(f"layer_types must name each of the {count_name} = {count} layers, got {len(layer_types)} "
                         f"entries: {list(layer_types)[:8]}")
    bad = [kind for kind in layer_types if not isinstance(kind, str) or kind not in kinds]
    if bad:
        if linear:
            raise ValueError(f"layer_types entries must be 'sliding', 'full' or 'linear' (or transformers' "
                             f"'sliding_attention' / 'full_attention' / 'linear_attention'), got {bad[0]!r}")
        raise ValueError(f"layer_types entries must be 'sliding' or 'full' (or transformers' 'sliding_attention' / "
                         f"'full_attention'), got {bad[0]!r}")
    return [kinds[kind] for kind in layer_types]
