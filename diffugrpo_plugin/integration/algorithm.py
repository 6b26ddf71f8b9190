"""coupled_grpo's advantage estimator and policy loss, registered in verl's core_algos registries.

Both are thin: the math is :mod:`diffugrpo_plugin.advantages` and :mod:`diffugrpo_plugin.losses`.
The KL term is verl's own (``actor.use_kl_loss=True``, ``kl_loss_type=low_var_kl`` is k3; verl
clamps the log-ratio to [-20, 20] and k3 to [-10, 10] for stability, which the reference does not),
and aggregation uses verl's ``agg_loss`` so data-parallel normalisation is verl's.
"""

from __future__ import annotations

import numpy as np
import torch

from verl.trainer.ppo import core_algos
from verl.utils import torch_functional as verl_F

from diffugrpo_plugin.advantages import leave_one_out_advantages
from diffugrpo_plugin.losses import clipped_surrogate

NAME = "coupled_grpo"


def compute_coupled_grpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: np.ndarray, config=None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Leave-one-out advantage per prompt group, broadcast over the response tokens.

    token_level_rewards, response_mask: [B, T]; index: [B] group ids (verl's ``uid``).
    ``algorithm.norm_adv_by_std_in_grpo`` (DiffuCoder's ``scale_rewards``) divides by the group std.
    Returns (advantages, returns), both [B, T].
    """
    scale = bool(config.get("norm_adv_by_std_in_grpo", False)) if config is not None else False
    scores = token_level_rewards.sum(dim=-1)  # [B]
    with torch.no_grad():
        advantages = leave_one_out_advantages(scores, list(index), scale_by_std=scale)  # [B]
    advantages = advantages[:, None] * response_mask  # [B, T]
    return advantages, advantages


def compute_coupled_grpo_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                     response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                                     rollout_is_weights: torch.Tensor | None = None):
    """PPO clipping with ``actor.clip_ratio_low`` / ``clip_ratio_high`` (falling back to ``clip_ratio``), no dual clip.

    All tensors [B, T]; returns (loss, metrics) as verl's policy losses do.
    """
    eps_low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    eps_high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    per_token, was_clipped = clipped_surrogate(log_prob, old_log_prob, advantages, eps_low, eps_high)  # [B, T]
    if rollout_is_weights is not None:
        per_token = per_token * rollout_is_weights
    loss = core_algos.agg_loss(loss_mat=per_token, loss_mask=response_mask, loss_agg_mode=loss_agg_mode,
                               **config.global_batch_info)
    mask = response_mask.bool()
    metrics = {
        "actor/pg_clipfrac": verl_F.masked_mean(was_clipped.float(), mask).detach().item(),
        "actor/ppo_kl": verl_F.masked_mean(old_log_prob - log_prob, mask).detach().item(),
    }
    return loss, metrics


def register() -> None:
    core_algos.register_adv_est(NAME)(compute_coupled_grpo_advantage)
    core_algos.register_policy_loss(NAME)(compute_coupled_grpo_policy_loss)
