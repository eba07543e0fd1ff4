"""The teacher's guide, generated from the notebooks: ``notebooks/TEACHERS_GUIDE.md``, and the Chinese edition's
from its twins: ``notebooks/zh-CN/教师指南.md``.

    python tests/teachers_guide.py            # write the guides and list what each chapter still lacks
    python tests/teachers_guide.py --check    # exit 1 when a committed guide is stale or a chapter lacks a marker

``make notebooks`` writes it after executing the notebooks (``tests/refresh_notebooks.py`` calls
``write_guide``). Everything comes from the markers of the chapter conventions (issue 14):

* the title cell: ``**Class time:** about C min (+ O min optional: ...)`` (or ``two lessons, about C min ...``)
  and the "By the end of this chapter you can" list;
* ``## Title · ~N min`` section headings (``## Optional · Title · ~N min`` for an optional one), and the
  ``teacher_notes`` list in the heading cell's metadata; in a two-lesson chapter, the ``**End of lesson 1.**`` cell;
* ``predict`` and ``discussion`` cells with their ``<details>`` answers;
* ``exercise`` cells (``**Exercise N.k · title** · difficulty ★☆☆ · ~M min``), the ``check_*`` calls after them,
  and the ``<details><summary>Solution</summary>`` of their ``solution`` cell;
* where students stumble: the mistake messages each checker in ``mha_lib/exercises/chNN_*.py`` recognises, read
  from the module's source with ``ast`` (the keys of its ``mistakes`` dicts and the messages it passes to
  ``failed``), so the guide never imports, runs or depends on the checkers' internals.

A chapter that lacks a marker still gets its part of the guide; ``problems(chapter)`` names what is missing, and
``tests/notebooks/test_teachers_guide.py`` requires none. ``pacing_problems(chapter)`` checks the pacing convention (issue 19
§4): the stated core and optional minutes are the sums of the sections' times, a lesson's core path is at most
45 min, and a two-lesson chapter marks where lesson 1 ends. For each chapter the guide gives both paths with clock
times: the 45-minute path (core sections; per lesson in a two-lesson chapter) and the longer one (every section in
notebook order).

The Chinese guide comes from the same code: ``EDITIONS`` holds, per language, the markers a twin writes
(``**课时：** 约 42 分钟（另有 35 分钟选学：…）``, ``## 3. 标题 · 约 9 分钟``, ``## 选学 · 标题 · 约 14 分钟``,
``**第 1 节课结束。**``, ``**预测一下，再运行。**``, ``**练习 5.1 · 标题** · 难度 ★☆☆ · 约 5 分钟``, …) and the guide's
own words; the checkers' mistake messages are read from the same source and translated by ``mha_lib``'s catalog.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/slides.py, when imported from elsewhere

from slides import MARKERS, TWIN_FOLDERS, headings, language_of  # noqa: E402  (one reading of headings and markers)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
EXERCISES = ROOT / "mha_lib" / "exercises"
GUIDE = NOTEBOOKS / "TEACHERS_GUIDE.md"
GUIDES = {"en": GUIDE, "zh-CN": TWIN_FOLDERS["zh-CN"] / "教师指南.md"}

# the class time runs to the first blank line (a long list of optional topics wraps)
CLASS_TIME = re.compile(r"^\*\*Class time:\*\*\s*(.+?)\s*(?:\n[ \t]*\n|\Z)", re.MULTILINE | re.DOTALL)
# the pacing convention: "about C min (+ O min optional: topics)", or "two lessons, about C min ..."
STATED_TIME = re.compile(r"^(?P<two>two lessons, )?about (?P<core>\d+) min"
                         r"(?: \(\+ (?P<optional>\d+) min optional(?:: (?P<topics>.+))?\))?$")
LESSON_BREAK = "**End of lesson 1.**"  # the first line of the markdown cell that ends lesson 1
LESSON_MINUTES = 45
MINUTES = re.compile(r"(\d+)\s*min")
OBJECTIVES_INTRO = re.compile(r"By the end of this chapter you can", re.IGNORECASE)
SECTION = re.compile(r"^(.+?) · ~(\d+) min$")  # the text of a `## ` heading (conventions point 3)
EXERCISE_HEADER = re.compile(r"^\*\*Exercise\s+(.+?)\*\*(.*)$")
DIFFICULTY = re.compile(r"difficulty\s*([★☆]+)")
DETAILS = re.compile(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.DOTALL | re.IGNORECASE)
CHECK_CALL = re.compile(r"\b(check_\w+)\(")
EXERCISE_IMPORT = re.compile(r"mha_lib\.exercises\.(\w+)")
PREFIXES = {name: MARKERS["en"][name] for name in ("predict", "discussion")}  # the opening words (tuples)
GENERIC_MESSAGES = ("expected a torch.tensor", "your function raised", "not attempted yet", "wrong shape",
                    "right shape", "correct")  # said of any exercise: not a mistake the checker recognises
UNKNOWN = "\ufffc"  # a value the checker fills in at run time (printed as "…")


@dataclass(frozen=True)
class Edition:
    """How one language writes the chapter conventions' markers (what the guide reads)."""

    class_time: re.Pattern  # the title cell's class time, to the first blank line
    stated_time: re.Pattern  # the pacing convention, with groups two, core, optional, topics
    lesson_break: str  # the first line of the markdown cell that ends lesson 1
    minutes: re.Pattern
    objectives_intro: re.Pattern
    section: re.Pattern  # the text of a `## ` heading with its time (conventions point 3)
    optional: str  # an optional section's title starts with this (case ignored)
    summary: str  # the untimed summary section's title starts with this
    exercise_header: re.Pattern
    difficulty: re.Pattern
    prefixes: dict  # predict / discussion: the opening words
    solutions: tuple  # the <summary> of a solution's <details> block
    list_topics: re.Pattern  # the class time without its list of optional parts (for the overview table)
    join: str  # what a line break inside a wrapped list item or class time becomes


EDITIONS = {
    "en": Edition(
        class_time=CLASS_TIME, stated_time=STATED_TIME, lesson_break=LESSON_BREAK, minutes=MINUTES,
        objectives_intro=OBJECTIVES_INTRO, section=SECTION, optional="optional", summary="summary",
        exercise_header=EXERCISE_HEADER, difficulty=DIFFICULTY, prefixes=PREFIXES, solutions=("solution",),
        list_topics=re.compile(r"(\(\+ [^:)]*):[^)]*\)"), join=" "),
    "zh-CN": Edition(
        class_time=re.compile(r"^\*\*课时：\*\*\s*(.+?)\s*(?:\n[ \t]*\n|\Z)", re.MULTILINE | re.DOTALL),
        stated_time=re.compile(r"^(?P<two>两节课，)?约 ?(?P<core>\d+) ?分钟"
                               r"(?:（另有 ?(?P<optional>\d+) ?分钟选学(?:：(?P<topics>.+))?）)?$"),
        lesson_break="**第 1 节课结束。**", minutes=re.compile(r"(\d+)\s*分钟"),
        objectives_intro=re.compile(r"学完本章，你能够"), section=re.compile(r"^(.+?) · 约 ?(\d+) ?分钟$"),
        optional="选学", summary="小结", exercise_header=re.compile(r"^\*\*练习\s*(.+?)\*\*(.*)$"),
        difficulty=re.compile(r"难度\s*([★☆]+)"),
        prefixes={name: MARKERS["zh-CN"][name] for name in ("predict", "discussion")},
        solutions=("参考答案", "参考解答"), list_topics=re.compile(r"(（另有[^：）]*)：[^）]*）"), join=""),
}


# --------------------------------------------------------------------------------------------------- checkers


def catalog(language: str):
    """``mha_lib``'s message catalog of ``language`` (its compiled ``.mo``, read with the stdlib, not through
    ``mha_lib``): what a checker prints in that language. English: the messages as written."""
    import gettext

    if language == "en":
        return gettext.NullTranslations()
    return gettext.translation("mha_lib", localedir=str(ROOT / "mha_lib" / "locale"),
                               languages=[language.replace("-", "_")], fallback=True)


class _HelperCall(str):
    """A call of another function of the module, whose messages count for the caller too."""


GETTEXT = {"_", "gettext", "N_"}  # mha_lib.language's marks: the message shown is the catalog's translation


def _text(node, constants: dict, say) -> tuple[str, str] | None:
    """The text of a message expression (a string, a module constant, an f-string, ``+``, ``.format``, a message
    marked for translation: ``_("...")``, ``N_("...")``, ``ngettext``, ``pgettext``), with run-time values shown
    as "…": (the English, what the student reads: its translation by the catalog ``say``); None for anything
    else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.JoinedStr):
        english, shown = [], []
        for value in node.values:
            if isinstance(value, ast.Constant):
                english.append(str(value.value))
                shown.append(str(value.value))
            elif _is_nested_message(value.value):
                return None  # "in case X: {verdict.message}" wraps messages that are listed on their own
            else:
                inner = _text(value.value, constants, say) if isinstance(value, ast.FormattedValue) else None
                english.append(inner[0] if inner is not None else UNKNOWN)
                shown.append(inner[1] if inner is not None else UNKNOWN)
        return "".join(english), "".join(shown)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, constants, say), _text(node.right, constants, say)
        if left is None and right is None:
            return None
        left, right = left or ("", ""), right or ("", "")
        return left[0] + right[0], left[1] + right[1]  # MESSAGE + a fix chosen at run time: the message alone
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        # _("... {advice} ... {shape}").format(advice=_(FIX), shape=x.shape): what an f-string does, written so
        # that the catalog can translate it (the keyword values known here are filled in, the others are "…")
        base = _text(node.func.value, constants, say)
        if base is None:
            return None
        values = {}
        for keyword in node.keywords:
            if keyword.arg is not None and _is_nested_message(keyword.value):
                return None  # "in case X: {message}" wraps messages that are listed on their own
            if keyword.arg is not None:
                values[keyword.arg] = _text(keyword.value, constants, say)

        def fill(text: str, index: int) -> str:
            def field(match: re.Match) -> str:
                value = values.get(re.split(r"[.\[!:]", match.group(1), maxsplit=1)[0])
                return value[index] if value is not None else UNKNOWN
            return re.sub(r"\{([^{}]*)\}", field, text)
        return fill(base[0], 0), fill(base[1], 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        texts = [_text(argument, constants, say) for argument in node.args]
        if node.func.id in GETTEXT and len(node.args) == 1 and texts[0] is not None:
            translated = say.gettext(texts[0][0])
            return texts[0][0], translated if translated != texts[0][0] else texts[0][1]
        if node.func.id == "ngettext" and len(texts) >= 2 and None not in texts[:2]:
            return texts[0][0], say.ngettext(texts[0][0], texts[1][0], 1)
        if node.func.id == "pgettext" and len(texts) == 2 and None not in texts:
            return texts[1][0], say.pgettext(texts[0][0], texts[1][0])
    return None


def _is_nested_message(node) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "message" in name.lower() or "verdict" in name.lower()


def _is_message(text: tuple[str, str] | str | None) -> bool:
    """Whether a text (its English) reads as a mistake message, not a generic verdict or a fragment."""
    if text is None:
        return False
    text = text if isinstance(text, str) else text[0]
    letters = re.sub(r"[^A-Za-z]", "", text.replace(UNKNOWN, ""))
    if text.count(UNKNOWN) >= 4:  # mostly run-time numbers: a generic verdict
        return False
    return len(letters) >= 15 and " " in text.strip() and not text.strip().lower().startswith(GENERIC_MESSAGES)


def _messages_in(function: ast.FunctionDef, constants: dict, helpers: set[str], say):
    """(position, message or helper call) for every mistake message and helper call in ``function``; a message is
    the text the student reads (``say``'s translation)."""
    found = []
    for node in ast.walk(function):
        where = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        if isinstance(node, ast.Dict):  # a mistakes dict: {message: wrong answer, ...}
            keys = [_text(key, constants, say) for key in node.keys if key is not None]
            if keys and all(_is_message(key) for key in keys):
                found += [((key_node.lineno, key_node.col_offset), key[1])
                          for key_node, key in zip([k for k in node.keys if k is not None], keys)]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):  # mistakes[message] = ...
            key = _text(node.slice, constants, say)
            if _is_message(key):
                found.append((where, key[1]))
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name in helpers:
                found.append((where, _HelperCall(name)))
            index = {"failed": 1, "Feedback": 2}.get(name)
            if index is not None and len(node.args) > index:
                argument = node.args[index]
                options = [argument.body, argument.orelse] if isinstance(argument, ast.IfExp) else [argument]
                found += [(where, text[1]) for text in (_text(option, constants, say) for option in options)
                          if _is_message(text)]
    return sorted(found, key=lambda item: item[0])


def checker_mistakes(module: Path, language: str = "en") -> dict[str, list[str]]:
    """For each ``check_*`` function of an exercises module, the mistake messages it can report, in source
    order (read with ``ast``; the module is not imported), as a student reads them in ``language`` (a message
    marked for translation comes from ``mha_lib``'s catalog; a missing translation stays English)."""
    say = catalog(language)
    tree = ast.parse(module.read_text(encoding="utf-8"))
    constants: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            text = _text(node.value, constants, say)
            if text is not None:
                constants[node.targets[0].id] = text
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    helpers = set(functions)

    def collect(name: str, seen: set[str]) -> list[str]:
        messages = []
        for _, item in _messages_in(functions[name], constants, helpers, say):
            if isinstance(item, _HelperCall):
                if item not in seen:
                    messages += collect(item, seen | {item})
            else:
                messages.append(item)
        return messages

    result = {}
    for name in functions:
        if name.startswith("check_"):
            unique = list(dict.fromkeys(tidy_message(m) for m in collect(name, {name})))
            result[name] = unique
    return result


def tidy_message(message: str) -> str:
    message = " ".join(message.replace(UNKNOWN, "…").split())
    return message[0].upper() + message[1:] if message else message


# --------------------------------------------------------------------------------------------------- notebooks


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _role(cell, name: str, edition: Edition = EDITIONS["en"]) -> bool:
    if cell.get("cell_type") != "markdown":
        return False
    text = _source(cell).lstrip()
    if name in cell.get("metadata", {}).get("tags", []):
        return True
    if name == "exercise":
        return bool(edition.exercise_header.match(text))
    if name == "solution":
        return any(summary.strip().lower() in edition.solutions for summary, _ in DETAILS.findall(text))
    return text.startswith(edition.prefixes[name])


def _details(text: str, summary: str | tuple | None = None) -> tuple[str, str]:
    """(the text outside the ``<details>`` blocks, the body of the first block whose summary starts with
    ``summary`` (or one of them) — or of the first block when ``summary`` is None)."""
    body = ""
    summaries = (summary,) if isinstance(summary, str) else summary
    for found_summary, found_body in DETAILS.findall(text):
        if summaries is None or found_summary.strip().lower().startswith(tuple(s.lower() for s in summaries)):
            body = found_body.strip()
            break
    return DETAILS.sub("", text).strip(), body


def _unwrap(text: str, edition: Edition) -> str:
    """A wrapped paragraph on one line: each run of white space becomes one space, except that a line break
    between two Chinese characters disappears (Chinese has no spaces between words)."""
    if not edition.join:
        text = re.sub(r"(?<=[^\x00-\x7f])[ \t]*\n\s*(?=[^\x00-\x7f])", "", text)
    return " ".join(text.split())


@dataclass
class Section:
    title: str
    minutes: int | None
    optional: bool
    notes: list[str]
    lesson: int = 1  # 2 after the `**End of lesson 1.**` cell (`**第 1 节课结束。**`)


@dataclass
class Prompt:
    section: str
    question: str
    answer: str


@dataclass
class Exercise:
    section: str
    title: str
    difficulty: str
    minutes: int | None
    task: str
    checkers: list[str] = field(default_factory=list)
    solution: str = ""


@dataclass
class Chapter:
    path: Path
    title: str = ""
    class_time: str = ""
    objectives: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    untimed: list[str] = field(default_factory=list)
    predicts: list[Prompt] = field(default_factory=list)
    discussions: list[Prompt] = field(default_factory=list)
    exercises: list[Exercise] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    lesson_breaks: list[bool] = field(default_factory=list)  # per `**End of lesson 1.**` cell: a `## ` follows?
    error: str = ""  # the notebook could not be read (a half-written file during someone's refresh)
    language: str = "en"  # "zh-CN" for a twin: the markers it is read with, and the words of its guide

    @property
    def edition(self) -> Edition:
        return EDITIONS[self.language]

    @property
    def number(self) -> str:
        return self.path.stem.split("_", 1)[0]

    @property
    def core_minutes(self) -> int:
        return sum(section.minutes or 0 for section in self.sections if not section.optional)

    @property
    def optional_minutes(self) -> int:
        return sum(section.minutes or 0 for section in self.sections if section.optional)

    @property
    def lessons(self) -> int:
        """2 when the title cell says "two lessons" (or, without a readable class time, a lesson marker is there)."""
        stated = parse_class_time(self.class_time, self.language)
        return stated[0] if stated else 1 + bool(self.lesson_breaks)

    def lesson_sections(self, lesson: int, *, optional: bool = False) -> list[Section]:
        """The sections of one lesson in notebook order: the core ones, and with ``optional`` the optional too."""
        return [s for s in self.sections if s.lesson == lesson and (optional or not s.optional)]


def parse_class_time(class_time: str, language: str = "en") -> tuple[int, int, int] | None:
    """(lessons, core minutes, optional minutes) of a class time that follows the convention, else None
    (``language``: how the class time is written, "about 42 min (+ 35 min optional: ...)" or
    "约 42 分钟（另有 35 分钟选学：…）")."""
    match = EDITIONS[language].stated_time.match(class_time)
    if not match:
        return None
    return 2 if match.group("two") else 1, int(match.group("core")), int(match.group("optional") or 0)


def _objectives(text: str, edition: Edition = EDITIONS["en"]) -> list[str]:
    match = edition.objectives_intro.search(text)
    if not match:
        return []
    items: list[str] = []
    for line in text[match.end():].splitlines()[1:]:
        item = re.match(r"^\s*(?:[-*]|\d+\.)\s+(.*)$", line)
        if item:
            items.append(item.group(1).strip())
        elif line.strip() and items and line.startswith((" ", "\t")):
            items[-1] = _unwrap(items[-1] + "\n" + line.strip(), edition)  # a wrapped list item
        elif line.strip() and items:
            break
    return items


def read_chapter(path: Path, language: str | None = None) -> Chapter:
    """Everything the guide says about one notebook; missing markers leave fields empty (see ``problems``).
    ``language``: the edition's markers to read (default: ``slides.language_of(path)``, "zh-CN" for a twin)."""
    import nbformat

    chapter = Chapter(path, language=language or language_of(path))
    edition = chapter.edition
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # noqa: BLE001 - report it in the guide and the refresh log, never crash a refresh
        chapter.error = f"{type(error).__name__}: {error}"
        return chapter
    cells = nb.cells
    section = ""
    current: Exercise | None = None
    lesson = 1
    for index, cell in enumerate(cells):
        text = _source(cell)
        if cell.cell_type == "markdown" and text.strip().startswith(edition.lesson_break):
            following = cells[index + 1] if index + 1 < len(cells) else None
            chapter.lesson_breaks.append(following is not None and following.cell_type == "markdown"
                                         and _source(following).lstrip().startswith("## "))
            lesson += 1
        if cell.cell_type == "markdown":
            for _, level, title in headings(text):
                if level == 1 and not chapter.title:
                    chapter.title = title
                    match = edition.class_time.search(text)
                    chapter.class_time = _unwrap(match.group(1), edition) if match else ""
                    chapter.objectives = _objectives(text, edition)
                elif level == 2:
                    current = None
                    timed = edition.section.match(title)
                    section = timed.group(1) if timed else title
                    if title.lower().startswith(edition.summary):
                        continue
                    if not timed:
                        chapter.untimed.append(title)
                    notes = cell.metadata.get("teacher_notes", [])
                    chapter.sections.append(Section(
                        title=section, minutes=int(timed.group(2)) if timed else None,
                        optional=section.lower().startswith(edition.optional),
                        notes=[str(note) for note in notes] if isinstance(notes, list) else [str(notes)],
                        lesson=lesson))
            for name, bucket in (("predict", chapter.predicts), ("discussion", chapter.discussions)):
                if _role(cell, name, edition):
                    question, answer = _details(text)
                    opening = next((p for p in edition.prefixes[name] if question.startswith(p)), "")
                    bucket.append(Prompt(section, question.removeprefix(opening).strip(), answer))
            if _role(cell, "exercise", edition):
                lines = text.strip().splitlines()
                header = edition.exercise_header.match(lines[0].strip()) if lines else None
                rest = header.group(2) if header else ""
                difficulty = edition.difficulty.search(rest)
                minutes = edition.minutes.search(rest)
                current = Exercise(
                    section=section, title=header.group(1).strip() if header else lines[0].strip("*# "),
                    difficulty=difficulty.group(1) if difficulty else "",
                    minutes=int(minutes.group(1)) if minutes else None,
                    task=_details("\n".join(lines[1:]))[0])
                chapter.exercises.append(current)
            if current is not None and _role(cell, "solution", edition) and not current.solution:
                current.solution = _details(text, edition.solutions)[1]
        elif cell.cell_type == "code":
            chapter.modules += [m for m in EXERCISE_IMPORT.findall(text) if m not in chapter.modules]
            if current is not None:
                current.checkers += [c for c in CHECK_CALL.findall(text) if c not in current.checkers]
    return chapter


# The guide's own words, and what problems() and pacing_problems() say, in each language (format strings).
WORDS = {
    "en": {
        # problems(): the markers a chapter lacks
        "unreadable": "the notebook could not be read ({error})",
        "no_title": "no `# ` title heading",
        "no_class_time": "no `**Class time:** about N min` line in the title cell",
        "no_objectives": "no 'By the end of this chapter you can' list",
        "no_sections": "no `## ` sections",
        "untimed": "section without a time (`## Title · ~N min`): {title!r}",
        "no_predict": "no predict cell (`**Predict before you run.**`, tagged `predict`)",
        "no_discussion": "no discussion cell (`**Discuss.**`, tagged `discussion`)",
        "predict": "predict", "discussion": "discussion",
        "no_answer": "{kind} cell without a <details> answer: {question!r}",
        "no_solution": "exercise {title!r} has no solution cell",
        "no_difficulty": "exercise {title!r} lacks 'difficulty ★☆☆ · ~M min'",
        # pacing_problems(), each after "<chapter>: "
        "none": "(none)",
        "off_convention": "the class time {class_time!r} does not read `about C min (+ O min optional: ...)` or "
                          "`two lessons, about C min (+ O min optional: ...)`",
        "section_untimed": "section {title!r} has no time (`· ~N min`), so the sums leave it out",
        "core_differs": "the title cell states {core} min of core sections, but they add up to {summed} min ({terms})",
        "optional_differs": "the title cell states {optional} min of optional sections, but they add up to "
                            "{summed} min",
        "one_lesson_break": "the title cell states one lesson, but the notebook has {breaks} `{lesson_break}` "
                            "cell(s): write `two lessons, about {core} min ...` or remove them",
        "too_long": "the core sections add up to {summed} min, more than one {limit}-min lesson: mark detail "
                    "`Optional · ` or make it two lessons",
        "two_lessons_breaks": "the title cell states two lessons, so it needs exactly one `{lesson_break}` cell, "
                              "found {breaks}",
        "break_place": "the `{lesson_break}` cell must come right before the `## ` heading of lesson 2's first "
                       "section",
        "lesson_too_long": "lesson {lesson}'s core sections add up to {minutes} min, more than {limit}",
        "lesson_empty": "lesson {lesson} has no core section",
        # the guide
        "guide_title": "# Teacher's guide",
        "guide_intro": [
            "Generated from the notebooks by `tests/teachers_guide.py` (`make notebooks` rewrites it): do not edit by "
            "hand. For each chapter: the objectives, the timing of each section, the talking points, the predict and "
            "discussion prompts with their answers, and for each exercise the mistakes its checker recognises and "
            "the solution. The slides of every chapter come from the same notebooks: `make slides`.",
            "The 45-minute path takes the core sections only; the longer path adds the optional sections, in "
            "notebook order. Each chapter's timing table gives both with clock times.",
        ],
        "overview_header": ["| chapter | class time | 45-minute path | longer path | predict | discuss | exercises |",
                            "|---|---|---:|---:|---:|---:|---:|"],
        "path_header": ["| clock | section | min |", "|---|---|---:|"],
        "minutes": "{minutes} min", "lessons": "{count} lessons: {minutes} min",
        "no_optional": "There are no optional sections: the longer path is the same.",
        "longer_what": "every section in notebook order, the optional ones included", "core_what": "the core sections",
        "longer_name": "The longer path", "core_name": "The {limit}-minute path", "lesson": ", lesson {lesson}",
        "path": "**{name}** — {what}, {minutes} min:",
        "lesson_ends": "Lesson 1 ends at the `{lesson_break}` cell; the clock starts again at lesson 2.",
        "optional_parts": ", optional parts {minutes} min",
        "differs": " (the chapter states {stated}: plan for the difference)",
        "core_sum": "Core sections add up to {minutes} min{differs}{optional}.",
        "pacing": "> **Pacing not yet consistent:** {problems}.", "separator": "; ",
        "notebook": "Notebook `{name}` · class time: {class_time}", "not_stated": "**not stated**",
        "not_marked": "> **Not yet marked up:** {problems}.",
        "objectives": "**Objectives.** By the end of the chapter students can",
        "timing": "### Timing", "talking_points": "### Talking points",
        "predicts": ("Predict before you run", "Answer"), "discussions": ("Discussion questions", "One answer"),
        "label": "   **{label}.**",
        "exercises": "### Exercises", "exercise": "#### Exercise {title}", "exercise_details": " ({details})",
        "exercise_minutes": "~{minutes} min",
        "stumble_told": "**Where students stumble** — what `{checker}` recognises and tells them:",
        "stumble": "**Where students stumble** — what `{checker}` recognises:",
        "solution": "**Solution.**",
    },
    "zh-CN": {
        "unreadable": "无法读取这个 notebook（{error}）",
        "no_title": "没有 `# ` 标题",
        "no_class_time": "标题单元格里没有 `**课时：** 约 N 分钟` 这一行",
        "no_objectives": "没有“学完本章，你能够”列表",
        "no_sections": "没有 `## ` 小节",
        "untimed": "小节没有标注时间（`## 标题 · 约 N 分钟`）：{title!r}",
        "no_predict": "没有预测单元格（`**预测一下，再运行。**`，标签 `predict`）",
        "no_discussion": "没有讨论单元格（`**讨论。**`，标签 `discussion`）",
        "predict": "预测", "discussion": "讨论",
        "no_answer": "{kind}单元格没有 <details> 答案：{question!r}",
        "no_solution": "练习 {title!r} 没有参考答案单元格",
        "no_difficulty": "练习 {title!r} 缺少“难度 ★☆☆ · 约 M 分钟”",
        "none": "（无）",
        "off_convention": "课时 {class_time!r} 不符合 `约 C 分钟（另有 O 分钟选学：…）` 或 "
                          "`两节课，约 C 分钟（另有 O 分钟选学：…）` 的写法",
        "section_untimed": "小节 {title!r} 没有标注时间（`· 约 N 分钟`），所以没有计入总和",
        "core_differs": "标题单元格写的核心小节是 {core} 分钟，但各小节加起来是 {summed} 分钟（{terms}）",
        "optional_differs": "标题单元格写的选学小节是 {optional} 分钟，但各小节加起来是 {summed} 分钟",
        "one_lesson_break": "标题单元格写的是一节课，但 notebook 里有 {breaks} 个 `{lesson_break}` 单元格："
                            "请写成 `两节课，约 {core} 分钟…`，或者删掉它们",
        "too_long": "核心小节加起来 {summed} 分钟，超过了一节 {limit} 分钟的课：把细节标为 `选学 · `，或者分成两节课",
        "two_lessons_breaks": "标题单元格写的是两节课，所以需要恰好一个 `{lesson_break}` 单元格，现在有 {breaks} 个",
        "break_place": "`{lesson_break}` 单元格必须紧挨在第 2 节课第一个小节的 `## ` 标题之前",
        "lesson_too_long": "第 {lesson} 节课的核心小节加起来 {minutes} 分钟，超过了 {limit} 分钟",
        "lesson_empty": "第 {lesson} 节课没有核心小节",
        "guide_title": "# 教师指南",
        "guide_intro": [
            "本指南由 `tests/teachers_guide.py` 从中文版各章（`notebooks/zh-CN/`）生成，`make notebooks` 会重写它，"
            "请不要手工编辑。每一章包括：学习目标、各小节的时间、讲解要点、“预测一下”和“讨论”题及其答案，"
            "以及每道练习的检查器能识别的错误和参考答案。各章的幻灯片也由同一批 notebook 生成：`make slides`"
            "（中文幻灯片在 `build/slides/zh-CN/`）。英文版：[TEACHERS_GUIDE.md](../TEACHERS_GUIDE.md)。",
            "45 分钟路线只包含核心小节；完整路线按 notebook 中的顺序加上选学小节。每章的时间表给出这两条路线，"
            "并标出每个小节的起止时间。",
        ],
        "overview_header": ["| 章 | 课时 | 45 分钟路线 | 完整路线 | 预测 | 讨论 | 练习 |",
                            "|---|---|---:|---:|---:|---:|---:|"],
        "path_header": ["| 时间 | 小节 | 分钟 |", "|---|---|---:|"],
        "minutes": "{minutes} 分钟", "lessons": "{count}节课：{minutes} 分钟", "count": {2: "两"},
        "no_optional": "本章没有选学小节：完整路线与 45 分钟路线相同。",
        "longer_what": "按 notebook 中的顺序包含所有小节（含选学小节）", "core_what": "只含核心小节",
        "longer_name": "完整路线", "core_name": "{limit} 分钟路线", "lesson": "，第 {lesson} 节课",
        "path": "**{name}** —— {what}，共 {minutes} 分钟：",
        "lesson_ends": "第 1 节课在 `{lesson_break}` 单元格处结束；第 2 节课重新计时。",
        "optional_parts": "，选学部分 {minutes} 分钟",
        "differs": "（本章标注的是 {stated}：请按差额安排）",
        "core_sum": "核心小节共 {minutes} 分钟{differs}{optional}。",
        "pacing": "> **课时尚未对齐：** {problems}。", "separator": "；",
        "notebook": "Notebook `{name}` · 课时：{class_time}", "not_stated": "**未标注**",
        "not_marked": "> **标记尚不完整：** {problems}。",
        "objectives": "**学习目标。** 学完本章，学生能够",
        "timing": "### 时间安排", "talking_points": "### 讲解要点",
        "predicts": ("先预测，再运行", "答案"), "discussions": ("讨论题", "一种回答"),
        "label": "   **{label}。**",
        "exercises": "### 练习", "exercise": "#### 练习 {title}", "exercise_details": "（{details}）",
        "exercise_minutes": "约 {minutes} 分钟",
        "stumble_told": "**学生容易卡住的地方** —— `{checker}` 能识别并告诉学生的错误：",
        "stumble": "**学生容易卡住的地方** —— `{checker}` 能识别的错误：",
        "solution": "**参考答案。**",
    },
}


def problems(chapter: Chapter) -> list[str]:
    """What the chapter lacks of the conventions' markers (empty when it has them all), in its language."""
    w = WORDS[chapter.language]
    if chapter.error:
        return [w["unreadable"].format(error=chapter.error)]
    found = []
    if not chapter.title:
        found.append(w["no_title"])
    if not chapter.class_time:
        found.append(w["no_class_time"])
    if not chapter.objectives:
        found.append(w["no_objectives"])
    if not chapter.sections:
        found.append(w["no_sections"])
    found += [w["untimed"].format(title=title) for title in chapter.untimed]
    if not chapter.predicts:
        found.append(w["no_predict"])
    if not chapter.discussions:
        found.append(w["no_discussion"])
    for kind, prompts in (("predict", chapter.predicts), ("discussion", chapter.discussions)):
        found += [w["no_answer"].format(kind=w[kind], question=p.question[:60]) for p in prompts if not p.answer]
    for exercise in chapter.exercises:
        if not exercise.solution:
            found.append(w["no_solution"].format(title=exercise.title))
        if not exercise.difficulty or exercise.minutes is None:
            found.append(w["no_difficulty"].format(title=exercise.title))
    return found


def _sum(sections: list[Section]) -> int:
    return sum(section.minutes or 0 for section in sections)


def pacing_problems(chapter: Chapter) -> list[str]:
    """Where the chapter breaks the pacing convention (issue 19 §4); each message names the chapter and gives the
    stated and the summed minutes. Empty when the stated times are the sums and every lesson fits 45 min."""
    name, w, lesson_break = chapter.path.stem, WORDS[chapter.language], chapter.edition.lesson_break
    if chapter.error:
        return [f"{name}: " + w["unreadable"].format(error=chapter.error)]
    stated = parse_class_time(chapter.class_time, chapter.language)
    if stated is None:
        return [f"{name}: " + w["off_convention"].format(class_time=chapter.class_time or w["none"])]
    lessons, core, optional = stated
    found = [f"{name}: " + w["section_untimed"].format(title=s.title) for s in chapter.sections if s.minutes is None]
    core_sections = [s for s in chapter.sections if not s.optional]
    if core != chapter.core_minutes:
        found.append(f"{name}: " + w["core_differs"].format(
            core=core, summed=chapter.core_minutes, terms=" + ".join(str(s.minutes or 0) for s in core_sections) or "0"))
    if optional != chapter.optional_minutes:
        found.append(f"{name}: " + w["optional_differs"].format(optional=optional, summed=chapter.optional_minutes))
    breaks = len(chapter.lesson_breaks)
    if lessons == 1:
        if breaks:
            found.append(f"{name}: " + w["one_lesson_break"].format(breaks=breaks, lesson_break=lesson_break,
                                                                     core=core))
        if chapter.core_minutes > LESSON_MINUTES:
            found.append(f"{name}: " + w["too_long"].format(summed=chapter.core_minutes, limit=LESSON_MINUTES))
    elif breaks != 1:
        found.append(f"{name}: " + w["two_lessons_breaks"].format(lesson_break=lesson_break, breaks=breaks))
    else:
        if not chapter.lesson_breaks[0]:
            found.append(f"{name}: " + w["break_place"].format(lesson_break=lesson_break))
        for lesson in (1, 2):
            minutes = _sum(chapter.lesson_sections(lesson))
            if minutes > LESSON_MINUTES:
                found.append(f"{name}: " + w["lesson_too_long"].format(lesson=lesson, minutes=minutes,
                                                                        limit=LESSON_MINUTES))
            if minutes == 0:
                found.append(f"{name}: " + w["lesson_empty"].format(lesson=lesson))
    return found


# --------------------------------------------------------------------------------------------------- the guide


def _quote(text: str) -> str:
    """Notebook markdown, kept as it is (math, code, tables), without blank-line runs."""
    return re.sub(r"\n{3,}", "\n\n", text.strip())


def _indent(text: str, prefix: str = "   ") -> str:
    return "\n".join(prefix + line if line.strip() else "" for line in _quote(text).splitlines())


def _module_mistakes(chapter: Chapter) -> dict[str, list[str]]:
    mistakes: dict[str, list[str]] = {}
    for module in chapter.modules:
        path = EXERCISES / f"{module}.py"
        if path.is_file():
            mistakes.update(checker_mistakes(path, chapter.language))
    return mistakes


def _clock(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}"


def _path_table(sections: list[Section], language: str = "en") -> list[str]:
    """One path as a table, with clock times from the start of the lesson."""
    out = list(WORDS[language]["path_header"])
    clock = 0
    for section in sections:
        minutes = section.minutes or 0
        out.append(f"| {_clock(clock)}–{_clock(clock + minutes)} | {section.title} | "
                   f"{'?' if section.minutes is None else section.minutes} |")
        clock += minutes
    return out + [""]


def _paths(chapter: Chapter) -> tuple[str, str]:
    """The two paths in a few words, for the overview table: "45 min" or "2 lessons: 40 + 39 min"."""
    w = WORDS[chapter.language]
    texts = []
    for optional in (False, True):
        minutes = [_sum(chapter.lesson_sections(lesson, optional=optional))
                   for lesson in range(1, chapter.lessons + 1)]
        texts.append(w["minutes"].format(minutes=minutes[0]) if len(minutes) == 1
                     else w["lessons"].format(count=w.get("count", {}).get(len(minutes), len(minutes)),
                                              minutes=" + ".join(map(str, minutes))))
    return texts[0], texts[1]


def _timing(chapter: Chapter) -> list[str]:
    w = WORDS[chapter.language]
    out = []
    lessons = range(1, chapter.lessons + 1)
    for optional in (False, True):
        if optional and not chapter.optional_minutes:
            out += [w["no_optional"], ""]
            break
        for lesson in lessons:
            sections = chapter.lesson_sections(lesson, optional=optional)
            what = w["longer_what"] if optional else w["core_what"]
            name = w["longer_name"] if optional else w["core_name"].format(limit=LESSON_MINUTES)
            if chapter.lessons > 1:
                name += w["lesson"].format(lesson=lesson)
            out += [w["path"].format(name=name, what=what, minutes=_sum(sections)), ""]
            out += _path_table(sections, chapter.language)
    if chapter.lessons > 1:
        out += [w["lesson_ends"].format(lesson_break=chapter.edition.lesson_break), ""]
    optional = w["optional_parts"].format(minutes=chapter.optional_minutes) if chapter.optional_minutes else ""
    stated = chapter.edition.minutes.search(chapter.class_time)
    differs = (w["differs"].format(stated=stated.group(0))
               if stated and int(stated.group(1)) != chapter.core_minutes else "")
    out += [w["core_sum"].format(minutes=chapter.core_minutes, differs=differs, optional=optional), ""]
    pacing = [problem.split(": ", 1)[1] for problem in pacing_problems(chapter)]
    if pacing and not chapter.error:
        out += [w["pacing"].format(problems=w["separator"].join(pacing)), ""]
    return out


def chapter_markdown(chapter: Chapter) -> str:
    w = WORDS[chapter.language]
    out = [f"## {chapter.title or chapter.path.stem}", ""]
    class_time = chapter.class_time or w["not_stated"]
    out += [w["notebook"].format(name=chapter.path.name, class_time=class_time), ""]
    missing = problems(chapter)
    if missing:
        out += [w["not_marked"].format(problems=w["separator"].join(missing)), ""]
    if chapter.objectives:
        out += [w["objectives"], ""]
        out += [f"- {item}" for item in chapter.objectives] + [""]

    if chapter.sections:
        out += [w["timing"], ""] + _timing(chapter)

        if any(section.notes for section in chapter.sections):
            out += [w["talking_points"], ""]
            for section in chapter.sections:
                if section.notes:
                    out += [f"**{section.title}**", ""] + [f"- {note}" for note in section.notes] + [""]

    for (heading, label), prompts in ((w["predicts"], chapter.predicts), (w["discussions"], chapter.discussions)):
        if prompts:
            out += [f"### {heading}", ""]
            for number, prompt in enumerate(prompts, 1):
                out += [f"{number}. *({prompt.section})*", "", _indent(prompt.question), ""]
                if prompt.answer:
                    out += [w["label"].format(label=label), "", _indent(prompt.answer), ""]

    mistakes = _module_mistakes(chapter)
    if chapter.exercises:
        out += [w["exercises"], ""]
        used = set()
        for exercise in chapter.exercises:
            details = " · ".join(part for part in (
                exercise.difficulty,
                w["exercise_minutes"].format(minutes=exercise.minutes) if exercise.minutes is not None else "")
                if part)
            out += [w["exercise"].format(title=exercise.title)
                    + (w["exercise_details"].format(details=details) if details else ""), ""]
            if exercise.task:
                out += [_quote(exercise.task), ""]
            for checker in exercise.checkers:
                used.add(checker)
                if mistakes.get(checker):
                    out += [w["stumble_told"].format(checker=checker), ""]
                    out += [f"- {message}" for message in mistakes[checker]] + [""]
            if exercise.solution:
                out += [w["solution"], "", _quote(exercise.solution), ""]
        rest = {name: found for name, found in mistakes.items() if name not in used and found}
    else:
        rest = {name: found for name, found in mistakes.items() if found}
    for checker, found in rest.items():
        out += [w["stumble"].format(checker=checker), ""]
        out += [f"- {message}" for message in found] + [""]
    return "\n".join(out).rstrip() + "\n"


def chapter_paths(language: str = "en") -> list[Path]:
    """The chapters of one edition: every ``notebooks/*.ipynb``, or the twins that exist (``notebooks/zh-CN/``)."""
    if language == "en":
        return sorted(NOTEBOOKS.glob("*.ipynb"))
    return sorted(TWIN_FOLDERS[language].glob("*.ipynb"))


def guide_markdown(paths=None, language: str | None = None) -> str:
    """The whole guide, from the given notebooks (default: every ``notebooks/*.ipynb``, or with ``language`` the
    twins of that language). ``language``: of the guide's words and of the markers read (default: that of the
    first notebook, English when there is none)."""
    paths = sorted(Path(p) for p in paths) if paths is not None else chapter_paths(language or "en")
    language = language or (language_of(paths[0]) if paths else "en")
    w = WORDS[language]
    chapters = [read_chapter(path, language) for path in paths]
    out = [w["guide_title"], ""]
    for paragraph in w["guide_intro"]:
        out += [paragraph, ""]
    out += w["overview_header"]
    for chapter in chapters:
        class_time = chapter.edition.list_topics.sub(r"\1）" if language != "en" else r"\1)",
                                                     chapter.class_time) or "—"  # no list of parts
        short, long = _paths(chapter)
        out.append(f"| {chapter.title or chapter.path.stem} | {class_time} | {short} | {long} | "
                   f"{len(chapter.predicts)} | {len(chapter.discussions)} | {len(chapter.exercises)} |")
    out.append("")
    for chapter in chapters:
        out += ["---", "", chapter_markdown(chapter)]
    return "\n".join(out).rstrip() + "\n"


def write_guide(path: Path | None = None, language: str = "en") -> str:
    """Write the guide of one edition (default: the English one, ``notebooks/TEACHERS_GUIDE.md``; ``"zh-CN"``:
    ``notebooks/zh-CN/教师指南.md`` from the twins); return a one-line summary (and what each chapter still lacks)
    for the refresh log."""
    path = GUIDES[language] if path is None else path
    text = guide_markdown(language=language)
    path.write_text(text, encoding="utf-8")
    lines = [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: written"]
    for notebook in chapter_paths(language):
        chapter = read_chapter(notebook, language)
        for problem in problems(chapter):
            lines.append(f"  {notebook.name}: {problem}")
        lines += [f"  {problem}" for problem in pacing_problems(chapter) if not chapter.error]
    return "\n".join(lines)


def write_guides() -> str:
    """Write the English guide, and the Chinese one when twins exist (``make notebooks``)."""
    return "\n".join(write_guide(language=language) for language in GUIDES
                     if language == "en" or chapter_paths(language))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Write notebooks/TEACHERS_GUIDE.md from the notebooks, and "
                                                 "notebooks/zh-CN/教师指南.md from their Chinese twins.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a guide is stale, a chapter lacks a marker or its "
                             "section times do not add up to its class time")
    args = parser.parse_args(argv)
    if not args.check:
        print(write_guides())
        return 0
    failed = False
    for language, guide in GUIDES.items():
        paths = chapter_paths(language)
        if language != "en" and not paths:
            continue
        stale = not guide.is_file() or guide.read_text(encoding="utf-8") != guide_markdown(language=language)
        chapters = [read_chapter(p, language) for p in paths]
        missing = [f"{c.path.name}: {problem}" for c in chapters for problem in problems(c)]
        missing += [problem for c in chapters if not c.error for problem in pacing_problems(c)]
        if stale:
            print(f"{guide.relative_to(ROOT)} is stale: run `python tests/teachers_guide.py`")
        for problem in missing:
            print(f"{problem}" if language == "en" else f"{language}/{problem}")
        failed = failed or stale or bool(missing)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
