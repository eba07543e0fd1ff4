"""Checkers for chapter 2, several independent heads concatenated (the wrapper of Raschka's book).

    check_wrapper(cls)   cls(d_in, d_out, context_length, dropout, num_heads) -> a module whose forward(x)
                         returns the heads' outputs side by side, (B, T, num_heads * d_out)

The student's class is built right after ``torch.manual_seed(123)``, as in the book, with one
``mha_lib.CausalAttention`` per head. It must then print the book's numbers; when it does not, the checker
rebuilds the usual mistakes under the same seed and names the one the answer reproduces. The notebook's random
state is restored afterwards (``torch.random.fork_rng``), so checking does not change the cells that follow.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..data import journey_batch
from ..modules import CausalAttention, MultiHeadAttentionWrapper
from ..language import N_, gettext as _
from . import Feedback, attempt, compare, failed, passed

Tensor = torch.Tensor

BOOK_SEED = 123

# What a student reads; the tests assert these texts. Messages that can come with a wrong shape have no final
# period: compare() appends "(got shape ..., expected ...)." to them.
SAME_HEAD = N_("all your heads are one and the same module ([CausalAttention(...)] * num_heads repeats one object), "
                "so every head gives the same output. Create a new CausalAttention in each loop iteration.")
CAT_TOKENS = N_("you concatenated along dim=1, the tokens: the heads' outputs go side by side on the features, dim=-1")
CAT_BATCH = N_("you concatenated along dim=0, the batch: the heads' outputs go side by side on the features, dim=-1")
STACKED = N_("you stacked the heads (torch.stack adds a new dimension) instead of concatenating them: "
              "torch.cat(..., dim=-1) keeps (B, T, ·) and widens the last dimension")
KEEP_COLUMNS = N_("concatenate them with torch.cat(..., dim=-1) so that each head keeps its own columns")
SUMMED = f"you added the heads' outputs: {KEEP_COLUMNS}"  # English; shown as _summed() / _averaged()
AVERAGED = f"you averaged the heads' outputs: {KEEP_COLUMNS}"
D_OUT_TOTAL = N_("each of your heads is d_out // num_heads wide: you read d_out as the total width, as "
                  "MultiHeadAttention does. In the wrapper d_out is the width of ONE head; the output is "
                  "num_heads * d_out wide")
NOT_REGISTERED = N_("the numbers are right, but the layer has no parameters: a plain Python list hides the heads "
                     "from .parameters(), .to(device) and the optimiser. Keep them in an nn.ModuleList.")
NOT_A_MODULE = N_("your class must subclass nn.Module (and call super().__init__() first).")
SEED_HINT = N_("Build each head with mha_lib.CausalAttention(d_in, d_out, context_length, dropout, qkv_bias), one "
                "after the other, so that torch.manual_seed(123) gives the book's weights.")


def _seeded(build: Callable[[], object]) -> object:
    """Call ``build`` right after ``torch.manual_seed(123)`` without changing the caller's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(BOOK_SEED)
        return build()


def _heads_outputs(d_in: int, d_out: int, context_length: int, num_heads: int, x: Tensor) -> list[Tensor]:
    """The outputs of the heads that the book's seed draws, one ``(B, T, d_out)`` tensor per head."""
    heads = _seeded(lambda: [CausalAttention(d_in, d_out, context_length, 0.0) for _ in range(num_heads)])
    with torch.no_grad():
        return [head(x) for head in heads]


def _mistakes(d_in: int, d_out: int, context_length: int, num_heads: int, x: Tensor) -> dict[str, Tensor]:
    outs = _heads_outputs(d_in, d_out, context_length, num_heads, x)  # H × (B, T, d_out)
    mistakes = {
        SAME_HEAD: torch.cat([outs[0]] * num_heads, dim=-1),
        CAT_TOKENS: torch.cat(outs, dim=1),  # (B, H·T, d_out)
        CAT_BATCH: torch.cat(outs, dim=0),  # (H·B, T, d_out)
        _("you added the heads' outputs: {advice}").format(advice=_(KEEP_COLUMNS)): torch.stack(outs).sum(dim=0),
        _("you averaged the heads' outputs: {advice}").format(advice=_(KEEP_COLUMNS)): torch.stack(outs).mean(dim=0),
    }
    for dim in (0, 1, 2, -1):  # every place torch.stack can put the new head axis
        mistakes[_("{stacked}; yours is torch.stack(..., dim={dim})").format(stacked=_(STACKED), dim=dim)] = \
            torch.stack(outs, dim=dim)
    if d_out % num_heads == 0:
        narrow = _heads_outputs(d_in, d_out // num_heads, context_length, num_heads, x)
        mistakes[D_OUT_TOTAL] = torch.cat(narrow, dim=-1)  # (B, T, d_out)
    return mistakes


def _run(name: str, student_cls, config: dict, x: Tensor):
    """Build the student's layer under the book's seed and run it: ``(layer, output)``, or a Feedback."""
    layer = _seeded(lambda: attempt(name, student_cls, **config))
    if isinstance(layer, Feedback):  # not attempted yet, or the constructor raised
        return layer
    if not isinstance(layer, nn.Module):
        return failed(name, NOT_A_MODULE)
    with torch.no_grad():
        answer = attempt(name, layer, x)
    return answer if isinstance(answer, Feedback) else (layer, answer)


def _parameter_count(module: nn.Module) -> int:
    try:
        return sum(p.numel() for p in module.parameters())
    except Exception:  # noqa: BLE001 - a student's parameters() that breaks counts as none
        return 0


def check_wrapper(student_cls) -> Feedback:
    """``student_cls`` must behave as ``mha_lib.MultiHeadAttentionWrapper``: H independent causal heads, concatenated.

    Checked on the book's example (d_in=3, d_out=2, 2 heads, seed 123, the (2, 6, 3) batch: output (2, 6, 4)),
    then on a second size (d_in=5, d_out=3, 3 heads, 4 tokens) that catches hard-coded numbers, and last the
    parameter count (heads kept in a plain list are invisible to ``.parameters()``).
    """
    name = "wrapper"
    generator = torch.Generator().manual_seed(3)
    cases = [
        (dict(d_in=3, d_out=2, context_length=6, dropout=0.0, num_heads=2), journey_batch()),
        (dict(d_in=5, d_out=3, context_length=7, dropout=0.0, num_heads=3),
         torch.randn(2, 4, 5, generator=generator)),  # (B, T, d_in), T < context_length
    ]
    for number, (config, x) in enumerate(cases):
        # the reference first: nothing the student's class does afterwards can change it
        reference = _seeded(lambda: MultiHeadAttentionWrapper(**config))  # noqa: B023 - called at once
        with torch.no_grad():
            expected = reference(x)
        mistakes = _mistakes(config["d_in"], config["d_out"], config["context_length"], config["num_heads"], x)
        result = _run(name, student_cls, config, x)
        if isinstance(result, Feedback):
            return result
        layer, answer = result
        verdict = compare(name, answer, expected, mistakes=mistakes)
        if not verdict:
            message = verdict.message
            if message.startswith(_("right shape {shape}, wrong values (largest difference {gap:.3g}).")
                                  .split("{")[0]):  # compare()'s "right shape ..., wrong values" message
                message += " " + _(SEED_HINT)
            where = _("on the book's example") if number == 0 else _("with {config}, input {shape}").format(
                config=config, shape=tuple(x.shape))
            return failed(name, _("{where}: {message}").format(where=where, message=message))
        got, wanted = _parameter_count(layer), _parameter_count(reference)
        if got == 0:
            return failed(name, NOT_REGISTERED)
        if got != wanted:
            return failed(name, _("the numbers are right, but the layer has {got} parameters instead of {wanted} "
                                  "(num_heads × 3 × d_in × d_out): did you add layers the wrapper does not have?")
                          .format(got=got, wanted=wanted))
    return passed(name, N_("correct: the book's numbers, shape (2, 6, 4), and every head has its own weights."))


__all__ = ["check_wrapper"]
