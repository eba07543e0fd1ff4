"""Checkers for chapter 11, heads that learn.

    check_induction_score(fn)    fn(weights (H, T, T), tokens (T,), period)  -> (H,) weight on the induction targets
    check_knockout(layer, head)  the head whose removal hurts the trained two-layer model most
    check_is_causal(fn)          fn(model) -> bool: no output at position t depends on a token after t

The first draws sharp causal weights from a private generator and compares with ``induction.induction_scores``,
on sequences whose segment holds a token twice (so the current token has several earlier occurrences). The
second knocks every head of the shipped ``two_layer`` run out in turn on a fixed held-out batch and reports what
the student's choice did, in numbers. The third hands the student's function six models, two of them causal, and
says which one it misjudged.
"""

from __future__ import annotations

import functools
import numbers
from typing import Callable

import torch

from ..induction.model import (AttentionOnlyTransformer, evaluate, held_out_batch, induction_scores, knockout_mask,
                               load_run, new_model)
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed, passed

Tensor = torch.Tensor

# --- exercise 11.1: the induction score -------------------------------------------------------------------------

DUPLICATE_TOKEN = N_("you summed the weight on keys holding the *same* token as the query (x[s] == x[t]): that is a "
                      "duplicate-token head. An induction head looks one step later, at the key s whose *previous* "
                      "token matches: x[s-1] == x[t].")
DUPLICATE_EARLIER = N_("you summed the weight on earlier keys holding the *same* token as the query (x[s] == x[t], "
                        "s < t): that is a duplicate-token head. An induction head looks one step later, at the key s "
                        "whose *previous* token matches: x[s-1] == x[t].")
MOST_RECENT = N_("you counted only key t - period + 1 (the token after the most recent occurrence). When the "
                  "segment holds the current token more than once, every key s <= t with x[s-1] == x[t] is a "
                  "target: sum the weight on all of them.")
ALL_QUERIES = N_("you averaged over every query, the first copy included: before position `period` the segment has "
                  "not been seen yet, so there is nothing to copy. Average over the queries period .. T-2 only.")
ALL_QUERIES_AND_LAST = N_("you averaged over every query 0 .. T-1: the first copy has nothing to copy and the last "
                           "query has no next token to predict. Average over the queries period .. T-2 only.")
LAST_QUERY = N_("you included the last query, t = T-1: it has no next token to predict, so the training loss never "
                 "asks it anything. Average over the queries period .. T-2.")
OFFSET_WRONG_WAY = N_("your key offset goes the wrong way: you matched x[s+1] == x[t] (the key *before* an earlier "
                       "occurrence). The token to copy comes *after* it: match x[s-1] == x[t].")
MEAN_OVER_TARGETS = N_("you averaged the weight over each query's targets instead of adding it up: the score is the "
                        "*total* weight a query puts on its targets (1 when all of it sits there).")
PREVIOUS_TOKEN = N_("that is the previous-token score, w[t, t-1]: the layer-0 pattern. The induction score is the "
                     "weight on the keys s whose previous token equals the current one, x[s-1] == x[t].")
NOT_PER_HEAD = N_("return one score per head, shape (H,): average over the queries, keep the heads.")

# (period, the segment) of each case; the first segment holds the token 4 three times
INDUCTION_CASES = ((6, [4, 9, 4, 17, 4, 2], 25, 4), (5, None, 25, 3), (11, None, 23, 2))


def _sharp_causal_weights(generator: torch.Generator, H: int, T: int) -> Tensor:
    """Softmax weights ``(H, T, T)`` with nothing above the diagonal, sharper than uniform (a few bright keys)."""
    scores = torch.randn(H, T, T, generator=generator) * 2.5
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T), True where s > t
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)


def _induction_case(generator: torch.Generator, period: int, segment, T: int, H: int) -> tuple[Tensor, Tensor]:
    if segment is None:
        segment = torch.randint(0, 32, (period,), generator=generator).tolist()
    tokens = torch.tensor([segment[t % period] for t in range(T)])  # x[t] = segment[t mod p], (T,)
    return _sharp_causal_weights(generator, H, T), tokens


def _induction_mistakes(weights: Tensor, tokens: Tensor, period: int) -> dict[str, Tensor]:
    H, T, _ = weights.shape
    t = torch.arange(T)
    none = torch.tensor([-1])
    previous = torch.cat([none, tokens[:-1]])  # x[s-1], -1 at s = 0: (T,)
    following = torch.cat([tokens[1:], none])  # x[s+1], -1 at s = T-1: (T,)
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, S), s <= t
    targets = (previous[None, :] == tokens[:, None]) & causal  # (T, S)

    def mean(keys: Tensor, queries: Tensor) -> Tensor:
        per_query = (weights * keys.to(weights.dtype)).sum(-1)  # (H, T, S) -> (H, T)
        return per_query[:, queries].mean(-1)  # (H,)

    right = (t >= period) & (t <= T - 2)  # the predictable queries
    same = tokens[None, :] == tokens[:, None]  # (T, S): x[s] == x[t]
    most_recent = (t[None, :] == t[:, None] - period + 1)  # key t - p + 1 only
    per_target = (weights * targets).sum(-1) / targets.sum(-1).clamp(min=1)  # (H, T): mean over each row's targets
    return {
        DUPLICATE_TOKEN: mean(same & causal, right),
        DUPLICATE_EARLIER: mean(same & causal.tril(-1), right),
        MOST_RECENT: mean(most_recent, right),
        ALL_QUERIES: mean(targets, t <= T - 2),
        ALL_QUERIES_AND_LAST: mean(targets, t >= 0),
        LAST_QUERY: mean(targets, t >= period),
        OFFSET_WRONG_WAY: mean((following[None, :] == tokens[:, None]) & causal, right),
        MEAN_OVER_TARGETS: per_target[:, right].mean(-1),
        PREVIOUS_TOKEN: mean(t[None, :] == t[:, None] - 1, right),
    }


def check_induction_score(student_fn: Callable[[Tensor, Tensor, int], Tensor]) -> Feedback:
    """``student_fn(weights, tokens, period)``: the induction score of each head, ``(H,)``.

    ``weights`` ``(H, T, T)``: one sequence, all heads of one layer; ``tokens`` ``(T,)`` int64; ``period`` an int.
    For each query ``t`` with ``period <= t <= T-2``, the total weight on the keys ``s <= t`` with
    ``x[s-1] == x[t]``, averaged over those queries. Checked on three sequences (one whose segment holds a token
    three times), against ``mha_lib.induction.model.induction_scores``.
    """
    name = "induction_score"
    generator = torch.Generator().manual_seed(11)
    cases = [(period, *_induction_case(generator, period, segment, T, H)) for period, segment, T, H in INDUCTION_CASES]
    for number, (period, weights, tokens) in enumerate(cases):
        # the reference first: nothing the student does afterwards can change it
        expected = induction_scores(weights[None], tokens[None], torch.tensor([period]))  # (H,)
        answer = attempt(name, student_fn, weights.clone(), tokens.clone(), period)
        if isinstance(answer, Feedback):
            return answer
        H = weights.shape[0]
        where = _("on the sequence {tokens} (period {period}, {H} heads): ").format(
            tokens=_letters(tokens), period=period, H=H)
        if isinstance(answer, Tensor) and answer.shape != expected.shape:
            if answer.numel() != H:
                return failed(name, where + _("{advice} Got shape {shape}.").format(advice=_(NOT_PER_HEAD),
                                                                                   shape=tuple(answer.shape)))
            answer = answer.reshape(expected.shape)
        verdict = compare(name, answer, expected, mistakes=_induction_mistakes(weights, tokens, period), atol=1e-6)
        if not verdict:
            return failed(name, where + verdict.message)
    return passed(name, N_("correct: the total weight on every key after an earlier occurrence of the current token, "
                           "averaged over the predictable queries (three sequences, one with a token three times in "
                           "its segment)."))


def _letters(tokens: Tensor) -> str:
    from ..induction.model import token_labels

    return " ".join(token_labels(tokens))


# --- exercise 11.2: the head to knock out -----------------------------------------------------------------------

BAD_HEAD = N_("{argument} must be a whole number (an int), got {kind}. Call check_knockout(layer, head), e.g. (0, 1).")
OUT_OF_RANGE = N_("{argument} must be 0 to {high} (the model has {count}), got {value}. Layers and heads count from 0.")
NO_HEAD = N_("give the head too: check_knockout(layer, head), both counted from 0.")
NOT_CHOSEN = N_("not attempted yet: replace the ... in `layer, head = ..., ...` with the layer and the head you "
                 "chose (both counted from 0), then run this cell again.")


@functools.lru_cache(maxsize=1)
def knockout_table() -> dict:
    """The shipped ``two_layer`` run measured on the chapter's held-out batch, intact and with each head out.

    ``{"intact": result, (layer, head): result, ...}`` where each result holds the loss (float) and the
    per-head ``previous_token`` and ``induction`` scores ``(L, H)``. Computed once per session (8 evaluations).
    """
    model = load_run("two_layer").model
    batch = held_out_batch(model.task)  # the chapter's batch: the numbers match the notebook's table

    def measure(mask):
        result = evaluate(model, batch, mask)
        return {"loss": result["loss"].item(), "previous_token": result["previous_token"],
                "induction": result["induction"]}

    table = {"intact": measure(None), "num_layers": model.num_layers, "num_heads": model.num_heads}
    for layer in range(model.num_layers):
        for head in range(model.num_heads):
            table[layer, head] = measure(knockout_mask(model, [(layer, head)]))
    return table


def _as_index(argument: str, value, count: int, unit: str) -> int | str:
    """``value`` as an int index in ``0 .. count-1``, or the message a student reads."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, Tensor)):
        return _(BAD_HEAD).format(argument=argument, kind=f"{type(value).__name__} {value!r}"[:80])
    if isinstance(value, Tensor):
        if (value.numel() != 1 or value.is_floating_point() or value.is_complex() or value.dtype == torch.bool
                or value.layout is not torch.strided or value.device.type == "meta"):  # no plain value to read
            return _(BAD_HEAD).format(argument=argument, kind=_("a tensor of shape {shape}, {dtype}").format(
                shape=tuple(value.shape), dtype=value.dtype))
        value = value.item()
    value = int(value)
    if not 0 <= value < count:
        return _(OUT_OF_RANGE).format(argument=argument, high=count - 1, count=_(unit).format(count=count),
                                      value=value)
    return value


def _range(scores: Tensor) -> str:
    low, high = scores.min().item(), scores.max().item()
    return f"{low:.2f}" if round(low, 2) == round(high, 2) else f"{low:.2f}-{high:.2f}"


def _kind_of(table: dict, pair: tuple[int, int]) -> str:
    """What the measured scores say the head at ``pair`` is; empty when they single out nothing."""
    previous, induction = table["intact"]["previous_token"], table["intact"]["induction"]
    layer, head = pair
    if previous[layer, head] == previous.max() and previous[layer, head] > 0.5:
        return _("the previous-token head: the head with the highest previous-token score "
                 "({score:.2f} of its weight on the token just before)").format(score=previous[layer, head].item())
    if induction[layer, head] == induction.max() and induction[layer, head] > 0.5:
        return _("the head with the highest induction score ({score:.2f})").format(
            score=induction[layer, head].item())
    return ""


def check_knockout(layer, head=None) -> Feedback:
    """Is head ``(layer, head)`` of the shipped two-layer run the one whose removal raises the loss most?

    Knocks the head out on the chapter's held-out batch (``induction.held_out_batch``, 512 sequences), and reports the loss and the layer-1
    induction scores next to the intact model's. The right head is found by knocking out every head in turn.
    """
    name = "knockout"
    if layer is Ellipsis or head is Ellipsis:  # the notebook's stub, `layer, head = ..., ...`
        return Feedback(name, False, _(NOT_CHOSEN), attempted=False)
    if head is None and isinstance(layer, (tuple, list)) and len(layer) == 2:
        layer, head = layer  # check_knockout((0, 1)) works too
    elif head is None:
        return failed(name, NO_HEAD)
    table = knockout_table()
    L, H = table["num_layers"], table["num_heads"]
    layer = _as_index("layer", layer, L, N_("{count} layers"))
    if isinstance(layer, str):
        return failed(name, layer)
    head = _as_index("head", head, H, N_("{count} heads per layer"))
    if isinstance(head, str):
        return failed(name, head)

    intact, chosen = table["intact"], table[layer, head]
    pairs = [(l, h) for l in range(L) for h in range(H)]
    worst = max(pairs, key=lambda pair: table[pair]["loss"])
    last = L - 1
    before, after = intact["induction"][last], chosen["induction"][last]
    if torch.allclose(before, after, atol=1e-6):
        scores = (_("the layer-{last} induction scores did not move ({range})").format(last=last,
                                                                                      range=_range(before))
                  + (_(": a head cannot change the attention of its own layer, only what it writes")
                     if layer == last else ""))
    else:
        scores = _("the layer-{last} induction scores went from {before} to {after}").format(
            last=last, before=_range(before), after=_range(after))
    measured = _("knocking out head ({layer}, {head}) took the held-out loss from {intact:.3f} to {chosen:.3f}, "
                 "and {scores}.").format(layer=layer, head=head, intact=intact["loss"], chosen=chosen["loss"],
                                         scores=scores)
    if (layer, head) == worst:
        return passed(name, _("correct: {measured} No other head's removal raises the loss as much.").format(
            measured=measured))
    kind = _kind_of(table, worst)
    hint = (_("Look for {kind}.").format(kind=kind) if kind else
            _("Knock out each head in turn and compare the losses."))
    return failed(name, _("{measured} Removing another head raises the loss more. {hint}").format(
        measured=measured, hint=hint))


# --- exercise 11.3: is a model causal? --------------------------------------------------------------------------

NOT_A_BOOL = N_("return True or False (a bool), got {kind}. torch.equal(a, b) gives a bool; a comparison tensor "
                 "gives one with bool((a == b).all()).")
SAID_CAUSAL = N_("your function said True (causal) for {model}, but it is not: {why} Change one later token and "
                  "look at every earlier output.")
SAID_NOT_CAUSAL = N_("your function said False (not causal) for {model}, which is causal: changing a token never "
                      "changes an earlier output. Did you compare the outputs at or after the changed position? Only "
                      "those before it must stay the same.")

PEEK_POSITIONS = (3, 10, 17)  # where the first peeker reads the next token


class _Peeker(AttentionOnlyTransformer):
    """A causal model that adds ``amount`` × the next token's embedding to the residual stream at ``positions``.

    Its attention is causal (``config.causal`` is True, nothing above the diagonal), yet outputs at those
    positions depend on the next token: only a look at the outputs finds it out.
    """

    def __init__(self, model: AttentionOnlyTransformer, positions: tuple[int, ...] | None, amount: float):
        super().__init__(model.task, model.num_layers, model.config.d_model, model.num_heads, model.config.causal)
        self.load_state_dict(model.state_dict())
        self.positions, self.amount = positions, amount

    def forward(self, tokens, *, head_mask=None, return_weights=False):
        out = super().forward(tokens, head_mask=head_mask, return_weights=return_weights)
        logits, weights = out if return_weights else (out, None)
        T = tokens.shape[1]
        where = torch.zeros(T, dtype=torch.bool, device=logits.device)  # (T,): the positions that peek
        where[[p for p in (self.positions or range(T)) if p < T - 1]] = True
        following = torch.cat([tokens[:, 1:], tokens[:, -1:]], dim=1)  # x[t+1] (the last one: itself), (B, T)
        leak = self.unembed(self.token_embedding(following))  # (B, T) -> (B, T, D) -> (B, T, V)
        logits = logits + self.amount * leak * where[None, :, None]  # only at the peeking positions
        return (logits, weights) if return_weights else logits


@functools.lru_cache(maxsize=1)
def _causality_models() -> tuple:
    """(description, model, causal?, why it is not) for each model the checker shows a student's function.

    The texts are msgids (cached here once): the checker translates them, and fills ``{few}`` (PEEK_POSITIONS).
    """
    two_layer, no_mask = load_run("two_layer").model, load_run("no_mask").model
    return (
        (N_("the shipped two_layer model (trained with the causal mask)"), two_layer, True, ""),
        (N_("the shipped no_mask model (trained without the causal mask)"), no_mask, False,
         N_("every position reads the tokens after it.")),
        (N_("an untrained causal model"), new_model("two_layer", seed=11).eval(), True, ""),
        (N_("an untrained model without the causal mask"), new_model("no_mask", seed=11).eval(), False,
         N_("its attention sees every position, the later ones too.")),
        (N_("a trained causal model that peeks at a few positions"),
         _Peeker(two_layer, PEEK_POSITIONS, 0.05).eval(), False,
         N_("at positions {few} it adds a little of the next token's embedding to the residual stream. Its "
            "attention is causal (config.causal is True, no weight above the diagonal): only the outputs "
            "show the leak.")),
        (N_("a trained causal model that peeks a little everywhere"), _Peeker(two_layer, None, 1e-3).eval(), False,
         N_("at every position it adds 0.001 × the next token's embedding to the residual stream, a tiny change in "
            "the logits. Its attention is causal: only the outputs show the leak.")),
    )


def _as_bool(answer) -> bool | None:
    if isinstance(answer, bool):
        return answer
    if type(answer).__module__ == "numpy" and type(answer).__name__ in ("bool", "bool_"):  # numpy's bool scalar
        return bool(answer)
    if isinstance(answer, Tensor) and answer.dtype == torch.bool and answer.numel() == 1 \
            and answer.layout is torch.strided and answer.device.type != "meta":
        return bool(answer.item())
    return None


def check_is_causal(student_fn: Callable[[AttentionOnlyTransformer], bool]) -> Feedback:
    """``student_fn(model)`` must say whether ``model`` is causal: True if no output at position ``t`` depends on
    a token after ``t``. The model takes ``(B, T)`` tokens and returns ``(B, T, V)`` logits.

    Run on six models: the shipped two_layer (True) and no_mask (False) runs, untrained causal (True) and
    unmasked (False) models, and two causal models that leak the next token a little through another path.
    """
    name = "is_causal"
    for description, model, causal, why in _causality_models():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # a student who draws tokens from the global generator gets the same ones each run
            answer = attempt(name, student_fn, model)
        if isinstance(answer, Feedback):
            return answer
        verdict = _as_bool(answer)
        if verdict is None:
            kind = type(answer).__name__
            if isinstance(answer, Tensor):
                kind = _("a tensor of shape {shape}, {dtype}").format(shape=tuple(answer.shape), dtype=answer.dtype)
            return failed(name, _(NOT_A_BOOL).format(kind=kind))
        if verdict != causal:
            few = ", ".join(map(str, PEEK_POSITIONS))
            if verdict:
                return failed(name, _(SAID_CAUSAL).format(model=_(description), why=_(why).format(few=few)))
            return failed(name, _(SAID_NOT_CAUSAL).format(model=_(description)))
    return passed(name, N_("correct on six models: the two trained and two untrained ones, and two causal-looking "
                           "models that peek at the next token through the residual stream."))


__all__ = ["check_induction_score", "check_is_causal", "check_knockout", "knockout_table"]
