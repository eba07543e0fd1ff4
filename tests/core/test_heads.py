"""The three ways to form heads (mha_lib.heads): shapes, parameter counts, effective weights, what each head reads."""

from __future__ import annotations

import re

import pytest
import torch

from mha_lib import MultiHeadAttention, split_heads
from mha_lib.heads import (
    HEAD_FORMERS,
    DirectSplitHeads,
    GroupedConvHeads,
    ProjectionHeads,
    make_head_former,
)

B, T, D, H = 2, 5, 12, 3
Dh = D // H


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("kind", sorted(HEAD_FORMERS))
def test_every_way_gives_heads_of_shape_b_h_t_dh(kind):
    heads = make_head_former(kind, D, H)(torch.randn(B, T, D))
    assert heads.shape == (B, H, T, Dh)


@pytest.mark.parametrize(
    ("cls", "expected"),
    [(ProjectionHeads, D * D), (DirectSplitHeads, 0), (GroupedConvHeads, D * D // H)],
)
def test_parameter_counts(cls, expected):
    assert n_params(cls(D, H)) == expected


def test_parameter_counts_with_bias():
    assert n_params(ProjectionHeads(D, H, bias=True)) == D * D + D
    assert n_params(GroupedConvHeads(D, H, bias=True)) == D * D // H + D


@pytest.mark.parametrize("kind", sorted(HEAD_FORMERS))
def test_forward_is_split_heads_of_the_effective_weight(kind):
    former = make_head_former(kind, D, H)
    x = torch.randn(B, T, D)
    expected = split_heads(x @ former.effective_weight().T, H)
    torch.testing.assert_close(former(x), expected)


def test_direct_split_is_split_heads_of_the_input_itself():
    x = torch.randn(B, T, D)
    assert torch.equal(DirectSplitHeads(D, H)(x), split_heads(x, H))
    assert torch.equal(DirectSplitHeads(D, H).effective_weight(), torch.eye(D))


def test_grouped_conv_weight_is_block_diagonal():
    weight = GroupedConvHeads(D, H).effective_weight()
    for g in range(H):
        for other in range(H):
            block = weight[g * Dh : (g + 1) * Dh, other * Dh : (other + 1) * Dh]
            assert (block != 0).any() if g == other else torch.equal(block, torch.zeros(Dh, Dh))


def test_grouped_conv_head_reads_only_its_own_slice_and_only_its_own_token():
    former = GroupedConvHeads(D, H)
    x = torch.randn(B, T, D)
    changed = x.clone()
    changed[:, 2, 0:Dh] += 1.0  # features of head 0, token 2 only
    before, after = former(x), former(changed)
    assert not torch.allclose(before[:, 0, 2], after[:, 0, 2])
    assert torch.equal(before[:, 1:], after[:, 1:])  # other heads: untouched
    assert torch.equal(before[:, 0, [0, 1, 3, 4]], after[:, 0, [0, 1, 3, 4]])  # kernel size 1: no neighbours


def test_projection_head_reads_every_input_feature():
    former = ProjectionHeads(D, H)
    x = torch.randn(B, T, D)
    changed = x.clone()
    changed[..., 0] += 1.0  # one feature of head 0's slice
    moved = (former(changed) - former(x)).abs().amax(dim=(0, 2, 3))  # per head
    assert (moved > 0).all()


def test_projection_heads_are_what_multi_head_attention_does_to_the_queries():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, D, T, 0.0, H)
    former = ProjectionHeads(D, H)
    former.proj.load_state_dict(mha.W_query.state_dict())
    x = torch.randn(B, T, D)
    torch.testing.assert_close(former(x), split_heads(mha.W_query(x), H))


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: make_head_former("conv", D, H), ValueError, "kind must be one of"),
        (lambda: GroupedConvHeads(10, 3), ValueError, "d_model (10) must be divisible by num_heads (3)"),
        (lambda: ProjectionHeads(D, 0), ValueError, "num_heads must be a positive int"),
        (lambda: DirectSplitHeads(D, H)(torch.randn(T, D)), ValueError, "x must be 3-D (B, T, d_model)"),
        (lambda: ProjectionHeads(D, H)(torch.randn(B, T, D + 1)), ValueError, "expected d_model=12"),
        (lambda: ProjectionHeads(D, H)(torch.randn(B, T, D).double()), TypeError, "dtype torch.float64"),
    ],
)
def test_bad_input_is_named(call, error, pattern):
    with pytest.raises(error, match=re.escape(pattern)):
        call()
