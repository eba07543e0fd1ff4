"""Chapter 11's live trainer: press a button, watch a tiny causal model form a previous-token head and
induction heads on the CPU (ipywidgets loaded lazily).

    from mha_lib.induction.trainer import training_widget
    training_widget()          # a cell's last value: "Train" button, "short run" box, progress, live curves

Nothing trains until the button is pressed. A press trains the run ``"two_layer"`` from scratch with the
settings of the shipped checkpoint (``induction.train_run``: same seed, one thread, about 25 s for 3,000 steps
on a quiet CPU), updates a progress bar (step, held-out loss, seconds) at every evaluation (every 50 steps) and
redraws the loss and score curves at most every ``redraw_seconds`` (and never spends more than a tenth of the
time drawing), next to the shipped run's curves in grey.
At the end it shows every head of the new model on one sequence next to the shipped model's, and the two runs'
scores per head, measured on the same held-out batch.

Before the first press the picture is the shipped run's curves, so a notebook opened without a kernel (or a
static copy, ``mha_lib.display.static_widgets``) shows what a press will reproduce.
"""

from __future__ import annotations

import functools
import html
import io
import numbers
import time

import torch

from . import model as induction
from ..language import gettext as _
from ..validation import check_positive_int

MAX_STEPS = 20_000  # ~2.5 minutes on one thread: more is not a live demonstration
#: the sequence whose heads the widget draws at the end (a typical one, as the task draws them)
EXAMPLE_TOKENS = (8, 18, 3, 11, 20, 25) * 2  # I S D L U Z I S D L U Z


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=fig.dpi, metadata={"Software": None})
    return buffer.getvalue()


def example_weights(model: induction.AttentionOnlyTransformer, tokens=EXAMPLE_TOKENS) -> torch.Tensor:
    """``(L, H, T, T)``: every head's weights on one sequence."""
    if not isinstance(model, induction.AttentionOnlyTransformer):
        raise TypeError(f"model must be an induction.AttentionOnlyTransformer, got {type(model).__name__}")
    batch = induction.sequence(list(tokens))
    with torch.no_grad():
        _, weights = model(batch.tokens, return_weights=True)  # L × (1, H, T, T)
    return torch.stack(weights)[:, 0]  # (L, 1, H, T, T) -> (L, H, T, T)


def status_html(step: int, total: int, loss: float, seconds: float, done: bool = False) -> str:
    """The line beside the progress bar."""
    text = (_("<b>done</b>: step {step} of {total} · held-out loss {loss:.3f} · {seconds:.1f} s") if done else
            _("<b>training</b>: step {step} of {total} · held-out loss {loss:.3f} · {seconds:.1f} s"))
    return text.format(step=step, total=total, loss=loss, seconds=seconds)


def training_widget(steps: int = induction.TRAIN_STEPS, short_steps: int = induction.SHORT_STEPS, *,
                    redraw_seconds: float = 1.5):
    """The trainer: a "Train" button, a "short run" box (``short_steps`` instead of ``steps``), a progress bar,
    live curves, and at the end the new run's heads and scores beside the shipped run's.

    Returns an ``ipywidgets`` box; ``.controls`` (by name), ``.progress``, ``.status``, ``.curves`` (an Image)
    and, after a run, ``.run`` (the trained ``induction.Run``), ``.scores`` (``{"your run", "shipped run"}``
    -> ``induction.evaluate`` results) and ``.redraw_count``. ``.train()`` does what a press does.
    """
    for name, value in (("steps", steps), ("short_steps", short_steps)):
        if check_positive_int(name, value) > MAX_STEPS:
            raise ValueError(f"{name} must be at most {MAX_STEPS} (a live run in class), got {value}")
    if not isinstance(redraw_seconds, numbers.Real) or isinstance(redraw_seconds, bool):
        raise TypeError(f"redraw_seconds must be a number of seconds, got {type(redraw_seconds).__name__} "
                        f"{redraw_seconds!r}")
    if not 0 <= redraw_seconds <= 60:  # NaN fails this too
        raise ValueError(f"redraw_seconds must be from 0 to 60 seconds, got {redraw_seconds!r}")
    return _widget_class()(steps, short_steps, float(redraw_seconds))


@functools.cache
def _widget_class():
    import ipywidgets as widgets

    from ..display import controls
    from .plots import heads_over_training_figure, score_bars_figure, training_progress_figure

    class TrainingWidget(widgets.VBox):
        def __init__(self, steps: int, short_steps: int, redraw_seconds: float):
            super().__init__()
            self.steps, self.short_steps, self.redraw_seconds = steps, short_steps, redraw_seconds
            self.shipped = induction.load_run("two_layer")
            self.run, self.scores, self.redraw_count = None, None, 0
            # the series' layout (display/controls.py): a label column, then the controls
            self.controls = {
                "train": widgets.Button(description=_("Train"), button_style="primary", icon="play",
                                        tooltip=_("train the 2-layer model from scratch on this CPU"),
                                        layout=widgets.Layout(margin=f"2px 0 2px {controls.LABEL_WIDTH}")),
                "short": controls.toggle(_("short run ({steps} steps)").format(steps=short_steps), False),
            }
            self.progress = widgets.IntProgress(value=0, min=0, max=steps, description=_("step"),
                                                style=dict(controls.STYLE),
                                                layout=widgets.Layout(width=controls.CONTROL_WIDTH))
            log = self.shipped.log
            self.status = widgets.HTML(_("press <b>Train</b> to train the 2-layer model ({steps} steps) on this "
                                         "CPU; below: the shipped run it will reproduce, {shipped} steps in "
                                         "{seconds:.1f} s on the machine that trained it (one thread)").format(
                steps=steps, shipped=log.steps[-1], seconds=log.seconds))
            self.curves = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
            self.curves.value = _png(training_progress_figure(
                log, label=_("shipped run"), total_steps=log.steps[-1],
                title=_("The shipped run: press Train to train it again on this CPU")))
            self.heads = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
            self.bars = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
            c = self.controls
            self.children = [widgets.VBox([c["train"], c["short"]]), widgets.HBox([self.progress, self.status]),
                             self.curves]
            self.add_class("mha-induction-trainer")
            c["train"].on_click(lambda button: self.train())

        def total_steps(self) -> int:
            return self.short_steps if self.controls["short"].value else self.steps

        def train(self) -> induction.Run:
            """Train from scratch (what a press of the button does) and show the result."""
            total = self.total_steps()
            button = self.controls["train"]
            button.disabled, button.description = True, _("Training…")
            self.progress.max, self.progress.value = total, 0
            self.children = self.children[:3]  # last run's heads and bars go until the new ones are ready
            start, next_redraw = time.perf_counter(), -float("inf")

            def callback(step, log):
                nonlocal next_redraw
                now = time.perf_counter()
                self.progress.value = step
                self.status.value = status_html(step, total, log.eval_loss[-1], now - start)
                if now >= next_redraw:
                    self.curves.value = _png(training_progress_figure(log, self.shipped.log, total_steps=total))
                    self.redraw_count += 1
                    done = time.perf_counter()
                    # at most every redraw_seconds, and drawing never takes more than a tenth of the time
                    next_redraw = done + max(self.redraw_seconds, 9 * (done - now))

            try:
                run = induction.train_run("two_layer", total, callback=callback)
                seconds = time.perf_counter() - start
                self.curves.value = _png(training_progress_figure(run.log, self.shipped.log, total_steps=total))
                self.redraw_count += 1
                held_out = induction.held_out_batch()
                self.scores = {"your run": induction.evaluate(run.model, held_out),
                               "shipped run": induction.evaluate(self.shipped.model, held_out)}
                self.run = run
                self.status.value = (status_html(total, total, run.log.eval_loss[-1], seconds, done=True)
                                     + self._summary())
                tokens = induction.token_labels(list(EXAMPLE_TOKENS))
                self.heads.value = _png(heads_over_training_figure(
                    {_("your run ({steps} steps)").format(steps=total): example_weights(run.model),
                     _("shipped ({steps} steps)").format(steps=induction.TRAIN_STEPS):
                         example_weights(self.shipped.model)},
                    tokens, title=_("Every head on one sequence: your run (top) and the shipped run (bottom)")))
                self.bars.value = _png(score_bars_figure(
                    {_("your run"): self.scores["your run"], _("shipped run"): self.scores["shipped run"]},
                    title=_("Scores per head on 512 held-out sequences (layers and heads from 0)")))
                self.children = [*self.children[:3], self.heads, self.bars]
            except Exception as error:  # say it in the widget: a callback's exception is otherwise lost
                self.status.value = ("<span style='color:#b00'>" + _("training stopped: {error}").format(
                    error=html.escape(repr(error))) + "</span>")
                raise
            finally:
                button.disabled, button.description = False, _("Train")
            return run

        def _summary(self) -> str:
            yours, shipped = self.scores["your run"], self.scores["shipped run"]
            line = []
            for label, result in ((_("your run"), yours), (_("shipped"), shipped)):
                previous, induction_scores = result["previous_token"], result["induction"]
                line.append(_("{label}: loss {loss:.3f}, accuracy {accuracy:.1%}, best previous-token head "
                              "{previous:.2f}, layer-1 induction {low:.2f}–{high:.2f}").format(
                    label=label, loss=result["loss"].item(), accuracy=result["accuracy"].item(),
                    previous=previous[0].max().item(), low=induction_scores[-1].min().item(),
                    high=induction_scores[-1].max().item()))
            return "<br>" + "<br>".join(line)

    return TrainingWidget


__all__ = ["EXAMPLE_TOKENS", "MAX_STEPS", "example_weights", "status_html",
           "training_widget"]
