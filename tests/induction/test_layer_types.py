"""Chapter 11's model with per-layer ``layer_types`` and chapter 15's attention controls.

    default    no layer_types (or all "full"): the same parameters, random draws and logits as chapter 11's model
    sliding    a sliding layer is a MultiHeadAttention with the window, a full layer has none; its weights never
               reach back further than the window; generation with the caches equals the full forward
    attention  sinks / a gate reach every layer; bad arguments name themselves
"""

from __future__ import annotations

import re

import pytest
import torch

from mha_lib.induction.model import AttentionOnlyTransformer, InductionTask, generate, repeated_sequences

TASK = InductionTask()


def tokens(batch: int = 3) -> torch.Tensor:
    return repeated_sequences(TASK, batch, torch.Generator().manual_seed(5)).tokens


def test_no_layer_types_or_all_full_is_chapter_11s_model():
    torch.manual_seed(0)
    plain = AttentionOnlyTransformer(TASK, 2)
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    full = AttentionOnlyTransformer(TASK, 2, layer_types=["full", "full"])
    assert torch.equal(torch.random.get_rng_state(), state)
    assert list(full.state_dict()) == list(plain.state_dict())
    full.load_state_dict(plain.state_dict())
    assert torch.equal(full(tokens()), plain(tokens()))
    assert plain.config.layer_types is None and plain.config.window is None


def test_sliding_layers_keep_to_their_window_and_generate_with_caches():
    torch.manual_seed(1)
    model = AttentionOnlyTransformer(TASK, 3, layer_types=("sliding", "full", "sliding"), window=4).eval()
    assert [layer.window for layer in model.layers] == [4, None, 4]
    x = tokens()
    logits, weights = model(x, return_weights=True)
    T = x.shape[1]
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
    assert weights[0].masked_select(s <= t - 4).abs().max() == 0  # nothing further back than the window
    assert weights[1][..., -1, 0].abs().min() > 0  # the full layer still reaches the first token
    with torch.no_grad():
        caches = model.new_caches()
        pieces = [model(x[:, :6], kv_caches=caches)] + [model(x[:, i:i + 1], kv_caches=caches) for i in range(6, T)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), logits, rtol=1e-5, atol=1e-5)
    assert torch.equal(generate(model, x[:, :8], 10), generate(model, x[:, :8], 10, use_cache=False))


def test_attention_options_reach_every_layer():
    torch.manual_seed(2)
    model = AttentionOnlyTransformer(TASK, 2, attention={"sinks": True, "gate": "elementwise"})
    for layer in model.layers:
        assert layer.sinks is not None and layer.gate == "elementwise"
    _, weights = model(tokens(), return_weights=True)
    assert bool((weights[0].sum(-1) < 1).all())  # a sink takes a share of every row


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(layer_types="sliding"), TypeError, "layer_types must be a list of 'sliding' / 'full', one per layer, "
                                                 "got str 'sliding'"),
        (dict(layer_types=["full"]), ValueError, "layer_types must name each of the num_layers = 2 layers, got 1 "
                                                 "entries: ['full']"),
        (dict(layer_types=["full", "local"]), ValueError, "layer_types entries must be 'sliding' or 'full' (or "
                                                          "transformers' 'sliding_attention' / 'full_attention'), "
                                                          "got 'local'"),
        (dict(layer_types=["sliding", "full"]), ValueError, "layer_types has sliding layers but window is None"),
        (dict(layer_types=["sliding", "full"], window=0), ValueError, "window must be a positive int (>= 1), got 0"),
        (dict(layer_types=["full", "full"], window=3), ValueError, "window=3 but layer_types has no sliding layer"),
        (dict(window=3), ValueError, "window=3 needs layer_types: name which layers slide"),
        (dict(layer_types=["sliding", "full"], window=3, causal=False), ValueError,
         "sliding layers need causal=True"),
        (dict(attention=["sinks"]), TypeError, "attention must be a dict of MultiHeadAttention keyword arguments"),
        (dict(attention={"window": 3}), ValueError, "attention cannot set 'window': the model sets it"),
        (dict(attention={"sinks": 1}), TypeError, "sinks must be True or False, got int 1"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, error, text):
    with pytest.raises(error, match=re.escape(text)):
        AttentionOnlyTransformer(TASK, 2, **kwargs)
