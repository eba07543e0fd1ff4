"""Chapter 5's checkers: they pass the right answer, name each mistake they claim to know, and wait for the stub.

Every wrong answer below is written the way a student would write it (not built from the checker's own
reference tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch05_causal_masking as ch05

NEG_INF = float("-inf")


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_causal_weights -------------------------------------------------------------------------------------


def causal_solution(scores):
    T, S = scores.shape[-2:]
    blocked = torch.triu(torch.ones(T, S, dtype=torch.bool), diagonal=1)  # the future
    return torch.softmax(scores.masked_fill(blocked, NEG_INF), dim=-1)


def _ones(scores):
    return torch.ones(scores.shape[-2:])


WRONG_CAUSAL = {
    "Did you mask the diagonal?": lambda s: torch.softmax(s.masked_fill(_ones(s).triu().bool(), NEG_INF), -1),
    "you masked the diagonal too": lambda s: torch.softmax(s.masked_fill(_ones(s).triu().bool(), -1e9), -1),
    "your mask is upside down": lambda s: torch.softmax(s.masked_fill(_ones(s).tril(-1).bool(), NEG_INF), -1),
    "you filled the blocked scores with 0": lambda s: torch.softmax(s.masked_fill(_ones(s).triu(1).bool(), 0), -1),
    "without renormalising": lambda s: torch.softmax(s, -1) * _ones(s).tril(),
    "you applied no mask": lambda s: torch.softmax(s, -1),
    "softmax over the wrong dimension": lambda s: torch.softmax(s.masked_fill(_ones(s).triu(1).bool(), NEG_INF), 0)
    if s.dim() == 2 else torch.softmax(s.masked_fill(_ones(s).triu(1).bool(), NEG_INF), -2),
}


def test_causal_weights_accepts_the_solution_and_other_correct_spellings():
    feedback = ch05.check_causal_weights(causal_solution)
    assert feedback.passed
    assert str(feedback).startswith(f"{PASS_MARK} causal_weights: correct")
    # the library; a large negative number instead of -inf; masking after the softmax *with* renormalisation
    assert ch05.check_causal_weights(lambda s: mha_lib.masked_softmax(s, mha_lib.causal_mask(s.shape[-1])))
    assert ch05.check_causal_weights(lambda s: torch.softmax(s.masked_fill(_ones(s).triu(1).bool(), -1e9), -1))

    def renormalised(s):
        w = torch.softmax(s, -1) * _ones(s).tril()
        return w / w.sum(-1, keepdim=True)

    assert ch05.check_causal_weights(renormalised)


@pytest.mark.parametrize("phrase", list(WRONG_CAUSAL))
def test_causal_weights_names_the_mistake(phrase):
    feedback = ch05.check_causal_weights(WRONG_CAUSAL[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert str(feedback).startswith(FAIL_MARK)


def test_the_diagonal_message_says_why_row_0_is_nan():
    feedback = ch05.check_causal_weights(WRONG_CAUSAL["Did you mask the diagonal?"])
    assert feedback.message.startswith("row 0 is all NaN: a whole row was -inf.")


def test_causal_weights_catches_a_hard_coded_size():
    fixed = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    feedback = ch05.check_causal_weights(lambda s: torch.softmax(s.masked_fill(fixed, NEG_INF), -1))
    assert not feedback.passed
    assert "not for scores of shape (2, 3, 6, 6)" in feedback.message and "Tip:" in feedback.message


def test_causal_weights_reports_the_stub_and_unknown_nan():
    assert str(ch05.check_causal_weights(_stub)).startswith(f"{TODO_MARK} causal_weights: not attempted yet")
    feedback = ch05.check_causal_weights(lambda s: torch.full_like(s, float("nan")))
    assert not feedback.passed and "NaN" in feedback.message and "diagonal" not in feedback.message


# --- check_padded_causal_mask ---------------------------------------------------------------------------------


def padded_causal_solution(key_padding_mask, T):
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
    keys_kept = ~key_padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)
    return causal & keys_kept  # (B, 1, T, T)


def _causal(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


WRONG_PADDED = {
    "True means *padding*": lambda pad, T: _causal(T) & pad[:, None, None, :],
    "you combined the masks with OR": lambda pad, T: _causal(T) | ~pad[:, None, None, :],
    "instead of the padded *keys*": lambda pad, T: _causal(T) & ~pad[:, None, :, None],
    "your causal part is upside down": lambda pad, T: _causal(T).T & ~pad[:, None, None, :],
    "the causal part is missing": lambda pad, T: ~pad[:, None, None, :].expand(-1, 1, T, -1),
    "the padding part is missing": lambda pad, T: _causal(T).expand(pad.shape[0], 1, T, T),
    "you blocked the diagonal": lambda pad, T: torch.ones(T, T, dtype=torch.bool).tril(-1) & ~pad[:, None, None, :],
    "return a 4-D mask (B, 1, T, T)": lambda pad, T: _causal(T) & ~pad[:, None, :],
    "return a torch.bool keep mask": lambda pad, T: padded_causal_solution(pad, T).float(),
}


def test_padded_causal_mask_accepts_the_solution_and_the_library():
    feedback = ch05.check_padded_causal_mask(padded_causal_solution)
    assert feedback.passed
    assert str(feedback).startswith(f"{PASS_MARK} padded_causal_mask: correct")

    def with_library(pad, T):
        return mha_lib.combine_masks(mha_lib.causal_mask(T), mha_lib.mask_from_key_padding(pad, pad.shape[0], T))

    assert ch05.check_padded_causal_mask(with_library)
    # the full (B, 1, T, T) shape, written out with expand, is fine too
    assert ch05.check_padded_causal_mask(lambda pad, T: padded_causal_solution(pad, T).expand(-1, 1, T, T).clone())


@pytest.mark.parametrize("phrase", list(WRONG_PADDED))
def test_padded_causal_mask_names_the_mistake(phrase):
    feedback = ch05.check_padded_causal_mask(WRONG_PADDED[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


def test_padded_causal_mask_reports_the_stub_and_a_wrong_shape():
    assert not ch05.check_padded_causal_mask(_stub).attempted
    feedback = ch05.check_padded_causal_mask(lambda pad, T: torch.ones(T, dtype=torch.bool))
    assert not feedback.passed and "wrong shape" in feedback.message


def test_checkers_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    ch05.check_causal_weights(causal_solution)
    ch05.check_padded_causal_mask(padded_causal_solution)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_causal_weights_names_the_keep_mask_passed_straight_to_masked_fill():
    # the slip the hint warns about: the keep mask (True = may attend) given to masked_fill, which fills where True
    def keep_filled(fill):
        def student(scores):
            keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()  # True = may attend
            return torch.softmax(scores.masked_fill(keep, fill), dim=-1)
        return student

    with_inf = ch05.check_causal_weights(keep_filled(NEG_INF))
    assert not with_inf.passed and with_inf.attempted
    assert with_inf.message == ch05.KEEP_MASK_FILLED
    with_large_negative = ch05.check_causal_weights(keep_filled(-1e9))
    assert not with_large_negative.passed
    assert with_large_negative.message == ch05.KEEP_MASK_FILLED_FINITE
    # the mirrored triangle (each query sees itself and the future) keeps its own message
    assert ch05.check_causal_weights(WRONG_CAUSAL["your mask is upside down"]).message == ch05.INVERTED
