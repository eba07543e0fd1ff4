"""Chapter 11's checkers: they pass the right answer, name each mistake they claim to know, and wait for the stub.

Every wrong answer below is written the way a student would write it (loops over queries and keys, not the
checker's own tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch11_heads_learn as ch11
from mha_lib.induction.model import induction_scores, load_run


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_induction_score --------------------------------------------------------------------------------------


def _score(weights, tokens, period, *, keys, queries, reduce="sum"):
    """A student's loop: for each query in ``queries(T, period)``, add the weight on the keys ``keys(x, t, s, p)``."""
    H, T, _ = weights.shape
    per_query = []
    for t in queries(T, period):
        chosen = [s for s in range(T) if keys(tokens, t, s, period)]
        values = [weights[:, t, s] for s in chosen] or [torch.zeros(H)]
        total = torch.stack(values).sum(0)
        per_query.append(total / len(chosen) if reduce == "mean" and chosen else total)
    return torch.stack(per_query).mean(0)


def induction_target(x, t, s, p):
    return 1 <= s <= t and x[s - 1] == x[t]


def predictable(T, p):
    return range(p, T - 1)


def induction_solution(weights, tokens, period):
    return _score(weights, tokens, period, keys=induction_target, queries=predictable)


WRONG_INDUCTION = {
    "that is a duplicate-token head": lambda w, x, p: _score(
        w, x, p, keys=lambda x, t, s, p: s <= t and x[s] == x[t], queries=predictable),
    "earlier keys holding the *same* token": lambda w, x, p: _score(
        w, x, p, keys=lambda x, t, s, p: s < t and x[s] == x[t], queries=predictable),
    "you counted only key t - period + 1": lambda w, x, p: _score(
        w, x, p, keys=lambda x, t, s, p: s == t - p + 1, queries=predictable),
    "you averaged over every query, the first copy included": lambda w, x, p: _score(
        w, x, p, keys=induction_target, queries=lambda T, p: range(0, T - 1)),
    "you averaged over every query 0 .. T-1": lambda w, x, p: _score(
        w, x, p, keys=induction_target, queries=lambda T, p: range(0, T)),
    "you included the last query, t = T-1": lambda w, x, p: _score(
        w, x, p, keys=induction_target, queries=lambda T, p: range(p, T)),
    "your key offset goes the wrong way": lambda w, x, p: _score(
        w, x, p, keys=lambda x, t, s, p: s <= t and s + 1 < len(x) and x[s + 1] == x[t], queries=predictable),
    "you averaged the weight over each query's targets": lambda w, x, p: _score(
        w, x, p, keys=induction_target, queries=predictable, reduce="mean"),
    "that is the previous-token score": lambda w, x, p: _score(
        w, x, p, keys=lambda x, t, s, p: s == t - 1, queries=predictable),
    "return one score per head, shape (H,)": lambda w, x, p: torch.stack(
        [torch.stack([sum(w[h, t, s] for s in range(1, t + 1) if x[s - 1] == x[t]) for t in range(p, len(x) - 1)])
         for h in range(w.shape[0])]),
}


def test_induction_score_accepts_the_solution_and_the_library():
    feedback = ch11.check_induction_score(induction_solution)
    assert feedback.passed, feedback
    assert str(feedback).startswith(f"{PASS_MARK} induction_score: correct: the total weight on every key after")
    assert ch11.check_induction_score(lambda w, x, p: induction_scores(w[None], x[None], torch.tensor([p])))


def test_induction_score_accepts_float64_and_a_row_vector():
    assert ch11.check_induction_score(lambda w, x, p: induction_solution(w, x, p).double())
    assert ch11.check_induction_score(lambda w, x, p: induction_solution(w, x, p)[None, :])  # (1, H) is one per head


@pytest.mark.parametrize("message", list(WRONG_INDUCTION))
def test_induction_score_names_each_mistake(message):
    feedback = ch11.check_induction_score(WRONG_INDUCTION[message])
    assert not feedback.passed and feedback.attempted
    assert str(feedback).startswith(f"{FAIL_MARK} induction_score: on the sequence ")
    assert message in feedback.message, feedback.message


def test_induction_score_says_which_sequence_and_shows_it_as_letters():
    feedback = ch11.check_induction_score(WRONG_INDUCTION["you counted only key t - period + 1"])
    assert "E J E R E C E J" in feedback.message and "(period 6, 4 heads)" in feedback.message, feedback.message


def test_induction_score_hard_coded_for_the_first_sequence_fails_on_the_second():
    first = {}

    def memorised(w, x, p):
        if not first:
            first["answer"] = induction_solution(w, x, p)
        return first["answer"][: w.shape[0]]

    feedback = ch11.check_induction_score(memorised)
    assert not feedback.passed and "(period 5, 3 heads)" in feedback.message, feedback.message


def test_induction_score_unknown_error_gives_the_largest_difference():
    feedback = ch11.check_induction_score(lambda w, x, p: induction_solution(w, x, p) + 0.01)
    assert not feedback.passed and "wrong values (largest difference 0.01)" in feedback.message, feedback.message


def test_induction_score_stub_and_crash():
    feedback = ch11.check_induction_score(_stub)
    assert not feedback.passed and not feedback.attempted
    assert str(feedback).startswith(f"{TODO_MARK} induction_score: not attempted yet")
    crash = ch11.check_induction_score(lambda w, x, p: w[:, :, p + 100])
    assert not crash.passed and "your function raised IndexError" in crash.message


def test_induction_mistakes_are_told_apart_on_the_first_sequence():
    # the checker drops a mistake that equals the right answer: on the first sequence none may
    generator = torch.Generator().manual_seed(11)
    period, segment, T, H = ch11.INDUCTION_CASES[0]
    weights, tokens = ch11._induction_case(generator, period, segment, T, H)
    expected = induction_scores(weights[None], tokens[None], torch.tensor([period]))
    assert torch.allclose(induction_solution(weights, tokens, period), expected, atol=1e-6)
    for message, wrong in ch11._induction_mistakes(weights, tokens, period).items():
        assert (wrong - expected).abs().max() > 0.01, message
    assert torch.allclose(torch.triu(weights, 1), torch.zeros(()))  # causal, as a model's weights are
    assert (tokens == 4).sum() >= 3 * T // period  # the token 4 has several earlier occurrences


# --- check_knockout ---------------------------------------------------------------------------------------------


def _losses():
    table = ch11.knockout_table()
    return {pair: table[pair]["loss"] for pair in table if isinstance(pair, tuple)}, table


def test_knockout_passes_only_the_head_whose_removal_hurts_most():
    losses, table = _losses()
    best = max(losses, key=losses.get)
    # the shipped run's previous-token head is that head: the one the induction heads depend on
    previous = table["intact"]["previous_token"]
    assert best == divmod(int(previous.argmax()), previous.shape[1]) and best[0] == 0
    feedback = ch11.check_knockout(*best)
    assert feedback.passed, feedback
    assert f"knocking out head {best} took the held-out loss from {table['intact']['loss']:.3f} to " \
           f"{losses[best]:.3f}" in feedback.message
    assert "the layer-1 induction scores went from" in feedback.message
    assert ch11.check_knockout(best).passed  # one (layer, head) tuple works too
    assert ch11.check_knockout(np.int64(best[0]), torch.tensor(best[1])).passed


def test_knockout_reports_the_numbers_for_a_wrong_head():
    losses, table = _losses()
    best = max(losses, key=losses.get)
    for pair in losses:
        if pair == best:
            continue
        feedback = ch11.check_knockout(*pair)
        assert not feedback.passed and feedback.attempted, feedback
        assert f"took the held-out loss from {table['intact']['loss']:.3f} to {losses[pair]:.3f}" in feedback.message
        assert "Removing another head raises the loss more. Look for the previous-token head" in feedback.message
        if pair[0] == 1:  # a layer-1 head cannot change the weights of its own layer: measured, not assumed
            assert torch.equal(table[pair]["induction"][1], table["intact"]["induction"][1])
            assert "the layer-1 induction scores did not move" in feedback.message


def test_knockout_loss_is_the_library_evaluation():
    from mha_lib.induction.model import evaluate, held_out_batch, knockout_mask

    model = load_run("two_layer").model
    batch = held_out_batch()
    loss = evaluate(model, batch, knockout_mask(model, [(0, 1)]))["loss"].item()
    assert ch11.knockout_table()[0, 1]["loss"] == pytest.approx(loss, abs=1e-6)
    assert ch11.knockout_table()["intact"]["loss"] == pytest.approx(evaluate(model, batch)["loss"].item(), abs=1e-6)


def test_knockout_stub_is_not_attempted():
    for layer, head in ((..., ...), (0, ...), (..., None)):
        feedback = ch11.check_knockout(layer, head)
        assert not feedback.passed and not feedback.attempted
        assert str(feedback).startswith(f"{TODO_MARK} knockout: not attempted yet: replace the ... in `layer, head")


@pytest.mark.parametrize(("layer", "head", "phrase"), [
    (2, 0, "layer must be 0 to 1 (the model has 2 layers), got 2"),
    (-1, 0, "layer must be 0 to 1 (the model has 2 layers), got -1"),
    (0, 4, "head must be 0 to 3 (the model has 4 heads per layer), got 4"),
    (True, 0, "layer must be a whole number (an int), got bool True"),
    (0, 1.0, "head must be a whole number (an int), got float 1.0"),
    ("0", 1, "layer must be a whole number (an int), got str '0'"),
    (0, torch.tensor([1, 2]), "head must be a whole number (an int), got a tensor of shape (2,)"),
    (0, None, "give the head too: check_knockout(layer, head)"),
    ((0, 1, 2), None, "give the head too"),
], ids=["layer-high", "layer-negative", "head-high", "bool", "float", "str", "vector", "no-head", "triple"])
def test_knockout_bad_input_is_feedback(layer, head, phrase):
    feedback = ch11.check_knockout(layer, head)
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


# --- check_is_causal ----------------------------------------------------------------------------------------------


def is_causal_solution(model):
    T, V = model.task.seq_len, model.task.vocab_size
    tokens = torch.randint(0, V, (4, T), generator=torch.Generator().manual_seed(0))  # (B, T)
    with torch.no_grad():
        before = model(tokens)
        for j in range(1, T):  # change token j; outputs 0 .. j-1 must not move
            changed = tokens.clone()
            changed[:, j] = (changed[:, j] + 1) % V
            if not torch.allclose(model(changed)[:, :j], before[:, :j], atol=1e-6):
                return False
    return True


def only_the_last_token(model):
    tokens = torch.randint(0, model.task.vocab_size, (4, model.task.seq_len), generator=torch.Generator())
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % model.task.vocab_size
    with torch.no_grad():
        return torch.allclose(model(changed)[:, :-1], model(tokens)[:, :-1], atol=1e-6)


def reads_the_weights(model):
    with torch.no_grad():
        _, weights = model(torch.zeros(1, model.task.seq_len, dtype=torch.long), return_weights=True)
    return all(bool((torch.triu(w[0, 0], 1) == 0).all()) for w in weights)


def loose_tolerance(model):
    T, V = model.task.seq_len, model.task.vocab_size
    tokens = torch.randint(0, V, (4, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(tokens)
        for j in range(1, T):
            changed = tokens.clone()
            changed[:, j] = (changed[:, j] + 1) % V
            if not torch.allclose(model(changed)[:, :j], before[:, :j], atol=0.05):
                return False
    return True


def includes_the_changed_position(model):
    T, V = model.task.seq_len, model.task.vocab_size
    tokens = torch.randint(0, V, (4, T), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, 5] = (changed[:, 5] + 1) % V
    with torch.no_grad():
        return torch.equal(model(changed)[:, :6], model(tokens)[:, :6])  # position 5 itself included


WRONG_CAUSAL = {
    "always True": (lambda model: True, "said True (causal) for the shipped no_mask model"),
    "always False": (lambda model: False, "said False (not causal) for the shipped two_layer model"),
    "reads the flag": (lambda model: model.config.causal,
                       "said True (causal) for a trained causal model that peeks at a few positions"),
    "reads the weights": (reads_the_weights, "peeks at a few positions, but it is not: at positions 3, 10, 17"),
    "changes only the last token": (only_the_last_token, "peeks at a few positions"),
    "loose tolerance": (loose_tolerance, "peeks a little everywhere"),
    "includes the changed position": (includes_the_changed_position,
                                      "Did you compare the outputs at or after the changed position?"),
}


def test_is_causal_accepts_the_solution():
    feedback = ch11.check_is_causal(is_causal_solution)
    assert feedback.passed, feedback
    assert str(feedback).startswith(f"{PASS_MARK} is_causal: correct on six models")


def test_is_causal_accepts_a_bool_tensor_and_numpy_bool():
    assert ch11.check_is_causal(lambda m: torch.tensor(is_causal_solution(m)))
    assert ch11.check_is_causal(lambda m: np.bool_(is_causal_solution(m)))


@pytest.mark.parametrize("case", list(WRONG_CAUSAL))
def test_is_causal_names_the_misjudged_model(case):
    student, phrase = WRONG_CAUSAL[case]
    feedback = ch11.check_is_causal(student)
    assert not feedback.passed and feedback.attempted, feedback
    assert phrase in feedback.message, feedback.message


def _moved(model, tokens, position):
    """How much each position's logits move when token ``position`` changes: ``(T,)``."""
    changed = tokens.clone()
    changed[:, position] = (changed[:, position] + 1) % 32
    with torch.no_grad():
        return (model(changed) - model(tokens)).abs().amax(dim=(0, 2))  # (B, T, V) -> (T,)


def test_the_peekers_are_causal_in_their_attention_and_not_in_their_outputs():
    models = ch11._causality_models()
    assert [causal for _, _, causal, _ in models] == [True, False, True, False, False, False]
    tokens = torch.randint(0, 32, (3, 25), generator=torch.Generator().manual_seed(1))  # (B, T)
    few, everywhere = models[4][1], models[5][1]
    for peeker in (few, everywhere):
        assert peeker.config.causal
        _, weights = peeker(tokens, return_weights=True)
        assert all(torch.equal(torch.triu(w, 1), torch.zeros_like(w)) for w in weights)
        moved = _moved(peeker, tokens, 11)  # position 10 peeks at token 11 in both
        assert moved[:10].max() == 0 and moved[10] > 1e-4
    assert _moved(few, tokens, 5)[:5].max() == 0  # position 4 does not peek in the first one ...
    assert 0 < _moved(everywhere, tokens, 5)[4] < 0.01  # ... and peeks a little in the second
    assert _moved(models[0][1], tokens, 5)[:5].max() == 0  # the shipped causal model: nothing moves, bit for bit
    assert _moved(models[1][1], tokens, 5)[:5].max() > 0.01  # no_mask: everything before moves


def test_is_causal_bad_answers_and_crash():
    feedback = ch11.check_is_causal(lambda m: 1)
    assert not feedback.passed and "return True or False (a bool), got int" in feedback.message
    feedback = ch11.check_is_causal(lambda m: torch.ones(2, dtype=torch.bool))
    assert not feedback.passed and "got a tensor of shape (2,), torch.bool" in feedback.message
    assert not ch11.check_is_causal(_stub).attempted
    crash = ch11.check_is_causal(lambda m: m(torch.zeros(1, 99, dtype=torch.long)))
    assert not crash.passed and "your function raised ValueError: tokens must have 1 to seq_len = 25" in crash.message


def test_is_causal_cannot_change_the_shipped_models():
    def vandal(model):
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        return True

    before = load_run("two_layer").model.unembed.weight.clone()
    assert not ch11.check_is_causal(vandal).passed
    assert torch.equal(ch11._causality_models()[0][1].unembed.weight, before)
    assert ch11.check_is_causal(is_causal_solution).passed
