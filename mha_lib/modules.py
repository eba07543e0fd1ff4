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

import torch
from torch import nn

from .cache import KVCache
from .functional import (
    KERNELS, expand_kv_heads, explicit_attention, flash_attention, merge_heads, sdpa_attention, split_heads,
)
from .masks import causal_mask, causal_mask_at, combine_masks, mask_from_key_padding, mask_from_valid_lens
from .positions import apply_rope
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


def causal_attention_at(
    kernel: str, q: Tensor, k: Tensor, v: Tensor, *, first_query: int = 0, first_key: int = 0,
    window: int | None = None, mask: Tensor | None = None, scale: float | None = None, dropout_p: float = 0.0,
):
    """Causal attention at the tokens' true positions, with the kernel named ``kernel`` (a key of ``KERNELS``).

    Query ``i`` sits at position ``first_query + i`` and key ``j`` at ``first_key + j``; a query at ``m`` sees the
    key at ``n`` when ``n <= m`` and, with a ``window`` W, ``n > m - W`` (``causal_mask_at``'s rule). ``mask`` is an
    optional keep mask on top (padding). Returns ``(context, weights)`` as the kernels do.

    Each kernel gets the triangle in the form it needs, so that only the explicit kernel pays for a ``(T, S)``
    mask (it builds the ``(T, S)`` weights anyway): the tiled kernel aligns its triangle bottom-right (the queries
    are the last T of the S positions: a chunk after a KV cache, or T = S) and skips the tiles outside the window;
    ``sdpa_attention`` takes the offset between the positions as ``diagonal``, and the window. Both never hold a
    ``T × S`` tensor: one call of either layer at T = 8,192 (width 32) grows memory by less than 25 MiB, where one
    float32 ``T × S`` matrix takes 256 MiB (``tests/benchmarks/layer_memory.py``, ``tests/core/test_layer_memory.py``).
    """
    T, S = q.shape[-2], k.shape[-2]
    diagonal = first_query - first_key  # query i sees key j when j <= i + diagonal
    if kernel == "sdpa":
        return sdpa_attention(q, k, v, mask=mask, scale=scale, dropout_p=dropout_p, is_causal=True,
                              diagonal=diagonal, window=window)
    if kernel == "flash" and diagonal == S - T:  # the tiled kernel's own bottom-right triangle
        return flash_attention(q, k, v, causal=True, window=window, mask=mask, scale=scale, dropout_p=dropout_p), None
    if diagonal == 0 and window is None:  # the top-left triangle: every kernel takes it as a flag
        return KERNELS[kernel](q, k, v, mask=mask, scale=scale, dropout_p=dropout_p, is_causal=True)
    positional = causal_mask_at(  # (T, S): the explicit kernel, or a window on causal cross-attention
        torch.arange(first_query, first_query + T, device=q.device),
        torch.arange(first_key, first_key + S, device=q.device), window=window,
    )
    return KERNELS[kernel](q, k, v, mask=combine_masks(positional, mask), scale=scale, dropout_p=dropout_p)


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
        first_query: int = 0, first_key: int = 0, window: int | None = None,
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
                dropout_p=dropout_p,
            )  # (B, H, T, Dh), (B, H, T, S) or None
        else:
            context, weights = KERNELS[self.kernel](q, k, v, mask=padding, dropout_p=dropout_p)
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
    ):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, kernel, causal, head_dim)
        self.d_kv_in = d_in if d_kv_in is None else check_positive_int("d_kv_in", d_kv_in)
        self.num_kv_heads = self._check_kv_heads(num_kv_heads)
        self.rope_theta = None if rope_theta is None else check_positive_float("rope_theta", rope_theta)
        if self.rope_theta is not None and self.head_dim % 2:
            raise ValueError(
                f"rope_theta needs an even head size (RoPE turns the dimensions in pairs), got head_dim = "
                f"{self.head_dim}; choose d_out and num_heads (or head_dim) so that the head size is even"
            )
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
        q = split_heads(self.W_query(x), self.num_heads)  # (B, T, H·Dh) -> (B, H, T, Dh)
        k = split_heads(self.W_key(kv), self.num_kv_heads)  # (B, S, G·Dh) -> (B, G, S, Dh)
        v = split_heads(self.W_value(kv), self.num_kv_heads)  # (B, S, G·Dh) -> (B, G, S, Dh)
        positions = torch.arange(past, past + x.shape[1], device=x.device)  # the chunk's true positions
        if self.rope_theta is not None:  # after the projection, before the scores; v carries no position
            q = apply_rope(q, positions, self.rope_theta)
            k = apply_rope(k, positions, self.rope_theta)
        first_key = 0  # keys at 0 .. S-1 (S = T unless kv is another sequence)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (B, G, S, Dh): the cached tokens, then this chunk's
            first_key = kv_cache.start  # the oldest token held (a window's cache drops the older ones)
        k = expand_kv_heads(k, self.num_heads)  # (B, G, S, Dh) -> (B, H, S, Dh)
        v = expand_kv_heads(v, self.num_heads)  # (B, G, S, Dh) -> (B, H, S, Dh)
        result = self._attend(q, k, v, key_padding_mask, valid_lens, return_weights, past, first_key, self.window)
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
