"""benchmarks/masker_ablation.py's reading of a run and its table, on TensorBoard scalars written here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ablation():
    spec = importlib.util.spec_from_file_location("masker_ablation", REPO / "benchmarks" / "masker_ablation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def write_run(
    directory: Path, pass_at_1: list[float], reward: list[float], code: list[float], redrawn: list[tuple] = ()
) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(directory))
    for step, (p, r) in zip((0, 10, 20), zip(pass_at_1, reward)):
        writer.add_scalar("val-core/synthetic/acc/mean@8", p, step)
        writer.add_scalar("val-core/synthetic/acc/best@8/mean", 1.0, step)  # not the held-out mean
        writer.add_scalar("val-aux/synthetic/reward/mean@8", r, step)
    for step, value in enumerate(code, start=1):
        writer.add_scalar("reward/code/mean", value, step)
    for step, (first, last) in enumerate(redrawn, start=len(code) - len(redrawn) + 1):
        writer.add_scalar("learning/code/redrawn_first_draw", first, step)
        writer.add_scalar("learning/code/redrawn_last_draw", last, step)
    writer.close()


def test_a_run_is_read_as_first_and_last_validation_and_step_windows(ablation, tmp_path):
    code = [0.1, 0.2, 0.3, 0.4, float("nan"), 0.5, 0.6, 0.7, 0.8, 0.9]
    write_run(tmp_path, [0.25, 0.3, 0.5], [1.0, 1.1, 1.5], code, redrawn=[(0.3, 0.35), (0.25, 0.4)])
    result = ablation.summarise(tmp_path)
    assert result["pass@1 before"] == pytest.approx(0.25) and result["pass@1 after"] == pytest.approx(0.5)
    assert result["total reward before"] == pytest.approx(1.0) and result["total reward after"] == pytest.approx(1.5)
    assert result["code first"] == pytest.approx((0.1 + 0.2 + 0.3 + 0.4) / 4)  # the NaN step is left out
    assert result["code last"] == pytest.approx((0.6 + 0.7 + 0.8 + 0.9) / 4)
    # the prompts drawn again: the run's last values (the means so far, over every prompt drawn again)
    assert (result["code redrawn first"], result["code redrawn last"]) == pytest.approx((0.25, 0.4))


def test_a_run_from_before_the_redrawn_metrics_is_read_without_them(ablation, tmp_path):
    write_run(tmp_path, [0.25, 0.5], [1.0, 1.5], [0.1, 0.2])
    result = ablation.summarise(tmp_path)
    assert "code redrawn first" not in result
    assert ablation.table({"coupled": {0: {**result, "seconds": 1.0}}}).splitlines()[2].endswith("| - |")


def test_a_run_without_validation_says_which_setting_to_check(ablation, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    writer.add_scalar("reward/code/mean", 0.5, 1)
    writer.close()
    with pytest.raises(SystemExit, match=r"lacks val-core/synthetic/acc/mean@\\d\+, .*trainer.val_before_train"):
        ablation.summarise(tmp_path)


def test_the_table_gives_mean_and_spread_over_seeds_then_every_run(ablation):
    run = {
        "pass@1 before": 0.2,
        "pass@1 after": 0.3,
        "total reward before": 1.0,
        "total reward after": 1.2,
        "code first": 0.1,
        "code last": 0.2,
        "code redrawn first": 0.3,
        "code redrawn last": 0.4,
        "seconds": 300.0,
    }
    other = {**run, "pass@1 after": 0.5, "total reward after": 1.6, "code redrawn last": 0.6}
    text = ablation.table({"coupled": {0: run, 1: other}})
    summary = text.splitlines()[2]
    # changes +0.1 and +0.3: mean +0.2, sample standard deviation 0.141, standard error 0.141 / sqrt(2) = 0.100
    assert summary.startswith("| coupled | 0 1 | 0.200 ± 0.000 -> 0.400 ± 0.141 | +0.200 ± 0.100 |")
    assert summary.endswith("| 0.300 ± 0.000 -> 0.500 ± 0.141 | - | - | - | - |")  # no step time or memory logged
    assert "| coupled | 1 | 0.200 -> 0.500 | 1.000 -> 1.600 | 0.100 -> 0.200 | 0.300 -> 0.600 | 300 |" in text


def test_the_d1_runs_compose_to_d1s_masker_with_its_options_only(ablation, tmp_path):
    from hydra import compose, initialize_config_module

    overrides = [part for part in ablation.run_command("d1", 0, tmp_path, []) if part.startswith(("actor_", "~actor_"))]
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        job = compose(config_name="diffugrpo", overrides=overrides)
    diffusion = job.actor_rollout_ref.model.diffusion
    assert (diffusion.masker, dict(diffusion.masker_kwargs)) == ("d1", {"p_mask_prompt": 0.15})


def test_each_run_changes_only_the_masker_and_the_seeds(ablation, tmp_path):
    coupled = ablation.run_command("coupled", 1, tmp_path, ["trainer.total_training_steps=8"])
    d1 = ablation.run_command("d1", 1, tmp_path, ["trainer.total_training_steps=8"])
    assert [part for part in d1 if part not in coupled] == [
        "actor_rollout_ref.model.diffusion.masker=d1",
        "~actor_rollout_ref.model.diffusion.masker_kwargs.t_range",
        "actor_rollout_ref.model.diffusion.masker_kwargs.p_mask_prompt=0.15",
        "trainer.experiment_name=ablation_d1_seed1",
    ]
    assert [part for part in coupled if part not in d1] == ["trainer.experiment_name=ablation_coupled_seed1"]
    assert {"data.seed=1", "actor_rollout_ref.rollout.seed=1", "actor_rollout_ref.model.diffusion.mask_seed=1"} <= set(
        d1
    )
    assert coupled[-1] == "trainer.total_training_steps=8"


def test_step_time_leaves_out_the_first_step_and_memory_is_the_largest(ablation, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    write_run(tmp_path, [0.2, 0.3, 0.4], [1.0, 1.1, 1.2], [0.1, 0.2, 0.3, 0.4])
    writer = SummaryWriter(str(tmp_path))
    for step, (seconds, memory) in enumerate([(30.0, 1.5), (2.0, 2.5), (4.0, 2.0)], start=1):
        writer.add_scalar("perf/time_per_step", seconds, step)
        writer.add_scalar("perf/max_memory_allocated_gb", memory, step)
    writer.close()
    result = ablation.summarise(tmp_path)
    assert result["step seconds"] == pytest.approx(3.0)  # (2 + 4) / 2: the first step also starts the workers
    assert result["memory GiB"] == pytest.approx(2.5)
    coupled = {**result, "step seconds": 2.0, "memory GiB": 2.0, "seconds": 50.0}
    text = ablation.table({"coupled": {0: coupled}, "spg": {0: {**result, "seconds": 60.0}}})
    assert text.splitlines()[2].endswith("| 2.000 | x1.00 | 2.000 | x1.00 |")
    assert text.splitlines()[3].endswith("| 3.000 | x1.50 | 2.500 | x1.25 |")  # 3 / 2 and 2.5 / 2


@pytest.mark.parametrize("name", ["wd1", "spg", "ebpo", "tracerl"])
def test_an_estimator_run_is_its_algorithm_on_the_same_job(ablation, tmp_path, name):
    coupled = ablation.run_command("coupled", 1, tmp_path, [])
    other = ablation.run_command(name, 1, tmp_path, [])
    assert [part for part in other if part not in coupled] == [
        f"algorithm={name}",
        f"trainer.experiment_name=ablation_{name}_seed1",
    ]
