"""The ``code_format`` reward: DiffuCoder's format check, with its exact semantics.

1.0 when the completion is prose (optional) followed by exactly one fenced ```python block that
ends the text with a closing fence and a newline, and the block parses; 0.5 when it has that
shape but the code has a SyntaxError; 0.0 otherwise; below 1.0 it says why (how the format
failed, or the syntax error's line). The closing fence may end the text without the newline
DiffuCoder's pattern asks for (a completion that stops at EOS). The ``code`` reward runs only completions
scoring 1.0 here (as DiffuCoder does); the rule itself is :func:`diffugrpo_plugin.judging.format_verdict`.
"""

from __future__ import annotations

from typing import Any

from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.judging import completion_text, format_verdict
from diffugrpo_plugin.rewards import Explained


def code_format_reward(completions: list, **columns: Any) -> list[float | Explained]:
    """DiffuCoder's format reward: one ```python block ending the text, 0.5 if it does not parse."""
    verdicts = [format_verdict(completion_text(completion)) for completion in completions]
    return [Explained(score, reason) if reason is not None else score for score, reason in verdicts]


@hookimpl
def diffugrpo_reward_functions():
    return {"code_format": code_format_reward}
