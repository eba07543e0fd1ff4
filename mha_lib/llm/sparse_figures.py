"""Chapter 17's figures, widgets and measurements: reading only what matters (DeepSeek's sparse attention).

    topk_mass(weights, ks, first_query)   the share of each query's attention weight held by its k largest weights,
                                          per layer (mean over heads and queries)
    mass_figure(mass, ks, visible)        that share against k, one line per layer
    indexer_costs(config)                 per (query, key) pair and per cached token: the lightning indexer against
                                          the latent attention it ranks for (multiply-adds, cache numbers, bytes a
                                          decoding step reads)
    demo_layer(index_topk)                the chapter's small MultiHeadLatentAttention with an indexer (random weights)
    demo_input(T)                         its input
    selection_grid(selected, S)           ``select``'s indices as a (T, S) keep grid
    selection_figure(layer, x, past)      which keys each query reads: selected, visible but skipped, future
    sparse_errors(layer, x, ks)           the output's error against dense attention when each query reads the k
                                          keys its indexer picks
    selection_widget(k)                   the selection, the error and the bytes a decoding step reads, k on a slider
    measure_paths(lengths, k)             time and peak memory of one call, dense / masked / gathered, each point in
                                          a fresh Python process (as chapter 14's memory wall)
    paths_rows(result) / paths_figure(result)   that measurement as table rows and as a figure
    tiny_deepseek_v32(seed)               a tiny transformers ``DeepseekV32Attention`` built offline, random weights
    deepseek_v32_reference(module, config, x)   its eager output and its indexer's top-k, called as V3.2 calls it
    v4_cache_numbers(config)              DeepSeek-V4's compressed attention: numbers cached per token of context
    v4_reads_figure(layer, x)             what each query of a compressed layer reads: its window of raw tokens and
                                          the entries (picked by the indexer in CSA layers)

Imported on use by the chapter (only ``tiny_deepseek_v32`` and its reference load transformers).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import numpy as np
import torch

from ..display.controls import int_slider
from ..display.plotting import LABEL_PT, SUPTITLE_PT, TITLE_PT
from ..language import gettext as _, pgettext
from ..validation import check_int, check_positive_int, check_tensor
from .rotary import AUTO_DISPLAY, _figure, under_test

Tensor = torch.Tensor

SELECTED_COLOUR, SKIPPED_COLOUR, FUTURE_COLOUR = "#1f77b4", "#dbe9f6", "0.82"
INDEXER_COLOUR, DENSE_COLOUR = "#d62728", "0.35"
PATH_STYLES = {"dense": ("--o", DENSE_COLOUR), "masked": ("-s", INDEXER_COLOUR), "gathered": ("-^", SELECTED_COLOUR)}


# ----------------------------------------------------------------------------- 1. most keys get almost nothing


def topk_mass(weights, ks, first_query: int = 0, *, shared: bool = False) -> Tensor:
    """``weights`` ``(L, H, T, S)`` causal attention weights (rows sum to 1): for each layer, the share of a query's
    weight held by its ``k`` largest weights, averaged over the heads and the queries ``first_query ..``;
    ``(L, len(ks))``. By default each head picks its own k keys (an upper bound: a per-head oracle).
    ``shared=True`` picks ONE set of k keys per query for all of a layer's heads, as DeepSeek's sparse attention
    does: the keys with the largest weight summed over the heads."""
    weights = check_tensor("weights", torch.as_tensor(weights), ndim=4, layout="(L, H, T, S)").float()
    ks = [check_positive_int("k", k) for k in ks]
    first_query = check_int("first_query", first_query, low=0, high=weights.shape[2] - 1)
    weights = weights[:, :, first_query:]
    if shared:  # the heads' mean weight per key: its k largest are the shared set's mean share
        weights = weights.mean(dim=1, keepdim=True)
    held = weights.sort(dim=-1, descending=True).values.cumsum(dim=-1)  # (L, H or 1, Tq, S)
    S = weights.shape[-1]
    return torch.stack([held[..., min(k, S) - 1].mean(dim=(1, 2)) for k in ks], dim=1)


def mass_figure(mass, ks, visible: int, *, title: str | None = None):
    """``topk_mass``'s result: the share of the weight held by the top k keys against k (log x), one grey line per
    layer, their mean in black. ``visible``: how many keys the queries see (at least), for the axis label."""
    mass = torch.as_tensor(mass)
    fig = _figure(7.6, 3.9)
    ax = fig.subplots()
    for layer in mass:
        ax.plot(ks, layer.numpy(), "-", color="0.75", linewidth=1)
    ax.plot(ks, mass.mean(0).numpy(), "-o", color="black", linewidth=2.2, label=_("mean over the layers"))
    ax.plot([], [], "-", color="0.75", label=_("one layer"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(_("k: the keys with the largest weights (of at least {n} a query sees)").format(n=f"{visible:,}"),
                  fontsize=TITLE_PT)
    ax.set_ylabel(_("share of the weight they hold"), fontsize=TITLE_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=LABEL_PT, loc="lower right")
    ax.set_title(title or _("A few keys hold most of each query's attention"), fontsize=TITLE_PT)
    return fig


# ------------------------------------------------------------------------------------- 2. the indexer's cost


def indexer_costs(config=None, tokens: int = 131072) -> dict:
    """What the lightning indexer costs next to the latent attention it ranks for, from a ``SparseDecoderAttention``
    (default ``SPARSE_CONFIGS["deepseek-v3.2"]``), per layer:

    ``attention_macs`` multiply-adds per (query, key) pair of absorbed MLA (scores over ``r + dr``, values over
    ``r``, every head), ``indexer_macs`` the indexer's (``Hi·di`` dot products and ``Hi`` weights), the numbers each
    caches per token (``r + dr`` and ``di``), and the bytes one decoding step reads over all layers at ``tokens``,
    dense and sparse (bfloat16, ``SparseDecoderAttention.step_read_bytes``)."""
    from ..sizes import SPARSE_CONFIGS

    config = SPARSE_CONFIGS["deepseek-v3.2"] if config is None else config
    a = config.attention
    r, dr, H = a.kv_lora_rank, a.qk_rope_head_dim, a.num_heads
    return {"attention_macs": H * (r + dr) + H * r, "indexer_macs": config.index_heads * config.index_head_dim
            + config.index_heads, "latent_numbers": r + dr, "indexer_numbers": config.index_head_dim,
            "tokens": tokens, "topk": config.index_topk,
            "dense_read": config.step_read_bytes(tokens, sparse=False), "sparse_read": config.step_read_bytes(tokens)}


# --------------------------------------------------------------------------------- 3. selection, causal, cache

DEMO = dict(d_model=32, num_heads=4, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
            q_lora_rank=16, index_heads=8, index_head_dim=8, context_length=64)


def demo_layer(index_topk: int = 4, *, seed: int = 0):
    """The chapter's small ``MultiHeadLatentAttention`` (``DEMO``'s sizes) with a lightning indexer that picks
    ``index_topk`` keys, random weights drawn from ``seed`` on the CPU, eval mode. The norms are drawn away from
    their initial 1 (and 0) so that every weight takes part."""
    from ..latent import MultiHeadLatentAttention

    index_topk = check_positive_int("index_topk", index_topk)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_int("seed", seed, low=0))
        sizes = {key: value for key, value in DEMO.items() if key not in ("d_model", "num_heads")}
        layer = MultiHeadLatentAttention(DEMO["d_model"], DEMO["num_heads"], index_topk=index_topk, **sizes)
        with torch.no_grad():
            for norm in (layer.kv_norm, layer.indexer.key_norm):
                norm.weight.uniform_(0.5, 1.5)
            layer.indexer.key_norm.bias.uniform_(-0.5, 0.5)
    return layer.eval()


def demo_input(T: int = 16, *, seed: int = 0) -> Tensor:
    """``(1, T, d_model)`` random tokens for ``demo_layer``, drawn on the CPU from ``seed``."""
    return torch.randn(1, check_positive_int("T", T), DEMO["d_model"], generator=torch.Generator().manual_seed(seed))


def selection_grid(selected, S: int) -> Tensor:
    """``select``'s indices ``(T, k)`` (``-1``: none) as a ``(T, S)`` bool grid, True where a query reads a key."""
    selected = check_tensor("selected", torch.as_tensor(selected), ndim=2, layout="(T, k)").long()
    grid = torch.zeros(selected.shape[0], check_positive_int("S", S) + 1, dtype=torch.bool)
    grid.scatter_(1, torch.where(selected < 0, S, selected), True)  # a -1 lands in the extra column, then dropped
    return grid[:, :S]


def _draw_selection(ax, grid: Tensor, first_query: int, title: str) -> None:
    """Selected keys dark, visible ones skipped light, future keys grey; query i sits at ``first_query + i``."""
    T, S = grid.shape
    future = torch.arange(S)[None, :] > (first_query + torch.arange(T))[:, None]
    _draw_codes(ax, torch.where(future, 2, torch.where(grid, 0, 1)), first_query, title, _("key position s"))


def _draw_codes(ax, codes: Tensor, first_query: int, title: str, xlabel: str, *, xstep: int | None = None,
                ystep: int | None = None) -> None:
    """A ``(T, S)`` grid of codes: 0 read (dark), 1 visible but skipped (light), 2 not readable yet (grey); a tick
    every ``xstep`` keys and ``ystep`` queries (default: 2 or 4, from the grid's size)."""
    from matplotlib.colors import ListedColormap

    T, S = codes.shape
    ax.imshow(codes.numpy(), cmap=ListedColormap([SELECTED_COLOUR, SKIPPED_COLOUR, FUTURE_COLOUR]), vmin=0, vmax=2,
              interpolation="nearest", aspect="equal")
    ax.set_xticks(np.arange(-0.5, S, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, T, 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.6)
    ax.tick_params(which="minor", length=0)
    step = 4 if S > 12 else 2
    xstep = xstep or step
    ystep = ystep or max(1, step // 2 if T <= 8 else step)
    ax.set_xticks(range(0, S, xstep), [str(s) for s in range(0, S, xstep)])
    ax.set_yticks(range(0, T, ystep), [str(first_query + t) for t in range(0, T, ystep)])
    ax.set_xlabel(xlabel, fontsize=TITLE_PT)
    ax.set_ylabel(_("query position t"), fontsize=TITLE_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.set_title(title, fontsize=TITLE_PT)


def _legend(fig) -> None:
    from matplotlib.patches import Patch

    fig.legend(handles=[Patch(color=SELECTED_COLOUR, label=_("read (in the top k)")),
                        Patch(color=SKIPPED_COLOUR, label=_("visible, skipped")),
                        Patch(color=FUTURE_COLOUR, label=_("future: never read"))],
               loc="outside lower center", ncol=3, fontsize=LABEL_PT)


def selection_figure(layer, x, *, past: int = 0):
    """Which keys each query of ``x`` ``(1, T, D)`` reads through ``layer.select``: left, the whole sequence from
    position 0; right (``past > 0``), its last ``T − past`` tokens run after a ``KVCache`` that holds the first
    ``past``: the same rows, aligned bottom-right."""
    from ..cache import KVCache

    x = check_tensor("x", torch.as_tensor(x), ndim=3, layout="(1, T, D)")
    T = x.shape[1]
    past = check_int("past", past, low=0, high=T - 1)
    k = layer.index_topk
    with torch.no_grad():
        whole = selection_grid(layer.select(x)[0], T)
    panels = [(whole, 0, _("T = {T} queries from position 0, k = {k}").format(T=T, k=k))]
    if past:
        cache = KVCache()
        with torch.no_grad():
            layer(x[:, :past], kv_cache=cache)
            rest = selection_grid(layer.select(x[:, past:], kv_cache=cache)[0], T)
        panels.append((rest, past, _("after a cache of {past}: {n} queries, S = {S} keys").format(
            past=past, n=T - past, S=T)))
    fig = _figure(4.6 * len(panels) + 0.4, 4.9 if past else 5.2)
    axes = np.atleast_1d(fig.subplots(1, len(panels), width_ratios=[1] * len(panels)))
    for ax, (grid, first, title) in zip(axes, panels):
        _draw_selection(ax, grid, first, title)
    _legend(fig)
    return fig


def _dense_parts(layer, x):
    """The dense weights ``(B, H, T, S)`` of ``layer`` on ``x`` and its values ``(B, H, S, dv)`` (no cache)."""
    B, T, _D = x.shape
    H, dn, dv, r = layer.num_heads, layer.qk_nope_head_dim, layer.v_head_dim, layer.kv_lora_rank
    topk, layer.index_topk = layer.index_topk, T  # k >= S: the masked path is dense MLA, bit for bit
    try:
        _out, weights = layer(x, return_weights=True)
    finally:
        layer.index_topk = topk
    latent = layer.kv_norm(layer.kv_down(x)[..., :r])  # (B, T, r)
    values = layer.kv_up(latent).view(B, T, H, dn + dv)[..., dn:].transpose(1, 2)  # (B, H, S, dv)
    return weights, values


def _output_reading(layer, weights, values, keep) -> Tensor:
    """The layer's output when each query reads only the keys in ``keep`` ``(B, T, S)``: its dense weights there,
    renormalised (what softmax over those keys alone gives), times the values, through the output projection."""
    from ..functional import merge_heads

    kept = weights * keep[:, None]
    kept = kept / kept.sum(dim=-1, keepdim=True)
    return layer.out_proj(merge_heads(kept @ values))  # (B, H, T, dv) -> (B, T, D)


@torch.no_grad()
def sparse_errors(layer, x, ks) -> list[float]:
    """The output's largest error against dense attention, relative to max|dense output|, when every query reads
    the ``k`` keys the layer's indexer picks (``select``, as the layer runs), for each ``k`` in ``ks``."""
    x = check_tensor("x", torch.as_tensor(x), ndim=3, layout="(B, T, D)")
    T = x.shape[1]
    ks = [check_int("k", k, low=1, high=T) for k in ks]
    weights, values = _dense_parts(layer, x)
    dense = _output_reading(layer, weights, values, torch.ones(x.shape[0], T, T, dtype=torch.bool))
    scale = dense.abs().max()
    found = []
    topk = layer.index_topk
    try:
        for k in ks:
            layer.index_topk = k
            keep = torch.stack([selection_grid(rows, T) for rows in layer.select(x)])  # (B, T, S)
            found.append(float((_output_reading(layer, weights, values, keep) - dense).abs().max() / scale))
    finally:
        layer.index_topk = topk
    return found


def read_numbers(layer, S: int, k: int) -> dict:
    """Numbers one decoding step of ``layer`` reads from its cache once it holds ``S`` tokens: dense, every latent
    and rotary key (``S·(r + dr)``); sparse, every indexer key and k latents (``S·di + min(k, S)·(r + dr)``)."""
    latent = layer.kv_lora_rank + layer.qk_rope_head_dim
    return {"dense": S * latent, "sparse": S * layer.indexer.head_dim + min(k, S) * latent}


def selection_widget_figure(k: int = 4, *, T: int = 16, seed: int = 0):
    """Left: which keys each of ``T`` queries reads with ``k``; right: the output's error against dense attention
    for every k (the current one marked); the title gives the numbers a decoding step at ``S = T`` reads."""
    k = check_int("k", k, low=1, high=T)
    layer, x = demo_layer(k, seed=seed), demo_input(T, seed=seed)
    ks = list(range(1, T + 1))
    errors = sparse_errors(layer, x, ks)
    with torch.no_grad():
        grid = selection_grid(layer.select(x)[0], T)
    fig = _figure(9.6, 4.9)
    ax_grid, ax_err = fig.subplots(1, 2, width_ratios=[1.0, 1.15])
    _draw_selection(ax_grid, grid, 0, _("k = {k}: the keys each query reads").format(k=k))
    ax_err.plot(ks, errors, "-o", color=INDEXER_COLOUR, markersize=4, label=_("the indexer's k keys (random weights)"))
    ax_err.axvline(k, color="0.2", linestyle=":", linewidth=1)
    ax_err.set_xlabel(_("keys read per query k"), fontsize=TITLE_PT)
    ax_err.set_ylabel(_("error against dense / max|output|"), fontsize=TITLE_PT)
    ax_err.set_ylim(0, max(max(errors), 0.05) * 1.15)
    ax_err.grid(True, alpha=0.3)
    ax_err.tick_params(labelsize=LABEL_PT)
    ax_err.legend(fontsize=LABEL_PT, loc="upper right")
    numbers = read_numbers(layer, T, k)
    ax_err.set_title(_("a decoding step at S = {S} reads {sparse} numbers, dense {dense}").format(
        S=T, sparse=numbers["sparse"], dense=numbers["dense"]), fontsize=TITLE_PT)
    _legend(fig)
    return fig


def selection_widget(k: int = 4, *, T: int = 16):
    """``selection_widget_figure`` with k on a slider (1 to T)."""
    from ipywidgets import interactive

    k = check_int("k", k, low=1, high=T)
    return interactive(lambda k: selection_widget_figure(k, T=T), AUTO_DISPLAY,
                       k=int_slider(_("keys read per query k"), k, 1, T))


# ----------------------------------------------------------------------------- 4. masked vs gathered, measured

PATHS = ("dense", "masked", "gathered")


def _path_label(path: str) -> str:
    """A path's name in the student's language ("masked" alone is also a stage of chapter 4's explorer)."""
    return {"dense": pgettext("attention path", "dense"), "masked": pgettext("attention path", "masked"),
            "gathered": pgettext("attention path", "gathered")}[path]
#: the measured layer: chapter 14's small widths (GUIDE §13), an indexer of 4 heads of 16
MEASURED = dict(d_model=32, num_heads=4, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                q_lora_rank=16, index_heads=4, index_head_dim=16)

_POINT = r"""
import json, sys, time
import torch
from mha_lib import MultiHeadLatentAttention
path, T, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sizes = json.loads(sys.argv[4])
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
torch.manual_seed(0)
d_model, heads = sizes.pop("d_model"), sizes.pop("num_heads")
layer = MultiHeadLatentAttention(d_model, heads, context_length=T, index_topk=k, **sizes).eval()
x = torch.randn(1, T, d_model)
if path == "dense":
    layer.index_topk = T  # k >= S: the masked path builds no mask, it is dense MLA
sparse = path == "gathered"
with torch.no_grad():
    layer(x[:, :300], sparse=sparse)  # warm-up
    open("/proc/self/clear_refs", "w").write("5")  # the high-water mark back to the resident size
    base = status("VmRSS")
    start = time.perf_counter()
    layer(x, sparse=sparse)
    seconds = time.perf_counter() - start
    peak = status("VmHWM") - base
    start = time.perf_counter()
    layer(x, sparse=sparse)  # a second run: the faster of the two is the time (another program may stall one)
    seconds = min(seconds, time.perf_counter() - start)
print(json.dumps({"path": path, "T": T, "k": k, "seconds": seconds, "peak_mb": peak / 2**20}))
"""


def measure_paths(lengths=None, k: int = 256, *, paths=PATHS, threads: int = 1) -> dict:
    """Time and peak memory growth of ONE call of a small ``MultiHeadLatentAttention`` with an indexer (``MEASURED``'s
    sizes, B = 1, float32, no gradients) at each length T, three ways: ``dense`` (k >= T: plain MLA, explicit
    kernel), ``masked`` (the selection as a T × S mask over full attention, what transformers' eager path does) and
    ``gathered`` (``sparse=True``). As chapter 14's memory wall: each point runs in a fresh Python process, which
    warms the layer up on 300 tokens, resets Linux's resident-memory high-water mark and reads ``VmHWM − VmRSS``
    around the call (the time: the faster of that call and one more), with ``threads`` torch threads. ``lengths``: 1,024 to 8,192 (512 under a test). Linux only.
    Returns ``{"k", "threads", "lengths", "points": [{"path", "T", "seconds", "peak_mb"}]}``."""
    import os

    if lengths is None:
        lengths = (512,) if under_test() else (1024, 2048, 4096, 8192)
    lengths = [check_positive_int("length", T) for T in lengths]
    k = check_positive_int("k", k)
    unknown = [p for p in paths if p not in PATHS]
    if unknown or not paths:
        raise ValueError(f"paths must be a non-empty list from {list(PATHS)}, got {list(paths)}")
    if not os.path.exists("/proc/self/clear_refs"):
        raise RuntimeError("measure_paths needs Linux's /proc/self/clear_refs to reset the peak resident memory")
    threads = check_positive_int("threads", threads)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    points = []
    for T in lengths:
        for path in paths:
            done = subprocess.run([sys.executable, "-c", _POINT, path, str(T), str(k), json.dumps(MEASURED)],
                                  capture_output=True, text=True, env=env, check=False, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"the point {path} T={T} failed:\n{done.stderr[-2000:]}")
            points.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {"k": k, "threads": threads, "lengths": lengths, "points": points}


def paths_rows(result: dict) -> list[list[str]]:
    """``measure_paths``'s result as rows: T, one float32 T × S matrix in MiB, then MiB and ms for each path."""
    by = {(p["path"], p["T"]): p for p in result["points"]}
    paths = [p for p in PATHS if any(q["path"] == p for q in result["points"])]
    rows = []
    for T in result["lengths"]:
        row = [f"{T:,}", f"{T * T * 4 / 2**20:,.0f}"]
        row += [f"{by[(p, T)]['peak_mb']:,.1f}" for p in paths]
        row += [f"{1000 * by[(p, T)]['seconds']:,.0f}" for p in paths]
        rows.append(row)
    return rows


def paths_header(result: dict) -> list[str]:
    paths = [p for p in PATHS if any(q["path"] == p for q in result["points"])]
    return ["T", _("one T × S, MiB")] + [_("{path}, MiB").format(path=_path_label(p)) for p in paths] + \
        [_("{path}, ms").format(path=_path_label(p)) for p in paths]


def paths_figure(result: dict):
    """``measure_paths``'s result, log–log against T: left the peak memory growth of the call (dotted: one float32
    T × S matrix), right its time."""
    fig = _figure(9.6, 4.0)
    memory, seconds = fig.subplots(1, 2)
    lengths = result["lengths"]
    for path in PATHS:
        points = sorted((p for p in result["points"] if p["path"] == path), key=lambda p: p["T"])
        if not points:
            continue
        style, colour = PATH_STYLES[path]
        xs = [p["T"] for p in points]
        memory.plot(xs, [max(p["peak_mb"], 0.1) for p in points], style, color=colour, label=_path_label(path))
        seconds.plot(xs, [1000 * p["seconds"] for p in points], style, color=colour, label=_path_label(path))
    memory.plot(lengths, [T * T * 4 / 2**20 for T in lengths], ":", color="0.5", label=_("one float32 T × S"))
    for ax, label in ((memory, _("peak memory growth (MiB)")), (seconds, _("milliseconds"))):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(lengths, [f"{T // 1024}k" if T >= 1024 else str(T) for T in lengths])
        ax.set_xlabel(_("sequence length T"), fontsize=TITLE_PT)
        ax.set_ylabel(label, fontsize=TITLE_PT)
        ax.tick_params(labelsize=LABEL_PT)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=LABEL_PT, loc="upper left")
    fig.suptitle(_("One call, k = {k}, each point in a fresh process ({threads} thread)").format(
        k=result["k"], threads=result["threads"]), fontsize=SUPTITLE_PT)
    return fig


# ------------------------------------------------------------------------------------------------ proved real


def tiny_deepseek_v32(seed: int = 0, *, index_topk: int = 5, config=None):
    """A tiny transformers ``DeepseekV32Attention`` (GUIDE §13's sizes: D = 64, 4 heads, an indexer of 8 heads of
    16), or one built from ``config``, a ``DeepseekV32Config`` of your own (the tests draw them; ``index_topk`` is
    then the config's), with random weights from ``seed``, eager attention (left at None, transformers silently
    drops the top-k), the norms drawn away from 1 and the indexer's LayerNorm bias away from 0. Returns
    ``(module, config)``. Loads transformers (seconds)."""
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as v32

    if config is None:
        config = v32.DeepseekV32Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32,
                                       kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10,
                                       index_topk=check_positive_int("index_topk", index_topk), index_n_heads=8,
                                       index_head_dim=16, max_position_embeddings=256)
    elif not isinstance(config, v32.DeepseekV32Config):
        raise TypeError(f"config: expected a transformers DeepseekV32Config, got {type(config).__name__}")
    config._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_int("seed", seed, low=0))
        module = v32.DeepseekV32Attention(config, layer_idx=0)
        with torch.no_grad():
            for norm in (module.q_a_layernorm, module.kv_a_layernorm, module.indexer.k_norm):
                norm.weight.uniform_(0.5, 1.5)
            module.indexer.k_norm.bias.uniform_(-0.5, 0.5)
    return module.eval(), config


@torch.no_grad()
def deepseek_v32_reference(module, config, x) -> tuple[Tensor, Tensor]:
    """transformers' eager ``DeepseekV32Attention`` on ``x`` ``(B, T, D)`` at positions 0..T-1, as the model calls it
    (its rotary embedding, an additive float causal mask), and its indexer's top-k ``(B, T, min(k, T))``.
    Returns ``(output, indices)``."""
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as v32

    from ..masks import additive_mask, causal_mask

    B, T, _D = x.shape
    positions = torch.arange(T)[None].expand(B, -1)
    cos_sin = v32.DeepseekV32RotaryEmbedding(config)(x, positions)
    mask = additive_mask(causal_mask(T))[None, None].expand(B, 1, T, T)
    out, _weights = module(x, position_embeddings=cos_sin, attention_mask=mask)
    query = module.q_a_layernorm(module.q_a_proj(x))
    indices = module.indexer(x, query, cos_sin, mask[:, 0], positions)
    return out, indices.long()


# ---------------------------------------------------------------------------------- DeepSeek-V4 (optional)


def v4_cache_numbers(config=None) -> dict:
    """Numbers DeepSeek-V4's attention caches per layer, from a transformers ``DeepseekV4Config`` (default: its
    defaults): every layer keeps its last ``sliding_window`` tokens' keys (one ``head_dim``-wide key = value per
    token, a fixed amount); a ``compressed_sparse_attention`` layer adds one entry of ``head_dim`` and one indexer
    key of ``index_head_dim`` per ``rate`` tokens; a ``heavily_compressed_attention`` layer one entry of ``head_dim``
    per ``rate`` tokens. Returns per layer type ``{"layers", "rate", "per_token"}`` (numbers per token of context,
    the window left out) and ``"window"`` (the window's numbers per layer)."""
    if config is None:
        from transformers import DeepseekV4Config

        config = DeepseekV4Config()
    found = {"window": config.sliding_window * config.head_dim}
    for kind in ("compressed_sparse_attention", "heavily_compressed_attention"):
        rate = config.compress_rates[kind]
        per_entry = config.head_dim + (config.index_head_dim if kind == "compressed_sparse_attention" else 0)
        found[kind] = {"layers": list(config.layer_types).count(kind), "rate": rate, "per_token": per_entry / rate}
    return found


def v4_reads_figure(layer, x):
    """What each query of ``x`` ``(1, T, D)`` reads in a compressed layer (``mha_lib.CompressedAttention``): left,
    the raw tokens (its last ``sliding_window``; earlier ones skipped); right, the entries (a window of m tokens
    each): read when the indexer picks them (CSA) or, without an indexer (HCA), as soon as their window is complete;
    grey where a token is in the future or an entry's window not yet complete. Taken from the layer's own attention weights (any head: the
    key = value head is shared)."""
    from ..compressed import entry_visibility

    x = check_tensor("x", torch.as_tensor(x), ndim=3, layout="(1, T, D)")
    if getattr(layer, "compress_rate", None) is None:
        raise ValueError(f"layer must be a compressed CompressedAttention (compress_rate set: a CSA or HCA layer), "
                         f"got {type(layer).__name__} with compress_rate={getattr(layer, 'compress_rate', None)}")
    T, m = x.shape[1], layer.compress_rate
    with torch.no_grad():
        _out, weights = layer(x, return_weights=True)  # (1, H, T, T + W): the raw tokens, then the entries
    read = weights[0, 0] > 0  # (T, T + W): a key or entry a query reads gets a positive weight
    W = read.shape[1] - T
    positions = torch.arange(T)
    future = positions[None, :] > positions[:, None]  # (T, T)
    tokens = torch.where(future, 2, torch.where(read[:, :T], 0, 1))
    entries = torch.where(~entry_visibility(positions, W, m), 2, torch.where(read[:, T:], 0, 1))  # (T, W)
    fig = _figure(8.6, 6.2)
    axes = fig.subplots(1, 2, width_ratios=[T, max(W, 8)])
    _draw_codes(axes[0], tokens, 0, _("raw tokens: a window of {w}").format(w=layer.sliding_window),
                _("token position s"), ystep=1)
    picked = _("the indexer's top {k}").format(k=layer.index_topk) if layer.index_topk else _("all, once complete")
    _draw_codes(axes[1], entries, 0, _("entries, 1 per {m} tokens:\n{picked}").format(m=m, picked=picked),
                _("entry w"), xstep=1, ystep=1)
    axes[1].set_ylabel("")
    fig.legend(handles=_v4_legend(), loc="outside lower center", ncol=3, fontsize=LABEL_PT)
    return fig


def _v4_legend():
    from matplotlib.patches import Patch

    return [Patch(color=SELECTED_COLOUR, label=_("read")), Patch(color=SKIPPED_COLOUR, label=_("not read")),
            Patch(color=FUTURE_COLOUR, label=_("not there yet"))]


__all__ = ["DEMO", "MEASURED", "PATHS", "deepseek_v32_reference", "demo_input", "demo_layer", "indexer_costs",
           "mass_figure", "measure_paths", "paths_figure", "paths_header", "paths_rows", "read_numbers",
           "selection_figure", "selection_grid", "selection_widget", "selection_widget_figure", "sparse_errors",
           "tiny_deepseek_v32", "topk_mass", "v4_cache_numbers", "v4_reads_figure"]
