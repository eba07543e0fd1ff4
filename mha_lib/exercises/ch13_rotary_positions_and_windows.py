"""Checkers for chapter 13, rotary positions and sliding windows.

    check_apply_rope(fn)     fn(x, positions, theta) -> x rotated, rotate-half layout (transformers)  (..., T, Dh)
    check_window_mask(fn)    fn(T, W)                -> keep mask, query t sees keys t-W+1 .. t      (T, T) bool
    check_reach(fn)          fn(layers, window)      -> how many input positions the last token reads  int

Each checker draws its own inputs, runs the student's function through ``attempt`` (private copies, every
failure turned into feedback), compares it with ``mha_lib``'s own answer, and names the mistake it reproduces
("you rotated neighbouring pairs (GPT-J's layout) ...", "each query sees W + 1 keys ...").
"""

from __future__ import annotations

from typing import Callable

import torch

from ..language import N_, gettext as _
from ..masks import causal_mask, sliding_window_mask
from ..positions import apply_rope, apply_rope_interleaved, rope_frequencies, rotate_half
from . import Feedback, attempt, compare, count_answers, failed, named_mistake, passed, refuse, shown_count

Tensor = torch.Tensor

# --- 13.1 apply_rope ---------------------------------------------------------------------------------------------
GPT_J_LAYOUT = N_("you rotated neighbouring pairs (x[2i], x[2i+1]), GPT-J's layout: transformers' Llama code (and the "
                  "checkpoints converted for it) pairs dimension i with i + Dh/2 (rotate_half swaps the two halves). "
                  "Both are rotations, but weights trained in one layout are wrong in the other.")
WRONG_DIRECTION = N_("you turned each pair the wrong way (by -angle): the result is x·cos - rotate_half(x)·sin. "
                     "The rotate-half layout is x·cos + rotate_half(x)·sin, with rotate_half(x) = cat(-x2, x1).")
NO_COS = N_("you added rotate_half(x)·sin to x itself, without multiplying x by cos: that is not a rotation (the "
            "pair grows longer with the angle). Use x·cos + rotate_half(x)·sin.")
NOT_TURNED = N_("you multiplied x by sin without turning it: x·cos + x·sin scales each number instead of rotating "
                "the pair. Use rotate_half(x)·sin, where rotate_half(x) = cat(-x2, x1).")
ADDED_POSITIONS = N_("you added a position vector to x (x + cos + sin), as the 2017 sinusoids do: RoPE rotates the "
                     "pairs instead, x·cos + rotate_half(x)·sin, so that q·k depends only on the offset.")
MISSING_TWO = N_("your speeds are θ^(-i/Dh): the exponent needs the 2, θ^(-2i/Dh) for pair i = 0 .. Dh/2 - 1 "
                 "(1 / θ^(arange(0, Dh, 2) / Dh)): your slowest pair turns far too fast.")
IGNORED_POSITIONS = N_("you used the positions 0 .. T-1, not the positions you were given: after a KV cache the "
                       "chunk's tokens sit at past .. past + T - 1, so use the positions argument.")
THETA_IGNORED = N_("you used θ = 10,000 whatever theta was given: use the theta argument (Llama 3 uses 500,000, "
                   "and this check uses 100).")
BOTH_IGNORED = N_("you used the positions 0 .. T-1 and θ = 10,000, whatever you were given: use both arguments. "
                  "After a KV cache the chunk's tokens sit at past .. past + T - 1, and this check uses θ = 100.")
NOT_ROTATED = N_("you returned x unchanged: every pair must turn by position × θ^(-2i/Dh).")
BATCH_TIP = N_("Tip: x may have any number of leading dimensions (..., T, Dh); build cos and sin of shape (T, Dh) "
               "and let them broadcast.")  # only after a wrong shape or an error, never after wrong values

# --- 13.2 window_mask ------------------------------------------------------------------------------------------
WINDOW_TOO_WIDE = N_("off by one: each query sees W + 1 keys (t - W .. t). A window of W keys, the query's own "
                     "included, reaches back to t - W + 1: keep offset = t - s < W.")
WINDOW_TOO_NARROW = N_("off by one: each query sees only W - 1 keys. A window of W keys counts the query's own: "
                       "keep t - W + 1 .. t (offset t - s from 0 to W - 1).")
WINDOW_FUTURE = N_("your band reaches into the future: a sliding window is causal too. Keep the keys with "
                   "0 <= t - s < W, not |t - s| < W.")
WINDOW_NO_WINDOW = N_("this is the plain causal mask: the window is missing. Keep only keys with t - s < W as well.")
WINDOW_NO_DIAGONAL = N_("you blocked the diagonal: the window includes the query itself (keys t - W + 1 .. t, W of "
                        "them).")
WINDOW_INVERTED = N_("your mask is inverted: True must mean 'may attend' (a keep mask, as "
                     "F.scaled_dot_product_attention and mha_lib read it), and you marked the blocked keys.")
WINDOW_UPSIDE_DOWN = N_("your band is upside down: each query sees the next W - 1 keys instead of the previous ones. "
                        "Keep s <= t.")
WINDOW_NOT_BOOL = N_("return a torch.bool keep mask (True = may attend), got dtype {dtype}.")

# --- 13.3 reach ------------------------------------------------------------------------------------------------
REACH_TIMES_W = N_("you counted W new positions per layer: each layer reaches W - 1 positions further back (the "
                   "window holds the query itself too), so L layers read L·(W - 1) + 1 positions.")
REACH_NO_SELF = N_("you forgot the token itself: L layers reach L·(W - 1) positions back, and the token's own "
                   "position makes L·(W - 1) + 1.")
REACH_POWER = N_("windows do not multiply: a token reads W - 1 earlier positions per layer, and those positions' "
                 "windows overlap its own, so the reach grows by W - 1 per layer, not by a factor W.")
REACH_PAPER_WINDOW = N_("you counted the window as the Mistral 7B paper does, i - W .. i (W + 1 keys, L·W positions "
                        "back): here, as in exercise 13.2, transformers and mha_lib, the window holds W keys with the "
                        "query's own, so each layer reaches W - 1 further back: L·(W - 1) + 1.")
REACH_ONE_LAYER = N_("you answered for one layer (W positions): every layer adds W - 1 positions further back, "
                     "L·(W - 1) + 1 in all.")
REACH_NOT_WHOLE = N_("your function returned {value}: a number of positions is a finite whole number.")

ROPE_CASES = (  # (leading shape, T, Dh, first position, theta)
    ((), 6, 8, 0, 10000.0),
    ((2, 3), 5, 12, 7, 100.0),
)
WINDOW_CASES = ((6, 3), (7, 1), (5, 5), (8, 4), (4, 6))
REACH_CASES = ((1, 4), (3, 4), (2, 7), (32, 4096), (5, 1))


def _rope_mistakes(x: Tensor, positions: Tensor, theta: float) -> dict[str, Tensor]:
    Dh = x.shape[-1]
    angles = positions.double()[:, None] * rope_frequencies(Dh, theta).double()  # (T, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, Dh)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    slow = theta ** (-torch.arange(Dh // 2, dtype=torch.float64) / Dh)  # θ^(-i/Dh): the 2 forgotten
    wrong_angles = positions.double()[:, None] * slow  # (T, Dh/2)
    wrong_angles = torch.cat([wrong_angles, wrong_angles], dim=-1)
    return {
        GPT_J_LAYOUT: apply_rope_interleaved(x, positions, theta),
        WRONG_DIRECTION: x * cos - rotate_half(x) * sin,
        NO_COS: x + rotate_half(x) * sin,
        NOT_TURNED: x * cos + x * sin,
        ADDED_POSITIONS: x + cos + sin,
        MISSING_TWO: x * wrong_angles.cos().to(x.dtype) + rotate_half(x) * wrong_angles.sin().to(x.dtype),
        IGNORED_POSITIONS: apply_rope(x, torch.arange(positions.shape[0]), theta),
        THETA_IGNORED: apply_rope(x, positions, 10000.0),
        BOTH_IGNORED: apply_rope(x, torch.arange(positions.shape[0]), 10000.0),
        NOT_ROTATED: x.clone(),
    }


def check_apply_rope(student_fn: Callable[[Tensor, Tensor, float], Tensor]) -> Feedback:
    """``student_fn(x, positions, theta)`` must rotate each pair ``(x[i], x[i + Dh/2])`` of token t by
    ``positions[t] · θ^(-2i/Dh)``: ``x·cos + rotate_half(x)·sin``, the layout of transformers' Llama code.

    Two runs: one sequence ``(6, 8)`` at positions 0..5, then ``(2, 3, 5, 12)`` at positions 7..11 with θ = 100
    (a chunk after a cache, and leading dimensions).
    """
    name = "apply_rope"
    generator = torch.Generator().manual_seed(13)  # a CPU generator: the same numbers on every machine
    for lead, T, Dh, first, theta in ROPE_CASES:
        x = torch.randn(*lead, T, Dh, generator=generator)
        positions = torch.arange(first, first + T)
        expected = apply_rope(x, positions, theta)  # before the call
        mistakes = _rope_mistakes(x, positions, theta)
        answer = attempt(name, student_fn, x, positions, theta)
        if isinstance(answer, Feedback):
            if lead and answer.attempted:  # it ran on one sequence and raised on leading dimensions
                return failed(name, _("right for one (6, 8) sequence at positions 0..5, but for x of shape "
                                      "{shape}: {message} {tip}").format(shape=tuple(x.shape), message=answer.message,
                                                                         tip=_(BATCH_TIP)))
            return answer
        verdict = compare(name, answer, expected, mistakes=mistakes)
        if not verdict:
            if lead:
                wrong_shape = isinstance(answer, Tensor) and tuple(answer.shape) != tuple(expected.shape)
                # the broadcasting tip after a wrong shape only, never after wrong values (named or not)
                text = (_("right for one (6, 8) sequence at positions 0..5, but not for x of shape {shape} at "
                          "positions {first}..{last} with theta = {theta:g}: {message} {tip}") if wrong_shape else
                        _("right for one (6, 8) sequence at positions 0..5, but not for x of shape {shape} at "
                          "positions {first}..{last} with theta = {theta:g}: {message}"))
                return failed(name, text.format(shape=tuple(x.shape), first=first, last=first + T - 1, theta=theta,
                                                message=verdict.message, tip=_(BATCH_TIP)))
            return verdict
    return passed(name, N_("correct: each pair (x[i], x[i + Dh/2]) turned by position × θ^(-2i/Dh), as "
                           "apply_rotary_pos_emb in transformers' Llama code does."))


def _window_mistakes(T: int, W: int) -> dict[str, Tensor]:
    t = torch.arange(T)
    offset = t[:, None] - t[None, :]  # (T, T): how far back key s is from query t
    keep = sliding_window_mask(T, W)
    return {
        WINDOW_TOO_WIDE: (offset >= 0) & (offset <= W),
        WINDOW_TOO_NARROW: (offset >= 0) & (offset < W - 1),
        WINDOW_FUTURE: offset.abs() < W,
        WINDOW_NO_WINDOW: causal_mask(T),
        WINDOW_NO_DIAGONAL: (offset > 0) & (offset < W),
        WINDOW_INVERTED: ~keep,
        WINDOW_UPSIDE_DOWN: keep.T.clone(),
    }


def check_window_mask(student_fn: Callable[[int, int], Tensor]) -> Feedback:
    """``student_fn(T, W)`` must return the ``(T, T)`` bool keep mask of sliding-window causal attention:
    query t may see key s when ``t - W + 1 <= s <= t`` (W keys, itself included; fewer at the start)."""
    name = "window_mask"
    for T, W in WINDOW_CASES:
        expected = sliding_window_mask(T, W)  # before the call
        mistakes = {message: wrong.float() for message, wrong in _window_mistakes(T, W).items()}
        answer = attempt(name, student_fn, T, W)
        if isinstance(answer, Feedback):
            return answer
        refused = refuse(name, answer, expected)
        if refused is not None:  # a Feedback is falsy when failed: test for None
            return refused
        if answer.dtype != torch.bool:
            return failed(name, _(WINDOW_NOT_BOOL).format(dtype=answer.dtype))
        verdict = compare(name, answer.float(), expected.float(), mistakes=mistakes)
        if not verdict:
            return failed(name, _("(T = {T}, W = {W}) {message}").format(T=T, W=W, message=verdict.message))
    return passed(name, N_("correct: query t sees keys t - W + 1 .. t, W keys at most, itself included."))


def _reach_mistakes(layers: int, window: int) -> dict[str, int]:
    return {
        REACH_TIMES_W: layers * window,
        REACH_NO_SELF: layers * (window - 1),
        REACH_PAPER_WINDOW: layers * window + 1,
        REACH_POWER: window ** min(layers, 64),
        REACH_ONE_LAYER: window,
    }


def check_reach(student_fn: Callable[[int, int], int]) -> Feedback:
    """``student_fn(layers, window)`` must return how many input positions the last token's vector can depend on
    after ``layers`` layers of sliding-window attention of width ``window`` on a long sequence:
    ``L·(W - 1) + 1`` (its own position included)."""
    name = "reach"
    expected = [L * (W - 1) + 1 for L, W in REACH_CASES]  # before any call (the tests check it against the masks)
    answers = count_answers(name, student_fn, REACH_CASES, not_whole=REACH_NOT_WHOLE, where=lambda message, L, W:
                            _("for layers = {layers}, window = {window}: {message}").format(
                                layers=L, window=W, message=message))
    if isinstance(answers, Feedback):
        return answers
    if answers == expected:
        return passed(name, _("correct: L·(W - 1) + 1 positions; with a window of W keys (the query's own included), "
                              "Mistral 7B's 32 layers and W = 4,096 let a token read {count} positions.").format(
            count=f"{32 * 4095 + 1:,}"))
    mistake = named_mistake(answers, expected, [_reach_mistakes(L, W) for L, W in REACH_CASES])
    if mistake:
        return failed(name, mistake)
    i = next(i for i, (value, right) in enumerate(zip(answers, expected)) if value != right)
    (L, W) = REACH_CASES[i]
    return failed(name, _("for layers = {layers}, window = {window} you returned {shown}, expected {expected}.").format(
        layers=L, window=W, shown=shown_count(answers[i]), expected=f"{expected[i]:,}"))


__all__ = ["check_apply_rope", "check_reach", "check_window_mask"]
