"""Chapter 5's masks on one sentence: no mask, causal, padding, both, and the walkthrough's diagonal slip.

    from mha_lib.display.causal_masking import sentence_scores, masked_weights, mask_figure, mask_explorer
    tokens, scores = sentence_scores()                 # (1, H, T, T): the chapter's four heads, scaled scores
    masked_weights(scores, "causal + padding", 4)      # (1, H, T, T): the weights under that mask
    mask_figure("causal + padding", valid_len=4)       # one heatmap per head
    mask_explorer()                                    # the same figure with controls (needs a running kernel)

The scores are those of the chapter's first cells: "Your journey starts with one step" with the fixed random
embedding of ``toy_sentence`` (``D = 16``), a ``MultiHeadAttention(16, 16, num_heads=4, causal=False)`` drawn
after ``torch.manual_seed(0)`` on the CPU, its queries and keys cut into four heads of width 4, scores scaled by
``1/√4``. The chapter's "Try it" cell calls ``mask_explorer``, which imports everything it needs, so that cell runs
on its own after the notebook is reopened.
"""

from __future__ import annotations

import torch

from ..data import toy_sentence
from ..functional import attention_scores, masked_softmax, scale_scores, split_heads
from ..language import gettext as _, pgettext
from ..masks import causal_mask, combine_masks, mask_from_valid_lens
from ..modules import MultiHeadAttention
from ..validation import check_positive_int
from . import controls
from .plotting import plot_heads

SENTENCE = "Your journey starts with one step"
D_MODEL = 16
NUM_HEADS = 4
#: The explorer's masks, by the name ``masked_weights`` takes (shown translated: ``mask_name``).
MASK_TYPES = ("none", "causal", "padding", "causal + padding", "diagonal too (-inf)", "diagonal too (-1e9)")


def mask_name(mask_type: str) -> str:
    """The name of one of ``MASK_TYPES`` in the current language (what the menu and the title show)."""
    names = {
        "none": pgettext("a kind of attention mask", "none"),
        "causal": pgettext("a kind of attention mask", "causal"),
        "padding": pgettext("a kind of attention mask", "padding"),
        "causal + padding": pgettext("a kind of attention mask", "causal + padding"),
        "diagonal too (-inf)": pgettext("a kind of attention mask", "diagonal too (-inf)"),
        "diagonal too (-1e9)": pgettext("a kind of attention mask", "diagonal too (-1e9)"),
    }
    if mask_type not in names:
        raise ValueError(f"mask_type must be one of {list(MASK_TYPES)}, got {mask_type!r}")
    return names[mask_type]


def sentence_scores() -> tuple[list[str], torch.Tensor]:
    """``(tokens, scores)``: the sentence's tokens and the scaled scores ``(1, H, T, T)`` of the chapter's
    four-head layer (seed 0, no mask yet)."""
    tokens, embeddings = toy_sentence(SENTENCE, d_model=D_MODEL)
    x = embeddings.unsqueeze(0)  # (T, D) -> (1, T, D) = (1, 6, 16)
    torch.manual_seed(0)
    layer = MultiHeadAttention(D_MODEL, D_MODEL, context_length=len(tokens), dropout=0.0, num_heads=NUM_HEADS,
                               causal=False)
    with torch.no_grad():
        q = split_heads(layer.W_query(x), NUM_HEADS)  # (1, T, D) -> (1, H, T, Dh) = (1, 4, 6, 4)
        k = split_heads(layer.W_key(x), NUM_HEADS)
        scores = scale_scores(attention_scores(q, k), q.shape[-1])  # (1, H, T, T)
    return tokens, scores


def masked_weights(scores: torch.Tensor, mask_type: str, valid_len: int) -> torch.Tensor:
    """The weights ``(..., T, T)`` of ``scores`` ``(..., T, T)`` under one kind of mask (``MASK_TYPES``).

    "padding" keeps the first ``valid_len`` keys (``mask_from_valid_lens``); "causal + padding" combines it with
    the lower triangle (``combine_masks``); the two "diagonal too" masks are the GPT-2-sized walkthrough's slip,
    the upper triangle **with** its diagonal blocked, filled with −∞ (row 0 becomes NaN) or with −10⁹ (row 0 is
    uniform: it reads the future), computed as the walkthrough does, with ``masked_fill`` and ``torch.softmax``.
    """
    mask_name(mask_type)  # a known mask type
    valid_len = check_positive_int("valid_len", valid_len)
    T = scores.shape[-1]
    causal = causal_mask(T, device=scores.device)  # (T, T)
    padding = mask_from_valid_lens(torch.tensor([valid_len]), T, T).to(scores.device)  # (1, 1, T, T)
    if mask_type.startswith("diagonal too"):  # the walkthrough's slip, shown as it is
        diagonal_too = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu()  # blocked, diagonal too
        fill = float("-inf") if "inf" in mask_type else -1e9
        return torch.softmax(scores.masked_fill(diagonal_too, fill), dim=-1)
    keep = {"none": None, "causal": causal, "padding": padding,
            "causal + padding": combine_masks(causal, padding)}[mask_type]
    return masked_softmax(scores, keep)


def mask_figure(mask_type: str = "causal + padding", valid_len: int = 4):
    """The four heads' weights of ``sentence_scores`` under one kind of mask, one heatmap per head (NaN
    hatched red, blocked cells grey)."""
    tokens, scores = sentence_scores()
    name = mask_name(mask_type)
    if "padding" in mask_type:
        title = _("mask: {name}, valid_len = {valid_len}").format(name=name, valid_len=valid_len)
    else:
        title = _("mask: {name}").format(name=name)
    return plot_heads(masked_weights(scores, mask_type, valid_len), tokens, title=title, nan="show")


def mask_explorer(mask_type: str = "causal + padding", valid_len: int = 4):
    """``mask_figure`` with controls: the mask (``MASK_TYPES``) and ``valid_len`` (1 to T). Redraws when a control
    is released; needs a running kernel (Jupyter, Colab, Binder)."""
    from ipywidgets import interactive

    tokens = toy_sentence(SENTENCE, d_model=D_MODEL)[0]
    menu = [(mask_name(kind), kind) for kind in MASK_TYPES]
    # auto_display: the figure goes into the widget's output area (as ``interact`` does), where a saved notebook
    # keeps it for its static copy (mha_lib.display.static_widgets)
    return interactive(mask_figure, {"auto_display": True},
                       mask_type=controls.dropdown(_("mask"), menu, mask_type),
                       valid_len=controls.int_slider(_("valid length valid_len"), valid_len, 1, len(tokens)))
