"""The ``syntax`` reward: 1.0 when the completion's chosen fenced Python block parses, else 0.0."""

from __future__ import annotations

from typing import Any

from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.code_execution import parses
from diffugrpo_plugin.judging import candidate_code


def syntax_reward(completions: list, *, code_block: str = "first", **columns: Any) -> list[float | None]:
    """The extracted code parses (no fenced Python block scores 0.0)."""
    scores: list[float | None] = []
    for completion in completions:
        code = candidate_code(completion, code_block, require_format=False)
        scores.append(1.0 if code is not None and parses(code) else 0.0)
    return scores


@hookimpl
def diffugrpo_reward_functions():
    return {"syntax": syntax_reward}
