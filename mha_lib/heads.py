"""Three ways to cut a sequence ``(B, T, D)`` into ``H`` heads ``(B, H, T, Dh)`` (chapter 3, after D2L 10.5).

All three end with the same ``split_heads``; they differ in what happens to the features *before* the cut:

    ProjectionHeads   Linear(D, D)                          every head reads all D input features   D·D parameters
    DirectSplitHeads  nothing                                head h reads input features h·Dh ...     0 parameters
    GroupedConvHeads  Conv1d(D, D, kernel_size=1, groups=H)  head h reads its own Dh features only    D·D/H parameters

Each is a linear map of every token on its own, so each has an ``effective_weight()``: the ``(D, D)`` matrix
``W`` with ``forward(x) == split_heads(x @ W.T + bias, H)``. For the projection it is any matrix, for the direct
split the identity, for the grouped convolution a block-diagonal matrix. A kernel size of 1 means the
convolution never looks at neighbouring tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from .functional import split_heads
from .validation import check_divisible, check_flag, check_matches_weights, check_positive_int, check_sequence

Tensor = torch.Tensor


class _HeadFormer(nn.Module):
    """What the three share: the width and head checks, the input check and the final cut into heads."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_divisible("d_model", d_model, "num_heads", num_heads)
        self.head_dim = d_model // num_heads

    def mix(self, x: Tensor) -> Tensor:
        """The per-token linear map applied before the cut: ``(B, T, D) -> (B, T, D)``."""
        raise NotImplementedError

    def effective_weight(self) -> Tensor:
        """The ``(D, D)`` matrix of ``mix`` (rows: output features, as in ``nn.Linear.weight``)."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        check_sequence("x", x, self.d_model, width_name="d_model")
        for weight in self.parameters():  # none for the direct split
            check_matches_weights("x", x, weight)
        return split_heads(self.mix(x), self.num_heads)  # (B, T, D) -> (B, H, T, Dh)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, head_dim={self.head_dim}"


class ProjectionHeads(_HeadFormer):
    """A learned ``Linear(D, D)``, then the cut: what ``MultiHeadAttention`` does to Q, K and V."""

    def __init__(self, d_model: int, num_heads: int, bias: bool = False):
        super().__init__(d_model, num_heads)
        self.proj = nn.Linear(d_model, d_model, bias=check_flag("bias", bias))

    def mix(self, x: Tensor) -> Tensor:
        return self.proj(x)

    def effective_weight(self) -> Tensor:
        return self.proj.weight.detach()


class DirectSplitHeads(_HeadFormer):
    """No parameters: head ``h`` is simply input features ``h·Dh … (h+1)·Dh - 1``."""

    def mix(self, x: Tensor) -> Tensor:
        return x

    def effective_weight(self) -> Tensor:
        return torch.eye(self.d_model)


class GroupedConvHeads(_HeadFormer):
    """``Conv1d(D, D, kernel_size=1, groups=H)``, then the cut: head ``h`` mixes its own ``Dh`` features only.

    ``Conv1d`` wants channels before time, ``(B, D, T)``, hence the transposes around it.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = False):
        super().__init__(d_model, num_heads)
        self.conv = nn.Conv1d(d_model, d_model, kernel_size=1, groups=num_heads, bias=check_flag("bias", bias))

    def mix(self, x: Tensor) -> Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)  # (B, T, D) -> (B, D, T) -> conv -> (B, T, D)

    def effective_weight(self) -> Tensor:
        # conv.weight is (D, Dh, 1): output channel o of group g reads input channels g·Dh ... (g+1)·Dh - 1
        blocks = self.conv.weight.detach()[:, :, 0].split(self.head_dim)  # H × (Dh, Dh)
        return torch.block_diag(*blocks)  # (D, D), zero outside the diagonal blocks


HEAD_FORMERS = {"projection": ProjectionHeads, "direct split": DirectSplitHeads, "grouped conv": GroupedConvHeads}


def make_head_former(kind: str, d_model: int, num_heads: int) -> _HeadFormer:
    """One of ``HEAD_FORMERS`` by name (the widget of chapter 3 switches between them)."""
    if not isinstance(kind, str) or kind not in HEAD_FORMERS:
        raise ValueError(f"kind must be one of {sorted(HEAD_FORMERS)}, got {kind!r}")
    return HEAD_FORMERS[kind](d_model, num_heads)


__all__ = ["DirectSplitHeads", "GroupedConvHeads", "HEAD_FORMERS", "ProjectionHeads", "make_head_former"]
