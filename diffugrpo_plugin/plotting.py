"""Training-run figures: PNG plots of a run's TensorBoard scalars (what verl's tracking logs).

:func:`plot_run` finds the run's event files, reads every scalar, decides which figures the
run's tags call for (:func:`figure_specs`, a pure function of the tag names) and draws each:

=========================  ===================================================================
``rewards.png``            the total (``critic/score/mean``, ``reward/total/mean``) and one panel
                           per reward component ``reward/<name>/mean``
``reward_none_fraction``   per component, the fraction of completions it did not apply to
``policy.png``             ``actor/kl_loss``, ``actor/pg_clipfrac``, ``actor/entropy``
``response_length.png``    ``response_length/mean`` with its min-max band
``validation.png``         every ``val-*`` metric (pass rates first)
``timing.png``             every ``timing_s/*`` in one panel
=========================  ===================================================================

A figure is written only when the run logged at least one of its metrics. Noisy series
(20 points or more) are drawn faintly with a trailing moving average on top. Matplotlib runs
on its Agg canvas without pyplot, so no display and no global figure state are involved.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

EVENT_FILE_GLOB = "events.out.tfevents.*"
TOTAL_REWARD_TAGS = ("critic/score/mean", "reward/total/mean")
POLICY_TAGS = (("actor/kl_loss", "KL loss (k3, to the reference)"), ("actor/pg_clipfrac", "clip fraction"),
               ("actor/entropy", "entropy"))
LENGTH_TAGS = ("response_length/mean", "response_length/min", "response_length/max")
SMOOTH_FROM_POINTS = 20
PANEL_COLUMNS = 3
_COMPONENT_TAG = re.compile(r"^reward/(?P<name>.+)/(?P<stat>mean|none_fraction)$")


class PlotError(ValueError):
    """The run directory cannot be plotted; the message says what was looked for and where."""


@dataclass(frozen=True)
class Series:
    """One scalar over training steps, in step order."""

    steps: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Panel:
    """One axes: lines (tag, legend label), an optional (low, high) band, and for rates a fixed
    0-1 range (when the values keep to it) so that their level reads at a glance."""

    title: str
    ylabel: str
    lines: tuple[tuple[str, str], ...]
    band: tuple[str, str] | None = None
    unit_range: bool = False


@dataclass(frozen=True)
class FigureSpec:
    name: str  # file stem
    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- reading


def find_event_dir(run_dir: str | os.PathLike) -> Path:
    """The one directory under ``run_dir`` (itself included) that holds event files.

    ``run_dir`` may be verl's ``TENSORBOARD_DIR`` or any parent of it; a parent holding several
    runs is an error listing them.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise PlotError(f"run directory {run_dir} does not exist")
    found = sorted({path.parent for path in run_dir.rglob(EVENT_FILE_GLOB) if path.is_file()})
    if not found:
        raise PlotError(f"no TensorBoard event files ({EVENT_FILE_GLOB}) under {run_dir}. Point RUN_DIR at the "
                        f"run's TENSORBOARD_DIR (verl's default: tensorboard_log/<project>/<experiment>) and make "
                        f"sure trainer.logger includes 'tensorboard'.")
    if len(found) > 1:
        listed = "\n  ".join(str(path) for path in found)
        raise PlotError(f"{run_dir} holds event files of {len(found)} runs; plot one of them:\n  {listed}")
    return found[0]


def read_scalars(event_dir: str | os.PathLike) -> dict[str, Series]:
    """Every scalar tag of the event files in ``event_dir`` (a resumed run's files are merged
    by TensorBoard, later writes winning)."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    accumulator = EventAccumulator(str(event_dir), size_guidance={SCALARS: 0})  # 0: keep every point
    accumulator.Reload()
    scalars = {}
    for tag in accumulator.Tags().get(SCALARS, []):
        by_step = {event.step: float(event.value) for event in accumulator.Scalars(tag)}
        steps = tuple(sorted(by_step))
        scalars[tag] = Series(steps, tuple(by_step[step] for step in steps))
    return scalars


# --------------------------------------------------------------------------- choosing figures


def reward_components(tags: Iterable[str], stat: str) -> list[str]:
    """Names of the reward components (``total`` excluded) that logged ``reward/<name>/<stat>``."""
    matches = (_COMPONENT_TAG.match(tag) for tag in tags)
    return sorted({m["name"] for m in matches if m and m["stat"] == stat and m["name"] != "total"})


def _reward_figures(tags: set[str]) -> list[FigureSpec]:
    figures = []
    totals = tuple((tag, tag) for tag in TOTAL_REWARD_TAGS if tag in tags)
    means = reward_components(tags, "mean")
    panels = [Panel("total reward", "reward", totals)] if totals else []
    panels += [Panel(f"reward component: {name}", "mean reward", ((f"reward/{name}/mean", name),)) for name in means]
    if panels:
        figures.append(FigureSpec("rewards", "Rewards over training (mean over the batch's completions)",
                                  tuple(panels)))
    none_fractions = reward_components(tags, "none_fraction")
    if none_fractions:
        lines = tuple((f"reward/{name}/none_fraction", name) for name in none_fractions)
        figures.append(FigureSpec("reward_none_fraction", "Completions a reward did not apply to",
                                  (Panel("fraction scored None (not applicable)", "fraction", lines,
                                         unit_range=True),)))
    return figures


def _policy_figure(tags: set[str]) -> list[FigureSpec]:
    panels = tuple(Panel(label, tag.split("/")[-1], ((tag, label),)) for tag, label in POLICY_TAGS if tag in tags)
    return [FigureSpec("policy", "Policy update: KL, clipping, entropy", panels)] if panels else []


def _length_figure(tags: set[str]) -> list[FigureSpec]:
    mean, low, high = LENGTH_TAGS
    if mean not in tags:
        return []
    band = (low, high) if low in tags and high in tags else None
    panel = Panel("response length", "tokens", ((mean, "mean"),), band=band)
    return [FigureSpec("response_length", "Response length over training", (panel,))]


def _validation_figure(tags: set[str]) -> list[FigureSpec]:
    names = sorted((tag for tag in tags if tag.startswith("val-")), key=lambda tag: ("pass" not in tag, tag))
    panels = tuple(Panel(tag, "pass rate" if "pass" in tag else "value", ((tag, tag),),
                         unit_range="pass" in tag) for tag in names)
    return [FigureSpec("validation", "Validation", panels)] if panels else []


def _timing_label(tag: str) -> str:
    phase = tag.removeprefix("timing_s/")
    return "whole step" if phase == "step" else phase  # verl's 'step' is the sum of the phases


def _timing_figure(tags: set[str]) -> list[FigureSpec]:
    names = sorted(tag for tag in tags if tag.startswith("timing_s/"))
    if not names:
        return []
    lines = tuple((tag, _timing_label(tag)) for tag in names)
    return [FigureSpec("timing", "Time per training step", (Panel("time per step, by phase", "seconds", lines),))]


def figure_specs(tags: Sequence[str]) -> list[FigureSpec]:
    """The figures a run with these scalar tags calls for, in a fixed order."""
    present = set(tags)
    return [*_reward_figures(present), *_policy_figure(present), *_length_figure(present),
            *_validation_figure(present), *_timing_figure(present)]


# --------------------------------------------------------------------------- drawing


def trailing_mean(values: Sequence[float], window: int) -> list[float]:
    """Mean of the last ``window`` finite values up to each point (NaN where there is none)."""
    means = []
    for end in range(1, len(values) + 1):
        recent = [value for value in values[max(0, end - window):end] if math.isfinite(value)]
        means.append(sum(recent) / len(recent) if recent else math.nan)
    return means


def _draw_line(axes, series: Series, label: str, color: str) -> None:
    if len(series.values) < SMOOTH_FROM_POINTS:
        axes.plot(series.steps, series.values, marker="o", markersize=3, color=color, label=label)
        return
    window = max(2, len(series.values) // 10)
    axes.plot(series.steps, series.values, color=color, alpha=0.3, linewidth=1)
    axes.plot(series.steps, trailing_mean(series.values, window), color=color, linewidth=2,
              label=f"{label} (mean of last {window})")


def _within_unit_range(series: Iterable[Series]) -> bool:
    """Whether every finite value lies in [0, 1] (a rate named like one may still be a count)."""
    return all(0.0 <= value <= 1.0 for one in series for value in one.values if math.isfinite(value))


def _draw_band(axes, low: Series, high: Series) -> None:
    if low.steps == high.steps:  # min and max logged at the same steps, as verl does
        axes.fill_between(low.steps, low.values, high.values, color="C0", alpha=0.15, label="min-max")


def _draw_panel(axes, panel: Panel, scalars: Mapping[str, Series]) -> None:
    if panel.band is not None:
        _draw_band(axes, *(scalars[tag] for tag in panel.band))
    for index, (tag, label) in enumerate(panel.lines):
        _draw_line(axes, scalars[tag], label, f"C{index % 10}")
    axes.set_title(panel.title, fontsize=10)
    axes.set_xlabel("training step")
    axes.set_ylabel(panel.ylabel)
    if panel.unit_range and _within_unit_range(scalars[tag] for tag, _ in panel.lines):
        axes.set_ylim(-0.03, 1.03)
    axes.grid(True, alpha=0.3)
    if len(panel.lines) > 1 or panel.band is not None or len(scalars[panel.lines[0][0]].values) >= SMOOTH_FROM_POINTS:
        axes.legend(fontsize=8)


def render(spec: FigureSpec, scalars: Mapping[str, Series], path: str | os.PathLike) -> Path:
    """Draws one figure, a grid of up to :data:`PANEL_COLUMNS` panels per row, into a PNG."""
    from matplotlib.figure import Figure

    columns = min(PANEL_COLUMNS, len(spec.panels))
    rows = math.ceil(len(spec.panels) / columns)
    figure = Figure(figsize=(5.2 * columns, 3.6 * rows + 0.6), layout="constrained")
    figure.suptitle(spec.title, fontsize=13)
    grid = figure.subplots(rows, columns, squeeze=False)
    for axes, panel in zip(grid.flat, spec.panels):
        _draw_panel(axes, panel, scalars)
    for axes in list(grid.flat)[len(spec.panels):]:
        axes.set_visible(False)
    path = Path(path)
    figure.savefig(path, dpi=110)
    return path


def plot_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> list[Path]:
    """Writes every figure the run's logs call for into ``out_dir`` (default: ``<event dir>/plots``)."""
    event_dir = find_event_dir(run_dir)
    scalars = read_scalars(event_dir)
    specs = figure_specs(list(scalars))
    if not specs:
        known = ", ".join(sorted(scalars)[:20]) or "none"
        raise PlotError(f"{event_dir} holds no metric these plots show (rewards, actor/*, response_length/*, "
                        f"val-*, timing_s/*); scalar tags found: {known}")
    out_dir = Path(out_dir) if out_dir is not None else event_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    return [render(spec, scalars, out_dir / f"{spec.name}.png") for spec in specs]
