"""How the weighted reward components of a completion become one scalar: ``diffugrpo.rewards.aggregation``, each
way registered by name in :data:`AGGREGATIONS`, and the per-group normalisation and the step's metrics that go
with them. Plain Python (no torch)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Collection, Hashable, Mapping, Sequence

logger = logging.getLogger("diffugrpo.rewards")

PASS_TOLERANCE = 1e-9


def weighted_total(values: Mapping[str, float | None], weights: Mapping[str, float]) -> float:
    """``sum(weight * value)`` over the components that apply (None left out, as TRL's nansum)."""
    return float(sum(weights[name] * value for name, value in values.items() if value is not None))


def gated_total(
    values: Mapping[str, float | None],
    weights: Mapping[str, float],
    gate_reward: str,
    quality_rewards: frozenset[str] | set[str],
) -> float:
    """:func:`weighted_total` where quality terms count only when ``gate_reward`` is 1.0."""
    gate = values.get(gate_reward)
    passed = gate is not None and gate >= 1.0 - PASS_TOLERANCE
    kept = {name: value for name, value in values.items() if passed or name not in quality_rewards}
    return weighted_total(kept, weights)


@dataclass(frozen=True)
class Aggregation:
    """How a completion's weighted components become its scalar reward: one entry of :data:`AGGREGATIONS`.

    ``total(values, weights, gate_reward, quality_rewards)`` is one completion's reward on its own. An aggregation with ``whole_group`` replaces
    those totals with :func:`group_normalized_totals` wherever the groups are known (the trainer, ``rewards
    score``); one with ``learns_weights`` has the trainer fit its weights (:mod:`.learned_weights`) and score
    with them. ``needs_gate``: ``gate_reward`` must be among the selected rewards.
    """

    total: Callable[[Mapping[str, float | None], Mapping[str, float], str, Collection[str]], float]
    needs_gate: bool = False
    whole_group: bool = False
    learns_weights: bool = False


def _weighted(
    values: Mapping[str, float | None], weights: Mapping[str, float], gate_reward: str, quality_rewards: Collection[str]
) -> float:
    return weighted_total(values, weights)


def _gated(
    values: Mapping[str, float | None], weights: Mapping[str, float], gate_reward: str, quality_rewards: Collection[str]
) -> float:
    return gated_total(values, weights, gate_reward, quality_rewards)


AGGREGATIONS = {
    "fixed": Aggregation(_weighted),
    "gated": Aggregation(_gated, needs_gate=True),
    "group_normalized": Aggregation(_weighted, whole_group=True),
    "learned": Aggregation(_weighted, needs_gate=True, learns_weights=True),
}
"""``diffugrpo.rewards.aggregation`` -> how it combines (per completion, ``group_normalized`` and ``learned`` fall
back to the fixed weights)."""


def _mean_std(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    variance = sum((value - mean) ** 2 for value in values) / (len(values) - 1)
    return mean, math.sqrt(variance)


def normalize_by_group(
    samples: Sequence[Mapping[str, float | None]], group_ids: Sequence[Hashable], eps: float = 1e-6
) -> list[dict[str, float | None]]:
    """Standardises each component within each group: ``(x - mean) / (std + eps)``.

    ``samples[i]`` holds completion i's components, ``group_ids[i]`` its prompt group (verl's
    ``uid``). Mean and std (unbiased, as verl's GRPO) use the group's non-None values only; None
    stays None. A component with one value in its group, or no spread, normalises to 0.0.
    """
    if len(samples) != len(group_ids):
        raise ValueError(f"{len(samples)} samples but {len(group_ids)} group ids")
    members: dict[Hashable, list[int]] = {}
    for index, group in enumerate(group_ids):
        members.setdefault(group, []).append(index)
    normalized: list[dict[str, float | None]] = [dict(sample) for sample in samples]
    names = {name for sample in samples for name in sample}
    for indices in members.values():
        for name in names:
            present = {i: value for i in indices if (value := samples[i].get(name)) is not None}
            if not present:
                continue
            mean, std = _mean_std(list(present.values()))
            for i, value in present.items():
                normalized[i][name] = 0.0 if std == 0 else (value - mean) / (std + eps)
    return normalized


def group_normalized_totals(
    samples: Sequence[Mapping[str, float | None]],
    group_ids: Sequence[Hashable],
    weights: Mapping[str, float],
    eps: float = 1e-6,
) -> list[float]:
    """GDPO-style totals: normalise every component within its group, then weight and sum."""
    return [weighted_total(sample, weights) for sample in normalize_by_group(samples, group_ids, eps)]


def step_metrics(
    samples: Sequence[Mapping[str, float | None]],
    totals: Sequence[float],
    failed: Sequence[Collection[str]],
    prefix: str = "reward",
) -> dict[str, float]:
    """Per-step logging values: each component's mean (over applicable values), fraction of None and
    fraction of completions it failed on (``failed[i]``: the components that raised on completion i),
    and the mean weighted total. NaN counts as None (verl's arrays carry None as NaN)."""
    metrics: dict[str, float] = {}
    names = sorted({name for sample in samples for name in sample})
    for name in names:
        values = [sample.get(name) for sample in samples]
        present = [value for value in values if value is not None and not math.isnan(value)]
        metrics[f"{prefix}/{name}/mean"] = sum(present) / len(present) if present else math.nan
        metrics[f"{prefix}/{name}/none_fraction"] = 1.0 - len(present) / len(values) if values else math.nan
        metrics[f"{prefix}/{name}/error_fraction"] = (
            sum(name in names_failed for names_failed in failed) / len(failed) if failed else math.nan
        )
    metrics[f"{prefix}/total/mean"] = sum(totals) / len(totals) if totals else math.nan
    return metrics
