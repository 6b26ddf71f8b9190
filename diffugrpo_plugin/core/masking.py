"""Maskers: how a completion is noised so a diffusion LM's log-likelihood can be estimated.

A masker turns a batch into ``V`` noised views plus a coefficient per view and token; the
estimate of ``log p(x_l)`` for completion token ``l`` is::

    sum_v coef[v, b, l] * log p_theta(x[b, l] | noisy[v, b])

The estimate must only use positions masked in that view (the model cannot score a token
it sees). Positions whose coefficient is zero in a view need no vocabulary projection
there, which is what makes the coupled pass cheap (see :mod:`diffugrpo_plugin.core.logprobs`).

Randomness is per sample: row ``b`` draws from its own ``torch.Generator`` seeded with
``seeds[b]``, first ``t`` then one uniform per completion token in order, then (only with
prompt masking) one per prompt token. A sample's mask therefore depends on its seed and
its own lengths only, never on padding or on the other rows of the micro-batch, so the
old-policy, reference and update passes of one sample see identical masks. The global RNG
is never touched. Draws happen on the CPU so masks are identical on every device.

Built-in maskers (registered through the ``diffugrpo_maskers`` hook, like a plugin's):

* ``coupled`` (DiffuCoder): completion fully masked; masked iff ``r < t``; the complement.
  Weights ``1/2``, ``1/(2t)``, ``1/(2(1-t))``; every completion token is masked in exactly
  one of the pair. ``t ~ U(t_min, t_max)``, per sample.
* ``pair``: only the complementary pair, weights ``1/t`` and ``1/(1-t)``.
* ``d1``: one view, completion fully masked (weight 1), with d1's random prompt masking.
* ``sft`` (LLaDA's SFT noising): one view; ``t ~ U(eps, 1)`` per sample, each completion token
  masked iff ``r < t`` (probability ``t``), weight ``1/t`` on masked tokens. The masked
  diffusion loss is then ``-sum(coef * logp)``; the prompt is never masked.

* ``ebpo`` and ``spg``: the estimators of :mod:`diffugrpo_plugin.core.estimators` (EBPO's per-block stratified
  masking; SPG's block-wise views, whose estimate is not the weighted sum: it defines ``combine``).

**Per block** (block-diffusion models: SDAR, LLaDA2.x): ``coupled`` and ``pair`` take ``block_ids`` [B, L], each
token's block. Each block ``b`` with ``n_b`` completion tokens draws its own ``t_b ~ U(t_range)`` and masks exactly
``k_b = clamp(round(t_b n_b), 1, n_b - 1)`` of them (the ``k_b`` with the smallest ``r``; ``k_b = 1`` when
``n_b = 1``), weight ``n_b / k_b``; the complement masks the other ``n_b - k_b``, weight ``n_b / (n_b - k_b)``: the
inverse of the masked fraction, so each token's expected weight in a view is 1, as with ``1/t``. Every block then has
at least one masked token in the first view, and in the second too wherever it has two completion tokens. The fully
masked view masks every completion token (each block fully masked, seeing earlier clean blocks in the training
layout). Draws per sample: the ``t_b`` in block order, then one uniform per completion token in order.

``coupled``, ``pair`` and ``d1`` accept ``p_mask_prompt``: mask each prompt token with that
probability (one draw per sample, shared by its views). Off (0) by default: the prompt is
never masked.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from diffugrpo_plugin import hookimpl

# check_views and MaskedViews stay importable from here, the path the hook documentation named before core.views
from diffugrpo_plugin.core.views import MaskedViews, check_views  # noqa: F401

DEFAULT_T_RANGE = (0.2, 0.8)  # DiffuCoder's: the masked fraction t ~ U(0.2, 0.8) of the coupled pair


class Masker(Protocol):
    """What a masker factory returns (see :func:`diffugrpo_plugin.hookspecs.diffugrpo_maskers`)."""

    def views(
        self,
        input_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        mask_id: int,
        seeds: torch.Tensor,
        prompt_mask: torch.Tensor | None = None,
    ) -> MaskedViews:
        """Noise ``input_ids`` [B, L]; ``completion_mask`` [B, L] bool marks completion tokens,
        ``prompt_mask`` [B, L] bool the real (non-padding) prompt tokens, ``seeds`` [B] int64.

        A masker that masks per block also takes ``block_ids`` [B, L] (each token's block, non-decreasing along a
        row); the training engine passes it for block-diffusion models and refuses a masker without it."""
        ...


def _draw_per_sample(
    completion_mask: torch.Tensor,
    seeds: torch.Tensor,
    t_range: tuple[float, float],
    prompt_mask: torch.Tensor | None,
    p_mask_prompt: float,
):
    """Per-sample draws: ``t`` [B], ``r`` [B, L] (uniform on completion tokens, 2 elsewhere),
    and the prompt positions to mask [B, L] bool. All computed on CPU, returned on the input's device."""
    t_min, t_max = t_range
    batch, length = completion_mask.shape
    completion_cpu = completion_mask.detach().to("cpu", torch.bool)
    prompt_cpu = None if prompt_mask is None else prompt_mask.detach().to("cpu", torch.bool)
    t = torch.empty(batch, dtype=torch.float64)
    r = torch.full((batch, length), 2.0, dtype=torch.float64)  # 2 never satisfies r < t
    masked_prompt = torch.zeros(batch, length, dtype=torch.bool)
    generator = torch.Generator(device="cpu")
    for b in range(batch):
        generator.manual_seed(int(seeds[b]))
        t[b] = t_min + (t_max - t_min) * torch.rand((), generator=generator, dtype=torch.float64)
        positions = completion_cpu[b].nonzero(as_tuple=True)[0]
        r[b, positions] = torch.rand(positions.numel(), generator=generator, dtype=torch.float64)
        if p_mask_prompt > 0 and prompt_cpu is not None:
            prompt_positions = prompt_cpu[b].nonzero(as_tuple=True)[0]
            hits = torch.rand(prompt_positions.numel(), generator=generator, dtype=torch.float64) < p_mask_prompt
            masked_prompt[b, prompt_positions[hits]] = True
    device = completion_mask.device
    return t.to(device), r.to(device), masked_prompt.to(device)


def _draw_per_block(completion_mask: torch.Tensor, block_ids: torch.Tensor, seeds: torch.Tensor, t_range):
    """Per-block draws: the first view's masked completion tokens [B, L] bool and each token's block size ``n_b``
    and first-view count ``k_b`` [B, L] (0 off the completion), computed on CPU, returned on the input's device."""
    t_min, t_max = t_range
    batch, length = completion_mask.shape
    completion_cpu = completion_mask.detach().to("cpu", torch.bool)
    blocks_cpu = block_ids.detach().to("cpu", torch.int64)
    in_first = torch.zeros(batch, length, dtype=torch.bool)
    block_tokens = torch.zeros(batch, length, dtype=torch.float64)
    first_count = torch.zeros(batch, length, dtype=torch.float64)
    generator = torch.Generator(device="cpu")
    for b in range(batch):
        generator.manual_seed(int(seeds[b]))
        positions = completion_cpu[b].nonzero(as_tuple=True)[0]
        row_blocks = blocks_cpu[b, positions]  # [n]
        _, sizes = torch.unique_consecutive(row_blocks, return_counts=True)  # [blocks]: completion tokens a block
        t = t_min + (t_max - t_min) * torch.rand(len(sizes), generator=generator, dtype=torch.float64)
        r = torch.rand(positions.numel(), generator=generator, dtype=torch.float64)
        counts = torch.round(t * sizes).clamp(min=1).minimum((sizes - 1).clamp(min=1))  # [blocks]
        start = 0
        for size, count in zip(sizes.tolist(), counts.tolist()):
            span = positions[start : start + size]
            chosen = span[torch.argsort(r[start : start + size])[: int(count)]]
            in_first[b, chosen] = True
            block_tokens[b, span] = size
            first_count[b, span] = count
            start += size
    device = completion_mask.device
    return in_first.to(device), block_tokens.to(device), first_count.to(device)


def _check_inputs(input_ids: torch.Tensor, completion_mask: torch.Tensor, seeds: torch.Tensor) -> None:
    if input_ids.shape != completion_mask.shape:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and completion_mask {tuple(completion_mask.shape)} "
            f"must have the same [B, L] shape"
        )
    if seeds.shape != (input_ids.shape[0],):
        raise ValueError(
            f"seeds must be one integer per row: expected shape ({input_ids.shape[0]},), got {tuple(seeds.shape)}"
        )


def _validate_options(t_range: tuple[float, float], p_mask_prompt: float) -> tuple[float, float]:
    try:
        t_min, t_max = (float(v) for v in t_range)
        p_mask_prompt = float(p_mask_prompt)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"t_range must be two numbers and p_mask_prompt a number; got t_range={t_range!r}, "
            f"p_mask_prompt={p_mask_prompt!r}"
        ) from error
    if not 0.0 < t_min <= t_max < 1.0:
        raise ValueError(
            f"t_range must satisfy 0 < t_min <= t_max < 1 (the weights are 1/t and 1/(1-t)); got {t_range}"
        )
    if not 0.0 <= p_mask_prompt < 1.0:
        raise ValueError(f"p_mask_prompt must be in [0, 1); got {p_mask_prompt}")
    return t_min, t_max


class CoupledMasker:
    """DiffuCoder's coupled sampling: fully masked + a complementary pair, averaged."""

    def __init__(
        self,
        t_range: tuple[float, float] = DEFAULT_T_RANGE,
        p_mask_prompt: float = 0.0,
        include_fully_masked: bool = True,
    ):
        self.t_range = _validate_options(t_range, p_mask_prompt)
        self.p_mask_prompt = float(p_mask_prompt)
        self.include_fully_masked = include_fully_masked

    def views(self, input_ids, completion_mask, mask_id, seeds, prompt_mask=None, block_ids=None) -> MaskedViews:
        _check_inputs(input_ids, completion_mask, seeds)
        completion = completion_mask.bool()
        if block_ids is None:
            t, r, masked_prompt = _draw_per_sample(completion, seeds, self.t_range, prompt_mask, self.p_mask_prompt)
            in_first = completion & (r < t[:, None])  # [B, L]
            first_weight, second_weight = 1.0 / t[:, None], 1.0 / (1.0 - t[:, None])  # [B, 1]
        else:
            if block_ids.shape != input_ids.shape:
                raise ValueError(f"block_ids {tuple(block_ids.shape)} must be [B, L] like input_ids")
            if self.p_mask_prompt > 0:
                raise ValueError(
                    "p_mask_prompt must be 0 for a block-diffusion model, whose noisy half masks completion blocks only: "
                    "set actor_rollout_ref.model.diffusion.masker_kwargs.p_mask_prompt=0"
                )
            in_first, block_tokens, first_count = _draw_per_block(completion, block_ids, seeds, self.t_range)
            masked_prompt = torch.zeros_like(completion)
            second_count = (block_tokens - first_count).clamp(min=1)  # where 0, no token is in the second view
            first_weight, second_weight = block_tokens / first_count.clamp(min=1), block_tokens / second_count
        in_second = completion & ~in_first  # [B, L], exact complement on the completion
        pair_scale = 0.5 if self.include_fully_masked else 1.0
        masks = [in_first, in_second]
        coefs = [in_first * first_weight * pair_scale, in_second * second_weight * pair_scale]
        if self.include_fully_masked:
            masks.insert(0, completion)
            coefs.insert(0, completion * 0.5)
        noisy = torch.stack([torch.where(m | masked_prompt, mask_id, input_ids) for m in masks])  # [V, B, L]
        coef = torch.stack(coefs).to(torch.float32)  # [V, B, L]
        return MaskedViews(noisy=noisy, coef=coef)


def make_coupled(t_range=DEFAULT_T_RANGE, p_mask_prompt: float = 0.0) -> CoupledMasker:
    """Coupled-GRPO (DiffuCoder): fully masked view plus a complementary pair, t ~ U(t_range)."""
    return CoupledMasker(t_range, p_mask_prompt, include_fully_masked=True)


def make_pair(t_range=DEFAULT_T_RANGE, p_mask_prompt: float = 0.0) -> CoupledMasker:
    """Complementary pair only: masked iff r < t (weight 1/t) and its complement (weight 1/(1-t))."""
    return CoupledMasker(t_range, p_mask_prompt, include_fully_masked=False)


class FullyMaskedMasker:
    """d1's one-step estimate: the completion fully masked, optional random prompt masking."""

    def __init__(self, p_mask_prompt: float = 0.15):
        _validate_options((0.5, 0.5), p_mask_prompt)
        self.p_mask_prompt = float(p_mask_prompt)

    def views(self, input_ids, completion_mask, mask_id, seeds, prompt_mask=None) -> MaskedViews:
        _check_inputs(input_ids, completion_mask, seeds)
        completion = completion_mask.bool()
        _, _, masked_prompt = _draw_per_sample(completion, seeds, (0.5, 0.5), prompt_mask, self.p_mask_prompt)
        noisy = torch.where(completion | masked_prompt, mask_id, input_ids)[None]  # [1, B, L]
        return MaskedViews(noisy=noisy, coef=completion[None].to(torch.float32))


def make_d1(p_mask_prompt: float = 0.15) -> FullyMaskedMasker:
    """d1 (diffu-GRPO): one view with the completion fully masked and prompt tokens masked at p_mask_prompt."""
    return FullyMaskedMasker(p_mask_prompt)


class SFTMasker:
    """LLaDA's SFT noising: one view, completion tokens masked at a per-sample rate ``t``, weight ``1/t``."""

    def __init__(self, eps: float = 1e-3):
        if not 0.0 < float(eps) < 1.0:
            raise ValueError(f"eps must be in (0, 1): t ~ U(eps, 1) and masked tokens weigh 1/t; got {eps}")
        self.eps = float(eps)

    def views(self, input_ids, completion_mask, mask_id, seeds, prompt_mask=None) -> MaskedViews:
        _check_inputs(input_ids, completion_mask, seeds)
        completion = completion_mask.bool()
        # U(eps, 1): the same draw as LLaDA's p_mask = (1 - eps) * U(0, 1) + eps
        t, r, _ = _draw_per_sample(completion, seeds, (self.eps, 1.0), None, 0.0)
        masked = completion & (r < t[:, None])  # [B, L]
        noisy = torch.where(masked, mask_id, input_ids)[None]  # [1, B, L]
        coef = (masked / t[:, None]).to(torch.float32)[None]  # [1, B, L]
        return MaskedViews(noisy=noisy, coef=coef)


def make_sft(eps: float = 1e-3) -> SFTMasker:
    """Masked-diffusion SFT (LLaDA): one view, t ~ U(eps, 1) per sample, tokens masked with probability t, weight 1/t."""
    return SFTMasker(eps)


def mask_seed_table(
    base_seed: int, step: int, num_samples: int, num_iterations: int, random_masking: bool = True
) -> torch.Tensor:
    """Mask seeds for one training step: row ``b``, column ``k`` seeds sample ``b``'s mask in iteration ``k``.

    With ``random_masking`` every (step, sample, iteration) gets its own seed, derived from
    ``base_seed`` so a run (and its resumption) is reproducible. Without it every entry is
    ``base_seed``: the reference's fixed masks (``random_masking=False``).  # -> [num_samples, num_iterations] int64
    """
    if not random_masking:
        return torch.full((num_samples, num_iterations), int(base_seed), dtype=torch.int64)
    sequence = np.random.SeedSequence([int(base_seed), int(step)])
    words = sequence.generate_state(num_samples * num_iterations * 2, dtype=np.uint32).astype(np.uint64)
    seeds = ((words[0::2] << np.uint64(31)) ^ words[1::2]) & np.uint64(2**62 - 1)
    return torch.from_numpy(seeds.astype(np.int64)).view(num_samples, num_iterations)


def masker_options(masker_kwargs) -> dict:
    """The options config gives a masker (``actor_rollout_ref.model.diffusion.masker_kwargs``), a null one left to
    the factory's default: an algorithm config extending another nulls the options its masker does not take
    (Hydra merges keys, never removes them)."""
    return {key: value for key, value in dict(masker_kwargs or {}).items() if value is not None}


@hookimpl
def diffugrpo_maskers():
    from diffugrpo_plugin.core.estimators.ebpo import make_ebpo
    from diffugrpo_plugin.core.estimators.spg import make_spg
    from diffugrpo_plugin.core.estimators.trace_replay import make_trace_replay

    return {
        "coupled": make_coupled,
        "pair": make_pair,
        "d1": make_d1,
        "sft": make_sft,
        "ebpo": make_ebpo,
        "spg": make_spg,
        "trace_replay": make_trace_replay,
    }
