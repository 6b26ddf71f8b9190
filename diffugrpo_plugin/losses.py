"""The coupled-GRPO policy objective: PPO clipping with separate low/high bounds, and k3 KL.

Per completion token, with ``ratio = exp(logp - old_logp)`` and the sequence advantage ``A``::

    loss = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) + beta * k3(logp, ref_logp)
    k3   = exp(ref_logp - logp) - (ref_logp - logp) - 1

averaged over the completion tokens of the batch ("token-mean"), as DiffuCoder's trainer does.
There is no dual clip. Plain torch; no verl (the verl glue aggregates these per-token terms
with verl's own ``agg_loss`` so data-parallel normalisation stays verl's).
"""

from __future__ import annotations

import torch


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                      eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped policy-gradient loss and where clipping was active.

    logp, old_logp, advantages: [B, T] (advantages broadcast per token) -> (loss [B, T], clipped [B, T] bool).
    """
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip ranges must be non-negative; got eps_low={eps_low}, eps_high={eps_high}")
    ratio = torch.exp(logp - old_logp)  # [B, T]
    unclipped = ratio * advantages  # [B, T]
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages  # [B, T]
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(policy || reference), per token.  # [B, T] -> [B, T]"""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


def token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the tokens where ``mask`` is set.  # [B, T], [B, T] -> []"""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def coupled_grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
                      advantages: torch.Tensor, mask: torch.Tensor, eps_low: float = 0.5, eps_high: float = 0.5,
                      beta: float = 0.01) -> tuple[torch.Tensor, dict[str, float]]:
    """The whole objective on one batch, token-mean aggregated.

    logp/old_logp/ref_logp/mask: [B, T]; advantages: [B] or [B, T]. ``ref_logp`` may be None when ``beta == 0``.
    Returns the scalar loss and metrics (clip fraction, mean KL).
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    per_token, was_clipped = clipped_surrogate(logp, old_logp, advantages, eps_low, eps_high)
    metrics = {"clip_fraction": float(token_mean(was_clipped.float(), mask))}
    if beta != 0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs reference log-probs (ref_logp)")
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * kl
        metrics["kl"] = float(token_mean(kl.detach(), mask))
    return token_mean(per_token, mask), metrics
