"""Multi-head latent attention (MLA, DeepSeek-V2 and V3): keys and values compressed into one small latent per token
(chapter 14).

A decoder's KV cache holds ``2 × G × Dh`` numbers per token and layer (chapter 12). MLA caches ``r + dr``:

    latent  c = RMSNorm(x W_dkv)          (B, T, r)    r = kv_lora_rank: compressed keys AND values
    rotary  k_rope = RoPE(x W_kr)         (B, T, dr)   one rotary key shared by all heads
    per head h:  k_h = [c W_uk[h]ᵀ, k_rope]     v_h = c W_uv[h]ᵀ     (W_uk[h] (dn, r), W_uv[h] (dv, r))
    queries:     q_h = [q_nope_h, RoPE(q_rope_h)]   from x, optionally through a compressed query (q_lora_rank)

The *absorbed* form never expands the latent: ``q_nope_h · (W_uk[h] c) = (W_uk[h]ᵀ q_nope_h) · c``, so folding W_uk
into the query scores it against the cached latent directly, and W_uv is applied after the softmax
(``Σ p v_h = W_uv[h] Σ p c``). The rotary part cannot be folded: RoPE's rotation depends on the position of the
query and of the key, and would sit between q and W_uk (DeepSeek-V2, §2.1.3); hence the separate rotary key, small
and shared, cached beside the latent.

DeepSeek-V3.2's sparse attention (DSA, chapter 17) keeps this layer and adds a *lightning indexer*: a second, tiny
attention that only ranks. It has its own Hi heads of width di, ReLU instead of a softmax and one weight per head:

    I[t, s] = Σ_h w_h(x_t) · ReLU(q_h(t) · k(s) · di^-½)      q_h from MLA's compressed query, k = LayerNorm(x W_k)
                                                              (its own rotary layout: half-split, first dr dims)

and each query attends to the ``index_topk`` keys it may see with the highest I[t, s]. The indexer's key ``k(s)``
(di numbers) is cached beside the latent: ``r + dr + di`` numbers per token and layer (576 + 128 for V3.2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .cache import KVCache
from .functional import KERNELS, merge_heads
from .modules import causal_attention_at
from .positions import YaRN, apply_rope
from .validation import (
    check_flag,
    check_matches_weights,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_index_options,
    check_sequence,
)

Tensor = torch.Tensor

#: the sparse path and ``select`` go by blocks of queries: at most this many numbers in a block's largest tensor
#: (the indexer's scores (B, Hi, Tb, S), or the gathered keys and values), 8 MiB in float32
BLOCK_NUMBERS = 2**21


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: the weights that rank the keys for ``MultiHeadLatentAttention(index_topk=)``.

    It attends to nothing; it scores. ``num_heads`` Hi heads of ``head_dim`` di; the queries come from
    ``query_width`` inputs (MLA's compressed, normalised query, ``q_lora_rank`` wide; ``x`` when the layer has none),
    one key per token from ``x`` through a LayerNorm, shared by the heads; one weight per head and token from ``x``.
    RoPE turns the first ``rope_dim`` dimensions of q and k in the rotate-half layout (MLA's keys turn their last
    ones; transformers' DeepSeek-V3.2 does the same). Names in transformers' ``DeepseekV32Indexer``: ``wq_b``,
    ``wk``, ``k_norm``, ``weights_proj``.
    """

    def __init__(self, d_model: int, query_width: int, num_heads: int, head_dim: int, rope_dim: int,
                 norm_eps: float = 1e-6):
        super().__init__()
        self.num_heads = check_positive_int("index_heads", num_heads)
        self.head_dim = check_positive_int("index_head_dim", head_dim)
        self.rope_dim = check_positive_int("qk_rope_head_dim", rope_dim)
        if self.head_dim < self.rope_dim:
            raise ValueError(f"index_head_dim must be at least qk_rope_head_dim = {rope_dim} (the indexer rotates its "
                             f"first qk_rope_head_dim dimensions), got {head_dim}")
        self.W_query = nn.Linear(query_width, self.num_heads * self.head_dim, bias=False)  # wq_b
        self.W_key = nn.Linear(d_model, self.head_dim, bias=False)  # wk
        self.key_norm = nn.LayerNorm(self.head_dim, eps=check_positive_float("norm_eps", norm_eps))  # k_norm
        self.W_head_weights = nn.Linear(d_model, self.num_heads, bias=False)  # weights_proj

    def _turn(self, t: Tensor, rope, positions: Tensor) -> Tensor:
        """RoPE on the first ``rope_dim`` dimensions, the rest passes: ``[rope | pass]``."""
        turning, passing = t.split([self.rope_dim, self.head_dim - self.rope_dim], dim=-1)
        return torch.cat([rope(turning, positions), passing], dim=-1)

    def keys(self, x: Tensor, rope, positions: Tensor) -> Tensor:
        """``(B, T, D) -> (B, T, di)``: one key per token, the one the cache keeps."""
        return self._turn(self.key_norm(self.W_key(x)), rope, positions)

    def queries(self, source: Tensor, rope, positions: Tensor) -> Tensor:
        """``(B, T, query_width) -> (B, Hi, T, di)``."""
        B, T, _ = source.shape
        q = self.W_query(source).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, Hi, T, di)
        return self._turn(q, rope, positions)

    def head_weights(self, x: Tensor) -> Tensor:
        """``(B, T, D) -> (B, T, Hi)``: each head's weight for each query, times Hi^-½ (may be negative)."""
        return self.W_head_weights(x).float() * self.num_heads ** -0.5

    def score(self, q: Tensor, w: Tensor, keys: Tensor) -> Tensor:
        """``I = Σ_h w_h · ReLU(q_h · k · di^-½)``: q ``(B, Hi, Tb, di)``, w ``(B, Tb, Hi)``, keys ``(B, S, di)`` ->
        ``(B, Tb, S)``, in float32 (as transformers). Holds ``(B, Hi, Tb, S)`` while it sums the heads."""
        per_head = (q.float() @ keys.float().transpose(1, 2)[:, None]).mul_(self.head_dim ** -0.5).relu_()
        return (w[:, :, None] @ per_head.transpose(1, 2)).squeeze(2)  # (B, Tb, 1, Hi) @ (B, Tb, Hi, S): (B, Tb, S)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, rope_dim={self.rope_dim}"


class MultiHeadLatentAttention(nn.Module):
    """Causal multi-head latent attention, the attention of DeepSeek-V2/V3, with RoPE on a decoupled part; with
    ``index_topk``, DeepSeek-V3.2's sparse attention (a lightning indexer picks the keys each query reads).

    ``d_model`` D in and out, ``num_heads`` H; per head ``qk_nope_head_dim`` dn (the part of q and k scored through
    the latent) + ``qk_rope_head_dim`` dr (the rotary part) for queries and keys, ``v_head_dim`` dv for values;
    ``kv_lora_rank`` r, the latent's width; ``q_lora_rank`` rq compresses the queries too (None: one projection).
    ``rope_theta`` and ``yarn`` (a ``YaRN``: a context stretched beyond training) set the rotary speeds;
    ``bias`` puts biases on the down-projections and the output (DeepSeek's ``attention_bias``); ``norm_eps`` is
    the latents' RMSNorm epsilon (1e-6 in DeepSeek's code).

    ``index_topk`` k (None: dense MLA) adds the indexer (``self.indexer``, a ``LightningIndexer``) of
    ``index_heads`` Hi heads of ``index_head_dim`` di (>= dr); its queries read the compressed query (``x`` when
    ``q_lora_rank`` is None). Each query then attends to the k keys it may see with the highest index score, all of
    them when it sees k or fewer: with k >= the keys held it is dense MLA, exactly. The indexer runs without
    gradients, as in transformers (DeepSeek trains it with a loss of its own); its key is cached beside the latent.

    forward(x, *, kv_cache=None, return_weights=False, absorbed=False, sparse=False)
        x ``(B, T, D)``; ``kv_cache`` a ``KVCache`` (x continues the sequence it holds); ``absorbed=True`` computes
        the same output from the latent without expanding keys and values. Returns ``(B, T, D)`` and, with
        ``return_weights=True`` (kernel ``"explicit"``), the weights ``(B, H, T, S)``.
        With an indexer, ``sparse`` chooses between two paths that give the same output:

        * ``sparse=False`` (the default), *masked*: the selection becomes a ``(B, 1, T, S)`` keep mask over full
          attention, through the layer's kernel, as transformers' eager and SDPA paths do. It saves nothing (the
          point chapter 17 measures), but it is the reference: with k >= S it is the dense layer bit for bit, it
          returns the ``(B, H, T, S)`` weights (0 off the selection) and it runs with every kernel.
        * ``sparse=True``, *gathered*: by blocks of queries, the indexer's scores, the top k, and attention over the
          k gathered latents (and rotary keys) of each query, written into one preallocated output; no tensor of
          ``T × S`` elements exists at any time, and the time and memory of the attention grow as ``T · k`` (the
          indexer's own scores still cost ``T · S`` operations, a block at a time). The kernel setting does not
          apply; ``return_weights`` is refused (there is no ``(T, S)`` matrix to return).

    select(x, *, kv_cache=None) -> ``(B, T, min(k, S))`` int64: the key indices each query reads (index 0 = the
        oldest key held), best first; a query that sees fewer than k keys gets all of them, then -1s.
    index_scores(x, *, kv_cache=None) -> ``(B, T, S)`` float32: the indexer's scores, ``-inf`` on future keys
        (a ``T × S`` tensor: for pictures and short sequences).

    ``kernel`` ``"explicit"``, ``"sdpa"`` or ``"flash"``: the causal triangle goes to sdpa and flash as the positions
    of the first query and the first key (``modules.causal_attention_at``), so neither builds a ``(T, S)`` tensor,
    absorbed or not, after a cache or not; the values, narrower than the queries, get zero columns for SDPA's fused
    kernel (``sdpa_attention``). Only the explicit kernel holds ``T × S`` (its weights), and the masked path (its
    mask).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        q_lora_rank: int | None = None,
        context_length: int = 4096,
        rope_theta: float = 10000.0,
        yarn: YaRN | None = None,
        bias: bool = False,
        norm_eps: float = 1e-6,
        dropout: float = 0.0,
        kernel: str = "explicit",
        index_topk: int | None = None,
        index_heads: int | None = None,
        index_head_dim: int | None = None,
    ):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.kv_lora_rank = check_positive_int("kv_lora_rank", kv_lora_rank)
        self.qk_nope_head_dim = check_positive_int("qk_nope_head_dim", qk_nope_head_dim)
        self.qk_rope_head_dim = check_positive_int("qk_rope_head_dim", qk_rope_head_dim)
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim must be even (RoPE turns the dimensions in pairs), got "
                             f"{qk_rope_head_dim}")
        self.v_head_dim = check_positive_int("v_head_dim", v_head_dim)
        self.q_lora_rank = None if q_lora_rank is None else check_positive_int("q_lora_rank", q_lora_rank)
        self.context_length = check_positive_int("context_length", context_length)
        self.rope_theta = check_positive_float("rope_theta", rope_theta)
        if yarn is not None and not isinstance(yarn, YaRN):
            raise TypeError(f"yarn must be a mha_lib.YaRN or None, got {type(yarn).__name__}")
        self.yarn = yarn
        bias = check_flag("bias", bias)
        norm_eps = check_positive_float("norm_eps", norm_eps)
        self.dropout_p = check_probability("dropout", dropout)
        if not isinstance(kernel, str) or kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
        self.kernel = kernel
        self.index_topk = check_index_options(index_topk, index_heads, index_head_dim, self.qk_rope_head_dim)

        H, dn, dr, dv, r = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim, kv_lora_rank
        if self.q_lora_rank is None:
            self.W_query = nn.Linear(d_model, H * (dn + dr), bias=False)
        else:  # queries through their own compression (DeepSeek-V3: 7,168 -> 1,536 -> 128 × 192)
            self.q_down = nn.Linear(d_model, self.q_lora_rank, bias=bias)
            self.q_norm = nn.RMSNorm(self.q_lora_rank, eps=norm_eps)
            self.q_up = nn.Linear(self.q_lora_rank, H * (dn + dr), bias=False)
        self.kv_down = nn.Linear(d_model, r + dr, bias=bias)  # the latent and the shared rotary key, side by side
        self.kv_norm = nn.RMSNorm(r, eps=norm_eps)
        self.kv_up = nn.Linear(r, H * (dn + dv), bias=False)  # per head: W_uk (dn rows) then W_uv (dv rows)
        self.out_proj = nn.Linear(H * dv, d_model, bias=bias)
        # created last, and only when asked for: a dense layer draws the same random weights as before (chapter 14)
        self.indexer = None if self.index_topk is None else LightningIndexer(
            d_model, self.q_lora_rank or d_model, index_heads, index_head_dim, dr)

        speeds = yarn.speeds(dr, self.rope_theta) if yarn is not None else None
        self.register_buffer("rope_speeds", speeds, persistent=False)
        self.rope_gain = 1.0 if yarn is None else yarn.rope_gain
        self.scale = (dn + dr) ** -0.5 * (1.0 if yarn is None else yarn.softmax_gain)

    @property
    def W_uk(self) -> Tensor:
        """``(H, dn, r)``: head h's key up-projection, ``k_nope_h = W_uk[h] @ c``."""
        per_head = self.kv_up.weight.view(self.num_heads, self.qk_nope_head_dim + self.v_head_dim, self.kv_lora_rank)
        return per_head[:, : self.qk_nope_head_dim]  # (H, dn + dv, r) -> (H, dn, r)

    @property
    def W_uv(self) -> Tensor:
        """``(H, dv, r)``: head h's value up-projection, ``v_h = W_uv[h] @ c``."""
        per_head = self.kv_up.weight.view(self.num_heads, self.qk_nope_head_dim + self.v_head_dim, self.kv_lora_rank)
        return per_head[:, self.qk_nope_head_dim:]  # (H, dn + dv, r) -> (H, dv, r)

    def _rope(self, x: Tensor, positions: Tensor) -> Tensor:
        speeds = None if self.rope_speeds is None else self.rope_speeds.to(x.device)
        turned = apply_rope(x, positions, self.rope_theta, speeds=speeds)
        return turned if self.rope_gain == 1.0 else turned * self.rope_gain  # YaRN scales cos and sin

    def _compressed_query(self, x: Tensor) -> Tensor | None:
        """``(B, T, D) -> (B, T, rq)``: the normalised compressed query (None without ``q_lora_rank``)."""
        return None if self.q_lora_rank is None else self.q_norm(self.q_down(x))

    def _start(self, x, kv_cache) -> int:
        """The position of x's first token (0 without a cache), after checking the cache may be used here."""
        if kv_cache is None:
            return 0
        if not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache must be a mha_lib.KVCache or None, got {type(kv_cache).__name__}")
        if isinstance(x, Tensor) and x.dim() == 3:
            return kv_cache.start_chunk(self, x.shape[0], x.shape[1], self.context_length)
        return 0

    def forward(self, x: Tensor, *, kv_cache: KVCache | None = None, return_weights: bool = False,
                absorbed: bool = False, sparse: bool = False):
        return_weights = check_flag("return_weights", return_weights)
        absorbed = check_flag("absorbed", absorbed)
        sparse = self._check_sparse(sparse)
        if return_weights and self.kernel != "explicit":
            raise ValueError(f"return_weights=True needs kernel='explicit': kernel={self.kernel!r} never returns "
                             f"the attention weights")
        if return_weights and sparse:
            raise ValueError("return_weights=True needs sparse=False: the gathered path scores each query against "
                             "its k selected keys only and never holds the (B, H, T, S) weights")
        past = self._start(x, kv_cache)
        check_sequence("x", x, self.d_model, max_len=self.context_length - past, width_name="d_model")
        check_matches_weights("x", x, self.kv_down.weight)
        B, T, _ = x.shape
        H, dn, dr = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim
        positions = torch.arange(past, past + T, device=x.device)  # the chunk's true positions

        compressed = self._compressed_query(x)  # (B, T, rq) or None
        q = self.W_query(x) if compressed is None else self.q_up(compressed)  # (B, T, H·(dn + dr))
        q = q.view(B, T, H, dn + dr).transpose(1, 2)  # (B, T, H, dn + dr) -> (B, H, T, dn + dr)
        q_nope, q_rope = q.split([dn, dr], dim=-1)  # (B, H, T, dn), (B, H, T, dr)
        q_rope = self._rope(q_rope, positions)

        latent, k_rope = self.kv_down(x).split([self.kv_lora_rank, dr], dim=-1)  # (B, T, r), (B, T, dr)
        latent = self.kv_norm(latent)
        k_rope = self._rope(k_rope, positions)  # one rotary key per token, for every head
        held = (latent, k_rope)
        if self.indexer is not None:
            with torch.no_grad():
                held += (self.indexer.keys(x, self._rope, positions),)  # (B, T, di): the indexer's own key
        if kv_cache is not None:
            held = kv_cache.append(*held)  # (B, S, r), (B, S, dr) [, (B, S, di)]: all a token ever costs
        latent, k_rope = held[:2]
        first_key = kv_cache.start if kv_cache is not None else 0  # the keys sit at first_key .. past + T - 1
        S = latent.shape[1]

        if sparse:
            context = self._gathered(x, compressed, q_nope, q_rope, held, past, past - first_key, absorbed)
            return self.out_proj(merge_heads(context))  # (B, H, T, dv) -> (B, T, H·dv) -> (B, T, D)
        keep = None
        if self.indexer is not None and self.index_topk < S:  # masked: the selection as a (B, 1, T, S) keep mask
            selected = self._select(x, compressed, held[2], past, past - first_key)  # (B, T, k), -1: none
            # a -1 (a query that sees fewer than k keys: it reads them all) is sent to key 0, which it sees anyway
            keep = torch.zeros(B, T, S, dtype=torch.bool, device=x.device)
            keep.scatter_(-1, selected.clamp(min=0), True)
            keep = keep[:, None]  # (B, T, S) -> (B, 1, T, S), over the heads
        if absorbed:
            # scores: q_nope_h · (W_uk[h] c) = (W_uk[h]ᵀ q_nope_h) · c, so the queries move into latent space
            q_latent = q_nope @ self.W_uk  # (B, H, T, dn) @ (H, dn, r) -> (B, H, T, r)
            query = torch.cat([q_latent, q_rope], dim=-1)  # (B, H, T, r + dr)
            key = torch.cat([latent, k_rope], dim=-1)[:, None].expand(B, H, S, -1)  # (B, S, r+dr) -> (B, H, S, r+dr)
            value = latent[:, None].expand(B, H, S, -1)  # (B, S, r) -> (B, H, S, r): a view, no copy
            context, weights = self._kernel(query, key, value, past, first_key, keep)  # (B, H, T, r): Σ p c
            context = context @ self.W_uv.transpose(1, 2)  # (B, H, T, r) @ (H, r, dv) -> (B, H, T, dv)
        else:
            kv = self.kv_up(latent).view(B, S, H, dn + self.v_head_dim).transpose(1, 2)  # (B, H, S, dn + dv)
            k_nope, value = kv.split([dn, self.v_head_dim], dim=-1)  # (B, H, S, dn), (B, H, S, dv)
            key = torch.cat([k_nope, k_rope[:, None].expand(B, H, S, dr)], dim=-1)  # (B, H, S, dn + dr)
            query = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, T, dn + dr)
            context, weights = self._kernel(query, key, value, past, first_key, keep)  # (B, H, T, dv)
        out = self.out_proj(merge_heads(context))  # (B, H, T, dv) -> (B, T, H·dv) -> (B, T, D)
        return (out, weights) if return_weights else out

    def _kernel(self, q: Tensor, k: Tensor, v: Tensor, first_query: int, first_key: int, keep: Tensor | None = None):
        """Causal attention with queries at ``first_query ..`` and keys at ``first_key ..``: the triangle goes to the
        kernel as these two positions (``causal_attention_at``), so that flash and sdpa build no ``(T, S)`` mask.
        ``keep`` is the indexer's selection as a keep mask (the masked path), or None."""
        return causal_attention_at(
            self.kernel, q, k, v, first_query=first_query, first_key=first_key, mask=keep, scale=self.scale,
            dropout_p=self.dropout_p if self.training else 0.0,
        )

    # --- DeepSeek-V3.2's sparse attention: the indexer's selection, and attention over the gathered keys -----------

    def _check_sparse(self, sparse) -> bool:
        sparse = check_flag("sparse", sparse)
        if sparse and self.indexer is None:
            raise ValueError("sparse=True needs the lightning indexer: build the layer with index_topk=k (and "
                             "index_heads, index_head_dim), as DeepSeek-V3.2; this layer has index_topk=None")
        return sparse

    def _need_indexer(self, method: str) -> None:
        if self.indexer is None:
            raise ValueError(f"{method} needs the lightning indexer: build the layer with index_topk=k (and "
                             f"index_heads, index_head_dim), as DeepSeek-V3.2; this layer has index_topk=None")

    def _score_blocks(self, x: Tensor, compressed: Tensor | None, index_keys: Tensor, first_query: int,
                      diagonal: int, rows: int):
        """The indexer's scores by blocks of queries: yields ``(a, b, scores)``, scores ``(B, b - a, hi)`` float32
        over the keys ``0 .. hi - 1`` that the block's last query may see, ``-inf`` on each query's future. Query i
        (at position ``first_query + i``) sees key j when ``j <= i + diagonal``."""
        T, S = x.shape[1], index_keys.shape[1]
        source = x if compressed is None else compressed  # (B, T, rq or D)
        for a in range(0, T, rows):
            b = min(a + rows, T)
            hi = min(S, b + diagonal)  # later keys lie in the future of every query of the block
            positions = torch.arange(first_query + a, first_query + b, device=x.device)
            with torch.no_grad():  # not around the yield: the caller's code would run without gradients
                q = self.indexer.queries(source[:, a:b], self._rope, positions)  # (B, Hi, Tb, di)
                scores = self.indexer.score(q, self.indexer.head_weights(x[:, a:b]), index_keys[:, :hi])  # (B,Tb,hi)
            query_at = torch.arange(a + diagonal, b + diagonal, device=x.device)[:, None]  # (Tb, 1)
            future = torch.arange(hi, device=x.device)[None, :] > query_at  # (Tb, hi)
            yield a, b, scores.masked_fill_(future, float("-inf")), query_at

    def _select_blocks(self, x, compressed, index_keys, first_query: int, diagonal: int, rows: int):
        """``(a, b, indices)`` by blocks of queries, indices ``(B, b - a, min(k, S))``: the top k visible keys of each
        query, best first, then -1 where a query sees fewer than k."""
        k = min(self.index_topk, index_keys.shape[1])
        for a, b, scores, query_at in self._score_blocks(x, compressed, index_keys, first_query, diagonal, rows):
            top = scores.topk(min(k, scores.shape[-1]), dim=-1).indices  # (B, Tb, <= k), the visible ones first
            top = top.masked_fill_(top > query_at, -1)  # a future key (a query with fewer than k keys) is no pick
            if top.shape[-1] < k:
                top = F.pad(top, (0, k - top.shape[-1]), value=-1)  # (B, Tb, k)
            yield a, b, top

    def _rows(self, B: int, S: int, width: int) -> int:
        """Queries per block so that a block's largest tensor (the indexer's ``(B, Hi, Tb, S)`` scores, or ``width``
        numbers per query) stays within ``BLOCK_NUMBERS``."""
        per_query = B * max(self.indexer.num_heads * S, width, 1)
        return max(1, BLOCK_NUMBERS // per_query)

    def _select(self, x, compressed, index_keys, first_query: int, diagonal: int) -> Tensor:
        B, T = x.shape[:2]
        S = index_keys.shape[1]
        out = torch.empty(B, T, min(self.index_topk, S), dtype=torch.int64, device=x.device)  # preallocated
        for a, b, top in self._select_blocks(x, compressed, index_keys, first_query, diagonal, self._rows(B, S, 0)):
            out[:, a:b] = top
        return out

    def _chunk_index_keys(self, x: Tensor, kv_cache: KVCache | None) -> tuple[int, int, Tensor]:
        """``(past, diagonal, index keys (B, S, di))`` for ``select`` and ``index_scores``: the cache's keys and x's,
        the cache itself untouched."""
        past = self._start(x, kv_cache)
        check_sequence("x", x, self.d_model, max_len=self.context_length - past, width_name="d_model")
        check_matches_weights("x", x, self.kv_down.weight)
        positions = torch.arange(past, past + x.shape[1], device=x.device)
        with torch.no_grad():
            keys = self.indexer.keys(x, self._rope, positions)  # (B, T, di)
        if kv_cache is not None and kv_cache.tensors:  # the cache is this layer's (start_chunk): three tensors
            keys = torch.cat([kv_cache.tensors[2], keys], dim=1)  # (B, S, di)
        first_key = kv_cache.start if kv_cache is not None else 0
        return past, past - first_key, keys

    def select(self, x: Tensor, *, kv_cache: KVCache | None = None) -> Tensor:
        """The keys each query of ``x`` ``(B, T, D)`` reads: ``(B, T, min(index_topk, S))`` int64 indices into the
        ``S`` keys held (the cache's, then x's own: an index is the key's position), best index score first.

        Causal: a query never selects a key after its own position. A query that sees fewer than ``index_topk``
        keys (the first ones of a sequence) gets all it sees, then ``-1`` for each missing one. ``kv_cache``: x
        continues the sequence the cache holds, as in ``forward``; the cache is read, not changed. Computed by
        blocks of queries (no ``T × S`` tensor); the same selection ``forward`` uses on either path.
        """
        self._need_indexer("select")
        past, diagonal, keys = self._chunk_index_keys(x, kv_cache)
        return self._select(x, self._compressed_query(x), keys, past, diagonal)

    def index_scores(self, x: Tensor, *, kv_cache: KVCache | None = None) -> Tensor:
        """The indexer's scores ``I[t, s]`` ``(B, T, S)``, float32, ``-inf`` where key s lies in query t's future.
        A ``T × S`` tensor, for pictures and short sequences; ``select`` takes the top k of each row."""
        self._need_indexer("index_scores")
        past, diagonal, keys = self._chunk_index_keys(x, kv_cache)
        B, T = x.shape[:2]
        out = torch.full((B, T, keys.shape[1]), float("-inf"), device=x.device)
        rows = self._rows(B, keys.shape[1], 0)
        for a, b, scores, _ in self._score_blocks(x, self._compressed_query(x), keys, past, diagonal, rows):
            out[:, a:b, : scores.shape[-1]] = scores
        return out

    def _gathered(self, x, compressed, q_nope, q_rope, held, first_query: int, diagonal: int,
                  absorbed: bool) -> Tensor:
        """Attention over each query's k selected keys, gathered, by blocks of queries: ``(B, H, T, dv)``.

        Absorbed, the shared latent and rotary key of each selected token are gathered once for all heads (what a
        sparse MLA kernel reads: ``r + dr`` numbers a key); otherwise every head's expanded key and value."""
        latent, k_rope, index_keys = held
        B, H, T, _ = q_nope.shape
        S, r, dv = latent.shape[1], self.kv_lora_rank, self.v_head_dim
        k = min(self.index_topk, S)
        if absorbed:
            keys = torch.cat([latent, k_rope], dim=-1)  # (B, S, r + dr): one key for all heads, its value the latent
            width = k * max(keys.shape[-1], H)  # per query: the gathered keys, or the scores of the H heads
        else:
            kv = self.kv_up(latent).view(B, S, H, self.qk_nope_head_dim + dv)  # (B, S, H, dn + dv)
            k_nope, values = kv.split([self.qk_nope_head_dim, dv], dim=-1)  # (B, S, H, dn), (B, S, H, dv)
            keys = torch.cat([k_nope, k_rope[:, :, None].expand(B, S, H, -1)], dim=-1)  # (B, S, H, dn + dr)
            width = k * H * max(keys.shape[-1], dv)
        context = q_nope.new_empty(B, H, T, dv)  # (B, H, T, dv): written block by block
        batch = torch.arange(B, device=x.device)[:, None, None]  # (B, 1, 1): indexes with (B, Tb, k)
        dropout_p = self.dropout_p if self.training else 0.0
        rows = self._rows(B, S, width)
        for a, b, top in self._select_blocks(x, compressed, index_keys, first_query, diagonal, rows):
            picked = top.clamp(min=0)  # (B, Tb, k): a -1 gathers key 0 and is masked below
            if absorbed:
                query = torch.cat([q_nope[:, :, a:b] @ self.W_uk, q_rope[:, :, a:b]], dim=-1)  # (B, H, Tb, r + dr)
                gathered = keys[batch, picked]  # (B, Tb, k, r + dr): what a sparse MLA kernel reads
                scores = torch.einsum("bhtd,btkd->bhtk", query, gathered)
            else:
                query = torch.cat([q_nope[:, :, a:b], q_rope[:, :, a:b]], dim=-1)  # (B, H, Tb, dn + dr)
                scores = torch.einsum("bhtd,btkhd->bhtk", query, keys[batch, picked])  # (B, Tb, k, H, dn + dr)
            scores = scores.mul_(self.scale).masked_fill_((top < 0)[:, None], float("-inf"))  # (B, H, Tb, k)
            weights = torch.softmax(scores, dim=-1)  # every query sees at least itself: no empty row
            if dropout_p > 0:
                weights = F.dropout(weights, p=dropout_p)
            if absorbed:
                block = torch.einsum("bhtk,btkd->bhtd", weights, gathered[..., :r])  # (B, H, Tb, r): Σ p c
                block = block @ self.W_uv.transpose(1, 2)  # (B, H, Tb, r) @ (H, r, dv) -> (B, H, Tb, dv)
            else:
                block = torch.einsum("bhtk,btkhd->bhtd", weights, values[batch, picked])  # (B, H, Tb, dv)
            context[:, :, a:b] = block
        return context

    def extra_repr(self) -> str:
        extra = "" if self.index_topk is None else f", index_topk={self.index_topk}"
        return (
            f"num_heads={self.num_heads}, kv_lora_rank={self.kv_lora_rank}, q_lora_rank={self.q_lora_rank}, "
            f"qk_nope_head_dim={self.qk_nope_head_dim}, qk_rope_head_dim={self.qk_rope_head_dim}, "
            f"v_head_dim={self.v_head_dim}, context_length={self.context_length}, kernel={self.kernel!r}{extra}"
        )


__all__ = ["BLOCK_NUMBERS", "LightningIndexer", "MultiHeadLatentAttention"]
