"""Greedy generation with and without a KV cache (``mha_lib.induction.model.generate``, chapter 12).

With a cache the model runs the prompt once, then one token per step; without, the whole sequence at every step.
Both must write the same tokens: on the shipped ``two_layer`` run (where the tokens are also checked against a
slow loop written here and against the true continuation), and on random untrained models of many sizes, where
the cached forward's logits must also equal the full forward's.
"""

from __future__ import annotations

import random

import pytest
import torch

from mha_lib import KVCache
from mha_lib.induction.model import AttentionOnlyTransformer, InductionTask, generate, load_run, new_model, \
    repeated_sequences

TASK = InductionTask()


def slow_greedy(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding written out: the whole sequence through the model, take the last position's argmax."""
    tokens = prompt.clone()
    with torch.no_grad():
        for _ in range(new_tokens):
            tokens = torch.cat([tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


@pytest.fixture(scope="module")
def two_layer():
    return load_run("two_layer").model


def test_the_shipped_run_writes_the_same_tokens_with_and_without_a_cache(two_layer):
    batch = repeated_sequences(TASK, 64, torch.Generator().manual_seed(7))
    start = TASK.max_period + 1  # every sequence has shown its whole segment once, and one token more
    prompt = batch.tokens[:, :start]
    new = TASK.seq_len - start
    cached = generate(two_layer, prompt, new, use_cache=True)
    plain = generate(two_layer, prompt, new, use_cache=False)
    assert cached.shape == (64, TASK.seq_len) and torch.equal(cached[:, :start], prompt)
    assert torch.equal(cached, plain)
    assert torch.equal(cached, slow_greedy(two_layer, prompt, new))
    # the trained model continues the repetition (it is an induction model, not a random one)
    assert (cached[:, start:] == batch.tokens[:, start:]).float().mean() > 0.9


@pytest.mark.parametrize("seed", range(12))
def test_random_models_write_the_same_tokens_and_logits_with_a_cache(seed):
    rng = random.Random(seed)
    task = InductionTask(vocab_size=rng.randint(2, 40), seq_len=rng.randint(25, 40))
    heads = rng.choice([1, 2, 4])
    torch.manual_seed(seed)
    model = AttentionOnlyTransformer(task, num_layers=rng.randint(1, 3), d_model=heads * rng.choice([2, 4, 8]),
                                     num_heads=heads).eval()
    B, T0 = rng.randint(1, 4), rng.randint(1, 10)
    prompt = torch.randint(0, task.vocab_size, (B, T0), generator=torch.Generator().manual_seed(seed))
    new = rng.randint(0, task.seq_len - T0)
    cached = generate(model, prompt, new)  # use_cache=True is the default
    assert torch.equal(cached, generate(model, prompt, new, use_cache=False))
    assert torch.equal(cached, slow_greedy(model, prompt, new))
    # the logits themselves: the sequence fed in uneven chunks through one cache per layer == one full forward
    caches, pieces, start = model.new_caches(), [], 0
    with torch.no_grad():
        full = model(cached)
        while start < cached.shape[1]:
            n = min(rng.randint(1, 5), cached.shape[1] - start)
            pieces.append(model(cached[:, start:start + n], kv_caches=caches))
            start += n
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)
    assert [c.seen for c in caches] == [cached.shape[1]] * model.num_layers


def test_zero_new_tokens_returns_the_prompt_and_the_mode_is_restored():
    model = new_model("two_layer").train()
    prompt = torch.tensor([[1, 2, 3]])
    for use_cache in (True, False):
        assert torch.equal(generate(model, prompt, 0, use_cache=use_cache), prompt)
        generate(model, prompt, 4, use_cache=use_cache)
        assert model.training


def test_the_cached_model_refuses_what_does_not_fit():
    model = new_model("two_layer")
    tokens = torch.tensor([[1, 2, 3]])
    with pytest.raises(TypeError, match=r"kv_caches must be a list of 2 KVCache objects, one per layer "
                                        r"\(model.new_caches\(\)\), got KVCache"):
        model(tokens, kv_caches=KVCache())
    with pytest.raises(TypeError, match=r"kv_caches must be a list of 2 KVCache objects.*got list"):
        model(tokens, kv_caches=[KVCache()])
    caches = model.new_caches()
    model(torch.zeros(1, 24, dtype=torch.long), kv_caches=caches)
    with pytest.raises(ValueError, match=r"kv_caches have seen 24 tokens and tokens brings 3 more: 27 positions "
                                         r"exceed seq_len = 25"):
        model(tokens, kv_caches=caches)


@pytest.mark.parametrize("call, error, message", [
    (lambda m: generate(m, torch.tensor([[1, 2, 3]]), 23), ValueError,
     r"prompt \(3 tokens\) \+ new_tokens \(23\) must fit seq_len = 25"),
    (lambda m: generate(m, torch.tensor([[1, 2, 3]]), -1), ValueError,
     r"new_tokens must be an int in \[0, inf\], got -1"),
    (lambda m: generate(m, torch.tensor([[1, 2, 3]]), 2.0), TypeError, r"new_tokens must be an int, got float"),
    (lambda m: generate(m, torch.tensor([[1, 2, 3]]), 2, use_cache="yes"), TypeError, r"use_cache"),
    (lambda m: generate(m, torch.tensor([1, 2, 3]), 2), ValueError,
     r"prompt must be an int64 tensor of shape \(B, T\), got torch.int64 \(3,\)"),
    (lambda m: generate(m, torch.tensor([[1, 2, 40]]), 2), ValueError, r"prompt must hold token ids in \[0, 31\]"),
    (lambda m: generate(m, torch.tensor([[1.0, 2.0]]), 2), ValueError, r"prompt must be an int64 tensor"),
    (lambda m: generate(torch.nn.Linear(2, 2), torch.tensor([[1]]), 2), TypeError,
     r"model must be an AttentionOnlyTransformer"),
    (lambda m: generate(new_model("no_mask"), torch.tensor([[1]]), 2), ValueError,
     r"use_cache=True needs a causal model: this one was built with causal=False"),
])
def test_generate_refuses_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call(new_model("two_layer"))


def test_a_model_without_the_mask_generates_without_a_cache():
    model = new_model("no_mask")
    out = generate(model, torch.tensor([[1, 2]]), 3, use_cache=False)
    assert out.shape == (1, 5) and torch.equal(out, slow_greedy(model.eval(), torch.tensor([[1, 2]]), 3))


def test_a_refused_generation_leaves_the_models_mode_alone():
    model = new_model("no_mask").train()
    with pytest.raises(ValueError, match=r"use_cache=True needs a causal model"):
        generate(model, torch.tensor([[1]]), 2)
    assert model.training
