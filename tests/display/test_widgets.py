"""The explorers: their computation against the library, their pictures, their controls, and a sweep of every
control combination (no exception, no NaN, no warning, nothing on stderr).

The sweep drives the pure functions and the renderer directly (a browser adds nothing there and would take
minutes); ``test_browser.py`` checks the widget in a real JupyterLab, ``test_ipywidgets7.py`` under Colab's
ipywidgets 7.7.
"""

from __future__ import annotations

import io
import itertools
import math
import subprocess
import sys
import warnings

import matplotlib
import numpy as np
import pytest
import torch

import mha_lib
import mha_lib.display.plotting
from mha_lib.display import render, widgets
from mha_lib.display.widgets import (
    BUILTIN_SENTENCES,
    MAX_HEADS,
    STAGES,
    WIDTHS,
    attention_explorer,
    attention_stages,
    colour_scale,
    explorer_figure,
    head_choices,
    render_png,
    sentence_choices,
)

JOURNEY = "Your journey starts with one step"
SEED_002 = "LLM with me.郭同学热爱AI喜欢游戏"
TEMPERATURES = (0.1, 1.0, 10.0)


def png_pixels(data: bytes) -> np.ndarray:
    from PIL import Image

    data = bytes(data)  # ipywidgets 8 hands the image back as a memoryview
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


# --- the computation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model,num_heads", [(16, 1), (16, 4), (48, 12), (64, 8)])
@pytest.mark.parametrize("causal", [True, False])
def test_weights_are_those_of_the_seeded_layer(d_model, num_heads, causal):
    tokens, x = mha_lib.toy_sentence(SEED_002, d_model, seed=3)
    torch.manual_seed(3)
    layer = mha_lib.MultiHeadAttention(d_model, d_model, len(tokens), 0.0, num_heads=num_heads, causal=causal)
    _, expected = layer(x[None], return_weights=True)  # (1, H, T, T)
    stages = attention_stages(SEED_002, d_model=d_model, num_heads=num_heads, causal=causal, seed=3)
    assert list(stages.tokens) == tokens
    torch.testing.assert_close(stages.weights, expected[0], rtol=0, atol=1e-6)


def test_each_stage_is_the_previous_one_transformed():
    s = attention_stages(JOURNEY, d_model=48, num_heads=6, causal=True, scaled=True, temperature=0.5)
    T = len(s.tokens)
    assert s.scores.shape == (6, T, T)
    torch.testing.assert_close(s.scaled, s.scores / math.sqrt(8))  # Dh = 48 / 6
    above = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert torch.isneginf(s.masked[:, above]).all() and torch.equal(s.masked[:, ~above], s.scaled[:, ~above])
    torch.testing.assert_close(s.weights, torch.softmax(s.masked / 0.5, dim=-1))
    assert (s.weights[:, above] == 0).all()


def test_switches_off():
    s = attention_stages(JOURNEY, d_model=16, num_heads=4, causal=False, scaled=False)
    assert torch.equal(s.scaled, s.scores) and torch.equal(s.masked, s.scores)
    torch.testing.assert_close(s.weights, torch.softmax(s.scores, dim=-1))


def test_more_heads_cut_the_same_projection():
    one = attention_stages(JOURNEY, d_model=16, num_heads=1, scaled=False)
    four = attention_stages(JOURNEY, d_model=16, num_heads=4, scaled=False)
    torch.testing.assert_close(four.scores.sum(0), one.scores[0], rtol=1e-5, atol=1e-5)  # q·k = Σ over heads


def test_the_explorer_leaves_the_notebooks_random_numbers_alone():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    attention_stages("a sentence never seen before by the cache", d_model=16, num_heads=2, seed=11)
    torch.testing.assert_close(torch.rand(3), expected)


def test_only_divisors_are_offered():
    assert head_choices(768) == [1, 2, 3, 4, 6, 8, 12, 16]
    assert head_choices(64) == [1, 2, 4, 8, 16]
    for d_model in WIDTHS:
        assert all(d_model % h == 0 and h <= MAX_HEADS for h in head_choices(d_model))


def test_colour_scales():
    s = attention_stages(SEED_002, d_model=64, num_heads=4)
    # weights: 0 up to the largest weight outside row 0 (one key, weight 1), rounded up to a tenth
    rest = float(s.weights[:, 1:].max())
    scale = colour_scale("weights", s.weights, tokens=s.tokens)
    assert scale[:4] == ("viridis", 0.0, pytest.approx(math.ceil(rest * 10) / 10), "attention weight")
    assert scale.vmax < 1.0 and 'row "LLM" left out of the colour range' in scale.note
    flat = attention_stages(SEED_002, d_model=64, num_heads=4, causal=False, temperature=10.0)
    top = float(flat.weights.max())  # no causal mask: no row with a single key, nothing left out
    assert colour_scale("weights", flat.weights) == ("viridis", 0.0, math.ceil(top * 10) / 10, "attention weight",
                                                     None)
    cmap, vmin, vmax, _, note = colour_scale("masked", s.masked)
    assert cmap == "RdBu_r" and vmin == -vmax and note is None  # no outlier row in this sentence
    assert vmax == pytest.approx(float(s.masked[torch.isfinite(s.masked)].abs().max()))
    assert colour_scale("scores", torch.zeros(2, 3, 3)).vmax == 1.0  # an all-zero matrix still gets a scale


@pytest.mark.parametrize(
    "call,error,message",
    [
        (lambda: attention_stages(JOURNEY, d_model=64, num_heads=12), ValueError, "d_model (64) must be divisible by num_heads (12)"),
        (lambda: attention_stages(JOURNEY, causal=1), TypeError, "causal must be True or False, got int 1"),
        (lambda: attention_stages(JOURNEY, temperature=0), ValueError, "temperature must be a finite float > 0"),
        (lambda: attention_stages(["a"]), TypeError, "sentence must be a str, got list"),
        (lambda: explorer_figure(stage="softmax"), ValueError, "stage must be one of ['scores', 'scaled', 'masked', 'weights'], got 'softmax'"),
        (lambda: sentence_choices("one sentence"), TypeError, "sentences must be a list of str or a dict"),
        (lambda: sentence_choices([]), ValueError, "sentences must not be empty"),
        (lambda: sentence_choices(["ok", 3]), TypeError, "sentences must hold str, got int 3"),
        (lambda: sentence_choices(["word " * 65]), ValueError, "at most 64 tokens each, got 65"),
        (lambda: attention_explorer(d_model=64, num_heads=12), ValueError, "num_heads must be one of [1, 2, 4, 8, 16]"),
    ],
)
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


def test_sentence_choices():
    assert sentence_choices(None) == BUILTIN_SENTENCES
    assert SEED_002 in BUILTIN_SENTENCES.values() and JOURNEY in BUILTIN_SENTENCES.values()
    assert sentence_choices(["a b", "c"]) == {"a b": "a b", "c": "c"}
    assert sentence_choices({"short": "a b"}) == {"short": "a b"}


def test_import_is_lazy():
    code = ("import sys, mha_lib.display.widgets; "
            "print(sorted(m for m in ('ipywidgets', 'matplotlib', 'PIL') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- the pictures ---------------------------------------------------------------------------------------------


def test_picture_colours_every_entry_from_the_colour_map():
    values = np.array([[[0.0, 1.0], [0.25, float("-inf")]]], dtype=np.float32)  # one head, 2 × 2
    picture = render.render(values, ["a", "b"], ["a", "b"], cmap="viridis", vmin=0.0, vmax=1.0,
                            colorbar_label="weight")
    lay = render.layout(1, ("a", "b"), ("a", "b"), "weight", "masked (\u2212\u221e)")
    top, left = lay.origins[0]
    c, rgb = lay.cell, picture.rgb()
    levels = (matplotlib.colormaps["viridis"](np.array([0.0, 1.0, 0.25]))[:, :3] * 255).round()
    centre = lambda t, s: rgb[top + t * c + c // 2 + 1, left + s * c + c // 2]  # noqa: E731
    for (t, s), expected in zip([(0, 0), (0, 1), (1, 0)], levels):
        np.testing.assert_allclose(centre(t, s), expected, atol=3)  # 192 levels: within one level
    masked = rgb[top + c:top + 2 * c, left + c:left + 2 * c].reshape(-1, 3)
    assert {tuple(p) for p in masked} == {render.MASKED_RGB, render.MASKED_STRIPE_RGB}
    np.testing.assert_array_equal(png_pixels(render.encode_png(picture)), rgb)  # a valid PNG


def test_cjk_tokens_are_drawn_with_a_cjk_font():
    fonts = render._fonts(render.LABEL_PX)
    assert len(fonts) >= 2, "no CJK font found: install requirements-nodeps.txt (justmytype-intl-cjk)"
    runs = render._runs("me.郭同学", fonts)
    assert [text for text, _ in runs] == ["me.", "郭同学"]
    assert runs[0][1] is fonts[0][0] and runs[1][1] is not fonts[0][0]
    assert "NotoSans" in render.font_files()[1].name
    glyph = render.text_mask("郭")
    boxes = render.text_mask("\U0010fffd")  # a code point no font has: drawn as the "missing" box
    assert glyph.max() > 200 and glyph.shape != boxes.shape or not np.array_equal(glyph, boxes)


@pytest.mark.parametrize("low,high,expected", [(0, 1, [0, 0.2, 0.4, 0.6, 0.8, 1.0]), (-3.7, 3.7, [-2, 0, 2]),
                                               (-0.013, 0.013, [-0.01, 0, 0.01])])
def test_nice_ticks(low, high, expected):
    assert render.nice_ticks(low, high) == pytest.approx(expected)


def test_tick_texts_use_a_real_minus_and_the_step_decimals():
    assert [render.tick_text(t, [0, 0.2, 0.4]) for t in (0, 0.2)] == ["0.0", "0.2"]
    assert render.tick_text(-2, [-2, 0, 2]) == "\u22122"
    assert render.tick_text(0.25, [0, 0.25, 0.5]) == "0.25"


def test_explorer_figure_is_the_same_view():
    fig = explorer_figure(SEED_002, d_model=768, num_heads=12, stage="masked")
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 12
    image = heatmaps[0].images[0]
    s = attention_stages(SEED_002, d_model=768, num_heads=12)
    np.testing.assert_array_equal(image.get_array(), s.masked[0].numpy())
    assert image.get_clim() == pytest.approx(colour_scale("masked", s.masked)[1:3])
    assert tuple(round(v * 255) for v in image.cmap.get_bad()[:3]) == render.MASKED_RGB
    assert "grey: masked" in fig._supxlabel.get_text()


def test_explorer_figure_draws_cjk_without_warnings(capfd):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for stage in STAGES:
            explorer_figure(SEED_002, d_model=64, num_heads=4, stage=stage).savefig(io.BytesIO(), format="png")
    assert capfd.readouterr().err == ""


def _cell_centre(picture_rgb, lay, h, t, s):
    top, left = lay.origins[h]
    c = lay.cell
    return tuple(picture_rgb[top + t * c + c // 2, left + s * c + c // 2 + 1])


def test_nan_weights_are_cross_hatched_never_drawn_as_zeros():
    """A softmax that overflowed gives NaN: the picture must not show it as the colour of 0 (issue 12)."""
    values = np.full((2, 3, 3), 0.2, dtype=np.float32)
    values[1, 2, :] = np.nan  # one row of head 1
    tokens = ["a", "b", "c"]
    picture = render.render(values, tokens, tokens, cmap="viridis", vmin=0.0, vmax=1.0,
                            colorbar_label="attention weight")
    lay = render.layout(2, tuple(tokens), tuple(tokens), "attention weight", (render.NAN_LEGEND,))
    assert picture.pixels.shape == lay.size  # the NaN legend is drawn under the colour bar
    rgb = picture.rgb()
    top, left = lay.origins[1]
    c = lay.cell
    row = rgb[top + 2 * c:top + 3 * c, left:left + 3 * c].reshape(-1, 3)
    colours = {tuple(p) for p in row}
    assert colours == {render.NAN_BACK_RGB, mha_lib.display.plotting.NAN_RGB}  # pale red, red hatching
    zero = tuple((matplotlib.colormaps["viridis"](0.0)[:3] * np.array(255)).round().astype(int))
    assert zero not in colours
    assert _cell_centre(rgb, lay, 1, 1, 1) == _cell_centre(rgb, lay, 0, 2, 2)  # the other cells: their value


def test_the_caption_counts_nan_weights():
    s = attention_stages(JOURNEY, d_model=16, num_heads=2)
    weights = s.weights.clone()
    weights[0, 3] = float("nan")  # 6 NaN
    _, notes = widgets._describe("weights", 2, s.tokens, 16, True, True, 1.0, weights)
    assert "6 weights are NaN (the softmax overflowed): cross-hatched in red, not zeros" in notes
    png = png_pixels(render_png(s._replace(weights=weights), "weights"))
    assert (png == mha_lib.display.plotting.NAN_RGB).all(-1).any()


def test_blocked_weights_are_grey_like_masked_scores():
    s = attention_stages(JOURNEY, d_model=16, num_heads=2, causal=True)
    lay_args = (2, s.tokens, s.tokens)
    for stage, label, legend in [("weights", "attention weight", render.MASKED_WEIGHT_LEGEND),
                                 ("masked", "score after the mask", render.MASKED_LEGEND)]:
        rgb = png_pixels(render_png(s, stage))
        lay = render.layout(*lay_args, label, (legend,))
        assert rgb.shape[:2] == lay.size
        above = {_cell_centre(rgb, lay, h, 0, 5) for h in range(2)} | {_cell_centre(rgb, lay, 1, 2, 3)}
        assert above <= {render.MASKED_RGB, render.MASKED_STRIPE_RGB}, stage
        assert _cell_centre(rgb, lay, 0, 5, 0) not in {render.MASKED_RGB, render.MASKED_STRIPE_RGB}
    rgb = png_pixels(render_png(attention_stages(JOURNEY, d_model=16, num_heads=2, causal=False), "weights"))
    assert not (rgb == render.MASKED_RGB).all(-1).any()  # no mask, no grey


def test_one_outlier_row_of_scores_is_left_out_and_said():
    values = torch.tensor([[[0.5, -1.0, 0.2], [20.0, -3.0, 1.0], [-0.8, 0.9, 0.1]]])  # row "b" is an outlier
    scale = colour_scale("scores", values, tokens=["a", "b", "c"])
    assert (scale.vmin, scale.vmax) == (-1.0, 1.0)  # ± the largest |value| of the other rows
    assert scale.note.startswith('row "b" left out of the colour range: |value| up to 20')
    _, notes = widgets._describe("scores", 1, ["a", "b", "c"], 16, True, True, 1.0, values, scale)
    assert scale.note in notes


def test_the_largest_picture_fits_a_screen():
    tokens = tuple(f"t{i}" for i in range(64))
    lay = render.layout(MAX_HEADS, tokens, tokens, "attention weight", (render.MASKED_LEGEND,))
    assert lay.size[0] <= render.MAX_HEIGHT_PX and lay.size[1] <= 1200
    lay16 = render.layout(16, tokens[:16], tokens[:16], "attention weight")
    assert lay16.size[0] <= render.MAX_HEIGHT_PX and lay16.cell >= 10  # 16 heads × 16 tokens: still 10 px


# --- the widget -----------------------------------------------------------------------------------------------


def test_explorer_controls_and_redraws():
    explorer = attention_explorer(d_model=64, num_heads=4)
    c = explorer.controls
    assert set(c) == {"sentence", "d_model", "num_heads", "stage", "causal", "scaled", "temperature"}
    assert [v for _, v in c["num_heads"].options] == [1, 2, 4, 8, 16]
    assert 'data-heads="4"' in explorer.caption.value and "4 heads" in explorer.caption.value
    first, count = bytes(explorer.image.value), explorer.redraw_count

    c["num_heads"].value = 16
    assert explorer.redraw_count == count + 1 and "16 heads" in explorer.caption.value
    assert bytes(explorer.image.value) != first
    assert png_pixels(explorer.image.value).shape[0] > png_pixels(first).shape[0]  # 4 rows of panels, not 1

    c["d_model"].value = 48  # 16 still divides 48: kept
    assert [v for _, v in c["num_heads"].options] == [1, 2, 3, 4, 6, 8, 12, 16] and c["num_heads"].value == 16
    c["num_heads"].value = 12
    c["d_model"].value = 64  # 12 does not divide 64: the nearest count below that does
    assert c["num_heads"].value == 8 and "8 heads" in explorer.caption.value
    assert explorer.redraw_count == count + 4  # one redraw per change, none while the options were swapped

    c["sentence"].value = SEED_002
    assert "14 tokens" in explorer.caption.value
    c["stage"].value, c["scaled"].value = "scaled", False
    assert "scaling is off" in explorer.caption.value


@pytest.mark.parametrize("stage,greyed", [("scores", {"scaled", "causal", "temperature"}),
                                          ("scaled", {"causal", "temperature"}), ("masked", {"temperature"}),
                                          ("weights", set())])
def test_controls_that_cannot_change_the_stage_are_greyed_out(stage, greyed):
    explorer = attention_explorer(d_model=16, num_heads=2, stage="weights")
    explorer.controls["stage"].value = stage
    assert {name for name, control in explorer.controls.items() if control.disabled} == greyed
    if greyed:
        assert "greyed out" in explorer.caption.value or "pick the weights" in explorer.caption.value
    before = bytes(explorer.image.value)
    for name in greyed & {"causal", "scaled"}:  # and they really change nothing at this stage
        explorer.controls[name].value = not explorer.controls[name].value
        assert bytes(explorer.image.value) == before


def test_explorer_takes_a_list_or_a_dict_of_sentences():
    explorer = attention_explorer(["one two three", "four five"], d_model=16, num_heads=2, stage="masked")
    assert [v for _, v in explorer.controls["sentence"].options] == ["one two three", "four five"]
    assert "3 tokens" in explorer.caption.value
    explorer = attention_explorer({"short": "a b"}, d_model=16, num_heads=2, temperature=20.0)
    assert explorer.controls["sentence"].options[0] == ("short", "a b")
    assert explorer.controls["temperature"].value == pytest.approx(20.0)  # the slider's range stretched


# --- the sweep ------------------------------------------------------------------------------------------------


def _head_settings():
    """(width, heads) pairs, grouped by heads: the pictures of one head count share their cached frames."""
    return sorted(((d_model, heads) for d_model in WIDTHS for heads in head_choices(d_model)), key=lambda p: p[::-1])


def test_sweep_every_control_combination(capfd):
    """Every width × heads × sentence × causal × scaled × stage, and three temperatures: no exception, no NaN,
    no warning, nothing on stderr, and a picture of the expected size for each.

    Temperature enters only the softmax, so it is swept on the weights stage (the other stages' pictures do
    not depend on it: checked once below).
    """
    pictures = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for sentence, (d_model, heads), causal, scaled in itertools.product(
            BUILTIN_SENTENCES.values(), _head_settings(), (True, False), (True, False)
        ):
            for temperature in TEMPERATURES:
                s = attention_stages(sentence, d_model=d_model, num_heads=heads, causal=causal, scaled=scaled,
                                     temperature=temperature)
                T = len(s.tokens)
                for stage in STAGES if temperature == 1.0 else ("weights",):
                    values = getattr(s, stage)
                    assert values.shape == (heads, T, T) and not torch.isnan(values).any()
                    blocked = torch.isneginf(values)
                    expected = causal and stage == "masked"
                    assert blocked.any() == (expected and T > 1) and torch.isfinite(values[~blocked]).all()
                    scale = colour_scale(stage, values, scaled=scaled)
                    assert math.isfinite(scale.vmin) and math.isfinite(scale.vmax) and scale.vmin < scale.vmax
                    picture = render.render(values.numpy(), s.tokens, s.tokens, cmap=scale.cmap,
                                            vmin=scale.vmin, vmax=scale.vmax, colorbar_label=scale.label)
                    assert picture.pixels.shape == render.layout(
                        heads, s.tokens, s.tokens, scale.label, "masked (\u2212\u221e)" if expected else None).size
                    pictures += 1
                torch.testing.assert_close(s.weights.sum(-1), torch.ones(heads, T))
    assert pictures == len(_head_settings()) * len(BUILTIN_SENTENCES) * 2 * 2 * (len(STAGES) + 2)
    assert capfd.readouterr().err == ""


def test_temperature_does_not_change_the_score_stages():
    cold = attention_stages(SEED_002, d_model=48, num_heads=12, temperature=0.1)
    hot = attention_stages(SEED_002, d_model=48, num_heads=12, temperature=10.0)
    for stage in ("scores", "scaled", "masked"):
        assert render_png(cold, stage) == render_png(hot, stage)
    assert render_png(cold, "weights") != render_png(hot, "weights")


def test_sweep_through_the_widget(capfd):
    """The widget itself, every control value at least once (widths with all their head counts), PNG each time."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        explorer = attention_explorer(d_model=16, num_heads=1)
        c, seen = explorer.controls, set()
        for d_model in WIDTHS:
            c["d_model"].value = d_model
            for heads in head_choices(d_model):
                c["num_heads"].value = heads
                png = png_pixels(explorer.image.value)
                assert f'data-heads="{heads}"' in explorer.caption.value and png.size
                seen.add(bytes(explorer.image.value))
        for name, values in [("sentence", list(BUILTIN_SENTENCES.values())), ("stage", STAGES),
                             ("causal", (False, True)), ("scaled", (False, True)), ("temperature", TEMPERATURES)]:
            for value in values:
                c[name].value = value
                png_pixels(explorer.image.value)
                seen.add(bytes(explorer.image.value))
    assert len(seen) > 30  # the pictures really changed
    assert capfd.readouterr().err == ""
