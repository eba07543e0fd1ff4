"""Chapter 7's figure and explorer: silence one head and see which output features change, without W_o and with it.

    from mha_lib.display.output_projection_figures import head_change_figure, silenced_head_explorer
    head_change_figure(layer, context, tokens, head=1)   # two panels: concatenation only, and with W_o
    silenced_head_explorer()                             # the same with a menu for the head

``silenced_changes`` is the experiment of section 3: the head's context set to zero, the heads merged (and, in the
second panel, projected by ``layer.out_proj``), and the size of the change of every output feature. The explorer
rebuilds the chapter's layer itself (``example_heads``: the four causal heads of "Your journey starts with one
step", seed 0, on the CPU), so that its cell runs on its own after a fresh open. matplotlib and ipywidgets are
imported on first use; every word a figure shows is in the current language.
"""

from __future__ import annotations

import torch

from ..data import toy_sentence
from ..functional import explicit_attention, merge_heads, split_heads
from ..language import N_, Messages, gettext as _
from ..modules import MultiHeadAttention
from ..runtime import one_thread
from ..validation import check_tensor
from .plotting import DPI, LABEL_PT, MAX_WIDTH_IN, SUPTITLE_PT, TITLE_PT

Tensor = torch.Tensor

EXAMPLE_SENTENCE = "Your journey starts with one step"
#: the two panels, in the current language when read
PANELS = Messages({"concat": N_("concatenation only (no W_o)"), "projected": N_("with W_o")})
WIDTH_IN, HEIGHT_IN = min(9.6, MAX_WIDTH_IN - 0.3), 2.7  # under 1,000 px once cropped


def example_heads() -> tuple[list[str], MultiHeadAttention, Tensor]:
    """``(tokens, layer, context)``: the chapter's layer and its heads' outputs ``(1, H, T, Dh)`` = ``(1, 4, 6, 4)``.

    The recipe of the chapter's first cells, on the CPU: ``toy_sentence`` with a 16-wide embedding,
    ``torch.manual_seed(0)``, then ``MultiHeadAttention(16, 16, 6, 0.0, 4)`` (causal). The seeding happens inside
    ``fork_rng``: the caller's random numbers are untouched.
    """
    tokens, embeddings = toy_sentence(EXAMPLE_SENTENCE, d_model=16)
    with torch.random.fork_rng(devices=[]), torch.no_grad(), one_thread():
        torch.manual_seed(0)
        layer = MultiHeadAttention(d_in=16, d_out=16, context_length=len(tokens), dropout=0.0, num_heads=4)
        x = embeddings.unsqueeze(0)  # (T, D) -> (1, T, D)
        q, k, v = (split_heads(projection(x), layer.num_heads)  # (B, T, D) -> (B, H, T, Dh)
                   for projection in (layer.W_query, layer.W_key, layer.W_value))
        context, _weights = explicit_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
    return tokens, layer, context


def _check_head(head, num_heads: int) -> int:
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < num_heads:
        raise ValueError(f"head must be an int from 0 to {num_heads - 1} (counted from 0), got {head!r}")
    return head


def silenced_changes(layer: MultiHeadAttention, context: Tensor, head: int) -> dict[str, Tensor]:
    """``{"concat": |Δ|, "projected": |Δ|}``, each ``(B, T, D)``: how much every output feature moves when
    ``head``'s context ``(B, H, T, Dh)`` is set to zero, after the concatenation alone and after ``out_proj``."""
    context = check_tensor("context", context, ndim=4, layout="(B, H, T, Dh)")
    head = _check_head(head, context.shape[1])
    quiet = context.clone()
    quiet[:, head] = 0.0  # (B, H, T, Dh): this head contributes nothing
    with torch.no_grad():
        merged, merged_quiet = merge_heads(context), merge_heads(quiet)  # (B, T, D) each
        return {"concat": (merged_quiet - merged).abs(),
                "projected": (layer.out_proj(merged_quiet) - layer.out_proj(merged)).abs()}


def head_change_figure(layer: MultiHeadAttention, context: Tensor, tokens, head: int = 1):
    """Two panels (tokens down, output features across, one colour scale): the change of every output when
    ``head`` is silenced, after the concatenation alone and with ``W_o``; the head's own features framed."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    both = silenced_changes(layer, context, head)
    _B, H, T, Dh = context.shape
    if len(tokens) != T:
        raise ValueError(f"tokens must have one label per position (T = {T}), got {len(tokens)}")
    D = H * Dh
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, 2)
    top = max(float(change.max()) for change in both.values())  # one colour scale for both panels
    for ax, (name, change) in zip(axes, both.items()):
        # a size of change, not a weight: its own colour map
        image = ax.imshow(change[0].detach().cpu().numpy(), cmap="magma", vmin=0.0, vmax=top)
        ax.add_patch(Rectangle((head * Dh - 0.5, -0.5), Dh, T, fill=False, edgecolor="cyan", linewidth=2))
        ax.set_yticks(range(T), list(tokens), fontsize=LABEL_PT)
        ax.set_xticks(range(D), range(D), fontsize=LABEL_PT)
        ax.set_xlabel(_("output feature (framed: head {head}'s slice)").format(head=head), fontsize=TITLE_PT)
        ax.set_title(PANELS[name], fontsize=TITLE_PT + 1)
    bar = fig.colorbar(image, ax=axes, shrink=0.6, pad=0.02)  # one scale, one bar
    bar.set_label(_("|change|"), fontsize=TITLE_PT)
    bar.ax.tick_params(labelsize=LABEL_PT)
    fig.suptitle(_("How much each output changes when head {head} is silenced").format(head=head),
                 fontsize=SUPTITLE_PT)
    return fig


def silenced_head_explorer(layer: MultiHeadAttention | None = None, context: Tensor | None = None, tokens=None, *,
                           head: int = 1):
    """``head_change_figure`` with a menu for the head to silence; display it as a cell's value.

    Without ``layer``, ``context`` and ``tokens``: the chapter's layer (``example_heads``).
    """
    from ipywidgets import interactive

    from .controls import dropdown

    given = [value is not None for value in (layer, context, tokens)]
    if any(given) and not all(given):
        raise ValueError("pass layer, context and tokens together, or none (then the chapter's layer is used)")
    if layer is None:
        tokens, layer, context = example_heads()
    heads = list(range(check_tensor("context", context, ndim=4, layout="(B, H, T, Dh)").shape[1]))
    _check_head(head, len(heads))

    def figure(head):
        return head_change_figure(layer, context, tokens, head)

    return interactive(figure, {"manual": False, "auto_display": True},
                       head=dropdown(_("silence head"), heads, head))


__all__ = ["PANELS", "example_heads", "head_change_figure", "silenced_changes", "silenced_head_explorer"]
