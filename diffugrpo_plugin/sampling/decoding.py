"""Pure decoding math shared by the samplers: per-row random draws, token sampling,
confidence scores, unmasking schedules and position choice. Plain torch, no model calls.

Randomness always comes from one ``torch.Generator`` per row, drawn only for that row's own
masked positions, so a row's samples never depend on the other rows of the batch.
Packed tensors (``[M, ...]``) list the masked positions of every row, row after row, in
position order: the order of ``tensor[masked]`` for a ``[b, W]`` boolean ``masked``.
"""

from __future__ import annotations

import math

import torch


def row_uniforms(
    generators: list[torch.Generator],
    sizes: list[int],
    trailing: tuple[int, ...] = (),
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Uniform [0, 1) draws, ``sizes[r]`` of them from ``generators[r]``, packed.  # [M, *trailing]"""
    draws = [
        torch.rand((size, *trailing), generator=gen, dtype=dtype, device=device) for gen, size in zip(generators, sizes)
    ]
    return torch.cat(draws, dim=0)


def packed_to_rows(values: torch.Tensor, masked: torch.Tensor, fill: float) -> torch.Tensor:
    """Scatter packed values back to their positions; other positions get ``fill``.  # [M] -> [b, W]"""
    full = torch.full(masked.shape, fill, dtype=values.dtype, device=values.device)  # [b, W]
    full[masked] = values
    return full


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter: keep the most likely tokens up to the one whose cumulative probability
    first exceeds ``top_p``; the rest get -inf.  # [M, V]

    The most likely token always survives, so a row is never left empty.
    """
    sorted_logits, sorted_index = torch.sort(logits, dim=-1, descending=True)  # [M, V]
    sorted_probs = torch.softmax(sorted_logits, dim=-1)  # [M, V]
    # A token is dropped when the tokens ranked before it already exceed top_p (Dream's rule).
    drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) > top_p  # [M, V]
    drop = torch.zeros_like(drop_sorted).scatter(-1, sorted_index, drop_sorted)  # [M, V]
    return logits.masked_fill(drop, -math.inf)


def top_p_then_top_k_filter(logits: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
    """``top_k_filter(top_p_filter(logits, top_p), top_k)`` (Dream's order) without sorting the vocabulary.  # [M, V]

    Both keep a prefix of the tokens ranked by logit, so only the ``top_k`` best can survive: their probabilities
    (normalised over the whole vocabulary) decide the nucleus. Sorting every masked position's ``V`` logits took a
    third of the sampler's time at the job's settings (1,645 tokens, top-k 50; ``py-spy`` in the trainer worker).
    Rows where equal logits meet at either edge go the sorting way, so that the sort's order among them decides as
    it does there: the ``top_k``-th logit tied with one ranked below it (``top_k_filter`` keeps every tie), or the
    nucleus ending between two equal logits (frequent in bf16). Each threshold then compares the same sums; only the
    softmax's normaliser is added up in another order, so a token exactly at the nucleus's edge may differ in the
    last bit of its cumulative probability.
    """
    top_k = min(top_k, logits.shape[-1])
    best, index = torch.topk(logits, top_k, dim=-1)  # [M, k], descending
    probs = torch.softmax(logits, dim=-1).gather(-1, index)  # [M, k]
    in_nucleus = (probs.cumsum(dim=-1) - probs) <= top_p  # [M, k]: the complement of top_p_filter's drop rule
    kept = torch.full_like(logits, -math.inf).scatter(-1, index, best.masked_fill(~in_nucleus, -math.inf))  # [M, V]
    edge_tie = (in_nucleus[:, :-1] & ~in_nucleus[:, 1:] & (best[:, :-1] == best[:, 1:])).any(dim=-1)  # [M]
    tied = edge_tie | ((logits >= best[:, -1:]).sum(dim=-1) > top_k)  # [M]
    if tied.any():
        kept[tied] = top_k_filter(top_p_filter(logits[tied], top_p), top_k)
    return kept


def top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of every row; the rest get -inf.  # [M, V]"""
    top_k = min(top_k, logits.shape[-1])
    kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # [M, 1]
    return logits.masked_fill(logits < kth_largest, -math.inf)


def sample_categorical(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: the first token whose cumulative probability exceeds ``u * total``.  # [M, V], [M] -> [M]

    The chosen token always has positive probability: the CDF rises at it.
    """
    cdf = probs.cumsum(dim=-1)  # [M, V]
    total = cdf[:, -1]  # [M]
    # Keep the target strictly below the total so float rounding of u * total never runs past the end.
    targets = torch.minimum(uniforms * total, torch.nextafter(total, torch.zeros_like(total)))  # [M]
    return torch.searchsorted(cdf, targets.unsqueeze(-1), right=True).squeeze(-1)


def gumbel_argmax(logits: torch.Tensor, temperature: float, uniforms: torch.Tensor | None) -> torch.Tensor:
    """LLaDA's Gumbel-max token choice in float64: ``argmax(exp(l) / (-log u) ** T)``.  # [M, V] -> [M]

    Equal to ``argmax(l / T + Gumbel noise)``; ``temperature == 0`` is a plain argmax and
    needs no ``uniforms`` (``[M, V]`` float64 otherwise).
    """
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits64 = logits.to(torch.float64)  # [M, V]
    # log of exp(l) / (-log u)^T; the log form avoids overflow of exp(l) without changing the argmax.
    noisy = logits64 - temperature * torch.log(-torch.log(uniforms.clamp_min(torch.finfo(torch.float64).tiny)))
    return noisy.argmax(dim=-1)


def negative_entropy(probs: torch.Tensor) -> torch.Tensor:
    """``sum p log p`` per row: 0 for a one-hot distribution, lower when spread out.  # [M, V] -> [M]"""
    return (probs * torch.log(probs + 1e-10)).sum(dim=-1)


def top1_margin(probs: torch.Tensor) -> torch.Tensor:
    """Probability of the best token minus that of the second best.  # [M, V] -> [M]"""
    top2 = torch.topk(probs, 2, dim=-1).values  # [M, 2]
    return top2[:, 0] - top2[:, 1]


def dream_transfer_count(num_masked: int, step: int, steps: int, timesteps: torch.Tensor) -> int:
    """Tokens Dream unmasks at ``step``: ``int(m * (1 - s / t))``, and every remaining one at the last step.

    ``timesteps`` is ``linspace(1, eps, steps + 1)`` in float32, as in Dream's reference, so the
    rounding matches it (with ``steps == m`` the first step unmasks 0 tokens and the last 2).
    """
    if step == steps - 1:
        return num_masked
    t, s = timesteps[step], timesteps[step + 1]
    return int(num_masked * (1 - s / t))


def llada_transfer_count(block_length: int, step: int, steps: int, num_masked: int) -> int:
    """Tokens LLaDA unmasks at ``step`` of a block: its precomputed equal split of the block's masks
    (``block_length // steps`` each, one more in the first ``block_length % steps`` steps), capped by
    what is still masked (a threshold step may have unmasked extra tokens).

    The split is fixed when the block starts, as in LLaDA's ``generate``: a position that takes
    the mask token itself stays masked and is not made up for later.
    """
    base, extra = divmod(block_length, steps)
    return min(num_masked, base + int(step < extra))


def top_k_mask(scores: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The ``counts[r]`` highest-scoring positions of each row (ties: lower index first).  # [b, W], [b] -> [b, W]"""
    order = torch.argsort(scores, dim=-1, descending=True, stable=True)  # [b, W]
    ranks = torch.argsort(order, dim=-1)  # [b, W]: rank of each position
    return ranks < counts.unsqueeze(-1)


def factor_choice(confidence: torch.Tensor, factor: float) -> torch.Tensor:
    """Fast-dLLM's factor rule: the ``n`` most confident positions of each row, ``n`` the largest count
    whose ``k``-th best confidence is at least ``1 - factor / (k + 1)`` for every ``k <= n``.  # [b, W] -> [b, W]

    The bar falls as ``n`` grows: decoding ``n`` tokens at once is allowed when their expected
    number of errors stays below about ``factor``. Positions with confidence ``-inf`` are never chosen.
    """
    ranked = torch.sort(confidence, dim=-1, descending=True).values  # [b, W]
    k = torch.arange(1, confidence.shape[-1] + 1, device=confidence.device, dtype=confidence.dtype)  # [W]
    clears_bar = ranked >= 1 - factor / (k + 1)  # [b, W]
    counts = clears_bar.long().cumprod(dim=-1).sum(dim=-1)  # [b]: leading run of ranks that clear their bar
    return top_k_mask(confidence, counts)
