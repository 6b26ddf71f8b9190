"""Adversary round 8 (#58): forged passes of the other languages' in-language tests.

The rows (``fixtures/adversary_round8.jsonl``, MultiPL-E form) are the round's breaker's, beside an honest and a
plainly wrong program for each task:

- **C++, a filter of the program's own.** A static initialiser stacks a seccomp filter that makes ``exit_group(1)``
  fail, so the harness's failed check does not end the process; its trap that follows is caught and the program
  rewinds to try another answer until every check passes (``cpp-seccomp-rewind*``; ``cpp-rewind-only`` is round 5's
  rewind without the filter). The sandbox's filter now refuses ``PR_SET_SECCOMP`` and the ``seccomp`` call.
- **JavaScript, a getter on the shared prototypes.** Node's ``deepEqual`` reads ``Symbol.toStringTag`` of both
  values through their prototype chains; a getter on ``Array.prototype`` (``Object.prototype``) was handed the
  tests' expected value and copied it into the array (object) the program returned. The tests' comparisons now run
  on copies in a realm of their own (``harnesses.JS_CLEAN_ASSERT``).

The ``js-copy-*`` rows are correct programs (and one wrong) whose values those copies must keep as Node compares
them: Maps of Sets, a class instance against a literal (loose: equal; strict: not), sparse arrays, ``NaN``, ``-0``,
``undefined``, dates, BigInts, typed arrays, regular expressions, identity, an extended ``Array.prototype``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adversary_support import score

pytestmark = pytest.mark.sandbox  # every program here runs in the sandbox

ROWS = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "adversary_round8.jsonl").open()]
FORGERIES = {"cpp-seccomp-rewind", "cpp-rewind-only", "cpp-seccomp-rewind-prime", "js-tostringtag", "js-objtag-attack"}


def expected(task_id: str) -> float:
    return 0.0 if task_id in FORGERIES or "wrong" in task_id else 1.0


def test_in_language_forgeries_score_0_and_correct_programs_1(tmp_path):
    scored = score(tmp_path, ROWS, "--reward", "code=1.0", "--timeout-s", "10")
    got = {row["task_id"]: scored[row["task_id"]]["rewards"]["code"] for row in ROWS}
    assert got == {row["task_id"]: expected(row["task_id"]) for row in ROWS}
    assert FORGERIES <= set(got)
