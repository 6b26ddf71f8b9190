"""The estimators' advantages and policy losses (:mod:`diffugrpo_plugin.core.estimators`) in verl's registries.

==============  =====================================  ===================================================
name            ``algorithm.adv_estimator``            ``actor.policy_loss.loss_mode``
==============  =====================================  ===================================================
``wd1``         wd1's signed group weight ``w+ - w-``  ratio-free: ``-A x log_prob``, verl's aggregation
``spg``         (coupled_grpo's leave-one-out)         ratio-free, as wd1's (the bounds are the masker's)
``ebpo``        (coupled_grpo's leave-one-out)         the sequence-level clipped ratio of composite ELBOs
==============  =====================================  ===================================================

wd1's tilt ``psi`` is ``algorithm.wd1_psi`` (default 1.0); its std scaling is verl's ``norm_adv_by_std_in_grpo``.
EBPO clips with ``actor.clip_ratio_low`` / ``clip_ratio_high``.
"""

from __future__ import annotations

import numpy as np
import torch

import verl.utils.torch_functional as verl_F
from verl.trainer.ppo import core_algos
from verl.utils.groupwise import as_torch_index

from diffugrpo_plugin.core.estimators.ebpo import ebpo_sequence_loss
from diffugrpo_plugin.core.estimators.wd1 import wd1_weights


def compute_wd1_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray, config=None, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """wd1's signed weight per completion, broadcast over its response tokens. [B, T] in, ([B, T], [B, T]) out."""
    psi = float(config.get("wd1_psi", 1.0)) if config is not None else 1.0
    scale = bool(config.get("norm_adv_by_std_in_grpo", False)) if config is not None else False
    with torch.no_grad():
        scores = token_level_rewards.sum(-1)  # [B]
        groups = as_torch_index(index, device=scores.device)  # [B]
        weights = wd1_weights(scores, groups, psi, scale).to(token_level_rewards.dtype)  # [B]
    advantages = weights[:, None] * response_mask  # [B, T]
    return advantages, advantages


def compute_ratio_free_policy_loss(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """``-A x log_prob`` with verl's aggregation: no importance ratio (wd1, SPG). All [B, T]; (loss, metrics)."""
    losses = -advantages * log_prob  # [B, T]
    if rollout_is_weights is not None:
        losses = losses * rollout_is_weights
    loss = core_algos.agg_loss(losses, response_mask, loss_agg_mode, **config.global_batch_info)
    drift = verl_F.masked_mean(old_log_prob - log_prob.detach(), response_mask)
    return loss, {"actor/ppo_kl": drift.item()}


def compute_ebpo_policy_loss(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """EBPO: one clipped ratio per sequence of its summed per-token ELBO terms. All [B, T]; (loss, metrics)."""
    mask = response_mask.to(log_prob.dtype)  # [B, T]
    logratio = ((log_prob - old_log_prob) * mask).sum(-1)  # [B]
    per_sequence_advantage = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]
    clip_low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    clip_high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    losses, clipped_high, clipped_low = ebpo_sequence_loss(logratio, per_sequence_advantage, clip_low, clip_high)
    losses = losses[:, None]  # [B, 1]
    # the mean over the global batch's sequences, as verl normalises a per-sequence loss
    loss = core_algos.agg_loss(losses, torch.ones_like(losses), "seq-mean-token-sum", **config.global_batch_info)
    return loss, {
        "actor/pg_clipfrac": (clipped_high | clipped_low).float().mean().item(),
        "actor/pg_clipfrac_lower": clipped_low.float().mean().item(),
        "actor/ppo_kl": (-logratio).mean().item(),
    }


def register() -> None:
    core_algos.register_adv_est("wd1")(compute_wd1_advantage)
    core_algos.register_policy_loss("wd1")(compute_ratio_free_policy_loss)
    core_algos.register_policy_loss("spg")(compute_ratio_free_policy_loss)
    core_algos.register_policy_loss("ebpo")(compute_ebpo_policy_loss)
