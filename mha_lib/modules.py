"""Attention modules, from one head to the fused multi-head layer.

The modules only *project* and *reshape*; the attention itself is a kernel from ``functional.py``:

    SelfAttention              one head, no mask                             (chapter 1)
    CausalAttention            one head, causal mask kept in a buffer        (chapter 2, one head of the wrapper)
    MultiHeadAttentionWrapper  H independent CausalAttention heads, concat   (chapter 2)
    MultiHeadAttention         one projection per Q/K/V split into H heads   (chapter 3 onwards)
    FusedMultiHeadAttention    one projection for Q, K and V together        (chapter 3, as in nanoGPT)

Constructor arguments follow *Build a Large Language Model (From Scratch)* (Raschka) so that its code and its
printed numbers carry over. Beware its naming trap: in ``MultiHeadAttentionWrapper`` ``d_out`` is the width of
*one head* (the output is ``num_heads * d_out`` wide); in ``MultiHeadAttention`` it is the *total* width.
"""

from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F
from torch import nn

from .cache import KVCache
from .functional import (
    KERNELS, expand_kv_heads, explicit_attention, flash_attention, flash_kernel, merge_heads, sdpa_attention,
    split_heads,
)
from .masks import causal_mask, causal_mask_at, combine_masks, mask_from_key_padding, mask_from_valid_lens
from .positions import YaRN, apply_rope
from .validation import (
    check_divisible,
    check_flag,
    check_int,
    check_matches_weights,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_sequence,
    divisors,
)

Tensor = torch.Tensor

# CausalAttention keeps a (context_length, context_length) boolean mask: 1 byte per entry, so 2**15 tokens
# already cost 1 GiB per head. Longer contexts go to MultiHeadAttention, which passes causality as a flag.
MAX_BUFFERED_CONTEXT = 2**15


def _check_buffered_context_length(context_length: int) -> int:
    context_length = check_positive_int("context_length", context_length)
    if context_length > MAX_BUFFERED_CONTEXT:
        gib = context_length**2 / 2**30
        raise ValueError(
            f"context_length must be at most {MAX_BUFFERED_CONTEXT} for CausalAttention, got {context_length}: "
            f"it keeps a (context_length, context_length) causal mask in a buffer, which would take "
            f"{gib:,.0f} GiB; for longer sequences use mha_lib.MultiHeadAttention, which builds no buffer "
            f"(causality is a flag, the mask is made for the actual length T)"
        )
    return context_length


def _check_bias_flag(qkv_bias) -> bool:
    return check_flag("qkv_bias", qkv_bias)


#: ``MultiHeadAttention``'s choices for ``qk_norm`` and ``gate`` (None: off)
QK_NORMS = ("head", "projection", "l2")
GATES = ("elementwise", "head")


def _check_choice(name: str, value, choices: tuple[str, ...]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be None or one of {list(choices)}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be None or one of {list(choices)}, got {value!r}")
    return value


def _check_rope_fraction(rope_fraction, rope_theta: float | None) -> float:
    """A real number in (0, 1]; other than 1 only with rotary positions."""
    if isinstance(rope_fraction, bool) or not isinstance(rope_fraction, numbers.Real):
        raise TypeError(f"rope_fraction must be a float in (0, 1], got {type(rope_fraction).__name__} "
                        f"{rope_fraction!r}")
    rope_fraction = float(rope_fraction)
    if not 0.0 < rope_fraction <= 1.0:
        raise ValueError(f"rope_fraction must be in (0, 1] (the share of each head's dimensions that rotate), got "
                         f"{rope_fraction:g}")
    if rope_fraction != 1.0 and rope_theta is None:
        raise ValueError(f"rope_fraction={rope_fraction:g} needs rope_theta: without rotary positions (a NoPE layer, "
                         f"rope_theta=None) no dimension rotates")
    return rope_fraction


def causal_attention_at(
    kernel: str, q: Tensor, k: Tensor, v: Tensor, *, first_query: int = 0, first_key: int = 0,
    window: int | None = None, mask: Tensor | None = None, scale: float | None = None, dropout_p: float = 0.0,
    softcap: float | None = None, sinks: Tensor | None = None,
):
    """Causal attention at the tokens' true positions, with the kernel named ``kernel`` (a key of ``KERNELS``).

    Query ``i`` sits at position ``first_query + i`` and key ``j`` at ``first_key + j``; a query at ``m`` sees the
    key at ``n`` when ``n <= m`` and, with a ``window`` W, ``n > m - W`` (``causal_mask_at``'s rule). ``mask`` is an
    optional keep mask on top (padding). ``softcap`` and ``sinks`` go to the kernel (which refuses what it cannot
    do: see ``functional``). Returns ``(context, weights)`` as the kernels do.

    Each kernel gets the triangle in the form it needs, so that only the explicit kernel pays for a ``(T, S)``
    mask (it builds the ``(T, S)`` weights anyway): the tiled kernel aligns its triangle bottom-right (the queries
    are the last T of the S positions: a chunk after a KV cache, or T = S) and skips the tiles outside the window;
    ``sdpa_attention`` takes the offset between the positions as ``diagonal``, and the window. Both never hold a
    ``T × S`` tensor: one call of either layer at T = 8,192 (width 32) grows memory by less than 25 MiB, where one
    float32 ``T × S`` matrix takes 256 MiB (``tests/benchmarks/layer_memory.py``, ``tests/core/test_layer_memory.py``).
    """
    T, S = q.shape[-2], k.shape[-2]
    diagonal = first_query - first_key  # query i sees key j when j <= i + diagonal
    controls = {"softcap": softcap, "sinks": sinks}  # both None in every layer of chapters 1-14
    if kernel == "sdpa":
        return sdpa_attention(q, k, v, mask=mask, scale=scale, dropout_p=dropout_p, is_causal=True,
                              diagonal=diagonal, window=window, **controls)
    if kernel == "flash" and diagonal == S - T:  # the tiled kernel's own bottom-right triangle
        if softcap is not None:
            return flash_kernel(q, k, v, softcap=softcap)  # refuses it, with the kernel's message
        return flash_attention(q, k, v, causal=True, window=window, mask=mask, scale=scale, dropout_p=dropout_p,
                               sinks=sinks), None
    if diagonal == 0 and window is None:  # the top-left triangle: every kernel takes it as a flag
        return KERNELS[kernel](q, k, v, mask=mask, scale=scale, dropout_p=dropout_p, is_causal=True, **controls)
    positional = causal_mask_at(  # (T, S): the explicit kernel, or a window on causal cross-attention
        torch.arange(first_query, first_query + T, device=q.device),
        torch.arange(first_key, first_key + S, device=q.device), window=window,
    )
    return KERNELS[kernel](q, k, v, mask=combine_masks(positional, mask), scale=scale, dropout_p=dropout_p,
                           **controls)


class SelfAttention(nn.Module):
    """One attention head without a mask: every token looks at every token.

    Accepts one sequence ``(T, d_in)`` or a batch ``(B, T, d_in)``; returns ``(..., T, d_out)``.
    """

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False):
        super().__init__()
        self.d_in = check_positive_int("d_in", d_in)
        self.d_out = check_positive_int("d_out", d_out)
        qkv_bias = _check_bias_flag(qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x: Tensor, *, return_weights: bool = False):
        return_weights = check_flag("return_weights", return_weights)
        unbatched = isinstance(x, Tensor) and x.dim() == 2
        x = x.unsqueeze(0) if unbatched else x  # (T, d_in) -> (1, T, d_in)
        check_sequence("x", x, self.d_in)
        check_matches_weights("x", x, self.W_query.weight)
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)  # (B, T, d_out) each
        context, weights = explicit_attention(q, k, v)  # (B, T, d_out), (B, T, T)
        if unbatched:
            context, weights = context[0], weights[0]
        return (context, weights) if return_weights else context


class CausalAttention(nn.Module):
    """One causal head: token ``t`` attends to tokens ``0..t`` only.

    The causal mask is built once for ``context_length`` tokens and kept as a buffer (it follows the module
    to the GPU with ``.to(device)``); each call cuts the top-left ``T × T`` corner out of it.
    Input ``(B, T, d_in)`` with ``T <= context_length``; output ``(B, T, d_out)``. The buffer takes
    ``context_length²`` bytes, so ``context_length`` is at most ``2**15`` (1 GiB); ``MultiHeadAttention`` keeps no
    buffer and takes any length.
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False):
        super().__init__()
        self.d_in = check_positive_int("d_in", d_in)
        self.d_out = check_positive_int("d_out", d_out)
        self.context_length = _check_buffered_context_length(context_length)
        self.dropout_p = check_probability("dropout", dropout)
        qkv_bias = _check_bias_flag(qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        # not persistent: it is derived from context_length, so it stays out of the state_dict
        self.register_buffer("causal_mask", causal_mask(context_length), persistent=False)

    def forward(self, x: Tensor, *, return_weights: bool = False):
        return_weights = check_flag("return_weights", return_weights)
        check_sequence("x", x, self.d_in, max_len=self.context_length)
        check_matches_weights("x", x, self.W_query.weight)
        T = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)  # (B, T, d_out) each
        context, weights = explicit_attention(
            q, k, v, mask=self.causal_mask[:T, :T], dropout_p=self.dropout_p if self.training else 0.0
        )  # (B, T, d_out), (B, T, T)
        return (context, weights) if return_weights else context

    def extra_repr(self) -> str:
        return f"context_length={self.context_length}, dropout={self.dropout_p}"


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` independent ``CausalAttention`` heads whose outputs are concatenated.

    ``d_out`` is the width of **one head**: the output is ``(B, T, num_heads * d_out)``.
    Each head has its own three projections and its own small matmuls: simple, and slow.
    """

    def __init__(
        self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int, qkv_bias: bool = False
    ):
        super().__init__()
        num_heads = check_positive_int("num_heads", num_heads)
        _check_buffered_context_length(context_length)  # every head keeps its own mask buffer
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )

    @property
    def num_heads(self) -> int:
        return len(self.heads)

    def forward(self, x: Tensor, *, return_weights: bool = False):
        return_weights = check_flag("return_weights", return_weights)
        per_head = [head(x, return_weights=True) for head in self.heads]
        context = torch.cat([c for c, _ in per_head], dim=-1)  # H × (B, T, d_out) -> (B, T, H·d_out)
        if not return_weights:
            return context
        weights = torch.stack([w for _, w in per_head], dim=1)  # H × (B, T, T) -> (B, H, T, T)
        return context, weights


class _MultiHeadBase(nn.Module):
    """What the split and the fused layers share: argument checks, masks, kernel call, head merge, out_proj.

    Subclasses create their projections and turn inputs into ``q (B, H, T, Dh)`` and ``k, v (B, H, S, Dh)``.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        kernel: str,
        causal: bool,
        head_dim: int | None = None,
    ):
        super().__init__()
        self.d_in = check_positive_int("d_in", d_in)
        self.d_out = check_positive_int("d_out", d_out)
        self.context_length = check_positive_int("context_length", context_length)
        self.dropout_p = check_probability("dropout", dropout)
        self.num_heads = check_positive_int("num_heads", num_heads)
        if head_dim is None:
            check_divisible("d_out", d_out, "num_heads", num_heads)
            self.head_dim = d_out // num_heads
        else:  # the heads' total width H·Dh is free; out_proj maps it back to d_out (Gemma, Qwen3)
            self.head_dim = check_positive_int("head_dim", head_dim)
        if not isinstance(kernel, str) or kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
        self.kernel = kernel
        self.causal = check_flag("causal", causal)

    def _check_return_weights(self, return_weights: bool) -> None:
        check_flag("return_weights", return_weights)
        if return_weights and self.kernel == "sdpa":
            raise ValueError(
                "return_weights=True needs kernel='explicit': kernel='sdpa' calls "
                "F.scaled_dot_product_attention, which never returns the attention weights (its fused back-ends "
                "never build them)"
            )
        if return_weights and self.kernel == "flash":
            raise ValueError(
                "return_weights=True needs kernel='explicit': kernel='flash' computes attention tile by tile and "
                "never holds the whole weight matrix (that is the point of it, chapter 14)"
            )

    def _padding_mask(self, key_padding_mask, valid_lens, B: int, T: int, S: int, device) -> Tensor | None:
        if key_padding_mask is not None and valid_lens is not None:
            raise ValueError("pass either key_padding_mask or valid_lens, not both: they describe the same padding")
        if key_padding_mask is not None:
            return mask_from_key_padding(key_padding_mask, B, S).to(device)  # (B, 1, 1, S)
        if valid_lens is not None:
            keep = mask_from_valid_lens(valid_lens, T, S)  # (B, 1, T, S)
            if keep.shape[0] != B:
                raise ValueError(
                    f"valid_lens must have one entry per sequence, shape ({B},) or ({B}, {T}), "
                    f"got {tuple(valid_lens.shape)}"
                )
            return keep.to(device)
        return None

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask, valid_lens, return_weights: bool,
        first_query: int = 0, first_key: int = 0, window: int | None = None, *, scale: float | None = None,
        softcap: float | None = None, sinks: Tensor | None = None, gate: Tensor | None = None,
    ):
        B, _, T, _ = q.shape
        S = k.shape[2]
        padding = self._padding_mask(key_padding_mask, valid_lens, B, T, S, q.device)
        dropout_p = self.dropout_p if self.training else 0.0
        if self.causal:
            # causality goes as positions, not as a mask tensor: the first query's and the first key's (they
            # differ after a KV cache) and the window; only the explicit kernel turns them into a (T, S) mask
            context, weights = causal_attention_at(
                self.kernel, q, k, v, first_query=first_query, first_key=first_key, window=window, mask=padding,
                scale=scale, dropout_p=dropout_p, softcap=softcap, sinks=sinks,
            )  # (B, H, T, Dh), (B, H, T, S) or None
        else:
            context, weights = KERNELS[self.kernel](q, k, v, mask=padding, scale=scale, dropout_p=dropout_p,
                                                    softcap=softcap, sinks=sinks)
        if gate is not None:  # (B, H, T, Dh) or (B, H, T, 1), in (0, 1): each head's output, dimmed per token
            context = context * gate
        out = self.out_proj(merge_heads(context))  # (B, H, T, Dh) -> (B, T, H·Dh) -> (B, T, d_out)
        return (out, weights) if return_weights else out

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, head_dim={self.head_dim}, context_length={self.context_length}, "
            f"dropout={self.dropout_p}, causal={self.causal}, kernel={self.kernel!r}"
        )


class MultiHeadAttention(_MultiHeadBase):
    """Multi-head attention with one projection per Q, K, V, split into heads by reshaping.

    ``d_out`` is the **total** width; each of the ``num_heads`` heads gets ``d_out // num_heads`` of it.

    forward(x, kv=None, *, key_padding_mask=None, valid_lens=None, return_weights=False, kv_cache=None)
        x   ``(B, T, d_in)``: the queries' sequence.
        kv  ``(B, S, d_kv_in)``: another sequence for keys and values (cross-attention); default ``x``.
        key_padding_mask ``(B, S)`` bool, ``True`` = padding (the key-padding tutorial, ``nn.MultiheadAttention``), or
        valid_lens ``(B,)`` / ``(B, T)`` ints (D2L).
        kv_cache  a ``KVCache``: ``x`` is the next chunk of a sequence whose earlier tokens the cache holds
        (chapter 12). Returns ``(B, T, d_out)``, and the weights ``(B, H, T, S)`` too when ``return_weights=True``.

    ``causal=True`` (the default, as in the book) lets query ``t`` see keys ``0..t`` only; set it to ``False``
    for an encoder or for cross-attention. ``kernel`` is ``"explicit"``, ``"sdpa"`` (faster, no weights) or
    ``"flash"`` (the tiled kernel of chapter 14, no weights). Causality, a window and a cache's offset reach sdpa
    and flash as positions, not as a ``(T, S)`` mask (``causal_attention_at``): their memory grows with T, not T²;
    a padding mask (``key_padding_mask``, ``valid_lens``) is a tensor, and only the explicit kernel builds ``T × S``.

    The attention of today's decoders (chapters 12 and 13), all off by default:

    ``num_kv_heads=G``  keys and values get G heads (G divides ``num_heads``); query heads ``0 .. H/G - 1`` share
                        key/value head 0, and so on (Llama's order). G = H is the layer above, G = 1 is MQA.
    ``rope_theta=θ``    rotary positions on q and k after the projection (rotate-half layout, as Llama).
    ``window=W``        sliding-window causal attention: query t sees keys ``t - W + 1 .. t``.
    ``head_dim=Dh``     the heads' width when ``num_heads · Dh`` differs from ``d_out`` (Gemma, Qwen3);
                        ``out_proj`` maps ``H·Dh`` back to ``d_out``.
    ``out_bias``        whether ``out_proj`` has a bias (Llama has none).

    How large the scores get and where the attention mass goes (chapter 15), all off by default; with every one
    at its default the layer creates, draws and computes exactly what it did without them:

    ``qk_norm``         ``"head"``: RMSNorm with a learned weight over each head's Dh, on q and k **before** RoPE
                        (Qwen3, Qwen3-Next, Gemma 3); ``"projection"``: over the whole q (H·Dh) and k (G·Dh)
                        projections before the head split (OLMo 2/3); ``"l2"``: weightless, per head, **after**
                        RoPE (Llama 4's ``L2Norm``, which is an RMS norm: each head vector ends with length ≈ √Dh).
                        ``norm_eps`` is its epsilon. Gemma's ``x·(1 + w)`` is this with weight ``1 + w``.
    ``scale=s``         the softmax scale instead of ``1/√Dh`` (Gemma: ``query_pre_attn_scalar ** -0.5``).
    ``softcap=c``       scores -> ``c·tanh(scores / c)`` before the mask (Gemma 2). Needs ``kernel="explicit"``.
    ``sinks=True``      a learned logit per head (``self.sinks``, ``(H,)``, starts at 0) joins each row's softmax
                        denominator (gpt-oss); the weights returned cover the real keys and sum to less than 1.
                        Needs ``kernel="explicit"`` or ``"flash"`` (SDPA has no column to add).
    ``gate``            ``"elementwise"``: each head's output times ``sigmoid(x W_gate)`` (``W_gate``: d_in -> H·Dh),
                        before ``out_proj`` (Qwen3-Next, Qiu et al. 2025); ``"head"``: one gate per head
                        (d_in -> H). The gate reads the query token's own input x.
    ``rope_fraction=f`` only the first ``int(f·Dh)`` dimensions of each q and k head rotate (rotate-half within
                        them, speeds θ^(-2i/rotating width)); the rest pass unrotated (Qwen3-Next: 0.25). Needs
                        ``rope_theta``; ``rope_theta=None`` is a layer without positions (NoPE: Llama 4, SmolLM3).
    ``yarn``            a ``YaRN``: the rotary speeds stretched, and cos/sin times its ``rope_gain`` (gpt-oss).

    Every control works with the KV cache (the cache holds the normed, rotated keys) and ``return_weights``.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
        *,
        kernel: str = "explicit",
        causal: bool = True,
        d_kv_in: int | None = None,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        rope_theta: float | None = None,
        window: int | None = None,
        out_bias: bool = True,
        qk_norm: str | None = None,
        norm_eps: float = 1e-6,
        scale: float | None = None,
        softcap: float | None = None,
        sinks: bool = False,
        gate: str | None = None,
        rope_fraction: float = 1.0,
        yarn: YaRN | None = None,
    ):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, kernel, causal, head_dim)
        self.d_kv_in = d_in if d_kv_in is None else check_positive_int("d_kv_in", d_kv_in)
        self.num_kv_heads = self._check_kv_heads(num_kv_heads)
        self.rope_theta = None if rope_theta is None else check_positive_float("rope_theta", rope_theta)
        self.rope_fraction = _check_rope_fraction(rope_fraction, self.rope_theta)
        self.rope_dim = int(self.head_dim * self.rope_fraction)  # the rotating width, as transformers cuts it
        if self.rope_theta is not None and self.rope_fraction == 1.0 and self.head_dim % 2:
            raise ValueError(
                f"rope_theta needs an even head size (RoPE turns the dimensions in pairs), got head_dim = "
                f"{self.head_dim}; choose d_out and num_heads (or head_dim) so that the head size is even"
            )
        if self.rope_theta is not None and (self.rope_dim < 2 or self.rope_dim % 2):
            raise ValueError(
                f"rope_fraction={self.rope_fraction:g} rotates int({self.rope_fraction:g} × head_dim "
                f"{self.head_dim}) = {self.rope_dim} dimensions, expected an even number >= 2 (RoPE turns the "
                f"dimensions in pairs); choose rope_fraction so that rope_fraction × head_dim is even"
            )
        if yarn is not None and not isinstance(yarn, YaRN):
            raise TypeError(f"yarn must be a mha_lib.YaRN or None, got {type(yarn).__name__}")
        if yarn is not None and self.rope_theta is None:
            raise ValueError("yarn stretches rotary positions: it needs rope_theta (this layer has no positions)")
        self.yarn = yarn
        self.window = None if window is None else check_int("window", window, low=1)
        if self.window is not None and not self.causal:
            raise ValueError("window needs causal=True: a sliding window limits how far back a causal query looks")
        if self.rope_theta is not None and self.d_kv_in != self.d_in:
            raise ValueError(
                f"d_kv_in={self.d_kv_in} (keys and values from another sequence, cross-attention) cannot be combined "
                f"with rope_theta={self.rope_theta:g}: RoPE rotates queries and keys by their positions in one "
                f"shared sequence, so no call of this layer could run; drop one of the two"
            )
        qkv_bias = _check_bias_flag(qkv_bias)
        inner = self.num_heads * self.head_dim  # H·Dh: d_out unless head_dim was given
        kv_width = self.num_kv_heads * self.head_dim  # G·Dh: the keys and values shrink with G
        # creation order W_query, W_key, W_value, out_proj: the book's, so torch.manual_seed gives its numbers
        self.W_query = nn.Linear(d_in, inner, bias=qkv_bias)
        self.W_key = nn.Linear(self.d_kv_in, kv_width, bias=qkv_bias)
        self.W_value = nn.Linear(self.d_kv_in, kv_width, bias=qkv_bias)
        self.out_proj = nn.Linear(inner, d_out, bias=check_flag("out_bias", out_bias))
        # chapter 15's controls: created after the four projections, and only when asked for, so that a layer
        # without them draws the same random numbers as before (torch.manual_seed gives the book's weights)
        self.qk_norm = _check_choice("qk_norm", qk_norm, QK_NORMS)
        self.norm_eps = check_positive_float("norm_eps", norm_eps)
        if self.qk_norm in ("head", "projection"):  # weights start at 1 (nn.RMSNorm's default): nothing is drawn
            per_head = self.qk_norm == "head"
            self.q_norm = nn.RMSNorm(self.head_dim if per_head else inner, eps=self.norm_eps)
            self.k_norm = nn.RMSNorm(self.head_dim if per_head else kv_width, eps=self.norm_eps)
        self.scale = None if scale is None else check_positive_float("scale", scale)
        self.softcap = None if softcap is None else check_positive_float("softcap", softcap)
        self.sinks = nn.Parameter(torch.zeros(self.num_heads)) if check_flag("sinks", sinks) else None
        self.gate = _check_choice("gate", gate, GATES)
        if self.gate is not None:  # Qwen3-Next's gate shares q_proj's bias setting
            self.W_gate = nn.Linear(d_in, inner if self.gate == "elementwise" else self.num_heads, bias=qkv_bias)
        if yarn is not None:  # not persistent: derived from yarn and the rotating width
            self.register_buffer("rope_speeds", yarn.speeds(self.rope_dim, self.rope_theta), persistent=False)
        self._check_kernel_controls()

    def _check_kernel_controls(self) -> None:
        """softcap needs the explicit kernel, sinks the explicit or the tiled one (see ``functional``)."""
        if self.softcap is not None and self.kernel != "explicit":
            raise ValueError(
                f"softcap={self.softcap:g} needs kernel='explicit', got kernel={self.kernel!r}: the cap is a tanh of "
                f"every score, which {'SDPA never exposes' if self.kernel == 'sdpa' else 'the tiled backward omits'}"
            )
        if self.sinks is not None and self.kernel == "sdpa":
            raise ValueError(
                "sinks=True needs kernel='explicit' or kernel='flash', got kernel='sdpa': a sink is one more column "
                "in each row's softmax (explicit) or a rescaling by the row's log-sum-exp (flash), and SDPA offers "
                "neither"
            )

    def _check_kv_heads(self, num_kv_heads) -> int:
        if num_kv_heads is None:
            return self.num_heads
        num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
        if self.num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads must divide num_heads = {self.num_heads} (each key/value head serves the same "
                f"number of query heads), got {num_kv_heads}; try one of {divisors(self.num_heads)}"
            )
        return num_kv_heads

    def _rope(self, x: Tensor, positions: Tensor) -> Tensor:
        """RoPE on the first ``rope_dim`` dimensions of each head ``(..., T, Dh)``; the others pass unrotated."""
        if self.rope_dim == self.head_dim and self.yarn is None:
            return apply_rope(x, positions, self.rope_theta)  # the whole head: chapter 13's layer, unchanged
        turning, passing = x[..., : self.rope_dim], x[..., self.rope_dim:]  # (..., T, r), (..., T, Dh - r)
        speeds = None if self.yarn is None else self.rope_speeds.to(x.device)
        turned = apply_rope(turning, positions, self.rope_theta, speeds=speeds)  # speeds θ^(-2i/r) over r
        if self.yarn is not None and self.yarn.rope_gain != 1.0:
            turned = turned * self.yarn.rope_gain  # YaRN scales cos and sin, so only the rotating part
        return torch.cat([turned, passing], dim=-1)  # (..., T, Dh)

    def forward(
        self,
        x: Tensor,
        kv: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        valid_lens: Tensor | None = None,
        return_weights: bool = False,
        kv_cache: KVCache | None = None,
    ):
        self._check_return_weights(return_weights)
        self._check_kernel_controls()  # again: kernel is a plain attribute, and may have been changed
        past = self._check_cache(kv_cache, x, kv, key_padding_mask, valid_lens)
        max_len = self.context_length - past if self.causal else None
        check_sequence("x", x, self.d_in, max_len=max_len)
        check_matches_weights("x", x, self.W_query.weight)
        if kv is None:
            if self.d_kv_in != self.d_in:
                raise ValueError(
                    f"kv is needed: this layer was built with d_kv_in={self.d_kv_in} (cross-attention) but "
                    f"forward got x only (d_in={self.d_in}); call it as layer(x, kv) with kv of shape "
                    f"(B, S, {self.d_kv_in})"
                )
            kv = x
        else:
            if self.rope_theta is not None:
                raise ValueError("kv (cross-attention) cannot be used with rope_theta: RoPE rotates queries and "
                                 "keys by positions in one shared sequence")
            check_sequence("kv", kv, self.d_kv_in, max_len=max_len, width_name="d_kv_in")
            check_matches_weights("kv", kv, self.W_key.weight)
            if kv.shape[0] != x.shape[0]:
                raise ValueError(
                    f"kv must have the same batch size as x, got kv {tuple(kv.shape)} and x {tuple(x.shape)}"
                )
        q, k = self.W_query(x), self.W_key(kv)  # (B, T, H·Dh), (B, S, G·Dh)
        if self.qk_norm == "projection":  # OLMo 2/3: over the whole projection, before the split and RoPE
            q, k = self.q_norm(q), self.k_norm(k)
        q = split_heads(q, self.num_heads)  # (B, T, H·Dh) -> (B, H, T, Dh)
        k = split_heads(k, self.num_kv_heads)  # (B, S, G·Dh) -> (B, G, S, Dh)
        v = split_heads(self.W_value(kv), self.num_kv_heads)  # (B, S, G·Dh) -> (B, G, S, Dh)
        if self.qk_norm == "head":  # Qwen3, Gemma 3: each head's Dh, before RoPE (the weight does not commute with it)
            q, k = self.q_norm(q), self.k_norm(k)
        positions = torch.arange(past, past + x.shape[1], device=x.device)  # the chunk's true positions
        if self.rope_theta is not None:  # after the projection, before the scores; v carries no position
            q = self._rope(q, positions)
            k = self._rope(k, positions)
        if self.qk_norm == "l2":  # Llama 4: weightless, after RoPE (a rotation keeps the RMS: the order is moot)
            q = F.rms_norm(q, (self.head_dim,), eps=self.norm_eps)
            k = F.rms_norm(k, (self.head_dim,), eps=self.norm_eps)
        first_key = 0  # keys at 0 .. S-1 (S = T unless kv is another sequence)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (B, G, S, Dh): the cached tokens, then this chunk's
            first_key = kv_cache.start  # the oldest token held (a window's cache drops the older ones)
        k = expand_kv_heads(k, self.num_heads)  # (B, G, S, Dh) -> (B, H, S, Dh)
        v = expand_kv_heads(v, self.num_heads)  # (B, G, S, Dh) -> (B, H, S, Dh)
        gate = None
        if self.gate is not None:  # from the queries' own tokens: (B, T, H·Dh) or (B, T, H)
            g = torch.sigmoid(self.W_gate(x))
            # (B, T, H·Dh) -> (B, T, H, Dh) -> (B, H, T, Dh), or (B, T, H) -> (B, H, T) -> (B, H, T, 1)
            gate = split_heads(g, self.num_heads) if self.gate == "elementwise" else g.transpose(1, 2)[..., None]
        result = self._attend(q, k, v, key_padding_mask, valid_lens, return_weights, past, first_key, self.window,
                              scale=self.scale, softcap=self.softcap, sinks=self.sinks, gate=gate)
        if kv_cache is not None and self.window is not None:
            kv_cache.keep_last(self.window - 1)  # the next query sees itself and the W - 1 tokens before it
        return result

    def _check_cache(self, kv_cache, x, kv, key_padding_mask, valid_lens) -> int:
        """The number of tokens before ``x`` (0 without a cache), after checking the cache may be used here."""
        if kv_cache is None:
            return 0
        if not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache must be a mha_lib.KVCache or None, got {type(kv_cache).__name__}")
        if not self.causal:
            raise ValueError("kv_cache needs causal=True: a cache serves a decoder that generates left to right")
        if kv is not None:
            raise ValueError("kv_cache is for self-attention: pass x only (the cache holds x's own past)")
        if key_padding_mask is not None or valid_lens is not None:
            raise ValueError("kv_cache cannot be combined with key_padding_mask or valid_lens: feed each sequence "
                             "without padding, or attend without a cache")
        if isinstance(x, Tensor) and x.dim() == 3:
            return kv_cache.start_chunk(self, x.shape[0], x.shape[1], self.context_length)
        kv_cache.claim(self)  # x itself is checked next, with the layer's own messages
        return kv_cache.seen

    def extra_repr(self) -> str:
        extra = ""
        if self.d_kv_in != self.d_in:
            extra += f", d_kv_in={self.d_kv_in}"
        if self.num_kv_heads != self.num_heads:
            extra += f", num_kv_heads={self.num_kv_heads}"
        if self.rope_theta is not None:
            extra += f", rope_theta={self.rope_theta:g}"
        if self.window is not None:
            extra += f", window={self.window}"
        if self.rope_fraction != 1.0:
            extra += f", rope_fraction={self.rope_fraction:g}"
        if self.yarn is not None:
            extra += f", yarn=YaRN(factor={self.yarn.factor:g})"
        if self.qk_norm is not None:
            extra += f", qk_norm={self.qk_norm!r}, norm_eps={self.norm_eps:g}"
        for name in ("scale", "softcap"):
            if getattr(self, name) is not None:
                extra += f", {name}={getattr(self, name):g}"
        if self.sinks is not None:
            extra += ", sinks=True"
        if self.gate is not None:
            extra += f", gate={self.gate!r}"
        return super().extra_repr() + extra


class FusedMultiHeadAttention(_MultiHeadBase):
    """Multi-head *self*-attention with one ``Linear(d_in, 3 * d_out)`` for Q, K and V together (nanoGPT).

    Same function as ``MultiHeadAttention``: one big matmul instead of three smaller ones. Same ``forward``
    arguments, without ``kv`` (one input feeds all three projections).
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
        *,
        kernel: str = "explicit",
        causal: bool = True,
    ):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, kernel, causal)
        self.W_qkv = nn.Linear(d_in, 3 * d_out, bias=_check_bias_flag(qkv_bias))  # rows: [W_q; W_k; W_v]
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(
        self,
        x: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        valid_lens: Tensor | None = None,
        return_weights: bool = False,
    ):
        self._check_return_weights(return_weights)
        check_sequence("x", x, self.d_in, max_len=self.context_length if self.causal else None)
        check_matches_weights("x", x, self.W_qkv.weight)
        qkv = self.W_qkv(x)  # (B, T, 3·D)
        q, k, v = (split_heads(t, self.num_heads) for t in qkv.split(self.d_out, dim=-1))  # 3 × (B, H, T, Dh)
        return self._attend(q, k, v, key_padding_mask, valid_lens, return_weights)
