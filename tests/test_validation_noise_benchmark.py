"""benchmarks/validation_noise.py's standard errors of a change between two validations, on hand-computed cases."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def noise():
    spec = importlib.util.spec_from_file_location("validation_noise", REPO / "benchmarks" / "validation_noise.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_same_draws_under_the_same_policy_have_no_paired_noise_and_the_unpaired_sum_both_variances(noise):
    outcomes = [[1.0, 0.0, 1.0, 0.0]]  # one task, 4 samples: sample variance 1/3
    assert noise.standard_error(outcomes, outcomes, paired=True) == 0.0
    # (1/3 + 1/3) / 4 samples, one task
    assert noise.standard_error(outcomes, outcomes, paired=False) == pytest.approx((2 / 3 / 4) ** 0.5)


def test_the_paired_error_sums_each_tasks_variance_of_the_differences(noise):
    after = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    before = [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]
    # task 1: differences 1, 0, 0 (variance 1/3); task 2: 0, 1, 0 (1/3); each over 3 samples, then over 2 tasks
    assert noise.standard_error(after, before, paired=True) == pytest.approx((2 * (1 / 3) / 3) ** 0.5 / 2)
    # unpaired: task 1 variances 1/3 + 1/3, task 2 0 + 1/3
    assert noise.standard_error(after, before, paired=False) == pytest.approx(((2 / 3 + 1 / 3) / 3) ** 0.5 / 2)
    assert noise.mean(after) == pytest.approx(5 / 6)
