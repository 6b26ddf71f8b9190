"""Leave-one-out advantages and the clipped loss on worked examples computed by hand."""

import math

import pytest
import torch

from diffugrpo_plugin.advantages import leave_one_out_advantages
from diffugrpo_plugin.losses import clipped_surrogate, coupled_grpo_loss, k3_kl


def test_leave_one_out_worked_example():
    # group "a": rewards 1, 0, 0, 1 -> r_i - mean(others): 1 - 1/3, 0 - 2/3, 0 - 2/3, 1 - 1/3
    # group "b": rewards 2, 0.5 -> 2 - 0.5, 0.5 - 2 ; group "c": a single sample -> no baseline, 0
    scores = torch.tensor([1.0, 2.0, 0.0, 0.0, 0.5, 1.0, 7.0])
    groups = ["a", "b", "a", "a", "b", "a", "c"]
    adv = leave_one_out_advantages(scores, groups)
    expected = [2 / 3, 1.5, -2 / 3, -2 / 3, -1.5, 2 / 3, 0.0]
    assert adv.tolist() == pytest.approx(expected, abs=1e-6)


def test_leave_one_out_scaled_by_unbiased_group_std():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv = leave_one_out_advantages(scores, [0, 0, 0, 0], scale_by_std=True, eps=1e-4)
    std = math.sqrt(4 * 0.25 / 3)  # unbiased std of (1, 0, 0, 1)
    expected = [a / (std + 1e-4) for a in (2 / 3, -2 / 3, -2 / 3, 2 / 3)]
    assert adv.tolist() == pytest.approx(expected, abs=1e-6)


def test_all_equal_rewards_give_zero_advantage():
    assert leave_one_out_advantages(torch.tensor([0.3] * 5), [1] * 5, scale_by_std=True).abs().max() == 0


def test_clipped_surrogate_worked_example():
    # ratio e^{log 1.8}=1.8 with A=+1, eps_high 0.5 -> clipped at 1.5: loss -1.5, clipped
    # ratio 0.2 with A=+1 -> min(0.2, 0.5) = 0.2: loss -0.2, not clipped (unclipped is smaller)
    # ratio 0.2 with A=-1 -> min(-0.2, -0.5) = -0.5: loss 0.5, clipped
    # ratio 1.2 with A=-2, eps 0.5 -> min(-2.4, -2.4): loss 2.4, not clipped
    logp = torch.log(torch.tensor([[1.8, 0.2, 0.2, 1.2]]))
    old = torch.zeros_like(logp)
    adv = torch.tensor([[1.0, 1.0, -1.0, -2.0]])
    loss, clipped = clipped_surrogate(logp, old, adv, eps_low=0.5, eps_high=0.5)
    assert loss[0].tolist() == pytest.approx([-1.5, -0.2, 0.5, 2.4], abs=1e-6)
    assert clipped[0].tolist() == [True, False, True, False]


def test_separate_low_and_high_clip():
    logp = torch.log(torch.tensor([[1.3, 0.7]]))
    loss, _ = clipped_surrogate(logp, torch.zeros_like(logp), torch.tensor([[1.0, -1.0]]), eps_low=0.1, eps_high=0.2)
    assert loss[0].tolist() == pytest.approx([-1.2, 0.9], abs=1e-6)  # 1+0.2 cap; 1-0.1 floor


def test_k3_by_hand():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    d = -0.5  # ref - logp
    assert k3_kl(logp, ref).item() == pytest.approx(math.exp(d) - d - 1)
    assert k3_kl(ref, ref).item() == 0


def test_full_loss_token_mean_worked_example():
    # two tokens of sample 0 (A=1), one of sample 1 (A=-1); sample 1's second token is padding
    logp = torch.log(torch.tensor([[1.0, 2.0], [0.5, 9.0]]))
    old = torch.zeros(2, 2)
    ref = torch.log(torch.tensor([[1.0, 1.0], [1.0, 1.0]]))
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, metrics = coupled_grpo_loss(logp, old, ref, torch.tensor([1.0, -1.0]), mask, 0.5, 0.5, beta=0.1)
    # surrogate: -1, -min(2, 1.5)=-1.5, -min(-0.5, -0.5)=0.5
    # k3: token0 d=0 -> 0; token1 d=-log2 -> 0.5 - (-log 2) - 1 = log2 - 0.5; token2 d=log2 -> 2 - log2 - 1
    k3 = [0.0, math.log(2) - 0.5, 1 - math.log(2)]
    expected = ((-1 + 0.1 * k3[0]) + (-1.5 + 0.1 * k3[1]) + (0.5 + 0.1 * k3[2])) / 3
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(1 / 3)
    assert metrics["kl"] == pytest.approx(sum(k3) / 3, abs=1e-6)


def test_beta_without_reference_is_a_clear_error():
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="ref_logp"):
        coupled_grpo_loss(x, x, None, torch.ones(1), torch.ones(1, 1), beta=0.01)
    loss, _ = coupled_grpo_loss(x, x, None, torch.ones(1), torch.ones(1, 1), beta=0.0)
    assert loss.item() == pytest.approx(-1.0)

