"""The verl RL row every data source is turned into: prompt template, row layout, arrow schema.

Prompt template (DiffuCoder's ``make_conversation``): the user message is::

    {question}                                   if the question already gives a signature
    {question}\\nTest cases: {test_cases[0]}      otherwise

A question "gives a signature" when it contains a fenced block (``"\\n```\\n"``, DiffuCoder's
own test) or a line starting with ``def name(`` (our addition, for unfenced starter code).
HumanEval questions are ``Write a complete, self-contained Python solution for the following
function. Put it in a single ```python code block.\\n```python\\n{prompt}\\n```\\n``.
The system turn is left to the chat template (ours, like Qwen2's, adds "You are a helpful
assistant.", the reference recipe's system prompt). The expected completion is
:func:`format_completion` of the code: one ```python block followed by a newline.

Row format (one row per problem; every parquet we write has the same arrow schema, so files
from different sources concatenate)::

    data_source   str                "mbpp" | "humaneval" | "acecode" | "leetcode" | "synthetic" | <name>
    prompt        [{"role": "user", "content": str}]
    ability       "code"
    reward_model  {"style": "rule", "ground_truth": json.dumps(test spec)}
    extra_info    {index, split, task_id: str, test_cases: [str] | None, test_setup_code: str | None,
                   test_imports: [str] | None, test: str | None, entry_point: str | None,
                   inputs: [str] | None, outputs: [str] | None, reference_solution: str | None}

``None`` means "this source has no such field". The test spec in ``ground_truth`` holds the
non-``None`` test fields of ``extra_info``. How a code reward runs a completion ``code``,
one program per ``test_cases[i]``: ``test_imports`` (joined by newlines), ``code``,
``test_setup_code`` (after the code: MBPP's builds objects from the candidate's classes),
then the case. HumanEval / LeetCode rows also carry ``test`` + ``entry_point`` and
one equivalent case ``test + "\\ncheck(entry_point)"`` (all asserts pass or none count).
``inputs`` / ``outputs`` are stdin / expected stdout pairs.

No torch.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diffugrpo_plugin.data.records import DataError, parquet_rows


@dataclass(frozen=True)
class Problem:
    """One code problem before prompt construction. Test fields are ``None`` when absent."""

    task_id: str
    question: str
    test_cases: list[str] | None = None
    test_setup_code: str | None = None
    test_imports: list[str] | None = None
    test: str | None = None
    entry_point: str | None = None
    inputs: list[str] | None = None
    outputs: list[str] | None = None
    reference_solution: str | None = None
    language: str | None = None  # another language than Python (sandbox/languages.py): its tests are `test` or stdio

    TEST_FIELDS = (
        "test_cases",
        "test_setup_code",
        "test_imports",
        "test",
        "entry_point",
        "inputs",
        "outputs",
        "language",
    )

    def test_spec(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.TEST_FIELDS if getattr(self, name) is not None}


_FENCED_BLOCK = "\n```\n"
_DEF_LINE = re.compile(r"^\s*def\s+\w+\s*\(", re.MULTILINE)


def has_signature(question: str) -> bool:
    """Whether the question already shows the function to write (then no test is appended)."""
    return _FENCED_BLOCK in question or _DEF_LINE.search(question) is not None


def build_prompt(question: str, test_cases: list[str] | None) -> str:
    """The user message: the question, plus the first test unless a signature is given."""
    if has_signature(question) or not test_cases:
        return question
    return f"{question}\nTest cases: {test_cases[0]}"


def format_completion(code: str) -> str:
    """The completion a model should write for ``code``: one python fence, then a newline."""
    return f"```python\n{code.rstrip()}\n```\n"


def to_row(problem: Problem, data_source: str, split: str, index: int) -> dict[str, Any]:
    """One verl RL row (see the module docstring for the format)."""
    extra = {"index": index, "split": split, "task_id": problem.task_id}
    extra.update({name: getattr(problem, name) for name in Problem.TEST_FIELDS})
    extra["reference_solution"] = problem.reference_solution
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": build_prompt(problem.question, problem.test_cases)}],
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(problem.test_spec(), sort_keys=True)},
        "extra_info": extra,
    }


def row_schema():
    """The arrow schema of every parquet this module writes."""
    import pyarrow as pa

    strings = pa.list_(pa.string())
    extra_info = pa.struct(
        [
            ("index", pa.int64()),
            ("split", pa.string()),
            ("task_id", pa.string()),
            ("test_cases", strings),
            ("test_setup_code", pa.string()),
            ("test_imports", strings),
            ("test", pa.string()),
            ("entry_point", pa.string()),
            ("inputs", strings),
            ("outputs", strings),
            ("reference_solution", pa.string()),
            ("language", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", extra_info),
        ]
    )


def read_parquet_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a prepared parquet file, as plain Python objects; errors name the file and the fix."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"parquet file {path} does not exist (make one with `diffugrpo data prepare`)")
    return parquet_rows(path.read_bytes(), path.name)


def write_parquet(rows: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Write rows with :func:`row_schema`; the file appears complete or not at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise DataError(f"refusing to write {path}: no rows (check the split and filters)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    pq.write_table(pa.Table.from_pylist(rows, schema=row_schema()), partial)
    os.replace(partial, path)
    return path
