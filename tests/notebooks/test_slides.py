"""Slides derived from the notebooks (tests/slides.py): the stamping rules, the stored metadata, the offline deck,
and one deck opened in Chromium.

The browser test opens ``01_single_head_attention``'s deck from disk with every network request refused, checks
that reveal.js and MathJax ran and that the deck has the slides the rules give, shows the first slide with a
figure and saves ``tests/artifacts/slides_deck.png``. Without a Chromium executable it is skipped with the
reason, except under CI (``CI`` set), where it fails.

The Chinese edition: the rules read the twins' Chinese markers, every twin that exists (notebooks/zh-CN/) is stamped
like its English chapter, and a twin's deck is written in Chinese into build/slides/zh-CN/.
"""

from __future__ import annotations

import html
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import slides

ROOT = Path(__file__).resolve().parents[2]
TWIN_PATHS = slides.twin_paths()  # the Chinese twins that exist
NOTEBOOK_PATHS = sorted((ROOT / "notebooks").glob("*.ipynb")) + TWIN_PATHS
BROWSER_CHAPTER = ROOT / "notebooks" / "01_single_head_attention.ipynb"
SCREENSHOT = ROOT / "tests" / "artifacts" / "slides_deck.png"
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")
PNG_1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def _figure_cell(code="plot()"):
    return new_code_cell(code, outputs=[new_output("display_data", data={"image/png": PNG_1x1, "text/plain": "<F>"})])


def _widget_cell():
    data = {"application/vnd.jupyter.widget-view+json": {"model_id": "m1", "version_major": 2, "version_minor": 0},
            "text/plain": "interactive(children=(...))"}
    return new_code_cell("interact(f, x=1)", outputs=[new_output("display_data", data=data)])


def _static_widget_cell():
    note = new_output("display_data", data={"text/markdown": "*▶ Run this cell*", "text/plain": "▶ Run"})
    note.metadata["mha_lib_static_widget"] = True
    picture = new_output("display_data", data={"image/png": PNG_1x1, "text/plain": "<static copy>"})
    picture.metadata["mha_lib_static_widget"] = True
    return new_code_cell("interact(f, x=1)", outputs=[note, picture])


def _with_notes(cell, notes):
    cell.metadata["teacher_notes"] = notes
    return cell


def _tagged(cell, *tags):
    cell.metadata["tags"] = list(tags)
    return cell


def sample_notebook():
    """A chapter in miniature, with one cell of each kind the rules name (expected type on the right)."""
    cells = [
        (_tagged(new_markdown_cell("[![Open In Colab](badge.svg)](x)"), "colab-badge"), "skip"),
        (new_markdown_cell("# Chapter 9 · A title\n\n**Class time:** about 45 min"), "slide"),
        (_tagged(new_code_cell("import sys"), "colab-setup"), "skip"),
        (new_code_cell("import torch\nfrom mha_lib.exercises.ch09_efficiency import check_f"), "-"),  # imports
        (_with_notes(new_markdown_cell("## 1. First section · ~10 min\n\nText."), ["Say this first."]), "slide"),
        (_tagged(new_markdown_cell("**Predict before you run.** What?\n\n<details><summary>Answer</summary>\n\n"
                                   "This.\n</details>"), "predict"), "-"),  # first thing under its heading
        (new_code_cell("show(x)"), "fragment"),  # the answer appears on the next click
        (new_markdown_cell("More text."), "-"),
        (_figure_cell(), "-"),
        (_widget_cell(), "skip"),  # the figure above stands in for it
        (_tagged(new_markdown_cell("**Discuss.** Why?\n\n<details><summary>One answer</summary>\n\nBecause."
                                   "\n</details>"), "discussion"), "subslide"),
        (new_markdown_cell("### A sub-part\n\n```python\n# a comment, not a heading\n```"), "subslide"),
        (_tagged(new_markdown_cell("**Exercise 9.1 · Do it** · difficulty ★☆☆ · ~5 min\n\nWrite f."),
                 "exercise"), "-"),  # first thing under "A sub-part"
        (new_code_cell("def f(x):\n    raise NotImplementedError  # your code here"), "-"),
        (new_code_cell("from mha_lib.exercises.ch09_efficiency import check_f\n\ncheck_f(f)"), "skip"),
        (new_code_cell("check_g(\n    g,\n    seed=1,\n)"), "skip"),
        (_tagged(new_markdown_cell("<details><summary>Hint</summary>\n\nh\n</details>\n\n<details><summary>"
                                   "Solution</summary>\n\n```python\n# solution\n```\n</details>"), "solution"),
         "skip"),
        (new_markdown_cell("<details><summary>Hint</summary>\n\nuntagged\n</details>"), "skip"),
        (new_markdown_cell("## 2. Second section · ~5 min"), "slide"),
        (_widget_cell(), "-"),  # no figure in this section: the deck shows a note instead
        (new_markdown_cell("## Summary\n\n### What to remember\n\n- one"), "slide"),
    ]
    return new_notebook(cells=[cell for cell, _ in cells]), [kind for _, kind in cells]


# --------------------------------------------------------------------------------------------------- rules


def test_slide_types_follow_the_rules_cell_by_cell():
    nb, expected = sample_notebook()
    assert slides.slide_types(nb) == expected


def test_stamp_writes_metadata_and_warns_about_a_widget_without_a_figure():
    nb, expected = sample_notebook()
    warnings = slides.stamp_slides(nb)
    assert [cell.metadata["slideshow"]["slide_type"] for cell in nb.cells] == expected
    assert warnings == ["cell 19: widget with no static figure, neither its own nor in its section (the deck "
                        "shows a note instead)"]
    assert slides.stamp_slides(nb) == warnings  # stamping twice changes nothing
    assert [cell.metadata["slideshow"]["slide_type"] for cell in nb.cells] == expected


def test_a_widget_with_its_own_static_copy_is_shown_without_warning():
    nb = new_notebook(cells=[new_markdown_cell("# T"), new_markdown_cell("## S · ~2 min"), _static_widget_cell()])
    assert slides.slide_types(nb) == ["slide", "slide", "-"]
    assert slides.stamp_slides(nb) == []


def test_predict_after_content_gets_its_own_screen_and_reveals_the_next_code_cell():
    nb = new_notebook(cells=[
        new_markdown_cell("## S · ~2 min"), new_code_cell("x = 1"),
        _tagged(new_markdown_cell("**Predict before you run.** x?"), "predict"),
        _tagged(new_code_cell("import sys"), "colab-setup"),  # skipped cells do not break the pairing
        new_code_cell("show(x)"), new_code_cell("y = 2"),
    ])
    assert slides.slide_types(nb) == ["slide", "-", "subslide", "skip", "fragment", "-"]


def test_untagged_markers_are_recognised_by_their_opening_words():
    nb = new_notebook(cells=[new_markdown_cell("## S"), new_markdown_cell("Text."),
                             new_markdown_cell("**Discuss.** Why?"), new_markdown_cell("**Predict before you run.** ?"),
                             new_code_cell("show(1)")])
    assert slides.slide_types(nb) == ["slide", "-", "subslide", "subslide", "fragment"]


def test_headings_ignore_code_fences_and_details_blocks():
    text = ("Intro\n\n## 2. Real · ~5 min\n\n```python\n# comment\n## not a heading\n```\n\n<details><summary>"
            "Hint</summary>\n\n# not a heading either\n</details>\n\n### Sub")
    assert slides.headings(text) == [(2, 2, "2. Real · ~5 min"), (14, 3, "Sub")]


def test_a_heading_below_the_first_line_is_reported_and_cut_for_the_deck():
    cell = new_markdown_cell("Closing words of section 1.\n\n## 2. Next · ~5 min\n\nOpening words.")
    cell.metadata["teacher_notes"] = ["say this"]
    nb = new_notebook(cells=[new_markdown_cell("# T"), cell])
    assert slides.heading_warnings(nb) == ["cell 1: heading ## '2. Next · ~5 min' is not at the top of its cell"]
    assert slides.slide_types(nb) == ["slide", "slide"]  # the stored metadata: the cell starts the slide
    split = slides.split_at_headings(nb)
    assert [c.source for c in split.cells] == ["# T", "Closing words of section 1.",
                                               "## 2. Next · ~5 min\n\nOpening words."]
    assert split.cells[2].metadata["teacher_notes"] == ["say this"]  # the notes go with their heading
    assert slides.slide_types(split) == ["slide", "-", "slide"]
    assert len(nb.cells) == 2  # the original is not changed


def test_count_slides_matches_nbconverts_rule_for_the_first_shown_cell():
    assert slides.count_slides(["skip", "-", "subslide", "slide", "fragment", "subslide"]) == (2, 4)
    assert slides.count_slides(["skip"]) == (0, 0)


@pytest.mark.parametrize("bad", [None, "notebook.ipynb", {"cells": "x"}, [1, 2]])
def test_bad_notebook_is_refused_with_a_clear_message(bad):
    with pytest.raises(TypeError, match=r"nb: expected a notebook \(nbformat.NotebookNode or dict with a 'cells' "
                                        r"list\), got "):
        slides.slide_types(bad)


def test_export_refuses_a_path_that_is_not_a_notebook(tmp_path):
    with pytest.raises(ValueError, match=r"paths: expected existing \.ipynb files, got '.*missing\.ipynb'"):
        slides.export([tmp_path / "missing.ipynb"], tmp_path / "out")


def test_export_refuses_an_unknown_theme(tmp_path):
    nb, _ = sample_notebook()
    nbformat.write(nb, tmp_path / "sample.ipynb")
    with pytest.raises(ValueError, match=r"theme: expected one of reveal.js's themes \[.*'white'.*\], got 'neon'"):
        slides.export([tmp_path / "sample.ipynb"], tmp_path / "out", theme="neon")


def test_one_broken_chapter_does_not_cost_the_others(tmp_path, capsys):
    nb, _ = sample_notebook()
    nbformat.write(nb, tmp_path / "01_good.ipynb")
    broken = new_notebook(cells=[_tagged(new_markdown_cell("only a badge"), "colab-badge")])  # nothing to show
    nbformat.write(broken, tmp_path / "02_broken.ipynb")
    assert slides.main(["--out", str(tmp_path / "out"), str(tmp_path / "01_good.ipynb"),
                        str(tmp_path / "02_broken.ipynb")]) == 1
    captured = capsys.readouterr()
    assert "01_good.slides.html: 4 slides, 7 screens" in captured.out
    assert "02_broken.ipynb: no deck: ValueError: All cells are hidden, cannot create slideshow" in captured.err
    assert (tmp_path / "out" / "01_good.slides.html").is_file()
    assert not (tmp_path / "out" / "02_broken.slides.html").exists()


# --------------------------------------------------------------------------------------------------- the chapters


def _id(path: Path) -> str:
    return path.stem if path.parent.name == "notebooks" else f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[_id(p) for p in NOTEBOOK_PATHS])
def test_every_cell_has_the_slide_type_the_rules_give(path):
    # `make notebooks` stamps them (tests/refresh_notebooks.py calls slides.stamp_slides)
    nb = nbformat.read(path, as_version=4)
    expected = slides.slide_types(nb)
    stored = [cell.metadata.get("slideshow", {}).get("slide_type") for cell in nb.cells]
    wrong = [f"cell {i}: stored {s!r}, the rules give {e!r}" for i, (s, e) in enumerate(zip(stored, expected))
             if s != e]
    assert not wrong, f"{path.name}: run `make notebooks` to stamp the slides:\n" + "\n".join(wrong[:10])


def _sections(html: str) -> tuple[int, int]:
    """(horizontal slides, screens) of an nbconvert reveal.js deck, from its <section> nesting."""
    body = html[html.index('<div class="slides">'):]
    depth, top, screens = 0, 0, 0
    for tag in re.finditer(r"<(/?)section\b", body):
        if tag.group(1):
            depth -= 1
            continue
        depth += 1
        top += depth == 1
        screens += depth == 2
    return top, screens


def test_export_of_the_sample_gives_its_slides_and_loads_nothing_from_the_network(tmp_path):
    nb, _ = sample_notebook()
    path = tmp_path / "sample.ipynb"
    nbformat.write(nb, path)
    (deck,) = slides.export([path], tmp_path / "decks")
    html = deck.read_text(encoding="utf-8")
    # title, section 1, section 2, summary; screens: + the discussion, "A sub-part", "What to remember"
    assert _sections(html) == (4, 7)
    assert "interactive(children" not in html and "An interactive explorer: run this cell" in html
    # the talking points are the speaker notes of their slide; the heading loses its "· ~N min"
    assert re.search(r'<aside class="notes">(?:(?!</aside>).)*<li>Say this first\.</li>', html, re.DOTALL)
    assert re.search(r">1\. First section<", html) and "~10 min" not in html
    # the predict cell's answer stays inside its folded <details> block (one click away, as in the notebook)
    assert re.search(r"<summary>Answer</summary>(?:(?!</details>).)*This\.", html, re.DOTALL)
    assert "hl-ipython3" in html  # code cells are shown (test_export_without_code drops them)
    assert "NotImplementedError" in html and "check_f(f)" not in html and "untagged" not in html
    external = re.findall(r"""<(?:script|link)[^>]+(?:src|href)=["']((?:https?:)?//[^"']+)""", html)
    assert external == []
    assert (tmp_path / "decks" / "reveal.js" / "dist" / "reveal.js").is_file()
    assert (tmp_path / "decks" / "mathjax" / "MathJax.js").is_file()
    assert 'src="reveal.js/dist/reveal.js"' in html and 'src="mathjax/MathJax.js?config=' in html


def test_export_without_code(tmp_path):
    nb, _ = sample_notebook()
    nbformat.write(nb, tmp_path / "sample.ipynb")
    (deck,) = slides.export([tmp_path / "sample.ipynb"], tmp_path / "decks", no_input=True)
    html = deck.read_text(encoding="utf-8")
    assert "NotImplementedError" not in html and "hl-ipython3" not in html  # no code cell input
    assert _sections(html) == (4, 7) and "Write f." in html


# --------------------------------------------------------------------------------------------------- Chinese


def chinese_sample():
    """The sample chapter as a twin writes it: the same cells with the Chinese markers."""
    nb, expected = sample_notebook()
    words = {"**Predict before you run.** What?": "**预测一下，再运行。** 是什么？",
             "**Discuss.** Why?": "**讨论。** 为什么？",
             "**Exercise 9.1 · Do it** · difficulty ★☆☆ · ~5 min\n\nWrite f.":
                 "**练习 9.1 · 动手写** · 难度 ★☆☆ · 约 5 分钟\n\n写出 f。",
             "## 1. First section · ~10 min": "## 1. 第一小节 · 约 10 分钟", "## 2. Second section · ~5 min":
                 "## 2. 第二小节 · 约 5 分钟", "<summary>Answer</summary>": "<summary>答案</summary>"}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for tag in ("predict", "discussion", "exercise"):  # found by their opening words alone
                if tag in cell.metadata.get("tags", []):
                    cell.metadata["tags"].remove(tag)
            for english, chinese in words.items():
                cell.source = cell.source.replace(english, chinese)
    return nb, expected


def test_the_rules_read_the_chinese_markers():
    nb, expected = chinese_sample()
    assert "**预测一下，再运行。**" in nb.cells[5].source and not nb.cells[5].metadata["tags"]
    assert slides.slide_types(nb) == expected
    assert slides.role(new_markdown_cell("**预测一下。** 运行之前先想一想。")) == "predict"
    assert slides.role(new_markdown_cell("预测一下，再运行。")) is None  # the bold opening words, not any mention


def test_the_language_of_a_notebook_is_its_folder_or_its_metadata(tmp_path):
    assert slides.language_of(ROOT / "notebooks" / "05_causal_masking.ipynb") == "en"
    assert slides.language_of(ROOT / "notebooks" / "zh-CN" / "05_causal_masking.ipynb") == "zh-CN"
    assert slides.language_of(tmp_path / "x.ipynb", {"metadata": {"mha_lib": {"language": "zh-CN"}}}) == "zh-CN"
    assert slides.deck_path(ROOT / "notebooks" / "zh-CN" / "05_causal_masking.ipynb", tmp_path) == \
        tmp_path / "zh-CN" / "05_causal_masking.slides.html"
    assert slides.deck_path(ROOT / "notebooks" / "05_causal_masking.ipynb", tmp_path) == \
        tmp_path / "05_causal_masking.slides.html"
    assert all(path.parent.name == "zh-CN" for path in TWIN_PATHS)


def test_a_twins_deck_is_chinese_and_shares_the_javascript_one_folder_up(tmp_path):
    nb, _ = chinese_sample()
    (tmp_path / "zh-CN").mkdir()
    nbformat.write(nb, tmp_path / "zh-CN" / "09_sample.ipynb")
    english, _ = sample_notebook()
    nbformat.write(english, tmp_path / "09_sample.ipynb")
    assert slides.main(["--out", str(tmp_path / "decks"), str(tmp_path / "09_sample.ipynb"),
                        str(tmp_path / "zh-CN" / "09_sample.ipynb")]) == 0
    deck = tmp_path / "decks" / "zh-CN" / "09_sample.slides.html"
    html = deck.read_text(encoding="utf-8")
    assert _sections(html) == (4, 7)  # the same slides as the English sample
    assert '<html lang="zh">' in html and '<html lang="en">' in (tmp_path / "decks" / "09_sample.slides.html").read_text(
        encoding="utf-8")
    assert "一个交互式探索器：在 JupyterLab 或 Colab 中运行这个单元格即可使用。" in html
    assert "An interactive explorer" not in html
    assert re.search(r">1\. 第一小节<", html) and "约 10 分钟" not in html  # no time on the students' screen
    assert 'src="../reveal.js/dist/reveal.js"' in html and 'src="../mathjax/MathJax.js?config=' in html
    assert (tmp_path / "decks" / "reveal.js" / "dist" / "reveal.js").is_file()
    assert not (tmp_path / "decks" / "zh-CN" / "reveal.js").exists()  # one copy of the JavaScript


@pytest.mark.skipif(not TWIN_PATHS, reason="no Chinese twin yet (notebooks/zh-CN/)")
def test_export_of_a_twin_has_the_slides_of_its_english_chapter(tmp_path):
    twin = next((p for p in TWIN_PATHS if p.name == BROWSER_CHAPTER.name), TWIN_PATHS[0])
    english = ROOT / "notebooks" / twin.name
    (deck,) = slides.export([twin], tmp_path)
    assert deck == tmp_path / "zh-CN" / f"{twin.stem}.slides.html"
    counts = [slides.count_slides(slides.slide_types(slides.split_at_headings(nbformat.read(p, as_version=4))))
              for p in (english, twin)]
    assert counts[0] == counts[1]  # the same cells, the same rules
    assert _sections(deck.read_text(encoding="utf-8")) == counts[1]


def test_export_of_a_chapter_has_the_slides_the_rules_give(tmp_path):
    (deck,) = slides.export([BROWSER_CHAPTER], tmp_path)
    nb = slides.split_at_headings(nbformat.read(BROWSER_CHAPTER, as_version=4))
    slide_count, screens = slides.count_slides(slides.slide_types(nb))
    top, nested = _sections(deck.read_text(encoding="utf-8"))
    assert (top, nested) == (slide_count, screens)
    assert slide_count >= 5


# --------------------------------------------------------------------------------------------------- the browser


def _chromium() -> str:
    found = os.environ.get("MHA_CHROMIUM")
    for name in ([found] if found else []) + list(CHROMIUM_CANDIDATES):
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.access(path, os.X_OK):
            return path
    reason = "no Chromium executable found: install Debian's chromium (`apt-get install chromium`)"
    if os.environ.get("CI"):
        pytest.fail("CI must run the slides browser test: " + reason)
    pytest.skip(reason)


def test_deck_shows_a_figure_slide_in_chromium_offline(tmp_path):
    chromium = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: run `make install`")
    (deck,) = slides.export([BROWSER_CHAPTER], tmp_path)
    nb = slides.split_at_headings(nbformat.read(BROWSER_CHAPTER, as_version=4))
    slide_count, screens = slides.count_slides(slides.slide_types(nb))
    refused, errors = [], []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, timeout=60_000,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("pageerror", lambda error: errors.append(str(error)))

            def offline(route):  # a classroom without network: anything but the deck's own files fails
                if route.request.url.startswith(("file:", "data:")):
                    route.continue_()
                else:
                    refused.append(route.request.url)
                    route.abort()

            page.route("**/*", offline)
            page.goto(deck.as_uri())
            page.wait_for_function("window.Reveal && Reveal.isReady()", timeout=30_000)
            assert page.evaluate("Reveal.getHorizontalSlides().length") == slide_count
            assert page.evaluate("Reveal.getTotalSlides()") == screens
            page.wait_for_function("window.MathJax && MathJax.isReady === true", timeout=30_000)
            speaker_notes = page.evaluate("""() => {
                const s = [...document.querySelectorAll('.reveal .slides section section')]
                    .find(x => x.querySelector('aside.notes'));
                return s ? Reveal.getSlideNotes(s) : ''; }""")
            # the first screen (a slide without subslides, or a subslide) that shows a figure
            indices = page.evaluate("""() => {
                const img = [...document.querySelectorAll('.reveal .slides .jp-OutputArea-output img')]
                    .find(i => i.naturalWidth > 100 && i.closest('section').querySelectorAll('section').length == 0);
                return img ? Reveal.getIndices(img.closest('section')) : null; }""")
            assert indices is not None, "no slide with a figure"
            page.evaluate(f"Reveal.slide({indices['h']}, {indices['v']})")
            page.wait_for_timeout(500)
            shown = page.evaluate("""() => {
                const img = [...Reveal.getCurrentSlide().querySelectorAll('img')].find(i => i.naturalWidth > 100);
                img.scrollIntoView({block: 'center'});
                const box = img.getBoundingClientRect();
                return {width: box.width, height: box.height, top: box.top, bottom: box.bottom,
                        natural: img.naturalWidth};}""")
            page.wait_for_timeout(300)
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))
            math = page.evaluate("document.querySelectorAll('.MathJax, .MathJax_Display, .MJX_Assistive_MathML')"
                                 ".length")
        finally:
            browser.close()
    assert refused == [] and errors == []
    assert shown["natural"] > 100 and shown["width"] > 200, shown  # drawn at a readable size
    assert shown["top"] >= 0 and shown["bottom"] <= 800 + 1, shown  # scrolled into the screen, not cut off
    assert math > 0  # MathJax typeset the formulas from the local copy
    # the first section's talking points are the speaker notes of its slide
    first_notes = next(cell.metadata["teacher_notes"] for cell in nb.cells if cell.metadata.get("teacher_notes"))
    shown_notes = html.unescape(re.sub(r"<[^>]+>", "", speaker_notes))
    assert first_notes[0].replace("`", "").replace("*", "") in shown_notes.replace("\n", " ")
