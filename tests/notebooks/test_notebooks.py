"""The notebooks' stored outputs are a regression record: these tests make sure the record is really there.

`pytest --nbval` (run on notebooks/ by the same `pytest` command) re-executes every notebook and compares each
cell's output with the stored one. A notebook whose outputs were stripped would pass that check without
checking anything, so the tests below fail on missing outputs, null execution counts and the other ways a
notebook can make nbval lie (see the project GUIDE, section 4).

Every Chinese twin that exists (notebooks/zh-CN/NN_*.ipynb) is checked the same way, with its own badge
(在 Colab 中打开, opening notebooks/zh-CN/<name>) and the same set-up code, commented in Chinese; a twin selects
Chinese.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from conftest import CELL_LIMIT_S, cell_limit, own_limit
from refresh_notebooks import BADGE_ATTACHMENT, BADGE_TAG, KERNELSPEC, SETUP_TAG, badge_attachment, badge_markdown, \
    colab_packages, repository_url, setup_code
from slides import language_of, twin_paths

ROOT = Path(__file__).resolve().parents[2]
ENGLISH_PATHS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TWIN_PATHS = twin_paths()  # the Chinese twins that exist
NOTEBOOK_PATHS = ENGLISH_PATHS + TWIN_PATHS
WIDGET_PATTERN = re.compile(r"\binteract(ive)?\s*\(|\bwidgets\.|\bmha_lib\.widgets\b|\bdisplay\(\s*\w*[Ww]idget")


def _load(path: Path):
    return nbformat.read(path, as_version=4)


def _code_cells(nb):
    return [cell for cell in nb.cells if cell.cell_type == "code" and cell.source.strip()]


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _id(path: Path) -> str:
    return path.name if path.parent.name == "notebooks" else f"{path.parent.name}/{path.name}"


def test_the_series_has_notebooks():
    assert [p.name for p in ENGLISH_PATHS][:1] == ["00_start_here.ipynb"]


@pytest.fixture(params=NOTEBOOK_PATHS, ids=[_id(p) for p in NOTEBOOK_PATHS])
def notebook(request):
    return request.param, _load(request.param)


def test_every_code_cell_was_executed_in_order(notebook):
    path, nb = notebook
    counts = [cell.execution_count for cell in _code_cells(nb)]
    assert None not in counts, f"{path.name}: null execution counts; run `make notebooks`"
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: not run top to bottom in one kernel: {counts}"


def test_outputs_are_stored(notebook):
    path, nb = notebook
    checked = [c for c in _code_cells(nb) if "nbval-ignore-output" not in _tags(c) and "nbval-skip" not in _tags(c)]
    with_output = [c for c in checked if c.outputs]
    assert with_output, f"{path.name}: no stored outputs for nbval to compare; run `make notebooks`"


def test_no_errors_or_stderr_are_stored(notebook):
    path, nb = notebook
    for cell in _code_cells(nb):
        for output in cell.outputs:
            allowed = "raises-exception" in _tags(cell)
            assert output.output_type != "error" or allowed, f"{path.name}: a stored error in\n{cell.source}"
            assert output.get("name") != "stderr", f"{path.name}: stderr stored (warnings?) in\n{cell.source}"


def test_kernelspec_is_the_one_make_lab_installs(notebook):
    """The name python3 (what Colab and Binder look up) with the display name `make install` registers: JupyterLab
    writes the running kernel's display name into the notebook on open, so any other would make an untouched
    notebook open as modified."""
    path, nb = notebook
    assert nb.metadata.get("kernelspec") == KERNELSPEC, f"{_id(path)}: run `make notebooks`"


def test_make_install_registers_the_stored_kernelspec():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    registered = re.search(r"ipykernel install --sys-prefix --name (\S+) --display-name \"([^\"]+)\"", makefile)
    assert registered and registered.groups() == (KERNELSPEC["name"], KERNELSPEC["display_name"])


def test_no_cell_ends_with_a_semicolon(notebook):
    # a trailing ';' hides output in Jupyter but not from nbval's point of view: keep outputs honest
    path, nb = notebook
    for cell in _code_cells(nb):
        assert not cell.source.rstrip().endswith(";"), f"{path.name}: cell ends with ';':\n{cell.source}"


def _literal_bold_markers(markdown: str) -> list[str]:
    """The ``**`` that CommonMark leaves as text in ``markdown``, each with a little context. Math is replaced as
    JupyterLab does before it parses (``@@0@@``), code spans stay as they are; what is left inside ``<code>`` is
    ignored (inline or fenced)."""
    from markdown_it import MarkdownIt

    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]*\$", "@@0@@", markdown, flags=re.S)
    html = re.sub(r"<code[^>]*>.*?</code>", "", MarkdownIt("commonmark").render(text), flags=re.S)
    return [html[max(0, m.start() - 20):m.end() + 20] for m in re.finditer(r"\*\*", html)]


def test_bold_renders_in_every_markdown_cell(notebook):
    # CommonMark's flanking rules: a closing ** after a full-width "。" or "：" closes only before a space or a
    # punctuation mark, so "**预测一下，再运行。**当" shows its asterisks in JupyterLab; the twins write "。** 当"
    path, nb = notebook
    literal = {i: found for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
               for found in [_literal_bold_markers(cell.source)] if found}
    assert not literal, f"{_id(path)}: ** shown as text (cell: context): {literal}"


def test_of_the_test_a_closing_bold_after_full_width_punctuation_is_caught():
    assert _literal_bold_markers("**预测一下，再运行。**当 $g = 16$ 时")
    assert not _literal_bold_markers("**预测一下，再运行。** 当 $g = 16$ 时")
    assert not _literal_bold_markers("**部分 RoPE。**`rope_fraction=f` 只旋转; **$x$ 形式。**$y$")


def test_widget_cells_are_ignored_by_nbval(notebook):
    # widget outputs hold model ids that change every run; the static figure next to them is what is checked
    path, nb = notebook
    for cell in _code_cells(nb):
        if WIDGET_PATTERN.search(cell.source):
            assert "nbval-ignore-output" in _tags(cell), f"{path.name}: widget cell not tagged:\n{cell.source}"


def test_nbval_markers_are_tags_not_comments(notebook):
    # a comment marker only works as a whole line; tags are visible in the UI and cannot be mistyped
    path, nb = notebook
    for cell in _code_cells(nb):
        assert "NBVAL_" not in cell.source, f"{path.name}: use cell tags, not NBVAL_ comments"


def test_badge_and_setup_cell_come_from_pyproject(notebook):
    path, nb = notebook
    badge = [c for c in nb.cells if BADGE_TAG in _tags(c)]
    setup = [c for c in nb.cells if SETUP_TAG in _tags(c)]
    assert len(badge) == 1 and badge[0].source == badge_markdown(path.name, language=language_of(path)), \
        f"{_id(path)}: run `make notebooks`"
    # the badge's picture travels with the notebook: a remote image is broken without a network
    assert badge[0].get("attachments") == badge_attachment(language_of(path)), f"{_id(path)}: run `make notebooks`"
    assert len(setup) == 1 and setup[0].source == setup_code(packages=colab_packages(nb), language=language_of(path)), \
        f"{path.name}: run `make notebooks`"
    assert nb.cells.index(setup[0]) == min(nb.cells.index(c) for c in _code_cells(nb)), "setup must come first"


def test_badge_points_at_the_repository():
    url = repository_url()
    assert url.startswith("https://github.com/")
    owner_and_name = url[len("https://github.com/"):]
    assert badge_markdown("x.ipynb", url).endswith(f"/github/{owner_and_name}/blob/main/notebooks/x.ipynb)")
    assert f"git+{url}" in setup_code(url)
    assert badge_markdown("x.ipynb", url).startswith(f"[![Open In Colab](attachment:{BADGE_ATTACHMENT})](")
    chinese = badge_markdown("x.ipynb", url, "zh-CN")
    assert chinese.startswith(f"[![在 Colab 中打开](attachment:{BADGE_ATTACHMENT})](")
    assert badge_attachment("zh-CN") != badge_attachment("en")  # the picture says 在 Colab 中打开
    assert chinese.endswith(f"/github/{owner_and_name}/blob/main/notebooks/zh-CN/x.ipynb)")


def _code_lines(source: str) -> list[str]:
    return [line for line in source.splitlines() if not line.lstrip().startswith("#")]


@pytest.mark.parametrize("twin", TWIN_PATHS, ids=[_id(p) for p in TWIN_PATHS])
def test_a_twin_has_the_english_set_up_cell_and_selects_chinese(twin):
    """The same set-up code line for line (Colab installs the same packages; only the comment is translated), and
    the language call of the imports cell switched: `mha_lib.set_language("zh-CN")` where the English chapter
    selects "en"."""
    nb, english = _load(twin), _load(ROOT / "notebooks" / twin.name)
    setup = [[_code_lines(c.source) for c in n.cells if SETUP_TAG in _tags(c)] for n in (nb, english)]
    assert setup[0] == setup[1] and len(setup[0]) == 1, f"{_id(twin)}: the set-up code differs from the English one"
    calls = [re.findall(r"mha_lib\.set_language\(([^)]*)\)", "\n".join(c.source for c in _code_cells(n)))
             for n in (nb, english)]
    assert calls[0] == ['"zh-CN"'] * len(calls[1]) and calls[0], \
        f"{_id(twin)}: selects {calls[0]}, expected one set_language(\"zh-CN\") per English set_language call"


def test_nbval_runs_strict():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    addopts = re.search(r"^addopts\s*=\s*\"([^\"]*)\"", text, re.MULTILINE).group(1)
    assert "--nbval " in addopts + " " and "--nbval-lax" not in addopts
    assert "--nbval-sanitize-with tests/nbval_sanitize.cfg" in addopts
    # a stalled kernel fails its notebook at the cell limit the standalone run uses too (nbval's own: 2,000 s)
    assert f"--nbval-cell-timeout={CELL_LIMIT_S} " in addopts + " "


def test_a_cell_s_own_limit_is_a_well_formed_tag(notebook):
    """`timeout-<seconds>` (tests/conftest.py: own_limit) gives a cell long on purpose a limit of its own; a
    misspelt one would leave it the common limit."""
    path, nb = notebook
    for cell in _code_cells(nb):
        own_limit(cell)  # raises on e.g. "timeout-5min"


def test_cell_limits_are_read_from_tags():
    cell = nbformat.v4.new_code_cell("pass")
    assert own_limit(cell) is None and cell_limit(cell) == CELL_LIMIT_S
    cell.metadata["tags"] = ["nbval-skip", "timeout-300"]
    assert own_limit(cell) == cell_limit(cell) == 300
    cell.metadata["tags"] = ["timeout-5min"]
    with pytest.raises(ValueError, match="timeout-<seconds>"):
        own_limit(cell)


def test_sanitize_file_has_explicit_replacements():
    # nbval silently drops a `replace:` line with nothing after the colon
    lines = (ROOT / "tests" / "nbval_sanitize.cfg").read_text(encoding="utf-8").splitlines()
    regexes = [line for line in lines if line.startswith("regex:")]
    replaces = [line for line in lines if line.startswith("replace:")]
    assert regexes and len(regexes) == len(replaces)
    assert all(line[len("replace:"):].strip() for line in replaces)


# A path into the repository written in a notebook, the README or the teacher's guide (``tests/core/x.py``,
# ``mha_lib/induction/checkpoints/``): a reader follows it, so it must exist (a move of files breaks no pointer).
# A pattern (``speed_<device>.json``, ``browser_*``, ``chNN_``) names no one file: only its folder is checked.
REPO_PATH = re.compile(r"(?<![\w/.])((?:mha_lib|tests|assets|notebooks)/[\w./-]*[\w/])(?![<*{\w])")


def _named_paths(text: str) -> set[str]:
    paths = {match.rstrip("/.") for match in REPO_PATH.findall(text)}
    return {path.rsplit("/", 1)[0] if "NN" in path.rsplit("/", 1)[-1] else path for path in paths}


@pytest.mark.parametrize(
    "document", [*NOTEBOOK_PATHS, ROOT / "README.md", ROOT / "notebooks" / "TEACHERS_GUIDE.md",
                 *[path for path in (ROOT / "README.zh-CN.md", ROOT / "notebooks" / "zh-CN" / "教师指南.md")
                   if path.is_file()]],
    ids=lambda path: _id(path) if path.suffix == ".ipynb" else path.name,
)
def test_every_repository_path_named_exists(document):
    if document.suffix == ".ipynb":
        text = "\n".join(cell.source for cell in _load(document).cells)
    else:
        text = document.read_text(encoding="utf-8")
    written_by_tests = "tests/artifacts"  # the browser test's screenshots: not in a fresh clone
    missing = sorted(
        path for path in _named_paths(text) if not path.startswith(written_by_tests) and not (ROOT / path).exists()
    )
    assert not missing, f"{document.name} names paths that do not exist: {missing}"


def test_a_stale_path_is_caught():
    text = "see `tests/test_old.py`, mha_lib/induction/checkpoints/, speed_<device> in mha_lib/results/speed_<d>.json"
    assert _named_paths(text + " and tests/exercises/test_exercises_chNN.py") == {
        "tests/test_old.py", "mha_lib/induction/checkpoints", "mha_lib/results", "tests/exercises"}
