"""Knocking heads out, in the core because two wings share it (trained/ for chapter 10, induction/ for 11).

A head's output is multiplied by 0 (or any factor) before the output projection.
Chapter 10 removes heads of a trained encoder (Michel et al. 2019); chapter 11 removes the previous-token head
of a tiny model and watches its induction heads stop working. Both use the same two helpers:

    check_head_mask(name, mask, L, H)   a keep mask ``(L, H)`` or ``(B, L, H)``: 1 keeps a head, 0 removes it
    with scaled_heads(layer, keep): ... a ``MultiHeadAttention`` whose heads are scaled by ``keep`` ``(H,)``/``(B, H)``
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from .modules import MultiHeadAttention

Tensor = torch.Tensor


def check_head_mask(name: str, mask, num_layers: int, num_heads: int) -> Tensor:
    """A keep mask over heads: ``(L, H)`` for the whole batch or ``(B, L, H)`` one per sequence; 1 = keep."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a tensor of shape (L, H) or (B, L, H), got {type(mask).__name__}")
    if mask.dim() not in (2, 3) or tuple(mask.shape[-2:]) != (num_layers, num_heads):
        raise ValueError(f"{name} must have shape ({num_layers}, {num_heads}) or (B, {num_layers}, {num_heads}) "
                         f"(layers × heads), got {tuple(mask.shape)}")
    return mask


@contextlib.contextmanager
def scaled_heads(layer: MultiHeadAttention, keep: Tensor | None) -> Iterator[None]:
    """Multiply each head's context by ``keep`` (H,) or (B, H) before ``out_proj`` (a forward pre-hook)."""
    if keep is None:
        yield
        return
    Dh = layer.head_dim

    def hook(module, args):
        (context,) = args  # (B, T, D): the heads merged, head h in columns h·Dh ... (h+1)·Dh - 1
        factor = keep.to(context.device, context.dtype).repeat_interleave(Dh, dim=-1)  # (..., H) -> (..., D)
        if factor.dim() == 2:
            factor = factor[:, None, :]  # (B, D) -> (B, 1, D): the same for every token
        return (context * factor,)

    handle = layer.out_proj.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()
