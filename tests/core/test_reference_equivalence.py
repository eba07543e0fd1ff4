"""mha_lib computes the same numbers as independent references, over many random configurations.

References: ``F.scaled_dot_product_attention`` and a plain softmax written out here, ``nn.MultiheadAttention``,
D2L 1.0.3's ``MultiHeadAttention`` / ``masked_softmax`` / ``transpose_qkv``, and mha_lib's own layers against
each other (wrapper -> split -> fused, explicit kernel -> sdpa kernel).

Every configuration is drawn from its own seed (``random.Random(seed)`` for the sizes and flags,
``torch.Generator().manual_seed(seed)`` for the tensors): batch 1-4, query length T 1-12, key length S 1-12
for cross-attention, widths 1-12, a head count among the divisors of the width, qkv_bias, causal on/off,
no mask / key_padding_mask / valid_lens (B,) or (B, T) (often leaving rows with nothing to attend to),
float32 and float64.

Random configurations, 690 in all (test function: count, what is compared):
    test_kernels_match_references            160  both kernels vs F.scaled_dot_product_attention and a plain
                                                  masked softmax (weights too)
    test_mha_matches_torch_mha               140  MultiHeadAttention, both kernels, vs nn.MultiheadAttention
                                                  built by torch_mha_from
    test_mha_matches_hand_copied_torch_mha    40  the same with nn.MultiheadAttention's weights copied by hand
    test_mha_matches_d2l                      80  MultiHeadAttention, both kernels, vs d2l.MultiHeadAttention
    test_masked_softmax_matches_d2l           40  masked_softmax + mask_from_valid_lens vs d2l.masked_softmax
    test_flat_heads_match_d2l                 30  split/merge_heads_flat vs d2l's transpose_qkv/transpose_output
    test_split_from_wrapper_matches_wrapper   40  MultiHeadAttentionWrapper vs split_from_wrapper (both kernels)
    test_wrapper_matches_hand_split           20  MultiHeadAttentionWrapper vs its weights rearranged by hand
    test_fused_from_split_matches_split       60  MultiHeadAttention vs fused_from_split (both kernels)
    test_kernels_agree_inside_modules         60  explicit vs sdpa kernel in MultiHeadAttention and
                                                  FusedMultiHeadAttention: outputs, input and parameter grads
    test_explicit_dropout_is_torch_dropout    20  explicit kernel's dropout == F.dropout of the weights, same seed
Fixed-seed tests cover fully masked rows and the rest of dropout's behaviour.

A fully masked row (a query with no key to attend to) is *defined* by mha_lib to give weights 0 and context 0;
nn.MultiheadAttention gives NaN there and D2L gives uniform weights, so those rows are compared with mha_lib's
definition, never with the references.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from d2l import torch as d2l
from torch import nn

import mha_lib

MAX_LEN = 12  # longest T and S drawn; also the modules' context_length
PADDINGS = ("none", "key_padding", "valid_lens_b", "valid_lens_bt")
KERNEL_NAMES = ("explicit", "sdpa")


# --- helpers --------------------------------------------------------------------------------------------------


def tolerances(dtype: torch.dtype) -> dict:
    return {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, **overrides) -> None:
    torch.testing.assert_close(actual, expected, **{**tolerances(actual.dtype), **overrides})


def divisors_of(n: int) -> list[int]:
    # written out here so that the configurations do not depend on mha_lib.divisors
    return [d for d in range(1, n + 1) if n % d == 0]


def plain_attention(q, k, v, keep=None, scale=None):
    """Attention written out with torch.softmax; fully masked rows set to 0 (mha_lib's definition)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if keep is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
        dead = ~keep.any(dim=-1, keepdim=True)
        weights = torch.where(dead, torch.zeros_like(weights), weights)  # NaN rows -> 0
    return weights @ v, weights


def causal_keep(T: int, S: int) -> torch.Tensor:
    # top-left triangle, as F.scaled_dot_product_attention(is_causal=True) builds it
    return torch.ones(T, S, dtype=torch.bool).tril()


@dataclass(frozen=True)
class Case:
    """One random layer configuration."""

    seed: int
    dtype: torch.dtype
    batch: int
    q_len: int
    kv_len: int
    d_in: int
    d_kv_in: int
    d_out: int
    num_heads: int
    qkv_bias: bool
    causal: bool
    padding: str
    cross: bool


def draw_case(seed, *, cross=True, causal=True, square=False, paddings=PADDINGS) -> Case:
    """``cross``/``causal``: whether they may be drawn; ``square``: d_in == d_out (nn.MultiheadAttention)."""
    rng = random.Random(seed)
    dtype = rng.choice((torch.float32, torch.float64))
    batch = rng.randint(1, 4)
    q_len = rng.randint(1, MAX_LEN)
    is_cross = cross and rng.random() < 0.5
    kv_len = rng.randint(1, MAX_LEN) if is_cross else q_len
    d_out = rng.randint(1, 12)
    num_heads = rng.choice(divisors_of(d_out))
    d_in = d_out if square else rng.randint(1, 12)
    d_kv_in = rng.randint(1, 12) if is_cross else d_in
    return Case(
        seed=seed, dtype=dtype, batch=batch, q_len=q_len, kv_len=kv_len, d_in=d_in, d_kv_in=d_kv_in,
        d_out=d_out, num_heads=num_heads, qkv_bias=rng.random() < 0.5, causal=causal and rng.random() < 0.5,
        padding=rng.choice(paddings), cross=is_cross,
    )


def draw_padding(case: Case, rng: random.Random, gen: torch.Generator):
    """The padding argument(s) for mha_lib's forward, and the keep mask (B, 1, T, S) it means, built here."""
    B, T, S = case.batch, case.q_len, case.kv_len
    keep = torch.ones(B, 1, T, S, dtype=torch.bool)
    if case.causal:
        keep &= causal_keep(T, S)
    if case.padding == "none":
        return {}, keep
    if case.padding == "key_padding":
        padded = torch.rand(B, S, generator=gen) < 0.3  # True = padding
        for b in range(B):
            if rng.random() < 0.25:
                padded[b] = True  # a sequence that is all padding: every query of it is fully masked
        return {"key_padding_mask": padded}, keep & ~padded[:, None, None, :]
    if case.padding == "valid_lens_b":
        lens = torch.tensor([0 if rng.random() < 0.2 else rng.randint(1, S) for _ in range(B)])
        return {"valid_lens": lens}, keep & (torch.arange(S) < lens[:, None, None, None])
    lens = torch.tensor([[0 if rng.random() < 0.15 else rng.randint(1, S) for _ in range(T)] for _ in range(B)])
    return {"valid_lens": lens}, keep & (torch.arange(S) < lens[:, None, :, None])


def draw_inputs(case: Case):
    """x (B, T, d_in), kv (B, S, d_kv_in) or None, padding kwargs, keep mask (B, 1, T, S)."""
    rng = random.Random(10_000 + case.seed)
    gen = torch.Generator().manual_seed(case.seed)
    x = torch.randn(case.batch, case.q_len, case.d_in, generator=gen, dtype=case.dtype)
    kv = torch.randn(case.batch, case.kv_len, case.d_kv_in, generator=gen, dtype=case.dtype) if case.cross else None
    padding, keep = draw_padding(case, rng, gen)
    return x, kv, padding, keep


def build_mha(case: Case, kernel: str = "explicit", dropout: float = 0.0) -> mha_lib.MultiHeadAttention:
    torch.manual_seed(case.seed)  # same seed -> same weights, whatever the kernel
    mha = mha_lib.MultiHeadAttention(
        case.d_in, case.d_out, MAX_LEN, dropout, case.num_heads, case.qkv_bias,
        kernel=kernel, causal=case.causal, d_kv_in=case.d_kv_in if case.cross else None,
    )
    return mha.to(case.dtype).eval()


def run_mha(module, x, kv, padding, kernel):
    """(output, weights or None): only the explicit kernel can return the weights."""
    args = (x,) if kv is None else (x, kv)
    if kernel == "explicit":
        return module(*args, **padding, return_weights=True)
    return module(*args, **padding), None


def check_dead_rows(out, weights, keep, out_proj):
    """Fully masked queries: weights 0, context 0, so the output is out_proj's bias; never NaN."""
    assert torch.isfinite(out).all()
    dead = ~keep.any(dim=-1)[:, 0]  # (B, T)
    if weights is not None:
        assert torch.isfinite(weights).all()
        assert (weights.transpose(1, 2)[dead] == 0).all()
    expected = out_proj.bias.detach().expand(int(dead.sum()), -1)
    assert_close(out[dead], expected)
    return ~dead


# --- a. kernels vs F.scaled_dot_product_attention and a plain softmax -----------------------------------------


KERNEL_MASKS = ("none", "dense_ts", "dense_bhts", "key_padding", "valid_lens")


def draw_kernel_case(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    dtype = rng.choice((torch.float32, torch.float64))
    B, H, T, S = rng.randint(1, 4), rng.randint(1, 3), rng.randint(1, MAX_LEN), rng.randint(1, MAX_LEN)
    Dh, Dv = rng.randint(1, 8), rng.randint(1, 8)
    q = torch.randn(B, H, T, Dh, generator=gen, dtype=dtype)
    k = torch.randn(B, H, S, Dh, generator=gen, dtype=dtype)
    v = torch.randn(B, H, S, Dv, generator=gen, dtype=dtype)
    kind = rng.choice(KERNEL_MASKS)
    if kind == "none":
        mask = None
    elif kind == "dense_ts":
        mask = torch.rand(T, S, generator=gen) < 0.7
    elif kind == "dense_bhts":
        mask = torch.rand(B, H, T, S, generator=gen) < 0.6
    elif kind == "key_padding":
        mask = torch.rand(B, 1, 1, S, generator=gen) < 0.7
    else:
        lens = torch.randint(0, S + 1, (B, 1, T, 1), generator=gen)
        mask = torch.arange(S) < lens
    is_causal = rng.random() < 0.5
    scale = None if rng.random() < 0.5 else rng.uniform(0.1, 2.0)
    return q, k, v, mask, is_causal, scale


@pytest.mark.parametrize("seed", range(160))
def test_kernels_match_references(seed):
    q, k, v, mask, is_causal, scale = draw_kernel_case(seed)
    T, S = q.shape[-2], k.shape[-2]
    keep = mask if not is_causal else (causal_keep(T, S) if mask is None else causal_keep(T, S) & mask)
    # SDPA refuses attn_mask together with is_causal: fold the triangle into the mask ourselves
    ref_context = F.scaled_dot_product_attention(
        q, k, v, attn_mask=keep if mask is not None else None, is_causal=is_causal and mask is None, scale=scale
    )
    plain_context, plain_weights = plain_attention(q, k, v, keep, scale)

    explicit_context, explicit_weights = mha_lib.explicit_attention(q, k, v, mask, scale=scale, is_causal=is_causal)
    sdpa_context, no_weights = mha_lib.sdpa_attention(q, k, v, mask, scale=scale, is_causal=is_causal)
    assert no_weights is None
    for context in (explicit_context, sdpa_context):
        assert context.shape == (*q.shape[:-1], v.shape[-1])
        assert torch.isfinite(context).all()
    assert torch.isfinite(explicit_weights).all()

    # everywhere, dead rows included: mha_lib's definition (weights 0, context 0)
    assert_close(explicit_weights, plain_weights)
    assert_close(explicit_context, plain_context)
    assert_close(sdpa_context, plain_context)

    # SDPA itself, on the rows that can attend to something
    full = (*q.shape[:-1], S)
    live = keep.expand(full).any(dim=-1) if keep is not None else torch.ones(full[:-1], dtype=torch.bool)
    assert_close(explicit_context[live], ref_context[live])
    assert_close(sdpa_context[live], ref_context[live])
    # a live row's weights sum to 1, a dead row's to 0
    assert_close(explicit_weights.sum(-1), live.to(q.dtype))


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_fully_masked_rows_give_zero_not_nan(kernel, dtype):
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, 4, 3, generator=gen, dtype=dtype, requires_grad=True) for _ in range(3))
    keep = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    keep[0, :, 1] = False  # query 1 of sequence 0 may look at nothing
    keep[1] = False  # sequence 1: every query fully masked
    context, weights = mha_lib.KERNELS[kernel](q, k, v, keep)
    dead = ~keep.any(-1).expand(2, 2, 4)
    assert torch.isfinite(context).all()
    assert (context[dead] == 0).all()
    assert (context[~dead].abs() > 0).any()
    if weights is not None:
        assert (weights[dead] == 0).all()
        assert_close(weights[~dead].sum(-1), torch.ones(int((~dead).sum()), dtype=dtype))
    # gradients stay finite too, and nothing flows back from a row that attends to nothing
    context.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert_close(q.grad[dead], torch.zeros_like(q.grad[dead]), atol=1e-6, rtol=0)
    assert (k.grad[1] == 0).all() and (v.grad[1] == 0).all()


# --- b. MultiHeadAttention vs nn.MultiheadAttention -----------------------------------------------------------


def torch_mha_masks(case: Case, padding: dict, keep: torch.Tensor):
    """nn.MultiheadAttention's (attn_mask, key_padding_mask): boolean, True = BLOCKED."""
    B, H, T, S = case.batch, case.num_heads, case.q_len, case.kv_len
    if "valid_lens" in padding:  # no valid_lens there: a per-(batch·head) 3-D mask, batch-major
        return (~keep).expand(B, H, T, S).reshape(B * H, T, S), None
    attn_mask = ~torch.ones(T, S, dtype=torch.bool).tril() if case.causal else None
    return attn_mask, padding.get("key_padding_mask")


def compare_with_torch_mha(case, mha, ref, x, kv, padding, keep, kernel):
    kv_input = x if kv is None else kv
    attn_mask, key_padding_mask = torch_mha_masks(case, padding, keep)
    ref_out, ref_weights = ref(
        x, kv_input, kv_input, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
        need_weights=True, average_attn_weights=False,
    )  # (B, T, D), (B, H, T, S)
    out, weights = run_mha(mha, x, kv, padding, kernel)
    live = check_dead_rows(out, weights, keep, mha.out_proj)  # nn.MultiheadAttention gives NaN there
    assert_close(out[live], ref_out[live])
    if weights is not None:
        assert_close(weights.transpose(1, 2)[live], ref_weights.transpose(1, 2)[live])
    return int(live.sum())


@pytest.mark.parametrize("seed", range(140))
def test_mha_matches_torch_mha(seed):
    case = draw_case(seed, square=True)
    x, kv, padding, keep = draw_inputs(case)
    for kernel in KERNEL_NAMES:
        mha = build_mha(case, kernel)
        ref = mha_lib.torch_mha_from(mha).eval()
        assert ref.batch_first and ref.num_heads == case.num_heads
        compare_with_torch_mha(case, mha, ref, x, kv, padding, keep, kernel)


def hand_copied_torch_mha(mha: mha_lib.MultiHeadAttention) -> nn.MultiheadAttention:
    """nn.MultiheadAttention with mha's weights, copied without mha_lib.torch_mha_from."""
    ref = nn.MultiheadAttention(
        mha.d_out, mha.num_heads, bias=True, batch_first=True, kdim=mha.d_kv_in, vdim=mha.d_kv_in
    ).to(mha.W_query.weight.dtype)
    zeros = torch.zeros(mha.d_out, dtype=mha.W_query.weight.dtype)
    with torch.no_grad():
        if mha.d_kv_in == mha.d_out:  # one packed (3·D, D) matrix, rows [W_q; W_k; W_v]
            ref.in_proj_weight.copy_(torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]))
        else:  # kdim != embed_dim: three separate matrices
            ref.q_proj_weight.copy_(mha.W_query.weight)
            ref.k_proj_weight.copy_(mha.W_key.weight)
            ref.v_proj_weight.copy_(mha.W_value.weight)
        biases = [p.bias if p.bias is not None else zeros for p in (mha.W_query, mha.W_key, mha.W_value)]
        ref.in_proj_bias.copy_(torch.cat(biases))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        ref.out_proj.bias.copy_(mha.out_proj.bias)
    return ref.eval()


@pytest.mark.parametrize("seed", range(1000, 1040))
def test_mha_matches_hand_copied_torch_mha(seed):
    case = draw_case(seed, square=True)
    x, kv, padding, keep = draw_inputs(case)
    mha = build_mha(case, "explicit")
    ref = hand_copied_torch_mha(mha)
    # the conversion function builds exactly the same parameters
    converted = mha_lib.torch_mha_from(mha).state_dict()
    by_hand = ref.state_dict()
    assert converted.keys() == by_hand.keys()
    for name in by_hand:
        assert torch.equal(converted[name], by_hand[name]), name
    compare_with_torch_mha(case, mha, ref, x, kv, padding, keep, "explicit")


def test_mha_matches_torch_mha_on_a_causal_cross_attention_example():
    # one hand-picked case with everything at once: cross-attention, T != S, kdim != embed_dim, causal, padding
    case = Case(seed=5, dtype=torch.float64, batch=3, q_len=7, kv_len=5, d_in=8, d_kv_in=6, d_out=8,
                num_heads=4, qkv_bias=False, causal=True, padding="key_padding", cross=True)
    x, kv, _, _ = draw_inputs(case)
    padded = torch.tensor([[False] * 5, [True, False, False, True, True], [True] * 5])
    keep = causal_keep(7, 5) & ~padded[:, None, None, :]
    mha = build_mha(case)
    live = compare_with_torch_mha(case, mha, hand_copied_torch_mha(mha), x, kv, {"key_padding_mask": padded}, keep,
                                  "explicit")
    assert live == 7 + 6  # sequence 1's first query sees only key 0, which is padded; sequence 2 is all padding


# --- c. D2L ---------------------------------------------------------------------------------------------------


def d2l_mha_from(mha: mha_lib.MultiHeadAttention, x, kv_input, bias: bool):
    """d2l.MultiHeadAttention holding mha's weights (its W_o has a bias only when ``bias``)."""
    ref = d2l.MultiHeadAttention(mha.d_out, mha.num_heads, dropout=0.0, bias=bias)
    with torch.no_grad():  # LazyLinear: one forward materialises the weights with the right input widths
        ref(x.float(), kv_input.float(), kv_input.float(), None)
    ref = ref.to(x.dtype).eval()
    with torch.no_grad():
        for ours, theirs in ((mha.W_query, ref.W_q), (mha.W_key, ref.W_k), (mha.W_value, ref.W_v),
                             (mha.out_proj, ref.W_o)):
            theirs.weight.copy_(ours.weight)
            if theirs.bias is not None:
                theirs.bias.copy_(ours.bias)
    return ref


@pytest.mark.parametrize("seed", range(2000, 2080))
def test_mha_matches_d2l(seed):
    case = draw_case(seed, causal=False, paddings=("none", "valid_lens_b", "valid_lens_bt"))
    x, kv, padding, keep = draw_inputs(case)
    kv_input = x if kv is None else kv
    valid_lens = padding.get("valid_lens")
    for kernel in KERNEL_NAMES:
        mha = build_mha(case, kernel)
        if not case.qkv_bias:
            with torch.no_grad():
                mha.out_proj.bias.zero_()  # D2L's W_o shares the bias flag of W_q/W_k/W_v
        ref = d2l_mha_from(mha, x, kv_input, case.qkv_bias)
        ref_out = ref(x, kv_input, kv_input, valid_lens)  # (B, T, D)
        ref_weights = ref.attention.attention_weights.view(case.batch, case.num_heads, case.q_len, case.kv_len)
        out, weights = run_mha(mha, x, kv, padding, kernel)
        # D2L fills blocked scores with -1e6, so a row with valid length 0 comes out uniform there
        live = check_dead_rows(out, weights, keep, mha.out_proj)
        assert_close(out[live], ref_out[live])
        if weights is not None:
            assert_close(weights.transpose(1, 2)[live], ref_weights.transpose(1, 2)[live])
        dead_ref_weights = ref_weights.transpose(1, 2)[~live]
        assert_close(dead_ref_weights, torch.full_like(dead_ref_weights, 1 / case.kv_len))


@pytest.mark.parametrize("seed", range(3000, 3040))
def test_masked_softmax_matches_d2l(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    dtype = rng.choice((torch.float32, torch.float64))
    N, T, S = rng.randint(1, 6), rng.randint(1, MAX_LEN), rng.randint(1, MAX_LEN)
    scores = torch.randn(N, T, S, generator=gen, dtype=dtype) * 3
    shape = (N,) if rng.random() < 0.5 else (N, T)
    valid_lens = torch.randint(0, S + 1, shape, generator=gen)

    ours = mha_lib.masked_softmax(scores, mha_lib.mask_from_valid_lens(valid_lens, T, S)[:, 0])  # (N, T, S)
    theirs = d2l.masked_softmax(scores.clone(), valid_lens)  # clone: d2l writes -1e6 into its input
    lens = valid_lens[:, None].expand(N, T) if valid_lens.dim() == 1 else valid_lens  # (N, T)
    live = lens > 0
    assert_close(ours[live], theirs[live])
    assert (ours[~live] == 0).all()  # D2L: uniform 1/S here instead
    assert_close(theirs[~live], torch.full_like(theirs[~live], 1 / S))
    # the mask itself: key s is kept exactly when s < valid length
    assert ((ours > 0) == (torch.arange(S) < lens[..., None])).all()


@pytest.mark.parametrize("seed", range(4000, 4030))
def test_flat_heads_match_d2l(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    D = rng.randint(1, 12)
    H = rng.choice(divisors_of(D))
    B, T = rng.randint(1, 4), rng.randint(1, MAX_LEN)
    x = torch.randn(B, T, D, generator=gen)
    reference = d2l.MultiHeadAttention(D, H, dropout=0.0)  # only its reshaping methods are used
    flat = mha_lib.split_heads_flat(x, H)
    assert flat.shape == (B * H, T, D // H)
    assert torch.equal(flat, reference.transpose_qkv(x))
    heads_out = torch.randn(B * H, T, D // H, generator=gen)
    assert torch.equal(mha_lib.merge_heads_flat(heads_out, H), reference.transpose_output(heads_out))
    assert torch.equal(mha_lib.merge_heads_flat(flat, H), x)


# --- d. wrapper -> split --------------------------------------------------------------------------------------


def draw_wrapper_case(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    dtype = rng.choice((torch.float32, torch.float64))
    d_in, head_width, H = rng.randint(1, 8), rng.randint(1, 6), rng.randint(1, 4)
    B, T = rng.randint(1, 4), rng.randint(1, MAX_LEN)
    torch.manual_seed(seed)
    wrapper = mha_lib.MultiHeadAttentionWrapper(d_in, head_width, MAX_LEN, 0.0, H, rng.random() < 0.5)
    x = torch.randn(B, T, d_in, generator=gen, dtype=dtype)
    return wrapper.to(dtype).eval(), x


@pytest.mark.parametrize("seed", range(5000, 5040))
def test_split_from_wrapper_matches_wrapper(seed):
    wrapper, x = draw_wrapper_case(seed)
    out, weights = wrapper(x, return_weights=True)  # (B, T, H·Dh), (B, H, T, T)
    mha = mha_lib.split_from_wrapper(wrapper).eval()
    assert mha.causal and mha.num_heads == wrapper.num_heads and mha.W_query.weight.dtype == x.dtype
    split_out, split_weights = mha(x, return_weights=True)
    assert_close(split_out, out)
    assert_close(split_weights, weights)
    # every head's weights are causal, as the wrapper's heads are
    T = x.shape[1]
    assert (weights[..., ~causal_keep(T, T)] == 0).all()
    mha.kernel = "sdpa"
    assert_close(mha(x), out)


@pytest.mark.parametrize("seed", range(6000, 6020))
def test_wrapper_matches_hand_split(seed):
    wrapper, x = draw_wrapper_case(seed)
    heads = wrapper.heads
    H, Dh, d_in = len(heads), heads[0].d_out, heads[0].d_in
    has_bias = heads[0].W_query.bias is not None
    mha = mha_lib.MultiHeadAttention(d_in, H * Dh, MAX_LEN, 0.0, H, has_bias).to(x.dtype).eval()
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            target = getattr(mha, name)
            for h, head in enumerate(heads):  # head h owns output rows h·Dh ... (h+1)·Dh
                target.weight[h * Dh:(h + 1) * Dh] = getattr(head, name).weight
                if has_bias:
                    target.bias[h * Dh:(h + 1) * Dh] = getattr(head, name).bias
        mha.out_proj.weight.copy_(torch.eye(H * Dh))  # the wrapper just concatenates
        mha.out_proj.bias.zero_()
    out, weights = wrapper(x, return_weights=True)
    hand_out, hand_weights = mha(x, return_weights=True)
    assert_close(hand_out, out)
    assert_close(hand_weights, weights)
    converted = mha_lib.split_from_wrapper(wrapper)
    for name, tensor in mha.state_dict().items():
        assert torch.equal(converted.state_dict()[name], tensor), name


# --- e. split -> fused ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(7000, 7060))
def test_fused_from_split_matches_split(seed):
    case = draw_case(seed, cross=False)
    x, _, padding, keep = draw_inputs(case)
    for kernel in KERNEL_NAMES:
        mha = build_mha(case, kernel)
        fused = mha_lib.fused_from_split(mha).eval()
        assert isinstance(fused, mha_lib.FusedMultiHeadAttention)
        assert (fused.kernel, fused.causal, fused.num_heads) == (kernel, case.causal, case.num_heads)
        out, weights = run_mha(mha, x, None, padding, kernel)
        fused_out, fused_weights = run_mha(fused, x, None, padding, kernel)
        check_dead_rows(fused_out, fused_weights, keep, fused.out_proj)
        assert_close(fused_out, out)
        if weights is not None:
            assert_close(fused_weights, weights)


# --- f. explicit kernel vs sdpa kernel inside the modules, gradients included ---------------------------------


def forward_backward(module, x, kv, padding, upstream):
    """Output, and the gradients of <output, upstream> w.r.t. the inputs and every parameter."""
    module.zero_grad()
    x = x.clone().requires_grad_()
    kv = None if kv is None else kv.clone().requires_grad_()
    out = module(x, **padding) if kv is None else module(x, kv, **padding)
    (out * upstream).sum().backward()
    grads = {"x": x.grad} if kv is None else {"x": x.grad, "kv": kv.grad}
    grads |= {name: p.grad for name, p in module.named_parameters()}
    return out, grads


@pytest.mark.parametrize("seed", range(8000, 8060))
def test_kernels_agree_inside_modules(seed):
    case = draw_case(seed)
    x, kv, padding, keep = draw_inputs(case)
    gen = torch.Generator().manual_seed(seed + 1)
    upstream = torch.randn(case.batch, case.q_len, case.d_out, generator=gen, dtype=case.dtype)
    explicit, sdpa = build_mha(case, "explicit"), build_mha(case, "sdpa")
    pairs = [(explicit, sdpa, kv)]
    if not case.cross:
        pairs.append((mha_lib.fused_from_split(explicit), mha_lib.fused_from_split(sdpa), None))
    # gradients go through softmax and SDPA's own backward: a little looser than the forward in float32
    grad_tols = {} if case.dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    for module_explicit, module_sdpa, kv_input in pairs:
        for a, b in zip(module_explicit.parameters(), module_sdpa.parameters()):
            assert torch.equal(a, b)
        out_explicit, grads_explicit = forward_backward(module_explicit, x, kv_input, padding, upstream)
        out_sdpa, grads_sdpa = forward_backward(module_sdpa, x, kv_input, padding, upstream)
        check_dead_rows(out_sdpa, None, keep, module_sdpa.out_proj)
        assert_close(out_sdpa, out_explicit)
        assert grads_explicit.keys() == grads_sdpa.keys()
        for name, grad in grads_explicit.items():
            assert grad is not None and torch.isfinite(grad).all(), name
            assert_close(grads_sdpa[name], grad, **grad_tols, msg=lambda m, name=name: f"{name}: {m}")


# --- g. dropout -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(9000, 9020))
def test_explicit_dropout_is_torch_dropout(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    dtype = rng.choice((torch.float32, torch.float64))
    B, H, T, S, Dh = rng.randint(1, 3), rng.randint(1, 3), rng.randint(4, 8), rng.randint(4, 8), rng.randint(1, 6)
    q = torch.randn(B, H, T, Dh, generator=gen, dtype=dtype)
    k = torch.randn(B, H, S, Dh, generator=gen, dtype=dtype)
    v = torch.randn(B, H, S, Dh, generator=gen, dtype=dtype)
    keep = torch.rand(B, 1, T, S, generator=gen) < 0.8
    p = rng.uniform(0.2, 0.7)
    _, weights = plain_attention(q, k, v, keep)

    torch.manual_seed(seed)
    context, returned_weights = mha_lib.explicit_attention(q, k, v, keep, dropout_p=p)
    torch.manual_seed(seed)
    dropped = F.dropout(weights, p=p)  # the same random draws: the same entries dropped, the rest × 1/(1-p)
    assert_close(returned_weights, weights)  # the weights are returned before dropout
    assert_close(context, dropped @ v)
    assert ((dropped == 0) & (weights > 0)).any()  # something was dropped, so this differs from no dropout
    assert not torch.allclose(context, weights @ v)


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_kernel_dropout_zeroes_or_rescales_each_weight(kernel):
    # with v = identity the context *is* the dropped weight matrix, whatever the kernel does inside
    p, S = 0.3, 32
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(4, 4, S, 8, generator=gen), torch.randn(4, 4, S, 8, generator=gen)
    v = torch.eye(S).expand(4, 4, S, S)
    _, weights = plain_attention(q, k, v)
    torch.manual_seed(0)
    dropped, _ = mha_lib.KERNELS[kernel](q, k, v, dropout_p=p)
    zeroed = dropped == 0
    assert_close(dropped[~zeroed], weights[~zeroed] / (1 - p))  # survivors are rescaled by 1/(1-p)
    assert abs(zeroed.float().mean().item() - p) < 0.02  # 16384 draws: the dropped fraction is about p
    # the rescaling keeps the expectation: averaged over many draws, each row still sums to about 1
    assert abs(dropped.sum(-1).mean().item() - 1.0) < 0.02


def test_sdpa_kernel_passes_dropout_to_torch_sdpa():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 2, 6, 4, generator=gen) for _ in range(3))
    torch.manual_seed(3)
    ours, _ = mha_lib.sdpa_attention(q, k, v, dropout_p=0.4, is_causal=True)
    torch.manual_seed(3)
    theirs = F.scaled_dot_product_attention(q, k, v, dropout_p=0.4, is_causal=True)
    assert_close(ours, theirs)
    assert not torch.allclose(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def dropout_modules(kernel):
    """(name, module with dropout 0.5, the same module with dropout 0) for every layer that has dropout."""
    case = Case(seed=11, dtype=torch.float32, batch=2, q_len=6, kv_len=6, d_in=8, d_kv_in=8, d_out=8,
                num_heads=2, qkv_bias=True, causal=True, padding="none", cross=False)
    mha = build_mha(case, kernel, dropout=0.5)
    no_dropout = build_mha(case, kernel, dropout=0.0)
    yield "split", mha, no_dropout
    yield "fused", mha_lib.fused_from_split(mha), mha_lib.fused_from_split(no_dropout)
    if kernel == "explicit":  # the wrapper's heads always use the explicit kernel
        torch.manual_seed(12)
        wrapper = mha_lib.MultiHeadAttentionWrapper(8, 4, 6, 0.5, num_heads=2)
        torch.manual_seed(12)
        yield "wrapper", wrapper, mha_lib.MultiHeadAttentionWrapper(8, 4, 6, 0.0, num_heads=2)


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_dropout_acts_in_train_mode_only(kernel):
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(4))
    for name, module, no_dropout in dropout_modules(kernel):
        reference = no_dropout.eval()(x)
        module.eval()
        assert torch.equal(module(x), module(x)), name  # eval: deterministic ...
        assert_close(module(x), reference, msg=lambda m, name=name: f"{name}: {m}")  # ... and dropout-free
        module.train()
        first, second = module(x), module(x)
        assert not torch.allclose(first, reference), name  # train: dropout changes the output ...
        assert not torch.allclose(first, second), name  # ... differently on every call
        no_dropout.train()
        assert_close(no_dropout(x), reference)  # p = 0 has no effect even in train mode
