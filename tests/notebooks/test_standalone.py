"""Each notebook alone, as Colab or a download opens it: an empty folder, mha_lib from its wheel, ipywidgets 7.7.

What this test builds, once per test session (one build shared by every pytest-xdist worker, under a file lock):

* the wheel of the working tree (``pip wheel --no-deps``, from a copy of ``pyproject.toml``, ``README.md`` and
  ``mha_lib/``, so no ``build/`` or ``egg-info`` lands in the checkout);
* a virtual environment that sees the packages of ``.venv`` (through a folder of links to them) *except*
  ``mha_lib`` and ipywidgets 8: mha_lib is installed from the wheel, and ipywidgets is Colab's 7.7.1 (from
  ``.venv-ipywidgets7``, which ``make install`` creates). Nothing is downloaded: pip runs with ``--no-index``.

Then each notebook is copied alone into an empty folder and run there with nbclient in that environment, with
``MHA_LIB_SOURCE`` pointing the notebook's own set-up cell at the wheel (so the cell's install command runs, as on
Colab). The test fails on an error output, anything on stderr, an image link that is not an attachment (or an
https address), a file of the checkout opened by the kernel (an audit hook lists every file the kernel opens),
or an mha_lib that does not come from the wheel.

The Chinese twins that exist (``notebooks/zh-CN/NN_*.ipynb``) run the same way, each alone in an empty folder: a
twin opened from its Colab badge finds nothing of the repository either.

``MHA_STANDALONE_NOTEBOOKS=DIR`` runs the notebooks of DIR (and of DIR/zh-CN) instead of ``notebooks/`` (to try
copies).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from notebook_assets import image_targets
from notebook_client import Client

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = Path(os.environ.get("MHA_STANDALONE_NOTEBOOKS", ROOT / "notebooks")).resolve()
NOTEBOOK_PATHS = sorted(NOTEBOOK_DIR.glob("*.ipynb")) + sorted((NOTEBOOK_DIR / "zh-CN").glob("[0-9][0-9]_*.ipynb"))


def _id(path: Path) -> str:
    """``05_causal_masking.ipynb``, and ``zh-CN/05_causal_masking.ipynb`` for its twin."""
    return path.name if path.parent == NOTEBOOK_DIR else f"{path.parent.name}/{path.name}"

WIDGETS7 = ROOT / ".venv-ipywidgets7"
SITE_PACKAGES = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()))
# what the standalone environment must not take from .venv: our own package and ipywidgets 8
HIDDEN = re.compile(r"^(mha_lib|__editable__.*mha_lib.*|ipywidgets|ipywidgets-.*\.dist-info|.*\.pth)$")
ENVIRONMENTS = (ROOT / ".venv", WIDGETS7)  # inside the checkout, but the environment, not the project

AUDIT_MODULE = r'''
"""Lists every file this interpreter opens (MHA_AUDIT_LOG); imported at start-up by _mha_audit.pth."""
import os, sys
_log_path = os.environ.get("MHA_AUDIT_LOG")
if _log_path:
    _log = open(_log_path, "a", encoding="utf-8", buffering=1)
    _seen = set()

    def _hook(event, args):
        if event == "open" and isinstance(args[0], (str, bytes)):
            path = os.fsdecode(args[0])
            if not os.path.isabs(path):
                path = os.path.join(os.getcwd(), path)
            if path not in _seen:
                _seen.add(path)
                _log.write(path + "\n")

    sys.addaudithook(_hook)
'''

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


def _build_wheel(folder: Path) -> Path:
    source = folder / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "mha_lib", source / "mha_lib", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--wheel-dir", str(folder / "dist"), str(source)],
                   check=True, capture_output=True, env=_pip_env())
    (wheel,) = (folder / "dist").glob("mha_lib-*.whl")
    return wheel


def _pip_env(**extra) -> dict:
    """pip offline and silent: no index, no user or site config (their find-links may not exist)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_") and key != "PYTHONPATH"}
    return {**env, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_WARN_SCRIPT_LOCATION": "1", **extra}


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
                   check=True, capture_output=True, env=_pip_env())
    return python


@pytest.fixture(scope="session")
def standalone(tmp_path_factory, worker_id):
    """(python of the standalone environment, the wheel): built once, shared by every xdist worker."""
    if not (WIDGETS7 / "ipywidgets").is_dir():
        pytest.skip(f"{WIDGETS7.name}/ is missing: `make install` creates it (ipywidgets 7.7.1, as on Colab)")
    from filelock import FileLock  # a dependency of torch

    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    folder = shared / "standalone"
    with FileLock(str(shared / "standalone.lock")):
        done = folder / "ready.json"
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            wheel = _build_wheel(folder)
            python = _make_environment(folder, wheel)
            done.write_text(json.dumps({"python": str(python), "wheel": str(wheel)}), encoding="utf-8")
        ready = json.loads(done.read_text(encoding="utf-8"))
    return Path(ready["python"]), Path(ready["wheel"])


@pytest.fixture(scope="session")
def worker_id(request):
    """pytest-xdist's worker id ("gw0", ...), or "master" without xdist."""
    return getattr(request.config, "workerinput", {}).get("workerid", "master")


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


def test_image_links_travel_with_the_notebook():
    """Cheap, and independent of the run below: every picture is an attachment (or an https address)."""
    problems = []
    for path in NOTEBOOK_PATHS:
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            problems += [f"{_id(path)} cell {index}: {t}" for t in _bad_images(cell)]
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


# under `make test` both workers run these, one notebook at a time (tests/conftest.py; the environment is
# built once)
@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[_id(p) for p in NOTEBOOK_PATHS])
def test_notebook_runs_alone_from_the_wheel(path, standalone, tmp_path):
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    python, wheel = standalone
    work = tmp_path / "alone"
    work.mkdir()
    shutil.copy(path, work / path.name)
    nb = nbformat.read(work / path.name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_CELL))
    audit = tmp_path / "opened.txt"
    env = _pip_env(MHA_LIB_SOURCE=wheel.as_uri(), MHA_AUDIT_LOG=str(audit), PYTHONHASHSEED="0",
                   CUDA_VISIBLE_DEVICES="", VIRTUAL_ENV=str(python.parent.parent),
                   PATH=os.pathsep.join([str(python.parent), os.environ.get("PATH", "")]))
    # Every chapter runs in seconds (each cell well under 10 s on a busy 2-core machine). The limit is there so
    # that a stalled kernel fails the test in a minute instead of holding CI; no retry, since a stall is a bug
    # to see (the one we had is the ipykernel one above, checked below).
    km = _kernel_manager(python, tmp_path)
    # iopub_timeout: a cell's printed output may reach the client after its reply; nbclient's default 4 s wait is
    # too short when both workers load transformers at once, and a late output would be dropped silently
    client = NotebookClient(nb, km=km, timeout=60, iopub_timeout=30, raise_on_iopub_timeout=True,
                            resources={"metadata": {"path": str(work)}})
    try:
        client.execute(env=env)
    finally:  # nbclient shuts down only the kernels it creates itself
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)

    errors, stderr = [], []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error" and "raises-exception" not in cell.metadata.get("tags", []):
                errors.append(f"cell {index}: {output.ename}: {output.evalue}")
            if output.get("name") == "stderr":
                stderr.append(f"cell {index}: {output.text}")
            html = output.get("data", {}).get("text/html", "")
            errors += [f"cell {index}: output image {src}" for src in re.findall(r"<img[^>]*src=[\"']([^\"']+)", html)
                       if not src.startswith(("data:", "https://"))]
        errors += [f"cell {index}: image {target}" for target in _bad_images(cell)]
    assert not errors, "\n".join(errors)
    assert not stderr, "".join(stderr)

    facts = json.loads(nb.cells[-1].outputs[-1].text.strip().splitlines()[-1])
    assert Path(facts["mha_lib"]).resolve().is_relative_to(python.parent.parent.resolve()), facts
    assert facts["ipywidgets"] in (None, "7.7.1"), facts
    assert not STRANDING_IPYKERNEL.match(facts["ipykernel"]), (
        f"the kernel runs ipykernel {facts['ipykernel']}, which can leave a cell unanswered (ipykernel issue "
        f"1554); expected 7.4.0 or later (requirements.txt)")

    opened = [Path(line) for line in audit.read_text(encoding="utf-8").splitlines()]
    assert opened, "the audit hook recorded nothing"
    checkout = [p for p in opened if _is_inside(p, ROOT) and not any(_is_inside(p, e) for e in ENVIRONMENTS)]
    assert not checkout, f"{_id(path)} read files of the checkout: {checkout[:10]}"
    siblings = [p for p in opened if _is_inside(p, work.parent) and not _is_inside(p, work)]
    assert not siblings, f"{_id(path)} reached outside its folder: {siblings[:10]}"


def _is_inside(path: Path, folder: Path) -> bool:
    path, folder = Path(os.path.abspath(path)), Path(os.path.abspath(folder))
    return path == folder or folder in path.parents or Path(os.path.realpath(path)).is_relative_to(
        os.path.realpath(folder))
