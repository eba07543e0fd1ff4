"""Each notebook alone, as Colab or a download opens it: an empty folder, mha_lib from its wheel, ipywidgets 7.7.

What this test builds, once per test session (one build shared by every pytest-xdist worker, under a file lock):

* the wheel of the working tree (``tests/conftest.py``: ``shipped_wheel``, also used by strict nbval's check below);
* a virtual environment that sees the packages of ``.venv`` (through a folder of links to them) *except*
  ``mha_lib`` and ipywidgets 8: mha_lib is installed from the wheel, and ipywidgets is Colab's 7.7.1 (from
  ``.venv-ipywidgets7``, which ``make install`` creates). Nothing is downloaded: pip runs with ``--no-index``.

Then a notebook is copied alone into an empty folder and run there with nbclient in that environment, with
``MHA_LIB_SOURCE`` pointing the notebook's own set-up cell at the wheel (so the cell's install command runs, as on
Colab). The test fails on an error output, anything on stderr, an image link that is not an attachment (or an
https address), a file of the checkout opened by the kernel (an audit hook lists every file the kernel opens),
or an mha_lib that does not come from the wheel.

What each notebook gets, without running it twice: strict nbval (``make test``) runs every notebook of both editions
cell by cell, and after its last cell checks that its kernel opened no file of the checkout that the wheel does not
ship (``reads only what the wheel ships``, tests/conftest.py: the same audit hook). This run adds what only a
separate environment shows: the wheel installs through the notebook's own set-up cell, and the notebook runs with
Colab's ipywidgets 7.7 and nothing of the checkout beside it. It runs

* every English chapter (each one's widget cells meet ipywidgets 7.7, and every variant of the set-up cell runs);
* one Chinese twin (``REPRESENTATIVE_TWIN``: the catalog, the CJK fonts and a translated widget, from the wheel),
  and every other twin whose widget cells are not its English chapter's code (``same_code``: up to strings and
  comments); a twin whose widget cells are covered by its English chapter's run. (A twin's set-up cell is its English
  chapter's, byte for byte: tests/notebooks/test_notebooks.py.)

A cell may run ``CELL_LIMIT_S`` (tests/conftest.py; a cell long on purpose has a tag ``timeout-<seconds>``):
enough for a machine busy with other work, short enough that a stalled kernel fails fast
(``test_a_stalled_cell_fails_at_its_limit``).

``MHA_STANDALONE_NOTEBOOKS=DIR`` runs the notebooks of DIR (and of DIR/zh-CN) instead of ``notebooks/`` (to try
copies); ``MHA_STANDALONE_ALL=1`` runs every twin too.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from conftest import (AUDIT_HOOK, CELL_LIMIT_S, ENVIRONMENTS, cell_limit, checkout_files_read, offline_pip_env,
                      real_path, shared_temp, shipped_wheel)
from notebook_assets import image_targets
from notebook_client import Client

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = Path(os.environ.get("MHA_STANDALONE_NOTEBOOKS", ROOT / "notebooks")).resolve()
NOTEBOOK_PATHS = sorted(NOTEBOOK_DIR.glob("*.ipynb")) + sorted((NOTEBOOK_DIR / "zh-CN").glob("[0-9][0-9]_*.ipynb"))


def _id(path: Path) -> str:
    """``05_causal_masking.ipynb``, and ``zh-CN/05_causal_masking.ipynb`` for its twin."""
    return path.name if path.parent == NOTEBOOK_DIR else f"{path.parent.name}/{path.name}"


def same_code(a: str, b: str) -> bool:
    """Whether two cells run the same code: the same Python once IPython's magics are translated, up to the text of
    strings and comments (an f-string keeps its fields, in any order: a translation may reorder them; a magic keeps
    its arguments)."""
    from IPython.core.inputtransformer2 import TransformerManager

    class Blank(ast.NodeTransformer):
        def visit_Constant(self, node):
            return ast.Constant("") if isinstance(node.value, str) else node

        def visit_Call(self, node):  # a magic (`%pip install ...`), translated: its arguments are code
            magic = isinstance(node.func, ast.Attribute) and node.func.attr.startswith(("run_line_magic", "run_cell",
                                                                                      "system", "getoutput"))
            return node if magic else self.generic_visit(node)

        def visit_JoinedStr(self, node):
            fields = [self.visit(v) for v in node.values if isinstance(v, ast.FormattedValue)]
            return ast.JoinedStr(values=sorted(fields, key=ast.dump))

    def shape(source: str) -> str:
        return ast.dump(Blank().visit(ast.parse(TransformerManager().transform_cell(source))))

    return shape(a) == shape(b)


def _widget_cell(cell) -> bool:
    """A code cell that shows a widget (its stored output is one, or the static copy of one) or names ipywidgets."""
    from mha_lib.display.static_widgets import is_static_copy

    return cell.cell_type == "code" and (re.search(r"\bipywidgets\b", cell.source) is not None or any(
        is_static_copy(o) or "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in cell.outputs))


def twin_needs_its_own_run(twin: Path) -> bool:
    """True unless every widget cell of ``twin`` runs its English chapter's code (``same_code``), whose run here
    then shows that code working under Colab's ipywidgets."""
    english = NOTEBOOK_DIR / twin.name
    if not english.is_file():
        return True
    cells = [nbformat.read(path, as_version=4).cells for path in (english, twin)]
    if [c.cell_type for c in cells[0]] != [c.cell_type for c in cells[1]]:
        return True
    return any((_widget_cell(en) or _widget_cell(zh)) and not same_code(en.source, zh.source)
               for en, zh in zip(*cells) if en.cell_type == "code")


ENGLISH_PATHS = [p for p in NOTEBOOK_PATHS if p.parent == NOTEBOOK_DIR]
REPRESENTATIVE_TWIN = "00_start_here.ipynb"  # the shortest twin: Chinese explorer, figures and messages
RUN_ALL = os.environ.get("MHA_STANDALONE_ALL") == "1"
RUN_ALONE = ENGLISH_PATHS + [p for p in NOTEBOOK_PATHS if p.parent != NOTEBOOK_DIR and (
    RUN_ALL or p.name == REPRESENTATIVE_TWIN or twin_needs_its_own_run(p))]

WIDGETS7 = ROOT / ".venv-ipywidgets7"
SITE_PACKAGES = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()))
# what the standalone environment must not take from .venv: our own package and ipywidgets 8
HIDDEN = re.compile(r"^(mha_lib|__editable__.*mha_lib.*|ipywidgets|ipywidgets-.*\.dist-info|.*\.pth)$")

# conftest's audit hook (the one strict nbval runs in each kernel), installed at start-up when MHA_AUDIT_LOG is set
AUDIT_MODULE = (
    '"""Lists every file this interpreter opens (MHA_AUDIT_LOG); imported at start-up by _mha_audit.pth."""\n'
    "import os\n"
    "if os.environ.get('MHA_AUDIT_LOG'):\n"
    f"    exec({AUDIT_HOOK!r}.format(log=os.environ['MHA_AUDIT_LOG']))\n"
)

CHECK_CELL = (
    "import json as _json, sys as _sys, mha_lib as _mha_lib\n"
    "print(_json.dumps({'mha_lib': _mha_lib.__file__, "
    "'ipywidgets': getattr(_sys.modules.get('ipywidgets'), '__version__', None), "
    "'ipykernel': _sys.modules['ipykernel'].__version__}))"
)
# ipykernel 7.0 to 7.3 send each shell reply raw on the shell socket, behind the back of the stream that reads
# requests from it; a request that arrives in that moment stays unread, and the kernel waits idle for ever
# (ipykernel issue 1554, fixed by pull request 1529 in 7.4.0). Here, with two workers, that stalled a cell in
# each of two runs of this file and in 3 of 154 notebook runs of a two-process loop (the request was answered at
# once when a new client connected to the shell socket, which makes libzmq look again); with 7.4.0, none in 242.
STRANDING_IPYKERNEL = re.compile(r"^7\.[0-3]\.")


def _make_environment(folder: Path, wheel: Path) -> Path:
    """A venv that sees .venv's packages but mha_lib (from the wheel) and ipywidgets (7.7.1); returns its python."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    shared = folder / "shared-site-packages"  # links to .venv's packages, minus the hidden ones
    shared.mkdir()
    for entry in SITE_PACKAGES.iterdir():
        if not HIDDEN.match(entry.name):
            (shared / entry.name).symlink_to(entry)
    for entry in WIDGETS7.iterdir():  # Colab's ipywidgets, ahead of everything shared
        if not entry.name.startswith("."):
            (site / entry.name).symlink_to(entry)
    (site / "_mha_shared.pth").write_text(f"{shared}\n", encoding="utf-8")
    (site / "_mha_audit.py").write_text(AUDIT_MODULE, encoding="utf-8")
    (site / "_mha_audit.pth").write_text("import _mha_audit\n", encoding="utf-8")
    # the wheel, installed the way the set-up cell installs it (so that cell finds it already satisfied and two
    # workers never install into the same folder at once)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", f"mha_lib @ {wheel.as_uri()}"],
                   check=True, capture_output=True, env=offline_pip_env())
    return python


@pytest.fixture(scope="session")
def standalone(request):
    """(python of the standalone environment, the wheel): built once, shared by every xdist worker."""
    if not (WIDGETS7 / "ipywidgets").is_dir():
        pytest.skip(f"{WIDGETS7.name}/ is missing: `make install` creates it (ipywidgets 7.7.1, as on Colab)")
    from filelock import FileLock  # a dependency of torch

    shared = shared_temp(request.config)
    folder = shared / "standalone"
    wheel = shipped_wheel(request.config)
    with FileLock(str(shared / "standalone.lock")):
        done = folder / "ready.json"
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            python = _make_environment(folder, wheel)
            done.write_text(json.dumps({"python": str(python)}), encoding="utf-8")
        ready = json.loads(done.read_text(encoding="utf-8"))
    return Path(ready["python"]), wheel


def _kernel_manager(python: Path, folder: Path):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    spec_dir = folder / "kernels" / "standalone"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "standalone", "language": "python"}), encoding="utf-8")
    # async, as nbclient expects: a blocking client's wait for a lost message would stall the event loop (and
    # with it the cell timeout) for ever
    km = AsyncKernelManager(kernel_name="standalone",
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(folder / "kernels")]))
    km.client_factory = Client  # waits for shell replies in 1 s looks (tests/notebook_client.py says why)
    return km


def test_every_notebook_is_tested():
    assert NOTEBOOK_PATHS, f"no notebooks in {NOTEBOOK_DIR}"
    assert set(ENGLISH_PATHS) <= set(RUN_ALONE), "every English chapter runs alone"


def test_image_links_travel_with_the_notebook():
    """Cheap, and independent of the run below: every picture is an attachment (or an https address), in the
    markdown and in the stored outputs (which strict nbval checks a run reproduces), in every notebook."""
    problems = []
    for path in NOTEBOOK_PATHS:
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            problems += [f"{_id(path)} cell {index}: {t}" for t in _bad_images(cell) + _bad_output_images(cell)]
    assert not problems, "images that do not travel with the notebook (run `make notebooks`):\n" + "\n".join(problems)


def _bad_images(cell) -> list[str]:
    if cell.cell_type != "markdown":
        return []
    bad = []
    for target in image_targets(cell.source):
        if target.startswith("attachment:"):
            if target[len("attachment:"):] not in cell.get("attachments", {}):
                bad.append(f"{target} (no such attachment)")
        elif not target.startswith("https://"):
            bad.append(target)
    return bad


def _bad_output_images(cell) -> list[str]:
    """``<img>`` sources in a code cell's HTML outputs that are neither data nor https addresses."""
    bad = []
    for output in cell.get("outputs", []):
        html = output.get("data", {}).get("text/html", "")
        html = "".join(html) if isinstance(html, list) else html
        bad += [f"output image {src}" for src in re.findall(r"<img[^>]*src=[\"']([^\"']+)", html)
                if not src.startswith(("data:", "https://"))]
    return bad


def test_twins_of_the_same_code_are_recognised():
    english = 'show(f"after {n} steps", loss)  # the loss\n%matplotlib inline\nplot(x, title="heads")'
    chinese = 'show(f"{n} 步之后", loss)  # 损失\n%matplotlib inline\nplot(x, title="各个头")'
    assert same_code(english, chinese)
    assert not same_code(english, chinese.replace("loss)", "loss, decimals=2)"))
    assert not same_code(english, chinese.replace("{n}", "{n + 1}"))  # an f-string's field is code
    assert not same_code(english, chinese.replace("%matplotlib inline", "%matplotlib widget"))


def test_a_read_the_wheel_would_miss_is_named():
    """strict nbval's check (tests/conftest.py: ``checkout_files_read``) on a made-up audit log."""
    shipped = {"mha_lib/__init__.py", "mha_lib/benchmark_results/speed_cpu.json"}
    opened = [str(ROOT / "mha_lib" / "__init__.py"), str(ROOT / "mha_lib" / "__pycache__" / "__init__.cpython-311.pyc"),
              str(ROOT / "mha_lib" / "benchmark_results" / "speed_cpu.json"), str(ROOT / "README.md"),
              str(ROOT / "mha_lib" / "modules.py"), str(ROOT / "notebooks" / "no_such_file.txt"),
              str(ROOT / ".venv" / "pyvenv.cfg"), "/usr/lib/os-release"]
    assert checkout_files_read(opened, shipped) == [
        "README.md (a file of the checkout)",
        "mha_lib/modules.py (not in the wheel: add it to [tool.setuptools.package-data])"]


def _run(nb, python: Path, folder: Path, env: dict, limit=cell_limit) -> None:
    """Run ``nb`` with nbclient in a kernel of ``python`` whose working directory is ``folder``; each cell may run
    ``limit(cell)`` seconds."""
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    km = _kernel_manager(python, folder.parent)
    # iopub_timeout: a cell's printed output may reach the client after its reply; nbclient's default 4 s wait is
    # too short when both workers load transformers at once, and a late output would be dropped silently
    client = NotebookClient(nb, km=km, timeout_func=limit, iopub_timeout=30, raise_on_iopub_timeout=True,
                            startup_timeout=CELL_LIMIT_S, resources={"metadata": {"path": str(folder)}})
    try:
        client.execute(env=env)
    finally:  # nbclient shuts down only the kernels it creates itself
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)


def _slowest_cells(nb, count: int = 5) -> list[tuple[float, int]]:
    """(seconds, index) of the ``count`` cells that ran longest (nbclient's timing metadata)."""
    times = []
    for index, cell in enumerate(nb.cells):
        timing = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            start, end = (datetime.fromisoformat(timing[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            times.append(((end - start).total_seconds(), index))
    return sorted(times, reverse=True)[:count]


def test_a_stalled_cell_fails_at_its_limit(tmp_path):
    """The limit is what makes a stalled kernel fail fast: a cell that outlives it fails the run at the limit; a
    cell's own ``timeout-<seconds>`` tag gives it longer."""
    from nbclient.exceptions import CellTimeoutError

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import time\ntime.sleep(3)", metadata={"tags": ["timeout-60"]}),
        nbformat.v4.new_code_cell("time.sleep(600)")])
    (tmp_path / "work").mkdir()
    with pytest.raises(CellTimeoutError):
        _run(nb, Path(sys.executable), tmp_path / "work", offline_pip_env(), lambda cell: cell_limit(cell) if (
            "timeout-60" in cell.metadata.get("tags", [])) else 1)
    failed = datetime.now(timezone.utc)
    assert nb.cells[0].outputs == [] and nb.cells[0].execution_count == 1  # the tagged 3 s cell finished
    started = datetime.fromisoformat(nb.cells[1].metadata.execution["iopub.execute_input"].replace("Z", "+00:00"))
    assert (failed - started).total_seconds() < 30, "the stalled cell held the run far beyond its 1 s"


# under `make test` both workers run these, one notebook at a time (tests/conftest.py; the environment is
# built once)
@pytest.mark.parametrize("path", RUN_ALONE, ids=[_id(p) for p in RUN_ALONE])
def test_notebook_runs_alone_from_the_wheel(path, standalone, tmp_path):
    python, wheel = standalone
    work = tmp_path / "alone"
    work.mkdir()
    shutil.copy(path, work / path.name)
    nb = nbformat.read(work / path.name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_CELL))
    audit = tmp_path / "opened.txt"
    env = offline_pip_env(MHA_LIB_SOURCE=wheel.as_uri(), MHA_AUDIT_LOG=str(audit), PYTHONHASHSEED="0",
                          CUDA_VISIBLE_DEVICES="", VIRTUAL_ENV=str(python.parent.parent),
                          PATH=os.pathsep.join([str(python.parent), os.environ.get("PATH", "")]))
    # No retry when a cell outlives its limit (CELL_LIMIT_S, a test of its own above): a stall is a bug to see
    # (the one we had is the ipykernel one above, checked below).
    try:
        _run(nb, python, work, env)
    finally:  # shown when the test fails (and with `pytest -rP`): where the time went
        print(f"{_id(path)}: slowest cells (s):", ", ".join(f"{i}: {t:.1f}" for t, i in _slowest_cells(nb)))

    errors, stderr = [], []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error" and "raises-exception" not in cell.metadata.get("tags", []):
                errors.append(f"cell {index}: {output.ename}: {output.evalue}")
            if output.get("name") == "stderr":
                stderr.append(f"cell {index}: {output.text}")
        errors += [f"cell {index}: {problem}" for problem in _bad_images(cell) + _bad_output_images(cell)]
    assert not errors, "\n".join(errors)
    assert not stderr, "".join(stderr)

    facts = json.loads(nb.cells[-1].outputs[-1].text.strip().splitlines()[-1])
    assert Path(facts["mha_lib"]).resolve().is_relative_to(python.parent.parent.resolve()), facts
    assert facts["ipywidgets"] in (None, "7.7.1"), facts
    assert not STRANDING_IPYKERNEL.match(facts["ipykernel"]), (
        f"the kernel runs ipykernel {facts['ipykernel']}, which can leave a cell unanswered (ipykernel issue "
        f"1554); expected 7.4.0 or later (requirements.txt)")

    opened = [_Located(line) for line in audit.read_text(encoding="utf-8").splitlines()]
    assert opened, "the audit hook recorded nothing"
    checkout = [p.path for p in opened if p.inside(ROOT) and not any(p.inside(e) for e in ENVIRONMENTS)]
    assert not checkout, f"{_id(path)} read files of the checkout: {checkout[:10]}"
    siblings = [p.path for p in opened if p.inside(work.parent) and not p.inside(work)]
    assert not siblings, f"{_id(path)} reached outside its folder: {siblings[:10]}"


class _Located:
    """A path of the audit log, as written and with its links resolved (once: a log holds thousands)."""

    def __init__(self, path: str):
        self.path, self.forms = path, (os.path.abspath(path), real_path(path))

    def inside(self, folder: Path) -> bool:
        folders = {os.path.abspath(folder), real_path(str(folder))}
        return any(form == f or form.startswith(f + os.sep) for form in self.forms for f in folders)
