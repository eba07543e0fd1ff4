"""Chapter 3's three ways to form heads, seen in the attention they give (``mha_lib.heads``: projection, direct
split, grouped 1×1 convolution).

    from mha_lib.display.weight_splitting import head_maps, ways_figure, ways_explorer
    head_maps("direct split", 3)              # (H, T, T): the weights when queries and keys are formed that way
    ways_figure("grouped conv", num_heads=3)  # one heatmap per head, with the rows W[a:b] each head owns
    ways_explorer()                           # the same figure with controls (needs a running kernel)

The sentence is "Your journey starts with one step" with the fixed random embedding of ``toy_sentence``
(``D = 12``). Queries and keys are formed by two head formers of the same kind, drawn after
``torch.manual_seed(0)`` on the CPU; no mask, so that whole rows are visible. The chapter's "Try it" cell calls
``ways_explorer``, which imports everything it needs, so that cell runs on its own after the notebook is reopened.
"""

from __future__ import annotations

import torch

from ..data import toy_sentence
from ..functional import attention_scores, masked_softmax, scale_scores
from ..heads import HEAD_FORMERS, make_head_former
from ..language import gettext as _
from ..validation import divisors
from . import controls
from .plotting import plot_heads

SENTENCE = "Your journey starts with one step"
D_MODEL = 12  # the width of the sentence's embedding: 1, 2, 3, 4, 6 or 12 heads


def head_maps(kind: str, num_heads: int, d_model: int = D_MODEL) -> torch.Tensor:
    """The attention weights ``(H, T, T)`` when queries and keys are formed by ``kind`` (a key of
    ``HEAD_FORMERS``) into ``num_heads`` heads: two formers of that kind (seed 0), one for the queries, one for
    the keys; scores scaled by ``1/√Dh``; softmax without a mask."""
    _words, x = toy_sentence(SENTENCE, d_model=d_model)
    x = x.unsqueeze(0)  # (T, D) -> (1, T, D)
    torch.manual_seed(0)
    form_q, form_k = (make_head_former(kind, d_model, num_heads) for _ in range(2))
    with torch.no_grad():
        q, k = form_q(x), form_k(x)  # (1, T, D) -> (1, H, T, Dh) each
        scores = scale_scores(attention_scores(q, k), d_model // num_heads)  # (1, H, T, T)
        return masked_softmax(scores)[0]  # (H, T, T)


def ways_figure(kind: str = "grouped conv", num_heads: int = 3):
    """``head_maps(kind, num_heads)`` as one heatmap per head. The title gives the shapes and the parameters of
    the three formers (Q, K and V); each panel names the rows ``W[a:b]`` of the ``(D, D)`` matrix its head owns."""
    words, _x = toy_sentence(SENTENCE, d_model=D_MODEL)
    Dh = D_MODEL // num_heads
    n_params = 3 * sum(p.numel() for p in make_head_former(kind, D_MODEL, num_heads).parameters())  # Q, K and V
    title = _("{kind}: (1, 6, 12) → (1, {num_heads}, 6, {Dh}), {n_params} parameters for Q, K, V").format(
        kind=kind, num_heads=num_heads, Dh=Dh, n_params=n_params)
    head_titles = [_("head {h}: W[{start}:{stop}]").format(h=h, start=h * Dh, stop=(h + 1) * Dh)
                   for h in range(num_heads)]  # the rows it owns
    return plot_heads(head_maps(kind, num_heads), words, ncols=min(num_heads, 6), title=title,
                      head_titles=head_titles)


def ways_explorer(kind: str = "grouped conv", num_heads: int = 3):
    """``ways_figure`` with controls: the way to form heads (``HEAD_FORMERS``) and the number of heads (the
    divisors of 12). Redraws when a control is released; needs a running kernel (Jupyter, Colab, Binder)."""
    from ipywidgets import interactive

    # auto_display: the figure goes into the widget's output area (as ``interact`` does), where a saved notebook
    # keeps it for its static copy (mha_lib.display.static_widgets)
    return interactive(ways_figure, {"auto_display": True},
                       kind=controls.dropdown(_("way to form heads"), list(HEAD_FORMERS), kind),
                       num_heads=controls.selection_slider(_("heads H"), divisors(D_MODEL), num_heads))
