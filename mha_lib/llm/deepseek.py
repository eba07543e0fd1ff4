"""A tiny ``DeepseekV3Attention`` from transformers, built offline with random weights, and called the way DeepSeek-V3
calls it (chapter 14).

    reference, config = tiny_deepseek_attention(q_lora_rank=24, rope_interleave=True)
    layer = mha_lib.attention_from_deepseek(reference, config)    # our latent attention, the same weights
    out, weights = deepseek_forward(reference, config, x)          # DeepSeek's eager output on positions 0..T-1

Nothing is downloaded: a ``DeepseekV3Config`` is all a layer needs. Traps met on the way (``../shared/GUIDE.md``
§10): ``num_key_value_heads`` defaults to 128 and must equal the number of heads; the eager path ignores
``is_causal`` (it wants an additive mask); the rope settings live in ``rope_parameters``.
"""

from __future__ import annotations

import torch

from ..masks import additive_mask, causal_mask
from ..positions import YaRN
from ..validation import check_flag, check_positive_float, check_positive_int, check_seed, check_tensor

Tensor = torch.Tensor


def tiny_deepseek_attention(
    hidden_size: int = 64,
    num_heads: int = 4,
    q_lora_rank: int | None = None,
    kv_lora_rank: int = 16,
    qk_nope_head_dim: int = 12,
    qk_rope_head_dim: int = 8,
    v_head_dim: int = 10,
    rope_interleave: bool = True,
    attention_bias: bool = False,
    rope_theta: float = 10000.0,
    yarn: YaRN | None = None,
    max_positions: int = 256,
    seed: int = 0,
):
    """``(DeepseekV3Attention, DeepseekV3Config)`` with random weights (seeded), in eval mode, eager attention.

    ``yarn`` (a ``mha_lib.YaRN``) selects DeepSeek's ``rope_type="yarn"`` with its factor, original context,
    betas and mscales. A bare layer keeps ``nn.Linear``'s default init (its biases too) and RMSNorm weights of 1;
    the norms' weights are drawn here as well, so that every weight takes part in a comparison.
    """
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    num_heads = check_positive_int("num_heads", num_heads)
    rope = {"rope_type": "default", "rope_theta": check_positive_float("rope_theta", rope_theta)}
    if yarn is not None:
        if not isinstance(yarn, YaRN):
            raise TypeError(f"yarn must be a mha_lib.YaRN or None, got {type(yarn).__name__}")
        rope.update(rope_type="yarn", factor=yarn.factor, original_max_position_embeddings=yarn.original_context_length,
                    beta_fast=yarn.beta_fast, beta_slow=yarn.beta_slow, mscale=yarn.mscale,
                    mscale_all_dim=yarn.mscale_all_dim, truncate=yarn.truncate)
        if yarn.attention_factor is not None:
            rope["attention_factor"] = yarn.attention_factor
    config = DeepseekV3Config(
        hidden_size=check_positive_int("hidden_size", hidden_size), num_attention_heads=num_heads,
        num_key_value_heads=num_heads,  # the default is 128, whatever num_attention_heads says
        q_lora_rank=None if q_lora_rank is None else check_positive_int("q_lora_rank", q_lora_rank),
        kv_lora_rank=check_positive_int("kv_lora_rank", kv_lora_rank),
        qk_nope_head_dim=check_positive_int("qk_nope_head_dim", qk_nope_head_dim),
        qk_rope_head_dim=check_positive_int("qk_rope_head_dim", qk_rope_head_dim),
        v_head_dim=check_positive_int("v_head_dim", v_head_dim),
        rope_interleave=check_flag("rope_interleave", rope_interleave),
        attention_bias=check_flag("attention_bias", attention_bias),
        max_position_embeddings=check_positive_int("max_positions", max_positions), rope_parameters=rope,
    )
    config._attn_implementation = "eager"  # the plain softmax path: it also returns the weights
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_seed("seed", seed))
        reference = DeepseekV3Attention(config, layer_idx=0)
        with torch.no_grad():
            for norm in (reference.q_a_layernorm, reference.kv_a_layernorm):
                if norm is not None:
                    norm.weight.uniform_(0.5, 1.5)
    return reference.eval(), config


@torch.no_grad()
def deepseek_forward(reference, config, x: Tensor) -> tuple[Tensor, Tensor]:
    """DeepSeek's eager attention on ``x`` ``(B, T, hidden_size)`` at positions ``0..T-1``, causal.

    Returns the output ``(B, T, hidden_size)`` and the weights ``(B, H, T, T)``.
    """
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    check_tensor("x", x, ndim=3, layout="(B, T, hidden_size)")
    B, T, _ = x.shape
    positions = torch.arange(T, device=x.device)[None].expand(B, -1)  # (B, T)
    cos_sin = DeepseekV3RotaryEmbedding(config).to(x.device)(x, positions)  # two (B, T, qk_rope_head_dim) tensors
    mask = additive_mask(causal_mask(T, device=x.device), x.dtype)[None, None]  # (T, T) -> (1, 1, T, T): 0 / -inf
    return reference(x, position_embeddings=cos_sin, attention_mask=mask)


__all__ = ["deepseek_forward", "tiny_deepseek_attention"]
