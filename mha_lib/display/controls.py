"""One look for every control of the series' explorers: the same label column, the same track, on a projector.

    from mha_lib.display.controls import int_slider, selection_slider, dropdown
    interact(figure, num_heads=int_slider(_("heads H"), 4, 1, 8))

Every slider of every chapter is built here, so the explorers agree with each other:

* the label column has one fixed width (``LABEL_WIDTH``), so stacked sliders start their tracks at the same x
  whatever their labels' lengths (with ``description_width="initial"`` each track started after its own label);
* a slider is ``CONTROL_WIDTH`` wide: after the label and the readout, a track of about 300 px, where values one
  step apart are far enough apart to hit with a mouse on a projected screen;
* a slider redraws on release (``continuous_update=False``): a drag would queue one redraw per step;
* a slider over a list of options runs in the list's order: smallest on the left, as a number line does
  (the number of key/value heads G grows to the right in every chapter).

Only widgets and options that exist in ipywidgets 7.7 (Google Colab) as well as 8. ipywidgets is imported on
first use: importing this module is free.
"""

from __future__ import annotations

LABEL_WIDTH = "200px"  # the longest label of the series ("MLA: latent width r", "query position m") fits
CONTROL_WIDTH = "560px"  # label 200 + track ~300 + readout ~60
STYLE = {"description_width": LABEL_WIDTH}


def _layout(width: str = CONTROL_WIDTH):
    from ipywidgets import Layout

    return Layout(width=width)


def int_slider(description: str, value: int, low: int, high: int, step: int = 1):
    """An integer slider from ``low`` to ``high`` (both included), redrawn on release."""
    from ipywidgets import IntSlider

    return IntSlider(value=value, min=low, max=high, step=step, description=description, continuous_update=False,
                     style=dict(STYLE), layout=_layout())


def float_slider(description: str, value: float, low: float, high: float, step: float, *, readout_format=".2f"):
    """A float slider from ``low`` to ``high`` in steps of ``step``, redrawn on release."""
    from ipywidgets import FloatSlider

    return FloatSlider(value=value, min=low, max=high, step=step, description=description, continuous_update=False,
                       readout_format=readout_format, style=dict(STYLE), layout=_layout())


def log_slider(description: str, value: float, low_exponent: float, high_exponent: float, step: float = 0.05):
    """A slider over ``10 ** low_exponent … 10 ** high_exponent`` on a log scale (a temperature, a ratio)."""
    from ipywidgets import FloatLogSlider

    return FloatLogSlider(value=value, base=10, min=low_exponent, max=high_exponent, step=step,
                          description=description, continuous_update=False, style=dict(STYLE), layout=_layout())


def selection_slider(description: str, options, value):
    """A slider over a list of values, in ascending order (smallest on the left), redrawn on release."""
    from ipywidgets import SelectionSlider

    options = sorted(options)
    if value not in options:
        raise ValueError(f"value must be one of the options {options}, got {value!r}")
    return SelectionSlider(options=options, value=value, description=description, continuous_update=False,
                           style=dict(STYLE), layout=_layout())


def dropdown(description: str, options, value):
    """A menu with the same label column as the sliders."""
    from ipywidgets import Dropdown

    return Dropdown(options=options, value=value, description=description, style=dict(STYLE), layout=_layout())


def toggle_buttons(description: str, options, value, *, button_width: str):
    """A row of buttons, one per option, its label in the label column. The row is as wide as its buttons
    (``width="auto"``: at ipywidgets' default inline width of 300 px the buttons wrapped under the label), and a flex
    row (ipywidgets 8 stacked the label above the buttons); ``label_column_css`` right-aligns the label."""
    from ipywidgets import Layout, ToggleButtons

    buttons = ToggleButtons(options=options, value=value, description=description,
                            style={**STYLE, "button_width": button_width},
                            layout=Layout(width="auto", display="flex", flex_flow="row nowrap", align_items="center"))
    buttons.add_class(TOGGLE_CLASS)
    return buttons


TOGGLE_CLASS = "mha-toggle-buttons"


def label_column_css():
    """An empty, zero-height HTML widget whose style right-aligns the labels of ``toggle_buttons`` as the sliders'
    and menus' labels are (ipywidgets 8 left-aligns a ToggleButtons' label; 7.7 already right-aligns it). Place it
    once in the box that holds the buttons."""
    from ipywidgets import HTML, Layout

    return HTML(f"<style>.{TOGGLE_CLASS} > label {{ text-align: right; padding-right: 8px; box-sizing: border-box; }}"
                "</style>",
                layout=Layout(height="0px", margin="0px"))


def toggle(description: str, value: bool):
    """A checkbox indented by the label column, so its box lines up with the sliders' tracks."""
    from ipywidgets import Checkbox

    return Checkbox(value=bool(value), description=description, indent=True, style=dict(STYLE), layout=_layout())
