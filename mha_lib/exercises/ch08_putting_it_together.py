"""Checkers for chapter 8, putting it together: the whole forward pass of a multi-head attention layer.

    check_attention_forward(fn)    fn(layer, x): (B, T, D) -> (B, T, D), what ``layer(x)`` computes, built from
                                   the layer's pieces (W_query, W_key, W_value, out_proj, num_heads, head_dim)

The layer is a causal ``mha_lib.MultiHeadAttention`` with biases, at sizes that are all different (B=2, T=5,
D=24, H=4, Dh=6), so that dividing by √D instead of √Dh, or mixing up two axes, gives different numbers. Its
weights and input come from private random generators: checking does not move the notebook's random numbers.
Calling ``layer(x)`` itself is refused, and so is its forward reached another way (``type(layer).forward(layer, x)``,
a copy, a layer converted from it): the point is to assemble the pieces.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from ..functional import attention_scores, merge_heads, split_heads
from ..masks import causal_mask
from ..modules import MultiHeadAttention, _MultiHeadBase
from ..validation import check_flag, check_sequence
from ..language import N_, gettext as _
from . import Feedback, _close, attempt, compare, failed, refuse

Tensor = torch.Tensor

B, T, D, H = 2, 5, 24, 4
Dh = D // H
EXERCISE = "attention_forward"

# The messages a student reads; the tests assert them, so they are written once, here.
NO_OUT_PROJ = N_("you forgot the output projection: after merging the heads, pass the result through "
                  "layer.out_proj (W_o), which mixes what the heads found.")
# three messages that name this checker's sizes: the English texts (the tests' names), and their msgids
_NO_SCALE = N_("you forgot to scale the scores: divide them by √Dh = √{Dh} (layer.head_dim ** 0.5).")
_SCALED_BY_D = N_("you divided by √D = √{D} (the model width) instead of √Dh = √{Dh} (the width of one head, "
                  "layer.head_dim): each score is a dot product of two Dh-wide vectors.")
_SCALED_BY_DH = N_("you divided by Dh = {Dh} instead of by its square root √Dh.")
NO_SCALE = _NO_SCALE.format(Dh=Dh)
SCALED_BY_D = _SCALED_BY_D.format(D=D, Dh=Dh)
SCALED_BY_DH = _SCALED_BY_DH.format(Dh=Dh)
NO_MASK = N_("you applied no causal mask: every token also looked at the tokens after it. Fill the scores above "
              "the diagonal with -inf before the softmax.")
MASK_AFTER_SOFTMAX = N_("you zeroed the future weights after the softmax without renormalising: the rows no longer "
                         "sum to 1. Mask the scores with -inf before the softmax.")
MERGE_NO_TRANSPOSE = N_("you merged the heads without transposing back: (B, H, T, Dh) reshaped straight to (B, T, D) "
                         "glues together rows of different tokens. Call .transpose(1, 2) first, then "
                         ".contiguous().view(B, T, D) (or use mha_lib.merge_heads).")
SPLIT_NO_TRANSPOSE = N_("you split the heads by viewing straight to (B, H, T, Dh): that cuts the token axis, not the "
                         "features. View to (B, T, H, Dh) first, then .transpose(1, 2) (or use mha_lib.split_heads).")
SOFTMAX_QUERIES = N_("you took the softmax over the queries (dim=-2): each query's row must sum to 1, use dim=-1.")
NO_SOFTMAX = N_("you multiplied V by the masked scores, not by the weights: the softmax is missing (and "
                 "-inf · v gave NaN).")
DIAGONAL_NAN = N_("row 0 of your output is NaN: you masked the diagonal too (the GPT-2-sized walkthrough's upper "
                   "triangle *including* the diagonal), so token 0 had no key left, and softmax of a row of -inf is "
                   "0/0. Block only the strict upper triangle: torch.triu(..., diagonal=1), or keep torch.tril(...).")
SOME_NAN = N_("your output contains NaN: some row of scores was -inf everywhere before the softmax. Check which "
               "entries your mask blocks: query t must keep keys 0..t.")
CALLED_LAYER = N_("do not call layer(x), nor its forward in another way such as type(layer).forward(layer, x) or "
                   "a layer built from its weights (that is the answer itself): build the output from "
                   "layer.W_query, layer.W_key, layer.W_value and layer.out_proj.")
TUPLE = N_("return only the output tensor (B, T, D), not a tuple.")


def _layer_and_input() -> tuple[MultiHeadAttention, Tensor]:
    with torch.random.fork_rng(devices=[]):  # the notebook's own random stream stays where it was
        torch.manual_seed(8)
        layer = MultiHeadAttention(D, D, context_length=T, dropout=0.0, num_heads=H, qkv_bias=True).eval()
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(88))
    return layer, x


MASK_KINDS = ("causal", "none", "diagonal", "after")
LAYOUT_KINDS = ("right", "no_transpose")


def forward_variant(
    layer: MultiHeadAttention,
    x: Tensor,
    *,
    scale: float | None = None,
    mask: str = "causal",
    softmax_dim: int | None = -1,
    split: str = "right",
    merge: str = "right",
    out_proj: bool = True,
) -> Tensor:
    """The forward pass step by step, with switches that reproduce the usual mistakes.

    ``mask``: "causal", "none", "diagonal" (the GPT-2-sized walkthrough's slip: the diagonal blocked too) or
    "after" (zeroed after the softmax). ``softmax_dim=None`` skips the softmax. ``split``/``merge``: "right" or "no_transpose".
    """
    if not isinstance(layer, MultiHeadAttention):
        raise TypeError(f"layer must be a mha_lib.MultiHeadAttention, got {type(layer).__name__}")
    check_sequence("x", x, layer.d_in)
    for name, value, allowed in (("mask", mask, MASK_KINDS), ("split", split, LAYOUT_KINDS),
                                 ("merge", merge, LAYOUT_KINDS)):
        if not isinstance(value, str) or value not in allowed:
            raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
    check_flag("out_proj", out_proj)
    Bx, Tx, Dx = x.shape
    H_, Dh_ = layer.num_heads, layer.head_dim
    heads = []
    for projection in (layer.W_query, layer.W_key, layer.W_value):
        projected = projection(x)  # (B, T, D)
        if split == "right":
            heads.append(split_heads(projected, H_))  # (B, T, D) -> (B, H, T, Dh)
        else:
            heads.append(projected.view(Bx, H_, Tx, Dh_))  # the slip: the token axis is cut
    q, k, v = heads
    scale = 1 / math.sqrt(Dh_) if scale is None else scale
    scores = attention_scores(q, k) * scale  # (B, H, T, T)
    keep = causal_mask(Tx)  # (T, T)
    if mask == "causal":
        scores = scores.masked_fill(~keep, float("-inf"))
    elif mask == "diagonal":
        scores = scores.masked_fill(~keep.tril(diagonal=-1), float("-inf"))
    weights = scores if softmax_dim is None else torch.softmax(scores, dim=softmax_dim)
    if mask == "after":
        weights = weights.masked_fill(~keep, 0.0)
    context = weights @ v  # (B, H, T, T) @ (B, H, T, Dh) -> (B, H, T, Dh)
    if merge == "right":
        merged = merge_heads(context)  # (B, H, T, Dh) -> (B, T, D)
    else:
        merged = context.reshape(Bx, Tx, Dx)  # the slip: rows of different tokens glued together
    return layer.out_proj(merged) if out_proj else merged  # (B, T, D)


def _refuse_call(*args, **kwargs):
    raise RuntimeError(CALLED_LAYER)


# The layer's own forward, reached any way: layer(x) and layer.forward(x) find the instance's `forward`;
# type(layer).forward(layer, x), MultiHeadAttention.forward(layer, x) or a forward saved before the check run the
# class's forward, whose first steps look these up on the instance too.
_REFUSED_ON_THE_LAYER = ("forward", "_check_return_weights", "_attend", "_padding_mask")


@contextmanager
def _no_layer_forward():
    """While the student's function runs, no multi-head layer finishes a forward pass: not the checked layer
    (see _REFUSED_ON_THE_LAYER), nor a copy of it, nor a layer converted from it (fused_from_split) or loaded
    with its weights: every one of them goes through _MultiHeadBase._attend."""
    original = _MultiHeadBase.__dict__["_attend"]
    _MultiHeadBase._attend = _refuse_call
    try:
        yield
    finally:
        _MultiHeadBase._attend = original


def check_attention_forward(student_fn) -> Feedback:
    """``student_fn(layer, x)`` must return what the causal ``layer(x)`` returns, assembled from its pieces."""
    layer, x = _layer_and_input()
    with torch.no_grad():
        expected = layer(x)  # (B, T, D)
        mistakes = {
            NO_OUT_PROJ: forward_variant(layer, x, out_proj=False),
            _(_NO_SCALE).format(Dh=Dh): forward_variant(layer, x, scale=1.0),
            _(_SCALED_BY_D).format(D=D, Dh=Dh): forward_variant(layer, x, scale=1 / math.sqrt(D)),
            _(_SCALED_BY_DH).format(Dh=Dh): forward_variant(layer, x, scale=1 / Dh),
            NO_MASK: forward_variant(layer, x, mask="none"),
            MASK_AFTER_SOFTMAX: forward_variant(layer, x, mask="after"),
            MERGE_NO_TRANSPOSE: forward_variant(layer, x, merge="no_transpose"),
            SPLIT_NO_TRANSPOSE: forward_variant(layer, x, split="no_transpose"),
            SOFTMAX_QUERIES: forward_variant(layer, x, softmax_dim=-2),
            NO_SOFTMAX: forward_variant(layer, x, softmax_dim=None),
        }
    for name in _REFUSED_ON_THE_LAYER:  # this layer only: its pieces still work, its forward does not
        setattr(layer, name, _refuse_call)
    with _no_layer_forward():
        answer = attempt(EXERCISE, student_fn, layer, x.clone())
    if isinstance(answer, Feedback):
        return answer
    if isinstance(answer, tuple):
        return failed(EXERCISE, TUPLE)
    refused = refuse(EXERCISE, answer, expected)  # not a tensor, complex, sparse, integer
    if refused is not None:  # a Feedback is falsy when failed: test for None
        return refused
    if answer.shape == expected.shape and torch.isnan(answer.detach()).any():
        if _close(answer, mistakes[NO_SOFTMAX], 1e-5, 1e-4):  # NaN where the -inf scores met V
            return failed(EXERCISE, NO_SOFTMAX)
        nan_rows = torch.isnan(answer).any(dim=-1)  # (B, T)
        diagonal_rows = torch.zeros_like(nan_rows)
        diagonal_rows[:, 0] = True  # the GPT-2-sized walkthrough's mask leaves token 0 with nothing to attend to
        return failed(EXERCISE, DIAGONAL_NAN if torch.equal(nan_rows, diagonal_rows) else SOME_NAN)
    return compare(EXERCISE, answer, expected, mistakes=mistakes,
                   success=N_("correct: your pieces compute exactly what the layer computes."))


__all__ = ["check_attention_forward", "forward_variant"]
