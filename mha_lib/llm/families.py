"""Tiny attention layers of 2024-26's decoder families from transformers, built offline with random weights, and
called the way each model calls them (chapter 15).

    module, config = tiny_attention("gpt_oss", layer="sliding", seed=3)   # GptOssAttention, random weights
    layer = mha_lib.attention_from_transformers(module, config)          # our MultiHeadAttention, the same weights
    out, weights = reference_forward(module, config, x)                  # the family's eager output, positions 0..T-1

Each family's module is built from its own config class with a small size, every parameter set from a seed (a norm's
weight away from its starting value, gpt-oss's sinks, which ``torch.empty`` leaves as garbage), and called with its
own rotary embedding and the mask its model builds for that layer (``transformers.masking_utils``): **the window
lives only in the mask**, so a sliding layer called with a plain causal mask would attend to everything. Traps met on
the way are in ``../shared/GUIDE.md`` §11; nothing is downloaded.

    family        module                 what is special                                            layer kinds
    llama         LlamaAttention         (chapter 12's)                                             full
    qwen3         Qwen3Attention         q/k RMSNorm per head before RoPE                           full, sliding
    olmo2         Olmo2Attention         q/k RMSNorm over the whole projections before RoPE         full
    olmo3         Olmo3Attention         the same; every 4th layer full                             full, sliding
    gemma2        Gemma2Attention        scale query_pre_attn_scalar^-1/2, soft-cap before the mask full, sliding
    gemma3        Gemma3Attention        q/k norm x·(1 + w) per head before RoPE; that scale        full, sliding
    gpt_oss       GptOssAttention        one sink logit per head; biases on q, k, v and o           full, sliding
    qwen3_next    Qwen3NextAttention     sigmoid output gate; (1 + w) norms; partial RoPE (0.25)    full
    llama4        Llama4TextAttention    weightless RMS norm after RoPE; NoPE layers                rope, nope
    deepseek_v3   DeepseekV3Attention    latent attention (chapter 14)                              full

Imported on use (``import mha_lib`` never loads transformers).
"""

from __future__ import annotations

import importlib

import torch

from ..validation import check_flag, check_positive_int, check_seed, check_tensor

Tensor = torch.Tensor

#: family -> (transformers module, config class, attention class, rotary class)
FAMILIES = {
    "llama": ("llama", "LlamaConfig", "LlamaAttention", "LlamaRotaryEmbedding"),
    "qwen3": ("qwen3", "Qwen3Config", "Qwen3Attention", "Qwen3RotaryEmbedding"),
    "olmo2": ("olmo2", "Olmo2Config", "Olmo2Attention", "Olmo2RotaryEmbedding"),
    "olmo3": ("olmo3", "Olmo3Config", "Olmo3Attention", "Olmo3RotaryEmbedding"),
    "gemma2": ("gemma2", "Gemma2Config", "Gemma2Attention", "Gemma2RotaryEmbedding"),
    "gemma3": ("gemma3", "Gemma3TextConfig", "Gemma3Attention", "Gemma3RotaryEmbedding"),
    "gpt_oss": ("gpt_oss", "GptOssConfig", "GptOssAttention", "GptOssRotaryEmbedding"),
    "qwen3_next": ("qwen3_next", "Qwen3NextConfig", "Qwen3NextAttention", "Qwen3NextRotaryEmbedding"),
    "llama4": ("llama4", "Llama4TextConfig", "Llama4TextAttention", "Llama4TextRotaryEmbedding"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3Config", "DeepseekV3Attention", "DeepseekV3RotaryEmbedding"),
}

#: the layer kinds each family has (``tiny_attention``'s ``layer``)
LAYER_KINDS = {
    "llama": ("full",), "qwen3": ("full", "sliding"), "olmo2": ("full",), "olmo3": ("full", "sliding"),
    "gemma2": ("full", "sliding"), "gemma3": ("full", "sliding"), "gpt_oss": ("full", "sliding"),
    "qwen3_next": ("full",), "llama4": ("rope", "nope"), "deepseek_v3": ("full",),
}

# the families whose configs keep one rotary setting per layer kind, and call their rotary with it
_ROPE_PER_LAYER_TYPE = ("olmo3", "gemma3")


def _classes(family: str):
    if not isinstance(family, str) or family not in FAMILIES:
        raise ValueError(f"family must be one of {list(FAMILIES)}, got {family!r}")
    package, config_name, attention_name, rotary_name = FAMILIES[family]
    module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    config_class = getattr(importlib.import_module("transformers"), config_name)
    return config_class, getattr(module, attention_name), getattr(module, rotary_name)


def tiny_attention(
    family: str,
    *,
    layer: str = "full",
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 8,
    hidden_size: int | None = None,
    window: int = 4,
    partial_rotary_factor: float | None = None,
    attention_bias: bool = False,
    rope_theta: float = 10000.0,
    max_positions: int = 64,
    seed: int = 0,
):
    """``(attention module, config)`` of ``family`` (a key of ``FAMILIES``) with random weights, eval mode, eager.

    ``layer`` is one of the family's ``LAYER_KINDS``: ``"sliding"`` builds a two-layer config whose layer 1 slides
    with ``window`` (the layer returned is that one); ``"rope"`` / ``"nope"`` pick a Llama 4 layer with or without
    RoPE. ``hidden_size`` defaults to ``num_heads · head_dim`` (some configs insist on divisibility by the heads).
    ``partial_rotary_factor`` (Qwen3-Next; default 0.25 there) is the share of each head that rotates.
    """
    config_class, attention_class, _ = _classes(family)
    if layer not in LAYER_KINDS[family]:
        raise ValueError(f"layer must be one of {list(LAYER_KINDS[family])} for {family}, got {layer!r}")
    H, G, Dh = (check_positive_int(n, v) for n, v in
                (("num_heads", num_heads), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)))
    hidden = H * Dh if hidden_size is None else check_positive_int("hidden_size", hidden_size)
    window = check_positive_int("window", window)
    attention_bias = check_flag("attention_bias", attention_bias)
    rope = {"rope_type": "default", "rope_theta": float(rope_theta)}
    sizes = dict(hidden_size=hidden, num_attention_heads=H, num_key_value_heads=G, head_dim=Dh,
                 max_position_embeddings=check_positive_int("max_positions", max_positions), num_hidden_layers=2,
                 attention_bias=attention_bias)
    kinds = ["full_attention", "sliding_attention" if layer == "sliding" else "full_attention"]
    index = 1  # the layer returned: layer 1 of two
    if family == "qwen3":
        sizes.update(use_sliding_window=layer == "sliding", sliding_window=window, max_window_layers=1,
                     rope_parameters=rope)
    elif family in ("olmo3", "gemma2", "gemma3", "gpt_oss"):
        sizes.update(sliding_window=window, layer_types=kinds)
        if family in _ROPE_PER_LAYER_TYPE:
            local = {"rope_type": "default", "rope_theta": float(rope_theta) / 10}  # the local layers' own speeds
            sizes["rope_parameters"] = {"full_attention": dict(rope), "sliding_attention": local}
        else:
            sizes["rope_parameters"] = rope
        if family in ("gemma2", "gemma3"):
            sizes.update(query_pre_attn_scalar=Dh + 3)  # anything but Dh: a wrong scale would show
        if family == "gemma2":
            sizes.update(attn_logit_softcapping=5.0)  # small, so that the cap bites on these scores
    elif family == "qwen3_next":
        rope["partial_rotary_factor"] = 0.25 if partial_rotary_factor is None else float(partial_rotary_factor)
        sizes.update(rope_parameters=rope, layer_types=["linear_attention", "full_attention"])
    elif family == "llama4":
        sizes.update(rope_parameters=rope, no_rope_layers=[1, int(layer == "rope")], use_qk_norm=True,
                     attention_chunk_size=max_positions, floor_scale=max_positions + 1)
    elif family == "deepseek_v3":
        sizes = dict(hidden_size=hidden, num_attention_heads=H, num_key_value_heads=H, q_lora_rank=None,
                     kv_lora_rank=16, qk_rope_head_dim=Dh, qk_nope_head_dim=Dh + 4, v_head_dim=Dh + 2,
                     max_position_embeddings=max_positions, rope_parameters=rope, num_hidden_layers=2)
    else:
        sizes["rope_parameters"] = rope
    config = config_class(**sizes)
    if family == "olmo3":
        config.head_dim = Dh  # OLMo 3's config has no head_dim field: an extra attribute is read by its layer
    config._attn_implementation = "eager"  # the plain softmax path: it also returns the weights
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_seed("seed", seed))
        module = attention_class(config, layer_idx=index)
        _randomise(module)
    return module.eval(), config


@torch.no_grad()
def _randomise(module) -> None:
    """Every parameter away from its starting value: the Linears keep their random init; norms, sinks are drawn."""
    for name, p in module.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if name == "sinks":
            p.normal_(0.0, 1.0)
        elif "norm" in name and leaf == "weight":
            if float(p.abs().max()) == 0:  # the (1 + w) kind starts at 0: w around 0
                p.uniform_(-0.5, 0.5)
            else:  # the plain kind starts at 1
                p.uniform_(0.5, 1.5)


def layer_kind(module, config) -> str:
    """``"full"``, ``"sliding"``, ``"rope"`` or ``"nope"``: what this module's layer is in its config."""
    if type(module).__name__ == "Llama4TextAttention":
        return "rope" if config.no_rope_layers[module.layer_idx] else "nope"
    types = getattr(config, "layer_types", None)
    kind = types[module.layer_idx] if types else "full_attention"
    return "sliding" if kind == "sliding_attention" else "full"


@torch.no_grad()
def reference_forward(module, config, x: Tensor, *, family: str | None = None) -> tuple[Tensor, Tensor]:
    """The family's eager attention on ``x`` ``(B, T, hidden_size)`` at positions ``0..T-1``, with its own rotary
    embedding and the mask its model builds for this layer (causal, sliding or chunked). Returns the output
    ``(B, T, hidden_size)`` and the weights ``(B, H, T, T)``."""
    from transformers.masking_utils import create_causal_mask, create_chunked_causal_mask, \
        create_sliding_window_causal_mask

    family = family or family_of(module)
    check_tensor("x", x, ndim=3, layout="(B, T, hidden_size)")
    _, _, rotary_class = _classes(family)
    B, T, _ = x.shape
    positions = torch.arange(T, device=x.device)[None].expand(B, -1)  # (B, T)
    rotary = rotary_class(config).to(x.device)
    kind = layer_kind(module, config)
    if family in _ROPE_PER_LAYER_TYPE:
        cos_sin = rotary(x, positions, "sliding_attention" if kind == "sliding" else "full_attention")
    else:
        cos_sin = rotary(x, positions)
    make_mask = {"sliding": create_sliding_window_causal_mask, "rope": create_chunked_causal_mask}.get(
        kind, create_causal_mask)
    if family == "llama4" and not getattr(config, "attention_chunk_size", None):
        make_mask = create_causal_mask
    mask = make_mask(config=config, inputs_embeds=x, attention_mask=None, past_key_values=None)
    return module(x, position_embeddings=cos_sin, attention_mask=mask)[:2]


def family_of(module) -> str:
    """The key of ``FAMILIES`` whose attention class ``module`` is."""
    name = type(module).__name__
    for family, (_, _, attention_name, _) in FAMILIES.items():
        if attention_name == name:
            return family
    raise TypeError(f"module must be one of the attention classes of FAMILIES, got {name}")


def max_differences(layer, module, config, x: Tensor) -> tuple[float, float, float]:
    """``(max |output difference|, max |output| of transformers, max |weights difference|)`` of our ``layer`` against
    the family's ``module`` on ``x``: what chapter 15 prints to prove each reader right."""
    check_tensor("x", x, ndim=3, layout="(B, T, hidden_size)")
    expected, expected_weights = reference_forward(module, config, x)
    with torch.no_grad():
        out, weights = layer(x, return_weights=True)
    return (float((out - expected).abs().max()), float(expected.abs().max()),
            float((weights - expected_weights).abs().max()))


__all__ = ["FAMILIES", "LAYER_KINDS", "family_of", "layer_kind", "max_differences", "reference_forward",
           "tiny_attention"]
