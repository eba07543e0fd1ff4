"""The attention computation, one concept per function, in the order the chapters teach it.

Shape glossary (used in every comment of this package):
    B batch, T query length, S key/value length, D model width, H heads, Dh head width (D = H * Dh).

    scores      = Q Kᵀ                          attention_scores     (..., T, S)
    scaled      = scores / √Dh                  scale_scores
    masked      = -inf where the mask says no   (masks.py builds the masks)
    weights     = softmax(masked / temperature) masked_softmax       rows sum to 1
    context     = weights V                     explicit_attention   (..., T, Dh)

Two controls on the scores and the softmax, from 2024-26's decoders (chapter 15):

    capped      = c·tanh(scores / c)            softcap_scores       Gemma 2, before the mask
    weights     = softmax([masked, sink])[:-1]  softmax_with_sinks   gpt-oss: one learned logit per head

The three *kernels* share one signature, ``(q, k, v, mask, scale, dropout_p, is_causal, *, softcap, sinks) ->
(context, weights)``; modules pick one by name from ``KERNELS``. ``softcap`` needs the explicit kernel (a function of
every score, which a fused kernel never exposes); ``sinks`` the explicit or the tiled one (the tiled kernel knows
each row's log-sum-exp, and a sink only rescales the row by it); SDPA takes neither. ``explicit_attention`` is
the readable reference that also returns the weights; ``sdpa_attention`` calls PyTorch's fused
``F.scaled_dot_product_attention`` and cannot; ``flash_kernel`` runs ``flash_attention``, the tiled online softmax
of FlashAttention written out in PyTorch (chapter 14), which never holds the whole weight matrix either.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .masks import additive_mask, causal_mask, combine_masks
from .validation import (
    check_dim,
    check_divisible,
    check_flag,
    check_float_fits,
    check_float_tensor,
    check_floating,
    check_int,
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
    """Dot product of every query with every key: ``(..., T, Dh) @ (..., Dh, S) -> (..., T, S)``.

    q ``(..., T, Dh)`` and k ``(..., S, Dh)`` are real floating tensors of at least 2 dimensions with the same
    width Dh, dtype and device; their leading dimensions broadcast. NaN or inf in q or k give NaN/inf scores
    (as in torch): they are not searched for, which would cost a pass over the data.
    """
    _check_pair(q, k)
    return q @ k.transpose(-2, -1)  # (..., T, Dh) @ (..., Dh, S) -> (..., T, S)


def _check_pair(q: Tensor, k: Tensor) -> None:
    check_float_tensor("q", q, min_ndim=2, layout="(..., T, Dh)")
    check_float_tensor("k", k, min_ndim=2, layout="(..., S, Dh)")
    check_same_device_dtype(("q", "k"), (q, k))
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same feature width to take dot products, got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    if not _broadcastable(tuple(q.shape[:-2]), tuple(k.shape[:-2])):
        raise ValueError(
            f"q and k must have leading (batch, head) dimensions that broadcast, got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )


def _broadcastable(a: tuple, b: tuple) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))


# --- 2. scaling -----------------------------------------------------------------------------------------------


def scale_factor(head_dim: int) -> float:
    """``1 / √Dh``: keeps the variance of a score near 1 when q and k have unit-variance entries.

    Dh is the width of *one head* (``d_out // num_heads``), not the model width and not the input width.
    """
    return 1.0 / math.sqrt(check_positive_int("head_dim", head_dim))


def scale_scores(scores: Tensor, head_dim: int) -> Tensor:
    """``scores / √head_dim`` for a real floating tensor of scores (any shape)."""
    check_float_tensor("scores", scores)
    return scores * scale_factor(head_dim)


# --- 3. softmax -----------------------------------------------------------------------------------------------


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax written out: subtract the row maximum first so that ``exp`` never overflows.

    ``exp(x - m) / Σ exp(x - m)`` equals ``exp(x) / Σ exp(x)`` for any constant ``m``; choosing the maximum
    makes the largest exponent ``exp(0) = 1``. ``torch.softmax`` does the same internally.

    ``x`` is a real floating tensor with at least one element along ``dim``; a row holding NaN or +inf gives
    NaN (as ``torch.softmax`` does).
    """
    check_float_tensor("x", x, min_ndim=1)
    dim = check_dim("dim", dim, x, "x")
    if x.shape[dim] == 0:
        raise ValueError(f"x must have at least one entry along dim={dim} to normalise over, got shape "
                         f"{tuple(x.shape)}")
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

    **Temperature** must be a finite float > 0 that the scores' dtype can hold (at least
    ``torch.finfo(dtype).tiny``, 1.2e-38 for float32; a smaller one is a ValueError). Any such temperature is
    safe: each row's maximum is subtracted *before* dividing, so ``(s - max) / T <= 0`` can never overflow to
    +inf; a tiny temperature gives the one-hot argmax, a huge one the uniform row, never NaN.
    NaN in the scores gives NaN weights in that row (as in torch).
    """
    check_float_tensor("scores", scores, min_ndim=1)
    temperature = check_positive_float("temperature", temperature)  # checked even when 1: True is not a temperature
    dim = check_dim("dim", dim, scores, "scores")
    if mask is not None:
        check_keep_mask("mask", mask, scores.shape, scores.device)
    if temperature != 1.0:
        check_float_fits("temperature", temperature, scores.dtype, divides=True)
        if scores.numel():
            # shift first: (s - max) <= 0, so dividing by a small temperature heads to -inf (weight 0), never to
            # +inf (NaN). Softmax ignores the shift, so it is detached. The max is over the kept keys only.
            kept = scores.detach() if mask is None else scores.detach().masked_fill(~mask, float("-inf"))
            row_max = kept.amax(dim=dim, keepdim=True)
            row_max = row_max.masked_fill(~torch.isfinite(row_max), 0.0)  # dead rows, and NaN/inf rows stay as is
            scores = (scores - row_max) / temperature
    if mask is None:
        return torch.softmax(scores, dim=dim)
    # the steps below overwrite their input: give them a copy, the caller's scores stay as they were
    own_copy = scores if temperature != 1.0 else scores.clone()
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


# --- 3b. controlling the scores: a soft cap and a sink (chapter 15) -------------------------------------------


def softcap_scores(scores: Tensor, cap: float) -> Tensor:
    """``cap · tanh(scores / cap)``: every score squashed into ``[-cap, cap]`` (Gemma 2's ``attn_logit_softcapping``).

    Near 0 the curve is the identity (tanh(u) ≈ u), so small scores pass unchanged; a score far above ``cap`` lands
    just below it, so the scores stay bounded however large q·k grows. It does not stop a row from saturating: two
    capped scores can still differ by almost ``2 · cap`` (with Gemma 2's cap of 50, a gap of up to 100, enough for a
    one-hot row); only a cap small against the spread of the scores shares the weight. Applied to the scaled scores
    **before** the mask: a blocked key's ``-inf`` would become ``-cap`` after it, and the key would get weight.
    ``scores`` a real floating tensor (any shape), ``cap`` a finite float > 0.
    """
    check_float_tensor("scores", scores)
    cap = check_positive_float("cap", cap)
    return torch.tanh(scores / cap) * cap  # out of place: autograd keeps tanh's output for its backward


def softmax_with_sinks(scores: Tensor, sinks: Tensor, mask: Tensor | None = None) -> Tensor:
    """Softmax over the keys **and one sink per head**; returns the weights of the real keys only.

    ``scores`` ``(..., H, T, S)``, ``sinks`` ``(H,)``: head h's sink is a logit that joins every row's denominator
    but has no value (gpt-oss's ``sinks``)::

        w_j = exp(s_j) / (exp(sink_h) + Σ_k exp(s_k))        Σ_j w_j = 1 - (the sink's share) < 1

    A head with nothing worth reading can park its weight on the sink instead of on a real token (the first token,
    in a model trained without one, chapter 15). ``mask`` a keep mask broadcastable to the scores; a row that may
    see no key gives the sink everything and weights of 0. The returned rows sum to less than 1: the sink's share
    is ``1 - weights.sum(-1)``.
    """
    check_float_tensor("scores", scores, min_ndim=3, layout="(..., H, T, S)")
    _check_sinks(sinks, scores, "scores")
    if mask is not None:
        check_keep_mask("mask", mask, scores.shape, scores.device)
        scores = scores.masked_fill(~mask, float("-inf"))
    sink = sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)  # (H,) -> (..., H, T, 1)
    combined = torch.cat([scores, sink], dim=-1)  # (..., H, T, S + 1): the sink is one more column
    return torch.softmax(combined, dim=-1)[..., :-1]  # the sink's column dropped: (..., H, T, S)


def _check_sinks(sinks, q: Tensor, q_name: str = "q") -> Tensor:
    """One sink logit per head: a real floating ``(H,)`` tensor, H = ``q.shape[-3]``, on q's device."""
    check_float_tensor("sinks", sinks, ndim=1, layout="(H,)")
    if q.dim() < 3 or q.shape[-3] != sinks.shape[0]:
        raise ValueError(f"sinks must hold one logit per head: {q_name} {tuple(q.shape)} has H = "
                         f"{q.shape[-3] if q.dim() >= 3 else 'no head dimension'} at dim -3, got sinks "
                         f"{tuple(sinks.shape)}")
    if sinks.device != q.device:
        raise ValueError(f"sinks is on {sinks.device} but {q_name} is on {q.device}; move them to one device")
    return sinks


def _check_softcap(softcap) -> float | None:
    return None if softcap is None else check_positive_float("softcap", softcap)


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


def expand_kv_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, G, S, Dh) -> (B, H, S, Dh)``: give each of the H query heads the key/value head of its group.

    Query heads ``0 .. H/G - 1`` share key/value head 0, the next ``H/G`` share head 1, and so on: every kv head
    is repeated ``H/G`` times *in place* (``repeat_interleave``), as Llama's ``repeat_kv`` does. ``x.repeat``
    would tile the heads instead (0, 1, 0, 1, ...): it runs, and pairs the heads wrongly (chapter 12).
    """
    check_tensor("x", x, ndim=4, layout="(B, G, S, Dh)")
    num_heads = check_positive_int("num_heads", num_heads)
    G = x.shape[1]
    if num_heads % G:
        raise ValueError(
            f"num_heads ({num_heads}) must be a multiple of the {G} key/value heads in x (dim 1): each key/value "
            f"head serves num_heads // G query heads"
        )
    if num_heads == G:
        return x
    return x.repeat_interleave(num_heads // G, dim=1)  # (B, G, S, Dh) -> (B, H, S, Dh)


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
            raise ValueError(f"{name} must be at least 2-D (..., length, features), got {t.dim()}-D "
                             f"shape {tuple(t.shape)}")
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
        check_keep_mask("mask", mask, (*q.shape[:-1], k.shape[-2]), q.device)  # scores (..., T, S)


def explicit_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    softcap: float | None = None,
    sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention, step by step. Returns ``(context, weights)``.

    q ``(..., T, Dh)``, k ``(..., S, Dh)``, v ``(..., S, Dv)``, mask a keep mask broadcastable to
    ``(..., T, S)``; ``scale`` defaults to ``1/√Dh``; ``is_causal`` adds the causal mask.
    Returns context ``(..., T, Dv)`` and the softmax weights ``(..., T, S)`` (before dropout).

    ``softcap`` c squashes the scaled scores to ``c·tanh(s/c)`` before the mask (``softcap_scores``); ``sinks``
    ``(H,)`` (q ``(..., H, T, Dh)``) adds one logit per head to each row's denominator (``softmax_with_sinks``): the
    weights returned then cover the real keys only and sum to less than 1.

    NaN in q, k or v gives NaN in the rows it reaches (as in torch). A ``scale`` of your own is checked: one
    so large that finite q and k give infinite scores raises a ValueError instead of returning NaN weights.
    """
    _check_qkv(q, k, v, mask)
    dropout_p = check_probability("dropout_p", dropout_p)
    is_causal = check_flag("is_causal", is_causal)
    user_scale = scale is not None
    scale = scale_factor(q.shape[-1]) if scale is None else _check_scale(scale, q)
    if is_causal:
        mask = combine_masks(causal_mask(q.shape[-2], k.shape[-2], device=q.device), mask)

    # Scale the queries (..., T, Dh), not the scores (..., T, S): the same result (up to rounding) for S/Dh
    # times less work (16x at T=1024, Dh=64) and no extra T×S tensor. Then mask and softmax the scores in
    # place: without autograd the weights are the only T×S tensor created here (with it, two: see below).
    softcap = _check_softcap(softcap)
    if sinks is not None:
        _check_sinks(sinks, q)
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., T, Dh) @ (..., Dh, S) -> (..., T, S); checked above
    if user_scale:
        _check_scores_finite(scores, scale, q, k)
    if softcap is not None:
        scores = softcap_scores(scores, softcap)  # before the mask: a capped -inf would be -softcap, a weight
    if sinks is not None:
        weights = softmax_with_sinks(scores, sinks, mask)  # (..., T, S), rows sum to 1 - the sink's share
    else:
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
    *,
    softcap: float | None = None,
    sinks: Tensor | None = None,
    diagonal: int = 0,
    window: int | None = None,
) -> tuple[Tensor, None]:
    """The same function through PyTorch's fused kernel. Returns ``(context, None)``.

    ``softcap`` and ``sinks`` are refused (ValueError): SDPA applies no function to the scores and has no extra
    column in its softmax; use ``explicit_attention`` (either) or ``flash_kernel`` (sinks).

    SDPA never returns the weights. Its fused back-ends (flash, memory-efficient) never hold the whole ``(T, S)``
    weight matrix in memory, which is why they are fast and why they cannot hand the weights back; its math
    fallback does build the matrix inside the call (chapter 9). The fused kernels of the CPU and of FlashAttention
    want one head size for q, k and v; when v's differs (latent attention: 16 + 8 for q and k, 16 for v), SDPA would
    silently take the math fallback, so the narrower side gets zero columns (exact: they add 0 to the scores or give
    output columns that are cut off).

    ``is_causal=True`` alone is SDPA's own triangle, aligned top-left (query t sees keys 0..t), which SDPA applies
    without any mask tensor. Two keyword arguments move and narrow it, as a chunk after a KV cache or a sliding
    window needs: query t sees key s when ``s <= t + diagonal`` (``diagonal = S - T``: the bottom-right triangle,
    the queries are the last T of S positions) and, with ``window=W``, ``s > t + diagonal - W``. SDPA takes no such
    triangle, and a ``(T, S)`` mask would cost more than the mask: on a CPU, SDPA turns a boolean mask into a float
    one of the same size (a ``T × S`` float32, 256 MiB at T = S = 8,192). So no ``T × S`` tensor is built here, of
    floats or of booleans:

    * the bottom-right triangle with ``diagonal <= T`` is the end of SDPA's own triangle over ``T + diagonal``
      queries: ``diagonal`` zero queries go in front of q, and their rows of output are dropped;
    * a window, a longer cache, or ``is_causal`` with a ``mask`` go through SDPA one block of queries at a time:
      each block is scored against the keys it can see only, with a small boolean mask built from the positions
      (at most ``2**20`` entries, 1 MiB, 4 MiB once SDPA makes it float), or none where the block sees all its
      keys (one query after a cache).

    Without ``is_causal``, a ``mask`` goes to SDPA whole, and SDPA makes a float copy of it: cheap for a key-padding
    mask ``(B, 1, 1, S)``, ``T × S`` floats for a mask with one row per query.

    A ``scale`` of your own is checked without building the scores: a bound on ``|q·k|`` first, and only when
    that bound overflows the dtype, the scores one tile at a time (SDPA would return NaN silently).
    """
    _check_qkv(q, k, v, mask)
    if softcap is not None or sinks is not None:
        raise ValueError(
            f"sdpa_attention cannot apply {'softcap' if softcap is not None else 'sinks'}, got "
            f"{'softcap=' + repr(softcap) if softcap is not None else 'a sinks tensor'}: "
            f"F.scaled_dot_product_attention applies no function to the scores and has no extra column in its "
            f"softmax; use explicit_attention (softcap, sinks) or flash_kernel (sinks)"
        )
    dropout_p = check_probability("dropout_p", dropout_p)
    is_causal = check_flag("is_causal", is_causal)
    diagonal = check_int("diagonal", diagonal)
    window = None if window is None else check_positive_int("window", window)
    if not is_causal and (diagonal != 0 or window is not None):
        raise ValueError(
            f"diagonal and window move and narrow the causal triangle: they need is_causal=True, got "
            f"diagonal={diagonal}, window={window}"
        )
    if scale is not None:
        scale = _check_scale(scale, q)
        _check_tiles_finite(q, k, scale, _SCALE_CHECK_BLOCK)  # a bound; the scores only tile by tile, if at all
    if is_causal and mask is None and window is None and 0 < diagonal <= q.shape[-2]:
        return _sdpa_bottom_right(q, k, v, scale, dropout_p, diagonal), None
    if is_causal and (mask is not None or diagonal != 0 or window is not None):
        return _sdpa_by_query_blocks(q, k, v, mask, scale, dropout_p, diagonal, window), None
    if mask is not None and mask.dim() < 2:
        # a 0-D or 1-D mask broadcasts like any other, but SDPA reads its last two dimensions: give it (1, S) or
        # (1, 1), a view with the same broadcast (explicit_attention needs no such step)
        mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape))
    context = _sdpa_call(q, k, v, mask, scale, dropout_p, is_causal)
    if mask is not None:
        dead_rows = ~mask.any(dim=-1, keepdim=True)  # guarantee masked_softmax's 0 for fully masked rows
        if dead_rows.any():
            context = context.masked_fill(dead_rows, 0.0)
    return context, None


# sdpa_attention's blocks of queries: at most this many (query, key) pairs in one block's mask (1 MiB of booleans,
# 4 MiB once SDPA turns them into float32), and the scale check's tiles when its bound overflows
_SDPA_BLOCK_PAIRS = 2**20
_SCALE_CHECK_BLOCK = 512


def _sdpa_call(q, k, v, mask, scale, dropout_p, is_causal):
    """``F.scaled_dot_product_attention`` with one head size for q, k and v (see ``sdpa_attention``)."""
    width_qk, width_v = q.shape[-1], v.shape[-1]
    if width_v < width_qk:  # zero columns in v give zero columns of output, cut off below
        v = F.pad(v, (0, width_qk - width_v))
    elif width_qk < width_v:  # zero columns in q and k add 0 to every score; the scale stays q's own
        scale = scale_factor(width_qk) if scale is None else scale
        q, k = F.pad(q, (0, width_v - width_qk)), F.pad(k, (0, width_v - width_qk))
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal,
                                             scale=scale)
    return context if context.shape[-1] == width_v else context[..., :width_v]


def _sdpa_bottom_right(q, k, v, scale, dropout_p, diagonal):
    """Query i sees keys ``0 .. i + diagonal`` (``0 < diagonal <= T``), with no mask: those are rows ``diagonal ..``
    of SDPA's own top-left triangle over ``T + diagonal`` queries. Zero queries take the first rows, and their
    outputs are dropped: ``diagonal`` rows of extra work and of memory, at most T."""
    T, end = q.shape[-2], q.shape[-2] + diagonal
    k, v = k[..., :end, :], v[..., :end, :]  # keys after the last query's position lie in every query's future
    padded = torch.cat([q.new_zeros(*q.shape[:-2], diagonal, q.shape[-1]), q], dim=-2)  # (..., T + diagonal, Dh)
    return _sdpa_call(padded, k, v, None, scale, dropout_p, True)[..., diagonal:, :]  # (..., T, Dv)


def _sdpa_rows_per_block(T: int, S: int, window: int | None) -> int:
    """The most queries per block whose mask stays within ``_SDPA_BLOCK_PAIRS``: a block of r queries sees at most
    S keys, and with a window W at most r + W - 1 of them."""
    rows = _SDPA_BLOCK_PAIRS // max(S, 1)
    if window is not None:  # the largest r with r·(r + W - 1) <= pairs
        rows = max(rows, (math.isqrt((window - 1) ** 2 + 4 * _SDPA_BLOCK_PAIRS) - (window - 1)) // 2)
    return max(1, min(rows, T))


def _sdpa_by_query_blocks(q, k, v, mask, scale, dropout_p, diagonal, window):
    """``sdpa_attention`` with its positional triangle, one block of queries at a time (see its docstring).

    Query i sees key j when ``j <= i + diagonal`` and, with a window, ``j > i + diagonal - window``; so the block
    of queries ``a .. b-1`` sees keys ``lo .. hi-1`` at most, and every key outside is skipped, not masked.
    """
    T, S = q.shape[-2], k.shape[-2]
    context = q.new_zeros(*q.shape[:-1], v.shape[-1])  # (..., T, Dv): a query that sees no key keeps 0
    if mask is not None:  # a view with the last two dimensions (T, S), so that each block slices its own part
        mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape)) if mask.dim() < 2 else mask
        mask = mask.expand(*mask.shape[:-2], T, S)
    rows = _sdpa_rows_per_block(T, S, window)
    for a in range(0, T, rows):
        b = min(a + rows, T)
        hi = max(0, min(S, b + diagonal))  # past the last query's newest key: the future of the whole block
        lo = 0 if window is None else min(S, max(0, a + diagonal - window + 1))  # the first query's oldest key
        if hi <= lo:
            continue  # no query of the block sees any key
        # the block sees every key of lo .. hi-1 when its first query sees the newest and its last the oldest
        sees_all = hi - 1 <= a + diagonal and (window is None or lo > b - 1 + diagonal - window)
        keep = None
        if not sees_all:
            query_at = torch.arange(a + diagonal, b + diagonal, device=q.device)[:, None]  # (Tb, 1)
            key_at = torch.arange(lo, hi, device=q.device)[None, :]  # (1, Sb)
            keep = key_at <= query_at  # (Tb, Sb)
            if window is not None:
                keep &= key_at > query_at - window
        if mask is not None:
            tile = mask[..., a:b, lo:hi]  # (..., Tb, Sb)
            keep = tile if keep is None else tile & keep
        block = _sdpa_call(q[..., a:b, :], k[..., lo:hi, :], v[..., lo:hi, :], keep, scale, dropout_p, False)
        if keep is not None:
            dead_rows = ~keep.any(dim=-1, keepdim=True)  # masked_softmax's 0 for a query that sees no key
            if dead_rows.any():
                block = block.masked_fill(dead_rows, 0.0)
        context[..., a:b, :] = block  # (..., Tb, Dv)
    return context


def _check_scale(scale, q: Tensor) -> float:
    return check_float_fits("scale", check_positive_float("scale", scale), q.dtype, divides=False)


def _check_scores_finite(scores: Tensor, scale: float, q: Tensor, k: Tensor) -> None:
    """A scale of the caller's own that overflows finite scores is an error, not a silent row of NaN.

    Costs one pass and one sync (``bool``); only a caller-given ``scale`` pays it, never the modules' path.
    """
    if not bool(torch.isfinite(scores).all()) and bool(torch.isfinite(q).all()) and bool(torch.isfinite(k).all()):
        raise ValueError(
            f"scale={scale:g} is too large for these q and k: the scaled scores overflow {q.dtype} (inf), "
            f"which would make the weights NaN; use a smaller scale (the usual one is 1/√Dh = "
            f"{scale_factor(q.shape[-1]):.4g})"
        )


# --- 6. tiles: the online softmax of FlashAttention (chapter 14) ---------------------------------------------


class OnlineSoftmaxState(NamedTuple):
    """What the online softmax carries from one block of keys to the next, for a block of query rows.

    ``max``     ``(..., Tb, 1)`` the largest score seen so far in each row (``-inf`` before any key)
    ``total``   ``(..., Tb, 1)`` Σ exp(score - max) over the keys seen so far
    ``output``  ``(..., Tb, Dv)`` Σ exp(score - max) · v over the same keys: the output *before* dividing by ``total``
    ``rescale`` ``(..., Tb, 1)`` exp(old max - new max): what the last step multiplied ``total`` and ``output`` by
    """

    max: Tensor
    total: Tensor
    output: Tensor
    rescale: Tensor

    def result(self) -> Tensor:
        """``output / total``: the attention output of the keys seen so far (0 in a row that saw no key)."""
        return self.output / self.total.masked_fill(self.total == 0, 1.0)  # total is 0 only where output is 0


def online_softmax_start(rows_shape, value_width: int, *, dtype=torch.float32, device=None) -> OnlineSoftmaxState:
    """The state before any key: max ``-inf``, total 0, output 0, for rows of shape ``(..., Tb)``.

    ``rows_shape`` a tuple of sizes >= 0 (the query rows' shape, e.g. ``(B, H, Tb)``), ``value_width`` Dv >= 1,
    ``dtype`` a floating dtype (that of the scores the steps will take in).
    """
    rows_shape = _check_rows_shape(rows_shape)
    rows = (*rows_shape, 1)
    value_width = check_positive_int("value_width", value_width)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype (the scores' dtype, e.g. torch.float32), got "
                        f"{type(dtype).__name__} {dtype!r}")
    return OnlineSoftmaxState(
        max=torch.full(rows, float("-inf"), dtype=dtype, device=device),
        total=torch.zeros(rows, dtype=dtype, device=device),
        output=torch.zeros((*rows_shape, value_width), dtype=dtype, device=device),
        rescale=torch.ones(rows, dtype=dtype, device=device),
    )


def _check_rows_shape(rows_shape) -> tuple[int, ...]:
    if isinstance(rows_shape, torch.Size):
        return tuple(rows_shape)
    if not isinstance(rows_shape, (tuple, list)) or any(
            isinstance(n, bool) or not isinstance(n, int) for n in rows_shape):
        raise TypeError(f"rows_shape must be a tuple of ints, the shape (..., Tb) of the query rows, got "
                        f"{type(rows_shape).__name__} {rows_shape!r}")
    if any(n < 0 for n in rows_shape):
        raise ValueError(f"rows_shape must hold sizes >= 0, the shape (..., Tb) of the query rows, got "
                         f"{tuple(rows_shape)}")
    return tuple(int(n) for n in rows_shape)


def online_softmax_step(
    state: OnlineSoftmaxState, scores: Tensor, values: Tensor, *, dropout_p: float = 0.0,
    dropout_mask: Tensor | None = None,
) -> OnlineSoftmaxState:
    """One step of the online softmax (Milakov & Gimelshein 2018): take in one block of keys.

    ``scores`` ``(..., Tb, Sb)`` the block's scaled scores (``-inf`` where masked), ``values`` ``(..., Sb, Dv)``.
    Chapter 6's stable softmax subtracts the row's maximum; here the maximum is only known so far, so when a
    block raises it from ``m`` to ``m'`` everything summed with the old one is multiplied by ``exp(m - m')``:

        m' = max(m, max(scores))        l' = exp(m - m')·l + Σ exp(scores - m')
        o' = exp(m - m')·o + exp(scores - m') @ values

    After the last block, ``o' / l'`` is exactly ``softmax(all scores) @ all values``. With ``dropout_p``, dropped
    weights leave the output but not the sum: the same as dropout on the normalised weights. Which weights drop is
    drawn by ``F.dropout``, or given as ``dropout_mask``, a ``torch.bool`` keep mask broadcastable to ``scores``
    (True = kept; the kept weights are scaled by ``1 / (1 - dropout_p)``): ``flash_attention`` gives it, to draw the
    same mask again in its backward.

    ``state`` comes from ``online_softmax_start`` or a previous step; ``scores`` has one row per row of the state,
    and ``scores @ values`` the state's output shape; all three share dtype and device.
    """
    dropout_p = _check_online_step(state, scores, values, dropout_p, dropout_mask)
    new_max = torch.maximum(state.max, scores.amax(dim=-1, keepdim=True))  # (..., Tb, 1)
    # a row that has seen only masked keys keeps max -inf: shift it by 0 instead (exp(-inf - -inf) would be NaN)
    shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
    rescale = torch.exp(state.max - shift)  # (..., Tb, 1): 0 for a row's first real block, 1 if the max held
    weights = torch.exp(scores - shift)  # (..., Tb, Sb): unnormalised, masked keys give exp(-inf) = 0
    return OnlineSoftmaxState(
        max=new_max,
        total=rescale * state.total + weights.sum(dim=-1, keepdim=True),
        # (..., Tb, Sb) @ (..., Sb, Dv) -> (..., Tb, Dv)
        output=rescale * state.output + _dropped(weights, dropout_p, dropout_mask) @ values,
        rescale=rescale,
    )


def _check_online_step(state, scores, values, dropout_p, dropout_mask) -> float:
    """``online_softmax_step``'s arguments: shapes and dtypes only (no pass over the data: it runs once per tile)."""
    if not isinstance(state, OnlineSoftmaxState):
        raise TypeError(f"state must be an OnlineSoftmaxState (from online_softmax_start or a previous step), got "
                        f"{type(state).__name__}")
    check_float_tensor("scores", scores, min_ndim=1, layout="(..., Tb, Sb)")
    check_float_tensor("values", values, min_ndim=2, layout="(..., Sb, Dv)")
    check_same_device_dtype(("state.output", "scores", "values"), (state.output, scores, values))
    if tuple(scores.shape[:-1]) != tuple(state.max.shape[:-1]):
        raise ValueError(f"scores must have one row per row of the state: scores {tuple(scores.shape)} has rows "
                         f"{tuple(scores.shape[:-1])}, state.max {tuple(state.max.shape)} has rows "
                         f"{tuple(state.max.shape[:-1])}")
    if values.shape[-2] != scores.shape[-1]:
        raise ValueError(f"values must hold one value per key of scores: scores {tuple(scores.shape)} has "
                         f"{scores.shape[-1]} keys, values {tuple(values.shape)} has {values.shape[-2]}")
    if scores.dim() == 1:  # (Sb,) @ (..., Sb, Dv) -> (..., Dv)
        product = (*values.shape[:-2], values.shape[-1])
    else:  # (..., Tb, Sb) @ (..., Sb, Dv) -> (..., Tb, Dv), the leading dimensions broadcast
        lead = _broadcast_shape(tuple(scores.shape[:-2]), tuple(values.shape[:-2]))
        product = None if lead is None else (*lead, scores.shape[-2], values.shape[-1])
    if product != tuple(state.output.shape):
        raise ValueError(f"scores @ values must have the shape of state.output {tuple(state.output.shape)}, got "
                         f"scores {tuple(scores.shape)} and values {tuple(values.shape)}"
                         + ("" if product is None else f", which give {product}"))
    dropout_p = check_probability("dropout_p", dropout_p)
    if dropout_mask is not None:
        check_keep_mask("dropout_mask", dropout_mask, tuple(scores.shape), scores.device)
        if dropout_p == 0:
            raise ValueError("dropout_mask needs the dropout_p it was drawn with (> 0): the kept weights are "
                             "scaled by 1 / (1 - dropout_p), got dropout_p=0.0")
    return dropout_p


def _broadcast_shape(a: tuple, b: tuple) -> tuple | None:
    """The shape two shapes broadcast to, or None when they do not (plain Python: no sympy import)."""
    a, b = (1,) * (len(b) - len(a)) + a, (1,) * (len(a) - len(b)) + b
    if not _broadcastable(a, b):
        return None
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def _dropped(weights: Tensor, dropout_p: float, dropout_mask: Tensor | None) -> Tensor:
    """Inverted dropout on a tile of weights: drawn by ``F.dropout``, or the kept ones given by ``dropout_mask``."""
    if dropout_mask is not None:
        return weights.masked_fill(~dropout_mask, 0.0) * (1.0 / (1.0 - dropout_p))
    return F.dropout(weights, p=dropout_p) if dropout_p else weights


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    block_size: int = 64,
    scale: float | None = None,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    return_lse: bool = False,
    window: int | None = None,
    sinks: Tensor | None = None,
):
    """Exact attention computed tile by tile: FlashAttention's algorithm (Dao et al. 2022) in plain PyTorch.

    q ``(..., T, Dh)``, k ``(..., S, Dh)``, v ``(..., S, Dv)`` with the same leading (batch, head) dimensions.
    Queries are cut into blocks of ``block_size`` rows, keys and values into blocks of ``block_size`` tokens; each
    (query block, key block) tile is scored, masked and folded into the running state by ``online_softmax_step``.
    Besides the inputs and the output, the largest intermediate is one ``block_size × block_size`` tile of scores
    per (batch, head): the ``T × S`` matrix is never built, so memory grows with T, not T².

    ``causal=True`` aligns the triangle to the **bottom right**: the T queries are the *last* T of the S positions
    (query t sits at position S - T + t), as for a chunk after a KV cache; tiles wholly in the future are skipped,
    about half of them when T = S. (``is_causal=True`` in SDPA and ``causal_mask`` align top-left instead: the
    same when T = S.) With ``window=W`` (causal only) the query at position p sees keys ``p - W + 1 .. p``, and the
    tiles wholly older than that are skipped as well: a sliding window costs T·W work, not T·S. ``mask`` is an
    optional keep mask broadcastable to ``(..., T, S)``. A query that may attend to no key gets 0, as in
    ``masked_softmax``. ``scale`` defaults to ``1/√Dh``.

    Returns the context ``(..., T, Dv)``; with ``return_lse=True`` also the log-sum-exp of each row's scaled
    scores ``(..., T)`` (``-inf`` for a row with no key): with the output, what the backward keeps (one number per
    row, as in FlashAttention-2; the 2022 paper keeps the row's max and sum, two numbers).
    Gradients: the backward recomputes each tile's weights from that log-sum-exp instead of storing them
    (``_FlashAttention``), so training memory grows with T too; the log-sum-exp is differentiable as well (its
    gradient joins the same backward), so results merged by ``merge_attention_states`` train like one call.

    ``dropout_p`` drops weights as FlashAttention does, without keeping a mask: one seed per call is drawn from
    torch's global generator (``torch.manual_seed`` makes a call reproducible), and the tile of query block ``i``
    and key block ``j`` draws its keep mask ``torch.rand(tile shape) >= dropout_p`` from a generator on q's device
    seeded with ``seed + i·⌈S / block_size⌉ + j``. The backward saves the seed, not the masks, and draws each
    tile's mask again; the result equals explicit attention with that mask on its weights.

    ``sinks`` ``(H,)`` (q ``(..., H, T, Dh)``): one logit per head in every row's denominator (gpt-oss). The tiles
    need not know: with ``L`` the row's log-sum-exp over the real keys, the sink's extra ``exp(sink)`` multiplies the
    finished row by ``exp(L) / (exp(L) + exp(sink)) = sigmoid(L - sink)`` (``merge_attention_states`` with a block of
    one key whose value is 0). The lse returned stays the real keys'.
    """
    _check_qkv(q, k, v, mask)
    if sinks is not None:
        _check_sinks(sinks, q)
    causal = check_flag("causal", causal)
    block_size = check_positive_int("block_size", block_size)
    dropout_p = check_probability("dropout_p", dropout_p)
    return_lse = check_flag("return_lse", return_lse)
    window = _check_window(window, causal)
    if scale is None:
        scale = scale_factor(q.shape[-1])
    else:
        scale = _check_scale(scale, q)
        _check_tiles_finite(q, k, scale, block_size)
    seed = _dropout_seed() if dropout_p > 0 else 0  # saved instead of the masks: the backward draws them again
    context, lse = _FlashAttention.apply(q, k, v, mask, causal, scale, block_size, dropout_p, seed, window)
    if sinks is not None:  # (..., H, T) - (H, 1): each row's share of its denominator that real keys hold
        context = context * torch.sigmoid(lse - sinks.to(lse.dtype)[:, None])[..., None]  # 0 where lse = -inf
    return (context, lse) if return_lse else context


def _check_window(window, causal: bool) -> int | None:
    """``flash_attention``'s sliding window: None, or a positive int on a causal call."""
    if window is None:
        return None
    window = check_positive_int("window", window)
    if not causal:
        raise ValueError("window needs causal=True: a sliding window limits how far back a causal query looks")
    return window


def _dropout_seed() -> int:
    """One seed per call, from torch's global (CPU) generator: ``torch.manual_seed`` fixes it on every device."""
    return int(torch.randint(2**62, ()))


def _tile_dropout_mask(generator: torch.Generator, seed: int, rows: slice, cols: slice, key_blocks: int,
                       block_size: int, shape, dropout_p: float) -> Tensor:
    """The keep mask of one tile's dropout, ``shape`` ``(..., Tb, Sb)``, True = kept; the same in forward and backward.

    The tile of query block ``i`` and key block ``j`` seeds ``generator`` (on the tensors' device) with
    ``seed + i·key_blocks + j``: the tiles get different masks, and any tile's mask can be drawn again alone.
    """
    tile = (rows.start // block_size) * key_blocks + cols.start // block_size
    generator.manual_seed(seed + tile)
    return torch.rand(shape, generator=generator, device=generator.device) >= dropout_p


def _query_blocks(T: int, block_size: int):
    """The row slices of the query blocks: ``0:b, b:2b, ...`` (the last one may be shorter)."""
    return [slice(i0, min(i0 + block_size, T)) for i0 in range(0, T, block_size)]


def _key_tiles(rows: slice, T: int, S: int, block_size: int, causal: bool, window: int | None = None):
    """Yield ``(key slice, keep)`` for every key block the query block ``rows`` must look at.

    ``keep`` is the tile's causal keep mask ``(Tb, Sb)``, or None when the whole tile is allowed. With ``causal``,
    query ``i`` sits at position ``S - T + i``; a key block starting after the query block's last position is in
    the future for every row of the block, and is skipped. With a ``window`` W, so is a key block ending before
    the first query's oldest key (position ``S - T + rows.start - W + 1``).
    """
    offset = S - T  # bottom-right alignment
    first = 0 if window is None else max(0, offset + rows.start - window + 1)  # the oldest key any row sees
    for j0 in range(first // block_size * block_size, S, block_size):
        j1 = min(j0 + block_size, S)
        if causal and j0 > offset + rows.stop - 1:
            break  # this block and every later one lie wholly in the future of all these queries
        future = causal and j1 - 1 > offset + rows.start  # the tile crosses the diagonal: some pairs are ahead
        too_old = window is not None and j0 < offset + rows.stop - window  # some pairs lie behind the window
        keep = None
        if future or too_old:
            query_positions = torch.arange(offset + rows.start, offset + rows.stop)[:, None]  # (Tb, 1)
            key_positions = torch.arange(j0, j1)[None, :]  # (1, Sb)
            keep = key_positions <= query_positions  # (Tb, Sb)
            if window is not None:
                keep &= key_positions > query_positions - window
        yield slice(j0, j1), keep


def _tiles(T: int, S: int, block_size: int, causal: bool, window: int | None = None):
    """Yield ``(query slice, key slice, keep)`` for every tile that must be computed, query block by block."""
    for rows in _query_blocks(T, block_size):
        for cols, keep in _key_tiles(rows, T, S, block_size, causal, window):
            yield rows, cols, keep


def _tile_mask(mask: Tensor | None, keep: Tensor | None, rows: slice, cols: slice, device) -> Tensor | None:
    if mask is not None:
        tile = mask[..., rows, cols]  # (..., Tb, Sb): the mask was expanded to (..., T, S) by _expand_mask
        keep = tile if keep is None else tile & keep.to(device)
    elif keep is not None:
        keep = keep.to(device)
    return keep


def _expand_mask(mask: Tensor | None, T: int, S: int) -> Tensor | None:
    """A mask broadcastable to (..., T, S) with its last two dimensions made T and S, so that tiles slice it."""
    if mask is None:
        return None
    mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape)) if mask.dim() < 2 else mask  # at least 2-D
    return mask.expand(*mask.shape[:-2], T, S)  # a view: no memory


def _flash_forward(q, k, v, mask, causal, scale, block_size, dropout_p=0.0, seed=0, window=None):
    """The forward pass: every query block walks its key blocks with ``online_softmax_step``."""
    T, S = q.shape[-2], k.shape[-2]
    generator = torch.Generator(device=q.device) if dropout_p > 0 else None
    key_blocks = -(-S // block_size)
    mask = _expand_mask(mask, T, S)
    context = q.new_empty(*q.shape[:-1], v.shape[-1])  # (..., T, Dv)
    lse = q.new_empty(q.shape[:-1])  # (..., T)
    for rows in _query_blocks(T, block_size):
        # one block's running state at a time: memory is the output plus one (Tb × Sb) tile of scores
        state = online_softmax_start((*q.shape[:-2], rows.stop - rows.start), v.shape[-1], dtype=q.dtype,
                                     device=q.device)
        q_block = q[..., rows, :] * scale  # (..., Tb, Dh): scaled once per query block, not once per tile
        for cols, keep in _key_tiles(rows, T, S, block_size, causal, window):
            scores = q_block @ k[..., cols, :].transpose(-2, -1)  # (..., Tb, Dh) @ (..., Dh, Sb) -> (..., Tb, Sb)
            keep = _tile_mask(mask, keep, rows, cols, q.device)
            if keep is not None:
                scores = scores.masked_fill(~keep, float("-inf"))
            dropout_mask = None if generator is None else _tile_dropout_mask(
                generator, seed, rows, cols, key_blocks, block_size, scores.shape, dropout_p)  # (..., Tb, Sb)
            state = online_softmax_step(state, scores, v[..., cols, :], dropout_p=dropout_p,
                                        dropout_mask=dropout_mask)
        context[..., rows, :] = state.result()  # 0 for queries that saw no key (causal, S < T)
        lse[..., rows] = (state.max + state.total.log()).squeeze(-1)  # log Σ exp(s) = m + log Σ exp(s - m)
    return context, lse


class _FlashAttention(torch.autograd.Function):
    """Forward: the tiles. Backward: the tiles again, recomputing each tile's weights from the saved
    log-sum-exp (``P = exp(S·scale - lse)``) instead of storing them (Dao et al. 2022, algorithm 4), and each
    tile's dropout mask from the saved seed (``_tile_dropout_mask``) instead of storing it.

    With ``Z`` the tile's dropout (kept / (1 - p), or 1 without dropout) and ``dL`` the gradient of the lse:
    ``dV = (P∘Z)ᵀ dO``, ``dP = (dO Vᵀ)∘Z``, ``dS = P∘(dP - D + dL)`` where ``D_i = dO_i · O_i``.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale, block_size, dropout_p, seed, window):
        with torch.no_grad():
            context, lse = _flash_forward(q, k, v, mask, causal, scale, block_size, dropout_p, seed, window)
        ctx.save_for_backward(q, k, v, context, lse, mask if mask is not None else torch.empty(0))
        ctx.has_mask, ctx.causal, ctx.scale, ctx.block_size = mask is not None, causal, scale, block_size
        ctx.dropout_p, ctx.seed = dropout_p, seed  # two numbers: the dropout masks are drawn again, not kept
        ctx.window = window
        return context, lse

    @staticmethod
    def backward(ctx, grad_context, grad_lse):
        q, k, v, context, lse, mask = ctx.saved_tensors
        T, S = q.shape[-2], k.shape[-2]
        mask = _expand_mask(mask if ctx.has_mask else None, T, S)
        grad_q, grad_k, grad_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        # D_i = Σ_j P_ij dP_ij = dO_i · O_i: the softmax backward's row term, from the output, not from P (with
        # dropout too: O_i = Σ_j P_ij Z_ij v_j). The lse's own gradient enters there: ∂lse_i/∂s_ij = P_ij.
        row_term = (grad_context * context).sum(dim=-1, keepdim=True)  # (..., T, 1)
        if grad_lse is not None:
            row_term = row_term - grad_lse[..., None]
        lse = lse.masked_fill(lse == float("-inf"), float("inf"))[..., None]  # (..., T, 1): P = 0 in empty rows
        generator = torch.Generator(device=q.device) if ctx.dropout_p > 0 else None
        key_blocks = -(-S // ctx.block_size)
        for rows, cols, keep in _tiles(T, S, ctx.block_size, ctx.causal, ctx.window):
            q_tile, k_tile, v_tile = q[..., rows, :], k[..., cols, :], v[..., cols, :]
            scores = (q_tile * ctx.scale) @ k_tile.transpose(-2, -1)  # (..., Tb, Sb)
            keep = _tile_mask(mask, keep, rows, cols, q.device)
            if keep is not None:
                scores = scores.masked_fill(~keep, float("-inf"))
            weights = torch.exp(scores - lse[..., rows, :])  # (..., Tb, Sb): the forward's softmax, recomputed
            grad_out = grad_context[..., rows, :]  # (..., Tb, Dv)
            grad_weights = grad_out @ v_tile.transpose(-2, -1)  # (..., Tb, Dv) @ (..., Dv, Sb) -> (..., Tb, Sb)
            dropped = weights
            if generator is not None:  # the forward's dropout mask of this tile, drawn again from the seed
                kept = _tile_dropout_mask(generator, ctx.seed, rows, cols, key_blocks, ctx.block_size,
                                          scores.shape, ctx.dropout_p)
                dropped = _dropped(weights, ctx.dropout_p, kept)  # P∘Z
                grad_weights = _dropped(grad_weights, ctx.dropout_p, kept)  # dP = (dO Vᵀ)∘Z
            grad_v[..., cols, :] += dropped.transpose(-2, -1) @ grad_out  # (..., Sb, Tb) @ (..., Tb, Dv)
            grad_scores = weights * (grad_weights - row_term[..., rows, :]) * ctx.scale
            grad_q[..., rows, :] += grad_scores @ k_tile  # (..., Tb, Sb) @ (..., Sb, Dh)
            grad_k[..., cols, :] += grad_scores.transpose(-2, -1) @ q_tile  # (..., Sb, Tb) @ (..., Tb, Dh)
        return grad_q, grad_k, grad_v, None, None, None, None, None, None, None


def _check_tiles_finite(q: Tensor, k: Tensor, scale: float, block_size: int) -> None:
    """``_check_scores_finite`` for the tiled kernel: the largest score bound, without building the scores."""
    if q.numel() == 0 or k.numel() == 0:
        return  # no scores at all
    bound = float(q.detach().abs().amax() * k.detach().abs().amax()) * q.shape[-1] * scale  # |q·k| <= Dh·max·max
    if math.isfinite(bound) and bound < torch.finfo(q.dtype).max:
        return
    for rows, cols, _ in _tiles(q.shape[-2], k.shape[-2], block_size, causal=False):
        _check_scores_finite((q[..., rows, :] * scale) @ k[..., cols, :].transpose(-2, -1), scale, q, k)


def merge_attention_states(out1: Tensor, lse1: Tensor, out2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    """Attention over two disjoint sets of keys, each already finished, merged into attention over their union.

    ``out1`` ``(..., T, Dv)`` with ``lse1`` ``(..., T)`` is one attention result over some keys, with the
    log-sum-exp of each row's scaled (and masked) scores, as ``flash_attention(..., return_lse=True)`` returns
    them; ``out2, lse2`` the same queries over other keys. The result is exactly attention over all the keys::

        L = logaddexp(L1, L2)        o = exp(L1 - L)·o1 + exp(L2 - L)·o2

    (each side's softmax was normalised by its own sum exp(L1) or exp(L2); the union's sum is their total). Returns
    ``(out, lse)`` in the same shapes, so merges chain: merging is associative and commutative, and a third block
    of keys merges into the result like the second did. This is the online softmax step with a whole block's
    result in place of one tile, and what these are built on:

    - **split-KV decoding** (Flash-Decoding, Dao et al. 2023): one query over a long cache; the cache is cut into
      chunks, attention runs over each chunk in parallel, the chunks' results are merged;
    - **prefix / cascade attention**: a prompt shared by many sequences is attended once for all of them and merged
      with each sequence's own suffix;
    - **ring attention** (Liu et al. 2023): each device holds one block of keys; queries meet the blocks in turn
      and merge each block's result into their running one.

    A row in which one side saw no key has ``lse = -inf`` there (``flash_attention`` gives it output 0): that
    side's output is ignored, whatever it holds, and the other side's row is returned as it is. A row in which
    **neither** side saw a key gets output 0 and ``lse = -inf``, as ``flash_attention``'s empty rows, so it still
    merges correctly with a later block. Differentiable in all four inputs.

    out1 and out2 share shape, dtype and device; lse1 and lse2 have shape ``out1.shape[:-1]``, one dtype (the
    outputs' or a wider float: FlashAttention's CUDA kernels keep lse in float32 beside bf16 outputs) and the same
    device. The merged output has the outputs' dtype, the merged lse the lse's.
    """
    _check_attention_states(out1, lse1, out2, lse2)
    work = torch.promote_types(out1.dtype, lse1.dtype)
    lse1, lse2 = lse1.to(work)[..., None], lse2.to(work)[..., None]  # (..., T, 1)
    # shift by the larger lse (detached: the result does not depend on the shift); an empty row of both shifts by 0
    shift = torch.maximum(lse1, lse2).detach()
    shift = shift.masked_fill(shift == float("-inf"), 0.0)
    w1, w2 = torch.exp(lse1 - shift), torch.exp(lse2 - shift)  # (..., T, 1): each side's sum of exp, rescaled
    total = w1 + w2  # 0 only in a row where both sides are empty
    empty = total == 0
    safe_total = total.masked_fill(empty, 1.0)
    # a side that saw no key weighs 0 and its output is ignored (masked_fill, not 0·o: 0·NaN would be NaN)
    term1 = (w1 * out1.to(work)).masked_fill(lse1 == float("-inf"), 0.0)
    term2 = (w2 * out2.to(work)).masked_fill(lse2 == float("-inf"), 0.0)
    out = ((term1 + term2) / safe_total).to(out1.dtype)  # (..., T, Dv)
    lse = torch.where(empty, float("-inf"), shift + torch.log(safe_total)).squeeze(-1)  # (..., T)
    return out, lse.to(lse1.dtype)


def _check_attention_states(out1, lse1, out2, lse2) -> None:
    check_float_tensor("out1", out1, min_ndim=1, layout="(..., T, Dv)")
    check_float_tensor("out2", out2, min_ndim=1, layout="(..., T, Dv)")
    check_same_device_dtype(("out1", "out2"), (out1, out2))
    if out1.shape != out2.shape:
        raise ValueError(f"out2 must have the same shape as out1 (the same queries), got out1 {tuple(out1.shape)} "
                         f"and out2 {tuple(out2.shape)}")
    rows = tuple(out1.shape[:-1])
    for name, lse in (("lse1", lse1), ("lse2", lse2)):
        check_float_tensor(name, lse)
        if lse.device != out1.device:
            raise ValueError(f"{name} is on {lse.device} but out1 is on {out1.device}; move all four to one device")
        if tuple(lse.shape) != rows:
            raise ValueError(f"{name} must have shape out1.shape[:-1] = {rows} (one log-sum-exp per row of out1 "
                             f"{tuple(out1.shape)}), got {tuple(lse.shape)}")
    check_same_device_dtype(("lse1", "lse2"), (lse1, lse2))


def flash_kernel(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    softcap: float | None = None,
    sinks: Tensor | None = None,
) -> tuple[Tensor, None]:
    """``flash_attention`` with the kernels' signature, for ``KERNELS["flash"]``. Returns ``(context, None)``.

    ``is_causal`` means what it means for the other kernels, the top-left triangle (``causal_mask``); it differs
    from ``flash_attention``'s bottom-right one only when T != S, and then goes in as a mask. ``sinks`` as in
    ``flash_attention``; ``softcap`` is refused (ValueError): these tiles keep no tanh for the backward.
    """
    if softcap is not None:
        raise ValueError(f"flash_kernel cannot apply softcap, got softcap={softcap!r}: the tiled kernel's backward "
                         f"recomputes plain scores; use explicit_attention for a soft-capped softmax")
    is_causal = check_flag("is_causal", is_causal)
    if is_causal and q.dim() >= 2 and k.dim() >= 2 and q.shape[-2] != k.shape[-2]:
        mask = combine_masks(causal_mask(q.shape[-2], k.shape[-2], device=q.device), mask)
        is_causal = False
    return flash_attention(q, k, v, causal=is_causal, scale=scale, mask=mask, dropout_p=dropout_p, sinks=sinks), None


KERNELS = {"explicit": explicit_attention, "sdpa": sdpa_attention, "flash": flash_kernel}
