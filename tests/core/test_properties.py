"""Property-based tests (hypothesis) over mha_lib's public API.

Valid inputs drawn at random must agree with the references: ``F.scaled_dot_product_attention``,
``nn.MultiheadAttention``, ``torch.softmax`` and formulas written out here. Invalid inputs drawn at random must
raise the documented error type with the argument's name in the message. Examples are few and small (the whole
file runs in well under 30 s on one core) and derandomized, so a failure reproduces on every run.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from torch import nn

import mha_lib
from mha_lib import (
    MultiHeadAttention,
    attention_parameter_count,
    causal_mask,
    combine_masks,
    divisors,
    explicit_attention,
    masked_softmax,
    merge_heads,
    merge_heads_flat,
    sdpa_attention,
    split_heads,
    split_heads_flat,
    stable_softmax,
    tokenize,
    torch_mha_from,
)

# hypothesis caches what it learns in .hypothesis/ under the working directory: keep it out of the clone
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "mha_lib-hypothesis")
# derandomize: the same examples on every run; database=None: nothing written to .hypothesis/ (CI wants a clean tree)
FEW = settings(max_examples=30, deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

small = st.integers(min_value=1, max_value=5)
seeds = st.integers(min_value=0, max_value=2**31 - 1)


def randn(seed: int, *shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def random_mask(seed: int, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed + 1)) < 0.7  # some dead rows too


# --- valid inputs agree with the references ---------------------------------------------------------------------


@FEW
@given(B=small, H=small, T=small, S=small, Dh=small, seed=seeds, causal=st.booleans(), masked=st.booleans(),
       scale=st.one_of(st.none(), st.floats(min_value=0.01, max_value=4.0)))
def test_kernels_agree_with_sdpa(B, H, T, S, Dh, seed, causal, masked, scale):
    q, k, v = randn(seed, B, H, T, Dh), randn(seed + 1, B, H, S, Dh), randn(seed + 2, B, H, S, Dh)
    mask = random_mask(seed, B, 1, T, S) if masked else None
    keep = combine_masks(causal_mask(T, S) if causal else None, mask)
    # the reference: SDPA with the combined keep mask, and a query with no key left gets 0 (mha_lib's convention)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)
    if keep is not None:
        reference = reference.masked_fill(~keep.any(-1, keepdim=True), 0.0)
    for kernel in (explicit_attention, sdpa_attention):
        context, _ = kernel(q, k, v, mask=mask, scale=scale, is_causal=causal)
        torch.testing.assert_close(context, reference, atol=1e-10, rtol=1e-10)


@FEW
@given(D_per_head=small, H=small, T=small, seed=seeds, causal=st.booleans(), padded=st.booleans(),
       bias=st.booleans(), training=st.booleans())
def test_multi_head_attention_agrees_with_torch(D_per_head, H, T, seed, causal, padded, bias, training):
    D = D_per_head * H
    torch.manual_seed(seed)
    mha = MultiHeadAttention(D, D, T, 0.0, H, qkv_bias=bias, causal=causal).double().train(training)
    ref = torch_mha_from(mha)
    assert ref.training == training  # conversions keep the mode
    x = randn(seed, 2, T, D)
    padding = torch.zeros(2, T, dtype=torch.bool)
    if padded:
        padding[1, T // 2 + 1:] = True  # sequence 1 ends early; key 0 is never padding
    blocked = ~causal_mask(T) if causal else None  # nn.MultiheadAttention's bool masks mean *blocked*
    expected, _ = ref(x, x, x, attn_mask=blocked, key_padding_mask=padding if padded else None, need_weights=False)
    got = mha(x, key_padding_mask=padding if padded else None)
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-10)


@SOME
@given(shape=st.lists(small, min_size=1, max_size=3), seed=seeds, data=st.data())
def test_stable_softmax_is_torch_softmax_on_any_dim(shape, seed, data):
    x = randn(seed, *shape) * 30
    dim = data.draw(st.integers(min_value=-len(shape), max_value=len(shape) - 1), label="dim")
    torch.testing.assert_close(stable_softmax(x, dim=dim), torch.softmax(x, dim=dim))


@SOME
@given(T=small, S=small, seed=seeds, temperature=st.floats(min_value=0.05, max_value=20.0))
def test_temperature_divides_the_scores(T, S, seed, temperature):
    x = randn(seed, T, S)
    torch.testing.assert_close(masked_softmax(x, temperature=temperature), torch.softmax(x / temperature, dim=-1))


@SOME
@given(T=small, S=small, seed=seeds, magnitude=st.floats(min_value=0.0, max_value=1e30),
       temperature=st.floats(min_value=torch.finfo(torch.float32).tiny, max_value=3e38))
def test_any_accepted_temperature_gives_finite_rows_that_sum_to_one(T, S, seed, magnitude, temperature):
    x = randn(seed, T, S, dtype=torch.float32) * magnitude
    mask = random_mask(seed, T, S)
    weights = masked_softmax(x, mask, temperature=temperature)
    assert torch.isfinite(weights).all()
    live = mask.any(-1)
    torch.testing.assert_close(weights.sum(-1)[live], torch.ones(int(live.sum())))
    assert (weights[~mask] == 0).all()


@SOME
@given(B=small, T=small, Dh=small, H=small, seed=seeds)
def test_split_and_merge_heads_are_inverse_and_follow_the_slices(B, T, Dh, H, seed):
    x = randn(seed, B, T, H * Dh)
    heads = split_heads(x, H)  # (B, H, T, Dh)
    for h in range(H):
        torch.testing.assert_close(heads[:, h], x[..., h * Dh:(h + 1) * Dh], rtol=0, atol=0)
    assert torch.equal(merge_heads(heads), x)
    assert torch.equal(merge_heads_flat(split_heads_flat(x, H), H), x)


@SOME
@given(n=st.integers(min_value=1, max_value=5000))
def test_divisors_are_all_the_divisors(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@FEW
@given(D_per_head=st.integers(min_value=1, max_value=8), H=small, bias=st.booleans())
def test_parameter_count_matches_torch(D_per_head, H, bias):
    D = D_per_head * H
    layer = nn.MultiheadAttention(D, H, bias=bias)
    assert attention_parameter_count(D, bias) == sum(p.numel() for p in layer.parameters())


@SOME
@given(shapes=st.lists(st.lists(st.sampled_from([1, 3]), min_size=1, max_size=3), min_size=1, max_size=3),
       seed=seeds)
def test_combine_masks_is_a_broadcast_and(shapes, seed):
    masks = [random_mask(seed + i, *shape) for i, shape in enumerate(shapes)]
    expected = masks[0]
    for m in masks[1:]:
        expected = torch.logical_and(expected, m)
    assert torch.equal(combine_masks(*masks), expected)


@SOME
@given(lens=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=4), T=small)
def test_valid_lens_mask_keeps_the_first_keys(lens, T):
    keep = mha_lib.mask_from_valid_lens(torch.tensor(lens), T, 6)  # (B, 1, T, S)
    for b, n in enumerate(lens):
        assert keep[b, 0].sum(-1).tolist() == [n] * T and keep[b, 0, :, :n].all()


WORD = st.text(alphabet="abcXYZ019_", min_size=1, max_size=5)
PIECES = st.one_of(
    WORD,
    st.sampled_from(["郭", "同", "学", "，", ".", "!", "é", "e\u0301", "👍🏽", "❤️", "👩🏽\u200d💻", "🇫🇷",
                     "🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F"]),  # flag of Scotland (tags)
)


@SOME
@given(pieces=st.lists(PIECES, min_size=1, max_size=8))
def test_tokenize_keeps_every_character_but_spaces_and_never_splits_a_cluster(pieces):
    text = " ".join(pieces)
    tokens = tokenize(text)
    assert "".join(tokens) == text.replace(" ", "")  # nothing lost, nothing added
    extenders = {"\u200d", "\ufe0f", "\u0301", "🏽"} | {chr(c) for c in range(0xE0020, 0xE0080)}
    for token in tokens:
        assert token[0] not in extenders, tokens  # no token starts with a joiner, a selector or a modifier
    for piece in pieces:
        if len(piece) > 1 and not piece.isascii() and not piece.isalnum():  # an emoji sequence or a flag
            assert piece in tokens, (piece, tokens)


# --- invalid inputs raise the documented error, naming the argument ----------------------------------------------

NOT_BOOL = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5), st.none(),
                     st.just(torch.tensor(True)), st.lists(st.booleans(), max_size=2))


@SOME
@given(value=NOT_BOOL)
def test_flags_accept_only_true_or_false(value):
    mha = MultiHeadAttention(4, 4, 3, 0.0, 2)
    x = torch.randn(1, 3, 4)
    for name, call in (
        ("return_weights", lambda: mha(x, return_weights=value)),
        ("is_causal", lambda: explicit_attention(x, x, x, is_causal=value)),
        ("qkv_bias", lambda: MultiHeadAttention(4, 4, 3, 0.0, 2, qkv_bias=value)),
        ("causal", lambda: MultiHeadAttention(4, 4, 3, 0.0, 2, causal=value)),
        ("bias", lambda: mha_lib.ProjectionHeads(4, 2, bias=value)),
        ("bias", lambda: attention_parameter_count(4, value)),
    ):
        with pytest.raises(TypeError, match=f"^{name} must be True or False, got "):
            call()


@SOME
@given(value=st.one_of(st.integers(max_value=0), st.integers(min_value=-(10**30), max_value=0)))
def test_sizes_must_be_positive(value):
    for name, call in (
        ("num_heads", lambda: MultiHeadAttention(4, 4, 3, 0.0, value)),
        ("d_in", lambda: MultiHeadAttention(value, 4, 3, 0.0, 2)),
        ("context_length", lambda: MultiHeadAttention(4, 4, value, 0.0, 2)),
        ("head_dim", lambda: mha_lib.scale_factor(value)),
        ("num_queries", lambda: causal_mask(value)),
        ("n", lambda: divisors(value)),
        ("batch_size", lambda: mha_lib.mask_from_key_padding(torch.zeros(1, 2, dtype=torch.bool), value, 2)),
    ):
        with pytest.raises(ValueError, match=rf"^{name} must be a positive int \(>= 1\), got -?\d"):
            call()


@SOME
@given(value=st.one_of(st.floats(allow_nan=True), st.text(max_size=3), st.booleans(), st.none()))
def test_sizes_must_be_ints(value):
    for name, call in (
        ("num_heads", lambda: MultiHeadAttention(4, 4, 3, 0.0, value)),
        ("num_keys", lambda: mha_lib.mask_from_valid_lens(torch.tensor([1]), 2, value)),
        ("n", lambda: divisors(value)),
    ):
        with pytest.raises(TypeError, match=f"^{name} must be a positive int, got "):
            call()


@SOME
@given(value=st.one_of(st.floats(max_value=0.0), st.just(math.inf), st.just(math.nan)))
def test_temperature_and_scale_must_be_finite_and_positive(value):
    x = torch.randn(2, 3)
    with pytest.raises(ValueError, match="^temperature must be a finite float > 0, got "):
        masked_softmax(x, temperature=value)
    with pytest.raises(ValueError, match="^scale must be a finite float > 0, got "):
        explicit_attention(x, x, x, scale=value)


@SOME
@given(value=st.floats(min_value=1e-320, max_value=1e-39))
def test_a_temperature_too_small_for_float32_is_refused(value):
    with pytest.raises(ValueError, match=r"^temperature=\S+ is too small for torch.float32 tensors"):
        masked_softmax(torch.randn(2, 3), temperature=value)


@SOME
@given(seed=st.one_of(st.integers(max_value=-1), st.integers(min_value=2**64), st.floats(), st.text(max_size=3),
                      st.booleans()))
def test_seeds_are_checked(seed):
    error = ValueError if isinstance(seed, int) and not isinstance(seed, bool) else TypeError
    with pytest.raises(error, match=r"^seed must be an int in \[0, 2\*\*64 - 1\], got "):
        mha_lib.make_reproducible(seed)
    with pytest.raises(error, match=r"^seed must be an int in \[0, 2\*\*64 - 1\], got "):
        mha_lib.embed_tokens(["a"], 2, seed=seed)


@SOME
@given(decimals=st.one_of(st.integers(max_value=-1), st.integers(min_value=17), st.floats(), st.text(max_size=2)))
def test_show_decimals_are_checked(decimals):
    error = ValueError if isinstance(decimals, int) else TypeError
    with pytest.raises(error, match="^decimals must be an int"):
        mha_lib.show(torch.ones(2), decimals=decimals)


BAD_DTYPES = st.sampled_from([torch.int64, torch.int32, torch.bool, torch.uint8, torch.complex64])


@SOME
@given(dtype=BAD_DTYPES, which=st.sampled_from(["q", "k", "v"]), kernel=st.sampled_from(["explicit", "sdpa"]))
def test_kernels_refuse_non_real_float_tensors_by_name(dtype, which, kernel):
    tensors = {name: torch.randn(1, 2, 3) for name in "qkv"}
    tensors[which] = tensors[which].to(dtype)
    with pytest.raises(TypeError, match=f"^{which} must be a (real )?floating-point tensor, got dtype {dtype}"):
        mha_lib.KERNELS[kernel](**tensors)


@SOME
@given(thing=st.one_of(st.integers(), st.floats(), st.text(max_size=3), st.lists(st.floats(), max_size=3)),
       which=st.sampled_from(["q", "k"]))
def test_attention_scores_refuses_non_tensors_by_name(thing, which):
    args = {"q": torch.ones(2, 3), "k": torch.ones(2, 3)}
    args[which] = thing
    with pytest.raises(TypeError, match=f"^{which} must be a torch.Tensor, got {type(thing).__name__}$"):
        mha_lib.attention_scores(**args)


@SOME
@given(shape=st.lists(small, min_size=1, max_size=3), seed=seeds)
def test_sparse_inputs_are_refused_by_name(shape, seed):
    x = randn(seed, *shape, dtype=torch.float32).to_sparse()
    with pytest.raises(TypeError, match=r"^x must be a dense tensor, got layout torch.sparse_coo; .*to_dense\(\)"):
        stable_softmax(x)
    with pytest.raises(TypeError, match=r"^scores must be a dense tensor"):
        masked_softmax(x)
