"""Tests and their verdicts: read a row's tests, run each against code in the sandbox, judge the result.

Public API (used through :mod:`diffugrpo_plugin.judging` by the code rewards and ``diffugrpo eval``):

* :func:`extract_code` -- the first or last fenced Python block of a completion.
* :func:`tests_from_row` -- a :class:`TestSpec` from a dataset row, in one of three formats:
  assert strings (``test_cases`` as in DiffuCoder/AceCode, MBPP ``test_list`` with
  ``test_setup_code`` / sanitized-MBPP ``test_imports``), HumanEval (``test`` + ``entry_point``,
  which runs ``check(entry_point)``), or stdin/stdout pairs (``inputs`` + ``outputs``, or
  ``test_cases`` given as ``[{"input": ..., "output": ...}]``) compared on the whole output.
* :func:`run_tests` / :func:`run_tests_many` -- one :class:`TestOutcome` per test, each test its
  own sandboxed process with its own deadline, so one test that hangs fails only itself.
  Wherever a test can be split (:mod:`~diffugrpo_plugin.verdicts`), the sandbox only returns the
  candidate's values and the comparison is made here; stdin/stdout tests compare the captured
  output here. The rest run whole inside and are counted (:func:`judged_outside`).
* :func:`reference_from_row` -- the row's reference solution, for rewards that compare to it.

Runs of the same code on the same tests are cached per process (bounded), so ``code``,
``efficiency`` and ``maintainability`` in one step share a single sandbox run. No torch.
"""

from __future__ import annotations

import collections
import enum
import functools
import json
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from diffugrpo_plugin.sandbox import Job, JobResult, Sandbox, SandboxError, escaped, shared_sandbox
from diffugrpo_plugin.verdicts import BadValue, SplitTest, Unsplittable, decode_reports, judge_split, parse_python, \
    plan_check, shadowed_names, split_assert

SIGXCPU = 24
CACHE_SIZE = 4096
BLOCK_CHOICES = ("first", "last")
_FENCED_PYTHON = re.compile(r"```(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


class Outcome(str, enum.Enum):
    """The verdict of one test."""

    PASSED = "PASSED"
    FAILED = "FAILED"  # assertion failed or wrong output
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIME_LIMIT_EXCEEDED = "TIME_LIMIT_EXCEEDED"
    MEMORY_LIMIT_EXCEEDED = "MEMORY_LIMIT_EXCEEDED"
    SYNTAX_ERROR = "SYNTAX_ERROR"


@dataclass(frozen=True)
class TestOutcome:
    """One test's verdict with what the sandbox measured for it (zero when it did not run)."""

    __test__ = False  # not a pytest class

    index: int
    outcome: Outcome
    detail: str = ""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    memory_kb: int = 0  # peak resident memory above the bare interpreter
    instructions: int | None = None  # user-space instructions, where the CPU exposes a counter

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "outcome": self.outcome.value, "detail": self.detail, "cpu_s": self.cpu_s,
                "wall_s": self.wall_s, "memory_kb": self.memory_kb, "instructions": self.instructions}


@dataclass(frozen=True)
class TestSpec:
    """A row's tests in one of three kinds: ``asserts``, ``check`` (HumanEval) or ``stdio``.

    ``prelude`` runs before the candidate (imports), ``setup`` after it (MBPP's
    ``test_setup_code`` builds objects from the candidate's classes), then the test itself.
    """

    __test__ = False

    kind: str
    asserts: tuple[str, ...] = ()
    check_source: str = ""
    entry_point: str = ""
    stdio: tuple[tuple[str, str], ...] = ()
    prelude: str = ""
    setup: str = ""

    def __len__(self) -> int:
        if self.kind == "asserts":
            return len(self.asserts)
        if self.kind == "check":
            return 1
        return len(self.stdio)

    def units(self, code: str) -> list[TestUnit]:
        """What one sandboxed process runs for each test, and how its verdict is decided."""
        head = "\n".join(part for part in (self.prelude, code, self.setup) if part)
        splits = split_tests(self, shadowed_names(head))
        if self.kind == "asserts":
            return [TestUnit(head, splits=split) if split is not None else TestUnit(f"{head}\n{test}\n")
                    for test, split in zip(self.asserts, splits)]
        if self.kind == "check":
            if splits[0] is not None:
                return [TestUnit(head, splits=splits[0])]
            return [TestUnit(f"{head}\n\n{self.check_source}\n\ncheck({self.entry_point})\n")]
        return [TestUnit(head, stdin=stdin, expected_output=expected) for stdin, expected in self.stdio]


@dataclass(frozen=True)
class TestUnit:
    """One test as run: the program, its stdin, and how it is judged: on the values of ``splits``' probes
    (outside the sandbox), on its ``expected_output`` (stdin/stdout), or, with neither, by running
    to the end without an exception inside the sandbox."""

    __test__ = False

    source: str
    stdin: str = ""
    splits: tuple[SplitTest, ...] = ()
    expected_output: str | None = None

    @property
    def probes(self) -> tuple[str, ...]:
        return tuple(probe for split in self.splits for probe in split.probes)

    @property
    def judged_outside(self) -> bool:
        return bool(self.splits) or self.expected_output is not None


@functools.lru_cache(maxsize=4096)
def split_tests(spec: TestSpec, shadowed: frozenset[str] = frozenset()) -> tuple[tuple[SplitTest, ...] | None, ...]:
    """Per test of ``spec``, its split form (None: it runs whole inside); stdin/stdout tests need none.
    ``shadowed``: the builtins the program rebinds, asked of the program rather than evaluated here."""
    def attempt(make) -> tuple[SplitTest, ...] | None:
        try:
            return tuple(make())
        except Unsplittable:
            return None

    if spec.kind == "asserts":
        return tuple(attempt(lambda test=test: [split_assert(test, shadowed)]) for test in spec.asserts)
    if spec.kind == "check":
        return (attempt(lambda: plan_check(spec.check_source, spec.entry_point, shadowed)),)
    return tuple(None for _ in spec.stdio)


def judged_outside(spec: TestSpec) -> int:
    """How many of ``spec``'s tests are decided outside the sandbox (see :class:`TestUnit`) for a
    program that rebinds no builtin."""
    return len(spec) if spec.kind == "stdio" else sum(split is not None for split in split_tests(spec))


def extract_code(text: str, block: str = "first") -> str | None:
    """The content of the first or last fenced ```python block of ``text``; None if there is none.

    ``first`` is DiffuCoder's choice, ``last`` open-r1's (a model that drafts then corrects
    itself is judged on its final answer).
    """
    if block not in BLOCK_CHOICES:
        raise ValueError(f"code block must be one of {BLOCK_CHOICES}, got {block!r}")
    blocks = _FENCED_PYTHON.findall(text or "")
    if not blocks:
        return None
    return blocks[0] if block == "first" else blocks[-1]


def parses(code: str) -> bool:
    """Whether ``code`` is valid Python syntax (parsed only, never executed)."""
    try:
        parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _as_list(value: Any, column: str) -> list:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"column {column!r} is a string that is not a JSON list: {exc}") from exc
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"column {column!r} must be a list, got {type(value).__name__}")
    return list(value)


def _strings(values: list, column: str) -> tuple[str, ...]:
    for position, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"column {column!r} item {position} must be a string, got {type(value).__name__}")
    return tuple(values)


def _joined(value: Any, column: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return "\n".join(_strings(_as_list(value, column), column))


def _stdio_pairs(inputs: list, outputs: list, column: str) -> tuple[tuple[str, str], ...]:
    if len(inputs) != len(outputs):
        raise ValueError(f"{column}: {len(inputs)} inputs but {len(outputs)} outputs")
    return tuple(zip(_strings(inputs, f"{column} inputs"), _strings(outputs, f"{column} outputs")))


def _list_tests(values: list, column: str, prelude: str, setup: str) -> TestSpec | None:
    """A list column: stdin/stdout dicts, or assert strings."""
    if values and all(isinstance(value, Mapping) for value in values):
        try:
            pairs = _stdio_pairs([v["input"] for v in values], [v["output"] for v in values], column)
        except KeyError as exc:
            raise ValueError(f"column {column!r}: stdin/stdout test is missing key {exc}") from exc
        return TestSpec(kind="stdio", stdio=pairs, prelude=prelude) if pairs else None
    asserts = _strings(values, column)
    return TestSpec(kind="asserts", asserts=asserts, prelude=prelude, setup=setup) if asserts else None


def _check_tests(row: Mapping[str, Any], prelude: str, setup: str) -> TestSpec:
    entry_point = row.get("entry_point")
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise ValueError(f"column 'test' (HumanEval style) needs an 'entry_point' naming the function, "
                         f"got {entry_point!r}")
    return TestSpec(kind="check", check_source=str(row["test"]), entry_point=entry_point, prelude=prelude, setup=setup)


def _stdio_tests(row: Mapping[str, Any], prelude: str) -> TestSpec | None:
    if row.get("inputs") is None or row.get("outputs") is None:
        raise ValueError("stdin/stdout tests need both 'inputs' and 'outputs' columns")
    pairs = _stdio_pairs(_as_list(row["inputs"], "inputs"), _as_list(row["outputs"], "outputs"), "inputs/outputs")
    return TestSpec(kind="stdio", stdio=pairs, prelude=prelude) if pairs else None


def tests_from_row(row: Mapping[str, Any]) -> TestSpec | None:
    """The tests of a dataset row, or None when it has none (the ``code`` reward is then None).

    Columns read, first match wins: ``test_cases`` (assert strings, or stdin/stdout dicts with
    ``input``/``output``); ``test_list`` (MBPP) with ``test_setup_code`` and ``test_imports``;
    ``test`` + ``entry_point`` (HumanEval); ``inputs`` + ``outputs`` (stdin/stdout).
    Raises ValueError naming the column when a present column is malformed.
    """
    prelude = _joined(row.get("test_imports"), "test_imports")
    setup = _joined(row.get("test_setup_code"), "test_setup_code")
    for column in ("test_cases", "test_list"):
        if row.get(column) is not None:
            return _list_tests(_as_list(row[column], column), column, prelude, setup)
    if row.get("test") is not None:
        return _check_tests(row, prelude, setup)
    if row.get("inputs") is not None or row.get("outputs") is not None:
        return _stdio_tests(row, prelude)
    return None


def reference_from_row(row: Mapping[str, Any]) -> str | None:
    """The row's reference solution: ``reference_solution``, else HumanEval's ``prompt`` +
    ``canonical_solution``, else MBPP's ``code`` (only on rows with ``test_list``)."""
    if isinstance(row.get("reference_solution"), str) and row["reference_solution"].strip():
        return row["reference_solution"]
    if isinstance(row.get("canonical_solution"), str) and isinstance(row.get("prompt"), str):
        return row["prompt"] + row["canonical_solution"]
    if isinstance(row.get("code"), str) and row.get("test_list") is not None:
        return row["code"]
    return None


def outputs_match(actual: str, expected: str) -> bool:
    """Whole-output comparison: equal line by line after trailing whitespace, ignoring trailing
    blank lines. A prefix of the expected output does not match (unlike open-r1's zip)."""
    def lines(text: str) -> list[str]:
        stripped = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while stripped and not stripped[-1]:
            stripped.pop()
        return stripped
    return lines(actual) == lines(expected)


def _memory_exhausted(result: JobResult) -> bool:
    return result.oom_killed or result.exception == "MemoryError" or (
        result.status == "signal" and ("MemoryError" in result.stderr_tail or "Cannot allocate" in result.stderr_tail))


def _failure(result: JobResult, unit: TestUnit, timeout_s: float) -> tuple[Outcome, str] | None:
    """The verdict of a run that did not finish normally; None when it did."""
    status = result.status
    if _memory_exhausted(result):
        return Outcome.MEMORY_LIMIT_EXCEEDED, "memory limit exceeded"
    if status == "timeout" or (status == "signal" and result.signal == SIGXCPU) or result.cpu_s > timeout_s:
        return Outcome.TIME_LIMIT_EXCEEDED, f"time limit exceeded ({result.cpu_s:.2f} s of CPU, limit {timeout_s} s)"
    if status == "exception" and result.exception == "SyntaxError":
        return Outcome.SYNTAX_ERROR, result.message
    if status == "exception" and result.exception == "AssertionError" and unit.expected_output is None:
        return Outcome.FAILED, "assertion failed" + (f": {result.message}" if result.message else "")
    if status == "exception":
        return Outcome.RUNTIME_ERROR, f"{result.exception}: {result.message}"
    if status == "signal":
        return Outcome.RUNTIME_ERROR, f"killed by signal {result.signal}"
    if status == "vanished":
        return Outcome.RUNTIME_ERROR, "exited without finishing the test"
    if status == "not_run":
        return Outcome.RUNTIME_ERROR, "not run: the sandbox stopped before this test"
    # sys.exit() is how a stdin/stdout program may end; in an assert test it skips the asserts.
    if status == "exit" and (unit.expected_output is None or result.exit_code not in (0, None)):
        return Outcome.RUNTIME_ERROR, f"exited with code {result.exit_code} before the test finished"
    return None


def _output_verdict(result: JobResult, expected: str) -> tuple[Outcome, str]:
    if result.stdout_truncated:
        return Outcome.FAILED, "output longer than the capture limit"
    if outputs_match(result.stdout, expected):
        return Outcome.PASSED, ""
    return Outcome.FAILED, "wrong output"


def _split_verdict(result: JobResult, unit: TestUnit) -> tuple[Outcome, str]:
    """Every split test of the unit decided here on the probes' decoded values."""
    try:
        reports = decode_reports(result.probes, len(unit.probes))
    except BadValue as error:
        return Outcome.FAILED, f"the program's answers could not be read: {escaped(str(error))}"
    offset = 0
    for split in unit.splits:  # in the test's order: the first problem decides, as if run inside
        answers = reports[offset:offset + len(split.probes)]
        offset += len(split.probes)
        raised = next((report.raised for report in answers if report.raised is not None), None)
        if raised is not None and raised.startswith("MemoryError:"):
            return Outcome.MEMORY_LIMIT_EXCEEDED, "memory limit exceeded"
        if raised is not None and not raised.startswith("AssertionError:"):
            return Outcome.RUNTIME_ERROR, escaped(raised)
        passed, why = judge_split(split, answers)
        if not passed:
            return Outcome.FAILED, escaped(why)
    return Outcome.PASSED, ""


def judge(result: JobResult, unit: TestUnit, index: int, timeout_s: float) -> TestOutcome:
    """Turns what happened to test ``index``'s process into its verdict."""
    if result.status == "setup_error":
        raise SandboxError(f"the sandbox could not prepare a test: {result.message}")
    verdict = _failure(result, unit, timeout_s)
    if verdict is None:
        if unit.expected_output is not None:
            verdict = _output_verdict(result, unit.expected_output)
        elif unit.splits:
            verdict = _split_verdict(result, unit)
        else:
            verdict = (Outcome.PASSED, "")
    outcome, detail = verdict
    return TestOutcome(index=index, outcome=outcome, detail=detail, cpu_s=result.cpu_s, wall_s=result.wall_s,
                       memory_kb=result.memory_kb, instructions=result.instructions)


def _run_uncached(code: str, spec: TestSpec, sandbox: Sandbox, timeout_s: float | None) -> list[TestOutcome]:
    if not parses(code):
        return [TestOutcome(index, Outcome.SYNTAX_ERROR, "the code does not parse") for index in range(len(spec))]
    units = spec.units(code)
    limit = timeout_s if timeout_s is not None else sandbox.config.timeout_s
    results = sandbox.run([Job(source=unit.source, stdin=unit.stdin, timeout_s=limit, probes=unit.probes)
                           for unit in units])
    return [judge(result, unit, index, limit) for index, (result, unit) in enumerate(zip(results, units))]


class _RunCache:
    """Bounded LRU of finished runs plus the runs in flight, so equal requests run once."""

    def __init__(self, size: int):
        self.size = size
        self.lock = threading.Lock()
        self.entries: collections.OrderedDict[tuple, Future] = collections.OrderedDict()

    def get_or_run(self, key: tuple, run) -> list[TestOutcome]:
        with self.lock:
            future = self.entries.get(key)
            owner = future is None
            if owner:
                future = Future()
                self.entries[key] = future
                while len(self.entries) > self.size:
                    self.entries.popitem(last=False)
            else:
                self.entries.move_to_end(key)
        if owner:
            try:
                future.set_result(run())
            except BaseException as exc:
                with self.lock:
                    self.entries.pop(key, None)  # failures are not cached: the next call retries
                future.set_exception(exc)
        return future.result()


_cache = _RunCache(CACHE_SIZE)


def run_tests(code: str, spec: TestSpec, sandbox: Sandbox | None = None,
              timeout_s: float | None = None, cache: bool = True) -> list[TestOutcome]:
    """Runs every test of ``spec`` against ``code``; one outcome per test, in order.

    Code that does not parse gets SYNTAX_ERROR for every test without being run. ``timeout_s``
    overrides the sandbox's per-test limit; ``cache=False`` forces a fresh run (benchmarks).
    Raises :class:`SandboxError` (never a verdict) when the sandbox itself fails.
    """
    sandbox = sandbox or shared_sandbox()
    if not cache:
        return _run_uncached(code, spec, sandbox, timeout_s)
    key = (code, spec, timeout_s, sandbox.config)
    return _cache.get_or_run(key, lambda: _run_uncached(code, spec, sandbox, timeout_s))


def run_tests_many(items: Sequence[tuple[str, TestSpec]], sandbox: Sandbox | None = None,
                   timeout_s: float | None = None, cache: bool = True) -> list[list[TestOutcome] | SandboxError]:
    """:func:`run_tests` for many (code, spec) pairs, up to the sandbox's concurrency at once.

    A pair whose sandbox failed yields its :class:`SandboxError` in place of outcomes.
    """
    sandbox = sandbox or shared_sandbox()

    def one(item: tuple[str, TestSpec]) -> list[TestOutcome] | SandboxError:
        try:
            return run_tests(item[0], item[1], sandbox, timeout_s, cache)
        except SandboxError as exc:
            return exc

    if len(items) <= 1:
        return [one(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(len(items), sandbox.config.max_concurrency)) as pool:
        return list(pool.map(one, items))


def pass_rate(outcomes: Sequence[TestOutcome]) -> float | None:
    """Fraction of tests passed; None when there are no tests (not a division by zero)."""
    if not outcomes:
        return None
    return sum(outcome.passed for outcome in outcomes) / len(outcomes)
