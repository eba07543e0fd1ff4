"""Heads that learn in front of the class: a tiny attention-only causal transformer and its task (chapter 11).

    from mha_lib.induction.model import InductionTask, AttentionOnlyTransformer, train
    task = InductionTask()                                  # random tokens whose segment repeats
    model = AttentionOnlyTransformer(task, num_layers=2)    # built from MultiHeadAttention
    log = train(model, task, steps=3000)                    # about half a minute on one CPU thread

The task. Each sequence is a random segment of ``period`` tokens (``period`` drawn per sequence from
``min_period .. max_period``) repeated until ``seq_len`` tokens: ``a b c d e a b c d e a b …``. Once the
segment has been seen, every next token is predictable, and only those tokens count in the loss (the first
copy is random and cannot be predicted). Because the period changes from sequence to sequence, "look ``p``
positions back" does not work; the general rule is *find the earlier occurrence of the current token and copy
the token that followed it* (segment tokens are drawn with replacement, so when the segment holds the current
token twice, the token before it must match too). Two layers of attention can do that together:

    layer 0  a previous-token head writes "the token before me" into each position (w[t, t-1] ≈ 1);
    layer 1  an induction head at query t looks for the key s whose *previous* token equals the current token
             (x[s-1] = x[t]), and copies x[s]: the token that followed the earlier occurrence.

One layer cannot do it reliably: a single head can match "same token as me" but not "the token *after* one like
me" without a previous-token head below it, so it guesses from positions (chapter 11: 43.9 % right, against
12.7 % for a random pick among the segment's tokens). Without the causal mask the model reads the answer from the future
(loss ≈ 0 while training) and is useless when it must generate one token at a time.

The model. Token and position embeddings, ``num_layers`` ``MultiHeadAttention`` blocks added to a residual
stream (no MLP, no LayerNorm: attention-only, as in Elhage et al. 2021), and an unembedding to logits.

Scores. ``previous_token_scores`` and ``induction_scores`` turn attention weights into one number per head: the
mean weight on the previous token, and the mean weight on "the token after an earlier occurrence of the current
token", over the predictable queries. 1 = always exactly there; a uniform causal head scores 1/(t+1) on the first (query t sees t+1 keys).

Checkpoints. ``tests/train_induction.py`` trains the chapter's three runs deterministically on the CPU and saves
them in ``mha_lib/induction/checkpoints/`` (inside the wheel, so Colab needs no download); ``load_run(name)`` reads one.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ..ablation import check_head_mask, scaled_heads
from ..cache import KVCache
from ..linear import GatedDeltaNet, StateCache
from ..modules import MultiHeadAttention
from ..runtime import one_thread
from ..validation import check_flag, check_floating, check_int, check_positive_float, check_positive_int, check_seed, \
    check_layer_types, check_tensor

Tensor = torch.Tensor

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
RUNS = ("two_layer", "one_layer", "no_mask")  # the chapter's three trained runs, saved by tests/train_induction.py


# --------------------------------------------------------------------------------------------------- the task


@dataclass(frozen=True)
class InductionTask:
    """Sequences of ``seq_len`` tokens from ``vocab_size``: a random segment of ``period`` tokens, repeated."""

    vocab_size: int = 32
    seq_len: int = 25
    min_period: int = 5
    max_period: int = 12

    def __post_init__(self):
        for name in ("vocab_size", "seq_len", "min_period", "max_period"):
            check_positive_int(name, getattr(self, name))
        if not 2 <= self.min_period <= self.max_period:
            raise ValueError(f"min_period and max_period must satisfy 2 <= min_period <= max_period, "
                             f"got {self.min_period} and {self.max_period}")
        if self.seq_len < 2 * self.max_period + 1:
            raise ValueError(f"seq_len must be at least 2 * max_period + 1 = {2 * self.max_period + 1}, so that "
                             f"every sequence has predictable tokens, got {self.seq_len}")


# token ids drawn as letters on heatmaps: 26 Latin capitals, then 6 Greek letters (32 symbols, one glyph each)
TOKEN_SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZαβγδεθ"


def token_labels(tokens) -> list[str]:
    """One sequence's token ids as letters, for axis labels: ``[0, 1, 27]`` -> ``["A", "B", "β"]``."""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"tokens must be token ids (a list or a tensor of ints), got str {tokens[:20]!r}")
    ids = torch.as_tensor(tokens).tolist()
    if not isinstance(ids, list) or any(isinstance(i, list) for i in ids):
        raise ValueError(f"tokens must be one sequence of token ids (1-D), got {torch.as_tensor(tokens).shape}")
    bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < len(TOKEN_SYMBOLS)]
    if bad:
        raise ValueError(f"tokens must be ids in [0, {len(TOKEN_SYMBOLS) - 1}], got {bad[:5]}")
    return [TOKEN_SYMBOLS[i] for i in ids]


class Batch(NamedTuple):
    tokens: Tensor  # (B, T) int64
    periods: Tensor  # (B,) int64: the length of each sequence's repeating segment
    targets: Tensor  # (B, T) bool: True where the *next* token is predictable (t >= period), False elsewhere


def repeated_sequences(task: InductionTask, batch_size: int, generator: torch.Generator | None = None) -> Batch:
    """A batch of the task's sequences, drawn on the CPU from ``generator`` (the same on every machine)."""
    if not isinstance(task, InductionTask):
        raise TypeError(f"task must be an InductionTask, got {type(task).__name__}")
    B = check_positive_int("batch_size", batch_size)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    T = task.seq_len
    periods = torch.randint(task.min_period, task.max_period + 1, (B,), generator=generator)  # (B,)
    # tokens drawn with replacement: a segment may hold a token twice, so "the token before" must be read
    # exactly (a previous-token head); with distinct tokens a blurred look at the last few tokens is enough
    segments = torch.randint(0, task.vocab_size, (B, task.max_period), generator=generator)  # (B, max_period)
    t = torch.arange(T)  # (T,)
    tokens = segments.gather(1, t[None, :] % periods[:, None])  # x[t] = segment[t mod p], (B, T)
    return Batch(tokens, periods, periods_to_targets(periods, T))


#: the chapter's held-out batch, never seen in training: final numbers, knock-outs, the trainer and exercise 11.2
EVAL_SIZE, EVAL_SEED = 512, 123


def held_out_batch(task: InductionTask | None = None) -> Batch:
    """The chapter's held-out batch: ``EVAL_SIZE`` sequences drawn from seed ``EVAL_SEED``."""
    return repeated_sequences(task or InductionTask(), EVAL_SIZE, torch.Generator().manual_seed(EVAL_SEED))


def periods_to_targets(periods: Tensor, T: int) -> Tensor:
    """``(B, T)`` bool: query ``t`` can predict token ``t + 1`` once the segment has been seen (``t >= p``)."""
    periods = _check_periods(periods)
    T = check_positive_int("T", T)
    t = torch.arange(T, device=periods.device)  # (T,)
    return (t[None, :] >= periods[:, None]) & (t[None, :] < T - 1)  # (B, 1) against (1, T) -> (B, T)


def _check_periods(periods) -> Tensor:
    periods = check_tensor("periods", periods)
    if periods.dim() != 1 or periods.dtype.is_floating_point or periods.is_complex() or periods.dtype == torch.bool:
        raise ValueError(f"periods must be a 1-D integer tensor (B,), got {periods.dtype} {tuple(periods.shape)}")
    return periods


def sequence(tokens: Sequence[int], task: InductionTask | None = None) -> Batch:
    """One hand-written sequence as a batch of one, with its period found from the tokens (for the notebook)."""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"tokens must be token ids (a list or a tensor of ints), got str {tokens[:20]!r}")
    if task is not None and not isinstance(task, InductionTask):
        raise TypeError(f"task must be an InductionTask or None, got {type(task).__name__}")
    tokens = torch.as_tensor(tokens)
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must be integer token ids, got {tokens.dtype}")
    tokens = tokens.long()
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be one sequence of token ids, got shape {tuple(tokens.shape)}")
    if task is not None:
        _check_tokens("tokens", tokens[None], task)
    period = next((p for p in range(1, len(tokens)) if torch.equal(tokens[p:], tokens[:-p])), None)
    if period is None:
        raise ValueError("tokens must repeat a segment (x[t] = x[t - p] for some period p), got "
                         f"{tokens.tolist()}")
    periods = torch.tensor([period])
    return Batch(tokens[None, :], periods, periods_to_targets(periods, len(tokens)))


# --------------------------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class ModelConfig:
    num_layers: int = 2
    d_model: int = 64
    num_heads: int = 4
    causal: bool = True
    layer_types: tuple[str, ...] | None = None  # per layer "sliding" (a window) or "full"; None: all full
    window: int | None = None  # the sliding layers' window
    mixer: str = "softmax"  # chapter 16: "softmax" attention, or GatedDeltaNet's "linear", "delta", "gated_delta"


#: chapter 16's mixers: what mixes the tokens in each layer (GatedDeltaNet's rule for the three without a softmax)
MIXERS = ("softmax", "linear", "delta", "gated_delta")


class AttentionOnlyTransformer(nn.Module):
    """Embeddings → ``num_layers`` × (x + MultiHeadAttention(x)) → logits. No MLP, no LayerNorm.

    ``forward(tokens, *, head_mask=None, return_weights=False)``: ``tokens`` ``(B, T)`` ints; returns logits
    ``(B, T, vocab_size)`` (position ``t`` predicts token ``t + 1``), and a tuple of ``(B, H, T, T)`` weights,
    one per layer, with ``return_weights=True``. ``head_mask`` ``(L, H)``: 1 keeps a head, 0 knocks it out (its
    output is zeroed before the output projection), as in chapter 10.

    ``layer_types`` (chapter 15): one entry per layer, ``"sliding"`` (query t sees keys ``t - window + 1 .. t``) or
    ``"full"``, as in Gemma 3's or gpt-oss's ``config.layer_types``; ``window`` is the sliding layers' window.
    ``attention`` (chapter 15): more keyword arguments for every layer's ``MultiHeadAttention``, e.g.
    ``{"sinks": True}`` or ``{"gate": "elementwise"}``; the layer checks them. Both default to chapter 11's model.

    ``mixer`` (chapter 16): ``"softmax"`` (the default, chapter 11's ``MultiHeadAttention``) or a ``GatedDeltaNet``
    without its short conv and with ``num_heads`` heads of ``d_model / num_heads``, whose ``rule`` is the mixer:
    ``"linear"`` (elu + 1 linear attention), ``"delta"`` or ``"gated_delta"``. Those keep a state, not keys and
    values: they have no weights to return (``return_weights=True`` and ``evaluate``'s head scores are left out),
    and ``new_caches()`` gives them a ``StateCache`` each.
    """

    def __init__(self, task: InductionTask, num_layers: int = 2, d_model: int = 64, num_heads: int = 4,
                 causal: bool = True, *, layer_types: Sequence[str] | None = None, window: int | None = None,
                 attention: dict | None = None, mixer: str = "softmax"):
        super().__init__()
        if not isinstance(task, InductionTask):
            raise TypeError(f"task must be an InductionTask, got {type(task).__name__}")
        self.task = task
        num_layers = check_positive_int("num_layers", num_layers)
        layer_types, window = _check_layer_types(layer_types, window, num_layers, check_flag("causal", causal))
        attention = _check_attention_options(attention)
        mixer = _check_mixer(mixer, causal, layer_types, attention)
        self.config = ModelConfig(num_layers, check_positive_int("d_model", d_model),
                                  check_positive_int("num_heads", num_heads), causal, layer_types, window, mixer)
        self.attention_options = attention
        self.token_embedding = nn.Embedding(task.vocab_size, d_model)
        self.position_embedding = nn.Embedding(task.seq_len, d_model)
        kinds = layer_types or ("full",) * num_layers
        if mixer == "softmax":
            self.layers = nn.ModuleList([
                MultiHeadAttention(d_model, d_model, task.seq_len, 0.0, num_heads, causal=causal,
                                   window=window if kind == "sliding" else None, **attention)
                for kind in kinds
            ])
        else:  # no conv: it would give every mixer a previous-token shift and hide the differences between them
            self.layers = nn.ModuleList([GatedDeltaNet(d_model, num_heads, conv_size=None, rule=mixer)
                                         for _ in range(num_layers)])
        self.unembed = nn.Linear(d_model, task.vocab_size, bias=False)

    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    @property
    def num_heads(self) -> int:
        return self.config.num_heads

    @property
    def mixer(self) -> str:
        return self.config.mixer

    def forward(self, tokens: Tensor, *, head_mask: Tensor | None = None, return_weights: bool = False,
                kv_caches: Sequence[KVCache | StateCache] | None = None):
        return_weights = check_flag("return_weights", return_weights)
        if return_weights and self.mixer != "softmax":
            raise ValueError(f"return_weights=True: this model's mixer is {self.mixer!r}, which has no attention "
                             f"weights to return — each layer reads a fixed-size state that the earlier tokens "
                             f"wrote into and never scores query against key (only mixer='softmax' has weights)")
        tokens = _check_tokens("tokens", tokens, self.task)
        if head_mask is not None:
            head_mask = check_head_mask("head_mask", head_mask, self.num_layers, self.num_heads)
        past = self._check_caches(kv_caches, tokens)
        T = tokens.shape[1]
        positions = torch.arange(past, past + T, device=tokens.device)  # (T,): after a cache, past .. past+T-1
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (B, T, D) + (T, D) -> (B, T, D)
        weights = []
        for index, layer in enumerate(self.layers):
            keep = None if head_mask is None else head_mask[..., index, :]  # (L, H) -> (H,), (B, L, H) -> (B, H)
            cache = None if kv_caches is None else kv_caches[index]
            with scaled_heads(layer, keep):
                if self.mixer == "softmax":
                    out, w = layer(x, return_weights=True, kv_cache=cache)  # (B, T, D), (B, H, T, past + T)
                    weights.append(w)
                else:
                    out = layer(x, kv_cache=cache)  # (B, T, D): a state, no weights
            x = x + out  # the residual stream: each layer adds what it read
        logits = self.unembed(x)  # (B, T, D) -> (B, T, V)
        return (logits, tuple(weights)) if return_weights else logits


    def new_caches(self) -> list[KVCache] | list[StateCache]:
        """One empty ``KVCache`` per layer (a ``StateCache`` for the mixers without a softmax), for
        ``forward(..., kv_caches=...)`` and ``generate``."""
        kind = KVCache if self.mixer == "softmax" else StateCache
        return [kind() for _ in self.layers]

    def _check_caches(self, kv_caches, tokens: Tensor) -> int:
        """Tokens already in the caches (0 without), after checking they fit this model."""
        if kv_caches is None:
            return 0
        kind = KVCache if self.mixer == "softmax" else StateCache
        if isinstance(kv_caches, (KVCache, StateCache)) or not isinstance(kv_caches, (list, tuple)) or \
                len(kv_caches) != self.num_layers or not all(isinstance(c, kind) for c in kv_caches):
            raise TypeError(f"kv_caches must be a list of {self.num_layers} {kind.__name__} objects, one per layer "
                            f"(model.new_caches()), got {type(kv_caches).__name__}")
        past = kv_caches[0].seen
        if past + tokens.shape[1] > self.task.seq_len:
            raise ValueError(f"kv_caches have seen {past} tokens and tokens brings {tokens.shape[1]} more: "
                             f"{past + tokens.shape[1]} positions exceed seq_len = {self.task.seq_len}, the positions "
                             f"the model has embeddings for")
        return past


def _check_layer_types(layer_types, window, num_layers: int, causal: bool):
    """``(layer_types as a tuple or None, window)`` after checking they describe ``num_layers`` layers."""
    if layer_types is None:
        if window is not None:
            raise ValueError(f"window={window!r} needs layer_types: name which layers slide, e.g. "
                             f"layer_types=['sliding', 'full']")
        return None, None
    layer_types = check_layer_types(layer_types, num_layers, "num_layers")
    if "sliding" in layer_types:
        if window is None:
            raise ValueError("layer_types has sliding layers but window is None: give their window, e.g. window=4")
        window = check_positive_int("window", window)
        if not causal:
            raise ValueError("sliding layers need causal=True: a sliding window limits how far back a causal query "
                             "looks")
    elif window is not None:
        raise ValueError(f"window={window!r} but layer_types has no sliding layer: {list(layer_types)}")
    return tuple(layer_types), window


def _check_attention_options(attention) -> dict:
    """More keyword arguments for every layer (chapter 15's controls); the ones the model sets itself are refused."""
    if attention is None:
        return {}
    if not isinstance(attention, dict) or not all(isinstance(key, str) for key in attention):
        raise TypeError(f"attention must be a dict of MultiHeadAttention keyword arguments, e.g. {{'sinks': True}}, "
                        f"got {type(attention).__name__}")
    own = sorted(set(attention) & {"causal", "window", "kernel", "d_kv_in"})
    if own:
        raise ValueError(f"attention cannot set {own[0]!r}: the model sets it (causal, layer_types and window are "
                         f"the model's own arguments; return_weights needs the explicit kernel)")
    return dict(attention)


def _check_mixer(mixer, causal: bool, layer_types, attention: dict) -> str:
    """One of ``MIXERS``; the three without a softmax are causal, have no window and take no attention options."""
    if not isinstance(mixer, str) or mixer not in MIXERS:
        raise ValueError(f"mixer must be one of {list(MIXERS)}, got {mixer!r}")
    if mixer != "softmax":
        used = [name for name, value in (("causal=False", not causal), ("layer_types", layer_types),
                                         ("attention", attention)) if value]
        if used:
            raise ValueError(f"mixer={mixer!r} cannot be combined with {used[0]}: those are options of softmax "
                             f"attention; a state is causal by construction and has no window or score controls")
    return mixer


def _check_tokens(name: str, tokens, task: InductionTask) -> Tensor:
    tokens = check_tensor(name, tokens)
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be an int64 tensor of shape (B, T), got {tokens.dtype} {tuple(tokens.shape)}")
    if not 1 <= tokens.shape[1] <= task.seq_len:
        raise ValueError(f"{name} must have 1 to seq_len = {task.seq_len} tokens per sequence, "
                         f"got {tokens.shape[1]}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= task.vocab_size):
        raise ValueError(f"{name} must hold token ids in [0, {task.vocab_size - 1}], "
                         f"got values from {int(tokens.min())} to {int(tokens.max())}")
    return tokens.long()


def _check_model(name: str, model) -> AttentionOnlyTransformer:
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"{name} must be an AttentionOnlyTransformer (new_model(...) or load_run(...).model), "
                        f"got {type(model).__name__}")
    return model


def _check_batch(name: str, batch) -> Batch:
    if not isinstance(batch, Batch):
        raise TypeError(f"{name} must be a Batch (tokens, periods, targets) from repeated_sequences or sequence, "
                        f"got {type(batch).__name__}")
    tokens = check_tensor(f"{name}.tokens", batch.tokens, ndim=2, layout="(B, T)")
    if batch.targets.shape != tokens.shape or batch.periods.shape != tokens.shape[:1]:
        raise ValueError(f"{name} must hold tokens (B, T), periods (B,) and targets (B, T), got "
                         f"{tuple(tokens.shape)}, {tuple(batch.periods.shape)} and {tuple(batch.targets.shape)}")
    return batch


def knockout_mask(model: AttentionOnlyTransformer, heads: Sequence[tuple[int, int]]) -> Tensor:
    """``(L, H)`` keep mask with zeros at the given ``(layer, head)`` pairs."""
    _check_model("model", model)
    if not isinstance(heads, (list, tuple)):
        raise TypeError(f"heads must be a list of (layer, head) pairs, e.g. [(0, 3)], got {type(heads).__name__}")
    mask = torch.ones(model.num_layers, model.num_heads)
    for pair in heads:
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(isinstance(i, int) and not isinstance(i, bool) for i in pair)):
            raise TypeError(f"heads must be (layer, head) pairs of ints, got {pair!r}")
        layer, head = pair
        if not (0 <= layer < model.num_layers and 0 <= head < model.num_heads):
            raise ValueError(f"heads: ({layer}, {head}) is not a head of this model (layers 0-{model.num_layers - 1}, "
                             f"heads 0-{model.num_heads - 1})")
        mask[layer, head] = 0.0
    return mask


# --------------------------------------------------------------------------------------------------- scores


def _check_weights_and_tokens(weights, tokens, periods) -> tuple[Tensor, Tensor, Tensor]:
    weights = check_tensor("weights", weights)
    if weights.dim() < 3 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError("weights must have shape (B, H, T, T) (or (L, B, H, T, T)), "
                         f"got {tuple(weights.shape)}")
    check_floating("weights", weights)
    T = weights.shape[-1]
    tokens = check_tensor("tokens", tokens)
    B = tokens.shape[0] if tokens.dim() == 2 else -1
    if tokens.dim() != 2 or tokens.shape[1] != T or weights.dim() < 4 or weights.shape[-4] != B:
        raise ValueError(f"tokens must have shape (B, T) matching weights (..., B, H, T, T) = {tuple(weights.shape)}, "
                         f"got {tuple(tokens.shape)}")
    periods = check_tensor("periods", periods)
    if periods.shape != (B,) or periods.dtype.is_floating_point:
        raise ValueError(f"periods must be an integer tensor of shape ({B},), got {periods.dtype} "
                         f"{tuple(periods.shape)}")
    if periods.numel() and (periods.min() < 1 or periods.max() > T - 2):
        raise ValueError(f"periods must be in [1, T - 2 = {T - 2}] (so that some query has a next token to "
                         f"predict), got values from {int(periods.min())} to {int(periods.max())}")
    return weights, tokens.to(weights.device), periods.to(weights.device)


def induction_targets(tokens: Tensor) -> Tensor:
    """``(B, T, T)`` bool: key ``s`` is an induction target of query ``t`` when ``s <= t`` and ``x[s-1] = x[t]``.

    That is the key right *after* an earlier occurrence of the current token: the token to copy.
    """
    tokens = check_tensor("tokens", tokens)
    if tokens.dim() != 2 or tokens.is_floating_point() or tokens.is_complex():
        raise ValueError(f"tokens must be an integer tensor of shape (B, T), got {tokens.dtype} {tuple(tokens.shape)}")
    T = tokens.shape[1]
    previous = torch.cat([torch.full_like(tokens[:, :1], -1), tokens[:, :-1]], dim=1)  # x[s-1], -1 at s = 0
    same = previous[:, None, :] == tokens[:, :, None]  # (B, 1, S) vs (B, T, 1) -> (B, T, S): x[s-1] == x[t]
    causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()  # s <= t
    return same & causal


def previous_token_scores(weights: Tensor, tokens: Tensor, periods: Tensor) -> Tensor:
    """Mean weight on the previous token, ``w[t, t-1]``, over the predictable queries: ``(..., H)``."""
    weights, tokens, periods = _check_weights_and_tokens(weights, tokens, periods)
    queries = periods_to_targets(periods, weights.shape[-1]).to(weights.dtype)  # (B, T)
    previous = F.pad(weights.diagonal(offset=-1, dim1=-2, dim2=-1), (1, 0))  # w[t, t-1], 0 at t = 0: (..., B, H, T)
    return _mean_over_queries(previous, queries)


def induction_scores(weights: Tensor, tokens: Tensor, periods: Tensor) -> Tensor:
    """Mean weight on the induction targets (``induction_targets``), over the predictable queries: ``(..., H)``."""
    weights, tokens, periods = _check_weights_and_tokens(weights, tokens, periods)
    queries = periods_to_targets(periods, weights.shape[-1]).to(weights.dtype)  # (B, T)
    targets = induction_targets(tokens).to(weights.dtype)[:, None]  # (B, T, S) -> (B, 1, T, S)
    on_targets = (weights * targets).sum(dim=-1)  # (..., B, H, T, S) -> (..., B, H, T)
    return _mean_over_queries(on_targets, queries)


def _mean_over_queries(per_query: Tensor, queries: Tensor) -> Tensor:
    """``(..., B, H, T)`` averaged over the ``(B, T)`` queries that are True: ``(..., H)``."""
    q = queries[:, None, :]  # (B, T) -> (B, 1, T)
    return (per_query * q).sum(dim=(-3, -1)) / q.sum()


# --------------------------------------------------------------------------------------------------- training


@dataclass
class TrainingLog:
    """What ``train`` measured: the loss at every step, and each head's scores every ``eval_every`` steps."""

    steps: list[int] = field(default_factory=list)  # the evaluated steps
    loss: list[float] = field(default_factory=list)  # training loss, one per step (step 1 ... steps)
    eval_loss: list[float] = field(default_factory=list)  # held-out loss at each evaluated step
    previous_token: list[list[list[float]]] = field(default_factory=list)  # (n_evals, L, H)
    induction: list[list[list[float]]] = field(default_factory=list)  # (n_evals, L, H)
    seconds: float = 0.0

    def scores(self, kind: str) -> Tensor:
        """``(n_evals, L, H)`` tensor of ``"previous_token"`` or ``"induction"`` scores."""
        if kind not in ("previous_token", "induction"):
            raise ValueError(f"kind must be 'previous_token' or 'induction', got {kind!r}")
        return torch.tensor(getattr(self, kind))


def masked_loss(logits: Tensor, batch: Batch) -> Tensor:
    """Cross-entropy of the predictable next tokens only (query ``t`` predicts token ``t + 1``)."""
    batch = _check_batch("batch", batch)
    logits = check_floating("logits", check_tensor("logits", logits, ndim=3, layout="(B, T, V)"))
    if logits.shape[:2] != batch.tokens.shape:
        raise ValueError(f"logits must have shape (B, T, V) with (B, T) = {tuple(batch.tokens.shape)} as "
                         f"batch.tokens, got {tuple(logits.shape)}")
    T = logits.shape[1]
    predictions = logits[:, :-1]  # (B, T-1, V): the last position has no next token
    targets = batch.tokens[:, 1:T].to(logits.device)  # (B, T-1)
    keep = batch.targets[:, : T - 1].to(logits.device)  # (B, T-1)
    return F.cross_entropy(predictions[keep], targets[keep])


@contextlib.contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """``model.eval()`` inside, the model's own mode restored after, even when the body raises."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def evaluate(model: AttentionOnlyTransformer, batch: Batch, head_mask: Tensor | None = None) -> dict[str, Tensor]:
    """Loss, accuracy and every head's scores on ``batch``: ``{"loss", "accuracy", "previous_token", "induction"}``
    (a model whose mixer has no weights, chapter 16: ``{"loss", "accuracy"}`` only)."""
    _check_model("model", model)
    batch = _check_batch("batch", batch)
    device = next(model.parameters()).device
    scored = model.mixer == "softmax"
    with _evaluating(model):
        if scored:
            logits, weights = model(batch.tokens.to(device), head_mask=head_mask, return_weights=True)
        else:
            logits = model(batch.tokens.to(device), head_mask=head_mask)
    T = batch.tokens.shape[1]
    keep = batch.targets[:, : T - 1].to(device)
    correct = logits[:, :-1].argmax(-1) == batch.tokens[:, 1:].to(device)  # (B, T-1)
    result = {"loss": masked_loss(logits, batch), "accuracy": correct[keep].float().mean()}
    if scored:
        weights = torch.stack(weights)  # L × (B, H, T, T) -> (L, B, H, T, T)
        result["previous_token"] = previous_token_scores(weights, batch.tokens, batch.periods)
        result["induction"] = induction_scores(weights, batch.tokens, batch.periods)
    return result


def train(model: AttentionOnlyTransformer, steps: int = 3000, *, batch_size: int = 64, lr: float = 3e-3,
          seed: int = 0, eval_every: int = 50, eval_size: int = 256,
          callback: Callable[[int, TrainingLog], None] | None = None,
          snapshot_steps: Sequence[int] = ()) -> tuple[TrainingLog, dict[int, dict[str, Tensor]]]:
    """Train ``model`` in place with AdamW; deterministic on the CPU for a given ``seed`` (one thread).

    Returns the log and ``{step: state_dict}`` for each step in ``snapshot_steps`` (0 = before training).
    ``callback(step, log)`` runs after every evaluation (a progress bar, a live plot).
    """
    _check_model("model", model)
    steps = check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    lr = check_positive_float("lr", lr)
    seed = check_seed("seed", seed)
    check_positive_int("eval_every", eval_every)
    check_positive_int("eval_size", eval_size)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function callback(step, log) or None, got {type(callback).__name__}")
    if not isinstance(snapshot_steps, (list, tuple, range, set, frozenset)):
        raise TypeError(f"snapshot_steps must be a list of steps, e.g. (0, 60), got {type(snapshot_steps).__name__}")
    for step in snapshot_steps:  # a step beyond `steps` is allowed and never reached (a short run, same list)
        check_int("snapshot_steps", step, low=0)
    task = model.task
    data = torch.Generator().manual_seed(seed)
    held_out = repeated_sequences(task, eval_size, torch.Generator().manual_seed(seed + 10_000))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    device = next(model.parameters()).device
    log, snapshots = TrainingLog(), {}
    wanted = set(snapshot_steps)

    def record(step):
        result = evaluate(model, held_out)
        log.steps.append(step)
        log.eval_loss.append(result["loss"].item())
        if "previous_token" in result:  # a mixer without weights has no head scores
            log.previous_token.append(result["previous_token"].tolist())
            log.induction.append(result["induction"].tolist())
        if step in wanted:
            snapshots[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if callback is not None:
            callback(step, log)

    start = time.perf_counter()
    model.train()
    with one_thread():  # one thread: the run repeats bit for bit (two threads are a little faster, not exact)
        record(0)
        for step in range(1, steps + 1):
            batch = repeated_sequences(task, batch_size, data)
            loss = masked_loss(model(batch.tokens.to(device)), batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            log.loss.append(loss.item())
            if step % eval_every == 0 or step == steps or step in wanted:
                record(step)
    log.seconds = time.perf_counter() - start
    return log, snapshots


# --------------------------------------------------------------------------------------------------- generation


@torch.no_grad()
def generation_accuracy(model: AttentionOnlyTransformer, batch: Batch) -> dict[str, Tensor]:
    """How often the predictable tokens come out right, read two ways.

    ``"teacher_forced"``: the whole true sequence goes in at once and every position predicts its next token
    (how the model was trained). ``"generated"``: each sequence's prompt is its first copy plus one token; the
    model then writes the rest one token at a time, seeing only what came before (how a language model is
    used). A causal model scores a little lower generated (its own early mistakes feed its later guesses: 95.4 %
    against 99.4 % in chapter 11); a model trained without the mask collapses (16.5 %).
    """
    _check_model("model", model)
    batch = _check_batch("batch", batch)
    device = next(model.parameters()).device
    tokens = batch.tokens.to(device)
    T = tokens.shape[1]
    keep = batch.targets[:, : T - 1].to(device)  # (B, T-1): the predictable next tokens
    written = tokens.clone()  # the true tokens until a sequence's predictable part begins, then the model's
    with _evaluating(model):
        forced = model(tokens)[:, :-1].argmax(-1) == tokens[:, 1:]  # (B, T-1)
        for t in range(T - 1):
            prediction = model(written[:, : t + 1])[:, -1].argmax(-1)  # only tokens 0..t exist yet: (B,)
            written[:, t + 1] = torch.where(keep[:, t], prediction, written[:, t + 1])
    generated = written[:, 1:] == tokens[:, 1:]  # (B, T-1)
    return {"teacher_forced": forced[keep].float().mean(), "generated": generated[keep].float().mean()}


@torch.no_grad()
def generate(model: AttentionOnlyTransformer, prompt: Tensor, new_tokens: int, *, use_cache: bool = True) -> Tensor:
    """Greedy generation: ``prompt`` ``(B, T0)`` followed by ``new_tokens`` tokens, each the most likely next one.

    ``use_cache=False`` runs the whole sequence so far through the model at every step (as
    ``generation_accuracy`` does); ``use_cache=True`` runs the prompt once, then one token per step, each layer's
    ``KVCache`` holding the keys and values of everything before it (chapter 12). Both give the same tokens.
    """
    _check_model("model", model)
    prompt = _check_tokens("prompt", prompt, model.task)
    new_tokens = check_int("new_tokens", new_tokens, low=0)
    if prompt.shape[1] + new_tokens > model.task.seq_len:
        raise ValueError(f"prompt ({prompt.shape[1]} tokens) + new_tokens ({new_tokens}) must fit seq_len = "
                         f"{model.task.seq_len}")
    use_cache = check_flag("use_cache", use_cache)
    if use_cache and not model.config.causal:
        raise ValueError("use_cache=True needs a causal model: this one was built with causal=False, so every "
                         "token's output depends on the tokens after it and cannot be kept; use use_cache=False")
    tokens = prompt.to(next(model.parameters()).device)
    caches = model.new_caches() if use_cache else None
    step_input = tokens  # with a cache: the prompt first, then only the newest token
    with _evaluating(model):
        for _ in range(new_tokens):
            logits = model(step_input if use_cache else tokens, kv_caches=caches)  # (B, T_in, V)
            next_token = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens = torch.cat([tokens, next_token], dim=1)
            step_input = next_token
    return tokens


# --------------------------------------------------------------------------------------------------- the runs


RUN_SETTINGS = {  # the chapter's three runs: the same task, seed and optimiser, one thing changed
    "two_layer": dict(num_layers=2, causal=True),
    "one_layer": dict(num_layers=1, causal=True),
    "no_mask": dict(num_layers=2, causal=False),
}
TRAIN_STEPS = 3000
SHORT_STEPS = 800  # the "short run" for a slow machine: the previous-token head is still forming
SNAPSHOT_STEPS = (0, 60, 150, 500, 1250, 3000)  # heads drawn over training (chapter 11's film strip)
SEED = 0


def new_model(name: str, task: InductionTask | None = None, seed: int = SEED) -> AttentionOnlyTransformer:
    """The untrained model of run ``name`` (``"two_layer"``, ``"one_layer"`` or ``"no_mask"``), seeded."""
    if name not in RUN_SETTINGS:
        raise ValueError(f"name must be one of {list(RUN_SETTINGS)}, got {name!r}")
    seed = check_seed("seed", seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AttentionOnlyTransformer(task or InductionTask(), **RUN_SETTINGS[name])


class Run(NamedTuple):
    """A trained run: the model at its last step, the training log, and the model at each snapshot step."""

    name: str
    model: AttentionOnlyTransformer
    log: TrainingLog
    snapshots: dict[int, AttentionOnlyTransformer]


def train_run(name: str, steps: int = TRAIN_STEPS, *, callback=None, snapshot_steps: Sequence[int] = ()) -> Run:
    """Train run ``name`` from scratch, as ``tests/train_induction.py`` did for the shipped checkpoints."""
    model = new_model(name)
    log, states = train(model, steps, seed=SEED, callback=callback, snapshot_steps=snapshot_steps)
    return Run(name, model, log, {step: _model_from_state(name, model.task, state) for step, state in states.items()})


def _model_from_state(name: str, task: InductionTask, state: dict[str, Tensor]) -> AttentionOnlyTransformer:
    model = AttentionOnlyTransformer(task, **RUN_SETTINGS[name])
    model.load_state_dict(state)
    return model.eval()


def save_run(run: Run, path: str | Path) -> None:
    """One run in one file: its task, its settings, its log and the weights at every snapshot step."""
    if not isinstance(run, Run):
        raise TypeError(f"run must be a Run (what train_run or load_run returns), got {type(run).__name__}")
    torch.save({
        "name": run.name,
        "task": asdict(run.model.task),
        "log": asdict(run.log),
        "snapshots": {step: model.state_dict() for step, model in run.snapshots.items()},
    }, path)


def load_run(name: str) -> Run:
    """Run ``name`` as trained by ``tests/train_induction.py`` and shipped inside the package (no download)."""
    if name not in RUN_SETTINGS:
        raise ValueError(f"name must be one of {list(RUN_SETTINGS)}, got {name!r}")
    path = CHECKPOINTS / f"{name}.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `python tests/train_induction.py` to train it again")
    saved = torch.load(path, map_location="cpu", weights_only=True)
    task = InductionTask(**saved["task"])
    snapshots = {int(step): _model_from_state(name, task, state) for step, state in saved["snapshots"].items()}
    return Run(name, snapshots[max(snapshots)], TrainingLog(**saved["log"]), snapshots)
