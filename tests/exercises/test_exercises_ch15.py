"""Chapter 15's checkers: they pass the right answers written several ways, name each mistake they claim to know,
wait for the stub, and never say "correct" to a wrong or hostile answer.

Every wrong answer below is written the way a student would write it (not built from the checker's own
reference tensors), so a checker that stops recognising a mistake makes its test fail.
"""

from __future__ import annotations

import pytest
import torch

import mha_lib
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch15_where_the_attention_goes as ch15


def _stub(*args):
    raise NotImplementedError  # your code here


# --- check_sink_softmax ------------------------------------------------------------------------------------------

def sink_solution(scores, sinks):
    H, T, S = scores.shape
    column = sinks[:, None, None].expand(H, T, 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


def sink_by_hand(scores, sinks):  # the same, with the max subtracted by hand
    m = torch.maximum(scores.amax(-1, keepdim=True), sinks[:, None, None])
    e = torch.exp(scores - m)
    return e / (e.sum(-1, keepdim=True) + torch.exp(sinks[:, None, None] - m))


WRONG_SINK = {
    "the sink's column too": lambda s, z: torch.softmax(
        torch.cat([s, z[:, None, None].expand(*s.shape[:2], 1)], -1), -1),
    "your weights are the plain softmax": lambda s, z: torch.softmax(s, -1),
    "renormalised the rows": lambda s, z: (lambda w: w / w.sum(-1, keepdim=True))(sink_solution(s, z)),
    "the sink logit itself to the denominator": lambda s, z: torch.exp(s - s.amax(-1, keepdim=True)) / (
        torch.exp(s - s.amax(-1, keepdim=True)).sum(-1, keepdim=True) + z[:, None, None]),
    "overflows float32": lambda s, z: torch.exp(s) / (torch.exp(s).sum(-1, keepdim=True) + torch.exp(z)[:, None, None]),
    "softmax_with_sinks, which is this exercise's answer": lambda s, z: mha_lib.functional.softmax_with_sinks(s, z),
}


def test_sink_softmax_accepts_the_solution_written_two_ways():
    for solution in (sink_solution, sink_by_hand):
        feedback = ch15.check_sink_softmax(solution)
        assert feedback.passed, str(feedback)
    assert str(ch15.check_sink_softmax(sink_solution)) == f"{PASS_MARK} sink_softmax: correct."


@pytest.mark.parametrize("phrase", list(WRONG_SINK))
def test_sink_softmax_names_the_mistake(phrase):
    feedback = ch15.check_sink_softmax(WRONG_SINK[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert str(feedback).startswith(FAIL_MARK)


def test_sink_softmax_waits_for_the_stub():
    feedback = ch15.check_sink_softmax(_stub)
    assert not feedback.passed and not feedback.attempted and str(feedback).startswith(TODO_MARK)


def test_sink_softmax_leaves_the_library_as_it_was():
    original = mha_lib.functional.softmax_with_sinks
    ch15.check_sink_softmax(WRONG_SINK["softmax_with_sinks, which is this exercise's answer"])
    assert mha_lib.functional.softmax_with_sinks is original


def test_sink_softmax_a_sink_per_row_is_an_error_not_a_pass():
    feedback = ch15.check_sink_softmax(lambda s, z: torch.softmax(
        torch.cat([s, z[None, :, None].expand(*s.shape[:2], 1)], -1), -1)[..., :-1])
    assert not feedback.passed and feedback.attempted


# --- check_gated_output ------------------------------------------------------------------------------------------

WRONG_GATE = {
    "you multiplied by x W_gateᵀ itself": lambda h, x, w: h * (x @ w.T),
    "you added the gate": lambda h, x, w: h + torch.sigmoid(x @ w.T),
    "your gate reads the heads' output": lambda h, x, w: h * torch.sigmoid(h),
    "you returned the gate alone": lambda h, x, w: torch.sigmoid(x @ w.T),
    "you used 1 - sigmoid": lambda h, x, w: h * (1 - torch.sigmoid(x @ w.T)),
}


def test_gated_output_accepts_the_solution_written_two_ways():
    assert ch15.check_gated_output(lambda h, x, w: h * torch.sigmoid(x @ w.T)).passed
    assert ch15.check_gated_output(lambda h, x, w: h * torch.nn.functional.linear(x, w).sigmoid()).passed


@pytest.mark.parametrize("phrase", list(WRONG_GATE))
def test_gated_output_names_the_mistake(phrase):
    feedback = ch15.check_gated_output(WRONG_GATE[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


def test_gated_output_a_missing_transpose_is_an_error_not_a_pass():
    feedback = ch15.check_gated_output(lambda h, x, w: h * torch.sigmoid(x @ w))
    assert not feedback.passed and feedback.attempted


def test_gated_output_matches_the_layer_s_gate():
    torch.manual_seed(0)
    layer = mha_lib.MultiHeadAttention(8, 12, 5, 0.0, 3, gate="elementwise")
    x = torch.randn(2, 5, 8)
    heads = torch.randn(2, 5, 12)
    assert torch.allclose(heads * torch.sigmoid(x @ layer.W_gate.weight.T), heads * torch.sigmoid(layer.W_gate(x)))


# --- check_keys_read ---------------------------------------------------------------------------------------------

def keys_solution(layer_types, window, tokens):
    return torch.tensor([min(tokens, window) if kind == "sliding" else tokens for kind in layer_types])


WRONG_KEYS = {
    "every layer of yours reads all the tokens": lambda lt, w, t: torch.tensor([t] * len(lt)),
    "read window tokens even when fewer have been seen": lambda lt, w, t: torch.tensor(
        [w if k == "sliding" else t for k in lt]),
    "you swapped the kinds": lambda lt, w, t: torch.tensor([t if k == "sliding" else min(t, w) for k in lt]),
    "your full layers stop at the window too": lambda lt, w, t: torch.tensor([min(t, w)] * len(lt)),
    "read window - 1 tokens: that is what their cache keeps between steps": lambda lt, w, t: torch.tensor([min(t, w - 1) if k == "sliding" else t for k in lt]),
}


def test_keys_read_accepts_a_tensor_or_a_list_and_agrees_with_kv_cache_bytes():
    assert ch15.check_keys_read(keys_solution).passed
    assert ch15.check_keys_read(lambda lt, w, t: keys_solution(lt, w, t).tolist()).passed
    kinds = mha_lib.interleaved_layer_types(6, 2)
    per_token = 2 * 1 * 4 * 2  # K and V, G = 1, Dh = 4, 2 bytes
    assert mha_lib.kv_cache_bytes(6, 1, 4, 300, window=128, layer_types=kinds) == \
        int(keys_solution(kinds, 128, 300).sum()) * per_token


def test_keys_read_is_what_a_windowed_layer_reads_with_its_cache():
    # token by token through a KVCache, a step's weights cover the cached keys and the current one: min(t, W) of them
    torch.manual_seed(0)
    layer = mha_lib.MultiHeadAttention(8, 8, 16, 0.0, 2, window=4).eval()
    cache, x = mha_lib.KVCache(), torch.randn(1, 9, 8)
    for t in range(1, 10):
        _out, weights = layer(x[:, t - 1:t], kv_cache=cache, return_weights=True)  # (1, H, 1, keys read)
        assert int((weights[0, 0, 0] > 0).sum()) == int(keys_solution(["sliding"], 4, t)[0]) == min(t, 4)
        assert cache.seen == t


@pytest.mark.parametrize("phrase", list(WRONG_KEYS))
def test_keys_read_names_the_mistake(phrase):
    feedback = ch15.check_keys_read(WRONG_KEYS[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message


@pytest.mark.parametrize("check", [ch15.check_sink_softmax, ch15.check_gated_output, ch15.check_keys_read])
def test_every_checker_waits_for_the_stub_and_survives_hostile_answers(check):
    assert not check(_stub).attempted
    for hostile in (lambda *a: None, lambda *a: (torch.zeros(1),), lambda *a: 1 / 0, lambda *a: torch.tensor(float("nan"))):
        feedback = check(hostile)
        assert not feedback.passed and feedback.attempted, str(feedback)
    assert not check("not a function").passed
