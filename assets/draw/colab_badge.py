"""The "Open in Colab" badge at the top of every chapter, drawn here so that it travels inside the notebook.

    python assets/draw/colab_badge.py [--language zh-CN]

writes assets/colab_badge.png (in Chinese: assets/zh-CN/colab_badge.png, 在 Colab 中打开).

Colab's own badge is an image on colab.research.google.com: without a network (a classroom's JupyterLab, a
laptop on a train) the notebook shows a broken image and its alt text, and the browser console an error.
``tests/refresh_notebooks.py`` stores this picture in the badge cell as an attachment instead, so the badge shows
wherever the notebook is opened; the link around it still opens the chapter in Colab.
"""

from __future__ import annotations

from _common import run, save, texts
from matplotlib.figure import Figure
from matplotlib.patches import Arc, FancyBboxPatch

DPI = 100
HEIGHT_PX = 22
TEXTS = {"label": ("Open in Colab", "在 Colab 中打开")}
WIDTH_PX = {"en": 124, "zh-CN": 134}  # the label's width at 8.5 pt plus the logo and margins
BACKGROUND, TEXT = "#4d4d4d", "white"
LOGO = ("#f9ab00", "#e8710a")  # the two rings of Colab's logo


def main(language: str) -> None:
    tx = texts(TEXTS, language)
    width, height = WIDTH_PX[language], HEIGHT_PX
    fig = Figure(figsize=(width / DPI, height / DPI))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)  # one data unit = one pixel
    ax.axis("off")
    ax.add_patch(FancyBboxPatch((0.5, 0.5), width - 1, height - 1, boxstyle="round,pad=0,rounding_size=3",
                                facecolor=BACKGROUND, edgecolor="none"))
    # the logo: two interlocking rings, the left one open to the right, the right one open to the left
    ax.add_patch(Arc((9.5, height / 2), 10, 10, theta1=40, theta2=320, color=LOGO[0], linewidth=2.2))
    ax.add_patch(Arc((16.5, height / 2), 10, 10, theta1=220, theta2=500, color=LOGO[1], linewidth=2.2))
    ax.text(25, height / 2, tx.label, color=TEXT, fontsize=8.5, fontweight="bold", va="center_baseline", ha="left")
    save(fig, "colab_badge.png", language, DPI)


if __name__ == "__main__":
    run(main)
