"""The ``syntax`` reward: 1.0 when the completion's chosen fenced Python block parses, else 0.0
with the reason (no block, or the syntax error's line)."""

from __future__ import annotations

from typing import Any

from diffugrpo_plugin import Explained, hookimpl
from diffugrpo_plugin.rewards.judging import offered_code, python_only, syntax_problem


def syntax_reward(completions: list, *, code_block: str = "first", **columns: Any) -> list[float | Explained]:
    """The extracted code parses (no fenced Python block scores 0.0)."""
    scores: list[float | Explained] = []
    for completion in completions:
        offer = offered_code(completion, code_block, require_format=False)
        reason = offer.reason if offer.code is None else syntax_problem(offer.code)
        scores.append(Explained(0.0, reason) if reason is not None else 1.0)
    return scores


@hookimpl
def diffugrpo_reward_functions():
    return {"syntax": python_only(syntax_reward)}
