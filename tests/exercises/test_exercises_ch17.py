"""Chapter 17's checkers: they pass the right answers written several ways, name each mistake they claim to know,
wait for the stub, and never say "correct" to a wrong answer.

Every wrong answer below is written the way a student would write it (not built from the checker's own reference
tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch17_reading_only_what_matters as ch17


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_select_keys ----------------------------------------------------------------------------------------

def _future(T, S):
    return torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)  # key j after query i's position S - T + i


def select_solution(scores, k):
    T, S = scores.shape
    masked = scores.masked_fill(_future(T, S), float("-inf"))
    top = masked.topk(min(k, S), dim=-1).indices
    keep = torch.zeros(T, S, dtype=torch.bool).scatter_(-1, top, True)
    return keep & ~_future(T, S)


def select_by_loop(scores, k):  # one query at a time, sorting by hand
    T, S = scores.shape
    keep = torch.zeros(T, S, dtype=torch.bool)
    for i in range(T):
        visible = S - T + i + 1
        order = sorted(range(visible), key=lambda j: -float(scores[i, j]))
        keep[i, order[:k]] = True
    return keep


def wrong_axis(scores, k):
    T, S = scores.shape
    masked = scores.masked_fill(_future(T, S), float("-inf"))
    top = masked.topk(min(k, T), dim=0).indices
    return torch.zeros(T, S, dtype=torch.bool).scatter_(0, top, True) & ~_future(T, S)


def no_causal_mask(scores, k):
    top = scores.topk(min(k, scores.shape[1]), dim=-1).indices
    return torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, top, True)


def topk_then_drop_future(scores, k):  # cell 14's first slip: the top k of the raw scores, the future dropped after
    T, S = scores.shape
    top = scores.topk(min(k, S), dim=-1).indices
    return torch.zeros(T, S, dtype=torch.bool).scatter_(-1, top, True) & ~_future(T, S)


def top_left(scores, k):
    T, S = scores.shape
    future = torch.ones(T, S, dtype=torch.bool).triu(1)
    masked = scores.masked_fill(future, float("-inf"))
    top = masked.topk(min(k, S), dim=-1).indices
    return torch.zeros(T, S, dtype=torch.bool).scatter_(-1, top, True) & ~future


def smallest(scores, k):
    T, S = scores.shape
    masked = scores.masked_fill(_future(T, S), float("inf"))
    top = masked.topk(min(k, S), dim=-1, largest=False).indices
    return torch.zeros(T, S, dtype=torch.bool).scatter_(-1, top, True) & ~_future(T, S)


def one_too_few(scores, k):
    return select_solution(scores, k - 1) if k > 1 else select_solution(scores, k)


WRONG_SELECT = {
    "top k over the wrong axis": wrong_axis,
    "selected keys from its future": no_causal_mask,
    "top k before masking the future": topk_then_drop_future,
    "aligned top-left": top_left,
    "the k lowest scores": smallest,
}


def test_select_keys_accepts_the_solution_written_two_ways():
    for solution in (select_solution, select_by_loop):
        feedback = ch17.check_select_keys(solution)
        assert feedback.passed, str(feedback)
    assert str(ch17.check_select_keys(select_solution)).startswith(f"{PASS_MARK} select_keys: correct")


def test_select_keys_agrees_with_the_layers_selection():
    from mha_lib.llm import sparse_figures as sf

    layer, x = sf.demo_layer(4), sf.demo_input(12)
    scores = layer.index_scores(x)[0]  # -inf on the future
    grid = sf.selection_grid(layer.select(x)[0], 12)
    assert torch.equal(select_solution(scores.nan_to_num(neginf=-1e30), 4), grid)


@pytest.mark.parametrize("phrase", list(WRONG_SELECT))
def test_select_keys_names_the_mistake(phrase):
    feedback = ch17.check_select_keys(WRONG_SELECT[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert str(feedback).startswith(FAIL_MARK)


def test_select_keys_says_a_query_with_few_keys_reads_them_all():
    feedback = ch17.check_select_keys(one_too_few)
    assert not feedback.passed and "k keys or fewer must read all of them" in feedback.message, feedback.message


def test_select_keys_says_which_query_reads_too_many():
    feedback = ch17.check_select_keys(lambda scores, k: select_solution(scores, k + 1))
    assert not feedback.passed and "reads 4 keys; with k = 3" in feedback.message, feedback.message


def test_select_keys_refuses_indices_instead_of_a_grid():
    feedback = ch17.check_select_keys(lambda scores, k: scores.topk(min(k, scores.shape[1]), dim=-1).indices)
    assert not feedback.passed and "expected a bool tensor of shape" in feedback.message


def test_select_keys_waits_for_the_stub():
    feedback = ch17.check_select_keys(_stub)
    assert not feedback.passed and not feedback.attempted and str(feedback).startswith(TODO_MARK)


# --- check_sparse_cache_bytes ---------------------------------------------------------------------------------

def cache_solution(config, tokens, bytes_per_element):
    per_token = config.kv_lora_rank + config.qk_rope_head_dim + config.index_head_dim
    return config.num_hidden_layers * per_token * tokens * bytes_per_element


def cache_with_library(config, tokens, bytes_per_element):
    return mha_lib.kv_cache_bytes(config.num_hidden_layers, tokens=tokens, kv_lora_rank=config.kv_lora_rank,
                                  qk_rope_head_dim=config.qk_rope_head_dim, index_head_dim=config.index_head_dim,
                                  bytes_per_element=bytes_per_element)


WRONG_CACHE = {
    "you left out the lightning indexer's key":
        lambda c, t, b: c.num_hidden_layers * (c.kv_lora_rank + c.qk_rope_head_dim) * t * b,
    "one indexer key per indexer head":
        lambda c, t, b: c.num_hidden_layers * (c.kv_lora_rank + c.qk_rope_head_dim + c.index_n_heads * c.index_head_dim)
        * t * b,
    "you counted only index_topk tokens": lambda c, t, b: cache_solution(c, min(t, c.index_topk), b),
    "you left out the rotary key": lambda c, t, b: c.num_hidden_layers * (c.kv_lora_rank + c.index_head_dim) * t * b,
    "you multiplied by the attention heads": lambda c, t, b: c.num_attention_heads * cache_solution(c, t, b),
    "you counted bits": lambda c, t, b: 8 * cache_solution(c, t, b),
}


def test_sparse_cache_bytes_accepts_the_solution_written_two_ways():
    for solution in (cache_solution, cache_with_library):
        feedback = ch17.check_sparse_cache_bytes(solution)
        assert feedback.passed, str(feedback)


def test_the_first_case_is_deepseek_v32_as_the_library_has_it():
    config = ch17.v32_config(*ch17.CACHE_CASES[0][0])
    published = mha_lib.SPARSE_CONFIGS["deepseek-v3.2"]
    assert cache_solution(config, 131072, 2) == published.kv_cache_bytes(131072)


@pytest.mark.parametrize("phrase", list(WRONG_CACHE))
def test_sparse_cache_bytes_names_the_mistake(phrase):
    feedback = ch17.check_sparse_cache_bytes(WRONG_CACHE[phrase])
    assert not feedback.passed and phrase in feedback.message, feedback.message


def test_sparse_cache_bytes_gives_the_numbers_for_an_unknown_mistake():
    feedback = ch17.check_sparse_cache_bytes(lambda c, t, b: cache_solution(c, t, b) + 1)
    assert not feedback.passed and "you returned" in feedback.message and "expected" in feedback.message


def test_sparse_cache_bytes_refuses_floats_and_waits_for_the_stub():
    assert "finite whole number" in ch17.check_sparse_cache_bytes(lambda c, t, b: 1.5).message
    feedback = ch17.check_sparse_cache_bytes(_stub)
    assert not feedback.passed and not feedback.attempted and str(feedback).startswith(TODO_MARK)
