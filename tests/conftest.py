"""Shared test set-up: full-precision float32 matmuls, as in the notebooks; a kernel with Colab's ipywidgets; the
wheel of the working tree (built once per run); strict nbval's cell limits and its check that every notebook reads
only what the wheel ships."""

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mha_lib

# One thread per pytest-xdist worker, and per kernel it starts (they inherit OMP_NUM_THREADS). By default every
# worker runs torch on as many threads as the machine has cores: two workers on two cores oversubscribe them, and
# OpenMP threads waiting for each other make small tensor operations up to 100 times slower (measured: the
# core, exercise and induction tests took 56 s with the default, 27 s with one thread per worker).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

# Google Colab's ipywidgets 7.7, installed beside the environment by `make install` (see the Makefile)
ROOT = Path(__file__).resolve().parents[1]
IPYWIDGETS7_DIR = ROOT / ".venv-ipywidgets7"
ENVIRONMENTS = (ROOT / ".venv", IPYWIDGETS7_DIR)  # inside the checkout, but the environment, not the project


@pytest.fixture(autouse=True)
def _reproducible():
    mha_lib.make_reproducible(0)
    yield


@pytest.fixture
def device():
    """The device the library would pick (cuda, mps or cpu)."""
    return mha_lib.get_device()


@pytest.fixture(scope="module")
def ipywidgets7_kernel():
    """A real Jupyter kernel whose ``import ipywidgets`` finds 7.7.1 (first on PYTHONPATH); the rest is ours."""
    if not (IPYWIDGETS7_DIR / "ipywidgets").is_dir():
        pytest.skip(f"{IPYWIDGETS7_DIR.name}/ is missing: `make install` creates it (ipywidgets 7.7.1, as on Colab)")
    from jupyter_client.manager import start_new_kernel

    pythonpath = os.pathsep.join([str(IPYWIDGETS7_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    # the kernel's own log (stderr) would add jupyter_client's "running over TCP" notice; the code's stderr
    # comes back as messages, which the tests read
    manager, client = start_new_kernel(kernel_name="python3", env={**os.environ, "PYTHONPATH": pythonpath},
                                       stderr=subprocess.DEVNULL, startup_timeout=120)
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run_in_kernel(client, code: str) -> tuple[list[dict], dict]:
    """Run ``code`` in the kernel; it must succeed, write nothing to stderr and print a JSON object last.

    Returns every message the kernel sent (what a browser would receive) and that JSON object.
    """
    messages: list[dict] = []
    reply = client.execute_interactive(code, timeout=300, output_hook=messages.append)
    errors = ["\n".join(m["content"]["traceback"]) for m in messages if m["msg_type"] == "error"]
    assert reply["content"]["status"] == "ok", "\n".join(errors)
    stderr = [m["content"]["text"] for m in messages if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"]
    assert not stderr, "".join(stderr)
    stdout = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    return messages, json.loads(stdout.strip().splitlines()[-1])


def pytest_report_header(config):
    return f"torch {torch.__version__}, mha_lib device: {mha_lib.get_device()}"



def work_unit(nodeid: str) -> str:
    """What one pytest-xdist worker runs whole under `make test` (`--dist loadfile`): a test file, or a notebook
    (nbval runs a notebook's cells in order in one kernel). One exception, so that both workers share the slowest
    file: each notebook of test_standalone.py is a unit of its own."""
    if "::test_notebook_runs_alone_from_the_wheel[" in nodeid:
        return nodeid
    return nodeid.split("::", 1)[0]


def _unit_rank(unit: str, size: int) -> tuple:
    """Longest first, so that no long unit starts last and leaves the other worker idle: the browser test (a
    JupyterLab and a Chromium, minutes), then the notebooks, strict nbval and standalone (later chapters are
    longer), then the other files, most tests first (pytest-xdist's own order)."""
    if unit.endswith("test_browser.py"):
        return 0, 0
    chapter = re.search(r"\b(\d\d)_\w+\.ipynb", unit)
    if chapter and (unit.endswith(".ipynb") or "::test_notebook_runs_alone_from_the_wheel[" in unit):
        return 1, -int(chapter.group(1))
    return 2, -size


def order_for_workers(items: list) -> list:
    """``items`` by work unit, in ``_unit_rank`` order (each unit's items in their own order)."""
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(work_unit(item.nodeid), []).append(item)
    ranked = sorted(units.items(), key=lambda unit: _unit_rank(unit[0], len(unit[1])))
    return [item for _, members in ranked for item in members]


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist (or without xdist) still runs
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs pytest-xdist with `--dist loadfile`: each work unit (``work_unit``) whole on one worker,
    handed out in the order of the workers' collection (``order_for_workers``: longest first). (pytest-xdist's own
    `loadgroup` cannot do this under pytest 9: it renames items through an attribute pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndStandaloneNotebooks(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # the collection's order is already the one we want
    return FilesAndStandaloneNotebooks(config, log)


# ---- the wheel of the working tree, built once per test run --------------------------------------------------------

def offline_pip_env(**extra) -> dict:
    """pip offline and silent: no index, no user or site config (their find-links may not exist)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_") and key != "PYTHONPATH"}
    return {**env, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_WARN_SCRIPT_LOCATION": "1", **extra}


def shared_temp(config) -> Path:
    """A folder every pytest-xdist worker of this run shares (the run's base temporary folder)."""
    base = config._tmp_path_factory.getbasetemp()  # what the tmp_path_factory fixture uses
    return base.parent if hasattr(config, "workerinput") else base


def shipped_wheel(config) -> Path:
    """The wheel of the working tree (``pip wheel --no-deps``, from a copy of ``pyproject.toml``, ``README.md`` and
    ``mha_lib/``, so no ``build/`` or ``egg-info`` lands in the checkout): built once per run, under a file lock,
    for every worker (tests/notebooks/test_standalone.py installs it; strict nbval checks what each notebook reads
    against its file list)."""
    from filelock import FileLock  # a dependency of torch

    folder = shared_temp(config) / "wheel"
    with FileLock(str(folder) + ".lock"):
        wheels = sorted((folder / "dist").glob("mha_lib-*.whl"))
        if not wheels:
            shutil.rmtree(folder, ignore_errors=True)
            (folder / "source").mkdir(parents=True)
            for name in ("pyproject.toml", "README.md"):
                shutil.copy(ROOT / name, folder / "source" / name)
            shutil.copytree(ROOT / "mha_lib", folder / "source" / "mha_lib",
                            ignore=shutil.ignore_patterns("__pycache__"))
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--no-index", "--wheel-dir", str(folder / "dist"), str(folder / "source")],
                           check=True, capture_output=True, env=offline_pip_env())
            wheels = sorted((folder / "dist").glob("mha_lib-*.whl"))
    (wheel,) = wheels
    return wheel


def wheel_files(wheel: Path) -> set[str]:
    """The files of the ``mha_lib`` package in ``wheel``, as paths relative to the repository (``mha_lib/...``)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if name.startswith("mha_lib/")}


def _is_inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@functools.lru_cache(maxsize=None)
def _real_folder(folder: str) -> str:
    return os.path.realpath(folder)


def real_path(path: str) -> str:
    """``os.path.realpath(path)``, with each folder resolved once (an audit log names thousands of files in a few
    hundred folders)."""
    path = os.path.abspath(path)
    return os.path.realpath(path) if os.path.islink(path) else os.path.join(
        _real_folder(os.path.dirname(path)), os.path.basename(path))


def checkout_files_read(opened: list[str], shipped: set[str], allowed: tuple[Path, ...] = ()) -> list[str]:
    """Of the files a notebook's kernel ``opened`` (an audit log), those a copy of the notebook alone, with mha_lib
    installed from its wheel, would not find: a file of the checkout outside ``mha_lib/`` and the environments (or
    the ``allowed`` folders), or a file of ``mha_lib/`` that the wheel does not ship (``shipped``: its file list;
    compiled ``__pycache__`` files count as their source)."""
    root, package = ROOT.resolve(), (ROOT / "mha_lib").resolve()
    environments = tuple(e.resolve() for e in ENVIRONMENTS) + tuple(a.resolve() for a in allowed)
    problems = []
    for line in opened:
        path = Path(real_path(line))
        if not _is_inside(path, root) or any(_is_inside(path, e) for e in environments) or not path.is_file():
            continue  # (a path that is no file was a look, not a read: e.g. the editable install's path hook)
        if _is_inside(path, package):
            relative = path.relative_to(root)
            if relative.parent.name == "__pycache__" and relative.suffix == ".pyc":
                relative = relative.parent.parent / (relative.name.split(".", 1)[0] + ".py")
            if relative.as_posix() in shipped:
                continue
            problems.append(f"{relative.as_posix()} (not in the wheel: add it to [tool.setuptools.package-data])")
        else:
            problems.append(f"{path.relative_to(root).as_posix()} (a file of the checkout)")
    return sorted(set(problems))


# ---- cell limits: strict nbval and the standalone run (tests/notebooks/test_standalone.py) --------------------------

# Every cell a test executes takes well under 10 s on a quiet machine (a training cell trains a short run under a
# test); the limit is there so that a stalled kernel fails its notebook in two minutes instead of holding the run,
# with room for a machine busy with other work. A cell that is long on purpose carries a limit of its own, a tag
# `timeout-<seconds>` (e.g. `timeout-300`).
CELL_LIMIT_S = 120
TIMEOUT_TAG = re.compile(r"^timeout-(\d+)$")


def own_limit(cell) -> int | None:
    """The limit of ``cell``'s own ``timeout-<seconds>`` tag, or None."""
    tags = cell.get("metadata", {}).get("tags", [])
    bad = [tag for tag in tags if tag.startswith("timeout") and not TIMEOUT_TAG.match(tag)]
    if bad:
        raise ValueError(f"cell tag {bad[0]!r}: a cell's own limit is written timeout-<seconds>, e.g. timeout-300")
    limits = [int(TIMEOUT_TAG.match(tag).group(1)) for tag in tags if TIMEOUT_TAG.match(tag)]
    return max(limits) if limits else None


def cell_limit(cell) -> int:
    """The seconds a test lets ``cell`` run: its own ``timeout-<seconds>`` tag, or ``CELL_LIMIT_S`` (strict nbval
    has it from ``--nbval-cell-timeout`` in pyproject.toml's addopts)."""
    return own_limit(cell) or CELL_LIMIT_S


# ---- strict nbval: limits, and what each notebook reads -------------------------------------------------------------

try:
    from nbval.plugin import IPyNbCell, IPyNbFile
except ImportError:  # pytest without nbval: the hooks below find no notebook item
    IPyNbCell = IPyNbFile = type("NoNotebookItem", (), {})

# Run in each notebook's kernel before its first cell: lists every file the kernel opens from then on (an audit
# hook; the standalone run installs the same one as its _mha_audit module), one path per line, into the file
# named by the format field.
AUDIT_HOOK = '''
def _mha_audit_hook(event, args, _log=open({log!r}, "a", encoding="utf-8", buffering=1), _seen=set(),
                    _os=__import__("os")):
    if event == "open" and isinstance(args[0], (str, bytes)):
        path = _os.fsdecode(args[0])
        if not _os.path.isabs(path):
            path = _os.path.join(_os.getcwd(), path)
        if path not in _seen:
            _seen.add(path)
            _log.write(path + "\\n")
__import__("sys").addaudithook(_mha_audit_hook)
del _mha_audit_hook
'''
# nbval waits 5 s for a cell's output messages after its reply: too short on a busy machine (two kernels importing
# transformers at once), where a late message would fail the cell
NBVAL_OUTPUT_WAIT_S = 30


class ReadsOnlyWhatTheWheelShips(pytest.Item):
    """After a notebook's last cell under strict nbval: every file its kernel opened is in the wheel or outside the
    checkout, so the notebook alone, with mha_lib from its wheel (Colab, a download), finds what it reads. (The
    standalone run, tests/notebooks/test_standalone.py, runs a notebook that way; this check covers every notebook
    of both editions without a second run.)"""

    def runtest(self):
        log = getattr(self.parent, "mha_audit_log", None)
        if log is None:
            pytest.skip("the notebook's kernel did not start")
        assert log.is_file(), "the audit hook was not installed in the notebook's kernel"
        opened = log.read_text(encoding="utf-8").splitlines()
        package = str((ROOT / "mha_lib").resolve())
        assert any(real_path(line).startswith(package) for line in opened), \
            "the audit hook saw no file of mha_lib opened: it watched nothing (the notebook imports mha_lib)"
        problems = checkout_files_read(opened, wheel_files(shipped_wheel(self.config)))
        assert not problems, (f"{self.parent.name} opened files that a copy of it alone, with mha_lib from its "
                              f"wheel, would not find:\n" + "\n".join(problems))

    def reportinfo(self):
        return self.path, None, f"{self.parent.name}::{self.name}"


def _collection_modifyitems(config, items):
    """Strict nbval: one more item after each notebook's last cell (``ReadsOnlyWhatTheWheelShips``), and a wait for
    late output messages that a busy machine does not exceed; on a pytest-xdist worker, the work units longest
    first (``order_for_workers``)."""
    checked = []
    for index, item in enumerate(items):
        checked.append(item)
        if isinstance(item, IPyNbCell):
            item.output_timeout = NBVAL_OUTPUT_WAIT_S
            following = items[index + 1] if index + 1 < len(items) else None
            if not isinstance(following, IPyNbCell) or following.parent is not item.parent:
                checked.append(ReadsOnlyWhatTheWheelShips.from_parent(item.parent, name="reads only what the "
                                                                                        "wheel ships"))
    items[:] = order_for_workers(checked) if hasattr(config, "workerinput") else checked


def _runtest_setup(item):
    """Once a notebook's kernel has started (nbval starts it in the setup of the first cell), install the audit hook
    in it before any cell runs."""
    outcome = yield
    notebook = item.parent
    if (not isinstance(item, IPyNbCell) or outcome.excinfo is not None or hasattr(notebook, "mha_audit_log")
            or getattr(notebook, "kernel", None) is None):
        return
    folder = item.config._tmp_path_factory.getbasetemp() / "nbval-audit"
    folder.mkdir(exist_ok=True)
    notebook.mha_audit_log = folder / (re.sub(r"[^\w.-]", "_", notebook.nodeid) + ".txt")
    kernel = notebook.kernel
    msg_id = kernel.kc.execute(AUDIT_HOOK.format(log=str(notebook.mha_audit_log)), silent=True,
                               store_history=False, allow_stdin=False)
    kernel.await_reply(msg_id, timeout=CELL_LIMIT_S)  # the hook creates the log at once (checked after the run)


def _runtest_call(item):
    """A cell's own limit (its ``timeout-<seconds>`` tag) for strict nbval, which has one limit for every cell."""
    if not isinstance(item, IPyNbCell):
        yield
        return
    option, own = item.config.option, own_limit(item.cell)
    default = option.nbval_cell_timeout
    if own is not None:
        option.nbval_cell_timeout = own
    try:
        yield
    finally:
        option.nbval_cell_timeout = default


class StrictNbval:
    """The hooks above, as a plugin: a conftest's own hooks reach only the tests of its folder, and nbval's items
    live in notebooks/. Registered when this conftest loads (every run that includes tests/: `make test`, or
    `pytest tests/conftest.py notebooks/NN_x.ipynb` for one notebook)."""

    pytest_collection_modifyitems = staticmethod(_collection_modifyitems)
    pytest_runtest_setup = staticmethod(pytest.hookimpl(hookwrapper=True)(_runtest_setup))
    pytest_runtest_call = staticmethod(pytest.hookimpl(hookwrapper=True)(_runtest_call))


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("mha-strict-nbval"):
        config.pluginmanager.register(StrictNbval(), "mha-strict-nbval")
