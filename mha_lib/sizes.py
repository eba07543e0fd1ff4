"""How many parameters an attention layer (and a whole GPT) holds, counted from the shapes of its weights.

    attention_parameter_count(D)   4·D² + 4·D      W_q, W_k, W_v, W_o (D × D each) and their four biases
    gpt_parameter_count(D, L)      the whole GPT-2-style decoder: embeddings, L blocks, final layer norm
    kv_cache_bytes(L, G, Dh, T)    L × 2 × G × Dh × T × bytes: what a decoder keeps per sequence while it generates
    kv_cache_bytes(L, tokens=T, kv_lora_rank=r, qk_rope_head_dim=dr)   L × (r + dr) × T × bytes: MLA (chapter 14)
    kv_cache_bytes(L, G, Dh, T, window=W, layer_types=[...])   sliding layers hold min(T, W), full ones T (chapter 15)
    kv_cache_bytes(L, G, Dh, T, layer_types=[..."linear"...], linear=LinearAttentionSizes(...))   hybrids: a
                                   linear-attention layer holds a fixed state (and its conv's inputs) at every T (ch. 16)
    kv_cache_bytes(L, tokens=T, kv_lora_rank=r, qk_rope_head_dim=dr, index_head_dim=di)   L × (r + dr + di) ×
                                   T × bytes: DeepSeek-V3.2's sparse attention caches its indexer's key (chapter 17)
    latent_attention_parameter_count(...)   the parameters of DeepSeek's latent attention layer

The number of heads does not change the count of the 2017 layer, on purpose: the heads *share out* the D columns
of W_q, W_k and W_v (each head gets Dh = D / H of them), so 1, 12 or 768 heads hold exactly the same number of
parameters. Chapter 7 derives these formulas and checks them with ``sum(p.numel() for p in layer.parameters())``.
Sharing key/value heads (chapter 12) is what changes it: W_k and W_v shrink to G·Dh columns.
"""

from __future__ import annotations

from typing import NamedTuple

from .validation import check_flag, check_int, check_layer_types, check_positive_int


class GPTConfig(NamedTuple):
    """The sizes that fix a GPT-2-style model's parameter count (and its number of heads, which does not)."""

    d_model: int
    num_heads: int
    n_layers: int
    context_length: int = 1024
    vocab_size: int = 50257


#: The four published GPT-2 sizes and GPT-3 175B (Radford et al. 2019; Brown et al. 2020, table 2.1).
GPT_CONFIGS = {
    "gpt2-small": GPTConfig(d_model=768, num_heads=12, n_layers=12),
    "gpt2-medium": GPTConfig(d_model=1024, num_heads=16, n_layers=24),
    "gpt2-large": GPTConfig(d_model=1280, num_heads=20, n_layers=36),
    "gpt2-xl": GPTConfig(d_model=1600, num_heads=25, n_layers=48),
    "gpt3-175b": GPTConfig(d_model=12288, num_heads=96, n_layers=96, context_length=2048),
}


def attention_parameter_count(
    d_model: int,
    bias: bool = True,
    *,
    out_bias: bool | None = None,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    head_dim: int | None = None,
    qk_norm: str | None = None,
    gate: str | None = None,
    sinks: bool = False,
) -> int:
    """Parameters of one multi-head attention layer of width ``d_model`` (self-attention, D in and out).

    Four ``D × D`` weight matrices (W_q, W_k, W_v, W_o) and, with ``bias=True``, four bias vectors of length
    D: ``4·D² + 4·D``. ``out_bias`` overrides the bias of W_o alone; it defaults to ``bias``.

    Which flags match which layer:

    =======================================================  =================================  ==========
    layer                                                    flags                              count
    =======================================================  =================================  ==========
    GPT-2, ``nn.MultiheadAttention(D, H)``                   ``bias=True``                      4·D² + 4·D
    ``mha_lib.MultiHeadAttention(D, D, ..., qkv_bias=True)``   ``bias=True``                      4·D² + 4·D
    ``mha_lib.MultiHeadAttention`` default (the book's)      ``bias=False, out_bias=True``      4·D² + D
    D2L, ``nn.MultiheadAttention(D, H, bias=False)``         ``bias=False``                     4·D²
    =======================================================  =================================  ==========

    With ``num_heads`` H and ``num_kv_heads`` G (and ``head_dim`` Dh, default D / H), the count of a layer with
    shared key/value heads (chapter 12): ``D·H·Dh + 2·D·G·Dh + H·Dh·D`` weights, the biases to match.

    Chapter 15's controls (they need ``num_heads``), as ``MultiHeadAttention`` builds them: ``qk_norm="head"`` adds
    ``2·Dh`` norm weights, ``"projection"`` ``H·Dh + G·Dh``, ``"l2"`` none; ``gate="elementwise"`` a ``D × H·Dh``
    projection, ``"head"`` a ``D × H`` one (with a bias when ``bias``); ``sinks=True`` one logit per head, ``H``.
    """
    d = check_positive_int("d_model", d_model)
    qkv_bias = check_flag("bias", bias)
    out_bias = qkv_bias if out_bias is None else check_flag("out_bias", out_bias)
    qk_norm = _check_option("qk_norm", qk_norm, ("head", "projection", "l2"))
    gate = _check_option("gate", gate, ("elementwise", "head"))
    sinks = check_flag("sinks", sinks)
    plain = qk_norm is None and gate is None and not sinks
    if num_heads is None and num_kv_heads is None and head_dim is None and plain:
        weights = 4 * d * d  # W_q, W_k, W_v, W_o: D × D each
        biases = 3 * d * qkv_bias + d * out_bias  # one length-D vector per projection that has a bias
        return weights + biases
    if num_heads is None:
        raise ValueError("num_heads is needed with num_kv_heads, head_dim, qk_norm, gate or sinks (they are counted "
                         "per head)")
    h = check_positive_int("num_heads", num_heads)
    g = h if num_kv_heads is None else check_positive_int("num_kv_heads", num_kv_heads)
    if h % g:
        raise ValueError(f"num_kv_heads must divide num_heads = {h}, got {g}")
    if head_dim is None:
        if d % h:
            raise ValueError(f"d_model ({d}) must be divisible by num_heads ({h}), or give head_dim")
        head_dim = d // h
    dh = check_positive_int("head_dim", head_dim)
    q, kv = h * dh, g * dh  # the widths of W_q's output and of W_k's and W_v's
    weights = d * q + 2 * d * kv + q * d  # W_q (D × H·Dh), W_k and W_v (D × G·Dh), W_o (H·Dh × D)
    biases = (q + 2 * kv) * qkv_bias + d * out_bias
    norms = {None: 0, "l2": 0, "head": 2 * dh, "projection": q + kv}[qk_norm]  # RMSNorm weights
    gates = {None: 0, "elementwise": q, "head": h}[gate]  # W_gate's outputs, each with D weights (and a bias)
    return weights + biases + norms + gates * (d + qkv_bias) + h * sinks


def _check_option(name: str, value, choices: tuple[str, ...]) -> str | None:
    if value is not None and (not isinstance(value, str) or value not in choices):
        raise ValueError(f"{name} must be None or one of {list(choices)}, got {value!r}")
    return value


def gpt_parameter_count(
    d_model: int, n_layers: int, *, vocab_size: int = 50257, context_length: int = 1024
) -> int:
    """Parameters of a GPT-2-style decoder, the layout of GPT-2 and GPT-3.

    token embedding ``V × D`` + position embedding ``context_length × D``
    + ``n_layers`` blocks, each: layer norm (2·D) + attention (4·D² + 4·D) + layer norm (2·D)
      + MLP ``D -> 4·D -> D`` with biases (8·D² + 5·D)
    + final layer norm (2·D). The output head reuses the token embedding (tied weights), so it adds nothing.
    """
    d = check_positive_int("d_model", d_model)
    n_layers = check_positive_int("n_layers", n_layers)
    vocab_size = check_positive_int("vocab_size", vocab_size)
    context_length = check_positive_int("context_length", context_length)
    layer_norm = 2 * d  # a scale and a shift per feature
    mlp = (d * 4 * d + 4 * d) + (4 * d * d + d)  # Linear(D, 4D) and Linear(4D, D), with biases
    block = layer_norm + attention_parameter_count(d) + layer_norm + mlp
    embeddings = vocab_size * d + context_length * d
    return embeddings + n_layers * block + layer_norm


class LinearAttentionSizes(NamedTuple):
    """The sizes that fix what a linear-attention layer keeps while generating (chapter 16): one ``Dk × Dv`` state
    per value head, and the short conv's last ``K − 1`` inputs over its ``[q | k | v]`` channels. Neither grows with
    the tokens. Field names as Qwen3-Next's config (``linear_num_key_heads`` ...); ``conv_size=None``: no conv."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_size: int | None = 4

    @property
    def state_numbers(self) -> int:
        """``Hv · Dk · Dv``: the state of every value head."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim

    @property
    def conv_numbers(self) -> int:
        """``(K − 1) · (2·Hk·Dk + Hv·Dv)``: the inputs the next token's conv reads; 0 without a conv."""
        if self.conv_size is None:
            return 0
        channels = 2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim
        return (self.conv_size - 1) * channels

    def nbytes(self, *, bytes_per_element: int = 2, batch_size: int = 1) -> int:
        """One layer's bytes, state and conv inputs, at any number of tokens (2 bytes: bfloat16)."""
        bytes_per_element = check_positive_int("bytes_per_element", bytes_per_element)
        batch_size = check_positive_int("batch_size", batch_size)
        return (self.state_numbers + self.conv_numbers) * bytes_per_element * batch_size


class DecoderAttention(NamedTuple):
    """The attention sizes of a published decoder that fix its KV cache (chapters 12 and 14).

    For latent attention (MLA, ``kv_lora_rank`` set) the cache holds the latent and the shared rotary key,
    ``kv_lora_rank + qk_rope_head_dim`` numbers per token and layer; ``head_dim`` is then the width of a query/key
    head (``qk_nope_head_dim + qk_rope_head_dim``), and ``num_kv_heads`` the heads the latent expands into.
    """

    n_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    d_model: int
    context_length: int
    window: int | None = None  # sliding window W: a step reads W tokens at most (W − 1 cached + the current one)
    kv_lora_rank: int | None = None  # latent attention: the latent's width
    qk_rope_head_dim: int | None = None  # latent attention: the shared rotary key's width
    # one entry per layer, "sliding" or "full" (chapter 15): only the sliding layers keep to the window; None: the
    # window, if any, holds in every layer; "linear" (chapter 16): a linear-attention layer of sizes ``linear``
    layer_types: tuple[str, ...] | None = None
    linear: LinearAttentionSizes | None = None  # the linear-attention layers' sizes (hybrids, chapter 16)

    @property
    def cache_numbers_per_token(self) -> int:
        """Numbers one token adds to one layer's cache: ``2·G·Dh``, or ``r + dr`` for latent attention."""
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ValueError(f"latent attention needs both kv_lora_rank and qk_rope_head_dim, got "
                             f"kv_lora_rank={self.kv_lora_rank!r}, qk_rope_head_dim={self.qk_rope_head_dim!r}")
        if self.kv_lora_rank is not None:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_cache_bytes(self, tokens: int, *, bytes_per_element: int = 2, batch_size: int = 1) -> int:
        """``kv_cache_bytes`` with this model's sizes (float16/bfloat16 by default: 2 bytes per number); a hybrid's
        linear-attention layers count their fixed state."""
        if self.kv_lora_rank is not None or self.qk_rope_head_dim is not None:
            return kv_cache_bytes(self.n_layers, tokens=tokens, kv_lora_rank=self.kv_lora_rank,
                                  qk_rope_head_dim=self.qk_rope_head_dim, bytes_per_element=bytes_per_element,
                                  batch_size=batch_size, window=self.window, layer_types=self.layer_types,
                                  linear=self.linear)
        return kv_cache_bytes(self.n_layers, self.num_kv_heads, self.head_dim, tokens,
                              bytes_per_element=bytes_per_element, batch_size=batch_size, window=self.window,
                              layer_types=self.layer_types, linear=self.linear)


#: Published configurations (their config.json / papers): the 2017 layout (G = H), GQA, GQA with a window, MLA.
DECODER_CONFIGS = {
    "gpt2-small": DecoderAttention(n_layers=12, num_heads=12, num_kv_heads=12, head_dim=64, d_model=768,
                                   context_length=1024),
    "llama-2-7b": DecoderAttention(n_layers=32, num_heads=32, num_kv_heads=32, head_dim=128, d_model=4096,
                                   context_length=4096),
    "llama-3-8b": DecoderAttention(n_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, d_model=4096,
                                   context_length=8192),
    # Mistral-7B v0.1, the one with a window (v0.2 and v0.3 set sliding_window: null)
    "mistral-7b": DecoderAttention(n_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, d_model=4096,
                                   context_length=32768, window=4096),
    # DeepSeek-V3's config.json: 128 heads of 128 + 64 (qk_nope + qk_rope) for queries and keys, 128 for values
    "deepseek-v3": DecoderAttention(n_layers=61, num_heads=128, num_kv_heads=128, head_dim=192, d_model=7168,
                                    context_length=163840, kv_lora_rank=512, qk_rope_head_dim=64),
}


def interleaved_layer_types(n_layers: int, full_every: int) -> tuple[str, ...]:
    """``("sliding", ..., "full", ...)``: layer ``i`` is full when ``(i + 1) % full_every == 0``, sliding otherwise.

    The rule of transformers' configs when ``layer_types`` is not given: Gemma 3 ``full_every=6`` (5 sliding : 1 full),
    OLMo 3 ``4`` (3 : 1), gpt-oss and Gemma 2 ``2`` (1 : 1, layer 0 sliding). ``full_every=1``: every layer full.
    """
    n_layers = check_positive_int("n_layers", n_layers)
    full_every = check_positive_int("full_every", full_every)
    return tuple("full" if (i + 1) % full_every == 0 else "sliding" for i in range(n_layers))


#: Published decoders whose layers mix a sliding window and full attention (their config.json): every layer's kind
#: in ``layer_types``, the sliding layers' window in ``window``. Kept apart from ``DECODER_CONFIGS``, whose layers
#: all share one rule (chapters 12-14).
MIXED_WINDOW_CONFIGS = {
    # Gemma 3 27B: 62 layers, 5 local (1,024-token window) : 1 global; 32 query heads of 128, 16 kv heads
    "gemma-3-27b": DecoderAttention(n_layers=62, num_heads=32, num_kv_heads=16, head_dim=128, d_model=5376,
                                    context_length=131072, window=1024,
                                    layer_types=interleaved_layer_types(62, 6)),
    # gpt-oss-120b: 36 layers alternating a 128-token window and full attention; 64 query heads of 64, 8 kv heads
    "gpt-oss-120b": DecoderAttention(n_layers=36, num_heads=64, num_kv_heads=8, head_dim=64, d_model=2880,
                                     context_length=131072, window=128, layer_types=interleaved_layer_types(36, 2)),
    "gpt-oss-20b": DecoderAttention(n_layers=24, num_heads=64, num_kv_heads=8, head_dim=64, d_model=2880,
                                    context_length=131072, window=128, layer_types=interleaved_layer_types(24, 2)),
    # OLMo 3 7B: 32 layers, 3 sliding (4,096-token window) : 1 full; 32 heads of 128, no key/value sharing
    "olmo-3-7b": DecoderAttention(n_layers=32, num_heads=32, num_kv_heads=32, head_dim=128, d_model=4096,
                                  context_length=65536, window=4096, layer_types=interleaved_layer_types(32, 4)),
}


#: Published hybrids (chapter 16): linear-attention layers with a fixed state beside full-attention layers with a KV
#: cache. Kept apart from the tables above, which chapters 12-15 print whole.
HYBRID_CONFIGS = {
    # Qwen3-Next-80B-A3B (transformers' Qwen3NextConfig() defaults): 48 layers, 3 Gated DeltaNet : 1 gated full
    # attention (16 query heads of 256, 2 kv heads); the linear layers: 16 key heads and 32 value heads of 128, conv 4
    "qwen3-next-80b-a3b": DecoderAttention(
        n_layers=48, num_heads=16, num_kv_heads=2, head_dim=256, d_model=2048, context_length=32768,
        layer_types=("linear", "linear", "linear", "full") * 12,
        linear=LinearAttentionSizes(num_key_heads=16, num_value_heads=32, key_head_dim=128, value_head_dim=128,
                                    conv_size=4)),
}


class SparseDecoderAttention(NamedTuple):
    """A decoder with DeepSeek-V3.2's sparse attention (chapter 17): latent attention of sizes ``attention`` and a
    lightning indexer of ``index_heads`` heads of ``index_head_dim`` di that picks ``index_topk`` k keys per query.
    Each token caches the indexer's key beside the latent: ``r + dr + di`` numbers per layer. A decoding step still
    reads every cached indexer key (di numbers a token) but only k latents (``r + dr`` each)."""

    attention: DecoderAttention
    index_heads: int
    index_head_dim: int
    index_topk: int

    @property
    def cache_numbers_per_token(self) -> int:
        """Numbers one token adds to one layer's cache: ``r + dr + di``."""
        return self.attention.cache_numbers_per_token + self.index_head_dim

    def kv_cache_bytes(self, tokens: int, *, bytes_per_element: int = 2, batch_size: int = 1) -> int:
        """``kv_cache_bytes`` with this model's sizes, the indexer's keys included (2 bytes a number by default)."""
        a = self.attention
        return kv_cache_bytes(a.n_layers, tokens=tokens, kv_lora_rank=a.kv_lora_rank,
                              qk_rope_head_dim=a.qk_rope_head_dim, index_head_dim=self.index_head_dim,
                              bytes_per_element=bytes_per_element, batch_size=batch_size)

    def step_read_bytes(self, tokens: int, *, sparse: bool = True, bytes_per_element: int = 2) -> int:
        """Bytes of cache one decoding step reads over all layers once ``tokens`` tokens are held (its own included):
        ``sparse`` ``L × (tokens·di + min(tokens, k)·(r + dr))``, the indexer's keys and the selected latents;
        ``sparse=False``, dense MLA, ``L × tokens·(r + dr)``."""
        tokens = check_int("tokens", tokens, low=0)
        bytes_per_element = check_positive_int("bytes_per_element", bytes_per_element)
        latent = self.attention.cache_numbers_per_token
        if not check_flag("sparse", sparse):
            return self.attention.n_layers * tokens * latent * bytes_per_element
        per_layer = tokens * self.index_head_dim + min(tokens, self.index_topk) * latent
        return self.attention.n_layers * per_layer * bytes_per_element


#: Published decoders with sparse attention (chapter 17). Kept apart from the tables above, which chapters 12-16
#: print whole.
SPARSE_CONFIGS = {
    # DeepSeek-V3.2 (transformers' DeepseekV32Config() defaults, its config.json): V3's latent attention, 61 layers,
    # and an indexer of 64 heads of 128 that picks 2,048 keys per query
    "deepseek-v3.2": SparseDecoderAttention(
        DecoderAttention(n_layers=61, num_heads=128, num_kv_heads=128, head_dim=192, d_model=7168,
                         context_length=163840, kv_lora_rank=512, qk_rope_head_dim=64),
        index_heads=64, index_head_dim=128, index_topk=2048),
}


def decoder_config(config) -> DecoderAttention:
    """A ``DecoderAttention``: a name in ``DECODER_CONFIGS`` looked up, or the ``DecoderAttention`` itself."""
    if isinstance(config, str):
        if config not in DECODER_CONFIGS:
            raise ValueError(f"config must be one of {list(DECODER_CONFIGS)} or a DecoderAttention, got {config!r}")
        return DECODER_CONFIGS[config]
    if not isinstance(config, DecoderAttention):
        raise TypeError(f"config must be a name in mha_lib.DECODER_CONFIGS or a DecoderAttention, got "
                        f"{type(config).__name__}")
    return config


def kv_cache_bytes(
    n_layers: int,
    num_kv_heads: int | None = None,
    head_dim: int | None = None,
    tokens: int | None = None,
    *,
    kv_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
    bytes_per_element: int = 2,
    batch_size: int = 1,
    window: int | None = None,
    layer_types=None,
    linear: LinearAttentionSizes | None = None,
    index_head_dim: int | None = None,
) -> int:
    """Bytes a decoder's KV cache holds: ``layers × 2 (K and V) × G × Dh × tokens × bytes × batch``.

    ``num_kv_heads`` is G: the key/value heads, not the query heads (GQA divides the cache by H / G). With a
    sliding ``window`` W a step reads ``min(tokens, W)`` tokens per layer: the W − 1 most recent cached ones and the
    current one. The default 2 bytes per number is float16 / bfloat16, the usual inference dtype; float32 is 4.

    Latent attention (MLA, chapter 14): give ``kv_lora_rank`` r and ``qk_rope_head_dim`` dr instead of G and Dh;
    each token then costs ``r + dr`` numbers per layer (the latent and the shared rotary key):
    ``layers × (r + dr) × tokens × bytes × batch``.

    Layers of two kinds (chapter 15): ``layer_types`` names each of the ``n_layers`` layers ``"sliding"`` or
    ``"full"`` (transformers' ``"sliding_attention"`` and ``"full_attention"`` are read too); a sliding layer holds
    ``min(tokens, window)`` tokens, a full one all ``tokens``. Only the full layers grow with the context: Gemma 3's
    5 : 1 pattern caches about a sixth of what 62 full layers would at 128K tokens.

    Hybrids (chapter 16): a ``"linear"`` entry (transformers' ``"linear_attention"``) is a linear-attention layer of
    sizes ``linear`` (a ``LinearAttentionSizes``); it holds its state and its conv's inputs, ``linear.nbytes()``, at
    every length, and the total is what the model keeps per sequence. Qwen3-Next-80B at 32K tokens in bfloat16:
    12 full layers 768 MiB + 36 linear layers 38 MiB, against 3 GiB if all 48 were full attention.
    ``bytes_per_element`` counts the state too (transformers' PyTorch path keeps the state in float32: 4).

    Sparse attention (chapter 17): ``index_head_dim`` di adds the lightning indexer's key, cached per token in every
    attention layer beside the keys (DeepSeek-V3.2: 512 + 64 + 128 = 704 numbers per token and layer, 576 for V3).
    """
    n_layers = check_positive_int("n_layers", n_layers)
    if tokens is None:
        raise TypeError("kv_cache_bytes needs tokens, the number of tokens the cache holds")
    tokens = check_int("tokens", tokens, low=0)
    bytes_per_element = check_positive_int("bytes_per_element", bytes_per_element)
    batch_size = check_positive_int("batch_size", batch_size)
    window = None if window is None else check_positive_int("window", window)
    held = tokens if window is None else min(tokens, window)
    layers_held = n_layers * held  # Σ over the layers of the tokens each holds
    state_bytes = 0  # the linear-attention layers' fixed state
    if linear is not None and not isinstance(linear, LinearAttentionSizes):
        raise TypeError(f"linear must be a LinearAttentionSizes (the linear-attention layers' heads, widths and conv) "
                        f"or None, got {type(linear).__name__}")
    if layer_types is not None:
        kinds = check_layer_types(layer_types, n_layers, "n_layers", linear=True)
        if "sliding" in kinds and window is None:
            raise ValueError(f"layer_types has {kinds.count('sliding')} sliding layers but window is None: give the "
                             f"sliding layers' window (config.json's sliding_window)")
        if "linear" in kinds:
            if linear is None:
                raise ValueError(f"layer_types has {kinds.count('linear')} linear-attention layers but linear is "
                                 f"None: give their sizes, linear=LinearAttentionSizes(num_key_heads, "
                                 f"num_value_heads, key_head_dim, value_head_dim, conv_size)")
            state_bytes = kinds.count("linear") * linear.nbytes(bytes_per_element=bytes_per_element,
                                                                batch_size=batch_size)
        layers_held = sum({"full": tokens, "sliding": held, "linear": 0}[kind] for kind in kinds)
    elif linear is not None:
        raise ValueError("linear gives the sizes of linear-attention layers, but layer_types is None: name each "
                         "layer's kind, e.g. ('linear', 'linear', 'linear', 'full') * 12")
    latent = kv_lora_rank is not None or qk_rope_head_dim is not None
    if latent:
        if num_kv_heads is not None or head_dim is not None:
            raise ValueError("give either num_kv_heads and head_dim (keys and values per head) or kv_lora_rank and "
                             "qk_rope_head_dim (latent attention), not both")
        if kv_lora_rank is None or qk_rope_head_dim is None:
            raise ValueError("latent attention needs both kv_lora_rank and qk_rope_head_dim (the latent and the "
                             f"shared rotary key), got kv_lora_rank={kv_lora_rank!r}, "
                             f"qk_rope_head_dim={qk_rope_head_dim!r}")
        per_token = check_positive_int("kv_lora_rank", kv_lora_rank) + check_positive_int(
            "qk_rope_head_dim", qk_rope_head_dim)
    else:
        if num_kv_heads is None or head_dim is None:
            raise TypeError("kv_cache_bytes needs num_kv_heads and head_dim (or, for latent attention, kv_lora_rank "
                            "and qk_rope_head_dim)")
        per_token = 2 * check_positive_int("num_kv_heads", num_kv_heads) * check_positive_int("head_dim", head_dim)
    if index_head_dim is not None:  # the lightning indexer's key, one per token, beside the keys
        per_token += check_positive_int("index_head_dim", index_head_dim)
    return per_token * layers_held * bytes_per_element * batch_size + state_bytes




def latent_attention_parameter_count(
    d_model: int,
    num_heads: int,
    kv_lora_rank: int,
    qk_nope_head_dim: int,
    qk_rope_head_dim: int,
    v_head_dim: int,
    q_lora_rank: int | None = None,
    bias: bool = False,
    *,
    index_heads: int | None = None,
    index_head_dim: int | None = None,
) -> int:
    """Parameters of one multi-head latent attention layer (``mha_lib.MultiHeadLatentAttention``, DeepSeek's).

    queries   ``D × H(dn + dr)``, or through a compressed query: ``D × rq`` + RMSNorm ``rq`` + ``rq × H(dn + dr)``
    kv_down   ``D × (r + dr)``: the latent and the shared rotary key;  RMSNorm ``r``
    kv_up     ``r × H(dn + dv)``: W_uk and W_uv of every head;  out_proj ``H·dv × D``
    ``bias`` adds biases to the down-projections and the output (DeepSeek's ``attention_bias``).
    indexer   (DeepSeek-V3.2, chapter 17: ``index_heads`` Hi and ``index_head_dim`` di) queries ``rq × Hi·di``
              (``D × Hi·di`` without rq), key ``D × di`` + LayerNorm ``2·di``, head weights ``D × Hi``
    """
    d = check_positive_int("d_model", d_model)
    h = check_positive_int("num_heads", num_heads)
    r = check_positive_int("kv_lora_rank", kv_lora_rank)
    dn = check_positive_int("qk_nope_head_dim", qk_nope_head_dim)
    dr = check_positive_int("qk_rope_head_dim", qk_rope_head_dim)
    dv = check_positive_int("v_head_dim", v_head_dim)
    bias = check_flag("bias", bias)
    q_width = h * (dn + dr)
    if q_lora_rank is None:
        queries = d * q_width
    else:
        rq = check_positive_int("q_lora_rank", q_lora_rank)
        queries = d * rq + rq * bias + rq + rq * q_width  # q_down (+ bias), its RMSNorm, q_up
    keys_values = d * (r + dr) + (r + dr) * bias + r + r * h * (dn + dv)  # kv_down (+ bias), RMSNorm, kv_up
    output = h * dv * d + d * bias
    indexer = 0
    if (index_heads is None) != (index_head_dim is None):
        raise ValueError(f"the indexer needs both index_heads and index_head_dim, got index_heads={index_heads!r}, "
                         f"index_head_dim={index_head_dim!r}")
    if index_heads is not None:
        hi, di = check_positive_int("index_heads", index_heads), check_positive_int("index_head_dim", index_head_dim)
        indexer = (d if q_lora_rank is None else q_lora_rank) * hi * di + d * di + 2 * di + d * hi
    return queries + keys_values + output + indexer


__all__ = [
    "DECODER_CONFIGS", "DecoderAttention", "GPTConfig", "GPT_CONFIGS", "HYBRID_CONFIGS", "LinearAttentionSizes",
    "MIXED_WINDOW_CONFIGS", "SPARSE_CONFIGS", "SparseDecoderAttention",
    "attention_parameter_count", "decoder_config", "gpt_parameter_count", "interleaved_layer_types", "kv_cache_bytes",
    "latent_attention_parameter_count",
]
