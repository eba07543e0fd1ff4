"""A font for tokens in any script, so that heatmap labels never turn into boxes.

matplotlib's default font, DejaVu Sans, has no Chinese, Japanese or Korean glyphs: a label such as 郭同学 is drawn
as empty boxes and every missing glyph writes a "Glyph missing" warning to stderr. matplotlib (≥ 3.6) can fall
back glyph by glyph to the next family in ``rcParams["font.family"]``, so we append a CJK family there; Latin text
keeps the default font.

Where the font comes from, in order:

1. **Noto Sans SC, TC and KR** shipped inside the PyPI package ``justmytype-intl-cjk`` (SIL Open Font License). The project
   installs it (``requirements-nodeps.txt``, and the Colab set-up cell), so a fresh machine, Colab and Binder
   all have it with no system package and no download at run time. We only read its font file; the package's
   own code is never imported.
2. A CJK font already installed on the system (Noto Sans CJK, Source Han Sans, WenQuanYi, SimHei, PingFang…).

The package ships variable fonts whose default instance is Thin (weight 100): matplotlib and Pillow cannot pick
a weight, so Chinese labels came out hairline-thin beside DejaVu Sans, hard to read on a projector. ``regular_font``
cuts a static Regular (400) copy of Noto Sans SC for the common characters (GB 2312's 6,763 hanzi, ASCII, CJK and
full-width punctuation) once per machine, about 10 s with fontTools, into a cache (``make install`` does it, so a
class never waits), and puts it before the variable fonts; a rarer character falls back to them.

If neither exists (a plain ``pip install mha_lib`` without the ``fonts`` extra), labels still render, with boxes
for the CJK characters: one line on stderr says so and how to get the font, and matplotlib's "Glyph … missing
from font(s)" warnings, one per character and drawing, are silenced instead of flooding the output.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import tempfile
import warnings
from pathlib import Path

from ..runtime import cache_folder

FONT_PACKAGE = "justmytype_intl_cjk"
FONT_FOLDER = Path("fonts", "ofl")  # inside the package's folder
# Simplified Chinese first (it also covers Japanese kana), then the glyphs only Traditional Chinese or Korean use
FONT_FILES = ("notosanssc/NotoSansSC[wght].ttf", "notosanstc/NotoSansTC[wght].ttf", "notosanskr/NotoSansKR[wght].ttf")
FONT_PIN = "justmytype-intl-cjk==0.1.0"  # the pin of requirements-nodeps.txt and of the ``fonts`` extra
NO_FONT_MESSAGE = (f"mha_lib.display.fonts: no CJK font found, so Chinese, Japanese and Korean characters are drawn "
                   f"as boxes; `pip install {FONT_PIN}` (or `pip install mha_lib[fonts]`) adds one")
MISSING_GLYPH_WARNING = r"Glyph \d+ .* missing from font"  # matplotlib's warning for each character it cannot draw
SYSTEM_CJK_FAMILIES = (
    "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
    "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC", "Arial Unicode MS",
)


REGULAR_WEIGHT = 400
REGULAR_FILE = "NotoSansSC-Regular-common.ttf"  # the cut regular_font writes


def variable_font_paths() -> list[Path]:
    """The Noto Sans files of the ``justmytype-intl-cjk`` package (empty when it is not installed)."""
    spec = importlib.util.find_spec(FONT_PACKAGE)  # locates the package without running its code
    folders = [Path(folder) for folder in (spec.submodule_search_locations or [])] if spec else []
    return [folder / FONT_FOLDER / name for folder in folders[:1] for name in FONT_FILES
            if (folder / FONT_FOLDER / name).is_file()]


def bundled_font_paths() -> list[Path]:
    """The CJK fonts to draw with, in order: the Regular cut of Noto Sans SC (``regular_font``), then the package's
    variable fonts (SC, TC, KR) for the characters the cut leaves out. Empty when the package is not installed."""
    variable = variable_font_paths()
    regular = regular_font(variable[0]) if variable else None
    return ([regular] if regular else []) + variable


def _cache_folder() -> Path:
    """Beside the environment when it is writable (a venv, Colab), else the user's cache folder."""
    return cache_folder("fonts")


def _common_characters() -> set[int]:
    """GB 2312 (6,763 hanzi and its symbols), ASCII, general, CJK and full-width punctuation."""
    characters = set(range(0x20, 0x7F)) | set(range(0x2000, 0x2070)) | set(range(0x3000, 0x3040)) | set(
        range(0xFF00, 0xFFF0))
    for first in range(0xA1, 0xF8):
        for second in range(0xA1, 0xFF):
            try:
                characters.add(ord(bytes((first, second)).decode("gb2312")))
            except UnicodeDecodeError:
                pass
    return characters


@functools.cache
def regular_font(variable: Path) -> Path | None:
    """A static Regular cut of the variable font ``variable`` for the common characters, built on first use (about
    10 s) and cached; None if fontTools cannot build it (the variable fonts are used alone then)."""
    target = _cache_folder() / REGULAR_FILE
    if target.is_file():
        return target
    try:
        from fontTools import subset
        from fontTools.ttLib import TTFont
        from fontTools.varLib import instancer

        font = TTFont(variable)
        options = subset.Options()
        options.layout_features, options.name_IDs, options.name_languages = ["*"], ["*"], ["*"]
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=_common_characters())  # first: instancing 7,000 glyphs, not 30,000
        subsetter.subset(font)
        font = instancer.instantiateVariableFont(font, {"wght": REGULAR_WEIGHT})
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".ttf", delete=False) as handle:
            font.save(handle)
        os.replace(handle.name, target)  # atomic: a concurrent process reads a whole file or none
    except Exception as error:  # a broken cut must never stop a figure: thin glyphs are better than none
        print(f"mha_lib.display.fonts: could not cut a Regular CJK font ({error}); drawing with the thin default",
              file=sys.stderr)
        return None
    return target


def use_cjk_fallback() -> list[str]:
    """Make matplotlib fall back to CJK fonts for glyphs its default font lacks; return their family names.

    Cheap to call before every drawing (the fonts are looked up once), so a later ``rcParams`` reset does not
    bring the boxes back. Returns an empty list when no CJK font could be found; then one line on stderr says so
    (once per process) and the per-glyph warnings are silenced.
    """
    import matplotlib

    if not _cjk_families():
        _without_cjk_font()
        return []
    families = list(matplotlib.rcParams["font.family"])
    missing = [family for family in _cjk_families() if family not in families]
    if missing:
        matplotlib.rcParams["font.family"] = families + missing  # last: used only for glyphs the others lack
    return list(_cjk_families())


@functools.cache
def _without_cjk_font() -> None:
    """No CJK font anywhere: say so once, instead of one matplotlib warning per missing glyph."""
    warnings.filterwarnings("ignore", message=MISSING_GLYPH_WARNING, category=UserWarning)
    print(NO_FONT_MESSAGE, file=sys.stderr)


@functools.cache
def _cjk_families() -> tuple[str, ...]:
    from matplotlib import font_manager

    paths = bundled_font_paths()
    for path in paths:
        font_manager.fontManager.addfont(str(path))
    if paths:  # the Regular cut and the variable SC share a family name: matplotlib picks the cut's weight
        return tuple(dict.fromkeys(font_manager.FontProperties(fname=str(path)).get_name() for path in paths))
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return tuple(name for name in SYSTEM_CJK_FAMILIES if name in installed)[:1]


if __name__ == "__main__":  # `make install`: cut the Regular font now, so that no class waits for it
    fonts = bundled_font_paths()
    print(f"mha_lib.display.fonts: {fonts[0] if fonts else 'no CJK font package installed'}")
