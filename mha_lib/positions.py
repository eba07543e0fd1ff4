"""Where is each token? Positions for attention, which on its own is blind to order (chapter 13).

    sinusoidal_positions(T, D)        the 2017 paper's fixed absolute positions, added to the embeddings
    rope_frequencies(Dh, theta)       RoPE's angular speeds θ^(-2i/Dh), one per pair of dimensions
    rope_cos_sin(positions, Dh, θ)    cos and sin of position × speed, in the rotate-half layout
    rotate_half(x)                    (x1, x2) -> (-x2, x1) on the two halves of the last dimension
    apply_rope(x, positions, θ)       rotary positions, rotate-half layout (GPT-NeoX, Llama, Mistral, Qwen)
    apply_rope_interleaved(x, ...)    the same rotation on neighbouring pairs (GPT-J, the RoFormer paper)
    interleaved_order(Dh)             the permutation of dimensions that turns one layout into the other
    YaRN(factor, original_context)    RoPE stretched to a longer context (DeepSeek-V3, chapter 14)

RoPE rotates each pair of a query's (and key's) dimensions by an angle ``position × speed``. A rotation keeps
lengths and the dot product of two rotated vectors depends only on the *difference* of their angles, so the score
of query ``m`` and key ``n`` depends on ``m - n``, not on ``m`` and ``n`` themselves (Su et al. 2021).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .validation import check_positive_float, check_positive_int, check_same_device, check_tensor

Tensor = torch.Tensor


def sinusoidal_positions(num_positions: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The fixed position vectors of Vaswani et al. (2017), ``(T, D)``: sin on even columns, cos on odd ones.

    Column pair ``(2i, 2i+1)`` turns at speed ``base^(-2i/D)``: the first pairs change every token, the last ones
    over thousands of tokens. They are *added* to the token embeddings before the first layer.
    """
    num_positions = check_positive_int("num_positions", num_positions)
    d_model = _check_even("d_model", d_model)
    base = check_positive_float("base", base)  # checked here, so that a bad one is named base, not theta
    speeds = rope_frequencies(d_model, base)  # (D/2,)
    angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * speeds  # (T, 1) * (D/2,) -> (T, D/2)
    table = torch.empty(num_positions, d_model)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()
    return table


def rope_frequencies(head_dim: int, theta: float = 10000.0) -> Tensor:
    """RoPE's speeds ``θ^(-2i/Dh)`` for ``i = 0 .. Dh/2 - 1`` (radians per position), float32, ``(Dh/2,)``.

    Computed as Llama computes them (``1 / θ^(arange(0, Dh, 2) / Dh)``), so the angles agree bit for bit.
    """
    head_dim = _check_even("head_dim", head_dim)
    theta = check_positive_float("theta", theta)
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float = 10000.0, dtype=torch.float32, *,
                 speeds: Tensor | None = None):
    """``cos`` and ``sin`` of ``position × speed``, each ``(T, Dh)`` in the rotate-half layout.

    The speeds are repeated (``cat(speeds, speeds)``) because dimension ``i`` is paired with ``i + Dh/2``. The
    angles are formed in float32 whatever ``dtype`` (a position of 4,000 times a speed near 1 needs the digits),
    then cast; ``dtype`` is a floating dtype (an integer cos would be 1, 0 or -1). ``speeds`` ``(Dh/2,)`` replaces
    ``θ^(-2i/Dh)`` (e.g. ``YaRN.speeds``).
    """
    positions = _check_positions(positions)
    _check_float_dtype("dtype", dtype)
    speeds = _speeds(head_dim, theta, speeds).to(positions.device)  # (Dh/2,)
    angles = positions.float()[:, None] * speeds  # (T, 1) * (Dh/2,) -> (T, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, Dh): dimension i and i + Dh/2 turn together
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """``(x1, x2) -> (-x2, x1)`` where ``x1, x2`` are the two halves of the last dimension: a 90° turn of each
    pair ``(x[i], x[i + Dh/2])``. The last dimension must be even: an odd one has no halves to pair."""
    check_tensor("x", x, min_ndim=1, layout="(..., Dh)")
    _check_even("x.shape[-1] (the head size)", x.shape[-1])
    x1, x2 = x.chunk(2, dim=-1)  # (..., Dh) -> 2 × (..., Dh/2)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: Tensor, positions: Tensor, theta: float = 10000.0, *, speeds: Tensor | None = None) -> Tensor:
    """Rotary positions in the rotate-half layout: ``x·cos + rotate_half(x)·sin``.

    ``x`` ``(..., T, Dh)`` (queries or keys, any number of heads before ``T``), ``positions`` ``(T,)`` integers:
    the true position of each of the T tokens (``past .. past + T - 1`` after a KV cache holding ``past``).
    Pair ``(x[i], x[i + Dh/2])`` of token ``t`` turns by ``positions[t] · θ^(-2i/Dh)``, or by
    ``positions[t] · speeds[i]`` when ``speeds`` ``(Dh/2,)`` is given (YaRN's stretched speeds, chapter 14).
    """
    check_tensor("x", x)
    _check_rope_input(x, positions)
    cos, sin = rope_cos_sin(positions, x.shape[-1], theta, x.dtype, speeds=speeds)  # (T, Dh) each, over heads
    return x * cos + rotate_half(x) * sin


def apply_rope_interleaved(x: Tensor, positions: Tensor, theta: float = 10000.0) -> Tensor:
    """The same rotation with neighbouring pairs ``(x[2i], x[2i+1])`` (GPT-J, the RoFormer paper).

    Equal to ``apply_rope`` after reordering the dimensions with ``interleaved_order``: the two layouts give the
    same scores once q and k are permuted alike, but weights trained for one are wrong in the other.
    """
    check_tensor("x", x)
    _check_rope_input(x, positions)
    speeds = rope_frequencies(x.shape[-1], theta).to(x.device)  # (Dh/2,)
    angles = positions.float()[:, None] * speeds  # (T, Dh/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, Dh/2) each: the pairs (x[2i], x[2i+1])
    turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., T, Dh/2, 2)
    return turned.flatten(-2)  # (..., T, Dh/2, 2) -> (..., T, Dh): back to neighbouring pairs


def interleaved_order(head_dim: int) -> Tensor:
    """Indices ``[0, 2, 4, ..., 1, 3, 5, ...]``: ``x[..., order]`` moves GPT-J's pair ``(2i, 2i+1)`` to
    ``(i, i + Dh/2)``, so that ``apply_rope(x[..., order]) == apply_rope_interleaved(x)[..., order]``."""
    head_dim = _check_even("head_dim", head_dim)
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature ``0.1 · mscale · ln(factor) + 1`` (1 when ``factor <= 1``), DeepSeek's form."""
    factor = check_positive_float("factor", factor)
    return 1.0 if factor <= 1 else 0.1 * float(mscale) * math.log(factor) + 1.0


class YaRN(NamedTuple):
    """YaRN (Peng et al. 2023): RoPE stretched to a context ``factor`` times longer than the one trained on.

    A pair that turns many times over the original context (more than ``beta_fast`` turns) already knows every
    angle and keeps its speed; a pair that turns less than ``beta_slow`` times is slowed down by ``factor``, so
    that the longer context maps onto angles it has seen; the pairs between get a linear mix. Longer contexts also
    flatten the softmax, which YaRN corrects with a temperature (``yarn_mscale``): DeepSeek multiplies cos and sin
    by ``rope_gain`` and the softmax scale by ``softmax_gain``. DeepSeek-V3: factor 40, original 4,096 tokens,
    mscale = mscale_all_dim = 1 (so ``rope_gain`` is 1 and ``softmax_gain`` is (0.1 ln 40 + 1)² ≈ 1.87).
    Computed as transformers' ``_compute_yarn_parameters`` computes it.
    """

    factor: float
    original_context_length: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0
    truncate: bool = True
    attention_factor: float | None = None  # cos/sin gain given outright (transformers' key); None: from mscale

    def speeds(self, head_dim: int, theta: float = 10000.0) -> Tensor:
        """The stretched speeds ``(Dh/2,)``: θ^(-2i/Dh) for the fast pairs, divided by ``factor`` for the slow."""
        head_dim = _check_even("head_dim", head_dim)
        theta = check_positive_float("theta", theta)
        factor = check_positive_float("factor", self.factor)
        original = check_positive_int("original_context_length", self.original_context_length)

        def pair_index(turns: float) -> float:  # the pair i that makes `turns` turns over the original context
            return head_dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(theta))

        low, high = pair_index(self.beta_fast), pair_index(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, head_dim - 1)
        if low == high:
            high += 0.001  # as transformers: avoid dividing by zero
        ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # (Dh/2,)
        keep = 1 - ramp  # 1: a fast pair keeps its speed (extrapolates); 0: a slow pair is slowed (interpolates)
        base = theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # θ^(2i/Dh)
        return (1.0 / (factor * base)) * (1 - keep) + (1.0 / base) * keep

    @property
    def rope_gain(self) -> float:
        """What cos and sin are multiplied by (transformers' ``attention_factor``)."""
        if self.attention_factor is not None:
            return check_positive_float("attention_factor", self.attention_factor)
        if self.mscale and self.mscale_all_dim:
            return yarn_mscale(self.factor, self.mscale) / yarn_mscale(self.factor, self.mscale_all_dim)
        return yarn_mscale(self.factor)

    @property
    def softmax_gain(self) -> float:
        """What DeepSeek multiplies the softmax scale by: ``yarn_mscale(factor, mscale_all_dim)²``."""
        if not self.mscale_all_dim:
            return 1.0
        return yarn_mscale(self.factor, self.mscale_all_dim) ** 2


def _speeds(head_dim: int, theta: float, speeds: Tensor | None) -> Tensor:
    if speeds is None:
        return rope_frequencies(head_dim, theta)
    check_tensor("speeds", speeds, ndim=1, layout="(Dh/2,)")
    if speeds.shape[0] * 2 != head_dim:
        raise ValueError(f"speeds must hold one speed per pair of dimensions, head_dim/2 = {head_dim // 2}, got "
                         f"{speeds.shape[0]}")
    if not speeds.is_floating_point():
        raise TypeError(f"speeds must be a floating tensor (radians per position), got {speeds.dtype}")
    return speeds.float()


def _check_even(name: str, value) -> int:
    value = check_positive_int(name, value)
    if value % 2:
        raise ValueError(
            f"{name} must be even, got {value}: rotary and sinusoidal positions turn the dimensions in pairs"
        )
    return value


def _check_float_dtype(name: str, dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype such as torch.float32, got {type(dtype).__name__} {dtype!r}")
    if not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating dtype (cos and sin lie in [-1, 1]), got {dtype}; use "
                        f"torch.float32 or the dtype of the queries")
    return dtype


def _check_positions(positions) -> Tensor:
    check_tensor("positions", positions, ndim=1, layout="(T,)")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be an integer tensor (token positions 0, 1, 2, ...), got {positions.dtype}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got {int(positions.min())}")
    return positions


def _check_rope_input(x: Tensor, positions) -> None:
    if x.dim() < 2:
        raise ValueError(f"x must be at least 2-D (..., T, Dh), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating tensor, got {x.dtype}")
    _check_even("x.shape[-1] (the head size)", x.shape[-1])
    check_tensor("positions", positions, ndim=1, layout="(T,)")
    check_same_device(("x", "positions"), (x, positions), hint=", e.g. positions.to(x.device)")
    _check_positions(positions)
    if positions.shape[0] != x.shape[-2]:
        raise ValueError(
            f"positions must hold one position per token: x has T = {x.shape[-2]} tokens, got "
            f"{positions.shape[0]} positions"
        )


__all__ = [
    "YaRN", "apply_rope", "apply_rope_interleaved", "interleaved_order", "rope_cos_sin", "rope_frequencies",
    "rotate_half", "sinusoidal_positions", "yarn_mscale",
]
