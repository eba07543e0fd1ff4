"""Checkers for chapter 15, where the attention goes.

    check_sink_softmax(fn)    fn(scores, sinks)               -> the real keys' weights with one sink per head  (H, T, S)
    check_gated_output(fn)    fn(heads, x, W_gate)            -> heads · sigmoid(x W_gateᵀ)                    (B, T, H·Dh)
    check_keys_read(fn)       fn(layer_types, window, tokens) -> tokens each layer reads at step `tokens`        (L,)

Each checker draws its own inputs, runs the student's function through ``attempt`` (private copies, every failure
turned into feedback), compares it with the exact answer (``mha_lib.functional.softmax_with_sinks``, the gate of
``MultiHeadAttention(gate="elementwise")``, ``min(tokens, window)`` per sliding layer) and names the mistake it
reproduces; a mistake that another one, or the right answer, imitates on the inputs is never named.
"""

from __future__ import annotations

import torch

from .. import functional
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed

Tensor = torch.Tensor

# --- 15.1 sink_softmax -------------------------------------------------------------------------------------------
SINK_KEPT = N_("you returned the sink's column too: your weights have S + 1 = {wide} columns per row. The sink has "
               "no value, so drop its column after the softmax ([..., :-1]): the real keys' weights sum to less "
               "than 1.")
NO_SINK = N_("your weights are the plain softmax: the sink never entered the denominator (or you renormalised the "
             "rows after dropping its column). Add the head's sink as one more column before the softmax, and do "
             "not rescale the rows afterwards.")
SINK_NOT_EXP = N_("you added the sink logit itself to the denominator: it is a logit like the scores, so it enters "
                  "as exp(sink), as one more column of the softmax.")
SINK_OVERFLOW = N_("your weights hold NaN or inf for scores near 100 (they were right for small scores): exp(100) "
                   "overflows float32. Subtract each row's max (over the scores and the sink) before the "
                   "exponential, or let torch.softmax do it on the combined row.")
CALLED_LIBRARY = N_("your function called mha_lib's softmax_with_sinks, which is this exercise's answer: build the "
                    "extra column and the softmax yourself.")

# --- 15.2 gated_output -------------------------------------------------------------------------------------------
NO_SIGMOID = N_("you multiplied by x W_gateᵀ itself: the gate is sigmoid(x W_gateᵀ), a number between 0 and 1 for "
                "each output number.")
GATE_ADDED = N_("you added the gate to the heads' output: the gate multiplies it, element by element "
                "(heads * sigmoid(...)).")
GATE_FROM_OUTPUT = N_("your gate reads the heads' output (sigmoid(heads) * heads): Qwen3-Next's gate is computed "
                      "from the layer's input x, the query token's own input: sigmoid(x @ W_gate.T).")
GATE_ONLY = N_("you returned the gate alone: multiply the heads' output by it.")
ONE_MINUS = N_("you used 1 - sigmoid(x W_gateᵀ): the gate is sigmoid(x W_gateᵀ) itself.")

# --- 15.3 keys_read ----------------------------------------------------------------------------------------------
ALL_FULL = N_("every layer of yours reads all the tokens: a sliding layer reads only the last window of them, "
              "min(tokens, window).")
ALL_WINDOW = N_("your sliding layers read window tokens even when fewer have been seen: a layer cannot read more "
                "tokens than there are; use min(tokens, window).")
SWAPPED = N_("you swapped the kinds: a full layer reads every token, a sliding layer the last window.")
FULL_CAPPED = N_("your full layers stop at the window too: only the sliding layers have one; a full layer reads "
                 "every token, and its cache grows with each of them.")
OFF_BY_ONE = N_("your sliding layers read window - 1 tokens: that is what their cache keeps between steps; during a "
                "step the current token joins them, so a sliding layer reads min(tokens, window), as mha_lib's "
                "window= and kv_cache_bytes count.")


def _unambiguous(mistakes: dict, expected: Tensor | None = None) -> dict:
    """The mistakes that no other one (nor the right answer) imitates on these inputs."""
    def same(a: Tensor, b: Tensor) -> bool:
        return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), atol=1e-6, rtol=1e-5,
                                                          equal_nan=True))
    return {message: wrong for message, wrong in mistakes.items()
            if not any(same(wrong, other) for key, other in mistakes.items() if key != message)
            and not (expected is not None and same(wrong, expected))}


def _sink_cases():
    g = torch.Generator().manual_seed(15)
    yield torch.randn(3, 5, 7, generator=g), torch.tensor([-1.0, 0.5, 2.0])  # H=3, T=5: no row/head confusion
    scores = 100 + torch.randn(2, 4, 6, generator=g)
    yield scores, torch.tensor([100.5, 99.0])  # scores and sinks near 100: exp overflows float32


def _sink_mistakes(scores: Tensor, sinks: Tensor) -> dict:
    H, T, S = scores.shape
    plain = torch.softmax(scores, dim=-1)
    column = sinks[:, None, None].expand(H, T, 1)
    kept = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)  # (H, T, S + 1)
    e = torch.exp(scores.double() - scores.double().amax(-1, keepdim=True))
    raw = (e / (e.sum(-1, keepdim=True) + torch.exp(-scores.double().amax(-1, keepdim=True)) * sinks.double()[:, None, None]))
    shifted = e / (e.sum(-1, keepdim=True) + sinks.double()[:, None, None])  # the same slip after subtracting the max
    mistakes = {_(NO_SINK): plain, _(SINK_NOT_EXP): raw.float()}
    return mistakes, kept, {_(SINK_NOT_EXP): shifted.float()}


def check_sink_softmax(student_fn) -> Feedback:
    """15.1: ``student_fn(scores, sinks)`` must return ``softmax_with_sinks(scores, sinks)``."""
    name = "sink_softmax"
    for scores, sinks in _sink_cases():
        expected = functional.softmax_with_sinks(scores, sinks)
        mistakes, kept, also = _sink_mistakes(scores, sinks)
        answer = _watched(name, student_fn, scores, sinks)
        if isinstance(answer, Feedback):
            return answer
        plain = isinstance(answer, Tensor) and answer.layout == torch.strided and answer.is_floating_point()
        if plain and answer.shape == kept.shape and torch.allclose(answer.detach().float(), kept, atol=1e-5):
            return failed(name, _(SINK_KEPT).format(wide=kept.shape[-1]))
        if plain and answer.shape == expected.shape and not torch.isfinite(answer).all() and scores.max() > 50:
            return failed(name, _(SINK_OVERFLOW))
        verdict = compare(name, answer, expected, mistakes=_unambiguous(mistakes, expected))
        if not verdict:
            if plain and answer.shape == expected.shape:
                for message, wrong in _unambiguous({**also, "": expected}).items():  # a second way to write a slip
                    if message and torch.allclose(answer.detach().double(), wrong.double(), atol=1e-5, rtol=1e-4):
                        return failed(name, message)
            return verdict
    return verdict


def _watched(name: str, student_fn, *args):
    """``attempt`` with ``softmax_with_sinks`` replaced for the call, so that calling it is named."""
    original = functional.softmax_with_sinks
    called = []

    def spy(*a, **k):
        called.append(True)
        return original(*a, **k)

    import mha_lib

    functional.softmax_with_sinks = spy
    top = getattr(mha_lib, "softmax_with_sinks", None)
    if top is original:
        mha_lib.softmax_with_sinks = spy
    try:
        answer = attempt(name, student_fn, *args)
    finally:
        functional.softmax_with_sinks = original
        if top is original:
            mha_lib.softmax_with_sinks = original
    if called:
        return failed(name, _(CALLED_LIBRARY))
    return answer


# --- 15.2 --------------------------------------------------------------------------------------------------------

def check_gated_output(student_fn) -> Feedback:
    """15.2: ``student_fn(heads, x, W_gate)`` must return ``heads * sigmoid(x @ W_gate.T)``."""
    name = "gated_output"
    g = torch.Generator().manual_seed(152)
    heads = torch.randn(2, 5, 12, generator=g)  # B = 2, T = 5, H·Dh = 12 (3 heads of 4)
    x = torch.randn(2, 5, 8, generator=g)  # D = 8: W_gate (12, 8) is not square, so a missing .T fails on shape
    W_gate = torch.randn(12, 8, generator=g) / 2
    logits = x @ W_gate.T
    expected = heads * torch.sigmoid(logits)
    mistakes = {_(NO_SIGMOID): heads * logits, _(GATE_ADDED): heads + torch.sigmoid(logits),
                _(GATE_FROM_OUTPUT): heads * torch.sigmoid(heads), _(GATE_ONLY): torch.sigmoid(logits),
                _(ONE_MINUS): heads * (1 - torch.sigmoid(logits))}
    answer = attempt(name, student_fn, heads, x, W_gate)
    if isinstance(answer, Feedback):
        return answer
    return compare(name, answer, expected, mistakes=_unambiguous(mistakes, expected))


# --- 15.3 --------------------------------------------------------------------------------------------------------

CACHE_CASES = (  # (layer_types, window, tokens)
    (["sliding", "full", "sliding", "full"], 128, 1000),  # gpt-oss's 1 : 1, a context past the window
    (["sliding"] * 5 + ["full"], 1024, 300),  # Gemma 3's 5 : 1, a context shorter than the window
    (["full", "sliding", "sliding"], 4, 9),
)


def check_keys_read(student_fn) -> Feedback:
    """15.3: ``student_fn(layer_types, window, tokens)`` must return how many tokens each layer reads at the step of
    token number ``tokens`` (its cache and the token itself), ``(L,)`` long."""
    name = "keys_read"
    verdict = None
    for layer_types, window, tokens in CACHE_CASES:
        expected = torch.tensor([min(tokens, window) if k == "sliding" else tokens for k in layer_types])
        mistakes = {
            _(ALL_FULL): torch.full((len(layer_types),), tokens),
            _(ALL_WINDOW): torch.tensor([window if k == "sliding" else tokens for k in layer_types]),
            _(SWAPPED): torch.tensor([tokens if k == "sliding" else min(tokens, window) for k in layer_types]),
            _(FULL_CAPPED): torch.full((len(layer_types),), min(tokens, window)),
            _(OFF_BY_ONE): torch.tensor([min(tokens, window - 1) if k == "sliding" else tokens for k in layer_types]),
        }
        answer = attempt(name, student_fn, list(layer_types), window, tokens)
        if isinstance(answer, Feedback):
            return answer
        if isinstance(answer, (list, tuple)) and all(isinstance(v, int) for v in answer):
            answer = torch.tensor(answer)  # a list of ints is an answer too
        verdict = compare(name, answer, expected, mistakes=_unambiguous(mistakes, expected))
        if not verdict:
            return verdict
    return verdict


__all__ = ["check_gated_output", "check_keys_read", "check_sink_softmax"]
