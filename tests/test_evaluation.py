"""Evaluation: the pass@k estimator against hand-computed values and brute force, problem
loading, completions files, sandboxed judging, summaries, output files and seeded generation."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import pytest

from conftest import mbpp_file
from diffugrpo_plugin import Reason
from diffugrpo_plugin.data import format_completion, prepare, write_parquet
from diffugrpo_plugin.rewards.test_runs import Outcome, TestOutcome
from diffugrpo_plugin.tools import evaluation
from diffugrpo_plugin.tools.evaluation import (
    Completion,
    EvalProblem,
    EvaluationError,
    ProblemResult,
    Verdict,
    pass_at_k,
)
from samplers_support import single_thread

ADD_TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(-1, 1) == 0"]
CORRECT = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\n"
WRONG = "```python\ndef add(a, b):\n    return a * b + 1 if a == 2 else a + b\n```\n"  # fails only add(2, 2)

_one_thread = pytest.fixture(scope="module", autouse=True)(single_thread)


def add_problem(task_id: str = "add", data_source: str = "toy") -> EvalProblem:
    return EvalProblem(
        task_id,
        data_source,
        ({"role": "user", "content": "Write add(a, b)."},),
        {"test_cases": ADD_TESTS, "data_source": data_source},
    )


def verdict(passed_tests: int, total_tests: int = 3, code: str | None = "pass") -> Verdict:
    outcomes = tuple(TestOutcome(i, Outcome.PASSED if i < passed_tests else Outcome.FAILED) for i in range(total_tests))
    return Verdict(Completion("text"), code, outcomes if code is not None else ())


def result(task_id: str, passes: list[bool], data_source: str = "toy") -> ProblemResult:
    return ProblemResult(task_id, data_source, tuple(verdict(3 if ok else 0) for ok in passes))


# --------------------------------------------------------------------------- pass@k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, Fraction(2, 5)),  # pass@1 is c / n
        (5, 2, 2, 1 - Fraction(3, 10)),  # C(3,2)=3, C(5,2)=10
        (10, 3, 5, 1 - Fraction(21, 252)),  # C(7,5)=21, C(10,5)=252: 11/12
        (4, 1, 4, Fraction(1)),  # n - c < k: every draw of 4 holds the passing sample
        (6, 0, 3, Fraction(0)),  # c = 0
        (6, 6, 3, Fraction(1)),  # c = n
        (1, 1, 1, Fraction(1)),
        (2000, 1, 1000, Fraction(1, 2)),  # C(n-1, k) / C(n, k) = (n - k) / n: exact even for huge binomials
    ],
)
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-15)


def test_pass_at_k_is_the_chance_that_a_random_k_subset_holds_a_pass():
    for n, c, k in [(6, 2, 3), (7, 3, 2), (5, 1, 5), (8, 5, 4)]:
        samples = [True] * c + [False] * (n - c)
        subsets = list(itertools.combinations(samples, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets), abs=1e-15)


def test_pass_at_k_keeps_precision_near_zero():
    # 1 pass in 10^6 samples: 1 - (1 - 1e-6) in floats would keep only ~10 significant digits.
    assert pass_at_k(10**6, 1, 1) == 1e-6


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (3, 1, 5, "needs at least 5 samples per problem, got n=3"),
        (3, 4, 1, "0 <= c <= n"),
        (3, -1, 1, "0 <= c <= n"),
        (3, 1, 0, "k >= 1"),
    ],
)
def test_pass_at_k_rejects_impossible_inputs(n, c, k, message):
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


def test_pass_at_k_takes_only_integers():
    with pytest.raises(TypeError, match="integer n"):
        pass_at_k(3.0, 1, 1)
    with pytest.raises(TypeError, match="integer c"):
        pass_at_k(3, True, 1)


def test_parse_ks_sorts_and_deduplicates_and_names_bad_entries():
    assert evaluation.parse_ks("10, 1,5,1") == [1, 5, 10]
    with pytest.raises(EvaluationError, match="got '0'"):
        evaluation.parse_ks("1,0")
    with pytest.raises(EvaluationError, match="got 'five'"):
        evaluation.parse_ks("1,five")


# --------------------------------------------------------------------------- summaries


def test_summary_averages_pass_at_k_over_problems_and_per_data_source():
    results = [result("a", [True, False]), result("b", [False, False]), result("c", [True, True], "other")]
    summary = evaluation.summarize(results, ks=[1, 2])
    # pass@1: (1/2 + 0 + 1) / 3; pass@2: (1 + 0 + 1) / 3
    assert summary["pass@1"] == pytest.approx(0.5)
    assert summary["pass@2"] == pytest.approx(2 / 3)
    assert (summary["num_problems"], summary["num_completions"]) == (3, 6)
    assert summary["by_data_source"]["toy"]["pass@1"] == pytest.approx(0.25)
    assert summary["by_data_source"]["toy"]["pass@2"] == pytest.approx(0.5)
    assert summary["by_data_source"]["other"] == {
        "pass@1": 1.0,
        "pass@2": 1.0,
        "num_problems": 1,
        "num_completions": 2,
        "test_pass_rate": 1.0,
        "code_extracted_rate": 1.0,
        "num_tests": 0,
        "num_test_runs": 6,
        "num_test_runs_program_compared": 0,
        "num_test_runs_judged_inside": 0,
        "not_passed_by_reason": {},
    }


def test_summary_test_pass_rate_is_the_code_rewards_mean():
    results = [ProblemResult("a", "toy", (verdict(2), verdict(3), verdict(0, code=None)))]
    summary = evaluation.summarize(results)
    assert summary["test_pass_rate"] == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert summary["code_extracted_rate"] == pytest.approx(2 / 3)
    assert summary["pass@1"] == pytest.approx(1 / 3)


def test_summary_names_a_problem_with_too_few_completions_for_k():
    with pytest.raises(EvaluationError, match="pass@2 needs at least 2 completions per problem; task b has 1"):
        evaluation.summarize([result("a", [True, True]), result("b", [True])], ks=[1, 2])


def test_table_lists_each_source_then_all():
    results = [result("a", [True]), result("c", [False], "other")]
    lines = evaluation.format_table(evaluation.summarize(results)).splitlines()
    assert lines[0].split() == [
        "data_source",
        "problems",
        "completions",
        "pass@1",
        "test_pass_rate",
        "code_extracted_rate",
        "program_compared",
        "judged_inside",
    ]
    assert [line.split()[:4] for line in lines[2:]] == [
        ["other", "1", "1", "0.0000"],
        ["toy", "1", "1", "1.0000"],
        ["all", "2", "2", "0.5000"],
    ]


# --------------------------------------------------------------------------- judging


@pytest.mark.sandbox
def test_judging_runs_each_test_in_the_sandbox_and_keeps_per_test_outcomes():
    prose_only = "def add(a, b):\n    return a + b"  # no fenced block: offers no code, as in training
    completions = {"add": [Completion(CORRECT, 1), Completion(WRONG, 2), Completion(prose_only, 3)]}
    (judged,) = evaluation.judge_completions([add_problem()], completions)
    assert judged.passed == [True, False, False]
    assert [o.outcome for o in judged.verdicts[1].outcomes] == [Outcome.PASSED, Outcome.FAILED, Outcome.PASSED]
    assert judged.verdicts[1].test_pass_rate == pytest.approx(2 / 3)
    assert judged.verdicts[2].code is None and judged.verdicts[2].outcomes == ()
    assert judged.verdicts[0].code == "def add(a, b):\n    return a + b\n"
    assert [v.completion.seed for v in judged.verdicts] == [1, 2, 3]
    assert judged.verdicts[0].reason is None
    assert judged.verdicts[1].reason == Reason(
        "tests_failed", "1 of 3 tests failed; first: test 1 FAILED: assertion failed: assert add(2, 2) == 4"
    )
    assert judged.verdicts[2].reason == Reason(
        "no_code_block", f"tests not run: no fenced ```python block ({evaluation.NO_BLOCK_HINT})"
    )


@pytest.mark.sandbox
def test_judging_follows_the_training_format_rule_unless_lenient():
    trailing_prose = "```python\ndef add(a, b):\n    return a + b\n```\nThis adds."  # text after the fence
    strict = evaluation.judge_completions([add_problem()], {"add": [Completion(trailing_prose)]})
    lenient = evaluation.judge_completions([add_problem()], {"add": [Completion(trailing_prose)]}, require_format=False)
    assert strict[0].passed == [False] and lenient[0].passed == [True]
    assert strict[0].verdicts[0].reason == Reason(
        "format",
        f"tests not run: text after the closing fence: "
        f"'This adds.'; the block must end the completion "
        f"({evaluation.FORMAT_HINT})",
    )


STARTER = 'def add(a, b):\n    """Their sum."""\n'
HUMANEVAL_STYLE = EvalProblem(
    "add",
    "toy",
    ({"role": "user", "content": f"Complete:\n```python\n{STARTER}```\n"},),
    {"test_cases": ADD_TESTS, "data_source": "toy"},
)


@pytest.mark.sandbox
def test_bare_code_is_judged_after_the_starter_code_only_when_asked_for():
    body, whole = "    return a + b\n", "def add(a, b):\n    return a + b\n"
    completions = {"add": [Completion(body), Completion(whole), Completion("")]}
    assert HUMANEVAL_STYLE.starter_code == STARTER
    (asked,) = evaluation.judge_completions([HUMANEVAL_STYLE], completions, bare_code=True)
    assert asked.passed == [True, True, False]
    assert asked.verdicts[0].code == STARTER + body
    assert asked.verdicts[2].reason == Reason("empty", "tests not run: the completion is empty")
    (default,) = evaluation.judge_completions([HUMANEVAL_STYLE], completions)
    assert default.passed == [False, False, False]
    assert default.verdicts[0].reason.detail.endswith(
        "(a completion without any ``` fence is judged as bare code, HumanEval-style, with --bare-code)"
    )


@pytest.mark.sandbox
def test_judging_only_problems_with_completions_and_refusing_problems_without_tests():
    judged = evaluation.judge_completions([add_problem("a"), add_problem("b")], {"b": [Completion(CORRECT)]})
    assert [r.task_id for r in judged] == ["b"]
    untested = EvalProblem("bare", "toy", ({"role": "user", "content": "hi"},), {"data_source": "toy"})
    [bare] = evaluation.judge_completions([untested], {"bare": [Completion(CORRECT)]})
    assert bare.not_judged.kind == "task_error" and "task bare has no tests" in bare.not_judged.detail
    with pytest.raises(EvaluationError, match="no problem could be judged; task bare: .*task bare has no tests"):
        evaluation.summarize([bare])
    with pytest.raises(EvaluationError, match="no completion belongs"):
        evaluation.judge_completions([add_problem("a")], {"zzz": [Completion(CORRECT)]})


def test_a_sandbox_failure_is_an_error_not_a_score(monkeypatch):
    from diffugrpo_plugin.sandbox.config import SandboxError

    monkeypatch.setattr(evaluation, "run_tests_many", lambda items, sandbox, timeout_s: [SandboxError("boom")])
    with pytest.raises(EvaluationError, match="sandbox failed while judging task add: boom"):
        evaluation.judge_completions([add_problem()], {"add": [Completion(CORRECT)]})


# --------------------------------------------------------------------------- problems and files


def test_problems_from_prepared_rows_keep_the_columns_the_code_reward_reads():
    rows = prepare("mbpp", "validation", mbpp_file("mbpp.jsonl"), limit=2)
    problems = evaluation.problems_from_rows(rows)
    assert [p.task_id for p in problems] == ["511", "512"]
    assert problems[0].columns["test_cases"] == rows[0]["extra_info"]["test_cases"]
    assert problems[0].columns["data_source"] == "mbpp"
    assert problems[0].messages[0]["content"] == rows[0]["prompt"][0]["content"]
    assert len(problems[0].tests()) == 3


def test_bad_rows_are_named():
    good = prepare("mbpp", "validation", mbpp_file("mbpp.jsonl"), limit=1)[0]
    with pytest.raises(EvaluationError, match="rows row 1: field 'prompt' must be a non-empty chat list"):
        evaluation.problems_from_rows([{**good, "prompt": "just text"}])
    with pytest.raises(EvaluationError, match="rows row 1: missing field 'extra_info'"):
        evaluation.problems_from_rows([{**good, "extra_info": None}])
    with pytest.raises(EvaluationError, match="rows row 2: task_id '511' appears twice"):
        evaluation.problems_from_rows([good, good])


def test_load_problems_from_each_dataset(tmp_path):
    assert [p.task_id for p in evaluation.load_problems("humaneval", limit=3)] == [
        "HumanEval/0",
        "HumanEval/1",
        "HumanEval/2",
    ]
    mbpp = evaluation.load_problems("mbpp", "validation", mbpp_file("mbpp.jsonl"))
    assert len(mbpp) == 90 and mbpp[0].task_id == "511" and mbpp[-1].task_id == "600"
    parquet = write_parquet(prepare("synthetic", "validation", limit=4), tmp_path / "validation.parquet")
    from_parquet = evaluation.load_problems("parquet", path=parquet)
    assert [p.data_source for p in from_parquet] == ["synthetic"] * 4
    assert from_parquet[0].tests().kind == "asserts"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: evaluation.load_problems("apps"), "unknown dataset 'apps'. Known datasets: humaneval, mbpp, parquet"),
        (lambda: evaluation.load_problems("parquet"), "--dataset parquet needs --data"),
        (lambda: evaluation.load_problems("parquet", "test", "x.parquet"), "--split applies to humaneval and mbpp"),
        (lambda: evaluation.load_problems("parquet", path="/nonexistent.parquet"), "does not exist"),
        (lambda: evaluation.load_problems("humaneval", "train"), "HumanEval is an evaluation set"),
        (lambda: evaluation.load_problems("mbpp", "dev", "x.jsonl"), "unknown MBPP split 'dev'"),
        (lambda: evaluation.load_problems("humaneval", limit=0), "--limit must be at least 1"),
    ],
)
def test_load_problems_errors_name_the_fix(call, message):
    with pytest.raises(EvaluationError, match=message):
        call()


def test_completions_file_allows_several_lines_per_task_and_integer_ids(tmp_path):
    problems = [add_problem("11"), add_problem("12")]
    path = tmp_path / "c.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(line)
            for line in [
                {"task_id": 11, "completion": "a"},
                {"task_id": "11", "completion": "b"},
                {"task_id": 12, "completion": "c"},
            ]
        )
        + "\n\n"
    )
    read = evaluation.read_completions_jsonl(path, problems)
    assert read == {"11": [Completion("a"), Completion("b")], "12": [Completion("c")]}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"task_id": "add", "completion": "x"}', '{"task_id": "add", '], r"c.jsonl line 2: not valid JSON"),
        (['{"task_id": "add"}'], r"c.jsonl line 1: missing field 'completion'"),
        (['{"completion": "x"}'], r"c.jsonl line 1: missing field 'task_id'"),
        (['["add", "x"]'], r"c.jsonl line 1 \(item 1\): expected a JSON object"),
        (
            ['{"task_id": "add", "completion": "x"}', '{"task_id": "HumanEval/999", "completion": "x"}'],
            r"c.jsonl line 2: unknown task_id 'HumanEval/999'",
        ),
        ([""], r"holds no JSON object"),
    ],
)
def test_completions_file_errors_name_the_line(tmp_path, lines, message):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(EvaluationError, match=message):
        evaluation.read_completions_jsonl(path, [add_problem()])


def test_output_files_hold_one_record_per_completion(tmp_path):
    no_block = Reason("no_code_block", "tests not run: no fenced ```python block")
    results = [
        ProblemResult(
            "a",
            "toy",
            (
                Verdict(Completion("A", 7), "code", (TestOutcome(0, Outcome.PASSED),)),
                Verdict(Completion("B", 8), None, (), no_block),
            ),
        )
    ]
    summary = evaluation.summarize(results)
    paths = evaluation.write_outputs(tmp_path / "out", results, summary)
    completions = [json.loads(line) for line in paths["completions.jsonl"].read_text().splitlines()]
    outcomes = [json.loads(line) for line in paths["outcomes.jsonl"].read_text().splitlines()]
    assert completions == [
        {
            "task_id": "a",
            "data_source": "toy",
            "sample": 0,
            "seed": 7,
            "completion": "A",
            "code": "code",
            "passed": True,
            "reason": None,
        },
        {
            "task_id": "a",
            "data_source": "toy",
            "sample": 1,
            "seed": 8,
            "completion": "B",
            "code": None,
            "passed": False,
            "reason": no_block.to_dict(),
        },
    ]
    assert outcomes[0]["tests"][0]["outcome"] == "PASSED" and outcomes[1]["tests"] is None
    assert (outcomes[0]["reason"], outcomes[1]["reason"]) == (None, no_block.to_dict())
    written = json.loads(paths["summary.json"].read_text())
    assert written["pass@1"] == 0.5 and written["not_passed_by_reason"] == {"no_code_block": 1}


# --------------------------------------------------------------------------- generation


def test_sample_seeds_depend_only_on_seed_task_and_sample():
    seeds = {evaluation.sample_seed(0, task, sample) for task in ("a", "b") for sample in range(50)}
    assert len(seeds) == 100 and all(0 <= seed < 2**31 for seed in seeds)
    assert evaluation.sample_seed(0, "a", 3) == evaluation.sample_seed(0, "a", 3) != evaluation.sample_seed(1, "a", 3)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoTokenizer

    from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained
    from diffugrpo_plugin.models.tiny import TinySpec, save_tiny_model

    spec = TinySpec(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64, max_positions=256)
    path = str(save_tiny_model(tmp_path_factory.mktemp("tiny"), spec))
    tokenizer = AutoTokenizer.from_pretrained(path)
    return DiffusionLM.wrap(load_pretrained(path), tokenizer), tokenizer


def test_generation_is_seeded_per_request_whatever_the_batch(tiny):
    from diffugrpo_plugin.sampling import build_sampler

    lm, tokenizer = tiny
    problems = [
        add_problem("a"),
        EvalProblem("b", "toy", ({"role": "user", "content": "Longer prompt: sort a list of numbers."},), {}),
    ]
    sampler = build_sampler("dream", alg="maskgit_plus", temperature=1.0, steps=4)
    progress = []
    whole = evaluation.generate_completions(
        sampler,
        lm,
        tokenizer,
        problems,
        n=3,
        max_new_tokens=8,
        seed=5,
        batch_size=6,
        progress=lambda done, total: progress.append((done, total)),
    )
    one_by_one = evaluation.generate_completions(
        sampler, lm, tokenizer, problems, n=3, max_new_tokens=8, seed=5, batch_size=1
    )
    assert whole == one_by_one
    assert progress == [(6, 6)]
    assert [c.seed for c in whole["b"]] == [evaluation.sample_seed(5, "b", sample) for sample in range(3)]
    assert len({c.text for c in whole["a"]}) > 1  # temperature 1 with distinct seeds: samples differ
    fewer = evaluation.generate_completions(sampler, lm, tokenizer, problems[1:], n=2, max_new_tokens=8, seed=5)
    assert fewer["b"] == whole["b"][:2]


def test_generation_refuses_prompts_longer_than_the_model_context(tiny):
    from diffugrpo_plugin.sampling import build_sampler

    lm, tokenizer = tiny
    with pytest.raises(
        EvaluationError,
        match=r"1 prompt\(s\) plus --max-new-tokens 250 exceed the model's "
        r"max_position_embeddings \(256\): add \(",
    ):
        evaluation.generate_completions(
            build_sampler("entropy"), lm, tokenizer, [add_problem()], n=1, max_new_tokens=250
        )


@pytest.mark.sandbox
def test_mbpp_reference_solutions_pass():
    problems = evaluation.load_problems("mbpp", "validation", mbpp_file("mbpp.jsonl"), limit=10)
    rows = {r["extra_info"]["task_id"]: r for r in prepare("mbpp", "validation", mbpp_file("mbpp.jsonl"), limit=10)}
    references = {
        p.task_id: [Completion(format_completion(rows[p.task_id]["extra_info"]["reference_solution"]))]
        for p in problems
    }
    summary = evaluation.summarize(evaluation.judge_completions(problems, references))
    assert summary["pass@1"] == 1.0 and summary["num_problems"] == 10


def test_pass_at_k_is_the_formula_correctly_rounded():
    for n, c, k in [(30, 7, 10), (50, 0, 25), (12, 12, 3), (200, 3, 100)]:
        exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
        assert pass_at_k(n, c, k) == float(exact)
