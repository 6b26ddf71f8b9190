"""Trajectory replay (TraceRL, CJ-GRPO): a completion's likelihood along the rollout's own denoising trace.

The rollout records the step at which it decided each completion token (``unmask_step``; -1: never decided, the
padding after the EOS). Steps are merged in groups of ``shrink`` consecutive steps; view ``g`` shows the prompt and
the tokens decided in groups before ``g``, masks the rest, and scores the tokens decided in group ``g`` (weight 1)::

    log p(x) ~= sum_g sum_{l decided in group g} log p(x_l | prompt, tokens decided before group g)

With ``shrink = 1`` this is the exact log-likelihood of the trajectory the sampler took (the product of its step
probabilities over the tokens it decided); larger ``shrink`` runs ``ceil(steps / shrink)`` forwards instead of
``steps``. A token never decided stays masked in every view, as it was during decoding. The views of a row depend on
its own trace only, so the old-policy, reference and update passes see the same ones (no seed is drawn).

**Per block** (block-diffusion models, the engine hands ``block_ids``): the block sampler decodes one block at a
time, its steps counted on across blocks, each block seeing the finished blocks before it. In the training layout a
noisy block sees only itself and the clean blocks before it: exactly what the sampler saw of the earlier blocks. So
the steps are counted from each block's first, and view ``g`` replays group ``g`` of every block at once: a block's
tokens decided in its groups before ``g`` visible, the rest masked, those of its group ``g`` scored (``shrink``
merges steps within a block). With ``shrink = 1`` the sum is the replay of every step one block after another, in
as many forwards as the longest block took steps rather than the steps of all blocks.
"""

from __future__ import annotations

import torch

from diffugrpo_plugin.core.views import MaskedViews

TRACE_HINT = (
    "set actor_rollout_ref.model.diffusion.record_trace=true (algorithm=tracerl does) so the rollout's "
    "denoising trace travels with the batch"
)


class TraceReplayMasker:
    """TraceRL / CJ-GRPO: one view per group of shrink denoising steps, scoring the tokens decided in it."""

    def __init__(self, shrink: int = 1):
        if int(shrink) < 1:
            raise ValueError(f"trace_replay's shrink (steps merged per view) must be >= 1; got {shrink}")
        self.shrink = int(shrink)

    def views(
        self, input_ids, completion_mask, mask_id, seeds, prompt_mask=None, trace=None, block_ids=None
    ) -> MaskedViews:
        """``trace``: the step each completion token was decided at, -1 where never and off the completion;
        ``block_ids``: each token's block on a block-diffusion model's grid (steps then count from each block's
        first).  # [B, L] long, [B, L]"""
        if trace is None:
            raise ValueError(f"the trace_replay masker needs the rollout's trace: {TRACE_HINT}")
        if trace.shape != input_ids.shape:
            raise ValueError(f"trace {tuple(trace.shape)} must be shaped like input_ids {tuple(input_ids.shape)}")
        completion = completion_mask.bool()
        decided = completion & (trace >= 0)  # [B, L]
        if block_ids is not None:
            trace = trace - _first_step_of_block(trace, decided, block_ids)
        group = torch.where(decided, torch.div(trace, self.shrink, rounding_mode="floor"), -1)  # [B, L]
        num_views = max(int(group.max()) + 1, 1)
        steps = torch.arange(num_views, device=input_ids.device)[:, None, None]  # [V, 1, 1]
        hidden = completion[None] & ((group[None] >= steps) | ~decided[None])  # [V, B, L]
        noisy = torch.where(hidden, mask_id, input_ids[None])  # [V, B, L]
        coef = (group[None] == steps) & decided[None]  # [V, B, L]
        return MaskedViews(noisy=noisy, coef=coef.to(torch.float32))


def _first_step_of_block(trace: torch.Tensor, decided: torch.Tensor, block_ids: torch.Tensor) -> torch.Tensor:
    """The first step at which each token's block decided a token (0 where the block decided none).
    # [B, L] -> [B, L]"""
    if block_ids.shape != trace.shape:
        raise ValueError(f"block_ids {tuple(block_ids.shape)} must be shaped like the trace {tuple(trace.shape)}")
    blocks = block_ids.to(trace.device, torch.int64)
    blocks = blocks - blocks.min(1, keepdim=True).values  # [B, L], 0 .. per row
    never = torch.iinfo(torch.int64).max
    first = torch.full((trace.shape[0], int(blocks.max()) + 1), never, dtype=torch.int64, device=trace.device)
    first = first.scatter_reduce(1, blocks, torch.where(decided, trace, never), reduce="amin")  # [B, blocks]
    first = first.gather(1, blocks)  # [B, L]
    return torch.where(first == never, 0, first)


def make_trace_replay(shrink: int = 1) -> TraceReplayMasker:
    """TraceRL / CJ-GRPO trajectory replay: the rollout's own denoising trace, shrink steps merged per view."""
    return TraceReplayMasker(shrink)
