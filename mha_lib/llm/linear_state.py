"""Chapter 16's figures, widgets and live training: a state instead of a cache.

    implicit_weights_figure(q, k)        softmax's weights next to the T × T matrix linear attention applies
                                         without ever forming it
    store_pairs(keys, values, rule)      write key → value pairs into one Dk × Dv state, by sum or by the delta rule
    recall_errors(n, Dk, Dv)             each stored pair's retrieval error after n pairs, for both writes
    state_filling_figure(n, Dk)          the state filling up: per pair, how far its read-back value is from it
    state_filling_widget()               the same, with the number of stored pairs on a slider
    DELTA_STEPS                          the stepper's writes: keys that repeat with new values
    delta_steps(beta)                    the stepper's states and reads, token by token, for both writes
    delta_step_figure(step, beta)        one write of the delta rule: the state, the read before and after
    delta_step_widget()                  the same, with the step and β on sliders
    chunk_figure(T, C)                   the recurrent and the chunked form of the delta rule over a T × T grid
    time_forms(lengths)                  measured seconds of the recurrent and chunked delta rule and of softmax
                                         attention (SDPA) against T
    timing_figure(times)                 those times against T
    memory_figure(rows)                  a hybrid's cache and state against the context, next to all full layers
    train_mixers(mixers, seeds)          chapter 11's model trained once per mixer and seed, a status line per run;
                                         ``recall_steps()`` steps, fewer under a test

Imported on use by the chapter (nothing here loads transformers).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..display.controls import float_slider, int_slider
from ..display.plotting import LABEL_PT, SUPTITLE_PT, TITLE_PT
from ..language import gettext as _
from ..validation import check_int, check_positive_int, check_tensor
from .rotary import AUTO_DISPLAY, _figure, _Line, under_test

Tensor = torch.Tensor

SUM_COLOUR, DELTA_COLOUR, SOFTMAX_COLOUR = "#d62728", "#1f77b4", "0.35"
RECALL_STEPS = 1500  # the chapter's training run per mixer: GUIDE §12, ~12-32 s each on a quiet 2-core CPU
TEST_RECALL_STEPS = 30  # under a test: seconds, not minutes


# --------------------------------------------------------------------------------------- 1. implicit weights


def implicit_weights_figure(q, k, *, feature_map: str = "elu+1"):
    """``q``, ``k`` ``(T, Dk)`` of one head: left, causal softmax weights ``softmax(q kᵀ/√Dk)``; right, the matrix
    that causal linear attention applies to the values, ``φ(q_t)·φ(k_s) / Σ_s' φ(q_t)·φ(k_s')``
    (``mha_lib.linear_attention_weights``), which its running-state form never builds."""
    from ..linear import linear_attention_weights

    q = check_tensor("q", torch.as_tensor(q), ndim=2, layout="(T, Dk)").double()
    k = check_tensor("k", torch.as_tensor(k), ndim=2, layout="(T, Dk)").double()
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape (T, Dk), got {tuple(q.shape)} and {tuple(k.shape)}")
    T, Dk = q.shape
    scores = (q @ k.T / math.sqrt(Dk)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    soft = torch.softmax(scores, -1)
    linear = linear_attention_weights(q[None, None], k[None, None], feature_map=feature_map)[0, 0]
    fig = _figure(9.0, 4.8)
    axes = fig.subplots(1, 2)
    for ax, weights, title in ((axes[0], soft, _("softmax attention: weights it computes")),
                               (axes[1], linear, _("linear attention: the matrix it never forms"))):
        image = ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_title(title, fontsize=TITLE_PT)
        ax.set_xlabel(_("key position s"), fontsize=TITLE_PT)
        ax.set_ylabel(_("query position t"), fontsize=TITLE_PT)
        ax.tick_params(labelsize=LABEL_PT)
    bar = fig.colorbar(image, ax=list(axes), shrink=0.85, pad=0.02)
    bar.set_label(_("weight (each row sums to 1)"), fontsize=TITLE_PT)
    bar.ax.tick_params(labelsize=LABEL_PT)
    fig.suptitle(_("The same queries and keys: linear attention's rows are flatter"), fontsize=SUPTITLE_PT)
    return fig


# ------------------------------------------------------------------------------------ 2. the state fills up

WRITES = ("sum", "delta")


def store_pairs(keys: Tensor, values: Tensor, rule: str = "sum", beta: float = 1.0) -> Tensor:
    """Write ``keys`` ``(n, Dk)`` → ``values`` ``(n, Dv)`` into one ``(Dk, Dv)`` state, in order:
    ``"sum"``: ``S += k vᵀ`` (linear attention's write); ``"delta"``: ``S += β k (v − Sᵀk)ᵀ`` (the delta rule)."""
    keys = check_tensor("keys", torch.as_tensor(keys), ndim=2, layout="(n, Dk)")
    values = check_tensor("values", torch.as_tensor(values), ndim=2, layout="(n, Dv)")
    if keys.shape[0] != values.shape[0]:
        raise ValueError(f"keys and values must hold the same number of pairs, got {keys.shape[0]} and "
                         f"{values.shape[0]}")
    if rule not in WRITES:
        raise ValueError(f"rule must be one of {list(WRITES)}, got {rule!r}")
    state = keys.new_zeros(keys.shape[1], values.shape[1])
    for key, value in zip(keys, values):
        if rule == "sum":
            state = state + torch.outer(key, value)
        else:
            state = state + beta * torch.outer(key, value - state.T @ key)
    return state


def _pairs(n: int, Dk: int, Dv: int, seed: int) -> tuple[Tensor, Tensor]:
    """n random pairs; the first m of n pairs are the m pairs of ``_pairs(m, ...)`` (one generator each)."""
    keys = torch.randn(n, Dk, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    keys = keys / keys.norm(dim=-1, keepdim=True)  # unit keys, as Gated DeltaNet's L2-normalised ones
    values = torch.randn(n, Dv, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return keys, values


def _mean_errors(max_pairs: int, Dk: int, Dv: int, seed: int = 0) -> dict[str, list[float]]:
    """``recall_errors(n, ...)[rule].mean()`` for n = 1 .. max_pairs, in one pass per rule."""
    keys, values = _pairs(max_pairs, Dk, Dv, seed)
    means = {}
    for rule in WRITES:
        state, curve = keys.new_zeros(Dk, Dv), []
        for n in range(max_pairs):
            k, v = keys[n], values[n]
            state = state + torch.outer(k, v if rule == "sum" else v - state.T @ k)
            read = keys[:n + 1] @ state
            curve.append(float(((read - values[:n + 1]).norm(dim=-1) / values[:n + 1].norm(dim=-1)).mean()))
        means[rule] = curve
    return means


def recall_errors(n: int, Dk: int = 16, Dv: int = 16, *, seed: int = 0) -> dict[str, Tensor]:
    """Write ``n`` random pairs (unit keys, values of unit variance) into a ``Dk × Dv`` state, by sum and by the delta
    rule (β = 1); read each key back (``Sᵀk``). Returns ``{"sum": (n,), "delta": (n,)}``: each pair's relative error
    ``‖Sᵀk_i − v_i‖ / ‖v_i‖``, pairs in the order they were written."""
    n = check_positive_int("n", n)
    Dk, Dv = check_positive_int("Dk", Dk), check_positive_int("Dv", Dv)
    keys, values = _pairs(n, Dk, Dv, seed)
    errors = {}
    for rule in WRITES:
        state = store_pairs(keys, values, rule)
        read = keys @ state  # (n, Dv): row i is Sᵀ k_i
        errors[rule] = (read - values).norm(dim=-1) / values.norm(dim=-1)
    return errors


def state_filling_figure(n: int = 8, Dk: int = 16, *, max_pairs: int = 48):
    """Left: the retrieval error of every stored pair after ``n`` pairs, by sum and by the delta rule, in the order
    written; right: the mean error against the number of pairs (up to ``max_pairs``), the state's width ``Dk``
    marked."""
    n = check_int("n", n, low=1, high=max_pairs)
    Dk = check_positive_int("Dk", Dk)
    now = recall_errors(n, Dk, Dk)
    counts = np.arange(1, max_pairs + 1)
    means = _mean_errors(max_pairs, Dk, Dk)
    labels = {"sum": _("sum: S += k vᵀ (linear attention)"), "delta": _("delta rule: S += k (v − Sᵀk)ᵀ")}
    colours = {"sum": SUM_COLOUR, "delta": DELTA_COLOUR}
    fig = _figure(9.8, 3.9)
    left, right = fig.subplots(1, 2)
    pairs = np.arange(n)
    width = 0.4
    for offset, rule in ((-width / 2, "sum"), (width / 2, "delta")):
        left.bar(pairs + offset, now[rule].numpy(), width=width, color=colours[rule], label=labels[rule])
    left.set_xlabel(_("pair, in the order written (the last one on the right)"), fontsize=TITLE_PT)
    left.set_ylabel(_("retrieval error ‖Sᵀk − v‖ / ‖v‖"), fontsize=TITLE_PT)
    left.set_ylim(0, max(2.0, float(max(now["sum"].max(), now["delta"].max()))) * 1.3)
    left.set_title(_("{n} pairs in a {Dk} × {Dk} state").format(n=n, Dk=Dk), fontsize=TITLE_PT)
    left.legend(fontsize=LABEL_PT, loc="upper left")
    if n <= 24:
        left.set_xticks(pairs, [str(p) for p in pairs])
    for rule in WRITES:
        right.plot(counts, means[rule], color=colours[rule], linewidth=2, label=labels[rule])
    right.axvline(Dk, color="0.5", linestyle="--", linewidth=1)
    right.text(Dk + 0.5, 0.05, _("n = Dk = {Dk}").format(Dk=Dk), fontsize=LABEL_PT, color="0.3")
    right.axvline(n, color="0.2", linewidth=1, linestyle=":")
    right.set_xlabel(_("pairs stored n"), fontsize=TITLE_PT)
    right.set_ylabel(_("mean retrieval error"), fontsize=TITLE_PT)
    right.set_ylim(0, max(max(means["sum"]), max(means["delta"])) * 1.1)
    right.set_title(_("Mean over the stored pairs"), fontsize=TITLE_PT)
    for ax in (left, right):
        ax.tick_params(labelsize=LABEL_PT)
        ax.grid(True, alpha=0.3)
    fig.suptitle(_("A fixed state fills up: what each stored pair reads back"), fontsize=SUPTITLE_PT)
    return fig


def state_filling_widget(n: int = 24, Dk: int = 16, *, max_pairs: int = 48):
    """``state_filling_figure`` with the number of stored pairs n on a slider (1 to ``max_pairs``)."""
    from ipywidgets import interactive

    n = check_int("n", n, low=1, high=max_pairs)
    return interactive(lambda n: state_filling_figure(n, Dk, max_pairs=max_pairs), AUTO_DISPLAY,
                       n=int_slider(_("pairs stored n"), n, 1, max_pairs))


# ---------------------------------------------------------------------------------- 3. the delta rule, stepped

#: the stepper's writes: (key index, value) in a 4 × 4 state; keys 0 and 1 come back with new values
DELTA_STEPS = ((0, (1.0, 0.0, 0.0, 0.0)), (1, (0.0, 1.0, 0.0, 0.0)), (2, (0.0, 0.0, 1.0, 0.0)),
               (0, (0.0, 0.0, 0.0, 1.0)), (3, (0.5, 0.5, 0.0, 0.0)), (1, (0.0, 0.0, 1.0, 1.0)))


def _stepper_keys() -> Tensor:
    """Four unit keys of width 4 that overlap a little (k_i · k_j = 0.15 … 0.34 for i ≠ j): not orthogonal, as real
    keys are not."""
    g = torch.Generator().manual_seed(16)
    keys = torch.eye(4, dtype=torch.float64) + 0.25 * torch.rand(4, 4, generator=g, dtype=torch.float64)
    return keys / keys.norm(dim=-1, keepdim=True)


def delta_steps(beta: float = 1.0) -> dict[str, list[dict]]:
    """Run ``DELTA_STEPS`` through a 4 × 4 state with both writes. Per write and per rule: the state after it, the
    value read for the written key before and after (``Sᵀk``), the value written, and the mean error of every key
    written so far (each against its latest value)."""
    if not isinstance(beta, (int, float)) or not 0 <= beta <= 1:
        raise ValueError(f"beta must be a number from 0 to 1, got {beta!r}")
    keys = _stepper_keys()
    runs = {}
    for rule in WRITES:
        state = torch.zeros(4, 4, dtype=torch.float64)
        latest, rows = {}, []
        for index, value in DELTA_STEPS:
            k, v = keys[index], torch.tensor(value, dtype=torch.float64)
            before = state.T @ k
            if rule == "sum":
                state = state + beta * torch.outer(k, v)
            else:
                state = state + beta * torch.outer(k, v - before)
            latest[index] = v
            errors = [float((state.T @ keys[i] - latest[i]).norm() / latest[i].norm()) for i in latest]
            rows.append({"key": index, "value": v, "before": before, "after": state.T @ k, "state": state.clone(),
                         "error": sum(errors) / len(errors)})
        runs[rule] = rows
    return runs


def delta_step_figure(step: int = 4, beta: float = 1.0):
    """After write ``step`` (1 to ``len(DELTA_STEPS)``) of ``DELTA_STEPS``: the delta rule's state, the value read
    for the written key before and after the write next to the value written, and the mean retrieval error of the
    keys written so far, by sum and by the delta rule."""
    step = check_int("step", step, low=1, high=len(DELTA_STEPS))
    runs = delta_steps(beta)
    row = runs["delta"][step - 1]
    fig = _figure(9.8, 3.7)
    grid = fig.add_gridspec(1, 3, width_ratios=[1.0, 1.25, 1.25])
    ax_state, ax_read, ax_err = (fig.add_subplot(grid[0, i]) for i in range(3))
    limit = max(1.0, float(row["state"].abs().max()))
    image = ax_state.imshow(row["state"].numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
    for (i, j), value in np.ndenumerate(row["state"].numpy()):
        ax_state.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=LABEL_PT,
                      color="white" if abs(value) > 0.6 * limit else "black")
    ax_state.set_xticks(range(4), [str(j) for j in range(4)])
    ax_state.set_yticks(range(4), [str(i) for i in range(4)])
    ax_state.set_xlabel(_("value dimension"), fontsize=TITLE_PT)
    ax_state.set_ylabel(_("key dimension"), fontsize=TITLE_PT)
    ax_state.set_title(_("state S after write {step}").format(step=step), fontsize=TITLE_PT)
    del image
    dims = np.arange(4)
    width = 0.2
    ax_read.bar(dims - 1.5 * width, row["before"].numpy(), width, color="0.7", label=_("read before: Sᵀk"))
    ax_read.bar(dims - 0.5 * width, row["value"].numpy(), width, color="#2ca02c", label=_("value written v"))
    ax_read.bar(dims + 0.5 * width, row["after"].numpy(), width, color=DELTA_COLOUR,
                label=_("read after, delta rule"))
    ax_read.bar(dims + 1.5 * width, runs["sum"][step - 1]["after"].numpy(), width, color=SUM_COLOUR,
                label=_("read after, sum"))
    ax_read.set_xticks(dims, [str(d) for d in dims])
    low = min(-0.3, float(min(r["after"].min() for rule in WRITES for r in runs[rule])) - 0.1)
    high = max(1.0, float(max(r["after"].max() for rule in WRITES for r in runs[rule])))
    ax_read.set_ylim(low, high + 1.3)  # room above the bars for the legend, one entry per line
    ax_read.axhline(0, color="0.3", linewidth=0.8)
    ax_read.set_xlabel(_("value dimension"), fontsize=TITLE_PT)
    ax_read.set_title(_("write {step}: key {key} (β = {beta:g})").format(step=step, key=row["key"], beta=beta),
                      fontsize=TITLE_PT)
    ax_read.legend(fontsize=LABEL_PT, loc="upper left")  # one column: two would overflow the panel
    steps = np.arange(1, len(DELTA_STEPS) + 1)
    for rule, colour, label in (("sum", SUM_COLOUR, _("sum (linear attention)")),
                                ("delta", DELTA_COLOUR, _("delta rule"))):
        ax_err.plot(steps, [r["error"] for r in runs[rule]], "-o", color=colour, label=label)
    ax_err.axvline(step, color="0.2", linestyle=":", linewidth=1)
    repeats = [i + 1 for i, (key, _v) in enumerate(DELTA_STEPS) if key in [k for k, _w in DELTA_STEPS[:i]]]
    for r in repeats:
        ax_err.axvspan(r - 0.3, r + 0.3, color="0.9", zorder=0)
    ax_err.set_xticks(steps, [str(s) for s in steps])
    ax_err.set_xlabel(_("write (grey: a key written again)"), fontsize=TITLE_PT)
    ax_err.set_ylabel(_("mean error of the keys so far"), fontsize=TITLE_PT)
    ax_err.set_ylim(0, max(1.0, max(r["error"] for rule in WRITES for r in runs[rule]) * 1.1))
    ax_err.legend(fontsize=LABEL_PT, loc="upper left")
    for ax in (ax_state, ax_read, ax_err):
        ax.tick_params(labelsize=LABEL_PT)
    ax_err.grid(True, alpha=0.3)
    return fig


def delta_step_widget(step: int = 1, beta: float = 1.0):
    """``delta_step_figure`` with the write on a slider (1 to ``len(DELTA_STEPS)``) and β (0 to 1)."""
    from ipywidgets import interactive

    step = check_int("step", step, low=1, high=len(DELTA_STEPS))
    return interactive(delta_step_figure, AUTO_DISPLAY,
                       step=int_slider(_("write t"), step, 1, len(DELTA_STEPS)),
                       beta=float_slider(_("step size β"), float(beta), 0.0, 1.0, 0.1, readout_format=".1f"))


# -------------------------------------------------------------------------------- 4. chunked and recurrent


def chunk_figure(T: int = 16, C: int = 4):
    """Two ``T × T`` grids of (query, key) pairs. Left, the recurrent form: T steps, one token each, every earlier
    key reaching the query only through the state. Right, the chunked form: each chunk of C tokens does its own
    C × C lower triangle in matrix products (the corrections solved together), and reads everything before the
    chunk through the state, written once per chunk."""
    T, C = check_positive_int("T", T), check_positive_int("C", C)
    if T % C:
        raise ValueError(f"T must be a multiple of C for the picture, got T={T}, C={C}")
    fig = _figure(9.8, 4.6)
    axes = fig.subplots(1, 2)
    from matplotlib.patches import Rectangle

    for ax, chunked in ((axes[0], False), (axes[1], True)):
        ax.set_xlim(0, T)
        ax.set_ylim(T, 0)
        ax.set_aspect("equal")
        for t in range(T):
            for s in range(t + 1):
                inside = chunked and t // C == s // C
                ax.add_patch(Rectangle((s, t), 1, 1, facecolor=DELTA_COLOUR if inside else "#c6dbef",
                                       edgecolor="white", linewidth=0.6))
        if chunked:
            for n in range(T // C):
                ax.add_patch(Rectangle((n * C, n * C), C, C, fill=False, edgecolor="0.1", linewidth=1.6))
                ax.annotate("", xy=(n * C + C, n * C + C), xytext=(n * C, n * C + C),
                            arrowprops=dict(arrowstyle="-", color="0.1"))
            title = _("chunked: {n} chunks of C = {C}, one state write each").format(n=T // C, C=C)
        else:
            title = _("recurrent: {T} steps of one token").format(T=T)
        ax.set_title(title, fontsize=TITLE_PT)
        ax.set_xlabel(_("key position s"), fontsize=TITLE_PT)
        ax.set_ylabel(_("query position t"), fontsize=TITLE_PT)
        ticks = list(range(0, T, C if chunked else max(1, T // 4)))
        ax.set_xticks([t + 0.5 for t in ticks], [str(t) for t in ticks])
        ax.set_yticks([t + 0.5 for t in ticks], [str(t) for t in ticks])
        ax.tick_params(labelsize=LABEL_PT)
    from matplotlib.patches import Patch

    fig.legend(handles=[Patch(color=DELTA_COLOUR, label=_("computed directly (matrix products)")),
                        Patch(color="#c6dbef", label=_("reaches the query only through the state S"))],
               loc="outside lower center", ncol=2, fontsize=LABEL_PT)
    fig.suptitle(_("The same sums, the work reorganised"), fontsize=SUPTITLE_PT)
    return fig


# ------------------------------------------------------------------------------------------------ timing


def time_forms(lengths=None, *, heads: int = 4, head_dim: int = 64, chunk_size: int = 64,
               repeats: int = 3) -> dict:
    """Median seconds of one forward pass, ``B = 1``, ``heads`` heads of ``head_dim``, float32, at each length:
    the delta rule token by token, the delta rule in chunks of ``chunk_size``, and causal softmax attention
    (``F.scaled_dot_product_attention``). ``lengths``: 512 to 8,192 (256 and 512 under a test). Returns ``{"lengths": [...], "recurrent": [...], "chunked": [...],
    "softmax": [...]}``."""
    import torch.nn.functional as F

    from ..linear import delta_rule
    from ..runtime import one_thread

    if lengths is None:  # under a test, two short lengths: seconds, not tens of seconds
        lengths = (256, 512) if under_test() else (512, 1024, 2048, 4096, 8192)
    lengths = [check_positive_int("length", t) for t in lengths]
    times = {"lengths": lengths, "recurrent": [], "chunked": [], "softmax": []}
    g = torch.Generator().manual_seed(0)
    with torch.no_grad(), one_thread():
        for T in lengths:
            q, k, v = (torch.randn(1, heads, T, head_dim, generator=g) for _i in range(3))
            k = k / k.norm(dim=-1, keepdim=True)
            q = q / q.norm(dim=-1, keepdim=True)
            beta = torch.rand(1, heads, T, generator=g)
            runs = {"recurrent": lambda: delta_rule(q, k, v, beta),
                    "chunked": lambda: delta_rule(q, k, v, beta, chunk_size=chunk_size),
                    "softmax": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)}
            for name, run in runs.items():
                seconds = []
                for _r in range(repeats):
                    start = time.perf_counter()
                    run()
                    seconds.append(time.perf_counter() - start)
                times[name].append(sorted(seconds)[len(seconds) // 2])
    return times


def timing_figure(times: dict):
    """``time_forms``'s result: seconds against T on log–log axes, one line per form."""
    if not isinstance(times, dict) or "lengths" not in times:
        raise TypeError("times must be time_forms()'s dict")
    fig = _figure(7.0, 3.8)
    ax = fig.subplots()
    styles = {"recurrent": ("-o", SUM_COLOUR, _("delta rule, token by token")),
              "chunked": ("-s", DELTA_COLOUR, _("delta rule, chunked (C = 64)")),
              "softmax": ("--^", SOFTMAX_COLOUR, _("softmax attention (SDPA, causal)"))}
    for name, (style, colour, label) in styles.items():
        ax.plot(times["lengths"], [1000 * s for s in times[name]], style, color=colour, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(times["lengths"], [f"{t:,}" for t in times["lengths"]])
    ax.set_xlabel(_("sequence length T"), fontsize=TITLE_PT)
    ax.set_ylabel(_("milliseconds (log)"), fontsize=TITLE_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=LABEL_PT, loc="upper left")
    ax.set_title(_("One forward pass on this CPU, one thread"), fontsize=TITLE_PT)
    return fig


# ---------------------------------------------------------------------------------------------- memory


def memory_figure(contexts, series: dict, *, title: str | None = None):
    """``series``: ``{label: [bytes at each context]}``; one line each, GiB against the context (log x)."""
    contexts = [check_positive_int("context", c) for c in contexts]
    if not isinstance(series, dict) or not series:
        raise TypeError("series must be a non-empty dict {label: [bytes]}")
    fig = _figure(7.5, 3.8)
    ax = fig.subplots()
    styles = ("--o", "-s", ":^", "-.d")
    colours = (SOFTMAX_COLOUR, DELTA_COLOUR, "#2ca02c", SUM_COLOUR)
    for (label, values), style, colour in zip(series.items(), styles, colours):
        if len(values) != len(contexts):
            raise ValueError(f"{label!r} has {len(values)} values for {len(contexts)} contexts")
        ax.plot(contexts, [v / 2**30 for v in values], style, color=colour, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(contexts, [f"{c // 1024}k" if c >= 1024 else str(c) for c in contexts])
    ax.set_xlabel(_("tokens in the conversation"), fontsize=TITLE_PT)
    ax.set_ylabel(_("GiB held while generating"), fontsize=TITLE_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=LABEL_PT, loc="upper left")
    ax.set_title(title or _("Cache and state of the whole model, one sequence"), fontsize=TITLE_PT)
    return fig


# ---------------------------------------------------------------------------------- memory while generating


@torch.no_grad()
def generation_memory(lengths=(1024, 2048, 4096), *, d_model: int = 64, num_heads: int = 4, chunk: int = 512) -> dict:
    """Feed ``max(lengths)`` random tokens, ``chunk`` at a time, through one softmax layer with a ``KVCache`` and one
    ``GatedDeltaNet`` (``d_model``, ``num_heads`` heads of ``d_model / num_heads``, conv of 4) with a ``StateCache``,
    both float32, one sequence; read each cache's ``nbytes`` after each of ``lengths`` tokens.
    Returns ``{"lengths": [...], "softmax": [bytes...], "gated_delta": [bytes...]}``."""
    from ..cache import KVCache
    from ..linear import GatedDeltaNet, StateCache
    from ..modules import MultiHeadAttention

    lengths = sorted(check_positive_int("length", t) for t in lengths)
    chunk = check_positive_int("chunk", chunk)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        softmax = MultiHeadAttention(d_model, d_model, lengths[-1], 0.0, num_heads, kernel="sdpa")
        linear = GatedDeltaNet(d_model, num_heads)
        x = torch.randn(1, lengths[-1], d_model)
    kv, state = KVCache(), StateCache()
    found = {"lengths": lengths, "softmax": [], "gated_delta": []}
    fed = 0
    for stop in lengths:
        while fed < stop:
            piece = x[:, fed:min(fed + chunk, stop)]
            softmax(piece, kv_cache=kv)
            linear(piece, kv_cache=state)
            fed += piece.shape[1]
        found["softmax"].append(kv.nbytes)
        found["gated_delta"].append(state.nbytes)
    return found


# ------------------------------------------------------------------------------------------ proved real


def tiny_qwen3_next_deltanet(seed: int = 0, *, grouped: bool = False, config=None):
    """A tiny transformers ``Qwen3NextGatedDeltaNet`` built offline with random weights (its torch fallbacks run: no
    fla or causal_conv1d), with ``num_value_heads = 2 × num_key_heads`` when ``grouped``; or built from ``config``,
    a ``Qwen3NextConfig`` of your own (the tests draw them), instead. The norm's weight, dt_bias and A are drawn
    away from their defaults (weight 1 and dt_bias 1 hide bugs), A in (0.01, 1).
    Returns ``(module, config)``. Loads transformers (seconds)."""
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet
    from transformers.utils import logging

    logging.set_verbosity_error()  # one "falling back to the PyTorch implementation" notice per kernel
    if config is None:
        Hk = 2
        config = Qwen3NextConfig(hidden_size=32, num_hidden_layers=1, layer_types=["linear_attention"],
                                 linear_num_key_heads=Hk, linear_num_value_heads=2 * Hk if grouped else Hk,
                                 linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    elif grouped:
        raise ValueError("grouped: a config of your own sets the heads itself (linear_num_value_heads); got "
                         "grouped=True with config=, expected one of the two")
    elif not isinstance(config, Qwen3NextConfig):
        raise TypeError(f"config: expected a transformers Qwen3NextConfig, got {type(config).__name__}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_int("seed", seed, low=0))
        module = Qwen3NextGatedDeltaNet(config, 0)
        with torch.no_grad():
            module.norm.weight.uniform_(0.5, 1.5)
            module.dt_bias.uniform_(-1.0, 1.0)
            module.A_log.copy_(torch.empty_like(module.A_log).uniform_(0.01, 1.0).log())
    return module.eval(), config


# -------------------------------------------------------------------------------------------- training


def recall_steps() -> int:
    """Steps per run of ``train_mixers``: ``RECALL_STEPS`` (1,500), or ``TEST_RECALL_STEPS`` under a test."""
    return TEST_RECALL_STEPS if under_test() else RECALL_STEPS


#: the four mixers of the chapter's recall race, in the order the table shows them
MIXER_NAMES = ("softmax", "linear", "delta", "gated_delta")


def train_mixers(mixers=MIXER_NAMES, seeds=(0,), steps: int | None = None) -> dict:
    """Train chapter 11's two-layer model (d = 64, 4 heads, its induction task: recall the token that followed the
    earlier occurrence) once per mixer and seed: ``AttentionOnlyTransformer(task, mixer=...)`` built from the seed,
    trained by ``induction.train`` with that seed (one thread, chapter 11's batch and learning rate), no short conv.
    Shows one status line per run (steps, held-out loss, seconds). ``steps``: ``recall_steps()`` by default.

    Returns ``{mixer: [{"seed", "accuracy", "loss", "seconds"} per seed]}``: the accuracy and loss on chapter 11's
    512 held-out sequences (``held_out_batch()``), over the predictable tokens."""
    from IPython import get_ipython
    from IPython.display import display

    from ..induction.model import MIXERS, AttentionOnlyTransformer, InductionTask, evaluate, held_out_batch, train
    from ..induction.trainer import status_html

    mixers = tuple(mixers)
    if not mixers or any(m not in MIXERS for m in mixers):
        raise ValueError(f"mixers must be a non-empty list from {list(MIXERS)}, got {list(mixers)}")
    seeds = [check_int("seed", s, low=0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    steps = recall_steps() if steps is None else check_positive_int("steps", steps)
    in_notebook = get_ipython() is not None
    batch = held_out_batch()
    results = {}
    for mixer in mixers:
        results[mixer] = []
        for seed in seeds:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = AttentionOnlyTransformer(InductionTask(), mixer=mixer)
            # The separator is translatable: Chinese puts a full-width colon after the name.
            label = _("{name}, seed {seed}: ").format(name=mixer, seed=seed)
            handle = display(_Line(label + "…"), display_id=True) if in_notebook else None
            start = time.perf_counter()

            def callback(step, log, label=label, handle=handle, start=start):
                if handle is not None:
                    handle.update(_Line(label + status_html(step, steps, log.eval_loss[-1],
                                                            time.perf_counter() - start)))

            log, _snapshots = train(model, steps, seed=seed, callback=callback)
            seconds = time.perf_counter() - start
            line = _Line(label + status_html(steps, steps, log.eval_loss[-1], seconds, done=True))
            if handle is not None:
                handle.update(line)
            else:
                print(repr(line))
            result = evaluate(model, batch)
            results[mixer].append({"seed": seed, "accuracy": float(result["accuracy"]),
                                   "loss": float(result["loss"]), "seconds": seconds})
    return results


def recall_rows(results: dict) -> list[list[str]]:
    """``train_mixers``'s result as table rows: mixer, accuracy per seed, mean error rate (1 − accuracy)."""
    rows = []
    for mixer, runs in results.items():
        accuracies = [run["accuracy"] for run in runs]
        mean_error = 1 - sum(accuracies) / len(accuracies)
        rows.append([mixer] + [f"{a:.1%}" for a in accuracies] + [f"{mean_error:.1%}"])
    return rows


__all__ = ["DELTA_STEPS", "MIXER_NAMES", "RECALL_STEPS", "TEST_RECALL_STEPS", "WRITES", "chunk_figure",
           "delta_step_figure", "delta_step_widget", "delta_steps", "generation_memory", "implicit_weights_figure",
           "memory_figure",
           "recall_errors", "recall_rows", "recall_steps", "state_filling_figure", "state_filling_widget",
           "store_pairs", "time_forms", "timing_figure", "tiny_qwen3_next_deltanet", "train_mixers"]
