"""On a CUDA GPU, mha_lib computes what it computes on the CPU, and prints the same text.

The recipe the notebooks follow: ``make_reproducible`` (no TF32), weights and inputs drawn on the CPU after a
seed, then moved to the GPU. Every test here builds both copies that way and compares them. Skipped, with the
reason, on machines without CUDA.
"""

from __future__ import annotations

import copy

import pytest
import torch

import mha_lib
from mha_lib.display.printing import format_value

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is available on this machine"),
]

GPU = torch.device("cuda")
KERNEL_NAMES = ("explicit", "sdpa")
PADDINGS = ("none", "key_padding", "valid_lens_b", "valid_lens_bt")


def tolerances(dtype: torch.dtype) -> dict:
    return {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}


def assert_same_on_cpu(gpu_result: torch.Tensor, cpu_result: torch.Tensor, **overrides) -> None:
    assert gpu_result.device.type == GPU.type
    torch.testing.assert_close(gpu_result.cpu(), cpu_result, **{**tolerances(cpu_result.dtype), **overrides})


def padding_kwargs(kind: str, B: int, T: int, S: int, gen: torch.Generator) -> dict:
    """CPU padding arguments; each kind leaves at least one query with nothing to attend to."""
    if kind == "none":
        return {}
    if kind == "key_padding":
        padded = torch.rand(B, S, generator=gen) < 0.3  # True = padding
        padded[-1] = True  # the last sequence is all padding
        return {"key_padding_mask": padded}
    if kind == "valid_lens_b":
        lens = torch.randint(1, S + 1, (B,), generator=gen)
        lens[0] = 0
        return {"valid_lens": lens}
    lens = torch.randint(1, S + 1, (B, T), generator=gen)
    lens[0, 1] = 0
    return {"valid_lens": lens}


def to_gpu(kwargs: dict) -> dict:
    return {name: value.to(GPU) for name, value in kwargs.items()}


def test_get_device_picks_cuda(device):
    assert mha_lib.get_device().type == GPU.type
    assert device.type == GPU.type  # conftest's fixture follows the library


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
@pytest.mark.parametrize("is_causal", (False, True))
@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_kernels_match_cpu(kernel, is_causal, dtype):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 2, 7, 4, generator=gen, dtype=dtype)
    k = torch.randn(3, 2, 5, 4, generator=gen, dtype=dtype)
    v = torch.randn(3, 2, 5, 6, generator=gen, dtype=dtype)
    keep = torch.rand(3, 1, 7, 5, generator=gen) < 0.7
    keep[1, :, 2] = False  # one query with nothing to attend to
    cpu_context, cpu_weights = mha_lib.KERNELS[kernel](q, k, v, keep, is_causal=is_causal)
    gpu_context, gpu_weights = mha_lib.KERNELS[kernel](q.to(GPU), k.to(GPU), v.to(GPU), keep.to(GPU),
                                                       is_causal=is_causal)
    assert torch.isfinite(gpu_context).all()
    assert (gpu_context[1, :, 2] == 0).all()
    assert_same_on_cpu(gpu_context, cpu_context)
    if kernel == "explicit":
        assert_same_on_cpu(gpu_weights, cpu_weights)


def build_module(name: str, kernel: str, causal: bool, dtype: torch.dtype):
    torch.manual_seed(0)  # on the CPU: the same weights on every machine
    if name == "split":
        module = mha_lib.MultiHeadAttention(6, 8, 10, 0.0, num_heads=2, qkv_bias=True, kernel=kernel, causal=causal)
    elif name == "cross":
        module = mha_lib.MultiHeadAttention(6, 8, 10, 0.0, num_heads=4, kernel=kernel, causal=causal, d_kv_in=5)
    else:
        module = mha_lib.FusedMultiHeadAttention(6, 8, 10, 0.0, num_heads=2, qkv_bias=True, kernel=kernel,
                                                 causal=causal)
    return module.to(dtype).eval()


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("causal", (True, False))
@pytest.mark.parametrize("kernel", KERNEL_NAMES)
@pytest.mark.parametrize("name", ("split", "cross", "fused"))
def test_modules_match_cpu(name, kernel, causal, padding, dtype):
    gen = torch.Generator().manual_seed(1)
    B, T, S = 3, 6, (8 if name == "cross" else 6)
    x = torch.randn(B, T, 6, generator=gen, dtype=dtype)
    args = (x, torch.randn(B, S, 5, generator=gen, dtype=dtype)) if name == "cross" else (x,)
    masks = padding_kwargs(padding, B, T, S, gen)
    flags = {"return_weights": True} if kernel == "explicit" else {}  # only the explicit kernel has weights

    cpu_module = build_module(name, kernel, causal, dtype)
    gpu_module = copy.deepcopy(cpu_module).to(GPU)
    cpu_result = cpu_module(*args, **masks, **flags)
    gpu_result = gpu_module(*(a.to(GPU) for a in args), **to_gpu(masks), **flags)
    if kernel == "explicit":
        (cpu_out, cpu_weights), (gpu_out, gpu_weights) = cpu_result, gpu_result
        assert_same_on_cpu(gpu_weights, cpu_weights)
    else:
        cpu_out, gpu_out = cpu_result, gpu_result
    assert torch.isfinite(gpu_out).all()
    assert_same_on_cpu(gpu_out, cpu_out)


@pytest.mark.parametrize("padding", ("none", "key_padding", "valid_lens_bt"))
@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_gradients_match_cpu(kernel, padding):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(3, 6, 6, generator=gen)
    upstream = torch.randn(3, 6, 8, generator=gen)
    kwargs = padding_kwargs(padding, 3, 6, 6, gen)
    cpu_module = build_module("split", kernel, True, torch.float32)
    gpu_module = copy.deepcopy(cpu_module).to(GPU)

    def grads(module, x, kwargs, upstream):
        x = x.clone().requires_grad_()
        (module(x, **kwargs) * upstream).sum().backward()
        return [x.grad] + [p.grad for p in module.parameters()]

    cpu_grads = grads(cpu_module, x, kwargs, upstream)
    gpu_grads = grads(gpu_module, x.to(GPU), to_gpu(kwargs), upstream.to(GPU))
    for cpu_grad, gpu_grad in zip(cpu_grads, gpu_grads, strict=True):
        assert torch.isfinite(gpu_grad).all()  # fully masked rows must not turn into NaN on the GPU either
        assert_same_on_cpu(gpu_grad, cpu_grad, rtol=1e-4, atol=1e-5)


def test_wrapper_and_its_split_match_cpu():
    torch.manual_seed(3)
    wrapper = mha_lib.MultiHeadAttentionWrapper(4, 3, 8, 0.0, num_heads=3, qkv_bias=True)
    x = torch.randn(2, 8, 4, generator=torch.Generator().manual_seed(3))
    cpu_out, cpu_weights = wrapper(x, return_weights=True)
    gpu_wrapper = copy.deepcopy(wrapper).to(GPU)
    assert all(head.causal_mask.device.type == GPU.type for head in gpu_wrapper.heads)  # the buffer follows
    gpu_out, gpu_weights = gpu_wrapper(x.to(GPU), return_weights=True)
    assert_same_on_cpu(gpu_out, cpu_out)
    assert_same_on_cpu(gpu_weights, cpu_weights)
    split = mha_lib.split_from_wrapper(gpu_wrapper)  # converted on the GPU, stays there
    assert split.W_query.weight.device.type == GPU.type
    assert_same_on_cpu(split(x.to(GPU)), cpu_out)


def test_seed_000_wrapper_prints_the_same_as_on_the_cpu():
    # the start-here notebook's cell: the book's wrapper on "Your journey starts with one step", twice
    torch.manual_seed(123)
    wrapper = mha_lib.MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2)
    batch = mha_lib.journey_batch()
    cpu_text = format_value(wrapper(batch))
    gpu_out = wrapper.to(GPU)(batch.to(GPU))
    assert gpu_out.device.type == GPU.type
    gpu_text = format_value(gpu_out)
    assert gpu_text == cpu_text
    assert "[-0.4519,  0.2216,  0.4772,  0.1063]," in gpu_text  # the book's first row
    assert "device" not in gpu_text and "grad_fn" not in gpu_text


def test_chapter_11_runs_on_the_gpu_as_on_the_cpu():
    # the shipped model measured on the GPU gives the CPU's numbers; the training loop follows the model there
    from mha_lib.induction import model as induction

    run = induction.load_run("two_layer")
    batch = induction.held_out_batch()  # drawn on the CPU: evaluate moves it to the model's device
    gpu_model = copy.deepcopy(run.model).to(GPU)
    for mask in (None, induction.knockout_mask(run.model, [(0, 3)])):
        cpu, gpu = induction.evaluate(run.model, batch, mask), induction.evaluate(gpu_model, batch, mask)
        for key in ("loss", "previous_token", "induction"):
            assert_same_on_cpu(gpu[key], cpu[key], rtol=1e-4, atol=1e-5)
        assert abs(gpu["accuracy"].item() - cpu["accuracy"].item()) < 0.01  # an argmax may flip on a near tie
    cpu_written = induction.generation_accuracy(run.model, batch)
    gpu_written = induction.generation_accuracy(gpu_model, batch)
    assert abs(gpu_written["generated"].item() - cpu_written["generated"].item()) < 0.01
    model = induction.new_model("two_layer").to(GPU)
    log, _ = induction.train(model, 40, eval_every=20, eval_size=64)
    assert next(model.parameters()).device.type == GPU.type
    assert log.steps == [0, 20, 40] and log.eval_loss[-1] < log.eval_loss[0]


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
@pytest.mark.parametrize("num_kv_heads, rope_theta, window", [(4, None, None), (2, 1e4, None), (1, 5e5, 3)])
def test_todays_layer_with_a_cache_matches_cpu(kernel, num_kv_heads, rope_theta, window):
    """GQA, RoPE and a window, fed through a KVCache in uneven chunks: the GPU gives the CPU's output."""
    torch.manual_seed(0)
    cpu_layer = mha_lib.MultiHeadAttention(16, 16, 32, 0.0, 4, kernel=kernel, num_kv_heads=num_kv_heads,
                                           rope_theta=rope_theta, window=window).eval()
    gpu_layer = copy.deepcopy(cpu_layer).to(GPU)
    x = torch.randn(2, 9, 16)
    cpu_cache, gpu_cache = mha_lib.KVCache(), mha_lib.KVCache()
    start = 0
    for size in (1, 4, 3, 1):
        chunk = x[:, start:start + size]
        cpu_out = cpu_layer(chunk, kv_cache=cpu_cache)
        gpu_out = gpu_layer(chunk.to(GPU), kv_cache=gpu_cache)
        assert_same_on_cpu(gpu_out, cpu_out)
        start += size
    assert (gpu_cache.seen, gpu_cache.length, gpu_cache.nbytes) == (cpu_cache.seen, cpu_cache.length,
                                                                     cpu_cache.nbytes)


@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("T, S, block_size", [(7, 7, 3), (5, 11, 4), (11, 5, 2)])
def test_flash_attention_matches_cpu(T, S, block_size, causal):
    """The tiled kernel (chapter 14) on the GPU: the CPU's context, log-sum-exp and gradients."""
    gen = torch.Generator().manual_seed(T * S)
    q, k, v = (torch.randn(2, 3, n, w, generator=gen) for n, w in ((T, 4), (S, 4), (S, 5)))
    keep = torch.rand(2, 1, T, S, generator=gen) < 0.7
    keep[1, :, 0] = False  # a query with nothing to attend to
    upstream = torch.randn(2, 3, T, 5, generator=gen)

    def run(q, k, v, keep, upstream):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        context, lse = mha_lib.flash_attention(*leaves, causal=causal, mask=keep, block_size=block_size,
                                               return_lse=True)
        (context * upstream).sum().backward()
        return [context, lse] + [t.grad for t in leaves]

    cpu = run(q, k, v, keep, upstream)
    gpu = run(q.to(GPU), k.to(GPU), v.to(GPU), keep.to(GPU), upstream.to(GPU))
    assert (gpu[0][1, :, 0] == 0).all()
    for gpu_result, cpu_result in zip(gpu, cpu, strict=True):
        assert_same_on_cpu(gpu_result, cpu_result, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("absorbed", (False, True))
@pytest.mark.parametrize("kernel", ("explicit", "sdpa", "flash"))
def test_latent_attention_with_a_cache_matches_cpu(kernel, absorbed):
    """DeepSeek's latent attention (chapter 14), YaRN and a compressed query, fed through a KVCache in chunks."""
    torch.manual_seed(0)
    cpu_layer = mha_lib.MultiHeadLatentAttention(
        16, 4, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=3, q_lora_rank=6, context_length=32,
        yarn=mha_lib.YaRN(4.0, 8, mscale=0.8, mscale_all_dim=1.0), bias=True, kernel=kernel).eval()
    gpu_layer = copy.deepcopy(cpu_layer).to(GPU)
    x = torch.randn(2, 9, 16)
    assert_same_on_cpu(gpu_layer(x.to(GPU), absorbed=absorbed), cpu_layer(x, absorbed=absorbed))
    cpu_cache, gpu_cache = mha_lib.KVCache(), mha_lib.KVCache()
    start = 0
    for size in (1, 4, 3, 1):
        chunk = x[:, start:start + size]
        cpu_out = cpu_layer(chunk, kv_cache=cpu_cache, absorbed=absorbed)
        gpu_out = gpu_layer(chunk.to(GPU), kv_cache=gpu_cache, absorbed=absorbed)
        assert_same_on_cpu(gpu_out, cpu_out)
        start += size
    assert gpu_cache.nbytes == cpu_cache.nbytes == 2 * 9 * (8 + 4) * 4
