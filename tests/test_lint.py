"""The code passes the linter as configured in ``pyproject.toml`` (``[tool.ruff]``): pyflakes, pycodestyle and import
order. pre-commit runs the same check (``.pre-commit-config.yaml``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
