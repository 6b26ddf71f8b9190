"""The CPU demo's stages wire together: SFT -> held-out evaluation -> RL job -> evaluation -> plots and tables
(slow: starts the Ray-based RL job)."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from conftest import REPO, mbpp_file

DEMO = REPO / "examples" / "cpu_demo" / "run_demo.py"


@pytest.mark.slow
@pytest.mark.parametrize("fast_sampler", [False, True], ids=["plain-sampler", "fast-sampler"])
def test_demo_smoke_run_produces_every_artefact(tmp_path, fast_sampler):
    result = subprocess.run([sys.executable, str(DEMO), "--seeds", "0", "--smoke", "--out", str(tmp_path),
                             "--mbpp", str(mbpp_file("mbpp.jsonl")), *([] if fast_sampler else ["--plain-sampler"])],
                            capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    seed = tmp_path / "seed0"
    assert (seed / "sft" / "model.safetensors").is_file() and (seed / "sft" / "sft_config.json").is_file()
    # SFT was checked at steps 10 and 20 on held-apart train functions; 20 random-init steps pass nothing
    sft_record = json.loads((seed / "sft" / "timing.json").read_text())
    assert sft_record["steps"] == 20 and [check["step"] for check in sft_record["checks"]] == [10, 20]
    assert all(check["pass@1"] == 0.0 for check in sft_record["checks"])
    synthetic = tmp_path / "data" / "synthetic-wide"
    check_ids, train_ids = (set(pq.read_table(synthetic / name, columns=["extra_info"]).column(0).combine_chunks()
                                .field("task_id").to_pylist()) for name in ("sft_check.parquet", "train.parquet"))
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
