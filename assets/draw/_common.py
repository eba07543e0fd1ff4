"""Shared by the chapters' diagram scripts (files starting with "_" are helpers, not diagrams)."""

from __future__ import annotations

from matplotlib.figure import Figure


def canvas(width: float, height: float, xlim: tuple[float, float], ylim: tuple[float, float]):
    """A blank figure with one axis-free drawing area in data units; y grows downwards, like matrix rows."""
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(*xlim)
    ax.set_ylim(ylim[1], ylim[0])  # y grows downwards, like the rows of a matrix
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax
