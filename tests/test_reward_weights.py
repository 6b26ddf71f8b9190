"""Learned reward weights: within-group correlations against hand-computed cases, what the fit learns, the
totals and the state."""

import math

import numpy as np
import pytest

from diffugrpo_plugin.rewards import learned_weights as reward_weights
from diffugrpo_plugin.rewards.learned_weights import LearnedWeights
from diffugrpo_plugin.rewards.spec import RewardConfigError, RewardSpec

WEIGHTS = {"code": 2.0, "code_format": 0.5}


def step(learned, *groups):
    """One step: each group a list of (code_format, code) pairs of one prompt's completions."""
    samples = [{"code": y, "code_format": x} for group in groups for x, y in group]
    ids = [i for i, group in enumerate(groups) for _ in group]
    return learned.fit(samples, ids)


def test_the_weights_start_as_the_fixed_ones():
    learned = LearnedWeights(WEIGHTS, "code")
    assert learned.effective_weights() == pytest.approx(WEIGHTS)
    samples = [{"code": 1.0, "code_format": 1.0}, {"code": None, "code_format": 0.0}, {"code": 0.0}]
    assert learned.totals(samples) == pytest.approx([2.5, 0.0, 0.0])  # None and absent components count 0


def test_the_within_group_correlation_by_hand():
    """Group A: format (1, 0), code (1, 0): deviations (.5, -.5) each, so xy = xx = yy = .5. Group B: format (1, 1)
    (no deviation), code (1, 0): yy += .5. rho = .5 / sqrt(.5 x 1.0) = 1/sqrt(2)."""
    learned = LearnedWeights(WEIGHTS, "code")
    assert step(learned, [(1.0, 1.0), (0.0, 0.0)], [(1.0, 1.0), (1.0, 0.0)]) == 2
    assert learned.scales()["code_format"] == pytest.approx(1 / math.sqrt(2))
    assert learned.effective_weights()["code_format"] == pytest.approx(0.5 / math.sqrt(2))
    # the next step first decays the sums by DECAY: xy = .45 + (-.5), xx = .45 + .5, yy = .9 + .5
    step(learned, [(1.0, 0.0), (0.0, 1.0)])
    xy, xx, yy = 0.5 * reward_weights.DECAY - 0.5, 0.5 * reward_weights.DECAY + 0.5, reward_weights.DECAY + 0.5
    assert learned.scales()["code_format"] == pytest.approx(max(0.0, xy / math.sqrt(xx * yy)))


def test_an_auxiliary_that_tells_passing_completions_apart_keeps_its_weight():
    learned = LearnedWeights(WEIGHTS, "code")
    for _ in range(5):
        step(learned, [(1.0, 1.0), (0.0, 0.0), (1.0, 1.0)], [(0.5, 0.0), (1.0, 1.0)])
    assert learned.scales()["code_format"] > 0.9


def test_easy_and_hard_prompts_do_not_prop_up_an_auxiliary_unrelated_within_groups():
    """Easy prompts pass and score high on the auxiliary, hard ones fail and score low, but inside each group the
    auxiliary is unrelated to passing: only within-group differences reach the advantage, so it gets no weight."""
    learned = LearnedWeights(WEIGHTS, "code")
    easy = [(0.9, 1.0), (0.7, 1.0), (0.9, 0.0), (0.7, 0.0)]
    hard = [(0.3, 1.0), (0.1, 1.0), (0.3, 0.0), (0.1, 0.0)]
    for _ in range(5):
        step(learned, easy, hard)
    assert learned.scales()["code_format"] == pytest.approx(0.0, abs=1e-12)


def test_an_auxiliary_against_correctness_loses_its_weight_and_units_do_not_matter():
    learned = LearnedWeights(WEIGHTS, "code")
    step(learned, [(0.0, 1.0), (1.0, 0.0)])
    assert learned.scales()["code_format"] == 0.0
    scaled = LearnedWeights(WEIGHTS, "code")
    step(scaled, [(10.0, 1.0), (0.0, 0.0)], [(7.0, 1.0), (-3.0, 0.0)])  # a reward on another scale, tracking code
    assert scaled.scales()["code_format"] == pytest.approx(1.0)


def test_what_teaches_nothing_changes_nothing():
    learned = LearnedWeights(WEIGHTS, "code")
    # every completion of a prompt gets the same format; a group of one; no correctness; a non-finite value
    assert step(learned, [(1.0, 1.0), (1.0, 0.0)]) == 1  # code varied: the group counts, format explains none of it
    fresh = LearnedWeights(WEIGHTS, "code")
    assert step(fresh, [(1.0, 1.0)], [(1.0, None), (0.0, None)], [(math.inf, 1.0), (0.0, 0.0)]) == 0
    assert fresh.scales()["code_format"] == 1.0 and fresh.updates == 1
    for _ in range(20):
        step(learned, [(1.0, 1.0), (0.0, 0.0)])
    assert learned.effective_weights()["code"] == 2.0  # the correctness weight never moves


def test_state_round_trip_and_mismatch():
    learned = LearnedWeights(WEIGHTS, "code")
    step(learned, [(1.0, 1.0), (0.0, 0.0)], [(0.0, 1.0), (1.0, 0.0), (1.0, 1.0)])
    copy = LearnedWeights(WEIGHTS, "code")
    copy.load_state_dict(learned.state_dict())
    assert copy.scales() == learned.scales() and copy.updates == 1
    assert np.array_equal(copy.sum_xy, learned.sum_xy)
    other = LearnedWeights({"code": 2.0, "syntax": 0.5}, "code")
    with pytest.raises(ValueError, match="resume with the same reward_funcs"):
        other.load_state_dict(learned.state_dict())


@pytest.mark.sandbox
def test_the_rewards_config_takes_learned_and_needs_its_correctness_reward():
    assert RewardSpec.from_config({"aggregation": "learned"}).aggregation == "learned"
    with pytest.raises(RewardConfigError, match="aggregation 'learned' needs its gate_reward 'code'"):
        RewardSpec.from_config({"reward_funcs": {"code_format": 1.0}, "aggregation": "learned"})
