"""Attention masks: which keys each query may look at.

mha_lib speaks one convention internally, the one of ``F.scaled_dot_product_attention``:

    a **keep mask** is a ``torch.bool`` tensor, broadcastable to the scores ``(..., T, S)``,
    where ``True`` means "this query may attend to this key".

Other code writes masks differently. The converters below translate, so a student can line them up:

=============================================  ==========================  ==================================
convention                                     who uses it                 convert with
=============================================  ==========================  ==================================
``triu(ones, diagonal=1)``, 1 = blocked        LLMs-from-scratch (000)     ``mask_from_blocked``
``tril(ones)`` buffer, 0 = blocked             nanoGPT (003)               ``mask_from_allowed``
``valid_lens`` (B,) or (B, T), fill -1e6       D2L (004)                   ``mask_from_valid_lens``
key padding ``(B, S)``, ``True`` = padded      key-padding tut., nn.MHA    ``mask_from_key_padding``
boolean ``attn_mask``, ``True`` = blocked      nn.MultiheadAttention       ``mask_from_blocked``
boolean ``attn_mask``, ``True`` = attend       F.scaled_dot_product_attn   (already a keep mask)
float, 0 = attend, ``-inf`` = blocked          additive masks              ``additive_mask`` builds one
=============================================  ==========================  ==================================
"""

from __future__ import annotations

import torch

from .validation import check_bool_mask, check_positive_int, check_tensor

Tensor = torch.Tensor


def causal_mask(num_queries: int, num_keys: int | None = None, *, device=None) -> Tensor:
    """Keep mask ``(T, S)``: query ``t`` may see keys ``0..t`` (itself included, never the future).

    The diagonal is *kept*: masking it too (as the GPT-2-sized walkthrough suggests) leaves query 0 with nothing
    to attend to.
    With ``T != S`` the triangle starts at the top-left corner, as ``is_causal=True`` does in PyTorch.
    """
    num_queries = check_positive_int("num_queries", num_queries)
    num_keys = num_queries if num_keys is None else check_positive_int("num_keys", num_keys)
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril()


def causal_mask_at(query_positions: Tensor, key_positions: Tensor, *, window: int | None = None) -> Tensor:
    """Keep mask ``(T, S)`` from true positions: query at position ``m`` sees the key at ``n`` when ``n <= m``
    and, with a ``window`` W, ``n > m - W`` (keys ``m - W + 1 .. m``: W keys, itself included).

    This is the mask of a chunk after a KV cache: its queries sit at ``past .. past + T - 1`` and its keys at
    ``start .. past + T - 1``. ``is_causal=True`` would align the triangle to the top-left corner instead, and the
    chunk's first query would see only the first key (chapter 12). Both positions live on one device; the mask
    is built there, one byte per (query, key) pair and no wider tensor on the way.

    The layers call this only for the explicit kernel: the tiled kernel and SDPA receive the same triangle as
    two numbers, the offset between the first query's and the first key's positions and the window
    (``MultiHeadAttention``, ``MultiHeadLatentAttention``), and never hold a ``(T, S)`` mask.
    """
    for name, p in (("query_positions", query_positions), ("key_positions", key_positions)):
        check_tensor(name, p, ndim=1, layout="(T,)" if name.startswith("query") else "(S,)")
        if p.is_floating_point() or p.is_complex() or p.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor of token positions, got {p.dtype}")
    if key_positions.device != query_positions.device:
        raise ValueError(
            f"key_positions is on {key_positions.device} but query_positions is on {query_positions.device}; "
            f"move both to the device of the scores the mask is for"
        )
    if window is not None:
        window = check_positive_int("window", window)
    queries, keys = query_positions[:, None], key_positions[None, :]  # (T, 1) and (1, S)
    keep = keys <= queries  # (T, S) bool: never the future (compared directly, no (T, S) of int64 distances)
    if window is not None:
        oldest = queries.to(torch.int64) - min(window, 2**62)  # (T, 1): in int64, a wide window cannot wrap
        keep &= keys > oldest  # and not further back than the window: keys m - W + 1 .. m
    return keep


def sliding_window_mask(num_tokens: int, window: int) -> Tensor:
    """Keep mask ``(T, T)`` of sliding-window causal attention: token ``t`` sees tokens ``t - W + 1 .. t``.

    A band of width W along the diagonal of the causal triangle (Mistral-7B uses W = 4,096).
    """
    num_tokens = check_positive_int("num_tokens", num_tokens)
    positions = torch.arange(num_tokens)
    return causal_mask_at(positions, positions, window=check_positive_int("window", window))


def invert_mask(mask: Tensor) -> Tensor:
    """Blocked mask <-> keep mask (``True`` = blocked, as in ``nn.MultiheadAttention``, becomes ``True`` = keep).

    ``mask`` is ``torch.bool`` or holds only 0 and 1: a 0.3 has no opposite, and ``-inf`` (an additive mask)
    would be read as ``True``; both are refused.
    """
    return ~_check_zero_one("mask", mask).bool()


def mask_from_blocked(blocked: Tensor) -> Tensor:
    """A mask where ``True`` / 1 means *blocked*, as a keep mask of the same shape.

    Reads LLMs-from-scratch's ``torch.triu(torch.ones(T, T), diagonal=1)`` (1 above the diagonal: the future is
    blocked) and ``nn.MultiheadAttention``'s boolean ``attn_mask`` (``True`` = not allowed to attend). Like
    ``invert_mask``, but it first checks that the mask holds only 0 and 1, so that a float mask of another kind
    (an additive 0 / -inf mask) is refused instead of being silently misread.
    """
    return ~_check_zero_one("blocked", blocked).bool()


def mask_from_allowed(allowed: Tensor) -> Tensor:
    """A mask where ``True`` / 1 means *may attend* and 0 means blocked, as a ``torch.bool`` keep mask.

    Reads nanoGPT's ``torch.tril(torch.ones(T, T))`` buffer (blocked where ``buffer == 0``); a boolean
    ``F.scaled_dot_product_attention`` mask already is a keep mask and comes back unchanged.
    """
    return _check_zero_one("allowed", allowed).bool()


def _check_zero_one(name: str, mask) -> Tensor:
    """``mask`` must be ``torch.bool`` or hold only the numbers 0 and 1."""
    check_tensor(name, mask)
    if mask.dtype == torch.bool:
        return mask
    if mask.device.type == "meta":  # its values are what must be checked, and a meta tensor has none
        raise ValueError(f"{name} is on the meta device: it has no values to read as 0/1; use a real tensor")
    if mask.is_complex():
        raise TypeError(f"{name} must be a torch.bool or a 0/1 tensor, got dtype {mask.dtype}")
    others = mask[(mask != 0) & (mask != 1)]
    if others.numel():
        hint = (" (-inf: this looks like an additive mask, 0 = attend and -inf = blocked; its keep mask is "
                f"{name} == 0)") if bool(torch.isinf(others).any()) else ""
        raise ValueError(
            f"{name} must hold only 0 and 1 (or be torch.bool), got other values such as "
            f"{others.flatten()[0].item()}{hint}"
        )
    return mask


def mask_from_valid_lens(valid_lens: Tensor, num_queries: int, num_keys: int) -> Tensor:
    """D2L's ``valid_lens`` as a keep mask ``(B, 1, T, S)``, ready to broadcast over heads.

    ``valid_lens`` is ``(B,)`` (every query of sequence ``b`` sees its first ``valid_lens[b]`` keys) or ``(B, T)``
    (one length per query). A length of 0 leaves a row with nothing to attend to (see ``masked_softmax``).
    """
    num_queries = check_positive_int("num_queries", num_queries)
    num_keys = check_positive_int("num_keys", num_keys)
    check_tensor("valid_lens", valid_lens)
    if valid_lens.is_floating_point() or valid_lens.dtype == torch.bool or valid_lens.is_complex():
        raise TypeError(f"valid_lens must be an integer tensor, got dtype {valid_lens.dtype}")
    if valid_lens.dim() == 1:
        lens = valid_lens[:, None]  # (B,) -> (B, 1): one length shared by all T queries
    elif valid_lens.dim() == 2:
        if valid_lens.shape[1] != num_queries:
            raise ValueError(
                f"valid_lens of shape (B, T) must have T = {num_queries} (the number of queries), "
                f"got shape ({valid_lens.shape[0]}, {valid_lens.shape[1]})"
            )
        lens = valid_lens
    else:
        raise ValueError(f"valid_lens must be 1-D (B,) or 2-D (B, T), got {valid_lens.dim()}-D")
    if lens.numel() and (lens.min() < 0 or lens.max() > num_keys):
        raise ValueError(
            f"valid_lens must lie in [0, {num_keys}] (the number of keys), "
            f"got values from {int(lens.min())} to {int(lens.max())}"
        )
    positions = torch.arange(num_keys, device=valid_lens.device)  # (S,)
    keep = positions[None, None, :] < lens[:, :, None]  # (B, 1 or T, S)
    return keep.expand(-1, num_queries, -1)[:, None]  # (B, T, S) -> (B, 1, T, S)


def mask_from_key_padding(key_padding_mask: Tensor, batch_size: int, num_keys: int) -> Tensor:
    """The key-padding tutorial's / ``nn.MultiheadAttention``'s key padding mask ``(B, S)``, ``True`` = padded,
    as a keep mask ``(B, 1, 1, S)`` (one row broadcast over heads and queries)."""
    batch_size = check_positive_int("batch_size", batch_size)
    num_keys = check_positive_int("num_keys", num_keys)
    check_bool_mask("key_padding_mask", key_padding_mask, (batch_size, num_keys), "(B, S)")
    return ~key_padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def additive_mask(keep: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Keep mask -> float mask to *add* to the scores: 0 where kept, ``-inf`` where blocked.

    ``dtype`` must be a real floating dtype (an int or bool tensor cannot hold ``-inf``).
    """
    check_tensor("keep", keep)
    if keep.dtype != torch.bool:
        raise TypeError(f"keep must be a torch.bool keep mask, got dtype {keep.dtype}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"dtype must be a floating torch.dtype such as torch.float32 (it must hold -inf), got {dtype!r}"
        )
    zeros = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
    return zeros.masked_fill(~keep, float("-inf"))


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of keep masks (``None`` = no restriction), broadcasting their shapes.

    Each mask must be a ``torch.bool`` tensor (an int or float mask would be ANDed bit by bit: ``2 & 1 = 0``),
    on one device, with shapes that broadcast together.
    """
    result = None
    for i, mask in enumerate(masks):
        if mask is None:
            continue
        name = f"masks[{i}]"
        check_tensor(name, mask)
        if mask.dtype != torch.bool:
            raise TypeError(
                f"{name} must be a torch.bool keep mask (True = attend), got dtype {mask.dtype}; convert a 0/1 "
                f"mask with mha_lib.mask_from_allowed or mha_lib.mask_from_blocked"
            )
        if result is None:
            result = mask
            continue
        if mask.device != result.device:
            raise ValueError(f"{name} is on {mask.device} but the masks before it are on {result.device}")
        shape = _broadcast_shape(tuple(result.shape), tuple(mask.shape))
        if shape is None:
            raise ValueError(
                f"{name} of shape {tuple(mask.shape)} does not broadcast with the masks before it, of shape "
                f"{tuple(result.shape)}"
            )
        result = result & mask
    return result


def _broadcast_shape(a: tuple, b: tuple) -> tuple | None:
    """The broadcast of two shapes, or None. Plain Python: see ``validation._broadcasts_to``."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))
