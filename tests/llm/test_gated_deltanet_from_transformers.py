"""``attention_from_transformers(Qwen3NextGatedDeltaNet, config)`` -> ``GatedDeltaNet`` with equal output, built
offline from random tiny ``Qwen3NextConfig``s (nothing downloaded; the torch fallbacks of the fla / causal_conv1d
kernels run).

The defaults hide bugs (norm weight 1, dt_bias 1), so the norm weight, dt_bias and A are drawn; A in (0.01, 1)
(with A up to 16 transformers' own float32 output drifts ~5e-6 from float64, GUIDE §12; strong decays are tested on
``delta_rule`` alone). Hv = Hk and Hv > Hk (the grouped rows of ``in_proj_qkvz`` / ``in_proj_ba``).

    output   ≤ 1e-5 × max|transformers' output|
    cache    transformers' DynamicCache fed a prompt and then one token at a time, against ours through a StateCache
    power    reading the grouped rows as flat (right only when Hk = 1) is far off when Hk > 1
"""

from __future__ import annotations

import random
import re

import pytest
import torch

import mha_lib
from mha_lib import GatedDeltaNet, StateCache

pytest.importorskip("transformers")
from transformers import DynamicCache, Qwen3NextConfig  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet  # noqa: E402
from transformers.utils import logging  # noqa: E402

from mha_lib.llm.linear_state import tiny_qwen3_next_deltanet  # noqa: E402

logging.set_verbosity_error()  # one "falling back to the PyTorch implementation" warning per kernel


def tiny(seed: int, grouped: bool):
    rng = random.Random(seed)
    Hk = rng.choice([1, 2, 3])
    Hv = Hk * (rng.choice([2, 3]) if grouped else 1)
    config = Qwen3NextConfig(hidden_size=rng.choice([16, 24]), num_hidden_layers=1, layer_types=["linear_attention"],
                             linear_num_key_heads=Hk, linear_num_value_heads=Hv,
                             linear_key_head_dim=rng.choice([4, 8]), linear_value_head_dim=rng.choice([4, 6]),
                             linear_conv_kernel_dim=rng.choice([2, 4]), rms_norm_eps=rng.choice([1e-6, 1e-5]),
                             num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    return tiny_qwen3_next_deltanet(seed, config=config)  # the weights drawn as the chapter draws them


def bound(expected: torch.Tensor) -> float:
    return 1e-5 * expected.abs().max().item()


@pytest.mark.parametrize("grouped", [False, True], ids=["Hv=Hk", "Hv>Hk"])
@pytest.mark.parametrize("seed", range(4))
def test_gated_deltanet_equals_transformers(seed, grouped):
    module, config = tiny(seed, grouped)
    layer = mha_lib.attention_from_transformers(module, config)
    assert isinstance(layer, GatedDeltaNet) and not layer.training
    assert (layer.num_key_heads, layer.num_value_heads) == (config.linear_num_key_heads,
                                                            config.linear_num_value_heads)
    rng = random.Random(seed)
    B, T = rng.randint(1, 3), rng.randint(1, 80)  # past one 64-token chunk of their kernel, sometimes
    x = torch.randn(B, T, config.hidden_size, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = module(x)
        out = layer(x)
        assert (out - expected).abs().max().item() <= bound(expected)
        # in float64 ours is the exact value; theirs (float32 inside) sits within the same bound of it
        exact = layer.double()(x.double())
        assert (exact - expected.double()).abs().max().item() <= bound(expected)


@pytest.mark.parametrize("grouped", [False, True], ids=["Hv=Hk", "Hv>Hk"])
def test_generation_with_caches_matches_transformers(grouped):
    module, config = tiny(5, grouped)
    layer = mha_lib.attention_from_transformers(module, config)
    x = torch.randn(2, 9, config.hidden_size, generator=torch.Generator().manual_seed(1))
    theirs, ours = DynamicCache(config=config), StateCache()
    with torch.no_grad():
        pieces_theirs = [module(x[:, :5], cache_params=theirs)]  # the prompt, then one token at a time
        pieces_ours = [layer(x[:, :5], kv_cache=ours)]
        for t in range(5, 9):
            pieces_theirs.append(module(x[:, t:t + 1], cache_params=theirs))
            pieces_ours.append(layer(x[:, t:t + 1], kv_cache=ours))
        expected, got = torch.cat(pieces_theirs, 1), torch.cat(pieces_ours, 1)
        assert (got - expected).abs().max().item() <= bound(expected)
        assert (got - module(x)).abs().max().item() <= bound(expected)  # and both equal the full forward
    their_state = theirs.layers[0].recurrent_states[0]  # (B, Hv, Dk, Dv), float32: the same state as ours
    assert ours.state.shape == their_state.shape
    assert (ours.state - their_state).abs().max().item() <= 1e-5 * their_state.abs().max().item()


def test_the_grouped_rows_matter():
    module, config = tiny(1, grouped=True)
    while config.linear_num_key_heads == 1:  # with one key head grouped and flat are the same rows
        module, config = tiny(config.linear_num_key_heads + 10, grouped=True)
    layer = mha_lib.attention_from_transformers(module, config)
    x = torch.randn(1, 7, config.hidden_size)
    with torch.no_grad():
        expected = module(x)
        Hk, Hv = config.linear_num_key_heads, config.linear_num_value_heads
        Dk, Dv = config.linear_key_head_dim, config.linear_value_head_dim
        flat = module.in_proj_qkvz.weight.split([Hk * Dk, Hk * Dk, Hv * Dv, Hv * Dv])  # read as if flat
        for target, rows in zip((layer.W_query, layer.W_key, layer.W_value, layer.W_gate), flat):
            target.weight.copy_(rows)
        assert (layer(x) - expected).abs().max().item() > 100 * bound(expected)


def test_a_full_attention_layer_and_other_modules_are_refused():
    module, config = tiny(0, grouped=False)
    other = Qwen3NextConfig(hidden_size=config.hidden_size, num_hidden_layers=1, layer_types=["full_attention"],
                            num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    with pytest.raises(ValueError, match=re.escape("the Qwen3-Next GatedDeltaNet reader reads layers of kind "
                                                   "'linear_attention', got 'full_attention' for layer 0")):
        mha_lib.attention_from_transformers(module, other)
    assert "Qwen3NextGatedDeltaNet" in mha_lib.TRANSFORMERS_READERS
