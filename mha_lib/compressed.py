"""DeepSeek-V4's compressed attention: pool every m tokens into one entry, then let an indexer pick the entries each
query reads (chapter 17, optional section "DeepSeek-V4: compress the tokens, then select").

Shape glossary: B batch, T tokens, D model width, H heads, Dh head width, m the compression rate, W = ⌊T/m⌋ entries,
dr the rotary width, Hi and di the indexer's heads and head width, g output groups.

Every layer attends to its last ``sliding_window`` raw tokens; a compressed layer also attends to *entries*, each
standing for a window of m tokens, pooled by a softmax over the window's slots, channel by channel:

    kv_t     = RMSNorm(x_t W_kv)                          one key = value per token for all H heads (width Dh)
    entry_w  = RMSNorm(Σ_j softmax_j(Z_j + B_j) ⊙ C_j)     C = x W_C, Z = x W_Z, B a learned bias per slot
                                                          (compress_windows: j over window w's slots)
    HCA  (heavily compressed)   windows side by side, every completed entry visible
    CSA  (compressed sparse)    overlap=True: window w pools 2m slots, window w-1's first series and its own second;
         a lightning indexer (pooled keys k_w of width di) scores I[t, w] = Σ_h w_h(x_t)·ReLU(q_h(t)·k_w·di^-½)
         and each query reads its ``index_topk`` best entries
    query t sees entry w once its window is complete, (w + 1)·m ≤ t + 1 (entry_visibility)

The queries go through a low rank (q_down, RMSNorm, q_up) and an RMSNorm per head without weight; RoPE turns the
*trailing* dr dimensions of queries, keys and entries in neighbouring pairs (x[2i], x[2i+1]), an entry at the
position of the first token of its own window (w·m; a CSA entry also pools the window before). The value is the
key, so it is rotated too: the output's rotary part is turned back (by minus the query's position), which leaves
each key's contribution a function of the distance alone. One learned sink logit per head; the output goes through
a grouped low-rank projection (g groups of H/g heads, each to ``o_lora_rank``, then one linear mix).

Cached per token and layer (transformers decodes; here the chapter only counts): Dh/m numbers per token for the
entries, and di/m more for the indexer's keys (CSA). Besides, a fixed part per layer: the window's keys (the last
``sliding_window`` - 1 tokens; the new token completes the window) and, for the window still filling, each token's
pooling inputs C and Z (up to m - 1 tokens: 2·Dh numbers each in HCA, 4·Dh + 4·di in CSA). DeepSeek-V4 (Dh = 512,
di = 128): CSA m = 4 caches 160 numbers per token of context, HCA m = 128 caches 4, against DeepSeek-V3.2's 704
(chapter 17: its latent, rotary key and indexer key).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .functional import explicit_attention, merge_heads
from .masks import causal_mask_at
from .positions import YaRN, interleaved_order, rope_cos_sin, rope_frequencies, rotate_half
from .validation import (
    check_flag,
    check_float_tensor,
    check_index_options,
    check_int,
    check_matches_weights,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_same_device_dtype,
    check_sequence,
    check_tensor,
)

Tensor = torch.Tensor

#: DeepSeek-V4's RoPE bases: "main" for the sliding layers, "compress" for the compressed ones
MAIN_ROPE_THETA, COMPRESS_ROPE_THETA = 10000.0, 160000.0


def compress_windows(kv: Tensor, gate: Tensor, position_bias: Tensor, rate: int, *, overlap: bool = False) -> Tensor:
    """Windows of ``rate`` m tokens pooled into one entry each: ``Σ_j softmax_j(gate_j + position_bias_j) · kv_j``
    over the window's slots j, a softmax per channel. Returns ``(B, W, Dh)``, W = ⌊T/m⌋: an incomplete trailing
    window has no entry. (DeepSeek-V4 then applies an RMSNorm and RoPE.)

    ``kv`` and ``gate`` ``(B, T, C)``, ``position_bias`` ``(m, C)``: one bias per slot of a window and channel.
    ``overlap=False`` (HCA): C = Dh, window w pools tokens ``w·m .. w·m + m - 1``.
    ``overlap=True`` (CSA): C = 2·Dh, two series per token: the first half of the channels feeds the *next* window's
    entry, the second half its own. Entry w pools 2m slots, the first series of window w - 1 then the second series
    of window w (transformers' ``DeepseekV4CSACompressor``); window 0 has no previous window, its first m slots get
    weight 0. Entries then overlap by m tokens, each seeing 2m.
    """
    kv = check_float_tensor("kv", kv, ndim=3, layout="(B, T, C)")
    gate = check_float_tensor("gate", gate, ndim=3, layout="(B, T, C)")
    position_bias = check_float_tensor("position_bias", position_bias, ndim=2, layout="(rate, C)")
    check_same_device_dtype(("kv", "gate", "position_bias"), (kv, gate, position_bias))
    rate = check_positive_int("rate", rate)
    overlap = check_flag("overlap", overlap)
    if gate.shape != kv.shape:
        raise ValueError(f"gate must have kv's shape (B, T, C) = {tuple(kv.shape)}: one gate logit per number pooled, "
                         f"got {tuple(gate.shape)}")
    B, T, C = kv.shape
    if tuple(position_bias.shape) != (rate, C):
        raise ValueError(f"position_bias must be (rate, C) = ({rate}, {C}): one bias per slot of a window and "
                         f"channel, got {tuple(position_bias.shape)}")
    if overlap and C % 2:
        raise ValueError(f"overlap=True needs an even number of channels C = 2·Dh (two series per token), got C = {C}")
    width = C // 2 if overlap else C  # Dh
    W = T // rate
    if W == 0:
        return kv.new_zeros(B, 0, width)
    kv = kv[:, : W * rate].reshape(B, W, rate, C)  # (B, T, C) -> (B, W, m, C): the trailing tokens dropped
    gate = gate[:, : W * rate].reshape(B, W, rate, C) + position_bias  # (B, W, m, C) + (m, C)
    if overlap:
        next_kv, own_kv = kv.split(width, dim=-1)  # (B, W, m, Dh) each: the series for window w + 1, for w
        next_gate, own_gate = gate.split(width, dim=-1)
        # window w reads window w - 1's first series: shifted by one window, window 0 gets -inf gates (weight 0)
        previous_kv = F.pad(next_kv[:, :-1], (0, 0, 0, 0, 1, 0))  # (B, W, m, Dh), zeros in window 0
        previous_gate = F.pad(next_gate[:, :-1], (0, 0, 0, 0, 1, 0), value=float("-inf"))
        kv = torch.cat([previous_kv, own_kv], dim=2)  # (B, W, 2m, Dh): 2m slots per entry
        gate = torch.cat([previous_gate, own_gate], dim=2)
    weights = gate.softmax(dim=2, dtype=torch.float32).to(kv.dtype)  # over the slots, per channel (float32)
    return (kv * weights).sum(dim=2)  # (B, W, m or 2m, Dh) -> (B, W, Dh)


def entry_visibility(positions: Tensor, entries: int, rate: int) -> Tensor:
    """Keep mask ``(T, W)``: the query at position ``positions[t]`` sees entry w when the entry's window is complete,
    ``(w + 1)·m ≤ t + 1`` (window w holds positions ``w·m .. w·m + m - 1``), as transformers' block bias. The
    entries visible to a query are always the first ones, ``0 .. ⌊(t + 1)/m⌋ - 1``. ``positions`` ``(T,)``
    integers >= 0, ``entries`` W >= 0, ``rate`` m >= 1."""
    positions = _check_positions(positions)
    entries = check_int("entries", entries, low=0)
    rate = check_positive_int("rate", rate)
    ends = (torch.arange(entries, device=positions.device) + 1) * rate  # (W,): one past each window's last position
    return ends[None, :] <= positions.to(torch.int64)[:, None] + 1  # (1, W) <= (T, 1) -> (T, W)


def _check_positions(positions, length: int | None = None, device=None) -> Tensor:
    check_tensor("positions", positions, ndim=1, layout="(T,)")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be an integer tensor (token positions 0, 1, 2, ...), got {positions.dtype}")
    if length is not None and positions.shape[0] != length:
        raise ValueError(f"positions must hold one position per token: x has T = {length} tokens, got "
                         f"{positions.shape[0]} positions")
    if device is not None and positions.device != device:
        raise ValueError(f"positions is on {positions.device} but x is on {device}; move both to one device, e.g. "
                         f"positions.to(x.device)")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got {int(positions.min())}")
    return positions


class WindowCompressor(nn.Module):
    """The weights that pool x into entries of ``width``: per token a value C and a gate Z (two series of each with
    ``overlap``), a bias per slot of a window, an RMSNorm after the pooling (``compress_windows``). Names in
    transformers' ``DeepseekV4HCACompressor`` / ``DeepseekV4CSACompressor``: ``kv_proj``, ``gate_proj``,
    ``position_bias``, ``kv_norm``."""

    def __init__(self, d_model: int, width: int, rate: int, overlap: bool, norm_eps: float = 1e-6):
        super().__init__()
        self.width, self.rate, self.overlap = width, rate, overlap
        series = 2 if overlap else 1
        self.W_kv = nn.Linear(d_model, series * width, bias=False)  # kv_proj
        self.W_gate = nn.Linear(d_model, series * width, bias=False)  # gate_proj
        self.position_bias = nn.Parameter(torch.zeros(rate, series * width))  # transformers starts it at 0 too
        self.norm = nn.RMSNorm(width, eps=norm_eps)  # kv_norm

    def forward(self, x: Tensor) -> Tensor:
        """``(B, T, D) -> (B, W, width)``: the entries, normalised, before RoPE."""
        pooled = compress_windows(self.W_kv(x), self.W_gate(x), self.position_bias, self.rate, overlap=self.overlap)
        return self.norm(pooled)

    def extra_repr(self) -> str:
        return f"width={self.width}, rate={self.rate}, overlap={self.overlap}"


class EntryIndexer(nn.Module):
    """DeepSeek-V4's lightning indexer (CSA): it ranks the entries for ``CompressedAttention(index_topk=)``.

    Its keys are entries of its own, ``head_dim`` di wide, pooled over the layer's windows (``compressor``); its
    ``num_heads`` Hi queries come from the layer's compressed, normalised query; one weight per head and query from
    x. Names in transformers' ``DeepseekV4Indexer``: ``kv_proj, gate_proj, position_bias, kv_norm`` (our
    ``compressor``), ``q_b_proj`` (``W_query``), ``scorer.weights_proj`` (``W_head_weights``).
    """

    def __init__(self, d_model: int, query_width: int, num_heads: int, head_dim: int, rate: int, overlap: bool,
                 norm_eps: float = 1e-6):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.compressor = WindowCompressor(d_model, head_dim, rate, overlap, norm_eps)
        self.W_query = nn.Linear(query_width, num_heads * head_dim, bias=False)  # q_b_proj
        self.W_head_weights = nn.Linear(d_model, num_heads, bias=False)  # scorer.weights_proj

    def score(self, q: Tensor, x: Tensor, keys: Tensor) -> Tensor:
        """``I = Σ_h w_h · ReLU(q_h · k · di^-½)``, ``w_h = (x W_head_weights)_h · Hi^-½``: q ``(B, Hi, T, di)``,
        x ``(B, T, D)``, keys ``(B, W, di)`` -> ``(B, T, W)``, in float32 (as transformers)."""
        per_head = (q.float() @ keys.float().transpose(1, 2)[:, None]).relu() * self.head_dim ** -0.5  # (B,Hi,T,W)
        weights = self.W_head_weights(x).float() * self.num_heads ** -0.5  # (B, T, Hi), may be negative
        return torch.einsum("bhtw,bth->btw", per_head, weights)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}"


class CompressedAttention(nn.Module):
    """DeepSeek-V4's attention layer, its three kinds in one class: a sliding window over the raw tokens, plus
    (with ``compress_rate``) entries that each pool a window of m tokens, plus (with ``index_topk``) an indexer
    that picks the entries each query reads.

    ================================================  ==============================================================
    ``compress_rate=None``                            sliding only (transformers' ``sliding_attention``)
    ``compress_rate=m, overlap=True, index_topk=k``   CSA, ``compressed_sparse_attention`` (DeepSeek-V4: m = 4)
    ``compress_rate=m``                               HCA, ``heavily_compressed_attention`` (m = 128): every
                                                      completed entry visible
    ================================================  ==============================================================

    ``d_model`` D in and out, ``num_heads`` H of ``head_dim`` Dh reading ONE shared key = value head;
    ``q_lora_rank`` rq, the queries' low rank; ``rope_dim`` dr, the trailing dimensions of each head that RoPE turns
    (transformers: ``head_dim × partial_rotary_factor``); ``sliding_window`` the raw tokens each query sees (itself
    included); ``o_groups`` g groups of H/g heads, each projected to ``o_lora_rank`` before the output mix;
    ``index_heads`` Hi and ``index_head_dim`` di (>= dr) size the indexer. ``overlap`` and ``index_topk`` go with
    ``compress_rate``; either may be used alone (an HCA layer with an indexer, a CSA layer without), which DeepSeek-V4
    does not do. ``rope_theta`` None picks DeepSeek-V4's: 10,000 for a sliding layer ("main"), 160,000 for a
    compressed one ("compress"); ``yarn`` (a ``YaRN``) stretches it (transformers applies YaRN to the compressed
    layers only, with ``attention_factor=1``). ``norm_eps`` the RMSNorms' epsilon.

    forward(x, positions=None, *, return_weights=False)
        x ``(B, T, D)``; ``positions`` ``(T,)`` the tokens' positions (default ``0 .. T-1``). Returns ``(B, T, D)``
        and, with ``return_weights=True``, the weights ``(B, H, T, T + W)``: the T raw tokens, then the W entries
        (0 where not seen; rows sum to less than 1, the sink takes the rest). Explicit attention, a reference:
        it holds the T × (T + W) scores.
    select(x, positions=None) -> ``(B, T, min(k, W))`` int64: the entries each query of a layer with an indexer
        reads, best index score first; a query that sees fewer than k entries gets all of them, then -1s.
    index_scores(x, positions=None) -> ``(B, T, W)`` float32: the indexer's scores, ``-inf`` on entries a query
        cannot see yet.

    The windows are cut from x's first token: entry w pools tokens ``w·m ..`` and sits at position ``w·m``, whatever
    ``positions`` says (transformers' convention without a cache: x starts the sequence); ``positions`` place the
    queries and the raw keys, and a query at position t sees the entries with ``(w + 1)·m ≤ t + 1``. So shifting the
    positions changes the output (the entries stay, the queries move), and positions that do not start at 0 let a
    query see entries that pool tokens after it: keep the default unless comparing with transformers.
    No KV cache: decoding token by token is transformers' job here (its ``DeepseekV4HCACache`` / ``CSACache`` keep
    the window, the entries and the unfinished window); the chapter counts what it keeps (module docstring).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        head_dim: int,
        *,
        q_lora_rank: int,
        rope_dim: int,
        sliding_window: int,
        o_groups: int = 1,
        o_lora_rank: int,
        compress_rate: int | None = None,
        overlap: bool = False,
        index_topk: int | None = None,
        index_heads: int | None = None,
        index_head_dim: int | None = None,
        rope_theta: float | None = None,
        yarn: YaRN | None = None,
        norm_eps: float = 1e-6,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.q_lora_rank = check_positive_int("q_lora_rank", q_lora_rank)
        self.rope_dim = check_positive_int("rope_dim", rope_dim)
        if self.rope_dim % 2 or self.rope_dim > self.head_dim:
            raise ValueError(f"rope_dim must be even (RoPE turns the dimensions in pairs) and at most head_dim = "
                             f"{head_dim} (it turns each head's last rope_dim dimensions), got {rope_dim}")
        self.sliding_window = check_positive_int("sliding_window", sliding_window)
        self.o_groups = check_positive_int("o_groups", o_groups)
        if self.num_heads % self.o_groups:
            raise ValueError(f"o_groups must divide num_heads = {num_heads} (each group projects whole heads), got "
                             f"{o_groups}")
        self.o_lora_rank = check_positive_int("o_lora_rank", o_lora_rank)
        self.compress_rate = None if compress_rate is None else check_positive_int("compress_rate", compress_rate)
        self.overlap = check_flag("overlap", overlap)
        if self.overlap and self.compress_rate is None:
            raise ValueError("overlap=True needs compress_rate: it makes the compressed windows overlap (CSA), and "
                             "this layer has compress_rate=None (sliding only)")
        self.index_topk = check_index_options(index_topk, index_heads, index_head_dim, 0)
        if self.index_topk is not None:
            if self.compress_rate is None:
                raise ValueError(f"index_topk={index_topk} needs compress_rate: the indexer picks among the "
                                 f"compressed entries, and this layer has compress_rate=None (sliding only)")
            if index_head_dim < self.rope_dim:
                raise ValueError(f"index_head_dim must be at least rope_dim = {rope_dim} (the indexer turns its last "
                                 f"rope_dim dimensions), got {index_head_dim}")
        if rope_theta is None:
            rope_theta = MAIN_ROPE_THETA if self.compress_rate is None else COMPRESS_ROPE_THETA
        self.rope_theta = check_positive_float("rope_theta", rope_theta)
        if yarn is not None and not isinstance(yarn, YaRN):
            raise TypeError(f"yarn must be a mha_lib.YaRN or None, got {type(yarn).__name__}")
        self.yarn = yarn
        self.norm_eps = check_positive_float("norm_eps", norm_eps)
        self.dropout_p = check_probability("dropout", dropout)

        H, Dh, rq = self.num_heads, self.head_dim, self.q_lora_rank
        self.q_down = nn.Linear(d_model, rq, bias=False)  # q_a_proj
        self.q_norm = nn.RMSNorm(rq, eps=self.norm_eps)  # q_a_norm
        self.q_up = nn.Linear(rq, H * Dh, bias=False)  # q_b_proj
        self.W_kv = nn.Linear(d_model, Dh, bias=False)  # kv_proj: the one key = value head
        self.kv_norm = nn.RMSNorm(Dh, eps=self.norm_eps)
        self.sinks = nn.Parameter(torch.zeros(H))  # one logit per head (transformers starts them at 0)
        # used as g blocks, never as a whole: rows g·dg (group i's dg rows together), columns one group's H·Dh/g
        self.out_down = nn.Linear(H * Dh // self.o_groups, self.o_groups * self.o_lora_rank, bias=False)  # o_a_proj
        self.out_proj = nn.Linear(self.o_groups * self.o_lora_rank, d_model, bias=False)  # o_b_proj
        self.compressor = None if self.compress_rate is None else WindowCompressor(
            d_model, Dh, self.compress_rate, self.overlap, self.norm_eps)
        self.indexer = None if self.index_topk is None else EntryIndexer(
            d_model, rq, index_heads, index_head_dim, self.compress_rate, self.overlap, self.norm_eps)

        dr = self.rope_dim
        speeds = rope_frequencies(dr, self.rope_theta) if yarn is None else yarn.speeds(dr, self.rope_theta)
        self.register_buffer("rope_speeds", speeds, persistent=False)  # (dr/2,)
        self.rope_gain = 1.0 if yarn is None else yarn.rope_gain  # what YaRN multiplies cos and sin by
        order = interleaved_order(dr)  # neighbouring pairs (2i, 2i+1) -> (i, i + dr/2), rotate-half's layout
        self.register_buffer("_to_halves", order, persistent=False)
        self.register_buffer("_to_pairs", order.argsort(), persistent=False)

    @property
    def W_out_groups(self) -> Tensor:
        """``(g, o_lora_rank, H·Dh/g)``: group i's projection of its H/g heads' outputs."""
        return self.out_down.weight.view(self.o_groups, self.o_lora_rank, -1)

    def _turn(self, x: Tensor, positions: Tensor, *, back: bool = False) -> Tensor:
        """RoPE on the last ``rope_dim`` dimensions of x ``(..., T, width)``, in DeepSeek's neighbouring pairs
        (x[2i], x[2i+1]): read in rotate-half's layout (``interleaved_order``), turned, put back. ``back=True`` turns
        by minus the positions (cos and -sin): the output's rotary part, undone at the query."""
        dr = self.rope_dim
        passing, turning = x.split([x.shape[-1] - dr, dr], dim=-1)
        turning = turning[..., self._to_halves]  # (..., T, dr): pair i at (i, i + dr/2)
        cos, sin = rope_cos_sin(positions, dr, speeds=self.rope_speeds)  # (T, dr) each, float32
        if self.rope_gain != 1.0:
            cos, sin = cos * self.rope_gain, sin * self.rope_gain
        turned = turning.float() * cos + rotate_half(turning).float() * (-sin if back else sin)
        return torch.cat([passing, turned.to(x.dtype)[..., self._to_pairs]], dim=-1)

    def _inputs(self, x: Tensor, positions) -> Tensor:
        """Checks x and returns the positions ``(T,)`` (``0 .. T-1`` when None)."""
        check_sequence("x", x, self.d_model, width_name="d_model")
        check_matches_weights("x", x, self.W_kv.weight)
        if positions is None:
            return torch.arange(x.shape[1], device=x.device)
        return _check_positions(positions, x.shape[1], x.device)

    def _entries(self, compressor: WindowCompressor, x: Tensor) -> Tensor:
        """``(B, W, width)``: x's windows pooled, normalised, entry w turned at position w·m."""
        entries = compressor(x)  # (B, W, width)
        return self._turn(entries, torch.arange(entries.shape[1], device=x.device) * self.compress_rate)

    def _scores(self, x: Tensor, compressed_q: Tensor, positions: Tensor) -> Tensor:
        """The indexer's ``(B, T, W)`` float32 scores, ``-inf`` on entries a query cannot see yet."""
        B, T, _ = x.shape
        keys = self._entries(self.indexer.compressor, x)  # (B, W, di)
        q = self.indexer.W_query(compressed_q).view(B, T, self.indexer.num_heads, -1).transpose(1, 2)  # (B,Hi,T,di)
        scores = self.indexer.score(self._turn(q, positions), x, keys)  # (B, T, W)
        return scores.masked_fill(~entry_visibility(positions, keys.shape[1], self.compress_rate), float("-inf"))

    def _select(self, x: Tensor, compressed_q: Tensor, positions: Tensor) -> Tensor:
        """``(B, T, min(k, W))``: each query's top k visible entries, best first, then -1 where it sees fewer."""
        scores = self._scores(x, compressed_q, positions)  # (B, T, W)
        top = scores.topk(min(self.index_topk, scores.shape[-1]), dim=-1).indices  # the visible ones first
        visible = ((positions.to(torch.int64) + 1) // self.compress_rate)[:, None]  # (T, 1): entries 0 .. seen - 1
        return top.masked_fill(top >= visible, -1)  # a future entry (fewer than k visible) is no pick

    def _entry_keep(self, x: Tensor, compressed_q: Tensor, positions: Tensor, entries: int) -> Tensor:
        """Keep mask ``(B or 1, T, W)`` over the entries: the completed ones, or (indexer) the picked ones."""
        sees = entry_visibility(positions, entries, self.compress_rate)[None]  # (1, T, W)
        if self.indexer is None or self.index_topk >= entries:  # k >= W: every visible entry is picked
            return sees
        with torch.no_grad():  # a choice, not a function to differentiate (transformers' indices carry no gradient)
            picked = self._select(x, compressed_q, positions)  # (B, T, k), -1: none
        chosen = torch.zeros(*picked.shape[:2], entries + 1, dtype=torch.bool, device=x.device)  # (B, T, W + 1)
        chosen.scatter_(-1, picked.masked_fill(picked < 0, entries), True)  # a -1 lands in the spare last column
        return chosen[..., :entries]  # (B, T, W)

    def forward(self, x: Tensor, positions: Tensor | None = None, *, return_weights: bool = False):
        return_weights = check_flag("return_weights", return_weights)
        positions = self._inputs(x, positions)
        B, T, _ = x.shape
        H, Dh = self.num_heads, self.head_dim

        compressed_q = self.q_norm(self.q_down(x))  # (B, T, rq)
        q = self.q_up(compressed_q).view(B, T, H, Dh).transpose(1, 2)  # (B, T, H·Dh) -> (B, H, T, Dh)
        q = self._turn(F.rms_norm(q, (Dh,), eps=self.norm_eps), positions)  # a weightless RMSNorm per head, RoPE
        kv = self._turn(self.kv_norm(self.W_kv(x)), positions)  # (B, T, Dh): each token's key, and its value
        keep = causal_mask_at(positions, positions, window=self.sliding_window)[None]  # (1, T, T): the window
        if self.compressor is not None:
            entries = self._entries(self.compressor, x)  # (B, W, Dh)
            sees = self._entry_keep(x, compressed_q, positions, entries.shape[1])  # (B or 1, T, W)
            kv = torch.cat([kv, entries], dim=1)  # (B, T + W, Dh): the raw tokens, then the entries
            keep = torch.cat([keep.expand(sees.shape[0], T, T), sees], dim=-1)  # (B or 1, T, T + W)
        shared = kv[:, None].expand(B, H, kv.shape[1], Dh)  # (B, S, Dh) -> (B, H, S, Dh): one head for all, a view
        context, weights = explicit_attention(
            q, shared, shared, keep[:, None], dropout_p=self.dropout_p if self.training else 0.0, sinks=self.sinks)
        context = self._turn(context, positions, back=True)  # (B, H, T, Dh): the values' rotation undone
        grouped = merge_heads(context).view(B, T, self.o_groups, -1)  # (B, T, H·Dh) -> (B, T, g, H·Dh/g)
        per_group = torch.einsum("btgi,goi->btgo", grouped, self.W_out_groups)  # (B, T, g, o_lora_rank)
        out = self.out_proj(per_group.flatten(2))  # (B, T, g·o_lora_rank) -> (B, T, D)
        return (out, weights) if return_weights else out

    def _need_indexer(self, method: str) -> None:
        if self.indexer is None:
            raise ValueError(f"{method} needs the indexer: build the layer with compress_rate, index_topk (and "
                             f"index_heads, index_head_dim), as DeepSeek-V4's CSA layers; this layer has "
                             f"index_topk=None")

    def select(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """The entries each query of ``x`` ``(B, T, D)`` reads: ``(B, T, min(index_topk, W))`` int64 entry indices
        (entry w pools tokens ``w·m ..``), best index score first. A query never picks an entry whose window is not
        complete at its position; one that sees fewer than ``index_topk`` entries gets all it sees, then ``-1`` for
        each missing one. The selection ``forward`` applies."""
        self._need_indexer("select")
        positions = self._inputs(x, positions)
        with torch.no_grad():
            return self._select(x, self.q_norm(self.q_down(x)), positions)

    def index_scores(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """The indexer's scores ``I[t, w]`` ``(B, T, W)``, float32, ``-inf`` where entry w's window is not complete
        at query t's position; ``select`` takes the top k of each row."""
        self._need_indexer("index_scores")
        positions = self._inputs(x, positions)
        with torch.no_grad():
            return self._scores(x, self.q_norm(self.q_down(x)), positions)

    def extra_repr(self) -> str:
        extra = "" if self.compress_rate is None else f", compress_rate={self.compress_rate}, overlap={self.overlap}"
        extra += "" if self.index_topk is None else f", index_topk={self.index_topk}"
        return (f"num_heads={self.num_heads}, head_dim={self.head_dim}, q_lora_rank={self.q_lora_rank}, "
                f"rope_dim={self.rope_dim}, sliding_window={self.sliding_window}, o_groups={self.o_groups}, "
                f"o_lora_rank={self.o_lora_rank}{extra}")


__all__ = ["CompressedAttention", "EntryIndexer", "WindowCompressor", "compress_windows", "entry_visibility"]
