"""EBPO (LLaDA2.1's ELBO-based block policy optimisation): per-block stratified masking, a sequence-level ratio.

The completion is cut into blocks: on a full-canvas model, ``block_length``-token blocks from its first token (a
partition of the response only); on a block-diffusion model (the engine hands ``block_ids``), the model's own blocks
on the grid ``block_origin`` sets, each block's completion tokens (``block_length`` is not used), so a block the
prompt's tail opens counts only its completion tokens. Each of ``num_views`` views masks, in every block, ``min(floor(t * n) + 1, n)`` of
its ``n`` tokens, chosen uniformly, where ``t`` is the view's noise level for that block; each masked token's
log-prob is weighted by ``n / masked`` (one over the block's masked share) and by ``1 / num_views``. Summed over the
tokens this is the composite ELBO ``sum_n w_n sum_b ELBO_b(t_nb)`` with uniform ``w_n``.

The noise levels of one sample are stratified: its ``num_views x blocks`` cells take
``(u + c / C) mod 1`` for ``c = 0 .. C - 1`` with one uniform offset ``u``, so every cell's level is marginally
uniform and together they cover ``[0, 1)`` evenly. Row ``b`` draws from its own generator seeded with
``seeds[b]``: ``u`` first, then one permutation per (view, block) in that order.

In the block training layout each noisy block sees only itself and the clean blocks before it, so a view's per-block
terms are the block-conditional ELBOs ``ELBO_b(t) = E[n / masked sum_masked log p(x_l | x_b noised, x_<b)]`` of
LLaDA2.1's EBPO.

The policy loss clips the ratio of the sequence ELBOs once per sequence:
``-A * clip(exp(ELBO_new - ELBO_old), 1 - eps_low, 1 + eps_high)`` on the pessimistic side (PPO's min), the
mean over sequences.
"""

from __future__ import annotations

import torch

from diffugrpo_plugin.core.views import MaskedViews


def completion_blocks(
    completion_mask: torch.Tensor, block_length: int, block_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """Each completion token's block, numbered from 0 at the sample's first completion block; -1 off the completion.
    Without ``block_ids``: ``block_length``-token blocks counted from the first completion token; with it (each
    token's block on the model's grid, non-decreasing along a row): the model's blocks that hold completion tokens.
    # [B, L] bool (, [B, L] int) -> [B, L] int64"""
    if block_ids is None:
        order = completion_mask.long().cumsum(1) - 1  # [B, L], the token's index within its completion
        return torch.where(completion_mask, torch.div(order, block_length, rounding_mode="floor"), -1)
    if block_ids.shape != completion_mask.shape:
        raise ValueError(f"block_ids {tuple(block_ids.shape)} must be [B, L] like completion_mask")
    blocks = block_ids.to(completion_mask.device, torch.int64)
    # a block's number among the row's completion blocks: how many completion blocks start before it
    first_in_block = completion_mask.clone()
    first_in_block[:, 1:] &= (blocks[:, 1:] != blocks[:, :-1]) | ~completion_mask[:, :-1]
    return torch.where(completion_mask, first_in_block.long().cumsum(1) - 1, -1)


class EBPOMasker:
    """EBPO (LLaDA2.1): every block masked at a stratified level in each view, tokens weighted by 1 / masked share."""

    def __init__(self, block_length: int = 32, num_views: int = 1):
        if int(block_length) < 1 or int(num_views) < 1:
            raise ValueError(
                f"ebpo needs block_length >= 1 and num_views >= 1; got block_length={block_length}, "
                f"num_views={num_views}"
            )
        self.block_length = int(block_length)
        self.num_views = int(num_views)

    def views(self, input_ids, completion_mask, mask_id, seeds, prompt_mask=None, block_ids=None) -> MaskedViews:
        """``block_ids``: each token's block on a block-diffusion model's grid, whose blocks then replace the
        ``block_length`` ones.  # [B, L]"""
        completion = completion_mask.bool()
        blocks = completion_blocks(completion, self.block_length, block_ids).cpu()  # [B, L]
        batch, length = input_ids.shape
        masked = torch.zeros(self.num_views, batch, length, dtype=torch.bool)
        coef = torch.zeros(self.num_views, batch, length, dtype=torch.float64)
        generator = torch.Generator(device="cpu")
        for b in range(batch):
            num_blocks = int(blocks[b].max()) + 1
            if num_blocks == 0:
                continue
            generator.manual_seed(int(seeds[b]))
            offset = torch.rand((), generator=generator, dtype=torch.float64)
            cells = self.num_views * num_blocks
            for v in range(self.num_views):
                for k in range(num_blocks):
                    level = (offset + (v * num_blocks + k) / cells) % 1.0
                    positions = (blocks[b] == k).nonzero(as_tuple=True)[0]  # [n]
                    size = positions.numel()
                    count = min(int(level * size) + 1, size)
                    chosen = positions[torch.randperm(size, generator=generator)[:count]]
                    masked[v, b, chosen] = True
                    coef[v, b, chosen] = size / count / self.num_views
        device = input_ids.device
        noisy = torch.where(masked.to(device), mask_id, input_ids[None])  # [V, B, L]
        return MaskedViews(noisy=noisy, coef=coef.to(device, torch.float32))


def make_ebpo(block_length: int = 32, num_views: int = 1) -> EBPOMasker:
    """EBPO (LLaDA2.1): per-block stratified masking (block_length-token blocks or a block model's), num_views views."""
    return EBPOMasker(block_length, num_views)


def ebpo_sequence_loss(
    sequence_logratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """EBPO's clipped objective per sequence, the clipping applied once to the ratio of sequence ELBOs.

    Args:
        sequence_logratio: ``ELBO_new - ELBO_old`` per sequence.  # [B]
        advantages: per sequence.  # [B]
    Returns:
        (loss, clipped above, clipped below): ``max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))``, and where the
        clip bound it for a positive / negative advantage.  # [B], [B] bool, [B] bool
    """
    # in the log domain: exp never overflows on the clipped side
    low, high = torch.log1p(torch.tensor(-clip_low)), torch.log1p(torch.tensor(clip_high))
    logratio = sequence_logratio.float()
    effective = torch.where(advantages >= 0, torch.minimum(logratio, high), torch.maximum(logratio, low))
    clipped_high = (advantages > 0) & (logratio > high)
    clipped_low = (advantages < 0) & (logratio < low)
    return -advantages * torch.exp(effective), clipped_high, clipped_low
