"""Running reward functions in isolation: a function that raises, or returns the wrong count or a value that is not
a finite number, fails only its own component on those rows (None, with the error kept), logged once a minute per
reward; what a completion scored, with its errors and reasons. :class:`~diffugrpo_plugin.rewards.spec.RewardSpec`
calls these."""

from __future__ import annotations

import logging
import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Hashable

from diffugrpo_plugin.hooktypes import Explained, Reason

logger = logging.getLogger("diffugrpo.rewards")

CRASH_LOG_WINDOW_S = 60.0


class CrashLog:
    """Logs the first failure of each reward per step (or per minute when no step is known)."""

    def __init__(self):
        self.seen: set[tuple[str, Hashable]] = set()
        self.counts: dict[str, int] = {}

    def report(self, component: Any, step: Hashable | None, exc: BaseException) -> None:
        """``component``: the :class:`~diffugrpo_plugin.rewards.spec.RewardComponent` that raised."""
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


def validated(items: Any, count: int, name: str) -> tuple[list[float | None], list[Reason | None]]:
    """The values and reasons of what reward ``name`` returned (one float, None or Explained per completion)."""
    if not isinstance(items, (list, tuple)) or len(items) != count:
        raise TypeError(
            f"reward '{name}' must return a list of {count} values (one per completion), "
            f"got {type(items).__name__} of length {len(items) if hasattr(items, '__len__') else '?'}"
        )
    values = [_checked_value(value_of(item), name) for item in items]
    return values, [_checked_reason(item, name) for item in items]


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class RowScore:
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


def value_of(item: Any) -> Any:
    """The value of one item a reward function returned: ``item.value`` for an :class:`Explained`,
    else the item itself (a plain float or None, as TRL expects)."""
    return item.value if isinstance(item, Explained) else item
