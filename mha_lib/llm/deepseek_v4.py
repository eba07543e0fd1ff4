"""A tiny ``DeepseekV4Attention`` from transformers, built offline with random weights, and called the way DeepSeek-V4
calls it (chapter 17, optional section).

    module, config = tiny_deepseek_v4("csa", seed=3)                   # random weights, every parameter set
    layer = mha_lib.attention_from_transformers(module, config)        # our CompressedAttention, the same weights
    out, weights = deepseek_v4_forward(module, config, x)              # DeepSeek-V4's eager output
    picked = deepseek_v4_selection(module, config, x)                  # its indexer's top-k entries (CSA)

Nothing is downloaded: a ``DeepseekV4Config`` is all a layer needs. Traps met on the way
(all handled here): eager attention must be asked for; ``sinks`` and ``position_bias`` start as ``torch.empty`` (garbage, NaN at
times); the layer wants ``position_embeddings`` as a ``{"main", "compress"}`` dict, ``position_ids``, and the
additive sliding-window mask the model builds (``attention_mask=None`` means no causality at all); the default HCA
rate (128) gives a short input no entry; ``layer_types`` must have ``num_hidden_layers`` entries.
"""

from __future__ import annotations

import torch

from ..validation import check_seed, check_tensor

Tensor = torch.Tensor

#: our short names and transformers' layer kinds
V4_LAYERS = {"sliding": "sliding_attention", "csa": "compressed_sparse_attention",
             "hca": "heavily_compressed_attention"}
#: GUIDE §13's tiny configuration, with 8 indexer heads instead of 2: with 2, ReLU scores some entries exactly 0 for
#: a query (both heads negative), and which of two tied entries a top-k keeps is arbitrary (transformers' own
#: token-by-token decoding then picks otherwise than its one-call forward); ``tiny_deepseek_v4``'s overrides replace
#: any of these
V4_SIZES = dict(hidden_size=64, num_attention_heads=4, head_dim=32, q_lora_rank=16, partial_rotary_factor=0.25,
                compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}, sliding_window=6,
                o_groups=2, o_lora_rank=16, index_n_heads=8, index_head_dim=16, index_topk=3,
                max_position_embeddings=512)


def _layer_kind(layer_type) -> str:
    kinds = {**V4_LAYERS, **{kind: kind for kind in V4_LAYERS.values()}}
    if not isinstance(layer_type, str) or layer_type not in kinds:
        raise ValueError(f"layer_type must be one of {list(V4_LAYERS)} (or transformers' "
                         f"{list(V4_LAYERS.values())}), got {layer_type!r}")
    return kinds[layer_type]


def tiny_deepseek_v4(layer_type: str = "csa", seed: int = 0, **overrides):
    """``(DeepseekV4Attention, DeepseekV4Config)``: a layer of kind ``layer_type`` (``"sliding"``, ``"csa"``,
    ``"hca"`` or transformers' names), eval mode, eager attention, every parameter drawn from ``seed``.

    The config is GUIDE §13's (``V4_SIZES``) with ``overrides`` (any ``DeepseekV4Config`` argument, e.g.
    ``compress_rates={...}``, ``index_topk=8``) and three layers, one of each kind; the module is the one of
    ``layer_type``. Weights: projections N(0, 1/fan_in), norm weights in [0.5, 1.5], sinks and position biases
    N(0, 1) (``torch.empty`` in transformers). Loads transformers (seconds).
    """
    from transformers import DeepseekV4Config
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention

    kind = _layer_kind(layer_type)
    layer_types = list(V4_LAYERS.values())
    config = DeepseekV4Config(**{**V4_SIZES, **overrides, "num_hidden_layers": 3, "layer_types": layer_types})
    config._attn_implementation = "eager"  # the plain softmax path, with the sinks; it also returns the weights
    generator = torch.Generator().manual_seed(check_seed("seed", seed))
    module = DeepseekV4Attention(config, layer_idx=layer_types.index(kind))
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if name.endswith("norm.weight"):
                parameter.copy_(torch.rand(parameter.shape, generator=generator) + 0.5)
            elif name == "sinks" or name.endswith("position_bias"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
            else:  # a projection's weight (out, in)
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * parameter.shape[-1] ** -0.5)
    return module.eval(), config


def deepseek_v4_inputs(config, x: Tensor, positions: Tensor | None = None) -> dict:
    """The keyword arguments DeepSeek-V4's model passes its attention for ``x`` ``(B, T, hidden_size)`` at
    ``positions`` ``(T,)`` (default ``0 .. T-1``): ``position_embeddings`` (``{"main", "compress"}``: cos and sin of
    both rotary settings), ``position_ids`` ``(B, T)`` and ``attention_mask``, the additive sliding-window mask
    ``(B, 1, T, T)`` of ``transformers.masking_utils`` (0 where seen, the dtype's minimum elsewhere; the window
    counts token indices: query i sees tokens ``i - sliding_window + 1 .. i``)."""
    from transformers.masking_utils import create_sliding_window_causal_mask
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4RotaryEmbedding

    check_tensor("x", x, ndim=3, layout="(B, T, hidden_size)")
    B, T, _ = x.shape
    if positions is None:
        positions = torch.arange(T, device=x.device)
    check_tensor("positions", positions, ndim=1, layout="(T,)")
    position_ids = positions[None].expand(B, -1)  # (T,) -> (B, T)
    rotary = DeepseekV4RotaryEmbedding(config).to(x.device)
    embeddings = {label: rotary(x, position_ids, layer_type=label) for label in ("main", "compress")}
    mask = create_sliding_window_causal_mask(config=config, inputs_embeds=x, attention_mask=None,
                                             past_key_values=None, position_ids=position_ids)
    return {"position_embeddings": embeddings, "position_ids": position_ids, "attention_mask": mask}


@torch.no_grad()
def deepseek_v4_forward(module, config, x: Tensor, positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """DeepSeek-V4's eager attention on ``x`` at ``positions`` (default ``0 .. T-1``), called as its model calls it
    (``deepseek_v4_inputs``). Returns the output ``(B, T, hidden_size)`` and the weights ``(B, H, T, T + W)``."""
    return module(x, **deepseek_v4_inputs(config, x, positions))


@torch.no_grad()
def deepseek_v4_selection(module, config, x: Tensor, positions: Tensor | None = None) -> Tensor:
    """A CSA layer's indexer on ``x``: ``(B, T, min(index_topk, W))`` int64 entry indices, best first, ``-1`` where a
    query sees fewer entries (transformers' own ``DeepseekV4Indexer``, fed the layer's compressed query)."""
    indexer = getattr(getattr(module, "compressor", None), "indexer", None)
    if indexer is None:
        raise ValueError(f"deepseek_v4_selection needs a compressed_sparse_attention layer (it has the indexer), got "
                         f"a {module.layer_type} layer")
    inputs = deepseek_v4_inputs(config, x, positions)
    query = module.q_a_norm(module.q_a_proj(x))  # (B, T, q_lora_rank): the compressed query the indexer reads
    return indexer(x, query, inputs["position_ids"], None, module.layer_idx).long()


__all__ = ["V4_LAYERS", "V4_SIZES", "deepseek_v4_forward", "deepseek_v4_inputs", "deepseek_v4_selection",
           "tiny_deepseek_v4"]
