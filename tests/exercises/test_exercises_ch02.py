"""Chapter 2's checker: it passes a correct wrapper, names each mistake it claims to know, and waits for the stub.

The wrong wrappers below are written the way a student would write them, so a checker that stops recognising
one of them makes its test fail.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mha_lib
from mha_lib import CausalAttention
from mha_lib.exercises import FAIL_MARK, PASS_MARK, TODO_MARK
from mha_lib.exercises import ch02_stacking_heads as ch02


class Solution(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)  # H × (B, T, d_out) -> (B, T, H·d_out)


def _combining(combine):
    """A wrapper with the right heads whose forward combines their outputs with ``combine``."""

    class Wrapper(Solution):
        def forward(self, x):
            return combine([head(x) for head in self.heads])

    return Wrapper


class SameHead(Solution):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        nn.Module.__init__(self)
        self.heads = nn.ModuleList([CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)] * num_heads)


class DOutIsTotal(Solution):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out // num_heads, context_length, dropout, num_heads, qkv_bias)


class PlainList(Solution):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        nn.Module.__init__(self)
        self.heads = [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]


class ExtraLayer(Solution):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.unused = nn.Linear(2, 2)


class TwoHeadsHardCoded(Solution):
    def forward(self, x):
        return torch.cat([self.heads[0](x), self.heads[1](x)], dim=-1)


class NotAModule:
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        self.heads = [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]

    def __call__(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class Stub(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        raise NotImplementedError  # your code here


class StubForward(Solution):
    def forward(self, x):
        raise NotImplementedError  # your code here


WRONG = {
    "one and the same module": SameHead,
    "you concatenated along dim=1, the tokens": _combining(lambda outs: torch.cat(outs, dim=1)),
    "you concatenated along dim=0, the batch": _combining(lambda outs: torch.cat(outs, dim=0)),
    "you stacked the heads": _combining(lambda outs: torch.stack(outs, dim=-1)),
    "yours is torch.stack(..., dim=0)": _combining(torch.stack),
    "yours is torch.stack(..., dim=1)": _combining(lambda outs: torch.stack(outs, dim=1)),
    "you added the heads' outputs": _combining(sum),
    "you averaged the heads' outputs": _combining(lambda outs: torch.stack(outs).mean(0)),
    "you read d_out as the total width": DOutIsTotal,
    "a plain Python list hides the heads": PlainList,
    "the layer has 42 parameters instead of 36": ExtraLayer,
    "must subclass nn.Module": NotAModule,
}


def test_the_solution_and_the_library_pass():
    for cls in (Solution, mha_lib.MultiHeadAttentionWrapper):
        feedback = ch02.check_wrapper(cls)
        assert feedback.passed, feedback
        assert str(feedback).startswith(f"{PASS_MARK} wrapper: correct")


@pytest.mark.parametrize("phrase", list(WRONG))
def test_each_known_mistake_is_named(phrase):
    feedback = ch02.check_wrapper(WRONG[phrase])
    assert not feedback.passed and feedback.attempted
    assert phrase in feedback.message, feedback.message
    assert str(feedback).startswith(FAIL_MARK)


def test_a_wrong_shape_mistake_says_both_shapes():
    message = ch02.check_wrapper(WRONG["you concatenated along dim=1, the tokens"]).message
    assert message.startswith("on the book's example: ")
    assert message.endswith("(got shape (2, 12, 2), expected (2, 6, 4)).")


def test_hard_coded_head_count_fails_on_the_second_size():
    feedback = ch02.check_wrapper(TwoHeadsHardCoded)
    assert not feedback.passed
    assert feedback.message.startswith("with {'d_in': 5, 'd_out': 3, 'context_length': 7, 'dropout': 0.0, "
                                       "'num_heads': 3}, input (2, 4, 5): wrong shape: got (2, 4, 6)")


def test_heads_drawn_in_another_order_get_the_seed_hint():
    class Reversed(Solution):  # correct idea, but the weights are not the ones seed 123 gives the book's heads
        def forward(self, x):
            return torch.cat([head(x) for head in reversed(self.heads)], dim=-1)

    feedback = ch02.check_wrapper(Reversed)
    assert not feedback.passed
    assert "right shape (2, 6, 4), wrong values" in feedback.message and ch02.SEED_HINT in feedback.message


@pytest.mark.parametrize("stub", [Stub, StubForward])
def test_stubs_are_not_attempted(stub):
    feedback = ch02.check_wrapper(stub)
    assert not feedback.passed and not feedback.attempted
    assert str(feedback).startswith(f"{TODO_MARK} wrapper: not attempted yet")


def test_the_checker_leaves_the_global_random_state_alone():
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    ch02.check_wrapper(Solution)
    ch02.check_wrapper(SameHead)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_notebooks_hidden_solution_passes():
    from test_exercises_ch01 import notebook_solutions

    assert ch02.check_wrapper(notebook_solutions("02_stacking_heads.ipynb")["MyWrapper"])
