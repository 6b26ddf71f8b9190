"""The LLaDA step rule (``generate`` of the LLaDA reference).

Tokens: Gumbel-max in float64 (``argmax(exp(l) / (-log u) ** temperature)``, plain argmax at
temperature 0). A step unmasks its share of LLaDA's equal split of the block (fixed when the
block starts), among every masked position up to the block's end (a position of an earlier
block decided as the mask token competes again), chosen by ``remasking``:

* ``low_confidence``: the highest softmax probability of the proposed token;
* ``random``: uniformly at random (a fresh uniform score per position).
"""

from __future__ import annotations

import torch

from diffugrpo_plugin.sampling.decoding import (
    gumbel_argmax,
    llada_transfer_count,
    packed_to_rows,
    row_uniforms,
    top_k_mask,
)
from diffugrpo_plugin.sampling.denoising import Proposal


class LLaDARule:
    """LLaDA's token proposal and position choice for one step (see module doc)."""

    # LLaDA's generate ranks every masked position before the block's end, earlier blocks included
    revisits_earlier_blocks = True

    def __init__(self, remasking: str, temperature: float):
        self.remasking = remasking
        self.temperature = temperature

    def propose(self, masked_logits: torch.Tensor, sizes: list[int], generators: list[torch.Generator]) -> Proposal:
        uniforms = None
        if self.temperature > 0:
            uniforms = row_uniforms(
                generators, sizes, (masked_logits.shape[-1],), dtype=torch.float64, device=masked_logits.device
            )  # [M, V]
        tokens = gumbel_argmax(masked_logits, self.temperature, uniforms)  # [M]
        probs = torch.softmax(masked_logits.to(torch.float64), dim=-1)  # [M, V]
        token_probs = probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [M]
        return Proposal(tokens, token_probs, token_probs)

    def choose(
        self,
        scores: torch.Tensor,
        masked: torch.Tensor,
        step: int,
        steps: int,
        block_length: int,
        generators: list[torch.Generator],
    ) -> torch.Tensor:
        sizes = masked.sum(dim=1).tolist()
        counts = torch.tensor(
            [llada_transfer_count(block_length, step, steps, m) for m in sizes], device=masked.device
        )  # [l]
        if self.remasking == "random":
            scores = packed_to_rows(row_uniforms(generators, sizes, device=masked.device), masked, -1.0)  # [l, W]
        return top_k_mask(scores, counts)
