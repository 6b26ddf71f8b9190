"""A bad row scores alone: a task whose own tests or code cannot be judged (a malformed column, a test that does not
parse, a check module without ``check``, a preamble that fails in the judge) gives that row None with the reason
``task_error``, and the rows beside it are scored as usual, in ``diffugrpo rewards score``, in ``diffugrpo eval``
and in training (the reward manager's :meth:`RewardSpec.score`)."""

from __future__ import annotations

import json
import math

import pytest

from diffugrpo_plugin.cli import main as run_cli
from diffugrpo_plugin.integration.reward_manager import extra_info
from diffugrpo_plugin.rewards import code_tests
from diffugrpo_plugin.rewards.code_tests import TaskError
from diffugrpo_plugin.rewards.spec import RewardSpec
from diffugrpo_plugin.tools import evaluation
from diffugrpo_plugin.tools.evaluation import Completion, EvalProblem

CORRECT = "```python\ndef add(a, b):\n    return a + b\n```\n"
GOOD = {"test_cases": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]}
BAD_ROWS = {
    "a test that does not parse": {"test_cases": ["assert add(1, 2) == 3", "assert add(1,, 2) == 3"]},
    "a malformed column": {"test_list": 5},
    "a check without an entry point": {"test": "def check(candidate):\n    assert candidate(1, 2) == 3\n"},
    "a check module without check": {"test": "def verify(candidate):\n    pass\n", "entry_point": "add"},
    "a preamble that fails in the judge": {**GOOD, "test_imports": ["raise RuntimeError('broken preamble')"]},
}


@pytest.mark.parametrize("name", [name for name in BAD_ROWS if name != "a preamble that fails in the judge"])
def test_the_tasks_own_faults_are_found_without_running_anything(name):
    with pytest.raises(TaskError):
        code_tests.tests_from_row(BAD_ROWS[name])


def _mixed() -> tuple[list[str], dict[str, list]]:
    rows = [GOOD, *BAD_ROWS.values(), GOOD]
    names = sorted({key for row in rows for key in row})
    return [CORRECT] * len(rows), {name: [row.get(name) for row in rows] for name in names}


@pytest.mark.sandbox
def test_training_scores_a_bad_row_none_and_its_neighbours_as_usual():
    """What the reward manager hands verl: the bad rows' ``code`` is NaN (None), not a failure of the reward (the run
    goes on, no stop after failed steps) and not a 0 in the total: the total is the format term alone."""
    spec = RewardSpec.from_config({"reward_funcs": {"code": 2.0, "code_format": 0.5}})
    completions, columns = _mixed()
    scored = spec.score(completions, columns)
    assert [one.values["code"] for one in scored] == [1.0, *[None] * len(BAD_ROWS), 1.0]
    for one in scored[1:-1]:
        assert one.errors == {} and one.reasons["code"].kind == "task_error"
        assert spec.total(one.values) == 0.5  # 0.5 x code_format; the code term is left out, never counted as 0
        info = extra_info(one)
        assert math.isnan(info["reward/code"]) and info["reward_failed/code"] == 0.0
    assert "broken preamble" in scored[-2].reasons["code"].detail
    assert [spec.total(one.values) for one in (scored[0], scored[-1])] == [2.5, 2.5]


@pytest.mark.sandbox
def test_quality_rewards_of_a_bad_row_are_none_too():
    spec = RewardSpec.from_config({"reward_funcs": ["maintainability", "efficiency"]})
    completions, columns = _mixed()
    scored = spec.score(completions, columns)
    for one in scored[1:-1]:
        assert one.values == {"maintainability": None, "efficiency": None} and one.errors == {}
    assert all(value is not None for value in scored[0].values.values())


@pytest.mark.sandbox
def test_rewards_score_writes_every_row_and_warns_of_the_bad_ones(tmp_path, capsys):
    completions, columns = _mixed()
    rows = [
        {"completion": c, **{k: v[i] for k, v in columns.items() if v[i] is not None}}
        for i, c in enumerate(completions)
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert run_cli(["rewards", "score", str(path)]) == 0
    captured = capsys.readouterr()
    out = [json.loads(line) for line in captured.out.splitlines()]
    assert [row["rewards"]["code"] for row in out] == [1.0, *[None] * len(BAD_ROWS), 1.0]
    assert [row["total"] for row in out] == [2.5, *[0.5] * len(BAD_ROWS), 2.5]
    assert all(row["reasons"]["code"]["kind"] == "task_error" for row in out[1:-1])
    assert out[0]["tests"][0]["outcome"] == "PASSED" and out[-2]["tests"] is None
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert [line.split(": ")[2] for line in warnings] == [f"in.jsonl line {n}" for n in (2, 3, 4, 5)]


@pytest.mark.sandbox
def test_eval_leaves_a_bad_problem_out_of_pass_at_k_and_judges_the_others():
    def problem(task_id: str, columns: dict) -> EvalProblem:
        return EvalProblem(task_id, "toy", ({"role": "user", "content": "add"},), {**columns, "data_source": "toy"})

    problems = [problem("good", GOOD), *(problem(name, row) for name, row in BAD_ROWS.items())]
    problems.append(problem("no tests", {}))
    wrong = Completion("```python\ndef add(a, b):\n    return a - b\n```\n")
    results = evaluation.judge_completions(problems, {p.task_id: [Completion(CORRECT), wrong] for p in problems})
    summary = evaluation.summarize(results, [1])
    assert summary["pass@1"] == 0.5 and summary["num_problems"] == 1
    assert summary["num_problems_not_judged"] == len(BAD_ROWS) + 1
    assert set(summary["problems_not_judged"]) == {*BAD_ROWS, "no tests"}
    assert all(reason["kind"] == "task_error" for reason in summary["problems_not_judged"].values())
    with pytest.raises(evaluation.EvaluationError, match="no problem could be judged; task no tests"):
        evaluation.summarize([results[-1]], [1])
