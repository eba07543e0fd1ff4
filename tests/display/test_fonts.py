"""Token labels in any script: the seed-002 sentence must render with real glyphs and no warnings."""

from __future__ import annotations

import io
import subprocess
import sys
import warnings

import matplotlib
import pytest
import torch

import mha_lib
from mha_lib.display.fonts import REGULAR_FILE, REGULAR_WEIGHT, bundled_font_paths, use_cjk_fallback

SENTENCE = "LLM with me.郭同学热爱AI喜欢游戏"


def _render(fig) -> None:
    fig.savefig(io.BytesIO(), format="png")  # glyphs are looked up (and warned about) only when text is drawn


def test_the_bundled_fonts_are_installed_and_found():
    paths = bundled_font_paths()
    assert [p.name for p in paths] == [REGULAR_FILE, "NotoSansSC[wght].ttf", "NotoSansTC[wght].ttf",
                                       "NotoSansKR[wght].ttf"]
    assert all(p.stat().st_size > 1_000_000 for p in paths)


def test_chinese_is_drawn_in_the_regular_cut_not_the_thin_default():
    """The package's variable fonts default to Thin (100), which matplotlib and Pillow draw: hairlines on a
    projector. The cut is Regular (400), has every character of GB 2312, and matplotlib chooses it."""
    from fontTools.ttLib import TTFont
    from matplotlib import font_manager

    regular, variable = bundled_font_paths()[:2]
    use_cjk_fallback()  # registers the files with matplotlib
    assert TTFont(regular)["OS/2"].usWeightClass == REGULAR_WEIGHT
    assert TTFont(variable)["OS/2"].usWeightClass == 100  # why the cut exists
    assert font_manager.findfont(font_manager.FontProperties(family="Noto Sans SC")) == str(regular)
    cmap = TTFont(regular).getBestCmap()
    assert all(ord(ch) in cmap for ch in "郭同学热爱喜欢游戏注意力权重舍入误差，。：（）")
    assert ord("龘") not in cmap  # rare: drawn by the variable fonts after it


def test_the_fallback_is_appended_once_and_keeps_the_default_font_first():
    added = use_cjk_fallback()
    use_cjk_fallback()
    families = list(matplotlib.rcParams["font.family"])
    assert added == ["Noto Sans SC", "Noto Sans TC", "Noto Sans KR"]
    assert families[-3:] == added and families[0] not in added and len(set(families)) == len(families)


def test_the_font_has_every_glyph_of_the_seed_002_sentence():
    from matplotlib.ft2font import FT2Font

    font = FT2Font(str(bundled_font_paths()[0]))
    missing = [ch for ch in SENTENCE if not ch.isspace() and font.get_char_index(ord(ch)) == 0]
    assert missing == []


def test_plot_heads_draws_chinese_labels_without_glyph_warnings():
    tokens = list("郭同学热爱") + ["AI", "游戏"]
    weights = torch.softmax(torch.randn(2, len(tokens), len(tokens)), dim=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph ... missing from font(s)" is a UserWarning
        fig = mha_lib.plot_heads(weights, tokens, title="郭同学热爱AI喜欢游戏")
        _render(fig)


def test_without_the_fallback_the_default_font_really_misses_them():
    # the test above can fail: in a fresh interpreter without the fallback, matplotlib warns about each glyph
    code = (
        "import warnings, matplotlib; matplotlib.use('Agg'); from matplotlib.figure import Figure\n"
        "import io; fig = Figure(); fig.suptitle('郭同学'); fig.savefig(io.BytesIO(), format='png')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Glyph" in result.stderr and "missing" in result.stderr


@pytest.mark.parametrize("text", [SENTENCE, "注意力 attention", "어텐션", "アテンション"])
def test_mixed_scripts_render_without_warnings(text):
    from matplotlib.figure import Figure

    use_cjk_fallback()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = Figure()
        fig.suptitle(text)
        _render(fig)
