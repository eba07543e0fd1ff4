"""A tiny ``LlamaAttention`` from transformers, built offline with random weights, and called the way Llama calls it.

    reference, config = tiny_llama_attention(hidden_size=64, num_heads=8, num_kv_heads=2)
    layer = mha_lib.attention_from_llama(reference, config)      # our layer, the same weights
    out, weights = llama_forward(reference, config, x)           # Llama's eager output on positions 0..T-1

Nothing is downloaded: a ``LlamaConfig`` is all a layer needs. Traps met on the way (``../shared/GUIDE.md`` §8):
the eager path wants the rotary ``position_embeddings`` computed outside the layer, and an *additive* causal mask
(``is_causal`` is not read by the eager function).
"""

from __future__ import annotations

import torch

from ..masks import additive_mask, causal_mask
from ..validation import check_flag, check_positive_float, check_positive_int, check_seed, check_tensor

Tensor = torch.Tensor


def tiny_llama_attention(
    hidden_size: int = 64,
    num_heads: int = 8,
    num_kv_heads: int = 2,
    head_dim: int | None = None,
    rope_theta: float = 10000.0,
    attention_bias: bool = False,
    max_positions: int = 256,
    seed: int = 0,
):
    """``(LlamaAttention, LlamaConfig)`` with random weights (seeded), in eval mode, eager attention.

    transformers initialises Llama's linear layers with a small normal (std ``initializer_range`` = 0.02) only
    inside ``from_pretrained``/``post_init``; a bare layer keeps ``nn.Linear``'s default init, and its biases
    (``attention_bias=True``) are drawn too, so every weight takes part in the comparison.
    """
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention

    hidden_size = check_positive_int("hidden_size", hidden_size)
    num_heads = check_positive_int("num_heads", num_heads)
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
    head_dim = hidden_size // num_heads if head_dim is None else check_positive_int("head_dim", head_dim)
    config = LlamaConfig(
        hidden_size=hidden_size, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        head_dim=head_dim, attention_bias=check_flag("attention_bias", attention_bias),
        max_position_embeddings=check_positive_int("max_positions", max_positions),
        rope_parameters={"rope_type": "default", "rope_theta": check_positive_float("rope_theta", rope_theta)},
    )
    config._attn_implementation = "eager"  # the plain softmax path: it also returns the weights
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_seed("seed", seed))
        reference = LlamaAttention(config, layer_idx=0)
    return reference.eval(), config


@torch.no_grad()
def llama_forward(reference, config, x: Tensor) -> tuple[Tensor, Tensor]:
    """Llama's eager attention on ``x`` ``(B, T, hidden_size)`` at positions ``0..T-1``, causal.

    Returns the output ``(B, T, hidden_size)`` and the weights ``(B, H, T, T)``.
    """
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    check_tensor("x", x, ndim=3, layout="(B, T, hidden_size)")
    B, T, _ = x.shape
    positions = torch.arange(T, device=x.device)[None].expand(B, -1)  # (B, T)
    cos_sin = LlamaRotaryEmbedding(config).to(x.device)(x, positions)  # two (B, T, Dh) tensors
    mask = additive_mask(causal_mask(T, device=x.device), x.dtype)[None, None]  # (T, T) -> (1, 1, T, T): 0 / -inf
    return reference(x, position_embeddings=cos_sin, attention_mask=mask)


__all__ = ["llama_forward", "tiny_llama_attention"]
