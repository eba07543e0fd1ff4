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
"""

from __future__ import annotations

import torch
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
    check_sequence,
)

Tensor = torch.Tensor


class MultiHeadLatentAttention(nn.Module):
    """Causal multi-head latent attention, the attention of DeepSeek-V2/V3, with RoPE on a decoupled part.

    ``d_model`` D in and out, ``num_heads`` H; per head ``qk_nope_head_dim`` dn (the part of q and k scored through
    the latent) + ``qk_rope_head_dim`` dr (the rotary part) for queries and keys, ``v_head_dim`` dv for values;
    ``kv_lora_rank`` r, the latent's width; ``q_lora_rank`` rq compresses the queries too (None: one projection).
    ``rope_theta`` and ``yarn`` (a ``YaRN``: a context stretched beyond training) set the rotary speeds;
    ``bias`` puts biases on the down-projections and the output (DeepSeek's ``attention_bias``); ``norm_eps`` is
    the latents' RMSNorm epsilon (1e-6 in DeepSeek's code).

    forward(x, *, kv_cache=None, return_weights=False, absorbed=False)
        x ``(B, T, D)``; ``kv_cache`` a ``KVCache`` (x continues the sequence it holds); ``absorbed=True`` computes
        the same output from the latent without expanding keys and values. Returns ``(B, T, D)`` and, with
        ``return_weights=True`` (kernel ``"explicit"``), the weights ``(B, H, T, S)``.

    ``kernel`` ``"explicit"``, ``"sdpa"`` or ``"flash"``: the causal triangle goes to sdpa and flash as the positions
    of the first query and the first key (``modules.causal_attention_at``), so neither builds a ``(T, S)`` tensor,
    absorbed or not, after a cache or not; the values, narrower than the queries, get zero columns for SDPA's fused
    kernel (``sdpa_attention``). Only the explicit kernel holds ``T × S`` (its weights).
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

    def forward(self, x: Tensor, *, kv_cache: KVCache | None = None, return_weights: bool = False,
                absorbed: bool = False):
        return_weights = check_flag("return_weights", return_weights)
        absorbed = check_flag("absorbed", absorbed)
        if return_weights and self.kernel != "explicit":
            raise ValueError(f"return_weights=True needs kernel='explicit': kernel={self.kernel!r} never returns "
                             f"the attention weights")
        past = 0
        if kv_cache is not None:
            if not isinstance(kv_cache, KVCache):
                raise TypeError(f"kv_cache must be a mha_lib.KVCache or None, got {type(kv_cache).__name__}")
            if isinstance(x, Tensor) and x.dim() == 3:
                past = kv_cache.start_chunk(self, x.shape[0], x.shape[1], self.context_length)
        check_sequence("x", x, self.d_model, max_len=self.context_length - past, width_name="d_model")
        check_matches_weights("x", x, self.kv_down.weight)
        B, T, _ = x.shape
        H, dn, dr = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim
        positions = torch.arange(past, past + T, device=x.device)  # the chunk's true positions

        if self.q_lora_rank is None:
            q = self.W_query(x)  # (B, T, H·(dn + dr))
        else:
            q = self.q_up(self.q_norm(self.q_down(x)))  # (B, T, D) -> (B, T, rq) -> (B, T, H·(dn + dr))
        q = q.view(B, T, H, dn + dr).transpose(1, 2)  # (B, T, H, dn + dr) -> (B, H, T, dn + dr)
        q_nope, q_rope = q.split([dn, dr], dim=-1)  # (B, H, T, dn), (B, H, T, dr)
        q_rope = self._rope(q_rope, positions)

        latent, k_rope = self.kv_down(x).split([self.kv_lora_rank, dr], dim=-1)  # (B, T, r), (B, T, dr)
        latent = self.kv_norm(latent)
        k_rope = self._rope(k_rope, positions)  # one rotary key per token, for every head
        if kv_cache is not None:
            latent, k_rope = kv_cache.append(latent, k_rope)  # (B, S, r), (B, S, dr): all a token ever costs
        first_key = kv_cache.start if kv_cache is not None else 0  # the keys sit at first_key .. past + T - 1
        S = latent.shape[1]

        if absorbed:
            # scores: q_nope_h · (W_uk[h] c) = (W_uk[h]ᵀ q_nope_h) · c, so the queries move into latent space
            q_latent = q_nope @ self.W_uk  # (B, H, T, dn) @ (H, dn, r) -> (B, H, T, r)
            query = torch.cat([q_latent, q_rope], dim=-1)  # (B, H, T, r + dr)
            key = torch.cat([latent, k_rope], dim=-1)[:, None].expand(B, H, S, -1)  # (B, S, r+dr) -> (B, H, S, r+dr)
            value = latent[:, None].expand(B, H, S, -1)  # (B, S, r) -> (B, H, S, r): a view, no copy
            context, weights = self._kernel(query, key, value, past, first_key)  # (B, H, T, r): Σ p c, in latent space
            context = context @ self.W_uv.transpose(1, 2)  # (B, H, T, r) @ (H, r, dv) -> (B, H, T, dv)
        else:
            kv = self.kv_up(latent).view(B, S, H, dn + self.v_head_dim).transpose(1, 2)  # (B, H, S, dn + dv)
            k_nope, value = kv.split([dn, self.v_head_dim], dim=-1)  # (B, H, S, dn), (B, H, S, dv)
            key = torch.cat([k_nope, k_rope[:, None].expand(B, H, S, dr)], dim=-1)  # (B, H, S, dn + dr)
            query = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, T, dn + dr)
            context, weights = self._kernel(query, key, value, past, first_key)  # (B, H, T, dv)
        out = self.out_proj(merge_heads(context))  # (B, H, T, dv) -> (B, T, H·dv) -> (B, T, D)
        return (out, weights) if return_weights else out

    def _kernel(self, q: Tensor, k: Tensor, v: Tensor, first_query: int, first_key: int):
        """Causal attention with queries at ``first_query ..`` and keys at ``first_key ..``: the triangle goes to the
        kernel as these two positions (``causal_attention_at``), so that flash and sdpa build no ``(T, S)`` mask."""
        return causal_attention_at(
            self.kernel, q, k, v, first_query=first_query, first_key=first_key, scale=self.scale,
            dropout_p=self.dropout_p if self.training else 0.0,
        )

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, kv_lora_rank={self.kv_lora_rank}, q_lora_rank={self.q_lora_rank}, "
            f"qk_nope_head_dim={self.qk_nope_head_dim}, qk_rope_head_dim={self.qk_rope_head_dim}, "
            f"v_head_dim={self.v_head_dim}, context_length={self.context_length}, kernel={self.kernel!r}"
        )


__all__ = ["MultiHeadLatentAttention"]
