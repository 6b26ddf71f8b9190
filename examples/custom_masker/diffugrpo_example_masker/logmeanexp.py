"""The ``example_logmeanexp`` estimator: the stratified views, combined by a log-mean-exp instead of a weighted sum.

Written only against the public hooks: ``views`` is ``example_stratified``'s, and ``combine`` (the optional part of
the masker contract, ``diffugrpo_plugin/hookspecs.py``) turns each view's log-prob of the tokens it masks into::

    est_l = log( 1/K sum_k 1{l masked in view k} p_k(x_l) / t_k )

the log of an unbiased estimate of ``E_t[p(x_l | x_t) 1{l masked} / t]`` (importance-weighted, as IWAE's bound).
Its gradient weights each view by its share of the mean, so the views that predict the token best count most. A
token no view masks gets 0 (it is not scored there). It takes no account of the advantage (``positive`` is
ignored).
"""

from __future__ import annotations

import math

import torch

from diffugrpo_example_masker.stratified import StratifiedMasker
from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.core.views import MaskedViews


class LogMeanExpMasker(StratifiedMasker):
    """Stratified views; per token the log of the mean over views of 1{masked} p / t."""

    def combine(
        self, per_view_logp: torch.Tensor, views: MaskedViews, scored: torch.Tensor, positive: torch.Tensor | None
    ) -> torch.Tensor:
        """``per_view_logp`` [K, B, L] (0 where a view does not score), ``views.coef`` [K, B, L] = ``1 / (K t_k)``
        on masked tokens; returns the per-token estimate [B, L]."""
        coef = views.coef.to(per_view_logp.device)  # [K, B, L]
        masked = (coef != 0) & scored.to(per_view_logp.device)[None]  # [K, B, L]
        # 1/K * p / t = coef * p: the log of each term is log(coef) + log p
        terms = torch.where(masked, coef.clamp(min=1e-30).log() + per_view_logp, -math.inf)  # [K, B, L]
        covered = masked.any(0)  # [B, L]
        terms = torch.where(covered[None], terms, 0.0)  # no all -inf column: a finite backward
        return torch.where(covered, torch.logsumexp(terms, 0), 0.0)  # [B, L]


def make_logmeanexp(num_views: int = 4, t_range=(0.2, 0.8)) -> LogMeanExpMasker:
    """Stratified views combined by a log-mean-exp of p / t (importance-weighted); shows the combine() hook."""
    return LogMeanExpMasker(num_views, tuple(t_range))


@hookimpl
def diffugrpo_maskers():
    return {"example_logmeanexp": make_logmeanexp}
