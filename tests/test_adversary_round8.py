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

A second breaker, against those fixes (the ``b2-*`` rows): the runner's own code after the program ran called
methods of the program's realm (``.every``, a spread, ``RegExp.prototype.test`` choosing which ``assert`` the tests
get); errors lost their message and an own ``__proto__`` key its value in the copy; a Python program's class named
like the task's function answered ``str`` methods; an APPS expected value of ``-Infinity`` was written as the name
``inf``, which the program defined.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adversary_support import score

pytestmark = pytest.mark.sandbox  # every program here runs in the sandbox

ROWS = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "adversary_round8.jsonl").open()]
FORGERIES = {"cpp-seccomp-rewind", "cpp-rewind-only", "cpp-seccomp-rewind-prime", "js-tostringtag", "js-objtag-attack"}
# the second breaker's, against the fixes above (each passed a wrong program on their first version)
FORGERIES |= {
    f"b2-{name}"
    for name in (
        "js-every-hook",  # a hook on Array.prototype.every, which the comparison's wrapper called before copying
        "js-regex-realassert",  # a RegExp hook that had the tests require the real, unfrozen assert
        "js-num-regex-realassert",
        "js-regex-plus-round8",
        "js-num-every-fn",
        "js-error-msg-dropped",  # errors copied without their message
        "js-error-attack",
        "js-proto-key-loose",  # an own "__proto__" key lost in the copy
        "js-protokey-attack",
        "py-instname-ref",  # a program class named like the task's function answering str methods
        "py-classcall-ref",
        "py-newcls-ref",
        "py-metaname-ref",
    )
}
# the third breaker's (b3-*), against round 10's changes: a __class__ property answering type(obj) is Node, an
# APPS fn_name named like the test's own helpers (lists), or like a builtin the program does not define (max)
FORGERIES |= {"b3-node_attack", "b3-vec_attack", "b3-lists_empty", "b3-lists_io_empty", "b3-max_empty"}
PARTLY = {"b2-apps-inf-attack": 0.5}  # defines `inf` for an APPS expected value of -Infinity; its other test passes


def expected(task_id: str) -> float:
    if task_id in PARTLY:
        return PARTLY[task_id]
    return 0.0 if task_id in FORGERIES or "wrong" in task_id else 1.0


def test_in_language_forgeries_score_0_and_correct_programs_1(tmp_path):
    scored = score(tmp_path, ROWS, "--reward", "code=1.0", "--timeout-s", "10")
    got = {row["task_id"]: scored[row["task_id"]]["rewards"]["code"] for row in ROWS}
    assert got == {row["task_id"]: expected(row["task_id"]) for row in ROWS}
    assert FORGERIES <= set(got)
