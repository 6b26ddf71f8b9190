"""The ``code`` reward: the fraction of the row's tests the completion's code passes.

Tests come from the row's columns (see :func:`diffugrpo_plugin.code_execution.tests_from_row`)
and run in the bubblewrap sandbox, one process per test, so a test that times out fails only
itself. As in DiffuCoder, only completions that pass the format check in full are run
(``require_format``); the others score 0.0. A row without tests scores None (not applicable),
and so does a completion whose sandbox failed (a harness fault, logged).
"""

from __future__ import annotations

from typing import Any

from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.code_execution import TestOutcome, TestSpec, pass_rate
from diffugrpo_plugin.sandbox import Sandbox
from reward_plugins import outcomes_for, rows_of, tests_or_none
from reward_plugins.code_format import candidate_code


def code_outcomes(completions: list, columns: dict[str, list], *, code_block: str = "first",
                  require_format: bool = True, timeout_s: float | None = None, sandbox: Sandbox | None = None
                  ) -> list[tuple[TestSpec | None, str | None, list[TestOutcome] | None]]:
    """Per completion: its tests, the code judged (None if none), and the per-test outcomes.

    Outcomes are None when the row has no tests, the code is missing (then the caller scores 0)
    or the sandbox failed. Runs are cached, so the evaluation command and the quality rewards
    reuse the ``code`` reward's run.
    """
    rows = rows_of(columns, len(completions))
    specs = [tests_or_none(row, "code") for row in rows]
    codes = [candidate_code(completion, code_block, require_format) if spec is not None else None
             for completion, spec in zip(completions, specs)]
    pairs = [(code, spec) if code is not None and spec is not None else None for code, spec in zip(codes, specs)]
    outcomes = outcomes_for(pairs, sandbox, timeout_s)
    return list(zip(specs, codes, outcomes))


def code_reward(completions: list, *, code_block: str = "first", require_format: bool = True,
                timeout_s: float | None = None, sandbox: Sandbox | None = None, **columns: Any) -> list[float | None]:
    """Pass rate of the row's tests, run sandboxed (DiffuCoder's correctness reward)."""
    scores: list[float | None] = []
    for spec, code, outcomes in code_outcomes(completions, columns, code_block=code_block,
                                              require_format=require_format, timeout_s=timeout_s, sandbox=sandbox):
        if spec is None:
            scores.append(None)
        elif code is None:
            scores.append(0.0)
        else:
            scores.append(pass_rate(outcomes) if outcomes is not None else None)
    return scores


@hookimpl
def diffugrpo_reward_functions():
    return {"code": code_reward}
