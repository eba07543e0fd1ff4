"""Checkers for chapter 10, trained heads.

    check_previous_token_score(fn)   fn(weights (B, H, T, T), lengths (B,))  -> (H,) mean weight on the previous token
    check_copy_bert_attention(fn)    fn(bert_attention_block)                -> MultiHeadAttention with its weights

The first draws its own padded weights from a private generator and compares with ``head_roles.role_scores``;
the second hands the student layer 2 of the trained model and compares the layer it returns with the model's
own attention on a padded batch. Both name the likely mistake when the answer is wrong.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..trained.head_roles import role_scores, word_queries
from ..modules import MultiHeadAttention
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed, passed

Tensor = torch.Tensor

# --- exercise 10.1: the previous-token score --------------------------------------------------------------------

ALL_QUERIES = N_("you averaged over every real query, [CLS] and [SEP] included: [CLS] has no previous token and "
                  "[SEP] is not a word. Average over the word queries 1 .. n-2 of each sentence only.")
PADDING_COUNTED = N_("you averaged over the padded positions too: use lengths to keep the queries 1 .. n-2 of each "
                      "sentence (padding is not text).")
NEXT_TOKEN = N_("that is the next-token score: w[t, t+1]. The previous token of query t is key t-1, w[t, t-1].")
OWN_TOKEN = N_("that is the weight on the query's own token, w[t, t] (the diagonal); the previous token is w[t, t-1].")
TRANSPOSED = N_("you read a column instead of a row: w[t-1, t] is what token t-1 gives to t. Row t (the query) "
                 "holds what token t attends to, so the score is w[t, t-1].")
PER_SENTENCE = N_("you averaged each sentence first and then the sentences, so a short sentence counts as much as "
                   "a long one. The chapter's score counts every word query once: sum over all of them, divide by "
                   "how many there are.")
NOT_PER_HEAD = N_("return one score per head, shape (H,): average over the batch and the queries, keep the heads.")


def _padded_weights(generator: torch.Generator, lengths: list[int], H: int, T: int) -> Tensor:
    """Softmax weights ``(B, H, T, T)`` that give 0 to padded keys, sharper than uniform (a few bright keys)."""
    B = len(lengths)
    scores = torch.randn(B, H, T, T, generator=generator, dtype=torch.float64) * 2.5
    keys = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T), True = real key
    scores = scores.masked_fill(~keys[:, None, None, :], float("-inf"))  # (B, 1, 1, T) broadcast
    return torch.softmax(scores, dim=-1)


def _previous_mistakes(weights: Tensor, lengths: Tensor) -> dict[str, Tensor]:
    B, H, T, _ = weights.shape
    t = torch.arange(T)
    prev = torch.cat([weights.new_zeros(B, H, 1), weights.diagonal(-1, -2, -1)], -1)  # w[t, t-1]: (B, H, T)
    nxt = torch.cat([weights.diagonal(1, -2, -1), weights.new_zeros(B, H, 1)], -1)  # w[t, t+1]
    col = torch.cat([weights.new_zeros(B, H, 1), weights.diagonal(1, -2, -1)], -1)  # w[t-1, t]
    words = word_queries(lengths, T).to(weights.dtype)[:, None, :]  # (B, 1, T)
    real = (t[None, :] < lengths[:, None]).to(weights.dtype)[:, None, :]  # (B, 1, T) queries 0 .. n-1
    after_cls = torch.ones_like(real) * (t >= 1)  # queries 1 .. T-1, padding included

    def mean(values, where):
        return (values * where).sum((0, 2)) / where.sum((0, 2))  # (B, H, T) -> (H,)

    per_sentence = ((prev * words).sum(-1) / words.sum(-1)).mean(0)  # (B, H) -> (H,)
    return {
        ALL_QUERIES: mean(prev, real), PADDING_COUNTED: mean(prev, after_cls), NEXT_TOKEN: mean(nxt, words),
        OWN_TOKEN: mean(weights.diagonal(0, -2, -1), words), TRANSPOSED: mean(col, words),
        PER_SENTENCE: per_sentence,
    }


def check_previous_token_score(student_fn: Callable[[Tensor, Tensor], Tensor]) -> Feedback:
    """``student_fn(weights, lengths)``: the mean weight on the previous token, one number per head ``(H,)``.

    ``weights`` ``(B, H, T, T)`` of sentences padded to ``T``; ``lengths`` ``(B,)`` their real lengths, [CLS] and
    [SEP] included. The mean runs over the word queries 1 .. n-2 of every sentence (each query counts once).
    """
    name = "previous_token_score"
    generator = torch.Generator().manual_seed(10)
    lengths_list, H, T = [7, 5, 4], 4, 7
    weights = _padded_weights(generator, lengths_list, H, T)
    lengths = torch.tensor(lengths_list)
    answer = attempt(name, student_fn, weights.clone(), lengths.clone())
    if isinstance(answer, Feedback):
        return answer
    expected = role_scores(weights, lengths)["previous"]  # (H,)
    if isinstance(answer, Tensor) and answer.shape != expected.shape and answer.numel() != H:
        return failed(name, _("{advice} Got shape {shape}.").format(advice=_(NOT_PER_HEAD), shape=tuple(answer.shape)))
    if isinstance(answer, Tensor):
        answer = answer.reshape(expected.shape) if answer.numel() == H else answer
    return compare(name, answer, expected, mistakes=_previous_mistakes(weights, lengths), atol=1e-6,
                   success=N_("correct: one mean per head, over the word queries only."))


# --- exercise 10.2: copy a trained layer into MultiHeadAttention -------------------------------------------------

NOT_A_LAYER = N_("return the MultiHeadAttention you built (mha_lib.MultiHeadAttention), got {kind}.")
WRONG_HEADS = N_("your layer has {got} heads; the model's has {expected} (attention.self.num_attention_heads): "
                  "with another head count the same weights cut Q and K into different pieces.")
WRONG_WIDTH = N_("your layer expects inputs of width {got}; the model's hidden size is {expected}.")
CAUSAL_LEFT_ON = N_("your layer is causal: MultiHeadAttention defaults to causal=True (the book's GPT layer), but "
                     "BERT is an encoder and every token sees every other one. Pass causal=False.")
TRANSPOSED_WEIGHTS = N_("you copied the transposed weights (weight.T): nn.Linear stores (out_features, in_features) in "
                         "both models, so copy weight as it is.")
NO_QKV_BIAS = N_("the query/key/value biases are missing: create the layer with qkv_bias=True and copy "
                  ".self.query.bias, .self.key.bias and .self.value.bias too.")
QK_SWAPPED = N_("query and key are swapped: W_query gets .self.query, W_key gets .self.key.")
OUT_PROJ_NOT_COPIED = N_("the attention weights are right but the output is not: copy .output.dense (weight and bias) "
                          "into out_proj.")
VALUE_NOT_COPIED = N_("the attention weights are right but the output is not, and out_proj looks right: check "
                       "W_value (.self.value, weight and bias).")


def _reference_layer(block):
    from ..trained.pretrained import attention_from_bert

    return attention_from_bert(block)


def _variant(block, *, transpose=False, bias=True, swap=False, causal=False) -> MultiHeadAttention:
    s, dense = block.self, block.output.dense
    D, H = s.query.in_features, s.num_attention_heads
    layer = MultiHeadAttention(D, D, 512, 0.0, H, qkv_bias=bias, causal=causal).to(dtype=s.query.weight.dtype)
    q, k = (s.key, s.query) if swap else (s.query, s.key)
    with torch.no_grad():
        for ours, theirs in ((layer.W_query, q), (layer.W_key, k), (layer.W_value, s.value), (layer.out_proj, dense)):
            ours.weight.copy_(theirs.weight.T if transpose else theirs.weight)
            if ours.bias is not None:
                ours.bias.copy_(theirs.bias)
    return layer.eval()


def _run(layer, x: Tensor, padding: Tensor):
    with torch.no_grad():
        return layer(x, key_padding_mask=padding, return_weights=True)  # (B, T, D), (B, H, T, T)


def check_copy_bert_attention(student_fn: Callable, block=None) -> Feedback:
    """``student_fn(block)`` must return a ``MultiHeadAttention`` that computes what ``block`` computes.

    ``block``: a BERT attention block; default layer 2 of the trained model (``load_minilm``). The check runs
    both on a padded batch of two random sequences and compares the attention weights, then the output.
    """
    name = "copy_bert_attention"
    if block is None:
        from ..trained.pretrained import load_minilm

        block = load_minilm()[0].encoder.layer[2].attention
    reference = _reference_layer(block)
    answer = attempt(name, student_fn, block)
    if isinstance(answer, Feedback):
        return answer
    if not isinstance(answer, MultiHeadAttention):
        return failed(name, _(NOT_A_LAYER).format(kind=type(answer).__name__))
    if answer.d_in != reference.d_in:
        return failed(name, _(WRONG_WIDTH).format(got=answer.d_in, expected=reference.d_in))
    if answer.num_heads != reference.num_heads:
        return failed(name, _(WRONG_HEADS).format(got=answer.num_heads, expected=reference.num_heads))
    if answer.causal:
        return failed(name, CAUSAL_LEFT_ON)
    generator = torch.Generator().manual_seed(10)
    dtype = reference.W_query.weight.dtype
    x = torch.randn(2, 6, reference.d_in, generator=generator).to(dtype)  # (B, T, D): two sequences
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])  # the second has 2 padded tokens
    answer = answer.eval()
    try:
        out, weights = _run(answer, x, padding)
    except Exception as error:  # noqa: BLE001 - any crash is feedback for the student
        return failed(name, _("your layer raised {kind}: {error}").format(kind=type(error).__name__, error=error))
    ref_out, ref_weights = _run(reference, x, padding)
    mistakes = {message: _run(_variant(block, **kw), x, padding)[1] for message, kw in (
        (TRANSPOSED_WEIGHTS, {"transpose": True}), (NO_QKV_BIAS, {"bias": False}), (QK_SWAPPED, {"swap": True}))}
    verdict = compare(name, weights, ref_weights, mistakes=mistakes, atol=1e-5)
    if not verdict:
        return failed(name, _("the attention weights differ from the model's: {message}").format(
            message=verdict.message))
    if _close_enough(out, ref_out):
        return passed(name, N_("correct: same attention weights and same output as the trained model's layer."))
    if _close_enough(answer.out_proj.weight, block.output.dense.weight):
        return failed(name, VALUE_NOT_COPIED)
    return failed(name, OUT_PROJ_NOT_COPIED)


def _close_enough(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a.detach().double(), b.detach().double(), atol=1e-4))


__all__ = ["check_copy_bert_attention", "check_previous_token_score"]
