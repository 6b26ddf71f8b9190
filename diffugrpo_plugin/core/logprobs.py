"""Coupled per-token log-probabilities without ever holding the vocabulary-wide logits of the batch.

Given a :class:`~diffugrpo_plugin.core.views.MaskedViews` (``V`` noised copies and a
coefficient per view and token), the estimate for token ``(b, l)`` is
``sum_v coef[v, b, l] * log p(x[b, l] | noisy[v, b])``.

The reference implementation runs the full vocabulary projection and a full-vocabulary
log-softmax for every position of every view (``3 x B x L x V`` floats). Here the
transformer body still runs on all ``V`` views (the attention needs every position), but only
the hidden rows whose coefficient is non-zero are scored (for the coupled masker, ``2 x`` the
completion tokens), and they are scored by :func:`~diffugrpo_plugin.models.kernels.fused_head_logprob`: the vocabulary
projection and the fp32 log-softmax together, one vocabulary slice of logits at a time,
recomputed in the backward. No ``[rows, V]`` tensor is ever alive, so the pass's memory beside the model does not
grow with the vocabulary (see ``benchmarks/coupled_logprob.py`` for the measured effect).

**Block diffusion** (``block_ids`` given: SDAR, LLaDA2.x): each view runs in the training layout ``[x_t | x_0]``,
``2L`` tokens with duplicated position ids, a noisy block seeing itself and the clean blocks before it
(:func:`~diffugrpo_plugin.models.native.block_attention.layout_attention_mask`); the scored rows are read from the noisy
half. These families do not shift their logits; a shifted one is refused (its first token of a block would be read
from the previous noisy block, which its training never does).

Plain torch; no verl.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diffugrpo_plugin.core.views import MaskedViews
from diffugrpo_plugin.models.dlm import DiffusionLM
from diffugrpo_plugin.models.family import position_ids_from_mask, unwrap
from diffugrpo_plugin.models.kernels import DEFAULT_CHUNK_ROWS
from diffugrpo_plugin.models.native.block_attention import layout_attention_mask


@dataclass
class TokenLogprobs:
    """Per-token outputs of a coupled pass.

    Attributes:
        logp: the coupled log-likelihood estimate per token; 0 where no view scores it.  # [B, L]
        entropy: entropy (nats) of view 0's predictive distribution at its scored tokens,
            0 elsewhere; ``None`` unless asked for.  # [B, L]
        per_view: each view's log-prob of the tokens it scores, 0 elsewhere (differentiable), for a masker whose
            estimate is not the coefficient-weighted sum (``combine``, see hookspecs.py).  # [V, B, L]
    """

    logp: torch.Tensor
    entropy: torch.Tensor | None = None
    per_view: torch.Tensor | None = None


def coupled_token_logprobs(
    lm: DiffusionLM,
    views: MaskedViews,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    with_entropy: bool = False,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    block_ids: torch.Tensor | None = None,
) -> TokenLogprobs:
    """The coupled estimate of ``log p(x[b, l])`` for every token a view scores.

    Args:
        lm: the model behind the aligned-logits adapter.
        views: noised views and coefficients, ``noisy``/``coef`` [V, B, L].
        input_ids: the clean tokens (the targets).  # [B, L]
        attention_mask: 1 on real tokens, 0 on padding.  # [B, L]
        position_ids: defaults to ``cumsum(attention_mask) - 1``.  # [B, L]
        block_ids: each token's block, for a block-diffusion model: the views run in the ``[x_t | x_0]`` layout.  # [B, L]
    Returns:
        :class:`TokenLogprobs` with ``logp`` [B, L] (differentiable) and optional ``entropy`` [B, L].
    """
    num_views, batch, length = views.coef.shape
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    coef = views.coef.to(input_ids.device)  # [V, B, L]
    stacked_ids = views.noisy.reshape(num_views * batch, length)  # [V*B, L]
    stacked_attention = attention_mask.repeat(num_views, 1)  # [V*B, L]
    stacked_positions = position_ids.repeat(num_views, 1)  # [V*B, L]
    targets = input_ids.repeat(num_views, 1)  # [V*B, L]

    scored = coef.reshape(num_views * batch, length) != 0  # [V*B, L]
    target_rows = scored.flatten().nonzero(as_tuple=True)[0]  # [R]
    row_targets = targets.flatten().index_select(0, target_rows)  # [R]
    model_rows = target_rows
    if block_ids is not None:
        if lm.shift_logits:
            raise ValueError(
                f"the block-diffusion layout scores each token at its own position; family {lm.family.name} shifts "
                f"its logits (set actor_rollout_ref.model.diffusion.logits_shift=false if it does not)"
            )
        blocks = block_ids.to(input_ids.device).repeat(num_views, 1)  # [V*B, L]
        stacked_attention = layout_attention_mask(
            blocks, stacked_attention.bool(), getattr(unwrap(lm.module).config, "_attn_implementation", None)
        )  # [V*B, 1, 2L, 2L] or a BlockMask
        stacked_ids = torch.cat((stacked_ids, targets), dim=1)  # [V*B, 2L]: noisy | clean
        stacked_positions = stacked_positions.repeat(1, 2)  # [V*B, 2L]
        model_rows = target_rows + (target_rows // length) * length  # row v*B+b, column l -> noisy half's column l
    row_logp, row_entropy = lm.scored_logprobs(
        stacked_ids, stacked_attention, stacked_positions, model_rows, row_targets, chunk_rows, with_entropy
    )  # [R], [R] or None

    per_view = torch.zeros(num_views * batch * length, dtype=torch.float32, device=input_ids.device)
    per_view = per_view.index_put((target_rows,), row_logp).view(num_views, batch, length)  # [V, B, L]
    logp = (per_view * coef).sum(0)  # [B, L]

    entropy = None
    if with_entropy:
        first_view_rows = target_rows < batch * length  # view 0 occupies the first B*L flat rows
        entropy = torch.zeros(batch * length, dtype=torch.float32, device=input_ids.device)
        entropy[target_rows[first_view_rows]] = row_entropy[first_view_rows]
        entropy = entropy.view(batch, length)  # [B, L]
    return TokenLogprobs(logp=logp, entropy=entropy, per_view=per_view)
