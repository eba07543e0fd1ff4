"""Every exercise checker against hostile or unlucky student functions: it must never crash, never say "correct"
to a wrong answer, never blame a correct one, and never report a finished function as "not attempted".

The checkers all go through ``mha_lib.exercises.attempt`` and ``compare``; these tests hold each chapter's checker
to that, one hostile function at a time, so that a checker that bypasses them is caught.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import mha_lib
from mha_lib import CausalAttention, causal_mask, explicit_attention, masked_softmax, merge_heads, split_heads
from mha_lib.exercises import Feedback, attempt, compare
from mha_lib.exercises import ch01_single_head as ch01
from mha_lib.exercises import ch02_stacking_heads as ch02
from mha_lib.exercises import ch03_weight_splitting as ch03
from mha_lib.exercises import ch04_scaling as ch04
from mha_lib.exercises import ch05_causal_masking as ch05
from mha_lib.exercises import ch06_softmax as ch06
from mha_lib.exercises import ch07_output_projection as ch07
from mha_lib.exercises import ch08_putting_it_together as ch08
from mha_lib.exercises import ch09_efficiency as ch09
from mha_lib.exercises import ch11_heads_learn as ch11
from mha_lib.exercises import ch12_sharing_keys_and_values as ch12
from mha_lib.exercises import ch14_attention_at_scale as ch14
from mha_lib.exercises import ch15_where_the_attention_goes as ch15
from mha_lib.exercises import ch16_a_state_instead_of_a_cache as ch16


# --- one correct solution per checker, written as a student would -------------------------------------------


def online_softmax(scores, values, block_size):
    m, l, o = torch.tensor(float("-inf")), torch.zeros(()), torch.zeros(values.shape[-1])
    for j in range(0, scores.shape[0], block_size):
        s, v = scores[j:j + block_size], values[j:j + block_size]  # (b,), (b, Dv)
        m_new = torch.maximum(m, s.max())
        factor, w = torch.exp(m - m_new), torch.exp(s - m_new)
        l, o, m = factor * l + w.sum(), factor * o + w @ v, m_new
    return o / l


def single_head(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (T, Dh) each
    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v


def scaled_head_scores(x, w_q, w_k, num_heads):
    q, k = split_heads(x @ w_q, num_heads), split_heads(x @ w_k, num_heads)  # (B, H, T, Dh)
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def lean(q, k, v):
    return explicit_attention(q, k, v, is_causal=True)


class Wrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


def induction_score(weights, tokens, period):
    T = tokens.shape[0]
    previous = torch.cat([tokens.new_tensor([-1]), tokens[:-1]])  # x[s-1], (T,)
    targets = (previous[None, :] == tokens[:, None]).tril()  # (T, S): s <= t and x[s-1] == x[t]
    return (weights * targets).sum(-1)[:, period: T - 1].mean(-1)  # (H, T) -> (H,)


def is_causal(model):
    T, V = model.task.seq_len, model.task.vocab_size
    tokens = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(0))  # (B, T)
    with torch.no_grad():
        before = model(tokens)
        for j in range(1, T):
            changed = tokens.clone()
            changed[:, j] = (changed[:, j] + 1) % V
            if not torch.allclose(model(changed)[:, :j], before[:, :j], atol=1e-6):
                return False
    return True


def wrapper_returning(transform):
    """The correct wrapper class, whose forward's output goes through ``transform`` (complex, sparse, ...)."""

    class Hostile(Wrapper):
        def forward(self, x):
            return transform(super().forward(x))

    return Hostile


# checker, correct solution, what it returns: "tensor", "mask" (bool), "pair" (context, weights), "count", "class",
# "verdict" (True or False)
CHECKERS = {
    "ch01.attention_weights": (ch01.check_attention_weights,
                               lambda q, k: torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, -1), "tensor"),
    "ch01.single_head": (ch01.check_single_head, single_head, "tensor"),
    "ch02.wrapper": (ch02.check_wrapper, Wrapper, "class"),
    "ch03.split_heads": (ch03.check_split_heads, lambda x, h: split_heads(x, h), "tensor"),
    "ch03.merge_heads": (ch03.check_merge_heads, lambda heads: merge_heads(heads), "tensor"),
    "ch03.stack_head_weights": (ch03.check_stack_head_weights, lambda ws: torch.cat(ws, dim=0), "tensor"),
    "ch04.softmax_jacobian": (ch04.check_softmax_jacobian, lambda p: torch.diag(p) - torch.outer(p, p), "tensor"),
    "ch04.scaled_head_scores": (ch04.check_scaled_head_scores, scaled_head_scores, "tensor"),
    "ch05.causal_weights": (ch05.check_causal_weights,
                            lambda s: masked_softmax(s, causal_mask(s.shape[-1])), "tensor"),
    "ch05.padded_causal_mask": (ch05.check_padded_causal_mask,
                                lambda kpm, T: causal_mask(T) & ~kpm[:, None, None, :], "mask"),
    "ch06.stable_softmax": (ch06.check_stable_softmax, lambda x: torch.softmax(x, dim=-1), "tensor"),
    "ch06.softmax_temperature": (ch06.check_softmax_temperature, lambda x, t: torch.softmax(x / t, -1), "tensor"),
    "ch06.weight_dropout": (ch06.check_weight_dropout, lambda w, keep, p: w * keep / (1 - p), "tensor"),
    "ch07.output_projection": (ch07.check_output_projection,
                               lambda c, w, b: merge_heads(c) @ w.T + b, "tensor"),
    "ch07.parameter_count": (ch07.check_parameter_count, lambda d, h, bias: 4 * d * d + 4 * d * bias, "count"),
    "ch08.attention_forward": (ch08.check_attention_forward, lambda layer, x: ch08.forward_variant(layer, x),
                               "tensor"),
    "ch09.lean_attention": (ch09.check_lean_attention, lean, "pair"),
    "ch11.induction_score": (ch11.check_induction_score, induction_score, "tensor"),
    "ch11.is_causal": (ch11.check_is_causal, is_causal, "verdict"),
    "ch12.expand_kv": (ch12.check_expand_kv, lambda k, h: k.repeat_interleave(h // k.shape[1], dim=1), "tensor"),
    "ch12.cache_bytes": (ch12.check_cache_bytes, lambda c, t, b: c.n_layers * 2 * c.num_kv_heads * c.head_dim * (
        t if c.window is None else min(t, c.window)) * b, "count"),
    # ch14.needed_tiles takes only ints (nothing to zero or wreck): its hostile cases are in test_exercises_ch14.py
    "ch14.online_softmax": (ch14.check_online_softmax, online_softmax, "tensor"),
    "ch14.absorbed_query": (ch14.check_absorbed_query, lambda q, w: torch.einsum("bhtn,hnr->bhtr", q, w), "tensor"),
    "ch15.sink_softmax": (ch15.check_sink_softmax, lambda s, z: torch.softmax(
        torch.cat([s, z[:, None, None].expand(*s.shape[:2], 1)], dim=-1), dim=-1)[..., :-1], "tensor"),
    "ch15.gated_output": (ch15.check_gated_output, lambda h, x, w: h * torch.sigmoid(x @ w.T), "tensor"),
    # ch15.keys_read takes only ints and names (nothing to zero or wreck): its hostile cases are in
    # test_exercises_ch15.py
}
ALL = list(CHECKERS)
RETURNING_TENSORS = [name for name, (_, _, kind) in CHECKERS.items() if kind in ("tensor", "pair", "class")]


def hostile(name: str, transform):
    """The correct solution of checker ``name`` with its result passed through ``transform``."""
    _, solution, kind = CHECKERS[name]
    if kind == "class":
        return wrapper_returning(transform)
    if kind == "pair":
        return lambda *args: tuple(transform(t) for t in solution(*args))
    return lambda *args: transform(solution(*args))


def verdict_of(name: str, student) -> Feedback:
    check, _, _ = CHECKERS[name]
    feedback = check(student)
    assert isinstance(feedback, Feedback), f"{name} returned {type(feedback).__name__}, not a Feedback"
    return feedback


def assert_wrong(feedback: Feedback, *phrases: str) -> None:
    assert not feedback.passed and feedback.attempted, str(feedback)
    for phrase in phrases:
        assert phrase in feedback.message, str(feedback)


# --- the solutions pass (the baseline every hostile case departs from) ---------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_the_correct_solution_passes(name):
    feedback = verdict_of(name, CHECKERS[name][1])
    assert feedback.passed, str(feedback)


# --- not a usable function ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("thing", [42, "my_function", None, torch.ones(3)], ids=["int", "str", "None", "tensor"])
def test_a_non_callable_gives_feedback_not_an_exception(name, thing):
    assert_wrong(verdict_of(name, thing), "expected your function itself", type(thing).__name__,
                 "check(my_function), not check(my_function(...))")


@pytest.mark.parametrize("name", [n for n in ALL if CHECKERS[n][2] != "class"])
def test_a_function_with_the_wrong_number_of_parameters_gives_feedback(name):
    assert_wrong(verdict_of(name, lambda a, b, c, d, e, f: None), "cannot be called the way the exercise calls it")
    assert_wrong(verdict_of(name, lambda: None), "cannot be called the way the exercise calls it")


def test_a_class_with_the_wrong_constructor_gives_feedback():
    class NoArguments(nn.Module):
        def __init__(self):
            super().__init__()

    assert_wrong(verdict_of("ch02.wrapper", NoArguments), "cannot be called the way the exercise calls it",
                 "unexpected keyword argument")


# --- exceptions ----------------------------------------------------------------------------------------------


def _raise(error, name: str = ""):
    """A function that raises ``error``; for the class exercise, a class whose constructor raises it."""

    def student(*args, **kwargs):
        raise error

    if name and CHECKERS[name][2] == "class":
        return type("Raising", (nn.Module,), {"__init__": lambda self, *a, **k: student()})
    return student


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("error", [SystemExit(3), ZeroDivisionError("division by zero"), RecursionError("deep"),
                                   GeneratorExit(), MemoryError()], ids=lambda e: type(e).__name__)
def test_any_exception_becomes_feedback(name, error):
    student = _raise(error, name)
    assert_wrong(verdict_of(name, student), f"your function raised {type(error).__name__}")


@pytest.mark.parametrize("name", ALL)
def test_keyboard_interrupt_still_stops_the_cell(name):
    student = _raise(KeyboardInterrupt(), name)
    with pytest.raises(KeyboardInterrupt):
        verdict_of(name, student)


@pytest.mark.parametrize("name", RETURNING_TENSORS)
def test_a_not_implemented_error_from_torch_is_a_real_error_not_a_stub(name):
    # torch raises NotImplementedError for operations sparse tensors lack: the function was attempted
    def sparse_softmax_crash(t):
        return t.to_sparse().exp_() if t.is_floating_point() else t

    feedback = verdict_of(name, hostile(name, sparse_softmax_crash))
    assert_wrong(feedback, "your function raised NotImplementedError")


@pytest.mark.parametrize("name", ALL)
def test_a_stub_with_a_note_is_still_not_attempted(name):
    student = _raise(NotImplementedError("TODO: my code goes here"), name)
    feedback = verdict_of(name, student)
    assert not feedback.passed and not feedback.attempted and "not attempted yet" in feedback.message


# --- answers that are not an ordinary real dense tensor --------------------------------------------------------


@pytest.mark.parametrize("name", RETURNING_TENSORS)
def test_a_complex_answer_is_refused(name):
    feedback = verdict_of(name, hostile(name, lambda t: t.to(torch.complex64)))
    assert_wrong(feedback, "complex")


@pytest.mark.parametrize("name", RETURNING_TENSORS + ["ch05.padded_causal_mask"])
def test_a_sparse_answer_is_refused_as_attempted(name):
    feedback = verdict_of(name, hostile(name, lambda t: t.to_sparse()))
    assert_wrong(feedback, "sparse tensor", ".to_dense()")
    assert "not attempted" not in feedback.message


def test_the_complex_and_sparse_mask_answers_are_refused():
    assert_wrong(verdict_of("ch05.padded_causal_mask", hostile("ch05.padded_causal_mask",
                                                               lambda t: t.to(torch.complex64))), "complex")


@pytest.mark.parametrize("name", RETURNING_TENSORS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_nan_or_inf_answers_are_wrong_with_a_message(name, value):
    feedback = verdict_of(name, hostile(name, lambda t: torch.full_like(t, value)))
    assert_wrong(feedback)
    assert "NaN" in feedback.message or "nan" in feedback.message.lower() or "inf" in feedback.message


@pytest.mark.parametrize("name", RETURNING_TENSORS)
def test_an_integer_answer_is_refused_for_a_float_exercise(name):
    feedback = verdict_of(name, hostile(name, lambda t: (t * 1e6).long()))
    assert_wrong(feedback, "dtype torch.int64", "floating-point")


@pytest.mark.parametrize("name", [n for n in RETURNING_TENSORS if CHECKERS[n][2] == "tensor"])
def test_a_tuple_answer_is_refused(name):
    feedback = verdict_of(name, hostile(name, lambda t: (t, t)))
    assert_wrong(feedback)
    assert "tuple" in feedback.message


@pytest.mark.parametrize("name", [n for n in RETURNING_TENSORS if CHECKERS[n][2] == "tensor"])
def test_a_numpy_answer_is_refused(name):
    assert_wrong(verdict_of(name, hostile(name, lambda t: t.detach().numpy())), "expected a torch.Tensor, got ndarray")


# not chapter 9: there .double() is one more (T, S) tensor, which that exercise rightly counts
@pytest.mark.parametrize("name", [n for n in RETURNING_TENSORS if CHECKERS[n][2] != "pair"])
def test_an_answer_with_autograd_history_or_on_float64_still_passes(name):
    assert verdict_of(name, hostile(name, lambda t: t.double().requires_grad_()))


@pytest.mark.parametrize("name", ALL)
def test_returning_a_passing_feedback_is_not_a_pass(name):
    fake = Feedback(name, True, "correct.")
    student = hostile(name, lambda t: fake) if CHECKERS[name][2] != "count" else (lambda d, h, bias: fake)
    feedback = verdict_of(name, student)
    assert not feedback.passed, str(feedback)


class Liar(torch.Tensor):
    """A tensor subclass that answers True to every comparison and lies about its shape."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("name", [n for n in RETURNING_TENSORS if CHECKERS[n][2] == "tensor"])
def test_a_tensor_subclass_that_lies_in_comparisons_does_not_pass(name):
    feedback = verdict_of(name, hostile(name, lambda t: torch.zeros_like(t).as_subclass(Liar)))
    assert not feedback.passed, str(feedback)


@pytest.mark.parametrize("name", ["ch01.attention_weights", "ch06.stable_softmax", "ch07.output_projection"])
def test_rebinding_torch_allclose_inside_the_function_does_not_pass(name):
    original = torch.allclose

    def student(*args):
        torch.allclose = lambda *a, **k: True
        return torch.zeros(1)

    try:
        feedback = verdict_of(name, student)
    finally:
        torch.allclose = original
    assert not feedback.passed, str(feedback)


# --- inputs changed in place -----------------------------------------------------------------------------------


def _tensors(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tensors(a)
        elif isinstance(a, nn.Module):
            yield from a.parameters()


@pytest.mark.parametrize("name", [n for n in ALL if CHECKERS[n][2] not in ("class", "count")])
def test_a_correct_answer_that_then_wrecks_its_inputs_still_passes(name):
    solution = CHECKERS[name][1]

    def student(*args):
        answer = solution(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        with torch.no_grad():
            for t in _tensors(args):
                t.fill_(7) if t.dtype != torch.bool else t.fill_(True)
        return answer

    feedback = verdict_of(name, student)
    assert feedback.passed, str(feedback)


@pytest.mark.parametrize("name", [n for n in ALL if CHECKERS[n][2] not in ("class", "count")])
def test_zeroing_the_inputs_and_answering_for_zeros_is_wrong(name):
    solution = CHECKERS[name][1]

    def student(*args):
        with torch.no_grad():
            for t in _tensors(args):
                t.zero_()
        return solution(*args)

    feedback = verdict_of(name, student)
    assert not feedback.passed and "correct" not in feedback.message.split(":")[0], str(feedback)


def test_ch01_scaling_the_weights_in_place_is_correct_not_forgot_the_scaling():
    def single_head_in_place(x, w_q, w_k, w_v):
        w_q /= math.sqrt(w_q.shape[1])  # folds 1/√Dh into the query weights, in place
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return torch.softmax(q @ k.T, dim=-1) @ v

    feedback = ch01.check_single_head(single_head_in_place)
    assert feedback.passed, str(feedback)


def test_ch04_zeroing_x_and_returning_zeros_is_not_correct():
    def zeros(x, w_q, w_k, num_heads):
        x.zero_()
        return scaled_head_scores(x, w_q, w_k, num_heads)  # all zeros: "right" for the zeroed input only

    feedback = ch04.check_scaled_head_scores(zeros)
    assert_wrong(feedback, "wrong values")


def test_a_random_student_leaves_the_notebooks_random_state_dtype_and_grad_mode_alone():
    def messy(q, k):
        torch.manual_seed(999)
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        return torch.rand(1)

    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    ch01.check_attention_weights(messy)
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
    assert torch.equal(torch.rand(3), expected)


# --- chapter 7's numbers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "phrase"), [
    (10**400, "a number of 401 digits"),
    (-(10**30), "you returned"),
    (math.nan, "a parameter count is a finite whole number"),
    (math.inf, "a parameter count is a finite whole number"),
    (2.5, "not a whole number"),
    ("2362368", "expected a number (an int), got str"),
    (True, "expected a number (an int), got bool"),
    (torch.tensor([1, 2]), "expected a number (an int), got Tensor"),
    (torch.tensor(1 + 2j), "expected a number (an int), got Tensor"),
    (None, "expected a number (an int), got NoneType"),
], ids=["huge", "negative", "nan", "inf", "fraction", "str", "bool", "vector", "complex", "None"])
def test_parameter_count_answers_that_are_not_counts(answer, phrase):
    assert_wrong(ch07.check_parameter_count(lambda d, h, bias: answer), phrase)


@pytest.mark.parametrize("kind", [int, float, np.int64, torch.tensor], ids=["int", "float", "numpy", "tensor"])
def test_parameter_count_accepts_the_right_number_in_any_numeric_type(kind):
    assert ch07.check_parameter_count(lambda d, h, bias: kind(4 * d * d + 4 * d * bias))


# --- compare() never names a mistake that equals the right answer ---------------------------------------------


def test_compare_never_names_a_mistake_equal_to_the_expected_answer():
    expected = torch.eye(3)
    mistakes = {"you forgot the scaling": torch.eye(3).clone(), "you transposed": 2 * torch.eye(3)}
    assert compare("x", torch.eye(3), expected, mistakes=mistakes).passed
    wrong = compare("x", 3 * torch.eye(3), expected, mistakes=mistakes)
    assert not wrong.passed and "forgot the scaling" not in wrong.message
    assert compare("x", 2 * torch.eye(3), expected, mistakes=mistakes).message == "you transposed"


def test_attempt_copies_every_tensor_it_hands_over():
    x, weights = torch.ones(2), [torch.ones(2)]
    layer = nn.Linear(2, 2)
    before = layer.weight.detach().clone()

    def vandal(x, weights, layer):
        x.zero_()
        weights[0].zero_()
        with torch.no_grad():
            layer.weight.zero_()
        return "done"

    assert attempt("copy", vandal, x, weights, layer) == "done"
    assert torch.equal(x, torch.ones(2)) and torch.equal(weights[0], torch.ones(2))
    assert torch.equal(layer.weight, before)


# --- chapter 11: a verdict (True or False) and a (layer, head) pair instead of a tensor -------------------------


class LyingBool(torch.Tensor):
    """A bool tensor subclass that answers True to every comparison."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.Tensor.__eq__, torch.Tensor.__bool__):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize(("answer", "phrase"), [
    ("True", "got str"), (1, "got int"), (math.nan, "got float"), (None, "got NoneType"), ((True,), "got tuple"),
    (torch.tensor([True, True]), "got a tensor of shape (2,)"), (torch.tensor(1.0), "got a tensor of shape ()"),
    (torch.tensor(True).to_sparse(), "got a tensor of shape ()"),
    (torch.empty((), dtype=torch.bool, device="meta"), "got a tensor of shape ()"),
    (np.array([True, False]), "got ndarray"),
], ids=["str", "int", "nan", "None", "tuple", "vector", "float-tensor", "sparse", "meta", "ndarray"])
def test_ch11_is_causal_answers_that_are_not_verdicts(answer, phrase):
    assert_wrong(ch11.check_is_causal(lambda model: answer), "return True or False (a bool)", phrase)


def test_ch11_is_causal_a_lying_bool_tensor_does_not_pass():
    feedback = ch11.check_is_causal(lambda model: torch.tensor(True).as_subclass(LyingBool))
    assert not feedback.passed, str(feedback)


def test_ch11_is_causal_a_student_who_reseeds_or_trains_the_model_changes_nothing():
    def trainer(model):
        torch.manual_seed(123)
        optimizer = torch.optim.SGD(model.parameters(), lr=10.0)
        model(torch.zeros(1, 5, dtype=torch.long)).sum().backward()
        optimizer.step()  # wrecks the private copy only
        return True

    assert_wrong(ch11.check_is_causal(trainer), "for the shipped no_mask model")
    assert ch11.check_is_causal(is_causal)


@pytest.mark.parametrize(("layer", "head", "phrase"), [
    (10**100, 0, "layer must be 0 to 1"),
    (0, math.nan, "head must be a whole number (an int), got float nan"),
    (0, math.inf, "head must be a whole number (an int), got float inf"),
    (0, 1 + 2j, "head must be a whole number (an int), got complex"),
    (0, torch.tensor(1 + 2j), "head must be a whole number (an int), got a tensor of shape ()"),
    (0, torch.tensor(True), "head must be a whole number (an int), got a tensor of shape ()"),
    (0, torch.tensor(3.0), "head must be a whole number (an int), got a tensor of shape ()"),
    (0, np.float64(3.0), "head must be a whole number (an int), got float64"),
    (torch.empty((), dtype=torch.long, device="meta"), 0, "layer must be a whole number (an int), got a tensor"),
    (torch.tensor(0).to_sparse(), 0, "layer must be a whole number (an int), got a tensor"),
    ([0, 3], 1, "layer must be a whole number (an int), got list"),
], ids=["huge", "nan", "inf", "complex", "complex-tensor", "bool-tensor", "float-tensor", "numpy-float", "meta",
        "sparse", "list"])
def test_ch11_knockout_hostile_heads_are_feedback_never_a_pass(layer, head, phrase):
    feedback = ch11.check_knockout(layer, head)
    assert_wrong(feedback, phrase)


def test_ch11_knockout_a_lying_tensor_index_does_not_pass_unless_it_is_the_head():
    table = ch11.knockout_table()
    losses = {pair: table[pair]["loss"] for pair in table if isinstance(pair, tuple)}
    best = max(losses, key=losses.get)
    wrong_head = (best[1] + 1) % table["num_heads"]
    assert not ch11.check_knockout(best[0], torch.tensor(wrong_head).as_subclass(Liar)).passed


# --- ch08: the layer's own forward, reached any way, is refused like layer(x) (issue 19 §6) -----------------


def _forward_via_copy(layer, x):
    import copy

    twin = copy.deepcopy(layer)
    for name in ("forward", "_check_return_weights", "_attend", "_padding_mask"):
        twin.__dict__.pop(name, None)  # undo the checker's refusals on the copy
    return twin(x)


def _forward_via_new_layer(layer, x):
    twin = mha_lib.MultiHeadAttention(layer.d_in, layer.d_out, layer.context_length, 0.0, layer.num_heads,
                                      qkv_bias=True).eval()
    twin.load_state_dict(layer.state_dict())
    return twin(x)


SAVED_FORWARD = mha_lib.MultiHeadAttention.forward  # a reference kept before the checker runs


@pytest.mark.parametrize("cheat", [
    lambda layer, x: layer(x),
    lambda layer, x: layer.forward(x),
    lambda layer, x: type(layer).forward(layer, x),
    lambda layer, x: mha_lib.MultiHeadAttention.forward(layer, x),
    lambda layer, x: super(type(layer), layer).__call__(x),
    lambda layer, x: SAVED_FORWARD(layer, x),
    lambda layer, x: nn.Module.__call__(layer, x),
    lambda layer, x: mha_lib.fused_from_split(layer)(x),
    _forward_via_copy,
    _forward_via_new_layer,
], ids=["call", "forward", "type-forward", "class-forward", "super-call", "saved-forward", "module-call",
        "fused-copy", "deepcopy", "new-layer"])
def test_ch08_the_layers_forward_is_refused_however_it_is_reached(cheat):
    feedback = ch08.check_attention_forward(cheat)
    assert_wrong(feedback, ch08.CALLED_LAYER)


def test_ch08_refusing_the_forward_leaves_every_layer_working_afterwards():
    ch08.check_attention_forward(lambda layer, x: type(layer).forward(layer, x))
    assert ch08.check_attention_forward(CHECKERS["ch08.attention_forward"][1]).passed
    layer = mha_lib.MultiHeadAttention(6, 6, 4, 0.0, 2).eval()
    fused = mha_lib.fused_from_split(layer)
    x = torch.randn(1, 4, 6)
    torch.testing.assert_close(fused(x), layer(x))


# --- chapter 12: the config is the DecoderAttention itself; chapter 14: no one-line shortcut passes ----------------


@pytest.mark.parametrize("solution", [
    lambda c, t, b: (lambda L, H, G, Dh, D, ctx, W, r, dr, kinds, linear: L * 2 * G * Dh * (t if W is None else min(t, W)) * b)(
        *c),
    lambda c, t, b: c[0] * 2 * c[2] * c[3] * (t if c[6] is None else min(t, c[6])) * b,
    lambda c, t, b: c._asdict()["n_layers"] * 2 * c.num_kv_heads * c.head_dim * (
        t if c._replace(d_model=0).window is None else min(t, c.window)) * b,
    lambda c, t, b: c.n_layers * c.cache_numbers_per_token * (t if c.window is None else min(t, c.window)) * b,
], ids=["unpacked", "indexed", "asdict-replace", "numbers-per-token"])
def test_ch12_cache_bytes_a_correct_answer_that_uses_the_config_as_a_namedtuple_passes(solution):
    assert isinstance(mha_lib.DECODER_CONFIGS["llama-3-8b"], mha_lib.DecoderAttention)
    feedback = ch12.check_cache_bytes(solution)
    assert feedback.passed, str(feedback)


@pytest.mark.parametrize(("shortcut", "called"), [
    (lambda c, t, b: c.kv_cache_bytes(t, bytes_per_element=b), "config.kv_cache_bytes"),
    (lambda c, t, b: mha_lib.kv_cache_bytes(c.n_layers, c.num_kv_heads, c.head_dim, t, bytes_per_element=b,
                                            window=c.window), "mha_lib.kv_cache_bytes"),
    (lambda c, t, b: mha_lib.sizes.kv_cache_bytes(c.n_layers, c.num_kv_heads, c.head_dim, t), "mha_lib.kv_cache_bytes"),
], ids=["method", "function", "wrong-use"])
def test_ch12_cache_bytes_calling_kv_cache_bytes_is_refused_as_the_exercise_says(shortcut, called):
    # the notebook: "Do not call kv_cache_bytes"; the config is a real DecoderAttention, whose method is one dot away
    assert_wrong(ch12.check_cache_bytes(shortcut), f"your function called {called}, which the exercise asks you not "
                                                   f"to do: multiply the config's sizes yourself")


def test_ch12_cache_bytes_leaves_no_profiler_behind():
    import sys

    before = sys.getprofile()
    ch12.check_cache_bytes(lambda c, t, b: c.kv_cache_bytes(t, bytes_per_element=b))
    ch12.check_cache_bytes(_raise(ZeroDivisionError("x")))
    assert sys.getprofile() is before


def _query_of_ones(scores):
    return torch.ones(1, 1), scores[:, None]  # q·k = the score: attention over them is softmax(scores) @ values


@pytest.mark.parametrize("cheat", [
    lambda s, v, b: torch.nn.functional.scaled_dot_product_attention(*_query_of_ones(s), v, scale=1.0)[0],
    lambda s, v, b: torch._C._nn.scaled_dot_product_attention(*_query_of_ones(s), v, scale=1.0)[0],
    lambda s, v, b: torch.ops.aten.scaled_dot_product_attention.default(*_query_of_ones(s), v, scale=1.0)[0],
    lambda s, v, b: mha_lib.sdpa_attention(*_query_of_ones(s), v, scale=1.0)[0][0],
    lambda s, v, b: mha_lib.flash_attention(*_query_of_ones(s), v, scale=1.0, block_size=b)[0],
    lambda s, v, b: mha_lib.flash_attention(*_query_of_ones(s), v, scale=1.0, block_size=b, return_lse=True)[0][0],
    lambda s, v, b: mha_lib.explicit_attention(*_query_of_ones(s), v, scale=1.0)[0][0],
    lambda s, v, b: torch._softmax(s, 0, False) @ v,
    lambda s, v, b: torch._safe_softmax(s, 0) @ v,
    lambda s, v, b: torch.special.log_softmax(s, 0).exp() @ v,
    lambda s, v, b: torch.nn.Softmax(dim=0)(s) @ v,
    lambda s, v, b: torch.distributions.Categorical(logits=s).probs @ v,
], ids=["F.sdpa", "C.sdpa", "aten.sdpa", "sdpa_attention", "flash_attention", "flash-lse", "explicit_attention",
        "_softmax", "_safe_softmax", "special.log_softmax", "nn.Softmax", "Categorical"])
def test_ch14_online_softmax_a_one_line_shortcut_with_right_values_is_never_correct(cheat):
    feedback = verdict_of("ch14.online_softmax", cheat)
    assert_wrong(feedback, "your function called ")
    assert "correct" not in feedback.message.split(":")[0]
