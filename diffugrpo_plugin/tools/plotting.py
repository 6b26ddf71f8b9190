"""Training-run figures: PNG plots of a run's TensorBoard scalars (what verl's tracking logs).

:func:`plot_run` finds the run's event files, reads every scalar, decides which figures the
run's metrics call for (:func:`figure_specs`, a pure function of the scalars) and draws each.
One figure per question, in this order:

==========================  =================================================================
``rewards.png``             Is the reward going up? The total (``reward/total/mean``, else
                            ``critic/score/mean``: verl's name for the same number).
``reward_components.png``   Which component moves it? Each ``reward/<name>/mean`` in one panel;
                            a second panel, only when some are non-zero, of the completions a
                            reward did not score (``none_fraction``: not applicable,
                            ``error_fraction``: failed).
``policy.png``              Is the policy moving? KL to the reference (``actor/kl_loss``) and
                            between the old and new policy (``actor/ppo_kl``), clip fraction,
                            entropy, completion length with its min-max band.
``timing.png``              Where does the time go? Each step's time stacked by stage (stages
                            under 2% of the step merged with the untimed rest), validation
                            hatched on top; the legend gives each stage's mean seconds and share.
``validation.png``          Does held-out pass@1 rise? pass@1 per data source
                            (``val-core/<source>/acc/mean@N``), wide and first, then the
                            held-out reward per source. verl's other validation series
                            (turn counts, failure flags, scoring seconds) are left out.
==========================  =================================================================

A figure is written only when the run logged a metric it shows. Every series appears once, in a
colour of its own within its axes; legends sit outside the plotting area. Noisy series (20
points or more) are drawn faintly with a trailing mean on top. Matplotlib runs on its Agg canvas
without pyplot, so no display and no global figure state are involved.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable, Mapping, Sequence

EVENT_FILE_GLOB = "events.out.tfevents.*"
TOTAL_REWARD_TAGS = ("reward/total/mean", "critic/score/mean")  # the first one logged is drawn
KL_TAGS = (("actor/kl_loss", "to the reference (k3)"), ("actor/ppo_kl", "old -> new policy (ppo_kl)"))
LENGTH_TAGS = ("response_length/mean", "response_length/min", "response_length/max")
STEP_TAG = "timing_s/step"
SAMPLING_TAG = "timing_s/rollout_sampling"
VALIDATION_TIME_TAG = "timing_s/testing"
# The stages inside verl's ``step`` timer, in the order a step runs them (verl's trainer_base).
STEP_STAGES = (
    ("timing_s/gen", "rollout"),
    ("timing_s/reward", "reward (colocated)"),
    ("timing_s/old_log_prob", "old-policy log-probs"),
    ("timing_s/ref", "reference log-probs"),
    ("timing_s/values", "critic values"),
    ("timing_s/adv", "advantages"),
    ("timing_s/update_critic", "critic update"),
    ("timing_s/update_actor", "policy update"),
    ("timing_s/save_checkpoint", "checkpoint"),
    ("timing_s/update_weights", "weight sync to rollout"),
)
SMALL_STAGE_SHARE = 0.02
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
_COMPONENT_TAG = re.compile(r"^reward/(?P<name>.+)/(?P<stat>mean|none_fraction|error_fraction)$")
_PASS_AT_1_TAG = re.compile(r"^val-core/(?P<source>[^/]+)/acc/mean@\d+$")
_HELD_OUT_REWARD_TAG = re.compile(r"^val-(core|aux)/(?P<source>[^/]+)/reward/mean@\d+$")


class PlotError(ValueError):
    """The run directory cannot be plotted; the message says what was looked for and where."""


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
        raise PlotError(
            f"no TensorBoard event files ({EVENT_FILE_GLOB}) under {run_dir}. Point RUN_DIR at the "
            f"run's TENSORBOARD_DIR (verl's default: tensorboard_log/<project>/<experiment>) and make "
            f"sure trainer.logger includes 'tensorboard'."
        )
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


def _is_zero(series: Series) -> bool:
    return all(value == 0.0 for value in series.values)


def reward_components(tags: Iterable[str], stat: str) -> list[str]:
    """Names of the reward components (``total`` excluded) that logged ``reward/<name>/<stat>``."""
    matches = (_COMPONENT_TAG.match(tag) for tag in tags)
    return sorted({m["name"] for m in matches if m and m["stat"] == stat and m["name"] != "total"})


def _total_reward_figure(scalars: Mapping[str, Series]) -> list[FigureSpec]:
    tag = next((tag for tag in TOTAL_REWARD_TAGS if tag in scalars), None)
    if tag is None:
        return []
    line = Line("total reward", tag, scalars[tag])
    panel = Panel("total reward: mean over the batch's completions", "reward", (line,))
    return [FigureSpec("rewards", "Is the reward going up?", (panel,))]


def _unscored_lines(scalars: Mapping[str, Series]) -> tuple[Line, ...]:
    """Per component, the fractions of completions it did not score, where any is non-zero."""
    lines = []
    for name in sorted({*reward_components(scalars, "none_fraction"), *reward_components(scalars, "error_fraction")}):
        for stat, meaning in (("none_fraction", "not applicable (None)"), ("error_fraction", "failed")):
            tag = f"reward/{name}/{stat}"
            if tag in scalars and not _is_zero(scalars[tag]):
                lines.append(Line(f"{name}: {meaning}", tag, scalars[tag]))
    return tuple(lines)


def _component_figure(scalars: Mapping[str, Series]) -> list[FigureSpec]:
    means = tuple(
        Line(name, f"reward/{name}/mean", scalars[f"reward/{name}/mean"]) for name in reward_components(scalars, "mean")
    )
    if not means:
        return []
    panels = [Panel("each reward component: mean over the batch's completions", "component reward", means, width=1.3)]
    unscored = _unscored_lines(scalars)
    if unscored:
        panels.append(Panel("completions a reward did not score", "fraction of completions", unscored, unit_range=True))
    return [FigureSpec("reward_components", "Which reward component moves?", tuple(panels), columns=len(panels))]


def _policy_figure(scalars: Mapping[str, Series]) -> list[FigureSpec]:
    panels = []
    kl = tuple(Line(label, tag, scalars[tag]) for tag, label in KL_TAGS if tag in scalars)
    if kl:
        panels.append(Panel("KL divergence", "KL (nats per token)", kl))
    if "actor/pg_clipfrac" in scalars:
        line = Line("clip fraction", "actor/pg_clipfrac", scalars["actor/pg_clipfrac"])
        panels.append(Panel("clip fraction: tokens whose ratio was clipped", "fraction", (line,), from_zero=True))
    if "actor/entropy" in scalars:
        panels.append(
            Panel(
                "entropy of the policy", "nats per token", (Line("entropy", "actor/entropy", scalars["actor/entropy"]),)
            )
        )
    mean, low, high = LENGTH_TAGS
    if mean in scalars:
        band = (scalars[low], scalars[high]) if low in scalars and high in scalars else None
        panels.append(
            Panel(
                "completion length (tokens up to EOS)", "tokens", (Line("mean length", mean, scalars[mean]),), band=band
            )
        )
    if not panels:
        return []
    return [FigureSpec("policy", "Is the policy moving?", tuple(panels), columns=2)]


def _derived(steps: Sequence[int], values: Iterable[float]) -> Series:
    return Series(tuple(steps), tuple(values))


def _rollout_lines(scalars: Mapping[str, Series], steps: Sequence[int]) -> list[Line]:
    """The rollout, split into sampling and the rest when the sampling seconds fit inside it at
    every step (they are summed over generation batches, which overlap on several replicas)."""
    gen = scalars["timing_s/gen"]
    sampling = scalars.get(SAMPLING_TAG)
    if sampling is None or any(sampling.at(step) > gen.at(step) for step in steps):
        return [Line("rollout", "timing_s/gen", gen)]
    return [
        Line("rollout: sampling", SAMPLING_TAG, sampling),
        Line(
            "rollout: scoring, batching",
            "timing_s/gen - timing_s/rollout_sampling",
            _derived(steps, (gen.at(step) - sampling.at(step) for step in steps)),
        ),
    ]


def _step_lines(scalars: Mapping[str, Series]) -> list[Line]:
    """The stages that make up each step, small ones merged with the untimed rest, which is last."""
    whole = scalars[STEP_TAG]
    steps = whole.steps
    stages = []
    for tag, label in STEP_STAGES:
        if tag in scalars:
            stages += _rollout_lines(scalars, steps) if tag == "timing_s/gen" else [Line(label, tag, scalars[tag])]
    total = sum(whole.values)
    kept = [line for line in stages if sum(line.series.at(step) for step in steps) >= SMALL_STAGE_SHARE * total]
    merged = [line.label for line in stages if line not in kept]
    rest = _derived(steps, (max(0.0, whole.at(step) - sum(line.series.at(step) for line in kept)) for step in steps))
    label = f"rest: {', '.join(merged)}, untimed" if merged else "rest: untimed"
    return [*kept, Line(label, f"{STEP_TAG} - the stages above", rest)]


def _timing_figure(scalars: Mapping[str, Series]) -> list[FigureSpec]:
    if STEP_TAG not in scalars:
        return []
    lines = _step_lines(scalars)
    hatched = ()
    if VALIDATION_TIME_TAG in scalars:
        lines.append(Line("validation (after the step)", VALIDATION_TIME_TAG, scalars[VALIDATION_TIME_TAG]))
        hatched = (VALIDATION_TIME_TAG,)
    stacked = Panel(
        "time of each training step, by stage (legend: mean per step, share)",
        "seconds",
        tuple(lines),
        kind="stacked",
        width=1.6,
        hatched=hatched,
    )
    return [FigureSpec("timing", "Where does the time go?", (stacked,))]


def _by_source(scalars: Mapping[str, Series], pattern: re.Pattern) -> tuple[Line, ...]:
    """One line per data source: its ``val-core`` tag where verl logged the metric under both."""
    matches = sorted(
        (m["source"], not m.string.startswith("val-core/"), m.string) for m in map(pattern.match, scalars) if m
    )
    first = {}
    for source, _, tag in matches:
        first.setdefault(source, tag)
    return tuple(Line(source, tag, scalars[tag]) for source, tag in first.items())


def _sources(lines: Sequence[Line]) -> str:
    """The title's data source, where one line and so no legend names it."""
    return f" on {lines[0].label}" if len(lines) == 1 else ", per data source"


def _validation_figure(scalars: Mapping[str, Series]) -> list[FigureSpec]:
    panels = []
    pass_at_1 = _by_source(scalars, _PASS_AT_1_TAG)
    if pass_at_1:
        panels.append(
            Panel(
                f"held-out pass@1 (all tests pass){_sources(pass_at_1)}",
                "pass@1",
                pass_at_1,
                unit_range=True,
                width=1.6,
            )
        )
    rewards = _by_source(scalars, _HELD_OUT_REWARD_TAG)
    if rewards:
        panels.append(Panel(f"held-out total reward{_sources(rewards)}", "reward", rewards))
    if not panels:
        return []
    return [FigureSpec("validation", "Does held-out pass@1 rise?", tuple(panels), columns=len(panels))]


def figure_specs(scalars: Mapping[str, Series]) -> list[FigureSpec]:
    """The figures a run with these scalars calls for, in a fixed order."""
    return [
        *_total_reward_figure(scalars),
        *_component_figure(scalars),
        *_policy_figure(scalars),
        *_timing_figure(scalars),
        *_validation_figure(scalars),
    ]


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
    return [
        REST_COLOR if line.metric.startswith(f"{STEP_TAG} -") else PALETTE[index] for index, line in enumerate(lines)
    ]


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


def plot_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike) -> list[Path]:
    """Writes every figure the run's logs call for into ``out_dir`` and returns their paths."""
    event_dir = find_event_dir(run_dir)
    scalars = read_scalars(event_dir)
    specs = figure_specs(scalars)
    if not specs:
        known = ", ".join(sorted(scalars)[:20]) or "none"
        raise PlotError(
            f"{event_dir} holds no metric these plots show (reward/*, actor/*, response_length/*, "
            f"timing_s/*, val-core/*/acc/*); scalar tags found: {known}"
        )
    out_dir = Path(out_dir)
    paths = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for spec in specs:
            paths.append(out_dir / f"{spec.name}.png")
            draw(spec).savefig(paths[-1], dpi=100)
    except OSError as error:
        raise PlotError(
            f"cannot write {paths[-1] if paths else out_dir}: {error.strerror or error}; "
            f"choose a writable directory with --out DIR"
        ) from error
    return paths
