"""Parameter counts (mha_lib.sizes) against the parameters real layers hold."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mha_lib
from mha_lib.sizes import GPT_CONFIGS, attention_parameter_count, gpt_parameter_count


def numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("d_model, num_heads", [(768, 12), (1600, 25)])
def test_gpt2_attention_block_small_and_xl(d_model, num_heads):
    expected = {768: 2_362_368, 1600: 10_246_400}[d_model]  # 4·D² + 4·D, by hand
    assert attention_parameter_count(d_model) == expected
    ours = mha_lib.MultiHeadAttention(d_model, d_model, 8, 0.0, num_heads, qkv_bias=True)
    assert numel(ours) == expected
    assert numel(nn.MultiheadAttention(d_model, num_heads)) == expected


@pytest.mark.parametrize("d_model, num_heads", [(6, 1), (6, 2), (6, 3), (6, 6), (20, 4), (20, 5)])
@pytest.mark.parametrize("qkv_bias", [True, False])
def test_matches_every_layer_and_ignores_the_number_of_heads(d_model, num_heads, qkv_bias):
    # mha_lib's out_proj always has a bias (as in the book); nn.MultiheadAttention's bias flag covers all four
    expected = attention_parameter_count(d_model, qkv_bias, out_bias=True)
    for cls in (mha_lib.MultiHeadAttention, mha_lib.FusedMultiHeadAttention):
        assert numel(cls(d_model, d_model, 4, 0.0, num_heads, qkv_bias=qkv_bias)) == expected
    assert numel(nn.MultiheadAttention(d_model, num_heads, bias=qkv_bias)) == attention_parameter_count(
        d_model, qkv_bias
    )
    assert expected == 4 * d_model**2 + (4 if qkv_bias else 1) * d_model


def test_bias_flags():
    assert attention_parameter_count(10, False) == 400
    assert attention_parameter_count(10, False, out_bias=True) == 410
    assert attention_parameter_count(10, True, out_bias=False) == 430
    assert attention_parameter_count(10) == 440


class _TinyGPT(nn.Module):
    """GPT-2's layout built from torch modules, to check gpt_parameter_count's formula term by term."""

    def __init__(self, d: int, n_layers: int, vocab: int, context: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({
                "ln_1": nn.LayerNorm(d),
                "attn": nn.MultiheadAttention(d, 2),
                "ln_2": nn.LayerNorm(d),
                "mlp": nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)),
            })
            for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied: parameters() yields it once


@pytest.mark.parametrize("d, n_layers, vocab, context", [(8, 1, 11, 5), (12, 3, 50, 7)])
def test_gpt_count_matches_a_built_model(d, n_layers, vocab, context):
    model = _TinyGPT(d, n_layers, vocab, context)
    assert numel(model) == gpt_parameter_count(d, n_layers, vocab_size=vocab, context_length=context)


def test_published_gpt_sizes():
    counts = {
        name: gpt_parameter_count(c.d_model, c.n_layers, vocab_size=c.vocab_size, context_length=c.context_length)
        for name, c in GPT_CONFIGS.items()
    }
    # the sizes of the released GPT-2 checkpoints (Hugging Face "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
    assert counts["gpt2-small"] == 124_439_808
    assert counts["gpt2-medium"] == 354_823_168
    assert counts["gpt2-large"] == 774_030_080
    assert counts["gpt2-xl"] == 1_557_611_200
    assert round(counts["gpt3-175b"] / 1e9) == 175
    for c in GPT_CONFIGS.values():
        assert c.d_model % c.num_heads == 0


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: attention_parameter_count(0), ValueError, "d_model must be a positive int (>= 1), got 0"),
        (lambda: attention_parameter_count(7.5), TypeError, "d_model must be a positive int, got float 7.5"),
        (lambda: attention_parameter_count(8, 1), TypeError, "bias must be True or False, got int 1"),
        (lambda: attention_parameter_count(8, out_bias="no"), TypeError, "out_bias must be True or False"),
        (lambda: gpt_parameter_count(8, 0), ValueError, "n_layers must be a positive int (>= 1), got 0"),
        (lambda: gpt_parameter_count(8, 2, vocab_size=torch.tensor(3)), TypeError, "vocab_size must be a positive int"),
    ],
)
def test_bad_input(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)
