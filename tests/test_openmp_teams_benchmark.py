"""benchmarks/openmp_teams.py runs its three conditions and prints one row each, with what it measured."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "openmp_teams.py"


@pytest.mark.slow
def test_the_benchmark_prints_each_condition_with_its_ratio_to_the_thread_alone():
    command = [sys.executable, str(BENCHMARK), "--rows", "2", "--tokens", "8", "--passes", "1", "--repeats", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {line[:22].strip(): line[22:].split() for line in result.stdout.splitlines()[2:]}
    assert set(rows) == {"alone", "other team alive", "other team released"}
    assert rows["alone"][2] == "1.00"  # the baseline over itself
    for milliseconds, _, ratio, cores in rows.values():
        assert float(milliseconds) > 0 and float(ratio) > 0 and float(cores) > 0
