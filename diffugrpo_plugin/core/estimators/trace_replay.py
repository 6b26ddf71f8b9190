"""Trajectory replay (TraceRL, CJ-GRPO): a completion's likelihood along the rollout's own denoising trace.

The rollout records the step at which it decided each completion token (``unmask_step``; -1: never decided, the
padding after the EOS). Steps are merged in groups of ``shrink`` consecutive steps; view ``g`` shows the prompt and
the tokens decided in groups before ``g``, masks the rest, and scores the tokens decided in group ``g`` (weight 1)::

    log p(x) ~= sum_g sum_{l decided in group g} log p(x_l | prompt, tokens decided before group g)

With ``shrink = 1`` this is the exact log-likelihood of the trajectory the sampler took (the product of its step
probabilities over the tokens it decided); larger ``shrink`` runs ``ceil(steps / shrink)`` forwards instead of
``steps``. A token never decided stays masked in every view, as it was during decoding. The views of a row depend on
its own trace only, so the old-policy, reference and update passes see the same ones (no seed is drawn).
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

    def views(self, input_ids, completion_mask, mask_id, seeds, prompt_mask=None, trace=None) -> MaskedViews:
        """``trace``: the step each completion token was decided at, -1 where never and off the completion.
        # [B, L] long"""
        if trace is None:
            raise ValueError(f"the trace_replay masker needs the rollout's trace: {TRACE_HINT}")
        if trace.shape != input_ids.shape:
            raise ValueError(f"trace {tuple(trace.shape)} must be shaped like input_ids {tuple(input_ids.shape)}")
        completion = completion_mask.bool()
        decided = completion & (trace >= 0)  # [B, L]
        group = torch.where(decided, torch.div(trace, self.shrink, rounding_mode="floor"), -1)  # [B, L]
        num_views = max(int(group.max()) + 1, 1)
        steps = torch.arange(num_views, device=input_ids.device)[:, None, None]  # [V, 1, 1]
        hidden = completion[None] & ((group[None] >= steps) | ~decided[None])  # [V, B, L]
        noisy = torch.where(hidden, mask_id, input_ids[None])  # [V, B, L]
        coef = (group[None] == steps) & decided[None]  # [V, B, L]
        return MaskedViews(noisy=noisy, coef=coef.to(torch.float32))


def make_trace_replay(shrink: int = 1) -> TraceReplayMasker:
    """TraceRL / CJ-GRPO trajectory replay: the rollout's own denoising trace, shrink steps merged per view."""
    return TraceReplayMasker(shrink)
