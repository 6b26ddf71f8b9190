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
points or more) are drawn faintly with a trailing mean on top. Drawing is :mod:`diffugrpo_plugin.tools.drawing`'s.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from diffugrpo_plugin.tools.drawing import FigureSpec, Line, Panel, Series, draw

EVENT_FILE_GLOB = "events.out.tfevents.*"
TOTAL_REWARD_TAGS = ("reward/total/mean", "critic/score/mean")  # the first one logged is drawn
KL_TAGS = (("actor/kl_loss", "to the reference (k3)"), ("actor/ppo_kl", "old -> new policy (ppo_kl)"))
LENGTH_TAGS = ("response_length/mean", "response_length/min", "response_length/max")
STEP_TAG = "timing_s/step"
SAMPLING_TAG = "timing_s/rollout_sampling"
VALIDATION_TIME_TAG = "timing_s/testing"
# The stages inside verl's ``step`` timer, in the order a step runs them (verl's trainer_base).
# The reference's pass is timed with the old policy's when the trainer scores both in one worker call.
STEP_STAGES = (
    ("timing_s/gen", "rollout"),
    ("timing_s/reward", "reward (colocated)"),
    ("timing_s/old_log_prob", "old-policy (+ reference) log-probs"),
    ("timing_s/ref", "reference log-probs"),
    ("timing_s/values", "critic values"),
    ("timing_s/adv", "advantages"),
    ("timing_s/update_critic", "critic update"),
    ("timing_s/update_actor", "policy update"),
    ("timing_s/save_checkpoint", "checkpoint"),
    ("timing_s/update_weights", "weight sync to rollout"),
)
SMALL_STAGE_SHARE = 0.02
_COMPONENT_TAG = re.compile(r"^reward/(?P<name>.+)/(?P<stat>mean|none_fraction|error_fraction)$")
_PASS_AT_1_TAG = re.compile(r"^val-core/(?P<source>[^/]+)/acc/mean@\d+$")
_HELD_OUT_REWARD_TAG = re.compile(r"^val-(core|aux)/(?P<source>[^/]+)/reward/mean@\d+$")


class PlotError(ValueError):
    """The run directory cannot be plotted; the message says what was looked for and where."""


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
    return [*kept, Line(label, f"{STEP_TAG} - the stages above", rest, rest=True)]


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
