"""``diffugrpo plot``: figures chosen from a run's TensorBoard tags, read back from event files
written here with the writer verl's tracking uses, and drawn as PNGs."""

from __future__ import annotations

import argparse
import math

import pytest

from diffugrpo_plugin import plotting
from diffugrpo_plugin.cli import plot as plot_cli
from diffugrpo_plugin.plotting import PlotError

STEPS = 25
VERL_TAGS = ["critic/score/mean", "reward/total/mean", "reward/code/mean", "reward/code_format/mean",
             "reward/code/none_fraction", "reward/efficiency/none_fraction", "actor/kl_loss", "actor/pg_clipfrac",
             "actor/entropy", "response_length/mean", "response_length/min", "response_length/max",
             "timing_s/gen", "timing_s/update_actor", "timing_s/step"]
VALIDATION_TAGS = ["val-core/mbpp/reward/mean@1", "val-aux/mbpp/pass@1"]
EXPECTED_FIGURES = ["rewards.png", "reward_none_fraction.png", "policy.png", "response_length.png",
                    "validation.png", "timing.png"]


def value(tag: str, step: int) -> float:
    """A distinct, hand-checkable value per tag and step."""
    return VERL_TAGS.index(tag) + step / 100 if tag in VERL_TAGS else step / 100


def write_run(directory, steps: int = STEPS, tags=VERL_TAGS, nan_tag: str | None = None) -> None:
    from torch.utils.tensorboard import SummaryWriter  # what verl's tensorboard tracking writes with

    writer = SummaryWriter(str(directory))
    for step in range(1, steps + 1):
        for tag in tags:
            writer.add_scalar(tag, math.nan if tag == nan_tag and step == 3 else value(tag, step), step)
        if step % 5 == 0:
            for tag in VALIDATION_TAGS:
                writer.add_scalar(tag, value(tag, step), step)
    writer.close()


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="diffugrpo")
    plot_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plot", *argv])
    return args.func(args)


# --------------------------------------------------------------------------- choosing figures


def test_figures_cover_each_reward_component_the_total_policy_length_validation_and_timing():
    specs = {spec.name: spec for spec in plotting.figure_specs(VERL_TAGS + VALIDATION_TAGS)}
    assert list(specs) == [name.removesuffix(".png") for name in EXPECTED_FIGURES]
    rewards = specs["rewards"].panels
    assert [panel.title for panel in rewards] == ["total reward", "reward component: code",
                                                  "reward component: code_format"]
    assert rewards[0].lines == (("critic/score/mean", "critic/score/mean"), ("reward/total/mean", "reward/total/mean"))
    assert rewards[1].lines == (("reward/code/mean", "code"),)
    (none_panel,) = specs["reward_none_fraction"].panels
    assert none_panel.lines == (("reward/code/none_fraction", "code"), ("reward/efficiency/none_fraction", "efficiency"))
    assert none_panel.unit_range
    assert [panel.lines[0][0] for panel in specs["policy"].panels] == ["actor/kl_loss", "actor/pg_clipfrac",
                                                                       "actor/entropy"]
    (length,) = specs["response_length"].panels
    assert length.band == ("response_length/min", "response_length/max")
    validation = specs["validation"].panels
    assert [panel.title for panel in validation] == ["val-aux/mbpp/pass@1", "val-core/mbpp/reward/mean@1"]
    assert validation[0].unit_range and not validation[1].unit_range
    (timing,) = specs["timing"].panels
    assert timing.lines == (("timing_s/gen", "gen"), ("timing_s/step", "whole step"),
                            ("timing_s/update_actor", "update_actor"))
    for spec in specs.values():
        for panel in spec.panels:
            assert panel.title and panel.ylabel and panel.lines


def test_only_the_figures_a_run_logged_metrics_for():
    assert [spec.name for spec in plotting.figure_specs(["reward/syntax/mean", "actor/kl_loss"])] == ["rewards",
                                                                                                     "policy"]
    (rewards,) = [spec for spec in plotting.figure_specs(["reward/total/mean", "reward/total/none_fraction"])]
    assert [panel.title for panel in rewards.panels] == ["total reward"]  # 'total' is not a component
    assert plotting.figure_specs(["perf/throughput", "training/epoch"]) == []
    (length,) = plotting.figure_specs(["response_length/mean"])
    assert length.panels[0].band is None


def test_trailing_mean_by_hand():
    means = plotting.trailing_mean([1.0, 2.0, 3.0, math.nan, 5.0], window=2)
    assert means == [1.0, 1.5, 2.5, 3.0, 5.0]
    assert math.isnan(plotting.trailing_mean([math.nan], window=3)[0])


# --------------------------------------------------------------------------- reading and drawing


def test_scalars_read_back_as_written(tmp_path):
    write_run(tmp_path)
    scalars = plotting.read_scalars(tmp_path)
    assert set(scalars) == set(VERL_TAGS + VALIDATION_TAGS)
    assert scalars["actor/kl_loss"].steps == tuple(range(1, STEPS + 1))
    assert scalars["actor/kl_loss"].values[:2] == pytest.approx((6.01, 6.02))
    assert scalars["val-aux/mbpp/pass@1"].steps == (5, 10, 15, 20, 25)


def test_plot_writes_every_expected_png_from_a_parent_of_the_event_dir(tmp_path, capsys):
    event_dir = tmp_path / "tensorboard_log" / "diffugrpo" / "demo"
    write_run(event_dir, nan_tag="reward/code/mean")
    out = tmp_path / "figures"
    assert run_cli([str(tmp_path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / name) for name in EXPECTED_FIGURES]
    from matplotlib.image import imread

    for name in EXPECTED_FIGURES:
        with open(out / name, "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
        height, width, _ = imread(out / name).shape
        assert width >= 500 and height >= 300, name
    rewards_height, rewards_width, _ = imread(out / "rewards.png").shape
    assert rewards_width > 2 * rewards_height  # three panels side by side


def test_plots_go_next_to_the_events_by_default(tmp_path):
    write_run(tmp_path, steps=3, tags=["reward/code/mean"])
    assert plotting.plot_run(tmp_path) == [tmp_path / "plots" / "rewards.png"]


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
    write_run(tmp_path, steps=2, tags=["perf/throughput"])
    with pytest.raises(PlotError, match="scalar tags found: perf/throughput"):
        plotting.plot_run(tmp_path)
    assert not (tmp_path / "plots").exists()
