"""Adversary round 11 (#58): a fresh breaker against round 10's judge, and the forgeries of this round's own fixes.

The rows (``fixtures/adversary_round11.jsonl``) are the breaker's (``b11-*``: each attack beside the plainly wrong
program it starts from, and an honest one where the task allows), then this round's own (``own-*``):

- **A class named like the task's function, without a reference** (``noref-fnclass``): a program object whose class
  the program named ``shout`` answered ``startswith``. Without a reference, a ``str`` method is now trusted only on a
  class the test took from the program by that name.
- **A reference class with a builtin or standard-library base** (``ref-star``: ``Exception``; ``ref-enum``: ``Enum``;
  ``ref-strbase``: ``str``): the reference's class was taken to offer every method, or all of ``str``'s, so a plain
  program class of that name answered them. Those bases now offer nothing: a builtin's methods are answered by the
  builtin, on the value a program object of that builtin holds.
- **JavaScript, the tests' own code through the program's built-ins** (``js-set``, ``js-sort``, ``js-iter``,
  ``js-foreach``): building the expected ``Set``, sorting, iterating the tests' table called the program's
  replacements of ``Set.prototype.add``, ``Array.prototype.sort``, the array iterator and ``forEach``. The runner
  now puts the built-ins back after the program's top-level code and fixes them (``harnesses.JS_BUILTINS_GUARD``);
  a program's replacement made during a call fails (``own-js-hook-during-call-attack``), an ``Error`` subclass
  setting ``this.name`` and a constructor function's prototype still work.
- **APPS, a function named ``json``** (``apps-json``): the generated asserts read their values with ``json.loads``,
  the program's ``json`` once ``fn_name`` named it. They now use ``json`` and the builtins under ``APPS_PREFIX``.
- This round's fixes (``issubclass`` and ``__class__`` of program classes, ``sum()`` of program objects, an
  argument's inner list kept as the test's own): a class not derived, a metaclass or a patched ``issubclass``, a
  ``__class__`` property, an ``__radd__`` answering a number or handed the test's value, rows rebuilt instead of
  changed in place; an ``__aexit__`` answering True (never suppresses); a ``cmp_to_key`` the program ignores, the
  test's objects left unordered, a warning not issued, a dataclass whose fields differ (the test's comparison key, its
  objects' ``<``, its ``catch_warnings`` and ``dataclasses.asdict`` now reach the program's process).

A second breaker against all of that (``b12-*``): a ``toJSON`` the program added to ``Object.prototype`` or
``Array.prototype``, a prototype of its own under ``Array.prototype`` (a proxy answering ``Symbol.toPrimitive``), a
``Symbol.hasInstance`` on ``RangeError`` (at the top level, or during a call) all reached the tests' own code: the
guard now also puts back each built-in's prototype, removes anything new on ``Object.prototype`` and any protocol
name (``toJSON``, ``then``), and fixes ``instanceof`` of the ``Error`` classes. A class the test (or MBPP's setup
code) defines was the program's to call, so its ``Oracle().solve`` or table of cases answered: only a record class
of the test's own code (an ``__init__`` that stores what it is given, LeetCode's ``Node``) is. A ``Solution`` object
returned by a call answered ``startswith`` in a row without a reference, and a reference class's dynamic fields let
any method answer: such trust now covers only an object the test made from a class it names, and a field's value.
An ``async`` test whose checks followed an ``await``, and one checking with ``console.assert``, passed any program:
the runner now prints its marker once the event loop is empty, and the tests' ``console.assert`` throws.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adversary_support import score

pytestmark = pytest.mark.sandbox  # every program here runs in the sandbox

ROWS = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "adversary_round11.jsonl").open()]
PARTLY = {"b11-ref-strbase-base": 1 / 3}  # its first test passes honestly


def expected(task_id: str) -> float:
    if task_id in PARTLY:
        return PARTLY[task_id]
    return 1.0 if task_id.endswith("-honest") else 0.0


def test_round_11_forgeries_score_0_and_honest_programs_1(tmp_path):
    scored = score(tmp_path, ROWS, "--reward", "code=1.0", "--timeout-s", "10")
    got = {row["task_id"]: scored[row["task_id"]]["rewards"]["code"] for row in ROWS}
    assert got == pytest.approx({row["task_id"]: expected(row["task_id"]) for row in ROWS})
    attacks = {task_id for task_id in got if task_id.endswith("-attack")}
    assert len(attacks) == 26 and all(got[task_id] == 0.0 for task_id in attacks)
