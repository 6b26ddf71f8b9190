"""Leave-one-out group advantages for GRPO-style training (DiffuCoder's estimator).

For a prompt answered ``G`` times with rewards ``r_1..r_G``, sample ``i`` gets
``A_i = r_i - mean(r_j, j != i)``; optionally divided by the group's standard deviation
(unbiased, Bessel-corrected, plus ``eps``), the reference's ``scale_rewards``. A group of one
sample has no baseline and gets advantage 0. Plain torch; no verl.
"""

from __future__ import annotations

from typing import Sequence

import torch


def group_indices(group_ids: Sequence) -> torch.Tensor:
    """Map arbitrary hashable group ids (uids) to 0..num_groups-1, in order of first appearance.  # [N]"""
    seen: dict = {}
    return torch.tensor([seen.setdefault(g, len(seen)) for g in group_ids], dtype=torch.long)


def leave_one_out_advantages(scores: torch.Tensor, group_ids: Sequence, scale_by_std: bool = False,
                             eps: float = 1e-4) -> torch.Tensor:
    """Leave-one-out advantage of each sample within its group.

    Args:
        scores: one scalar reward per sample.  # [N]
        group_ids: the prompt/group each sample belongs to (e.g. verl's ``uid``), length N.
        scale_by_std: divide by the group's unbiased std + ``eps``.
    Returns:
        advantages  # [N], same dtype as ``scores``
    """
    if scores.dim() != 1 or scores.shape[0] != len(group_ids):
        raise ValueError(f"scores must be [N] with one group id each; got {tuple(scores.shape)} "
                         f"and {len(group_ids)} group ids")
    groups = group_indices(group_ids).to(scores.device)  # [N]
    values = scores.double()
    num_groups = int(groups.max()) + 1 if len(groups) else 0
    counts = torch.zeros(num_groups, dtype=torch.float64, device=scores.device).index_add_(
        0, groups, torch.ones_like(values))  # [G]
    sums = torch.zeros(num_groups, dtype=torch.float64, device=scores.device).index_add_(0, groups, values)  # [G]
    n = counts[groups]  # [N]
    has_baseline = n > 1
    others_mean = (sums[groups] - values) / torch.where(has_baseline, n - 1, torch.ones_like(n))  # [N]
    advantages = torch.where(has_baseline, values - others_mean, torch.zeros_like(values))  # [N]
    if scale_by_std:
        means = sums / counts  # [G]
        squares = torch.zeros_like(sums).index_add_(0, groups, (values - means[groups]) ** 2)  # [G]
        std = torch.sqrt(squares / torch.clamp(counts - 1, min=1))  # [G]
        advantages = advantages / (std[groups] + eps)
    return advantages.to(scores.dtype)
