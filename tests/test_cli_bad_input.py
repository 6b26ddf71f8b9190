"""Bad input to ``diffugrpo rewards score``, ``data prepare`` and ``eval``: each ends with exactly one
line on stderr naming the file, the line (or row) and the fix, nothing on stdout, nothing written,
and exit code 2. Run through the CLI's ``main`` (and, for the entry point itself, a subprocess).

Scoring uses ``--reward syntax``: no sandbox starts, and every case fails before scoring would.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MINI_MBPP, REPO
from diffugrpo_plugin import __version__
from diffugrpo_plugin.cli import main

GOOD_COMPLETION = "```python\ndef f():\n    return 1\n```\n"
MBPP_ROW = json.loads(MINI_MBPP.read_text().splitlines()[0])
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"  # the start of a PNG image
LATIN_1 = '{"completion": "caf\u00e9"}'.encode("latin-1")  # JSON in a Latin-1 file: not UTF-8


def score(path: Path | str) -> list[str]:
    return ["rewards", "score", str(path), "--reward", "syntax"]


def prepare(path: Path | str, output: Path) -> list[str]:
    return ["data", "prepare", "--source", "mbpp", "--input", str(path), "--split", "all", "--output", str(output)]


def error_line(argv: list[str], capsys) -> str:
    """The one line ``argv`` writes to stderr, having exited with 2 and written nothing to stdout."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    return line


def fails_with(argv: list[str], capsys, command: str, message: str) -> None:
    """``argv`` exits 2 with the one line ``diffugrpo <command>: error: <message>`` and no output."""
    assert error_line(argv, capsys) == f"diffugrpo {command}: error: {message}"


@pytest.fixture
def out(tmp_path) -> Path:
    """Where ``data prepare`` would write; every test checks nothing appeared there."""
    folder = tmp_path / "out"
    yield folder
    assert not folder.exists()


# --------------------------------------------------------------------------- binary and non-UTF-8 input


def test_binary_input(tmp_path, capsys, out):
    path = tmp_path / "in.jsonl"
    path.write_bytes(BINARY)
    message = (
        "in.jsonl line 3: binary data (a NUL byte), not text; give JSON Lines (.jsonl), a JSON array (.json) "
        "or a parquet file"
    )
    fails_with(score(path), capsys, "rewards score", message)
    fails_with(prepare(path, out), capsys, "data prepare", message)


def test_non_utf8_input(tmp_path, capsys, out):
    path = tmp_path / "in.jsonl"
    path.write_bytes(json.dumps(MBPP_ROW).encode() + b"\n" + LATIN_1 + b"\n")
    byte = len(json.dumps(MBPP_ROW)) + 1 + LATIN_1.index(b"\xe9")
    message = (
        f"in.jsonl line 2: not UTF-8 text (byte {byte} of the input); save it as UTF-8 text (e.g. `iconv -t UTF-8`)"
    )
    fails_with(score(path), capsys, "rewards score", message)
    fails_with(prepare(path, out), capsys, "data prepare", message)


def test_binary_input_through_the_installed_entry_point(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(BINARY)
    done = subprocess.run(
        [sys.executable, "-m", "diffugrpo_plugin.cli", *score(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "diffugrpo rewards score: error: in.jsonl line 3: binary data (a NUL byte), "
        "not text; give JSON Lines (.jsonl), a JSON array (.json) or a parquet file"
    ]


# --------------------------------------------------------------------------- empty input


def test_empty_file(tmp_path, capsys, out):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"")
    message = "in.jsonl holds no JSON object (the file is empty); give one JSON object per line"
    fails_with(score(path), capsys, "rewards score", message)
    fails_with(prepare(path, out), capsys, "data prepare", message)


def test_empty_stdin(capsys, monkeypatch, out):
    message = "stdin holds no JSON object (nothing was piped in); give one JSON object per line"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    fails_with(score("-"), capsys, "rewards score", message)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    fails_with(prepare("-", out), capsys, "data prepare", message)


# --------------------------------------------------------------------------- a column of the wrong type


@pytest.mark.sandbox
def test_test_list_that_is_a_number(tmp_path, capsys, out):
    """rewards score scores the good row and warns of the bad one (tests/test_bad_rows.py); data prepare refuses."""
    path = tmp_path / "in.jsonl"
    rows = [{**MBPP_ROW, "completion": GOOD_COMPLETION}, {**MBPP_ROW, "completion": GOOD_COMPLETION, "test_list": 5}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["rewards", "score", str(path)]) == 0  # code and code_format
    captured = capsys.readouterr()
    first, second = (json.loads(line) for line in captured.out.splitlines())
    assert first["rewards"]["code"] is not None and second["rewards"]["code"] is None
    assert second["reasons"]["code"]["kind"] == "task_error"
    assert (
        "diffugrpo rewards score: warning: in.jsonl line 2: column 'test_list' must be a list, got int; its code "
        "rewards are null (fix the row's tests: test columns, first match wins:" in captured.err
    )
    fails_with(
        prepare(path, out),
        capsys,
        "data prepare",
        "in.jsonl line 2: field 'test_list' must be a non-empty list of strings, got int",
    )


# --------------------------------------------------------------------------- corrupt parquet


@pytest.mark.sandbox
def test_corrupt_parquet(tmp_path, capsys, out):
    path = tmp_path / "in.parquet"
    path.write_bytes(b"PAR1" + b"\x15\x00" * 40)  # a parquet header with no footer
    completions = tmp_path / "c.jsonl"
    completions.write_text(json.dumps({"task_id": "1", "completion": GOOD_COMPLETION}) + "\n")
    for argv, command in [
        (score(path), "rewards score"),
        (prepare(path, out), "data prepare"),
        (["eval", "--dataset", "parquet", "--data", str(path), "--completions", str(completions)], "eval"),
    ]:
        line = error_line(argv, capsys)
        assert line.startswith(f"diffugrpo {command}: error: in.parquet is not a readable parquet file (")
        assert "magic bytes not found" in line  # pyarrow's reason, kept on the same line
        assert line.endswith("); write it again with `diffugrpo data prepare` or pyarrow")


# --------------------------------------------------------------------------- the entry point


def test_version_through_the_installed_entry_point():
    done = subprocess.run(
        [sys.executable, "-m", "diffugrpo_plugin.cli", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"diffugrpo {__version__}\n", "")
