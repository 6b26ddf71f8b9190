"""coupled_grpo's estimator and loss as training calls them (verl's registries, verl's ppo_loss), against
worked examples computed by hand."""

import math

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from verl.trainer.ppo import core_algos

from diffugrpo_plugin.integration import algorithm

algorithm.register()  # what `import verl` does through our entry point; idempotent


@pytest.fixture(scope="module")
def actor_config():
    """The actor config ``algorithm=coupled_grpo`` composes (clip 0.5 / 0.5, k3 KL, beta 0.05 on the tiny default)."""
    from verl.utils.config import omega_conf_to_dataclass

    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        config = compose(config_name="diffugrpo", overrides=["actor_rollout_ref.model.path=/unused"])
    return omega_conf_to_dataclass(config.actor_rollout_ref.actor)


def estimate(scores, groups, scale=False, length=3):
    """The registered estimator on rewards placed, as verl does, on each response's last token."""
    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores)
    mask = torch.ones(len(scores), length)
    mask[0, -1] = 0  # a shorter response: its reward still counts, its padding gets no advantage
    rewards[0, -2], rewards[0, -1] = rewards[0, -1], 0.0
    fn = core_algos.get_adv_estimator_fn("coupled_grpo")
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": scale})
    advantages, returns = fn(token_level_rewards=rewards, response_mask=mask, index=np.array(groups), config=config)
    assert torch.equal(advantages, returns)
    assert torch.all(advantages[mask == 0] == 0)
    return advantages[:, 0]


def test_leave_one_out_worked_example():
    # group "a": rewards 1, 0, 0, 1 -> r_i - mean(others): 1 - 1/3, 0 - 2/3, 0 - 2/3, 1 - 1/3
    # group "b": rewards 2, 0.5 -> 2 - 0.5, 0.5 - 2 ; group "c": a single sample -> no baseline, 0
    adv = estimate([1.0, 2.0, 0.0, 0.0, 0.5, 1.0, 7.0], ["a", "b", "a", "a", "b", "a", "c"])
    assert adv.tolist() == pytest.approx([2 / 3, 1.5, -2 / 3, -2 / 3, -1.5, 2 / 3, 0.0], abs=1e-6)


def test_scale_rewards_divides_by_the_unbiased_group_std_plus_trls_eps():
    adv = estimate([1.0, 0.0, 0.0, 1.0, 3.0, 3.0], ["g", "g", "g", "g", "h", "h"], scale=True)
    std = math.sqrt(4 * 0.25 / 3)  # unbiased std of (1, 0, 0, 1)
    expected = [a / (std + 1e-4) for a in (2 / 3, -2 / 3, -2 / 3, 2 / 3)] + [0.0, 0.0]  # equal rewards: 0 / eps
    assert adv.tolist() == pytest.approx(expected, abs=1e-5)


def policy_loss(actor_config, ratios, advantages):
    log_prob = torch.log(torch.tensor([ratios]))
    fn = core_algos.get_policy_loss_fn("coupled_grpo")
    return fn(
        old_log_prob=torch.zeros_like(log_prob),
        log_prob=log_prob,
        advantages=torch.tensor([advantages]),
        response_mask=torch.ones_like(log_prob, dtype=torch.bool),
        loss_agg_mode="token-mean",
        config=actor_config,
    )


def test_clipped_loss_worked_example_without_dual_clip(actor_config):
    # per token -min(r A, clip(r, 0.5, 1.5) A):
    #   r 1.8, A +1 -> -min(1.8, 1.5) = -1.5 (clipped)      r 0.2, A +1 -> -min(0.2, 0.5) = -0.2
    #   r 0.2, A -1 -> -min(-0.2, -0.5) = 0.5 (clipped)     r 1.2, A -2 -> -min(-2.4, -2.4) = 2.4
    #   r 5.0, A -1 -> -min(-5, -1.5) = 5: DiffuCoder's loss; verl's dual clip (3.0) would cap it at 3
    loss, metrics = policy_loss(actor_config, [1.8, 0.2, 0.2, 1.2, 5.0], [1.0, 1.0, -1.0, -2.0, -1.0])
    assert loss.item() == pytest.approx((-1.5 - 0.2 + 0.5 + 2.4 + 5.0) / 5, abs=1e-6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 5)
    assert metrics["actor/pg_clipfrac_lower"] == 0.0
    assert actor_config.clip_ratio_c == 3.0  # the user's config object is left as it was


def test_low_and_high_clip_are_separate(actor_config):
    import dataclasses

    config = dataclasses.replace(actor_config, clip_ratio_low=0.1, clip_ratio_high=0.2)
    loss, _ = policy_loss(config, [1.3, 0.7], [1.0, -1.0])
    assert loss.item() == pytest.approx((-1.2 + 0.9) / 2, abs=1e-6)  # 1 + 0.2 cap; 1 - 0.1 floor


def test_the_kl_training_adds_is_k3(actor_config):
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -2.0]])
    d = -0.5  # ref - logp
    k3 = core_algos.kl_penalty(logp, ref, actor_config.kl_loss_type)
    assert actor_config.use_kl_loss and actor_config.kl_loss_coef == 0.05
    assert k3[0].tolist() == pytest.approx([math.exp(d) - d - 1, 0.0], abs=1e-6)


def test_the_whole_loss_through_verls_ppo_loss(actor_config):
    """verl's ppo_loss (what the engine's update calls) with our config: token-mean of the clipped
    surrogate plus beta * k3 over the response mask, read from verl's unpadded layout."""
    from tensordict import TensorDict

    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    def nested(rows):
        return torch.nested.as_nested_tensor([torch.tensor(row) for row in rows], layout=torch.jagged)

    # sample 0: prompt of 2, response of 2 tokens (A = +1); sample 1: prompt of 1, response of 2, the second
    # after the EOS (response mask 0, A = -1). verl reads token p's log-prob at index p - 1.
    # ratios to the old policy (log-prob 0): 1 and 2 for sample 0, 0.5 (and 9, masked) for sample 1
    model_log_probs = [[0.0, math.log(1.0), math.log(2.0), 0.0], [math.log(0.5), math.log(9.0), 0.0]]
    data = TensorDict(
        {
            "prompts": nested([[5, 6], [7]]),
            "responses": nested([[8, 9], [10, 11]]),
            "response_mask": nested([[1, 1], [1, 0]]),
            "old_log_probs": nested([[0.0, 0.0], [0.0, 0.0]]),
            "advantages": nested([[1.0, 1.0], [-1.0, -1.0]]),
            "ref_log_prob": nested([[0.0, 0.0], [0.0, 0.0]]),
        },
        batch_size=2,
    )
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    loss, metrics = ppo_loss(actor_config, {"log_probs": nested(model_log_probs)}, data)
    # surrogate: -1, -min(2, 1.5) = -1.5, -min(-0.5, -0.5) = 0.5
    # k3 (ref = 0): d = -log r -> r^-1 + log r - 1: 0, 1/2 + log 2 - 1, 2 - log 2 - 1
    k3 = [0.0, 0.5 + math.log(2) - 1, 2 - math.log(2) - 1]
    expected = (-1 - 1.5 + 0.5) / 3 + 0.05 * sum(k3) / 3
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["actor/pg_clipfrac"].aggregate() == pytest.approx(1 / 3)
