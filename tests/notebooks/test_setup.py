"""The set-up promised by the README: two commands, pinned dependencies, one environment for pip and conda."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _pins(lines) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"not pinned with ==: {line!r}"
        pins[name.strip().lower()] = version.strip()
    return pins


def test_requirements_are_pinned_and_match_environment_yml():
    pip_pins = _pins((ROOT / "requirements.txt").read_text().splitlines())
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert _pins(pip_section) == pip_pins
    assert {"torch", "torchvision", "jupyterlab", "matplotlib", "ipywidgets", "nbval"} <= set(pip_pins)


def test_installed_versions_are_the_pinned_ones():
    from importlib.metadata import version

    pins = _pins((ROOT / "requirements.txt").read_text().splitlines())
    pins |= _pins((ROOT / "requirements-nodeps.txt").read_text().splitlines())
    for name, pinned in pins.items():
        assert version(name).split("+")[0] == pinned, name


def test_d2l_imports_beside_numpy_2():
    # d2l 1.0.3 pins numpy 1.23; installed with --no-deps it must still import (it needs torchvision too).
    # Chapter 8 imports it under strict nbval (`make test`), in this environment: that run is the import check.
    import numpy

    assert numpy.__version__.startswith("2.")
    chapter8 = (ROOT / "notebooks" / "08_putting_it_together.ipynb").read_text(encoding="utf-8")
    assert '"from d2l import torch as d2l\\n"' in chapter8


def test_readme_gives_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", readme, re.DOTALL).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make lab", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.MULTILINE)


def test_import_mha_lib_is_light():
    # matplotlib and ipywidgets load only when a figure or a widget is asked for
    code = "import sys, mha_lib; print(sorted(m for m in ('matplotlib', 'ipywidgets', 'd2l') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
