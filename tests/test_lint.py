"""The code passes the linter and the formatter as configured in ``pyproject.toml`` (``[tool.ruff]``: pyflakes,
pycodestyle, import order; ``ruff format``), and the public API passes mypy (``[tool.mypy]``). pre-commit runs the
same checks (``.pre-commit-config.yaml``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]


def test_ruff_format_would_change_nothing():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]


def test_the_public_api_type_checks():
    """mypy over the modules plugins and users import (``[tool.mypy] files`` in pyproject.toml)."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental"], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
