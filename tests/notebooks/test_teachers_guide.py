"""The teacher's guide (tests/teachers_guide.py -> notebooks/TEACHERS_GUIDE.md): read from the notebooks' markers
and the checkers' source, committed up to date, and every chapter marked up as the conventions require.

The Chinese edition: each twin that exists (notebooks/zh-CN/NN_*.ipynb; a chapter without one is not collected,
tests/test_translation.py requires them all) is read with its Chinese markers, must pass the same checks, must give
the guide the same facts as its English chapter (minutes, optional parts, lessons, prompts, exercises), and gives
notebooks/zh-CN/教师指南.md, which is committed up to date like the English guide."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import teachers_guide as tg
from slides import twin_paths

ROOT = Path(__file__).resolve().parents[2]
ENGLISH_PATHS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TWIN_PATHS = twin_paths()  # the Chinese twins that exist
NOTEBOOK_PATHS = ENGLISH_PATHS + TWIN_PATHS


def _id(path: Path) -> str:
    return path.stem if path.parent.name == "notebooks" else f"{path.parent.name}/{path.stem}"

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


def test_the_chinese_guide_lists_the_mistakes_as_the_checkers_print_them_in_chinese():
    from mha_lib.language import translations

    ch05 = importlib.import_module("mha_lib.exercises.ch05_causal_masking")
    found = tg.checker_mistakes(ROOT / "mha_lib" / "exercises" / "ch05_causal_masking.py", "zh-CN")
    chinese = translations("zh-CN").gettext(ch05.MASKED_DIAGONAL_NAN)
    assert chinese != ch05.MASKED_DIAGONAL_NAN and tg.tidy_message(chinese) in found["check_causal_weights"]
    english = tg.checker_mistakes(ROOT / "mha_lib" / "exercises" / "ch05_causal_masking.py")
    assert [len(m) for m in found.values()] == [len(m) for m in english.values()]  # the same mistakes


TRANSLATED_CHECKER = '''
from ..language import N_, gettext as _, ngettext
from . import compare, failed

SCALE = N_("you forgot the scaling: divide the scores by the square root of the head width.")
FIX = N_("concatenate them with torch.cat(..., dim=-1) so that each head keeps its own columns")


def check_thing(fn):
    if fn == 1:
        return failed("thing", _(SCALE))
    if fn == 2:
        return failed("thing", _("you added the heads' outputs: {advice}").format(advice=_(FIX)))
    if fn == 3:
        return failed("thing", _("with temperature={t}: {message}").format(t=2, message=verdict.message))
    if fn == 4:
        return failed("thing", ngettext("your function takes {n} argument, the exercise passes two of them",
                                        "your function takes {n} arguments, the exercise passes two of them",
                                        fn).format(n=fn))
    return compare("thing", fn, 0, mistakes={_("you stacked the heads into dim={dim}").format(dim=fn): 0})
'''


class _Catalog:
    """A stand-in for a compiled catalog: a few messages in Chinese, the rest missing (printed in English)."""

    WORDS = {"you forgot the scaling: divide the scores by the square root of the head width.": "你忘了缩放：把分数除以头维度的平方根。",
             "you added the heads' outputs: {advice}": "你把各个头的输出加起来了：{advice}",
             "concatenate them with torch.cat(..., dim=-1) so that each head keeps its own columns":
                 "用 torch.cat(..., dim=-1) 把它们拼接起来，每个头保留自己的列"}

    def gettext(self, message):
        return self.WORDS.get(message, message)

    def ngettext(self, singular, plural, n):
        return singular if n == 1 else plural

    def pgettext(self, context, message):
        return message


def test_messages_marked_for_translation_are_read_through_the_marks_and_shown_translated(tmp_path, monkeypatch):
    module = tmp_path / "ch98_marked.py"
    module.write_text(TRANSLATED_CHECKER, encoding="utf-8")
    assert tg.checker_mistakes(module) == {"check_thing": [
        "You forgot the scaling: divide the scores by the square root of the head width.",
        "You added the heads' outputs: concatenate them with torch.cat(..., dim=-1) so that each head keeps its own "
        "columns",
        "Your function takes … argument, the exercise passes two of them",
        "You stacked the heads into dim=…"]}  # the temperature case wraps another message: listed on its own
    monkeypatch.setattr(tg, "catalog", lambda language: _Catalog())
    assert tg.checker_mistakes(module, "zh-CN") == {"check_thing": [
        "你忘了缩放：把分数除以头维度的平方根。", "你把各个头的输出加起来了：用 torch.cat(..., dim=-1) 把它们拼接起来，每个头保留自己的列",
        "Your function takes … argument, the exercise passes two of them", "You stacked the heads into dim=…"]}


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
    assert "| Chapter 99 · A sample | about 45 min (+ 10 min optional) | 45 min | 55 min | 1 | 1 | 1 |" in text
    assert ("**The 45-minute path** — the core sections, 45 min:\n\n| clock | section | min |\n"
            "|---|---|---:|\n| 0:00–0:30 | 1. First | 30 |\n| 0:30–0:45 | 2. Second | 15 |\n") in text
    assert ("**The longer path** — every section in notebook order, the optional ones included, 55 min:\n\n"
            "| clock | section | min |\n|---|---|---:|\n| 0:00–0:30 | 1. First | 30 |\n"
            "| 0:30–0:45 | 2. Second | 15 |\n| 0:45–0:55 | Optional · The extra part | 10 |\n") in text
    assert "Core sections add up to 45 min, optional parts 10 min." in text
    assert "Pacing not yet consistent" not in text
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


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[_id(p) for p in NOTEBOOK_PATHS])
def test_every_chapter_has_class_time_sections_predict_and_discussion(path):
    chapter = tg.read_chapter(path)
    assert tg.problems(chapter) == [], f"{path.name} lacks markers of the chapter conventions"
    assert chapter.edition.minutes.search(chapter.class_time), chapter.class_time  # "42 min", "42 分钟"
    assert chapter.predicts and chapter.discussions


@pytest.mark.parametrize("language", ["en", *(["zh-CN"] if TWIN_PATHS else [])])
def test_committed_guide_is_what_the_notebooks_give(language):
    expected = tg.guide_markdown(language=language)
    guide = tg.GUIDES[language]
    committed = guide.read_text(encoding="utf-8") if guide.is_file() else ""
    assert committed == expected, f"{guide.relative_to(ROOT)} is stale: run `make notebooks` " \
                                  "(or `python tests/teachers_guide.py`)"


def test_the_guide_says_when_the_sections_do_not_add_up_to_the_class_time(tmp_path, monkeypatch):
    monkeypatch.setattr(tg, "EXERCISES", tmp_path)
    chapter = tg.read_chapter(sample_chapter(tmp_path))
    chapter.class_time = "about 50 min"
    assert "Core sections add up to 45 min (the chapter states 50 min: plan for the difference), optional parts " \
           "10 min." in tg.chapter_markdown(chapter)


# ------------------------------------------------------------------------------------------ pacing (issue 19 §4)


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[_id(p) for p in NOTEBOOK_PATHS])
def test_every_chapter_states_the_sum_of_its_section_times_and_each_lesson_fits_45_min(path):
    """The title cell's class time is the sum of the core sections and of the optional ones; a lesson's core
    path is at most 45 min; a two-lesson chapter has one `**End of lesson 1.**` cell, a one-lesson chapter none."""
    chapter = tg.read_chapter(path)
    assert tg.pacing_problems(chapter) == []


def pacing_chapter(tmp_path, class_time: str, sections: list[tuple[str, int]], *, break_before: int | None = None,
                   break_then: str = "## ") -> tg.Chapter:
    """A notebook with this class time and these `## title · ~N min` sections; with ``break_before``, an
    `**End of lesson 1.**` cell before that section (followed by ``break_then``)."""
    cells = [new_markdown_cell(f"# Chapter 96 · Paced\n\n**Class time:** {class_time}\n\nText.")]
    for index, (title, minutes) in enumerate(sections):
        if index == break_before:
            cells.append(new_markdown_cell("**End of lesson 1.**\n\nLesson 2 starts here; recap the first."))
            if not break_then.startswith("## "):
                cells.append(new_markdown_cell(break_then))
        cells += [new_markdown_cell(f"## {title} · ~{minutes} min\n\nText."), new_code_cell("1 + 1")]
    cells.append(new_markdown_cell("## Summary\n\n- done"))
    path = tmp_path / "96_paced.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    return tg.read_chapter(path)


def test_a_class_time_that_is_the_sum_of_the_sections_passes(tmp_path):
    chapter = pacing_chapter(tmp_path, "about 40 min (+ 12 min optional: the extra part,\nwrapped onto a second line)",
                             [("1. One", 25), ("Optional · Extra", 12), ("2. Two", 15)])
    assert chapter.class_time == "about 40 min (+ 12 min optional: the extra part, wrapped onto a second line)"
    assert tg.parse_class_time(chapter.class_time) == (1, 40, 12)
    assert tg.pacing_problems(chapter) == []


def test_sums_that_differ_from_the_class_time_fail_naming_chapter_stated_and_summed_minutes(tmp_path):
    chapter = pacing_chapter(tmp_path, "about 45 min (+ 10 min optional: the extra part)",
                             [("1. One", 25), ("Optional · Extra", 12), ("2. Two", 15)])
    assert tg.pacing_problems(chapter) == [
        "96_paced: the title cell states 45 min of core sections, but they add up to 40 min (25 + 15)",
        "96_paced: the title cell states 10 min of optional sections, but they add up to 12 min",
    ]
    with pytest.raises(AssertionError, match="states 45 min of core sections, but they add up to 40 min"):
        test_every_chapter_states_the_sum_of_its_section_times_and_each_lesson_fits_45_min(chapter.path)
    text = tg.chapter_markdown(chapter)
    assert "> **Pacing not yet consistent:** the title cell states 45 min of core sections, but they add up to " \
           "40 min (25 + 15); the title cell states 10 min of optional sections, but they add up to 12 min." in text


def test_optional_sections_without_a_stated_optional_time_fail(tmp_path):
    chapter = pacing_chapter(tmp_path, "about 40 min", [("1. One", 40), ("Optional · Extra", 5)])
    assert tg.pacing_problems(chapter) == [
        "96_paced: the title cell states 0 min of optional sections, but they add up to 5 min"]


def test_a_one_lesson_chapter_longer_than_45_min_fails(tmp_path):
    chapter = pacing_chapter(tmp_path, "about 50 min", [("1. One", 30), ("2. Two", 20)])
    assert tg.pacing_problems(chapter) == [
        "96_paced: the core sections add up to 50 min, more than one 45-min lesson: mark detail `Optional · ` or "
        "make it two lessons"]


def test_a_one_lesson_chapter_with_a_lesson_break_fails(tmp_path):
    chapter = pacing_chapter(tmp_path, "about 40 min", [("1. One", 20), ("2. Two", 20)], break_before=1)
    assert tg.pacing_problems(chapter) == [
        "96_paced: the title cell states one lesson, but the notebook has 1 `**End of lesson 1.**` cell(s): write "
        "`two lessons, about 40 min ...` or remove them"]


def test_a_class_time_off_the_convention_fails(tmp_path):
    chapter = pacing_chapter(tmp_path, "45 minutes or so", [("1. One", 45)])
    assert tg.pacing_problems(chapter) == [
        "96_paced: the class time '45 minutes or so' does not read `about C min (+ O min optional: ...)` or "
        "`two lessons, about C min (+ O min optional: ...)`"]


def test_two_lessons_each_within_45_min_pass_and_the_guide_gives_both_lessons(tmp_path):
    chapter = pacing_chapter(tmp_path, "two lessons, about 80 min (+ 5 min optional: more)",
                             [("1. One", 40), ("Optional · Aside", 5), ("2. Two", 20), ("3. Three", 20)],
                             break_before=2)
    assert tg.parse_class_time(chapter.class_time) == (2, 80, 5)
    assert [s.lesson for s in chapter.sections] == [1, 1, 2, 2]
    assert tg.pacing_problems(chapter) == []
    text = tg.guide_markdown([chapter.path])
    assert "| Chapter 96 · Paced | two lessons, about 80 min (+ 5 min optional) | 2 lessons: 40 + 40 min | " \
           "2 lessons: 45 + 40 min |" in text
    assert ("**The 45-minute path, lesson 2** — the core sections, 40 min:\n\n| clock | section | min |\n"
            "|---|---|---:|\n| 0:00–0:20 | 2. Two | 20 |\n| 0:20–0:40 | 3. Three | 20 |\n") in text
    assert ("**The longer path, lesson 1** — every section in notebook order, the optional ones included, 45 min:"
            "\n\n| clock | section | min |\n|---|---|---:|\n| 0:00–0:40 | 1. One | 40 |\n"
            "| 0:40–0:45 | Optional · Aside | 5 |\n") in text


def test_two_lessons_with_a_lesson_over_45_min_fail(tmp_path):
    chapter = pacing_chapter(tmp_path, "two lessons, about 80 min", [("1. One", 30), ("2. Two", 20), ("3. Three", 30)],
                             break_before=1)
    assert tg.pacing_problems(chapter) == ["96_paced: lesson 2's core sections add up to 50 min, more than 45"]


def test_two_lessons_without_exactly_one_lesson_break_fail(tmp_path):
    chapter = pacing_chapter(tmp_path, "two lessons, about 80 min", [("1. One", 40), ("2. Two", 40)])
    assert tg.pacing_problems(chapter) == [
        "96_paced: the title cell states two lessons, so it needs exactly one `**End of lesson 1.**` cell, found 0"]


def test_a_lesson_break_must_sit_right_before_a_section_heading(tmp_path):
    chapter = pacing_chapter(tmp_path, "two lessons, about 80 min", [("1. One", 40), ("2. Two", 40)],
                             break_before=1, break_then="Some words between.")
    assert tg.pacing_problems(chapter) == [
        "96_paced: the `**End of lesson 1.**` cell must come right before the `## ` heading of lesson 2's first "
        "section"]


# ------------------------------------------------------------------------------------------ the Chinese edition


def _facts(chapter: tg.Chapter) -> dict:
    """What the guide and the pacing check take from a chapter, less its words."""
    return {
        "class time (lessons, core, optional)": tg.parse_class_time(chapter.class_time, chapter.language),
        "sections (minutes, optional, lesson, talking points)": [
            (s.minutes, s.optional, s.lesson, len(s.notes)) for s in chapter.sections],
        "lesson breaks": chapter.lesson_breaks, "objectives": len(chapter.objectives),
        "predict prompts (answered)": [bool(p.answer) for p in chapter.predicts],
        "discussion prompts (answered)": [bool(p.answer) for p in chapter.discussions],
        "exercises (difficulty, minutes, checkers, solution)": [
            (e.difficulty, e.minutes, e.checkers, bool(e.solution)) for e in chapter.exercises],
    }


@pytest.mark.parametrize("twin", TWIN_PATHS, ids=[_id(p) for p in TWIN_PATHS])
def test_the_twin_gives_the_guide_the_same_facts_as_its_english_chapter(twin):
    """Same minutes per section, same optional parts and lessons, same prompts and exercises: the Chinese
    teacher plans the same lesson (the pacing sums of the twin are checked above, like the English ones)."""
    chapter = tg.read_chapter(twin)
    assert chapter.language == "zh-CN"
    english, chinese = _facts(tg.read_chapter(ROOT / "notebooks" / twin.name)), _facts(chapter)
    differ = {what: (english[what], chinese[what]) for what in english if english[what] != chinese[what]}
    assert not differ, f"{twin.name}: the twin differs from the English chapter in (English, twin): {differ}"


def chinese_chapter(tmp_path, class_time="约 40 分钟（另有 10 分钟选学：附加部分，\n分两行写）",
                    sections=(("1. 第一部分", 25, False), ("选学 · 附加部分", 10, True), ("2. 第二部分", 15, False)),
                    break_before=None) -> Path:
    """A synthetic twin in a zh-CN folder, written with every Chinese marker."""
    (tmp_path / "ch99_thing.py").write_text(CHECKER_SOURCE, encoding="utf-8")
    cells = [
        _tag(new_markdown_cell("[![在 Colab 中打开](x)](y)"), "colab-badge"),
        new_markdown_cell(f"# 第 99 章 · 示例\n\n引言。\n\n**课时：** {class_time}\n\n**学完本章，你能够**\n\n"
                          "- 做一件事；\n- 做另一件事，\n  分两行写。\n\n后面的文字。")]
    for index, (title, minutes, _optional) in enumerate(sections):
        if index == break_before:
            cells.append(new_markdown_cell("**第 1 节课结束。** 第 2 节课从这里开始，先复习第一节。"))
        heading = new_markdown_cell(f"## {title} · 约 {minutes} 分钟\n\n正文。")
        heading.metadata["teacher_notes"] = [f"先讲{title}。"]
        cells.append(heading)
        if index == 0:
            cells += [
                _tag(new_markdown_cell("**预测一下，再运行。** 形状是什么？\n\n<details><summary>答案</summary>\n\n"
                                       "`(2, 6, 4)`：两个头。\n\n</details>"), "predict"),
                new_code_cell("show(x.shape)"),
                new_markdown_cell("**预测一下。** 运行之前先想一想：会怎样？\n\n<details><summary>答案</summary>\n\n"
                                  "不变。\n</details>"),  # untagged: found by its opening words
                _tag(new_markdown_cell("**练习 99.1 · 动手写** · 难度 ★★☆ · 约 7 分钟\n\n写出 `f(x)`。"), "exercise"),
                new_code_cell("def f(x):\n    raise NotImplementedError"),
                new_code_cell("from mha_lib.exercises.ch99_thing import check_thing\n\ncheck_thing(f)"),
                _tag(new_markdown_cell("<details><summary>提示</summary>\n\n只在课上给的提示。\n</details>\n\n<details><summary>"
                                       "参考答案</summary>\n\n```python\ndef f(x):\n    return x  # 完成\n```\n\n"
                                       "</details>"), "solution"),
                _tag(new_markdown_cell("**讨论。** 为什么是两个？\n\n<details><summary>一种回答</summary>\n\n因为。\n"
                                       "</details>"), "discussion")]
    cells.append(new_markdown_cell("## 小结\n\n- 完成"))
    path = tmp_path / "zh-CN" / "99_sample.ipynb"
    path.parent.mkdir(exist_ok=True)
    nbformat.write(new_notebook(cells=cells), path)
    return path


def test_of_the_test_a_chinese_chapter_is_read_with_its_chinese_markers(tmp_path, monkeypatch):
    monkeypatch.setattr(tg, "EXERCISES", tmp_path)
    chapter = tg.read_chapter(chinese_chapter(tmp_path))
    assert chapter.language == "zh-CN" and chapter.title == "第 99 章 · 示例"
    assert chapter.class_time == "约 40 分钟（另有 10 分钟选学：附加部分，分两行写）"  # no space where the line wrapped
    assert tg.parse_class_time(chapter.class_time, "zh-CN") == (1, 40, 10)
    assert chapter.objectives == ["做一件事；", "做另一件事，分两行写。"]
    assert [(s.title, s.minutes, s.optional) for s in chapter.sections] == [
        ("1. 第一部分", 25, False), ("选学 · 附加部分", 10, True), ("2. 第二部分", 15, False)]
    assert [(p.question, p.answer) for p in chapter.predicts] == [("形状是什么？", "`(2, 6, 4)`：两个头。"),
                                                                  ("运行之前先想一想：会怎样？", "不变。")]
    assert [(p.question, p.answer) for p in chapter.discussions] == [("为什么是两个？", "因为。")]
    (exercise,) = chapter.exercises
    assert (exercise.title, exercise.difficulty, exercise.minutes, exercise.task, exercise.checkers) == (
        "99.1 · 动手写", "★★☆", 7, "写出 `f(x)`。", ["check_thing"])
    assert exercise.solution == "```python\ndef f(x):\n    return x  # 完成\n```"
    assert tg.problems(chapter) == [] and tg.pacing_problems(chapter) == []
    text = tg.guide_markdown([chapter.path])
    assert text.startswith("# 教师指南\n")
    assert "| 第 99 章 · 示例 | 约 40 分钟（另有 10 分钟选学） | 40 分钟 | 50 分钟 | 2 | 1 | 1 |" in text
    assert ("**45 分钟路线** —— 只含核心小节，共 40 分钟：\n\n| 时间 | 小节 | 分钟 |\n|---|---|---:|\n"
            "| 0:00–0:25 | 1. 第一部分 | 25 |\n| 0:25–0:40 | 2. 第二部分 | 15 |\n") in text
    assert "核心小节共 40 分钟，选学部分 10 分钟。" in text
    assert "**1. 第一部分**\n\n- 先讲1. 第一部分。" in text
    assert "   **答案。**\n\n   `(2, 6, 4)`：两个头。" in text and "   **一种回答。**\n\n   因为。" in text
    assert "#### 练习 99.1 · 动手写（★★☆ · 约 7 分钟）" in text and "**参考答案。**\n\n```python" in text
    assert "**学生容易卡住的地方** —— `check_thing` 能识别并告诉学生的错误：" in text
    assert "<details" not in text and "只在课上给的提示" not in text  # hints stay in class
    for english in ("Class time", "Timing", "Exercise", "Solution", "lesson", " min"):
        assert english not in text, english


def test_of_the_test_the_chinese_pacing_check_fails_like_the_english_one(tmp_path):
    chapter = tg.read_chapter(chinese_chapter(tmp_path, class_time="约 45 分钟（另有 12 分钟选学：附加部分）"))
    assert tg.pacing_problems(chapter) == [
        "99_sample: 标题单元格写的核心小节是 45 分钟，但各小节加起来是 40 分钟（25 + 15）",
        "99_sample: 标题单元格写的选学小节是 12 分钟，但各小节加起来是 10 分钟"]
    with pytest.raises(AssertionError, match="标题单元格写的核心小节是 45 分钟"):
        test_every_chapter_states_the_sum_of_its_section_times_and_each_lesson_fits_45_min(chapter.path)
    assert "> **课时尚未对齐：** 标题单元格写的核心小节是 45 分钟" in tg.chapter_markdown(chapter)
    english_form = tg.read_chapter(chinese_chapter(tmp_path, class_time="about 40 min (+ 10 min optional: x)"))
    assert tg.pacing_problems(english_form) == [
        "99_sample: 课时 'about 40 min (+ 10 min optional: x)' 不符合 `约 C 分钟（另有 O 分钟选学：…）` 或 "
        "`两节课，约 C 分钟（另有 O 分钟选学：…）` 的写法"]


def test_of_the_test_two_chinese_lessons(tmp_path):
    sections = (("1. 一", 40, False), ("选学 · 旁支", 5, True), ("2. 二", 20, False), ("3. 三", 25, False))
    chapter = tg.read_chapter(chinese_chapter(tmp_path, "两节课，约 85 分钟（另有 5 分钟选学：旁支）", sections,
                                              break_before=2))
    assert tg.parse_class_time(chapter.class_time, "zh-CN") == (2, 85, 5)
    assert [s.lesson for s in chapter.sections] == [1, 1, 2, 2]
    assert tg.pacing_problems(chapter) == []
    text = tg.guide_markdown([chapter.path])
    assert "| 两节课，约 85 分钟（另有 5 分钟选学） | 两节课：40 + 45 分钟 | 两节课：45 + 45 分钟 |" in text
    assert "**45 分钟路线，第 2 节课** —— 只含核心小节，共 45 分钟：" in text
    assert "第 1 节课在 `**第 1 节课结束。**` 单元格处结束；第 2 节课重新计时。" in text
    longer = tg.read_chapter(chinese_chapter(tmp_path, "两节课，约 90 分钟（另有 5 分钟选学：旁支）", sections[:3] + (
        ("3. 三", 30, False),), break_before=2))
    assert tg.pacing_problems(longer) == ["99_sample: 第 2 节课的核心小节加起来 50 分钟，超过了 45 分钟"]
