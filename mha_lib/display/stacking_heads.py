"""Chapter 2's heads side by side: a ``MultiHeadAttentionWrapper`` of any number of heads, one heatmap per head.

    from mha_lib.display.stacking_heads import heads_figure, heads_explorer
    heads_figure(num_heads=4, head_width=4)   # the four heads of "The heads differ"
    heads_explorer()                          # the same figure with two sliders (needs a running kernel)

The sentence is "Your journey starts with one step" with the fixed random embedding of ``toy_sentence``
(``D = 16``); the wrapper is drawn after ``torch.manual_seed(123)``, on the CPU, so its heads are the same on every
machine, and with the seed fixed the first heads stay exactly as they were when heads are added: each head is
built, and draws its weights, on its own. The chapter's "Try it" cell calls ``heads_explorer``, which imports
everything it needs, so that cell runs on its own after the notebook is reopened.
"""

from __future__ import annotations

import torch

from ..data import toy_sentence
from ..language import gettext as _, ngettext
from ..modules import MultiHeadAttentionWrapper
from ..validation import check_positive_int
from . import controls
from .plotting import plot_heads

SENTENCE = "Your journey starts with one step"
D_MODEL = 16  # the width of the sentence's embedding
HEAD_WIDTHS = (1, 2, 4, 8, 16)  # the explorer's head widths
MAX_HEADS = 8  # the explorer's largest number of heads


def heads_figure(num_heads: int = 4, head_width: int = 4):
    """The weights of every head of ``MultiHeadAttentionWrapper(16, head_width, num_heads=num_heads)`` over the
    sentence, one heatmap per head.

    The title gives the output width, ``num_heads × head_width``, and the number of weights,
    ``H × 3 × D × Dh`` (three bias-free projections per head). Row 0 of a causal head is always 1 ("Your" can
    only look at itself): ``plot_heads`` leaves it out of the colour range and says so under the figure.
    """
    num_heads = check_positive_int("num_heads", num_heads)
    head_width = check_positive_int("head_width", head_width)
    words, x = toy_sentence(SENTENCE, d_model=D_MODEL)  # (T, D)
    torch.manual_seed(123)
    layer = MultiHeadAttentionWrapper(D_MODEL, head_width, context_length=len(words), dropout=0.0,
                                      num_heads=num_heads)
    with torch.no_grad():
        _context, weights = layer(x.unsqueeze(0), return_weights=True)  # (1, T, D) -> (1, H, T, T)
    params = sum(p.numel() for p in layer.parameters())  # H × 3 × D × Dh
    title = ngettext("{num_heads} head of width {head_width}: output width {width}, {params} weights",
                     "{num_heads} heads of width {head_width}: output width {width}, {params} weights",
                     num_heads).format(num_heads=num_heads, head_width=head_width, width=num_heads * head_width,
                                       params=params)
    return plot_heads(weights, words, title=title)


def heads_explorer(num_heads: int = 4, head_width: int = 4):
    """``heads_figure`` with two sliders: the number of heads (1 to ``MAX_HEADS``) and the head width
    (``HEAD_WIDTHS``). Redraws when a slider is released; needs a running kernel (Jupyter, Colab, Binder)."""
    from ipywidgets import interactive

    # auto_display: the figure goes into the widget's output area (as ``interact`` does), where a saved notebook
    # keeps it for its static copy (mha_lib.display.static_widgets)
    return interactive(heads_figure, {"auto_display": True},
                       num_heads=controls.int_slider(_("heads H"), num_heads, 1, MAX_HEADS),
                       head_width=controls.selection_slider(_("head width Dh"), HEAD_WIDTHS, head_width))
