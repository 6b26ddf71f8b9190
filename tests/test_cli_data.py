"""``diffugrpo data prepare``, driven through a parser that holds only this sub-command."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import MINI_MBPP
from diffugrpo_plugin.cli import data as cli_data
from diffugrpo_plugin.data import synthetic_problems


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="diffugrpo")
    cli_data.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["data", "prepare", *argv])
    return args.func(args)


def rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_mbpp_two_splits_from_a_local_file(tmp_path, capsys):
    assert (
        run("--source", "mbpp", "--input", str(MINI_MBPP), "--split", "train,validation", "--output", str(tmp_path))
        == 0
    )
    train, validation = rows(tmp_path / "train.parquet"), rows(tmp_path / "validation.parquet")
    assert [r["extra_info"]["task_id"] for r in train] == ["601", "700", "800", "974"]
    assert [r["extra_info"]["task_id"] for r in validation] == ["511", "555", "600"]
    assert {r["extra_info"]["split"] for r in train} == {"train"} and train[0]["data_source"] == "mbpp"
    assert [r["extra_info"]["index"] for r in validation] == [0, 1, 2]
    out = capsys.readouterr().out
    assert f"train: 4 rows -> {tmp_path / 'train.parquet'}" in out and "validation: 3 rows" in out


def test_mbpp_from_a_parquet_in_its_own_schema(tmp_path):
    source = tmp_path / "mbpp.parquet"
    pq.write_table(pa.Table.from_pylist([json.loads(line) for line in MINI_MBPP.read_text().splitlines()]), source)
    assert run("--source", "mbpp", "--input", str(source), "--split", "all", "--output", str(tmp_path / "p")) == 0
    assert run("--source", "mbpp", "--input", str(MINI_MBPP), "--split", "all", "--output", str(tmp_path / "j")) == 0
    assert rows(tmp_path / "p" / "all.parquet") == rows(tmp_path / "j" / "all.parquet")
    assert len(rows(tmp_path / "p" / "all.parquet")) == 11


def test_mbpp_from_stdin_serves_every_split(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(MINI_MBPP.read_bytes())))
    assert run("--source", "mbpp", "--input", "-", "--split", "train,validation", "--output", str(tmp_path)) == 0
    assert len(rows(tmp_path / "train.parquet")) == 4 and len(rows(tmp_path / "validation.parquet")) == 3


def test_mbpp_without_input_offline_names_input(tmp_path, capsys, monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'google-research-datasets/mbpp' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert run("--source", "mbpp", "--output", str(tmp_path)) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "diffugrpo data prepare: error: could not load google-research-datasets/mbpp (full) "
        "from the hub (ConnectionError: Couldn't reach"
    )
    assert line.endswith(
        "Offline? Pass --input path/to/mbpp.jsonl (or sanitized-mbpp.json, or a .parquet in MBPP's schema)."
    )
    assert not list(tmp_path.iterdir())


def test_humaneval_default_split_and_name(tmp_path):
    assert run("--source", "humaneval", "--data-source", "he", "--limit", "3", "--output", str(tmp_path)) == 0
    table = rows(tmp_path / "test.parquet")
    assert [r["extra_info"]["task_id"] for r in table] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert {r["data_source"] for r in table} == {"he"}


def test_humaneval_train_is_refused_with_exit_code_2(tmp_path, capsys):
    assert run("--source", "humaneval", "--split", "train", "--output", str(tmp_path)) == 2
    assert "refusing split 'train'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_bad_file_reports_the_line_and_field(tmp_path, capsys):
    bad = tmp_path / "mbpp.jsonl"
    bad.write_text(
        json.dumps({"task_id": 700, "text": "q", "code": "c", "test_list": ["assert 1"]})
        + "\n"
        + json.dumps({"task_id": 701, "text": "q", "code": "c"})
        + "\n"
    )
    assert run("--source", "mbpp", "--input", str(bad), "--output", str(tmp_path / "out")) == 2
    assert (
        capsys.readouterr().err.strip() == "diffugrpo data prepare: error: mbpp.jsonl line 2: missing field 'test_list'"
    )


def test_generic_jsonl_column_options(tmp_path):
    source = tmp_path / "mine.jsonl"
    row = {"question": "Echo.", "stdin": ["1\n"], "stdout": ["1\n"], "answer": "print(input())"}
    source.write_text(json.dumps(row) + "\n")
    assert (
        run(
            "--source",
            "jsonl",
            "--input",
            str(source),
            "--prompt-field",
            "question",
            "--tests-field",
            "none",
            "--inputs-field",
            "stdin",
            "--outputs-field",
            "stdout",
            "--solution-field",
            "answer",
            "--output",
            str(tmp_path / "out"),
        )
        == 0
    )
    [row] = rows(tmp_path / "out" / "train.parquet")
    assert row["data_source"] == "jsonl" and row["prompt"] == [{"role": "user", "content": "Echo."}]
    assert row["extra_info"]["inputs"] == ["1\n"] and row["extra_info"]["reference_solution"] == "print(input())"


def test_acecode_hard_option_is_passed_through(tmp_path, capsys):
    source = tmp_path / "ace.jsonl"
    source.write_text(json.dumps({"question": "q", "test_cases": ["assert 1"]}) + "\n")
    assert run("--source", "acecode", "--input", str(source), "--difficulty", "hard", "--output", str(tmp_path)) == 2
    assert "ace.jsonl line 1: missing field 'inferences'" in capsys.readouterr().err


def test_synthetic_default_writes_train_and_validation(tmp_path):
    assert run("--source", "synthetic", "--seed", "2", "--output", str(tmp_path)) == 0
    assert len(rows(tmp_path / "train.parquet")) == len(synthetic_problems("train", seed=2))
    assert [r["extra_info"]["task_id"] for r in rows(tmp_path / "validation.parquet")] == [
        p.task_id for p in synthetic_problems("validation", seed=2)
    ]


def test_synthetic_wide_family_option(tmp_path):
    assert (
        run("--source", "synthetic", "--family", "wide", "--validation-fraction", "0.02", "--output", str(tmp_path))
        == 0
    )
    assert [r["extra_info"]["task_id"] for r in rows(tmp_path / "validation.parquet")] == [
        p.task_id for p in synthetic_problems("validation", validation_fraction=0.02, family="wide")
    ]
    assert len(rows(tmp_path / "train.parquet")) == 4021


def test_help_lists_the_sources_and_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run("--help")
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert "{mbpp,humaneval,acecode,leetcode,jsonl,multipl-e,synthetic}" in help_text and "--difficulty" in help_text
    assert "--multipl-e-config" in help_text
