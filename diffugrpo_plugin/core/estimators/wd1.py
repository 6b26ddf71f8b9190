"""wd1 (weighted policy optimisation for diffusion LMs): a ratio-free likelihood objective with group weights.

For a prompt's group of ``G`` completions with advantages ``A_i = r_i - mean_j r_j`` (divided by the group's std
when asked), wd1 maximises ``sum_i w+_i log pi(o_i) - sum_i w-_i log pi(o_i)`` with the two softmax weightings
``w+_i = exp(psi A_i) / sum_j exp(psi A_j)`` and ``w-_i = exp(-psi A_i) / sum_j exp(-psi A_j)``: the policy moves
towards the completions an advantage-tilted target favours and away from those its inverse favours, with no
importance ratio to the rollout policy. The signed weight ``w+_i - w-_i`` is the coefficient of ``log pi(o_i)``.
"""

from __future__ import annotations

import torch


def wd1_weights(
    scores: torch.Tensor, groups: torch.Tensor, psi: float = 1.0, scale_by_std: bool = False
) -> torch.Tensor:
    """The signed wd1 weight ``w+_i - w-_i`` of each completion within its prompt group.

    Args:
        scores: each completion's total reward.  # [B]
        groups: each completion's prompt group, as integers.  # [B] int64
        psi: the tilt of the target policy (wd1's temperature inverse); larger sharpens both softmaxes.
        scale_by_std: divide the centred rewards by the group's unbiased std (a group of one or a tie: no division).
    Returns:
        the signed weights; they sum to 0 within each group.  # [B]
    """
    if not psi > 0:
        raise ValueError(f"wd1's psi must be positive (the softmax tilt exp(psi * A)); got {psi}")
    scores = scores.double()
    weights = torch.zeros_like(scores)
    for group in groups.unique():
        members = groups == group
        centred = scores[members] - scores[members].mean()  # [G]
        if scale_by_std and int(members.sum()) > 1:
            std = scores[members].std()
            if std > 0:
                centred = centred / std
        weights[members] = torch.softmax(psi * centred, 0) - torch.softmax(-psi * centred, 0)
    return weights.float()
