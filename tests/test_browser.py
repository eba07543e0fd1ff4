"""The explorer in a real browser: JupyterLab on localhost, Chromium driven by Playwright.

The test starts ``jupyter lab`` on 127.0.0.1 (random free port, random token) over a temporary copy of
``notebooks/00_start_here.ipynb`` (the real notebook is never opened, so it cannot be saved over), opens it in
Debian's Chromium (``executable_path``: Playwright downloads no browser), runs every cell from the Run menu,
clicks another head count in the explorer and checks that the picture changed: the caption's number of heads,
the image's bytes and its height (more rows of panels). It saves ``tests/artifacts/browser_explorer.png``.

Needs: Chromium (``apt-get install chromium``; ``.ci/run`` installs it) and the pinned ``playwright`` package.
Without a Chromium executable the test is skipped with that reason, except under CI (``CI`` set), where it
fails: CI must really run it.
"""

from __future__ import annotations

import json
import os
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

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "00_start_here.ipynb"
ARTIFACTS = ROOT / "tests" / "artifacts"
SCREENSHOT = ARTIFACTS / "browser_explorer.png"
# The real binary first: /usr/bin/chromium is Debian's wrapper script around it
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")
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


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 over a temporary copy of notebook 00; yields (base url, token)."""
    _require_browser()
    home = tmp_path_factory.mktemp("jupyterlab")
    (home / "notebooks").mkdir()
    shutil.copy(NOTEBOOK, home / "notebooks" / NOTEBOOK.name)
    (home / "assets").symlink_to(ROOT / "assets")  # the notebook's ../assets/ pictures
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
        yield base, token
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


def test_explorer_in_jupyterlab(jupyterlab):
    from playwright.sync_api import expect, sync_playwright

    base, token = jupyterlab
    ARTIFACTS.mkdir(exist_ok=True)
    console_errors = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, timeout=60_000)
        page = browser.new_page(viewport={"width": 1400, "height": 1050})
        page.set_default_timeout(60_000)
        page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
        try:
            page.goto(f"{base}/lab/tree/notebooks/{NOTEBOOK.name}?token={token}", timeout=90_000)
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
            expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(
                1, timeout=90_000)  # the kernel has started
            if page.locator(".jp-Dialog").count():  # a kernel chooser despite the settings: take the preferred one
                page.locator(".jp-Dialog .jp-mod-accept").click()

            run_all_cells(page)

            explorer = page.locator(".mha-explorer")
            caption = explorer.locator(".mha-explorer-caption")
            expect(caption).to_contain_text("4 heads", timeout=NOTEBOOK_RUN_S * 1000)
            image = explorer.locator("img")
            expect(image).to_have_attribute("src", re.compile("^(blob|data):"))
            explorer.scroll_into_view_if_needed()
            before = image.evaluate(IMAGE_FACTS)

            heads = explorer.locator(".widget-toggle-buttons", has_text="heads H")
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
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "browser_failure.png"))
            raise
        finally:
            browser.close()
