"""Chapter 4's heads of one sentence, without and with the scale 1/√Dh, and the entropy that measures them.

    from mha_lib.display.scaling import entropy, head_weights, entropy_titles, scaling_figure, scaling_explorer
    entropy(weights)                       # (..., T, S) -> (..., T): the entropy of each row, in nats
    head_weights(64, scaled=False)         # (H, T, T): four random heads of width 64, not scaled
    scaling_figure(head_dim=64, scaled=False)   # one heatmap per head, its mean entropy in its title
    scaling_explorer()                     # the same figure with controls (needs a running kernel)

The sentence is "Your journey starts with one step" with the fixed random embedding of ``toy_sentence``
(``D_in = 64``). The heads' projections are drawn after ``torch.manual_seed(seed)`` on the CPU, with standard
deviation ``1/√D_in``, so that the entries of q and k have variance close to 1 (the chapter's idealised case, not
PyTorch's default initialisation); no mask. The chapter's "Try it" cell calls ``scaling_explorer``, which imports
everything it needs, so that cell runs on its own after the notebook is reopened.
"""

from __future__ import annotations

import math

import torch

from ..data import toy_sentence
from ..functional import attention_scores, masked_softmax, scale_scores, split_heads
from ..language import gettext as _
from ..validation import check_positive_int
from . import controls
from .plotting import plot_heads

SENTENCE = "Your journey starts with one step"
D_IN = 64  # the width of the sentence's embedding
NUM_HEADS = 4
HEAD_DIMS = (4, 16, 64, 256)  # the explorer's head widths


def entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy of each row of attention weights, in nats: 0 for one-hot, ln S for uniform over S keys.

    ``torch.special.entr(p)`` is ``-p ln p`` element by element (with ``0 ln 0 = 0``); summed over the keys, the
    last axis: ``(..., T, S) -> (..., T)``.
    """
    return torch.special.entr(weights).sum(dim=-1)  # (..., T, S) -> (..., T)


def head_weights(head_dim: int, scaled: bool = True, seed: int = 0) -> torch.Tensor:
    """Attention weights ``(H, T, T)`` of ``NUM_HEADS`` random heads of width ``head_dim`` over the sentence.

    ``W_q`` and ``W_k`` are ``(D_in, H·Dh)``, drawn from ``N(0, 1/D_in)`` after ``torch.manual_seed(seed)``
    (std ``1/√D_in``: ``Var(q_i) ≈ 1``); q and k are cut into heads with ``split_heads``; the scores are divided
    by ``√head_dim`` when ``scaled``; softmax without a mask.
    """
    head_dim = check_positive_int("head_dim", head_dim)
    _tokens, embeddings = toy_sentence(SENTENCE, d_model=D_IN)
    x = embeddings.unsqueeze(0)  # (T, D_in) -> (1, T, D_in)
    torch.manual_seed(seed)
    w_q = torch.randn(D_IN, NUM_HEADS * head_dim) / math.sqrt(D_IN)  # (D_in, D), std 1/√D_in: Var(q_i) ≈ 1
    w_k = torch.randn(D_IN, NUM_HEADS * head_dim) / math.sqrt(D_IN)
    q = split_heads(x @ w_q, NUM_HEADS)  # (1, T, D) -> (1, H, T, Dh)
    k = split_heads(x @ w_k, NUM_HEADS)
    scores = attention_scores(q, k)  # (1, H, T, T)
    if scaled:
        scores = scale_scores(scores, head_dim)
    return masked_softmax(scores)[0]  # (1, H, T, T) -> (H, T, T)


def entropy_titles(weights: torch.Tensor, label: str) -> list[str]:
    """One panel title per head of ``weights`` ``(H, T, S)``: ``label``, the head's number and its mean entropy."""
    return [_("{label}, head {h}: {nats:.2f} nats").format(label=label, h=h, nats=entropy(w).mean().item())
            for h, w in enumerate(weights)]


def scaling_figure(head_dim: int = 64, scaled: bool = False):
    """``head_weights(head_dim, scaled)`` as one heatmap per head, each panel titled with its mean entropy."""
    weights = head_weights(head_dim, scaled=scaled)
    tokens, _embeddings = toy_sentence(SENTENCE, d_model=D_IN)
    label = f"÷√{head_dim}" if scaled else _("no scaling")
    return plot_heads(weights, tokens, head_titles=entropy_titles(weights, label),
                      title=_("Four heads of width {head_dim}, {label}").format(head_dim=head_dim, label=label))


def scaling_explorer(head_dim: int = 64, scaled: bool = False):
    """``scaling_figure`` with controls: the head width (``HEAD_DIMS``) and the scale on or off. Redraws when a
    control is released; needs a running kernel (Jupyter, Colab, Binder)."""
    from ipywidgets import interactive

    # auto_display: the figure goes into the widget's output area (as ``interact`` does), where a saved notebook
    # keeps it for its static copy (mha_lib.display.static_widgets)
    return interactive(scaling_figure, {"auto_display": True},
                       head_dim=controls.selection_slider(_("head width Dh"), HEAD_DIMS, head_dim),
                       scaled=controls.toggle(_("scale by 1/√Dh"), scaled))
