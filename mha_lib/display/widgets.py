"""Interactive explorers for the notebooks: every head's score matrix, redrawn as fast as you move a control.

    from mha_lib.display.widgets import attention_explorer, explorer_figure
    attention_explorer()          # the widget (needs a running kernel: Jupyter, Colab, Binder)
    explorer_figure(num_heads=4)  # the same view as a matplotlib Figure, for readers without a kernel

What the explorer shows. A seeded ``MultiHeadAttention`` (weights drawn on the CPU, so every machine shows the
same picture) projects the embeddings of a sentence (``toy_sentence``) into queries and keys, cuts them into
heads, and the four steps of ``functional.py`` are applied one after the other:

    scores   Q Kᵀ per head                            attention_scores          (H, T, S)
    scaled   scores / √Dh  (or unchanged, scaling off) scale_scores
    masked   −∞ above the diagonal (causal on)        causal_mask + additive_mask
    weights  softmax(scaled / temperature), masked    masked_softmax            rows sum to 1

``attention_stages`` computes all four as plain tensors (no widgets involved: that is what the tests check).

The controls: sentence, model width D, number of heads H (only divisors of D are offered: every head gets
D // H features), the stage shown, causal mask on/off, scaling on/off, and the softmax temperature (a slider that
redraws on release), laid out as every explorer of the series is (``controls.py``: one label column). Each stage has
its own colour scale, drawn as a colour bar, with the colour rules of ``plotting.py`` (one map per quantity):
the weights use ``viridis`` from 0 to their largest value rounded up to a tenth (rows with a single key, weight
1 by construction, left out; the caption says so); the three score stages use ``RdBu_r``, a diverging map centred on 0,
spanning ± the largest finite value of all heads (so toggling the scaling changes the numbers on the colour
bar, not the pattern; one outlier row is left out of that range, and the caption says so). Masked (−∞) entries
are grey and striped; NaN weights (a softmax that overflowed) are cross-hatched in red and the caption says how
many — never drawn as zeros. Controls that cannot change the stage shown are greyed out (the temperature acts
only in the softmax, the mask only from the masked stage on, the scaling not on the raw scores).

Why it is fast. Re-drawing a 3 × 4 grid of labelled heatmaps with matplotlib takes about a second on a laptop
CPU (≈ 0.35 s even when only the images' data are replaced), mostly for layout and text. Here the frame (head
titles, token labels, colour-bar label) is drawn once per layout and cached; a redraw only turns the values
into colour levels with numpy, enlarges each entry to a square of pixels, pastes the squares into a copy of
the frame and compresses the result into a PNG for an ``ipywidgets.Image`` (see ``render.py``). The
projections are cached per sentence, width and seed, so changing the number of heads only re-cuts them. A
12-head, 16-token redraw costs a few milliseconds (``tests/benchmarks/widget_redraw.py`` measures it). All text
is drawn from font files (DejaVu Sans, then Noto Sans SC/TC/KR for CJK characters, see ``fonts.py``), so
Chinese tokens show real glyphs in the widget on any machine, whatever fonts the browser has.

ipywidgets is imported only when an explorer is built; the code uses only widgets and options that exist in
ipywidgets 7.7 (Google Colab) as well as 8.
"""

from __future__ import annotations

import functools
import html
import math
import time
from typing import NamedTuple

import numpy as np
import torch

from . import render as _render
from ..data import tokenize, toy_sentence
from ..functional import attention_scores, masked_softmax, scale_scores, split_heads
from ..masks import additive_mask, causal_mask
from ..modules import MultiHeadAttention
from .plotting import colour_scale as _plotting_scale
from ..language import Messages, N_, gettext as _, ngettext
from ..runtime import one_thread
from ..validation import check_divisible, check_positive_float, check_positive_int, divisors

Tensor = torch.Tensor

STAGES = ("scores", "scaled", "masked", "weights")
STAGE_NAMES = Messages({"scores": N_("raw scores"), "scaled": N_("scaled"), "masked": N_("masked"),
                        "weights": N_("softmax weights")})  # read in the current language

#: The sentences offered by default (label -> text). The second is the GPT-2-sized walkthrough's, in two scripts.
BUILTIN_SENTENCES = {
    "Your journey starts with one step": "Your journey starts with one step",
    "LLM with me.郭同学热爱AI喜欢游戏": "LLM with me.郭同学热爱AI喜欢游戏",
    "The animal did not cross the street … (12 tokens)": "The animal did not cross the street because it was too tired",
    "Every head reads the same sentence … (16 tokens)":
        "Every head reads the same sentence, but each one learns to notice different words.",
}
WIDTHS = (16, 48, 64, 768)  # 768: GPT-2 small, 12 heads of 64 (the GPT-2-sized walkthrough)
MAX_HEADS = 16  # beyond that the panels become too small to read
MAX_TOKENS = 64
TEMPERATURE_RANGE = (0.1, 10.0)


# --- the computation (no widgets) -----------------------------------------------------------------------------


class Stages(NamedTuple):
    """The four steps of attention for one sentence, each ``(H, T, S)`` (S = T: self-attention)."""

    tokens: tuple[str, ...]
    scores: Tensor
    scaled: Tensor
    masked: Tensor
    weights: Tensor


def head_choices(d_model: int) -> list[int]:
    """The head counts offered for a width: its divisors, up to ``MAX_HEADS``."""
    return [h for h in divisors(check_positive_int("d_model", d_model)) if h <= MAX_HEADS]


@functools.lru_cache(maxsize=16)
def _projections(sentence: str, d_model: int, seed: int) -> tuple[tuple[str, ...], Tensor, Tensor]:
    """Tokens and the projected queries and keys ``(T, D)`` of a seeded layer (cached).

    The projection weights do not depend on the number of heads (the layer draws ``W_query``, ``W_key``,
    ``W_value``, ``out_proj`` in that order whatever ``num_heads`` is), so one projection serves every head
    count; ``attention_stages`` only cuts it differently. The seeding happens inside ``fork_rng``: building an
    explorer does not disturb the notebook's own random numbers.
    """
    tokens, embeddings = toy_sentence(sentence, d_model, seed=seed)  # (T, D)
    if len(tokens) > MAX_TOKENS:
        raise ValueError(f"sentence must have at most {MAX_TOKENS} tokens to be drawn, got {len(tokens)}")
    with torch.random.fork_rng(devices=[]), torch.no_grad(), one_thread():
        torch.manual_seed(seed)
        layer = MultiHeadAttention(d_model, d_model, context_length=len(tokens), dropout=0.0, num_heads=1)
        q, k = layer.W_query(embeddings), layer.W_key(embeddings)  # (T, D) each
    return tuple(tokens), q, k


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def _check_stage(stage) -> str:
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
    return stage


def attention_stages(
    sentence: str = "Your journey starts with one step",
    *,
    d_model: int = 64,
    num_heads: int = 4,
    causal: bool = True,
    scaled: bool = True,
    temperature: float = 1.0,
    seed: int = 0,
) -> Stages:
    """Scores, scaled scores, masked scores and softmax weights of every head, each ``(H, T, T)``.

    The layer is ``MultiHeadAttention(d_model, d_model, ..., num_heads)`` built after ``torch.manual_seed(seed)``
    over ``toy_sentence(sentence, d_model, seed=seed)``; with ``causal``, ``scaled`` and ``temperature=1`` the
    weights are exactly the ones that layer returns with ``return_weights=True``.
    """
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
    num_heads = check_positive_int("num_heads", num_heads)
    check_divisible("d_model", check_positive_int("d_model", d_model), "num_heads", num_heads)
    causal, scaled = _check_flag("causal", causal), _check_flag("scaled", scaled)
    temperature = check_positive_float("temperature", temperature)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")

    tokens, q, k = _projections(sentence, d_model, seed)
    q = split_heads(q[None], num_heads)[0]  # (T, D) -> (1, T, D) -> (1, H, T, Dh) -> (H, T, Dh)
    k = split_heads(k[None], num_heads)[0]  # (S, D) -> (H, S, Dh)
    with torch.no_grad(), one_thread():
        scores = attention_scores(q, k)  # (H, T, Dh) @ (H, Dh, S) -> (H, T, S)
        scaled_scores = scale_scores(scores, d_model // num_heads) if scaled else scores
        keep = causal_mask(len(tokens)) if causal else None  # (T, S), broadcast over heads
        masked = scaled_scores + additive_mask(keep) if causal else scaled_scores  # −∞ where blocked
        weights = masked_softmax(scaled_scores, keep, temperature=temperature)  # (H, T, S)
    return Stages(tokens, scores, scaled_scores, masked, weights)


class ColourScale(NamedTuple):
    cmap: str
    vmin: float
    vmax: float
    label: str
    note: str | None = None  # an outlier row left out of the range, as plot_heads says it


#: Which controls can change each stage (the others are greyed out while it is shown).
ACTIVE_CONTROLS = {
    "scores": ("sentence", "d_model", "num_heads", "stage"),
    "scaled": ("sentence", "d_model", "num_heads", "stage", "scaled"),
    "masked": ("sentence", "d_model", "num_heads", "stage", "scaled", "causal"),
    "weights": ("sentence", "d_model", "num_heads", "stage", "scaled", "causal", "temperature"),
}


def colour_scale(stage: str, values: Tensor, *, scaled: bool = True, tokens=None) -> ColourScale:
    """The colour map, range and colour-bar label of a stage (one scale for all heads).

    The same rules as ``plot_heads`` (see ``plotting.colour_scale``): weights from 0 to their largest value,
    rows with a single key (weight 1) left out, rounded up to a tenth (so that the colour bar does not jitter
    while the temperature slider moves); scores ± the largest finite value (one outlier row left out) in the
    scores' diverging map, centred on 0.
    """
    if _check_stage(stage) == "weights":
        scale = _plotting_scale(values, "weights", labels=tokens)
        top = min(1.0, math.ceil(scale.vmax * 10 - 1e-6) / 10)
        return ColourScale(scale.cmap, 0.0, top, _("attention weight"), scale.note)
    scale = _plotting_scale(values, "scores", labels=tokens)
    label = {
        "scores": _("score q·k"),
        "scaled": _("score q·k / √Dh") if scaled else _("score q·k (not scaled)"),
        "masked": _("score after the mask"),
    }[stage]
    return ColourScale(scale.cmap, scale.vmin, scale.vmax, label, scale.note)


def sentence_choices(sentences=None) -> dict[str, str]:
    """``None`` -> the built-in sentences; a list of texts -> {text: text}; a dict label -> text unchanged."""
    if sentences is None:
        return dict(BUILTIN_SENTENCES)
    if isinstance(sentences, str):
        raise TypeError(f"sentences must be a list of str or a dict label -> str, got the str {sentences!r}")
    if isinstance(sentences, dict):
        choices = {str(label): text for label, text in sentences.items()}
    else:
        choices = {text if isinstance(text, str) else repr(text): text for text in sentences}
    if not choices:
        raise ValueError("sentences must not be empty")
    for label, text in choices.items():
        if not isinstance(text, str):
            raise TypeError(f"sentences must hold str, got {type(text).__name__} {text!r} for {label!r}")
        count = len(tokenize(text))  # a clear error for a sentence without words
        if count > MAX_TOKENS:
            raise ValueError(f"sentences must have at most {MAX_TOKENS} tokens each, got {count} in {label!r}")
    return choices


def _describe(stage: str, num_heads: int, tokens, d_model: int, causal: bool, scaled: bool, temperature: float,
              values: Tensor | None = None, scale: ColourScale | None = None, *, controls: bool = True):
    """One line that says what the picture shows, and notes (the explorer's caption and the figure's title).

    With ``values``, NaN entries are counted in a note; with ``scale``, its outlier note is passed on;
    ``controls=False`` (the static figure) leaves out what is said about the controls.
    """
    parts = [ngettext("{heads} head × {tokens} tokens", "{heads} heads × {tokens} tokens", num_heads).format(
                 heads=num_heads, tokens=len(tokens)),
             f"D = {d_model}, Dh = {d_model // num_heads}", STAGE_NAMES[stage]]
    notes = []
    if stage == "scores" and controls:
        notes.append(_("scaling, mask and temperature come later: their controls are greyed out"))
    if stage == "scaled" and not scaled:
        notes.append(_("scaling is off: same as the raw scores"))
    if stage == "scaled" and controls:
        notes.append(_("the mask and the temperature come later: greyed out"))
    if stage == "masked" and not causal:
        notes.append(_("causal mask is off: nothing is masked"))
    if stage == "weights":
        parts.append(_("temperature {temperature:.2f}").format(temperature=temperature))
    else:
        notes.append(_("temperature acts in the softmax: pick the weights to see it")
                     if controls and (temperature != 1.0 or stage == "masked") else "")
    if values is not None:
        count = int(torch.isnan(values).sum())
        if count:
            notes.append(_("{count} weights are NaN (the softmax overflowed): cross-hatched in red, not zeros")
                         .format(count=count))
    if scale is not None and scale.note:
        notes.append(scale.note)
    return " · ".join(parts), [note for note in notes if note]


# --- the static figure ----------------------------------------------------------------------------------------


def explorer_figure(
    sentence: str | None = None,
    *,
    d_model: int = 64,
    num_heads: int = 4,
    causal: bool = True,
    scaled: bool = True,
    temperature: float = 1.0,
    stage: str = "weights",
    seed: int = 0,
):
    """The explorer's view for one setting, as a matplotlib ``Figure`` (what readers without a kernel see)."""
    from .plotting import plot_heads

    sentence = next(iter(BUILTIN_SENTENCES.values())) if sentence is None else sentence
    stage = _check_stage(stage)
    stages = attention_stages(sentence, d_model=d_model, num_heads=num_heads, causal=causal, scaled=scaled,
                              temperature=temperature, seed=seed)
    values = getattr(stages, stage)
    scale = colour_scale(stage, values, scaled=scaled, tokens=stages.tokens)
    title, notes = _describe(stage, num_heads, stages.tokens, d_model, causal, scaled, temperature, scale=scale,
                             controls=False)
    # plot_heads adds its own notes under the figure: grey = masked, NaN
    return plot_heads(values, stages.tokens, title="\n".join([title, *notes]) if notes else title,
                      quantity="weights" if stage == "weights" else "scores", nan="show",
                      mask=torch.from_numpy(~_blocked(stages, stage)) if stage == "weights" else None,
                      vmin=scale.vmin, vmax=scale.vmax, colorbar_label=scale.label)


# --- the widget -----------------------------------------------------------------------------------------------


def render_png(stages: Stages, stage: str, *, scaled: bool = True) -> bytes:
    """The explorer's picture of one stage: PNG bytes (also used by the tests and the benchmark)."""
    values = getattr(stages, _check_stage(stage))
    scale = colour_scale(stage, values, scaled=scaled, tokens=stages.tokens)
    picture = _render.render(values.numpy(), stages.tokens, stages.tokens, cmap=scale.cmap,
                             vmin=scale.vmin, vmax=scale.vmax, colorbar_label=scale.label,
                             blocked=_blocked(stages, stage))
    return _render.encode_png(picture)


def _blocked(stages: Stages, stage: str) -> np.ndarray | None:
    """The weights the mask blocked (drawn grey like the −∞ scores), ``(H, T, S)`` bool; None for scores."""
    return torch.isneginf(stages.masked).numpy() if stage == "weights" else None


def attention_explorer(
    sentences=None,
    *,
    d_model: int = 64,
    num_heads: int = 4,
    causal: bool = True,
    scaled: bool = True,
    temperature: float = 1.0,
    stage: str = "weights",
    seed: int = 0,
):
    """An explorer of every head's score matrix; display it as a cell's last value.

    ``sentences``: ``None`` (the built-in ones), a list of texts, or a dict label -> text; the first is shown.
    The other arguments are the controls' starting values. Returns an ``ipywidgets`` box whose ``controls``
    dict holds the controls by argument name, and ``image`` / ``caption`` the picture and its description.
    """
    return _explorer_class()(sentences, d_model=d_model, num_heads=num_heads, causal=causal, scaled=scaled,
                             temperature=temperature, stage=stage, seed=seed)


@functools.cache
def _explorer_class():
    """The widget class, defined on first use so that ``import mha_lib.display.widgets`` does not load ipywidgets."""
    import ipywidgets as widgets

    from . import controls

    class AttentionExplorer(widgets.VBox):
        def __init__(self, sentences, *, d_model, num_heads, causal, scaled, temperature, stage, seed):
            super().__init__()
            choices = sentence_choices(sentences)
            heads = head_choices(d_model)
            if num_heads not in heads:
                raise ValueError(f"num_heads must be one of {heads} (divisors of d_model={d_model} up to "
                                 f"{MAX_HEADS}), got {num_heads!r}")
            temperature = check_positive_float("temperature", temperature)
            self.seed = seed
            self.redraw_count = 0
            self.last_redraw_ms = None
            self._quiet = False
            low, high = min(TEMPERATURE_RANGE[0], temperature), max(TEMPERATURE_RANGE[1], temperature)
            # one layout for every explorer of the series (controls.py): a label column, then the control
            self.controls = {
                "sentence": controls.dropdown(_("sentence"), list(choices.items()), next(iter(choices.values()))),
                "d_model": controls.dropdown(_("model width D"), [(str(d), d) for d in sorted({*WIDTHS, d_model})],
                                             d_model),
                "num_heads": controls.toggle_buttons(_("heads H"), [(str(h), h) for h in heads], num_heads,
                                                     button_width="38px"),
                # 136 px: "softmax weights" in JupyterLab's 13-px font, with the button's padding (120 cut it)
                "stage": controls.toggle_buttons(_("stage shown"), [(STAGE_NAMES[s], s) for s in STAGES],
                                                 _check_stage(stage), button_width="136px"),
                "causal": controls.toggle(_("causal mask"), _check_flag("causal", causal)),
                "scaled": controls.toggle(_("scale by 1/√Dh"), _check_flag("scaled", scaled)),
                "temperature": controls.log_slider(_("temperature"), temperature, math.log10(low),
                                                   math.log10(high)),
            }
            c = self.controls
            c["temperature"].readout_format = ".2f"
            # the two checkboxes share a row: the first indented by the label column, the second right after it
            c["causal"].layout.width = "380px"
            c["scaled"].indent, c["scaled"].layout.width = False, "180px"
            self.caption = widgets.HTML()
            self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
            self.children = [
                controls.label_column_css(),
                c["sentence"],
                c["d_model"],
                c["num_heads"],
                c["stage"],
                widgets.HBox([c["causal"], c["scaled"]]),
                c["temperature"],
                self.caption,
                self.image,
            ]
            self.add_class("mha-explorer")
            for name, control in c.items():
                control.observe(self._on_width if name == "d_model" else self._on_change, names="value")
            self.redraw()

        def _on_change(self, change):
            if not self._quiet:
                self.redraw()

        def _on_width(self, change):
            """A new width offers other head counts: keep the current one if allowed, else the nearest below."""
            heads = head_choices(change["new"])
            current = self.controls["num_heads"].value
            self._quiet = True
            try:
                self.controls["num_heads"].options = [(str(h), h) for h in heads]
                self.controls["num_heads"].value = max(h for h in heads if h <= current)
            finally:
                self._quiet = False
            self.redraw()

        def settings(self) -> dict:
            """The controls' current values, by the argument names of ``attention_stages``."""
            values = {name: control.value for name, control in self.controls.items()}
            return {**values, "seed": self.seed}

        def redraw(self) -> None:
            start = time.perf_counter()
            v = self.settings()
            stages = attention_stages(v["sentence"], d_model=v["d_model"], num_heads=v["num_heads"],
                                      causal=v["causal"], scaled=v["scaled"], temperature=v["temperature"],
                                      seed=v["seed"])
            values = getattr(stages, v["stage"])
            scale = colour_scale(v["stage"], values, scaled=v["scaled"], tokens=stages.tokens)
            self.image.value = _render.encode_png(_render.render(
                values.numpy(), stages.tokens, stages.tokens, cmap=scale.cmap, vmin=scale.vmin, vmax=scale.vmax,
                colorbar_label=scale.label, blocked=_blocked(stages, v["stage"])))
            for name, control in self.controls.items():  # grey out what cannot change this stage
                control.disabled = name not in ACTIVE_CONTROLS[v["stage"]]
            line, notes = _describe(v["stage"], v["num_heads"], stages.tokens, v["d_model"], v["causal"],
                                    v["scaled"], v["temperature"], values, scale)
            note = "".join(f" <i>({html.escape(n)})</i>" for n in notes)
            self.caption.value = (f'<span class="mha-explorer-caption" data-heads="{v["num_heads"]}" '
                                  f'data-tokens="{len(stages.tokens)}">{html.escape(line)}{note}</span>')
            self.redraw_count += 1
            self.last_redraw_ms = (time.perf_counter() - start) * 1e3

    return AttentionExplorer
