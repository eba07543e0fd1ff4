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

If neither exists (a plain ``pip install mha_lib`` without the ``fonts`` extra), labels still render, with boxes
for the CJK characters: one line on stderr says so and how to get the font, and matplotlib's "Glyph … missing
from font(s)" warnings, one per character and drawing, are silenced instead of flooding the output.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import warnings
from pathlib import Path

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


def bundled_font_paths() -> list[Path]:
    """The Noto Sans files of the ``justmytype-intl-cjk`` package (empty when it is not installed)."""
    spec = importlib.util.find_spec(FONT_PACKAGE)  # locates the package without running its code
    folders = [Path(folder) for folder in (spec.submodule_search_locations or [])] if spec else []
    return [folder / FONT_FOLDER / name for folder in folders[:1] for name in FONT_FILES
            if (folder / FONT_FOLDER / name).is_file()]


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
    if paths:
        return tuple(font_manager.FontProperties(fname=str(path)).get_name() for path in paths)
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return tuple(name for name in SYSTEM_CJK_FAMILIES if name in installed)[:1]
