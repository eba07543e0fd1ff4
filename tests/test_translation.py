"""The Chinese edition is kept in step with the English one (issue 22).

For every English chapter ``notebooks/NN_*.ipynb``:

* its twin ``notebooks/zh-CN/NN_*.ipynb`` exists;
* the same cells in the same order: equal count, ids and cell types;
* each code cell is the same program: both parsed (IPython magics turned into Python first), every string literal
  (f-strings and docstrings included) replaced by one placeholder, comments gone with the parse; the dumps equal;
* every markdown cell of the twin is Chinese (holds CJK characters), and keeps the English cell's math and inline
  code: each ``$...$`` / ``$$...$$`` formula (words inside ``\text{...}`` may be translated) and each `` `code` ``
  span of the English cell is in the twin cell;
* each cell keeps the English cell's tags (``nbval-ignore-output``, ``raises-exception``, ``predict``, ...: strict
  nbval, the guide and the slides read them) and, in a heading cell, as many teacher notes;
* each twin cell records in ``metadata.translation.source`` the fingerprint of the English cell it was translated
  from (``translations.cell_fingerprint``: sha256[:16] of the English source and teacher notes). Editing an English cell, one word is
  enough, makes this test fail, naming the chapter and the cell, until the twin is brought along and its
  fingerprint updated (``python tests/translations.py status`` lists every stale cell).

The tests of the test build a twin from a real chapter in a temporary folder and show each failure.

What this test does not check, because other tests do: the badge and the set-up cell (tests/notebooks/
test_notebooks.py, which also requires each twin to select "zh-CN"), the pacing minutes (tests/notebooks/
test_teachers_guide.py: each twin gives the guide the same facts as its English chapter), the outputs (strict nbval
on notebooks/zh-CN/ and tests/notebooks/test_notebooks.py), the glossary's terms in mha_lib's messages
(tests/display/test_catalog.py).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import translations
from translations import cell_fingerprint

NOTEBOOKS = translations.NOTEBOOKS
TWINS = translations.TWINS["zh_CN"]
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
STRING = "<string>"
FENCE = re.compile(r"```.*?```", re.DOTALL)
CODE_SPAN = re.compile(r"``(.+?)``|`([^`]+)`", re.DOTALL)
MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$([^$]+?)\$", re.DOTALL)
TEXT_IN_MATH = re.compile(r"\\(?:text|textrm|mathrm|operatorname)\{[^{}]*\}")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


class _NoStrings(ast.NodeTransformer):
    """Every string literal, f-strings included, becomes one placeholder: only the program is compared."""

    def visit_Constant(self, node):
        if isinstance(node.value, (str, bytes)):
            return ast.copy_location(ast.Constant(STRING), node)
        return node

    def visit_JoinedStr(self, node):
        return ast.copy_location(ast.Constant(STRING), node)


def program(source: str) -> str:
    """The code of a cell without its comments and string literals, as an AST dump (magics made Python first)."""
    from IPython.core.inputtransformer2 import TransformerManager

    python = TransformerManager().transform_cell(source)
    tree = _NoStrings().visit(ast.parse(python))
    return ast.dump(tree, annotate_fields=False)


def kept_verbatim(markdown: str) -> tuple[set[str], set[str]]:
    """(inline code spans, math formulas) of a markdown cell, white space normalised; the words of ``\text{...}``
    inside a formula left out (a translation may translate them). Fenced code blocks are not compared here."""
    text = FENCE.sub(" ", markdown)
    code = {" ".join((a or b).split()) for a, b in CODE_SPAN.findall(text)}
    text = CODE_SPAN.sub(" ", text)
    math = {" ".join(TEXT_IN_MATH.sub(r"\\text{}", a or b).split()) for a, b in MATH.findall(text)}
    return code, math


def twin_problems(english: Path, twin: Path) -> list[str]:
    """Every way ``twin`` is out of step with ``english``, one line each, naming the chapter and the cell."""
    chapter = english.name
    if not twin.exists():
        return [f"{chapter}: no twin at {twin}"]
    ours, theirs = _cells(english), _cells(twin)
    shape = lambda cells: [(c.get("id"), c["cell_type"]) for c in cells]  # noqa: E731
    if shape(ours) != shape(theirs):
        return [f"{chapter}: the cells differ (count, order, ids or types): English {len(ours)} cells, twin "
                f"{len(theirs)}; first difference at cell "
                f"{next((i for i, (a, b) in enumerate(zip(shape(ours), shape(theirs))) if a != b), min(len(ours), len(theirs)))}"]
    problems = []
    for en, zh in zip(ours, theirs):
        where = f"{chapter}: cell {en.get('id')}"
        tags = [cell.get("metadata", {}).get("tags", []) for cell in (en, zh)]
        if tags[0] != tags[1]:
            problems.append(f"{where}: the tags differ: English {tags[0]}, twin {tags[1]}")
        notes = [cell.get("metadata", {}).get("teacher_notes", []) for cell in (en, zh)]
        if len(notes[0]) != len(notes[1]):
            problems.append(f"{where}: {len(notes[0])} teacher notes in English, {len(notes[1])} in the twin")
        recorded = zh.get("metadata", {}).get("translation", {}).get("source")
        if recorded != cell_fingerprint(en):
            problems.append(f"{where}: the English cell changed since it was translated (fingerprint "
                            f"{cell_fingerprint(en)}, the twin records {recorded}); update the translation "
                            f"(its teacher notes too) and its metadata.translation.source")
        if en["cell_type"] == "code":
            try:
                same = program(_source(en)) == program(_source(zh))
            except SyntaxError as error:
                problems.append(f"{where}: does not parse: {error}")
                continue
            if not same:
                problems.append(f"{where}: the code differs (only comments and string literals may)")
        elif en["cell_type"] == "markdown" and not CJK.search(_source(zh)):
            problems.append(f"{where}: the twin's markdown is not Chinese")
        elif en["cell_type"] == "markdown":
            (code, math), (twin_code, twin_math) = kept_verbatim(_source(en)), kept_verbatim(_source(zh))
            # kept: inside one of the twin's spans or formulas (`LazyLinear` may become `nn.LazyLinear`)
            lost = [span for span in sorted(code) if not any(span in kept for kept in twin_code)]
            lost += [f"${formula}$" for formula in sorted(math) if not any(formula in kept for kept in twin_math)]
            if lost:
                problems.append(f"{where}: the twin lacks the English cell's code or math: {' · '.join(lost[:5])} "
                                "(code names, shapes and formulas stay as they are)")
    return problems


def english_chapters() -> list[Path]:
    return translations.english_chapters()


@pytest.mark.parametrize("english", english_chapters(), ids=lambda p: p.stem)
def test_the_twin_is_in_step_with_the_english_chapter(english):
    problems = twin_problems(english, TWINS / english.name)
    assert not problems, "\n".join(problems)


def _twin_texts(twin: Path) -> list[str]:
    """What a reader of the twin reads in prose: its markdown cells and its teacher notes, each named."""
    texts = []
    for cell in _cells(twin):
        where = f"{twin.name}: cell {cell.get('id')}: "
        if cell["cell_type"] == "markdown":
            texts.append(where + _source(cell))
        texts += [where + note for note in cell.get("metadata", {}).get("teacher_notes", [])]
    return texts


@pytest.mark.parametrize("english", english_chapters(), ids=lambda p: p.stem)
def test_the_twin_uses_the_glossarys_terms(english):
    """One term per concept: no discouraged synonym of notebooks/zh-CN/术语表.md in a twin's prose."""
    rows = translations.glossary((TWINS / "术语表.md").read_text(encoding="utf-8"))
    found = translations.discouraged_uses(_twin_texts(TWINS / english.name), rows)
    assert not found, "\n".join(text[:160] for text in found)


def test_of_the_test_a_discouraged_term_in_a_twin_is_found(pair):
    _, twin = pair
    nb = json.loads(twin.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    cell["source"] = _source(cell) + "\n每个令牌一行。"
    twin.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    rows = translations.glossary((TWINS / "术语表.md").read_text(encoding="utf-8"))
    found = translations.discouraged_uses(_twin_texts(twin), rows)
    assert len(found) == 1 and found[0].startswith(f"令牌 (use 词元): 01_single_head_attention.ipynb: cell {cell['id']}")


def test_every_twin_has_an_english_chapter():
    orphans = sorted({p.name for p in TWINS.glob("[0-9][0-9]_*.ipynb")} - {p.name for p in english_chapters()})
    assert not orphans, orphans


# --- tests of the test ------------------------------------------------------------------------------------------


def _fake_twin(english: Path, folder: Path) -> Path:
    """A twin of ``english`` as a translator would write it: Chinese markdown, translated comments and strings,
    the English fingerprints recorded."""
    nb = json.loads(english.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        source = _source(cell)
        stamp = cell_fingerprint(cell)
        if cell["cell_type"] == "markdown":
            cell["source"] = "中文：" + source
        elif cell["cell_type"] == "code":
            cell["source"] = "# 中文注释\n" + source
        cell.setdefault("metadata", {})["translation"] = {"source": stamp}
    twin = folder / "zh-CN" / english.name
    twin.parent.mkdir(parents=True, exist_ok=True)
    twin.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    return twin


@pytest.fixture
def pair(tmp_path):
    """A copy of chapter 1 and a faithful twin of it, in a temporary folder."""
    source = NOTEBOOKS / "01_single_head_attention.ipynb"
    english = tmp_path / source.name
    english.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    return english, _fake_twin(english, tmp_path)


def test_of_the_test_a_faithful_twin_passes(pair):
    assert twin_problems(*pair) == []


def test_of_the_test_one_english_markdown_word_edited_fails_naming_chapter_and_cell(pair):
    english, twin = pair
    nb = json.loads(english.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown" and " the " in _source(c))
    cell["source"] = _source(cell).replace(" the ", " a ", 1)  # one word
    english.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    problems = twin_problems(english, twin)
    assert len(problems) == 1
    assert problems[0].startswith(f"01_single_head_attention.ipynb: cell {cell['id']}: the English cell changed")
    assert translations.stale_cells(english, twin) == [cell["id"]]  # `make translations` lists the same cell


def test_of_the_test_an_edited_english_teacher_note_fails_too(pair):
    english, twin = pair
    nb = json.loads(english.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("teacher_notes"))
    cell["metadata"]["teacher_notes"][0] += " (edited)"
    english.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    problems = twin_problems(english, twin)
    assert len(problems) == 1 and f"cell {cell['id']}: the English cell changed" in problems[0]


def test_of_the_test_changed_code_fails_but_translated_strings_and_comments_pass(pair):
    english, twin = pair
    nb = json.loads(twin.read_text(encoding="utf-8"))
    assert program("x = f'{a} b'  # comment\nprint('text')") == program("x = f'{a} 乙'  # 注释\nprint('文字')")
    assert program("%matplotlib inline\nx = 1") != program("%matplotlib inline\nx = 2")
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["source"] = _source(code) + "\nextra = 1"  # a statement the English cell does not have
    twin.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    assert [p for p in twin_problems(english, twin)] == [
        f"01_single_head_attention.ipynb: cell {code['id']}: the code differs (only comments and string literals may)"]


def test_of_the_test_english_markdown_left_in_the_twin_fails(pair):
    english, twin = pair
    nb = json.loads(twin.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    cell["source"] = _source(cell).replace("中文：", "")
    twin.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    assert twin_problems(english, twin) == [
        f"01_single_head_attention.ipynb: cell {cell['id']}: the twin's markdown is not Chinese"]


def test_of_the_test_changed_math_code_or_tags_fail(pair):
    english, twin = pair
    nb = json.loads(twin.read_text(encoding="utf-8"))
    math, formula = next((c, f) for c in nb["cells"] if c["cell_type"] == "markdown"
                         for f in sorted(kept_verbatim(_source(c))[1]) if f"${f}$" in _source(c)
                         and not any(f in g for g in kept_verbatim(_source(c))[1] - {f}))
    math["source"] = _source(math).replace(f"${formula}$", "$改$")  # every occurrence
    code = next(c for c in nb["cells"] if c["cell_type"] == "markdown" and c is not math
                and kept_verbatim(_source(c))[0])
    spans = kept_verbatim(_source(code))[0]
    span = next(f for f in sorted(spans) if f"`{f}`" in _source(code) and not any(f in g for g in spans - {f}))
    code["source"] = _source(code).replace(f"`{span}`", "某个名字")
    tagged = next(c for c in nb["cells"] if c.get("metadata", {}).get("tags"))
    tagged["metadata"]["tags"] = []
    twin.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    problems = twin_problems(english, twin)
    assert any(f"cell {math['id']}: the twin lacks the English cell's code or math:" in p and f"${formula}$" in p
               for p in problems), problems
    assert any(f"cell {code['id']}: the twin lacks the English cell's code or math:" in p and span in p
               for p in problems), problems
    assert any(f"cell {tagged['id']}: the tags differ" in p for p in problems), problems
    assert kept_verbatim(r"so $\sqrt{\text{width}}$, `q @ k.T`") == (
        {"q @ k.T"}, {r"\sqrt{\text{}}"})  # the words of \text{} may be translated, the rest may not
    assert kept_verbatim("$a =\nb$ and `x *\ny`") == ({"x * y"}, {"a = b"})  # a span may wrap


def test_of_the_test_a_missing_or_reordered_cell_fails(pair, tmp_path):
    english, twin = pair
    assert twin_problems(english, tmp_path / "nowhere.ipynb")[0].startswith("01_single_head_attention.ipynb: no twin")
    nb = json.loads(twin.read_text(encoding="utf-8"))
    nb["cells"][1], nb["cells"][2] = nb["cells"][2], nb["cells"][1]
    twin.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    assert "the cells differ" in twin_problems(english, twin)[0]
