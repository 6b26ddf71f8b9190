"""The CPU demo's stages wire together: SFT -> held-out evaluation -> RL job -> evaluation -> plots and tables
(slow: starts the Ray-based RL job); without MBPP it says so and runs on the synthetic family alone (fast)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from conftest import MBPP_DIR_VAR, MINI_MBPP, REPO, mbpp_file

DEMO = REPO / "examples" / "cpu_demo" / "run_demo.py"


def load_demo():
    """The demo script as a module, to call its stages one by one."""
    spec = importlib.util.spec_from_file_location("cpu_demo_run", DEMO)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


demo = load_demo()


def fake_run(sources: tuple[str, ...]) -> dict:
    """One seed's results as run_seed returns them, with made-up values: the table's input shape."""
    report = {source: {"total": 0.5, "code": 0.25, "code_format": 0.0, "pass@1": 0.25} for source in sources}
    return {
        "sft": {**report, "seconds": 10.0},
        "rl": {**report, "seconds": 12.0},
        "sft_seconds": 100.0,
        "sft_steps": 20,
        "sft_checks": [],
        "rl_seconds": 50.0,
    }


def test_demo_without_mbpp_says_so_and_runs_on_synthetic_tasks_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(MBPP_DIR_VAR, raising=False)
    settings, _ = demo.parse_args(["--smoke", "--out", str(tmp_path)])
    assert settings.mbpp is None
    assert demo.mbpp_usable(settings.mbpp)
    said = capsys.readouterr().out.splitlines()
    assert said == [
        f"run_demo: no MBPP file ({MBPP_DIR_VAR} is not set), so the synthetic tasks only; "
        f"add MBPP with --mbpp path/to/mbpp.jsonl"
    ]
    data = demo.prepare_data(settings)
    synthetic = tmp_path / "data" / "synthetic-wide"
    assert data.train == (str(synthetic / "train.parquet"),)
    assert data.held_out == {"synthetic": str(synthetic / "validation.parquet")}
    assert all(pq.read_table(path).num_rows > 0 for path in (*data.train, *data.held_out.values(), data.sft_check))
    assert not (tmp_path / "data" / "mbpp").exists()
    command = demo.rl_command(settings, data, tmp_path / "sft", tmp_path / "rl", seed=0)
    assert f"data.train_files=[{synthetic / 'train.parquet'}]" in command
    assert f"data.val_files=[{synthetic / 'validation.parquet'}]" in command
    sources = (*data.held_out, "all")
    table = demo.results_table({0: fake_run(sources)}, sources)
    assert "| 0 | synthetic | pass@1 | 0.250 | 0.250 | +0.000 |" in table and "mbpp" not in table
    demo.summary_figure({0: fake_run(sources)}, sources, tmp_path / "held_out.png")
    assert (tmp_path / "held_out.png").stat().st_size > 0


def test_demo_reads_mbpp_from_the_environment_or_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(MBPP_DIR_VAR, str(tmp_path / "nowhere"))
    settings, _ = demo.parse_args([])
    assert settings.mbpp == tmp_path / "nowhere" / "mbpp.jsonl"
    assert not demo.mbpp_usable(settings.mbpp)  # named but missing: an error, not a silent fallback
    assert capsys.readouterr().err == (
        f"run_demo: MBPP file {settings.mbpp} does not exist; pass --mbpp path/to/mbpp.jsonl\n"
    )
    settings, _ = demo.parse_args(["--mbpp", str(MINI_MBPP), "--out", str(tmp_path / "out")])
    assert settings.mbpp == MINI_MBPP and demo.mbpp_usable(settings.mbpp)
    data = demo.prepare_data(settings)
    mbpp = tmp_path / "out" / "data" / "mbpp"
    assert data.train[0] == str(mbpp / "train.parquet") and list(data.held_out) == ["mbpp", "synthetic"]
    assert pq.read_table(data.held_out["mbpp"]).num_rows == 3  # the fixture's validation task_ids 511, 555, 600
    # SFT learns from both; RL prompts are the synthetic ones (MBPP gives this model no test signal) unless asked
    synthetic = str(tmp_path / "out" / "data" / "synthetic-wide" / "train.parquet")
    assert data.train == (str(mbpp / "train.parquet"), synthetic) and data.rl_train == (synthetic,)
    command = demo.rl_command(settings, data, tmp_path / "sft", tmp_path / "rl", seed=0)
    assert f"data.train_files=[{synthetic}]" in command and "actor_rollout_ref.actor.kl_loss_coef=0.01" in command
    both, _ = demo.parse_args(
        ["--mbpp", str(MINI_MBPP), "--out", str(tmp_path / "out"), "--rl-mbpp", "--rl-kl", "0.05"]
    )
    command = demo.rl_command(both, demo.prepare_data(both), tmp_path / "sft", tmp_path / "rl", seed=0)
    assert f"data.train_files=[{mbpp / 'train.parquet'},{synthetic}]" in command
    assert "actor_rollout_ref.actor.kl_loss_coef=0.05" in command


@pytest.mark.slow
@pytest.mark.parametrize("fast_sampler", [False, True], ids=["plain-sampler", "fast-sampler"])
def test_demo_smoke_run_produces_every_artefact(tmp_path, fast_sampler):
    result = subprocess.run(
        [
            sys.executable,
            str(DEMO),
            "--seeds",
            "0",
            "--smoke",
            "--out",
            str(tmp_path),
            "--mbpp",
            str(mbpp_file("mbpp.jsonl")),
            *([] if fast_sampler else ["--plain-sampler"]),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    seed = tmp_path / "seed0"
    assert (seed / "sft" / "model.safetensors").is_file() and (seed / "sft" / "sft_config.json").is_file()
    # SFT was checked at steps 10 and 20 on held-apart train functions; 20 random-init steps pass nothing
    sft_record = json.loads((seed / "sft" / "timing.json").read_text())
    assert sft_record["steps"] == 20 and [check["step"] for check in sft_record["checks"]] == [10, 20]
    assert all(check["pass@1"] == 0.0 for check in sft_record["checks"])
    synthetic = tmp_path / "data" / "synthetic-wide"
    check_ids, train_ids = (
        set(
            pq.read_table(synthetic / name, columns=["extra_info"])
            .column(0)
            .combine_chunks()
            .field("task_id")
            .to_pylist()
        )
        for name in ("sft_check.parquet", "train.parquet")
    )
    assert len(check_ids) == 96 and len(train_ids) == 3925 and not check_ids & train_ids
    assert (seed / "rl" / "ckpt" / "global_step_2" / "actor" / "huggingface" / "model.safetensors").is_file()
    command = (seed / "rl" / "command.txt").read_text()
    assert f"actor_rollout_ref.model.path={seed / 'sft'}" in command
    assert f"{tmp_path / 'data' / 'synthetic-wide' / 'train.parquet'}" in command  # the demo's default family
    assert ("actor_rollout_ref.rollout.engine_kwargs.diffusion.kv_cache=true" in command) == fast_sampler
    for stage in ("sft", "rl"):
        report = json.loads((seed / f"eval_{stage}.json").read_text())
        for source in ("mbpp", "synthetic", "all"):
            row = report[source]
            assert set(row) == {"total", "code", "code_format", "pass@1"}
            # the total is the training reward's weighting of its components
            assert row["total"] == pytest.approx(2.0 * row["code"] + 0.5 * row["code_format"])
        assert (seed / f"eval_{stage}" / "summary.json").is_file()
    assert (seed / "plots" / "rewards.png").is_file()
    assert (tmp_path / "figures" / "held_out_rewards.png").is_file()
    table = (tmp_path / "results.md").read_text()
    assert "| 0 | synthetic | pass@1 |" in table and "wall time per seed" in table
    assert "| 0 | 20 | 0.000 |" in table  # seed, SFT steps run, pass@1 of its last check
