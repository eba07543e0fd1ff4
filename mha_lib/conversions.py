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

from .latent import MultiHeadLatentAttention
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
    ref = deepseek_v3_attention
    for name in ("kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"):
        if getattr(ref, name, None) is None:
            raise TypeError(f"deepseek_v3_attention must be a transformers DeepseekV3Attention (with "
                            f"kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), got {type(ref).__name__} "
                            f"without {name}")
    for name in ("hidden_size", "num_attention_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                 "v_head_dim", "max_position_embeddings"):
        if not hasattr(config, name):
            raise TypeError(f"config must be a transformers DeepseekV3Config, got {type(config).__name__} "
                            f"without {name}")
    rope = _rope_parameters(config)
    rope_type = rope.get("rope_type", "default")
    if rope_type not in ("default", "yarn"):
        raise ValueError(f"attention_from_deepseek supports rope_type 'default' and 'yarn', got {rope_type!r}")
    yarn = None
    if rope_type == "yarn":
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
        yarn = YaRN(factor=float(factor), original_context_length=int(original),
                    beta_fast=float(rope.get("beta_fast") or 32), beta_slow=float(rope.get("beta_slow") or 1),
                    mscale=float(rope.get("mscale") or 0.0), mscale_all_dim=float(rope.get("mscale_all_dim") or 0.0),
                    truncate=bool(rope.get("truncate", True)),
                    attention_factor=None if rope.get("attention_factor") is None else float(rope["attention_factor"]))
    q_lora_rank = getattr(config, "q_lora_rank", None)
    kv_down = ref.kv_a_proj_with_mqa
    layer = MultiHeadLatentAttention(
        config.hidden_size, config.num_attention_heads, kv_lora_rank=config.kv_lora_rank,
        qk_nope_head_dim=config.qk_nope_head_dim, qk_rope_head_dim=config.qk_rope_head_dim,
        v_head_dim=config.v_head_dim, q_lora_rank=q_lora_rank, context_length=config.max_position_embeddings,
        rope_theta=float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))), yarn=yarn,
        bias=kv_down.bias is not None, norm_eps=float(ref.kv_a_layernorm.variance_epsilon),  # 1e-6, not rms_norm_eps
        dropout=float(getattr(config, "attention_dropout", 0.0)),
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
                raise ValueError(f"deepseek_v3_attention's {ours} counterpart has no {name} of shape "
                                 f"{tuple(tensor.shape)}: pass the config the layer was built from")
            _copy_(tensor, theirs)
    if getattr(config, "rope_interleave", False):
        _deinterleave_rotary_rows(layer)
    return _same_mode(layer, ref)


def _rope_parameters(config) -> dict:
    """``config.rope_parameters`` (transformers 5; ``rope_scaling`` in 4) as a dict, ``{}`` when there is none;
    an older config's ``"type"`` is read as ``"rope_type"``, as transformers does."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
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
