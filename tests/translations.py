"""The Chinese edition's bookkeeping: message catalogs and notebook twins.

    python tests/translations.py extract   # mha_lib's messages -> mha_lib/locale/mha_lib.pot, then update each .po
    python tests/translations.py compile   # each .po -> its .mo (what mha_lib.language loads)
    python tests/translations.py status    # what is left to translate, and which twin cells are stale
    python tests/translations.py status --check   # the same, and exit 1 while anything is left

``make translations`` runs all three. The messages are what ``mha_lib`` says to a student: the wings mark them with
``_()`` / ``ngettext()`` (translated where they are shown) and ``N_()`` (a constant named at import); Babel's
extractor finds them. ``extract`` keeps every existing translation; a message whose English changed comes back
fuzzy (Babel's guess, to be checked) or empty, and ``status`` lists it until it is translated again.

The notebook twins (``notebooks/zh-CN/<chapter>.ipynb``) record, in each cell's ``metadata.translation.source``,
the :func:`fingerprint` of the English cell they were translated from; ``status`` lists every twin cell whose
English cell has changed since, and every English chapter without a twin.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import string
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mha_lib"
LOCALE = PACKAGE / "locale"
DOMAIN = "mha_lib"
TEMPLATE = LOCALE / f"{DOMAIN}.pot"
LOCALES = ("zh_CN",)  # ll_CC folders under mha_lib/locale/; mha_lib.set_language("zh-CN") reads zh_CN
NOTEBOOKS = ROOT / "notebooks"
TWINS = {"zh_CN": NOTEBOOKS / "zh-CN"}
# what the wings call: _("..."), gettext("..."), ngettext("...", "...", n), pgettext("context", "..."), N_("...")
KEYWORDS = {"_": None, "gettext": None, "ngettext": (1, 2), "pgettext": ((1, "c"), 2), "N_": None}
BUGS = "https://github.com/mha-by-doing/mha-by-doing/issues"
HEADER = ("# mha_lib: {language}.\n# Written by tests/translations.py extract (make translations); translate the msgstr\n"
          "# lines, keep every {{placeholder}} of the msgid, and use the terms of notebooks/zh-CN/术语表.md.")


def fingerprint(source) -> str:
    """The fingerprint of an English cell's source (a str, or nbformat's list of lines): the first 16 hex digits
    of its SHA-256. A twin cell stores it in ``metadata.translation.source``; any edit to the English cell, one
    word or one space, gives another fingerprint."""
    text = "".join(source) if isinstance(source, list) else source
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def glossary(text: str) -> list[dict]:
    """The glossary's table: one dict per concept (term, english, definition, discouraged: list of words)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if len(cells) != 4 or cells[0] in ("术语", "") or set(cells[0]) <= set("-: "):
            continue
        words = [] if cells[3] in ("—", "-", "") else [w.strip() for w in cells[3].split("、") if w.strip()]
        rows.append({"term": cells[0], "english": cells[1], "definition": cells[2], "discouraged": words})
    return rows


def discouraged_uses(strings, rows) -> list[str]:
    """``"<discouraged> (use <term>): <text>"`` for each text (a msgstr, a twin's markdown) that contains a
    discouraged synonym of the glossary (notebooks/zh-CN/术语表.md)."""
    found = []
    for text in strings:
        for row in rows:
            for word in row["discouraged"]:
                if word in text:
                    found.append(f"{word} (use {row['term']}): {text}")
    return found


def cell_fingerprint(cell: dict) -> str:
    """The fingerprint of an English cell as a twin must follow it: its source, and its ``teacher_notes`` (they
    are translated too, and feed the Chinese teacher's guide and slides). A cell without notes: ``fingerprint``
    of its source alone."""
    notes = cell.get("metadata", {}).get("teacher_notes") or []
    text = "".join(cell.get("source", ""))
    return fingerprint(text + "\n\n[teacher notes]\n" + "\n".join(notes) if notes else text)


def po_path(locale: str) -> Path:
    return LOCALE / locale / "LC_MESSAGES" / f"{DOMAIN}.po"


def mo_path(locale: str) -> Path:
    return LOCALE / locale / "LC_MESSAGES" / f"{DOMAIN}.mo"


# --- messages ---------------------------------------------------------------------------------------------------


def extract_messages():
    """Every message marked in ``mha_lib``'s source, as a Babel ``Catalog`` (the template)."""
    from babel.messages.catalog import Catalog
    from babel.messages.extract import extract_from_dir

    template = Catalog(project="mha_lib", version="0.1.0", msgid_bugs_address=BUGS, charset="utf-8",
                       header_comment=HEADER.format(language="the messages mha_lib shows a student"))
    found = extract_from_dir(str(PACKAGE), method_map=[("**.py", "python")], keywords=KEYWORDS,
                             comment_tags=("TRANSLATORS:",), strip_comment_tags=True)
    for filename, lineno, message, comments, context in found:
        path = (Path(DOMAIN) / filename).as_posix()
        template.add(message, None, [(path, lineno)], auto_comments=comments, context=context)
    return template


def read_po(path: Path, locale: str | None = None):
    from babel.messages.pofile import read_po as _read_po

    with open(path, "rb") as handle:
        return _read_po(handle, locale=locale)


def write_po(path: Path, catalog, **kwargs) -> None:
    from babel.messages.pofile import write_po as _write_po

    buffer = io.BytesIO()
    _write_po(buffer, catalog, width=100, include_lineno=False, **kwargs)  # files only: edits move no line
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())


def _keys(catalog) -> list:
    return [(m.id, tuple(sorted({path for path, _ in m.locations}))) for m in catalog if m.id]


def extract() -> None:
    """Write the template, then bring each ``.po`` up to date with it (translations kept)."""
    from babel.messages.catalog import Catalog

    template = extract_messages()
    if TEMPLATE.exists() and _keys(read_po(TEMPLATE)) == _keys(template):
        print(f"{TEMPLATE.relative_to(ROOT)}: unchanged, {len(_keys(template))} messages")
    else:
        write_po(TEMPLATE, template)
        print(f"{TEMPLATE.relative_to(ROOT)}: {len(_keys(template))} messages")
    for locale in LOCALES:
        path = po_path(locale)
        if path.exists():
            catalog = read_po(path, locale)
        else:
            catalog = Catalog(locale=locale, project="mha_lib", version="0.1.0", charset="utf-8",
                              language_team="Simplified Chinese", msgid_bugs_address=BUGS, last_translator="the mha-by-doing authors",
                              header_comment=HEADER.format(language=locale), fuzzy=False)
        before = _keys(catalog)
        catalog.update(template, update_header_comment=False, update_creation_date=False)
        catalog.obsolete.clear()  # a message the source no longer has is dropped (git keeps its history)
        if _keys(catalog) != before or not path.exists():
            catalog.revision_date = datetime.now(timezone.utc)
            write_po(path, catalog, ignore_obsolete=True)
        print(f"{path.relative_to(ROOT)}: {len(_keys(catalog))} messages")


def compile_catalog(locale: str) -> bytes:
    """The ``.mo`` bytes of ``locale``'s ``.po`` (fuzzy translations left out: they print in English)."""
    from babel.messages.mofile import write_mo

    buffer = io.BytesIO()
    write_mo(buffer, read_po(po_path(locale), locale), use_fuzzy=False)
    return buffer.getvalue()


def compile_all() -> None:
    for locale in LOCALES:
        data = compile_catalog(locale)
        path = mo_path(locale)
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        print(f"{path.relative_to(ROOT)}: compiled")


def placeholders(text: str) -> set[str]:
    """The ``{name}`` fields of a message (``{loss:.3f}`` -> ``loss``); ``{{`` is a literal brace."""
    try:
        return {field.split(".")[0].split("[")[0] for _, field, _, _ in string.Formatter().parse(text)
                if field is not None}
    except ValueError:  # an unbalanced brace: not a format string
        return {"<unbalanced braces>"}


def message_problems(locale: str) -> dict[str, list[str]]:
    """What is left to do in ``locale``'s catalog, against the source: ``missing`` (in the source, not in the .po),
    ``untranslated`` (empty msgstr), ``fuzzy``, ``obsolete`` (in the .po, no longer in the source) and
    ``placeholders`` (a msgstr whose ``{fields}`` differ from its msgid's)."""
    return catalog_problems({(m.id, m.context) for m in extract_messages() if m.id},
                            read_po(po_path(locale), locale))


def catalog_problems(source: set, catalog) -> dict[str, list[str]]:
    """:func:`message_problems` for the messages ``source``, ``(msgid, msgctxt)`` pairs (a plural msgid is a
    (singular, plural) tuple; msgctxt is None but where one English word means two things), and a Babel
    ``catalog``; each problem is named by its (singular) msgid."""
    problems = {"missing": [], "untranslated": [], "fuzzy": [], "obsolete": [], "placeholders": []}
    present = set()
    for message in catalog:
        if not message.id:
            continue
        present.add((message.id, message.context))
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        label = ids[0]
        if (message.id, message.context) not in source:
            problems["obsolete"].append(label)
        if not all(strings):
            problems["untranslated"].append(label)
        elif message.fuzzy:
            problems["fuzzy"].append(label)
        elif any(placeholders(s) != placeholders(ids[0]) for s in strings):
            problems["placeholders"].append(label)
    problems["obsolete"] += [m.id if isinstance(m.id, str) else m.id[0] for m in catalog.obsolete.values()]
    problems["missing"] = [m if isinstance(m, str) else m[0] for m, _ in source if (m, _) not in present]
    return problems


# --- notebook twins ---------------------------------------------------------------------------------------------


def english_chapters() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def stale_cells(english: Path, twin: Path) -> list[str]:
    """The ids of the twin's cells whose recorded English fingerprint no longer matches the English cell (a
    cell with no English counterpart, or none recorded, counts as stale)."""
    source = {c.get("id"): c for c in json.loads(english.read_text(encoding="utf-8"))["cells"]}
    stale = []
    for cell in json.loads(twin.read_text(encoding="utf-8"))["cells"]:
        recorded = cell.get("metadata", {}).get("translation", {}).get("source")
        original = source.get(cell.get("id"))
        if original is None or recorded != cell_fingerprint(original):
            stale.append(str(cell.get("id")))
    return stale


def twin_problems(locale: str) -> dict[str, list[str]]:
    """``without_twin``: English chapters with no twin; ``stale``: ``"<chapter>: cell <id>"`` per stale cell."""
    folder = TWINS[locale]
    problems = {"without_twin": [], "stale": []}
    for english in english_chapters():
        twin = folder / english.name
        if not twin.exists():
            problems["without_twin"].append(english.name)
            continue
        problems["stale"] += [f"{english.name}: cell {cell}" for cell in stale_cells(english, twin)]
    return problems


def status(check: bool = False) -> int:
    """Print what is left to do; with ``check``, the exit status is 1 when anything is."""
    todo = 0
    for locale in LOCALES:
        print(f"== {locale}: {po_path(locale).relative_to(ROOT)}")
        for kind, items in {**message_problems(locale), **twin_problems(locale)}.items():
            todo += len(items)
            print(f"{kind}: {len(items)}")
            for item in items:
                print(f"    {item!r}" if kind not in ("without_twin", "stale") else f"    {item}")
    return 1 if todo and check else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("extract", "compile", "status"))
    parser.add_argument("--check", action="store_true", help="status: exit 1 while anything is left to do")
    arguments = parser.parse_args(argv)
    command = arguments.command
    if command == "extract":
        extract()
    elif command == "compile":
        compile_all()
    else:
        return status(arguments.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
