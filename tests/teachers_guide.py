"""The teacher's guide, generated from the notebooks: ``notebooks/TEACHERS_GUIDE.md``.

    python tests/teachers_guide.py            # write the guide and list what each chapter still lacks
    python tests/teachers_guide.py --check    # exit 1 when the committed guide is stale or a chapter lacks a marker

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
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/slides.py, when imported from elsewhere

from slides import headings  # noqa: E402  (one reading of markdown headings for the slides and the guide)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
EXERCISES = ROOT / "mha_lib" / "exercises"
GUIDE = NOTEBOOKS / "TEACHERS_GUIDE.md"

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
PREFIXES = {"predict": "**Predict before you run.**", "discussion": "**Discuss.**"}
GENERIC_MESSAGES = ("expected a torch.tensor", "your function raised", "not attempted yet", "wrong shape",
                    "right shape", "correct")  # said of any exercise: not a mistake the checker recognises
UNKNOWN = "\ufffc"  # a value the checker fills in at run time (printed as "…")


# --------------------------------------------------------------------------------------------------- checkers


def _text(node, constants: dict[str, str]) -> str | None:
    """The text of a message expression (a string, a module constant, an f-string, ``+``, ``.format``), with
    run-time values shown as "…"; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif _is_nested_message(value.value):
                return None  # "in case X: {verdict.message}" wraps messages that are listed on their own
            else:
                inner = _text(value.value, constants) if isinstance(value, ast.FormattedValue) else None
                parts.append(inner if inner is not None else UNKNOWN)
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, constants), _text(node.right, constants)
        if left is None and right is None:
            return None
        return (left or "") + (right or "")  # MESSAGE + a fix chosen at run time: the message alone
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"):
        base = _text(node.func.value, constants)
        return re.sub(r"\{[^{}]*\}", UNKNOWN, base) if base is not None else None
    return None


def _is_nested_message(node) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "message" in name.lower() or "verdict" in name.lower()


def _is_message(text: str | None) -> bool:
    if text is None:
        return False
    letters = re.sub(r"[^A-Za-z]", "", text.replace(UNKNOWN, ""))
    if text.count(UNKNOWN) >= 4:  # mostly run-time numbers: a generic verdict
        return False
    return len(letters) >= 15 and " " in text.strip() and not text.strip().lower().startswith(GENERIC_MESSAGES)


def _messages_in(function: ast.FunctionDef, constants: dict[str, str], helpers: set[str]):
    """(position, message or helper name) for every mistake message and helper call in ``function``."""
    found = []
    for node in ast.walk(function):
        where = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        if isinstance(node, ast.Dict):  # a mistakes dict: {message: wrong answer, ...}
            keys = [_text(key, constants) for key in node.keys if key is not None]
            if keys and all(_is_message(key) for key in keys):
                found += [((key_node.lineno, key_node.col_offset), key)
                          for key_node, key in zip([k for k in node.keys if k is not None], keys)]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):  # mistakes[message] = ...
            key = _text(node.slice, constants)
            if _is_message(key):
                found.append((where, key))
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name in helpers:
                found.append((where, ("call", name)))
            index = {"failed": 1, "Feedback": 2}.get(name)
            if index is not None and len(node.args) > index:
                argument = node.args[index]
                options = [argument.body, argument.orelse] if isinstance(argument, ast.IfExp) else [argument]
                found += [(where, text) for text in (_text(option, constants) for option in options)
                          if _is_message(text)]
    return sorted(found, key=lambda item: item[0])


def checker_mistakes(module: Path) -> dict[str, list[str]]:
    """For each ``check_*`` function of an exercises module, the mistake messages it can report, in source
    order (read with ``ast``; the module is not imported)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    constants: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            text = _text(node.value, constants)
            if text is not None:
                constants[node.targets[0].id] = text
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    helpers = set(functions)

    def collect(name: str, seen: set[str]) -> list[str]:
        messages = []
        for _, item in _messages_in(functions[name], constants, helpers):
            if isinstance(item, tuple):
                if item[1] not in seen:
                    messages += collect(item[1], seen | {item[1]})
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


def _role(cell, name: str) -> bool:
    if cell.get("cell_type") != "markdown":
        return False
    text = _source(cell).lstrip()
    if name in cell.get("metadata", {}).get("tags", []):
        return True
    if name == "exercise":
        return bool(EXERCISE_HEADER.match(text))
    if name == "solution":
        return any(summary.strip().lower() == "solution" for summary, _ in DETAILS.findall(text))
    return text.startswith(PREFIXES[name])


def _details(text: str, summary: str | None = None) -> tuple[str, str]:
    """(the text outside the ``<details>`` blocks, the body of the first block whose summary starts with
    ``summary`` — or of the first block when ``summary`` is None)."""
    body = ""
    for found_summary, found_body in DETAILS.findall(text):
        if summary is None or found_summary.strip().lower().startswith(summary.lower()):
            body = found_body.strip()
            break
    return DETAILS.sub("", text).strip(), body


@dataclass
class Section:
    title: str
    minutes: int | None
    optional: bool
    notes: list[str]
    lesson: int = 1  # 2 after the `**End of lesson 1.**` cell


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
        stated = parse_class_time(self.class_time)
        return stated[0] if stated else 1 + bool(self.lesson_breaks)

    def lesson_sections(self, lesson: int, *, optional: bool = False) -> list[Section]:
        """The sections of one lesson in notebook order: the core ones, and with ``optional`` the optional too."""
        return [s for s in self.sections if s.lesson == lesson and (optional or not s.optional)]


def parse_class_time(class_time: str) -> tuple[int, int, int] | None:
    """(lessons, core minutes, optional minutes) of a class time that follows the convention, else None."""
    match = STATED_TIME.match(class_time)
    if not match:
        return None
    return 2 if match.group("two") else 1, int(match.group("core")), int(match.group("optional") or 0)


def _objectives(text: str) -> list[str]:
    match = OBJECTIVES_INTRO.search(text)
    if not match:
        return []
    items: list[str] = []
    for line in text[match.end():].splitlines()[1:]:
        item = re.match(r"^\s*(?:[-*]|\d+\.)\s+(.*)$", line)
        if item:
            items.append(item.group(1).strip())
        elif line.strip() and items and line.startswith((" ", "\t")):
            items[-1] += " " + line.strip()  # a wrapped list item
        elif line.strip() and items:
            break
    return items


def read_chapter(path: Path) -> Chapter:
    """Everything the guide says about one notebook; missing markers leave fields empty (see ``problems``)."""
    import nbformat

    chapter = Chapter(path)
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
        if cell.cell_type == "markdown" and text.strip().startswith(LESSON_BREAK):
            following = cells[index + 1] if index + 1 < len(cells) else None
            chapter.lesson_breaks.append(following is not None and following.cell_type == "markdown"
                                         and _source(following).lstrip().startswith("## "))
            lesson += 1
        if cell.cell_type == "markdown":
            for _, level, title in headings(text):
                if level == 1 and not chapter.title:
                    chapter.title = title
                    match = CLASS_TIME.search(text)
                    chapter.class_time = " ".join(match.group(1).split()) if match else ""
                    chapter.objectives = _objectives(text)
                elif level == 2:
                    current = None
                    timed = SECTION.match(title)
                    section = timed.group(1) if timed else title
                    if title.lower().startswith("summary"):
                        continue
                    if not timed:
                        chapter.untimed.append(title)
                    notes = cell.metadata.get("teacher_notes", [])
                    chapter.sections.append(Section(
                        title=section, minutes=int(timed.group(2)) if timed else None,
                        optional=section.lower().startswith("optional"),
                        notes=[str(note) for note in notes] if isinstance(notes, list) else [str(notes)],
                        lesson=lesson))
            for name, bucket in (("predict", chapter.predicts), ("discussion", chapter.discussions)):
                if _role(cell, name):
                    question, answer = _details(text)
                    bucket.append(Prompt(section, question.removeprefix(PREFIXES[name]).strip(), answer))
            if _role(cell, "exercise"):
                lines = text.strip().splitlines()
                header = EXERCISE_HEADER.match(lines[0].strip()) if lines else None
                rest = header.group(2) if header else ""
                difficulty = DIFFICULTY.search(rest)
                minutes = MINUTES.search(rest)
                current = Exercise(
                    section=section, title=header.group(1).strip() if header else lines[0].strip("*# "),
                    difficulty=difficulty.group(1) if difficulty else "",
                    minutes=int(minutes.group(1)) if minutes else None,
                    task=_details("\n".join(lines[1:]))[0])
                chapter.exercises.append(current)
            if current is not None and _role(cell, "solution") and not current.solution:
                current.solution = _details(text, "solution")[1]
        elif cell.cell_type == "code":
            chapter.modules += [m for m in EXERCISE_IMPORT.findall(text) if m not in chapter.modules]
            if current is not None:
                current.checkers += [c for c in CHECK_CALL.findall(text) if c not in current.checkers]
    return chapter


def problems(chapter: Chapter) -> list[str]:
    """What the chapter lacks of the conventions' markers (empty when it has them all)."""
    if chapter.error:
        return [f"the notebook could not be read ({chapter.error})"]
    found = []
    if not chapter.title:
        found.append("no `# ` title heading")
    if not chapter.class_time:
        found.append("no `**Class time:** about N min` line in the title cell")
    if not chapter.objectives:
        found.append("no 'By the end of this chapter you can' list")
    if not chapter.sections:
        found.append("no `## ` sections")
    found += [f"section without a time (`## Title · ~N min`): {title!r}" for title in chapter.untimed]
    if not chapter.predicts:
        found.append("no predict cell (`**Predict before you run.**`, tagged `predict`)")
    if not chapter.discussions:
        found.append("no discussion cell (`**Discuss.**`, tagged `discussion`)")
    for kind, prompts in (("predict", chapter.predicts), ("discussion", chapter.discussions)):
        found += [f"{kind} cell without a <details> answer: {p.question[:60]!r}" for p in prompts if not p.answer]
    for exercise in chapter.exercises:
        if not exercise.solution:
            found.append(f"exercise {exercise.title!r} has no solution cell")
        if not exercise.difficulty or exercise.minutes is None:
            found.append(f"exercise {exercise.title!r} lacks 'difficulty ★☆☆ · ~M min'")
    return found


def _sum(sections: list[Section]) -> int:
    return sum(section.minutes or 0 for section in sections)


def pacing_problems(chapter: Chapter) -> list[str]:
    """Where the chapter breaks the pacing convention (issue 19 §4); each message names the chapter and gives the
    stated and the summed minutes. Empty when the stated times are the sums and every lesson fits 45 min."""
    name = chapter.path.stem
    if chapter.error:
        return [f"{name}: the notebook could not be read ({chapter.error})"]
    stated = parse_class_time(chapter.class_time)
    if stated is None:
        return [f"{name}: the class time {chapter.class_time or '(none)'!r} does not read "
                "`about C min (+ O min optional: ...)` or `two lessons, about C min (+ O min optional: ...)`"]
    lessons, core, optional = stated
    found = [f"{name}: section {s.title!r} has no time (`· ~N min`), so the sums leave it out"
             for s in chapter.sections if s.minutes is None]
    core_sections = [s for s in chapter.sections if not s.optional]
    if core != chapter.core_minutes:
        found.append(f"{name}: the title cell states {core} min of core sections, but they add up to "
                     f"{chapter.core_minutes} min ({' + '.join(str(s.minutes or 0) for s in core_sections) or '0'})")
    if optional != chapter.optional_minutes:
        found.append(f"{name}: the title cell states {optional} min of optional sections, but they add up to "
                     f"{chapter.optional_minutes} min")
    breaks = len(chapter.lesson_breaks)
    if lessons == 1:
        if breaks:
            found.append(f"{name}: the title cell states one lesson, but the notebook has {breaks} "
                         f"`{LESSON_BREAK}` cell(s): write `two lessons, about {core} min ...` or remove them")
        if chapter.core_minutes > LESSON_MINUTES:
            found.append(f"{name}: the core sections add up to {chapter.core_minutes} min, more than one "
                         f"{LESSON_MINUTES}-min lesson: mark detail `Optional · ` or make it two lessons")
    elif breaks != 1:
        found.append(f"{name}: the title cell states two lessons, so it needs exactly one `{LESSON_BREAK}` cell, "
                     f"found {breaks}")
    else:
        if not chapter.lesson_breaks[0]:
            found.append(f"{name}: the `{LESSON_BREAK}` cell must come right before the `## ` heading of "
                         "lesson 2's first section")
        for lesson in (1, 2):
            minutes = _sum(chapter.lesson_sections(lesson))
            if minutes > LESSON_MINUTES:
                found.append(f"{name}: lesson {lesson}'s core sections add up to {minutes} min, more than "
                             f"{LESSON_MINUTES}")
            if minutes == 0:
                found.append(f"{name}: lesson {lesson} has no core section")
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
            mistakes.update(checker_mistakes(path))
    return mistakes


def _clock(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}"


def _path_table(sections: list[Section]) -> list[str]:
    """One path as a table, with clock times from the start of the lesson."""
    out = ["| clock | section | min |", "|---|---|---:|"]
    clock = 0
    for section in sections:
        minutes = section.minutes or 0
        out.append(f"| {_clock(clock)}–{_clock(clock + minutes)} | {section.title} | "
                   f"{'?' if section.minutes is None else section.minutes} |")
        clock += minutes
    return out + [""]


def _paths(chapter: Chapter) -> tuple[str, str]:
    """The two paths in a few words, for the overview table: "45 min" or "2 lessons: 40 + 39 min"."""
    texts = []
    for optional in (False, True):
        minutes = [_sum(chapter.lesson_sections(lesson, optional=optional))
                   for lesson in range(1, chapter.lessons + 1)]
        texts.append(f"{minutes[0]} min" if len(minutes) == 1
                     else f"{len(minutes)} lessons: {' + '.join(map(str, minutes))} min")
    return texts[0], texts[1]


def _timing(chapter: Chapter) -> list[str]:
    out = []
    lessons = range(1, chapter.lessons + 1)
    for optional in (False, True):
        if optional and not chapter.optional_minutes:
            out += ["There are no optional sections: the longer path is the same.", ""]
            break
        for lesson in lessons:
            sections = chapter.lesson_sections(lesson, optional=optional)
            what = ("every section in notebook order, the optional ones included" if optional
                    else "the core sections")
            name = "The longer path" if optional else f"The {LESSON_MINUTES}-minute path"
            if chapter.lessons > 1:
                name += f", lesson {lesson}"
            out += [f"**{name}** — {what}, {_sum(sections)} min:", ""] + _path_table(sections)
    if chapter.lessons > 1:
        out += [f"Lesson 1 ends at the `{LESSON_BREAK}` cell; the clock starts again at lesson 2.", ""]
    optional = f", optional parts {chapter.optional_minutes} min" if chapter.optional_minutes else ""
    stated = MINUTES.search(chapter.class_time)
    differs = (f" (the chapter states {stated.group(0)}: plan for the difference)"
               if stated and int(stated.group(1)) != chapter.core_minutes else "")
    out += [f"Core sections add up to {chapter.core_minutes} min{differs}{optional}.", ""]
    pacing = [problem.split(": ", 1)[1] for problem in pacing_problems(chapter)]
    if pacing and not chapter.error:
        out += ["> **Pacing not yet consistent:** " + "; ".join(pacing) + ".", ""]
    return out


def chapter_markdown(chapter: Chapter) -> str:
    out = [f"## {chapter.title or chapter.path.stem}", ""]
    class_time = chapter.class_time or "**not stated**"
    out += [f"Notebook `{chapter.path.name}` · class time: {class_time}", ""]
    missing = problems(chapter)
    if missing:
        out += ["> **Not yet marked up:** " + "; ".join(missing) + ".", ""]
    if chapter.objectives:
        out += ["**Objectives.** By the end of the chapter students can", ""]
        out += [f"- {item}" for item in chapter.objectives] + [""]

    if chapter.sections:
        out += ["### Timing", ""] + _timing(chapter)

        if any(section.notes for section in chapter.sections):
            out += ["### Talking points", ""]
            for section in chapter.sections:
                if section.notes:
                    out += [f"**{section.title}**", ""] + [f"- {note}" for note in section.notes] + [""]

    for heading, prompts, label in (("Predict before you run", chapter.predicts, "Answer"),
                                    ("Discussion questions", chapter.discussions, "One answer")):
        if prompts:
            out += [f"### {heading}", ""]
            for number, prompt in enumerate(prompts, 1):
                out += [f"{number}. *({prompt.section})*", "", _indent(prompt.question), ""]
                if prompt.answer:
                    out += [f"   **{label}.**", "", _indent(prompt.answer), ""]

    mistakes = _module_mistakes(chapter)
    if chapter.exercises:
        out += ["### Exercises", ""]
        used = set()
        for exercise in chapter.exercises:
            details = " · ".join(part for part in (
                exercise.difficulty, f"~{exercise.minutes} min" if exercise.minutes is not None else "") if part)
            out += [f"#### Exercise {exercise.title}" + (f" ({details})" if details else ""), ""]
            if exercise.task:
                out += [_quote(exercise.task), ""]
            for checker in exercise.checkers:
                used.add(checker)
                if mistakes.get(checker):
                    out += [f"**Where students stumble** — what `{checker}` recognises and tells them:", ""]
                    out += [f"- {message}" for message in mistakes[checker]] + [""]
            if exercise.solution:
                out += ["**Solution.**", "", _quote(exercise.solution), ""]
        rest = {name: found for name, found in mistakes.items() if name not in used and found}
    else:
        rest = {name: found for name, found in mistakes.items() if found}
    for checker, found in rest.items():
        out += [f"**Where students stumble** — what `{checker}` recognises:", ""]
        out += [f"- {message}" for message in found] + [""]
    return "\n".join(out).rstrip() + "\n"


def guide_markdown(paths=None) -> str:
    """The whole guide, from the given notebooks (default: every ``notebooks/*.ipynb``)."""
    paths = sorted(Path(p) for p in paths) if paths is not None else sorted(NOTEBOOKS.glob("*.ipynb"))
    chapters = [read_chapter(path) for path in paths]
    out = [
        "# Teacher's guide",
        "",
        "Generated from the notebooks by `tests/teachers_guide.py` (`make notebooks` rewrites it): do not edit by "
        "hand. For each chapter: the objectives, the timing of each section, the talking points, the predict and "
        "discussion prompts with their answers, and for each exercise the mistakes its checker recognises and "
        "the solution. The slides of every chapter come from the same notebooks: `make slides`.",
        "",
        "The 45-minute path takes the core sections only; the longer path adds the optional sections, in "
        "notebook order. Each chapter's timing table gives both with clock times.",
        "",
        "| chapter | class time | 45-minute path | longer path | predict | discuss | exercises |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for chapter in chapters:
        class_time = re.sub(r"(\(\+ [^:)]*):[^)]*\)", r"\1)", chapter.class_time) or "—"  # no list of parts
        short, long = _paths(chapter)
        out.append(f"| {chapter.title or chapter.path.stem} | {class_time} | {short} | {long} | "
                   f"{len(chapter.predicts)} | {len(chapter.discussions)} | {len(chapter.exercises)} |")
    out.append("")
    for chapter in chapters:
        out += ["---", "", chapter_markdown(chapter)]
    return "\n".join(out).rstrip() + "\n"


def write_guide(path: Path = GUIDE) -> str:
    """Write the guide; return a one-line summary (and what each chapter still lacks) for the refresh log."""
    text = guide_markdown()
    path.write_text(text, encoding="utf-8")
    lines = [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: written"]
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        chapter = read_chapter(notebook)
        for problem in problems(chapter):
            lines.append(f"  {notebook.name}: {problem}")
        lines += [f"  {problem}" for problem in pacing_problems(chapter) if not chapter.error]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Write notebooks/TEACHERS_GUIDE.md from the notebooks.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the guide is stale, a chapter lacks a marker or its "
                             "section times do not add up to its class time")
    args = parser.parse_args(argv)
    if not args.check:
        print(write_guide())
        return 0
    stale = not GUIDE.is_file() or GUIDE.read_text(encoding="utf-8") != guide_markdown()
    chapters = [read_chapter(p) for p in sorted(NOTEBOOKS.glob("*.ipynb"))]
    missing = [f"{c.path.name}: {problem}" for c in chapters for problem in problems(c)]
    missing += [problem for c in chapters if not c.error for problem in pacing_problems(c)]
    if stale:
        print(f"{GUIDE.relative_to(ROOT)} is stale: run `python tests/teachers_guide.py`")
    for problem in missing:
        print(problem)
    return 1 if stale or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
