"""The attention computation, one concept per function, in the order the chapters teach it.

Shape glossary (used in every comment of this package):
    B batch, T query length, S key/value length, D model width, H heads, Dh head width (D = H * Dh).

    scores      = Q Kᵀ                          attention_scores     (..., T, S)
    scaled      = scores / √Dh                  scale_scores
    masked      = -inf where the mask says no   (masks.py builds the masks)
    weights     = softmax(masked / temperature) masked_softmax       rows sum to 1
    context     = weights V                     explicit_attention   (..., T, Dh)

The two *kernels* share one signature, ``(q, k, v, mask, scale, dropout_p, is_causal) -> (context, weights)``;
modules pick one by name from ``KERNELS``. ``explicit_attention`` is the readable reference that also returns
the weights; ``sdpa_attention`` calls PyTorch's fused ``F.scaled_dot_product_attention`` and cannot.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .masks import additive_mask, causal_mask, combine_masks
from .validation import (
    check_divisible,
    check_floating,
    check_keep_mask,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_same_device_dtype,
    check_tensor,
)

Tensor = torch.Tensor


# --- 1. scores ------------------------------------------------------------------------------------------------


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """Dot product of every query with every key: ``(..., T, Dh) @ (..., Dh, S) -> (..., T, S)``."""
    return q @ k.transpose(-2, -1)


# --- 2. scaling -----------------------------------------------------------------------------------------------


def scale_factor(head_dim: int) -> float:
    """``1 / √Dh``: keeps the variance of a score near 1 when q and k have unit-variance entries.

    Dh is the width of *one head* (``d_out // num_heads``), not the model width and not the input width.
    """
    return 1.0 / math.sqrt(check_positive_int("head_dim", head_dim))


def scale_scores(scores: Tensor, head_dim: int) -> Tensor:
    return scores * scale_factor(head_dim)


# --- 3. softmax -----------------------------------------------------------------------------------------------


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax written out: subtract the row maximum first so that ``exp`` never overflows.

    ``exp(x - m) / Σ exp(x - m)`` equals ``exp(x) / Σ exp(x)`` for any constant ``m``; choosing the maximum
    makes the largest exponent ``exp(0) = 1``. ``torch.softmax`` does the same internally.
    """
    shifted = x - x.amax(dim=dim, keepdim=True)
    exps = shifted.exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def masked_softmax(
    scores: Tensor, mask: Tensor | None = None, *, temperature: float = 1.0, dim: int = -1
) -> Tensor:
    """Softmax over the keys, ignoring blocked positions, sharpened (T < 1) or flattened (T > 1) by temperature.

    ``mask`` is a keep mask (``True`` = may attend) broadcastable to ``scores``.

    **A fully masked row** (a query that may attend to no key at all) gets weights that are all **0**, so its
    context vector is 0 too. Plain softmax would give ``0 / 0 = NaN`` there; D2L's ``-1e6`` trick would
    silently spread the weight uniformly over the padding. Zeros are what ``F.scaled_dot_product_attention``
    returns in PyTorch >= 2.5, and they keep gradients finite.
    """
    check_tensor("scores", scores)
    check_floating("scores", scores)
    temperature = check_positive_float("temperature", temperature)  # checked even when 1: True is not a temperature
    if mask is None:
        return torch.softmax(scores / temperature if temperature != 1.0 else scores, dim=dim)
    check_keep_mask("mask", mask, scores.shape)
    # the steps below overwrite their input: give them a copy, the caller's scores stay as they were
    own_copy = scores / temperature if temperature != 1.0 else scores.clone()
    return _masked_softmax_inplace(own_copy, mask, dim=dim)


def _masked_softmax_inplace(scores: Tensor, mask: Tensor | None, dim: int = -1) -> Tensor:
    """``masked_softmax`` (temperature 1) that **overwrites** ``scores``; for callers that own that tensor.

    Why bother: the scores of a whole layer are ``B·H·T·S`` floats (384 MiB at B=8, H=12, T=S=1024). Every
    out-of-place step over them (``masked_fill``, ``softmax``) allocates another tensor that size and streams
    it through memory; on a CPU that costs about as much as the matrix products. Writing in place keeps one.
    """
    dead_rows = None
    if mask is not None:
        dead_rows = ~mask.any(dim=dim, keepdim=True)  # queries that may attend to nothing; the mask's size, small
        # Add 0 where kept and -inf where blocked, in place: for finite scores the same as masked_fill_, a little
        # faster, and its backward passes the gradient through without a copy. (In place is fine for autograd:
        # the matmul that made the scores did not keep them.) Dead rows get no -inf, so that their softmax and
        # its gradient stay finite; their weights are set to 0 below.
        scores += additive_mask(mask | dead_rows, scores.dtype)
    if scores.requires_grad:
        weights = torch.softmax(scores, dim=dim)  # autograd saves the softmax output for backward: a new tensor
    else:
        weights = torch.softmax(scores, dim=dim, out=scores)  # inference: the weights take the scores' memory
    if dead_rows is not None and dead_rows.any():
        weights = weights.masked_fill(dead_rows, 0.0)  # see masked_softmax's docstring
    return weights


# --- 4. heads -------------------------------------------------------------------------------------------------


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, T, D) -> (B, H, T, Dh)``: cut the feature axis into H slices of width Dh, then bring H forward.

    The order matters: ``view(B, T, H, Dh)`` keeps each token's features together; viewing straight to
    ``(B, H, T, Dh)`` would mix features of different tokens into one head.
    """
    check_tensor("x", x, ndim=3, layout="(B, T, D)")
    B, T, D = x.shape
    check_divisible("x.shape[-1]", D, "num_heads", check_positive_int("num_heads", num_heads))
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)  # (B, T, H, Dh) -> (B, H, T, Dh)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, H, T, Dh) -> (B, T, D)``, the inverse of ``split_heads`` (concatenates the heads' outputs).

    After ``transpose`` the memory is no longer in (B, T, H, Dh) order, so ``view`` needs ``.contiguous()``
    first (``reshape`` would copy silently when needed).
    """
    check_tensor("x", x)
    if x.dim() == 3:  # most likely D2L's layout, not a missing batch dimension
        raise ValueError(
            f"x must be 4-D (B, H, T, Dh), got 3-D shape {tuple(x.shape)}; for D2L's (B·H, T, Dh) layout use "
            f"merge_heads_flat(x, num_heads)"
        )
    check_tensor("x", x, ndim=4, layout="(B, H, T, Dh)")
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, H * Dh)  # (B, T, H, Dh) -> (B, T, D)


def split_heads_flat(x: Tensor, num_heads: int) -> Tensor:
    """D2L's layout: ``(B, T, D) -> (B·H, T, Dh)``, heads folded into the batch so that 3-D ``bmm`` works."""
    heads = split_heads(x, num_heads)  # (B, H, T, Dh)
    B, H, T, Dh = heads.shape
    return heads.reshape(B * H, T, Dh)  # (B, H, T, Dh) -> (B·H, T, Dh)


def merge_heads_flat(x: Tensor, num_heads: int) -> Tensor:
    """Inverse of ``split_heads_flat``: ``(B·H, T, Dh) -> (B, T, D)``."""
    check_tensor("x", x, ndim=3, layout="(B·H, T, Dh)")
    BH, T, Dh = x.shape
    check_divisible("x.shape[0]", BH, "num_heads", check_positive_int("num_heads", num_heads))
    return merge_heads(x.view(BH // num_heads, num_heads, T, Dh))  # (B·H, T, Dh) -> (B, H, T, Dh) -> (B, T, D)


# --- 5. kernels -----------------------------------------------------------------------------------------------


def _check_qkv(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t)
        check_floating(name, t)
        if t.dim() < 2:
            raise ValueError(f"{name} must be at least 2-D (..., length, features), got {t.dim()}-D")
    check_same_device_dtype(("q", "k", "v"), (q, k, v))
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same feature width to take dot products, got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length S (one value per key), got k {tuple(k.shape)} "
            f"and v {tuple(v.shape)}"
        )
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            f"q, k and v must share their leading (batch, head) dimensions, got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if mask is not None:
        check_keep_mask("mask", mask, (*q.shape[:-1], k.shape[-2]))  # scores (..., T, S)


def explicit_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention, step by step. Returns ``(context, weights)``.

    q ``(..., T, Dh)``, k ``(..., S, Dh)``, v ``(..., S, Dv)``, mask a keep mask broadcastable to
    ``(..., T, S)``; ``scale`` defaults to ``1/√Dh``; ``is_causal`` adds the causal mask.
    Returns context ``(..., T, Dv)`` and the softmax weights ``(..., T, S)`` (before dropout).
    """
    _check_qkv(q, k, v, mask)
    dropout_p = check_probability("dropout_p", dropout_p)
    scale = scale_factor(q.shape[-1]) if scale is None else check_positive_float("scale", scale)
    if is_causal:
        mask = combine_masks(causal_mask(q.shape[-2], k.shape[-2], device=q.device), mask)

    # Scale the queries (..., T, Dh), not the scores (..., T, S): the same result (up to rounding) for S/Dh
    # times less work (16x at T=1024, Dh=64) and no extra T×S tensor. Then mask and softmax the scores in
    # place: without autograd the weights are the only T×S tensor created here (with it, two: see below).
    scores = attention_scores(q * scale, k)  # (..., T, Dh) @ (..., Dh, S) -> (..., T, S)
    weights = _masked_softmax_inplace(scores, mask)  # (..., T, S), each row sums to 1 (or is all 0)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights  # (..., T, S) @ (..., S, Dv) -> (..., T, Dv)


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> tuple[Tensor, None]:
    """The same function through PyTorch's fused kernel. Returns ``(context, None)``.

    Fused (flash-style) kernels never hold the whole ``(T, S)`` weight matrix in memory, which is why they are
    fast and why they cannot hand the weights back.
    """
    _check_qkv(q, k, v, mask)
    dropout_p = check_probability("dropout_p", dropout_p)
    if scale is not None:
        scale = check_positive_float("scale", scale)
    if is_causal and mask is not None:  # SDPA takes one or the other: fold the triangle into the mask
        mask = combine_masks(causal_mask(q.shape[-2], k.shape[-2], device=q.device), mask)
        is_causal = False
    context = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    )
    if mask is not None:
        dead_rows = ~mask.any(dim=-1, keepdim=True)  # guarantee masked_softmax's 0 for fully masked rows
        if dead_rows.any():
            context = context.masked_fill(dead_rows, 0.0)
    return context, None


KERNELS = {"explicit": explicit_attention, "sdpa": sdpa_attention}
