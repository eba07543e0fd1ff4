"""Figures readable on a projector: the measures shared by the tests of every wing that draws
(tests/display/test_figures_readable.py, tests/induction/test_induction_plots.py)."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

MIN_PX = 10.0
SCREEN_HEIGHT_PX = 900
SCREEN_WIDTH_PX = 1000  # the notebook panel beside JupyterLab's file browser, 1,440 × 900


def _texts(fig) -> list[Text]:
    """The texts that are drawn: visible, not empty, and not the labels of ticks outside the axis's range
    (matplotlib keeps those as artists but never draws them)."""
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            slack = 1e-9 * max(abs(lo), abs(hi), 1.0)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - slack <= tick.get_loc() <= hi + slack:
                    hidden.update({id(tick.label1), id(tick.label2)})
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in hidden]


def _check_readable(fig, dpi: float | None = None) -> FigureCanvasAgg:
    """Every text ≥ 10 px at ``dpi`` (default: the figure's), inside the figure; returns the drawn canvas."""
    dpi = dpi or fig.dpi
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    small = sorted({(round(t.get_fontsize() * dpi / 72, 1), t.get_text()[:40]) for t in _texts(fig)
                    if t.get_fontsize() * dpi / 72 < MIN_PX})
    assert not small, f"text smaller than {MIN_PX} px: {small[:5]}"
    renderer = canvas.get_renderer()
    width, height = canvas.get_width_height()
    outside = [t.get_text()[:40] for t in _texts(fig)
               if not _inside(t.get_window_extent(renderer), width, height)]
    assert not outside, f"text cut off at the figure's edge: {outside[:5]}"
    return canvas


def _inside(box, width, height, slack=1.0) -> bool:
    return box.x0 >= -slack and box.y0 >= -slack and box.x1 <= width + slack and box.y1 <= height + slack


def _check_size(fig) -> None:
    width, height = fig.get_size_inches() * fig.dpi
    assert height <= SCREEN_HEIGHT_PX + 0.5 and width <= SCREEN_WIDTH_PX + 0.5, (width, height)
