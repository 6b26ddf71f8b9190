"""Coupled per-token log-probabilities, computing the vocabulary projection only where used.

Given a :class:`~diffugrpo_plugin.masking.MaskedViews` (``V`` noised copies and a
coefficient per view and token), the estimate for token ``(b, l)`` is
``sum_v coef[v, b, l] * log p(x[b, l] | noisy[v, b])``.

The reference implementation runs the full vocabulary projection and a full-vocabulary
log-softmax for every position of every view (``3 x B x L x V`` floats). Here the
transformer body still runs on all ``V`` views (the attention needs every position), but only
the hidden rows whose coefficient is non-zero reach the vocabulary projection
(:meth:`~diffugrpo_plugin.models.DiffusionLM.scored_logits`), so for the coupled masker the
head sees ``2 x`` the completion tokens. The log-softmax is then taken in fp32 chunk by
chunk, and its backward writes the gradient straight into one buffer the size of the
selected logits: beside the head's output, the pass never holds more than that buffer and
one fp32 chunk (see ``benchmarks/coupled_logprob.py`` for the measured effect).

Plain torch; no verl.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from diffugrpo_plugin.masking import MaskedViews
from diffugrpo_plugin.models import DiffusionLM, position_ids_from_mask

DEFAULT_CHUNK_ROWS = 1024


@dataclass
class TokenLogprobs:
    """Per-token outputs of a coupled pass.

    Attributes:
        logp: the coupled log-likelihood estimate per token; 0 where no view scores it.  # [B, L]
        entropy: entropy (nats) of view 0's predictive distribution at its scored tokens,
            0 elsewhere; ``None`` unless asked for.  # [B, L]
    """

    logp: torch.Tensor
    entropy: torch.Tensor | None = None


def _row_chunks(num_rows: int, chunk_rows: int) -> list[slice]:
    return [slice(start, start + chunk_rows) for start in range(0, num_rows, chunk_rows)]


def _chunked_forward(logits: torch.Tensor, targets: torch.Tensor, chunk_rows: int, with_entropy: bool):
    """Per-row ``logp``, ``log_normaliser`` and (optionally) ``entropy``, all fp32, one chunk at a time.

    logits [R, V]; targets [R] -> logp [R], log_normaliser [R], entropy [R] or None.
    """
    num_rows = logits.shape[0]
    logp = torch.empty(num_rows, dtype=torch.float32, device=logits.device)  # [R]
    log_normaliser = torch.empty_like(logp)  # [R]
    entropy = torch.empty_like(logp) if with_entropy else None  # [R]
    for rows in _row_chunks(num_rows, chunk_rows):
        chunk = logits[rows].float()  # [r, V]
        log_normaliser[rows] = torch.logsumexp(chunk, dim=-1)
        logp[rows] = chunk.gather(-1, targets[rows, None]).squeeze(-1) - log_normaliser[rows]
        if with_entropy:
            entropy[rows] = log_normaliser[rows] - (torch.softmax(chunk, dim=-1) * chunk).sum(-1)
    return logp, log_normaliser, entropy


class _ChunkedTargetLogprob(torch.autograd.Function):
    """``log softmax(logits)[target]`` per row with a hand-written, chunked backward.

    Autograd through ``logsumexp`` and ``gather`` would hold several ``[R, V]`` temporaries
    (the gather's zero-filled gradient, the softmax, their sum); here the gradient
    ``g * (onehot(target) - softmax(logits))`` is written chunk by chunk into one buffer.
    """

    @staticmethod
    def forward(ctx, logits, targets, chunk_rows, with_entropy):
        logp, log_normaliser, entropy = _chunked_forward(logits, targets, chunk_rows, with_entropy)
        ctx.save_for_backward(logits, targets, log_normaliser)
        ctx.chunk_rows = chunk_rows
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)  # a metric: never part of the graph
        return logp, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logp, _grad_entropy):
        logits, targets, log_normaliser = ctx.saved_tensors
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)  # [R, V]
        # fp32 logits: work in the buffer itself; others: in an fp32 chunk, cast in at the end
        in_place = grad.dtype == torch.float32
        for rows in _row_chunks(logits.shape[0], ctx.chunk_rows):
            chunk_grad = torch.sub(logits[rows].float(), log_normaliser[rows, None],
                                   out=grad[rows] if in_place else None)  # [r, V]
            upstream = grad_logp[rows, None].float()  # [r, 1]
            chunk_grad.exp_().mul_(-upstream)  # -g * softmax
            chunk_grad.scatter_add_(-1, targets[rows, None], upstream)  # +g at the target
            if not in_place:
                grad[rows] = chunk_grad
        return grad, None, None, None


def chunked_gathered_logprob(logits: torch.Tensor, targets: torch.Tensor, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                             with_entropy: bool = False):
    """``log softmax(logits)[target]`` in fp32 (and optionally the entropy) over row chunks: no fp32 copy
    of more than one chunk is alive, and the backward needs a single gradient buffer shaped like ``logits``.

    logits [R, V]; targets [R] -> logp [R] fp32 (differentiable) (, entropy [R] fp32, detached).
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive number of rows, got {chunk_rows}")
    if torch.is_grad_enabled() and logits.requires_grad:
        logp, entropy = _ChunkedTargetLogprob.apply(logits, targets, chunk_rows, with_entropy)
    else:
        logp, _, entropy = _chunked_forward(logits.detach(), targets, chunk_rows, with_entropy)
    return (logp, entropy) if with_entropy else logp


def coupled_token_logprobs(lm: DiffusionLM, views: MaskedViews, input_ids: torch.Tensor,
                           attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None,
                           with_entropy: bool = False, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> TokenLogprobs:
    """The coupled estimate of ``log p(x[b, l])`` for every token a view scores.

    Args:
        lm: the model behind the aligned-logits adapter.
        views: noised views and coefficients, ``noisy``/``coef`` [V, B, L].
        input_ids: the clean tokens (the targets).  # [B, L]
        attention_mask: 1 on real tokens, 0 on padding.  # [B, L]
        position_ids: defaults to ``cumsum(attention_mask) - 1``.  # [B, L]
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
    row_logits = lm.scored_logits(stacked_ids, stacked_attention, stacked_positions, target_rows)  # [R, V]

    row_targets = targets.flatten().index_select(0, target_rows)  # [R]
    result = chunked_gathered_logprob(row_logits, row_targets, chunk_rows, with_entropy)
    row_logp, row_entropy = result if with_entropy else (result, None)

    per_view = torch.zeros(num_views * batch * length, dtype=torch.float32, device=input_ids.device)
    per_view = per_view.index_put((target_rows,), row_logp).view(num_views, batch, length)  # [V, B, L]
    logp = (per_view * coef).sum(0)  # [B, L]

    entropy = None
    if with_entropy:
        first_view_rows = target_rows < batch * length  # view 0 occupies the first B*L flat rows
        entropy = torch.zeros(batch * length, dtype=torch.float32, device=input_ids.device)
        entropy[target_rows[first_view_rows]] = row_entropy[first_view_rows]
        entropy = entropy.view(batch, length)  # [B, L]
    return TokenLogprobs(logp=logp, entropy=entropy)
