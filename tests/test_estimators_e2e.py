"""Each estimator trains the default job end to end on CPU, selected the verl way (slow: whole training runs)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.ray]  # the default job: Ray, code rewards


def metric_values(log: str, name: str) -> list[float]:
    """Every logged value of one metric in verl's per-step dump (``name:value``)."""
    return [float(value) for value in re.findall(rf"(?<![\w/]){re.escape(name)}:(-?[\d.e+-]+|nan|inf)", log)]


@pytest.mark.parametrize("name", ["wd1", "spg", "ebpo", "tracerl"])
def test_the_estimator_trains_the_default_job(tmp_path, name):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main",
            f"algorithm={name}",
            "diffugrpo.verbose=true",
            "trainer.total_training_steps=2",
            "trainer.save_freq=-1",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    losses = metric_values(log, "actor/pg_loss")
    norms = metric_values(log, "actor/grad_norm")
    assert len(losses) == 2 and len(norms) == 2, log[-3000:]
    assert all(math.isfinite(value) for value in losses + norms)
    assert any(value > 0 for value in norms)  # the estimator's loss reached the weights
