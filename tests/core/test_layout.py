"""The house (issue 20): a flat core that imports no wing, and wings that import the core and the wings below them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mha_lib"
# each wing, and the wings it may import (the README's diagram: a wing imports only the wings drawn below it)
WINGS = {"display": set(), "trained": {"display"}, "induction": {"display"}, "llm": {"display", "induction"},
         "exercises": {"trained", "induction", "llm"}}
CORE = sorted(p for p in PACKAGE.glob("*.py") if p.name != "__init__.py")


def _imported(path: Path) -> set[str]:
    """The mha_lib modules one file imports, as dotted names inside the package (``display.plotting``)."""
    package = path.parent.relative_to(PACKAGE.parent).parts  # ("mha_lib",) or ("mha_lib", "display")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            if node.module:
                names = [".".join(base + [node.module])]
            else:  # from . import render
                names = [".".join(base + [alias.name]) for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n.split(".", 1)[1] for n in names if n.startswith("mha_lib."))
    return found


def _wings_of(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names if n.split(".")[0] in WINGS}


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_the_core_imports_no_wing(path):
    assert not _wings_of(_imported(path)), f"{path.name} imports a wing"


def test_the_package_front_door_imports_only_the_core():
    assert not _wings_of(_imported(PACKAGE / "__init__.py"))


@pytest.mark.parametrize("wing", sorted(WINGS))
def test_a_wing_imports_the_core_and_only_the_wings_below_it(wing):
    for path in sorted((PACKAGE / wing).glob("*.py")):
        assert _wings_of(_imported(path)) <= WINGS[wing] | {wing}, path.relative_to(PACKAGE)


def test_the_moved_modules_live_only_in_their_wing():
    moved = ["plotting", "_fast_render", "widgets", "static_widgets", "fonts", "printing", "pretrained", "head_roles",
             "corpus", "trained_explorer", "trained_plots", "induction", "induction_plots", "induction_trainer"]
    assert not [name for name in moved if (PACKAGE / f"{name}.py").exists()]
    assert not (PACKAGE / "checkpoints").exists() and sorted((PACKAGE / "induction" / "checkpoints").glob("*.pt"))


def test_the_checker_sees_an_import_of_a_wing():
    assert _imported(PACKAGE / "display" / "render.py") >= {"display.fonts", "display.plotting"}
    assert "induction.model" in _imported(PACKAGE / "exercises" / "ch11_heads_learn.py")
    assert "validation" in _imported(PACKAGE / "display" / "plotting.py")
