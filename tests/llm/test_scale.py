"""Chapter 14's figures and widgets (mha_lib/llm/scale.py): the online softmax walked with the core's own step, the
tiles counted from the masks and equal to what flash_attention computes, the saved memory wall drawn as saved, the
designs' costs from mha_lib.sizes, readable figures, widgets that redraw, and clear errors for bad input."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

import mha_lib  # noqa: E402
from mha_lib import functional  # noqa: E402
from mha_lib.llm import scale  # noqa: E402
from figure_checks import _check_readable, _check_size  # noqa: E402  tests/figure_checks.py: the projector rules

SCORES = torch.randn(12, generator=torch.Generator().manual_seed(0)) * 1.5
SCORES[7] += 3.0  # a late block raises the max: the rescale matters
VALUES = torch.randn(12, 4, generator=torch.Generator().manual_seed(1))


def _readable(fig):
    _check_size(fig)
    _check_readable(fig)


def _memory_result(kernels=("explicit", "flash", "sdpa")):
    """A result in the benchmark's layout (tests/benchmarks/memory_wall.py): explicit ∝ T², the others flat."""
    points = []
    for T in (1024, 2048, 4096):
        for kernel in kernels:
            peak = {"explicit": 4 * T * T / 2**20, "flash": 0.05, "sdpa": 1.5}.get(kernel, 2.0)
            points.append({"kernel": kernel, "T": T, "peak_mb": peak, "seconds": 1e-3 * T / 1024})
    return {"benchmark": "memory_wall", "device": "cpu", "device_name": "Test CPU", "points": points}


# --- the online softmax ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 3, 5, 12, 20])
def test_the_trace_ends_at_the_exact_row_and_its_state_is_the_prefix_softmax(block_size):
    trace = scale.online_softmax_trace(SCORES, VALUES, block_size)
    assert len(trace) == math.ceil(12 / block_size)
    exact = torch.softmax(SCORES.double(), dim=-1) @ VALUES.double()
    assert torch.allclose(trace[-1].result.double(), exact, atol=1e-6)
    assert torch.allclose(scale.exact_row(SCORES, VALUES).double(), exact, atol=1e-6)
    previous = -math.inf
    for step in trace:
        seen = SCORES[: step.keys[1]].double()  # every key up to the end of this block
        assert step.max == pytest.approx(float(seen.max()))
        assert step.total == pytest.approx(float((seen - seen.max()).exp().sum()), rel=1e-6)
        assert step.rescale == pytest.approx(math.exp(previous - step.max))  # exp(m_old - m_new), 0 at the start
        assert torch.allclose(step.result.double(), torch.softmax(seen, -1) @ VALUES[: step.keys[1]].double(),
                              atol=1e-6)
        assert step.block_max == pytest.approx(float(SCORES[step.keys[0]:step.keys[1]].max()))
        previous = step.max
    assert [s.keys for s in trace][-1][1] == 12


def test_the_trace_calls_the_cores_step_once_per_block(monkeypatch):
    calls = []

    def counting(state, scores, values):
        calls.append(tuple(scores.shape))
        return functional.online_softmax_step(state, scores, values)

    monkeypatch.setattr(scale, "online_softmax_step", counting)
    scale.online_softmax_trace(SCORES, VALUES, 5)
    assert calls == [(1, 5), (1, 5), (1, 2)]  # one row, blocks of 5, 5 and the last 2 keys


def test_masked_keys_count_for_nothing_and_a_fully_masked_row_gives_zeros():
    masked = SCORES.clone()
    masked[[2, 9]] = -math.inf
    trace = scale.online_softmax_trace(masked, VALUES, 4)
    keep = torch.ones(12, dtype=torch.bool)
    keep[[2, 9]] = False
    exact = torch.softmax(SCORES[keep].double(), -1) @ VALUES[keep].double()
    assert torch.allclose(trace[-1].result.double(), exact, atol=1e-6)
    empty = scale.online_softmax_trace(torch.full((6,), -math.inf), VALUES[:6], 2)
    assert all(step.total == 0 for step in empty) and not empty[-1].result.any()
    assert not scale.exact_row(torch.full((6,), -math.inf), VALUES[:6]).any()


def test_online_softmax_figure_draws_the_state_of_the_chosen_step():
    fig = scale.online_softmax_figure(SCORES, VALUES, 3, step=3)
    _readable(fig)
    row, sums, out, gap = fig.axes
    assert "block 3 of 4 (keys 6..8)" in fig._suptitle.get_text()
    trace = scale.online_softmax_trace(SCORES, VALUES, 3)
    assert f"m = {trace[2].max:.3f}" in fig._suptitle.get_text()
    colours = [tuple(np.round(p.get_facecolor()[:3], 3)) for p in row.patches]
    blue, orange, grey = (tuple(np.round(matplotlib_rgb(c), 3)) for c in (scale.SEEN_RGB, scale.CURRENT_RGB,
                                                                          scale.UNSEEN_RGB))
    assert colours == [blue] * 6 + [orange] * 3 + [grey] * 3
    assert [p.get_height() for p in sums.patches] == pytest.approx([s.total for s in trace])
    assert [t.get_text() for t in sums.texts] == [f"×{s.rescale:.2f}" for s in trace[:3]]
    heights = [p.get_height() for p in out.patches]
    assert heights[:4] == pytest.approx(trace[2].result.tolist())  # o / ℓ after three blocks
    assert heights[4:] == pytest.approx(scale.exact_row(SCORES, VALUES).tolist())  # the exact row beside it
    assert gap.get_yscale() == "log"


def matplotlib_rgb(colour):
    from matplotlib.colors import to_rgb

    return to_rgb(colour)


def test_online_softmax_figure_clamps_the_step_to_the_last_block():
    fig = scale.online_softmax_figure(SCORES, VALUES, 5, step=10)
    assert "block 3 of 3 (keys 10..11)" in fig._suptitle.get_text()


def test_online_softmax_widget_redraws_when_a_slider_moves():
    widget = scale.online_softmax_widget(SCORES, VALUES, block_size=3, step=1)
    block, step = widget.children[:2]
    first = widget.result
    assert "block 1 of 4" in first._suptitle.get_text()
    step.value = 4
    assert widget.result is not first and "block 4 of 4" in widget.result._suptitle.get_text()
    block.value = 6
    assert "block 2 of 2" in widget.result._suptitle.get_text()  # step 4 clamped to the last of 2 blocks
    assert (step.max, step.value) == (2, 2)  # the slider itself ends at the last block: its readout says 2
    block.value = 1
    assert (step.max, step.value) == (12, 2) and "block 2 of 12" in widget.result._suptitle.get_text()


def test_online_softmax_widget_starts_with_as_many_steps_as_blocks():
    widget = scale.online_softmax_widget(SCORES, VALUES, block_size=4, step=2)
    block, step = widget.children[:2]
    assert (step.min, step.max, step.value) == (1, 3, 2)  # 12 keys in blocks of 4
    with pytest.raises(ValueError, match="step must be an int in"):
        scale.online_softmax_widget(SCORES, VALUES, block_size=4, step=4)  # there is no fourth block
    from mha_lib.display import controls
    assert block.layout.width == step.layout.width == controls.CONTROL_WIDTH  # the series' one layout
    assert block.style.description_width == controls.LABEL_WIDTH


# --- tiles -------------------------------------------------------------------------------------------------------


def _tiles_flash_computes(T, S, block_size, causal):
    """Run flash_attention and record every tile it folds in, and whether it masked it: the kernel's own count."""
    seen = []
    original = functional.online_softmax_step

    def recording(state, scores, values, **options):
        seen.append(bool(torch.isinf(scores).any()))
        return original(state, scores, values, **options)

    functional.online_softmax_step = recording
    try:
        q, k, v = (torch.randn(1, 1, n, 4, generator=torch.Generator().manual_seed(n)) for n in (T, S, S))
        functional.flash_attention(q, k, v, causal=causal, block_size=block_size)
    finally:
        functional.online_softmax_step = original
    return len(seen), sum(seen)


@pytest.mark.parametrize("T, S, block_size", [(16, 16, 4), (10, 10, 4), (8, 24, 4), (5, 17, 3), (16, 16, 32),
                                              (12, 30, 1)])
def test_tile_status_is_what_flash_attention_computes_and_masks(T, S, block_size):
    status = scale.tile_status(T, S, block_size)
    assert status.shape == (math.ceil(T / block_size), math.ceil(S / block_size))
    computed, masked = _tiles_flash_computes(T, S, block_size, causal=True)
    assert int((status != scale.SKIPPED).sum()) == computed
    assert int((status == scale.PARTIAL).sum()) == masked
    assert _tiles_flash_computes(T, S, block_size, causal=False)[0] == status.numel()
    assert bool((scale.tile_status(T, S, block_size, causal=False) == scale.FULL).all())


def test_tile_status_counts_from_the_pair_mask():
    status = scale.tile_status(10, 10, 4)
    assert status.tolist() == [[1, 0, 0], [2, 1, 0], [2, 2, 1]]
    n = 64  # T = S = 64 in tiles of 1: the causal triangle, n(n + 1)/2 of n² pairs
    assert int((scale.tile_status(n, n, 1) != scale.SKIPPED).sum()) == n * (n + 1) // 2
    # after a cache (S > T) bottom right computes far more than top left: the chunk sees the whole past
    assert scale.tile_status(8, 32, 8).tolist() == [[2, 2, 2, 1]]
    assert scale.tile_status(8, 32, 8, top_left=True).tolist() == [[1, 0, 0, 0]]


def test_tile_grid_figure_counts_what_it_draws():
    fig = scale.tile_grid_figure(64, 64, 8)
    _readable(fig)
    (ax,) = [a for a in fig.axes if a.images]
    assert "36 of 64 tiles computed (56%), 8 with a mask" in ax.get_title()
    image = ax.images[0].get_array()
    assert image.shape[:2] == (8, 8)
    assert tuple(image[0, 7]) == scale.MASKED_RGB and tuple(image[7, 0]) == scale.KEPT_RGB
    assert tuple(image[3, 3]) == scale.PARTIAL_RGB


def test_tile_grid_figure_compares_the_two_alignments_after_a_cache():
    fig = scale.tile_grid_figure(16, 48, 8, compare_top_left=True)
    _readable(fig)
    titles = [a.get_title() for a in fig.axes if a.images]
    assert len(titles) == 2
    assert "11 of 12 tiles computed" in titles[0] and "bottom right" in titles[0]
    assert "3 of 12 tiles computed" in titles[1] and "is_causal=True" in titles[1]
    _readable(scale.tile_grid_figure(20, 20, 8, causal=False))


# --- the memory wall -----------------------------------------------------------------------------------------------


def test_memory_wall_rows_group_the_points_by_T():
    rows = scale.memory_wall_rows(_memory_result())
    assert [r["T"] for r in rows] == [1024, 2048, 4096]
    assert rows[-1]["peak_mb"] == {"explicit": 64.0, "flash": 0.05, "sdpa": 1.5}
    assert rows[0]["seconds"]["flash"] == pytest.approx(1e-3)


def test_memory_wall_figure_draws_each_kernel_and_the_t_squared_slope():
    fig = scale.memory_wall_figure(_memory_result())
    _readable(fig)
    memory, time = fig.axes
    labels = [line.get_label() for line in memory.lines]
    assert labels[:3] == ["explicit (builds T × S)", "flash_attention (tiles, Python loop)",
                          "SDPA (PyTorch's fused kernel)"]
    assert np.allclose(memory.lines[0].get_ydata(), [4.0, 16.0, 64.0])
    assert np.allclose(memory.lines[1].get_ydata(), 0.1)  # below 0.1 MB: drawn at 0.1
    slope2, slope1 = memory.lines[-2:]
    assert slope2.get_label() == "slope 2: memory ∝ T²" and np.allclose(slope2.get_ydata(), [4.0, 16.0, 64.0])
    assert slope1.get_label() == "slope 1: memory ∝ T" and np.allclose(slope1.get_ydata(), [0.025, 0.05, 0.1])
    assert memory.get_xscale() == memory.get_yscale() == time.get_yscale() == "log"
    assert "Test CPU" in fig._suptitle.get_text()
    _readable(scale.memory_wall_figure(_memory_result(("flash", "sdpa", "other"))))  # no explicit: anchored on flash


def test_the_saved_memory_wall_is_drawn_as_saved():
    from mha_lib import results

    saved = results.load("memory_wall")["cpu"]
    fig = scale.memory_wall_figure(saved)
    _readable(fig)
    explicit = [p for p in saved["points"] if p["kernel"] == "explicit"]
    line = next(line for line in fig.axes[0].lines if line.get_label().startswith("explicit"))
    assert np.allclose(line.get_ydata(), [max(p["peak_mb"], 0.1) for p in sorted(explicit, key=lambda p: p["T"])])



def test_the_saved_memory_wall_says_what_chapter_14s_prose_reads_in_it():
    """Chapter 14 (section 1) prints the saved numbers and says, without numbers, what they show: a re-run of the
    benchmark that no longer shows it must fail here, not leave the prose wrong."""
    from mha_lib import results

    saved = results.load("memory_wall")["cpu"]
    rows = scale.memory_wall_rows(saved)
    assert len(rows) >= 4 and all({"explicit", "flash", "sdpa", "sdpa_math"} <= set(r["peak_mb"]) for r in rows)
    for row in rows[1:]:  # the first point is small enough for the allocator's noise
        matrix = row["T"] ** 2 * 4 / 2**20  # B = H = 1: one float32 T × S matrix, MiB
        peak = row["peak_mb"]
        assert matrix <= peak["explicit"] <= 1.25 * matrix, row  # "stays close to its one T × S matrix"
        assert peak["sdpa_math"] >= peak["explicit"], row  # "builds that matrix too, and more"
        assert peak["flash"] < 0.05 * peak["explicit"], row  # "far below"
        assert peak["sdpa"] < 10, row  # "within a few MiB"
    last = rows[-1]
    assert last["seconds"]["flash"] > last["seconds"]["explicit"] > last["seconds"]["sdpa"]  # "our tiles lose"
    assert (last["T"] // saved["block_size"]) ** 2 >= 10_000  # "tens of thousands of small tiles"
    flash = np.array([r["peak_mb"]["flash"] for r in rows])
    growth = np.diff(np.log(flash)) / np.diff(np.log([r["T"] for r in rows]))
    assert 0.5 < growth[1:].mean() < 1.5  # "grows like T", along the dash-dotted line
    Dh = saved["shape"]["Dh"]
    for row in rows:  # "within a few tenths of a MiB of that output"
        assert abs(row["peak_mb"]["flash"] - row["T"] * Dh * 4 / 2**20) <= 0.3, row
    explicit_vs_sdpa = {r["T"]: r["seconds"]["explicit"] / r["seconds"]["sdpa"] for r in rows}
    assert all(explicit_vs_sdpa[T] >= 2.0 for T in explicit_vs_sdpa if T >= 4096)  # "SDPA ... 2.2 to 2.7 times"
    assert all(explicit_vs_sdpa[T] < 1.0 for T in explicit_vs_sdpa if T <= 2048)  # "below that, explicit is faster"


def test_the_memory_wall_title_counts_the_threads_in_the_students_language():
    """The benchmark writes its machine as "AMD EPYC, 2 threads": the title says the number with ngettext."""
    one = dict(_memory_result(), device_name="Test CPU, 1 thread", threads=1)
    assert "measured on Test CPU (cpu, 1 thread)," in scale.memory_wall_figure(one)._suptitle.get_text()
    two = dict(_memory_result(), device_name="Test CPU, 2 threads")  # no "threads" key: read from the name
    assert "measured on Test CPU (cpu, 2 threads)," in scale.memory_wall_figure(two)._suptitle.get_text()
    mha_lib.set_language("zh-CN")
    try:
        title = scale.memory_wall_figure(two)._suptitle.get_text()
    finally:
        mha_lib.set_language("en")
    assert "Test CPU" in title and "2 个线程" in title and "threads" not in title
    with pytest.raises(ValueError, match=r"result\['threads'\] must be a positive int"):
        scale.memory_wall_figure(dict(_memory_result(), threads=0))


# --- refusals, translated ----------------------------------------------------------------------------------------


def _refusals():
    """The refusals chapter 14 shows or names, raised by the library itself (a reworded message fails here)."""
    torch.manual_seed(0)
    layer = mha_lib.MultiHeadAttention(8, 8, 16, 0.0, 2)
    latent = mha_lib.MultiHeadLatentAttention(16, 2, kv_lora_rank=4, qk_nope_head_dim=4, qk_rope_head_dim=2,
                                              v_head_dim=4, kernel="flash")
    calls = []
    for kernel in ("flash", "sdpa"):
        calls.append(lambda kernel=kernel: (setattr(layer, "kernel", kernel), layer(torch.randn(1, 3, 8),
                                                                                   return_weights=True)))
    calls.append(lambda: latent(torch.randn(1, 3, 16), return_weights=True))
    errors = []
    for call in calls:
        with pytest.raises(ValueError) as caught:
            call()
        errors.append(caught.value)
    return errors


def test_the_refusals_the_chapter_shows_read_in_the_students_language():
    errors = _refusals()
    assert [scale.refusal_message(e) for e in errors] == [str(e) for e in errors]  # English: the library's text
    mha_lib.set_language("zh-CN")
    try:
        chinese = [scale.refusal_message(e) for e in errors]
    finally:
        mha_lib.set_language("en")
    for error, text in zip(errors, chinese):
        assert re.search(r"[\u4e00-\u9fff]", text) and "never" not in text, (str(error), text)
        assert "return_weights=True" in text and "kernel='explicit'" in text  # the code stays as it is written
    assert "kernel='flash'" in chinese[2]  # the latent layer's kernel, filled in


def test_an_unknown_message_is_returned_as_it_is_and_a_non_exception_is_refused():
    mha_lib.set_language("zh-CN")
    try:
        assert scale.refusal_message(ValueError("something else")) == "something else"
    finally:
        mha_lib.set_language("en")
    with pytest.raises(TypeError, match="error must be an exception"):
        scale.refusal_message("return_weights=True needs kernel='explicit'")


# --- designs -----------------------------------------------------------------------------------------------------


def test_design_costs_come_from_mha_lib_sizes_in_deepseek_v3s_shape():
    v3 = mha_lib.DECODER_CONFIGS["deepseek-v3"]
    mha, gqa, mqa, mla = (scale.design_costs(d, num_kv_heads=8 if d == "GQA" else None) for d in scale.DESIGNS)
    assert (mha["cache_numbers"], gqa["cache_numbers"], mqa["cache_numbers"], mla["cache_numbers"]) == \
        (2 * 128 * 128, 2 * 8 * 128, 2 * 128, 512 + 64)
    assert mla["cache_bytes_per_token"] == v3.kv_cache_bytes(1) == 61 * 576 * 2
    assert mha["cache_bytes_per_token"] == mha_lib.kv_cache_bytes(61, 128, 128, 1)
    assert mha["parameters"] == 4 * 7168 * 128 * 128
    assert gqa["parameters"] == mha_lib.attention_parameter_count(7168, False, out_bias=False, num_heads=128,
                                                                  num_kv_heads=8, head_dim=128)
    assert mla["parameters"] == mha_lib.latent_attention_parameter_count(7168, 128, 512, 128, 64, 128, 1536)
    assert mla["q_lora_rank"] == 1536 and mla["parameters"] < gqa["parameters"]  # its queries go through a latent
    assert scale.design_costs("MLA", q_lora_rank=7168)["parameters"] == \
        mha_lib.latent_attention_parameter_count(7168, 128, 512, 128, 64, 128, 7168)
    S = 4096  # scores and the weighted sum of one new token, 2 FLOPs per multiply-add, all 61 layers
    assert mha["flops_per_token"] == gqa["flops_per_token"] == 61 * 2 * 2 * 128 * S * 128
    assert mla["flops_per_token"] == 61 * 2 * 128 * S * (512 + 64 + 512)
    assert mha["flops_per_byte"] == pytest.approx(1.0)  # MHA decoding reads 2 bytes for each multiply-add
    assert mla["flops_per_byte"] == pytest.approx(128 * 1088 / 576)


def test_design_costs_in_another_shape_give_mla_deepseek_v2s_proportions():
    mla = scale.design_costs("MLA", config="llama-2-7b")
    assert mla["q_lora_rank"] is None  # no published q_lora_rank: queries projected directly
    assert mla["cache_numbers"] == 4 * 128 + 64  # r = 4·Dh, dr = Dh / 2
    assert scale.design_costs("MLA", kv_lora_rank=256, qk_rope_head_dim=32, config="llama-2-7b")[
        "cache_numbers"] == 288
    assert scale.design_costs("GQA", num_kv_heads=8, config="llama-3-8b")["cache_bytes_per_token"] == \
        mha_lib.DECODER_CONFIGS["llama-3-8b"].kv_cache_bytes(1)


def test_design_table_lists_the_published_decoders():
    rows = {row["model"]: row for row in scale.design_table()}
    assert list(rows) == list(mha_lib.DECODER_CONFIGS)
    assert rows["deepseek-v3"]["bytes_per_token"] == 70272 and rows["deepseek-v3"]["numbers_per_layer"] == 576
    assert rows["llama-2-7b"]["bytes_per_token"] == 524288 and rows["llama-2-7b"]["design"] == "MHA (G = 32)"
    assert rows["llama-3-8b"]["design"] == "GQA (G = 8)"
    assert rows["mistral-7b"]["design"] == "GQA (G = 8) + window 4,096"
    assert rows["mistral-7b"]["bytes"] == 32 * 2 * 8 * 128 * 4096 * 2  # the window caps the cache at 4,096 tokens
    assert scale.design_table(1000)[0]["bytes"] == 12 * 2 * 12 * 64 * 1000 * 2


def test_mla_forms_count_what_decoding_would_pay_to_re_expand():
    """Chapter 14 (the optional count after section 5): expanded, a decoding step re-expands every cached latent
    through W_uk and W_uv, about 120 times an absorbed (query, key) pair in DeepSeek-V3; absorbed, each query pays
    W_ukᵀq and W_uv once, the same count as re-expanding one latent."""
    from torch.utils.flop_counter import FlopCounterMode

    forms = scale.mla_forms()
    H, r, dr, dn = 128, 512, 64, 128
    kv_up = torch.nn.Linear(r, H * (dn + dn), bias=False, device="meta")  # W_uk and W_uv of every head
    with FlopCounterMode(display=False) as counter:
        kv_up(torch.empty(1, 1, r, device="meta"))  # one cached latent
    assert forms["re_expand"] == counter.get_total_flops() == 33_554_432
    W_uk, W_uv = torch.empty(H, dn, r, device="meta"), torch.empty(H, dn, r, device="meta")  # (H, dn, r), (H, dv, r)
    with FlopCounterMode(display=False) as counter:
        absorbed_q = torch.empty(1, H, 1, dn, device="meta") @ W_uk  # W_uk[h]ᵀ q: (1, H, 1, r)
        torch.empty(1, H, 1, r, device="meta") @ W_uv.transpose(1, 2)  # the latents' weighted sum through W_uv
    assert absorbed_q.shape == (1, H, 1, r)
    assert forms["per_query"] == counter.get_total_flops() == forms["re_expand"]
    context = 4096  # the absorbed pair is design_costs' decoding count, per cached token and layer
    assert forms["absorbed"] * 61 * context == scale.design_costs("MLA", context=context)["flops_per_token"]
    assert forms["absorbed"] == 2 * H * (r + dr) + 2 * H * r == 278_528
    assert forms["expanded"] == 2 * H * (dn + dr) + 2 * H * dn == 81_920
    assert round(forms["re_expand"] / forms["absorbed"]) == 120
    # the defaults: one decoding step over 4,096 keys
    assert (forms["queries"], forms["keys"], forms["pairs"]) == (1, 4096, 4096)
    assert forms["absorbed_total"] == forms["per_query"] + 4096 * forms["absorbed"]
    assert forms["expanded_total"] == 4096 * (forms["re_expand"] + forms["expanded"])
    assert forms["expanded_total"] > 100 * forms["absorbed_total"]
    # a prompt: as many queries as keys, so the per-query and the per-key work are equal; expanded wins at any length
    for T in (1, 2, 16, 171, 172, 4096):
        prompt = scale.mla_forms(queries=T, keys=T)
        assert prompt["pairs"] == T * (T + 1) // 2 == int(torch.ones(T, T).tril().sum())
        assert prompt["absorbed_total"] - prompt["expanded_total"] == prompt["pairs"] * (278_528 - 81_920)
        assert prompt["expanded_total"] <= prompt["absorbed_total"]
    chunk = scale.mla_forms(queries=4, keys=12)  # a chunk of 4 after 8 cached tokens: 9 + 10 + 11 + 12 pairs
    assert chunk["pairs"] == 42
    other = scale.mla_forms("llama-2-7b")  # DeepSeek-V2's proportions in another shape: r = 4·Dh, dr = Dh / 2
    assert other["re_expand"] == other["per_query"] == 2 * 512 * 32 * 256


def test_design_figure_highlights_the_chosen_design_and_the_widget_redraws():
    fig = scale.design_figure("MLA")
    _readable(fig)
    cache = fig.axes[0]
    assert [t.get_text() for t in cache.get_yticklabels()] == ["MHA (G = 128)", "GQA (G = 8)", "MQA (G = 1)",
                                                              "MLA (r = 512, dr = 64)"]
    assert [round(p.get_width(), 3) for p in cache.patches] == [3904.0, 244.0, 30.5, 68.625]
    assert "576 numbers per token and layer, 56.9× fewer than MHA" in fig._suptitle.get_text()
    widget = scale.design_widget()
    design, groups, rank, context = widget.children[:4]
    assert list(groups.options) == sorted(groups.options) and groups.options[0] == 1  # G grows to the right
    assert list(rank.options) == sorted(rank.options) and list(context.options) == sorted(context.options)
    first = widget.result
    design.value = "GQA"
    assert widget.result is not first and "GQA (G = 8): 2,048 numbers" in widget.result._suptitle.get_text()
    groups.value = 16
    assert "GQA (G = 16): 4,096 numbers" in widget.result._suptitle.get_text()


def test_design_figure_names_mha_the_reference_not_one_times_fewer():
    mha = scale.design_figure("MHA")._suptitle.get_text()
    assert "MHA (G = 128): 32,768 numbers per token and layer, the reference" in mha and "1.0×" not in mha
    same = scale.design_figure("GQA", num_kv_heads=128)._suptitle.get_text()  # G = H: MHA by another name
    assert "as many as MHA" in same and "1.0×" not in same
    mha_lib.set_language("zh-CN")
    try:
        for design in ("MHA", "GQA"):
            text = scale.design_figure(design, num_kv_heads=128)._suptitle.get_text()
            assert "1/1.0" not in text and "MHA" in text
    finally:
        mha_lib.set_language("en")


# --- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, phrase", [
    (lambda: scale.online_softmax_trace(SCORES[None], VALUES, 3), ValueError, "scores_row must be 1-D"),
    (lambda: scale.online_softmax_trace(SCORES, VALUES[:5], 3), ValueError, "values must have one row per score"),
    (lambda: scale.online_softmax_trace(SCORES, VALUES, 0), ValueError, "block_size must be a positive int"),
    (lambda: scale.online_softmax_trace(SCORES.long(), VALUES, 3), TypeError, "scores_row must hold floating"),
    (lambda: scale.online_softmax_trace(torch.full((12,), math.nan), VALUES, 3), ValueError, "NaN or +inf"),
    (lambda: scale.online_softmax_trace([1.0, 2.0], VALUES[:2], 1), TypeError, "scores_row must be a torch.Tensor"),
    (lambda: scale.online_softmax_figure(SCORES, VALUES, 3, step=0), ValueError, "step must be an int in [1,"),
    (lambda: scale.online_softmax_widget(SCORES, VALUES, block_size=13), ValueError, "block_size must be an int in"),
    (lambda: scale.tile_status(0, 4, 2), ValueError, "T must be a positive int"),
    (lambda: scale.tile_status(4, 4, 2.0), TypeError, "block_size must be a positive int"),
    (lambda: scale.tile_status(4, 4, 2, causal=1), TypeError, "causal must be True or False"),
    (lambda: scale.tile_grid_figure(4, 4, 2, causal=False, compare_top_left=True), ValueError, "needs causal=True"),
    (lambda: scale.memory_wall_figure([]), TypeError, "result must be a dict"),
    (lambda: scale.memory_wall_figure({"cpu": {}}), ValueError, "pass one device's result"),
    (lambda: scale.memory_wall_rows({"device": "cpu", "points": [{"T": 1}]}), ValueError, "every point needs"),
    (lambda: scale.design_costs("GQA"), TypeError, "GQA needs num_kv_heads"),
    (lambda: scale.design_costs("GQA", num_kv_heads=3), ValueError, "num_kv_heads must divide the 128"),
    (lambda: scale.design_costs("MLA", num_kv_heads=8), ValueError, "num_kv_heads is for GQA"),
    (lambda: scale.design_costs("MHA", kv_lora_rank=8), ValueError, "are for MLA, not MHA"),
    (lambda: scale.design_costs("GQA", num_kv_heads=8, q_lora_rank=64), ValueError, "are for MLA, not GQA"),
    (lambda: scale.design_costs("MLA", q_lora_rank=0), ValueError, "q_lora_rank must be a positive int"),
    (lambda: scale.design_costs("MoE"), ValueError, "design must be one of"),
    (lambda: scale.design_costs("MHA", config="gpt-5"), ValueError, "config must be one of"),
    (lambda: scale.design_costs("MHA", context=0), ValueError, "context must be a positive int"),
    (lambda: scale.mla_forms("gpt-5"), ValueError, "config must be one of"),
    (lambda: scale.mla_forms(queries=5, keys=4), ValueError, "queries must be an int in [1, 4]"),
    (lambda: scale.mla_forms(keys=0), ValueError, "keys must be a positive int"),
])
def test_bad_input_names_the_argument(call, error, phrase):
    with pytest.raises(error) as caught:
        call()
    assert phrase in str(caught.value)


def test_online_softmax_widget_defaults_to_section_2s_row():
    row, values = scale.section_row()
    assert torch.equal(row, torch.randn(12, generator=torch.Generator().manual_seed(6)) * 2)
    assert torch.equal(values, torch.randn(12, 4, generator=torch.Generator().manual_seed(7)))
    widget = scale.online_softmax_widget()
    block, step = widget.children[:2]
    assert (block.value, step.value, step.max) == (4, 2, 3)
    assert "block 2 of 3" in widget.result._suptitle.get_text()
    with pytest.raises(ValueError, match="give both scores_row and values"):
        scale.online_softmax_widget(row)
