"""Reward selection and weighting: which reward functions run, with which options and weights, and the
:class:`RewardSpec` that scores completions with them (running each in isolation: :mod:`.scoring`) and combines
their values into one scalar per completion (as the configured aggregation says: :mod:`.aggregation`).

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
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Sequence

from omegaconf import OmegaConf

from diffugrpo_plugin import plugins
from diffugrpo_plugin.rewards.aggregation import AGGREGATIONS
from diffugrpo_plugin.rewards.code_tests import BLOCK_CHOICES, FORMAT_ENDS
from diffugrpo_plugin.rewards.scoring import CrashLog, RowScore, ScoredCompletion, describe_error, validated
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


class RewardConfigError(ValueError):
    """The rewards config names something unknown or gives a value that cannot be used."""


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
    crash_log: CrashLog = field(default_factory=CrashLog)

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

    def _run(self, component: RewardComponent, completions: list[str], columns: Mapping[str, list]) -> list[RowScore]:
        accepted = keyword_options(component.fn)
        injected = {
            name: self.sandbox() if name == "sandbox" else getattr(self, name)
            for name in plugins.INJECTED_REWARD_OPTIONS
            if name in accepted
        }
        kwargs = {**{k: v for k, v in columns.items() if k != "completions"}, **injected, **component.options}
        values, reasons = validated(component.fn(completions, **kwargs), len(completions), component.name)
        return [RowScore(value, reason) for value, reason in zip(values, reasons)]

    def _call(
        self, component: RewardComponent, completions: list[str], columns: Mapping[str, list], step: Hashable | None
    ) -> list[RowScore]:
        """The component's score of each completion; where it raised, None with the error.

        A call that raises is repeated one completion at a time, so a fault stays in its row: the
        completions it does not concern are scored normally (runs are cached, so this is cheap).
        """
        try:
            return self._run(component, completions, columns)
        except Exception as batch_error:  # noqa: BLE001 - a reward must never stop training
            if len(completions) == 1:
                self.crash_log.report(component, step, batch_error)
                return [RowScore(error=describe_error(batch_error))]
        scores: list[RowScore] = []
        for index, completion in enumerate(completions):
            try:
                scores += self._run(component, [completion], {name: [rows[index]] for name, rows in columns.items()})
            except Exception as row_error:  # noqa: BLE001 - this row scores None, the others go on
                self.crash_log.report(component, step, row_error)
                scores.append(RowScore(error=describe_error(row_error)))
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
        return AGGREGATIONS[self.aggregation].total(values, self.weights, self.gate_reward, self.quality_rewards)
