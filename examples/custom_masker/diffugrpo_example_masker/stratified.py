"""The ``example_stratified`` masker: ``K`` views at stratified mask ratios, an unbiased estimate.

What it estimates. For completion token ``l``, the masked-diffusion likelihood bound averages,
over a mask ratio ``t ~ U(t_min, t_max)``, the model's log-prob of ``x_l`` in a sequence whose
completion tokens are each masked with probability ``t``, counted when ``x_l`` is masked and
weighted ``1/t`` for that chance::

    ell_l = E_{t ~ U(t_min, t_max)} [ f_l(t) ],
    f_l(t) = E_{mask ~ Bernoulli(t)} [ 1{l masked} / t * log p(x_l | masked sequence) ]

How. Stratified sampling of ``t``: ``K`` ratios, one drawn uniformly inside each of ``K`` equal
strata of ``[t_min, t_max]`` (independent offsets ``u_k ~ U(0, 1)``, per sample)::

    t_k = t_min + (t_max - t_min) * (k + u_k) / K,        k = 0 .. K-1

View ``k`` masks each completion token independently with probability ``t_k``. A token masked
in view ``k`` gets the coefficient ``1 / (K t_k)``; every other position gets 0 (the model
cannot score a token it sees). Each ``t_k`` is uniform on its stratum and the strata tile the
range, so::

    E[ sum_k coef_k * log p(x_l | view_k) ] = 1/K sum_k E[ f_l(t_k) ] = E_{t ~ U(t_min, t_max)}[ f_l(t) ] = ell_l

The ratios' part of the variance is never larger than with ``K`` independent ratios, and
``K^2`` times smaller where ``f_l`` is linear in ``t``: ``1/K sum_k t_k`` has variance
``w^2 / (12 K^3)`` against ``w^2 / (12 K)`` (``w = t_max - t_min``). The vocabulary projection
sees on average ``K * (t_min + t_max) / 2`` rows per completion token (2 for the defaults, as
with ``coupled``).

Randomness follows the ``MaskedViews`` contract: row ``b`` draws from its own CPU
``torch.Generator`` seeded with ``seeds[b]``, first the ``K`` offsets, then a ``[K, n]`` block
of uniforms for its ``n`` completion tokens in order, so a sample's masks depend on its seed
and its own tokens only, and the global RNG is never touched. Prompt and padding are never
masked.
"""

from __future__ import annotations

import torch

from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.core.views import MaskedViews


class StratifiedMasker:
    """``num_views`` views, one mask ratio per stratum of ``t_range``, weights ``1 / (K t_k)``."""

    def __init__(self, num_views: int = 4, t_range=(0.2, 0.8)):
        if isinstance(num_views, bool) or not isinstance(num_views, int) or num_views < 1:
            raise ValueError(f"example_stratified: num_views must be a positive integer, got {num_views!r}")
        try:
            t_min, t_max = (float(value) for value in t_range)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"example_stratified: t_range must be two numbers [t_min, t_max], got {t_range!r}"
            ) from exc
        if not 0.0 < t_min <= t_max <= 1.0:
            raise ValueError(
                f"example_stratified: t_range must satisfy 0 < t_min <= t_max <= 1 "
                f"(the weights are 1/(K t)); got {tuple(t_range)}"
            )
        self.num_views = num_views
        self.t_range = (t_min, t_max)

    def ratios(self, offsets: torch.Tensor) -> torch.Tensor:
        """Mask ratio of every view from its offset within its stratum.  # [B, K] -> [B, K] float64"""
        t_min, t_max = self.t_range
        strata = torch.arange(self.num_views, dtype=torch.float64)  # [K]
        return t_min + (t_max - t_min) * (strata[None] + offsets) / self.num_views  # [B, K]

    def views(
        self,
        input_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        mask_id: int,
        seeds: torch.Tensor,
        prompt_mask: torch.Tensor | None = None,
    ) -> MaskedViews:
        """``num_views`` noised copies of ``input_ids`` [B, L]; ``prompt_mask`` is accepted and unused."""
        if input_ids.shape != completion_mask.shape or seeds.shape != (input_ids.shape[0],):
            raise ValueError(
                f"example_stratified: expected input_ids and completion_mask [B, L] and seeds [B]; got "
                f"{tuple(input_ids.shape)}, {tuple(completion_mask.shape)}, {tuple(seeds.shape)}"
            )
        completion = completion_mask.detach().to("cpu", torch.bool)  # [B, L]
        offsets, draws = _draw(completion, seeds, self.num_views)  # [B, K], [K, B, L]
        t = self.ratios(offsets).T[:, :, None]  # [K, B, 1]
        masked = draws < t  # [K, B, L]; draws are 2 off the completion, never below a ratio
        coef = masked / (self.num_views * t)  # [K, B, L]
        device = input_ids.device
        noisy = torch.where(masked.to(device), mask_id, input_ids)  # [K, B, L]
        return MaskedViews(noisy=noisy, coef=coef.to(device, torch.float32))


def _draw(completion: torch.Tensor, seeds: torch.Tensor, num_views: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row stratum offsets [B, K] and uniforms [K, B, L] (2 off the completion), one generator per row."""
    batch, length = completion.shape
    offsets = torch.empty(batch, num_views, dtype=torch.float64)  # [B, K]
    draws = torch.full((num_views, batch, length), 2.0, dtype=torch.float64)  # [K, B, L]
    generator = torch.Generator(device="cpu")
    for b in range(batch):
        generator.manual_seed(int(seeds[b]))
        offsets[b] = torch.rand(num_views, generator=generator, dtype=torch.float64)
        positions = completion[b].nonzero(as_tuple=True)[0]
        draws[:, b, positions] = torch.rand(num_views, positions.numel(), generator=generator, dtype=torch.float64)
    return offsets, draws


def make_stratified(num_views: int = 4, t_range=(0.2, 0.8)) -> StratifiedMasker:
    """Stratified mask ratios: K views, one ratio per stratum of t_range, weights 1/(K t); unbiased, low variance."""
    return StratifiedMasker(num_views, tuple(t_range))


@hookimpl
def diffugrpo_maskers():
    return {"example_stratified": make_stratified}
