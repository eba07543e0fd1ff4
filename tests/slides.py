"""Slides from the chapters: reveal.js slide metadata derived from a notebook's structure, and offline decks.

    python tests/slides.py                                   # every chapter -> build/slides/NN_name.slides.html
                                                             # and every Chinese twin -> build/slides/zh-CN/
    python tests/slides.py --out DIR notebooks/04_scaling.ipynb
    python tests/slides.py --out DIR notebooks/zh-CN/04_scaling.ipynb      # -> DIR/zh-CN/04_scaling.slides.html
    python tests/slides.py --no-input                        # outputs and text only, no code

Nobody writes slide metadata by hand (issue 14, conventions point 10). ``stamp_slides(nb)`` sets
``metadata.slideshow.slide_type`` on every cell from what the cell is:

==========================================================  ============
cell                                                        slide_type
==========================================================  ============
``#`` or ``##`` heading (``export`` cuts a markdown cell     ``slide``
at a heading below its first line)
``###`` heading                                             ``subslide``
Colab badge and set-up cell; hint and solution blocks       ``skip``
(tagged ``hint``/``solution``, or a markdown cell that
is only ``<details>`` blocks); exercise checker cells
a widget cell whose ``##`` section has a static figure      ``skip`` (widgets do not export: the figure
drawn by another cell                                       stands in; otherwise ``-``, showing the widget's
                                                            static copy from ``mha_lib.display.static_widgets``)
predict / discussion / exercise cell                        ``subslide`` (a screen of its own), or ``-``
                                                            when it is the first thing under a heading
the code cell right after a predict cell (its answer)       ``fragment`` (appears on the next click)
anything else                                               ``-`` (same slide as the cell before)
==========================================================  ============

``make notebooks`` stamps every notebook this way (``tests/refresh_notebooks.py`` calls ``stamp_slides``).

``export`` writes one reveal.js deck per chapter with nbconvert's ``SlidesExporter`` (what ``jupyter nbconvert
--to slides`` runs), out of the tree by default (``build/slides/``, git-ignored). The decks work offline: reveal.js
5 comes from the pinned ``sphinx-revealjs`` package and MathJax 2 from ``jupyter-server-mathjax``; both are copied
next to the decks, and the template below loads nothing from the network (nbconvert's default one fetches
reveal.js, jQuery, RequireJS, MathJax and mermaid from CDNs). Copy the whole output folder to the classroom
machine. Tall slides scroll; figure cells with long drawing code show only the figure; widget outputs, which
cannot run in a deck, are replaced by a one-line note when no static figure stands in for them; each section's
``teacher_notes`` become the speaker notes of its slide (``S`` opens reveal.js's speaker view).

The editions: a chapter's translation (its twin, ``notebooks/zh-CN/<same name>``) gets the same rules; the
markers a rule reads (``**Predict before you run.**``, ``**预测一下，再运行。**``, ...) are recognised in every
language of ``MARKERS``, and a twin's deck is written in a folder of its language (``build/slides/zh-CN/``,
sharing the JavaScript one level up), in that language (the widget note, ``<html lang>``).
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import re
import shutil
import sys
from pathlib import Path

from nbformat.v4 import new_markdown_cell

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DEFAULT_OUT = ROOT / "build" / "slides"

SKIP_TAGS = {"colab-badge", "colab-setup", "hint", "solution"}
SCREEN_TAGS = ("predict", "discussion", "exercise")  # each gets a screen of its own

# The editions. A translation lives in notebooks/<folder>/ under the English chapter's file name (its twin).
LANGUAGES = ("en", "zh-CN")
TWIN_FOLDERS = {"zh-CN": NOTEBOOKS / "zh-CN"}
# The opening words of the cells that get a screen of their own, in each language (a twin translates them)
MARKERS = {
    "en": {"predict": ("**Predict before you run.**",), "discussion": ("**Discuss.**",), "exercise": ("**Exercise",)},
    "zh-CN": {"predict": ("**预测一下，再运行。**", "**预测一下。**"), "discussion": ("**讨论。**",),
              "exercise": ("**练习",)},
}
SCREEN_PREFIXES = {name: tuple(prefix for words in MARKERS.values() for prefix in words[name])
                   for name in SCREEN_TAGS}  # a cell is recognised in any language
# the deck's words: the note that stands in for a widget, and the <html lang> (nbconvert takes ISO 639-1)
DECK_WORDS = {
    "en": {"widget_note": "An interactive explorer: run this cell in JupyterLab or Colab to use it.", "lang": "en"},
    "zh-CN": {"widget_note": "一个交互式探索器：在 JupyterLab 或 Colab 中运行这个单元格即可使用。", "lang": "zh"},
}
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
STATIC_WIDGET_MARK = "mha_lib_static_widget"  # = mha_lib.display.static_widgets.MARK (imports nothing from mha_lib)
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")
LONG_FIGURE_CODE = 12  # a figure cell with more code lines than this shows only its figure in the deck
HEADING = re.compile(r"^(#{1,6})\s+\S")

# reveal.js and MathJax, read from the packages that ship them (found without importing them: sphinx_revealjs
# imports Sphinx at import time)
REVEAL_PACKAGE, REVEAL_FOLDER = "sphinx_revealjs", ("_static", "revealjs")
MATHJAX_PACKAGE, MATHJAX_FOLDER = "jupyter_server_mathjax", ("static",)
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"
DECK_WIDTH, DECK_HEIGHT = 1280, 800  # reveal.js scales this 16:10 canvas to the screen


# --------------------------------------------------------------------------------------------------- reading cells


def language_of(path, nb=None) -> str:
    """The language of a chapter: ``metadata.mha_lib.language`` when ``nb`` sets it, else ``"zh-CN"`` for a
    notebook in a ``zh-CN`` folder (a twin), else ``"en"`` (as ``mha_lib.display.static_widgets`` decides)."""
    setting = nb.get("metadata", {}).get("mha_lib", {}) if isinstance(nb, dict) else {}
    if isinstance(setting, dict) and setting.get("language") in LANGUAGES:
        return setting["language"]
    folders = Path(str(path)).parts[:-1] if path is not None else ()
    return next((language for language in LANGUAGES if language in folders), "en")


def twin_paths(language: str | None = None) -> list[Path]:
    """The twins that exist (``notebooks/zh-CN/NN_*.ipynb``), of one language or of all, in chapter order."""
    languages = [language] if language else list(TWIN_FOLDERS)
    return [path for name in languages for path in sorted(TWIN_FOLDERS[name].glob("[0-9][0-9]_*.ipynb"))]


def _check_notebook(nb) -> None:
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise TypeError(f"nb: expected a notebook (nbformat.NotebookNode or dict with a 'cells' list), "
                        f"got {type(nb).__name__}")


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def headings(text: str) -> list[tuple[int, int, str]]:
    """The markdown headings of ``text`` as (line number, level, title), leaving out ``#`` lines inside code
    fences (a solution's Python comments) and inside ``<details>`` blocks."""
    found, fence, depth = [], False, 0
    for number, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence:
            continue
        if depth == 0:
            match = HEADING.match(line)
            if match:
                found.append((number, len(match.group(1)), line[match.end(1):].strip()))
        depth = max(0, depth + stripped.count("<details") - stripped.count("</details>"))
    return found


def heading_level(cell) -> int:
    """The level (1-6) of the highest heading of a markdown cell, 0 for none. A heading further down a cell
    still makes the cell start a slide (``export`` splits such cells; ``heading_warnings`` names them)."""
    if cell.get("cell_type") != "markdown":
        return 0
    levels = [level for _, level, _ in headings(_source(cell))]
    return min(levels) if levels else 0


def heading_warnings(nb) -> list[str]:
    """Cells with text above their first heading (``#`` to ``###``): the slide, and the guide's section, start at
    the cell, so that text lands in the wrong place. (Further headings in a cell that starts with one, such as
    "### What to remember" under "## Summary", are fine: ``export`` cuts them into sub-slides.)"""
    _check_notebook(nb)
    warnings = []
    for index, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "markdown":
            continue
        lines = _source(cell).splitlines()
        first = next((n for n, line in enumerate(lines) if line.strip()), 0)
        found = [(number, level, title) for number, level, title in headings(_source(cell)) if level <= 3]
        if found and found[0][0] != first:
            _, level, title = found[0]
            warnings.append(f"cell {index}: heading {'#' * level} {title!r} is not at the top of its cell")
    return warnings


def split_at_headings(nb):
    """A copy of ``nb`` in which every markdown cell with a ``#``-``###`` heading below its first line is cut
    into one cell per heading. The cell's metadata (tags, teacher notes) goes with its first heading."""
    _check_notebook(nb)
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb["cells"]:
        lines = _source(cell).splitlines(keepends=True) if cell.get("cell_type") == "markdown" else []
        first = next((n for n, line in enumerate(lines) if line.strip()), 0)
        cuts = [number for number, level, _ in headings("".join(lines)) if level <= 3 and number != first]
        if not cuts:
            cells.append(cell)
            continue
        bounds = [0, *cuts, len(lines)]
        pieces = ["".join(lines[a:b]).strip("\n") for a, b in zip(bounds, bounds[1:])]
        owner = 0 if heading_level({"cell_type": "markdown", "source": pieces[0]}) else 1
        for number, piece in enumerate(pieces):
            if number == owner:
                cell["source"] = piece
                cells.append(cell)
            elif piece.strip():
                cells.append(new_markdown_cell(piece))
    nb["cells"] = cells
    return nb


def _mimes(cell) -> set[str]:
    found = set()
    for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
        found |= set(output.get("data", {}))
    return found


def has_figure(cell) -> bool:
    return any(mime in _mimes(cell) for mime in IMAGE_MIMES)


def is_widget(cell) -> bool:
    """A widget cell: a live widget output, or the static copy that ``mha_lib.display.static_widgets`` stores in its
    place (outputs marked ``STATIC_WIDGET_MARK`` in their metadata)."""
    if cell.get("cell_type") != "code":
        return False
    return any(WIDGET_MIME in output.get("data", {}) or STATIC_WIDGET_MARK in output.get("metadata", {})
               for output in cell.get("outputs", []))


def widget_picture(cell) -> bool:
    """Whether a widget cell carries a static copy of its picture (an image output beside the widget)."""
    return is_widget(cell) and any(WIDGET_MIME not in output.get("data", {}) and
                                   any(mime in output.get("data", {}) for mime in IMAGE_MIMES)
                                   for output in cell.get("outputs", []))


def is_checker(cell) -> bool:
    """An exercise's checker cell: it calls ``check_*(...)`` and does nothing else but import (a chapter's
    imports cell that also imports the checkers stays on the slides)."""
    if cell.get("cell_type") != "code":
        return False
    try:
        statements = ast.parse(_source(cell)).body
    except SyntaxError:  # IPython magics: not a checker cell
        return False

    def is_check(node) -> bool:
        call = node.value if isinstance(node, ast.Expr) else None
        return (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id.startswith("check_"))
    return any(is_check(node) for node in statements) and all(
        is_check(node) or isinstance(node, (ast.Import, ast.ImportFrom)) for node in statements)


def is_hidden_block(cell) -> bool:
    """A markdown cell made only of ``<details>`` blocks (hints, solutions): one click away in the notebook,
    noise on a slide."""
    if cell.get("cell_type") != "markdown":
        return False
    text = _source(cell).strip()
    return text.startswith("<details") and text.endswith("</details>")


def role(cell) -> str | None:
    """``"predict"``, ``"discussion"``, ``"exercise"`` (conventions points 5-7: tag, or the opening words), or
    None."""
    if cell.get("cell_type") != "markdown":
        return None
    tags, text = _tags(cell), _source(cell).lstrip()
    for name in SCREEN_TAGS:
        if name in tags or text.startswith(SCREEN_PREFIXES[name]):
            return name
    return None


# --------------------------------------------------------------------------------------------------- the rules


def slide_types(nb) -> list[str]:
    """The ``slide_type`` of every cell of ``nb``, from its structure (the table in this module's docstring).
    Pure: ``nb`` is not changed."""
    _check_notebook(nb)
    cells = nb["cells"]
    # the `##` section of each cell (a `#` or `##` heading opens one), to find a widget's static figure
    section, sections = 0, []
    for cell in cells:
        if heading_level(cell) in (1, 2):
            section += 1
        sections.append(section)
    sections_with_figure = {sections[i] for i, cell in enumerate(cells) if has_figure(cell) and not is_widget(cell)}

    types: list[str] = []
    after_heading = False  # nothing shown yet under the last heading
    for index, cell in enumerate(cells):
        level = heading_level(cell)
        if _tags(cell) & SKIP_TAGS or is_hidden_block(cell) or is_checker(cell):
            kind = "skip"
        elif is_widget(cell) and sections[index] in sections_with_figure:
            kind = "skip"
        elif level in (1, 2):
            kind = "slide"
        elif level == 3:
            kind = "subslide"
        elif role(cell) is not None:
            kind = "-" if after_heading else "subslide"
        elif cell.get("cell_type") == "code" and _previous_shown_role(cells, types, index) == "predict":
            kind = "fragment"
        else:
            kind = "-"
        types.append(kind)
        if kind != "skip":
            after_heading = level in (1, 2, 3) and role(cell) is None
    return types


def _previous_shown_role(cells, types, index) -> str | None:
    for previous in range(index - 1, -1, -1):
        if types[previous] != "skip":
            return role(cells[previous])
    return None


def stamp_slides(nb) -> list[str]:
    """Write ``metadata.slideshow.slide_type`` into every cell of ``nb`` (in place) and return warnings about
    what the deck cannot show: a widget with no static figure in its section (its output becomes a note in the
    deck)."""
    types = slide_types(nb)
    for cell, kind in zip(nb["cells"], types):
        cell.setdefault("metadata", {})["slideshow"] = {"slide_type": kind}
    return [f"cell {index}: widget with no static figure, neither its own nor in its section (the deck shows a "
            "note instead)" for index, (cell, kind) in enumerate(zip(nb["cells"], types))
            if is_widget(cell) and kind != "skip" and not widget_picture(cell)]


def count_slides(types: list[str]) -> tuple[int, int]:
    """(horizontal slides, all screens) that reveal.js shows for these slide types: nbconvert makes the first
    shown cell a slide whatever its type."""
    shown = [kind for kind in types if kind not in ("skip", "notes")]
    if not shown:
        return 0, 0
    rest = shown[1:]
    slides = 1 + rest.count("slide")
    return slides, slides + rest.count("subslide")


# --------------------------------------------------------------------------------------------------- the decks

TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{# nbconvert's reveal template, minus everything it would fetch from a CDN: no jQuery, RequireJS, mermaid or
   widget manager; reveal.js from the folder beside the deck. #}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_css -%}
<style type="text/css">
/* projector: readable body text, figures never wider or taller than the screen */
.reveal .slides { text-align: left; }
.reveal .slides section { font-size: 24px; line-height: 1.35; }
.reveal .slides section .jp-RenderedHTMLCommon h1 { font-size: 44px; }
.reveal .slides section .jp-RenderedHTMLCommon h2 { font-size: 36px; }
.reveal .slides section .jp-RenderedHTMLCommon h3 { font-size: 30px; }
.reveal .slides section img { max-height: 700px; max-width: 100%; }
.reveal .slides section details { font-size: 20px; }
.reveal .slides section pre { white-space: pre-wrap; overflow-wrap: anywhere; }  /* 120-column code wraps */
.reveal .mha-widget-note { font-style: italic; color: #555; }
</style>
{%- endblock html_head_css -%}
{%- block html_head_js_mathjax -%}
{# MathJax 2 from the folder beside the deck, with the STIX web font (the one its package ships) #}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({
  tex2jax: {inlineMath: [["$", "$"], ["\\(", "\\)"]], displayMath: [["$$", "$$"], ["\\[", "\\]"]],
            processEscapes: true, processEnvironments: true},
  "HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", scale: 100},
  messageStyle: "none", displayAlign: "center"
});
</script>
<script src="{{ resources.mathjax_url }}"></script>
{%- endblock html_head_js_mathjax -%}
{% block footer_js %}
<script src="{{ resources.reveal.url_prefix }}/dist/reveal.js"></script>
<script src="{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"></script>
<script>
Reveal.initialize({
  controls: true, progress: true, history: true, center: false,
  transition: "{{ resources.reveal.transition }}", slideNumber: "{{ resources.reveal.number }}",
  width: {{ resources.reveal.width }}, height: {{ resources.reveal.height }}, margin: 0.03,
  plugins: [RevealNotes]
});
// a slide taller than the screen scrolls instead of being cut off
function fitSlide() {
  var height = Reveal.getConfig().height;
  document.querySelectorAll(".reveal .slides section.present").forEach(function (s) {
    if (s.querySelector("section")) return;  // a stack of subslides: its children scroll
    if (s.scrollHeight > height) {
      s.style.height = height + "px"; s.style.overflowY = "auto"; s.style.top = "0px";
    }
  });
}
function retypeset() {
  if (window.MathJax && MathJax.Hub) { MathJax.Hub.Queue(["Rerender", MathJax.Hub, Reveal.getCurrentSlide()]); }
}
Reveal.on("ready", fitSlide);
Reveal.on("slidechanged", function () { fitSlide(); retypeset(); });
</script>
{% endblock footer_js %}
"""


def _package_folder(package: str, parts: tuple[str, ...]) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"the package {package!r} is missing: it ships the offline slides' JavaScript; "
                         "install the pins of requirements.txt (`make install`)")
    folder = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)
    if not folder.is_dir():
        raise SystemExit(f"{folder} is missing: has the layout of {package!r} changed?")
    return folder


def copy_offline_assets(out: Path) -> None:
    """reveal.js (script, styles, themes, the speaker-notes plugin) and MathJax 2, next to the decks."""
    reveal = _package_folder(REVEAL_PACKAGE, REVEAL_FOLDER)
    for part in ("dist", "plugin/notes"):
        shutil.copytree(reveal / part, out / "reveal.js" / part, dirs_exist_ok=True)
    shutil.copytree(_package_folder(MATHJAX_PACKAGE, MATHJAX_FOLDER), out / "mathjax", dirs_exist_ok=True)


def deck_notebook(nb, language: str = "en"):
    """The copy of ``nb`` that becomes a deck: cut at headings, slide types stamped; each section's
    ``teacher_notes`` as speaker notes; live widget outputs replaced by their static copy or a note (in
    ``language``); long drawing code hidden behind its figure; no widget state (its manager would come from a
    CDN)."""
    nb = split_at_headings(nb)
    stamp_slides(nb)
    nb.get("metadata", {}).pop("widgets", None)
    note = f"<p class='mha-widget-note'>{DECK_WORDS[language]['widget_note']}</p>"
    cells = []
    for cell in nb["cells"]:  # a section's talking points become its speaker notes (press S in the deck)
        cells.append(cell)
        talking = cell.get("metadata", {}).get("teacher_notes")
        if talking and cell["metadata"]["slideshow"]["slide_type"] != "skip":
            talking = talking if isinstance(talking, list) else [talking]
            notes = new_markdown_cell("\n".join(f"- {point}" for point in talking))
            notes.metadata["slideshow"] = {"slide_type": "notes"}
            cells.append(notes)
    nb["cells"] = cells
    for cell in nb["cells"]:
        if cell["metadata"]["slideshow"]["slide_type"] == "skip" or cell.get("cell_type") != "code":
            continue
        if any(WIDGET_MIME in output.get("data", {}) for output in cell.get("outputs", [])):
            # a live widget (a notebook not refreshed since): its static copy if it has one, else the note
            kept = [o for o in cell["outputs"] if WIDGET_MIME not in o.get("data", {})]
            cell["outputs"] = kept or [{"output_type": "display_data", "metadata": {}, "data": {"text/html": note}}]
        elif has_figure(cell) and len(_source(cell).splitlines()) > LONG_FIGURE_CODE:
            cell["metadata"].setdefault("transient", {})["remove_source"] = True
    return nb


IMAGE_LINK = re.compile(r"(!\[[^\]]*\]\(|<img\s[^>]*?src=[\"'])([^)\"'\s]+)")
TIME_SUFFIX = re.compile(r"^(#{1,6} .+?) · (?:~\d+ min|约 ?\d+ ?分钟)$", re.MULTILINE)  # "· ~9 min", "· 约 9 分钟"


def _embed_images(text: str, folder: Path) -> str:
    """Relative image links of a markdown cell in ``folder`` (``../assets/x.png``), as data URIs: the deck travels
    without the repository. (nbconvert's own ``embed_images`` re-serialises every HTML block, which closes a
    ``<details>`` block before its answer, so the answers of the predict cells would show on the slide.)"""
    import base64
    import mimetypes

    def embed(match):
        link = match.group(2)
        if re.match(r"^[a-z]+:", link) or link.startswith("/"):
            return match.group(0)
        target = (folder / link).resolve()
        kind = mimetypes.guess_type(target.name)[0]
        if not target.is_file() or not kind or not kind.startswith("image/"):
            return match.group(0)
        return match.group(1) + f"data:{kind};base64," + base64.b64encode(target.read_bytes()).decode("ascii")
    return IMAGE_LINK.sub(embed, text)


def deck_path(path, out: Path = DEFAULT_OUT) -> Path:
    """Where the deck of ``path`` goes: ``out/NN_name.slides.html``, a twin's in ``out/<language>/``."""
    language = language_of(path)
    folder = Path(out) if language == "en" else Path(out) / language
    return folder / f"{Path(path).stem}.slides.html"


def export(paths, out: Path = DEFAULT_OUT, *, no_input: bool = False, theme: str = "white",
           failures: list[str] | None = None) -> list[Path]:
    """Write one reveal.js deck per notebook into ``out`` (with the offline JavaScript beside them; a twin's deck
    into ``out/<language>/``, see ``deck_path``); return the decks' paths. A notebook that cannot be exported
    raises, unless ``failures`` is a list: then its error is appended there and the other decks are still
    written."""
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import SlidesExporter

    paths = [Path(p) for p in paths]
    for path in paths:
        if path.suffix != ".ipynb" or not path.is_file():
            raise ValueError(f"paths: expected existing .ipynb files, got {str(path)!r}")
    theme_folder = _package_folder(REVEAL_PACKAGE, REVEAL_FOLDER) / "dist" / "theme"
    themes = sorted(css.stem for css in theme_folder.glob("*.css"))
    if theme not in themes:
        raise ValueError(f"theme: expected one of reveal.js's themes {themes}, got {theme!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    copy_offline_assets(out)
    def exporter(language: str):
        up = "" if language == "en" else "../"  # a twin's deck sits one folder below the JavaScript
        return SlidesExporter(
            extra_loaders=[DictLoader({"mha_slides.html.j2": TEMPLATE})],
            template_file="mha_slides.html.j2",
            reveal_url_prefix=f"{up}reveal.js",
            reveal_theme=theme,
            reveal_transition="none",  # a projector and a class: no animation between slides
            reveal_number="c/t",
            reveal_width=str(DECK_WIDTH),
            reveal_height=str(DECK_HEIGHT),
            reveal_scroll=True,
            mathjax_url=f"{up}mathjax/MathJax.js?config={MATHJAX_CONFIG}",
            exclude_input=no_input,
            exclude_input_prompt=True,
            exclude_output_prompt=True,
            language_code=DECK_WORDS[language]["lang"],
        )
    exporters: dict = {}
    decks = []
    for path in paths:
        try:
            nb = nbformat.read(path, as_version=4)
            language = language_of(path, nb)
            nb = deck_notebook(nb, language)
            folder = path.resolve().parent
            for cell in nb["cells"]:
                if cell.get("cell_type") == "markdown":  # no "· ~N min" on the students' screen
                    cell["source"] = TIME_SUFFIX.sub(r"\1", _embed_images(_source(cell), folder))
            if language not in exporters:
                exporters[language] = exporter(language)
            body, _ = exporters[language].from_notebook_node(nb, resources={"metadata": {"name": path.stem,
                                                                                         "path": str(folder)}})
        except Exception as error:  # noqa: BLE001 - one broken chapter must not cost the teacher the others
            if failures is None:
                raise
            failures.append(f"{path.name}: no deck: {type(error).__name__}: {error}")
            continue
        deck = deck_path(path, out)
        deck.parent.mkdir(parents=True, exist_ok=True)
        deck.write_text(body, encoding="utf-8")
        decks.append(deck)
    return decks


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Export the chapters as offline reveal.js decks.")
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="default: every notebooks/*.ipynb, then every twin (notebooks/zh-CN/*.ipynb)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the decks (default build/slides)")
    parser.add_argument("--no-input", action="store_true", help="leave out all code: text and outputs only")
    parser.add_argument("--theme", default="white", help="a reveal.js theme (white, simple, black, ...)")
    args = parser.parse_args(argv)
    import nbformat

    paths = args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb")) + twin_paths()
    failures: list[str] = []
    decks = export(paths, args.out, no_input=args.no_input, theme=args.theme, failures=failures)
    for deck in decks:
        path = next(p for p in paths if deck_path(p, args.out) == deck)
        nb = nbformat.read(path, as_version=4)
        slides, screens = count_slides(slide_types(split_at_headings(nb)))
        print(f"{deck}: {slides} slides, {screens} screens")
        for warning in heading_warnings(nb) + stamp_slides(nb):
            print(f"  {path.name}: {warning}")
    for failure in failures:
        print(failure, file=sys.stderr)
    if decks:
        print(f"open {decks[0]} in a browser (works offline; keep the folder together)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
