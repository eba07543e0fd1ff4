"""The numbers printed in *Build a Large Language Model (From Scratch)*, section 3.6 (seed 000).

Each result is built through mha_lib's public API exactly as the book builds it (``torch.manual_seed(123)``
right before the layer), then compared twice with the book's printed values: as the text a notebook shows
(``format_value``, 4 decimals) and numerically (``atol=5e-5``, half a unit in the last printed place).
"""

from __future__ import annotations

import pytest
import torch

import mha_lib
from mha_lib.display.printing import format_value

ATOL = 5e-5

# Section 3.6.1: MultiHeadAttentionWrapper(d_in=3, d_out=2, num_heads=2) -> 4 features per token
WRAPPER_ROWS = [
    [-0.4519, 0.2216, 0.4772, 0.1063],
    [-0.5874, 0.0058, 0.5891, 0.3257],
    [-0.6300, -0.0632, 0.6202, 0.3860],
    [-0.5675, -0.0843, 0.5478, 0.3589],
    [-0.5526, -0.0981, 0.5321, 0.3428],
    [-0.5299, -0.1081, 0.5077, 0.3493],
]

# Section 3.6.2: MultiHeadAttention(d_in=3, d_out=2, num_heads=2) -> 2 features per token
MHA_ROWS = [
    [0.3190, 0.4858],
    [0.2943, 0.3897],
    [0.2856, 0.3593],
    [0.2693, 0.3873],
    [0.2639, 0.3928],
    [0.2575, 0.4028],
]

# Section 3.6.2: the batched matrix multiplication demo, shape (b=1, num_heads=2, num_tokens=3, head_dim=4)
DEMO_A = [[
    [[0.2745, 0.6584, 0.2775, 0.8573], [0.8993, 0.0390, 0.9268, 0.7388], [0.7179, 0.7058, 0.9156, 0.4340]],
    [[0.0772, 0.3565, 0.1479, 0.5331], [0.4066, 0.2318, 0.4545, 0.9737], [0.4606, 0.5159, 0.4220, 0.5786]],
]]
DEMO_HEAD_SCORES = [
    [[1.3208, 1.1631, 1.2879], [1.1631, 2.2150, 1.8424], [1.2879, 1.8424, 2.0402]],
    [[0.4391, 0.7003, 0.5903], [0.7003, 1.3737, 1.0620], [0.5903, 1.0620, 0.9912]],
]


def _both_sequences(rows) -> torch.Tensor:
    """The book's batch holds the same sentence twice, so both batch elements print the same rows."""
    return torch.tensor([rows, rows])


def assert_prints_as(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.shape == expected.shape
    assert format_value(actual) == format_value(expected)
    torch.testing.assert_close(actual.detach(), expected, atol=ATOL, rtol=0)


def _book_mha(**kwargs) -> mha_lib.MultiHeadAttention:
    torch.manual_seed(123)
    return mha_lib.MultiHeadAttention(3, 2, 6, 0.0, num_heads=2, **kwargs)


def test_book_batch_is_two_copies_of_the_journey_sentence():
    batch = mha_lib.journey_batch()
    assert batch.shape == (2, 6, 3)
    assert format_value(batch[0, 0]) == "tensor([0.4300, 0.1500, 0.8900])"


def test_multi_head_attention_wrapper_prints_the_books_context_vectors():
    torch.manual_seed(123)
    wrapper = mha_lib.MultiHeadAttentionWrapper(3, 2, context_length=6, dropout=0.0, num_heads=2)
    context_vecs = wrapper(mha_lib.journey_batch())
    assert tuple(context_vecs.shape) == (2, 6, 4)
    assert_prints_as(context_vecs, _both_sequences(WRAPPER_ROWS))


def test_multi_head_attention_prints_the_books_context_vectors():
    context_vecs = _book_mha()(mha_lib.journey_batch())
    assert tuple(context_vecs.shape) == (2, 6, 2)
    assert_prints_as(context_vecs, _both_sequences(MHA_ROWS))


def test_show_prints_the_books_first_row(capsys):
    context_vecs = _book_mha()(mha_lib.journey_batch())
    mha_lib.show(context_vecs[0, 0], context_vecs.shape)
    assert capsys.readouterr().out == "tensor([0.3190, 0.4858]) torch.Size([2, 6, 2])\n"


def test_sdpa_kernel_prints_the_same_numbers():
    context_vecs = _book_mha(kernel="sdpa")(mha_lib.journey_batch())
    assert_prints_as(context_vecs, _both_sequences(MHA_ROWS))


def test_fused_layer_converted_from_the_split_one_prints_the_same_numbers():
    fused = mha_lib.fused_from_split(_book_mha())
    assert isinstance(fused, mha_lib.FusedMultiHeadAttention)
    assert_prints_as(fused(mha_lib.journey_batch()), _both_sequences(MHA_ROWS))


def test_split_layer_converted_from_the_wrapper_prints_the_wrappers_numbers():
    torch.manual_seed(123)
    wrapper = mha_lib.MultiHeadAttentionWrapper(3, 2, context_length=6, dropout=0.0, num_heads=2)
    split = mha_lib.split_from_wrapper(wrapper)
    assert_prints_as(split(mha_lib.journey_batch()), _both_sequences(WRAPPER_ROWS))


def test_batched_matmul_demo_three_ways():
    a = torch.tensor(DEMO_A)
    assert a.shape == (1, 2, 3, 4)
    expected = torch.tensor([DEMO_HEAD_SCORES])
    by_library = mha_lib.attention_scores(a, a)
    by_matmul = a @ a.transpose(2, 3)
    by_loop = torch.stack([a[0, h] @ a[0, h].T for h in range(2)])[None]  # the book's per-head version
    torch.testing.assert_close(by_library, by_matmul)
    torch.testing.assert_close(by_loop, by_matmul)
    assert_prints_as(by_library, expected)
    assert format_value(by_loop[0, 0]) == (
        "tensor([[1.3208, 1.1631, 1.2879],\n"
        "        [1.1631, 2.2150, 1.8424],\n"
        "        [1.2879, 1.8424, 2.0402]])"
    )


@pytest.mark.parametrize(
    ("width", "heads"), [pytest.param(768, 12, id="gpt2-small"), pytest.param(1600, 25, id="gpt2-xl")]
)
def test_gpt2_sizes_give_64_wide_heads(width, heads):
    layer = mha_lib.MultiHeadAttention(width, width, 1024, 0.0, heads)
    assert (layer.num_heads, layer.d_out, layer.head_dim) == (heads, width, 64)
    assert mha_lib.split_heads(torch.zeros(1, 2, width), heads).shape == (1, heads, 2, 64)
    assert heads in mha_lib.divisors(width)
