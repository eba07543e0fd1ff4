"""Move weights between the layers, to prove that they compute the same function.

A ``Linear(d_in, d_out)`` stores its weight as ``(d_out, d_in)``: one *row* per output feature. Stacking the
rows of H one-head projections therefore gives one wide projection whose output, cut into H slices of width Dh,
is exactly the H heads' outputs. That is the whole idea behind "weight splitting".

Every converter returns a module in the source's mode (``.training``), on its device and in its dtype.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from .compressed import CompressedAttention
from .latent import MultiHeadLatentAttention
from .linear import GatedDeltaNet
from .modules import FusedMultiHeadAttention, MultiHeadAttention, MultiHeadAttentionWrapper
from .positions import YaRN, interleaved_order


def _same_mode(new: nn.Module, source: nn.Module) -> nn.Module:
    """The new module is in the source's mode: converting a model in eval mode must not switch dropout on.

    The new module and all its submodules take the source's ``training``; a submodule that both have under the
    same name (``out_proj``) then takes the mode of the source's own, should the two differ.
    """
    new.train(source.training)
    sources = dict(source.named_modules())
    for name, module in new.named_modules():
        if name and name in sources:
            module.training = sources[name].training
    return new


def _copy_(target: torch.Tensor, source: torch.Tensor) -> None:
    with torch.no_grad():
        target.copy_(source)


def _check_plain(converter: str, mha: MultiHeadAttention) -> None:
    """The 2017 layer only: the target has no shared kv heads, rotary positions, window, free head width, nor any of
    chapter 15's controls."""
    extras = {
        "num_kv_heads": mha.num_kv_heads if mha.num_kv_heads != mha.num_heads else None,
        "rope_theta": mha.rope_theta, "window": mha.window,
        "head_dim": mha.head_dim if mha.num_heads * mha.head_dim != mha.d_out else None,
        "out_bias": False if mha.out_proj.bias is None else None,
        # chapter 15's controls
        "qk_norm": mha.qk_norm, "scale": mha.scale, "softcap": mha.softcap, "sinks": True if mha.sinks is not None
        else None, "gate": mha.gate, "rope_fraction": mha.rope_fraction if mha.rope_fraction != 1.0 else None,
        "yarn": mha.yarn,
    }
    used = {name: value for name, value in extras.items() if value is not None}
    if used:
        raise ValueError(f"{converter} converts the 2017 layer, but mha was built with "
                         + ", ".join(f"{k}={v!r}" for k, v in used.items())
                         + ": the target layer has no such option and would compute something else")


def split_from_wrapper(wrapper: MultiHeadAttentionWrapper) -> MultiHeadAttention:
    """A ``MultiHeadAttention`` computing what ``wrapper`` computes.

    Head ``h``'s ``W_query`` rows become rows ``h·Dh … (h+1)·Dh`` of the new ``W_query`` (same for K and V).
    The wrapper has no output projection, so ``out_proj`` is set to the identity with zero bias.
    """
    if not isinstance(wrapper, MultiHeadAttentionWrapper):
        raise TypeError(f"wrapper must be a MultiHeadAttentionWrapper, got {type(wrapper).__name__}")
    first = wrapper.heads[0]
    H, Dh = wrapper.num_heads, first.d_out
    weight = first.W_query.weight
    mha = MultiHeadAttention(
        first.d_in, H * Dh, first.context_length, first.dropout_p, H, qkv_bias=first.W_query.bias is not None
    ).to(device=weight.device, dtype=weight.dtype)
    for name in ("W_query", "W_key", "W_value"):
        target = getattr(mha, name)
        _copy_(target.weight, torch.cat([getattr(h, name).weight for h in wrapper.heads]))  # H × (Dh, d_in)
        if target.bias is not None:
            _copy_(target.bias, torch.cat([getattr(h, name).bias for h in wrapper.heads]))  # H × (Dh,)
    _copy_(mha.out_proj.weight, torch.eye(H * Dh))
    _copy_(mha.out_proj.bias, torch.zeros(H * Dh))
    return _same_mode(mha, wrapper)


def fused_from_split(mha: MultiHeadAttention) -> FusedMultiHeadAttention:
    """A ``FusedMultiHeadAttention`` with ``W_qkv`` = the rows of ``W_query``, ``W_key``, ``W_value`` stacked."""
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    if mha.d_kv_in != mha.d_in:
        raise ValueError(f"a fused layer needs d_kv_in == d_in (one input feeds Q, K and V), got {mha.d_kv_in}")
    _check_plain("fused_from_split", mha)
    weight = mha.W_query.weight
    fused = FusedMultiHeadAttention(
        mha.d_in, mha.d_out, mha.context_length, mha.dropout_p, mha.num_heads,
        qkv_bias=mha.W_query.bias is not None, kernel=mha.kernel, causal=mha.causal,
    ).to(device=weight.device, dtype=weight.dtype)
    projections = (mha.W_query, mha.W_key, mha.W_value)
    _copy_(fused.W_qkv.weight, torch.cat([p.weight for p in projections]))  # 3 × (D, d_in) -> (3·D, d_in)
    if fused.W_qkv.bias is not None:
        _copy_(fused.W_qkv.bias, torch.cat([p.bias for p in projections]))  # 3 × (D,) -> (3·D,)
    fused.out_proj.load_state_dict(mha.out_proj.state_dict())
    return _same_mode(fused, mha)


def torch_mha_from(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """PyTorch's ``nn.MultiheadAttention`` (``batch_first=True``) holding ``mha``'s weights.

    PyTorch's layer needs ``d_in == d_out`` (its ``embed_dim``). It has no causal flag: pass
    ``attn_mask=mha_lib.invert_mask(mha_lib.causal_mask(T))`` yourself (its boolean masks mean *blocked*).
    """
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    if mha.d_in != mha.d_out:
        raise ValueError(f"nn.MultiheadAttention needs d_in == d_out (embed_dim), got {mha.d_in} and {mha.d_out}")
    _check_plain("torch_mha_from", mha)
    weight = mha.W_query.weight
    ref = nn.MultiheadAttention(
        mha.d_out, mha.num_heads, dropout=mha.dropout_p, bias=True, batch_first=True,
        kdim=mha.d_kv_in, vdim=mha.d_kv_in,
    ).to(device=weight.device, dtype=weight.dtype)
    projections = (mha.W_query, mha.W_key, mha.W_value)
    if ref._qkv_same_embed_dim:
        _copy_(ref.in_proj_weight, torch.cat([p.weight for p in projections]))  # 3 × (D, D) -> (3·D, D)
    else:
        for name, p in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), projections):
            _copy_(getattr(ref, name), p.weight)
    biases = [p.bias if p.bias is not None else torch.zeros_like(weight[:, 0]) for p in projections]
    _copy_(ref.in_proj_bias, torch.cat(biases))  # 3 × (D,) -> (3·D,)
    _copy_(ref.out_proj.weight, mha.out_proj.weight)
    _copy_(ref.out_proj.bias, mha.out_proj.bias)
    return _same_mode(ref, mha)


def attention_from_llama(llama_attention: nn.Module, config) -> MultiHeadAttention:
    """A ``MultiHeadAttention`` with the weights of transformers' ``LlamaAttention`` (chapter 12).

    ``q_proj, k_proj, v_proj, o_proj`` become ``W_query, W_key, W_value, out_proj``; ``num_key_value_heads`` becomes
    ``num_kv_heads``, the rope theta ``rope_theta``, ``head_dim`` is kept even when ``H · head_dim`` differs from
    ``hidden_size``. On positions ``0..T-1`` the layer's causal forward equals Llama's eager attention given the
    same positions and a causal mask. Only Llama's default RoPE is supported (no llama3/yarn/linear scaling).
    Nothing of transformers is imported here: the function reads attributes.
    """
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        if not isinstance(getattr(llama_attention, name, None), nn.Linear):
            raise TypeError(f"llama_attention must be a transformers LlamaAttention (with q_proj, k_proj, v_proj, "
                            f"o_proj), got {type(llama_attention).__name__} without {name}")
    for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "max_position_embeddings"):
        if not hasattr(config, name):
            raise TypeError(f"config must be a transformers LlamaConfig, got {type(config).__name__} without {name}")
    rope = _rope_parameters(config)
    rope_type = rope.get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(f"attention_from_llama supports Llama's default RoPE only, got rope_type={rope_type!r}")
    theta = rope.get("rope_theta", getattr(config, "rope_theta", None))  # transformers 5 / 4
    if theta is None:  # without it the layer would have no positions at all: Llama's attention rotates q and k
        raise TypeError(f"config must be a transformers LlamaConfig, got {type(config).__name__} without rope_theta "
                        f"(nor rope_parameters['rope_theta']): Llama rotates q and k by RoPE, and rope_theta sets "
                        f"its frequencies")
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    q = llama_attention.q_proj
    layer = MultiHeadAttention(
        config.hidden_size, config.hidden_size, config.max_position_embeddings,
        float(getattr(config, "attention_dropout", 0.0)), heads, qkv_bias=q.bias is not None,
        num_kv_heads=config.num_key_value_heads, head_dim=head_dim, rope_theta=theta,
        out_bias=llama_attention.o_proj.bias is not None,
    ).to(device=q.weight.device, dtype=q.weight.dtype)
    pairs = (("W_query", "q_proj"), ("W_key", "k_proj"), ("W_value", "v_proj"), ("out_proj", "o_proj"))
    for ours, theirs in pairs:
        source, target = getattr(llama_attention, theirs), getattr(layer, ours)
        if source.weight.shape != target.weight.shape:
            raise ValueError(f"llama_attention.{theirs}.weight has shape {tuple(source.weight.shape)} but config "
                             f"implies {tuple(target.weight.shape)}: pass the config the layer was built from")
        target.load_state_dict(source.state_dict())
    return _same_mode(layer, llama_attention)


def attention_from_deepseek(deepseek_v3_attention: nn.Module, config) -> MultiHeadLatentAttention:
    """A ``MultiHeadLatentAttention`` with the weights of transformers' ``DeepseekV3Attention`` (chapter 14).

    ``q_proj`` or ``q_a_proj, q_a_layernorm, q_b_proj`` become ``W_query`` or ``q_down, q_norm, q_up``;
    ``kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj`` become ``kv_down, kv_norm, kv_up, out_proj``. The rope
    settings come from ``config.rope_parameters`` (``"default"`` or ``"yarn"``, whose ``mscale`` and
    ``mscale_all_dim`` set the gains). With ``rope_interleave=True`` DeepSeek rotates neighbouring pairs
    ``(x[2i], x[2i+1])``: the rows of the rotary outputs are reordered here (``interleaved_order``), so that our
    rotate-half RoPE turns the same pairs; scores are unchanged (chapter 13: a layout is a permutation).
    On positions ``0..T-1`` the layer's causal forward equals DeepSeek's eager attention given the same positions
    and an additive causal mask. Nothing of transformers is imported here: the function reads attributes.
    """
    return _latent_from(deepseek_v3_attention, config, "deepseek_v3_attention", "DeepseekV3",
                        interleave=bool(getattr(config, "rope_interleave", False)))


def _from_deepseek_v32(module: nn.Module, config) -> MultiHeadLatentAttention:
    """DeepSeek-V3.2's ``DeepseekV32Attention``: V3's latent attention plus the lightning indexer (chapter 17), as a
    ``MultiHeadLatentAttention(index_topk=config.index_topk, index_heads=config.index_n_heads,
    index_head_dim=config.index_head_dim)``. The indexer's ``wq_b, wk, k_norm, weights_proj`` become
    ``indexer.W_query, W_key, key_norm, W_head_weights``. V3.2's config has no ``rope_interleave``: its latent
    attention always rotates neighbouring pairs (reordered here as for V3), its indexer the two halves of its first
    ``qk_rope_head_dim`` dimensions (our layout already)."""
    indexer = getattr(module, "indexer", None)
    for name in ("wq_b", "wk", "k_norm", "weights_proj"):
        if getattr(indexer, name, None) is None:
            raise TypeError(f"the DeepSeek-V3.2 reader reads DeepseekV32Attention's indexer (wq_b, wk, k_norm, "
                            f"weights_proj), got {type(module).__name__} without indexer.{name}")
    _check_config_has(config, ("index_topk", "index_n_heads", "index_head_dim"),
                      "the DeepseekV32Config the module was built from")
    layer = _latent_from(module, config, "deepseek_v32_attention", "DeepseekV32", interleave=True,
                         index=(config.index_topk, config.index_n_heads, config.index_head_dim))
    ours = layer.indexer
    for target, source in ((ours.W_query, indexer.wq_b), (ours.W_key, indexer.wk),
                           (ours.W_head_weights, indexer.weights_proj)):
        _load(target, source.weight, None, "indexer")
    for name in ("weight", "bias"):
        if getattr(indexer.k_norm, name).shape != getattr(ours.key_norm, name).shape:
            raise ValueError(f"indexer.k_norm.{name} has shape {tuple(getattr(indexer.k_norm, name).shape)}, expected "
                             f"{tuple(getattr(ours.key_norm, name).shape)}: pass the config the module was built from")
        _copy_(getattr(ours.key_norm, name), getattr(indexer.k_norm, name))
    ours.key_norm.eps = float(indexer.k_norm.eps)
    return layer


def _latent_from(ref: nn.Module, config, argument: str, family: str, *, interleave: bool,
                 index: tuple[int, int, int] | None = None) -> MultiHeadLatentAttention:
    """What the DeepSeek readers share: sizes and rope from ``config``, the latent attention's weights copied, the
    rotary rows reordered when DeepSeek ``interleave``s; ``index`` ``(topk, heads, head_dim)`` adds the indexer."""
    for name in ("kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"):
        if getattr(ref, name, None) is None:
            raise TypeError(f"{argument} must be a transformers {family}Attention (with "
                            f"kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), got {type(ref).__name__} "
                            f"without {name}")
    _check_config_has(config, ("hidden_size", "num_attention_heads", "kv_lora_rank", "qk_nope_head_dim",
                               "qk_rope_head_dim", "v_head_dim", "max_position_embeddings"),
                      f"a transformers {family}Config")
    rope = _rope_parameters(config)
    rope_type = rope.get("rope_type", "default")
    if rope_type not in ("default", "yarn"):
        raise ValueError(f"attention_from_deepseek supports rope_type 'default' and 'yarn', got {rope_type!r}")
    yarn = _yarn_from(rope, config) if rope_type == "yarn" else None
    q_lora_rank = getattr(config, "q_lora_rank", None)
    kv_down = ref.kv_a_proj_with_mqa
    topk, heads, head_dim = index or (None, None, None)
    layer = MultiHeadLatentAttention(
        config.hidden_size, config.num_attention_heads, kv_lora_rank=config.kv_lora_rank,
        qk_nope_head_dim=config.qk_nope_head_dim, qk_rope_head_dim=config.qk_rope_head_dim,
        v_head_dim=config.v_head_dim, q_lora_rank=q_lora_rank, context_length=config.max_position_embeddings,
        rope_theta=float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))), yarn=yarn,
        bias=kv_down.bias is not None, norm_eps=float(ref.kv_a_layernorm.variance_epsilon),  # 1e-6, not rms_norm_eps
        dropout=float(getattr(config, "attention_dropout", 0.0)),
        index_topk=topk, index_heads=heads, index_head_dim=head_dim,
    ).to(device=kv_down.weight.device, dtype=kv_down.weight.dtype)
    if q_lora_rank is None:
        pairs = [("W_query", ref.q_proj)]
    else:
        pairs = [("q_down", ref.q_a_proj), ("q_norm", ref.q_a_layernorm), ("q_up", ref.q_b_proj)]
        layer.q_norm.eps = float(ref.q_a_layernorm.variance_epsilon)
    pairs += [("kv_down", kv_down), ("kv_norm", ref.kv_a_layernorm), ("kv_up", ref.kv_b_proj), ("out_proj", ref.o_proj)]
    for ours, source in pairs:
        target = getattr(layer, ours)
        for name, tensor in target.named_parameters():
            theirs = getattr(source, name, None)
            if theirs is None or theirs.shape != tensor.shape:
                raise ValueError(f"{argument}'s {ours} counterpart has no {name} of shape "
                                 f"{tuple(tensor.shape)}: pass the config the layer was built from")
            _copy_(tensor, theirs)
    if interleave:
        _deinterleave_rotary_rows(layer)
    return _same_mode(layer, ref)


def _yarn_from(rope: dict, config) -> YaRN:
    """A ``YaRN`` from a config's ``rope_type="yarn"`` settings, read as transformers' ``_compute_yarn_parameters``
    reads them (a missing factor is ``max_position_embeddings / original``)."""
    original = rope.get("original_max_position_embeddings")
    if original is None:
        raise ValueError("config.rope_parameters has rope_type 'yarn' but no original_max_position_embeddings "
                         "(the context length the model was trained with before YaRN stretched it): pass the "
                         "config the layer was built from (transformers' DeepseekV3Config sets it to "
                         "max_position_embeddings when it is not given)")
    if isinstance(original, bool) or not isinstance(original, (int, float)) or not original >= 1 \
            or original != int(original):
        raise ValueError(f"config.rope_parameters['original_max_position_embeddings'] must be a whole number of "
                         f"positions >= 1, got {original!r}")
    factor = rope.get("factor") or config.max_position_embeddings / original
    return YaRN(factor=float(factor), original_context_length=int(original),
                beta_fast=float(rope.get("beta_fast") or 32), beta_slow=float(rope.get("beta_slow") or 1),
                mscale=float(rope.get("mscale") or 0.0), mscale_all_dim=float(rope.get("mscale_all_dim") or 0.0),
                truncate=bool(rope.get("truncate", True)),
                attention_factor=None if rope.get("attention_factor") is None else float(rope["attention_factor"]))


def _rope_parameters(config) -> dict:
    """``config.rope_parameters`` (transformers 5; ``rope_scaling`` in 4) as a dict, ``{}`` when there is none;
    an older config's ``"type"`` is read as ``"rope_type"``, as transformers does."""
    return _rope_dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})


def _rope_dict(rope) -> dict:
    if not isinstance(rope, Mapping):
        raise TypeError(f"config.rope_parameters must be a dict (rope_type, rope_theta, ...), got "
                        f"{type(rope).__name__}")
    rope = dict(rope)
    if "rope_type" not in rope and "type" in rope:
        rope["rope_type"] = rope["type"]
    return rope


def _deinterleave_rotary_rows(layer: MultiHeadLatentAttention) -> None:
    """Reorder the output rows that feed RoPE from (x0, x1), (x2, x3), ... to (x0, x2, ..., x1, x3, ...)."""
    H, dn, dr, r = layer.num_heads, layer.qk_nope_head_dim, layer.qk_rope_head_dim, layer.kv_lora_rank
    order = interleaved_order(dr)
    q_last = layer.W_query if layer.q_lora_rank is None else layer.q_up
    with torch.no_grad():
        rows = q_last.weight.view(H, dn + dr, -1)  # (H·(dn + dr), in) -> (H, dn + dr, in): a view, written in place
        rows[:, dn:] = rows[:, dn:][:, order]
        kv = layer.kv_down  # rows: r latent, then dr rotary
        kv.weight[r:] = kv.weight[r:][order]
        if kv.bias is not None:
            kv.bias[r:] = kv.bias[r:][order]


# --- from transformers: one entry point, one small reader per family (chapter 15) -------------------------------
#
# transformers keeps one folder per model, each with its own copy of the attention; the layers differ in a handful of
# places, which are exactly MultiHeadAttention's options. A reader names them for its family and copies the weights;
# ``_read_attention`` does the rest. Nothing of transformers is imported: the readers read attributes.


def attention_from_transformers(module: nn.Module, config):
    """Our layer with the weights of a transformers attention ``module`` built from ``config``, computing what it
    computes: a ``MultiHeadAttention`` (a ``MultiHeadLatentAttention`` for DeepSeek-V3 and V3.2, a
    ``CompressedAttention`` for DeepSeek-V4, a ``GatedDeltaNet`` for Qwen3-Next's linear-attention layers).

    Dispatches on the module's class (``TRANSFORMERS_READERS``, one reader per family):

    =====================  =========================================================================================
    LlamaAttention         GQA, RoPE (chapter 12's ``attention_from_llama``)
    Qwen3Attention         + ``qk_norm="head"`` (RMSNorm per head, before RoPE); sliding layers get ``window``
    Olmo2/Olmo3Attention   + ``qk_norm="projection"`` (over the whole q and k projections); OLMo 3's sliding layers
    Gemma2Attention        ``scale=query_pre_attn_scalar**-0.5``, ``softcap=attn_logit_softcapping``; sliding layers
    Gemma3Attention        ``qk_norm="head"`` with weight ``1 + w`` (Gemma's norm is x·(1 + w)), that scale; its
                           stored ``attn_logit_softcapping`` is not applied by Gemma 3, nor here
    GptOssAttention        ``sinks=True`` (the learned logits copied), biases on q, k, v and o; sliding layers; YaRN
    Qwen3NextAttention     ``gate="elementwise"`` (q_proj's rows split per head: query, then gate), ``1 + w`` norms,
                           ``rope_fraction=partial_rotary_factor``
    Llama4TextAttention    RoPE layers: ``qk_norm="l2"`` after RoPE, q and k rows reordered from neighbouring pairs to
                           rotate-half; NoPE layers: ``rope_theta=None``
    DeepseekV3Attention    ``MultiHeadLatentAttention`` (chapter 14's ``attention_from_deepseek``)
    DeepseekV32Attention   ``MultiHeadLatentAttention(index_topk=...)``: V3's latent attention (always interleaved)
                           and the lightning indexer (chapter 17)
    Qwen3NextGatedDeltaNet ``GatedDeltaNet`` (chapter 16): Qwen3-Next's linear-attention layers; ``in_proj_qkvz`` and
                           ``in_proj_ba`` are grouped per key head and are cut into our flat projections
    DeepseekV4Attention    ``CompressedAttention`` (chapter 17, optional): the layer's kind from ``layer_types`` —
                           sliding, CSA (overlapping windows and the indexer) or HCA —, its rate from
                           ``compress_rates``, its rotary from ``rope_parameters["main"]`` or ``["compress"]``
    =====================  =========================================================================================

    The layer's kind is read from ``config.layer_types[module.layer_idx]``: a sliding layer gets
    ``window=config.sliding_window`` (transformers keeps the window in the mask it passes; here it is the layer's).
    Each rotary setting is the layer's own (``rope_parameters`` per layer kind: Gemma 3, OLMo 3); ``rope_type``
    ``"default"`` and ``"yarn"`` are read, others refused. On positions ``0 .. T-1`` the layer's causal forward equals
    the module's eager forward given its rotary embedding and its model's mask for that layer (tested over random
    tiny configs: ``mha_lib.llm.families``). The layer is in the module's mode, on its device, in its dtype.

    An unsupported class is a TypeError naming it and the supported ones.
    """
    reader = _reader_for(module)
    return reader(module, config)


def _reader_for(module):
    for cls in type(module).__mro__:  # a subclass of a supported class is read as that class
        if cls.__name__ in TRANSFORMERS_READERS:
            return TRANSFORMERS_READERS[cls.__name__]
    raise TypeError(
        f"attention_from_transformers has no reader for {type(module).__name__}: it reads "
        f"{', '.join(TRANSFORMERS_READERS)}; another family's attention differs from these in a few places, which "
        f"its modeling_*.py shows, and MultiHeadAttention's options may cover them"
    )


def _check_source(module: nn.Module, config, reader: str, projections=("q_proj", "k_proj", "v_proj", "o_proj")):
    for name in projections:
        if not isinstance(getattr(module, name, None), nn.Linear):
            raise TypeError(f"{reader} reads a transformers attention with {', '.join(projections)}, got "
                            f"{type(module).__name__} without {name}")
    _check_config_has(config, ("hidden_size", "num_attention_heads", "max_position_embeddings"),
                      "the transformers config the module was built from")


def _check_config_has(config, names, expected: str) -> None:
    for name in names:
        if not hasattr(config, name):
            raise TypeError(f"config must be {expected}, got {type(config).__name__} without {name}")


def _layer_kind(module: nn.Module, config, reader: str, kinds=("full_attention", "sliding_attention")) -> str:
    """The module's layer kind in ``config.layer_types`` (``"full_attention"`` when the config has none)."""
    types = getattr(config, "layer_types", None)
    index = getattr(module, "layer_idx", None)
    if not types or index is None:
        return "full_attention"
    if not 0 <= index < len(types):
        raise ValueError(f"the module's layer_idx {index} is not a layer of config.layer_types ({len(types)} "
                         f"layers): pass the config the module was built from")
    kind = types[index]
    if kind not in kinds:
        raise ValueError(f"{reader} reads layers of kind {' or '.join(map(repr, kinds))}, got {kind!r} for layer "
                         f"{index}")
    return kind


def _layer_rope(config, kind: str, reader: str) -> tuple[float, YaRN | None, float]:
    """``(rope_theta, yarn or None, partial_rotary_factor)`` of a layer of kind ``kind``."""
    rope = _rope_parameters(config)
    if rope and all(isinstance(value, Mapping) for value in rope.values()):  # one setting per layer kind
        if kind not in rope:
            raise ValueError(f"config.rope_parameters has no entry for {kind!r} layers, got {list(rope)}")
        rope = _rope_dict(rope[kind])
    rope_type = rope.get("rope_type", "default")
    if rope_type not in ("default", "yarn"):
        raise ValueError(f"{reader} reads rope_type 'default' and 'yarn', got {rope_type!r}: "
                         f"MultiHeadAttention's rotary positions have no other stretching")
    theta = rope.get("rope_theta", getattr(config, "rope_theta", None))
    if theta is None:
        raise TypeError(f"config must hold rope_theta (in rope_parameters), got {type(config).__name__} without it: "
                        f"the layer rotates q and k by RoPE, and rope_theta sets its speeds")
    fraction = rope.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None))
    yarn = _yarn_from(rope, config) if rope_type == "yarn" else None
    return float(theta), yarn, 1.0 if fraction is None else float(fraction)


def _norm_eps(norm: nn.Module) -> float:
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))  # Llama-style / Gemma-style RMSNorms
    if eps is None:
        raise TypeError(f"cannot read the epsilon of {type(norm).__name__} (neither variance_epsilon nor eps)")
    return float(eps)


def _load(target: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None, source: str) -> None:
    if weight.shape != target.weight.shape:
        raise ValueError(f"{source}.weight has shape {tuple(weight.shape)} but config implies "
                         f"{tuple(target.weight.shape)}: pass the config the module was built from")
    _copy_(target.weight, weight)
    if target.bias is not None:
        _copy_(target.bias, bias)


def _read_attention(
    module: nn.Module, config, reader: str, *, qk_norm: str | None = None, one_plus_w: bool = False,
    softcap: float | None = None, sinks: bool = False, gate: str | None = None, rope: bool = True,
    kinds=("full_attention", "sliding_attention"), context_length: int | None = None,
    pairs_to_halves: bool = False,
) -> MultiHeadAttention:
    """The reader all families share: sizes, layer kind, rotary setting and scale from ``module`` and ``config``,
    the family's options as given, the weights copied. ``one_plus_w``: the norms compute x·(1 + w) (Gemma 3,
    Qwen3-Next), so our weight is ``1 + w``. ``gate="elementwise"``: q_proj emits each head's query then its gate
    (Qwen3-Next). ``pairs_to_halves``: the module rotates neighbouring pairs (Llama 4), so each head's q and k rows
    are reordered for rotate-half."""
    _check_source(module, config, reader)
    if getattr(config, "use_bidirectional_attention", False):
        raise ValueError(f"{reader} reads a causal decoder's attention, but config.use_bidirectional_attention is "
                         f"True (every token sees every other): build MultiHeadAttention(..., causal=False) instead")
    H = config.num_attention_heads
    G = getattr(config, "num_key_value_heads", None) or H
    Dh = int(module.head_dim)
    kind = _layer_kind(module, config, reader, kinds)
    window = None
    if kind == "sliding_attention":
        window = getattr(module, "sliding_window", None) or getattr(config, "sliding_window", None)
        if window is None:
            raise ValueError(f"layer {module.layer_idx} is a sliding layer but config.sliding_window is None")
    theta, yarn, fraction = _layer_rope(config, kind, reader) if rope else (None, None, 1.0)
    scale = float(module.scaling)
    q, o = module.q_proj, module.o_proj
    q_weight, q_bias = q.weight, q.bias
    gate_weight = gate_bias = None
    if gate == "elementwise":  # rows per head: Dh of query, then Dh of gate
        if q_weight.shape[0] != 2 * H * Dh:
            raise ValueError(f"q_proj.weight has {q_weight.shape[0]} rows but config implies 2 × {H} heads × {Dh} = "
                             f"{2 * H * Dh} (each head's query, then its gate): pass the config the module was built "
                             f"from")
        rows = q_weight.view(H, 2, Dh, -1)  # (H·2·Dh, d) -> (H, 2, Dh, d)
        q_weight, gate_weight = rows[:, 0].reshape(H * Dh, -1), rows[:, 1].reshape(H * Dh, -1)
        if q_bias is not None:
            q_bias, gate_bias = q_bias.view(H, 2, Dh)[:, 0].reshape(-1), q_bias.view(H, 2, Dh)[:, 1].reshape(-1)
    k_weight, k_bias = module.k_proj.weight, module.k_proj.bias
    if pairs_to_halves:  # (x0, x1), (x2, x3), ... -> (x0, x2, ...), (x1, x3, ...) in every head: the same scores
        q_weight, q_bias = _reorder_heads(q_weight, H, Dh), _reorder_heads(q_bias, H, Dh)
        k_weight, k_bias = _reorder_heads(k_weight, G, Dh), _reorder_heads(k_bias, G, Dh)
    eps = _norm_eps(module.q_norm) if qk_norm in ("head", "projection") else (
        _norm_eps(module.qk_norm) if qk_norm == "l2" else 1e-6)
    layer = MultiHeadAttention(
        config.hidden_size, config.hidden_size, context_length or config.max_position_embeddings,
        float(getattr(config, "attention_dropout", 0.0) or 0.0), H, q_bias is not None, num_kv_heads=G,
        head_dim=Dh, rope_theta=theta, window=window, out_bias=o.bias is not None, qk_norm=qk_norm, norm_eps=eps,
        scale=None if scale == Dh ** -0.5 else scale, softcap=softcap, sinks=sinks, gate=gate,
        rope_fraction=fraction, yarn=yarn,
    ).to(device=q.weight.device, dtype=q.weight.dtype)
    _load(layer.W_query, q_weight, q_bias, "q_proj")
    _load(layer.W_key, k_weight, k_bias, "k_proj")
    _load(layer.W_value, module.v_proj.weight, module.v_proj.bias, "v_proj")
    _load(layer.out_proj, o.weight, o.bias, "o_proj")
    if gate_weight is not None:
        _load(layer.W_gate, gate_weight, gate_bias, "q_proj (its gate rows)")
    if qk_norm in ("head", "projection"):
        for ours, theirs in ((layer.q_norm, module.q_norm), (layer.k_norm, module.k_norm)):
            if theirs.weight.shape != ours.weight.shape:
                raise ValueError(f"the module's norm weight has shape {tuple(theirs.weight.shape)}, expected "
                                 f"{tuple(ours.weight.shape)}: pass the config the module was built from")
            _copy_(ours.weight, 1.0 + theirs.weight if one_plus_w else theirs.weight)
    if sinks:
        _copy_(layer.sinks, module.sinks)
    return _same_mode(layer, module)


def _reorder_heads(rows: torch.Tensor | None, heads: int, head_dim: int) -> torch.Tensor | None:
    """A weight's rows (or a bias's entries) reordered within each head by ``interleaved_order``: neighbouring pairs
    (2i, 2i+1) become (i, i + Dh/2). None stays None."""
    if rows is None:
        return None
    per_head = rows.view(heads, head_dim, *rows.shape[1:])  # (heads·Dh, ...) -> (heads, Dh, ...)
    return per_head[:, interleaved_order(head_dim)].reshape(rows.shape)


def _from_qwen3(module, config):
    """Qwen3: RMSNorm (weight · x) over each head's Dh on q and k, before RoPE; sliding layers with
    ``use_sliding_window`` from layer ``max_window_layers`` on."""
    return _read_attention(module, config, "the Qwen3 reader", qk_norm="head")


def _from_olmo(module, config):
    """OLMo 2 and 3: RMSNorm over the whole q (H·Dh) and k (G·Dh) projections, before the head split and RoPE;
    OLMo 3's sliding layers (3 of every 4), each kind with its own rotary setting."""
    return _read_attention(module, config, "the OLMo reader", qk_norm="projection")


def _from_gemma2(module, config):
    """Gemma 2: softmax scale ``query_pre_attn_scalar**-0.5``; scores soft-capped at ``attn_logit_softcapping``
    before the mask; every other layer sliding (layer 0 first)."""
    softcap = getattr(module, "attn_logit_softcapping", None)
    return _read_attention(module, config, "the Gemma 2 reader", softcap=None if softcap is None else float(softcap))


def _from_gemma3(module, config):
    """Gemma 3: q/k norm x·(1 + w) per head before RoPE (our weight: 1 + w); Gemma 2's scale; 5 local layers to 1
    global, each kind with its own rotary speeds. Its config keeps ``attn_logit_softcapping`` but its attention never
    applies it (transformers 5: softcap 1.0 and None give the same output), so neither does this layer."""
    return _read_attention(module, config, "the Gemma 3 reader", qk_norm="head", one_plus_w=True)


def _from_gpt_oss(module, config):
    """gpt-oss: one learned sink logit per head (``sinks``); biases on q, k, v and o; every other layer a 128-token
    window; YaRN (its default rope) read as well."""
    if getattr(module, "sinks", None) is None:
        raise TypeError(f"the gpt-oss reader reads GptOssAttention's sinks, got {type(module).__name__} without sinks")
    return _read_attention(module, config, "the gpt-oss reader", sinks=True)


def _from_qwen3_next(module, config):
    """Qwen3-Next's attention layers (every 4th; the others are linear attention, another module): q_proj emits per
    head a query and a gate of Dh each, the output is ``out · sigmoid(gate)`` before o_proj; (1 + w) norms per head
    before RoPE; only the first ``partial_rotary_factor`` of each head rotates."""
    return _read_attention(module, config, "the Qwen3-Next reader", qk_norm="head", one_plus_w=True,
                           gate="elementwise")


def _from_llama4(module, config):
    """Llama 4 (text): RoPE layers rotate neighbouring pairs with complex numbers (their q/k rows are reordered for
    rotate-half) and, with ``use_qk_norm``, apply a weightless RMS norm ("L2Norm") after RoPE; NoPE layers
    (``no_rope_layers[i] == 0``) have neither. Two things this layer does not do, so its ``context_length`` stops
    before them: RoPE layers attend in chunks of ``attention_chunk_size`` (8,192) and NoPE layers scale their queries
    by ``1 + attn_scale·log1p(floor((position + 1) / floor_scale))`` (temperature tuning), which is 1 below position
    ``floor_scale - 1``."""
    index = getattr(module, "layer_idx", None)
    if index is None or not hasattr(config, "no_rope_layers"):
        raise TypeError(f"the Llama 4 reader reads Llama4TextAttention with a Llama4TextConfig (no_rope_layers), got "
                        f"{type(module).__name__} and {type(config).__name__}")
    use_rope = bool(config.no_rope_layers[index])
    limit = config.max_position_embeddings
    chunk = getattr(config, "attention_chunk_size", None)
    if use_rope and chunk:
        limit = min(limit, int(chunk))
    if not use_rope and getattr(config, "attn_temperature_tuning", False):
        limit = min(limit, int(config.floor_scale) - 1)
    qk_norm = "l2" if hasattr(module, "qk_norm") else None
    return _read_attention(module, config, "the Llama 4 reader", qk_norm=qk_norm, rope=use_rope,
                           kinds=("full_attention", "chunked_attention"), context_length=limit,
                           pairs_to_halves=use_rope)


def _from_qwen3_next_gated_deltanet(module, config) -> GatedDeltaNet:
    """Qwen3-Next's linear-attention layer (3 of every 4): ``Qwen3NextGatedDeltaNet`` -> ``GatedDeltaNet``.

    ``in_proj_qkvz``'s rows are grouped per key head — for each of the Hk key heads: its query (Dk), its key (Dk),
    then the values (r·Dv) and the gates z (r·Dv) of its r = Hv/Hk value heads; ``in_proj_ba``'s per key head: r
    b's, then r a's. Our projections are flat (all queries, all keys, ...), so the rows are regrouped here (reading
    them as flat is right only when Hk = 1). The conv's channels are already flat ``[q | k | v]``, like ours.
    """
    for name in ("in_proj_qkvz", "in_proj_ba", "conv1d", "A_log", "dt_bias", "norm", "out_proj"):
        if getattr(module, name, None) is None:
            raise TypeError(f"the Qwen3-Next GatedDeltaNet reader reads in_proj_qkvz, in_proj_ba, conv1d, A_log, "
                            f"dt_bias, norm and out_proj, got {type(module).__name__} without {name}")
    for name in ("hidden_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                 "linear_value_head_dim", "linear_conv_kernel_dim"):
        if not hasattr(config, name):
            raise TypeError(f"config must be the Qwen3NextConfig the module was built from, got "
                            f"{type(config).__name__} without {name}")
    _layer_kind(module, config, "the Qwen3-Next GatedDeltaNet reader", kinds=("linear_attention",))
    activation = getattr(module, "activation", "silu")
    if activation not in ("silu", "swish"):
        raise ValueError(f"GatedDeltaNet's conv is followed by silu, got hidden_act={activation!r}")
    Hk, Hv = config.linear_num_key_heads, config.linear_num_value_heads
    Dk, Dv = config.linear_key_head_dim, config.linear_value_head_dim
    r = Hv // Hk  # value heads per key head
    weight = module.in_proj_qkvz.weight
    layer = GatedDeltaNet(config.hidden_size, Hk, Dk, num_value_heads=Hv, value_head_dim=Dv,
                          conv_size=config.linear_conv_kernel_dim, rule="gated_delta",
                          norm_eps=_norm_eps(module.norm)).to(device=weight.device, dtype=weight.dtype)
    if weight.shape[0] != Hk * (2 * Dk + 2 * r * Dv):
        raise ValueError(f"in_proj_qkvz.weight has {weight.shape[0]} rows but config implies {Hk} key heads × "
                         f"(2·{Dk} + 2·{r}·{Dv}) = {Hk * (2 * Dk + 2 * r * Dv)}: pass the config the module was "
                         f"built from")
    groups = weight.view(Hk, 2 * Dk + 2 * r * Dv, -1)  # (Hk·(2Dk + 2rDv), d) -> (Hk, 2Dk + 2rDv, d)
    q, k, v, z = groups.split([Dk, Dk, r * Dv, r * Dv], dim=1)  # (Hk, Dk, d), (Hk, Dk, d), (Hk, r·Dv, d) × 2
    ba = module.in_proj_ba.weight.view(Hk, 2 * r, -1)  # (2·Hv, d) -> (Hk, 2r, d)
    b, a = ba.split([r, r], dim=1)  # (Hk, r, d) each: value head g·r + j is row j of group g
    pairs = ((layer.W_query, q), (layer.W_key, k), (layer.W_value, v), (layer.W_gate, z), (layer.W_beta, b),
             (layer.W_decay, a))
    for target, rows in pairs:
        _load(target, rows.reshape(-1, rows.shape[-1]), None, "in_proj_qkvz / in_proj_ba")  # (Hk, n, d) -> (Hk·n, d)
    _load(layer.out_proj, module.out_proj.weight, None, "out_proj")
    for ours, theirs in ((layer.conv.weight, module.conv1d.weight), (layer.A_log, module.A_log),
                         (layer.dt_bias, module.dt_bias), (layer.norm.weight, module.norm.weight)):
        if ours.shape != theirs.shape:
            raise ValueError(f"the module's {tuple(theirs.shape)} weight does not fit ours {tuple(ours.shape)}: "
                             f"pass the config the module was built from")
        _copy_(ours, theirs)
    return _same_mode(layer, module)


#: DeepSeek-V4's layer kinds (``config.layer_types``)
_V4_KINDS = ("sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention")


def _from_deepseek_v4(module: nn.Module, config) -> CompressedAttention:
    """DeepSeek-V4's ``DeepseekV4Attention`` (chapter 17's optional section) -> ``CompressedAttention`` of the layer's
    kind: ``sliding_attention`` (the window only), ``compressed_sparse_attention`` (``overlap=True`` and the indexer,
    ``index_topk=config.index_topk``), ``heavily_compressed_attention`` (``compress_rate`` alone); the rate is
    ``config.compress_rates[kind]``. The rotary setting is the layer's: ``rope_parameters["main"]`` for a sliding
    layer, ``["compress"]`` for the others (``"default"`` or ``"yarn"``); ``rope_dim = head_dim ×
    partial_rotary_factor``, the trailing dimensions.

    ``q_a_proj, q_a_norm, q_b_proj, kv_proj, kv_norm, o_a_proj, o_b_proj, sinks`` become ``q_down, q_norm, q_up,
    W_kv, kv_norm, out_down, out_proj, sinks``; a compressor's ``kv_proj, gate_proj, position_bias, kv_norm`` become
    ``compressor.W_kv, W_gate, position_bias, norm`` (the indexer's, ``indexer.compressor``'s); the indexer's
    ``q_b_proj`` and ``scorer.weights_proj`` ``indexer.W_query`` and ``W_head_weights``. Strict: every parameter of
    the module is copied, and every buffer (the compressors' rotary speeds) checked against ours; one that this
    reader does not know is an error, not a weight left behind."""
    reader = "the DeepSeek-V4 reader"
    for name in ("q_a_proj", "q_a_norm", "q_b_proj", "q_b_norm", "kv_proj", "kv_norm", "o_a_proj", "o_b_proj",
                 "sinks"):
        if getattr(module, name, None) is None:
            raise TypeError(f"{reader} reads DeepseekV4Attention (q_a_proj, q_a_norm, q_b_proj, q_b_norm, kv_proj, "
                            f"kv_norm, o_a_proj, o_b_proj, sinks), got {type(module).__name__} without {name}")
    _check_config_has(config, ("hidden_size", "num_attention_heads", "head_dim", "q_lora_rank", "o_groups",
                               "o_lora_rank", "compress_rates", "index_n_heads", "index_head_dim", "rms_norm_eps"),
                      "the DeepseekV4Config the module was built from")
    kind = _layer_kind(module, config, reader, kinds=_V4_KINDS)
    label = "main" if kind == "sliding_attention" else "compress"  # transformers' rope_layer_type
    theta, yarn, fraction = _layer_rope(config, label, reader)
    Dh = int(config.head_dim)
    rope_dim = int(Dh * fraction)  # as transformers: int(head_dim * partial_rotary_factor)
    if rope_dim < 2 or rope_dim % 2:
        raise ValueError(f"{reader} needs an even rotary width head_dim × partial_rotary_factor >= 2, got "
                         f"int({Dh} × {fraction:g}) = {rope_dim}: RoPE turns the dimensions in pairs")
    if float(module.scaling) != Dh ** -0.5:
        raise ValueError(f"{reader} reads a softmax scale of head_dim^-½ = {Dh ** -0.5:.6g}, got module.scaling = "
                         f"{float(module.scaling):.6g}")
    compressor = getattr(module, "compressor", None)
    indexer = getattr(compressor, "indexer", None)
    sliding, sparse = kind == "sliding_attention", kind == "compressed_sparse_attention"
    if (compressor is None) != sliding or (indexer is None) == sparse:
        raise TypeError(f"{reader}: a {kind} layer has {'no' if sliding else 'a'} compressor and "
                        f"{'an' if sparse else 'no'} indexer, got "
                        f"{type(compressor).__name__} and {type(indexer).__name__}")
    norms = [module.q_a_norm, module.kv_norm] + [m.kv_norm for m in (compressor, indexer) if m is not None]
    eps = {_norm_eps(norm) for norm in norms} | {float(module.q_b_norm.eps)}
    if len(eps) != 1:
        raise ValueError(f"{reader} reads one RMSNorm epsilon for all the layer's norms, got {sorted(eps)}")
    weight = module.kv_proj.weight
    layer = CompressedAttention(
        config.hidden_size, config.num_attention_heads, Dh, q_lora_rank=config.q_lora_rank, rope_dim=rope_dim,
        sliding_window=int(module.sliding_window), o_groups=config.o_groups, o_lora_rank=config.o_lora_rank,
        compress_rate=None if compressor is None else int(compressor.compress_rate),
        overlap=sparse,
        index_topk=None if indexer is None else int(indexer.index_topk),
        index_heads=None if indexer is None else config.index_n_heads,
        index_head_dim=None if indexer is None else config.index_head_dim,
        rope_theta=theta, yarn=yarn, norm_eps=eps.pop(), dropout=float(getattr(config, "attention_dropout", 0.0)),
    ).to(device=weight.device, dtype=weight.dtype)
    ours = {"q_a_proj.weight": layer.q_down.weight, "q_a_norm.weight": layer.q_norm.weight,
            "q_b_proj.weight": layer.q_up.weight, "kv_proj.weight": layer.W_kv.weight,
            "kv_norm.weight": layer.kv_norm.weight, "o_a_proj.weight": layer.out_down.weight,
            "o_b_proj.weight": layer.out_proj.weight, "sinks": layer.sinks}
    pooling = [("compressor.", layer.compressor)]
    if layer.indexer is not None:
        pooling.append(("compressor.indexer.", layer.indexer.compressor))
        ours["compressor.indexer.q_b_proj.weight"] = layer.indexer.W_query.weight
        ours["compressor.indexer.scorer.weights_proj.weight"] = layer.indexer.W_head_weights.weight
    for prefix, target in pooling:
        if target is not None:
            ours.update({prefix + "kv_proj.weight": target.W_kv.weight,
                         prefix + "gate_proj.weight": target.W_gate.weight,
                         prefix + "position_bias": target.position_bias, prefix + "kv_norm.weight": target.norm.weight})
    theirs = dict(module.named_parameters())
    unknown, missing = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
    if unknown or missing:
        raise ValueError(f"{reader} copies every parameter of a {kind} layer, but the module has "
                         f"{unknown or 'nothing'} it does not know and lacks {missing or 'nothing'}: pass the "
                         f"DeepseekV4Attention and the config it was built from")
    for name, target in ours.items():
        if theirs[name].shape != target.shape:
            raise ValueError(f"{name} has shape {tuple(theirs[name].shape)} but config implies "
                             f"{tuple(target.shape)}: pass the config the module was built from")
        _copy_(target, theirs[name])
    _check_v4_buffers(module, layer, label, reader)
    return _same_mode(layer, module)


def _check_v4_buffers(module: nn.Module, layer: CompressedAttention, label: str, reader: str) -> None:
    """The compressors' rotary buffers hold the layer's speeds (``{label}_inv_freq`` and its ``original_`` copy) and
    the other label's, which they never read. Any other buffer is an error."""
    speeds = layer.rope_speeds
    for name, buffer in module.named_buffers():
        owner, _, leaf = name.rpartition(".")
        kind = leaf.removesuffix("_inv_freq").removesuffix("_original")
        if not owner.endswith("rotary_emb") or not leaf.endswith("inv_freq") or kind not in ("main", "compress"):
            raise ValueError(f"{reader} does not know the module's buffer {name}: pass a DeepseekV4Attention")
        if kind != label:  # the other rotary setting: held, never read
            continue
        if buffer.shape != speeds.shape or not torch.allclose(buffer.to(speeds), speeds, rtol=1e-6, atol=0.0):
            raise ValueError(f"the module's {name} are not the layer's {label!r} rotary speeds: pass the config "
                             f"the module was built from")
        gain = float(getattr(module.get_submodule(owner), f"{label}_attention_scaling", 1.0))
        if gain != layer.rope_gain:
            raise ValueError(f"the module's {owner}.{label}_attention_scaling is {gain:g}, the layer's rope gain "
                             f"{layer.rope_gain:g}: pass the config the module was built from")


#: class name -> reader: ``attention_from_transformers``'s dispatch table
TRANSFORMERS_READERS = {
    "LlamaAttention": attention_from_llama,
    "Qwen3Attention": _from_qwen3,
    "Olmo2Attention": _from_olmo,
    "Olmo3Attention": _from_olmo,
    "Gemma2Attention": _from_gemma2,
    "Gemma3Attention": _from_gemma3,
    "GptOssAttention": _from_gpt_oss,
    "Qwen3NextAttention": _from_qwen3_next,
    "Llama4TextAttention": _from_llama4,
    "DeepseekV3Attention": attention_from_deepseek,
    "DeepseekV32Attention": _from_deepseek_v32,
    "Qwen3NextGatedDeltaNet": _from_qwen3_next_gated_deltanet,
    "DeepseekV4Attention": _from_deepseek_v4,
}
