"""``flash_attention`` (chapter 14), the tiled online softmax, against explicit attention and SDPA.

Every random case is drawn from its own seed (``random.Random(seed)`` for sizes and flags,
``torch.Generator().manual_seed(seed)`` for tensors), float32 unless said otherwise:

    equal        context ≤ 1e-5 and gradients of q, k, v ≤ 1e-4 against explicit_attention's autograd, over T, S in
                 1..70 (S > T, S < T, S = T), block sizes 1, 2, 3, 7, sizes that divide neither T nor S, larger than
                 both; causal (bottom-right: query t sits at position S - T + t) or not; keep masks of padding
                 shape (B, 1, 1, S) and full shape (B, H, T, S), with rows that see no key (context 0)
    gradcheck    float64, the recomputing backward against finite differences
    lse          return_lse is torch.logsumexp of the scaled, masked scores (-inf for a row with no key)
    tiles        a causal call folds in exactly the tiles that are not wholly in the future, and NaN placed in a
                 wholly-future key block never reaches the output (so those tiles are never computed)
    memory       no tensor of T × S numbers is ever allocated, forward or backward (explicit_attention's is caught),
                 and what is saved for the backward is O(T), with dropout too
    dropout      each tile's mask drawn from a seed (torch.manual_seed) and drawn again in the backward: the mask
                 rebuilt from the documented scheme gives explicit attention's forward and gradients; gradcheck
    no SDPA      F.scaled_dot_product_attention replaced by a function that raises: nothing changes
    modules      MultiHeadAttention(kernel="flash") equals kernel="explicit" with RoPE, GQA, a window, a KV cache
                 fed in chunks, padding masks and cross-attention; dropout runs in training only
    steps        online_softmax_step's state after every block of keys, and result() the softmax row
    bad input    each ValueError / TypeError names the argument, what it got and what it expected
    merge        merge_attention_states over keys cut anywhere equals attention over all of them (explicit, SDPA, the
                 lse too, gradients through the lse), three parts in any order, sides that saw no key, bad input
"""

from __future__ import annotations

import math
import random
import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import mha_lib
from mha_lib import MultiHeadAttention, explicit_attention, flash_attention, functional
from mha_lib.masks import causal_mask_at, combine_masks

FORWARD = {"rtol": 0.0, "atol": 1e-5}
GRADIENT = {"rtol": 0.0, "atol": 1e-4}
MASK_KINDS = ("none", "padding", "full")


# --- the reference: explicit attention with the bottom-right triangle as a mask ----------------------------------


def bottom_right(T: int, S: int) -> torch.Tensor:
    """(T, S) keep mask of flash_attention's causal=True: query t sits at position S - T + t."""
    return causal_mask_at(torch.arange(S - T, S), torch.arange(S))


def reference(q, k, v, *, causal=False, mask=None, scale=None):
    """explicit_attention with flash_attention's arguments: the causal triangle goes in as a mask."""
    if causal:
        mask = combine_masks(bottom_right(q.shape[-2], k.shape[-2]), mask)
    return explicit_attention(q, k, v, mask, scale=scale)[0]


def random_mask(kind: str, B: int, H: int, T: int, S: int, gen: torch.Generator) -> torch.Tensor | None:
    """A keep mask with at least one query that may attend to no key (when T > 1 or the kind is padding)."""
    if kind == "none":
        return None
    if kind == "padding":  # (B, 1, 1, S), True = a real token; the last sequence is all padding
        keep = torch.rand(B, 1, 1, S, generator=gen) < 0.7
        keep[-1] = False
        return keep
    keep = torch.rand(B, H, T, S, generator=gen) < 0.6  # (B, H, T, S): any pattern
    keep[0, 0, -1] = False  # the last query of the first head sees nothing
    return keep


def random_case(seed: int) -> dict:
    rng = random.Random(seed)
    T, S = rng.randint(1, 70), rng.randint(1, 70)
    if seed % 4 == 0:
        S = T  # the square case too
    block_size = rng.choice([1, 2, 3, 7, 7, 16, 64, 100, max(T, S) + rng.randint(0, 5)])
    if block_size <= 2:  # a tile per pair of tokens is a Python loop of T·S steps: keep those cases small
        T, S = min(T, 20), min(S, 20)
    return dict(B=rng.randint(1, 2), H=rng.randint(1, 3), T=T, S=S, Dh=rng.randint(1, 8), Dv=rng.randint(1, 8),
                block_size=block_size, causal=rng.random() < 0.5, mask=MASK_KINDS[seed % 3])


def case_tensors(case: dict, seed: int, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    B, H, T, S = case["B"], case["H"], case["T"], case["S"]
    q = torch.randn(B, H, T, case["Dh"], generator=gen, dtype=dtype)
    k = torch.randn(B, H, S, case["Dh"], generator=gen, dtype=dtype)
    v = torch.randn(B, H, S, case["Dv"], generator=gen, dtype=dtype)
    return q, k, v, random_mask(case["mask"], B, H, T, S, gen)


def test_the_random_cases_cover_what_they_claim():
    cases = [random_case(seed) for seed in range(60)]
    assert {c["block_size"] for c in cases} >= {1, 2, 3, 7}
    assert any(c["S"] > c["T"] for c in cases) and any(c["S"] < c["T"] for c in cases)
    assert any(c["S"] == c["T"] for c in cases)
    assert any(c["T"] % c["block_size"] and c["S"] % c["block_size"] for c in cases)  # divides neither
    assert any(c["block_size"] > max(c["T"], c["S"]) for c in cases)  # one tile holds everything
    assert {(c["causal"], c["mask"]) for c in cases} == {(a, b) for a in (True, False) for b in MASK_KINDS}


# --- equal to explicit attention ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(60))
def test_flash_attention_equals_explicit_attention_and_its_gradients(seed):
    case = random_case(seed)
    q, k, v, mask = case_tensors(case, seed)
    flags = dict(causal=case["causal"], mask=mask)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ours = flash_attention(*leaves, block_size=case["block_size"], **flags)
    expected_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = reference(*expected_leaves, **flags)
    torch.testing.assert_close(ours, expected, **FORWARD)
    assert ours.shape == (case["B"], case["H"], case["T"], case["Dv"])

    upstream = torch.randn(ours.shape, generator=torch.Generator().manual_seed(seed + 1000))
    grads = torch.autograd.grad((ours * upstream).sum(), leaves)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), expected_leaves)
    for name, grad, expected_grad in zip("qkv", grads, expected_grads, strict=True):
        assert torch.isfinite(grad).all(), name
        torch.testing.assert_close(grad, expected_grad, **GRADIENT, msg=lambda m, name=name: f"grad of {name}: {m}")


@pytest.mark.parametrize("T, S", [(1, 1), (5, 5), (4, 9), (9, 4), (13, 30), (30, 13)])
def test_a_row_with_no_key_gives_zero(T, S):
    """Fully masked rows give 0 (like masked_softmax), and so do the queries before every key (causal, S < T)."""
    gen = torch.Generator().manual_seed(T * 100 + S)
    q, k, v = torch.randn(2, 2, T, 3, generator=gen), torch.randn(2, 2, S, 3, generator=gen), torch.randn(2, 2, S, 4)
    keep = torch.rand(2, 2, T, S, generator=gen) < 0.5
    keep[1, 0, T // 2] = False
    for causal in (False, True):
        out = flash_attention(q, k, v, causal=causal, mask=keep, block_size=3)
        expected = reference(q, k, v, causal=causal, mask=keep)
        torch.testing.assert_close(out, expected, **FORWARD)
        dead = ~combine_masks(bottom_right(T, S) if causal else None, keep).any(-1)  # (2, 2, T)
        assert dead[1, 0, T // 2]
        assert (out[dead] == 0).all()
    if S < T:  # the first T - S queries sit before position 0: nothing to see
        assert (flash_attention(q, k, v, causal=True, block_size=2)[..., : T - S, :] == 0).all()


@pytest.mark.parametrize("T, S, block_size", [(6, 6, 2), (5, 11, 3), (11, 5, 4), (7, 7, 1)])
def test_masks_of_every_broadcast_shape(T, S, block_size):
    gen = torch.Generator().manual_seed(T + S)
    q, k, v = (torch.randn(2, 3, n, 4, generator=gen) for n in (T, S, S))
    for shape in [(S,), (T, S), (1, S), (2, 1, 1, S), (2, 1, T, S), (3, T, S), (2, 3, T, S)]:
        keep = torch.rand(shape, generator=gen) < 0.6
        for causal in (False, True):
            torch.testing.assert_close(flash_attention(q, k, v, mask=keep, causal=causal, block_size=block_size),
                                       reference(q, k, v, mask=keep, causal=causal), **FORWARD)


def test_any_leading_dimensions_and_a_scale_of_ones_own():
    gen = torch.Generator().manual_seed(3)
    for lead in [(), (3,), (2, 2, 2)]:
        q, k, v = (torch.randn(*lead, n, w, generator=gen) for n, w in ((9, 5), (12, 5), (12, 2)))
        for causal in (False, True):
            torch.testing.assert_close(flash_attention(q, k, v, causal=causal, scale=0.7, block_size=4),
                                       reference(q, k, v, causal=causal, scale=0.7), **FORWARD)
    q = torch.randn(2, 5, 7, 4, generator=gen).transpose(1, 2)  # (2, 7, 5, 4): not contiguous
    k, v = torch.randn(2, 7, 6, 4, generator=gen), torch.randn(2, 7, 6, 3, generator=gen)
    torch.testing.assert_close(flash_attention(q, k, v, block_size=4), reference(q, k, v), **FORWARD)


@pytest.mark.parametrize("seed", range(12))
def test_flash_attention_equals_sdpa(seed):
    case = random_case(seed)
    q, k, v, mask = case_tensors(case, seed)
    T, S = case["T"], case["S"]
    if case["causal"]:  # SDPA's is_causal aligns top-left: give it the bottom-right triangle as a mask
        mask = combine_masks(bottom_right(T, S), mask)
    out = flash_attention(q, k, v, mask=mask, block_size=case["block_size"])
    torch.testing.assert_close(out, mha_lib.sdpa_attention(q, k, v, mask)[0], **FORWARD)
    if case["causal"] and T == S and case["mask"] == "none":  # the square triangle is SDPA's own
        torch.testing.assert_close(flash_attention(q, k, v, causal=True, block_size=case["block_size"]),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=True), **FORWARD)


@pytest.mark.parametrize(
    "T, S, block_size, causal, mask_kind",
    [(3, 3, 1, True, "none"), (4, 6, 2, True, "full"), (6, 4, 3, True, "padding"), (5, 7, 3, False, "full"),
     (7, 5, 2, False, "padding"), (5, 5, 8, True, "full")],
)
def test_gradcheck_in_float64(T, S, block_size, causal, mask_kind):
    gen = torch.Generator().manual_seed(T * 10 + S)
    q, k, v = (torch.randn(2, 2, n, w, generator=gen, dtype=torch.float64, requires_grad=True)
               for n, w in ((T, 3), (S, 3), (S, 2)))
    mask = random_mask(mask_kind, 2, 2, T, S, gen)
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, causal=causal, mask=mask, block_size=block_size), (q, k, v))


def test_return_lse_is_the_logsumexp_of_the_scaled_masked_scores():
    gen = torch.Generator().manual_seed(5)
    for T, S, block_size in [(7, 7, 3), (5, 12, 4), (12, 5, 4), (1, 9, 2)]:
        q, k, v = (torch.randn(2, 3, n, 4, generator=gen) for n in (T, S, S))
        keep = torch.rand(2, 3, T, S, generator=gen) < 0.6
        keep[0, 1, 0] = False  # a row with no key: -inf
        for causal, mask, scale in [(False, None, None), (True, None, 0.3), (False, keep, None), (True, keep, 2.0)]:
            context, lse = flash_attention(q, k, v, causal=causal, mask=mask, scale=scale, block_size=block_size,
                                           return_lse=True)
            scores = (q @ k.transpose(-2, -1)) * (0.5 if scale is None else scale)  # (2, 3, T, S); 1/√4 = 0.5
            allowed = combine_masks(bottom_right(T, S) if causal else None, mask)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), **FORWARD)
            torch.testing.assert_close(context, flash_attention(q, k, v, causal=causal, mask=mask, scale=scale,
                                                                block_size=block_size), rtol=0, atol=0)
            if mask is keep:
                assert lse[0, 1, 0] == float("-inf")


# --- the tiles it computes, and those it skips ---------------------------------------------------------------------


def tiles_not_in_the_future(T: int, S: int, block_size: int) -> int:
    """Tiles a causal call must fold in: for each query block, the key blocks up to its last query's position."""
    total = 0
    for i0 in range(0, T, block_size):
        last_position = S - T + min(i0 + block_size, T) - 1  # of the block's last query
        total += 0 if last_position < 0 else math.ceil((last_position + 1) / block_size)
    return total


@pytest.mark.parametrize("T, S, block_size", [(16, 16, 4), (10, 10, 3), (5, 17, 4), (17, 5, 4), (9, 9, 1), (8, 8, 8)])
def test_a_causal_call_folds_in_only_the_tiles_not_wholly_in_the_future(monkeypatch, T, S, block_size):
    steps = []

    def counting_step(state, scores, values, **options):
        steps.append(tuple(scores.shape[-2:]))
        return original(state, scores, values, **options)

    original = functional.online_softmax_step
    monkeypatch.setattr(functional, "online_softmax_step", counting_step)
    q, k, v = (torch.randn(1, 2, n, 4) for n in (T, S, S))
    flash_attention(q, k, v, causal=True, block_size=block_size)
    assert len(steps) == tiles_not_in_the_future(T, S, block_size)
    steps.clear()
    flash_attention(q, k, v, causal=False, block_size=block_size)
    assert len(steps) == math.ceil(T / block_size) * math.ceil(S / block_size)  # every tile
    if T == S == 16:  # 4 × 4 tiles, the 10 on or below the diagonal: the work saved is about half
        assert tiles_not_in_the_future(16, 16, 4) == 10


@pytest.mark.parametrize("T, S, block_size", [(12, 12, 4), (9, 14, 3), (14, 9, 3), (10, 10, 5)])
def test_nan_in_a_wholly_future_key_block_never_reaches_the_output(T, S, block_size):
    """A tile that were computed, even masked, would spread the NaN (exp(-inf)·NaN = NaN); a skipped one cannot.

    NaN goes into the keys and values of one key block. Query blocks for which that block lies wholly in the future
    stay finite and exact; the others (the block crosses their diagonal or lies in their past) are NaN."""
    gen = torch.Generator().manual_seed(T + S)
    q, k, v = (torch.randn(2, 2, n, 4, generator=gen) for n in (T, S, S))
    expected = reference(q, k, v, causal=True)
    for j0 in range(0, S, block_size):
        poisoned_k, poisoned_v = k.clone(), v.clone()
        poisoned_k[..., j0:j0 + block_size, :] = float("nan")
        poisoned_v[..., j0:j0 + block_size, :] = float("nan")
        out = flash_attention(q, poisoned_k, poisoned_v, causal=True, block_size=block_size)
        for i0 in range(0, T, block_size):
            rows = slice(i0, min(i0 + block_size, T))
            wholly_future = j0 > S - T + rows.stop - 1  # the key block starts after the block's last query
            if wholly_future:
                torch.testing.assert_close(out[..., rows, :], expected[..., rows, :], **FORWARD)
            elif S - T + rows.stop - 1 >= 0:  # a query block with keys to see: the NaN tile was computed
                assert torch.isnan(out[..., rows, :]).any(), (j0, i0)


class LargestAllocation(TorchDispatchMode):
    """Records the largest storage (bytes) any torch operation returns while the mode is on: views share their
    base's storage, so an expanded mask (a view) costs nothing and a T × S tensor of scores is caught."""

    def __init__(self):
        super().__init__()
        self.largest, self.ops = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.ops += 1
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return result


class SavedForBackward:
    """Records the storages autograd saves for the backward (``saved_tensors_hooks``), each storage once: their
    bytes are what a training step keeps between its forward and its backward."""

    def __enter__(self):
        self.storages = {}

        def pack(t):
            storage = t.untyped_storage()
            self.storages[storage.data_ptr(), storage.nbytes()] = storage.nbytes()
            return t

        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)

    @property
    def nbytes(self) -> int:
        return sum(self.storages.values())


@pytest.mark.parametrize("causal, with_mask, dropout_p",
                         [(False, False, 0.0), (True, False, 0.0), (True, True, 0.0), (False, False, 0.3),
                          (True, True, 0.3)])
def test_no_tensor_of_t_by_s_numbers_is_ever_allocated(causal, with_mask, dropout_p):
    """Nor kept for the backward, with dropout too: the backward draws each tile's dropout mask again."""
    B, H, T, S, Dh, block_size = 1, 2, 256, 256, 4, 16
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, Dh, generator=gen, requires_grad=True) for n in (T, S, S))
    mask = (torch.rand(B, 1, 1, S, generator=gen) < 0.8) if with_mask else None  # padding: (B, 1, 1, S)
    one_head_scores = T * S * 4  # bytes of one head's T × S float32 matrix: 256 KiB

    with LargestAllocation() as explicit_mode:  # the recorder catches the explicit kernel's matrix
        reference(q, k, v, causal=causal, mask=mask).sum().backward()
    assert explicit_mode.largest >= B * H * one_head_scores

    with LargestAllocation() as forward, SavedForBackward() as saved:
        out = flash_attention(q, k, v, causal=causal, mask=mask, block_size=block_size, dropout_p=dropout_p)
    with LargestAllocation() as backward:
        out.sum().backward()
    assert backward.ops > 100  # the backward's tile loop ran under the recorder
    for mode in (forward, backward):
        # the largest allowed: a (B, H, T, Dh) tensor (context, gradients), 8 KiB here; 32 times less than one head
        assert mode.largest <= max(B * H * T * Dh * 4, B * H * block_size * block_size * 4) <= one_head_scores / 32
    # kept for the backward: q, k, v, the context (B, H, T, Dh) each, the lse (B, H, T) and the mask; 34 KiB here,
    # with or without dropout (a kernel that let autograd keep the dropped tiles kept 1.3 to 2.3 MiB here)
    kept = 4 * B * H * T * Dh * 4 + B * H * T * 4 + (0 if mask is None else mask.untyped_storage().nbytes())
    assert saved.nbytes <= kept <= one_head_scores / 7, (saved.nbytes, kept)


def test_flash_attention_never_calls_sdpa(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("flash_attention called F.scaled_dot_product_attention")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", refuse)
    with pytest.raises(AssertionError, match="called F.scaled_dot_product_attention"):
        mha_lib.sdpa_attention(torch.randn(1, 3, 2), torch.randn(1, 3, 2), torch.randn(1, 3, 2))  # the patch holds
    q, k, v = (torch.randn(2, 2, n, 4, requires_grad=True) for n in (7, 9, 9))
    flash_attention(q, k, v, causal=True, mask=torch.rand(9) < 0.8, block_size=3).sum().backward()
    flash_attention(q, k, v, dropout_p=0.2).sum().backward()
    layer = MultiHeadAttention(8, 8, 16, 0.0, 2, kernel="flash", rope_theta=1e4, num_kv_heads=1)
    layer(torch.randn(2, 6, 8)).sum().backward()
    assert q.grad is not None and layer.W_query.weight.grad is not None


# --- inside the layers: MultiHeadAttention(kernel="flash") -------------------------------------------------------


def flash_twin(layer: MultiHeadAttention) -> MultiHeadAttention:
    """The same layer with the flash kernel: same arguments, same weights."""
    twin = MultiHeadAttention(
        layer.d_in, layer.d_out, layer.context_length, layer.dropout_p, layer.num_heads,
        layer.W_query.bias is not None, kernel="flash", causal=layer.causal, d_kv_in=layer.d_kv_in,
        num_kv_heads=layer.num_kv_heads, head_dim=layer.head_dim, rope_theta=layer.rope_theta, window=layer.window,
        out_bias=layer.out_proj.bias is not None)
    twin.load_state_dict(layer.state_dict())
    return twin.train(layer.training)


@pytest.mark.parametrize(
    "options",
    [{}, {"rope_theta": 1e4}, {"num_kv_heads": 2, "rope_theta": 500.0}, {"num_kv_heads": 1, "qkv_bias": True},
     {"window": 3}, {"window": 4, "num_kv_heads": 2, "rope_theta": 1e4}, {"head_dim": 3, "out_bias": False},
     {"causal": False}],
    ids=["plain", "rope", "gqa-rope", "mqa-bias", "window", "window-gqa-rope", "head_dim", "not-causal"],
)
def test_multi_head_attention_with_the_flash_kernel_equals_explicit(options):
    torch.manual_seed(0)
    explicit = MultiHeadAttention(12, 16, 32, 0.0, 4, **options).eval()
    flash = flash_twin(explicit).eval()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 11, 12, generator=gen)
    torch.testing.assert_close(flash(x), explicit(x), **FORWARD)
    padded = torch.rand(3, 11, generator=gen) < 0.3
    padded[0] = True  # a sequence of padding only: its rows are 0 before out_proj
    torch.testing.assert_close(flash(x, key_padding_mask=padded), explicit(x, key_padding_mask=padded), **FORWARD)
    valid_lens = torch.tensor([0, 4, 11])
    torch.testing.assert_close(flash(x, valid_lens=valid_lens), explicit(x, valid_lens=valid_lens), **FORWARD)
    # gradients through the layer, the recomputing backward
    x_flash, x_explicit = x.clone().requires_grad_(), x.clone().requires_grad_()
    flash(x_flash, key_padding_mask=padded).square().sum().backward()
    explicit(x_explicit, key_padding_mask=padded).square().sum().backward()
    torch.testing.assert_close(x_flash.grad, x_explicit.grad, **GRADIENT)
    for (name, p_flash), p_explicit in zip(flash.named_parameters(), explicit.parameters(), strict=True):
        torch.testing.assert_close(p_flash.grad, p_explicit.grad, **GRADIENT, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("options", [{}, {"num_kv_heads": 2, "rope_theta": 1e4}, {"window": 3, "rope_theta": 1e4}])
def test_the_flash_kernel_through_a_kv_cache_in_chunks_equals_the_full_explicit_forward(options):
    """After a cache the chunk's queries are the last T of S keys: flash_kernel gets T != S."""
    torch.manual_seed(2)
    explicit = MultiHeadAttention(12, 16, 32, 0.0, 4, **options).eval()
    flash = flash_twin(explicit).eval()
    x = torch.randn(2, 14, 12, generator=torch.Generator().manual_seed(3))
    expected = explicit(x)
    cache, pieces, start = mha_lib.KVCache(), [], 0
    for size in (1, 4, 2, 5, 1, 1):
        pieces.append(flash(x[:, start:start + size], kv_cache=cache))
        start += size
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected, **FORWARD)
    assert cache.seen == 14


@pytest.mark.parametrize("causal", [False, True])
def test_cross_attention_with_the_flash_kernel(causal):
    """Keys from another sequence, S != T; causal=True then means the kernels' top-left triangle (flash_kernel)."""
    torch.manual_seed(4)
    explicit = MultiHeadAttention(6, 8, 16, 0.0, 2, d_kv_in=5, causal=causal).eval()
    flash = flash_twin(explicit).eval()
    gen = torch.Generator().manual_seed(5)
    x, kv = torch.randn(3, 5, 6, generator=gen), torch.randn(3, 9, 5, generator=gen)
    padded = torch.rand(3, 9, generator=gen) < 0.4
    torch.testing.assert_close(flash(x, kv), explicit(x, kv), **FORWARD)
    torch.testing.assert_close(flash(x, kv, key_padding_mask=padded), explicit(x, kv, key_padding_mask=padded),
                               **FORWARD)


@pytest.mark.parametrize("T, S", [(5, 5), (4, 9), (9, 4)])
def test_flash_kernel_keeps_the_kernels_top_left_is_causal(T, S):
    gen = torch.Generator().manual_seed(T * S)
    q, k, v = (torch.randn(2, 2, n, 3, generator=gen) for n in (T, S, S))
    keep = torch.rand(2, 1, T, S, generator=gen) < 0.7
    for mask in (None, keep):
        context, weights = mha_lib.KERNELS["flash"](q, k, v, mask, 0.4, 0.0, True)
        assert weights is None
        torch.testing.assert_close(context, explicit_attention(q, k, v, mask, 0.4, 0.0, True)[0], **FORWARD)


def test_dropout_runs_in_training_and_not_in_eval():
    torch.manual_seed(6)
    layer = MultiHeadAttention(8, 8, 16, 0.5, 2, kernel="flash")
    x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(6))
    layer.eval()
    reference_out = layer(x)
    torch.testing.assert_close(layer(x), reference_out, rtol=0, atol=0)  # eval: no dropout, deterministic
    layer.train()
    torch.manual_seed(7)
    trained = layer(x)
    assert torch.isfinite(trained).all() and not torch.allclose(trained, reference_out, atol=1e-3)
    torch.manual_seed(7)
    torch.testing.assert_close(layer(x), trained, rtol=0, atol=0)  # the same seed drops the same weights
    trained.sum().backward()
    assert torch.isfinite(layer.W_query.weight.grad).all() and layer.W_query.weight.grad.abs().sum() > 0


def flash_dropout_keep(seed: int, lead: tuple, T: int, S: int, block_size: int, dropout_p: float,
                       device: str = "cpu") -> torch.Tensor:
    """The (..., T, S) keep mask flash_attention's dropout draws, built tile by tile from the documented scheme: tile
    (i, j) draws torch.rand(tile shape) >= p from a generator on the device seeded with seed + i·⌈S/block⌉ + j."""
    keep = torch.zeros(*lead, T, S, dtype=torch.bool, device=device)
    key_blocks, gen = math.ceil(S / block_size), torch.Generator(device=device)
    for i in range(math.ceil(T / block_size)):
        for j in range(key_blocks):
            tile = keep[..., i * block_size:(i + 1) * block_size, j * block_size:(j + 1) * block_size]  # a view
            gen.manual_seed(seed + i * key_blocks + j)
            tile[...] = torch.rand(tile.shape, generator=gen, device=device) >= dropout_p
    return keep


def explicit_with_dropout(q, k, v, keep, dropout_p, *, causal=False, mask=None):
    """Explicit attention with a given dropout keep mask on its weights (kept ones scaled by 1 / (1 - p))."""
    if causal:
        mask = combine_masks(bottom_right(q.shape[-2], k.shape[-2]).to(q.device), mask)
    weights = explicit_attention(q, k, v, mask)[1]  # (..., T, S), before dropout
    return (weights * keep / (1 - dropout_p)) @ v


@pytest.mark.parametrize("seed", range(16))
def test_dropout_equals_explicit_attention_with_the_same_mask_forward_and_backward(seed):
    """The seed drawn under torch.manual_seed, the mask rebuilt from it: forward and gradients as explicit attention's
    with that mask."""
    case = random_case(seed)
    q, k, v, mask = case_tensors(case, seed)
    T, S, bs = case["T"], case["S"], case["block_size"]
    dropout_p = (0.1, 0.3, 0.5, 0.9)[seed % 4]
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(seed)
    ours = flash_attention(*leaves, causal=case["causal"], mask=mask, block_size=bs, dropout_p=dropout_p)
    torch.manual_seed(seed)
    keep = flash_dropout_keep(functional._dropout_seed(), q.shape[:-2], T, S, bs, dropout_p)
    expected_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = explicit_with_dropout(*expected_leaves, keep, dropout_p, causal=case["causal"], mask=mask)
    torch.testing.assert_close(ours, expected, **FORWARD)
    upstream = torch.randn(ours.shape, generator=torch.Generator().manual_seed(seed + 1000))
    grads = torch.autograd.grad((ours * upstream).sum(), leaves)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), expected_leaves)
    for name, grad, expected_grad in zip("qkv", grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad, **GRADIENT, msg=lambda m, name=name: f"grad of {name}: {m}")
    if T * S >= 100:  # enough weights for the mask to drop some and keep some
        assert 0 < keep.float().mean() < 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is available on this machine")
def test_dropout_on_the_gpu_draws_its_masks_there():
    """On a GPU the tiles' generators live on the GPU (no mask crosses from the CPU), the seed still comes from
    torch.manual_seed, and forward and backward equal explicit attention with the mask rebuilt there."""
    gen = torch.Generator().manual_seed(21)
    q, k, v = (torch.randn(2, 3, n, 8, generator=gen).cuda().requires_grad_() for n in (37, 50, 50))
    torch.manual_seed(4)
    out = flash_attention(q, k, v, causal=True, block_size=16, dropout_p=0.25)
    torch.manual_seed(4)
    keep = flash_dropout_keep(functional._dropout_seed(), (2, 3), 37, 50, 16, 0.25, device="cuda")
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    expected = explicit_with_dropout(*leaves, keep, 0.25, causal=True)
    torch.testing.assert_close(out, expected, **FORWARD)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    for grad, expected_grad in zip(grads, torch.autograd.grad(expected.square().sum(), leaves), strict=True):
        torch.testing.assert_close(grad, expected_grad, **GRADIENT)


def test_dropout_masks_differ_between_tiles_and_calls():
    """Each tile draws its own mask (no two tiles alike), and two calls draw two seeds: different outputs."""
    keep = flash_dropout_keep(12345, (1,), 64, 64, 16, 0.5)
    tiles = [keep[0, i:i + 16, j:j + 16] for i in range(0, 64, 16) for j in range(0, 64, 16)]
    assert all(not torch.equal(a, b) for n, a in enumerate(tiles) for b in tiles[n + 1:])
    q, k, v = (torch.randn(1, 2, 32, 4) for _ in range(3))
    torch.manual_seed(0)
    first, second = (flash_attention(q, k, v, dropout_p=0.3, block_size=8) for _ in range(2))
    assert not torch.allclose(first, second)
    torch.manual_seed(0)
    torch.testing.assert_close(flash_attention(q, k, v, dropout_p=0.3, block_size=8), first, rtol=0, atol=0)


@pytest.mark.parametrize("T, S, block_size, causal", [(4, 6, 2, True), (6, 4, 3, False), (5, 5, 8, True)])
def test_gradcheck_with_dropout_in_float64(T, S, block_size, causal):
    """A fixed seed (torch.manual_seed inside the function) gives every call of gradcheck the same masks."""
    gen = torch.Generator().manual_seed(T * 10 + S)
    q, k, v = (torch.randn(2, 2, n, w, generator=gen, dtype=torch.float64, requires_grad=True)
               for n, w in ((T, 3), (S, 3), (S, 2)))
    mask = random_mask("full", 2, 2, T, S, gen)

    def dropped(q, k, v):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            context, lse = flash_attention(q, k, v, causal=causal, mask=mask, block_size=block_size,
                                           dropout_p=0.4, return_lse=True)
        return context, lse.masked_fill(lse == float("-inf"), 0.0)  # a row with no key: lse -inf, no derivative

    assert torch.autograd.gradcheck(dropped, (q, k, v))


def test_the_lse_is_differentiable_and_merged_halves_train_like_one_call():
    """Gradients flow through the lse too (dS = P∘(dP - D + dL)): attention over keys cut in two, merged, has the
    gradients of attention over all of them."""
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, 2, n, 4, generator=gen, dtype=torch.float64, requires_grad=True) for n in (5, 9, 9))
    assert torch.autograd.gradcheck(lambda q, k: flash_attention(q, k, v, block_size=2, return_lse=True)[1], (q, k))
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    halves = [x for keys in (slice(0, 4), slice(4, 9))
              for x in flash_attention(leaves[0], leaves[1][..., keys, :], leaves[2][..., keys, :], block_size=3,
                                       return_lse=True, mask=bottom_right(5, 9)[:, keys].clone())]
    out, lse = mha_lib.merge_attention_states(*halves)
    upstream = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    grads = torch.autograd.grad((out * upstream).sum() + lse.sum(), leaves)
    expected_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    expected, expected_lse = flash_attention(*expected_leaves, causal=True, block_size=3, return_lse=True)
    expected_grads = torch.autograd.grad((expected * upstream).sum() + expected_lse.sum(), expected_leaves)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad)


def test_dropout_keeps_the_expected_output():
    """Inverted dropout on the weights (kept ones scaled by 1/(1-p)): the mean over many draws is the plain output."""
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 1, n, 2, generator=gen) for n in (4, 6, 6))
    plain = flash_attention(q, k, v, causal=True, block_size=2)
    torch.manual_seed(9)
    draws = torch.stack([flash_attention(q, k, v, causal=True, block_size=2, dropout_p=0.3) for _ in range(3000)])
    assert not torch.allclose(draws[0], plain, atol=1e-3)
    torch.testing.assert_close(draws.mean(0), plain, rtol=0, atol=0.06)


# --- the online softmax, one step at a time ----------------------------------------------------------------------


def test_online_softmax_start_is_the_empty_state():
    state = mha_lib.online_softmax_start((2, 3), 5, dtype=torch.float64)
    assert state.max.shape == state.total.shape == state.rescale.shape == (2, 3, 1)
    assert state.output.shape == (2, 3, 5) and state.output.dtype == torch.float64
    assert (state.max == float("-inf")).all() and (state.total == 0).all() and (state.output == 0).all()
    assert (state.result() == 0).all()  # no key yet: 0, not 0/0


@pytest.mark.parametrize("block_sizes", [(1, 1, 1, 1, 1, 1, 1), (3, 4), (2, 2, 3), (7,), (1, 5, 1)])
def test_online_softmax_step_state_after_every_block(block_sizes):
    gen = torch.Generator().manual_seed(len(block_sizes))
    S = sum(block_sizes)
    scores = torch.randn(2, 3, S, generator=gen, dtype=torch.float64) * 3  # (rows..., Tb=3, S)
    scores[0, 0, 2:] += 10  # a row whose max jumps late: the rescale must shrink what came before
    values = torch.randn(2, S, 4, generator=gen, dtype=torch.float64)
    state, seen = mha_lib.online_softmax_start((2, 3), 4, dtype=torch.float64), 0
    for size in block_sizes:
        block = slice(seen, seen + size)
        old_max = state.max
        state = mha_lib.online_softmax_step(state, scores[..., block], values[:, block])
        seen += size
        so_far = scores[..., :seen]  # (2, 3, seen)
        new_max = so_far.amax(-1, keepdim=True)
        torch.testing.assert_close(state.max, new_max, rtol=0, atol=0)
        torch.testing.assert_close(state.rescale, torch.exp(old_max - new_max))
        torch.testing.assert_close(state.total, torch.exp(so_far - new_max).sum(-1, keepdim=True))
        torch.testing.assert_close(state.output, torch.exp(so_far - new_max) @ values[:, :seen])
        torch.testing.assert_close(state.result(), torch.softmax(so_far, -1) @ values[:, :seen])
    torch.testing.assert_close(state.result(), torch.softmax(scores, -1) @ values)


def test_online_softmax_step_with_masked_keys():
    """A block that is all -inf leaves a fresh row empty (no NaN), and masked keys weigh nothing."""
    scores = torch.tensor([[float("-inf"), float("-inf")], [0.5, float("-inf")]])  # (Tb=2, Sb=2)
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    state = mha_lib.online_softmax_step(mha_lib.online_softmax_start((2,), 2), scores, values)
    assert state.max[0, 0] == float("-inf") and state.total[0, 0] == 0 and (state.result()[0] == 0).all()
    torch.testing.assert_close(state.result()[1], values[0])
    later = mha_lib.online_softmax_step(state, torch.tensor([[1.0], [1.0]]), torch.tensor([[5.0, 6.0]]))
    torch.testing.assert_close(later.result()[0], torch.tensor([5.0, 6.0]))  # the first real key of row 0
    expected = torch.softmax(torch.tensor([0.5, 1.0]), -1) @ torch.tensor([[1.0, 2.0], [5.0, 6.0]])
    torch.testing.assert_close(later.result()[1], expected)


def test_forgetting_the_rescale_is_caught():
    """The misconception the chapter shows: without exp(m - m') the earlier keys keep a stale weight."""
    scores = torch.tensor([[0.0, 5.0]])
    values = torch.tensor([[1.0], [0.0]])
    state = mha_lib.online_softmax_start((1,), 1)
    for j in range(2):
        state = mha_lib.online_softmax_step(state, scores[:, j:j + 1], values[j:j + 1])
    assert state.rescale.item() == pytest.approx(math.exp(-5.0))
    torch.testing.assert_close(state.result(), torch.softmax(scores, -1) @ values)
    no_rescale = (1.0 + 0.0) / (1.0 + 1.0)  # both terms summed with their own max: weight 1/2 each
    assert abs(state.result().item() - no_rescale) > 0.4


# --- bad input ---------------------------------------------------------------------------------------------------


def esc(text: str) -> str:
    return re.escape(text)


# drawn from their own seed, not from whatever the global generator holds at import: with some draws every score
# of Q·K·1e38 stays finite, and the 'scale too large' check below would have nothing to catch
_QKV = torch.Generator().manual_seed(0)
Q, K, V = (torch.randn(1, 2, 5, 4, generator=_QKV), torch.randn(1, 2, 6, 4, generator=_QKV),
           torch.randn(1, 2, 6, 3, generator=_QKV))


@pytest.mark.parametrize(
    "kwargs, args, error, text",
    [
        ({"block_size": 0}, None, ValueError, "block_size must be a positive int (>= 1), got 0"),
        ({"block_size": -1}, None, ValueError, "block_size must be a positive int (>= 1), got -1"),
        ({"block_size": 1.5}, None, TypeError, "block_size must be a positive int, got float 1.5"),
        ({"block_size": True}, None, TypeError, "block_size must be a positive int, got bool True"),
        ({"causal": 1}, None, TypeError, "causal must be True or False, got int 1"),
        ({"causal": "yes"}, None, TypeError, "causal must be True or False, got str 'yes'"),
        ({"return_lse": None}, None, TypeError, "return_lse must be True or False, got NoneType None"),
        ({"dropout_p": 1.0}, None, ValueError, "dropout_p must be in [0, 1), got 1.0"),
        ({"scale": -1.0}, None, ValueError, "scale must be a finite float > 0, got -1.0"),
        ({"mask": torch.ones(3, 6, dtype=torch.bool)}, None, ValueError,
         "mask of shape (3, 6) does not broadcast to the scores' shape (..., T, S) = (1, 2, 5, 6)"),
        ({"mask": torch.ones(5, 6)}, None, TypeError, "mask must be a torch.bool keep mask (True = attend), got "
                                                      "dtype torch.float32"),
        ({}, (Q, torch.randn(1, 2, 6, 3), V), ValueError,
         "q and k must have the same feature width to take dot products, got q (1, 2, 5, 4) and k (1, 2, 6, 3)"),
        ({}, (Q, K, torch.randn(1, 2, 5, 3)), ValueError,
         "k and v must have the same length S (one value per key), got k (1, 2, 6, 4) and v (1, 2, 5, 3)"),
        ({}, (Q, torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6, 3)), ValueError,
         "q, k and v must share their leading (batch, head) dimensions, got q (1, 2, 5, 4), k (2, 2, 6, 4), "
         "v (2, 2, 6, 3)"),
        ({}, (Q.double(), K, V), TypeError, "k has dtype torch.float32 but q has torch.float64; they must match"),
        ({}, (torch.randn(5), K, V), ValueError, "q must be at least 2-D (..., length, features), got 1-D"),
    ],
    ids=["block-0", "block-neg", "block-float", "block-bool", "causal-int", "causal-str", "lse-none", "dropout-1",
         "scale-neg", "mask-shape", "mask-float", "head-sizes", "kv-lengths", "leading-dims", "dtypes", "q-1d"],
)
def test_bad_input_is_named(kwargs, args, error, text):
    with pytest.raises(error, match=esc(text)):
        flash_attention(*(args or (Q, K, V)), **kwargs)


def test_bad_input_to_the_layer_and_the_online_softmax():
    layer = MultiHeadAttention(8, 8, 16, 0.0, 2, kernel="flash")
    with pytest.raises(ValueError, match=esc("return_weights=True needs kernel='explicit': kernel='flash' computes "
                                             "attention tile by tile")):
        layer(torch.randn(1, 3, 8), return_weights=True)
    with pytest.raises(ValueError, match=esc("value_width must be a positive int (>= 1), got 0")):
        mha_lib.online_softmax_start((2,), 0)
    with pytest.raises(ValueError, match=esc("scale=1e+38 is too large for these q and k")):
        flash_attention(Q, K, V, scale=1e38)


START = mha_lib.online_softmax_start((2, 3), 4)  # rows (2, 3), Dv = 4


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: mha_lib.online_softmax_start((2, -1), 4), ValueError,
         "rows_shape must hold sizes >= 0, the shape (..., Tb) of the query rows, got (2, -1)"),
        (lambda: mha_lib.online_softmax_start(5, 4), TypeError,
         "rows_shape must be a tuple of ints, the shape (..., Tb) of the query rows, got int 5"),
        (lambda: mha_lib.online_softmax_start((2, 1.5), 4), TypeError,
         "rows_shape must be a tuple of ints, the shape (..., Tb) of the query rows, got tuple (2, 1.5)"),
        (lambda: mha_lib.online_softmax_start((2,), 4, dtype=torch.int64), TypeError,
         "dtype must be a floating torch.dtype (the scores' dtype, e.g. torch.float32), got dtype torch.int64"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 5, 6), torch.randn(2, 6, 4)), ValueError,
         "scores must have one row per row of the state: scores (2, 5, 6) has rows (2, 5), state.max (2, 3, 1) has "
         "rows (2, 3)"),
        (lambda: mha_lib.online_softmax_step(START, [[0.5] * 6] * 3, torch.randn(2, 6, 4)), TypeError,
         "scores must be a torch.Tensor, got list"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 3, 6), [[0.5] * 4] * 6), TypeError,
         "values must be a torch.Tensor, got list"),
        (lambda: mha_lib.online_softmax_step(tuple(START), torch.randn(2, 3, 6), torch.randn(2, 6, 4)), TypeError,
         "state must be an OnlineSoftmaxState (from online_softmax_start or a previous step), got tuple"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 3, 6), torch.randn(2, 5, 4)), ValueError,
         "values must hold one value per key of scores: scores (2, 3, 6) has 6 keys, values (2, 5, 4) has 5"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 3, 6), torch.randn(2, 6, 5)), ValueError,
         "scores @ values must have the shape of state.output (2, 3, 4), got scores (2, 3, 6) and values (2, 6, 5), "
         "which give (2, 3, 5)"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 3, 6), torch.randn(3, 6, 4)), ValueError,
         "scores @ values must have the shape of state.output (2, 3, 4), got scores (2, 3, 6) and values (3, 6, 4)"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 3, 6).double(), torch.randn(2, 6, 4)), TypeError,
         "scores has dtype torch.float64 but state.output has torch.float32; they must match"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 3, 6), torch.randn(2, 6, 4, device="meta")),
         ValueError, "values is on meta but state.output is on cpu; move both to one device"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 3, 6), torch.randn(2, 6, 4), dropout_p=1.0),
         ValueError, "dropout_p must be in [0, 1), got 1.0"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 3, 6), torch.randn(2, 6, 4),
                                             dropout_mask=torch.ones(6, dtype=torch.bool)), ValueError,
         "dropout_mask needs the dropout_p it was drawn with (> 0): the kept weights are scaled by "
         "1 / (1 - dropout_p)"),
        (lambda: mha_lib.online_softmax_step(START, torch.randn(2, 3, 6), torch.randn(2, 6, 4), dropout_p=0.5,
                                             dropout_mask=torch.ones(7, dtype=torch.bool)), ValueError,
         "dropout_mask of shape (7,) does not broadcast to the scores' shape (..., T, S) = (2, 3, 6)"),
    ],
    ids=["rows-negative", "rows-int", "rows-float", "dtype-int", "rows-mismatch", "scores-list", "values-list",
         "state-tuple", "keys-mismatch", "width-mismatch", "lead-mismatch", "dtypes", "devices", "dropout-1",
         "mask-without-p", "mask-shape"],
)
def test_bad_input_to_the_online_softmax_is_named(call, error, text):
    with pytest.raises(error, match=esc(text)):
        call()


def test_the_online_softmax_takes_what_its_checks_allow():
    """One row with rows_shape=() and (Sb,) scores, a torch.Size, values broadcast over the leading dimensions, and
    a dropout mask: the same results as softmax."""
    scores, values = torch.randn(6), torch.randn(6, 4)
    state = mha_lib.online_softmax_step(mha_lib.online_softmax_start((), 4), scores, values)
    torch.testing.assert_close(state.result(), torch.softmax(scores, -1) @ values)
    scores = torch.randn(2, 3, 6)
    state = mha_lib.online_softmax_step(mha_lib.online_softmax_start(torch.Size([2, 3]), 4), scores, values)
    torch.testing.assert_close(state.result(), torch.softmax(scores, -1) @ values)  # values (6, 4) for every row
    keep = torch.rand(2, 3, 6, generator=torch.Generator().manual_seed(0)) < 0.5
    state = mha_lib.online_softmax_step(mha_lib.online_softmax_start([2, 3], 4), scores, values, dropout_p=0.5,
                                        dropout_mask=keep)
    torch.testing.assert_close(state.result(), (torch.softmax(scores, -1) * keep / 0.5) @ values)


@pytest.mark.parametrize("scale", [None, 0.5])
def test_no_queries_give_an_empty_context_like_explicit_attention(scale):
    q, k, v = torch.randn(1, 2, 0, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 3)
    expected, _ = explicit_attention(q, k, v, scale=scale)
    out = flash_attention(q, k, v, scale=scale, causal=True)
    assert out.shape == expected.shape == (1, 2, 0, 3)


# --- merging two finished attention states by their log-sum-exp ---------------------------------------------------


def allowed_keys(case: dict, mask, T: int, S: int):
    """The full keep mask of a case, the causal triangle included (None: every key), to be cut with the keys."""
    return combine_masks(bottom_right(T, S), mask) if case["causal"] else mask


def key_slice(mask, keys: slice):
    """A keep mask broadcastable to (..., T, S) cut to the keys ``keys`` (its last dimension)."""
    return None if mask is None else mask[..., keys]


@pytest.mark.parametrize("seed", range(40))
def test_merging_two_halves_of_the_keys_equals_attention_over_all_of_them(seed):
    """Keys cut at a random point (0 and S included: one side empty); each side run by flash_attention with its
    slice of the mask (causal triangle included), merged: explicit attention and SDPA over every key."""
    case = random_case(seed)
    q, k, v, mask = case_tensors(case, seed)
    T, S = case["T"], case["S"]
    allowed = allowed_keys(case, mask, T, S)
    cut = random.Random(seed + 500).randint(0, S)
    halves = []
    for keys in (slice(0, cut), slice(cut, S)):
        halves += flash_attention(q, k[..., keys, :], v[..., keys, :], mask=key_slice(allowed, keys),
                                  block_size=case["block_size"], return_lse=True)
    out, lse = mha_lib.merge_attention_states(*halves)
    _, expected_lse = flash_attention(q, k, v, mask=allowed, block_size=case["block_size"], return_lse=True)
    torch.testing.assert_close(out, reference(q, k, v, mask=allowed), **FORWARD)
    torch.testing.assert_close(out, mha_lib.sdpa_attention(q, k, v, allowed)[0], **FORWARD)
    torch.testing.assert_close(lse, expected_lse, **FORWARD)
    assert out.shape == (case["B"], case["H"], T, case["Dv"]) and lse.shape == (case["B"], case["H"], T)


def test_split_kv_decoding_one_query_over_many_chunks():
    """Flash-Decoding: one new query over a long cache cut into chunks of unequal sizes, merged one after another."""
    gen = torch.Generator().manual_seed(11)
    q, k = torch.randn(2, 4, 1, 8, generator=gen), torch.randn(2, 4, 100, 8, generator=gen)
    v = torch.randn(2, 4, 100, 6, generator=gen)
    edges = [0, 7, 8, 30, 64, 65, 100]
    out, lse = None, None
    for j0, j1 in zip(edges, edges[1:]):
        part = flash_attention(q, k[..., j0:j1, :], v[..., j0:j1, :], return_lse=True)
        out, lse = part if out is None else mha_lib.merge_attention_states(out, lse, *part)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **FORWARD)
    torch.testing.assert_close(lse, torch.logsumexp((q @ k.transpose(-2, -1)) / math.sqrt(8), -1), **FORWARD)


@pytest.mark.parametrize("seed", range(6))
def test_merging_three_parts_is_associative_and_commutative(seed):
    gen = torch.Generator().manual_seed(seed)
    T, S = 6, 3 * 5
    q, k, v = torch.randn(2, 3, T, 4, generator=gen), torch.randn(2, 3, S, 4, generator=gen), torch.randn(2, 3, S, 5)
    keep = torch.rand(2, 3, T, S, generator=gen) < 0.5
    keep[0, 0, 1] = False  # a row with no key at all
    keep[1, 2, 2, 5:] = False  # a row whose keys all sit in the first part
    a, b, c = (flash_attention(q, k[..., j:j + 5, :], v[..., j:j + 5, :], mask=keep[..., j:j + 5], block_size=2,
                               return_lse=True) for j in (0, 5, 10))
    merge = mha_lib.merge_attention_states
    left = merge(*merge(*a, *b), *c)
    right = merge(*a, *merge(*b, *c))
    swapped = merge(*c, *merge(*b, *a))
    expected = flash_attention(q, k, v, mask=keep, return_lse=True)
    for result in (left, right, swapped):
        torch.testing.assert_close(result[0], expected[0], **FORWARD)
        torch.testing.assert_close(result[1], expected[1], **FORWARD)
        torch.testing.assert_close(result[0], reference(q, k, v, mask=keep), **FORWARD)
    assert left[1][0, 0, 1] == float("-inf") and (left[0][0, 0, 1] == 0).all()


def test_merging_with_a_side_that_saw_no_key():
    """lse = -inf on one side: the other side's row comes back unchanged, even if the empty side holds NaN or inf;
    on both sides: output 0 and lse -inf (flash_attention's empty row), which merges on like any other."""
    gen = torch.Generator().manual_seed(3)
    out1, lse1 = torch.randn(2, 4, 3, generator=gen), torch.randn(2, 4, generator=gen)
    out2, lse2 = torch.full((2, 4, 3), float("nan")), torch.full((2, 4), float("-inf"))
    out2[0, 1] = float("inf")
    for merged in (mha_lib.merge_attention_states(out1, lse1, out2, lse2),
                   mha_lib.merge_attention_states(out2, lse2, out1, lse1)):
        assert torch.equal(merged[0], out1) and torch.equal(merged[1], lse1)
    lse1[1, 2] = float("-inf")  # neither side saw a key in this row
    out, lse = mha_lib.merge_attention_states(out1, lse1, out2, lse2)
    assert (out[1, 2] == 0).all() and lse[1, 2] == float("-inf")
    assert torch.isfinite(out).all() and torch.isfinite(lse[~torch.isinf(lse1)]).all()
    later_out, later_lse = torch.randn(2, 4, 3, generator=gen), torch.randn(2, 4, generator=gen)
    again = mha_lib.merge_attention_states(out, lse, later_out, later_lse)
    assert torch.equal(again[0][1, 2], later_out[1, 2]) and again[1][1, 2] == later_lse[1, 2]


def test_merging_keeps_large_lse_finite_and_exact():
    """Log-sum-exps far beyond exp's range (±1000) merge without overflow: only their difference is exponentiated."""
    out1, out2 = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    for base in (-1000.0, 0.0, 1000.0):
        out, lse = mha_lib.merge_attention_states(out1, torch.tensor([base]), out2, torch.tensor([base + math.log(3)]))
        torch.testing.assert_close(out, torch.tensor([[0.25, 0.75]]))
        torch.testing.assert_close(lse, torch.tensor([base + math.log(4)]))


def test_merging_float32_lse_with_bfloat16_outputs():
    """FlashAttention's CUDA kernels keep lse in float32 beside bf16 outputs: each keeps its dtype."""
    out1, out2 = torch.randn(3, 5, 4).bfloat16(), torch.randn(3, 5, 4).bfloat16()
    lse1, lse2 = torch.randn(3, 5), torch.randn(3, 5)
    out, lse = mha_lib.merge_attention_states(out1, lse1, out2, lse2)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    w1 = torch.sigmoid(lse1 - lse2)[..., None]  # exp(L1 - L) = 1 / (1 + exp(L2 - L1))
    torch.testing.assert_close(out.float(), w1 * out1.float() + (1 - w1) * out2.float(), rtol=0, atol=1e-2)
    torch.testing.assert_close(lse, torch.logaddexp(lse1, lse2))


def test_merging_is_differentiable_in_all_four_inputs():
    gen = torch.Generator().manual_seed(4)
    inputs = [torch.randn(2, 3, 4, generator=gen, dtype=torch.float64), torch.randn(2, 3, generator=gen,
              dtype=torch.float64), torch.randn(2, 3, 4, generator=gen, dtype=torch.float64),
              torch.randn(2, 3, generator=gen, dtype=torch.float64)]
    inputs[3][0, 1] = float("-inf")  # one row with an empty second side: the gradient stays finite there
    leaves = [t.requires_grad_() for t in inputs]
    assert torch.autograd.gradcheck(lambda *t: mha_lib.merge_attention_states(*t), leaves)
    out, lse = mha_lib.merge_attention_states(*leaves)
    grads = torch.autograd.grad(out.sum() + lse.sum(), leaves)
    assert all(torch.isfinite(g).all() for g in grads)
    assert (grads[2][0, 1] == 0).all() and grads[3][0, 1] == 0  # the empty side gets no gradient


O, L = torch.randn(2, 3, 4), torch.randn(2, 3)


@pytest.mark.parametrize(
    "args, error, text",
    [
        ((O, L, torch.randn(2, 3, 5), L), ValueError,
         "out2 must have the same shape as out1 (the same queries), got out1 (2, 3, 4) and out2 (2, 3, 5)"),
        ((O, torch.randn(2, 4), O, L), ValueError,
         "lse1 must have shape out1.shape[:-1] = (2, 3) (one log-sum-exp per row of out1 (2, 3, 4)), got (2, 4)"),
        ((O, L, O, torch.randn(2, 3, 1)), ValueError,
         "lse2 must have shape out1.shape[:-1] = (2, 3) (one log-sum-exp per row of out1 (2, 3, 4)), got (2, 3, 1)"),
        ((O, L, O.double(), L), TypeError, "out2 has dtype torch.float64 but out1 has torch.float32; they must match"),
        ((O, L, O, L.double()), TypeError, "lse2 has dtype torch.float64 but lse1 has torch.float32; they must match"),
        ((O, L.long(), O, L), TypeError, "lse1 must be a floating-point tensor, got dtype torch.int64"),
        ((O.long(), L, O, L), TypeError, "out1 must be a floating-point tensor, got dtype torch.int64"),
        (([[1.0]], L, O, L), TypeError, "out1 must be a torch.Tensor, got list"),
        ((O, L, O, 0.5), TypeError, "lse2 must be a torch.Tensor, got float"),
        ((O, L, O, L.to("meta")), ValueError, "lse2 is on meta but out1 is on cpu; move all four to one device"),
        ((O, L, O.to("meta"), L), ValueError, "out2 is on meta but out1 is on cpu; move both to one device"),
        ((torch.tensor(1.0), torch.tensor(1.0), torch.tensor(1.0), torch.tensor(1.0)), ValueError,
         "out1 must be at least 1-D (..., T, Dv), got 0-D shape ()"),
    ],
    ids=["out-shapes", "lse1-shape", "lse2-shape", "out-dtypes", "lse-dtypes", "lse-int", "out-int", "out-list",
         "lse-float", "lse-device", "out-device", "0-d"],
)
def test_bad_input_to_merge_attention_states_is_named(args, error, text):
    with pytest.raises(error, match=esc(text)):
        mha_lib.merge_attention_states(*args)
