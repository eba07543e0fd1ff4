"""Chapter 14's checkers: they pass the right answers, name each mistake they claim to know, wait for the stub,
and never say "correct" to a hostile answer.

Every wrong answer below is written the way a student would write it (not built from the checker's own
reference tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import math

import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch14_attention_at_scale as ch14
from mha_lib.llm.scale import online_softmax_trace


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_online_softmax ------------------------------------------------------------------------------------------


def online(scores, values, block_size, *, rescale_sum=True, rescale_output=True, own_max=False, divide=True,
           subtract_max=True, skip_last=False, factor_of=lambda m, m_new: torch.exp(m - m_new)):
    m = torch.tensor(float("-inf"))
    l = torch.zeros(())
    o = torch.zeros(values.shape[-1])
    S = scores.shape[0]
    blocks = range(0, (S // block_size) * block_size, block_size) if skip_last else range(0, S, block_size)
    for j in blocks:
        s, v = scores[j:j + block_size], values[j:j + block_size]
        m_new = torch.maximum(m, s.max())
        if own_max:
            w = torch.exp(s - s.max())
        elif subtract_max:
            w = torch.exp(s - m_new)
        else:
            w = torch.exp(s)
        factor = factor_of(m, m_new) if subtract_max and not own_max else torch.ones(())
        l = (factor * l if rescale_sum else l) + w.sum()
        o = (factor * o if rescale_output else o) + w @ v
        m = m_new
    return o / l if divide else o


def online_solution(scores, values, block_size):
    return online(scores, values, block_size)


def online_with_the_library(scores, values, block_size):
    state = mha_lib.online_softmax_start((1,), values.shape[-1])
    for j in range(0, scores.shape[0], block_size):
        state = mha_lib.online_softmax_step(state, scores[None, j:j + block_size], values[j:j + block_size])
    return state.result()[0]


def online_vectorised_per_block(scores, values, block_size):  # a correct solution written another way
    blocks = torch.split(scores, block_size)
    values_blocks = torch.split(values, block_size)
    m, l, o = -math.inf, 0.0, torch.zeros(values.shape[-1], dtype=torch.float64)
    for s, v in zip(blocks, values_blocks):
        m_new = max(m, s.max().item())
        factor = math.exp(m - m_new)
        w = torch.exp(s.double() - m_new)
        l = factor * l + w.sum().item()
        o = factor * o + w @ v.double()
        m = m_new
    return o / l


WRONG_ONLINE = {
    "rescale the running output when the max changes": lambda s, v, b: online(s, v, b, rescale_output=False),
    "rescale the running sum when the max changes": lambda s, v, b: online(s, v, b, rescale_sum=False),
    "rescale the running sum and the running output": lambda s, v, b: online(s, v, b, rescale_sum=False,
                                                                             rescale_output=False),
    "each block's own max": lambda s, v, b: online(s, v, b, own_max=True),
    "you forgot the final division": lambda s, v, b: online(s, v, b, divide=False),
    "overflows float32": lambda s, v, b: online(s, v, b, subtract_max=False),
    "stops before the last, partial block": lambda s, v, b: online(s, v, b, skip_last=True),
}


def test_online_softmax_accepts_the_solution_written_three_ways():
    for solution in (online_solution, online_vectorised_per_block):
        feedback = ch14.check_online_softmax(solution)
        assert feedback.passed, str(feedback)
    assert str(ch14.check_online_softmax(online_solution)).startswith(f"{PASS_MARK} online_softmax: correct")


@pytest.mark.parametrize("phrase", list(WRONG_ONLINE))
def test_online_softmax_names_the_mistake(phrase):
    feedback = ch14.check_online_softmax(WRONG_ONLINE[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert str(feedback).startswith(FAIL_MARK)


def test_online_softmax_messages_say_which_case_and_which_keys():
    assert ch14.check_online_softmax(WRONG_ONLINE["stops before the last, partial block"]).message.startswith(
        "(S = 7, block_size = 3) your loop stops before the last, partial block: with S = 7 and block_size = 3 "
        "the keys 6 .. 6 were never read.")
    # without the max the small rows are right: the first failure is the row near 1,000, and it says so
    assert ch14.check_online_softmax(WRONG_ONLINE["overflows float32"]).message.startswith(
        "(S = 10, block_size = 4, scores near 1,000) your result holds NaN or inf for scores near 1,000 (it was "
        "right for small scores)")


def test_online_softmax_the_late_max_makes_the_missing_rescale_visible():
    # on a row whose largest score comes first, forgetting the rescale changes nothing: the checker's rows differ
    scores, values = torch.tensor([3.0, 1.0, 0.0, -1.0]), torch.randn(4, 2)
    torch.testing.assert_close(online(scores, values, 2, rescale_output=False), online_solution(scores, values, 2))
    late = scores.flip(0)
    assert not torch.allclose(online(late, values, 2, rescale_output=False), online_solution(late, values, 2))


def test_online_softmax_refuses_softmax_and_the_library_with_right_values():
    assert not ch14.check_online_softmax(lambda s, v, b: torch.softmax(s, dim=-1) @ v).passed
    assert "called torch.softmax" in ch14.check_online_softmax(lambda s, v, b: torch.softmax(s, dim=-1) @ v).message
    assert "called torch.nn.functional.softmax" in ch14.check_online_softmax(
        lambda s, v, b: torch.nn.functional.softmax(s, dim=0) @ v).message
    assert "called Tensor.softmax" in ch14.check_online_softmax(lambda s, v, b: s.softmax(-1) @ v).message
    feedback = ch14.check_online_softmax(online_with_the_library)
    assert not feedback.passed and "mha_lib's online_softmax_step" in feedback.message, str(feedback)


def test_online_softmax_a_whole_row_at_once_is_named_by_what_it_did():
    def whole_row(scores, values, block_size):  # right values, one exp over all S scores
        w = torch.exp(scores - scores.max())
        return w @ values / w.sum()

    assert ch14.check_online_softmax(whole_row).message == (
        "right values, but your function called torch.exp on a tensor of shape (7,), as many numbers as the row's 7 "
        "scores, with block_size = 3: the online softmax takes in one block of at most block_size keys per step "
        "(section 2).")
    # a block size larger than S is one block: the whole row at once is then the right thing to do
    assert all(b >= S for S, _, b, _ in ch14.ONLINE_CASES if S == 6 and b == 10)


def test_online_softmax_an_inverted_factor_is_wrong_and_not_misnamed():
    feedback = ch14.check_online_softmax(lambda s, v, b: online(s, v, b, factor_of=lambda m, m_new: torch.exp(
        m_new - m)))
    assert not feedback.passed and feedback.attempted
    assert "NaN" in feedback.message, feedback.message


def test_online_softmax_the_stub_is_not_attempted():
    feedback = ch14.check_online_softmax(_stub)
    assert not feedback.attempted and str(feedback).startswith(TODO_MARK)


def test_online_softmax_the_cases_hold_what_they_claim():
    generator = torch.Generator().manual_seed(14)
    for S, Dv, b, shift in ch14.ONLINE_CASES:
        scores, values = ch14._online_case(S, Dv, shift, generator)
        assert scores.shape == (S,) and values.shape == (S, Dv)
        assert int(scores.argmax()) >= S - b or b >= S  # the largest score sits in the last block
        if shift:
            assert scores.min() > 900 and not torch.isfinite(torch.exp(scores)).all()


# --- check_needed_tiles -------------------------------------------------------------------------------------------


def tiles(T, S, block_size, *, first_key_cmp=lambda key, query: key <= query, top_left=False, rounding=math.ceil,
          first_query=False):
    rows, cols = int(rounding(T / block_size)), int(rounding(S / block_size))
    offset = 0 if top_left else S - T
    starts = torch.arange(rows) * block_size
    last = starts if first_query else torch.clamp(starts + block_size, max=T) - 1
    query_position = offset + last  # (rows,)
    first_key = torch.arange(cols) * block_size  # (cols,)
    return first_key_cmp(first_key[None, :], query_position[:, None])


def tiles_solution(T, S, block_size):
    return tiles(T, S, block_size)


def tiles_from_the_mask(T, S, block_size):  # the brute-force way: the mask, then any() per tile
    keep = mha_lib.causal_mask_at(torch.arange(S - T, S), torch.arange(S))
    rows, cols = math.ceil(T / block_size), math.ceil(S / block_size)
    grid = torch.zeros(rows, cols, dtype=torch.bool)
    for i in range(rows):
        for j in range(cols):
            grid[i, j] = keep[i * block_size:(i + 1) * block_size, j * block_size:(j + 1) * block_size].any()
    return grid


def whole_tiles_only(T, S, block_size):
    keep = mha_lib.causal_mask_at(torch.arange(S - T, S), torch.arange(S))
    rows, cols = math.ceil(T / block_size), math.ceil(S / block_size)
    return torch.tensor([[bool(keep[i * block_size:(i + 1) * block_size, j * block_size:(j + 1) * block_size].all())
                          for j in range(cols)] for i in range(rows)])


def counted(T, S, block_size):
    keep = mha_lib.causal_mask_at(torch.arange(S - T, S), torch.arange(S))
    rows, cols = math.ceil(T / block_size), math.ceil(S / block_size)
    return torch.tensor([[int(keep[i * block_size:(i + 1) * block_size, j * block_size:(j + 1) * block_size].sum())
                          for j in range(cols)] for i in range(rows)])


WRONG_TILES = {
    "your triangle starts at the top-left corner": lambda T, S, b: tiles(T, S, b, top_left=True),
    "you counted floor(T / b) × floor(S / b) tiles": lambda T, S, b: tiles(T, S, b, rounding=math.floor),
    "you dropped the diagonal (a strict <)": lambda T, S, b: tiles(T, S, b, first_key_cmp=lambda k, q: k < q),
    "you compared with the block's first query": lambda T, S, b: tiles(T, S, b, first_query=True),
    "you kept only the tiles whose every pair is allowed": whole_tiles_only,
    "your grid is inverted": lambda T, S, b: ~tiles_solution(T, S, b),
    "your grid is transposed": lambda T, S, b: tiles_solution(T, S, b).T,
    "you returned how many pairs of each tile are allowed": counted,
    "your 0s and 1s are the right tiles": lambda T, S, b: tiles_solution(T, S, b).int(),
}


def test_needed_tiles_accepts_the_solution_and_the_brute_force():
    for solution in (tiles_solution, tiles_from_the_mask):
        feedback = ch14.check_needed_tiles(solution)
        assert feedback.passed, str(feedback)
    assert str(ch14.check_needed_tiles(tiles_solution)).startswith(f"{PASS_MARK} needed_tiles: correct")


@pytest.mark.parametrize("phrase", list(WRONG_TILES))
def test_needed_tiles_names_the_mistake(phrase):
    feedback = ch14.check_needed_tiles(WRONG_TILES[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


def test_needed_tiles_top_left_is_named_only_after_a_cache():
    # with T = S both alignments agree: the first case passes, and the message names the first case with S > T
    message = ch14.check_needed_tiles(WRONG_TILES["your triangle starts at the top-left corner"]).message
    assert message.startswith("(T = 4, S = 10, block_size = 3) your triangle starts at the top-left corner")


def test_needed_tiles_floor_in_one_dimension_is_named_for_that_dimension():
    rows_only = ch14.check_needed_tiles(lambda T, S, b: tiles_solution(T, S, b)[: T // b])
    assert "you counted floor(T / b) query blocks" in rows_only.message, rows_only.message
    cols_only = ch14.check_needed_tiles(lambda T, S, b: tiles_solution(T, S, b)[:, : S // b])
    assert "you counted floor(S / b) key blocks" in cols_only.message, cols_only.message


def test_needed_tiles_reference_matches_the_causal_mask_and_counts_half_the_tiles():
    for T, S, b in ch14.TILE_CASES:
        torch.testing.assert_close(ch14.needed_tiles_reference(T, S, b), tiles_from_the_mask(T, S, b))
    grid = ch14.needed_tiles_reference(64, 64, 8)
    assert grid.shape == (8, 8) and int(grid.sum()) == 36  # the chapter's 36 of 64 tiles
    assert ch14.needed_tiles_reference(1, 9, 4).tolist() == [[True, True, True]]  # one new token reads every block


@pytest.mark.parametrize(("answer", "phrase"), [
    (None, "expected a torch.Tensor, got NoneType"),
    ([[True]], "expected a torch.Tensor, got list"),
    (torch.ones(3, 3, dtype=torch.bool).to_sparse(), "sparse tensor"),
    (torch.ones(3, 3, dtype=torch.complex64), "complex"),
    (torch.full((3, 3), math.nan), "return a torch.bool tensor (True = the tile is computed), got dtype torch.float32"),
], ids=["None", "list", "sparse", "complex", "nan"])
def test_needed_tiles_answers_that_are_not_bool_grids(answer, phrase):
    feedback = ch14.check_needed_tiles(lambda T, S, b: answer)
    assert not feedback.passed and feedback.attempted and phrase in feedback.message, str(feedback)


def test_needed_tiles_stub_raise_and_non_callable():
    assert not ch14.check_needed_tiles(_stub).attempted
    raised = ch14.check_needed_tiles(lambda T, S, b: 1 / 0)
    assert not raised.passed and "your function raised ZeroDivisionError" in raised.message
    assert "expected your function itself" in ch14.check_needed_tiles(tiles_solution(4, 4, 2)).message
    assert "cannot be called the way the exercise calls it" in ch14.check_needed_tiles(lambda T, S: None).message


def test_needed_tiles_an_all_true_grid_is_wrong_and_not_misnamed():
    feedback = ch14.check_needed_tiles(lambda T, S, b: torch.ones(math.ceil(T / b), math.ceil(S / b), dtype=bool))
    assert not feedback.passed and "right shape" in feedback.message, str(feedback)


# --- check_absorbed_query -----------------------------------------------------------------------------------------


def absorbed_solution(q_nope, W_uk):
    return torch.einsum("bhtn,hnr->bhtr", q_nope, W_uk)


def absorbed_per_head(q_nope, W_uk):  # a loop over heads, written out
    return torch.stack([q_nope[:, h] @ W_uk[h] for h in range(W_uk.shape[0])], dim=1)


WRONG_ABSORBED = {
    "you read W_uk as (H, r, d_n)": lambda q, W: torch.einsum("bhtn,hrn->bhtr", q, W),
    "you read W_uk as (H, r, d_n): your function fails": lambda q, W: q @ W.mT,
    "you summed over the heads (your result has no head dimension)": lambda q, W: torch.einsum("bhtn,hnr->btr", q, W),
    "you summed over the heads (dim 1, keepdim=True)": lambda q, W: (q @ W).sum(1, keepdim=True),
    "you used head 0's W_uk for every head": lambda q, W: q @ W[0],
    "you matched W_uk's head axis with the wrong axis": lambda q, W: q @ W.unsqueeze(1),
}


def test_absorbed_query_accepts_the_solution_three_ways_and_matches_the_layer():
    for solution in (absorbed_solution, absorbed_per_head, lambda q, W: q @ W[None]):
        feedback = ch14.check_absorbed_query(solution)
        assert feedback.passed, str(feedback)
    # the reference is what MultiHeadLatentAttention folds: scores against the latent equal scores against keys
    q, W, c = torch.randn(2, 3, 4, 5), torch.randn(3, 5, 7), torch.randn(7)
    torch.testing.assert_close(ch14._absorbed(q, W) @ c, (q * (W @ c)[None, :, None, :]).sum(-1))


@pytest.mark.parametrize("phrase", list(WRONG_ABSORBED))
def test_absorbed_query_names_the_mistake(phrase):
    feedback = ch14.check_absorbed_query(WRONG_ABSORBED[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


def test_absorbed_query_wrong_axis_with_einsum_on_batch_equal_heads():
    feedback = ch14.check_absorbed_query(lambda q, W: torch.einsum("bhtn,bnr->bhtr", q, W))
    assert "you matched W_uk's head axis with the wrong axis" in feedback.message, str(feedback)
    assert feedback.message.startswith("(q_nope (1, 2, 6, 8), W_uk (2, 8, 3))"), feedback.message  # B = 1 broadcasts


def test_absorbed_query_an_error_that_is_not_a_transpose_stays_the_error():
    feedback = ch14.check_absorbed_query(lambda q, W: q.mT @ W)  # fails both ways: no claim about W_uk's layout
    assert "your function raised RuntimeError" in feedback.message and "(H, r, d_n)" not in feedback.message


def test_absorbed_query_cases_make_the_transpose_fail_by_shape():
    assert all(dn != r and T not in (dn, r) for _, _, T, dn, r in ch14.ABSORB_CASES)
    assert any(B == H for B, H, *_ in ch14.ABSORB_CASES) and any(B == 1 for B, *_ in ch14.ABSORB_CASES)


def test_absorbed_query_stub_and_wrong_shape():
    assert not ch14.check_absorbed_query(_stub).attempted
    feedback = ch14.check_absorbed_query(lambda q, W: q)
    assert "wrong shape: got (1, 2, 6, 8), expected (1, 2, 6, 3)" in feedback.message, str(feedback)


class _LyingBool(torch.Tensor):
    """A bool tensor subclass that answers True to every comparison."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.__eq__):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_needed_tiles_a_lying_subclass_or_a_returned_feedback_does_not_pass():
    liar = ch14.check_needed_tiles(lambda T, S, b: (~tiles_solution(T, S, b)).as_subclass(_LyingBool))
    assert not liar.passed, str(liar)
    fake = ch14.check_needed_tiles(lambda T, S, b: ch14.passed("needed_tiles"))
    assert not fake.passed and "returned a Feedback" in fake.message
    exit_ = ch14.check_needed_tiles(lambda T, S, b: exit(3))
    assert not exit_.passed and "your function raised SystemExit" in exit_.message


def test_online_softmax_overflow_in_the_rescale_factor_is_not_blamed_on_the_block_weights():
    # the block's weights use exp(s - m_new), but the rescale is exp(m) / exp(m_new): inf / inf near 1,000. The
    # message must point at the rescale too, not only tell the student to do what they already did.
    def rescale_by_division(scores, values, block_size):
        m, l, o = torch.tensor(-math.inf), torch.tensor(0.0), torch.zeros(values.shape[-1])
        for start in range(0, scores.shape[0], block_size):
            s, v = scores[start:start + block_size], values[start:start + block_size]
            m_new = torch.maximum(m, s.max())
            factor = torch.exp(m) / torch.exp(m_new)
            w = torch.exp(s - m_new)
            l, o, m = factor * l + w.sum(), factor * o + w @ v, m_new
        return o / l

    feedback = ch14.check_online_softmax(rescale_by_division)
    assert not feedback.passed
    assert "exp(m_old - m_new) for the rescale" in feedback.message, feedback.message


def test_absorbed_query_heads_summed_without_einsum_is_named_without_mentioning_einsum_as_the_cause():
    feedback = ch14.check_absorbed_query(lambda q, W: (q @ W).sum(dim=1))
    assert not feedback.passed
    assert "you summed over the heads (your result has no head dimension)" in feedback.message, feedback.message


# --- check_online_softmax: one-line shortcuts that compute the softmax for the student ---------------------------


def _as_attention(scores):
    """A query of ones against the scores as one-number keys: q·k = the score (scale 1), so attention is
    softmax(scores) @ values, the exercise's whole answer."""
    return torch.ones(1, 1), scores[:, None]


ONE_LINE_SHORTCUTS = {
    "torch.nn.functional.scaled_dot_product_attention, which computes attention, its softmax included, for you":
        lambda s, v, b: torch.nn.functional.scaled_dot_product_attention(*_as_attention(s), v, scale=1.0)[0],
    "torch.ops.aten.scaled_dot_product_attention, which computes attention":
        lambda s, v, b: torch.ops.aten.scaled_dot_product_attention(*_as_attention(s), v, scale=1.0)[0],
    "torch.ops.aten._scaled_dot_product_attention_math, which computes attention":
        lambda s, v, b: torch.ops.aten._scaled_dot_product_attention_math(*_as_attention(s), v, scale=1.0)[0][0],
    "mha_lib's sdpa_attention, which does this exercise's work for you":
        lambda s, v, b: mha_lib.sdpa_attention(*_as_attention(s), v, scale=1.0)[0][0],
    "mha_lib's flash_attention, which does this exercise's work for you":
        lambda s, v, b: mha_lib.flash_attention(*_as_attention(s), v, scale=1.0, block_size=b)[0],
    "mha_lib's flash_kernel":
        lambda s, v, b: mha_lib.flash_kernel(*_as_attention(s), v, scale=1.0)[0][0],
    "mha_lib's explicit_attention":
        lambda s, v, b: mha_lib.explicit_attention(*_as_attention(s), v, scale=1.0)[0][0],
    "mha_lib's stable_softmax": lambda s, v, b: mha_lib.stable_softmax(s) @ v,
    "mha_lib's masked_softmax": lambda s, v, b: mha_lib.masked_softmax(s) @ v,
    "torch._softmax, which computes a softmax (or its log) for you": lambda s, v, b: torch._softmax(s, 0, False) @ v,
    "torch.ops.aten._softmax": lambda s, v, b: torch.ops.aten._softmax(s, 0, False) @ v,
    "torch.special.softmax": lambda s, v, b: torch.special.softmax(s, 0) @ v,
    "torch.nn.functional.log_softmax": lambda s, v, b: torch.nn.functional.log_softmax(s, 0).exp() @ v,
    "mha_lib's online_softmax_trace": lambda s, v, b: list(online_softmax_trace(s, v, b))[-1].result,
}


@pytest.mark.parametrize("phrase", list(ONE_LINE_SHORTCUTS))
def test_online_softmax_refuses_every_one_line_shortcut_and_names_it(phrase):
    shortcut = ONE_LINE_SHORTCUTS[phrase]
    scores, values = torch.randn(7), torch.randn(7, 3)  # the shortcut is right: only the watch can refuse it
    result = shortcut(scores, values, 3)
    result = result if result.dim() == 1 else result[0]
    torch.testing.assert_close(result, torch.softmax(scores, -1) @ values)
    feedback = ch14.check_online_softmax(shortcut)
    assert not feedback.passed and feedback.attempted, str(feedback)
    assert feedback.message.startswith(f"your function called {phrase}"), feedback.message
    assert "one block at a time, with a running max, sum and output" in feedback.message or \
        "write the running max, sum and output yourself, one block at a time" in feedback.message


def test_online_softmax_shortcut_messages_say_only_what_is_true():
    # the exercise's text forbids torch.softmax and mha_lib's online softmax by name; for anything else the message
    # says what the call does, never that the exercise named it
    sdpa = ch14.check_online_softmax(ONE_LINE_SHORTCUTS[next(iter(ONE_LINE_SHORTCUTS))])
    assert sdpa.message == (
        "your function called torch.nn.functional.scaled_dot_product_attention, which computes attention, its softmax "
        "included, for you: the exercise asks you to compute the weights yourself, one block at a time, with a "
        "running max, sum and output.")
    flash = ch14.check_online_softmax(ONE_LINE_SHORTCUTS["mha_lib's flash_attention, which does this exercise's work "
                                                         "for you"])
    assert flash.message == (
        "your function called mha_lib's flash_attention, which does this exercise's work for you (a softmax, an "
        "attention, or a step or merge of the online softmax): write the running max, sum and output yourself, one "
        "block at a time.")
    for feedback in (sdpa, flash):
        assert "asks you not to" not in feedback.message


def test_online_softmax_refuses_merging_the_blocks_with_the_library():
    merge = getattr(mha_lib, "merge_attention_states", None)
    if merge is None:
        pytest.skip("this mha_lib has no merge_attention_states")

    def blocks_merged_by_the_library(scores, values, block_size):  # each block's softmax by hand, merged by mha_lib
        out = lse = None
        for j in range(0, scores.shape[0], block_size):
            s, v = scores[j:j + block_size], values[j:j + block_size]
            m = s.max()
            w = torch.exp(s - m)
            o, L = (w @ v / w.sum())[None], (m + w.sum().log())[None]
            out, lse = (o, L) if out is None else merge(out, lse, o, L)
        return out[0]

    feedback = ch14.check_online_softmax(blocks_merged_by_the_library)
    assert not feedback.passed
    assert feedback.message.startswith("your function called mha_lib's merge_attention_states, which does this "
                                       "exercise's work for you"), feedback.message


def test_online_softmax_a_whole_row_log_sum_exp_is_named_by_what_it_did():
    def normalised_by_the_whole_row(scores, values, block_size):  # blocks, but each divided by the row's own total
        total = torch.logsumexp(scores, dim=0)
        return sum(torch.exp(scores[j:j + block_size] - total) @ values[j:j + block_size]
                   for j in range(0, scores.shape[0], block_size))

    feedback = ch14.check_online_softmax(normalised_by_the_whole_row)
    assert feedback.message.startswith("right values, but your function called torch.logsumexp on a tensor of shape "
                                       "(7,), as many numbers as the row's 7 scores"), feedback.message


def test_online_softmax_the_library_pieces_that_do_no_work_are_not_refused():
    def own_loop_with_the_librarys_empty_state(scores, values, block_size):
        state = mha_lib.online_softmax_start((), values.shape[-1])  # m = -inf, l = 0, o = 0: nothing computed yet
        m, l, o = state.max[0], state.total[0], state.output
        for j in range(0, scores.shape[0], block_size):
            s, v = scores[j:j + block_size], values[j:j + block_size]
            m_new = torch.maximum(m, s.max())
            factor, w = torch.exp(m - m_new), torch.exp(s - m_new)
            l, o, m = factor * l + w.sum(), factor * o + w @ v, m_new
        mha_lib.show("done")  # mha_lib code that computes nothing of the answer
        return o / l

    feedback = ch14.check_online_softmax(own_loop_with_the_librarys_empty_state)
    assert feedback.passed, str(feedback)
