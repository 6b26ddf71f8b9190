"""The figure model of a training run's plots (:class:`FigureSpec`: panels of lines) and its drawing with matplotlib:
lines, bands and stacked stage bars, colours, smoothing, legends. Which figures a run gets, and what each shows, is
:mod:`diffugrpo_plugin.tools.plotting`'s to decide. Matplotlib runs on its Agg canvas without pyplot, so no display
and no global figure state are involved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

BARS_UP_TO_STEPS = 80
SMOOTH_FROM_POINTS = 20
# tab10 without its grey (kept for the untimed rest), then black and tab20b's dark and middle tones: 20 colours
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#000000",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#6b6ecf",
    "#b5cf6b",
    "#e7ba52",
    "#d6616b",
    "#ce6dbd",
)
REST_COLOR = "#7f7f7f"


@dataclass(frozen=True)
class Series:
    """One scalar over training steps, in step order."""

    steps: tuple[int, ...]
    values: tuple[float, ...]

    @cached_property
    def _by_step(self) -> dict[int, float]:
        return dict(zip(self.steps, self.values))

    def at(self, step: int) -> float:
        """The value at ``step``, 0 where the series was not logged (a stage that did not run)."""
        return self._by_step.get(step, 0.0)


@dataclass(frozen=True)
class Line:
    """One series as drawn: its legend label and the metric it shows (a tag, or how it was derived)."""

    label: str
    metric: str
    series: Series
    rest: bool = False  # the untimed rest of a stacked step, drawn grey


@dataclass(frozen=True)
class Panel:
    """One axes. ``kind``: ``lines``, or ``stacked``: bars per step, one segment per line, the
    ``hatched`` metrics' segments lying outside the step.
    ``band``: a (low, high) range drawn under the first line. ``unit_range``: a rate whose level
    should read against the whole 0-1 range. ``from_zero``: a small rate whose axis starts at 0.
    ``width``: relative width in the figure's row."""

    title: str
    ylabel: str
    lines: tuple[Line, ...]
    kind: str = "lines"
    band: tuple[Series, Series] | None = None
    unit_range: bool = False
    from_zero: bool = False
    width: float = 1.0
    hatched: tuple[str, ...] = ()


@dataclass(frozen=True)
class FigureSpec:
    name: str  # file stem
    title: str
    panels: tuple[Panel, ...]
    columns: int = 1


# --------------------------------------------------------------------------- drawing


def trailing_mean(values: Sequence[float], window: int) -> list[float]:
    """Mean of the last ``window`` finite values up to each point (NaN where there is none)."""
    means = []
    for end in range(1, len(values) + 1):
        recent = [value for value in values[max(0, end - window) : end] if math.isfinite(value)]
        means.append(sum(recent) / len(recent) if recent else math.nan)
    return means


def smoothing_window(points: int) -> int | None:
    """How many steps the trailing mean of a series this long covers; None: drawn as it is."""
    return max(3, points // 8) if points >= SMOOTH_FROM_POINTS else None


def _smoothing_window(spec: FigureSpec) -> int | None:
    """One window for the whole figure, from its longest line series, so that one caption names it."""
    lengths = [len(line.series.values) for panel in spec.panels if panel.kind == "lines" for line in panel.lines]
    return smoothing_window(max(lengths, default=0))


def _draw_line(axes, line: Line, index: int, window: int | None) -> None:
    """The ``index``-th line of its axes, in a colour of its own (dashed past the palette's 20)."""
    series = line.series
    style = dict(color=PALETTE[index % len(PALETTE)], linestyle="-" if index < len(PALETTE) else "--")
    if window is None or len(series.values) < SMOOTH_FROM_POINTS:
        axes.plot(series.steps, series.values, marker="o", markersize=4, label=line.label, **style)
        return
    axes.plot(series.steps, series.values, alpha=0.3, linewidth=1, label=f"_{line.label}: each step", **style)
    axes.plot(series.steps, trailing_mean(series.values, window), linewidth=2, label=line.label, **style)


def _within_unit_range(lines: Iterable[Line]) -> bool:
    """Whether every finite value lies in [0, 1] (a rate named like one may still be a count)."""
    return all(0.0 <= value <= 1.0 for line in lines for value in line.series.values if math.isfinite(value))


def _draw_band(axes, low: Series, high: Series, color: str) -> None:
    if low.steps == high.steps:  # min and max logged at the same steps, as verl does
        axes.fill_between(low.steps, low.values, high.values, color=color, alpha=0.15, label="min-max")


def _legend_entries(panel: Panel) -> int:
    """Entries of the panel's legend: none for one line (the title names it), else each line and the band."""
    entries = len(panel.lines) + (panel.band is not None)
    return entries if panel.kind == "lines" and entries > 1 else 0


def _legend_above(axes, entries: int) -> None:
    """The legend in rows between the title and the plotting area, clear of every line."""
    axes.legend(
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncols=min(entries, 3),
        fontsize=8,
        frameon=False,
        borderaxespad=0.2,
        handlelength=1.5,
        columnspacing=1.2,
    )


def _draw_lines_panel(axes, panel: Panel, window: int | None) -> None:
    if panel.band is not None:
        _draw_band(axes, *panel.band, PALETTE[0])
    for index, line in enumerate(panel.lines):
        _draw_line(axes, line, index, window)
    if panel.unit_range and _within_unit_range(panel.lines):
        axes.set_ylim(-0.03, 1.03)
    elif panel.from_zero and _within_unit_range(panel.lines):
        top = max(0.05, *(max(line.series.values) * 1.1 for line in panel.lines))
        axes.set_ylim(-0.03 * top, top)  # a line at 0 stays clear of the frame
    if _legend_entries(panel):
        _legend_above(axes, _legend_entries(panel))


def _stage_colors(lines: Sequence[Line]) -> list[str]:
    return [REST_COLOR if line.rest else PALETTE[index] for index, line in enumerate(lines)]


def _mean_per_step(line: Line, steps: int) -> float:
    """A stage logged at some steps only (checkpoints) costs its total spread over the run's steps."""
    return sum(line.series.values) / steps


def _stage_legend(line: Line, steps: int, step_mean: float, hatched: bool) -> str:
    if hatched:
        runs = line.series.values
        return f"{line.label}: {sum(runs) / len(runs):.2f} s each, {len(runs)} times"
    mean = _mean_per_step(line, steps)
    return f"{line.label}: {mean:.2f} s ({mean / step_mean:.0%})"


def _draw_stacked_panel(axes, panel: Panel) -> None:
    steps = sorted({step for line in panel.lines for step in line.series.steps})
    width = 0.8 * min((b - a for a, b in zip(steps, steps[1:])), default=1)
    inside = [line for line in panel.lines if line.metric not in panel.hatched]
    step_count = max(len(line.series.values) for line in inside)
    step_mean = sum(_mean_per_step(line, step_count) for line in inside)
    bottom = [0.0] * len(steps)
    for line, color in zip(panel.lines, _stage_colors(panel.lines)):
        heights = [line.series.at(step) for step in steps]
        top = [below + height for below, height in zip(bottom, heights)]
        hatched = line.metric in panel.hatched
        style = dict(
            color=color,
            hatch="//" if hatched else None,
            edgecolor="white" if hatched else color,
            linewidth=0,
            label=_stage_legend(line, step_count, step_mean, hatched),
        )
        if len(steps) <= BARS_UP_TO_STEPS:
            axes.bar(steps, heights, width=width, bottom=bottom, **style)
        else:  # bars this thin would leave seams: one stepped band per stage instead
            axes.fill_between(steps, bottom, top, step="mid", **style)
        bottom = top
    handles, labels = axes.get_legend_handles_labels()
    axes.legend(
        handles[::-1],
        labels[::-1],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
        frameon=False,
        title=f"mean per step: {step_mean:.2f} s",
        title_fontsize=8,
        alignment="left",
    )  # the top of the stack first, as it reads


def _draw_panel(axes, panel: Panel, window: int | None) -> None:
    from matplotlib.ticker import MaxNLocator

    if panel.kind == "stacked":
        _draw_stacked_panel(axes, panel)
    else:
        _draw_lines_panel(axes, panel, window)
    axes.set_xlabel("training step")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(True, alpha=0.3)
    legend_rows = math.ceil(_legend_entries(panel) / 3)
    axes.set_title(panel.title, fontsize=10, pad=6 + 15 * legend_rows)  # above the legend's rows
    axes.set_ylabel(panel.ylabel)


def draw(spec: FigureSpec):
    """The matplotlib figure of ``spec``: rows of ``spec.columns`` panels."""
    from matplotlib.figure import Figure

    columns = min(spec.columns, len(spec.panels))
    rows = math.ceil(len(spec.panels) / columns)
    widths = [panel.width for panel in spec.panels[:columns]]
    legend_room = 3.8 if any(panel.kind == "stacked" for panel in spec.panels) else 0.0  # its legend is beside it
    figure = Figure(figsize=(5.0 * sum(widths) + legend_room + 0.4, 3.7 * rows + 0.5), layout="constrained")
    figure.suptitle(spec.title, fontsize=13, fontweight="bold")
    grid = figure.subplots(rows, columns, squeeze=False, width_ratios=widths)
    window = _smoothing_window(spec)
    for axes, panel in zip(grid.flat, spec.panels):
        _draw_panel(axes, panel, window)
    for axes in list(grid.flat)[len(spec.panels) :]:
        axes.set_visible(False)
    if window:
        figure.supxlabel(f"faint: each step; bold: mean of the last {window} steps", fontsize=8, color="dimgray")
    return figure
