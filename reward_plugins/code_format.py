"""The ``code_format`` reward: DiffuCoder's format check, with its exact semantics by default.

1.0 when the completion is prose (optional) followed by exactly one fenced ```python block that
ends the text with a closing fence and a newline, and the block parses; 0.5 when it has that
shape but the code has a SyntaxError; 0.0 otherwise; below 1.0 it says why (how the format
failed, or the syntax error's line). ``format_end`` (filled in from ``diffugrpo.rewards.format_end``)
set to ``lenient`` also accepts a closing fence followed by other whitespace or by nothing (a
completion that stops at EOS). The ``code`` reward runs only completions scoring 1.0 here (as
DiffuCoder does), by the same rule: :func:`diffugrpo_plugin.rewards.judging.format_verdict`.
"""

from __future__ import annotations

from typing import Any

from diffugrpo_plugin import Explained, hookimpl
from diffugrpo_plugin.rewards.judging import completion_text, format_verdict, row_languages


def code_format_reward(completions: list, *, format_end: str = "exact", **columns: Any) -> list[float | Explained]:
    """DiffuCoder's format reward: one ```python block ending the text, 0.5 if it does not parse (a row with a
    ``language`` column: that language's fence, as DiffuCoder's ``get_code_format_reward(language)``)."""
    languages = row_languages(columns, len(completions))
    verdicts = [
        format_verdict(completion_text(completion), format_end, language)
        for completion, language in zip(completions, languages)
    ]
    return [Explained(score, reason) if reason is not None else score for score, reason in verdicts]


@hookimpl
def diffugrpo_reward_functions():
    return {"code_format": code_format_reward}
