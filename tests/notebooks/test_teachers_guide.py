"""The teacher's guide (tests/teachers_guide.py -> notebooks/TEACHERS_GUIDE.md): read from the notebooks' markers
and the checkers' source, committed up to date, and every chapter marked up as the conventions require."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import teachers_guide as tg

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_PATHS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXERCISE_MODULES = sorted((ROOT / "mha_lib" / "exercises").glob("ch*.py"))

CHECKER_SOURCE = '''
from . import compare, failed

NAMED = ("you forgot the scaling: divide the scores by the square root "
         "of the head width.")
PART = "keep the heads apart"
SUMMED = f"you added the heads' outputs: {PART}"
TEMPLATE = "your layer has {got} heads; the model has {expected}"
FIX = " Call contiguous first."
NOT_CONTIGUOUS = "view refused a non-contiguous tensor." 
SHORT = "no"


def _mistakes(x):
    mistakes = {NAMED: x, SUMMED: x + 1}
    mistakes[f"you stacked the heads into dim={x}"] = x
    return mistakes


def check_thing(fn):
    config = {"d_in": 3, "d_out": 2}
    if fn is None:
        return failed("thing", "expected a torch.Tensor, got None.")
    if fn == 1:
        return failed("thing", TEMPLATE.format(got=1, expected=2))
    if fn == 2:
        return failed("thing", NOT_CONTIGUOUS + FIX if fn else NOT_CONTIGUOUS)
    if fn == 3:
        return failed("thing", f"for one batch: {verdict.message}")
    return compare("thing", fn, 0, mistakes=_mistakes(0))


def check_other(fn):
    return failed("other", "the padding part is missing: queries may still attend to padded keys"
                  if fn else SHORT)
'''


def test_checker_mistakes_reads_dicts_failed_calls_and_helpers_from_the_source(tmp_path):
    module = tmp_path / "ch99_thing.py"
    module.write_text(CHECKER_SOURCE, encoding="utf-8")
    assert tg.checker_mistakes(module) == {
        "check_thing": [
            "Your layer has … heads; the model has …",
            "View refused a non-contiguous tensor. Call contiguous first.",
            "View refused a non-contiguous tensor.",
            "You forgot the scaling: divide the scores by the square root of the head width.",
            "You added the heads' outputs: keep the heads apart",
            "You stacked the heads into dim=…",
        ],
        "check_other": ["The padding part is missing: queries may still attend to padded keys"],
    }


@pytest.mark.parametrize("module", EXERCISE_MODULES, ids=[m.stem for m in EXERCISE_MODULES])
def test_every_checker_of_the_series_names_mistakes_for_the_guide(module):
    found = tg.checker_mistakes(module)
    assert found, f"{module.name}: no check_* function"
    silent = [name for name, messages in found.items() if not messages]
    assert not silent, f"{module.name}: the guide finds no mistake message in {silent}"


def test_chapter_5_mistakes_are_the_checker_modules_own_messages():
    ch05 = importlib.import_module("mha_lib.exercises.ch05_causal_masking")
    found = tg.checker_mistakes(ROOT / "mha_lib" / "exercises" / "ch05_causal_masking.py")
    wanted = {tg.tidy_message(m) for m in (ch05.MASKED_DIAGONAL_NAN, ch05.ZERO_FILL, ch05.INVERTED)}
    assert wanted <= set(found["check_causal_weights"])
    assert tg.tidy_message(ch05.USED_OR) in found["check_padded_causal_mask"]
    assert tg.tidy_message(ch05.USED_OR) == "Y" + ch05.USED_OR[1:]  # capitalised, otherwise word for word


def _tag(cell, tag):
    cell.metadata["tags"] = [tag]
    return cell


def sample_chapter(tmp_path) -> Path:
    (tmp_path / "ch99_thing.py").write_text(CHECKER_SOURCE, encoding="utf-8")
    title = new_markdown_cell(textwrap.dedent("""\
        # Chapter 99 · A sample

        Intro.

        **Class time:** about 45 min (+ 10 min optional: the extra part)

        **By the end of this chapter you can**

        - do one thing;
        - do another thing, described
          on two lines.

        Then more text."""))
    first = new_markdown_cell("## 1. First · ~30 min\n\nText.")
    first.metadata["teacher_notes"] = ["Say this first.", "Then ask that."]
    cells = [
        _tag(new_markdown_cell("[![Open In Colab](x)](y)"), "colab-badge"), title,
        first,
        _tag(new_markdown_cell("**Predict before you run.** What shape?\n\n<details><summary>Answer</summary>\n\n"
                               "`(2, 6, 4)`: two heads.\n\n</details>"), "predict"),
        new_code_cell("show(x.shape)"),
        new_markdown_cell("Words.\n\n## 2. Second · ~15 min"),
        _tag(new_markdown_cell("**Exercise 99.1 · Do it** · difficulty ★★☆ · ~7 min\n\nWrite `f(x)`."), "exercise"),
        new_code_cell("def f(x):\n    raise NotImplementedError"),
        new_code_cell("from mha_lib.exercises.ch99_thing import check_thing\n\ncheck_thing(f)"),
        _tag(new_markdown_cell("<details><summary>Hint</summary>\n\nThink.\n</details>\n\n<details><summary>"
                               "Solution</summary>\n\n```python\ndef f(x):\n    return x  # done\n```\n\n"
                               "</details>"), "solution"),
        _tag(new_markdown_cell("**Discuss.** Why two?\n\n<details><summary>One answer</summary>\n\nBecause.\n"
                               "</details>"), "discussion"),
        new_markdown_cell("## Optional · The extra part · ~10 min"),
        new_markdown_cell("## Summary\n\n- done"),
    ]
    path = tmp_path / "99_sample.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    return path


def test_read_chapter_finds_every_marker(tmp_path):
    chapter = tg.read_chapter(sample_chapter(tmp_path))
    assert chapter.title == "Chapter 99 · A sample"
    assert chapter.class_time == "about 45 min (+ 10 min optional: the extra part)"
    assert chapter.objectives == ["do one thing;", "do another thing, described on two lines."]
    assert [(s.title, s.minutes, s.optional) for s in chapter.sections] == [
        ("1. First", 30, False), ("2. Second", 15, False), ("Optional · The extra part", 10, True)]
    assert chapter.sections[0].notes == ["Say this first.", "Then ask that."]
    assert (chapter.core_minutes, chapter.optional_minutes) == (45, 10)
    assert [(p.section, p.question, p.answer) for p in chapter.predicts] == [
        ("1. First", "What shape?", "`(2, 6, 4)`: two heads.")]
    assert [(p.section, p.question, p.answer) for p in chapter.discussions] == [("2. Second", "Why two?", "Because.")]
    (exercise,) = chapter.exercises
    assert (exercise.title, exercise.difficulty, exercise.minutes, exercise.task) == (
        "99.1 · Do it", "★★☆", 7, "Write `f(x)`.")
    assert exercise.checkers == ["check_thing"]
    assert exercise.solution == "```python\ndef f(x):\n    return x  # done\n```"
    assert tg.problems(chapter) == []


def test_the_guide_of_a_chapter_reads_as_a_handout(tmp_path, monkeypatch):
    monkeypatch.setattr(tg, "EXERCISES", tmp_path)
    text = tg.guide_markdown([sample_chapter(tmp_path)])
    assert "| Chapter 99 · A sample | about 45 min (+ 10 min optional) | 45 min | 1 | 1 | 1 |" in text
    assert ("| 1 | 1. First | 30 | 30 |\n| 2 | 2. Second | 15 | 45 |\n"
            "| 3 | Optional · The extra part | 10 | optional |") in text
    assert "Core sections add up to 45 min, optional parts 10 min." in text
    assert "**1. First**\n\n- Say this first.\n- Then ask that." in text
    assert "1. *(1. First)*\n\n   What shape?\n\n   **Answer.**\n\n   `(2, 6, 4)`: two heads." in text
    assert "#### Exercise 99.1 · Do it (★★☆ · ~7 min)" in text
    assert "- You forgot the scaling: divide the scores by the square root of the head width." in text
    assert "**Solution.**\n\n```python\ndef f(x):\n    return x  # done\n```" in text
    assert "<details" not in text and "<summary" not in text and "Think." not in text  # hints stay in class


def test_a_chapter_without_markers_is_reported_not_fatal(tmp_path):
    path = tmp_path / "98_bare.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Chapter 98 · Bare\n\nText."),
                                       new_markdown_cell("## A section"),
                                       new_markdown_cell("**Predict before you run.** No answer here.")]), path)
    chapter = tg.read_chapter(path)
    assert tg.problems(chapter) == [
        "no `**Class time:** about N min` line in the title cell",
        "no 'By the end of this chapter you can' list",
        "section without a time (`## Title · ~N min`): 'A section'",
        "no discussion cell (`**Discuss.**`, tagged `discussion`)",
        "predict cell without a <details> answer: 'No answer here.'",
    ]
    text = tg.guide_markdown([path])
    assert "Core sections add up to 0 min." in text  # nothing stated, nothing to compare
    assert "class time: **not stated**" in text and "> **Not yet marked up:** no `**Class time:**" in text


def test_an_unreadable_notebook_is_reported_not_fatal(tmp_path):
    path = tmp_path / "97_broken.ipynb"
    path.write_text('{"cells": [', encoding="utf-8")  # a file caught half-written
    (problem,) = tg.problems(tg.read_chapter(path))
    assert problem.startswith("the notebook could not be read (")
    assert "> **Not yet marked up:** the notebook could not be read" in tg.guide_markdown([path])


# --------------------------------------------------------------------------------------------------- the series


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[p.stem for p in NOTEBOOK_PATHS])
def test_every_chapter_has_class_time_sections_predict_and_discussion(path):
    chapter = tg.read_chapter(path)
    assert tg.problems(chapter) == [], f"{path.name} lacks markers of the chapter conventions"
    assert MINUTES_STATED(chapter.class_time), chapter.class_time
    assert chapter.predicts and chapter.discussions


def MINUTES_STATED(class_time: str) -> bool:  # noqa: N802 - reads as a predicate in the assertion
    return bool(tg.MINUTES.search(class_time))


def test_committed_guide_is_what_the_notebooks_give():
    expected = tg.guide_markdown()
    committed = tg.GUIDE.read_text(encoding="utf-8")
    assert committed == expected, "notebooks/TEACHERS_GUIDE.md is stale: run `make notebooks` " \
                                  "(or `python tests/teachers_guide.py`)"


def test_the_guide_says_when_the_sections_do_not_add_up_to_the_class_time(tmp_path, monkeypatch):
    monkeypatch.setattr(tg, "EXERCISES", tmp_path)
    chapter = tg.read_chapter(sample_chapter(tmp_path))
    chapter.class_time = "about 50 min"
    assert "Core sections add up to 45 min (the chapter states 50 min: plan for the difference), optional parts " \
           "10 min." in tg.chapter_markdown(chapter)
