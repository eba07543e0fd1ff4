"""Figures readable on a projector, measured (issue 14 §5): not eyeballed.

* ``plot_heads``, ``plot_stages``, ``explorer_figure`` at the largest sizes the chapters use (12 heads × 16 tokens
  with Chinese tokens, the chapter 8 stage grid, 12 panels with long titles): every text artist at least 10 px at
  the dpi the figure is shown at (a notebook shows a Figure at its own dpi, 100), every label inside the figure,
  token labels that do not overlap, and the figure within 1200 × 900 px;
* the explorer's picture: its fonts in pixels, glyphs really that tall, the picture within 900 px;
* the diagrams of ``assets/draw``: every text at least 10 px at the dpi the script saves with (a diagram is shown
  at its natural size), nothing outside the picture, and no picture taller than a screen;
* every picture stored in the notebooks (outputs and attachments) and in ``assets/``: no taller than a screen.
  The stored outputs are the regression record: this part passes once the notebooks have been refreshed with
  the current ``mha_lib``.
"""

from __future__ import annotations

import base64
import io
import re
import runpy
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import mha_lib
from mha_lib.display import plotting, render
from mha_lib.display.widgets import attention_stages, explorer_figure, render_png

from figure_checks import MIN_PX, SCREEN_HEIGHT_PX, SCREEN_WIDTH_PX, _check_readable, _check_size

ROOT = Path(__file__).resolve().parents[2]
README_FIGURE = ROOT / "assets" / "readme_heatmap.png"  # drawn by tests/refresh_notebooks.py for the README
CJK_16 = ["LLM", "with", "me", ".", "郭", "同", "学", "热", "爱", "AI", "喜", "欢", "游", "戏", "attention", "注意力"]
SEED_002 = "LLM with me.郭同学热爱AI喜欢游戏"


def _check_tick_labels_apart(fig, canvas) -> None:
    """On every heatmap, neighbouring token labels do not overlap (long lists are labelled every k-th token)."""
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        if not ax.images:
            continue
        for labels, lo, hi in [(ax.get_yticklabels(), "y0", "y1"), (ax.get_xticklabels(), "x0", "x1")]:
            boxes = sorted((getattr(b, lo), getattr(b, hi)) for b in
                           (t.get_window_extent(renderer) for t in labels if t.get_text().strip()))
            for (_, end), (start, _) in zip(boxes, boxes[1:]):
                assert start >= end - 1.0, f"token labels overlap on {ax.get_title()!r}"
    titles = [(ax.get_title(), ax.title.get_window_extent(renderer)) for ax in fig.axes if ax.get_title()]
    for i, (name, box) in enumerate(titles):  # long panel titles do not run into their neighbours
        for other, other_box in titles[i + 1:]:
            assert not box.overlaps(other_box), f"panel titles overlap: {name!r} and {other!r}"


def _figures():
    """The largest figures the chapters draw with the library, by name."""
    torch.manual_seed(0)
    weights16 = mha_lib.masked_softmax(torch.randn(12, 16, 16), mha_lib.causal_mask(16))  # (H, T, T)
    s = attention_stages(SEED_002, d_model=768, num_heads=12)
    six = mha_lib.masked_softmax(torch.randn(12, 6, 6))
    tokens = mha_lib.JOURNEY_TOKENS
    return {
        "12 heads x 16 tokens, CJK": lambda: mha_lib.plot_heads(weights16, CJK_16, title="12 heads × 16 tokens"),
        "12 heads of scores, CJK": lambda: mha_lib.plot_heads(s.masked, s.tokens, title="masked scores"),
        "ch06 grid, long titles": lambda: mha_lib.plot_heads(
            six, tokens, head_titles=[f"τ={t:g} · head {h} · H={0.5:.2f}" for t in (0.1, 1, 10) for h in range(4)],
            vmin=0.0, vmax=1.0, title="Temperature 0.1 (top), 1 (middle), 10 (bottom): same scores, four heads"),
        "ch03 two-line titles": lambda: mha_lib.plot_heads(
            six[:6], tokens, ncols=3, head_titles=[f"straight view: 'head {h}'\nrows = Your ×3, journey ×3"
                                                   for h in range(6)], title="Same weights, two splits"),
        "long head titles, wrapped": lambda: mha_lib.plot_heads(
            six[:4], tokens, head_titles=["a very long head title that would run into the next panel"] * 4),
        "ch04 8 panels": lambda: mha_lib.plot_heads(six[:8], tokens, ncols=4, panel_size=2.5,
                                                    title="unscaled / scaled"),
        "stage grid, 4 heads": lambda: plotting.plot_stages(
            {"raw scores": s.scores, "scaled": s.scaled, "masked": s.masked, "weights": s.weights}, s.tokens,
            title="The four stages, heads 0–3"),
        "ch08 stage grid (the chapter's call)": lambda: plotting.plot_stages(
            {"raw scores": s.scores, "scaled": s.scaled, "masked": s.masked, "weights": s.weights}, s.tokens,
            heads=[0, 1], limits={"weights": (0.0, 0.4)}),
        "explorer figure, 12 heads": lambda: explorer_figure(SEED_002, d_model=768, num_heads=12, stage="masked"),
        "explorer figure, 16 heads": lambda: explorer_figure(SEED_002, d_model=64, num_heads=16, stage="weights"),
    }


@pytest.mark.parametrize("name", list(_figures()))
def test_library_figures_are_readable_on_a_projector(name):
    fig = _figures()[name]()
    assert isinstance(fig, Figure) and fig.dpi == plotting.DPI
    assert re.fullmatch(r"Figure\(\d+x\d+\)", str(fig))  # whole pixels: the notebooks' sanitizer matches its repr
    _check_size(fig)
    canvas = _check_readable(fig)
    _check_tick_labels_apart(fig, canvas)


@pytest.mark.parametrize("name", ["12 heads of scores, CJK", "stage grid, 4 heads", "ch08 stage grid (the chapter's call)",
                                  "explorer figure, 12 heads"])
def test_one_map_per_quantity_scores_centred_on_zero_masked_grey(name):
    fig = _figures()[name]()
    images = [ax.images[0] for ax in fig.axes if ax.images]
    for image in images:
        name_of_map = image.cmap.name.removesuffix("_r").lower()
        assert name_of_map in {"viridis", "rdbu"}, image.cmap.name  # weights or scores, nothing else
        if name_of_map == "rdbu":
            assert image.norm.vmin == pytest.approx(-image.norm.vmax)  # centred on 0
        assert tuple(round(c * 255) for c in image.cmap.get_bad()[:3]) == plotting.MASKED_RGB
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgb = np.asarray(canvas.buffer_rgba())[..., :3]
    masked = [(ax, image) for ax in fig.axes for image in ax.images if np.ma.getmaskarray(image.get_array()).any()]
    assert masked, "no masked entry drawn"
    for ax, image in masked:
        t, s = np.argwhere(np.ma.getmaskarray(image.get_array()))[0]
        x, y = ax.transData.transform((s, t))
        assert tuple(rgb[rgb.shape[0] - int(round(y)), int(round(x))]) == plotting.MASKED_RGB


def test_every_token_is_labelled_when_there_is_room():
    fig = mha_lib.plot_heads(torch.softmax(torch.randn(12, 16, 16), -1), CJK_16)
    panels = [a for a in fig.axes if a.images]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == CJK_16  # 12 × 16 fits without thinning
    assert [t.get_text() for t in panels[-1].get_xticklabels()] == CJK_16
    single = [t for t in panels[-1].get_xticklabels() if len(t.get_text()) == 1]
    assert single and all(t.get_rotation() == 0 for t in single)  # one CJK character stands upright


def test_the_measure_can_fail():
    """The checks above do catch what they look for: a 6 pt label, a figure taller than a screen."""
    fig = Figure(figsize=(4, 3), dpi=100)
    fig.add_subplot().set_title("tiny", fontsize=6)
    with pytest.raises(AssertionError, match="smaller than 10"):
        _check_readable(fig)
    with pytest.raises(AssertionError, match="taller|1000"):
        _check_size(Figure(figsize=(4, 10), dpi=100))
    fig = Figure(figsize=(4, 3), dpi=100)
    fig.text(0.9, 0.5, "a label that runs off the edge", fontsize=10)
    with pytest.raises(AssertionError, match="cut off"):
        _check_readable(fig)


# --- the explorer's picture -----------------------------------------------------------------------------------


def _ink_height(mask: np.ndarray) -> int:
    rows = np.flatnonzero(mask.max(axis=1) > render.GREYS // 3)
    return int(rows[-1] - rows[0] + 1) if rows.size else 0


def test_explorer_text_is_at_least_10_px():
    assert render.LABEL_PX >= MIN_PX and render.TITLE_PX >= MIN_PX
    # the glyphs are drawn at that size: a CJK character is about one em tall, a capital about 0.7 em
    assert _ink_height(render.text_mask("郭")) >= 0.8 * render.LABEL_PX
    assert _ink_height(render.text_mask("H")) >= 0.65 * render.LABEL_PX


@pytest.mark.parametrize("sentence,heads", [(SEED_002, 12), (" ".join(CJK_16), 12), (" ".join(CJK_16), 16)])
def test_explorer_pictures_fit_a_screen(sentence, heads):
    from PIL import Image

    s = attention_stages(sentence, d_model=768 if heads == 12 else 64, num_heads=heads)
    for stage in ("masked", "weights"):
        width, height = Image.open(io.BytesIO(render_png(s, stage))).size
        assert height <= SCREEN_HEIGHT_PX and width <= SCREEN_WIDTH_PX, (stage, width, height)


# --- the diagrams ---------------------------------------------------------------------------------------------


def _draw_scripts() -> list[Path]:
    return sorted(p for p in (ROOT / "assets" / "draw").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", _draw_scripts(), ids=lambda p: p.stem)
def test_diagrams_are_readable_at_their_natural_size(script, monkeypatch, capsys):
    """Each script's figures, caught at ``savefig`` (nothing is written): texts ≥ 10 px at the saved dpi,
    inside the picture, and the picture no taller than a screen."""
    saved = []

    def catch(fig, fname, *args, dpi=None, **kwargs):
        saved.append((fig, Path(str(fname)).name, dpi if isinstance(dpi, (int, float)) else fig.dpi))

    monkeypatch.setattr(Figure, "savefig", catch)
    monkeypatch.syspath_prepend(str(script.parent))
    runpy.run_path(str(script), run_name="__main__")
    capsys.readouterr()
    assert saved, f"{script.name} saved no figure"
    for fig, name, dpi in saved:
        fig.set_dpi(dpi)  # measure at the resolution it is saved with
        width, height = fig.get_size_inches() * dpi
        assert height <= SCREEN_HEIGHT_PX + 0.5, f"{name} is {height:.0f} px tall"
        _check_readable(fig, dpi)


def _stored_pngs():
    """Every PNG stored in the notebooks (outputs and attachments) and in assets/, as (where, bytes)."""
    import nbformat

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks" / "zh-CN").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        where = path.relative_to(ROOT / "notebooks").as_posix()
        for i, cell in enumerate(nb.cells):
            for name, attachment in (cell.get("attachments") or {}).items():
                if "image/png" in attachment:
                    yield f"{where} cell {i} attachment {name}", base64.b64decode(attachment["image/png"])
            for output in cell.get("outputs", []):
                if "image/png" in output.get("data", {}):
                    yield f"{where} cell {i} output", base64.b64decode(output["data"]["image/png"])
    for path in sorted((ROOT / "assets").glob("*.png")) + sorted((ROOT / "assets" / "zh-CN").glob("*.png")):
        if path != README_FIGURE:  # on GitHub's page, not in a notebook panel
            yield path.relative_to(ROOT).as_posix(), path.read_bytes()


def test_no_stored_picture_is_taller_than_a_screen():
    from PIL import Image

    sizes = {where: Image.open(io.BytesIO(data)).size for where, data in _stored_pngs()}
    assert len(sizes) > 20  # the notebooks do hold their figures
    tall = {where: size for where, size in sizes.items() if size[1] > SCREEN_HEIGHT_PX}
    assert not tall, f"taller than {SCREEN_HEIGHT_PX} px: {tall}"


def test_no_stored_picture_is_wider_than_the_notebook_panel():
    """JupyterLab at 1,440 × 900 with its file browser open gives a notebook about 1,000 px: a wider picture is
    scaled down, and its 10-px labels with it (tests/notebooks/test_browser.py measures the panel)."""
    from PIL import Image

    sizes = {where: Image.open(io.BytesIO(data)).size for where, data in _stored_pngs()}
    wide = {where: size for where, size in sizes.items() if size[0] > SCREEN_WIDTH_PX}
    assert not wide, f"wider than {SCREEN_WIDTH_PX} px: {wide}"

