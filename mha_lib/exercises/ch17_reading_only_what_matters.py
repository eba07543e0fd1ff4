"""Checkers for chapter 17, reading only what matters (DeepSeek's sparse attention).

    check_select_keys(fn)        fn(scores, k)                    -> (T, S) bool: the keys each query reads
    check_sparse_cache_bytes(fn) fn(config, tokens, bytes_per_el) -> bytes DeepSeek-V3.2's cache holds      int

Each checker draws its own inputs, runs the student's function through ``attempt`` (private copies, every failure
turned into feedback), compares it with the library's answer (the top k of each row among the keys a query may
see, bottom-right aligned as ``MultiHeadLatentAttention.select``; ``kv_cache_bytes(..., index_head_dim=)``) and
names the mistake it reproduces; a mistake that another one, or the right answer, imitates on the inputs is never
named.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ..language import N_, gettext as _
from ..sizes import kv_cache_bytes
from . import Feedback, attempt, count_answers, failed, named_mistake, passed, shown_count

Tensor = torch.Tensor

# --- 17.1 select_keys -------------------------------------------------------------------------------------------
WRONG_AXIS = N_("you took the top k over the wrong axis (dim=0, the queries): each query (row) picks its own k keys "
                "(columns), so the top k runs along the keys, dim=-1.")
FUTURE_KEYS = N_("a query selected keys from its future: mask the scores of the keys after the query's position "
                 "with -inf before the top k, and drop what a query that sees fewer than k keys picks among them.")
MASK_AFTER_TOPK = N_("you took the top k before masking the future: future keys used up some of the k slots, so a "
                     "query reads fewer of the keys it may see than it should. Mask the future with -inf first, then "
                     "take the top k.")
TOP_LEFT = N_("your causal mask is aligned top-left: with a cache the T queries are the LAST T positions of the S "
              "keys, so query i sits at position S - T + i and sees keys 0 .. S - T + i (bottom-right, chapters 12 "
              "and 14).")
SMALLEST = N_("you kept the k lowest scores: the indexer ranks, and a query reads the keys with the HIGHEST scores "
              "(topk's default, largest=True).")
NOT_ALL_FEW = N_("a query that sees k keys or fewer must read all of them: yours reads fewer.")
WRONG_SHAPE = N_("expected a bool tensor of shape {expected} (one row per query, one column per key), got {got}.")
WRONG_COUNT = N_("query {t} reads {got} keys; with k = {k} and {visible} keys visible it reads {expected}.")
WRONG_KEYS = N_("query {t} reads keys {got}; the {n} visible keys with the highest scores are {expected}.")


def _select_cases():
    g = torch.Generator().manual_seed(17)
    for T, S, k in ((6, 6, 3), (4, 9, 3), (5, 12, 4), (3, 3, 5)):
        yield torch.randn(T, S, generator=g), k  # random scores: no ties


def _visible(T: int, S: int) -> Tensor:
    """(T, S) bool: query i (at position S - T + i) may see key j."""
    return torch.arange(S)[None, :] <= (S - T + torch.arange(T))[:, None]


def _keep_from(scores: Tensor, k: int, visible: Tensor, *, largest: bool = True, dim: int = -1) -> Tensor:
    masked = scores.masked_fill(~visible, float("-inf") if largest else float("inf"))
    top = masked.topk(min(k, scores.shape[dim]), dim=dim, largest=largest).indices
    keep = torch.zeros_like(scores, dtype=torch.bool).scatter_(dim, top, True)
    return keep


def _select_expected(scores: Tensor, k: int) -> Tensor:
    visible = _visible(*scores.shape)
    return _keep_from(scores, k, visible) & visible


def _select_mistakes(scores: Tensor, k: int) -> dict:
    T, S = scores.shape
    visible = _visible(T, S)
    top_left = torch.ones(T, S, dtype=torch.bool).tril()
    return {
        WRONG_AXIS: _keep_from(scores, k, visible, dim=0) & visible,
        FUTURE_KEYS: _keep_from(scores, k, torch.ones(T, S, dtype=torch.bool)),
        MASK_AFTER_TOPK: _keep_from(scores, k, torch.ones(T, S, dtype=torch.bool)) & visible,
        TOP_LEFT: _keep_from(scores, k, top_left) & top_left,
        SMALLEST: _keep_from(scores, k, visible, largest=False) & visible,
    }


def _as_keep(answer, shape) -> Tensor | str:
    if not isinstance(answer, torch.Tensor):
        return _(WRONG_SHAPE).format(expected=tuple(shape), got=type(answer).__name__)
    if tuple(answer.shape) != tuple(shape):
        return _(WRONG_SHAPE).format(expected=tuple(shape), got=str(tuple(answer.shape)))
    if answer.dtype != torch.bool:
        if answer.is_floating_point() or not bool(((answer == 0) | (answer == 1)).all()):
            return _(WRONG_SHAPE).format(expected=tuple(shape), got=str(answer.dtype))
        answer = answer.bool()
    return answer.detach().cpu()


def check_select_keys(student_fn) -> Feedback:
    """17.1: ``student_fn(scores, k)``, ``scores`` ``(T, S)`` the indexer's scores of T queries that are the last T of
    S positions (a cache holds the first S - T), must return the ``(T, S)`` bool grid of the keys each query reads:
    its k highest-scoring keys among those it may see (all of them when it sees k or fewer)."""
    name = "select_keys"
    for scores, k in _select_cases():
        expected = _select_expected(scores, k)
        answer = attempt(name, student_fn, scores, k)
        if isinstance(answer, Feedback):
            return answer
        keep = _as_keep(answer, scores.shape)
        if isinstance(keep, str):
            return failed(name, keep)
        if torch.equal(keep, expected):
            continue
        for message, wrong in _select_mistakes(scores, k).items():
            if torch.equal(keep, wrong) and not torch.equal(wrong, expected):
                return failed(name, _(message))
        visible = _visible(*scores.shape)
        if bool((keep & ~visible).any()):
            return failed(name, _(FUTURE_KEYS))
        for t in range(scores.shape[0]):
            if not torch.equal(keep[t], expected[t]):
                seen = int(visible[t].sum())
                if seen <= k and int(keep[t].sum()) < seen:
                    return failed(name, _(NOT_ALL_FEW))
                if int(keep[t].sum()) != int(expected[t].sum()):
                    return failed(name, _(WRONG_COUNT).format(t=t, got=int(keep[t].sum()), k=k, visible=seen,
                                                             expected=int(expected[t].sum())))
                return failed(name, _(WRONG_KEYS).format(t=t, got=keep[t].nonzero().flatten().tolist(),
                                                         n=int(expected[t].sum()),
                                                         expected=expected[t].nonzero().flatten().tolist()))
    return passed(name, N_("correct: each query reads its k best keys among those it may see, aligned bottom-right "
                           "after a cache."))


# --- 17.2 sparse_cache_bytes ------------------------------------------------------------------------------------
NO_INDEXER = N_("you left out the lightning indexer's key: DeepSeek-V3.2 caches it beside the latent, index_head_dim "
                "numbers per token and layer (576 + 128 for the published model).")
INDEXER_PER_HEAD = N_("you cached one indexer key per indexer head: the indexer's heads share ONE key per token "
                      "(index_head_dim numbers); only its queries have index_n_heads heads.")
ONLY_TOPK = N_("you counted only index_topk tokens: the selection changes with every query, so every token's latent "
               "and indexer key stay in the cache; sparse attention reads fewer, it does not store fewer.")
NO_ROPE = N_("you left out the rotary key: MLA caches qk_rope_head_dim numbers per token beside the latent "
             "(kv_lora_rank + qk_rope_head_dim).")
PER_HEAD = N_("you multiplied by the attention heads: MLA's latent, rotary key and indexer key are shared by every "
              "head, one of each per token and layer.")
BITS = N_("you counted bits: multiply by bytes_per_element, not by 8 × bytes_per_element.")


def v32_config(layers, heads, kv_lora_rank, rope_dim, index_heads, index_head_dim, index_topk):
    """A stand-in for transformers' ``DeepseekV32Config`` with the fields this exercise reads."""
    return SimpleNamespace(num_hidden_layers=layers, num_attention_heads=heads, kv_lora_rank=kv_lora_rank,
                           qk_rope_head_dim=rope_dim, index_n_heads=index_heads, index_head_dim=index_head_dim,
                           index_topk=index_topk)


CACHE_CASES = (  # (config fields, tokens, bytes per element)
    ((61, 128, 512, 64, 64, 128, 2048), 131072, 2),  # DeepSeek-V3.2 at 128k tokens, bfloat16
    ((3, 4, 16, 8, 6, 12, 5), 40, 4),  # a tiny one, float32
    ((2, 2, 8, 4, 3, 6, 100), 300, 1),  # fp8
)


def _cache_expected(config, tokens: int, b: int) -> int:
    return kv_cache_bytes(config.num_hidden_layers, tokens=tokens, kv_lora_rank=config.kv_lora_rank,
                          qk_rope_head_dim=config.qk_rope_head_dim, index_head_dim=config.index_head_dim,
                          bytes_per_element=b)


def _cache_mistakes(config, tokens: int, b: int) -> dict:
    L, r, dr, di = config.num_hidden_layers, config.kv_lora_rank, config.qk_rope_head_dim, config.index_head_dim
    right = L * (r + dr + di) * tokens * b
    return {NO_INDEXER: L * (r + dr) * tokens * b, INDEXER_PER_HEAD: L * (r + dr + config.index_n_heads * di) * tokens * b,
            ONLY_TOPK: L * (r + dr + di) * min(tokens, config.index_topk) * b, NO_ROPE: L * (r + di) * tokens * b,
            PER_HEAD: right * config.num_attention_heads, BITS: 8 * right}


def check_sparse_cache_bytes(student_fn) -> Feedback:
    """17.2: ``student_fn(config, tokens, bytes_per_element)`` must return the bytes DeepSeek-V3.2's cache holds for
    one sequence of ``tokens`` tokens: ``num_hidden_layers × (kv_lora_rank + qk_rope_head_dim + index_head_dim) ×
    tokens × bytes_per_element``."""
    name = "sparse_cache_bytes"
    cases = [(v32_config(*fields), tokens, b) for fields, tokens, b in CACHE_CASES]
    expected = [_cache_expected(*case) for case in cases]  # before any call
    answers = count_answers(name, student_fn, cases)
    if isinstance(answers, Feedback):
        return answers
    if answers == expected:
        return passed(name, N_("correct: DeepSeek-V3.2 keeps 704 numbers per token and layer, 576 for the latent "
                               "attention and 128 for the indexer's key, whatever index_topk is."))
    mistake = named_mistake(answers, expected, [_cache_mistakes(*case) for case in cases])
    if mistake:
        return failed(name, _(mistake))
    i = next(i for i, (value, right) in enumerate(zip(answers, expected)) if value != right)
    config, tokens, b = cases[i]
    return failed(name, _("for {L} layers, kv_lora_rank = {r}, qk_rope_head_dim = {dr}, index_head_dim = {di}, "
                          "tokens={tokens}, bytes_per_element={b} you returned {shown}, expected {expected}.").format(
        L=config.num_hidden_layers, r=config.kv_lora_rank, dr=config.qk_rope_head_dim, di=config.index_head_dim,
        tokens=tokens, b=b, shown=shown_count(answers[i]), expected=f"{expected[i]:,}"))


__all__ = ["check_select_keys", "check_sparse_cache_bytes", "v32_config"]
