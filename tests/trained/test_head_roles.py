"""Head-role scores on hand-made attention patterns whose answers are known exactly."""

from __future__ import annotations

import math

import pytest
import torch

from mha_lib.trained import corpus
from mha_lib.trained import head_roles as hr

T = 6
LENGTHS = torch.tensor([6, 4])  # sentence 0: [CLS] w w w w [SEP]; sentence 1: [CLS] w w [SEP] + 2 padding


def _pattern(kind: str) -> torch.Tensor:
    """(B=2, H=1, T, T) weights where every query does the same thing, padding keys get nothing."""
    w = torch.zeros(2, 1, T, T)
    for b, n in enumerate(LENGTHS.tolist()):
        for t in range(T):
            if kind == "previous":
                w[b, 0, t, max(t - 1, 0)] = 1
            elif kind == "next":
                w[b, 0, t, min(t + 1, n - 1)] = 1
            elif kind == "self":
                w[b, 0, t, t] = 1
            elif kind == "cls":
                w[b, 0, t, 0] = 1
            elif kind == "sep":
                w[b, 0, t, n - 1] = 1
            elif kind == "uniform":
                w[b, 0, t, :n] = 1 / n
    return w


@pytest.mark.parametrize("role", ["previous", "next", "self", "cls", "sep"])
def test_a_pure_pattern_scores_one_on_its_role(role):
    scores = hr.role_scores(_pattern(role), LENGTHS)
    assert scores[role].item() == pytest.approx(1.0)
    assert scores["entropy"].item() == pytest.approx(0.0, abs=1e-9)


def test_roles_of_a_previous_token_head_are_exclusive():
    scores = hr.role_scores(_pattern("previous"), LENGTHS)
    # word queries are 1..4 and 1..2: the previous token of query 1 is [CLS], so "cls" gets 2 of 6 queries
    assert scores["cls"].item() == pytest.approx(2 / 6)
    assert scores["self"].item() == scores["next"].item() == scores["sep"].item() == 0.0


def test_a_next_token_head_hits_sep_from_the_last_word():
    scores = hr.role_scores(_pattern("next"), LENGTHS)
    assert scores["sep"].item() == pytest.approx(2 / 6)  # queries 4 (of 6) and 2 (of 4)


def test_uniform_head_scores_one_over_n_and_entropy_ln_n():
    scores = hr.role_scores(_pattern("uniform"), LENGTHS)
    # 4 word queries with n = 6, 2 with n = 4
    expected = (4 * (1 / 6) + 2 * (1 / 4)) / 6
    for role in ("previous", "next", "self", "cls", "sep"):
        assert scores[role].item() == pytest.approx(expected)
    assert scores["entropy"].item() == pytest.approx((4 * math.log(6) + 2 * math.log(4)) / 6)


def test_padding_and_special_queries_never_count():
    w = _pattern("previous")
    w[1, 0, 4:] = 0
    w[1, 0, 4:, 0] = 1  # padded queries put everything on [CLS]: must not change anything
    w[:, 0, 0] = 0
    w[:, 0, 0, 0] = 1  # the [CLS] query
    assert hr.role_scores(w, LENGTHS)["cls"].item() == pytest.approx(2 / 6)


def test_several_layers_and_heads_keep_their_axes():
    heads = torch.cat([_pattern("previous"), _pattern("cls"), _pattern("self")], dim=1)  # (B, 3, T, T)
    stacked = torch.stack([heads, heads.flip(1)])  # (L=2, B, H=3, T, T)
    scores = hr.role_scores(stacked, LENGTHS)
    assert scores["previous"].shape == (2, 3)
    assert scores["previous"][0].tolist() == pytest.approx([1, 2 / 6, 0])  # a [CLS] head: query 1 has [CLS] before it
    assert scores["self"][1].tolist() == pytest.approx([1, 0, 0])
    assert hr.top_heads(scores["cls"], 1) == [(0, 1, pytest.approx(1.0))]


def test_top_heads_and_the_table():
    values = torch.tensor([[0.1, 0.9], [0.5, 0.2]])
    assert hr.top_heads(values, 2) == [(0, 1, pytest.approx(0.9)), (1, 0, pytest.approx(0.5))]
    assert hr.top_heads(values, 1, largest=False) == [(0, 0, pytest.approx(0.1))]
    table = hr.role_table({"previous": values, "entropy": values}, k=1)
    assert table == ["  previous token: L0 H1 0.90", "  entropy (nats): L0 H0 0.10"]


def test_coreference_scores_read_the_pronoun_row():
    tokens = [["[CLS]", "the", "dog", "saw", "a", "cat", "it", "ran", "[SEP]"]]
    item = corpus.Coreference("unused", "it", "dog", "cat")
    w = torch.zeros(1, 1, 2, 9, 9)  # (L, B, H, T, T)
    w[0, 0, 0, 6, 2] = 0.7  # head 0: "it" -> "dog"
    w[0, 0, 0, 6, 5] = 0.3
    w[0, 0, 1, 6, 5] = 1.0  # head 1: "it" -> "cat"
    scores = hr.coreference_scores(w, tokens, [item])
    assert scores.antecedent.tolist() == [[pytest.approx(0.7), 0.0]]
    assert scores.distractor.tolist() == [[pytest.approx(0.3), 1.0]]
    assert scores.prefers_antecedent.tolist() == [[1.0, 0.0]]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"weights must have shape \(B, H, T, T\) for one layer"):
        hr.role_scores(torch.zeros(2, 6, 6), LENGTHS)
    with pytest.raises(ValueError, match=r"lengths must be an integer tensor of shape \(2,\)"):
        hr.role_scores(_pattern("self"), torch.tensor([6.0, 4.0]))
    with pytest.raises(ValueError, match=r"lengths must be between 3 \(\[CLS\], one word, \[SEP\]\) and T = 6"):
        hr.role_scores(_pattern("self"), torch.tensor([7, 4]))
    with pytest.raises(TypeError, match="weights must be a torch.Tensor, got list"):
        hr.role_scores([[0.0]], LENGTHS)
    with pytest.raises(ValueError, match="word must occur exactly once among the tokens, got 2 times 'the'"):
        hr.token_position(["the", "cat", "the"], "the")
    with pytest.raises(ValueError, match="k must be an int between 1 and 4, got 5"):
        hr.top_heads(torch.zeros(2, 2), 5)


def test_the_corpus_has_about_fifty_sentences_and_usable_annotations():
    assert 45 <= len(corpus.CORPUS) <= 60
    assert len(set(corpus.CORPUS)) == len(corpus.CORPUS)
    assert all(a != b for a, b in corpus.UNRELATED_INDEX_PAIRS)
    pytest.importorskip("transformers")
    from mha_lib.trained.pretrained import encode, load_minilm

    _, tokenizer = load_minilm()
    batch = encode(tokenizer, [c.sentence for c in corpus.COREFERENCE])
    for item, tokens in zip(corpus.COREFERENCE, batch.tokens):
        for word in (item.pronoun, item.antecedent, item.distractor):
            hr.token_position(tokens, word)  # one word piece, once: raises otherwise
