"""The explorer on real heads: a trained model's 12 heads of one layer, for any sentence, redrawn instantly.

    from mha_lib.trained.explorer import TrainedHeads, trained_head_explorer
    heads = TrainedHeads()                          # all-MiniLM-L6-v2 through mha_lib (see pretrained.py)
    trained_head_explorer()                         # the widget: sentence, typed sentence, layer, head
    heads.layer_png("The cat sat.", layer=0)        # the same picture as PNG bytes (the static copy)

It reuses the drawing engine of the chapters' explorer (``display.render``: the labelled frame is drawn once, a
redraw only colours the cells). The attention weights of a sentence are computed once, for all six layers, by
``StudentEncoder`` (mha_lib's ``MultiHeadAttention`` in place of each self-attention) and cached; moving the
layer or head control then costs a redraw, a few milliseconds. Below the picture, the chosen head is spelled
out: for each token, the token it gives most weight to. Called without a ``TrainedHeads``, the explorer loads the
packaged model itself (``load_minilm`` keeps it for the next call), so that its cell runs on its own. Its controls
are laid out as every explorer of the series (``display/controls.py``: one label column, one track width).

ipywidgets and transformers are imported only when a ``TrainedHeads`` or an explorer is built.
"""

from __future__ import annotations

import functools
import html
import time
from typing import NamedTuple

import torch

from ..display import render as _render
from ..language import N_, gettext as _
from .corpus import CORPUS, EXAMPLE_SENTENCE

Tensor = torch.Tensor

MAX_TOKENS = 40  # beyond that the 12 panels' labels become unreadable
SENTENCE_WIDTH = "760px"  # the label column and a box wide enough for the corpus' longest sentence
COLORBAR_LABEL = N_("attention weight")  # a msgid: drawn in the current language


class SentenceHeads(NamedTuple):
    tokens: tuple[str, ...]  # word pieces with [CLS] and [SEP]
    weights: Tensor  # (L, H, T, T) on the CPU


class TrainedHeads:
    """The trained model behind the explorer: sentence -> every layer's attention weights (cached)."""

    def __init__(self, encoder=None, tokenizer=None):
        from .pretrained import StudentEncoder, load_minilm

        if (encoder is None) != (tokenizer is None):
            raise ValueError("pass both encoder and tokenizer, or neither (then the packaged MiniLM is loaded)")
        if encoder is None:
            model, tokenizer = load_minilm()
            encoder = StudentEncoder(model)
        self.encoder, self.tokenizer = encoder, tokenizer
        self.num_layers, self.num_heads = encoder.num_layers, encoder.num_heads
        self.heads = functools.lru_cache(maxsize=128)(self._heads)

    def _heads(self, sentence: str) -> SentenceHeads:
        from .pretrained import encode

        batch = encode(self.tokenizer, sentence)
        if len(batch.tokens[0]) > MAX_TOKENS:
            raise ValueError(f"sentence must have at most {MAX_TOKENS} word pieces, got {len(batch.tokens[0])}")
        with torch.no_grad():
            run = self.encoder(batch)
        weights = torch.stack(run.weights)[:, 0].float().cpu()  # L × (1, H, T, T) -> (L, H, T, T)
        return SentenceHeads(tuple(batch.tokens[0]), weights)

    def check_layer(self, layer) -> int:
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be an int from 0 to {self.num_layers - 1} (counted from 0), got {layer!r}")
        return layer

    def layer_picture(self, sentence: str, layer: int) -> _render.Picture:
        """The 12 heads of one layer as a picture (one shared 0 … 1 scale)."""
        found = self.heads(sentence)
        values = found.weights[self.check_layer(layer)].numpy()  # (H, T, T)
        return _render.render(values, found.tokens, found.tokens, cmap="viridis", vmin=0.0, vmax=1.0,
                              colorbar_label=_(COLORBAR_LABEL))

    def layer_png(self, sentence: str, layer: int) -> bytes:
        return _render.encode_png(self.layer_picture(sentence, layer))

    def strongest_links(self, sentence: str, layer: int, head: int) -> list[tuple[str, str, float]]:
        """For each token, the token that ``head`` of ``layer`` gives most weight to: ``(query, key, weight)``."""
        if not isinstance(head, int) or isinstance(head, bool) or not 0 <= head < self.num_heads:
            raise ValueError(f"head must be an int from 0 to {self.num_heads - 1} (counted from 0), got {head!r}")
        found = self.heads(sentence)
        # numpy, not torch: a torch reduction may wake a second thread, which costs milliseconds on a busy CPU
        matrix = found.weights[self.check_layer(layer), head].numpy()  # (T, T)
        where = matrix.argmax(axis=-1)  # (T,): the key each query attends to most
        return [(q, found.tokens[int(k)], float(matrix[t, k])) for t, (q, k) in enumerate(zip(found.tokens, where))]


def links_html(links: list[tuple[str, str, float]], layer: int, head: int) -> str:
    """The strongest links of one head as a small HTML line (the explorer's text under the picture)."""
    parts = [f"{html.escape(q)}&nbsp;→&nbsp;<b>{html.escape(k)}</b>&nbsp;{w:.2f}" for q, k, w in links]
    return ('<div class="mha-trained-links">' + _("<b>layer {layer}, head {head}</b> (from 0), each token → the "
                                                  "token it attends to most: ").format(layer=layer, head=head)
            + " · ".join(parts) + "</div>")


def trained_head_explorer(heads: TrainedHeads | None = None, sentences=None, *, layer: int = 0, head: int = 0):
    """The widget: a sentence (from the chapter's corpus, or typed), a layer, a head. Display it as a cell's value.

    Returns an ``ipywidgets`` box with ``controls`` (by name), ``image`` and ``links``; ``redraw_count`` and
    ``last_redraw_ms`` say how often and how fast it redrew (the benchmark reads them).
    """
    heads = TrainedHeads() if heads is None else heads
    return _explorer_class()(heads, list(CORPUS) if sentences is None else list(sentences), layer, head)


@functools.cache
def _explorer_class():
    import ipywidgets as widgets

    from ..display import controls

    class TrainedHeadExplorer(widgets.VBox):
        def __init__(self, heads: TrainedHeads, sentences: list[str], layer: int, head: int):
            super().__init__()
            if not sentences or not all(isinstance(s, str) and s.strip() for s in sentences):
                raise ValueError(f"sentences must be a non-empty list of non-empty str, got {sentences!r}")
            self.heads = heads
            heads.check_layer(layer)
            heads.strongest_links(sentences[0], layer, head)  # checks head, warms the cache
            self.redraw_count, self.last_redraw_ms = 0, None
            start = EXAMPLE_SENTENCE if EXAMPLE_SENTENCE in sentences else sentences[0]
            # one layout for every explorer of the series (display/controls.py): a label column, then the control
            self.controls = {
                "sentence": controls.dropdown(_("sentence"), sentences, start),
                "typed": widgets.Text(value="", placeholder=_("or type a sentence and press Enter"),
                                      description=_("your sentence"), style=dict(controls.STYLE),
                                      continuous_update=False, layout=widgets.Layout(width=SENTENCE_WIDTH)),
                "layer": controls.int_slider(_("layer"), layer, 0, heads.num_layers - 1),
                "head": controls.dropdown(_("head (for the text below)"), list(range(heads.num_heads)), head),
            }
            self.controls["sentence"].layout.width = SENTENCE_WIDTH  # sentences are longer than a slider
            self.message = widgets.HTML()
            self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
            self.links = widgets.HTML()
            c = self.controls
            self.children = [c["sentence"], c["typed"], c["layer"], c["head"], self.message, self.image, self.links]
            self.add_class("mha-trained-explorer")
            for control in c.values():
                control.observe(self._on_change, names="value")
            self.redraw()

        def _on_change(self, change):
            self.redraw()

        def sentence(self) -> str:
            typed = self.controls["typed"].value.strip()
            return typed if typed else self.controls["sentence"].value

        def redraw(self) -> None:
            start = time.perf_counter()
            sentence, layer = self.sentence(), self.controls["layer"].value
            head = self.controls["head"].value
            try:
                self.image.value = self.heads.layer_png(sentence, layer)
                self.links.value = links_html(self.heads.strongest_links(sentence, layer, head), layer, head)
                self.message.value = _("<b>layer {layer}</b> (from 0) · 12 heads · {tokens} tokens").format(
                    layer=layer, tokens=len(self.heads.heads(sentence).tokens))
            except ValueError as error:  # a typed sentence that is too long: say so, keep the last picture
                self.message.value = f"<span style='color:#b00'>{html.escape(str(error))}</span>"
            self.redraw_count += 1
            self.last_redraw_ms = (time.perf_counter() - start) * 1e3

    return TrainedHeadExplorer


__all__ = ["COLORBAR_LABEL", "MAX_TOKENS", "SentenceHeads", "TrainedHeads", "links_html", "trained_head_explorer"]
