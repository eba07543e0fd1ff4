"""Checkers for chapter 16, a state instead of a cache.

    check_delta_step(fn)    fn(S, k, v, beta, g)             -> one gated delta-rule write of the state     (Dk, Dv)
    check_state_bytes(fn)   fn(config, tokens, bytes_per_el) -> bytes the linear layers' states hold        int
    check_form_for(fn)      fn(tokens, chunk_size)           -> "recurrent" or "chunked" for a call of that many
                                                                tokens

Each checker draws its own inputs, runs the student's function through ``attempt`` (private copies, every failure
turned into feedback), compares it with the library's answer (``mha_lib.delta_rule`` over one token with
``initial_state``, ``LinearAttentionSizes.state_numbers``, the rule ``GatedDeltaNet`` follows: one token runs the
recurrence) and names the mistake it reproduces; a mistake that another one, or the right answer, imitates on the
inputs is never named.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ..language import N_, gettext as _
from ..linear import delta_rule
from ..sizes import LinearAttentionSizes
from . import Feedback, attempt, compare, count_answers, failed, named_mistake, passed, shown_count

Tensor = torch.Tensor

# --- 16.1 delta_step ---------------------------------------------------------------------------------------------
NO_CORRECTION = N_("you wrote β k vᵀ, the value itself: that is linear attention's write, which piles a new value on "
                   "top of whatever the state already holds for k. The delta rule writes the correction, "
                   "β k (v − Sᵀk)ᵀ.")
DECAY_AFTER = N_("you decayed the state after the write: the new value is then multiplied by exp(g) too. Decay "
                 "first (S ← exp(g)·S), then read Sᵀk from the decayed state and write the correction.")
NO_DECAY = N_("you left out the decay: the state must first be multiplied by exp(g) (g is a log-decay, g <= 0).")
G_NOT_EXP = N_("you multiplied the state by g itself: g is the log of the decay, so the factor is exp(g), a number "
               "between 0 and 1.")
READ_UNDECAYED = N_("you decayed the state but computed the correction from the state before the decay: read Sᵀk "
                    "from exp(g)·S, the state the write is added to.")
SIGN_FLIPPED = N_("you subtracted the correction: the state moves towards v, S + β k (v − Sᵀk)ᵀ.")
NO_BETA = N_("you left out β: the correction is scaled by the step size β before it is written.")
TRANSPOSED_READ = N_("you read S k instead of Sᵀ k: the state is (Dk, Dv), so what it holds for the key k is Sᵀk "
                     "(k @ S, or S.T @ k), one number per value dimension.")
OUTER_SWAPPED = N_("your outer product is the wrong way round: the write is k δᵀ, (Dk, 1) times (1, Dv), one row per "
                   "key dimension, each a multiple of δ; you wrote δ kᵀ.")


def _step_cases():
    g = torch.Generator().manual_seed(16)
    for Dk, Dv, log_decay in ((4, 4, -0.4), (5, 3, -1.2), (3, 6, 0.0)):
        S = torch.randn(Dk, Dv, generator=g)
        k = torch.randn(Dk, generator=g)
        k = k / k.norm()  # a unit key, as the layer's L2-normalised ones
        v = torch.randn(Dv, generator=g)
        yield S, k, v, torch.tensor(0.7), torch.tensor(log_decay)


def _step_expected(S, k, v, beta, g) -> Tensor:
    """The library's answer: ``delta_rule`` over one token, starting from ``S``."""
    one = lambda x: x[None, None, None]  # (D,) -> (1, 1, 1, D); a number -> (1, 1, 1)
    _out, state = delta_rule(one(k), one(k), one(v), one(beta), g=one(g), initial_state=S[None, None],
                             output_final_state=True)
    return state[0, 0]


def _step_mistakes(S, k, v, beta, g) -> dict:
    decayed = S * g.exp()
    correction = lambda state: torch.outer(k, v - state.T @ k)
    mistakes = {
        _(NO_CORRECTION): decayed + beta * torch.outer(k, v),
        _(DECAY_AFTER): (S + beta * correction(S)) * g.exp(),
        _(NO_DECAY): S + beta * correction(S),
        _(G_NOT_EXP): S * g + beta * correction(S * g),
        _(READ_UNDECAYED): decayed + beta * correction(S),
        _(SIGN_FLIPPED): decayed - beta * correction(decayed),
        _(NO_BETA): decayed + correction(decayed),
    }
    if S.shape[0] == S.shape[1]:
        mistakes[_(TRANSPOSED_READ)] = decayed + beta * torch.outer(k, v - decayed @ k)
        mistakes[_(OUTER_SWAPPED)] = decayed + beta * torch.outer(v - decayed.T @ k, k)
    return mistakes


def _unambiguous(mistakes: dict, expected: Tensor) -> dict:
    """The mistakes that no other one (nor the right answer) imitates on these inputs."""
    def same(a: Tensor, b: Tensor) -> bool:
        return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), atol=1e-6, rtol=1e-5))
    return {message: wrong for message, wrong in mistakes.items()
            if not any(same(wrong, other) for key, other in mistakes.items() if key != message)
            and not same(wrong, expected)}


def check_delta_step(student_fn) -> Feedback:
    """16.1: ``student_fn(S, k, v, beta, g)`` must return ``exp(g)·S + β k (v − (exp(g)·S)ᵀ k)ᵀ``."""
    name = "delta_step"
    verdict = None
    for S, k, v, beta, g in _step_cases():
        expected = _step_expected(S, k, v, beta, g)
        mistakes = _unambiguous(_step_mistakes(S, k, v, beta, g), expected)
        answer = attempt(name, student_fn, S, k, v, beta, g)
        if isinstance(answer, Feedback):
            return answer
        verdict = compare(name, answer, expected, mistakes=mistakes)
        if not verdict:
            return verdict
    return verdict


# --- 16.2 state_bytes --------------------------------------------------------------------------------------------
TIMES_TOKENS = N_("you multiplied by the number of tokens: a state does not grow with the context. Each layer keeps "
                  "one Dk × Dv matrix per value head, after 10 tokens as after 100,000.")
ALL_LAYERS = N_("you counted every layer: only the layers whose layer_types entry is \"linear_attention\" keep a "
                "state; the \"full_attention\" layers keep a KV cache instead (not asked here).")
KEY_HEADS = N_("you counted the key heads: there is one state per value head (linear_num_value_heads), and Qwen3-Next "
               "has twice as many value heads as key heads.")
TWO_STATES = N_("you counted two matrices per head, as a KV cache keeps K and V: a linear-attention head keeps one "
                "state, Dk × Dv.")
SQUARE_STATE = N_("your state is not Dk × Dv: a head's state maps a key (linear_key_head_dim numbers) to a value "
                  "(linear_value_head_dim numbers).")
BITS = N_("you counted bits: multiply by bytes_per_element, not by 8 × bytes_per_element.")


def hybrid_config(layer_types, num_key_heads, num_value_heads, key_head_dim, value_head_dim):
    """A stand-in for transformers' ``Qwen3NextConfig`` with the fields this exercise reads."""
    return SimpleNamespace(layer_types=list(layer_types), num_hidden_layers=len(layer_types),
                           linear_num_key_heads=num_key_heads, linear_num_value_heads=num_value_heads,
                           linear_key_head_dim=key_head_dim, linear_value_head_dim=value_head_dim)


STATE_CASES = (  # (config, tokens, bytes per element)
    (("linear_attention",) * 3 + ("full_attention",), 16, 32, 128, 128, 32768, 2),  # Qwen3-Next's pattern, 4 layers
    (("linear_attention", "full_attention") * 3, 2, 4, 16, 32, 1000, 4),  # Dk ≠ Dv, float32 as transformers keeps
    (("full_attention",) + ("linear_attention",) * 4, 3, 3, 8, 4, 7, 2),
)


def _state_case(case):
    kinds, Hk, Hv, Dk, Dv, tokens, b = case
    return hybrid_config(kinds, Hk, Hv, Dk, Dv), tokens, b


def _state_expected(config, b: int) -> int:
    sizes = LinearAttentionSizes(config.linear_num_key_heads, config.linear_num_value_heads,
                                 config.linear_key_head_dim, config.linear_value_head_dim, conv_size=None)
    return config.layer_types.count("linear_attention") * sizes.state_numbers * b


def _state_mistakes(config, tokens: int, b: int) -> dict:
    n = config.layer_types.count("linear_attention")
    Hk, Hv = config.linear_num_key_heads, config.linear_num_value_heads
    Dk, Dv = config.linear_key_head_dim, config.linear_value_head_dim
    right = n * Hv * Dk * Dv * b
    return {TIMES_TOKENS: right * tokens, ALL_LAYERS: len(config.layer_types) * Hv * Dk * Dv * b,
            KEY_HEADS: n * Hk * Dk * Dv * b, TWO_STATES: 2 * right,
            SQUARE_STATE: n * Hv * Dk * Dk * b, BITS: 8 * right}


def check_state_bytes(student_fn) -> Feedback:
    """16.2: ``student_fn(config, tokens, bytes_per_element)`` must return the bytes of every linear-attention
    layer's state: ``(number of "linear_attention" layers) × Hv × Dk × Dv × bytes_per_element``, whatever
    ``tokens`` is."""
    name = "state_bytes"
    cases = [_state_case(c) for c in STATE_CASES]
    expected = [_state_expected(config, b) for config, _t, b in cases]  # before any call
    answers = count_answers(name, student_fn, cases)
    if isinstance(answers, Feedback):
        return answers
    if answers == expected:
        return passed(name, N_("correct: Qwen3-Next's pattern keeps the same state bytes at 32,768 tokens as at one "
                               "token; only its full-attention layers' KV cache grows."))
    mistake = named_mistake(answers, expected, [_state_mistakes(*case) for case in cases])
    if mistake:
        return failed(name, mistake)
    i = next(i for i, (value, right) in enumerate(zip(answers, expected)) if value != right)
    config, tokens, b = cases[i]
    return failed(name, _("for layer_types {kinds}, {Hv} value heads, Dk = {Dk}, Dv = {Dv}, tokens={tokens}, "
                          "bytes_per_element={b} you returned {shown}, expected {expected}.").format(
        kinds=config.layer_types, Hv=config.linear_num_value_heads, Dk=config.linear_key_head_dim,
        Dv=config.linear_value_head_dim, tokens=tokens, b=b, shown=shown_count(answers[i]),
        expected=f"{expected[i]:,}"))


# --- 16.3 form_for -----------------------------------------------------------------------------------------------
FORMS = ("recurrent", "chunked")
NOT_A_FORM = N_("return one of the strings \"recurrent\" or \"chunked\", got {got}.")
CHUNKED_FOR_ONE = N_("for a single token you chose \"chunked\": the chunked form would pad that token to a chunk of "
                     "{C} (with {pad} zero tokens) and solve a {C} × {C} system for one row. The recurrence does one "
                     "update of the state: \"recurrent\" (what GatedDeltaNet and transformers do for a decode step).")
RECURRENT_FOR_LONG = N_("for {T} tokens at once you chose \"recurrent\": {T} small updates one after the other. The "
                        "chunked form gives the same answer in {n} chunks of matrix products, which is what a prompt "
                        "(prefill) or training uses: \"chunked\".")
FORM_CASES = ((1, 64), (4096, 64), (1, 16), (512, 64), (64, 64))  # (tokens, chunk_size); 2 .. C - 1: either is fine


def check_form_for(student_fn) -> Feedback:
    """16.3: ``student_fn(tokens, chunk_size)`` must return ``"recurrent"`` for one token and ``"chunked"`` for
    ``tokens >= chunk_size`` (in between, both forms are reasonable and not checked)."""
    name = "form_for"
    for tokens, C in FORM_CASES:
        answer = attempt(name, student_fn, tokens, C)
        if isinstance(answer, Feedback):
            return answer
        if not isinstance(answer, str) or answer not in FORMS:
            got = repr(answer) if isinstance(answer, str) and len(answer) < 40 else type(answer).__name__
            return failed(name, _(NOT_A_FORM).format(got=got))
        if tokens == 1 and answer == "chunked":
            return failed(name, _(CHUNKED_FOR_ONE).format(C=C, pad=C - 1))
        if tokens >= C and answer == "recurrent":
            return failed(name, _(RECURRENT_FOR_LONG).format(T=f"{tokens:,}", n=f"{-(-tokens // C):,}"))
    return passed(name, N_("correct: one token, one update of the state; a long prompt, chunks of matrix products. "
                           "Both forms give the same output and the same final state."))


__all__ = ["check_delta_step", "check_form_for", "check_state_bytes", "hybrid_config"]
