"""Draw a grid of heatmaps straight into PNG bytes: the engine behind the explorers' instant redraws.

Why not matplotlib? Re-creating a 3 × 4 grid of labelled heatmaps and rendering it takes about a second on a
laptop CPU, and even updating the images in place (``set_data``) about a third of a second: most of it is
layout and text. A slider that lags that much stops being a toy. This module splits the picture in two:

* the **frame** — head titles, token labels, colour-bar label: it depends only on the number of heads, the
  tokens and the stage, so it is drawn once (text with pillow, glyph by glyph from DejaVu Sans or, for CJK
  characters, Noto Sans SC/TC/KR, see ``fonts.py``) and cached;
* the **cells** — on every redraw numpy turns the values into colour levels, enlarges each entry to a square
  of pixels (``np.repeat``) and pastes the squares into a copy of the frame; the colour bar's tick labels are
  small cached text pieces.

The picture is a *palette* image: one byte per pixel, an index into a table of at most 256 colours —
``LEVELS`` levels of the colour map, ``GREYS`` shades of grey for anti-aliased text, and a few fixed colours.
That is a third of the bytes of RGB for every step (copy, enlarge, compress). ``encode_png`` writes the PNG
by hand (signature, IHDR, PLTE, IDAT compressed with zlib level 1, IEND): a redraw of 12 heads × 16 tokens
costs a few milliseconds of CPU. The text never goes through matplotlib's text engine, so there are no
"Glyph missing" warnings either.
"""

from __future__ import annotations

import functools
import math
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from .fonts import SYSTEM_CJK_FAMILIES, bundled_font_paths
from ..language import N_, gettext as _, get_language
from .plotting import MASKED_RGB, MASKED_STRIPE_RGB, NAN_RGB

# The palette: colour-map levels first, then greys from white to black, then fixed colours
LEVELS = 192
GREYS = 48
WHITE = LEVELS  # the first grey
FRAME, MASKED, STRIPE, TICK, NAN_BACK, NAN_STRIPE = range(LEVELS + GREYS, LEVELS + GREYS + 6)
NAN_BACK_RGB = (255, 236, 236)
# frame, masked (−∞: light grey, darker stripes), tick, NaN (pale red, red cross-hatching): the colours of plotting.py
FIXED_RGB = ((90, 90, 90), MASKED_RGB, MASKED_STRIPE_RGB, (60, 60, 60), NAN_BACK_RGB, NAN_RGB)
# the legends' msgids: layout() shows them in the current language
MASKED_LEGEND = N_("masked (\u2212\u221e)")
MASKED_WEIGHT_LEGEND = N_("masked (weight 0)")
NAN_LEGEND = N_("NaN (overflow)")

LABEL_PX = 11  # font sizes in pixels: at least 10 px on a projector, CJK included
TITLE_PX = 12
PANEL_PX = 188  # (the 16-token explorer stays within 1,000 px) a heatmap is about this many pixels wide and high, whatever the number of tokens
MAX_COLUMNS = 4
MAX_HEIGHT_PX = 900  # the whole picture fits a 1080-line screen: with many heads the entries get smaller
GAP = 12  # between panels
MARGIN = 8
BAR_WIDTH = 14


# --- text -----------------------------------------------------------------------------------------------------


@functools.cache
def font_files() -> tuple[Path, ...]:
    """DejaVu Sans (matplotlib's own font) first, then CJK fonts for the glyphs it lacks."""
    import matplotlib
    from matplotlib import font_manager

    files = [Path(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf")]
    cjk = bundled_font_paths()
    if not cjk:  # no font package: a CJK font installed on the system, if any
        installed = {font.name: font.fname for font in font_manager.fontManager.ttflist}
        cjk = [Path(installed[name]) for name in SYSTEM_CJK_FAMILIES if name in installed][:1]
    return tuple(files + list(cjk))


@functools.cache
def _fonts(size: int):
    """``(pillow font, set of code points it covers)`` for every font file, at ``size`` pixels."""
    from matplotlib.ft2font import FT2Font
    from PIL import ImageFont

    return tuple(
        (ImageFont.truetype(str(path), size), frozenset(FT2Font(str(path)).get_charmap())) for path in font_files()
    )


def _runs(text: str, fonts) -> list[tuple[str, object]]:
    """Cut ``text`` into runs of characters drawn with the same font (the first font that has the glyph)."""
    runs: list[tuple[str, object]] = []
    for char in text:
        font = next((f for f, covered in fonts if ord(char) in covered), fonts[0][0])
        if char.isspace():
            font = runs[-1][1] if runs else fonts[0][0]
        if runs and runs[-1][1] is font:
            runs[-1] = (runs[-1][0] + char, font)
        else:
            runs.append((char, font))
    return runs


@functools.lru_cache(maxsize=4096)
def text_mask(text: str, size: int = LABEL_PX, rotate: bool = False) -> np.ndarray:
    """Coverage of ``text`` written at ``size`` px, as grey-shade offsets ``0..GREYS-1`` (``uint8``).

    ``rotate`` turns the text to read upwards.
    """
    from PIL import Image, ImageDraw

    fonts = _fonts(size)
    runs = _runs(text, fonts)
    ascent = max(font.getmetrics()[0] for font, _ in fonts)
    descent = max(font.getmetrics()[1] for font, _ in fonts)
    width = max(1, math.ceil(sum(font.getlength(run) for run, font in runs)))
    image = Image.new("L", (width, ascent + descent), 0)
    draw = ImageDraw.Draw(image)
    x = 0.0
    for run, font in runs:
        draw.text((x, ascent), run, fill=255, font=font, anchor="ls")  # all runs on one baseline
        x += font.getlength(run)
    shades = (np.asarray(image, np.uint16) * (GREYS - 1) + 127) // 255  # 0-255 coverage -> 0..GREYS-1
    shades = shades.astype(np.uint8)
    return np.ascontiguousarray(np.rot90(shades)) if rotate else shades


def paste_text(canvas: np.ndarray, mask: np.ndarray, top: int, left: int) -> None:
    """Write a text mask into the palette image ``canvas`` at (top, left), over white, clipped to the canvas."""
    h, w = mask.shape
    top0, left0 = max(top, 0), max(left, 0)
    bottom, right = min(top + h, canvas.shape[0]), min(left + w, canvas.shape[1])
    if bottom <= top0 or right <= left0:
        return
    region = canvas[top0:bottom, left0:right]
    shade = mask[top0 - top:bottom - top, left0 - left:right - left] + np.uint8(WHITE)
    np.maximum(region, shade, out=region, where=region >= WHITE)  # darker shade wins; never over colour cells


# --- colours --------------------------------------------------------------------------------------------------


@functools.cache
def palette(cmap: str) -> bytes:
    """The PNG palette for a matplotlib colour map: ``LEVELS`` colours, ``GREYS`` greys, the fixed colours."""
    import matplotlib

    levels = matplotlib.colormaps[cmap](np.linspace(0.0, 1.0, LEVELS))[:, :3] * 255
    greys = np.linspace(255, 0, GREYS)[:, None].repeat(3, axis=1)
    table = np.concatenate([levels, greys, np.array(FIXED_RGB, float)])
    return table.round().astype(np.uint8).tobytes()


def palette_rgb(cmap: str) -> np.ndarray:
    """The palette as an ``(n, 3)`` array (for tests and for turning a picture into RGB)."""
    return np.frombuffer(palette(cmap), np.uint8).reshape(-1, 3)


def colour_levels(values: np.ndarray, vmin: float, vmax: float) -> np.ndarray:
    """Values -> colour-map levels ``0..LEVELS-1`` (``uint8``); ``-inf`` -> 0 (the caller paints it apart)."""
    span = vmax - vmin if vmax > vmin else 1.0
    scaled = np.nan_to_num((values - vmin) * ((LEVELS - 1) / span), nan=0.0, posinf=LEVELS - 1.0, neginf=0.0)
    return np.clip(np.rint(scaled), 0, LEVELS - 1).astype(np.uint8)


def nice_ticks(vmin: float, vmax: float, count: int = 6) -> list[float]:
    """Round numbers between ``vmin`` and ``vmax`` (steps of 1, 2 or 5 × 10^k), at most about ``count``."""
    if not vmax > vmin:
        return [vmin]
    raw = (vmax - vmin) / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * 0.999)
    first = math.ceil(vmin / step - 1e-9)
    ticks = [round((first + i) * step, 12) for i in range(int((vmax - vmin) / step + 1e-9) + 2)]
    return [t for t in ticks if vmin - 1e-9 * step <= t <= vmax + 1e-9 * step]


def tick_text(value: float, ticks: Sequence[float]) -> str:
    """``value`` with as many decimals as the tick step needs, and a real minus sign."""
    step = min((b - a for a, b in zip(ticks, ticks[1:])), default=1.0)
    decimals = next((d for d in range(7) if abs(step * 10**d - round(step * 10**d)) < 1e-6), 6)
    text = f"{value:.{decimals}f}"
    return text.replace("-", "\u2212") if value < 0 else text


# --- layout ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where everything goes for ``H`` heads of ``(T, S)`` matrices. All numbers are pixels."""

    heads: int
    rows: int
    cols: int
    cell: int  # side of one matrix entry
    origins: tuple[tuple[int, int], ...]  # (top, left) of each head's matrix
    bar: tuple[int, int, int, int]  # colour bar (top, left, height, width)
    size: tuple[int, int]  # (height, width) of the whole picture
    frame: np.ndarray  # the background with every static part drawn, as PNG rows (see ``png_rows``)


def cell_size(length: int) -> int:
    """Pixels per matrix entry: a panel is about ``PANEL_PX`` wide, entries between 3 and 28 pixels."""
    return max(3, min(28, PANEL_PX // max(length, 1)))


def grid_shape(heads: int) -> tuple[int, int]:
    """``(rows, cols)``: at most 4 panels a row, and 3 a row when that fills every row (3 or 6 heads)."""
    cols = 3 if heads % 3 == 0 and heads % 4 != 0 and heads <= 9 else min(heads, MAX_COLUMNS)
    return math.ceil(heads / cols), cols


def _every(cell: int) -> int:
    """Write every k-th label when the entries are smaller than the text (long sequences)."""
    return max(1, math.ceil(LABEL_PX / cell))


def png_rows(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A PNG scanline buffer ``(height, 1 + width)`` and its pixel view ``(height, width)``.

    Each PNG row starts with a filter-type byte (0 = none) followed by the pixels' palette indices; drawing
    into the view fills the buffer that ``encode_png`` compresses, with no copy in between.
    """
    rows = np.zeros((height, 1 + width), np.uint8)
    return rows, rows[:, 1:]


def layout(
    heads: int,
    query_labels: tuple[str, ...],
    key_labels: tuple[str, ...],
    colorbar_label: str,
    legend: str | tuple[str, ...] | None = None,
) -> Layout:
    """The frame of ``render`` in the current language (``_layout``, cached per language)."""
    legend = (legend,) if isinstance(legend, str) else tuple(legend or ())
    return _layout(heads, query_labels, key_labels, colorbar_label, legend, get_language())


@functools.lru_cache(maxsize=64)
def _layout(
    heads: int,
    query_labels: tuple[str, ...],
    key_labels: tuple[str, ...],
    colorbar_label: str,
    legend: tuple[str, ...],
    language: str,  # noqa: ARG001 - part of the cache key: the frame's words depend on it
) -> Layout:
    """Compute the positions and draw the static frame (cached: the same view is laid out only once).

    The panels share their axes: query labels left of each row of panels, key labels under the lowest
    panel of each column. ``legend``: the swatches under the colour bar, ``MASKED_LEGEND`` and/or
    ``NAN_LEGEND`` (a single str is one of them). With many heads the entries shrink so that the picture
    stays within ``MAX_HEIGHT_PX``.
    """
    T, S = len(query_labels), len(key_labels)
    cell = min(cell_size(T), cell_size(S))
    rows, cols = grid_shape(heads)
    title_h = text_mask(_("head {h}").format(h=0), TITLE_PX).shape[0] + 3
    # the height left for the matrices once titles, gaps and (at most) 64 px of key labels are counted;
    # 16 heads of 64 tokens need entries of 2 px (labels every 6th token) to fit
    room = MAX_HEIGHT_PX - 2 * MARGIN - 64 - rows * (title_h + GAP)
    cell = max(2, min(cell, room // (rows * T)))
    step = _every(cell)
    ymasks = [text_mask(label) for label in query_labels]
    # key labels read upwards when one of them is wider than its column; single characters stay upright
    turn = any(text_mask(label).shape[1] > cell - 1 for label in key_labels)
    xmasks = [text_mask(label, LABEL_PX, turn and len(label) > 1) for label in key_labels]
    ylab_w = max(m.shape[1] for m in ymasks[::step]) + 6
    xlab_h = max(m.shape[0] for m in xmasks[::step]) + 6
    panel_w, panel_h = S * cell, T * cell
    grid_right = MARGIN + ylab_w + cols * panel_w + (cols - 1) * GAP
    origins = tuple(
        (MARGIN + title_h + (h // cols) * (title_h + panel_h + GAP), MARGIN + ylab_w + (h % cols) * (panel_w + GAP))
        for h in range(heads)
    )
    bar_h = max(panel_h, 120)  # the colour bar: right of the first row, as tall as a matrix (at least 120 px)
    bar = (origins[0][0], grid_right + GAP, bar_h, BAR_WIDTH)
    tick_w = text_mask("\u22120.00").shape[1] + 14  # room for the tick labels
    label_mask = text_mask(colorbar_label, LABEL_PX, rotate=True)
    legend_masks = [text_mask(_(text)) for text in legend]
    width = bar[1] + BAR_WIDTH + tick_w + label_mask.shape[1] + MARGIN
    for mask in legend_masks:
        width = max(width, bar[1] + BAR_WIDTH + 6 + mask.shape[1] + MARGIN)
    height = max(origins[-1][0] + panel_h + xlab_h, bar[0] + bar_h + 8 + 22 * len(legend)) + MARGIN

    buffer, frame = png_rows(height, width)
    frame[...] = WHITE
    lowest = {h % cols: h for h in range(heads)}  # column -> its lowest panel
    for h, (top, left) in enumerate(origins):
        title = text_mask(_("head {h}").format(h=h), TITLE_PX)
        paste_text(frame, title, top - title_h, left + (panel_w - title.shape[1]) // 2)
        if h % cols == 0:  # query labels, right-aligned, centred on their row
            for t in range(0, T, step):
                m = ymasks[t]
                paste_text(frame, m, top + t * cell + (cell - m.shape[0]) // 2, left - 5 - m.shape[1])
        if lowest[h % cols] == h:  # key labels below the matrix, centred on their column
            for s in range(0, S, step):
                m = xmasks[s]
                paste_text(frame, m, top + panel_h + 4, left + s * cell + (cell - m.shape[1]) // 2)
        _box(frame, top, left, panel_h, panel_w)
    _box(frame, bar[0], bar[1], bar_h, BAR_WIDTH)
    bar_levels = np.linspace(LEVELS - 1, 0, bar_h).round().astype(np.uint8)  # top = vmax
    frame[bar[0]:bar[0] + bar_h, bar[1]:bar[1] + BAR_WIDTH] = bar_levels[:, None]
    paste_text(frame, label_mask, bar[0] + (bar_h - label_mask.shape[0]) // 2, width - MARGIN - label_mask.shape[1])
    for i, (text, mask) in enumerate(zip(legend, legend_masks)):  # a swatch and its meaning, under the bar
        top = bar[0] + bar_h + 14 + 22 * i
        swatch = _swatch(14, BAR_WIDTH, nan=text == NAN_LEGEND)
        frame[top:top + 14, bar[1]:bar[1] + BAR_WIDTH] = swatch
        paste_text(frame, mask, top + (14 - mask.shape[0]) // 2, bar[1] + BAR_WIDTH + 6)
    buffer.setflags(write=False)
    return Layout(heads, rows, cols, cell, origins, bar, (height, width), buffer)


def _box(canvas: np.ndarray, top: int, left: int, height: int, width: int) -> None:
    """A one-pixel frame just outside the rectangle."""
    canvas[top - 1, left - 1:left + width + 1] = FRAME
    canvas[top + height, left - 1:left + width + 1] = FRAME
    canvas[top:top + height, left - 1] = FRAME
    canvas[top:top + height, left + width] = FRAME


@functools.lru_cache(maxsize=32)
def _stripes(height: int, width: int) -> np.ndarray:
    """Where the diagonal stripes of masked entries go, ``(height, width)`` bool."""
    i, j = np.indices((height, width))
    return (i + j) % 4 == 0


@functools.lru_cache(maxsize=32)
def _cross(height: int, width: int) -> np.ndarray:
    """Where the cross-hatching of NaN entries goes, ``(height, width)`` bool."""
    i, j = np.indices((height, width))
    return ((i + j) % 4 == 0) | ((i - j) % 4 == 0)


def _swatch(height: int, width: int, *, nan: bool) -> np.ndarray:
    """The pattern of masked (grey, striped) or NaN (pale red, red cross-hatched) entries, as palette indices."""
    if nan:
        return np.where(_cross(height, width), NAN_STRIPE, NAN_BACK).astype(np.uint8)
    return np.where(_stripes(height, width), STRIPE, MASKED).astype(np.uint8)


# --- drawing --------------------------------------------------------------------------------------------------


class Picture(NamedTuple):
    """A drawn picture: PNG scanlines (``rows``), their palette-index view (``pixels``) and the colour map."""

    rows: np.ndarray
    pixels: np.ndarray
    cmap: str

    def rgb(self) -> np.ndarray:
        """The picture as an ``(height, width, 3)`` RGB array."""
        return palette_rgb(self.cmap)[self.pixels]


def render(
    values: np.ndarray,
    query_labels: Sequence[str],
    key_labels: Sequence[str],
    *,
    cmap: str,
    vmin: float,
    vmax: float,
    colorbar_label: str,
    blocked: np.ndarray | None = None,
) -> Picture:
    """Draw ``values`` ``(H, T, S)`` as one heatmap per head.

    ``-inf`` entries, and those where ``blocked`` (a bool array that broadcasts to ``values``: the weights a
    mask blocked) is True, are shown as masked (grey, striped); NaN entries as NaN (pale red, cross-hatched in
    red: never as a colour of the map), each with a legend under the colour bar.
    """
    H, T, S = values.shape
    masked, nans = np.isneginf(values), np.isnan(values)
    any_masked, any_nan = bool(masked.any()), bool(nans.any())
    legend = (MASKED_LEGEND,) * any_masked
    if blocked is not None and blocked.any():
        masked, any_masked = masked | blocked, True
        legend = legend or (MASKED_WEIGHT_LEGEND,)
    legend += (NAN_LEGEND,) * any_nan
    lay = layout(H, tuple(query_labels), tuple(key_labels), colorbar_label, legend)
    c = lay.cell
    rows = lay.frame.copy()
    canvas = rows[:, 1:]

    levels = colour_levels(values, vmin, vmax)  # (H, T, S)
    if any_masked:
        levels[masked] = MASKED
    if any_nan:
        levels[nans] = NAN_BACK
    pixels = levels.repeat(c, axis=1).repeat(c, axis=2)  # each entry -> c × c pixels: (H, T·c, S·c)
    if any_masked:  # stripes over the masked entries
        pixels[(pixels == MASKED) & _stripes(T * c, S * c)] = STRIPE
    if any_nan:  # cross-hatching over the NaN entries
        pixels[(pixels == NAN_BACK) & _cross(T * c, S * c)] = NAN_STRIPE
    for h, (top, left) in enumerate(lay.origins):
        canvas[top:top + T * c, left:left + S * c] = pixels[h]

    _draw_ticks(canvas, lay, vmin, vmax)
    return Picture(rows, canvas, cmap)


def _draw_ticks(canvas: np.ndarray, lay: Layout, vmin: float, vmax: float) -> None:
    """Tick marks and numbers to the right of the colour bar."""
    top, left, height, width = lay.bar
    ticks = nice_ticks(vmin, vmax)
    span = vmax - vmin if vmax > vmin else 1.0
    for value in ticks:
        y = top + round((vmax - value) / span * (height - 1))
        canvas[y, left + width:left + width + 4] = TICK
        mask = text_mask(tick_text(value, ticks))
        paste_text(canvas, mask, y - mask.shape[0] // 2, left + width + 6)


def encode_png(picture: Picture, level: int = 1) -> bytes:
    """PNG bytes of a picture, written by hand: signature, IHDR (size, 8-bit palette), PLTE, IDAT, IEND.

    No row filter and zlib level 1: the large flat areas still compress well, and it takes a few ms.
    """
    height, width = picture.pixels.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)  # 8 bits, colour type 3 = palette
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"PLTE", palette(picture.cmap))
            + chunk(b"IDAT", zlib.compress(picture.rows.data, level)) + chunk(b"IEND", b""))
