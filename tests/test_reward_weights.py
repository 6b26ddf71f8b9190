"""Learned reward weights: the fit against hand-computed gradient steps, what it learns from correctness, and
that the totals and the state behave."""

import math

import numpy as np
import pytest

from diffugrpo_plugin import reward_weights
from diffugrpo_plugin.reward_weights import LearnedWeights
from diffugrpo_plugin.rewards import RewardConfigError, RewardSpec

WEIGHTS = {"code": 2.0, "code_format": 0.5}


def test_the_weights_start_as_the_fixed_ones():
    learned = LearnedWeights(WEIGHTS, "code")
    assert learned.effective_weights() == pytest.approx(WEIGHTS)
    samples = [{"code": 1.0, "code_format": 1.0}, {"code": None, "code_format": 0.0}, {"code": 0.0}]
    assert learned.totals(samples) == pytest.approx([2.5, 0.0, 0.0])  # None and absent components count 0


def test_one_gradient_step_by_hand(monkeypatch):
    """Rows x = (1, 1, 1, 1), y = (1, 0, 1, 0), from a = 1, b = 0: residual (0, 1, 0, 1), loss 0.5 + 0.01 x 1;
    d loss / d a = 2 x (x . r) / 4 + 2 x 0.01 x a = 1.02, d softplus / d theta = sigmoid(theta0) = 1 - 1/e;
    d loss / d b = 2 x mean(r) = 1."""
    monkeypatch.setattr(reward_weights, "STEPS_PER_UPDATE", 1)
    learned = LearnedWeights(WEIGHTS, "code")
    theta0 = learned.theta[0]
    loss = learned.fit([{"code": y, "code_format": 1.0} for y in (1.0, 0.0, 1.0, 0.0)])
    assert loss == pytest.approx(0.51)
    assert learned.theta[0] == pytest.approx(theta0 - 0.5 * 1.02 * (1 - 1 / math.e))
    assert learned.bias == pytest.approx(-0.5)


def fitted(pairs, steps=200):
    learned = LearnedWeights(WEIGHTS, "code")
    for _ in range(steps):
        learned.fit([{"code": y, "code_format": x} for x, y in pairs])
    return learned.scales()["code_format"]


def test_an_auxiliary_that_tracks_correctness_keeps_its_weight():
    # format right exactly when the tests pass: it predicts a unit of correctness per unit of itself
    assert fitted([(1.0, 1.0), (0.0, 0.0)] * 4) > 0.95


def test_an_auxiliary_every_completion_gets_loses_its_weight():
    # the format is always right, the tests pass half the time: the intercept explains it as well as the format
    # does, and only the ridge term decides between them, so the weight falls slowly (a constant reward moves no
    # group-relative advantage anyway)
    pairs = [(1.0, 1.0), (1.0, 0.0)] * 4
    assert fitted(pairs, steps=50) > fitted(pairs, steps=200) and fitted(pairs, steps=200) < 0.2


def test_an_auxiliary_against_correctness_loses_its_weight():
    assert fitted([(0.0, 1.0), (1.0, 0.0)] * 4) < 0.05


def test_the_correctness_weight_never_moves_and_rows_without_it_teach_nothing():
    learned = LearnedWeights(WEIGHTS, "code")
    assert learned.fit([{"code": None, "code_format": 1.0}]) is None
    assert learned.updates == 0
    for _ in range(100):
        learned.fit([{"code": 1.0, "code_format": 1.0}, {"code": 0.0, "code_format": 1.0}])
    assert learned.effective_weights()["code"] == 2.0


def test_state_round_trip_and_mismatch():
    learned = LearnedWeights(WEIGHTS, "code")
    learned.fit([{"code": 1.0, "code_format": 0.0}, {"code": 0.0, "code_format": 1.0}])
    copy = LearnedWeights(WEIGHTS, "code")
    copy.load_state_dict(learned.state_dict())
    assert np.array_equal(copy.theta, learned.theta) and copy.bias == learned.bias and copy.updates == 1
    other = LearnedWeights({"code": 2.0, "syntax": 0.5}, "code")
    with pytest.raises(ValueError, match="resume with the same reward_funcs"):
        other.load_state_dict(learned.state_dict())


def test_the_rewards_config_takes_learned_and_needs_its_correctness_reward():
    assert RewardSpec.from_config({"aggregation": "learned"}).aggregation == "learned"
    with pytest.raises(RewardConfigError, match="aggregation 'learned' needs its gate_reward 'code'"):
        RewardSpec.from_config({"reward_funcs": {"code_format": 1.0}, "aggregation": "learned"})
