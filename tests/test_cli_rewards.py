"""``diffugrpo rewards list`` and ``diffugrpo rewards score``, through a parser holding only the
rewards sub-command (the router imports sub-commands other parts own)."""

from __future__ import annotations

import argparse
import io
import json
import re
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from diffugrpo_plugin import __version__
from diffugrpo_plugin.cli import rewards as rewards_cli
from diffugrpo_plugin.rewards.aggregation import AGGREGATIONS
from reward_support import TEST_UID_BASE

pytestmark = pytest.mark.sandbox  # every test here runs code in the sandbox

CORRECT = "```python\ndef add(a, b):\n    return a + b\n```\n"
HALF = "Try:\n```python\ndef add(a, b):\n    return 3\n```\n"
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="diffugrpo")
    rewards_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture(autouse=True)
def isolated_uids(monkeypatch):
    original = rewards_cli.rewards_config
    monkeypatch.setattr(
        rewards_cli,
        "rewards_config",
        lambda args: {**original(args), "sandbox": {**original(args)["sandbox"], "uid_base": TEST_UID_BASE}},
    )


def write_jsonl(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return str(path)


def test_list_shows_name_distribution_and_description(capsys):
    assert run_cli(["rewards", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "DISTRIBUTION", "DESCRIPTION"]
    code_line = next(line for line in lines if line.startswith("code "))
    assert f"diffugrpo {__version__}" in code_line and "Pass rate of the row's tests" in code_line
    assert {line.split()[0] for line in lines[1:]} >= {
        "code",
        "code_format",
        "syntax",
        "efficiency",
        "maintainability",
        "comments",
        "constant",
    }


def test_score_writes_one_object_per_line_in_order(tmp_path, capsys):
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"completion": CORRECT, "test_cases": ADD_TESTS, "task_id": 7},
            "",
            {"completion": HALF, "test_cases": ADD_TESTS, "id": "half", "task_id": "add"},
            {"completion": "no code", "test_cases": []},
        ],
    )
    assert run_cli(["rewards", "score", path]) == 0
    first, second, third = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert list(first)[:2] == ["line", "task_id"] and (first["line"], first["task_id"]) == (1, 7)
    assert first["rewards"] == {"code": 1.0, "code_format": 1.0} and first["total"] == 2.5
    assert [t["outcome"] for t in first["tests"]] == ["PASSED", "PASSED"]
    assert (second["line"], second["id"], second["task_id"]) == (3, "half", "add")  # the blank line 2 counts
    assert second["rewards"] == {"code": 0.5, "code_format": 1.0} and second["total"] == 1.5
    assert [t["outcome"] for t in second["tests"]] == ["PASSED", "FAILED"]
    assert third["line"] == 4 and "id" not in third and "task_id" not in third
    assert (third["total"], third["rewards"], third["tests"]) == (0.0, {"code": None, "code_format": 0.0}, None)


def test_score_reads_stdin(tmp_path, capsys, monkeypatch):
    lines = json.dumps({"completion": CORRECT, "test_cases": ADD_TESTS}) + "\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.encode())))
    assert run_cli(["rewards", "score", "-", "--reward", "syntax"]) == 0
    assert json.loads(capsys.readouterr().out) == {"line": 1, "total": 1.0, "rewards": {"syntax": 1.0}}


def test_score_reads_parquet_and_numbers_its_rows(tmp_path, capsys):
    path = tmp_path / "in.parquet"
    rows = [{"completion": CORRECT, "task_id": "a"}, {"completion": HALF, "task_id": "b"}]
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert run_cli(["rewards", "score", str(path), "--reward", "syntax"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"line": 1, "task_id": "a", "total": 1.0, "rewards": {"syntax": 1.0}},
        {"line": 2, "task_id": "b", "total": 1.0, "rewards": {"syntax": 1.0}},
    ]


def test_aggregation_choices_are_the_ones_the_readme_documents():
    documented = re.search(r"aggregation: fixed +# (.+)", (REPO / "docs" / "guides" / "rewards.md").read_text()).group(
        1
    )
    assert tuple(documented.split(" | ")) == tuple(AGGREGATIONS)
    parser = argparse.ArgumentParser()
    rewards_cli.add_parser(parser.add_subparsers())
    assert (
        parser.parse_args(["rewards", "score", "f", "--aggregation", "group_normalized"]).aggregation
        == "group_normalized"
    )


def test_group_normalized_standardises_each_reward_within_its_task(tmp_path, capsys):
    wrong = "```python\ndef add(a, b):\n    return 0\n```\n"
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"completion": CORRECT, "test_cases": ADD_TESTS, "task_id": "add"},
            {"completion": wrong, "test_cases": ADD_TESTS, "task_id": "add"},
            {"completion": CORRECT, "test_cases": ADD_TESTS, "task_id": "alone"},
        ],
    )
    assert run_cli(["rewards", "score", path, "--reward", "code=2", "--aggregation", "group_normalized"]) == 0
    totals = [json.loads(line)["total"] for line in capsys.readouterr().out.splitlines()]
    # code 1.0 and 0.0 in one group: mean 0.5, sample std 0.707 -> +-0.707 each, times weight 2; alone: 0
    assert totals == pytest.approx([2 * 0.5 / (0.5**0.5 + 1e-6), -2 * 0.5 / (0.5**0.5 + 1e-6), 0.0])


def test_group_normalized_needs_the_group_field_on_every_row(tmp_path, capsys):
    path = write_jsonl(tmp_path / "in.jsonl", [{"completion": CORRECT, "task_id": "a"}, {"completion": CORRECT}])
    assert run_cli(["rewards", "score", path, "--reward", "syntax", "--aggregation", "group_normalized"]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "diffugrpo rewards score: error: in.jsonl line 2: aggregation group_normalized groups rows by 'task_id', "
        "which this row lacks; add it to every row or pass --group-by FIELD"
    ]
    assert captured.out == ""
    assert (
        run_cli(
            [
                "rewards",
                "score",
                path,
                "--reward",
                "syntax",
                "--aggregation",
                "group_normalized",
                "--group-by",
                "completion",
            ]
        )
        == 0
    )


def test_score_with_chosen_rewards_and_weights(tmp_path, capsys):
    path = write_jsonl(tmp_path / "in.jsonl", [{"completion": CORRECT, "test_cases": ADD_TESTS}])
    assert run_cli(["rewards", "score", path, "--reward", "syntax=3", "--reward", "code_format"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert json.loads(line) == {"line": 1, "total": 4.0, "rewards": {"syntax": 1.0, "code_format": 1.0}}


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"completion": "x"}', "{not json"], "in.jsonl line 2: not valid JSON"),
        (['{"completion": "x"}', "", "[1, 2]"], "in.jsonl line 3: expected a JSON object, got list"),
        (['{"prompt": "x"}'], "in.jsonl line 1: missing field 'completion'"),
    ],
)
def test_malformed_line_names_its_line_number(tmp_path, capsys, lines, message):
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    assert run_cli(["rewards", "score", path]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_unknown_reward_and_bad_weight(tmp_path, capsys):
    path = write_jsonl(tmp_path / "in.jsonl", [{"completion": CORRECT}])
    assert run_cli(["rewards", "score", path, "--reward", "cod=1"]) == 2
    assert "unknown reward 'cod'. Known rewards:" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_cli(["rewards", "score", path, "--reward", "code=lots"])
    assert "weight of 'code' must be a number, got 'lots'" in capsys.readouterr().err
