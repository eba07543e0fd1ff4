"""Widget cells that show a picture, not a Python repr or "Error displaying widget", until they are run.

A widget's stored output is only a pointer (``application/vnd.jupyter.widget-view+json``, a model id) plus its
``repr`` as ``text/plain``. Opened without a kernel, JupyterLab 4 shows the repr
(``interactive(children=(Dropdown(…``); after run + save + reopen it shows "Error displaying widget: model not
found" (jupyterlab#15361, ipywidgets#3888); GitHub and nbviewer show nothing. The widget's *state*, though, is
saved beside the outputs in ``metadata.widgets`` (by nbclient, and by JupyterLab when ipywidgets' "save widget
state" setting is on), and it holds the picture: an ``Output`` widget keeps its figures as ``image/png``, an
``Image`` widget its PNG bytes.

``make_static`` rewrites every widget output of a notebook into outputs that any viewer shows:

1. a sentence (``text/markdown`` and ``text/plain``): run the cell to use the controls, below is a static copy,
   with the controls' values;
2. each picture the widget showed, as ``image/png``.

The live widget is unaffected: running the cell replaces these outputs with the widget, as usual. The refresh
command (``tests/refresh_notebooks.py``) applies it to the stored outputs; ``pre_save_hook`` applies it when
JupyterLab saves a notebook (a server extension that ``make lab`` enables, see ``install_jupyter_config``), so a notebook that a
teacher ran, saved and reopens shows the picture, not an error. Where the state is missing, the hook keeps the
static copy already in the file, and failing that the sentence alone.

Only the standard library is used (``import mha_lib.display.static_widgets`` does not load ipywidgets).
"""

from __future__ import annotations

import copy
import html
import json
import re
import sys
from pathlib import Path

from ..language import N_, translations

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MARK = "mha_lib_static_widget"  # output metadata key that marks the outputs written here
# msgids, written in the notebook's language (notebook_language): the server saves, not the kernel
NOTE = N_("▶ Run this cell to use the interactive controls; until then, this is a static copy of what they showed.")
NOTE_NO_PICTURE = N_("▶ Run this cell to use the interactive controls (they need a running kernel).")
PICTURE_TEXT = N_("<static copy of the widget's picture>")
LANGUAGE_FOLDERS = ("zh-CN",)  # notebooks/zh-CN/*.ipynb: the Chinese edition
SERVER_EXTENSION = "mha_lib.display.static_widgets"  # a Jupyter server extension: it registers pre_save_hook


def _check_notebook(nb) -> dict:
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise TypeError(f"nb must be a notebook dict with a 'cells' list, got {type(nb).__name__}")
    return nb


def widget_states(nb: dict) -> dict:
    """The saved widget models of a notebook by model id (empty when none were saved)."""
    saved = _check_notebook(nb).get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {})
    state = saved.get("state", {}) if isinstance(saved, dict) else {}
    return state if isinstance(state, dict) else {}


def is_widget_output(output: dict) -> bool:
    return WIDGET_VIEW in output.get("data", {})


def is_static_copy(output: dict) -> bool:
    return MARK in output.get("metadata", {})


def _model_ids(value) -> list[str]:
    """``IPY_MODEL_<id>`` references inside a state value (children lists, single child)."""
    values = value if isinstance(value, list) else [value]
    return [v[len("IPY_MODEL_"):] for v in values if isinstance(v, str) and v.startswith("IPY_MODEL_")]


def _source(text) -> str:
    return "".join(text) if isinstance(text, list) else str(text)


def _control_value(state: dict):
    """What a control shows: the label of a selection (Dropdown, ToggleButtons), else its value."""
    labels = state.get("_options_labels")
    index = state.get("index")
    if isinstance(labels, list) and isinstance(index, int) and 0 <= index < len(labels):
        return labels[index]
    return state.get("value")


def _walk(model_id: str, states: dict, found: dict, seen: set) -> None:
    """Collect pictures, control values and captions from one widget model and everything it contains."""
    if model_id in seen or model_id not in states:
        return
    seen.add(model_id)
    model = states[model_id]
    name, state = model.get("model_name", ""), model.get("state", {})
    if name == "ImageModel" and state.get("format", "png") == "png":
        for buffer in model.get("buffers", []):
            if buffer.get("path") == ["value"] and buffer.get("encoding", "base64") == "base64":
                found["pictures"].append(buffer["data"])
    elif name == "OutputModel":
        for output in state.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                _walk(data[WIDGET_VIEW].get("model_id", ""), states, found, seen)
            elif "image/png" in data:
                found["pictures"].append(_source(data["image/png"]).replace("\n", ""))
            elif output.get("output_type") == "stream" and output.get("name") == "stdout":
                found["text"].append(_source(output.get("text", "")).rstrip())
    elif name == "HTMLModel" and state.get("value"):
        found["text"].append(html.unescape(re.sub(r"<[^>]+>", "", str(state["value"]))).strip())
    elif state.get("description") and ("value" in state or "index" in state):
        found["controls"].append(f"{state['description']} = {_control_value(state)}")
    for key in ("children", "child"):
        for child in _model_ids(state.get(key, [])):
            _walk(child, states, found, seen)


def _markdown_text(text: str) -> str:
    """``text`` shown literally in markdown (a caption such as ``2*x_1 <b>`` must not turn into formatting)."""
    return re.sub(r"([\\`*_\[\]<>#|~])", r"\\\1", text)


def notebook_language(nb: dict, path=None) -> str:
    """The language of a notebook's words: ``metadata.mha_lib.language`` when set, else ``"zh-CN"`` for a
    notebook in a ``zh-CN`` folder (the Chinese edition), else ``"en"``."""
    setting = nb.get("metadata", {}).get("mha_lib", {}) if isinstance(nb, dict) else {}
    if isinstance(setting, dict) and setting.get("language") in ("en", "zh-CN"):
        return setting["language"]
    if path is not None and any(part in LANGUAGE_FOLDERS for part in Path(str(path)).parts[:-1]):
        return next(part for part in Path(str(path)).parts[:-1] if part in LANGUAGE_FOLDERS)
    return "en"


def static_outputs(output: dict, states: dict, language: str = "en") -> list[dict]:
    """The outputs that replace one widget output: a sentence, then every picture found in the widget's state.

    ``language``: ``"en"`` or ``"zh-CN"``, the language of the sentence (see ``notebook_language``)."""
    say = translations(language).gettext
    if not isinstance(output, dict) or not is_widget_output(output):
        raise ValueError(f"output must be a widget output (data with {WIDGET_VIEW!r}), got {output!r:.120}")
    found = {"pictures": [], "controls": [], "text": []}
    _walk(output["data"][WIDGET_VIEW].get("model_id", ""), states, found, set())
    note = say(NOTE if found["pictures"] else NOTE_NO_PICTURE)
    details = [line for line in ["  ·  ".join(found["controls"]), *found["text"]] if line]
    markdown = "\n\n".join([f"*{note}*", *(_markdown_text(d) for d in details)])
    mark = {MARK: True}
    outputs = [{"output_type": "display_data", "metadata": dict(mark),
                "data": {"text/markdown": markdown, "text/plain": "\n".join([note, *details])}}]
    for picture in found["pictures"]:
        outputs.append({"output_type": "display_data", "metadata": dict(mark),
                        "data": {"image/png": picture, "text/plain": say(PICTURE_TEXT)}})
    return outputs


def make_static(nb: dict, previous: dict | None = None, language: str | None = None) -> int:
    """Rewrite every widget output of ``nb`` in place into a sentence and the widget's pictures.

    ``previous``: an older version of the same notebook (the file about to be overwritten); a widget output whose
    state was not saved takes the static copy of the cell with the same id there. Drops ``metadata.widgets``
    once nothing refers to it. ``language``: of the sentences (default: ``notebook_language(nb)``). Returns the
    number of widget outputs rewritten.
    """
    states = widget_states(nb)
    language = notebook_language(nb) if language is None else language
    earlier = {}
    if previous is not None:
        for cell in _check_notebook(previous)["cells"]:
            copies = [o for o in cell.get("outputs", []) if is_static_copy(o)]
            if cell.get("id") and copies:
                earlier[cell["id"]] = copies
    count = 0
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code" or not any(is_widget_output(o) for o in cell.get("outputs", [])):
            continue
        outputs = []
        for output in cell["outputs"]:
            if not is_widget_output(output):
                outputs.append(output)
                continue
            count += 1
            model_id = output["data"][WIDGET_VIEW].get("model_id", "")
            if model_id not in states and cell.get("id") in earlier:
                outputs.extend(copy.deepcopy(earlier.pop(cell["id"])))
            else:
                outputs.extend(static_outputs(output, states, language))
        cell["outputs"] = outputs
    if count or not states:
        nb.get("metadata", {}).pop("widgets", None)
    return count


def pre_save_hook(model, path=None, contents_manager=None, **kwargs):
    """Jupyter server ``ContentsManager.pre_save_hook``: saves notebooks with static copies of their widgets."""
    if not isinstance(model, dict) or model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    previous = None
    try:  # the file about to be overwritten (read directly: the server's manager is asynchronous)
        old_file = Path(contents_manager._get_os_path(path))
        if old_file.is_file():
            previous = json.loads(old_file.read_text(encoding="utf-8"))
    except Exception:  # no such file, or not a file system manager: only the fallback picture is lost
        previous = None
    try:
        make_static(model["content"], previous, notebook_language(model["content"], path))
    except Exception as error:  # never block a save
        print(f"mha_lib.display.static_widgets: widget outputs of {path} kept as they were: {error}", file=sys.stderr)


def _jupyter_server_extension_points():
    return [{"module": SERVER_EXTENSION}]


def _load_jupyter_server_extension(serverapp):
    """Jupyter server extension entry point: every notebook save goes through ``pre_save_hook``."""
    serverapp.contents_manager.register_pre_save_hook(pre_save_hook)
    serverapp.log.info("mha_lib: widget outputs are saved as a sentence and a static picture")


def install_jupyter_config(prefix: str | Path = sys.prefix) -> list[Path]:
    """Configure the Jupyter server and JupyterLab of the environment at ``prefix`` (``make lab`` calls this).

    Writes ``etc/jupyter/jupyter_server_config.d/mha_lib.json``, which enables this module as a server
    extension (a ``jupyter_server_config.d`` file can only enable extensions; the extension registers the
    pre-save hook above), and ``share/jupyter/lab/settings/overrides.d/mha_lib.json`` (ipywidgets saves the
    widget state with the notebook, so the hook finds the pictures of the current run). Returns the files.
    """
    prefix = Path(prefix)
    files = {
        prefix / "etc" / "jupyter" / "jupyter_server_config.d" / "mha_lib.json":
            {"ServerApp": {"jpserver_extensions": {SERVER_EXTENSION: True}}},
        prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / "mha_lib.json":
            {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}},
    }
    for path, values in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
    return list(files)


if __name__ == "__main__":
    if sys.argv[1:] != ["--install-jupyter-config"]:
        raise SystemExit("usage: python -m mha_lib.display.static_widgets --install-jupyter-config")
    for written in install_jupyter_config():
        print(f"wrote {written}")
