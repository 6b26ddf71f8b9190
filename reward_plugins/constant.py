"""The ``constant`` reward, for smoke tests of the training loop only (it teaches nothing).

Selecting it logs a loud warning (see :mod:`diffugrpo_plugin.rewards.spec`); it returns ``value`` for
every completion, which makes every advantage zero under GRPO.
"""

from __future__ import annotations

from typing import Any

from diffugrpo_plugin import hookimpl


def constant_reward(completions: list, *, value: float = 1.0, **columns: Any) -> list[float | None]:
    """SMOKE TESTS ONLY: the same value for every completion."""
    return [float(value)] * len(completions)


@hookimpl
def diffugrpo_reward_functions():
    return {"constant": constant_reward}
