"""What the reward workers report per completion (each component's score, the components that failed on it), and the
policy that stops training when a reward keeps failing."""

from __future__ import annotations

import math
import sys

from diffugrpo_plugin.integration.reward_manager import ERROR_INFO_PREFIX, EXTRA_INFO_PREFIX


class RewardFailure(RuntimeError):
    """A reward failed on most completions for too many steps in a row; the message says what to do."""


def reward_components(extra_fields: list) -> tuple[list[dict[str, float | None]], list[set[str]]]:
    """Each sample's reward components (None where not applicable or failed) and the components that failed on it,
    from its ``extra_fields`` (``reward_extra_info``, as the reward manager writes it)."""
    samples, failed = [], []
    for extra in extra_fields:
        info = (extra or {}).get("reward_extra_info", {}) or {}
        samples.append(
            {
                key[len(EXTRA_INFO_PREFIX) :]: None if math.isnan(value) else float(value)
                for key, value in info.items()
                if key.startswith(EXTRA_INFO_PREFIX)
            }
        )
        failed.append(
            {
                key[len(ERROR_INFO_PREFIX) :]
                for key, value in info.items()
                if key.startswith(ERROR_INFO_PREFIX) and value
            }
        )
    return samples, failed


class FailureStop:
    """Reports the rewards that failed at a step; stops training when one has failed on at least half the
    completions for ``patience`` steps in a row (``diffugrpo.rewards.stop_after_failed_steps``; 0 never stops): a
    broken harness's None values would leave the other components to be optimised alone, silently. Half, not all:
    completions a reward settles without its harness (the ``code`` reward's unformatted ones score 0 without the
    sandbox) do not fail with it."""

    def __init__(self, names: list[str], patience: int):
        self.names, self.patience = list(names), int(patience)
        self.streaks: dict[str, int] = {}  # per reward: consecutive steps it failed on half the completions

    def check(self, failed: list[set[str]], step: int) -> None:
        """``failed``: per completion of the step, the rewards that failed on it."""
        counts = {name: sum(name in names for names in failed) for name in self.names}
        for name, count in counts.items():
            mostly = bool(failed) and 2 * count >= len(failed)
            self.streaks[name] = self.streaks.get(name, 0) + 1 if mostly else 0
            if count:
                print(
                    f"[diffugrpo] step {step}: reward '{name}' failed on {count} of {len(failed)} "
                    f"completions and scored None there; the reward workers' log has the error",
                    file=sys.stderr,
                    flush=True,
                )
        broken = sorted(name for name, streak in self.streaks.items() if self.patience and streak >= self.patience)
        if broken:
            raise RewardFailure(
                f"reward(s) {broken} failed on at least half the completions for {self.patience} steps in a row (step "
                f"{step}); training on the other components alone would optimise something else. Fix "
                f"the cause in the reward workers' log (a broken sandbox: run `diffugrpo sandbox check`), then resume "
                f"from the last checkpoint; diffugrpo.rewards.stop_after_failed_steps=0 never stops."
            )
