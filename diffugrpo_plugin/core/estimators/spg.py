"""SPG (sandwiched policy gradient): a lower bound of log pi for positive advantages, an upper one for the rest.

Views (``num_views`` Monte-Carlo draws, one generator per sample seeded with ``seeds[b]``): one block ``k`` of the
completion (``block_length`` tokens from its first; on a block-diffusion model, the model's own blocks that hold
completion tokens, as for EBPO) is drawn uniformly; the blocks before it stay clean, the
blocks after it are fully masked, and ``m`` of block ``k``'s ``n`` tokens are masked, ``m`` uniform in
``[max(floor(n t_min), 1), min(floor(n t_max), n)]``. Draw order per view: the block (an integer), ``m``, then a
permutation of the block. A view's masked share of the completion is ``t_v``. In the block training layout a noisy
block sees only itself and the clean blocks before it, so block ``k``'s tokens are scored given the clean earlier
blocks (as on a full canvas) and a later, fully masked block's given the clean blocks before it, block ``k`` whole
(the model's block-causal factorisation; on a full canvas they would see block ``k`` partly masked).

With ``p_v(l)`` the model's probability of token ``l`` in view ``v`` and ``M_v`` the masked completion tokens:

* ELBO (positive advantages): ``mean_v mean_{l in M_v} log p_v(l)``;
* EUBO: ``mean_{l in U} (1 / beta) log mean_v [1{l in M_v} p_v(l)^beta / t_v]``, ``U`` the tokens some view
  masks: an upper bound of the sequence log-likelihood per token (a Renyi-type bound, ``beta > 1``);
* non-positive advantages take ``omega * EUBO + (1 - omega) * ELBO`` (SPG's mixture; ``omega = 1``: the EUBO).

Each is per token of the sequence; the per-token estimate handed to the loss is ``n_completion x`` the sequence
value spread over the tokens it is built from, so its sum over the sequence is the completion's length times the
bound, and the ratio-free loss ``-A x log_prob``, averaged over the batch's tokens (verl's ``token-mean``), is SPG's
length-weighted loss.
"""

from __future__ import annotations

import torch

from diffugrpo_plugin.core.estimators.ebpo import completion_blocks
from diffugrpo_plugin.core.views import MaskedViews


class SPGMasker:
    """SPG: block-wise masked views; ELBO for positive advantages, omega * EUBO + (1 - omega) * ELBO otherwise."""

    def __init__(
        self,
        block_length: int = 32,
        num_views: int = 2,
        t_range: tuple[float, float] = (0.0, 1.0),
        beta: float = 1.5,
        omega: float = 0.5,
    ):
        t_min, t_max = (float(x) for x in t_range)
        if int(block_length) < 1 or int(num_views) < 1 or not 0.0 <= t_min <= t_max <= 1.0:
            raise ValueError(
                f"spg needs block_length >= 1, num_views >= 1 and 0 <= t_min <= t_max <= 1; got "
                f"block_length={block_length}, num_views={num_views}, t_range={t_range}"
            )
        if not float(beta) > 0 or not 0.0 <= float(omega) <= 1.0:
            raise ValueError(f"spg needs beta > 0 and omega in [0, 1]; got beta={beta}, omega={omega}")
        self.block_length, self.num_views = int(block_length), int(num_views)
        self.t_range, self.beta, self.omega = (t_min, t_max), float(beta), float(omega)

    def views(self, input_ids, completion_mask, mask_id, seeds, prompt_mask=None, block_ids=None) -> MaskedViews:
        """``block_ids``: each token's block on a block-diffusion model's grid, whose blocks then replace the
        ``block_length`` ones.  # [B, L]"""
        completion = completion_mask.bool().cpu()
        blocks = completion_blocks(completion, self.block_length, None if block_ids is None else block_ids.cpu())
        batch, length = input_ids.shape
        masked = torch.zeros(self.num_views, batch, length, dtype=torch.bool)
        generator = torch.Generator(device="cpu")
        t_min, t_max = self.t_range
        for b in range(batch):
            num_blocks = int(blocks[b].max()) + 1
            if num_blocks == 0:
                continue
            generator.manual_seed(int(seeds[b]))
            for v in range(self.num_views):
                k = int(torch.randint(num_blocks, (), generator=generator))
                positions = (blocks[b] == k).nonzero(as_tuple=True)[0]  # [n]
                size = positions.numel()
                lowest, highest = max(int(size * t_min), 1), min(int(size * t_max), size)
                count = int(torch.randint(lowest, max(highest, lowest) + 1, (), generator=generator))
                masked[v, b, positions[torch.randperm(size, generator=generator)[:count]]] = True
                masked[v, b] |= blocks[b] > k
        per_view_count = masked.sum(2, keepdim=True).double()  # [V, B, 1]
        completion_length = completion.sum(1, keepdim=True).double()  # [B, 1]
        # the ELBO's weights: the mean over views of the mean over masked tokens, times the completion's length
        coef = masked / per_view_count.clamp(min=1) * completion_length / self.num_views  # [V, B, L]
        device = input_ids.device
        noisy = torch.where(masked.to(device), mask_id, input_ids[None])  # [V, B, L]
        return MaskedViews(noisy=noisy, coef=coef.to(device, torch.float32))

    def combine(
        self, per_view_logp: torch.Tensor, views: MaskedViews, scored: torch.Tensor, positive: torch.Tensor | None
    ) -> torch.Tensor:
        """The per-token estimate: the ELBO's where ``positive`` (everywhere when it is None: the passes before the
        advantages exist), the mixture with the EUBO elsewhere. Built from the masks alone, restricted to the tokens
        the loss counts (``scored``: the completion up to its EOS).

        Args:
            per_view_logp: ``log p_v(l)`` where view ``v`` scores token ``l``, 0 elsewhere.  # [V, B, L]
            views: what :meth:`views` returned (its nonzero ``coef``: the masked tokens).  # [V, B, L]
            scored: the completion tokens the loss counts.  # [B, L] bool
            positive: each sample's advantage is positive.  # [B] bool
        Returns:
            the per-token estimate, summing over a sequence to its length times the bound.  # [B, L]
        """
        scored = scored.to(per_view_logp.device)
        in_view = (views.coef.to(per_view_logp.device) != 0) & scored[None]  # [V, B, L], M_v
        length = scored.sum(1).double()[None, :, None]  # [1, B, 1], n
        count = in_view.sum(2, keepdim=True).double()  # [V, B, 1], |M_v|
        logp = per_view_logp.double()
        elbo = (torch.where(in_view, logp, 0.0) / count.clamp(min=1) * length).sum(0) / self.num_views  # [B, L]
        if positive is None or self.omega == 0.0:
            return elbo.float()
        covered = in_view.any(0)  # [B, L], U
        share = count / length.clamp(min=1)  # [V, B, 1], t_v
        log_terms = torch.where(in_view, self.beta * logp - share.clamp(min=1e-12).log(), float("-inf"))  # [V, B, L]
        log_terms = torch.where(covered[None], log_terms, 0.0)  # no all -inf column: a finite backward
        log_mean = torch.logsumexp(log_terms, 0) - torch.log(torch.tensor(float(self.num_views)))  # [B, L]
        per_token_eubo = torch.where(covered, log_mean / self.beta, 0.0)  # [B, L]
        eubo = per_token_eubo / covered.sum(1, keepdim=True).clamp(min=1) * length[0]  # [B, L]: sums to n x EUBO
        mixed = self.omega * eubo + (1.0 - self.omega) * elbo
        return torch.where(positive.to(elbo.device)[:, None], elbo, mixed).float()


def make_spg(block_length: int = 32, num_views: int = 2, t_range=(0.0, 1.0), beta: float = 1.5, omega: float = 0.5):
    """SPG (sandwiched policy gradient): block-wise views, ELBO for positive advantages, a mix with the EUBO else."""
    return SPGMasker(block_length, num_views, t_range, beta, omega)
