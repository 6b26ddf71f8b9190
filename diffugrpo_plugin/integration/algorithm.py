"""coupled_grpo's advantage estimator and policy loss, registered in verl's core_algos registries.

Both are verl's own math with one difference each, the one DiffuCoder's recipe needs:

* **advantage**: verl's vectorised RLOO, ``A_i = r_i - mean(r_j, j != i)`` within a prompt's group
  (a group of one gets 0). What verl's RLOO lacks: with ``algorithm.norm_adv_by_std_in_grpo``
  (DiffuCoder's ``scale_rewards``) it is divided by the group's unbiased std plus TRL's 1e-4.
* **policy loss**: verl's vanilla PPO loss (its clamp of the log-ratio to [-20, 20], ``agg_loss``,
  metrics) with ``clip_ratio_low`` / ``clip_ratio_high``, minus verl's dual clip, which
  DiffuCoder's loss does not have.

The KL term is verl's (``actor.use_kl_loss=True``, ``kl_loss_type=low_var_kl``, which is k3
clamped to [-10, 10]); the masks and coupled log-probs the loss sees come from our engine.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from verl.trainer.ppo import core_algos
from verl.utils.groupwise import as_torch_index, group_mean_std

NAME = "coupled_grpo"
TRL_STD_EPS = 1e-4
NO_DUAL_CLIP = 1e10
"""A dual-clip bound verl's loss can never reach: above exp(20), the largest ratio verl's clamp lets through."""


def compute_coupled_grpo_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray, config=None, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """Leave-one-out advantage per prompt group, broadcast over the response tokens.

    token_level_rewards, response_mask: [B, T]; index: [B] group ids (verl's ``uid``).
    Returns (advantages, returns), both [B, T].
    """
    advantages, _ = core_algos.compute_rloo_vectorized_outcome_advantage(token_level_rewards, response_mask, index)
    if config is not None and config.get("norm_adv_by_std_in_grpo", False):
        with torch.no_grad():
            scores = token_level_rewards.sum(dim=-1)  # [B]
            groups = as_torch_index(index, device=scores.device)  # [B]
            _, std, _ = group_mean_std(scores, groups, eps=0.0, device=scores.device)  # [G]
            advantages = advantages / (std[groups] + TRL_STD_EPS).to(advantages.dtype)[:, None]  # [B, T]
    return advantages, advantages


def compute_coupled_grpo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config=None,
    rollout_is_weights: torch.Tensor | None = None,
):
    """verl's vanilla PPO loss without dual clip. All tensors [B, T]; returns (loss, metrics) as verl's losses do."""
    return core_algos.compute_policy_loss_vanilla(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode,
        dataclasses.replace(config, clip_ratio_c=NO_DUAL_CLIP),
        rollout_is_weights,
    )


def register() -> None:
    from diffugrpo_plugin.integration import estimators

    core_algos.register_adv_est(NAME)(compute_coupled_grpo_advantage)
    core_algos.register_policy_loss(NAME)(compute_coupled_grpo_policy_loss)
    estimators.register()
