"""Adversary round 7 (#58): a policy's programs that change the judge's own objects, and correct programs whose
arguments share a list with a task object.

The rows (``fixtures/adversary_round7.jsonl``, HumanEval ``check`` and MBPP forms, each with its task's
``Color(Enum)`` preamble) were written by the round's breaker. Their programs patch ``ProgramSide._call`` in their
own process (that side is untrusted by design) and send the judge:

- a value rebuilt from its reduced state, ``Color(1)`` with the state ``{"_value_": 0}``: the constructor hands
  back the judge's own ``Color.RED``, whose state was then set (``Decoder.reduced_``), for this test and every
  later test of the completion;
- a forged "changed in place" report for an enum argument (``_update_in_place`` in ``sandbox_judge.py``),
  giving ``Color.RED`` ``GREEN``'s fields.

Either way the expected value (``Color.RED.value * 10``) changes and a wrong program passes; each forgery must
score 0 while the honest program passes. The ``f*`` rows are correct programs whose test passes a list both as an
argument and inside a task object's field: ``["ref", k]`` numbered containers in the encoder's order and the
decoder met them in another (``Encoder.encode``), so they scored 0 and must score 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adversary_support import score

pytestmark = pytest.mark.sandbox  # every program here runs in the sandbox

ROWS = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "adversary_round7.jsonl").open()]


def expected(task_id: str) -> float:
    """A forgery scores 0, the honest programs and the correct ``f*`` ones 1, the plainly wrong one 0."""
    return 0.0 if "forge" in task_id or task_id.endswith("_wrong") else 1.0


def test_programs_that_change_the_judges_enum_members_score_0_and_correct_ones_1(tmp_path):
    scored = score(tmp_path, ROWS, "--reward", "code=1.0", "--timeout-s", "10", "--max-concurrency", "2")
    got = {row["task_id"]: scored[row["task_id"]]["rewards"]["code"] for row in ROWS}
    assert got == {row["task_id"]: expected(row["task_id"]) for row in ROWS}
    assert sum("forge" in task_id for task_id in got) == 5
