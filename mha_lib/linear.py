"""A state instead of a cache: linear attention, the delta rule and Gated DeltaNet (chapter 16).

Shape glossary: B batch, T tokens, H heads, Dk key/query head width, Dv value head width, C chunk size.

Softmax attention keeps every key and value (chapter 12's cache grows with T). Drop the softmax and each output is
``φ(q_t)ᵀ Σ_s φ(k_s) v_sᵀ``: the sum is one ``Dk × Dv`` matrix per head, the *state*, updated token by token.

    linear_attention(q, k, v)          Katharopoulos et al. 2020: φ = elu + 1, with the normaliser φ(q)·Σφ(k);
                                       form="quadratic" (the T × T product) or "recurrent" (a running state)
    linear_attention_weights(q, k)     the T × T matrix that linear attention applies without ever forming it
    delta_rule(q, k, v, beta, g=...)   DeltaNet (Schlag et al. 2021; Yang et al. 2024) and Gated DeltaNet (Yang et
                                       al. 2025): write with a correction, forget on purpose; token by token or in
                                       chunks (the WY / UT form), equal
    GatedDeltaNet                      Qwen3-Next's whole linear-attention layer (projections, short causal conv,
                                       gates, L2-normalised q and k, gated RMSNorm); ``rule="delta"`` / ``"linear"``
                                       swap the update, ``conv_size=None`` drops the conv
    StateCache                         what such a layer keeps while generating: the state and the conv's last
                                       inputs; ``nbytes`` is the same at every length

The layout is the core's ``(B, H, T, D)`` (transformers' kernels take ``(B, T, H, D)``).
"""

from __future__ import annotations

import math
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from .functional import expand_kv_heads, split_heads
from .validation import (
    check_flag,
    check_float_tensor,
    check_matches_weights,
    check_positive_float,
    check_positive_int,
    check_same_device,
    check_same_device_dtype,
    check_sequence,
)

Tensor = torch.Tensor

#: φ for linear attention: elu + 1 (Katharopoulos et al. 2020, positive, so the normaliser never vanishes) and relu
FEATURE_MAPS = {"elu+1": lambda x: F.elu(x) + 1.0, "relu": F.relu}
FORMS = ("quadratic", "recurrent")
RULES = ("gated_delta", "delta", "linear")


def _feature_map(name) -> callable:
    if callable(name):
        return name
    if not isinstance(name, str) or name not in FEATURE_MAPS:
        raise ValueError(f"feature_map must be one of {list(FEATURE_MAPS)} or a function, got {name!r}")
    return FEATURE_MAPS[name]


def _check_choice(name: str, value, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def _check_qkv(q, k, v) -> tuple[Tensor, Tensor, Tensor]:
    """q, k ``(B, H, T, Dk)`` and v ``(B, H, T, Dv)``: float tensors of one dtype, one device, one (B, H, T)."""
    q = check_float_tensor("q", q, ndim=4, layout="(B, H, T, Dk)")
    k = check_float_tensor("k", k, ndim=4, layout="(B, H, T, Dk)")
    v = check_float_tensor("v", v, ndim=4, layout="(B, H, T, Dv)")
    check_same_device_dtype(("q", "k", "v"), (q, k, v))
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape (B, H, T, Dk), got q {tuple(q.shape)} and k "
                         f"{tuple(k.shape)}")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must have the (B, H, T) of k, {tuple(k.shape[:3])}, got v {tuple(v.shape)}: "
                         f"one value per key")
    return q, k, v


# --- 1. linear attention ----------------------------------------------------------------------------------------


def linear_attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = True, feature_map="elu+1",
                     form: str = "quadratic", eps: float = 1e-6) -> Tensor:
    """Linear attention (Katharopoulos et al. 2020): the softmax's ``exp(q·k)`` replaced by ``φ(q)·φ(k)``.

        out_t = φ(q_t)ᵀ S_t / (φ(q_t) · z_t + eps),   S_t = Σ_{s ≤ t} φ(k_s) v_sᵀ  (Dk × Dv),   z_t = Σ_{s ≤ t} φ(k_s)

    The denominator is the paper's normaliser: each output is a weighted *average* of the values, as with softmax
    (without it the output grows with t). ``causal=False`` sums over every s. ``eps`` keeps a zero denominator
    finite (φ = relu can give one); with elu + 1 it only moves the result by about eps / t.

    ``form="quadratic"``: ``A = φ(q) φ(k)ᵀ`` (T × T, masked), ``out = A v / A·1`` — T² work, like softmax attention.
    ``form="recurrent"``: the running state ``S_t`` and ``z_t``, one token at a time — Dk·Dv numbers per head
    whatever T is. Both are the same sums in another order: equal up to rounding.

    q, k ``(B, H, T, Dk)``, v ``(B, H, T, Dv)`` -> ``(B, H, T, Dv)``. ``feature_map``: ``"elu+1"``, ``"relu"`` or a
    function.
    """
    q, k, v = _check_qkv(q, k, v)
    causal = check_flag("causal", causal)
    phi = _feature_map(feature_map)
    form = _check_choice("form", form, FORMS)
    eps = check_positive_float("eps", eps)
    fq, fk = phi(q), phi(k)
    if form == "quadratic":
        weights = _unnormalised_weights(fq, fk, causal)  # (B, H, T, T)
        return (weights @ v) / (weights.sum(-1, keepdim=True) + eps)  # (B, H, T, Dv) / (B, H, T, 1)
    if not causal:  # one state for every query: the sums over all T tokens
        state = fk.transpose(-1, -2) @ v  # (B, H, Dk, T) @ (B, H, T, Dv) -> (B, H, Dk, Dv)
        z = fk.sum(-2)  # (B, H, Dk)
        return (fq @ state) / ((fq * z[:, :, None]).sum(-1, keepdim=True) + eps)
    out, _ = _linear_recurrence(fq, fk, v, None)
    num, den = out[..., :-1], out[..., -1:]  # the values' part, and the normaliser's column
    return num / (den + eps)


def _linear_recurrence(fq: Tensor, fk: Tensor, v: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor]:
    """``S += φ(k_t) [v_t, 1]ᵀ; out_t = Sᵀ φ(q_t)`` token by token: the value gets a column of ones, so the state's
    last column is ``z = Σ φ(k)`` and the output's last entry the normaliser ``φ(q)·z``. State ``(B, H, Dk, Dv + 1)``."""
    B, H, T, Dk = fk.shape
    v1 = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # (B, H, T, Dv) -> (B, H, T, Dv + 1)
    if state is None:
        state = v1.new_zeros(B, H, Dk, v1.shape[-1])
    outs = []
    for t in range(T):
        state = state + fk[:, :, t, :, None] * v1[:, :, t, None, :]  # (B, H, Dk, 1) * (B, H, 1, Dv + 1)
        outs.append(torch.einsum("bhk,bhkv->bhv", fq[:, :, t], state))  # Sᵀ φ(q_t): (B, H, Dv + 1)
    return torch.stack(outs, dim=2), state  # (B, H, T, Dv + 1), (B, H, Dk, Dv + 1)


def _unnormalised_weights(fq: Tensor, fk: Tensor, causal: bool) -> Tensor:
    weights = fq @ fk.transpose(-1, -2)  # (B, H, T, Dk) @ (B, H, Dk, T) -> (B, H, T, T)
    if causal:
        weights = weights.tril()  # query t reads keys 0 .. t
    return weights


def linear_attention_weights(q: Tensor, k: Tensor, *, causal: bool = True, feature_map="elu+1",
                             eps: float = 1e-6) -> Tensor:
    """The ``(B, H, T, T)`` matrix linear attention applies to the values: ``φ(q_t)·φ(k_s) / (φ(q_t)·Σ_s' φ(k_s'))``.

    ``linear_attention(q, k, v) == linear_attention_weights(q, k) @ v``. Each row sums to 1 (up to eps), as a
    softmax row does, but the recurrent form never builds it: there is nothing to return from the layer, only this
    matrix to compute on the side (chapter 16 draws it next to softmax's).
    """
    q = check_float_tensor("q", q, ndim=4, layout="(B, H, T, Dk)")
    k = check_float_tensor("k", k, ndim=4, layout="(B, H, T, Dk)")
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape (B, H, T, Dk), got q {tuple(q.shape)} and k "
                         f"{tuple(k.shape)}")
    phi = _feature_map(feature_map)
    weights = _unnormalised_weights(phi(q), phi(k), check_flag("causal", causal))
    return weights / (weights.sum(-1, keepdim=True) + check_positive_float("eps", eps))


# --- 2. the delta rule ------------------------------------------------------------------------------------------


def delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, *, g: Tensor | None = None,
               chunk_size: int | None = None, initial_state: Tensor | None = None,
               output_final_state: bool = False) -> tuple[Tensor, Tensor | None]:
    """DeltaNet's update, and Gated DeltaNet's with a log-decay ``g``: per head and token t, in this order,

        S ← exp(g_t) · S                    forget on purpose (decay first; no g: no decay)
        δ_t = β_t · (v_t − Sᵀ k_t)          what the state gets wrong about k_t's value, times the step β_t
        S ← S + k_t δ_tᵀ                    write the correction, not the value: S = S − β k kᵀS + β k vᵀ
        o_t = Sᵀ q_t                        read after the write: a token sees its own value

    The plain rule: no normalisation of q and k, no scaling of q (``GatedDeltaNet`` does both; transformers'
    kernels do both inside). With unit keys and β = 1 the write replaces k's old value by v exactly.

    ``chunk_size=None``: token by token (the recurrence). ``chunk_size=C``: the chunked form — within a chunk the C
    corrections depend on each other through a unit lower-triangular system ``(I + L) δ = β(v − decayed Sᵀk)``,
    solved at once (the WY / UT transform), then the chunk reads the state and writes it once; T is zero-padded
    to a multiple of C (β = g = 0 there leaves the state as it is). Same answer, the work in C-sized matrix
    products (chapter 14's tiles, for a state).

    q, k ``(B, H, T, Dk)``; v ``(B, H, T, Dv)``; beta, g ``(B, H, T)``; initial_state ``(B, H, Dk, Dv)``.
    Returns ``(out (B, H, T, Dv), final state (B, H, Dk, Dv) or None)``. float16 / bfloat16 inputs are computed in
    float32 (the output returns in the input dtype, the state stays float32); float64 stays float64.

    β outside [0, 1] is allowed: with unit keys the update is stable for β ∈ [0, 2], and negative-eigenvalue
    DeltaNet (Grazzi et al. 2025) uses β up to 2. A positive g is refused: the state would grow without bound.
    """
    q, k, v = _check_qkv(q, k, v)
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    beta = check_float_tensor("beta", beta, ndim=3, layout="(B, H, T)")
    _check_per_token("beta", beta, (B, H, T), k)
    if g is not None:
        g = check_float_tensor("g", g, ndim=3, layout="(B, H, T)")
        _check_per_token("g", g, (B, H, T), k)
        if T and bool((g > 0).any()):
            raise ValueError(
                f"g must be <= 0 everywhere, got a maximum of {g.max().item():.3g}: g is a log-decay, the state is "
                f"multiplied by exp(g) <= 1 at each token; a positive g makes it grow without bound (and the chunked "
                f"form's exp of cumulative g overflow). Gated DeltaNet builds it as -exp(A_log)·softplus(a + dt_bias)"
            )
    if chunk_size is not None:
        chunk_size = check_positive_int("chunk_size", chunk_size)
    output_final_state = check_flag("output_final_state", output_final_state)
    if initial_state is not None:
        initial_state = check_float_tensor("initial_state", initial_state, ndim=4, layout="(B, H, Dk, Dv)")
        if initial_state.shape != (B, H, Dk, Dv):
            raise ValueError(f"initial_state must have shape (B, H, Dk, Dv) = {(B, H, Dk, Dv)}, got "
                             f"{tuple(initial_state.shape)}")
        check_same_device(("k", "initial_state"), (k, initial_state))  # its dtype may be the computing one
    in_dtype = v.dtype
    dtype = torch.float64 if k.dtype == torch.float64 else torch.float32  # half precision: the sums in float32
    q, k, v, beta = (x.to(dtype) for x in (q, k, v, beta))
    g = None if g is None else g.to(dtype)
    state = k.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state.to(dtype)
    if chunk_size is None:
        out, state = _recurrent(q, k, v, beta, g, state)
    else:
        out, state = _chunked(q, k, v, beta, g, state, chunk_size)
    return out.to(in_dtype), (state if output_final_state else None)


def _check_per_token(name: str, x: Tensor, shape: tuple[int, int, int], k: Tensor) -> None:
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} must have shape (B, H, T) = {shape}, one number per head and token, got "
                         f"{tuple(x.shape)}")
    check_same_device_dtype(("k", name), (k, x))


def _recurrent(q, k, v, beta, g, state) -> tuple[Tensor, Tensor]:
    outs = []
    for t in range(k.shape[2]):
        if g is not None:
            state = state * g[:, :, t, None, None].exp()  # decay first: (B, H, Dk, Dv) * (B, H, 1, 1)
        predicted = torch.einsum("bhkv,bhk->bhv", state, k[:, :, t])  # Sᵀ k_t: what the state holds for k_t
        delta = beta[:, :, t, None] * (v[:, :, t] - predicted)  # (B, H, Dv)
        state = state + k[:, :, t, :, None] * delta[:, :, None, :]  # + k_t δᵀ: (B, H, Dk, 1) * (B, H, 1, Dv)
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, :, t]))  # Sᵀ q_t, after the write
    return torch.stack(outs, dim=2), state  # (B, H, T, Dv), (B, H, Dk, Dv)


def _chunked(q, k, v, beta, g, state, C: int) -> tuple[Tensor, Tensor]:
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    pad = (-T) % C  # zeros at the end: β = 0 writes nothing, g = 0 keeps the state
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    beta = F.pad(beta, (0, pad))
    g = beta.new_zeros(beta.shape) if g is None else F.pad(g, (0, pad))
    N = (T + pad) // C
    q, k, v = (x.reshape(B, H, N, C, x.shape[-1]) for x in (q, k, v))  # (B, H, T', D) -> (B, H, N, C, D)
    beta, g = beta.reshape(B, H, N, C), g.reshape(B, H, N, C)  # (B, H, T') -> (B, H, N, C)
    cum = g.cumsum(-1)  # log of the decay from the chunk's start to token i (inclusive): (B, H, N, C)
    later = torch.ones(C, C, dtype=torch.bool, device=k.device).triu(1)  # j > i: no decay runs backwards
    # exp(cum_i − cum_j): the decay between tokens j and i; -inf above the diagonal *before* the exp (a separate
    # exp(-cum_j) overflows in float32 under strong decays)
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(later, float("-inf")).exp()  # (B, H, N, C, C)
    k_beta = k * beta[..., None]  # (B, H, N, C, Dk)
    # (I + L) δ = β v − β e^{cum} K S0, with L[i, j] = β_i e^{cum_i − cum_j} k_i·k_j for j < i: solve once for both
    # right-hand sides, so δ = u − w S0 for whatever state S0 the chunk starts from
    system = ((k_beta @ k.transpose(-1, -2)) * decay).tril(-1)  # L: (B, H, N, C, C), strictly lower
    system = system + torch.eye(C, dtype=k.dtype, device=k.device)  # I + L
    rhs = torch.cat([v * beta[..., None], k_beta * cum.exp()[..., None]], dim=-1)  # (B, H, N, C, Dv + Dk)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u, w = solved[..., :Dv], solved[..., Dv:]  # (B, H, N, C, Dv), (B, H, N, C, Dk)
    intra = (q @ k.transpose(-1, -2)) * decay  # q_i·k_j e^{cum_i − cum_j}, j <= i: (B, H, N, C, C)
    q_decayed = q * cum.exp()[..., None]  # reads the chunk's starting state through the decay so far
    k_to_end = k * (cum[..., -1:] - cum).exp()[..., None]  # each write, decayed to the chunk's end
    outs = []
    for n in range(N):
        delta = u[:, :, n] - w[:, :, n] @ state  # (B, H, C, Dv): the corrections, given the state S0
        outs.append(q_decayed[:, :, n] @ state + intra[:, :, n] @ delta)  # (B, H, C, Dv)
        state = state * cum[:, :, n, -1, None, None].exp() + k_to_end[:, :, n].transpose(-1, -2) @ delta
    out = torch.stack(outs, dim=2).reshape(B, H, N * C, Dv)  # (B, H, N, C, Dv) -> (B, H, T', Dv)
    return out[:, :, :T], state


# --- 3. the layer and its cache ---------------------------------------------------------------------------------


class StateCache:
    """One linear-attention layer's memory while it generates: what ``KVCache`` is to softmax attention.

    ``state``        ``(B, H, Dk, Dv)`` (``Dv + 1`` for ``rule="linear"``: the normaliser's column), or None
    ``conv_inputs``  ``(B, K − 1, channels)``: the short conv's last K − 1 inputs, or None (no conv)
    ``seen``         tokens fed so far;  ``nbytes``  bytes held — the same after 10 tokens or 10,000

    Give each layer its own: a cache remembers the layer that filled it.
    """

    def __init__(self):
        self.state: Tensor | None = None
        self.conv_inputs: Tensor | None = None
        self.seen = 0
        self._owner: weakref.ref | None = None  # not id(): a freed layer's id can come back

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.state, self.conv_inputs) if t is not None)

    def start_chunk(self, layer: nn.Module, batch_size: int) -> None:
        """Called by the layer before a chunk: one cache, one layer, one batch of sequences."""
        owner = None if self._owner is None else self._owner()
        if self._owner is not None and owner is not layer:
            raise ValueError("kv_cache belongs to another layer (or to a layer since freed): give each layer its own "
                             "StateCache(), e.g. caches = [StateCache() for _ in layers]")
        self._owner = weakref.ref(layer)
        if self.state is not None and self.state.shape[0] != batch_size:
            raise ValueError(f"kv_cache holds the state of {self.state.shape[0]} sequences but x has {batch_size}: "
                             f"start a new StateCache() for a new batch")

    def clear(self) -> None:
        """Forget the sequence (the cache stays tied to its layer)."""
        self.state, self.conv_inputs, self.seen = None, None, 0

    def __repr__(self) -> str:
        shapes = {name: None if t is None else tuple(t.shape) for name, t in
                  (("state", self.state), ("conv_inputs", self.conv_inputs))}
        return f"StateCache(seen={self.seen}, nbytes={self.nbytes:,}, state={shapes['state']}, " \
               f"conv_inputs={shapes['conv_inputs']})"


def l2_normalize(x: Tensor, eps: float = 1e-6) -> Tensor:
    """``x · rsqrt(Σx² + eps)`` over the last dimension: transformers' and FLA's convention (``F.normalize``
    divides by ``max(‖x‖, eps)`` instead — equal except for vectors shorter than ~1e-3)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


class GatedDeltaNet(nn.Module):
    """Qwen3-Next's linear-attention layer (transformers' ``Qwen3NextGatedDeltaNet``), written out.

    forward(x, *, kv_cache=None, return_weights=False): x ``(B, T, d_model)`` -> ``(B, T, d_model)``

        q, k, v, z = W_query x, W_key x, W_value x, W_gate x         Hk·Dk, Hk·Dk, Hv·Dv, Hv·Dv
        q, k, v    = silu(causal depthwise conv over [q | k | v])      K = conv_size taps per channel (no bias)
        β          = sigmoid(W_beta x)                                 (Hv,) per token: the write's step
        g          = −exp(A_log) · softplus(W_decay x + dt_bias)       (Hv,) per token: the log-decay, <= 0
        q, k       = q / ‖q‖, k / ‖k‖ per head (eps 1e-6 inside the root); q · Dk^-½
        o          = delta_rule(q, k, v, β, g)                         key head h // (Hv/Hk) serves value head h
        out        = out_proj(RMSNorm(o) · silu(z))                    the norm per head, before the gate

    ``num_value_heads`` Hv may be a multiple of ``num_key_heads`` Hk (Qwen3-Next: 16 key heads, 32 value heads).

    Options, so that chapter 16 can swap the mixer inside one model:

    ``rule="gated_delta"``  as above;  ``"delta"``  no decay (no ``A_log``, ``dt_bias``, ``W_decay``);
    ``"linear"``  Katharopoulos et al.'s linear attention on the same projections: φ = elu + 1 on q and k (no L2
    norm, no scale), state += φ(k) vᵀ with the normaliser, no β (no ``W_beta``) and no decay.
    ``conv_size=None``  no short conv: the conv gives every token a look at the K − 1 before it (a previous-token
    shift), which hides how well the rule itself recalls.
    ``chunk_size``  the chunked form's C for chunks of T > 1 tokens (one token runs the recurrence).

    There are no attention weights: the layer never forms the T × T scores (``return_weights=True`` is refused).
    With a ``StateCache``, ``x`` is the next chunk of the sequence; the cache keeps the conv's last K − 1 inputs and
    the state, a fixed number of bytes whatever the length.
    """

    def __init__(self, d_model: int, num_key_heads: int, key_head_dim: int | None = None, *,
                 num_value_heads: int | None = None, value_head_dim: int | None = None, conv_size: int | None = 4,
                 rule: str = "gated_delta", norm_eps: float = 1e-6, chunk_size: int = 64):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.num_key_heads = Hk = check_positive_int("num_key_heads", num_key_heads)
        if key_head_dim is None:
            if d_model % Hk:
                raise ValueError(f"d_model ({d_model}) must be divisible by num_key_heads ({Hk}), or give "
                                 f"key_head_dim")
            key_head_dim = d_model // Hk
        self.key_head_dim = Dk = check_positive_int("key_head_dim", key_head_dim)
        self.num_value_heads = Hv = Hk if num_value_heads is None else check_positive_int("num_value_heads",
                                                                                          num_value_heads)
        if Hv % Hk:
            raise ValueError(f"num_value_heads must be a multiple of num_key_heads = {Hk} (each key head serves "
                             f"the same number of value heads), got {Hv}")
        self.value_head_dim = Dv = Dk if value_head_dim is None else check_positive_int("value_head_dim",
                                                                                         value_head_dim)
        self.conv_size = None if conv_size is None else check_positive_int("conv_size", conv_size)
        self.rule = _check_choice("rule", rule, RULES)
        self.norm_eps = check_positive_float("norm_eps", norm_eps)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        self.W_query = nn.Linear(d_model, Hk * Dk, bias=False)
        self.W_key = nn.Linear(d_model, Hk * Dk, bias=False)
        self.W_value = nn.Linear(d_model, Hv * Dv, bias=False)
        self.W_gate = nn.Linear(d_model, Hv * Dv, bias=False)  # z: the output gate, silu(z) after the norm
        channels = 2 * Hk * Dk + Hv * Dv  # the conv runs over [q | k | v]
        if self.conv_size is not None:  # depthwise: one K-tap filter per channel, causal by left padding
            self.conv = nn.Conv1d(channels, channels, self.conv_size, groups=channels, bias=False)
        if self.rule != "linear":
            self.W_beta = nn.Linear(d_model, Hv, bias=False)  # b: β = sigmoid(b)
        if self.rule == "gated_delta":
            self.W_decay = nn.Linear(d_model, Hv, bias=False)  # a: g = −exp(A_log)·softplus(a + dt_bias)
            # start slow (FLA's initialisation): A ~ U(0.01, 16), softplus(dt_bias) ~ logU(0.001, 0.1), so that
            # exp(g) ≈ 0.2 … 0.99999 per token at the start rather than transformers' placeholder dt_bias = 1
            # (exp(−16·1.3): a head that forgets everything at every token)
            self.A_log = nn.Parameter(torch.empty(Hv).uniform_(0.01, 16).log())
            dt = torch.empty(Hv).uniform_(math.log(1e-3), math.log(1e-1)).exp()
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)
        self.norm = nn.RMSNorm(Dv, eps=self.norm_eps)  # per value head, weight 1 at the start
        self.out_proj = nn.Linear(Hv * Dv, d_model, bias=False)

    @property
    def head_dim(self) -> int:
        """Each head's width where the heads enter ``out_proj`` (Dv): ``ablation.scaled_heads`` reads it."""
        return self.value_head_dim

    @property
    def num_heads(self) -> int:
        return self.num_value_heads

    def forward(self, x: Tensor, *, kv_cache: StateCache | None = None, return_weights: bool = False) -> Tensor:
        if check_flag("return_weights", return_weights):
            raise ValueError(
                "return_weights=True: a GatedDeltaNet layer has no attention weights to return. It never scores "
                "query against key: each token updates a fixed Dk × Dv state per head and reads it, so no T × T "
                "matrix exists (for plain linear attention, mha_lib.linear_attention_weights(q, k) computes the one "
                "it applies implicitly)"
            )
        check_sequence("x", x, self.d_model, width_name="d_model")
        check_matches_weights("x", x, self.W_query.weight)
        B, T, _ = x.shape
        if kv_cache is not None:
            if not isinstance(kv_cache, StateCache):
                raise TypeError(f"kv_cache must be a mha_lib.StateCache or None (a linear-attention layer keeps a "
                                f"state, not keys and values), got {type(kv_cache).__name__}")
            kv_cache.start_chunk(self, B)
        Hk, Hv, Dk = self.num_key_heads, self.num_value_heads, self.key_head_dim
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)  # (B, T, Hk·Dk), (B, T, Hk·Dk), (B, T, Hv·Dv)
        if self.conv_size is not None:
            mixed = self._conv(torch.cat([q, k, v], dim=-1), kv_cache)  # (B, T, channels), channels [q | k | v]
            q, k, v = mixed.split([Hk * Dk, Hk * Dk, Hv * self.value_head_dim], dim=-1)
        q, k, v = split_heads(q, Hk), split_heads(k, Hk), split_heads(v, Hv)  # (B, T, H·D) -> (B, H, T, D)
        q, k = expand_kv_heads(q, Hv), expand_kv_heads(k, Hv)  # (B, Hk, T, Dk) -> (B, Hv, T, Dk)
        state = None if kv_cache is None else kv_cache.state
        if self.rule == "linear":
            out, state = self._linear(q, k, v, state, keep=kv_cache is not None)
        else:
            q, k = l2_normalize(q) * Dk ** -0.5, l2_normalize(k)  # unit keys: β = 1 overwrites exactly
            beta = torch.sigmoid(self.W_beta(x)).transpose(1, 2)  # (B, T, Hv) -> (B, Hv, T)
            g = None
            if self.rule == "gated_delta":
                a = self.W_decay(x) + self.dt_bias  # (B, T, Hv)
                g = (-self.A_log.exp() * F.softplus(a)).transpose(1, 2)  # (B, T, Hv) -> (B, Hv, T), <= 0
            out, state = delta_rule(q, k, v, beta, g=g, chunk_size=None if T == 1 else min(self.chunk_size, T),
                                    initial_state=state, output_final_state=kv_cache is not None)
        if kv_cache is not None:
            kv_cache.state = state
            kv_cache.seen += T
        z = split_heads(self.W_gate(x), Hv)  # (B, T, Hv·Dv) -> (B, Hv, T, Dv)
        out = self.norm(out) * F.silu(z)  # RMSNorm per head, then the gate (Qwen3-Next's RMSNormGated)
        out = out.transpose(1, 2).reshape(B, T, Hv * self.value_head_dim)  # (B, Hv, T, Dv) -> (B, T, Hv·Dv)
        return self.out_proj(out)

    def _conv(self, mixed: Tensor, cache: StateCache | None) -> Tensor:
        """silu(causal depthwise conv) over ``(B, T, channels)``: the K − 1 inputs before the chunk come from the
        cache (zeros at the start of a sequence), and the cache keeps the last K − 1 for the next chunk."""
        K = self.conv_size
        before = None if cache is None else cache.conv_inputs
        if before is None:
            before = mixed.new_zeros(mixed.shape[0], K - 1, mixed.shape[-1])  # nothing before token 0
        window = torch.cat([before, mixed], dim=1)  # (B, K − 1 + T, channels)
        if cache is not None:
            cache.conv_inputs = window[:, window.shape[1] - (K - 1):].clone()  # a copy: nbytes must not lie
        out = F.conv1d(window.transpose(1, 2), self.conv.weight, groups=mixed.shape[-1])  # (B, channels, T)
        return F.silu(out.transpose(1, 2))  # (B, channels, T) -> (B, T, channels)

    def _linear(self, q, k, v, state, keep: bool):
        """Linear attention on the layer's heads, recurrent through the cache's state (normaliser included)."""
        phi = FEATURE_MAPS["elu+1"]
        if not keep:  # a whole sequence, no state to keep: the quadratic form is faster (T is small) and equal
            out = linear_attention(q, k, v, feature_map=phi, form="quadratic")
            return out, None
        out, state = _linear_recurrence(phi(q), phi(k), v, state)  # (B, H, T, Dv + 1), (B, H, Dk, Dv + 1)
        return out[..., :-1] / (out[..., -1:] + 1e-6), state

    def extra_repr(self) -> str:
        heads = f"num_key_heads={self.num_key_heads}, key_head_dim={self.key_head_dim}"
        if (self.num_value_heads, self.value_head_dim) != (self.num_key_heads, self.key_head_dim):
            heads += f", num_value_heads={self.num_value_heads}, value_head_dim={self.value_head_dim}"
        return f"d_model={self.d_model}, {heads}, rule={self.rule!r}, conv_size={self.conv_size}"


__all__ = ["FEATURE_MAPS", "GatedDeltaNet", "StateCache", "delta_rule", "l2_normalize", "linear_attention",
           "linear_attention_weights"]
