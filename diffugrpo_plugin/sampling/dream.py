"""The Dream / DiffuCoder step rule (``diffusion_generate`` semantics).

Tokens: logits / temperature, then top-p, then top-k; sampled (inverse CDF on the row's own
uniforms) when ``temperature > 0``, the most likely token otherwise. The score that ranks
positions depends on ``alg``:

* ``maskgit_plus``: probability of the proposed token;
* ``topk_margin``: top-1 minus top-2 probability;
* ``entropy``: negative entropy of the position's distribution;
* ``origin``: no ranking: each masked position is unmasked with probability ``1 - s / t``.

For the ranking algs a step unmasks ``int(m * (1 - s / t))`` positions (every remaining one at
the block's last step), with ``t, s`` consecutive entries of ``linspace(1, eps, steps + 1)``:
the best-scoring ones, or with ``alg_temp > 0`` a sample without replacement from
``softmax(score / alg_temp)`` (drawn with the Gumbel top-k trick).
"""

from __future__ import annotations

import torch

from diffugrpo_plugin.sampling.decoding import (
    dream_transfer_count,
    negative_entropy,
    packed_to_rows,
    row_uniforms,
    sample_categorical,
    top1_margin,
    top_k_filter,
    top_k_mask,
    top_p_filter,
    top_p_then_top_k_filter,
)
from diffugrpo_plugin.sampling.denoising import Proposal


class DreamRule:
    """Dream's token proposal and position choice for one step (see module doc)."""

    revisits_earlier_blocks = False  # Dream denoises one block; its steps only see that block

    def __init__(
        self, alg: str, temperature: float, top_p: float | None, top_k: int | None, eps: float, alg_temp: float
    ):
        self.alg = alg
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.eps = eps
        self.alg_temp = alg_temp

    def propose(self, masked_logits: torch.Tensor, sizes: list[int], generators: list[torch.Generator]) -> Proposal:
        logits = masked_logits  # [M, V]
        if self.temperature > 0:
            logits = logits / self.temperature
        nucleus = self.top_p is not None and self.top_p < 1
        if nucleus and self.top_k is not None:
            logits = top_p_then_top_k_filter(logits, self.top_p, self.top_k)
        elif nucleus:
            logits = top_p_filter(logits, self.top_p)
        elif self.top_k is not None:
            logits = top_k_filter(logits, self.top_k)
        probs = torch.softmax(logits, dim=-1)  # [M, V]
        if self.temperature > 0:
            tokens = sample_categorical(probs, row_uniforms(generators, sizes, device=probs.device))  # [M]
        else:
            tokens = probs.argmax(dim=-1)  # [M]
        token_probs = probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [M]
        if self.alg == "topk_margin":
            scores = top1_margin(probs)
        elif self.alg == "entropy":
            scores = negative_entropy(probs)
        else:
            scores = token_probs
        return Proposal(tokens, scores, token_probs)

    def choose(
        self,
        scores: torch.Tensor,
        masked: torch.Tensor,
        step: int,
        steps: int,
        block_length: int,
        generators: list[torch.Generator],
    ) -> torch.Tensor:
        timesteps = torch.linspace(1, self.eps, steps + 1)  # float32, as the reference
        sizes = masked.sum(dim=1).tolist()
        if self.alg == "origin":
            transfer_probability = 1.0 if step == steps - 1 else float(1 - timesteps[step + 1] / timesteps[step])
            uniforms = row_uniforms(generators, sizes, device=masked.device)  # [M]
            return masked & (packed_to_rows(uniforms, masked, 1.0) < transfer_probability)
        counts = torch.tensor(
            [dream_transfer_count(m, step, steps, timesteps) for m in sizes], device=masked.device
        )  # [l]
        if self.alg_temp > 0:
            uniforms = row_uniforms(generators, sizes, device=masked.device)  # [M]
            gumbel = -torch.log(-torch.log(uniforms.clamp_min(torch.finfo(uniforms.dtype).tiny)))  # [M]
            scores = scores / self.alg_temp + packed_to_rows(gumbel, masked, 0.0)  # [l, W]
        return top_k_mask(scores, counts)
