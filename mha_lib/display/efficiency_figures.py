"""Chapter 9's figure and explorer: how big the tensors of one explicit attention layer are, for any shape.

    from mha_lib.display.efficiency_figures import weight_sizes_explorer, weight_sizes_figure
    weight_sizes_figure(T=1024, B=8, D=768, H=12)   # four bars on a log scale, in MiB
    weight_sizes_explorer()                         # the same with a slider for T and B, D, H to pick

The sizes are the formulas of the chapter's section 5, nothing is measured: float32 (4 bytes) tensors of
``B·T·D`` numbers for the input, ``4·B·T·D`` for q, k, v and the context, ``B·H·T·T`` for the weights, and about
three times the weights in training (the weights kept for backward, their gradient, the gradient of the
scores: the measured peak of section 5). The weights overtake the rest at ``T = 4D/H``. No kernel is needed to draw it: the explorer's cell
runs on its own. matplotlib and ipywidgets are imported on first use; the words are in the current language.
"""

from __future__ import annotations

from ..language import gettext as _
from ..validation import check_positive_int
from .plotting import DPI, LABEL_PT, TITLE_PT

MIB = 4 / 2**20  # bytes of a float32, in MiB
COLOURS = ("#bbbbbb", "#8fb8de", "#d9534f", "#f2a19e")
WIDTH_IN, HEIGHT_IN = 7.5, 3.6


def weight_sizes(T: int = 1024, B: int = 8, D: int = 768, H: int = 12) -> dict[str, float]:
    """The four sizes in MiB, by the label of their bar (in the current language)."""
    T, B, D, H = (check_positive_int(name, value) for name, value in (("T", T), ("B", B), ("D", D), ("H", H)))
    return {_("x (B, T, D)"): B * T * D * MIB,
            _("q, k, v, context\n4 × (B, T, D)"): 4 * B * T * D * MIB,
            _("weights\n(B, H, T, T)"): B * H * T * T * MIB,
            _("training, about\n3 × weights"): 3 * B * H * T * T * MIB}


def weight_sizes_figure(T: int = 1024, B: int = 8, D: int = 768, H: int = 12):
    """The four sizes as bars on a log scale, each with its value; the title says how many times the weights
    are the size of q, k, v and the context together (``H·T / 4D``)."""
    from matplotlib.figure import Figure

    sizes = weight_sizes(T, B, D, H)
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    bars = ax.bar(list(sizes), list(sizes.values()), color=COLOURS)
    for bar, size in zip(bars, sizes.values()):
        label = f"{size:,.0f} MiB" if size >= 10 else f"{size:.1f} MiB"
        ax.text(bar.get_x() + bar.get_width() / 2, size, label, ha="center", va="bottom", fontsize=LABEL_PT + 1)
    ax.set_yscale("log")
    ax.set_ylim(min(sizes.values()) / 3, max(sizes.values()) * 8)
    ax.set_ylabel(_("MiB (log scale)"), fontsize=TITLE_PT + 1)
    ax.tick_params(labelsize=TITLE_PT)
    ax.set_title(_("One explicit attention layer, B={B}, T={T}, D={D}, H={H}: weights = {ratio:.1f} × "
                   "(q, k, v, context)").format(B=B, T=T, D=D, H=H, ratio=H * T / (4 * D)), fontsize=TITLE_PT + 1)
    return fig


def weight_sizes_explorer(T: int = 1024, B: int = 8, D: int = 768, H: int = 12):
    """``weight_sizes_figure`` with a slider for ``T`` (128 to 8,192) and ``B``, ``D``, ``H`` to pick among the
    values of GPT-2 small, medium and XL; display it as a cell's value."""
    from ipywidgets import interactive

    from .controls import int_slider, selection_slider

    return interactive(weight_sizes_figure, {"manual": False, "auto_display": True},
                       T=int_slider(_("sequence length T"), T, 128, 8192, 128),
                       B=selection_slider(_("batch size B"), [1, 8, 32], B),
                       D=selection_slider(_("model width D"), [768, 1024, 1600], D),
                       H=selection_slider(_("heads H"), [1, 12, 16, 25], H))


__all__ = ["weight_sizes", "weight_sizes_explorer", "weight_sizes_figure"]
