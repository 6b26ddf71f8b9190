"""A curriculum over training prompts: draw from the easiest part of the data, and widen it as a schedule says.

:class:`CurriculumSampler` is a ``torch.utils.data.Sampler`` built the way verl builds a custom data sampler
(``data.sampler.class_path`` / ``class_name``, constructed with ``(data_source, data_config)``) and fed after
each step with :class:`CurriculumFeedback` (the trainer's ``update`` call). It imports nothing of verl.

Difficulty. Either a column of the data (``difficulty_key``, dotted for nested fields:
``extra_info.difficulty``; larger is harder), or measured: one minus the prompt's pass rate over the groups
rolled out for it so far (``metric``: the reward component whose per-completion value is the pass, ``code``
by default). Each prompt's rank is the fraction of prompts
strictly easier than it, and a prompt is in the pool while its rank is below the **level** (0-1]: at level
0.25 the easiest quarter of the data is in play (ties enter together; the easiest prompts always). With a
measured difficulty the ranks are among the prompts rolled out so far, and a prompt never rolled out is
always in the pool (nothing is known about it): the level holds back the seen prompts the policy fails most.

Schedules (the level after ``step`` updates):

* ``linear``: ``start`` rising to 1 over ``linear_steps`` steps;
* ``step``: ``start``, raised by ``increment`` every ``every`` steps;
* ``gated``: ``start``, raised by ``increment`` once the mean of the last ``window`` steps' pass rates (each
  step's: the mean over its groups) reaches ``threshold`` (the window then starts again at the new level).

The pass is the ``metric`` reward component of each completion (a reward in [0, 1], such as ``code``); a
completion where it is None (not applicable, or failed) does not count, and a group with none is left out of
the statistics.

Groups with one reward for every completion teach nothing under a group-relative advantage (every advantage
is 0). ``zero_advantage_weight`` scales the chance of drawing a prompt whose latest group was such a group,
for ``zero_advantage_steps`` steps after it: 1 keeps it as likely as any other, 0 skips it for that long (the
policy may have moved by then). With a measured difficulty the prompts the policy always solves rank easiest
and stay in the pool: a weight below 1 draws them less.

Draws are with replacement from the pool, weighted, ``len(data_source)`` per epoch, from a seeded generator
(``data.seed``). The sampler's whole state (level, statistics, generator, position in the epoch) is a plain
dict (``state_dict`` / ``load_state_dict``): torchdata's ``StatefulDataLoader`` saves it in the dataloader's
checkpoint, so a resumed run draws what the uninterrupted one would have.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence, Sized
from dataclasses import asdict, dataclass, field, fields

import numpy as np
from torch.utils.data import Sampler

SCHEDULES = ("linear", "step", "gated")


class CurriculumConfigError(ValueError):
    """A curriculum option the sampler cannot use; the message names the key and the fix."""


@dataclass(frozen=True)
class CurriculumFeedback:
    """One step's completions, for a sampler's ``update``: the dataset position each was prompted from (the
    sampler's own index), its total reward and its reward components (None where not applicable or failed)."""

    positions: list[int]
    rewards: list[float]
    components: list[Mapping[str, float | None]] = field(default_factory=list)


@dataclass(frozen=True)
class CurriculumOptions:
    """``data.sampler.curriculum``; see the module docstring."""

    difficulty_key: str | None = None
    metric: str = "code"
    schedule: str = "linear"
    start: float = 0.25
    linear_steps: int = 100
    every: int = 10
    increment: float = 0.25
    threshold: float = 0.6
    window: int = 4
    zero_advantage_weight: float = 1.0
    zero_advantage_steps: int = 50

    @classmethod
    def from_config(cls, options: Mapping | None) -> "CurriculumOptions":
        prefix = "data.sampler.curriculum"
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise CurriculumConfigError(f"unknown {prefix} option(s) {unknown}; the options are {sorted(known)}")
        parsed = cls(**options)
        if parsed.schedule not in SCHEDULES:
            raise CurriculumConfigError(f"{prefix}.schedule must be one of {list(SCHEDULES)}, got '{parsed.schedule}'")
        for name, low, high in (("start", 0.0, 1.0), ("increment", 0.0, 1.0), ("threshold", 0.0, 1.0)):
            value = getattr(parsed, name)
            if not (isinstance(value, (int, float)) and low < value <= high):
                raise CurriculumConfigError(f"{prefix}.{name} must be in ({low}, {high}], got {value!r}")
        for name in ("linear_steps", "every", "window", "zero_advantage_steps"):
            value = getattr(parsed, name)
            if not (isinstance(value, int) and value >= 1):
                raise CurriculumConfigError(f"{prefix}.{name} must be a whole number of steps >= 1, got {value!r}")
        if not (isinstance(parsed.zero_advantage_weight, (int, float)) and 0 <= parsed.zero_advantage_weight <= 1):
            raise CurriculumConfigError(
                f"{prefix}.zero_advantage_weight must be in [0, 1] (1 keeps such prompts, 0 "
                f"skips them), got {parsed.zero_advantage_weight!r}"
            )
        return parsed


def scheduled_level(options: CurriculumOptions, step: int, level: float, window_pass_rate: float | None) -> float:
    """The level after ``step`` updates; ``level`` is the current one, ``window_pass_rate`` the gated schedule's
    rolling pass rate (None until its window is full)."""
    if options.schedule == "linear":
        return min(1.0, options.start + (1.0 - options.start) * step / options.linear_steps)
    if options.schedule == "step":
        return min(1.0, options.start + options.increment * (step // options.every))
    if window_pass_rate is not None and window_pass_rate >= options.threshold:
        return min(1.0, level + options.increment)
    return level


def difficulty_ranks(difficulty: np.ndarray) -> np.ndarray:
    """Each prompt's rank: the fraction of prompts strictly easier than it (0 for the easiest).  # [N] -> [N]"""
    order = np.sort(difficulty)
    return np.searchsorted(order, difficulty, side="left") / len(difficulty)


def column(data_source: object, key: str) -> list:
    """A (dotted) column of a verl RLHFDataset's dataframe, or of a plain sequence of dict rows."""
    head, *rest = key.split(".")
    frame = getattr(data_source, "dataframe", None)
    try:
        values = list(frame[head]) if frame is not None else [row[head] for row in data_source]
        for part in rest:
            values = [value[part] for value in values]
    except (KeyError, TypeError) as error:
        raise CurriculumConfigError(
            f"data.sampler.curriculum.difficulty_key '{key}' is not a field of the training "
            f"data ({type(error).__name__}: {error}); name a numeric column, dotted for "
            f"nested fields (extra_info.difficulty), or null to measure pass rates"
        ) from None
    return values


class CurriculumSampler(Sampler[int]):
    """See the module docstring. ``data_config`` is verl's ``data`` config (``seed``, ``sampler.curriculum``)."""

    def __init__(self, data_source: Sized, data_config: Mapping):
        self.size = len(data_source)
        if self.size == 0:
            raise CurriculumConfigError("the curriculum sampler got an empty training set")
        sampler_config = data_config.get("sampler") or {}
        self.options = CurriculumOptions.from_config(sampler_config.get("curriculum"))
        self.data_difficulty = None
        if self.options.difficulty_key:
            values = column(data_source, self.options.difficulty_key)
            try:
                self.data_difficulty = np.asarray(values, dtype=np.float64)
            except (TypeError, ValueError):
                raise CurriculumConfigError(
                    f"data.sampler.curriculum.difficulty_key "
                    f"'{self.options.difficulty_key}' holds non-numeric values (first: "
                    f"{values[0]!r})"
                ) from None
            if not np.isfinite(self.data_difficulty).all():
                raise CurriculumConfigError(
                    f"data.sampler.curriculum.difficulty_key '{self.options.difficulty_key}' "
                    f"has missing or non-finite values"
                )
        seed = data_config.get("seed")
        self.rng = np.random.default_rng(0 if seed is None else int(seed))
        self.step = 0
        self.level = self.options.start
        self.drawn_in_epoch = 0
        self.pass_sum = np.zeros(self.size)  # [N] summed group pass rates
        self.groups_seen = np.zeros(self.size, dtype=np.int64)  # [N]
        self.uniform_since = np.full(self.size, -1, dtype=np.int64)  # [N] first step after a one-reward group
        self.window: deque[float] = deque(maxlen=self.options.window)  # the last steps' pass rates
        self.zero_advantage_share = 0.0  # of the last step's groups
        self._weights: np.ndarray | None = None  # cached between updates: ranking sorts every prompt

    # -- what is drawn ---------------------------------------------------------------------------

    def difficulty(self) -> np.ndarray:
        """Per prompt, larger is harder; NaN for a prompt not rolled out yet when it is measured.  # [N]"""
        if self.data_difficulty is not None:
            return self.data_difficulty
        return np.where(self.groups_seen > 0, 1.0 - self.pass_sum / np.maximum(self.groups_seen, 1), np.nan)

    def in_pool(self) -> np.ndarray:
        """The prompts in play at the current level.  # [N] bool"""
        difficulty = self.difficulty()
        if self.data_difficulty is not None:
            return difficulty_ranks(difficulty) < self.level
        seen = self.groups_seen > 0
        in_pool = ~seen
        if seen.any():
            in_pool[seen] = difficulty_ranks(difficulty[seen]) < self.level
        return in_pool

    def weights(self) -> np.ndarray:
        """Draw weights: the pool at the current level, zero-advantage prompts scaled.  # [N], sums to 1"""
        if self._weights is None:
            in_pool = self.in_pool()
            weights = in_pool * np.where(self.zero_advantage(), self.options.zero_advantage_weight, 1.0)
            if weights.sum() == 0:  # every prompt in play gave its group one reward: draw among them anyway
                weights = in_pool.astype(np.float64)
            self._weights = weights / weights.sum()
        return self._weights

    def zero_advantage(self) -> np.ndarray:
        """Prompts whose latest group got one reward for every completion, within the last
        ``zero_advantage_steps`` steps.  # [N] bool"""
        return (self.uniform_since >= 0) & (self.step - self.uniform_since < self.options.zero_advantage_steps)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        # Each draw reads the weights of the moment, so a level raised between steps applies to the next batch.
        while self.drawn_in_epoch < self.size:
            self.drawn_in_epoch += 1
            yield int(self.rng.choice(self.size, p=self.weights()))
        self.drawn_in_epoch = 0

    # -- what was learnt -------------------------------------------------------------------------

    def update(self, feedback: CurriculumFeedback) -> None:
        """One step's completions: per prompt, the group's pass rate and whether its rewards were all equal."""
        groups: dict[int, list[tuple[float | None, float]]] = {}
        components = feedback.components or [{}] * len(feedback.positions)
        for position, reward, parts in zip(feedback.positions, feedback.rewards, components, strict=True):
            groups.setdefault(int(position), []).append((parts.get(self.options.metric), float(reward)))
        step_rates, uniform = [], 0
        for position, rows in groups.items():
            one_reward = len({reward for _, reward in rows}) == 1
            uniform += one_reward
            self.uniform_since[position] = self.step + 1 if one_reward else -1  # the first step it holds for
            passes = [float(passed) for passed, _ in rows if passed is not None]
            if passes:
                step_rates.append(sum(passes) / len(passes))
                self.pass_sum[position] += step_rates[-1]
                self.groups_seen[position] += 1
        if step_rates:
            self.window.append(sum(step_rates) / len(step_rates))
        self.zero_advantage_share = uniform / max(len(groups), 1)
        self.step += 1
        full = len(self.window) == self.window.maxlen
        level = scheduled_level(self.options, self.step, self.level, float(np.mean(self.window)) if full else None)
        if level != self.level:
            self.level = level
            self.window.clear()
        self._weights = None

    def metrics(self) -> dict[str, float]:
        """``curriculum/*`` for the step's log, after its update: the level and the pool the next step draws from,
        the share of this step's groups with one reward for all, the gated schedule's window."""
        return {
            "curriculum/level": self.level,
            "curriculum/pool": float((self.weights() > 0).sum()),
            "curriculum/zero_advantage_share": self.zero_advantage_share,
            "curriculum/window_pass_rate": float(np.mean(self.window)) if self.window else math.nan,
        }

    # -- resuming --------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "options": asdict(self.options),
            "step": self.step,
            "level": self.level,
            "drawn_in_epoch": self.drawn_in_epoch,
            "rng": self.rng.bit_generator.state,
            "pass_sum": self.pass_sum.tolist(),
            "groups_seen": self.groups_seen.tolist(),
            "uniform_since": self.uniform_since.tolist(),
            "window": list(self.window),
            "zero_advantage_share": self.zero_advantage_share,
        }

    def load_state_dict(self, state: dict) -> None:
        if len(state["pass_sum"]) != self.size:
            raise CurriculumConfigError(
                f"the curriculum checkpoint covers {len(state['pass_sum'])} prompts but the "
                f"training set has {self.size}: resume with the data it was saved with"
            )
        if state["options"] != asdict(self.options):
            changed = sorted(k for k, v in state["options"].items() if asdict(self.options).get(k) != v)
            print(
                f"[diffugrpo] curriculum options changed since the checkpoint ({', '.join(changed)}): the level "
                f"and statistics carry on under the new ones"
            )
        self.step, self.level, self.drawn_in_epoch = int(state["step"]), float(state["level"]), state["drawn_in_epoch"]
        self.rng.bit_generator.state = state["rng"]
        self.pass_sum = np.asarray(state["pass_sum"], dtype=np.float64)
        self.groups_seen = np.asarray(state["groups_seen"], dtype=np.int64)
        self.uniform_since = np.asarray(state["uniform_since"], dtype=np.int64)
        self.zero_advantage_share = float(state["zero_advantage_share"])
        self.window = deque(state["window"], maxlen=self.options.window)
        self._weights = None


class RecordingSampler(Sampler[int]):
    """Wraps the data sampler and remembers the positions it yields, so the trainer can tell which dataset row
    each prompt of a batch came from (verl's rows carry the data's own ``index``, not the position). Passes
    ``state_dict`` / ``load_state_dict`` / ``update`` / ``metrics`` through to the sampler it wraps."""

    def __init__(self, inner: Sampler):
        self.inner = inner
        self.drawn: deque[int] = deque()

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[int]:
        # A new pass over the data: draws left from the last one went to a partial batch the loader dropped
        # (drop_last), so no prompt of them will come back.
        self.drawn.clear()
        for position in self.inner:
            self.drawn.append(int(position))
            yield position

    def take(self, count: int) -> list[int]:
        """The next ``count`` positions in the order they were drawn."""
        if count > len(self.drawn):
            raise RuntimeError(
                f"a batch of {count} prompts but only {len(self.drawn)} recorded draws: the "
                f"curriculum needs data.dataloader_num_workers=0"
            )
        return [self.drawn.popleft() for _ in range(count)]

    def update(self, feedback: CurriculumFeedback) -> None:
        if callable(getattr(self.inner, "update", None)):
            self.inner.update(feedback)

    def metrics(self) -> dict[str, float]:
        return self.inner.metrics() if callable(getattr(self.inner, "metrics", None)) else {}

    def state_dict(self) -> dict:
        return self.inner.state_dict() if callable(getattr(self.inner, "state_dict", None)) else {}

    def load_state_dict(self, state: dict) -> None:
        if callable(getattr(self.inner, "load_state_dict", None)):
            self.inner.load_state_dict(state)
        self.drawn.clear()


def group_positions(uids: Sequence[str], positions_by_uid: Mapping[str, int]) -> list[int]:
    """Each completion's dataset position, from its prompt's uid."""
    missing = sorted({uid for uid in uids if uid not in positions_by_uid})
    if missing:
        raise RuntimeError(f"{len(missing)} completion(s) of prompts the curriculum never drew (uid {missing[0]})")
    return [positions_by_uid[uid] for uid in uids]
