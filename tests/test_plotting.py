"""``diffugrpo plot``: one figure per question, chosen from a run's TensorBoard scalars (written
here with the writer verl's tracking uses, under the tag names a coupled-GRPO run logs), drawn
with distinct series, and written only where the user asks."""

from __future__ import annotations

import argparse
import math

import pytest

from diffugrpo_plugin.cli import plot as plot_cli
from diffugrpo_plugin.tools import drawing, plotting
from diffugrpo_plugin.tools.plotting import Line, PlotError, Series

STEPS = 24
VALIDATION_STEPS = (0, 12, 24)
# seconds per step of each stage: gen holds sampling; adv and update_weights are under 2% of the step
STAGE_SECONDS = {
    "timing_s/gen": 6.0,
    "timing_s/rollout_sampling": 5.0,
    "timing_s/old_log_prob": 0.5,
    "timing_s/ref": 0.4,
    "timing_s/adv": 0.03,
    "timing_s/update_actor": 1.0,
    "timing_s/update_weights": 0.02,
    "timing_s/reward_scoring": 4.0,
}
STEP_SECONDS = 8.5  # 0.55 s of it untimed
CHECKPOINT_SECONDS = {12: 5.0, 24: 5.0}
TRAINING_TAGS = [
    "critic/score/mean",
    "critic/score/max",
    "reward/total/mean",
    "reward/code/mean",
    "reward/code_format/mean",
    "reward/code/none_fraction",
    "reward/code_format/none_fraction",
    "reward/code/error_fraction",
    "reward/code_format/error_fraction",
    "actor/kl_loss",
    "actor/ppo_kl",
    "actor/pg_clipfrac",
    "actor/entropy",
    "actor/grad_norm",
    "response_length/mean",
    "response_length/min",
    "response_length/max",
    "perf/throughput",
    "training/global_step",
]
VALIDATION_TAGS = [
    "val-core/synthetic/acc/mean@1",
    "val-core/mbpp/acc/mean@1",
    "val-aux/synthetic/reward/mean@1",
    "val-aux/mbpp/reward/mean@1",
    "val-aux/synthetic/reward/code/mean@1",
    "val-aux/synthetic/reward_failed/code/mean@1",
    "val-aux/synthetic/scoring_seconds/mean@1",
    "val-aux/synthetic/acc_success_only/mean@1",
    "val-aux/num_turns/mean",
    "timing_s/testing",
]
EXPECTED_FIGURES = ["rewards", "reward_components", "policy", "timing", "validation"]


def training_value(tag: str, step: int) -> float:
    if tag == "reward/code/none_fraction":
        return 0.0  # the code reward scores every completion
    if tag == "reward/code/error_fraction":
        return 0.25 if step == 5 else 0.0  # one step where the sandbox failed on a quarter
    return TRAINING_TAGS.index(tag) + step / 100


def write_run(
    directory,
    steps: int = STEPS,
    tags=TRAINING_TAGS,
    timing: bool = True,
    validation: bool = True,
    sampling_seconds: float = STAGE_SECONDS["timing_s/rollout_sampling"],
) -> None:
    from torch.utils.tensorboard import SummaryWriter  # what verl's tensorboard tracking writes with

    writer = SummaryWriter(str(directory))
    for step in range(1, steps + 1):
        for tag in tags:
            writer.add_scalar(tag, training_value(tag, step), step)
        if timing:
            for tag, seconds in {
                **STAGE_SECONDS,
                "timing_s/rollout_sampling": sampling_seconds,
                "timing_s/step": STEP_SECONDS + CHECKPOINT_SECONDS.get(step, 0.0),
            }.items():
                writer.add_scalar(tag, seconds, step)
            if step in CHECKPOINT_SECONDS:
                writer.add_scalar("timing_s/save_checkpoint", CHECKPOINT_SECONDS[step], step)
    if validation:
        for step in VALIDATION_STEPS:
            for tag in VALIDATION_TAGS:
                writer.add_scalar(tag, 0.5 if "num_turns" in tag else step / 100, step)
    writer.close()


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="diffugrpo")
    plot_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plot", *argv])
    return args.func(args)


def series(values, steps=None) -> Series:
    return Series(tuple(steps or range(1, len(values) + 1)), tuple(float(value) for value in values))


@pytest.fixture(scope="module")
def run_scalars(tmp_path_factory):
    directory = tmp_path_factory.mktemp("run")
    write_run(directory)
    return plotting.read_scalars(directory)


@pytest.fixture(scope="module")
def specs(run_scalars):
    return {spec.name: spec for spec in plotting.figure_specs(run_scalars)}


def metrics(panel) -> list[str]:
    return [line.metric for line in panel.lines]


# --------------------------------------------------------------------------- one figure per question


def test_one_figure_per_question_in_order(specs):
    assert list(specs) == EXPECTED_FIGURES
    assert [spec.title for spec in specs.values()] == [
        "Is the reward going up?",
        "Which reward component moves?",
        "Is the policy moving?",
        "Where does the time go?",
        "Does held-out pass@1 rise?",
    ]
    for spec in specs.values():
        for panel in spec.panels:
            assert panel.title and panel.lines


def test_total_reward_drawn_once_under_its_own_name(specs):
    (total,) = specs["rewards"].panels
    assert metrics(total) == ["reward/total/mean"]  # critic/score/mean is the same number: not drawn again
    (only_critic,) = plotting.figure_specs({"critic/score/mean": series([1, 2])})
    assert metrics(only_critic.panels[0]) == ["critic/score/mean"]


def test_components_together_and_unscored_fractions_only_where_non_zero(specs, run_scalars):
    means, unscored = specs["reward_components"].panels
    assert [line.label for line in means.lines] == ["code", "code_format"]
    assert metrics(means) == ["reward/code/mean", "reward/code_format/mean"]
    # code's none_fraction is 0 throughout and left out; the step where it failed shows
    assert [line.label for line in unscored.lines] == [
        "code: failed",
        "code_format: not applicable (None)",
        "code_format: failed",
    ]
    assert unscored.unit_range
    never_unscored = {tag: value for tag, value in run_scalars.items() if "fraction" not in tag}
    (components,) = [spec for spec in plotting.figure_specs(never_unscored) if spec.name == "reward_components"]
    assert len(components.panels) == 1


def test_policy_figure_shows_kl_clipping_entropy_and_length(specs, run_scalars):
    kl, clip, entropy, length = specs["policy"].panels
    assert metrics(kl) == ["actor/kl_loss", "actor/ppo_kl"]
    assert metrics(clip) == ["actor/pg_clipfrac"] and metrics(entropy) == ["actor/entropy"]
    (never_clipped,) = plotting.figure_specs({"actor/pg_clipfrac": series([0, 0, 0])})
    (axes,) = plotting.draw(never_clipped).axes
    assert axes.get_ylim() == pytest.approx((-0.0015, 0.05))  # a flat zero reads as zero, not as mid-axis
    assert metrics(length) == ["response_length/mean"]
    assert length.band == (run_scalars["response_length/min"], run_scalars["response_length/max"])
    (no_band,) = plotting.figure_specs({"response_length/mean": series([3, 4])})
    assert no_band.panels[0].band is None


def test_validation_puts_pass_at_1_first_and_drops_the_bookkeeping_series(specs):
    pass_at_1, held_out_reward = specs["validation"].panels
    assert pass_at_1.title == "held-out pass@1 (all tests pass), per data source"
    assert [line.label for line in pass_at_1.lines] == ["mbpp", "synthetic"]
    assert metrics(pass_at_1) == ["val-core/mbpp/acc/mean@1", "val-core/synthetic/acc/mean@1"]
    assert pass_at_1.unit_range and pass_at_1.width > held_out_reward.width
    assert metrics(held_out_reward) == ["val-aux/mbpp/reward/mean@1", "val-aux/synthetic/reward/mean@1"]
    assert pass_at_1.lines[0].series.steps == VALIDATION_STEPS
    both = {"val-aux/mbpp/reward/mean@1": series([1]), "val-core/mbpp/reward/mean@1": series([2])}
    (reward_only,) = plotting.figure_specs(both)
    assert metrics(reward_only.panels[0]) == ["val-core/mbpp/reward/mean@1"]  # one line per source
    (one_source,) = plotting.figure_specs({"val-core/synthetic/acc/mean@1": series([0.1, 0.2], steps=[0, 4])})
    assert one_source.panels[0].title == "held-out pass@1 (all tests pass) on synthetic"  # no legend names it


def test_step_time_stacks_to_the_whole_step_with_small_stages_merged(specs):
    (stacked,) = specs["timing"].panels
    assert stacked.kind == "stacked"
    assert [line.label for line in stacked.lines] == [
        "rollout: sampling",
        "rollout: scoring, batching",
        "old-policy (+ reference) log-probs",
        "reference log-probs",
        "policy update",
        "checkpoint",
        "rest: advantages, weight sync to rollout, untimed",
        "validation (after the step)",
    ]
    assert stacked.hatched == ("timing_s/testing",)
    inside_step = stacked.lines[:-1]
    for step in range(1, STEPS + 1):
        whole = STEP_SECONDS + CHECKPOINT_SECONDS.get(step, 0.0)
        assert sum(line.series.at(step) for line in inside_step) == pytest.approx(whole)
    rest = inside_step[-1].series
    assert rest.at(1) == pytest.approx(STEP_SECONDS - 6.0 - 0.5 - 0.4 - 1.0)  # adv + sync + 0.55 s untimed


def test_rollout_kept_whole_where_sampling_seconds_exceed_it(tmp_path):
    write_run(tmp_path, steps=3, tags=[], validation=False, sampling_seconds=7.0)  # overlapping replicas
    (timing,) = plotting.figure_specs(plotting.read_scalars(tmp_path))
    assert timing.panels[0].lines[0] == Line("rollout", "timing_s/gen", series([6.0] * 3))


def test_only_the_figures_a_run_logged_metrics_for():
    assert [
        spec.name for spec in plotting.figure_specs({"reward/syntax/mean": series([1]), "actor/kl_loss": series([0])})
    ] == ["reward_components", "policy"]
    only_total = plotting.figure_specs({"reward/total/mean": series([1]), "reward/total/none_fraction": series([0])})
    assert [spec.name for spec in only_total] == ["rewards"]  # 'total' is not a component
    assert plotting.figure_specs({"perf/throughput": series([1]), "val-aux/num_turns/mean": series([2])}) == []


def test_trailing_mean_by_hand():
    means = drawing.trailing_mean([1.0, 2.0, 3.0, math.nan, 5.0], window=2)
    assert means == [1.0, 1.5, 2.5, 3.0, 5.0]
    assert math.isnan(drawing.trailing_mean([math.nan], window=3)[0])


# --------------------------------------------------------------------------- drawing


def legend_entries(axes) -> list[tuple[str, tuple]]:
    """(label, colour) of each artist with a legend entry: lines, bar segments, bands."""
    from matplotlib.colors import to_rgba

    entries = [(line.get_label(), to_rgba(line.get_color())) for line in axes.get_lines()]
    entries += [
        (container.get_label(), to_rgba(container.patches[0].get_facecolor()))
        for container in axes.containers
        if container.get_label()
    ]
    entries += [(band.get_label(), None) for band in axes.collections]
    return [(label, color) for label, color in entries if not label.startswith("_")]


@pytest.mark.parametrize("name", EXPECTED_FIGURES)
def test_no_series_drawn_twice_and_no_colour_repeated_within_an_axes(specs, name):
    figure = plotting.draw(specs[name])
    visible = [axes for axes in figure.axes if axes.get_visible()]
    assert len(visible) == len(specs[name].panels)
    for axes, panel in zip(visible, specs[name].panels):
        entries = legend_entries(axes)
        labels = [label.split(":")[0] if panel.kind == "stacked" else label for label, _ in entries]
        expected = (
            [line.label.split(":")[0] for line in panel.lines]
            if panel.kind == "stacked"
            else [line.label for line in panel.lines]
        )
        assert [label for label in labels if label != "min-max"] == expected
        colors = [color for _, color in entries if color is not None]
        assert len(set(colors)) == len(colors), panel.title


@pytest.mark.parametrize("name", EXPECTED_FIGURES)
def test_legends_sit_outside_the_plotting_area_and_below_the_title(specs, name):
    figure = plotting.draw(specs[name])
    figure.canvas.draw()  # lays the figure out
    for axes in figure.axes:
        legend = axes.get_legend()
        if legend is None:
            continue
        box, area = legend.get_window_extent(), axes.get_window_extent()
        assert box.x0 >= area.x1 or box.y0 >= area.y1, axes.get_title()  # beside it or above it
        assert not box.overlaps(axes.title.get_window_extent()), axes.get_title()


def test_noisy_series_get_a_trailing_mean_and_short_ones_markers(specs):
    (total,) = plotting.draw(specs["rewards"]).axes
    raw, smoothed = total.get_lines()
    assert raw.get_label().startswith("_") and raw.get_alpha() == 0.3  # no legend entry of its own
    assert smoothed.get_label() == "total reward" and smoothed.get_linewidth() == 2
    assert smoothed.get_ydata()[-1] == pytest.approx(sum(raw.get_ydata()[-3:]) / 3)
    (short,) = plotting.figure_specs({"reward/total/mean": series([1, 2, 3])})
    (line,) = plotting.draw(short).axes[0].get_lines()
    assert line.get_marker() == "o"


# --------------------------------------------------------------------------- reading and writing


def test_scalars_read_back_as_written(run_scalars):
    assert set(run_scalars) >= set(TRAINING_TAGS + VALIDATION_TAGS)
    assert run_scalars["actor/kl_loss"].steps == tuple(range(1, STEPS + 1))
    assert run_scalars["actor/kl_loss"].values[:2] == pytest.approx((9.01, 9.02))
    assert run_scalars["timing_s/save_checkpoint"].at(12) == 5.0 and run_scalars["timing_s/save_checkpoint"].at(1) == 0


def test_plot_writes_every_png_where_asked_from_a_parent_of_the_event_dir(tmp_path, capsys):
    event_dir = tmp_path / "tensorboard_log" / "diffugrpo" / "demo"
    write_run(event_dir)
    out = tmp_path / "figures"
    assert run_cli([str(tmp_path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.split() == [str(out / f"{name}.png") for name in EXPECTED_FIGURES]
    from matplotlib.image import imread

    for name in EXPECTED_FIGURES:
        with open(out / f"{name}.png", "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
        height, width, _ = imread(out / f"{name}.png").shape
        assert width >= 500 and height >= 300, name


def test_without_out_the_pngs_go_to_plots_in_the_current_directory_and_the_logs_stay_untouched(
    tmp_path, monkeypatch, capsys
):
    run_dir = tmp_path / "run"
    write_run(run_dir, steps=3, tags=["reward/total/mean"], timing=False, validation=False)
    before = sorted(run_dir.rglob("*"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert run_cli([str(run_dir)]) == 0
    assert capsys.readouterr().out.split() == ["plots/rewards.png"]
    assert (work / "plots" / "rewards.png").is_file()
    assert sorted(run_dir.rglob("*")) == before


def test_an_unwritable_out_is_a_one_line_error(tmp_path, capsys):
    write_run(tmp_path / "run", steps=2, tags=["reward/total/mean"], timing=False, validation=False)
    blocker = tmp_path / "taken"
    blocker.write_text("a file, not a directory")
    assert run_cli([str(tmp_path / "run"), "--out", str(blocker / "plots")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"diffugrpo plot: error: cannot write {blocker / 'plots'}: ")
    assert error.rstrip().endswith("choose a writable directory with --out DIR") and error.count("\n") == 1


def test_missing_or_ambiguous_logs_are_clear_errors(tmp_path, capsys):
    assert run_cli([str(tmp_path)]) == 2
    assert "no TensorBoard event files" in capsys.readouterr().err
    with pytest.raises(PlotError, match="does not exist"):
        plotting.find_event_dir(tmp_path / "nope")
    write_run(tmp_path / "a", steps=1)
    write_run(tmp_path / "b", steps=1)
    with pytest.raises(PlotError, match="holds event files of 2 runs; plot one of them") as error:
        plotting.find_event_dir(tmp_path)
    assert str(tmp_path / "a") in str(error.value) and str(tmp_path / "b") in str(error.value)


def test_a_run_without_known_metrics_names_what_it_found(tmp_path):
    write_run(tmp_path, steps=2, tags=["perf/throughput"], timing=False, validation=False)
    with pytest.raises(PlotError, match="scalar tags found: perf/throughput"):
        plotting.plot_run(tmp_path, tmp_path / "plots")
    assert not (tmp_path / "plots").exists()


def test_timing_legend_gives_each_stage_its_mean_and_share_of_the_step(specs):
    (axes,) = plotting.draw(specs["timing"]).axes
    legend = axes.get_legend()
    step_mean = STEP_SECONDS + sum(CHECKPOINT_SECONDS.values()) / STEPS  # 8.92 s
    assert legend.get_title().get_text() == f"mean per step: {step_mean:.2f} s"
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels[0] == "validation (after the step): 0.12 s each, 3 times"  # top of the stack, not a share
    assert labels[-1] == f"rollout: sampling: 5.00 s ({5.0 / step_mean:.0%})"
    assert f"checkpoint: 0.42 s ({10.0 / STEPS / step_mean:.0%})" in labels  # 2 checkpoints over 24 steps


def test_a_long_run_stacks_stepped_bands_with_the_same_stages_and_colours(tmp_path):
    write_run(tmp_path, steps=drawing.BARS_UP_TO_STEPS + 1, tags=[], validation=False)
    (timing,) = plotting.figure_specs(plotting.read_scalars(tmp_path))
    (axes,) = plotting.draw(timing).axes
    assert not axes.containers  # no bars
    entries = legend_entries(axes)
    stages = [line.label.split(":")[0] for line in timing.panels[0].lines]
    assert [label.split(":")[0] for label, _ in entries] == stages
    colors = [tuple(band.get_facecolor()[0]) for band in axes.collections]
    assert len(colors) == len(timing.panels[0].lines) and len(set(colors)) == len(colors)
