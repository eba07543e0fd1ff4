"""``mha_lib.induction.model``: the task, the model, the scores, training and the three shipped runs (chapter 11).

Every value is asserted against something computed another way: a forward pass written here with
``F.scaled_dot_product_attention``, scores worked out by hand on hand-made attention patterns, a head zeroed in
``out_proj.weight`` instead of by the mask, generation written as a slow loop per sequence, and the numbers that
``tests/train_induction.py`` stored when it trained the shipped checkpoints.
"""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import torch
from torch.nn import functional as F

from mha_lib.induction.model import (RUNS, SEED, SNAPSHOT_STEPS, AttentionOnlyTransformer, Batch, InductionTask,
                                     TrainingLog, evaluate, generation_accuracy, induction_scores, induction_targets,
                                     knockout_mask, load_run, masked_loss, new_model, periods_to_targets,
                                     previous_token_scores, repeated_sequences, save_run, sequence, token_labels, train,
                                     train_run)

TASK = InductionTask()


@pytest.fixture(scope="module")
def runs():
    return {name: load_run(name) for name in RUNS}


@pytest.fixture(scope="module")
def held_out():
    """The held-out batch ``train`` evaluates on (its seed + 10,000): the stored log's numbers come from it."""
    return repeated_sequences(TASK, 256, torch.Generator().manual_seed(SEED + 10_000))


def _change(tokens: torch.Tensor, position: int) -> torch.Tensor:
    changed = tokens.clone()
    changed[:, position] = (changed[:, position] + 1 + position) % TASK.vocab_size  # a different token there
    return changed


# --- causality -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["untrained", "shipped"])
def test_a_causal_model_never_lets_a_later_token_change_an_earlier_output(which, runs):
    model = new_model("two_layer", seed=3) if which == "untrained" else runs["two_layer"].model
    generator = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, TASK.vocab_size, (8, TASK.seq_len), generator=generator)  # (B, T)
    with torch.no_grad():
        before = model(tokens)
        for position in torch.randint(1, TASK.seq_len, (12,), generator=generator).tolist():
            after = model(_change(tokens, position))
            # bit for bit: the masked weights are exactly 0, so the changed keys and values add exactly nothing
            assert torch.equal(after[:, :position], before[:, :position]), position
            assert (after[:, position:] - before[:, position:]).abs().max() > 1e-3  # the change itself is seen


@pytest.mark.parametrize("which", ["untrained", "shipped"])
def test_a_model_without_the_mask_lets_later_tokens_change_earlier_outputs(which, runs):
    model = new_model("no_mask", seed=3) if which == "untrained" else runs["no_mask"].model
    tokens = torch.randint(0, TASK.vocab_size, (8, TASK.seq_len), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        before = model(tokens)
        for position in (1, 7, 24):
            moved = (model(_change(tokens, position)) - before)[:, :position].abs().amax(dim=(0, 2))  # (position,)
            assert (moved > 1e-4).all(), (position, moved)  # every earlier position reads it


# --- scores on hand-made attention patterns -------------------------------------------------------------------------


def _pattern(T: int, keys) -> torch.Tensor:
    """``(1, 1, T, T)`` weights with all of query t's weight on key ``keys(t)`` (a one-head, one-sequence batch)."""
    weights = torch.zeros(1, 1, T, T)
    for t in range(T):
        weights[0, 0, t, keys(t)] = 1.0
    return weights


def _uniform_causal(T: int) -> torch.Tensor:
    return (torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None])[None, None]  # row t: 1/(t+1) on keys 0..t


def _scores(weights, letters: str):
    batch = sequence(token_labels_to_ids(letters))
    return (previous_token_scores(weights, batch.tokens, batch.periods).item(),
            induction_scores(weights, batch.tokens, batch.periods).item(), batch)


def token_labels_to_ids(letters: str) -> list[int]:
    ids = [ord(c) - ord("A") for c in letters.replace(" ", "")]
    assert token_labels(ids) == list(letters.replace(" ", ""))
    return ids


def test_a_perfect_previous_token_head_scores_one_and_its_induction_score_is_worked_out():
    # period 4, four different tokens: the previous key t-1 holds x[t-1], never x[t-2] = x[t]... no target
    prev, ind, batch = _scores(_pattern(10, lambda t: max(t - 1, 0)), "ABCD ABCD AB")
    assert batch.periods.item() == 4 and prev == 1.0 and ind == 0.0
    # period 2: x[t-2] = x[t] always, so key t-1 is itself an induction target: both scores are 1
    prev, ind, batch = _scores(_pattern(8, lambda t: max(t - 1, 0)), "AB AB AB AB")
    assert batch.periods.item() == 2 and prev == 1.0 and ind == 1.0


def test_a_perfect_induction_head_scores_one_and_no_previous_token():
    # query t looks at t - p + 1, the token after the earlier occurrence of x[t] (before the repeat: key 0)
    prev, ind, batch = _scores(_pattern(12, lambda t: max(t - 5 + 1, 0)), "ABCDE ABCDE AB")
    assert batch.periods.item() == 5 and ind == 1.0 and prev == 0.0
    # the same head, its weight split between two earlier occurrences when the token appears twice: still 1
    T, weights = 10, torch.zeros(1, 1, 10, 10)
    tokens = token_labels_to_ids("ABAC ABAC AB")  # A at 0, 2, 4, 6, 8: several earlier occurrences
    for t in range(T):
        targets = [s for s in range(1, t + 1) if tokens[s - 1] == tokens[t]] or [0]
        weights[0, 0, t, targets] = 1.0 / len(targets)
    assert induction_scores(weights, torch.tensor([tokens]), torch.tensor([4])).item() == pytest.approx(1.0)


def test_uniform_causal_attention_gives_the_hand_computed_scores():
    # A B C A B C A, p = 3: queries 3, 4, 5; each has one target (s = 1, 2, 3) and weight 1/(t+1) on every key
    prev, ind, _ = _scores(_uniform_causal(7), "ABC ABC A")
    expected = float((Fraction(1, 4) + Fraction(1, 5) + Fraction(1, 6)) / 3)  # 37/180
    assert prev == pytest.approx(expected, abs=1e-7) and ind == pytest.approx(expected, abs=1e-7)


def test_uniform_causal_attention_with_several_earlier_occurrences():
    # A B A C A B A C A B, p = 4, queries 4 .. 8: A (t=4) has targets s = 1, 3; B (5): 2; A (6): 1, 3, 5;
    # C (7): 4; A (8): 1, 3, 5, 7
    _, ind, batch = _scores(_uniform_causal(10), "ABAC ABAC AB")
    expected = float((Fraction(2, 5) + Fraction(1, 6) + Fraction(3, 7) + Fraction(1, 8) + Fraction(4, 9)) / 5)
    assert ind == pytest.approx(expected, abs=1e-7)
    targets = induction_targets(batch.tokens)[0]
    assert targets[8].nonzero().flatten().tolist() == [1, 3, 5, 7]
    assert not targets.triu(1).any()  # never a key after the query


def test_scores_average_over_every_predictable_query_of_the_batch_pooled():
    # two sequences: p = 2 (queries 2 .. 8: 7 of them) and p = 4 (queries 4 .. 8: 5 of them), T = 10
    tokens = torch.tensor([token_labels_to_ids("AB AB AB AB AB"), token_labels_to_ids("ABCD ABCD AB")])
    weights = torch.cat([_pattern(10, lambda t: max(t - 1, 0))] * 2)  # previous-token heads, (2, 1, T, T)
    ind = induction_scores(weights, tokens, torch.tensor([2, 4]))
    assert ind.shape == (1,) and ind.item() == pytest.approx(7 / 12)  # 7 queries score 1, 5 score 0
    stacked = torch.stack([weights, weights])  # (L, B, H, T, T): one score per layer
    assert previous_token_scores(stacked, tokens, torch.tensor([2, 4])).shape == (2, 1)


# --- the task ----------------------------------------------------------------------------------------------------


def test_repeated_sequences_repeat_with_their_period_and_mark_the_predictable_tokens():
    batch = repeated_sequences(TASK, 2000, torch.Generator().manual_seed(1))
    B, T = batch.tokens.shape
    assert (B, T) == (2000, TASK.seq_len) and batch.tokens.dtype == torch.int64
    for b in range(0, B, 97):
        p = int(batch.periods[b])
        x = batch.tokens[b]
        assert torch.equal(x[p:], x[:-p]), b  # x[t] = x[t - p]
        assert batch.targets[b].tolist() == [p <= t < T - 1 for t in range(T)]
    assert sorted(batch.periods.unique().tolist()) == list(range(TASK.min_period, TASK.max_period + 1))
    assert 0 <= batch.tokens.min() and batch.tokens.max() < TASK.vocab_size
    # some segments hold a token twice (drawn with replacement): the previous token must be read exactly
    assert any(len(set(batch.tokens[b, : int(batch.periods[b])].tolist())) < int(batch.periods[b]) for b in range(50))


def test_repeated_sequences_are_the_same_for_the_same_seed():
    first = repeated_sequences(TASK, 16, torch.Generator().manual_seed(7))
    second = repeated_sequences(TASK, 16, torch.Generator().manual_seed(7))
    other = repeated_sequences(TASK, 16, torch.Generator().manual_seed(8))
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first.tokens, other.tokens)


def test_sequence_finds_the_period_and_matches_periods_to_targets():
    batch = sequence([3, 1, 4, 3, 1, 4, 3])
    assert batch.periods.tolist() == [3] and batch.tokens.shape == (1, 7)
    assert torch.equal(batch.targets, periods_to_targets(torch.tensor([3]), 7))
    assert batch.targets[0].tolist() == [False, False, False, True, True, True, False]


# --- the model -----------------------------------------------------------------------------------------------------


def _hand_forward(model: AttentionOnlyTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """Embeddings + each layer's attention (SDPA on the layer's own weights) added to the stream, then unembed."""
    B, T = tokens.shape
    x = model.token_embedding.weight[tokens] + model.position_embedding.weight[:T]  # (B, T, D)
    for layer in model.layers:
        H, Dh = layer.num_heads, layer.head_dim

        def heads(t):
            return t.view(B, T, H, Dh).transpose(1, 2)  # (B, T, D) -> (B, H, T, Dh)

        q, k, v = (heads(x @ W.weight.T) for W in (layer.W_query, layer.W_key, layer.W_value))
        context = F.scaled_dot_product_attention(q, k, v, is_causal=model.config.causal)  # (B, H, T, Dh)
        context = context.transpose(1, 2).reshape(B, T, H * Dh)  # (B, H, T, Dh) -> (B, T, D)
        x = x + context @ layer.out_proj.weight.T + layer.out_proj.bias
    return x @ model.unembed.weight.T  # (B, T, D) -> (B, T, V)


@pytest.mark.parametrize("name", RUNS)
def test_the_model_is_embeddings_plus_attention_layers_plus_unembedding(name, runs):
    tokens = torch.randint(0, TASK.vocab_size, (4, TASK.seq_len), generator=torch.Generator().manual_seed(2))
    model = runs[name].model
    with torch.no_grad():
        logits, weights = model(tokens, return_weights=True)
        assert torch.allclose(logits, _hand_forward(model, tokens), atol=1e-4)
        assert len(weights) == model.num_layers and weights[0].shape == (4, 4, TASK.seq_len, TASK.seq_len)
        assert torch.allclose(model(tokens[:, :9]), logits[:, :9], atol=1e-5) == model.config.causal


@pytest.mark.parametrize("pair", [(0, 0), (0, 3), (1, 2)])
def test_head_mask_zeroes_exactly_the_chosen_head(pair, runs):
    model = runs["two_layer"].model
    layer, head = pair
    tokens = torch.randint(0, TASK.vocab_size, (4, TASK.seq_len), generator=torch.Generator().manual_seed(3))
    edited = copy.deepcopy(model)
    Dh = edited.layers[layer].head_dim
    with torch.no_grad():
        edited.layers[layer].out_proj.weight[:, head * Dh:(head + 1) * Dh] = 0.0  # the head's columns of W_O
        masked = model(tokens, head_mask=knockout_mask(model, [pair]))
        assert torch.allclose(masked, edited(tokens), atol=1e-5)
        assert (masked - model(tokens)).abs().max() > 1e-3  # the head did something
        per_sequence = torch.ones(4, 2, 4)
        per_sequence[1, layer, head] = 0.0  # (B, L, H): knocked out in sequence 1 only
        mixed = model(tokens, head_mask=per_sequence)
        assert torch.allclose(mixed[1], masked[1], atol=1e-6) and torch.allclose(mixed[0], model(tokens)[0], atol=1e-6)


# --- the shipped checkpoints ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RUNS)
def test_each_checkpoint_reproduces_its_stored_numbers(name, runs, held_out):
    run = runs[name]
    assert run.name == name and isinstance(run.log, TrainingLog)
    assert run.log.steps[-1] == 3000 and len(run.log.loss) == 3000
    result = evaluate(run.model, held_out)
    assert result["loss"].item() == pytest.approx(run.log.eval_loss[-1], abs=1e-5)
    assert torch.allclose(result["previous_token"], torch.tensor(run.log.previous_token[-1]), atol=1e-5)
    assert torch.allclose(result["induction"], torch.tensor(run.log.induction[-1]), atol=1e-5)
    assert torch.allclose(run.log.scores("induction")[-1], result["induction"], atol=1e-5)


def test_the_two_layer_run_keeps_its_snapshots_and_learned_the_task(runs):
    run = runs["two_layer"]
    assert sorted(run.snapshots) == list(SNAPSHOT_STEPS)
    assert run.log.eval_loss[0] > 3.0 and run.log.eval_loss[-1] < 0.1
    assert runs["one_layer"].log.eval_loss[-1] > 1.0  # one layer cannot do it
    assert runs["no_mask"].log.eval_loss[-1] < 0.01  # reads the answer from the future


def test_knocking_out_the_previous_token_head_breaks_the_induction_heads(runs, held_out):
    model = runs["two_layer"].model
    intact = evaluate(model, held_out)
    previous = intact["previous_token"][0]  # layer 0, (H,)
    head = int(previous.argmax())  # found from the data, not assumed
    assert previous[head] > 0.9
    out = evaluate(model, held_out, knockout_mask(model, [(0, head)]))
    assert out["loss"] > 1.5 > 0.1 > intact["loss"]
    assert out["induction"][1].max() < 0.5 < intact["induction"][1].min()  # every induction head lost its target
    assert head != 0 and previous[0] < 0.5  # so head (0, 0) is another kind of head ...
    other = evaluate(model, held_out, knockout_mask(model, [(0, 0)]))
    assert other["loss"] < 0.1  # ... and the model does without it


def test_save_run_and_load_run_round_trip(tmp_path, runs, monkeypatch):
    import mha_lib.induction.model as induction

    monkeypatch.setattr(induction, "CHECKPOINTS", tmp_path)
    save_run(runs["one_layer"], tmp_path / "one_layer.pt")
    again = load_run("one_layer")
    assert again.log == runs["one_layer"].log
    state, shipped = again.model.state_dict(), runs["one_layer"].model.state_dict()
    assert all(torch.equal(state[k], shipped[k]) for k in shipped)
    with pytest.raises(FileNotFoundError, match="two_layer.pt is missing: run `python tests/train_induction.py`"):
        load_run("two_layer")


# --- training -----------------------------------------------------------------------------------------------------


def test_training_is_deterministic_for_a_seed():
    def run(seed):
        model = new_model("two_layer")
        log, snapshots = train(model, 40, seed=seed, eval_every=20, eval_size=16, snapshot_steps=(0, 20))
        return model, log, snapshots

    (a, log_a, snap_a), (b, log_b, _), (c, _, _) = run(0), run(0), run(1)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert log_a.loss == log_b.loss and log_a.steps == [0, 20, 40] and len(log_a.loss) == 40
    assert not torch.equal(a.unembed.weight, c.unembed.weight)  # another seed, other data
    assert torch.equal(snap_a[0]["unembed.weight"], new_model("two_layer").unembed.weight)  # step 0: untrained
    assert log_a.loss[-1] < log_a.loss[0]


def test_a_short_train_run_matches_the_shipped_step_60_snapshot(runs):
    # On the machine that trained the checkpoints the weights match bit for bit (measured: largest difference 0.0).
    # Another CPU may round its matmuls differently. Measured here: a 1-ulp random change of every initial
    # weight grows to at most 5.3e-6 after 60 steps (8 ulp: 2.5e-5), so 1e-4 allows for rounding differences
    # at every step yet still fails for any real change (another seed or learning rate moves weights by ~1e-2).
    run = train_run("two_layer", 60, snapshot_steps=(60,))
    mine, shipped = run.snapshots[60].state_dict(), runs["two_layer"].snapshots[60].state_dict()
    gap = max((mine[k] - shipped[k]).abs().max().item() for k in shipped)
    assert gap <= 1e-4, f"step-60 weights differ from the shipped snapshot by {gap:.3g}"
    assert run.log.loss == runs["two_layer"].log.loss[:60] or gap > 0


# --- generation -----------------------------------------------------------------------------------------------------


def _generate_slowly(model, batch: Batch) -> float:
    """Each sequence alone: its first copy plus one token given, then one token at a time from the model."""
    right = total = 0
    T = batch.tokens.shape[1]
    with torch.no_grad():
        for b in range(batch.tokens.shape[0]):
            written = batch.tokens[b].tolist()
            for t in range(T - 1):
                if batch.targets[b, t]:
                    written[t + 1] = int(model(torch.tensor([written[: t + 1]]))[0, -1].argmax())
                    right += written[t + 1] == int(batch.tokens[b, t + 1])
                    total += 1
    return right / total


def test_generation_accuracy_equals_a_slow_loop_and_exposes_the_model_without_mask(runs):
    batch = repeated_sequences(TASK, 12, torch.Generator().manual_seed(5))
    causal = generation_accuracy(runs["two_layer"].model, batch)
    assert causal["generated"].item() == pytest.approx(_generate_slowly(runs["two_layer"].model, batch), abs=1e-7)
    assert causal["generated"] > 0.9
    no_mask = generation_accuracy(runs["no_mask"].model, batch)
    assert no_mask["teacher_forced"] > 0.99 and no_mask["generated"] < 0.4  # reads the future, cannot write it
    assert no_mask["generated"].item() == pytest.approx(_generate_slowly(runs["no_mask"].model, batch), abs=1e-7)


# --- bad input --------------------------------------------------------------------------------------------------------

_W = torch.softmax(torch.randn(2, 4, 25, 25), dim=-1)  # (B, H, T, T)
_B = repeated_sequences(TASK, 2, torch.Generator().manual_seed(0))
_MODEL = new_model("two_layer")

BAD_INPUT = [
    (lambda: InductionTask(vocab_size="32"), TypeError, "vocab_size must be a positive int"),
    (lambda: InductionTask(min_period=8, max_period=6), ValueError, "min_period and max_period must satisfy"),
    (lambda: InductionTask(seq_len=20), ValueError, "seq_len must be at least 2 \\* max_period \\+ 1 = 25"),
    (lambda: token_labels("abc"), TypeError, "tokens must be token ids"),
    (lambda: token_labels([[1, 2]]), ValueError, "tokens must be one sequence of token ids"),
    (lambda: token_labels([99]), ValueError, "tokens must be ids in \\[0, 31\\], got \\[99\\]"),
    (lambda: repeated_sequences("task", 4), TypeError, "task must be an InductionTask, got str"),
    (lambda: repeated_sequences(TASK, 0), ValueError, "batch_size must be a positive int"),
    (lambda: repeated_sequences(TASK, 4, 5), TypeError, "generator must be a torch.Generator or None, got int"),
    (lambda: periods_to_targets([5], 25), TypeError, "periods must be a torch.Tensor, got list"),
    (lambda: periods_to_targets(torch.tensor([[5]]), 25), ValueError, "periods must be a 1-D integer tensor"),
    (lambda: periods_to_targets(torch.tensor([5]), "25"), TypeError, "T must be a positive int"),
    (lambda: sequence("ABAB"), TypeError, "tokens must be token ids"),
    (lambda: sequence([1.5, 2.5, 1.5]), TypeError, "tokens must be integer token ids, got torch.float32"),
    (lambda: sequence([[1, 2], [1, 2]]), ValueError, "tokens must be one sequence of token ids, got shape \\(2, 2\\)"),
    (lambda: sequence([1, 2, 3]), ValueError, "tokens must repeat a segment"),
    (lambda: sequence([40, 41, 40, 41], TASK), ValueError, "tokens must hold token ids in \\[0, 31\\]"),
    (lambda: sequence([1, 2, 1, 2], task="t"), TypeError, "task must be an InductionTask or None, got str"),
    (lambda: AttentionOnlyTransformer("t"), TypeError, "task must be an InductionTask, got str"),
    (lambda: AttentionOnlyTransformer(TASK, num_heads=3), ValueError, "must be divisible by num_heads"),
    (lambda: AttentionOnlyTransformer(TASK, num_layers=0), ValueError, "num_layers must be a positive int"),
    (lambda: AttentionOnlyTransformer(TASK, causal=1), TypeError, "causal must be True or False, got int 1"),
    (lambda: _MODEL([[1, 2]]), TypeError, "tokens must be a torch.Tensor, got list"),
    (lambda: _MODEL(torch.zeros(1, 5)), ValueError, "tokens must be an int64 tensor of shape \\(B, T\\)"),
    (lambda: _MODEL(torch.zeros(5, dtype=torch.long)), ValueError, "tokens must be an int64 tensor of shape"),
    (lambda: _MODEL(torch.zeros(1, 26, dtype=torch.long)), ValueError, "tokens must have 1 to seq_len = 25"),
    (lambda: _MODEL(torch.full((1, 5), 32)), ValueError, "tokens must hold token ids in \\[0, 31\\]"),
    (lambda: _MODEL(_B.tokens, head_mask=torch.ones(3, 4)), ValueError, "head_mask must have shape \\(2, 4\\)"),
    (lambda: _MODEL(_B.tokens, head_mask=[[1.0]]), TypeError, "head_mask must be a tensor"),
    (lambda: _MODEL(_B.tokens, return_weights=1), TypeError, "return_weights must be True or False"),
    (lambda: knockout_mask("m", [(0, 0)]), TypeError, "model must be an AttentionOnlyTransformer"),
    (lambda: knockout_mask(_MODEL, 3), TypeError, "heads must be a list of \\(layer, head\\) pairs"),
    (lambda: knockout_mask(_MODEL, [(0,)]), TypeError, "heads must be \\(layer, head\\) pairs of ints"),
    (lambda: knockout_mask(_MODEL, [(0, True)]), TypeError, "heads must be \\(layer, head\\) pairs of ints"),
    (lambda: knockout_mask(_MODEL, [(0, 4)]), ValueError, "heads: \\(0, 4\\) is not a head of this model"),
    (lambda: knockout_mask(_MODEL, [(-1, 0)]), ValueError, "heads: \\(-1, 0\\) is not a head"),
    (lambda: induction_scores([1], _B.tokens, _B.periods), TypeError, "weights must be a torch.Tensor"),
    (lambda: induction_scores(_W[0, 0], _B.tokens, _B.periods), ValueError, "weights must have shape \\(B, H, T, T\\)"),
    (lambda: induction_scores(_W.long(), _B.tokens, _B.periods), TypeError, "weights must be a floating-point"),
    (lambda: induction_scores(_W, _B.tokens[:1], _B.periods), ValueError, "tokens must have shape \\(B, T\\) matching"),
    (lambda: induction_scores(_W, _B.tokens, _B.periods.float()), ValueError, "periods must be an integer tensor"),
    (lambda: induction_scores(_W, _B.tokens, torch.tensor([5, 24])), ValueError,
     "periods must be in \\[1, T - 2 = 23\\]"),
    (lambda: previous_token_scores(_W, _B.tokens, torch.tensor([0, 5])), ValueError, "periods must be in \\[1,"),
    (lambda: previous_token_scores(_W[0], _B.tokens, _B.periods), ValueError, "tokens must have shape \\(B, T\\)"),
    (lambda: induction_targets([[1, 2]]), TypeError, "tokens must be a torch.Tensor"),
    (lambda: induction_targets(torch.tensor([1, 2])), ValueError, "tokens must be an integer tensor of shape"),
    (lambda: TrainingLog().scores("x"), ValueError, "kind must be 'previous_token' or 'induction', got 'x'"),
    (lambda: masked_loss("x", _B), TypeError, "logits must be a torch.Tensor"),
    (lambda: masked_loss(torch.zeros(2, 25), _B), ValueError, "logits must be 3-D \\(B, T, V\\)"),
    (lambda: masked_loss(torch.zeros(3, 25, 32), _B), ValueError, "logits must have shape \\(B, T, V\\)"),
    (lambda: masked_loss(torch.zeros(2, 25, 32), "b"), TypeError, "batch must be a Batch"),
    (lambda: evaluate("m", _B), TypeError, "model must be an AttentionOnlyTransformer"),
    (lambda: evaluate(_MODEL, (_B.tokens,)), TypeError, "batch must be a Batch .*, got tuple"),
    (lambda: evaluate(_MODEL, Batch(_B.tokens, _B.periods[:1], _B.targets)), ValueError, "batch must hold tokens"),
    (lambda: evaluate(_MODEL, _B, torch.ones(3)), ValueError, "head_mask must have shape"),
    (lambda: train("m", 5), TypeError, "model must be an AttentionOnlyTransformer"),
    (lambda: train(_MODEL, 0), ValueError, "steps must be a positive int"),
    (lambda: train(_MODEL, 5, batch_size=0), ValueError, "batch_size must be a positive int"),
    (lambda: train(_MODEL, 5, lr="x"), TypeError, "lr must be a positive float, got str"),
    (lambda: train(_MODEL, 5, lr=-1.0), ValueError, "lr must be a finite float > 0, got -1.0"),
    (lambda: train(_MODEL, 5, seed=1.5), TypeError, "seed must be an int in \\[0, 2\\*\\*64 - 1\\]"),
    (lambda: train(_MODEL, 5, eval_every=0), ValueError, "eval_every must be a positive int"),
    (lambda: train(_MODEL, 5, eval_size=0), ValueError, "eval_size must be a positive int"),
    (lambda: train(_MODEL, 5, callback=3), TypeError, "callback must be a function callback\\(step, log\\) or None"),
    (lambda: train(_MODEL, 5, snapshot_steps=3), TypeError, "snapshot_steps must be a list of steps"),
    (lambda: train(_MODEL, 5, snapshot_steps=["a"]), TypeError, "snapshot_steps must be an int, got str"),
    (lambda: train(_MODEL, 5, snapshot_steps=[-1]), ValueError, "snapshot_steps must be an int in \\[0, inf\\]"),
    (lambda: generation_accuracy("m", _B), TypeError, "model must be an AttentionOnlyTransformer"),
    (lambda: generation_accuracy(_MODEL, "b"), TypeError, "batch must be a Batch"),
    (lambda: new_model("x"), ValueError, "name must be one of \\['two_layer', 'one_layer', 'no_mask'\\], got 'x'"),
    (lambda: new_model("two_layer", task="t"), TypeError, "task must be an InductionTask, got str"),
    (lambda: new_model("two_layer", seed="0"), TypeError, "seed must be an int"),
    (lambda: train_run("x", 5), ValueError, "name must be one of"),
    (lambda: train_run("two_layer", 0), ValueError, "steps must be a positive int"),
    (lambda: save_run("r", "/nonexistent/x.pt"), TypeError,
     "run must be a Run \\(what train_run or load_run returns\\)"),
    (lambda: load_run("x"), ValueError, "name must be one of"),
]


@pytest.mark.parametrize(("call", "error", "message"), BAD_INPUT, ids=[f"{i:02d}-{m[:30]}" for i, (_, _, m) in
                                                                       enumerate(BAD_INPUT)])
def test_bad_input_raises_an_error_that_names_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_bad_training_arguments_fail_before_any_step():
    model = new_model("two_layer")
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match="eval_every"):
        train(model, 5, eval_every=0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
