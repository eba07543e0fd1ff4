"""The pieces, one at a time: scores, scaling, softmax, head reshapes, masks, modules, data and runtime."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import mha_lib
from mha_lib import (
    CausalAttention,
    FusedMultiHeadAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttention,
    additive_mask,
    attention_scores,
    causal_mask,
    combine_masks,
    embed_tokens,
    explicit_attention,
    invert_mask,
    journey_batch,
    journey_inputs,
    mask_from_key_padding,
    mask_from_valid_lens,
    masked_softmax,
    merge_heads,
    merge_heads_flat,
    scale_factor,
    scale_scores,
    sdpa_attention,
    split_heads,
    split_heads_flat,
    stable_softmax,
    tokenize,
)

assert_close = torch.testing.assert_close


# --- scores and scaling ---------------------------------------------------------------------------------------


def test_attention_scores_is_every_query_dot_every_key():
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8)
    scores = attention_scores(q, k)
    assert scores.shape == (2, 3, 5, 7)
    assert_close(scores, torch.einsum("bhtd,bhsd->bhts", q, k))
    assert_close(scores[1, 2, 4, 6], q[1, 2, 4] @ k[1, 2, 6])


def test_scale_factor_is_one_over_sqrt_head_dim():
    assert scale_factor(64) == 0.125
    assert scale_factor(1) == 1.0
    assert scale_factor(2) == pytest.approx(1 / math.sqrt(2))
    scores = torch.tensor([[8.0, -16.0]])
    assert torch.equal(scale_scores(scores, 64), torch.tensor([[1.0, -2.0]]))


# --- softmax --------------------------------------------------------------------------------------------------


def test_stable_softmax_matches_torch_softmax():
    x = torch.randn(4, 5, 6)
    assert_close(stable_softmax(x), torch.softmax(x, dim=-1))
    assert_close(stable_softmax(x, dim=1), torch.softmax(x, dim=1))


def test_stable_softmax_survives_large_scores_where_the_naive_formula_overflows():
    x = torch.tensor([1000.0, 1001.0, 1002.0])
    naive = x.exp() / x.exp().sum()  # exp(1000) = inf in float32, inf / inf = nan
    assert torch.isinf(x.exp()).all()
    assert torch.isnan(naive).all()
    stable = stable_softmax(x)
    assert torch.isfinite(stable).all()
    # shifting by a constant changes nothing: same answer as for [0, 1, 2]
    assert_close(stable, torch.softmax(torch.tensor([0.0, 1.0, 2.0]), dim=-1))
    assert_close(stable, torch.tensor([0.0900, 0.2447, 0.6652]), atol=1e-4, rtol=0)


def test_masked_softmax_rows_sum_to_one_and_blocked_positions_are_exactly_zero():
    scores = torch.randn(2, 4, 4) * 10
    keep = causal_mask(4)
    weights = masked_softmax(scores, keep)
    assert_close(weights.sum(-1), torch.ones(2, 4))
    assert torch.all(weights[:, ~keep] == 0)
    assert torch.all(weights[:, keep] > 0)
    # the kept entries are the plain softmax over the kept keys only
    assert_close(weights[:, 2, :3], torch.softmax(scores[:, 2, :3], dim=-1))


def test_masked_softmax_without_mask_is_softmax():
    scores = torch.randn(3, 5)
    assert_close(masked_softmax(scores), torch.softmax(scores, dim=-1))


def test_low_temperature_approaches_one_hot_and_high_temperature_approaches_uniform():
    scores = torch.tensor([[1.0, 3.0, 2.0, 0.5]])
    cold = masked_softmax(scores, temperature=1e-3)
    assert_close(cold, torch.tensor([[0.0, 1.0, 0.0, 0.0]]), atol=1e-6, rtol=0)
    hot = masked_softmax(scores, temperature=1e6)
    assert_close(hot, torch.full((1, 4), 0.25), atol=1e-5, rtol=0)
    # in between, the largest weight shrinks as the temperature rises
    peaks = [masked_softmax(scores, temperature=t).max().item() for t in (0.5, 1.0, 2.0, 4.0)]
    assert peaks == sorted(peaks, reverse=True)


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature_is_softmax_of_scores_divided_by_it(temperature):
    scores, keep = torch.randn(3, 4, 4), causal_mask(4)
    assert_close(masked_softmax(scores, temperature=temperature), torch.softmax(scores / temperature, dim=-1))
    expected = torch.softmax((scores / temperature).masked_fill(~keep, float("-inf")), dim=-1)
    assert_close(masked_softmax(scores, keep, temperature=temperature), expected)


# --- head reshapes --------------------------------------------------------------------------------------------


def test_split_heads_gives_each_head_a_contiguous_slice_of_features():
    B, T, H, Dh = 2, 5, 3, 4
    x = torch.randn(B, T, H * Dh)
    heads = split_heads(x, H)
    assert heads.shape == (B, H, T, Dh)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                assert torch.equal(heads[b, h, t], x[b, t, h * Dh : (h + 1) * Dh])


def test_merge_heads_inverts_split_heads():
    x = torch.randn(2, 5, 12)
    assert torch.equal(merge_heads(split_heads(x, 3)), x)
    heads = torch.randn(2, 3, 5, 4)
    assert torch.equal(split_heads(merge_heads(heads), 3), heads)


def test_flat_head_layout_round_trips_and_folds_heads_into_the_batch():
    x = torch.randn(2, 5, 12)
    flat = split_heads_flat(x, 3)
    assert flat.shape == (6, 5, 4)
    assert torch.equal(flat, split_heads(x, 3).reshape(6, 5, 4))  # row b * H + h is head h of sequence b
    assert torch.equal(flat[1 * 3 + 2], x[1, :, 8:12])
    assert torch.equal(merge_heads_flat(flat, 3), x)


# --- masks ----------------------------------------------------------------------------------------------------


def test_causal_mask_square_keeps_the_diagonal_and_the_past():
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(3), expected)
    assert causal_mask(3).dtype == torch.bool


def test_causal_mask_rectangular_starts_at_the_top_left_corner():
    assert torch.equal(causal_mask(2, 4), torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool))
    assert torch.equal(causal_mask(3, 2), torch.tensor([[1, 0], [1, 1], [1, 1]], dtype=torch.bool))


@pytest.mark.parametrize(("T", "S"), [(3, 3), (2, 5), (5, 2)])
def test_is_causal_agrees_with_pytorch_for_any_query_and_key_length(T, S):
    q, k, v = torch.randn(2, T, 4), torch.randn(2, S, 4), torch.randn(2, S, 4)
    context, _ = explicit_attention(q, k, v, is_causal=True)
    assert_close(context, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_invert_mask_swaps_blocked_and_keep():
    blocked = torch.triu(torch.ones(3, 3), diagonal=1)  # the book's 0/1 float mask, 1 = blocked
    assert torch.equal(invert_mask(blocked), causal_mask(3))
    assert torch.equal(invert_mask(causal_mask(3)), blocked.bool())


def test_mask_from_valid_lens_one_length_per_sequence():
    keep = mask_from_valid_lens(torch.tensor([1, 3]), num_queries=2, num_keys=4)
    assert keep.shape == (2, 1, 2, 4)
    assert torch.equal(keep[0, 0], torch.tensor([[1, 0, 0, 0], [1, 0, 0, 0]], dtype=torch.bool))
    assert torch.equal(keep[1, 0], torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool))


def test_mask_from_valid_lens_one_length_per_query():
    keep = mask_from_valid_lens(torch.tensor([[1, 2], [0, 4]]), num_queries=2, num_keys=4)
    assert keep.shape == (2, 1, 2, 4)
    assert torch.equal(keep[0, 0], torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool))
    assert torch.equal(keep[1, 0], torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool))


def test_mask_from_key_padding_is_the_negation_broadcast_over_heads_and_queries():
    padded = torch.tensor([[False, False, True], [False, True, True]])
    keep = mask_from_key_padding(padded, batch_size=2, num_keys=3)
    assert keep.shape == (2, 1, 1, 3)
    assert torch.equal(keep[:, 0, 0], ~padded)


def test_additive_mask_gives_the_same_softmax_as_the_boolean_mask():
    keep = torch.tensor([[True, False, True], [False, False, True]])
    additive = additive_mask(keep)
    assert additive.dtype == torch.float32
    assert torch.equal(additive, torch.tensor([[0.0, -math.inf, 0.0], [-math.inf, -math.inf, 0.0]]))
    assert additive_mask(keep, torch.float64).dtype == torch.float64
    scores = torch.randn(4, 2, 3)
    assert_close(torch.softmax(scores + additive, dim=-1), masked_softmax(scores, keep))


def test_combine_masks_is_a_broadcasting_and_that_ignores_none():
    causal = causal_mask(3)
    padding = torch.tensor([[[True, True, False]], [[True, True, True]]])  # (2, 1, 3)
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    assert combine_masks(None, causal) is causal
    both = combine_masks(causal, None, padding)
    assert both.shape == (2, 3, 3)
    assert torch.equal(both[0], causal & torch.tensor([True, True, False]))
    assert torch.equal(both[1], causal)


# --- kernels --------------------------------------------------------------------------------------------------


def test_both_kernels_match_pytorch_with_a_padding_mask():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    keep = mask_from_valid_lens(torch.tensor([2, 5]), 4, 5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    explicit, weights = explicit_attention(q, k, v, mask=keep)
    fused, no_weights = sdpa_attention(q, k, v, mask=keep)
    assert_close(explicit, expected)
    assert_close(fused, expected)
    assert no_weights is None
    assert weights.shape == (2, 3, 4, 5)
    assert torch.all(weights[0, ..., 2:] == 0)


# --- modules --------------------------------------------------------------------------------------------------


def test_self_attention_unbatched_equals_batched():
    layer = SelfAttention(3, 2)
    x = journey_inputs()  # (6, 3)
    single, single_weights = layer(x, return_weights=True)
    batched, batched_weights = layer(torch.stack([x, x]), return_weights=True)
    assert single.shape == (6, 2) and single_weights.shape == (6, 6)
    assert batched.shape == (2, 6, 2)
    assert_close(batched[0], single)
    assert_close(batched[1], single)
    assert_close(batched_weights[1], single_weights)


def test_causal_attention_mask_buffer_stays_bool_and_out_of_the_state_dict():
    layer = CausalAttention(3, 2, context_length=6, dropout=0.0).to(torch.float64)
    assert layer.W_query.weight.dtype == torch.float64
    assert layer.causal_mask.dtype == torch.bool  # Module.to(dtype) converts floating tensors only
    assert torch.equal(layer.causal_mask, causal_mask(6))
    assert "causal_mask" in dict(layer.named_buffers())
    assert "causal_mask" not in layer.state_dict()
    assert layer(journey_batch().double()).dtype == torch.float64


def _num_parameters(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(lambda: SelfAttention(3, 2), 3 * 3 * 2, id="self-attention"),
        pytest.param(lambda: CausalAttention(3, 2, 6, 0.0, qkv_bias=True), 3 * (3 * 2 + 2), id="causal-bias"),
        pytest.param(lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2), 2 * 3 * 3 * 2, id="wrapper"),
        pytest.param(
            lambda: MultiHeadAttention(768, 768, 1024, 0.0, 12, qkv_bias=True), 2_362_368, id="gpt2-small-bias"
        ),
        pytest.param(
            lambda: MultiHeadAttention(768, 768, 1024, 0.0, 12), 4 * 768 * 768 + 768, id="gpt2-small-no-bias"
        ),
        pytest.param(
            lambda: FusedMultiHeadAttention(768, 768, 1024, 0.0, 12, qkv_bias=True), 2_362_368, id="fused-bias"
        ),
        pytest.param(
            lambda: MultiHeadAttention(3, 4, 6, 0.0, 2, causal=False, d_kv_in=5),
            3 * 4 + 2 * 5 * 4 + 4 * 4 + 4,
            id="cross-attention",
        ),
    ],
)
def test_parameter_counts(make, expected):
    assert _num_parameters(make()) == expected


def test_multi_head_weights_have_shape_B_H_T_S_and_rows_sum_to_one():
    layer = MultiHeadAttention(6, 6, 8, 0.0, 3, causal=False, d_kv_in=4)
    x, kv = torch.randn(2, 5, 6), torch.randn(2, 7, 4)
    out, weights = layer(x, kv, return_weights=True)
    assert out.shape == (2, 5, 6)
    assert weights.shape == (2, 3, 5, 7)
    assert_close(weights.sum(-1), torch.ones(2, 3, 5))
    assert torch.all(weights > 0)  # not causal: every key gets some weight


@pytest.mark.parametrize("make", [MultiHeadAttention, FusedMultiHeadAttention], ids=["split", "fused"])
def test_causal_weights_are_zero_above_the_diagonal(make):
    layer = make(6, 6, 8, 0.0, 2)
    _, weights = layer(torch.randn(2, 5, 6), return_weights=True)
    above = ~causal_mask(5)
    assert torch.all(weights[..., above] == 0)
    assert torch.all(weights[..., ~above] > 0)
    assert_close(weights.sum(-1), torch.ones(2, 2, 5))


def test_wrapper_weights_stack_the_heads():
    wrapper = MultiHeadAttentionWrapper(3, 2, 6, 0.0, 3)
    out, weights = wrapper(journey_batch(), return_weights=True)
    assert out.shape == (2, 6, 6) and weights.shape == (2, 3, 6, 6)
    for h, head in enumerate(wrapper.heads):
        head_out, head_weights = head(journey_batch(), return_weights=True)
        assert_close(out[..., 2 * h : 2 * h + 2], head_out)
        assert_close(weights[:, h], head_weights)


def test_kernels_give_the_same_module_output():
    explicit = MultiHeadAttention(8, 8, 6, 0.0, 2)
    sdpa = MultiHeadAttention(8, 8, 6, 0.0, 2, kernel="sdpa")
    sdpa.load_state_dict(explicit.state_dict())
    x, lens = torch.randn(3, 6, 8), torch.tensor([6, 2, 4])
    assert_close(sdpa(x, valid_lens=lens), explicit(x, valid_lens=lens))


def test_conversions_preserve_the_function():
    wrapper = MultiHeadAttentionWrapper(4, 2, 6, 0.0, 2, qkv_bias=True)
    x = torch.randn(2, 6, 4)
    split = mha_lib.split_from_wrapper(wrapper)
    assert_close(split(x), wrapper(x))
    assert_close(mha_lib.fused_from_split(split)(x), wrapper(x))
    reference = mha_lib.torch_mha_from(split)
    blocked = invert_mask(causal_mask(6))  # nn.MultiheadAttention's boolean masks mean "blocked"
    expected, _ = reference(x, x, x, attn_mask=blocked, need_weights=False)
    assert_close(split(x), expected)


def test_extra_repr_names_heads_and_kernel():
    text = repr(MultiHeadAttention(768, 768, 1024, 0.1, 12, kernel="sdpa"))
    assert "num_heads=12" in text and "head_dim=64" in text and "kernel='sdpa'" in text
    fused = repr(FusedMultiHeadAttention(8, 8, 4, 0.0, 4))
    assert "num_heads=4" in fused and "kernel='explicit'" in fused
    assert "d_kv_in=5" in repr(MultiHeadAttention(3, 4, 6, 0.0, 2, d_kv_in=5))


# --- data -----------------------------------------------------------------------------------------------------


def test_journey_inputs_are_the_books_embeddings():
    x = journey_inputs()
    assert x.shape == (6, 3) and x.dtype == torch.float32
    assert torch.equal(x[0], torch.tensor([0.43, 0.15, 0.89]))  # "Your"
    assert torch.equal(x[1], torch.tensor([0.55, 0.87, 0.66]))  # "journey"
    assert torch.equal(x[5], torch.tensor([0.05, 0.80, 0.55]))  # "step"
    assert mha_lib.JOURNEY_TOKENS == ("Your", "journey", "starts", "with", "one", "step")


def test_journey_batch_stacks_independent_copies():
    batch = journey_batch(3)
    assert batch.shape == (3, 6, 3)
    for b in range(3):
        assert torch.equal(batch[b], journey_inputs())
    batch[0, 0, 0] = 99.0  # a copy, not an expanded view: the other rows must not change
    assert batch[1, 0, 0] == pytest.approx(0.43)
    assert journey_batch().shape == (2, 6, 3)


def test_tokenize_splits_words_and_punctuation():
    assert tokenize("Your journey starts with one step.") == [
        "Your", "journey", "starts", "with", "one", "step", ".",
    ]
    assert tokenize("LLM with me.郭同学热爱AI喜欢游戏") == [
        "LLM", "with", "me", ".", "郭", "同", "学", "热", "爱", "AI", "喜", "欢", "游", "戏"
    ]
    assert tokenize("어텐션 アテンション") == ["어", "텐", "션", "ア", "テ", "ン", "シ", "ョ", "ン"]
    assert tokenize("Hello, world! It's--done?") == ["Hello", ",", "world", "!", "It", "'", "s", "-", "-", "done", "?"]


def test_embed_tokens_is_a_fixed_lookup_per_token_and_seed():
    tokens = ["the", "cat", "the", "mat"]
    emb = embed_tokens(tokens, 8)
    assert emb.shape == (4, 8)
    assert torch.equal(emb[0], emb[2])  # same token, same row
    assert not torch.equal(emb[0], emb[1])
    torch.manual_seed(999)  # the global generator plays no part
    assert torch.equal(embed_tokens(tokens, 8), emb)
    other = embed_tokens(tokens, 8, seed=1)
    assert not torch.allclose(other[0], emb[0])
    assert torch.equal(other[0], other[2])


def test_toy_sentence_pairs_tokens_with_their_embeddings():
    tokens, emb = mha_lib.toy_sentence("one step, one step", d_model=4)
    assert tokens == ["one", "step", ",", "one", "step"]
    assert torch.equal(emb, embed_tokens(tokens, 4))


# --- runtime --------------------------------------------------------------------------------------------------


def test_get_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert mha_lib.get_device() == torch.device("cpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert mha_lib.get_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # only asks; no tensor is created
    assert mha_lib.get_device() == torch.device("cuda")


def test_make_reproducible_sets_full_precision_and_the_seed():
    torch.set_float32_matmul_precision("medium")
    torch.backends.cuda.matmul.allow_tf32 = True
    mha_lib.make_reproducible(7)
    assert torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False
    first = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(torch.rand(3), first)


# --- both kernels take every mask that broadcasts to the scores (issue 19 §6: a 0-d mask crashed SDPA) -------


@pytest.mark.parametrize("mask_shape", [(), (5,), (1,), (3, 5), (3, 1), (1, 5), (2, 3, 5), (1, 1, 5),
                                        (2, 2, 3, 5), (1, 2, 1, 5), (2, 1, 3, 1)],
                         ids=lambda s: f"{len(s)}d-{'x'.join(map(str, s)) or 'scalar'}")
@pytest.mark.parametrize("is_causal", [False, True])
def test_both_kernels_agree_on_masks_of_every_rank(mask_shape, is_causal):
    generator = torch.Generator().manual_seed(len(mask_shape) * 10 + sum(mask_shape))
    q = torch.randn(2, 2, 3, 4, generator=generator)  # (B, H, T, Dh)
    k, v = torch.randn(2, 2, 5, 4, generator=generator), torch.randn(2, 2, 5, 4, generator=generator)  # S = 5
    mask = torch.rand(mask_shape, generator=generator) > 0.3
    full = mask.expand(2, 2, 3, 5)
    explicit, weights = explicit_attention(q, k, v, mask=mask, is_causal=is_causal)
    fused, _ = sdpa_attention(q, k, v, mask=mask, is_causal=is_causal)
    torch.testing.assert_close(fused, explicit)
    torch.testing.assert_close(explicit, explicit_attention(q, k, v, mask=full, is_causal=is_causal)[0])
    torch.testing.assert_close(fused, sdpa_attention(q, k, v, mask=full, is_causal=is_causal)[0])
    keep = full & causal_mask(3, 5) if is_causal else full
    assert torch.equal(weights > 0, keep & torch.ones_like(weights, dtype=torch.bool))
