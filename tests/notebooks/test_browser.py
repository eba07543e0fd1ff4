"""The notebooks in a real browser: JupyterLab on localhost, Chromium driven by Playwright.

The tests start ``jupyter lab`` on 127.0.0.1 (random free port, random token) over temporary copies of the
notebooks that have a widget, each copied alone (no ``assets/`` beside it: pictures must travel as
attachments; the real notebooks are never opened, so they cannot be saved over), and open them in Debian's
Chromium (``executable_path``: Playwright downloads no browser).

* ``test_widget_cells_show_a_picture_before_running``: widget notebooks opened without running (by default the
  first chapter, 00, and one with the library's own widgets, 13, and its twin; ``MHA_BROWSER_ALL=1``: every one):
  each widget cell shows a picture and a sentence, never ``interactive(children=…`` or "Error displaying widget";
  the untouched notebook is not marked as modified once its kernel is up (the stored kernelspec is the one
  ``make install`` registers); the last widget cell, run alone right after opening (Shift+Enter), shows its live
  controls (it imports what it uses); and at 1,440 × 900 with the file browser open, no picture (outputs,
  attachments, the Colab badge, the live widget's) is scaled down to the notebook panel or fails to load.
  (That every notebook's stored widget outputs are such a sentence and picture is checked without a browser, in
  ``tests/notebooks/test_portable.py``: opening a notebook costs a page and a kernel.)
* ``test_explorer_in_jupyterlab`` (notebook 00): runs every cell from the Run menu, clicks another head count in
  the explorer and checks that the picture changed (the caption's number of heads, the image's bytes and its
  height); then saves, shuts the kernel down and reopens the notebook: the explorer cell shows the picture of
  the 8 heads it had when saved (the server's pre-save hook and ipywidgets' saveState, which ``make lab``
  installs: ``mha_lib/display/static_widgets.py``), and no widget error.
* ``test_widget_cells_show_a_picture_after_run_save_reopen``: the same run, save, reopen for another widget
  notebook (06, two ``interact`` cells); with ``MHA_BROWSER_ALL=1``, for every widget notebook.

The Chinese edition (the twins in ``notebooks/zh-CN/``, copied into a ``zh-CN`` folder of the server, so that its
pre-save hook writes their static copies in Chinese):

* ``test_widget_cells_show_a_picture_before_running`` covers a twin too (the sentence in Chinese);
* ``test_twin_widget_redraws_after_a_change`` (zh-CN/05_causal_masking and zh-CN/06_softmax): the static picture
  before a run, then Run All, a change of the first control of a widget, and a new picture; and no boxes instead of
  characters (``cjk_rendering``: each Chinese character of the title, drawn in the page's own font, must come out
  as a glyph of its own, not as the box that a character no font has gets);
* ``test_of_the_test_boxes_instead_of_characters_are_caught``: the same check in a Chromium that sees no CJK font
  (a fontconfig with DejaVu only) reports the boxes.

Screenshots go to ``tests/artifacts/browser_*.png``; look at them after a change.

Needs: Chromium (``apt-get install chromium``; ``.ci/run`` installs it), a CJK font for the Chinese pages (Debian's
``fonts-noto-cjk``; ``.ci/run`` installs it) and the pinned ``playwright`` package.
Without a Chromium executable the test is skipped with that reason, except under CI (``CI`` set), where it
fails: CI must really run it.
"""

from __future__ import annotations

import json
import os
import platform
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = Path(os.environ.get("MHA_BROWSER_NOTEBOOKS", ROOT / "notebooks"))  # another folder: try copies
NOTEBOOK = NOTEBOOK_DIR / "00_start_here.ipynb"
ARTIFACTS = ROOT / "tests" / "artifacts"
SCREENSHOT = ARTIFACTS / "browser_explorer.png"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
BAD_TEXTS = ("interactive(children=", "Error displaying widget", "model not found", "Loading widget")
# The real binary first: /usr/bin/chromium is Debian's wrapper script around it
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")
VIEWPORT = {"width": 1440, "height": 900}  # a teacher's laptop; JupyterLab's file browser open beside the notebook
SERVER_START_S = 120  # JupyterLab on two busy cores takes 10-30 s
NOTEBOOK_RUN_S = 180  # Run All: kernel start, torch import, every cell


def find_chromium() -> str | None:
    found = os.environ.get("MHA_CHROMIUM")
    if found:
        return found
    for name in CHROMIUM_CANDIDATES:
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.access(path, os.X_OK):
            return path
    return None


CHROMIUM = find_chromium()


def _require_browser() -> str:
    if CHROMIUM is None:
        reason = ("no Chromium executable found (looked for " + ", ".join(CHROMIUM_CANDIDATES) + " and $MHA_CHROMIUM); "
                  "install Debian's chromium with `apt-get install chromium` to run the browser test")
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser test: " + reason)
        pytest.skip(reason)
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed: run `make install`")
    return CHROMIUM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(folder: Path) -> None:
    """User settings of the test's JupyterLab: start the notebook's kernel without asking, render every cell
    (no windowing), no news or update checks."""
    settings = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none",
                                                                       "autoStartDefaultKernel": True},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                           "checkForUpdates": False},
    }
    for name, values in settings.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")


def widget_cells(path: Path) -> list[int]:
    """Indices of the cells whose stored output is a widget (its static copy, or still the widget pointer)."""
    import nbformat

    from mha_lib.display.static_widgets import is_static_copy

    cells = nbformat.read(path, as_version=4).cells
    return [i for i, cell in enumerate(cells) if cell.cell_type == "code"
            and any(is_static_copy(o) or WIDGET_VIEW in o.get("data", {}) for o in cell.outputs)]


TWIN_DIR = NOTEBOOK_DIR / "zh-CN"  # the Chinese twins
WIDGET_NOTEBOOKS = [p for p in sorted(NOTEBOOK_DIR.glob("*.ipynb")) + sorted(TWIN_DIR.glob("[0-9][0-9]_*.ipynb"))
                    if widget_cells(p)]
TWIN_REDRAW = ("05_causal_masking.ipynb", "06_softmax.ipynb")  # twins run in the browser, a control changed


def relative(path: Path) -> str:
    """The notebook's path in the server (and in the test ids): ``05_x.ipynb``, or ``zh-CN/05_x.ipynb``."""
    return path.name if path.parent == NOTEBOOK_DIR else f"{path.parent.name}/{path.name}"


def language(path: Path) -> str:
    return "zh-CN" if path.parent == TWIN_DIR else "en"


def static_sentence(path: Path) -> str:
    """The first words of the sentence a widget's static copy starts with, in the notebook's language."""
    from mha_lib.display.static_widgets import NOTE
    from mha_lib.language import translations

    return re.split(r"[;；]", translations(language(path)).gettext(NOTE).removeprefix("▶ "))[0]


def _require_jupyter_config() -> None:
    # written by `make install` / `make lab` (python -m mha_lib.display.static_widgets --install-jupyter-config)
    server = Path(sys.prefix, "etc", "jupyter", "jupyter_server_config.d", "mha_lib.json")
    lab = Path(sys.prefix, "share", "jupyter", "lab", "settings", "overrides.d", "mha_lib.json")
    missing = [str(p) for p in (server, lab) if not p.is_file()]
    if missing:
        pytest.fail(f"JupyterLab is not configured as `make lab` configures it ({', '.join(missing)} missing): "
                    "run `make install`")


def copy_for_this_python(path: Path, copy: Path) -> None:
    """Copy a notebook with ``language_info.version`` set to the Python the kernel runs. JupyterLab writes the
    kernel's version there on open, so a notebook stored by another Python opens as modified whatever we do; the
    stored version is the refreshing machine's (3.11 here and in CI) and everything else is what we check."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb.setdefault("metadata", {}).setdefault("language_info", {})["version"] = platform.python_version()
    copy.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 over temporary copies of the widget notebooks; yields (base url, token,
    folder of the copies)."""
    _require_browser()
    _require_jupyter_config()
    home = tmp_path_factory.mktemp("jupyterlab")
    (home / "notebooks").mkdir()
    (home / "notebooks" / "zh-CN").mkdir()
    for path in WIDGET_NOTEBOOKS:
        copy_for_this_python(path, home / "notebooks" / relative(path))  # alone: no ../assets beside them
    _write_settings(home / "settings")
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "IPYTHONDIR": str(home / "ipython"), "PYTHONHASHSEED": "0"}
    port, token = _free_port(), secrets.token_hex(16)
    log = open(home / "jupyterlab.log", "wb")
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={home}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI runs as root
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=home)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"jupyter lab exited with {server.returncode}:\n{(home / 'jupyterlab.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer within {SERVER_START_S} s")
            time.sleep(0.5)
        yield base, token, home / "notebooks"
    finally:
        try:  # a clean shutdown also stops the kernels it started
            request = urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST")
            urllib.request.urlopen(request, timeout=10).close()
            server.wait(timeout=20)
        except Exception:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
        log.close()


def run_all_cells(page) -> None:
    """Run > Run All Cells, as a person would; checks that the cells really started (one retry)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.locator(".jp-Notebook .jp-Cell").first.click()  # the notebook is the current document
    for attempt in range(2):
        page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
        item = page.locator(".lm-Menu-item[data-command='runmenu:run-all']")
        item.wait_for(state="visible", timeout=10_000)
        item.click()
        started = page.locator(".jp-InputPrompt", has_text="[*]").or_(page.locator(".mha-explorer"))
        try:
            started.first.wait_for(timeout=20_000)
            return
        except PlaywrightTimeout:
            if attempt:
                raise
            page.keyboard.press("Escape")


IMAGE_FACTS = """async (img) => {
    const bytes = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
    let hash = 0;
    for (const b of bytes) hash = (hash * 31 + b) >>> 0;
    return {src: img.src, length: bytes.length, hash: hash, width: img.naturalWidth, height: img.naturalHeight};
}"""


CURRENT_PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"


@pytest.fixture(scope="module")
def playwright():
    """One Playwright for the module (its sync API runs one event loop per thread)."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as instance:
        yield instance


@pytest.fixture(scope="module")
def browser(jupyterlab, playwright):
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, timeout=60_000)
    try:
        yield browser
    finally:
        browser.close()


def _api(base: str, token: str, path: str, method: str = "GET"):
    request = urllib.request.Request(f"{base}{path}?token={token}", method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
    return json.loads(body) if body else None


def shut_down_kernels(base: str, token: str) -> None:
    """What a night does to a notebook: its kernel is gone, and with it every widget model."""
    for session in _api(base, token, "/api/sessions"):
        _api(base, token, f"/api/sessions/{session['id']}", method="DELETE")


def open_notebook(browser, jupyterlab, name: str, errors: list):
    """A fresh page with only ``name`` open (``?reset``: no other notebook restored), its kernel started."""
    from playwright.sync_api import expect

    base, token, _ = jupyterlab
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(60_000)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{base}/lab/tree/notebooks/{name}?reset&token={token}", timeout=90_000)
    page.locator(f"{CURRENT_PANEL} .jp-Cell").first.wait_for(timeout=90_000)
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=90_000)
    if page.locator(".jp-Dialog").count():  # a kernel chooser despite the settings: take the preferred one
        page.locator(".jp-Dialog .jp-mod-accept").click()
    return page


def check_static_widget_cell(page, index: int, screenshot: Path,
                             sentence: str = "Run this cell to use the interactive controls") -> str:
    """The cell shows the sentence (in the notebook's language) and a loaded picture, no repr and no widget
    error; returns its text."""
    from playwright.sync_api import expect

    output = page.locator(f"{CURRENT_PANEL} .jp-Cell").nth(index).locator(".jp-OutputArea")
    output.scroll_into_view_if_needed()
    expect(output).to_contain_text(sentence, timeout=30_000)
    text = output.inner_text()
    assert not [bad for bad in BAD_TEXTS if bad in text], text[:500]
    picture = output.locator("img").first
    expect(picture).to_be_visible()
    size = picture.evaluate("img => img.complete ? [img.naturalWidth, img.naturalHeight] : [0, 0]")
    assert min(size) > 50, f"cell {index}: the picture did not load ({size})"
    output.screenshot(path=str(screenshot))
    return text


def check_whole_notebook(page) -> None:
    """No repr or widget error anywhere, and every embedded picture (attachments) loaded."""
    text = page.locator(CURRENT_PANEL).inner_text()
    assert not [bad for bad in BAD_TEXTS if bad in text], [bad for bad in BAD_TEXTS if bad in text]
    broken = page.locator(f"{CURRENT_PANEL} .jp-MarkdownOutput img").evaluate_all(
        "imgs => imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt || i.src.slice(0, 80))")
    assert not broken, f"pictures that did not load (the test's browser has no network: none may be remote): {broken}"


def save_and_wait(page, saved: Path) -> dict:
    """File > Save (Ctrl+S), then wait until the server has written the file with static copies."""
    import nbformat

    page.locator(f"{CURRENT_PANEL} .jp-Cell").first.click()
    page.keyboard.press("Escape")
    before = saved.stat().st_mtime_ns
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 60
    while saved.stat().st_mtime_ns == before:
        assert time.monotonic() < deadline, "the notebook was not saved"
        time.sleep(0.2)
    time.sleep(0.5)
    text = saved.read_text(encoding="utf-8")
    assert WIDGET_VIEW not in text, "the saved notebook still points at widget models (no pre-save hook?)"
    return nbformat.reads(text, as_version=4)


def wait_until_run(page, widget_indices: list[int]) -> None:
    """Every cell has run (no [*] left, the kernel idle) and each widget cell shows its live widget.

    A run can be lost: once, on two cores carrying four busy processes, Run All was accepted and every prompt went
    back to [ ] with the kernel idle and nothing run. Then Run All is chosen once more, as a teacher would."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect

    panel = page.locator(CURRENT_PANEL)
    deadline = time.monotonic() + NOTEBOOK_RUN_S
    ran_again = False
    for index in widget_indices:
        cell = panel.locator(".jp-Cell").nth(index)
        while True:
            try:
                cell.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=5_000)
                break
            except PlaywrightTimeout:
                if time.monotonic() > deadline:
                    raise AssertionError(f"cell {index}: no live widget {NOTEBOOK_RUN_S} s after Run All") from None
                never_ran = re.fullmatch(r"\[\s*\]:?", cell.locator(".jp-InputPrompt").inner_text().strip())
                queued = panel.locator(".jp-InputPrompt", has_text="[*]").count()
                idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count()
                if never_ran and not queued and idle and not ran_again:
                    ran_again = True
                    run_all_cells(page)
    expect(panel.locator(".jp-InputPrompt", has_text="[*]")).to_have_count(0, timeout=NOTEBOOK_RUN_S * 1000)
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=60_000)


def check_opens_unmodified(page) -> None:
    """An untouched notebook is not marked as modified once its kernel is up (closing it asks nothing)."""
    time.sleep(2)  # the kernel's info arrives after "idle"; JupyterLab writes its name and language then
    dirty = page.locator(".lm-TabBar-tab.jp-mod-dirty").all_inner_texts()
    assert not dirty, f"opened as modified: {dirty} (a kernelspec or language_info that differs from the kernel's?)"


PICTURE_SIZES = """imgs => imgs.filter(i => i.complete && i.naturalWidth > 0).map(i => ({
    alt: i.alt || i.src.slice(0, 60), natural: i.naturalWidth, shown: Math.round(i.getBoundingClientRect().width)}))"""


def check_pictures_fit_the_panel(page) -> None:
    """With the file browser open, every picture of the notebook (outputs and attachments) is shown at its own
    size: none is scaled down to the panel, which would shrink its 10-px labels."""
    browser_panel = page.locator("#filebrowser")
    if not browser_panel.is_visible():
        page.locator(".jp-SideBar [data-id='filebrowser']").first.click()
    assert browser_panel.is_visible(), "the file browser is not open beside the notebook"
    page.locator(f"{CURRENT_PANEL} .jp-Cell").last.scroll_into_view_if_needed()  # every output laid out
    sizes = page.locator(f"{CURRENT_PANEL} .jp-Cell img").evaluate_all(PICTURE_SIZES)
    assert sizes, "no picture in the notebook"
    shrunk = [s for s in sizes if s["shown"] < s["natural"] - 1]
    panel = page.locator(f"{CURRENT_PANEL} .jp-Notebook").evaluate("e => Math.round(e.getBoundingClientRect().width)")
    assert not shrunk, f"scaled down to a {panel}-px notebook panel: {shrunk[:5]}"


def check_a_widget_cell_runs_alone(page, index: int, screenshot: Path) -> None:
    """Right after opening, a teacher runs only the widget cell (Shift+Enter): it imports what it needs, so the
    live controls appear, with no NameError."""
    from playwright.sync_api import expect

    cell = page.locator(f"{CURRENT_PANEL} .jp-Cell").nth(index)
    cell.scroll_into_view_if_needed()
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    try:
        cell.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=NOTEBOOK_RUN_S * 1000)
    except Exception:
        raise AssertionError(f"cell {index} run alone: no live widget; its output: "
                             f"{cell.locator('.jp-Cell-outputArea').inner_text()[:500]}") from None
    output = cell.locator(".jp-Cell-outputArea")
    assert "Error" not in output.inner_text(), output.inner_text()[:500]
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=60_000)
    output.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot))


def check_long_cells_showed_progress(page, copy: Path, path: Path) -> None:
    """Each cell that calls one of ``PROGRESS_CALLS`` shows, in the browser, its finished status line and its
    curves (both were updated in place while it ran)."""
    import nbformat

    cells = nbformat.read(copy, as_version=4).cells
    for index, cell in enumerate(cells):
        for call, finished in PROGRESS_CALLS.items():
            if cell.cell_type == "code" and call in cell.source:
                output = page.locator(f"{CURRENT_PANEL} .jp-Cell").nth(index).locator(".jp-Cell-outputArea")
                output.scroll_into_view_if_needed()
                text = output.inner_text()
                assert finished.search(text), f"cell {index} ({call}): no finished status line in {text[:300]!r}"
                assert output.locator("img").count() >= 1, f"cell {index} ({call}): no curves"
                output.screenshot(path=str(ARTIFACTS / f"browser_progress_{_stem(path)}_{index}.png"))


def _stem(path: Path) -> str:
    return path.stem if language(path) == "en" else f"{language(path)}_{path.stem}"


# Opening a notebook costs a page and a kernel (5-10 s on two busy cores); what its stored widget outputs are is
# checked for every notebook without a browser (test_portable.py). `make test` opens, before a run, the first
# chapter (the explorer), chapter 13 (widgets of the library's llm package) and 13's twin; the twins 05 and 06 are
# opened before a run by test_twin_widget_redraws_after_a_change, and 00 and 06 reopened after a save below.
BEFORE_BY_DEFAULT = {("en", "00_start_here.ipynb"), ("en", "13_rotary_positions_and_windows.ipynb"),
                     ("zh-CN", "13_rotary_positions_and_windows.ipynb")}
OPENED_BEFORE_RUNNING = [pytest.param(p, id=relative(p).removesuffix(".ipynb"), marks=() if os.environ.get(
    "MHA_BROWSER_ALL") == "1" or (language(p), p.name) in BEFORE_BY_DEFAULT else pytest.mark.skip(
    reason="every widget notebook opened before a run: MHA_BROWSER_ALL=1 (make test opens 00, 13 and zh-CN/13)"))
    for p in WIDGET_NOTEBOOKS]


@pytest.mark.parametrize("path", OPENED_BEFORE_RUNNING)
def test_widget_cells_show_a_picture_before_running(browser, jupyterlab, path):
    ARTIFACTS.mkdir(exist_ok=True)
    errors = []
    page = open_notebook(browser, jupyterlab, relative(path), errors)
    try:
        indices = widget_cells(jupyterlab[2] / relative(path))  # the copy the server opens
        for n, index in enumerate(indices):
            check_static_widget_cell(page, index, ARTIFACTS / f"browser_before_{_stem(path)}_{n}.png",
                                     static_sentence(path))
        check_whole_notebook(page)
        check_opens_unmodified(page)
        check_a_widget_cell_runs_alone(page, indices[-1], ARTIFACTS / f"browser_alone_{_stem(path)}.png")
        check_pictures_fit_the_panel(page)  # the live widget's picture too
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"browser_failure_before_{_stem(path)}.png"))
        raise
    finally:
        page.close()
        shut_down_kernels(*jupyterlab[:2])


def test_explorer_in_jupyterlab(browser, jupyterlab):
    from playwright.sync_api import expect

    base, token, folder = jupyterlab
    ARTIFACTS.mkdir(exist_ok=True)
    console_errors = []
    page = open_notebook(browser, jupyterlab, NOTEBOOK.name, console_errors)
    try:
        run_all_cells(page)

        explorer = page.locator(".mha-explorer")
        caption = explorer.locator(".mha-explorer-caption")
        expect(caption).to_contain_text("4 heads", timeout=NOTEBOOK_RUN_S * 1000)
        image = explorer.locator("img")
        expect(image).to_have_attribute("src", re.compile("^(blob|data):"))
        explorer.scroll_into_view_if_needed()
        before = image.evaluate(IMAGE_FACTS)

        heads = explorer.locator(".widget-toggle-buttons", has_text="heads H")
        # the buttons' label stands in the label column, on the buttons' row, as a menu's label does (ipywidgets 8
        # stacked it above the buttons, left-aligned)
        label, button = heads.locator("label").bounding_box(), heads.get_by_role("button").first.bounding_box()
        menu_label = explorer.locator(".widget-dropdown", has_text="sentence").locator("label").bounding_box()
        assert abs((label["y"] + label["height"] / 2) - (button["y"] + button["height"] / 2)) < 6, (label, button)
        assert abs(label["x"] - menu_label["x"]) < 4, (label, menu_label)  # the same column, to a margin
        assert heads.locator("label").evaluate("e => getComputedStyle(e).textAlign") == "right"
        start = time.perf_counter()
        heads.get_by_role("button", name="8", exact=True).click()
        expect(caption).to_contain_text("8 heads", timeout=30_000)
        expect(image).not_to_have_attribute("src", before["src"], timeout=30_000)
        seconds = time.perf_counter() - start
        after = image.evaluate(IMAGE_FACTS)

        assert caption.get_attribute("data-heads") == "8"
        assert (after["length"], after["hash"]) != (before["length"], before["hash"]), "same picture"
        assert after["height"] > before["height"], "8 heads need two rows of panels, 4 heads one"
        assert after["width"] == before["width"]
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)
        widget_errors = [e for e in console_errors if "widget" in e.lower() or "mha_lib" in e]
        assert not widget_errors, widget_errors
        explorer.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOT))
        print(f"heads 4 -> 8: new picture in the browser after {seconds * 1000:.0f} ms "
              f"({before['width']}x{before['height']} -> {after['width']}x{after['height']} px); "
              f"screenshot: {SCREENSHOT.relative_to(ROOT)}")

        # run, save, and reopen the next day: the explorer cell keeps the picture it showed when saved
        saved = save_and_wait(page, folder / NOTEBOOK.name)
        index = widget_cells(folder / NOTEBOOK.name)[0]
        assert "heads H = 8" in "".join(o["data"]["text/plain"] for o in saved.cells[index].outputs
                                         if "text/plain" in o.get("data", {}))
        page.close()
        shut_down_kernels(base, token)
        page = open_notebook(browser, jupyterlab, NOTEBOOK.name, console_errors)
        text = check_static_widget_cell(page, index, ARTIFACTS / "browser_reopened_00_start_here.png")
        assert "heads H = 8" in text and "8 heads" in text, text
        check_whole_notebook(page)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "browser_failure.png"))
        raise
    finally:
        page.close()
        shut_down_kernels(base, token)


# Running a whole notebook in the browser costs what nbval's run costs again (15-70 s each on two busy cores), so
# `make test` reopens three (00 above: the explorer; 06: two `interact` cells; 13: a long cell's progress) and
# MHA_BROWSER_ALL=1 every one.
REOPEN_BY_DEFAULT = {"06_softmax.ipynb", "13_rotary_positions_and_windows.ipynb"}  # 13: a long cell's progress
# A cell that runs for long shows how far it is as it goes (a status line updated in place, redrawn curves): the
# calls that do it, and the words its last status line holds once the cell is done (under a test: its short mode)
PROGRESS_CALLS = {"train_with_progress(": re.compile(r"done.*step (\d+) of \1 |完成.*第 (\d+) 步，共 \2 步")}
REOPEN_ALL = os.environ.get("MHA_BROWSER_ALL") == "1"
REOPENED = [pytest.param(p, id=relative(p).removesuffix(".ipynb"), marks=() if REOPEN_ALL or (
    p.name in REOPEN_BY_DEFAULT and language(p) == "en") else pytest.mark.skip(
    reason="run + save + reopen of every widget notebook: MHA_BROWSER_ALL=1 (make test does 00, 06 and 13)"))
    for p in WIDGET_NOTEBOOKS if p != NOTEBOOK]  # 00: test_explorer_in_jupyterlab


@pytest.mark.parametrize("path", REOPENED)
def test_widget_cells_show_a_picture_after_run_save_reopen(browser, jupyterlab, path):
    base, token, folder = jupyterlab
    ARTIFACTS.mkdir(exist_ok=True)
    errors = []
    indices = widget_cells(jupyterlab[2] / relative(path))  # the copy the server opens
    page = open_notebook(browser, jupyterlab, relative(path), errors)
    try:
        start = time.perf_counter()
        run_all_cells(page)
        wait_until_run(page, indices)
        seconds = time.perf_counter() - start
        check_long_cells_showed_progress(page, jupyterlab[2] / relative(path), path)
        saved = save_and_wait(page, folder / relative(path))
        for index in indices:
            pictures = [o for o in saved.cells[index].outputs if "image/png" in o.get("data", {})]
            assert pictures, f"cell {index}: saved without a picture"
        page.close()
        shut_down_kernels(base, token)
        page = open_notebook(browser, jupyterlab, relative(path), errors)
        for n, index in enumerate(indices):
            check_static_widget_cell(page, index, ARTIFACTS / f"browser_reopened_{_stem(path)}_{n}.png",
                                     static_sentence(path))
        check_whole_notebook(page)
        print(f"{relative(path)}: ran in {seconds:.0f} s, saved, reopened: {len(indices)} widget cell(s) show a "
              "picture")
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"browser_failure_reopen_{_stem(path)}.png"))
        raise
    finally:
        page.close()
        shut_down_kernels(base, token)



# ------------------------------------------------------------------------------------------ the Chinese edition

# Each distinct Chinese character of an element, drawn on a canvas in the element's own font (the browser's font
# fallback picks a CJK font for it, if it has one): a character no font has comes out as the .notdef box, the same
# box for every character, and the same as for U+0378 (unassigned, so in no font at all).
CJK_RENDERING = r"""(el) => {
    const style = getComputedStyle(el);
    const han = [...new Set([...el.textContent].filter(c => /\p{Script=Han}/u.test(c)))].slice(0, 8);
    const canvas = document.createElement('canvas');
    canvas.width = 64; canvas.height = 64;
    const ctx = canvas.getContext('2d', {willReadFrequently: true});
    const draw = (c) => {
        ctx.clearRect(0, 0, 64, 64);
        ctx.font = `${style.fontWeight} 40px ${style.fontFamily}`;
        ctx.textBaseline = 'top'; ctx.fillStyle = '#000'; ctx.fillText(c, 8, 8);
        const d = ctx.getImageData(0, 0, 64, 64).data;
        let hash = 0, ink = 0;
        for (let i = 3; i < d.length; i += 4) { hash = (hash * 31 + d[i]) >>> 0; ink += d[i] > 0; }
        return hash + ':' + ink;
    };
    const glyphs = han.map(draw);
    const missing = draw('\u0378');
    return {chars: han.join(''), font: style.fontFamily, distinct: new Set(glyphs).size,
            boxes: glyphs.filter(g => g === missing).length, blank: glyphs.filter(g => g.endsWith(':0')).length};
}"""


def cjk_rendering(locator) -> dict:
    """How the Chinese characters of the element ``locator`` render (see ``CJK_RENDERING``)."""
    return locator.evaluate(CJK_RENDERING)


def cjk_problem(facts: dict) -> str | None:
    """None when every character drew a glyph of its own; otherwise what went wrong (boxes instead of characters)."""
    count = len(facts["chars"])
    if count < 3:
        return f"too few Chinese characters to judge: {facts['chars']!r}"
    if facts["boxes"] or facts["distinct"] < count or facts["blank"]:
        return (f"{facts['chars']!r} in {facts['font']!r}: {facts['distinct']} distinct glyphs for {count} characters, "
                f"{facts['boxes']} drawn as the box of a missing character, {facts['blank']} blank: no CJK font? "
                "(Debian: apt-get install fonts-noto-cjk)")
    return None


def change_first_control(widget) -> str:
    """Change the first control of an ipywidgets area as a student would: another entry of a dropdown, another
    toggle button, or a slider moved with the keyboard; returns what was done."""
    select = widget.locator("select")
    if select.count():
        options = select.first.locator("option").all_inner_texts()
        current = select.first.evaluate("s => s.selectedIndex")
        select.first.select_option(index=(current + 1) % len(options))
        return f"dropdown -> {options[(current + 1) % len(options)]!r}"
    toggle = widget.locator(".widget-toggle-button:not(.mod-active)")
    if toggle.count():
        toggle.first.click()
        return "toggle button"
    handle = widget.locator(".noUi-handle")
    if handle.count():
        handle.first.focus()
        for _ in range(3):
            handle.first.press("ArrowRight")
        return "slider, three steps right"
    raise AssertionError("no dropdown, toggle button or slider in the widget")


TWINS_REDRAWN = [p for p in WIDGET_NOTEBOOKS if language(p) == "zh-CN" and p.name in TWIN_REDRAW]


@pytest.mark.parametrize("path", TWINS_REDRAWN, ids=[relative(p).removesuffix(".ipynb") for p in TWINS_REDRAWN])
def test_twin_widget_redraws_after_a_change(browser, jupyterlab, path):
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    errors = []
    indices = widget_cells(jupyterlab[2] / relative(path))  # the copy the server opens
    page = open_notebook(browser, jupyterlab, relative(path), errors)
    try:
        title = page.locator(f"{CURRENT_PANEL} .jp-MarkdownOutput h1").first
        problem = cjk_problem(cjk_rendering(title))
        assert problem is None, problem
        check_static_widget_cell(page, indices[0], ARTIFACTS / f"browser_before_{_stem(path)}_run.png",
                                 static_sentence(path))
        run_all_cells(page)
        wait_until_run(page, indices)
        widget = page.locator(f"{CURRENT_PANEL} .jp-Cell").nth(indices[0]).locator(".jupyter-widgets").first
        widget.scroll_into_view_if_needed()
        picture = page.locator(f"{CURRENT_PANEL} .jp-Cell").nth(indices[0]).locator(".jupyter-widgets img").first
        expect(picture).to_be_visible(timeout=60_000)
        before = picture.evaluate(IMAGE_FACTS)
        done = change_first_control(widget)
        expect(picture).not_to_have_attribute("src", before["src"], timeout=60_000)
        after = picture.evaluate(IMAGE_FACTS)
        assert (after["length"], after["hash"]) != (before["length"], before["hash"]), f"{done}: the same picture"
        assert min(after["width"], after["height"]) > 50, after
        widget_errors = [e for e in errors if "widget" in e.lower() or "mha_lib" in e]
        assert not widget_errors, widget_errors
        page.screenshot(path=str(ARTIFACTS / f"browser_redrawn_{_stem(path)}.png"))
        print(f"{relative(path)}: {done}: a new picture ({before['width']}x{before['height']} -> "
              f"{after['width']}x{after['height']} px); the Chinese title renders: {title.inner_text()!r}")
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"browser_failure_redraw_{_stem(path)}.png"))
        raise
    finally:
        page.close()
        shut_down_kernels(*jupyterlab[:2])


def test_the_twins_run_in_the_browser_are_there():
    """The twins named in TWIN_REDRAW exist and have widget cells once executed (`make notebooks`)."""
    twins = [TWIN_DIR / name for name in TWIN_REDRAW if (TWIN_DIR / name).is_file()]
    if not twins:
        pytest.skip("no Chinese twin of 05 or 06 yet (notebooks/zh-CN/)")
    assert [p for p in twins if not widget_cells(p)] == [], "twins without stored widget outputs: run `make notebooks`"


FONTCONFIG_WITHOUT_CJK = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir>{fonts}</dir><cachedir>{cache}</cachedir></fontconfig>
"""


def test_of_the_test_boxes_instead_of_characters_are_caught(playwright, tmp_path):
    """The CJK check on a Chinese title, in this Chromium (which must pass) and in one whose fontconfig sees only
    DejaVu (no CJK glyph anywhere: every character is the same box, so the check must fail)."""
    chromium = _require_browser()
    dejavu = next((Path(d) for d in ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/dejavu")
                   if Path(d).is_dir()), None)
    if dejavu is None:
        pytest.skip("no DejaVu fonts folder to build a fontconfig without CJK fonts")
    config = tmp_path / "fonts.conf"
    config.write_text(FONTCONFIG_WITHOUT_CJK.format(fonts=dejavu, cache=tmp_path / "cache"), encoding="utf-8")
    page_html = ("<html lang='zh-CN'><body style='font-family: system-ui, sans-serif'>"
                 "<h1>第 5 章 · 因果掩码：不许偷看未来</h1></body></html>")
    found = {}
    for name, env in (("system fonts", None), ("DejaVu only", {**os.environ, "FONTCONFIG_FILE": str(config)})):
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, timeout=60_000, env=env)
        try:
            page = browser.new_page()
            page.set_content(page_html)
            found[name] = cjk_rendering(page.locator("h1"))
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"browser_cjk_{name.split()[0].lower()}.png"))
        finally:
            browser.close()
    assert cjk_problem(found["system fonts"]) is None, cjk_problem(found["system fonts"])
    problem = cjk_problem(found["DejaVu only"])
    assert problem is not None and "drawn as the box of a missing character" in problem, found["DejaVu only"]
    assert found["DejaVu only"]["distinct"] == 1, found["DejaVu only"]  # one box for every character
