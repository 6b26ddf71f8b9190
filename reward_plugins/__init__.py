"""diffugrpo's built-in reward functions, one pluggy plugin module per reward.

Each module implements ``diffugrpo_reward_functions()`` and is registered through the
``diffugrpo`` entry-point group in our own ``pyproject.toml``, exactly as a third-party package
would be. Every function follows the TRL convention ``fn(completions, **columns) -> list[float |
None]``; its keyword-only parameters are its options (``reward_kwargs`` in config). This package
file holds the helpers they share. No torch.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from diffugrpo_plugin.code_execution import TestOutcome, TestSpec, run_tests_many, tests_from_row
from diffugrpo_plugin.sandbox import Sandbox, SandboxError

logger = logging.getLogger("diffugrpo.rewards")


def completion_text(completion: Any) -> str:
    """A completion as text: plain strings, or TRL's conversational form (last message's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and completion and isinstance(completion[-1], Mapping):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def rows_of(columns: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
    """Per-completion rows from TRL-style columns (each a list with one value per completion)."""
    rows: list[dict[str, Any]] = [{} for _ in range(count)]
    for name, values in columns.items():
        if hasattr(values, "tolist") and not isinstance(values, (list, tuple)):
            values = values.tolist()
        if not isinstance(values, (list, tuple)) or len(values) != count:
            length = len(values) if hasattr(values, "__len__") else "no"
            raise ValueError(f"column {name!r} must be a list with one value per completion ({count}), got {length}")
        for row, value in zip(rows, values):
            row[name] = value
    return rows


def tests_or_none(row: Mapping[str, Any], reward: str) -> TestSpec | None:
    """The row's tests; a malformed test column is logged (naming it) and makes the row None."""
    try:
        return tests_from_row(row)
    except ValueError as exc:
        logger.error("reward '%s': cannot read this row's tests (%s); scoring it None", reward, exc)
        return None


def outcomes_for(pairs: Sequence[tuple[str, TestSpec] | None], sandbox: Sandbox | None,
                 timeout_s: float | None) -> list[list[TestOutcome] | None]:
    """Sandboxed outcomes for each (code, tests) pair, concurrently and cached; None for a None
    pair and for a pair whose sandbox failed (a harness fault, logged, never the code's fault)."""
    wanted = [pair for pair in pairs if pair is not None]
    results = iter(run_tests_many(wanted, sandbox, timeout_s))
    outcomes: list[list[TestOutcome] | None] = []
    for pair in pairs:
        result = next(results) if pair is not None else None
        if isinstance(result, SandboxError):
            logger.error("sandbox failure, scoring None: %s", result)
            result = None
        outcomes.append(result)
    return outcomes


def all_tests_passed(spec: TestSpec | None, code: str | None, outcomes: list[TestOutcome] | None) -> bool | None:
    """The correctness gate of the quality rewards: None when it cannot be decided (no tests, or
    the sandbox failed), False when there is no code or a test failed, True when all passed."""
    if spec is None:
        return None
    if code is None:
        return False
    if outcomes is None:
        return None
    return all(outcome.passed for outcome in outcomes)
