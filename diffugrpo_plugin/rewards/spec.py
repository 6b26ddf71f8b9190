"""Reward selection and weighting: which reward functions run, with which options, and how
their values combine into one scalar per completion.

Config (``config.diffugrpo.rewards``; every key optional)::

    reward_funcs: [code, code_format]      # the seeds' spelling ...
    reward_weights: [2.0, 0.5]             # ... one weight per name (default 1.0 each)
    # or: reward_funcs: {code: 2.0, code_format: 0.5}
    # neither (null): DiffuCoder's {code: 2.0, code_format: 0.5}
    reward_kwargs: {code: {timeout_s: 5}}  # options: keyword-only parameters of that function
    aggregation: fixed                     # fixed | gated | group_normalized | learned
    gate_reward: code                      # gated: quality terms count only when this is 1.0;
                                           # learned: the correctness the weights are fitted to predict
    quality_rewards: [efficiency, maintainability, comments]
    code_block: first                      # first (DiffuCoder) | last (open-r1)
    format_end: exact                      # after the closing fence: exactly one newline (DiffuCoder's
                                           # pattern) | lenient (any whitespace or none)
    sample_deadline_s: 300                 # reward manager: per-completion backstop
    stop_after_failed_steps: 3             # trainer: stop after this many steps in a row in which a
                                           # reward failed on half the completions or more (0: never)
    sandbox: {max_concurrency: 8, timeout_s: 5, memory_mb: 1024, ...}   # see SandboxConfig

Names resolve through the ``diffugrpo`` entry points (:func:`diffugrpo_plugin.plugins.lookup`),
so a reward from another installed package is selected exactly like a built-in.

A reward function may say why a completion scored what it did (above all why 0 or ``None``) by
returning :class:`Explained` ``(value, Reason(kind, detail))`` for it instead of the bare value
(see :func:`diffugrpo_plugin.hookspecs.diffugrpo_reward_functions`); :meth:`RewardSpec.score`
hands the reasons on per row (:class:`ScoredCompletion`), the totals see the values only.

``None`` means "not applicable to this row": it is left out of a component's mean and out of
the weighted total (the total is ``sum(weight * value)`` over the components that apply, as
TRL's ``nansum``), never counted as zero. A reward function that raises scores ``None`` on the
rows it fails on and only there (the call is repeated one row at a time); the failure is
logged (once per function per step), flagged per row (:class:`ScoredCompletion`) and counted in
the step metrics (``reward/<name>/error_fraction``). Only a reward that fails on half the
completions or more for ``stop_after_failed_steps`` steps in a row (a broken sandbox, say) stops
training, with a message saying so: training on what is left would silently optimise something else.

Aggregation modes:

* ``fixed`` -- weighted sum (DiffuCoder: ``2.0 * code + 0.5 * code_format``).
* ``gated`` -- as ``fixed``, but quality terms (``quality_rewards``) count only for completions
  whose ``gate_reward`` is 1.0 (all tests pass), so style cannot be traded for correctness.
* ``group_normalized`` -- GDPO-style: every component is standardised within its prompt group
  before weighting (:func:`group_normalized_totals`), so a component with a large raw spread
  cannot drown the others. It needs the groups, so the advantage estimator applies it; the
  per-completion total reported to verl is the ``fixed`` one.
* ``learned`` -- each auxiliary reward's weight scaled by how well it tells a prompt's passing
  completions (``gate_reward``) from its failing ones, learned online (:mod:`diffugrpo_plugin.rewards.learned_weights`,
  which says why GRPO4CodeGen's weight network, trained on the weighted reward itself, is not copied).
  Like ``group_normalized`` the trainer applies it; the total reported per completion is ``fixed``.

No torch here: reward workers run on CPU.
"""

from __future__ import annotations

import inspect
import logging
import math
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Hashable, Mapping, Sequence

from omegaconf import OmegaConf

from diffugrpo_plugin import plugins
from diffugrpo_plugin.hooktypes import Explained, Reason
from diffugrpo_plugin.rewards.code_tests import BLOCK_CHOICES, FORMAT_ENDS
from diffugrpo_plugin.sandbox.config import SandboxConfig
from diffugrpo_plugin.sandbox.host import Sandbox, shared_sandbox

logger = logging.getLogger("diffugrpo.rewards")

DEFAULT_QUALITY_REWARDS = ("efficiency", "maintainability", "comments")
CONFIG_KEYS = (
    "reward_funcs",
    "reward_weights",
    "reward_kwargs",
    "aggregation",
    "gate_reward",
    "quality_rewards",
    "code_block",
    "format_end",
    "sample_deadline_s",
    "stop_after_failed_steps",
    "sandbox",
)
SMOKE_TEST_REWARDS = ("constant",)
DIFFUCODER_REWARDS = {"code": 2.0, "code_format": 0.5}
PASS_TOLERANCE = 1e-9
CRASH_LOG_WINDOW_S = 60.0


class RewardConfigError(ValueError):
    """The rewards config names something unknown or gives a value that cannot be used."""


def value_of(item: Any) -> Any:
    """The value of one item a reward function returned: ``item.value`` for an :class:`Explained`,
    else the item itself (a plain float or None, as TRL expects)."""
    return item.value if isinstance(item, Explained) else item


@dataclass(frozen=True)
class RewardComponent:
    """One selected reward: its function, weight, options and where it came from."""

    name: str
    weight: float
    fn: Callable[..., list]
    distribution: str
    options: Mapping[str, Any] = field(default_factory=dict)


def _check_weight(name: str, weight: Any) -> float:
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise RewardConfigError(f"weight of reward '{name}' must be a number, got {weight!r}")
    if not math.isfinite(weight) or weight < 0:
        raise RewardConfigError(f"weight of reward '{name}' must be a finite number >= 0, got {weight!r}")
    return float(weight)


def _list_weights(reward_funcs: Sequence, reward_weights: Any) -> dict[str, float]:
    names = [str(name) for name in reward_funcs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise RewardConfigError(f"reward_funcs lists {duplicates} more than once")
    if reward_weights is None:
        return {name: 1.0 for name in names}
    if isinstance(reward_weights, (str, Mapping)) or not isinstance(reward_weights, Sequence):
        raise RewardConfigError(f"reward_weights must be a list of numbers, got {reward_weights!r}")
    if len(reward_weights) != len(names):
        raise RewardConfigError(
            f"reward_funcs has {len(names)} names {names} but reward_weights has "
            f"{len(reward_weights)} values {list(reward_weights)}; give one weight per name"
        )
    return {name: _check_weight(name, weight) for name, weight in zip(names, reward_weights)}


def parse_weights(reward_funcs: Any, reward_weights: Any = None) -> dict[str, float]:
    """Names and weights from either spelling; errors name what to fix.

    ``reward_funcs: [a, b]`` with ``reward_weights: [wa, wb]`` (default 1.0 each), or
    ``reward_funcs: {a: wa, b: wb}``.
    """
    if not reward_funcs:
        raise RewardConfigError(
            "rewards config needs reward_funcs, e.g. reward_funcs: [code, code_format] "
            "with reward_weights: [2.0, 0.5], or reward_funcs: {code: 2.0, code_format: 0.5}"
        )
    if isinstance(reward_funcs, Mapping):
        if reward_weights is not None:
            raise RewardConfigError(
                f"reward_funcs is a mapping of name -> weight ({dict(reward_funcs)}), so "
                f"reward_weights ({reward_weights}) must not also be given: put the weights in "
                f"the mapping, or list the names (reward_funcs: [a, b]) beside reward_weights"
            )
        return {str(name): _check_weight(str(name), weight) for name, weight in reward_funcs.items()}
    if isinstance(reward_funcs, str) or not isinstance(reward_funcs, Sequence):
        raise RewardConfigError(
            f"reward_funcs must be a list of names or a mapping name -> weight, got {reward_funcs!r}"
        )
    return _list_weights(reward_funcs, reward_weights)


def _reward_funcs(config: Mapping[str, Any]) -> Any:
    """``reward_funcs`` as configured; DiffuCoder's when neither it nor ``reward_weights`` is set."""
    if config.get("reward_funcs") is None and config.get("reward_weights") is None:
        return dict(DIFFUCODER_REWARDS)
    return config.get("reward_funcs")


def _selected_names(reward_funcs: Any) -> list[str]:
    """The names ``reward_funcs`` selects in either spelling; none when it has neither shape."""
    if isinstance(reward_funcs, Mapping) or (isinstance(reward_funcs, Sequence) and not isinstance(reward_funcs, str)):
        return [str(name) for name in reward_funcs]
    return []


def keyword_options(fn: Callable) -> set[str]:
    """The options a reward function accepts: its keyword-only parameters."""
    return {
        name
        for name, parameter in inspect.signature(fn).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }


def _check_options(name: str, fn: Callable, options: Any) -> dict[str, Any]:
    if not isinstance(options, Mapping):
        raise RewardConfigError(f"reward_kwargs.{name} must be a mapping of option -> value, got {options!r}")
    accepted = keyword_options(fn) - {"sandbox"}  # code_block, format_end may be set per reward; sandbox never
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise RewardConfigError(
            f"reward '{name}' has no option(s) {unknown}; its options are {sorted(accepted) or 'none'}"
        )
    for key, choices in (("code_block", BLOCK_CHOICES), ("format_end", FORMAT_ENDS)):
        if key in options and options[key] not in choices:
            raise RewardConfigError(f"reward_kwargs.{name}.{key} must be one of {list(choices)}, got {options[key]!r}")
    return dict(options)


def _reward_kwargs(reward_kwargs: Any, weights: Mapping[str, float]) -> Mapping[str, Any]:
    reward_kwargs = reward_kwargs or {}
    if not isinstance(reward_kwargs, Mapping):
        raise RewardConfigError(f"reward_kwargs must map reward names to options, got {reward_kwargs!r}")
    strangers = sorted(set(reward_kwargs) - set(weights))
    if strangers:
        raise RewardConfigError(
            f"reward_kwargs gives options for {strangers}, which reward_funcs does not "
            f"select (selected: {list(weights)})"
        )
    return reward_kwargs


def _resolve(weights: Mapping[str, float], reward_kwargs: Mapping[str, Any]) -> tuple[RewardComponent, ...]:
    """Each selected name as an installed reward (an unknown name lists the known ones and their
    providers), with its checked options."""
    components = []
    for name, weight in weights.items():
        registration = plugins.lookup("reward", name)
        options = _check_options(name, registration.obj, reward_kwargs.get(name) or {})
        components.append(RewardComponent(name, weight, registration.obj, registration.distribution, options))
        if name in SMOKE_TEST_REWARDS:
            _warn_smoke_test(name)
    return tuple(components)


def _choice(config: Mapping[str, Any], key: str, choices: Sequence[str], default: str) -> str:
    value = config.get(key, default)
    if value not in choices:
        raise RewardConfigError(f"{key} must be one of {list(choices)}, got {value!r}")
    return value


def plain(value: Any) -> Any:
    """JSON-like Python from what config and verl hand over: OmegaConf nodes, numpy arrays and scalars,
    tuples. Reward functions and the rewards config only ever see the result."""
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    if hasattr(value, "tolist"):  # numpy arrays and scalars (verl's non-tensor batch)
        return value.tolist()
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def _warn_smoke_test(name: str) -> None:
    message = (
        f"reward '{name}' is for smoke tests only: it ignores the completions and teaches the "
        f"model nothing. Do not train with it."
    )
    logger.warning(message)
    print(f"[diffugrpo.rewards] WARNING: {message}", file=sys.stderr, flush=True)


class _CrashLog:
    """Logs the first failure of each reward per step (or per minute when no step is known)."""

    def __init__(self):
        self.seen: set[tuple[str, Hashable]] = set()
        self.counts: dict[str, int] = {}

    def report(self, component: RewardComponent, step: Hashable | None, exc: BaseException) -> None:
        self.counts[component.name] = self.counts.get(component.name, 0) + 1
        window = step if step is not None else ("minute", int(time.monotonic() // CRASH_LOG_WINDOW_S))
        if (component.name, window) in self.seen:
            return
        self.seen.add((component.name, window))
        logger.error(
            "reward '%s' (%s) failed and scored None for this call; later failures in this step are "
            "counted, not logged:\n%s",
            component.name,
            component.distribution,
            "".join(traceback.format_exception(exc)),
        )


def _checked_value(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isinf(value):
        raise TypeError(f"reward '{name}' returned {value!r}; values must be finite numbers or None")
    return None if math.isnan(value) else float(value)


def _checked_reason(item: Any, name: str) -> Reason | None:
    if not isinstance(item, Explained):
        return None
    if not isinstance(item.reason, Reason):
        raise TypeError(f"reward '{name}' returned Explained with reason {item.reason!r}; give a Reason(kind, detail)")
    return item.reason


def _validated(items: Any, count: int, name: str) -> tuple[list[float | None], list[Reason | None]]:
    """The values and reasons of what reward ``name`` returned (one float, None or Explained per completion)."""
    if not isinstance(items, (list, tuple)) or len(items) != count:
        raise TypeError(
            f"reward '{name}' must return a list of {count} values (one per completion), "
            f"got {type(items).__name__} of length {len(items) if hasattr(items, '__len__') else '?'}"
        )
    values = [_checked_value(value_of(item), name) for item in items]
    return values, [_checked_reason(item, name) for item in items]


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class _RowScore:
    """One component's score of one completion: its value, the reason it gave, the error it raised."""

    value: float | None = None
    reason: Reason | None = None
    error: str | None = None


@dataclass(frozen=True)
class ScoredCompletion:
    """One completion's scores: each component's value (None: not applicable, or the reward failed),
    for the components that failed on it the error (``"SandboxError: ..."``), and for those that
    said why they scored what they did, the :class:`Reason`."""

    values: dict[str, float | None]
    errors: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, Reason] = field(default_factory=dict)


@dataclass
class RewardSpec:
    """The selected rewards and how they combine; build it with :meth:`from_config`."""

    components: tuple[RewardComponent, ...]
    aggregation: str = "fixed"
    gate_reward: str = "code"
    quality_rewards: frozenset[str] = frozenset(DEFAULT_QUALITY_REWARDS)
    code_block: str = "first"
    format_end: str = "exact"
    sample_deadline_s: float = 300.0
    stop_after_failed_steps: int = 3
    sandbox_config: SandboxConfig = field(default_factory=SandboxConfig)
    crash_log: _CrashLog = field(default_factory=_CrashLog)

    @classmethod
    def from_config(cls, mapping: Mapping[str, Any] | None) -> "RewardSpec":
        """Validates ``config.diffugrpo.rewards`` and resolves every name to an installed reward."""
        config = plain(mapping or {})
        unknown = sorted(set(config) - set(CONFIG_KEYS))
        if unknown:
            raise RewardConfigError(f"unknown rewards option(s) {unknown}; known options: {list(CONFIG_KEYS)}")
        reward_funcs = _reward_funcs(config)
        for name in _selected_names(reward_funcs):
            plugins.lookup("reward", name)  # an unknown name is the mistake to report, not the weights it skews
        weights = parse_weights(reward_funcs, config.get("reward_weights"))
        components = _resolve(weights, _reward_kwargs(config.get("reward_kwargs"), weights))
        aggregation = _choice(config, "aggregation", tuple(AGGREGATIONS), "fixed")
        gate_reward = config.get("gate_reward", "code")
        if AGGREGATIONS[aggregation].needs_gate and gate_reward not in weights:
            raise RewardConfigError(
                f"aggregation '{aggregation}' needs its gate_reward '{gate_reward}' among reward_funcs {list(weights)}"
            )
        patience = config.get("stop_after_failed_steps", 3)
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise RewardConfigError(
                f"stop_after_failed_steps must be a whole number of steps >= 0 (0: never stop), got {patience!r}"
            )
        deadline = config.get("sample_deadline_s", 300.0)
        if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not deadline > 0:
            raise RewardConfigError(f"sample_deadline_s must be a positive number of seconds, got {deadline!r}")
        try:
            sandbox_config = SandboxConfig.from_mapping(config.get("sandbox"))
        except ValueError as exc:
            raise RewardConfigError(f"rewards.sandbox: {exc}") from exc
        if any("sandbox" in keyword_options(component.fn) for component in components):
            # No bubblewrap, or one that cannot work here: fail now, loudly, not as None rewards later.
            shared_sandbox(sandbox_config).check()
        quality = config.get("quality_rewards", DEFAULT_QUALITY_REWARDS)
        return cls(
            components=components,
            aggregation=aggregation,
            gate_reward=gate_reward,
            quality_rewards=frozenset(map(str, quality)),
            code_block=_choice(config, "code_block", BLOCK_CHOICES, "first"),
            format_end=_choice(config, "format_end", FORMAT_ENDS, "exact"),
            sample_deadline_s=float(deadline),
            stop_after_failed_steps=patience,
            sandbox_config=sandbox_config,
        )

    @property
    def names(self) -> list[str]:
        return [component.name for component in self.components]

    @property
    def weights(self) -> dict[str, float]:
        return {component.name: component.weight for component in self.components}

    def sandbox(self) -> Sandbox:
        return shared_sandbox(self.sandbox_config)

    def _run(self, component: RewardComponent, completions: list[str], columns: Mapping[str, list]) -> list[_RowScore]:
        accepted = keyword_options(component.fn)
        injected = {
            name: self.sandbox() if name == "sandbox" else getattr(self, name)
            for name in plugins.INJECTED_REWARD_OPTIONS
            if name in accepted
        }
        kwargs = {**{k: v for k, v in columns.items() if k != "completions"}, **injected, **component.options}
        values, reasons = _validated(component.fn(completions, **kwargs), len(completions), component.name)
        return [_RowScore(value, reason) for value, reason in zip(values, reasons)]

    def _call(
        self, component: RewardComponent, completions: list[str], columns: Mapping[str, list], step: Hashable | None
    ) -> list[_RowScore]:
        """The component's score of each completion; where it raised, None with the error.

        A call that raises is repeated one completion at a time, so a fault stays in its row: the
        completions it does not concern are scored normally (runs are cached, so this is cheap).
        """
        try:
            return self._run(component, completions, columns)
        except Exception as batch_error:  # noqa: BLE001 - a reward must never stop training
            if len(completions) == 1:
                self.crash_log.report(component, step, batch_error)
                return [_RowScore(error=_describe(batch_error))]
        scores: list[_RowScore] = []
        for index, completion in enumerate(completions):
            try:
                scores += self._run(component, [completion], {name: [rows[index]] for name, rows in columns.items()})
            except Exception as row_error:  # noqa: BLE001 - this row scores None, the others go on
                self.crash_log.report(component, step, row_error)
                scores.append(_RowScore(error=_describe(row_error)))
        return scores

    def score(
        self, completions: list[str], columns: Mapping[str, list], step: Hashable | None = None
    ) -> list[ScoredCompletion]:
        """Every component's value for every completion, the reasons the rewards gave, and what
        failed where a reward raised.

        ``columns`` maps each dataset column to a list with one value per completion.
        """
        columns = {name: plain(values) for name, values in columns.items()}
        results = {component.name: self._call(component, completions, columns, step) for component in self.components}
        rows = [{name: scores[index] for name, scores in results.items()} for index in range(len(completions))]
        return [
            ScoredCompletion(
                values={name: score.value for name, score in row.items()},
                errors={name: score.error for name, score in row.items() if score.error},
                reasons={name: score.reason for name, score in row.items() if score.reason},
            )
            for row in rows
        ]

    def total(self, values: Mapping[str, float | None]) -> float:
        """The scalar reward of one completion under this spec's aggregation.

        ``group_normalized`` needs the whole group; per completion it falls back to ``fixed``.
        """
        return AGGREGATIONS[self.aggregation].total(self, values)


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

    ``total(spec, values)`` is one completion's reward on its own. An aggregation with ``whole_group`` replaces
    those totals with :func:`group_normalized_totals` wherever the groups are known (the trainer, ``rewards
    score``); one with ``learns_weights`` has the trainer fit its weights (:mod:`.learned_weights`) and score
    with them. ``needs_gate``: ``gate_reward`` must be among the selected rewards.
    """

    total: Callable[[RewardSpec, Mapping[str, float | None]], float]
    needs_gate: bool = False
    whole_group: bool = False
    learns_weights: bool = False


def _weighted(spec: RewardSpec, values: Mapping[str, float | None]) -> float:
    return weighted_total(values, spec.weights)


def _gated(spec: RewardSpec, values: Mapping[str, float | None]) -> float:
    return gated_total(values, spec.weights, spec.gate_reward, spec.quality_rewards)


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
