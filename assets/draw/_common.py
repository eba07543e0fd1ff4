"""Shared by the chapters' diagram scripts (files starting with "_" are helpers, not diagrams).

Every diagram is drawn in English (``assets/<name>.png``) or in Chinese (``assets/zh-CN/<name>.png``) by the same
drawing code: each script keeps every word it draws in one table, ``TEXTS = {key: (English, Chinese)}``, and
draws ``tx = texts(TEXTS, language)`` (``tx.key`` is the string of that language).

    python assets/draw/ch05_causal_masking.py                     # English: assets/ch05_*.png
    python assets/draw/ch05_causal_masking.py --language zh-CN    # Chinese: assets/zh-CN/ch05_*.png
    python assets/draw/_common.py --language zh-CN                # every diagram in Chinese (en, zh-CN or all)
"""

from __future__ import annotations

import argparse
import contextlib
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib
from matplotlib.figure import Figure

LANGUAGES = ("en", "zh-CN")  # the order of the strings in every TEXTS table
DRAW = Path(__file__).resolve().parent
ASSETS = DRAW.parent


def canvas(width: float, height: float, xlim: tuple[float, float], ylim: tuple[float, float]):
    """A blank figure with one axis-free drawing area in data units; y grows downwards, like matrix rows."""
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(*xlim)
    ax.set_ylim(ylim[1], ylim[0])  # y grows downwards, like the rows of a matrix
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def texts(table: dict[str, tuple[str, str]], language: str) -> SimpleNamespace:
    """The strings of one language from a ``{key: (English, Chinese)}`` table, as attributes: ``tx.key``."""
    index = LANGUAGES.index(language)
    return SimpleNamespace(**{key: pair[index] for key, pair in table.items()})


def output_path(name: str, language: str) -> Path:
    """``assets/<name>`` for English, ``assets/<language>/<name>`` for a translation (the folder is created)."""
    folder = ASSETS if language == "en" else ASSETS / language
    folder.mkdir(exist_ok=True)
    return folder / name


def save(fig: Figure, name: str, language: str, dpi: float) -> Path:
    """Write ``fig`` as ``name`` in the language's folder (no "Software" stamp: the bytes depend on the drawing)."""
    path = output_path(name, language)
    fig.savefig(path, dpi=dpi, metadata={"Software": None})
    print(f"{path.relative_to(ASSETS.parent).as_posix()}: written")
    return path


def monospace(language: str):
    """The font family for code: ``"monospace"``; in Chinese followed by the CJK fonts, for the characters the
    monospace font lacks (a text's own ``family`` replaces the fallback list ``fonts_for`` sets)."""
    if language == "en":
        return "monospace"
    from mha_lib.display.fonts import use_cjk_fallback

    return ["monospace", *use_cjk_fallback()]


@contextlib.contextmanager
def fonts_for(language: str):
    """matplotlib's settings while drawing in ``language``: a CJK fallback font for Chinese (no boxes), restored
    afterwards, so an English diagram drawn later in the same process is drawn exactly as on its own."""
    with matplotlib.rc_context():
        if language != "en":
            from mha_lib.display.fonts import use_cjk_fallback

            use_cjk_fallback()
        yield


def language_from_argv(argv: list[str] | None = None, choices: tuple[str, ...] = LANGUAGES) -> str:
    """``--language`` from the command line (default ``en``); other arguments are ignored, so a script run by
    another program (``runpy`` inside pytest or refresh_notebooks.py) draws English."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--language", choices=choices, default="en")
    arguments, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return arguments.language


def run(main) -> None:
    """The ``if __name__ == "__main__"`` of a diagram script: ``main(language)`` in the language asked for."""
    language = language_from_argv()
    with fonts_for(language):
        main(language)


def scripts() -> list[Path]:
    """The drawing scripts: one per chapter (``chNN_*.py``) and the Colab badge (``colab_badge.py``)."""
    return sorted(p for p in DRAW.glob("*.py") if not p.name.startswith("_"))


def draw_all(language: str) -> list[Path]:
    """Run every script's ``main(language)``; return the scripts run (each prints the files it writes)."""
    if str(DRAW) not in sys.path:
        sys.path.insert(0, str(DRAW))  # the scripts import this module as ``_common``
    done = []
    for script in scripts():
        namespace = runpy.run_path(str(script), run_name="diagram")  # defines main, draws nothing
        with fonts_for(language):
            namespace["main"](language)
        done.append(script)
    return done


if __name__ == "__main__":
    for chosen in LANGUAGES if (wanted := language_from_argv(choices=LANGUAGES + ("all",))) == "all" else (wanted,):
        draw_all(chosen)
