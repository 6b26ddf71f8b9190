"""The autograd kernels under the coupled log-probs: ``log softmax(logits)[target]`` in fp32 without ever
holding the vocabulary-wide logits of a batch.

* :func:`chunked_gathered_logprob`: from logits already computed, by chunks of rows, with a one-buffer backward.
* :func:`fused_head_logprob`: the vocabulary projection and the fp32 log-softmax together, one vocabulary slice of
  logits at a time, recomputed in the backward: no ``[rows, V]`` tensor is ever alive, so the memory beside the
  model does not grow with the vocabulary (``benchmarks/coupled_logprob.py`` measures it).

A leaf: plain torch, nothing else of ours (the model wrapper and the coupled estimate build on it).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from diffugrpo_plugin.config.defaults import DIFFUSION_DEFAULTS

# The memory cap of a chunk of logits: chunk_rows x V elements of fp32. The chunked log-softmax takes chunks of this
# many rows; the fused head's vocabulary slices never exceed it.
DEFAULT_CHUNK_ROWS = DIFFUSION_DEFAULTS.chunk_rows


def _row_chunks(num_rows: int, chunk_rows: int) -> list[slice]:
    return [slice(start, start + chunk_rows) for start in range(0, num_rows, chunk_rows)]


def _chunked_forward(logits: torch.Tensor, targets: torch.Tensor, chunk_rows: int, with_entropy: bool):
    """Per-row ``logp``, ``log_normaliser`` and (optionally) ``entropy``, all fp32, one chunk at a time.

    logits [R, V]; targets [R] -> logp [R], log_normaliser [R], entropy [R] or None.
    """
    logp = torch.empty(targets.shape[0], dtype=torch.float32, device=targets.device)  # [R]
    log_normaliser = torch.empty_like(logp)  # [R]
    entropy = torch.empty_like(logp) if with_entropy else None  # [R]
    for rows in _row_chunks(targets.shape[0], chunk_rows):
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
            chunk_grad = torch.sub(
                logits[rows].float(), log_normaliser[rows, None], out=grad[rows] if in_place else None
            )  # [r, V]
            upstream = grad_logp[rows, None].float()  # [r, 1]
            chunk_grad.exp_().mul_(-upstream)  # -g * softmax
            chunk_grad.scatter_add_(-1, targets[rows, None], upstream)  # +g at the target
            if not in_place:
                grad[rows] = chunk_grad
        return grad, None, None, None


def chunked_gathered_logprob(
    logits: torch.Tensor, targets: torch.Tensor, chunk_rows: int = DEFAULT_CHUNK_ROWS, with_entropy: bool = False
):
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


def _slice_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, scale: float, out: torch.Tensor
) -> torch.Tensor:
    """fp32 logits ``scale * (weight @ hidden.T + bias)`` of one vocabulary slice (``weight``/``bias`` are the
    slice's rows), written into ``out``.  # [v, R]

    Computed in the head's dtype, as the model computes them: an fp32 head writes straight into ``out``,
    others into a temporary that is then widened into it.
    """
    in_place = weight.dtype == torch.float32
    target = out if in_place else None
    if bias is None:
        logits = torch.mm(weight, hidden.t(), out=target)
    else:
        logits = torch.addmm(bias[:, None], weight, hidden.t(), out=target)
    if scale != 1.0:
        logits.mul_(scale)
    return out if in_place else out.copy_(logits)


# The widest vocabulary slice, by where the head runs. On a CPU, [1024, rows] fp32 slices keep the exp pass and
# the two gradient matmuls that reread the slice close to the cache; much narrower slices starve the matmuls. A
# GPU's matmuls starve at 1024 columns: 16384 is faster for a little more memory, which stays under the training
# pass's peak (a layer's recomputation). docs/results/h100.md has the measurements (benchmarks/gpu.py).
SLICE_COLUMNS = 1024
SLICE_COLUMNS_GPU = 16384


def slice_columns(device: torch.device) -> int:
    """The widest vocabulary slice on ``device`` (:data:`SLICE_COLUMNS` on CPU, :data:`SLICE_COLUMNS_GPU` else)."""
    return SLICE_COLUMNS if device.type == "cpu" else SLICE_COLUMNS_GPU


def _vocab_slices(num_rows: int, vocab: int, chunk_rows: int, columns: int = SLICE_COLUMNS) -> list[slice]:
    """Vocabulary slices of at most ``columns`` columns whose ``[width, num_rows]`` logits hold no more
    elements than one ``[chunk_rows, V]`` chunk."""
    width = max(1, min(columns, chunk_rows * vocab // max(num_rows, 1)))
    return [slice(start, min(start + width, vocab)) for start in range(0, vocab, width)]


def _online_forward(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float,
    targets: torch.Tensor,
    slices: list[slice],
    with_entropy: bool,
):
    """Per-row fp32 ``logp``, ``log_normaliser`` and (optionally) ``entropy`` from the vocabulary slices' logits,
    combined online: a running maximum and a sum of ``exp(logit - maximum)`` per row, rescaled whenever the
    maximum grows (as flash attention combines its key blocks), so one ``[v, R]`` slice exists at a time.

    hidden [R, H]; weight [V, H]; targets [R] -> logp [R], log_normaliser [R], entropy [R] or None.
    """
    num_rows = targets.shape[0]
    row_index = torch.arange(num_rows, device=targets.device)  # [R]
    running_max = torch.full((num_rows,), -torch.inf, dtype=torch.float32, device=targets.device)  # [R]
    exp_sum = torch.zeros_like(running_max)  # [R] sum_v exp(x_v - running_max)
    centred = torch.zeros_like(running_max) if with_entropy else None  # [R] sum_v exp(x_v - m) * (x_v - m)
    target_logit = torch.empty_like(running_max)  # [R]
    buffer = torch.empty(slices[0].stop, num_rows, dtype=torch.float32, device=targets.device)  # [v, R], reused
    for cols in slices:
        logits = _slice_logits(
            hidden, weight[cols], None if bias is None else bias[cols], scale, buffer[: cols.stop - cols.start]
        )  # [v, R]
        inside = (targets >= cols.start) & (targets < cols.stop)  # [R]
        target_logit[inside] = logits[targets[inside] - cols.start, row_index[inside]]
        new_max = torch.maximum(running_max, logits.amax(0))  # [R]
        max_step = running_max - new_max  # [R] <= 0; -inf on the first slice
        decay = max_step.exp()  # [R] rescales what was summed against the old maximum
        logits.sub_(new_max)  # x - m
        if with_entropy:
            probs = logits.exp()  # [v, R] unnormalised
            # re-centre the old sum on the new maximum; nothing was summed yet where exp_sum is 0
            centred = decay * (centred + torch.where(exp_sum > 0, max_step * exp_sum, 0.0)) + (probs * logits).sum(0)
            slice_sum = probs.sum(0)  # [R]
        else:
            slice_sum = logits.exp_().sum(0)  # [R]
        exp_sum = decay * exp_sum + slice_sum
        running_max = new_max
    log_normaliser = running_max + exp_sum.log()  # [R]
    entropy = exp_sum.log() - centred / exp_sum if with_entropy else None  # -sum p log p
    return target_logit - log_normaliser, log_normaliser, entropy


class _FusedHeadLogprob(torch.autograd.Function):
    """``log softmax(scale * (hidden @ weight.T + bias))[target]`` per row, never holding ``[R, V]`` logits.

    Both passes walk the vocabulary in slices of ``[v, R]`` logits, reusing one buffer. Forward: each
    slice folded into a running log-normaliser (:func:`_online_forward`). Backward: each slice
    recomputed from the saved hidden rows and turned into ``g * (onehot(target) - softmax)`` with the
    saved log-normaliser. Slicing the vocabulary (not the rows) means each slice of the weight's
    gradient comes from one matmul, written straight into its place: no ``[V, H]`` accumulator, so a
    bf16 weight's gradient is rounded once, as the unfused ``linear`` rounds it. verl's
    ``FusedLinearForPPO`` does the same job but differentiates its entropy, takes three exponential
    passes per chunk, has no bias or logit scale (LLaDA's ``scale_logits``), and accumulates the
    weight's gradient over row chunks.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, scale, chunk_rows, with_entropy):
        slices = _vocab_slices(hidden.shape[0], weight.shape[0], chunk_rows, slice_columns(hidden.device))
        logp, log_normaliser, entropy = _online_forward(hidden, weight, bias, scale, targets, slices, with_entropy)
        ctx.save_for_backward(hidden, weight, bias, targets, log_normaliser)
        ctx.scale, ctx.slices = scale, slices
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)  # a metric: never part of the graph
        return logp, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logp, _grad_entropy):
        # d logp_r / d logits_r = onehot(target_r) - softmax_r, times the upstream g_r and the logit scale. The
        # softmax part goes through the vocabulary slices with g folded into the small operands (the hidden rows
        # before the weight's matmul, the hidden gradient after), so each [v, R] slice costs one exp pass; the
        # onehot part is a gather / index_add over the R targets.
        hidden, weight, bias, targets, log_normaliser = ctx.saved_tensors
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        upstream = grad_logp.float() * ctx.scale  # [R]
        weighted_hidden = (upstream[:, None] * hidden.float()).to(weight.dtype)  # [R, H]
        softmax_hidden = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)  # [R, H]
        grad_weight = torch.empty_like(weight) if want_weight else None  # [V, H]
        grad_bias = torch.empty_like(bias) if want_bias else None  # [V]
        buffer = torch.empty(ctx.slices[0].stop, hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for cols in ctx.slices:
            probs = (
                _slice_logits(
                    hidden,
                    weight[cols],
                    None if bias is None else bias[cols],
                    ctx.scale,
                    buffer[: cols.stop - cols.start],
                )
                .sub_(log_normaliser)
                .exp_()
            )  # [v, R] fp32
            if want_bias:
                grad_bias[cols] = -(probs @ upstream)  # [v]
            probs = probs.to(weight.dtype)  # the head's dtype for its gradient matmuls, as the unfused backward
            if want_hidden:  # [R, H]: sum_v p[r, v] W[v]
                if probs.dtype == torch.float32:
                    softmax_hidden.addmm_(probs.t(), weight[cols])
                else:
                    softmax_hidden.add_(probs.t() @ weight[cols])
            if want_weight:
                torch.mm(probs, weighted_hidden, out=grad_weight[cols])  # [v, H]: sum_r g_r p[r, v] h_r
        if want_weight:
            grad_weight.neg_().index_add_(0, targets, weighted_hidden)
        if want_bias:
            grad_bias.index_add_(0, targets, upstream.to(bias.dtype))
        grad_hidden = None
        if want_hidden:
            grad_hidden = (upstream[:, None] * (weight[targets].float() - softmax_hidden)).to(hidden.dtype)  # [R, H]
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def fused_head_logprob(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale: float = 1.0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    with_entropy: bool = False,
):
    """The vocabulary head and ``log softmax(logits)[target]`` in fp32, fused: at most ``chunk_rows x V``
    logits exist at a time, in the forward and in the backward (which recomputes them).

    hidden [R, H]; weight [V, H]; bias [V] or None; logits = ``scale * (hidden @ weight.T + bias)``;
    targets [R] -> logp [R] fp32 (differentiable) (, entropy [R] fp32, detached).
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive number of rows, got {chunk_rows}")
    logp, entropy = _FusedHeadLogprob.apply(hidden, weight, bias, targets, float(scale), chunk_rows, with_entropy)
    return (logp, entropy) if with_entropy else logp
