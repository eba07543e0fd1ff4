"""Notebooks that open cleanly anywhere: embedded pictures, static copies of widgets, fonts, pip extras.

The functions are checked on small synthetic notebooks; the last tests check the stored notebooks themselves
(they fail until `make notebooks` has embedded the pictures and rewritten the widget outputs), the Chinese twins
that exist (notebooks/zh-CN/) included: their pictures travel too, and their static copies speak Chinese.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mha_lib.display import static_widgets
from mha_lib.display.static_widgets import (MARK, NOTE, NOTE_NO_PICTURE, WIDGET_STATE, WIDGET_VIEW,
                                            install_jupyter_config, make_static, pre_save_hook, static_outputs)
from notebook_assets import METADATA_KEY, embed_assets, image_targets, is_local_target
from slides import language_of, twin_paths

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_PATHS = sorted((ROOT / "notebooks").glob("*.ipynb")) + twin_paths()  # English, then the Chinese twins


def _id(path: Path) -> str:
    return path.name if path.parent.name == "notebooks" else f"{path.parent.name}/{path.name}"
PNG_A = b"\x89PNG\r\n\x1a\nfirst picture"
PNG_B = b"\x89PNG\r\n\x1a\nsecond picture"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ---- pictures as attachments ---------------------------------------------------------------------------------

@pytest.fixture
def repo(tmp_path):
    (tmp_path / "assets").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "assets" / "diagram.png").write_bytes(PNG_A)
    return tmp_path


def _markdown_notebook(*sources):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(s) for s in sources])


def test_a_link_to_assets_becomes_an_attachment_with_the_file_bytes(repo):
    nb = _markdown_notebook('Text ![Two heads, side by side](../assets/diagram.png "title") more')
    assert embed_assets(nb, repo / "notebooks", repo) == 1
    cell = nb.cells[0]
    assert cell.source == 'Text ![Two heads, side by side](attachment:diagram.png "title") more'
    assert base64.b64decode(cell.attachments["diagram.png"]["image/png"]) == PNG_A
    assert cell.metadata[METADATA_KEY] == {"diagram.png": "assets/diagram.png"}
    nbformat.validate(nb)


def test_a_refresh_re_embeds_the_current_asset_and_is_otherwise_idempotent(repo):
    nb = _markdown_notebook("![d](../assets/diagram.png)")
    embed_assets(nb, repo / "notebooks", repo)
    first = json.dumps(nb, sort_keys=True)
    embed_assets(nb, repo / "notebooks", repo)
    assert json.dumps(nb, sort_keys=True) == first
    (repo / "assets" / "diagram.png").write_bytes(PNG_B)  # the diagram was redrawn
    embed_assets(nb, repo / "notebooks", repo)
    assert base64.b64decode(nb.cells[0].attachments["diagram.png"]["image/png"]) == PNG_B


def test_html_images_and_sub_folders_are_embedded_too_and_remote_images_are_left_alone(repo):
    (repo / "assets" / "draw").mkdir()
    (repo / "assets" / "draw" / "x.png").write_bytes(PNG_B)
    badge = "![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)"
    nb = _markdown_notebook(badge + '\n<img src="../assets/draw/x.png" width="300">')
    embed_assets(nb, repo / "notebooks", repo)
    assert nb.cells[0].source == badge + '\n<img src="attachment:draw__x.png" width="300">'
    assert image_targets(nb.cells[0].source)[0].startswith("https://")
    assert nb.cells[0].metadata[METADATA_KEY] == {"draw__x.png": "assets/draw/x.png"}


def test_a_removed_link_drops_its_attachment_but_not_pasted_ones(repo):
    nb = _markdown_notebook("![d](../assets/diagram.png) ![pasted](attachment:paste.png)")
    nb.cells[0].attachments = {"paste.png": {"image/png": b64(PNG_B)}}
    embed_assets(nb, repo / "notebooks", repo)
    assert set(nb.cells[0].attachments) == {"diagram.png", "paste.png"}
    nb.cells[0].source = "no picture any more ![pasted](attachment:paste.png)"
    embed_assets(nb, repo / "notebooks", repo)
    assert set(nb.cells[0].attachments) == {"paste.png"} and METADATA_KEY not in nb.cells[0].metadata


@pytest.mark.parametrize("link, message", [("../assets/missing.png", "is not a file inside"),
                                           ("../../outside.png", "is not a file inside")])
def test_a_broken_link_stops_the_refresh_with_its_name(repo, link, message):
    (repo.parent / "outside.png").write_bytes(PNG_A)
    nb = _markdown_notebook(f"![x]({link})")
    with pytest.raises(SystemExit, match=re.escape(link) + ".*" + message):
        embed_assets(nb, repo / "notebooks", repo)


def test_an_asset_deleted_after_embedding_is_reported(repo):
    nb = _markdown_notebook("![d](../assets/diagram.png)")
    embed_assets(nb, repo / "notebooks", repo)
    (repo / "assets" / "diagram.png").unlink()
    with pytest.raises(SystemExit, match="assets/diagram.png, which no longer exists"):
        embed_assets(nb, repo / "notebooks", repo)


# ---- widget outputs as a sentence and a picture -------------------------------------------------------------

def _model(name, state, buffers=None):
    model = {"model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0", "model_name": name,
             "state": state}
    if buffers is not None:
        model["buffers"] = buffers
    return model


def _widget_notebook():
    """An ``interact`` (Output widget with a figure) and an explorer-like box (Image widget + caption)."""
    state = {
        "box1": _model("VBoxModel", {"children": ["IPY_MODEL_drop", "IPY_MODEL_out"]}),
        "drop": _model("DropdownModel", {"description": "head_width", "index": 1, "_options_labels": ["2", "8"]}),
        "out": _model("OutputModel", {"outputs": [
            {"output_type": "stream", "name": "stdout", "text": "row sums: 1.0\n"},
            {"output_type": "display_data", "metadata": {}, "data": {"image/png": b64(PNG_A) + "\n",
                                                                     "text/plain": "<Figure>"}}]}),
        "box2": _model("VBoxModel", {"children": ["IPY_MODEL_check", "IPY_MODEL_caption", "IPY_MODEL_image"]}),
        "check": _model("CheckboxModel", {"description": "causal mask", "value": True}),
        "caption": _model("HTMLModel", {"value": '<span class="c">4 heads &times; 6 tokens</span>'}),
        "image": _model("ImageModel", {"format": "png"}, [{"data": b64(PNG_B), "encoding": "base64",
                                                           "path": ["value"]}]),
    }
    cells = []
    for model_id, repr_text in (("box1", "interactive(children=(Dropdown(..."), ("box2", "AttentionExplorer(...)")):
        cell = nbformat.v4.new_code_cell("interact(...)")
        cell.outputs = [nbformat.v4.new_output("display_data", data={
            WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0}, "text/plain": repr_text})]
        cells.append(cell)
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["widgets"] = {WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    return nb


def _pictures(cell):
    return [base64.b64decode(o["data"]["image/png"]) for o in cell.outputs if "image/png" in o["data"]]


def test_widget_outputs_become_a_sentence_and_the_widgets_pictures():
    nb = _widget_notebook()
    assert make_static(nb) == 2
    interact, explorer = nb.cells
    assert _pictures(interact) == [PNG_A] and _pictures(explorer) == [PNG_B]
    first = interact.outputs[0]["data"]
    assert first["text/plain"].splitlines() == [NOTE, "head_width = 8", "row sums: 1.0"]
    assert explorer.outputs[0]["data"]["text/plain"].splitlines() == [NOTE, "causal mask = True", "4 heads × 6 tokens"]
    assert first["text/markdown"].startswith(f"*{NOTE}*") and "head\\_width = 8" in first["text/markdown"]
    everything = json.dumps(nb)
    assert WIDGET_VIEW not in everything and "interactive(children=" not in everything
    assert "widgets" not in nb.metadata  # nothing refers to the state any more
    assert all(o["metadata"] == {MARK: True} for c in nb.cells for o in c.outputs)
    nbformat.validate(nbformat.from_dict(nb))


def test_a_widget_without_saved_state_keeps_the_earlier_static_copy_or_gets_the_sentence():
    earlier = _widget_notebook()
    make_static(earlier)
    nb = _widget_notebook()
    del nb.metadata["widgets"]
    nb.cells[0].id, earlier.cells[0].id = "same-cell", "same-cell"
    make_static(nb, previous=earlier)
    assert nb.cells[0].outputs == earlier.cells[0].outputs  # the picture of the last refresh
    assert [o["data"]["text/plain"] for o in nb.cells[1].outputs] == [NOTE_NO_PICTURE]  # no earlier copy


def test_a_twin_is_made_portable_in_chinese(repo, monkeypatch):
    """What `make notebooks` does to a twin in notebooks/zh-CN/: its ../../assets pictures become attachments and
    its widgets' static copies say in Chinese what they are (the English sentence never appears)."""
    from mha_lib.language import translations
    import refresh_notebooks
    from refresh_notebooks import make_portable

    monkeypatch.setattr(refresh_notebooks, "ROOT", repo)  # the synthetic repository's assets/
    (repo / "notebooks" / "zh-CN").mkdir()
    nb = _widget_notebook()
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("示意图：![两个头](../../assets/diagram.png)"))
    make_portable(nb, repo / "notebooks" / "zh-CN", language_of(repo / "notebooks" / "zh-CN" / "x.ipynb"))
    notes = [o["data"]["text/plain"].splitlines()[0] for c in nb.cells[1:] for o in c.outputs
             if "text/markdown" in o["data"]]
    chinese = translations("zh-CN").gettext(NOTE)
    assert chinese != NOTE and notes == [chinese, chinese]
    assert NOTE not in json.dumps(nb, ensure_ascii=False)
    assert nb.cells[0].source == "示意图：![两个头](attachment:diagram.png)"


def test_static_outputs_names_what_it_got():
    with pytest.raises(ValueError, match="output must be a widget output"):
        static_outputs({"output_type": "stream", "name": "stdout", "text": "x"}, {})
    with pytest.raises(TypeError, match="nb must be a notebook dict with a 'cells' list, got list"):
        make_static([])


def test_the_pre_save_hook_writes_static_copies_and_never_blocks_a_save(tmp_path):
    from jupyter_server.services.contents.filemanager import FileContentsManager

    manager = FileContentsManager(root_dir=str(tmp_path))
    manager.register_pre_save_hook(pre_save_hook)
    nb = _widget_notebook()
    manager.save({"type": "notebook", "format": "json", "content": json.loads(json.dumps(nb))}, "saved.ipynb")
    stored = nbformat.read(tmp_path / "saved.ipynb", as_version=4)
    assert _pictures(stored.cells[0]) == [PNG_A] and WIDGET_VIEW not in json.dumps(stored)
    # saved again without widget state (ipywidgets' saveState off): the static copies on disk are kept
    again = _widget_notebook()
    del again.metadata["widgets"]
    for cell, old in zip(again.cells, stored.cells):
        cell.id = old.id
    manager.save({"type": "notebook", "format": "json", "content": json.loads(json.dumps(again))}, "saved.ipynb")
    resaved = nbformat.read(tmp_path / "saved.ipynb", as_version=4)
    assert _pictures(resaved.cells[0]) == [PNG_A] and _pictures(resaved.cells[1]) == [PNG_B]
    pre_save_hook({"type": "file", "content": "text"}, path="x.txt", contents_manager=manager)  # not a notebook
    pre_save_hook({"type": "notebook", "content": {"cells": "broken"}}, path="y.ipynb")  # prints, does not raise


def test_install_jupyter_config_configures_the_hook_and_the_widget_state(tmp_path):
    written = install_jupyter_config(tmp_path)
    server, lab = (json.loads(p.read_text()) for p in written)
    assert server == {"ServerApp": {"jpserver_extensions": {"mha_lib.display.static_widgets": True}}}
    assert lab == {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "etc/jupyter/jupyter_server_config.d/mha_lib.json", "share/jupyter/lab/settings/overrides.d/mha_lib.json"]


def test_the_server_extension_registers_the_hook_in_a_real_server(tmp_path):
    # the configuration `make lab` writes, read by a Jupyter server the way `jupyter lab` starts one
    install_jupyter_config(tmp_path / "prefix")
    code = (
        "import sys; from jupyter_server.serverapp import ServerApp\n"
        "app = ServerApp(); app.initialize(argv=['--allow-root', '--ServerApp.root_dir=.', '--port=0'])\n"
        "hooks = app.contents_manager._pre_save_hooks\n"
        "print([f'{h.__module__}.{h.__name__}' for h in hooks], 'ipywidgets' in sys.modules)"
    )
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(tmp_path / "prefix" / "etc" / "jupyter"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "['mha_lib.display.static_widgets.pre_save_hook'] False", out.stderr


# ---- fonts and pip extras ---------------------------------------------------------------------------------------

def test_without_any_cjk_font_labels_render_and_one_line_says_why():
    code = (
        "import io, mha_lib.display.fonts as f, matplotlib; matplotlib.use('Agg')\n"
        "f.bundled_font_paths = lambda: []; f.SYSTEM_CJK_FAMILIES = ()\n"
        "import torch, mha_lib\n"
        "tokens = list('郭同学热爱AI')\n"
        "for _ in range(2):\n"
        "    fig = mha_lib.plot_heads(torch.softmax(torch.randn(2, 7, 7), -1), tokens, title='郭同学')\n"
        "    fig.savefig(io.BytesIO(), format='png')\n"
        "print('drawn')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "drawn"
    assert result.stderr.splitlines() == [static_widgets_font_message()], result.stderr


def static_widgets_font_message() -> str:
    from mha_lib.display.fonts import NO_FONT_MESSAGE

    assert "justmytype-intl-cjk==0.1.0" in NO_FONT_MESSAGE
    return NO_FONT_MESSAGE


def _notebook_imports() -> set[str]:
    names = set()
    for path in NOTEBOOK_PATHS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                names |= {m.split(".")[0] for m in re.findall(r"^\s*(?:from|import)\s+([\w.]+)", cell.source, re.M)}
    return names


def test_the_notebooks_extra_names_every_package_the_notebooks_import():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]

    def requirements(extra, seen=()):
        names = set()
        for requirement in extras[extra]:
            name = re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")
            if name == project["name"].lower().replace("_", "-"):  # mha_lib[plot,widgets,...]
                for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                    names |= requirements(inner.strip(), seen + (extra,)) if inner.strip() not in seen else set()
            else:
                names.add(name)
        return names

    declared = requirements("notebooks") | {r.split(">")[0].split("=")[0].lower() for r in project["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    documented = {"d2l"}  # installed with --no-deps (README, the extra's comment)
    missing = {}
    for module in sorted(_notebook_imports() - set(sys.stdlib_module_names) - {"mha_lib"} - documented):
        dists = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        if not dists & declared:
            missing[module] = sorted(dists)
    assert not missing, f"imported by the notebooks but not in the notebooks extra: {missing}"
    assert {"justmytype-intl-cjk", "ipywidgets", "matplotlib"} <= declared


# ---- the stored notebooks ----------------------------------------------------------------------------------------

def _png_size(data: str) -> tuple[int, int]:
    """(width, height) of a base64 PNG, from its header."""
    header = base64.b64decode(data[:44])
    assert header[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[_id(p) for p in NOTEBOOK_PATHS])
def test_stored_notebook_carries_its_pictures_and_no_widget_pointer(path):
    nb = nbformat.read(path, as_version=4)
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            problems += [f"cell {index} links {t}" for t in image_targets(cell.source) if is_local_target(t)]
            for name, relative in cell.metadata.get(METADATA_KEY, {}).items():
                data = cell.get("attachments", {}).get(name, {}).get("image/png")
                if data is None or base64.b64decode(data) != (ROOT / relative).read_bytes():
                    problems.append(f"cell {index}: attachment {name} differs from {relative}")
        for output in cell.get("outputs", []):
            text = json.dumps(output)
            if WIDGET_VIEW in output.get("data", {}) or "interactive(children=" in text:
                problems.append(f"cell {index}: a widget output that shows a repr or an error until run")
        # a widget's static copy shows its picture (what the browser test sees in JupyterLab, for every notebook)
        static = [o for o in cell.get("outputs", []) if o.get("metadata", {}).get(MARK)]
        sizes = [_png_size(o["data"]["image/png"]) for o in static if "image/png" in o.get("data", {})]
        if static and not any(min(size) > 50 for size in sizes):
            problems.append(f"cell {index}: a widget's static copy without its picture (sizes {sizes})")
    if language_of(path) != "en":  # a twin's static copies say what they are in its language
        from mha_lib.language import translations

        say = translations(language_of(path)).gettext
        english = {NOTE, NOTE_NO_PICTURE}
        problems += [f"cell {index}: a static copy says {output['data']['text/plain'].splitlines()[0]!r}"
                     for index, cell in enumerate(nb.cells) for output in cell.get("outputs", [])
                     if output.get("metadata", {}).get(MARK) and "text/markdown" in output.get("data", {})
                     and output["data"]["text/plain"].splitlines()[0] not in {say(n) for n in english} - english]
    assert not problems, f"{_id(path)} (run `make notebooks`):\n" + "\n".join(problems)
