"""Bad input to the positions (chapter 13): each error names the argument, says what it got and what was expected.

A hostile user's inputs that once slipped through: an odd last dimension given to ``rotate_half`` (it returned
something that is not a rotation), an integer ``dtype`` for ``rope_cos_sin`` (integer cos and sin), a bad ``base``
of ``sinusoidal_positions`` named ``theta``, and positions on another device than ``x`` (an error from inside torch).
The "other device" is torch's ``meta`` device, so that the check runs on a machine without a GPU.
"""

from __future__ import annotations

import re

import pytest
import torch

import mha_lib


def esc(text: str) -> str:
    return re.escape(text)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: mha_lib.rotate_half(torch.randn(3, 5)), ValueError,
         "x.shape[-1] (the head size) must be even, got 5: rotary and sinusoidal positions turn the dimensions in "
         "pairs"),
        (lambda: mha_lib.rotate_half(torch.randn(2, 4, 1)), ValueError,
         "x.shape[-1] (the head size) must be even, got 1"),
        (lambda: mha_lib.rotate_half(torch.tensor(2.0)), ValueError,
         "x must be at least 1-D (..., Dh), got 0-D shape ()"),
        (lambda: mha_lib.rotate_half([1.0, 2.0]), TypeError, "x must be a torch.Tensor, got list"),
        (lambda: mha_lib.rope_cos_sin(torch.arange(4), 8, dtype=torch.int64), TypeError,
         "dtype must be a floating dtype (cos and sin lie in [-1, 1]), got torch.int64"),
        (lambda: mha_lib.rope_cos_sin(torch.arange(4), 8, dtype=torch.bool), TypeError,
         "dtype must be a floating dtype (cos and sin lie in [-1, 1]), got torch.bool"),
        (lambda: mha_lib.rope_cos_sin(torch.arange(4), 8, dtype="float32"), TypeError,
         "dtype must be a torch.dtype such as torch.float32, got str 'float32'"),
        (lambda: mha_lib.sinusoidal_positions(5, 8, base=0), ValueError, "base must be a finite float > 0, got 0"),
        (lambda: mha_lib.sinusoidal_positions(5, 8, base=-1.0), ValueError,
         "base must be a finite float > 0, got -1.0"),
        (lambda: mha_lib.sinusoidal_positions(5, 8, base="1e4"), TypeError, "base must be a positive float, got str"),
        (lambda: mha_lib.apply_rope(torch.randn(2, 4, 8), torch.arange(4, device="meta")), ValueError,
         "positions is on meta but x is on cpu; move both to one device, e.g. positions.to(x.device)"),
        (lambda: mha_lib.apply_rope(torch.randn(2, 4, 8, device="meta"), torch.arange(4)), ValueError,
         "positions is on cpu but x is on meta; move both to one device, e.g. positions.to(x.device)"),
        (lambda: mha_lib.apply_rope_interleaved(torch.randn(2, 4, 8), torch.arange(4, device="meta")), ValueError,
         "positions is on meta but x is on cpu; move both to one device"),
    ],
    ids=["rotate-odd", "rotate-1", "rotate-0d", "rotate-list", "dtype-int", "dtype-bool", "dtype-str", "base-0",
         "base-neg", "base-str", "rope-device", "rope-x-device", "interleaved-device"],
)
def test_bad_input_to_the_positions_is_named(call, error, text):
    with pytest.raises(error, match=esc(text)):
        call()


def test_good_input_still_works():
    """The checks refuse only what they name: an even last dimension, a float dtype, a positive base."""
    x = torch.randn(2, 3, 6)
    assert torch.equal(mha_lib.rotate_half(mha_lib.rotate_half(x)), -x)  # two quarter turns: a half turn
    cos, sin = mha_lib.rope_cos_sin(torch.arange(3), 6, dtype=torch.float64)
    assert cos.dtype == sin.dtype == torch.float64
    torch.testing.assert_close(cos.square() + sin.square(), torch.ones(3, 6, dtype=torch.float64))
    assert mha_lib.sinusoidal_positions(5, 8, base=100.0).shape == (5, 8)
    turned = mha_lib.apply_rope(x, torch.arange(3))
    torch.testing.assert_close(turned.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths
