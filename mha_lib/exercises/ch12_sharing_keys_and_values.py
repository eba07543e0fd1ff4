"""Checkers for chapter 12, shared key/value heads and the KV cache.

    check_expand_kv(fn)      fn(k, num_heads)                     -> (B, H, S, Dh): kv head g serves query heads
                                                                     g·H/G .. (g+1)·H/G - 1 (Llama's repeat_kv)
    check_cache_bytes(fn)    fn(config, tokens, bytes_per_element) -> int: the whole model's KV cache
    check_chunk_mask(fn)     fn(past, n)                          -> (n, past + n) bool keep mask of a chunk of n
                                                                     queries after a cache holding ``past`` tokens

Each checker draws its own inputs, runs the student's function through ``attempt`` (private copies, every failure
turned into feedback), compares with ``mha_lib``'s own ``expand_kv_heads``, ``kv_cache_bytes`` and
``causal_mask_at`` and, when the answer is wrong, names the mistake it reproduces ("you tiled the heads
(as k.repeat does): query head 1 got kv head 1 instead of kv head 0").
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

import torch

from ..functional import expand_kv_heads
from ..language import N_, gettext as _
from ..masks import causal_mask_at
from ..sizes import DECODER_CONFIGS, DecoderAttention, kv_cache_bytes
from . import NOT_A_NUMBER, NOT_WHOLE_BYTES, Feedback, as_count, attempt, compare, failed, named_mistake, passed, refuse


Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------- 12.1 expand_kv

TILED = N_("you tiled the heads (as k.repeat does): query head 1 got kv head {wrong} instead of kv head 0. Query heads "
           "0 .. H/G - 1 share kv head 0, so each kv head must be repeated in place: "
           "k.repeat_interleave(H // G, dim=1) (Llama's repeat_kv).")
TOKENS_REPEATED = N_("you repeated along the tokens (dim 2) instead of the heads (dim 1): the result has {S} keys per "
                     "head where there should be S. Repeat along dim=1.")
NOT_EXPANDED = N_("you returned the G kv heads as they are: the H query heads need one (possibly shared) kv head each. "
                  "Repeat each kv head H // G times along dim 1.")
WRONG_FACTOR = N_("you repeated each kv head {factor} times: each must serve H // G = {right} query heads "
                  "(H = num_heads, G = k.shape[1]).")


def _expand_cases() -> list[tuple[Tensor, int]]:
    generator = torch.Generator().manual_seed(12)  # a CPU generator: the same numbers on every machine
    return [
        (torch.randn(1, 2, 5, 4, generator=generator), 4),  # G = 2, H = 4: pairs
        (torch.randn(2, 3, 6, 2, generator=generator), 12),  # G = 3, H = 12: groups of four
        (torch.randn(2, 1, 4, 3, generator=generator), 6),  # G = 1: multi-query attention
        (torch.randn(1, 4, 3, 2, generator=generator), 4),  # G = H: nothing to share
    ]


def _expand_mistakes(k: Tensor, num_heads: int) -> dict[str, Tensor]:
    G = k.shape[1]
    factor = num_heads // G
    tiled = k.repeat(1, factor, 1, 1)
    wrong = 1 % G  # the kv head query head 1 gets when the heads are tiled (0, 1, .., G-1, 0, 1, ..)
    mistakes = {
        _(TILED).format(wrong=wrong): tiled,
        _(TOKENS_REPEATED).format(S=k.shape[2] * factor): k.repeat_interleave(factor, dim=2),
        NOT_EXPANDED: k,
    }
    for other in (num_heads, G, factor + 1):
        if other != factor:
            mistakes[_(WRONG_FACTOR).format(factor=other, right=factor)] = k.repeat_interleave(other, dim=1)
    return mistakes


def check_expand_kv(student_fn: Callable[[Tensor, int], Tensor]) -> Feedback:
    """``student_fn(k, num_heads)`` with ``k`` ``(B, G, S, Dh)`` must return ``(B, H, S, Dh)`` where query head h
    gets kv head ``h // (H / G)``, for G = 2, 3, 1 (MQA) and G = H."""
    name = "expand_kv"
    for k, num_heads in _expand_cases():
        expected = expand_kv_heads(k, num_heads)  # before the call
        mistakes = _expand_mistakes(k, num_heads)
        answer = attempt(name, student_fn, k, num_heads)  # a copy: changing k in place changes nothing here
        if isinstance(answer, Feedback):
            return answer
        verdict = compare(name, answer, expected, mistakes=mistakes, atol=0, rtol=0)
        if not verdict:
            G = k.shape[1]
            return failed(name, _("(k of shape {shape}: G = {G}, num_heads = {num_heads}) {message}").format(
                shape=tuple(k.shape), G=G, num_heads=num_heads, message=verdict.message))
    return passed(name, N_("correct: query heads 0 .. H/G - 1 read kv head 0, the next H/G read kv head 1, and so on, "
                           "as Llama's repeat_kv and mha_lib.expand_kv_heads do."))


# ------------------------------------------------------------------------------------------- 12.2 cache bytes

USED_QUERY_HEADS = N_("you counted the query heads (num_heads) instead of the key/value heads (num_kv_heads): the "
                      "cache stores keys and values, and GQA keeps only G of them per layer.")
FORGOT_TWO = N_("you counted the keys only (or the values only): the cache holds both, a factor of 2.")
FORGOT_LAYERS = N_("you counted one layer: every layer keeps its own cache, multiply by n_layers.")
FIXED_BYTES = N_("you used 2 bytes per number whatever bytes_per_element says: use the argument (2 for float16 / "
                 "bfloat16, 4 for float32).")
BITS = N_("you counted bits, not bytes: bytes_per_element is already in bytes, do not multiply by 8.")
IGNORED_WINDOW = N_("you ignored the sliding window: a model with config.window = W counts min(tokens, W) tokens per "
                    "layer (the W − 1 most recent cached ones plus the current one).")
WINDOW_ALWAYS = N_("you used the window even when fewer tokens than the window are held: count min(tokens, W) "
                   "tokens (the W − 1 most recent cached ones plus the current one).")
USED_D_MODEL = N_("you used d_model where the kv width G·Dh belongs (num_kv_heads × head_dim): with GQA the keys of "
                  "one token are G·Dh numbers, not D.")

CACHE_CASES = (  # (config name or config, tokens, bytes per element)
    ("llama-2-7b", 4096, 2),
    ("llama-3-8b", 1000, 2),
    ("llama-3-8b", 2048, 1),  # an 8-bit cache
    ("gpt2-small", 300, 4),
    ("mistral-7b", 10_000, 2),
    ("mistral-7b", 1000, 2),
    (DecoderAttention(n_layers=3, num_heads=6, num_kv_heads=2, head_dim=16, d_model=64, context_length=512), 7, 4),
)


def _cache_mistakes(c: DecoderAttention, tokens: int, b: int) -> dict[str, int]:
    held = tokens if c.window is None else min(tokens, c.window)
    L, G, Dh = c.n_layers, c.num_kv_heads, c.head_dim
    return {
        USED_QUERY_HEADS: L * 2 * c.num_heads * Dh * held * b,
        FORGOT_TWO: L * G * Dh * held * b,
        FORGOT_LAYERS: 2 * G * Dh * held * b,
        FIXED_BYTES: L * 2 * G * Dh * held * 2,
        BITS: L * 2 * G * Dh * held * b * 8,
        IGNORED_WINDOW: L * 2 * G * Dh * tokens * b,
        WINDOW_ALWAYS: L * 2 * G * Dh * (c.window or tokens) * b,
        USED_D_MODEL: L * 2 * c.d_model * held * b,
    }


def _config(case) -> DecoderAttention:
    return DECODER_CONFIGS[case] if isinstance(case, str) else case


CALLED_KV_CACHE_BYTES = N_("your function called {op}, which the exercise asks you not to do: multiply the "
                          "config's sizes yourself (layers × 2 × num_kv_heads × head_dim × tokens held × "
                          "bytes_per_element).")


def _watch_kv_cache_bytes(student_fn, called: list[str]):
    """``student_fn`` with a note in ``called`` of every call to ``kv_cache_bytes`` it makes, as the library's
    function or as the config's own method (the config is a real ``DecoderAttention``: it has one)."""
    if not callable(student_fn):
        return student_fn  # for attempt to refuse
    watched = {kv_cache_bytes.__code__: "mha_lib.kv_cache_bytes",
               DecoderAttention.kv_cache_bytes.__code__: "config.kv_cache_bytes"}

    def note(frame, event, arg):
        if event == "call" and frame.f_code in watched and not called:
            called.append(watched[frame.f_code])

    @functools.wraps(student_fn)
    def run(*args):
        previous = sys.getprofile()
        sys.setprofile(note)
        try:
            return student_fn(*args)
        finally:
            sys.setprofile(previous)

    return run




def check_cache_bytes(student_fn: Callable[[DecoderAttention, int, int], int]) -> Feedback:
    """``student_fn(config, tokens, bytes_per_element)`` must return the bytes of the whole model's KV cache:
    ``n_layers × 2 × num_kv_heads × head_dim × held × bytes_per_element`` with ``held = min(tokens, window)``."""
    name = "cache_bytes"
    cases = [(_config(c), t, b) for c, t, b in CACHE_CASES]
    expected = [kv_cache_bytes(c.n_layers, c.num_kv_heads, c.head_dim, t, bytes_per_element=b, window=c.window)
                for c, t, b in cases]  # before any call
    answers = []
    for (config, tokens, b) in cases:
        called: list[str] = []
        # the config itself, a DecoderAttention as in DECODER_CONFIGS: fields, unpacking, _replace all work
        answer = attempt(name, _watch_kv_cache_bytes(student_fn, called), config, tokens, b)
        if isinstance(answer, Feedback):
            return answer
        if called:
            return failed(name, _(CALLED_KV_CACHE_BYTES).format(op=called[0]))
        value = as_count(answer)
        if value is None:
            return failed(name, _(NOT_A_NUMBER).format(kind=type(answer).__name__))
        if isinstance(value, float):
            return failed(name, _("for {config}, tokens={tokens}: {message}").format(
                config=_describe(config), tokens=tokens, message=_(NOT_WHOLE_BYTES).format(value=answer)))
        answers.append(value)
    wrong = [i for i, (value, right) in enumerate(zip(answers, expected)) if value != right]
    if not wrong:
        return passed(name, N_("correct: Llama-2-7B holds 2 GiB for 4,096 tokens in float16; Llama-3-8B, with 8 kv "
                               "heads for 32 query heads, a quarter of that per token; Mistral-7B stops growing at its "
                               "4,096-token window."))
    tables = [_cache_mistakes(*case) for case in cases]
    mistake = named_mistake(answers, expected, tables)
    if mistake:
        return failed(name, mistake)
    i = wrong[0]
    config, tokens, b = cases[i]
    value = answers[i]
    if len(str(value)) > 30:
        return failed(name, _("for {config}, tokens={tokens}, bytes_per_element={b} you returned a number of {digits} "
                              "digits, expected {expected}.").format(config=_describe(config), tokens=tokens, b=b,
                                                                     digits=len(str(value)),
                                                                     expected=f"{expected[i]:,}"))
    return failed(name, _("for {config}, tokens={tokens}, bytes_per_element={b} you returned {shown}, expected "
                          "{expected}.").format(config=_describe(config), tokens=tokens, b=b, shown=f"{value:,}",
                                                expected=f"{expected[i]:,}"))


def _describe(config: DecoderAttention) -> str:
    found = next((k for k, v in DECODER_CONFIGS.items() if v == config), None)
    return found or _("a config with n_layers={n_layers}, num_heads={num_heads}, num_kv_heads={num_kv_heads}, "
                      "head_dim={head_dim}").format(n_layers=config.n_layers, num_heads=config.num_heads,
                                                    num_kv_heads=config.num_kv_heads, head_dim=config.head_dim)


# ------------------------------------------------------------------------------------------- 12.3 chunk mask

TOP_LEFT = N_("your triangle starts at the top-left corner (what is_causal=True does): the chunk's first query, at "
              "position past, sees only key 0 instead of keys 0 .. past. Align the triangle to the true positions: "
              "query i sits at position past + i and sees keys 0 .. past + i.")
CACHE_BLOCKED = N_("you blocked the cached keys: the chunk's queries see only the chunk. The cache is there to be "
                   "read: query past + i sees every key at position <= past + i, the cached ones included.")
NO_CAUSAL = N_("you blocked nothing in the chunk: query i must not see the chunk's later tokens "
               "(positions > past + i).")
DIAGONAL_BLOCKED = N_("you blocked the diagonal: every query must see its own key (position past + i).")
TRANSPOSED = N_("your mask is transposed: return (n, past + n), one row per query of the chunk, one column per key.")
OFF_BY_ONE = N_("your triangle is one step off: query i (at position past + i) must see keys up to and including "
                "past + i, no more.")
CHUNK_NOT_BOOL = N_("return a torch.bool keep mask (True = may attend), got dtype {dtype}.")

CHUNK_CASES = ((3, 3), (3, 2), (0, 4), (5, 3), (2, 1), (4, 4))  # (past, n): a prompt (past = 0) and one-token steps too


def _chunk_candidates(past: int, n: int) -> tuple[Tensor, dict[str, Tensor]]:
    q = torch.arange(past, past + n)  # the chunk's true positions
    k = torch.arange(past + n)  # the cache's keys, then the chunk's
    expected = causal_mask_at(q, k)  # (n, past + n)
    offset = q[:, None] - k[None, :]  # (n, S): how far back each key is
    chunk_only = (offset >= 0) & (k[None, :] >= past)
    # the order matters where two slips give the same mask: after past = 3 tokens a chunk of n = 2 shifted one step
    # too far IS the mask without causality (its last query sees every key). The narrower diagnosis comes first.
    mistakes = {
        OFF_BY_ONE: offset >= -1,
        TOP_LEFT: torch.ones(n, past + n, dtype=torch.bool).tril(),
        CACHE_BLOCKED: chunk_only,
        NO_CAUSAL: torch.ones(n, past + n, dtype=torch.bool),
        DIAGONAL_BLOCKED: offset > 0,
    }
    return expected, {message: wrong.float() for message, wrong in mistakes.items()}


def check_chunk_mask(student_fn: Callable[[int, int], Tensor]) -> Feedback:
    """``student_fn(past, n)`` must return the ``(n, past + n)`` keep mask of a chunk of ``n`` queries after a
    cache holding ``past`` tokens: query i (position ``past + i``) sees the keys at positions ``0 .. past + i``."""
    name = "chunk_mask"
    for past, n in CHUNK_CASES:
        expected, mistakes = _chunk_candidates(past, n)  # before the call
        answer = attempt(name, student_fn, past, n)
        if isinstance(answer, Feedback):
            return answer
        refused = refuse(name, answer, torch.ones(1, dtype=torch.bool))  # tuple, sparse, complex, not a tensor
        if refused is not None:  # a Feedback is falsy when failed: test for None
            return refused
        if answer.dtype != torch.bool:
            return failed(name, _(CHUNK_NOT_BOOL).format(dtype=answer.dtype))
        if answer.shape == (past + n, n) and past > 0:
            return failed(name, _("(past = {past}, n = {n}) {message} Got shape {shape}.").format(
                past=past, n=n, message=_(TRANSPOSED), shape=tuple(answer.shape)))
        verdict = compare(name, answer.float(), expected.float(), mistakes=mistakes, atol=0, rtol=0)
        if not verdict:
            return failed(name, _("(past = {past}, n = {n}) {message}").format(past=past, n=n,
                                                                               message=verdict.message))
    return passed(name, N_("correct: the chunk's query i, at position past + i, sees every cached key and the chunk's "
                           "keys up to itself (mha_lib.causal_mask_at(query_positions, key_positions))."))


__all__ = ["check_cache_bytes", "check_chunk_mask", "check_expand_kv"]
