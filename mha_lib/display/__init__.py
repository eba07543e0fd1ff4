"""Everything that draws or prints; used by every chapter. Imports the core, never the other way.

    printing.py        ``show``, ``format_value``, ``show_table``: the same text on a CPU and on a GPU
    plotting.py        ``plot_heads``, ``plot_stages``: heatmaps per head; the series' colour rules and sizes
    render.py          the explorers' engine: a grid of heatmaps straight into PNG bytes, redrawn in milliseconds
    widgets.py         the explorers (``attention_explorer``), ipywidgets loaded on first use
    controls.py        every explorer's sliders and menus, built to one layout rule (label column, track width)
    fonts.py           a CJK fallback font for token labels (a Regular cut of the bundled variable font)

One module per chapter's own figures and explorers, so that a widget cell runs on its own (imports, one call):
    single_head.py (1), stacking_heads.py (2), weight_splitting.py (3), scaling.py (4), causal_masking.py (5),
    softmax_figures.py (6), output_projection_figures.py (7), efficiency_figures.py (9); chapters 10–14 keep
    theirs beside their models: trained/, induction/, llm/ (sharing, rotary, scale)
    static_widgets.py  widget cells saved as a sentence + picture (a Jupyter pre-save hook; standard library only)

Nothing heavy is imported here: ``import mha_lib.display.static_widgets`` loads neither matplotlib nor ipywidgets.
In Chinese (``mha_lib.set_language("zh-CN")``) matplotlib falls back to a CJK font for every figure, the
notebook's own included, not only those drawn by ``plotting.py``.
"""

from ..language import on_language_change


def _cjk_fonts_for(code: str) -> None:
    if code != "en":
        from .fonts import use_cjk_fallback

        use_cjk_fallback()


on_language_change(_cjk_fonts_for)
