"""Chapter 1's wider heads: one random head over the book's sentence, with and without the scale 1/√Dh.

    from mha_lib.display.single_head import head_weights, row_figure, row_explorer
    head_weights(128, scaled=False)                       # (T, T): a random SelfAttention(16, 128), not scaled
    row_figure(head_width=128, scaled=False, query="journey")  # its weights, one query's row outlined and as bars
    row_explorer()                                        # the same figure with controls (needs a running kernel)

The sentence is "Your journey starts with one step" with the fixed random embedding of ``toy_sentence``
(``D = 16``); the head is ``SelfAttention(16, head_width)`` drawn after ``torch.manual_seed(0)``, so one width
always gives the same head, on every machine (computed on the CPU). The chapter prints a table of these weights
and draws the figure; its "Try it" cell calls ``row_explorer``, which imports everything it needs, so that cell runs
on its own after the notebook is reopened.
"""

from __future__ import annotations

import torch

from ..data import toy_sentence
from ..functional import explicit_attention
from ..language import gettext as _
from ..modules import SelfAttention
from ..validation import check_positive_int
from . import controls
from .plotting import COLORMAPS, DPI, LABEL_PT, SUPTITLE_PT, TITLE_PT

SENTENCE = "Your journey starts with one step"
D_MODEL = 16  # the width of the sentence's embedding
HEAD_WIDTHS = (2, 8, 32, 128, 512)  # the explorer's widths: from the chapter's Dh = 2 to wider than GPT-2's 64


def head_weights(head_width: int, scaled: bool = True) -> torch.Tensor:
    """The ``(T, T)`` weights of a random ``SelfAttention(16, head_width)`` over the sentence, with the scale
    ``1/√Dh`` (``scaled=True``) or without it.

    ``torch.manual_seed(0)`` before the head is built: the same random head for the same width. The steps are
    the chapter's: queries, keys and values from the head's three projections, then ``explicit_attention``
    (scores, scale, softmax) with ``scale=None`` (``1/√Dh``) or ``scale=1.0`` (no scaling).
    """
    head_width = check_positive_int("head_width", head_width)
    _words, x = toy_sentence(SENTENCE, d_model=D_MODEL)  # (T, 16)
    torch.manual_seed(0)  # the same random head for the same width
    head = SelfAttention(D_MODEL, head_width)
    with torch.no_grad():
        q, k, v = head.W_query(x), head.W_key(x), head.W_value(x)  # (T, Dh) each
        _context, weights = explicit_attention(q, k, v, scale=None if scaled else 1.0)  # None: 1/√Dh
    return weights  # (T, T)


def row_figure(head_width: int = 128, scaled: bool = True, query: str = "journey"):
    """One head's weights as a heatmap, with the row of ``query`` outlined in red, and that row as bars.

    Left: ``head_weights(head_width, scaled)``, row = query, column = key, on the series' 0-to-1 ``viridis``
    scale. Right: what ``query`` takes from each token (one bar per key, 0 to 1). Returns a matplotlib
    ``Figure`` (a notebook displays it when it is the cell's last value).
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    words, _x = toy_sentence(SENTENCE, d_model=D_MODEL)
    if query not in words:
        raise ValueError(f"query must be one of the sentence's tokens {words}, got {query!r}")
    weights = head_weights(head_width, scaled).numpy()  # (T, T)
    T, i = len(words), words.index(query)
    fig = Figure(figsize=(8.0, 3.4), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.25])
    image = left.imshow(weights, cmap=COLORMAPS["weights"], vmin=0, vmax=1)
    left.set_xticks(range(T), words, rotation=90, fontsize=LABEL_PT)
    left.set_yticks(range(T), words, fontsize=LABEL_PT)
    left.add_patch(Rectangle((-0.5, i - 0.5), T, 1, fill=False, edgecolor="red", linewidth=2))
    left.set_title(_("row = query, column = key"), fontsize=TITLE_PT)
    bar = fig.colorbar(image, ax=left, shrink=0.8)
    bar.ax.tick_params(labelsize=LABEL_PT)
    right.barh(range(T), weights[i], color="tab:purple")
    right.set_yticks(range(T), words, fontsize=LABEL_PT)
    right.tick_params(axis="x", labelsize=LABEL_PT)
    right.invert_yaxis()
    right.set_xlim(0, 1)
    right.set_title(_('what "{query}" takes from each token').format(query=query), fontsize=TITLE_PT)
    scale = _("scaled by 1/√Dh") if scaled else _("NOT scaled")
    fig.suptitle(_("Dh = {width}, {scale}").format(width=head_width, scale=scale), fontsize=SUPTITLE_PT)
    return fig


def row_explorer(head_width: int = 128, scaled: bool = True, query: str = "journey"):
    """``row_figure`` with controls: the head width (``HEAD_WIDTHS``), the scale on or off, the query whose row
    is drawn. Redraws when a control is released; needs a running kernel (Jupyter, Colab, Binder)."""
    from ipywidgets import interactive

    words, _x = toy_sentence(SENTENCE, d_model=D_MODEL)
    # auto_display: the figure goes into the widget's output area (as ``interact`` does), where a saved notebook
    # keeps it for its static copy (mha_lib.display.static_widgets)
    return interactive(row_figure, {"auto_display": True},
                       head_width=controls.selection_slider(_("head width Dh"), HEAD_WIDTHS, head_width),
                       scaled=controls.toggle(_("scale by 1/√Dh"), scaled),
                       query=controls.dropdown(_("query (row)"), list(words), query))
