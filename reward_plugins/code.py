"""The ``code`` reward: the fraction of the row's tests the completion's code passes.

Tests come from the row's columns (see :func:`diffugrpo_plugin.rewards.code_tests.tests_from_row`)
and run in the bubblewrap sandbox, one process per test, so a test that times out fails only
itself. As in DiffuCoder, only completions that pass the format check in full are run
(``require_format``); the others score 0.0. A row without tests scores None (not applicable), and so does a row
whose task's own tests or code cannot be judged (reason ``task_error``): that row alone, the others are scored.
Every score below 1.0 says why (:attr:`diffugrpo_plugin.rewards.judging.Judged.reason`). A failure of the sandbox itself raises (a harness fault, never a score): the rows it concerns
score None, flagged as failed, and the trainer reports them.
"""

from __future__ import annotations

from typing import Any

from diffugrpo_plugin import Explained, hookimpl
from diffugrpo_plugin.rewards.judging import Judged, code_outcomes
from diffugrpo_plugin.rewards.test_runs import pass_rate
from diffugrpo_plugin.sandbox.host import Sandbox


def _pass_rate(judged: Judged) -> float | None:
    if judged.spec is None or judged.task_error is not None:
        return None
    return pass_rate(judged.outcomes) if judged.code is not None else 0.0


def code_reward(
    completions: list,
    *,
    code_block: str = "first",
    require_format: bool = True,
    format_end: str = "exact",
    timeout_s: float | None = None,
    sandbox: Sandbox | None = None,
    **columns: Any,
) -> list[float | Explained]:
    """Pass rate of the row's tests, run sandboxed (DiffuCoder's correctness reward)."""
    judged = code_outcomes(
        completions,
        columns,
        code_block=code_block,
        require_format=require_format,
        format_end=format_end,
        timeout_s=timeout_s,
        sandbox=sandbox,
    )
    return [Explained(_pass_rate(one), one.reason) if one.reason is not None else _pass_rate(one) for one in judged]


@hookimpl
def diffugrpo_reward_functions():
    return {"code": code_reward}
