"""What the code rewards and the evaluation share: the code a completion offers and its test outcomes.

* :func:`format_score` / :func:`candidate_code`: DiffuCoder's format rule (one fenced ```python
  block ending the text) and the code it lets through for judging.
* :func:`code_outcomes`: per completion, the row's tests, the code judged and every test's
  sandboxed outcome; ``code``, ``efficiency``, ``maintainability``, ``diffugrpo eval`` and
  ``diffugrpo rewards score`` all judge through it, so a score means the same everywhere.
* :func:`rows_of` / :func:`completion_text`: TRL's column-per-field calling convention.

Sits below the reward plugins (``reward_plugins/`` imports it, never the other way) on top of
:mod:`~diffugrpo_plugin.code_execution`. No torch.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from diffugrpo_plugin.code_execution import TestOutcome, TestSpec, extract_code, parses, run_tests_many, tests_from_row
from diffugrpo_plugin.sandbox import Sandbox, SandboxError

# Far beyond any rollout (about 25k tokens); longer text is not parsed here at all: it scores as no code.
MAX_COMPLETION_CHARS = 100_000
# DiffuCoder's pattern, applied with re.fullmatch: no ``` before the python fence, none inside.
FORMAT_PATTERN = re.compile(r"^(?:(?!```)[\s\S])*?```python\n((?:(?!```)[\s\S])*?)```\n$")


def completion_text(completion: Any) -> str:
    """A completion as text: plain strings, or TRL's conversational form (last message's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and completion and isinstance(completion[-1], Mapping):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def format_score(text: str) -> float:
    """DiffuCoder's format reward: 0.0 (wrong shape or longer than :data:`MAX_COMPLETION_CHARS`),
    0.5 (right shape, code does not parse) or 1.0."""
    if len(text) > MAX_COMPLETION_CHARS:
        return 0.0
    match = FORMAT_PATTERN.fullmatch(text)
    if match is None:
        return 0.0
    return 1.0 if parses(match.group(1)) else 0.5


def candidate_code(completion: Any, code_block: str = "first", require_format: bool = True) -> str | None:
    """The code a completion offers for judging, or None when it offers none.

    With ``require_format`` (DiffuCoder's behaviour) only completions whose format score is 1.0
    count; they hold exactly one block, so ``code_block`` matters only without it. Text longer than
    :data:`MAX_COMPLETION_CHARS` offers none: it is never parsed.
    """
    text = completion_text(completion)
    if len(text) > MAX_COMPLETION_CHARS or (require_format and format_score(text) != 1.0):
        return None
    return extract_code(text, code_block)


def rows_of(columns: Mapping[str, Sequence], count: int) -> list[dict[str, Any]]:
    """Per-completion rows from TRL-style columns (each a list with one value per completion)."""
    rows: list[dict[str, Any]] = [{} for _ in range(count)]
    for name, values in columns.items():
        if not isinstance(values, (list, tuple)) or len(values) != count:
            length = len(values) if hasattr(values, "__len__") else "no"
            raise ValueError(f"column {name!r} must be a list with one value per completion ({count}), got {length}")
        for row, value in zip(rows, values):
            row[name] = value
    return rows


def outcomes_for(pairs: Sequence[tuple[str, TestSpec] | None], sandbox: Sandbox | None,
                 timeout_s: float | None) -> list[list[TestOutcome] | None]:
    """Sandboxed outcomes for each (code, tests) pair, concurrently and cached; None for a None pair.

    Raises the :class:`SandboxError` of a pair whose sandbox failed: a harness fault is never the
    code's fault and never a score (the rewards core then scores the rows it concerns None, flagged).
    """
    wanted = [pair for pair in pairs if pair is not None]
    results = iter(run_tests_many(wanted, sandbox, timeout_s))
    outcomes: list[list[TestOutcome] | None] = []
    for pair in pairs:
        result = next(results) if pair is not None else None
        if isinstance(result, SandboxError):
            raise result
        outcomes.append(result)
    return outcomes


def code_outcomes(completions: Sequence, columns: Mapping[str, Sequence], *, code_block: str = "first",
                  require_format: bool = True, timeout_s: float | None = None, sandbox: Sandbox | None = None
                  ) -> list[tuple[TestSpec | None, str | None, list[TestOutcome] | None]]:
    """Per completion: its tests, the code judged (None if none), and the per-test outcomes.

    Outcomes are None when the row has no tests or the code is missing (then the caller scores 0).
    Runs are cached, so the quality rewards reuse the ``code`` reward's run. Raises ValueError
    (naming the column) for a malformed test column and
    :class:`~diffugrpo_plugin.sandbox.SandboxError` when the sandbox itself failed.
    """
    specs = [tests_from_row(row) for row in rows_of(columns, len(completions))]
    codes = [candidate_code(completion, code_block, require_format) if spec is not None else None
             for completion, spec in zip(completions, specs)]
    pairs = [(code, spec) if code is not None and spec is not None else None for code, spec in zip(codes, specs)]
    outcomes = outcomes_for(pairs, sandbox, timeout_s)
    return list(zip(specs, codes, outcomes))


def all_tests_passed(spec: TestSpec | None, code: str | None, outcomes: list[TestOutcome] | None) -> bool | None:
    """The correctness gate of the quality rewards: None when the row has no tests, False when
    there is no code or a test failed, True when all passed."""
    if spec is None:
        return None
    if code is None:
        return False
    return all(outcome.passed for outcome in outcomes)
