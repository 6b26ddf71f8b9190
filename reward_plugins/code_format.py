"""The ``code_format`` reward: DiffuCoder's format check, with its exact semantics.

1.0 when the completion is prose (optional) followed by exactly one fenced ```python block that
ends the text with a closing fence and a newline, and the block parses; 0.5 when it has that
shape but the code has a SyntaxError; 0.0 otherwise. The ``code`` reward runs only completions
scoring 1.0 here (as DiffuCoder does), see :func:`candidate_code`.
"""

from __future__ import annotations

import re
from typing import Any

from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.code_execution import extract_code, parses
from reward_plugins import completion_text

# DiffuCoder's pattern, applied with re.fullmatch: no ``` before the python fence, none inside.
FORMAT_PATTERN = re.compile(r"^(?:(?!```)[\s\S])*?```python\n((?:(?!```)[\s\S])*?)```\n$")


def format_score(text: str) -> float:
    """0.0 (wrong shape), 0.5 (right shape, code does not parse) or 1.0."""
    match = FORMAT_PATTERN.fullmatch(text)
    if match is None:
        return 0.0
    return 1.0 if parses(match.group(1)) else 0.5


def candidate_code(completion: Any, code_block: str = "first", require_format: bool = True) -> str | None:
    """The code a completion offers for judging, or None when it offers none.

    With ``require_format`` (DiffuCoder's behaviour) only completions whose format score is 1.0
    count; they hold exactly one block, so ``code_block`` matters only without it.
    """
    text = completion_text(completion)
    if require_format and format_score(text) != 1.0:
        return None
    return extract_code(text, code_block)


def code_format_reward(completions: list, **columns: Any) -> list[float | None]:
    """DiffuCoder's format reward: one ```python block ending the text, 0.5 if it does not parse."""
    return [format_score(completion_text(completion)) for completion in completions]


@hookimpl
def diffugrpo_reward_functions():
    return {"code_format": code_format_reward}
