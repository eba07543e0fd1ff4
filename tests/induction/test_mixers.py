"""Chapter 11's model with its attention swapped for chapter 16's mixers (``mixer="linear" | "delta" |
"gated_delta"``: a ``GatedDeltaNet`` without its conv), so that the four can be trained side by side.

    default    mixer="softmax" is chapter 11's model: the same draws, parameters and logits
    mixers     each layer is a GatedDeltaNet with that rule and no conv; no weights (return_weights refused, evaluate
               has loss and accuracy only); generation through StateCaches equals generation without; training learns
    refusals   options of softmax attention with another mixer; an unknown mixer
"""

from __future__ import annotations

import re

import pytest
import torch

from mha_lib import GatedDeltaNet, KVCache, StateCache
from mha_lib.induction.model import AttentionOnlyTransformer, InductionTask, evaluate, generate, \
    repeated_sequences, train

TASK = InductionTask()
OTHERS = ("linear", "delta", "gated_delta")


TOKENS = repeated_sequences(TASK, 3, torch.Generator().manual_seed(5)).tokens  # (3, T)


def tokens(batch: int = 3) -> torch.Tensor:
    return TOKENS[:batch]


def test_softmax_is_chapter_11s_model():
    built, draws = [], []
    for options in ({}, {"mixer": "softmax"}):
        torch.manual_seed(0)
        built.append(AttentionOnlyTransformer(TASK, 2, **options))
        draws.append(torch.random.get_rng_state())
    plain, softmax = built
    assert torch.equal(*draws)  # the same random draws, in the same order
    assert list(plain.state_dict()) == list(softmax.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), softmax.state_dict().values()))
    assert torch.equal(plain(TOKENS), softmax(TOKENS))
    assert plain.mixer == "softmax" and isinstance(plain.new_caches()[0], KVCache)


@pytest.mark.parametrize("mixer", OTHERS)
def test_each_mixer_is_a_gated_deltanet_without_conv(mixer):
    torch.manual_seed(0)
    model = AttentionOnlyTransformer(TASK, 2, mixer=mixer)
    assert all(isinstance(layer, GatedDeltaNet) and layer.rule == mixer and layer.conv_size is None
               for layer in model.layers)
    assert (model.layers[0].num_key_heads, model.layers[0].key_head_dim) == (4, 16)
    logits = model(tokens())
    assert logits.shape == (3, TASK.seq_len, TASK.vocab_size) and torch.isfinite(logits).all()
    with pytest.raises(ValueError, match=re.escape(f"return_weights=True: this model's mixer is {mixer!r}, which "
                                                   f"has no attention weights to return")):
        model(tokens(), return_weights=True)
    result = evaluate(model, repeated_sequences(TASK, 8, torch.Generator().manual_seed(1)))
    assert set(result) == {"loss", "accuracy"} and 0 <= result["accuracy"] <= 1
    # knocking every head of both layers out leaves the embeddings alone
    silent = model(tokens(), head_mask=torch.zeros(2, 4))
    direct = model.unembed(model.token_embedding(tokens()) + model.position_embedding(torch.arange(TASK.seq_len)))
    assert torch.allclose(silent, direct, atol=1e-6)
    assert not torch.allclose(silent, logits, atol=1e-3)


@pytest.mark.parametrize("mixer", OTHERS)
def test_generation_through_state_caches_equals_generation_without(mixer):
    torch.manual_seed(1)
    model = AttentionOnlyTransformer(TASK, 2, mixer=mixer).eval()
    caches = model.new_caches()
    assert all(isinstance(c, StateCache) for c in caches)
    prompt = tokens(2)[:, :8]
    assert torch.equal(generate(model, prompt, 10), generate(model, prompt, 10, use_cache=False))
    with pytest.raises(TypeError, match=re.escape("kv_caches must be a list of 2 StateCache objects, one per layer")):
        model(prompt, kv_caches=[KVCache(), KVCache()])


@pytest.mark.parametrize("mixer", OTHERS)
def test_each_mixer_learns(mixer):
    torch.manual_seed(0)
    model = AttentionOnlyTransformer(TASK, 2, mixer=mixer)
    log, _ = train(model, 40, eval_every=40, eval_size=64)
    assert log.eval_loss[-1] < log.eval_loss[0] - 0.2  # from ~log(32) = 3.47 down
    assert log.previous_token == [] and log.induction == []  # no weights, no head scores


def test_bad_mixers_are_refused():
    with pytest.raises(ValueError, match=re.escape("mixer must be one of ['softmax', 'linear', 'delta', "
                                                   "'gated_delta'], got 'mamba'")):
        AttentionOnlyTransformer(TASK, mixer="mamba")
    with pytest.raises(ValueError, match=re.escape("mixer='delta' cannot be combined with causal=False")):
        AttentionOnlyTransformer(TASK, causal=False, mixer="delta")
    with pytest.raises(ValueError, match=re.escape("mixer='linear' cannot be combined with layer_types")):
        AttentionOnlyTransformer(TASK, layer_types=["sliding", "full"], window=3, mixer="linear")
    with pytest.raises(ValueError, match=re.escape("mixer='gated_delta' cannot be combined with attention")):
        AttentionOnlyTransformer(TASK, attention={"sinks": True}, mixer="gated_delta")
