"""Checkers for chapter 14, attention at scale.

    check_online_softmax(fn)   fn(scores, values, block_size) -> softmax(scores) @ values, block by block    (Dv,)
    check_needed_tiles(fn)     fn(T, S, block_size)           -> which tiles a bottom-right causal kernel computes
                                                                 (ceil(T/b), ceil(S/b)) bool
    check_absorbed_query(fn)   fn(q_nope, W_uk)               -> W_uk[h]ᵀ q for every head            (B, H, T, r)

Each checker draws its own inputs, runs the student's function through ``attempt`` (private copies, every
failure turned into feedback), compares it with the exact answer (``torch.softmax``, ``mha_lib.causal_mask_at``
reduced per tile, the absorbed product of ``MultiHeadLatentAttention``) and names the mistake it reproduces
("rescale the running output when the max changes", "your triangle starts at the top-left corner").
"""

from __future__ import annotations

import functools
import math
import os
import sys
import types
from typing import Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .. import functional
from ..language import N_, gettext as _
from ..masks import causal_mask_at
from . import NOT_FINITE, Feedback, attempt, compare, failed, passed, refuse

Tensor = torch.Tensor

# --- 14.1 online_softmax -----------------------------------------------------------------------------------------
NO_OUTPUT_RESCALE = N_("rescale the running output when the max changes: you multiplied the running sum by "
                       "exp(m - m_new) but not the running output o, so the keys summed before a larger score "
                       "keep weights measured against the old max. Use o = exp(m - m_new)·o + exp(s - m_new) @ v.")
NO_SUM_RESCALE = N_("rescale the running sum when the max changes: you multiplied the running output by "
                    "exp(m - m_new) but not the running sum l, so l mixes terms measured against different maxima. "
                    "Use l = exp(m - m_new)·l + Σ exp(s - m_new).")
NO_RESCALE = N_("rescale the running sum and the running output when the max changes: you added each block's "
                "exp(s - m_new) to l and o as they were, so what was summed with the old max keeps too large a "
                "weight. Multiply both by exp(m - m_new) first.")
OWN_BLOCK_MAX = N_("you subtracted each block's own max and added the blocks up without reconciling them: the blocks "
                   "are then weighed as if each had the row's largest score. Keep one running max m and rescale "
                   "what was summed by exp(m - m_new) when a block raises it.")
NO_DIVISION = N_("you forgot the final division: return o / l, the running output divided by the running sum "
                 "(o alone is the unnormalised sum of exp(s - m)·v).")
LAST_BLOCK_DROPPED = N_("your loop stops before the last, partial block: with S = {S} and block_size = {b} the keys "
                        "{first} .. {last} were never read. Step through range(0, S, block_size) and let the last "
                        "slice be shorter.")
OVERFLOW = N_("your result holds NaN or inf for scores near 1,000 (it was right for small scores): an exp of a "
              "large number overflows float32 to inf (anything above 88.7 does). Take exp only of differences that "
              "are <= 0: exp(s - m_new) for the block's weights and exp(m_old - m_new) for the rescale, never exp(s) "
              "or exp(m) on its own.")
WHOLE_ROW = N_("right values, but your function called {op} on a tensor of shape {shape}, as many numbers as the "
               "row's {S} scores, with block_size = {b}: the online softmax takes in one block of at most "
               "block_size keys per step (section 2).")
CALLED_SOFTMAX = N_("your function called {op}, which computes a softmax (or its log) for you: the exercise asks you "
                    "to compute the weights yourself, one block at a time, with a running max, sum and output.")
CALLED_ATTENTION = N_("your function called {op}, which computes attention, its softmax included, for you: the "
                      "exercise asks you to compute the weights yourself, one block at a time, with a running max, "
                      "sum and output.")
CALLED_LIBRARY = N_("your function called mha_lib's {op}, which does this exercise's work for you (a softmax, an "
                    "attention, or a step or merge of the online softmax): write the running max, sum and output "
                    "yourself, one block at a time.")

ONLINE_CASES = (  # (S, Dv, block_size, score shift, what the case is for)
    (7, 3, 3, 0.0),  # a block size that does not divide S; the largest score comes last
    (8, 4, 2, 0.0),  # scores that rise: the max changes at every block
    (5, 2, 1, 0.0),  # one key per block
    (6, 3, 10, 0.0),  # one block larger than the row
    (10, 4, 4, 1000.0),  # scores near 1,000: exp(s) overflows float32
    (6, 2, 1, 1000.0),  # one key per block, each score 60 above the previous: every rescale factor is exp(-60), about 1e-26
)


def _online_variant(scores: Tensor, values: Tensor, block_size: int, *, rescale_sum: bool = True,
                    rescale_output: bool = True, reconcile: bool = True, divide: bool = True,
                    subtract_max: bool = True, last_block: bool = True) -> Tensor:
    """The online softmax with one slip switched on (all flags True: the right loop), written as a student would."""
    m = torch.tensor(float("-inf"), dtype=scores.dtype)  # running max
    l = torch.zeros((), dtype=scores.dtype)  # running sum of exp(s - m)
    o = torch.zeros(values.shape[-1], dtype=values.dtype)  # running output, (Dv,)
    S = scores.shape[0]
    stop = S if last_block else S - S % block_size
    for j in range(0, stop, block_size):
        s, v = scores[j:j + block_size], values[j:j + block_size]  # (b,), (b, Dv)
        if not subtract_max:
            w = torch.exp(s)
            l, o = l + w.sum(), o + w @ v
            continue
        if not reconcile:
            w = torch.exp(s - s.max())  # each block against its own max
            l, o = l + w.sum(), o + w @ v
            continue
        m_new = torch.maximum(m, s.max())
        factor = torch.exp(m - m_new)
        w = torch.exp(s - m_new)  # (b,)
        l = (factor * l if rescale_sum else l) + w.sum()
        o = (factor * o if rescale_output else o) + w @ v  # (b,) @ (b, Dv) -> (Dv,)
        m = m_new
    return o / l if divide else o


def _online_case(S: int, Dv: int, shift: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    if shift and S == 6:  # steep rise: 1000, 1060, ..., 1300
        scores = shift + 60.0 * torch.arange(S, dtype=torch.float32)
    else:
        scores = shift + 2.0 * torch.randn(S, generator=generator)
        if S == 8:
            scores = scores.sort().values  # rising: a new max in every block
        else:  # a large score first, then lower ones (the max holds), and the largest last (the max rises)
            scores[0] = scores.max() + 1.0
            scores[-1] = scores[0] + 1.5
    return scores, torch.randn(S, Dv, generator=generator)


def _online_mistakes(scores: Tensor, values: Tensor, b: int) -> dict[str, Tensor]:
    S = scores.shape[0]
    variant = functools.partial(_online_variant, scores, values, b)
    mistakes = {
        NO_RESCALE: variant(rescale_sum=False, rescale_output=False),
        NO_OUTPUT_RESCALE: variant(rescale_output=False),
        NO_SUM_RESCALE: variant(rescale_sum=False),
        OWN_BLOCK_MAX: variant(reconcile=False),
        NO_DIVISION: variant(divide=False),
    }
    if S % b:
        last = _(LAST_BLOCK_DROPPED).format(S=S, b=b, first=S - S % b, last=S - 1)
        mistakes[last] = variant(last_block=False)
    return _unambiguous(mistakes)


def _unambiguous(mistakes: dict[str, Tensor]) -> dict[str, Tensor]:
    """The mistakes that no other one imitates on these inputs: two slips that give the same tensor cannot be
    told apart, so neither is named (the student reads "wrong values", which is true)."""
    def same(a: Tensor, b: Tensor) -> bool:
        return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), atol=1e-6, rtol=1e-5,
                                                          equal_nan=True))
    return {message: wrong for message, wrong in mistakes.items()
            if not any(same(wrong, other) for key, other in mistakes.items() if key != message)}


class _Watch(TorchFunctionMode):
    """Notes, without changing anything, what a student's function does with torch while it runs: the first
    shortcut it takes (a softmax, an attention, or one of ``mha_lib``'s functions that compute either), and the
    widest tensor it exponentiated (or took the log-sum-exp of).

    A torch function counts as a softmax or an attention by its name (``softmax``, ``log_softmax``,
    ``torch._softmax``, ``torch.ops.aten._softmax``, ``scaled_dot_product_attention`` however it is reached,
    ``multi_head_attention_forward``...); ``mha_lib``'s functions by the code running when torch is called, so
    that a library function reached through another one (``flash_attention`` through ``online_softmax_step``) is
    named as the student called it.
    """

    KNOWN = {torch.softmax: "torch.softmax", F.softmax: "torch.nn.functional.softmax",
             Tensor.softmax: "Tensor.softmax", torch.special.softmax: "torch.special.softmax",
             torch.log_softmax: "torch.log_softmax", F.log_softmax: "torch.nn.functional.log_softmax",
             Tensor.log_softmax: "Tensor.log_softmax",
             F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention",
             F.multi_head_attention_forward: "torch.nn.functional.multi_head_attention_forward"}
    EXP = {torch.exp: "torch.exp", Tensor.exp: "Tensor.exp", Tensor.exp_: "Tensor.exp_", torch.exp2: "torch.exp2",
           torch.logsumexp: "torch.logsumexp", Tensor.logsumexp: "Tensor.logsumexp",
           torch.special.logsumexp: "torch.special.logsumexp"}

    def __init__(self, row_length: int, library: dict):
        super().__init__()
        self.row_length = row_length
        self.library = library  # code object -> name, of mha_lib's functions that do the work
        self.shortcut: tuple[str, str] | None = None  # (message, what was called)
        self.whole_row: tuple[str, tuple[int, ...]] | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            self._note(func, args)
        except Exception:  # noqa: BLE001 - watching must never change what the student's code does
            pass
        return func(*args, **kwargs)

    def _note(self, func, args) -> None:
        if self.shortcut is None:
            called = self._library_called(sys._getframe(2))
            if called is not None:
                self.shortcut = (CALLED_LIBRARY, called)
            else:
                name = str(getattr(func, "__name__", "")).lower()
                if "attention" in name or "transformer" in name:
                    self.shortcut = (CALLED_ATTENTION, _op_name(func))
                elif "softmax" in name:
                    self.shortcut = (CALLED_SOFTMAX, _op_name(func))
        if func in self.EXP and self.whole_row is None and args and isinstance(args[0], Tensor):
            shape = tuple(args[0].shape)
            if self.row_length in shape:
                self.whole_row = (self.EXP[func], shape)

    def _library_called(self, frame) -> str | None:
        """The ``mha_lib`` function the student's code called, if torch is running inside one that does the work:
        the outermost ``mha_lib`` frame below the student's function."""
        inside, outermost = False, None
        for _depth in range(60):
            if frame is None or frame.f_code is _RUN_CODE:  # reached the student's function: stop
                break
            inside = inside or frame.f_code in self.library
            filename = frame.f_code.co_filename
            if filename.startswith(_LIBRARY_DIR) and not filename.startswith(_EXERCISES_DIR):
                outermost = frame.f_code
            frame = frame.f_back
        if not inside or outermost is None:
            return None
        return getattr(outermost, "co_qualname", outermost.co_name)


def _op_name(func) -> str:
    """How a student would write the torch function ``func``: ``torch.nn.functional.scaled_dot_product_attention``,
    ``Tensor.softmax``, ``torch.ops.aten._softmax``..."""
    if func in _Watch.KNOWN:
        return _Watch.KNOWN[func]
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.{func}"
    name = str(getattr(func, "__name__", func))
    if str(getattr(func, "__qualname__", "")).startswith(("TensorBase.", "Tensor.")):
        return f"Tensor.{name}"
    module = str(getattr(func, "__module__", None) or "torch")
    if module == "torch._C._special":
        return f"torch.special.{name.removeprefix('special_')}"
    return f"{_PUBLIC_MODULES.get(module, module)}.{name}"


_PUBLIC_MODULES = {"torch._C._nn": "torch.nn.functional", "torch._C._VariableFunctions": "torch"}


def _library_functions() -> dict:
    """``mha_lib``'s functions that compute a softmax, an attention, or a step or merge of the online softmax
    (``online_softmax_step``, ``flash_attention``, ``sdpa_attention``, ``explicit_attention``, ``stable_softmax``,
    ``merge_attention_states``, ...): code object -> name. Looked up at each check, so a function added later is
    watched too. (``online_softmax_start``, which only makes the empty state, is not one of them.)"""
    found = {}
    for name, value in vars(functional).items():
        code = getattr(value, "__code__", None)
        if code is None or getattr(value, "__module__", None) != functional.__name__:
            continue
        if ("softmax" in name and name != "online_softmax_start") or name.endswith("attention") or \
                name.startswith(("flash", "merge_attention")):
            found[code] = name
    return found


def _watched(student_fn, watch: _Watch):
    """``student_fn`` run under ``watch``; a non-callable is handed over as it is, for ``attempt`` to refuse."""
    if not callable(student_fn):
        return student_fn

    @functools.wraps(student_fn)
    def run(*args):
        with watch:
            return student_fn(*args)

    return run


_RUN_CODE = next(c for c in _watched.__code__.co_consts if isinstance(c, types.CodeType) and c.co_name == "run")
_LIBRARY_DIR = os.path.dirname(functional.__file__) + os.sep
_EXERCISES_DIR = os.path.dirname(__file__) + os.sep


def check_online_softmax(student_fn: Callable[[Tensor, Tensor, int], Tensor]) -> Feedback:
    """``student_fn(scores, values, block_size)`` with ``scores`` ``(S,)`` and ``values`` ``(S, Dv)`` must return
    ``softmax(scores) @ values`` ``(Dv,)``, computed block by block with a running max, sum and output.

    Six rows: block sizes that do not divide S, 1, and larger than S; scores whose max comes late or rises at
    every block; and, last, scores near 1,000 (exp(s) overflows float32 there).
    """
    name = "online_softmax"
    generator = torch.Generator().manual_seed(14)  # a CPU generator: the same numbers on every machine
    library = _library_functions()
    for S, Dv, b, shift in ONLINE_CASES:
        scores, values = _online_case(S, Dv, shift, generator)
        expected = (torch.softmax(scores.double(), dim=-1) @ values.double()).float()  # before the call
        mistakes = _online_mistakes(scores, values, b)
        watch = _Watch(S, library)
        answer = attempt(name, _watched(student_fn, watch), scores, values, b)
        if isinstance(answer, Feedback):
            return answer
        if watch.shortcut is not None:
            message, op = watch.shortcut
            return failed(name, _(message).format(op=op))
        verdict = compare(name, answer, expected, mistakes=mistakes)
        if not verdict and shift and verdict.message == _(NOT_FINITE):
            verdict = failed(name, OVERFLOW)
        if not verdict:
            return failed(name, _("(S = {S}, block_size = {b}{near}) {message}").format(
                S=S, b=b, near=_(", scores near 1,000") if shift else "", message=verdict.message))
        if watch.whole_row is not None and b < S:
            op, shape = watch.whole_row
            return failed(name, _(WHOLE_ROW).format(op=op, shape=shape, S=S, b=b))
    return passed(name, N_("correct: the same row as softmax(scores) @ values for every block size tried (1, sizes that "
                           "do not divide S, larger than S), scores near 1,000 included."))


# --- 14.2 needed_tiles -------------------------------------------------------------------------------------------
TOP_LEFT = N_("your triangle starts at the top-left corner (what is_causal=True does): after a cache (S > T) the "
              "queries are the LAST T positions, query t sits at S - T + t and sees every key up to there. Align the "
              "triangle bottom right.")
FLOOR_BOTH = N_("you counted floor(T / b) × floor(S / b) tiles: the last, partial block of queries and of keys was "
                "dropped. Use ceil (math.ceil(T / b), or (T + b - 1) // b).")
FLOOR_ROWS = N_("you counted floor(T / b) query blocks: the last, partial block of queries was dropped. Use "
                "math.ceil(T / b).")
FLOOR_COLS = N_("you counted floor(S / b) key blocks: the last, partial block of keys was dropped. Use "
                "math.ceil(S / b).")
STRICT = N_("you dropped the diagonal (a strict <): a query sees its own key, so a tile is needed when its first "
            "key is at or before its last query's position (<=).")
FIRST_QUERY = N_("you compared with the block's first query: its LAST query sits furthest right and sees the most "
                 "keys, so a tile is needed when its first key is at or before that last query's position.")
WHOLE_TILES_ONLY = N_("you kept only the tiles whose every pair is allowed: the tiles on the diagonal are partly "
                      "masked and still needed (their masked pairs get -inf inside the tile).")
TILES_INVERTED = N_("your grid is inverted: True must mean 'this tile is computed', and you marked the skipped ones.")
TILES_TRANSPOSED = N_("your grid is transposed: one row per block of queries (ceil(T / b)), one column per block of "
                      "keys (ceil(S / b)).")
TILES_COUNTED = N_("you returned how many pairs of each tile are allowed: the exercise asks whether the tile is "
                   "needed, a torch.bool tensor (True where that count is above 0).")
TILES_ZERO_ONE = N_("your 0s and 1s are the right tiles, but the exercise asks for a torch.bool tensor, got dtype "
                    "{dtype}: return it as bool (.bool(), or build it from a comparison).")
TILES_NOT_BOOL = N_("return a torch.bool tensor (True = the tile is computed), got dtype {dtype}.")

TILE_CASES = ((8, 8, 3), (6, 6, 2), (4, 10, 3), (1, 7, 4), (5, 12, 5), (3, 9, 4), (7, 7, 10), (3, 8, 1))  # (T, S, b)


def _per_tile(keep: Tensor, b: int, reduce: str = "any") -> Tensor:
    """A ``(T, S)`` mask reduced per ``b × b`` tile (the last ones partial): any, all or sum of the real pairs."""
    T, S = keep.shape
    rows, cols = math.ceil(T / b), math.ceil(S / b)
    padded = F.pad(keep.long(), (0, cols * b - S, 0, rows * b - T), value=-1)  # -1 marks padding, not a pair
    tiles = padded.view(rows, b, cols, b).transpose(1, 2).reshape(rows, cols, b * b)  # (rows, b, cols, b) -> (rows, cols, b·b)
    real = tiles >= 0
    if reduce == "sum":
        return (tiles * real).sum(-1)
    if reduce == "all":
        return ((tiles == 1) | ~real).all(-1)
    return (tiles == 1).any(-1)


def needed_tiles_reference(T: int, S: int, block_size: int) -> Tensor:
    """``(ceil(T/b), ceil(S/b))`` bool: tile (i, j) holds at least one (query, key) pair that bottom-right causal
    attention allows (query t at position S - T + t)."""
    keep = causal_mask_at(torch.arange(S - T, S), torch.arange(S))  # (T, S)
    return _per_tile(keep, block_size)


def _tile_mistakes(T: int, S: int, b: int) -> dict[str, Tensor]:
    q, k = torch.arange(S - T, S), torch.arange(S)
    keep = causal_mask_at(q, k)  # (T, S)
    expected = _per_tile(keep, b)
    first_query = q[::b]  # (rows,): each query block's first position
    first_key = k[::b]  # (cols,)
    mistakes = {
        TOP_LEFT: _per_tile(causal_mask_at(torch.arange(T), k), b),
        FLOOR_BOTH: expected[: T // b, : S // b],
        FLOOR_ROWS: expected[: T // b],
        FLOOR_COLS: expected[:, : S // b],
        STRICT: _per_tile(q[:, None] > k[None, :], b),  # (T, 1) > (1, S) -> (T, S)
        FIRST_QUERY: first_key[None, :] <= first_query[:, None],  # (1, cols) <= (rows, 1) -> (rows, cols)
        WHOLE_TILES_ONLY: _per_tile(keep, b, "all"),
        TILES_INVERTED: ~expected,
        TILES_TRANSPOSED: expected.T.clone(),
    }
    return _unambiguous({message: wrong.float() for message, wrong in mistakes.items()})


def check_needed_tiles(student_fn: Callable[[int, int, int], Tensor]) -> Feedback:
    """``student_fn(T, S, block_size)`` must return the ``(ceil(T/b), ceil(S/b))`` bool grid of the tiles a causal
    kernel computes: tile (i, j) is needed when one of its pairs is allowed, with the queries aligned bottom right
    (query t at position S - T + t sees keys 0 .. S - T + t)."""
    name = "needed_tiles"
    for T, S, b in TILE_CASES:
        expected = needed_tiles_reference(T, S, b)  # before the call
        mistakes = _tile_mistakes(T, S, b)
        counts = _per_tile(causal_mask_at(torch.arange(S - T, S), torch.arange(S)), b, "sum")
        answer = attempt(name, student_fn, T, S, b)
        if isinstance(answer, Feedback):
            return answer
        where = _("(T = {T}, S = {S}, block_size = {b})").format(T=T, S=S, b=b)
        refused = refuse(name, answer, torch.ones(1, dtype=torch.bool))  # tuple, sparse, complex, not a tensor
        if refused is not None:  # a Feedback is falsy when failed: test for None
            return refused
        if answer.dtype != torch.bool:
            # integers or floats: say whether the numbers were right, but a grid of tiles is True/False
            as_numbers = compare(name, answer, expected.long(), mistakes={TILES_COUNTED: counts}, atol=0, rtol=0)
            if as_numbers:
                return failed(name, _("{where} {message}").format(
                    where=where, message=_(TILES_ZERO_ONE).format(dtype=answer.dtype)))
            if as_numbers.message == _(TILES_COUNTED):
                return failed(name, _("{where} {message}").format(where=where, message=_(TILES_COUNTED)))
            return failed(name, _(TILES_NOT_BOOL).format(dtype=answer.dtype))
        verdict = compare(name, answer.float(), expected.float(), mistakes=mistakes, atol=0, rtol=0)
        if not verdict:
            return failed(name, _("{where} {message}").format(where=where, message=verdict.message))
    return passed(name, N_("correct: a tile is computed when its first key is at or before its last query's position "
                           "S - T + t; after a cache the triangle sits bottom right, and the tiles wholly in the "
                           "future are skipped."))


# --- 14.3 absorbed_query -----------------------------------------------------------------------------------------
READ_TRANSPOSED = N_("you read W_uk as (H, r, d_n): your function fails on W_uk of shape {shape} (H, d_n, r), and gives "
                     "the right answer when it is handed W_uk transposed. W_uk[h] maps a latent c (r,) to a key "
                     "(d_n,), so the absorbed query is W_uk[h]ᵀ q: q_nope @ W_uk, or einsum('bhtn,hnr->bhtr').")
HEADS_SUMMED = N_("you summed over the heads (your result has no head dimension): every head keeps its own absorbed "
                  "query, (B, H, T, r). With einsum, keep h in the output: 'bhtn,hnr->bhtr'.")
HEADS_SUMMED_KEPT = N_("you summed over the heads (dim 1, keepdim=True): every head keeps its own absorbed query, "
                       "(B, H, T, r).")
HEAD_ZERO = N_("you used head 0's W_uk for every head: head h's query goes through W_uk[h] (H matrices of (d_n, r)).")
WRONG_AXIS = N_("you matched W_uk's head axis with the wrong axis of q_nope: W_uk (H, d_n, r) must broadcast as "
                "(1, H, d_n, r) so that head h of every batch item meets W_uk[h] (q_nope @ W_uk does).")

ABSORB_CASES = ((1, 2, 6, 8, 3), (3, 3, 2, 4, 6), (2, 3, 4, 5, 7))  # (B, H, T, d_n, r): d_n != r; B == 1, B == H


def _absorbed(q_nope: Tensor, W_uk: Tensor) -> Tensor:
    """``W_uk[h]ᵀ q`` for every head, as ``MultiHeadLatentAttention(absorbed=True)`` computes it."""
    return q_nope @ W_uk  # (B, H, T, dn) @ (H, dn, r) -> (B, H, T, r)


def _absorb_mistakes(q: Tensor, W: Tensor) -> dict[str, Tensor]:
    attempts = (  # each slip written as a student would; one that fails by shape here is not a candidate
        (HEADS_SUMMED, lambda: torch.einsum("bhtn,hnr->btr", q, W)),
        (HEADS_SUMMED_KEPT, lambda: (q @ W).sum(dim=1, keepdim=True)),
        (HEAD_ZERO, lambda: q @ W[0]),
        (WRONG_AXIS, lambda: q @ W[:, None]),  # (H, 1, dn, r): W's heads broadcast against the batch
        (WRONG_AXIS, lambda: torch.einsum("bhtn,bnr->bhtr", q, W)),  # W's heads matched with the batch
    )
    mistakes = {}
    for message, wrong in attempts:
        if message in mistakes:
            continue
        try:
            mistakes[message] = wrong()
        except RuntimeError:  # this slip fails by shape on these sizes: the student sees the error
            continue
    return _unambiguous(mistakes)


def check_absorbed_query(student_fn: Callable[[Tensor, Tensor], Tensor]) -> Feedback:
    """``student_fn(q_nope, W_uk)`` with ``q_nope`` ``(B, H, T, d_n)`` and ``W_uk`` ``(H, d_n, r)`` must return
    ``(B, H, T, r)`` with ``absorbed[b, h, t] @ c == q_nope[b, h, t] @ (W_uk[h] @ c)`` for every latent c."""
    name = "absorbed_query"
    generator = torch.Generator().manual_seed(14)
    for B, H, T, dn, r in ABSORB_CASES:
        q = torch.randn(B, H, T, dn, generator=generator)
        W = torch.randn(H, dn, r, generator=generator) / math.sqrt(r)
        expected = _absorbed(q, W)  # before the call
        mistakes = _absorb_mistakes(q, W)
        answer = attempt(name, student_fn, q, W)
        where = _("(q_nope {q}, W_uk {w})").format(q=tuple(q.shape), w=tuple(W.shape))
        if isinstance(answer, Feedback):
            if answer.attempted and callable(student_fn):
                # does it work when W_uk is handed over as (H, r, dn)? Then it read W_uk transposed.
                flipped = attempt(name, student_fn, q, W.mT.contiguous())
                if not isinstance(flipped, Feedback) and compare(name, flipped, expected):
                    return failed(name, _("{where} {message}").format(
                        where=where, message=_(READ_TRANSPOSED).format(shape=tuple(W.shape))))
            return answer
        verdict = compare(name, answer, expected, mistakes=mistakes)
        if not verdict:
            return failed(name, _("{where} {message}").format(where=where, message=verdict.message))
    return passed(name, N_("correct: each head's query folded through its own W_uk[h]ᵀ, so the scores can be taken "
                           "against the cached latent itself, never expanded into keys."))


__all__ = ["check_absorbed_query", "check_needed_tiles", "check_online_softmax", "needed_tiles_reference"]
