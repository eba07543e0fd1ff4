"""Chapter 6's figures and explorers: the softmax at a temperature, and dropout on the weights.

    from mha_lib.display.softmax_figures import dropout_explorer, dropout_figure, temperature_explorer
    temperature_explorer()            # the heads of section 1's layer at any temperature (a log slider)
    dropout_figure(weights, tokens)   # one draw of dropout on the weights, the row sums in the titles
    dropout_explorer()                # the same for any p and seed (two sliders)

Each explorer rebuilds the chapter's example itself (``example_scores``: the scaled scores of "Your journey
starts with one step" in the seeded four-head, non-causal layer of section 1, on the CPU), so that its cell runs
on its own, after a fresh open, with nothing run above it. The controls come from ``controls.py`` (one label
column, one track width, a redraw on release). Every word a figure shows is in the current language.
matplotlib and ipywidgets are imported on first use.
"""

from __future__ import annotations

import math

import torch

from ..data import toy_sentence
from ..functional import attention_scores, scale_scores, split_heads
from ..language import gettext as _
from ..modules import MultiHeadAttention
from ..runtime import one_thread
from ..validation import check_positive_float, check_tensor

Tensor = torch.Tensor

EXAMPLE_SENTENCE = "Your journey starts with one step"
PANEL_IN = 1.8  # four panels a row, a figure under 1,000 px wide once cropped (plot_heads' cap is 10 in before it)


def example_scores() -> tuple[list[str], Tensor]:
    """``(tokens, scores)``: section 1's scaled scores ``(1, H, T, S)`` = ``(1, 4, 6, 6)``, computed on the CPU.

    The same recipe as the chapter's first cells: ``toy_sentence`` with a 16-wide embedding, ``torch.manual_seed(0)``
    and then ``MultiHeadAttention(16, 16, 6, 0.0, 4, causal=False)``, the queries and keys cut into heads, their
    products divided by √Dh. The seeding happens inside ``fork_rng``: the caller's random numbers are untouched.
    """
    tokens, embeddings = toy_sentence(EXAMPLE_SENTENCE, d_model=16)
    with torch.random.fork_rng(devices=[]), torch.no_grad(), one_thread():
        torch.manual_seed(0)
        layer = MultiHeadAttention(d_in=16, d_out=16, context_length=len(tokens), dropout=0.0, num_heads=4,
                                   causal=False)
        x = embeddings.unsqueeze(0)  # (T, D) -> (1, T, D)
        q = split_heads(layer.W_query(x), layer.num_heads)  # (B, T, D) -> (B, H, T, Dh)
        k = split_heads(layer.W_key(x), layer.num_heads)  # (B, S, D) -> (B, H, S, Dh)
        scores = scale_scores(attention_scores(q, k), layer.head_dim)  # (B, H, T, S)
    return tokens, scores


def _heads(name: str, values: Tensor) -> Tensor:
    """``(B, H, T, S)`` or ``(H, T, S)`` -> ``(H, T, S)`` on the CPU (the first sequence of a batch)."""
    values = check_tensor(name, values)
    if values.dim() not in (3, 4):
        raise ValueError(f"{name} must be (H, T, S) or (B, H, T, S), got shape {tuple(values.shape)}")
    return (values[0] if values.dim() == 4 else values).detach().float().cpu()


def _entropy(weights: Tensor) -> Tensor:
    """``(..., T, S)`` -> ``(..., T)``: each row's entropy in nats (0 · ln 0 counts as 0)."""
    return -(weights * weights.clamp_min(1e-12).log()).sum(dim=-1)


def temperature_figure(scores: Tensor, tokens, temperature: float = 1.0):
    """Every head's softmax weights at ``temperature`` (one 0 … 1 scale), each head's mean entropy in its title."""
    from .plotting import plot_heads

    scores = _heads("scores", scores)  # (H, T, S)
    temperature = check_positive_float("temperature", temperature)
    weights = torch.softmax(scores / temperature, dim=-1)  # (H, T, S)
    titles = [_("head {h} · entropy {entropy:.2f}").format(h=h, entropy=_entropy(weights[h]).mean().item())
              for h in range(weights.shape[0])]
    size = scores.shape[-1]
    title = _("temperature τ = {temperature:.2f}  (max entropy ln {keys} = {top:.2f})").format(
        temperature=temperature, keys=size, top=math.log(size))
    return plot_heads(weights, tokens, head_titles=titles, vmin=0.0, vmax=1.0, title=title, panel_size=PANEL_IN)


def temperature_explorer(scores: Tensor | None = None, tokens=None, *, temperature: float = 1.0):
    """``temperature_figure`` with a temperature slider (a log scale from 0.03 to 10); display it as a cell's value.

    Without ``scores`` and ``tokens``: section 1's example (``example_scores``).
    """
    from ipywidgets import interactive

    from .controls import log_slider

    if (scores is None) != (tokens is None):
        raise ValueError("pass both scores and tokens, or neither (then section 1's example is used)")
    if scores is None:
        tokens, scores = example_scores()

    def figure(temperature):
        return temperature_figure(scores, tokens, temperature)

    slider = log_slider(_("temperature τ"), check_positive_float("temperature", temperature), -1.5, 1.0)
    return interactive(figure, {"manual": False, "auto_display": True}, temperature=slider)


def dropout_figure(weights: Tensor, tokens, p: float = 0.5, seed: int = 1):
    """The weights after one draw of dropout (``torch.manual_seed(seed)``, then ``F.dropout(weights, p)``), each
    head's smallest and largest row sum in its title. The draw happens inside ``fork_rng``: the caller's random
    numbers are untouched."""
    import torch.nn.functional as F

    from .plotting import plot_heads

    weights = _heads("weights", weights)  # (H, T, S)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"p must be a probability from 0 to below 1, got {p!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dropped = F.dropout(weights, p=float(p), training=True)  # (H, T, S): zeros, survivors × 1/(1-p)
    sums = dropped.sum(dim=-1)  # (H, T): one row sum per query
    titles = [_("head {h} · row sums {low:.2f}–{high:.2f}").format(h=h, low=sums[h].min().item(),
                                                                   high=sums[h].max().item())
              for h in range(dropped.shape[0])]
    title = _("Weights after dropout p = {p:.1f} (training mode): survivors × {factor:.2f}").format(
        p=p, factor=1 / (1 - p))
    return plot_heads(dropped, tokens, head_titles=titles, vmin=0.0, title=title, panel_size=PANEL_IN)


def dropout_explorer(weights: Tensor | None = None, tokens=None, *, p: float = 0.5, seed: int = 1):
    """``dropout_figure`` with a slider for ``p`` (0 to 0.9) and one for the seed; display it as a cell's value.

    Without ``weights`` and ``tokens``: the softmax of section 1's example (``example_scores``).
    """
    from ipywidgets import interactive

    from .controls import float_slider, int_slider

    if (weights is None) != (tokens is None):
        raise ValueError("pass both weights and tokens, or neither (then section 1's example is used)")
    if weights is None:
        tokens, scores = example_scores()
        weights = torch.softmax(scores, dim=-1)  # (B, H, T, S)

    def figure(p, seed):
        return dropout_figure(weights, tokens, p, seed)

    return interactive(figure, {"manual": False, "auto_display": True},
                       p=float_slider(_("dropout p"), p, 0.0, 0.9, 0.1, readout_format=".1f"),
                       seed=int_slider(_("random seed"), seed, 0, 20))


__all__ = ["EXAMPLE_SENTENCE", "dropout_explorer", "dropout_figure", "example_scores", "temperature_explorer",
           "temperature_figure"]
