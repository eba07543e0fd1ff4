"""How many parameters an attention layer (and a whole GPT) holds, counted from the shapes of its weights.

    attention_parameter_count(D)   4·D² + 4·D      W_q, W_k, W_v, W_o (D × D each) and their four biases
    gpt_parameter_count(D, L)      the whole GPT-2-style decoder: embeddings, L blocks, final layer norm

The number of heads is not an argument, on purpose: the heads *share out* the D columns of W_q, W_k and W_v
(each head gets Dh = D / H of them), so 1, 12 or 768 heads hold exactly the same number of parameters.
Chapter 7 derives these formulas and checks them with ``sum(p.numel() for p in layer.parameters())``.
"""

from __future__ import annotations

from typing import NamedTuple

from .validation import check_flag, check_positive_int


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


def attention_parameter_count(d_model: int, bias: bool = True, *, out_bias: bool | None = None) -> int:
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
    """
    d = check_positive_int("d_model", d_model)
    qkv_bias = check_flag("bias", bias)
    out_bias = qkv_bias if out_bias is None else check_flag("out_bias", out_bias)
    weights = 4 * d * d  # W_q, W_k, W_v, W_o: D × D each
    biases = 3 * d * qkv_bias + d * out_bias  # one length-D vector per projection that has a bias
    return weights + biases


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


__all__ = ["GPTConfig", "GPT_CONFIGS", "attention_parameter_count", "gpt_parameter_count"]
