"""Chapter 12's checkers: they pass the right answer, name each mistake they claim to know, wait for the stub, and
never call a wrong answer correct.

Every wrong answer below is written the way a student would write it (not built from the checker's own
reference tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK, Feedback
from mha_lib.exercises import ch12_sharing_keys_and_values as ch12


def _stub(*args):
    raise NotImplementedError  # your code here


def _assert_wrong(feedback: Feedback, *phrases: str) -> None:
    assert isinstance(feedback, Feedback)
    assert not feedback.passed and feedback.attempted, str(feedback)
    assert str(feedback).startswith(FAIL_MARK)
    for phrase in phrases:
        assert phrase in feedback.message, str(feedback)


# --- 12.1 expand_kv ---------------------------------------------------------------------------------------------


def expand_interleave(k, num_heads):
    return k.repeat_interleave(num_heads // k.shape[1], dim=1)


def expand_by_index(k, num_heads):
    G = k.shape[1]
    index = torch.arange(num_heads) // (num_heads // G)  # (H,): the kv head of each query head
    return k[:, index]


def expand_by_view(k, num_heads):
    B, G, S, Dh = k.shape
    return k[:, :, None].expand(B, G, num_heads // G, S, Dh).reshape(B, num_heads, S, Dh)


@pytest.mark.parametrize("solution", [expand_interleave, expand_by_index, expand_by_view, mha_lib.expand_kv_heads])
def test_expand_kv_right_answers_pass(solution):
    feedback = ch12.check_expand_kv(solution)
    assert feedback.passed and str(feedback).startswith(PASS_MARK), str(feedback)


WRONG_EXPAND = {
    "you tiled the heads (as k.repeat does): query head 1 got kv head 1 instead of kv head 0":
        lambda k, h: k.repeat(1, h // k.shape[1], 1, 1),
    "you repeated along the tokens (dim 2)": lambda k, h: k.repeat_interleave(h // k.shape[1], dim=2),
    "you returned the G kv heads as they are": lambda k, h: k.clone(),
    "you repeated each kv head 4 times: each must serve H // G = 2": lambda k, h: k.repeat_interleave(h, dim=1),
    "you repeated each kv head 3 times: each must serve H // G = 2":
        lambda k, h: k.repeat_interleave(h // k.shape[1] + 1, dim=1),
}


@pytest.mark.parametrize("phrase", list(WRONG_EXPAND))
def test_expand_kv_names_each_mistake(phrase):
    _assert_wrong(ch12.check_expand_kv(WRONG_EXPAND[phrase]), phrase)


def test_expand_kv_the_tiled_message_tells_the_pairing():
    feedback = ch12.check_expand_kv(WRONG_EXPAND[next(iter(WRONG_EXPAND))])
    assert "repeat_interleave(H // G, dim=1)" in feedback.message
    assert "G = 2, num_heads = 4" in feedback.message


def test_expand_kv_right_for_pairs_only_is_caught_on_larger_groups():
    def pairs_only(k, num_heads):
        return k.repeat_interleave(2, dim=1)  # hard-codes H / G = 2

    _assert_wrong(ch12.check_expand_kv(pairs_only), "G = 3, num_heads = 12")


def test_expand_kv_wrong_values_are_wrong_not_a_named_mistake():
    feedback = ch12.check_expand_kv(lambda k, h: expand_interleave(k, h) + 1)
    _assert_wrong(feedback, "wrong values")


def test_expand_kv_stub_is_not_attempted():
    feedback = ch12.check_expand_kv(_stub)
    assert not feedback.attempted and str(feedback).startswith(TODO_MARK)


def test_expand_kv_in_place_changes_of_k_change_nothing():
    def vandal(k, num_heads):
        answer = expand_interleave(k, num_heads).clone()
        k.fill_(7)
        return answer

    assert ch12.check_expand_kv(vandal)


@pytest.mark.parametrize("transform", [
    lambda t: (t, t), lambda t: t.numpy(), lambda t: t.to(torch.complex64), lambda t: t.to_sparse(),
    lambda t: torch.full_like(t, math.nan), lambda t: (t * 1e6).long(), lambda t: Feedback("expand_kv", True, "ok"),
], ids=["tuple", "numpy", "complex", "sparse", "nan", "int", "feedback"])
def test_expand_kv_hostile_answers_are_never_correct(transform):
    feedback = ch12.check_expand_kv(lambda k, h: transform(expand_interleave(k, h)))
    assert not feedback.passed, str(feedback)


# --- 12.2 cache_bytes -------------------------------------------------------------------------------------------


def cache_solution(config, tokens, bytes_per_element):
    held = tokens if config.window is None else min(tokens, config.window)
    return config.n_layers * 2 * config.num_kv_heads * config.head_dim * held * bytes_per_element


@pytest.mark.parametrize("kind", [int, float, np.int64, torch.tensor], ids=["int", "float", "numpy", "tensor"])
def test_cache_bytes_right_answer_passes_in_any_numeric_type(kind):
    feedback = ch12.check_cache_bytes(lambda c, t, b: kind(cache_solution(c, t, b)))
    assert feedback.passed and "Llama-3-8B" in feedback.message, str(feedback)


def _held(c, t):
    return t if c.window is None else min(t, c.window)


WRONG_CACHE = {
    "you counted the query heads (num_heads)":
        lambda c, t, b: c.n_layers * 2 * c.num_heads * c.head_dim * _held(c, t) * b,
    "you counted the keys only":
        lambda c, t, b: c.n_layers * c.num_kv_heads * c.head_dim * _held(c, t) * b,
    "you counted one layer": lambda c, t, b: 2 * c.num_kv_heads * c.head_dim * _held(c, t) * b,
    "you used 2 bytes per number": lambda c, t, b: c.n_layers * 2 * c.num_kv_heads * c.head_dim * _held(c, t) * 2,
    "you counted bits, not bytes": lambda c, t, b: c.n_layers * 2 * c.num_kv_heads * c.head_dim * _held(c, t) * b * 8,
    "you ignored the sliding window": lambda c, t, b: c.n_layers * 2 * c.num_kv_heads * c.head_dim * t * b,
    "you used the window even when fewer tokens":
        lambda c, t, b: c.n_layers * 2 * c.num_kv_heads * c.head_dim * (c.window or t) * b,
    "you used d_model where the kv width": lambda c, t, b: c.n_layers * 2 * c.d_model * _held(c, t) * b,
}


@pytest.mark.parametrize("phrase", list(WRONG_CACHE))
def test_cache_bytes_names_each_mistake(phrase):
    _assert_wrong(ch12.check_cache_bytes(WRONG_CACHE[phrase]), phrase)


def test_cache_bytes_two_mistakes_at_once_are_not_given_one_name():
    def both(c, t, b):  # query heads and no window
        return c.n_layers * 2 * c.num_heads * c.head_dim * t * b

    feedback = ch12.check_cache_bytes(both)
    _assert_wrong(feedback, "you returned", "expected")


def test_cache_bytes_an_unknown_wrong_number_gets_the_expected_one():
    _assert_wrong(ch12.check_cache_bytes(lambda c, t, b: 7), "you returned 7, expected 2,147,483,648")


@pytest.mark.parametrize(("answer", "phrase"), [
    (2.5, "a number of bytes is a finite whole number"),
    (math.nan, "a number of bytes is a finite whole number"),
    (math.inf, "a number of bytes is a finite whole number"),
    ("2147483648", "expected a number (an int), got str"),
    (True, "expected a number (an int), got bool"),
    (None, "expected a number (an int), got NoneType"),
    (torch.tensor([1, 2]), "expected a number (an int), got Tensor"),
    (10**400, "a number of 401 digits"),
], ids=["fraction", "nan", "inf", "str", "bool", "None", "vector", "huge"])
def test_cache_bytes_answers_that_are_not_counts(answer, phrase):
    _assert_wrong(ch12.check_cache_bytes(lambda c, t, b: answer), phrase)


def test_cache_bytes_gets_the_config_fields_not_a_bare_tuple():
    seen = []

    def spy(config, tokens, bytes_per_element):
        seen.append((config.n_layers, config.num_kv_heads, config.window))
        return cache_solution(config, tokens, bytes_per_element)

    assert ch12.check_cache_bytes(spy)
    assert (32, 8, 4096) in seen  # Mistral-7B, window included


def test_cache_bytes_gets_the_decoder_attention_itself_so_unpacking_it_works():
    # the exercise says config has the fields of DECODER_CONFIGS[...]: it is that NamedTuple, so a student who unpacks
    # it (or indexes it, or calls _replace) as one unpacks a DecoderAttention is right
    seen = []

    def unpacking(config, tokens, bytes_per_element):
        seen.append(type(config))
        n_layers, _num_heads, num_kv_heads, head_dim, _d_model, _context, window, *_latent = config
        held = tokens if window is None else min(tokens, window)
        return n_layers * 2 * num_kv_heads * head_dim * held * bytes_per_element

    feedback = ch12.check_cache_bytes(unpacking)
    assert feedback.passed, str(feedback)
    assert set(seen) == {mha_lib.DecoderAttention}


def test_cache_bytes_refuses_kv_cache_bytes_as_the_notebook_says():
    # the config's own method is one dot away: "Do not call kv_cache_bytes" (the exercise's text) is checked
    for shortcut, called in ((lambda c, t, b: c.kv_cache_bytes(t, bytes_per_element=b), "config.kv_cache_bytes"),
                             (lambda c, t, b: mha_lib.kv_cache_bytes(c.n_layers, c.num_kv_heads, c.head_dim, t,
                                                                     bytes_per_element=b, window=c.window),
                              "mha_lib.kv_cache_bytes")):
        feedback = ch12.check_cache_bytes(shortcut)
        assert feedback.message == (
            f"your function called {called}, which the exercise asks you not to do: multiply the config's sizes "
            f"yourself (layers × 2 × num_kv_heads × head_dim × tokens held × bytes_per_element).")
        assert not feedback.passed and feedback.attempted


def test_cache_bytes_stub_and_feedback():
    assert not ch12.check_cache_bytes(_stub).attempted
    assert not ch12.check_cache_bytes(lambda c, t, b: Feedback("cache_bytes", True, "ok")).passed


# --- 12.3 chunk_mask --------------------------------------------------------------------------------------------


def chunk_by_tril(past, n):
    return torch.ones(n, past + n, dtype=torch.bool).tril(diagonal=past)


def chunk_by_positions(past, n):
    return torch.arange(past, past + n)[:, None] >= torch.arange(past + n)[None, :]


@pytest.mark.parametrize("solution", [chunk_by_tril, chunk_by_positions,
                                      lambda p, n: mha_lib.causal_mask_at(torch.arange(p, p + n), torch.arange(p + n))])
def test_chunk_mask_right_answers_pass(solution):
    feedback = ch12.check_chunk_mask(solution)
    assert feedback.passed and str(feedback).startswith(PASS_MARK), str(feedback)


WRONG_CHUNK = {
    "your triangle starts at the top-left corner (what is_causal=True does)":
        lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(),
    "you blocked the cached keys": lambda p, n: chunk_by_tril(p, n) & (torch.arange(p + n) >= p),
    "you blocked nothing in the chunk": lambda p, n: torch.ones(n, p + n, dtype=torch.bool),
    "you blocked the diagonal": lambda p, n: torch.ones(n, p + n, dtype=torch.bool).tril(diagonal=p - 1),
    "your mask is transposed": lambda p, n: chunk_by_tril(p, n).T,
    "return a torch.bool keep mask": lambda p, n: chunk_by_tril(p, n).float(),
}


@pytest.mark.parametrize("phrase", list(WRONG_CHUNK))
def test_chunk_mask_names_each_mistake(phrase):
    _assert_wrong(ch12.check_chunk_mask(WRONG_CHUNK[phrase]), phrase)


def test_chunk_mask_one_step_off_is_named_as_one_step_off():
    def one_off(past, n):
        return torch.ones(n, past + n, dtype=torch.bool).tril(diagonal=past + 1)

    feedback = ch12.check_chunk_mask(one_off)
    assert not feedback.passed
    # on (past 3, n 2) one step off equals no mask at all: the narrower name must win, never "blocked nothing"
    assert "one step off" in feedback.message and "blocked nothing" not in feedback.message, str(feedback)


def test_chunk_mask_no_mask_is_still_named_as_no_mask():
    feedback = ch12.check_chunk_mask(lambda p, n: torch.ones(n, p + n, dtype=torch.bool))
    assert "blocked nothing" in feedback.message and "one step off" not in feedback.message, str(feedback)


def test_expand_kv_tiled_with_expand_and_reshape_is_told_it_tiled():
    def tiled_by_expand(k, num_heads):  # (B, G, S, Dh) -> (B, R, G, S, Dh) -> (B, H, S, Dh): 0 1 0 1 ...
        B, G, S, Dh = k.shape
        return k[:, None].expand(B, num_heads // G, G, S, Dh).reshape(B, num_heads, S, Dh)

    feedback = ch12.check_expand_kv(tiled_by_expand)
    assert "you tiled the heads (as k.repeat does)" in feedback.message, str(feedback)


def test_chunk_mask_right_for_the_prompt_only_is_caught_after_a_cache():
    _assert_wrong(ch12.check_chunk_mask(lambda p, n: torch.ones(n, n, dtype=torch.bool).tril()), "past = 3")


@pytest.mark.parametrize("answer", [
    lambda p, n: (chunk_by_tril(p, n),), lambda p, n: chunk_by_tril(p, n).numpy(),
    lambda p, n: chunk_by_tril(p, n).to_sparse(), lambda p, n: chunk_by_tril(p, n).to(torch.complex64),
    lambda p, n: Feedback("chunk_mask", True, "ok"), lambda p, n: None,
], ids=["tuple", "numpy", "sparse", "complex", "feedback", "None"])
def test_chunk_mask_hostile_answers_are_never_correct(answer):
    feedback = ch12.check_chunk_mask(answer)
    assert not feedback.passed and feedback.attempted, str(feedback)


def test_chunk_mask_stub_is_not_attempted():
    assert not ch12.check_chunk_mask(_stub).attempted
