"""Running a row's tests against a program in the sandbox, and each test's verdict.

* :func:`run_tests` / :func:`run_tests_many` -- one :class:`TestOutcome` per test, each test its
  own sandboxed process with its own deadline, so one test that hangs fails only itself. An assert
  or check test is decided by the judge (``sandbox_judge``), a separate sandboxed process that runs
  the test's own code and asks the program's process for its values; stdin/stdout tests compare
  the captured output here (linear, on output capped at ``max_output_bytes``); another language's
  in-language tests are judged by the harness's marker (:mod:`.harnesses`).

Runs of the same code on the same tests are cached per process (bounded), so ``code``,
``efficiency`` and ``maintainability`` in one step share a single sandbox run. No torch.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from diffugrpo_plugin.rewards.code_tests import TaskError, TestSpec
from diffugrpo_plugin.rewards.harnesses import program_harness, tests_harness
from diffugrpo_plugin.rewards.task_code import parses
from diffugrpo_plugin.sandbox.config import SandboxError
from diffugrpo_plugin.sandbox.host import LINE_COUNT_SLOWDOWN, Sandbox, shared_sandbox
from diffugrpo_plugin.sandbox.jobs import Job, JobResult, escaped
from diffugrpo_plugin.sandbox.languages import COMPILER_ADDRESS_SPACE_MB
from diffugrpo_plugin.sandbox.languages import language as get_language

SIGXCPU = 24


CACHE_SIZE = 4096


class Outcome(str, enum.Enum):
    """The verdict of one test."""

    PASSED = "PASSED"
    FAILED = "FAILED"  # assertion failed or wrong output
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIME_LIMIT_EXCEEDED = "TIME_LIMIT_EXCEEDED"
    MEMORY_LIMIT_EXCEEDED = "MEMORY_LIMIT_EXCEEDED"
    SYNTAX_ERROR = "SYNTAX_ERROR"
    COMPILATION_ERROR = "COMPILATION_ERROR"  # another language's program did not compile (languages.py)


@dataclass(frozen=True)
class TestOutcome:
    """One test's verdict with what the sandbox measured for it (zero when it did not run).

    ``compared``: how many comparisons in this test the program's own code decided (``==`` between two
    of its objects); a pass with ``compared > 0`` depends on the program's comparison (see the
    trust rule in docs/guides/rewards.md). ``judged_inside``: the verdict is the program's own exit status
    (another language's in-language assertions, compiled into the program): a program can end itself
    early with success, so such a pass is the program's word, not the judge's."""

    __test__ = False  # not a pytest class

    index: int
    outcome: Outcome
    detail: str = ""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    memory_kb: int = 0  # peak resident memory above the bare interpreter
    instructions: int | None = None  # user-space instructions, where the CPU exposes a counter
    compared: int = 0
    lines: int | None = None  # executed source lines, in a run that counted them (the program's own claim)
    judged_inside: bool = False

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "outcome": self.outcome.value,
            "detail": self.detail,
            "cpu_s": self.cpu_s,
            "wall_s": self.wall_s,
            "memory_kb": self.memory_kb,
            "instructions": self.instructions,
            "compared": self.compared,
            "lines": self.lines,
            "judged_inside": self.judged_inside,
        }


FLOAT_TOLERANCE = 1e-6  # absolute or relative, the error Codeforces-style problems with real answers allow


def outputs_match(actual: str, expected: str) -> bool:
    """The token checker of Codeforces-style judges: the outputs' whitespace-separated tokens are equal in number
    and each pair is equal, or, where the expected token is a decimal with a fraction or an exponent (``3.3333``,
    ``1e-9``), both are finite numbers within :data:`FLOAT_TOLERANCE` absolute or relative. Line breaks and
    spacing do not count; an integer token is compared exactly; a prefix of the expected output does not match
    (unlike open-r1's zip)."""
    actual_tokens, expected_tokens = actual.split(), expected.split()
    if len(actual_tokens) != len(expected_tokens):
        return False
    return all(a == e or _reals_close(a, e) for a, e in zip(actual_tokens, expected_tokens, strict=True))


def _reals_close(actual: str, expected: str) -> bool:
    if not any(mark in expected for mark in ".eE") or len(actual) > 64 or len(expected) > 64:
        return False
    try:
        a, e = float(actual), float(expected)
    except ValueError:
        return False
    if not (math.isfinite(a) and math.isfinite(e)):
        return False
    return abs(a - e) <= FLOAT_TOLERANCE * max(1.0, abs(e))


def _memory_exhausted(result: JobResult) -> bool:
    return (
        result.oom_killed
        or result.exception == "MemoryError"
        or (
            result.status == "signal"
            and ("MemoryError" in result.stderr_tail or "Cannot allocate" in result.stderr_tail)
        )
    )


def _failure(result: JobResult, stdio: bool, timeout_s: float) -> tuple[Outcome, str] | None:
    """The verdict of a run that did not finish normally; None when it did."""
    status = result.status
    if status == "output_limit":
        return Outcome.FAILED, "output longer than the capture limit"
    if _memory_exhausted(result):
        return Outcome.MEMORY_LIMIT_EXCEEDED, "memory limit exceeded"
    if status == "timeout" or (status == "signal" and result.signal == SIGXCPU) or result.cpu_s > timeout_s:
        return Outcome.TIME_LIMIT_EXCEEDED, f"time limit exceeded ({result.cpu_s:.2f} s of CPU, limit {timeout_s} s)"
    if status == "exception" and result.exception == "SyntaxError":
        return Outcome.SYNTAX_ERROR, result.message
    if status == "exception" and result.exception == "AssertionError" and not stdio:
        return Outcome.FAILED, "assertion failed" + (f": {result.message}" if result.message else "")
    if status == "exception":
        return Outcome.RUNTIME_ERROR, f"{result.exception}: {result.message}"
    if status == "signal":
        return Outcome.RUNTIME_ERROR, f"killed by signal {result.signal}"
    if status == "vanished" and not (stdio and result.exit_code == 0):  # os._exit(0) ends a stdin/stdout program
        return Outcome.RUNTIME_ERROR, "exited without finishing the test"
    if status == "not_run":
        return Outcome.RUNTIME_ERROR, result.message or "not run: the sandbox stopped before this test"
    # sys.exit() is how a stdin/stdout program may end; in a judged test it ends the program before the test.
    if status == "exit" and (not stdio or result.exit_code not in (0, None)):
        return Outcome.RUNTIME_ERROR, f"exited with code {result.exit_code} before the test finished"
    return None


def _output_verdict(result: JobResult, expected: str) -> tuple[Outcome, str]:
    if result.stdout_truncated:
        return Outcome.FAILED, "output longer than the capture limit"
    if outputs_match(result.stdout, expected):
        return Outcome.PASSED, ""
    return Outcome.FAILED, "wrong output"


JUDGE_OUTCOMES = {
    "passed": Outcome.PASSED,
    "failed": Outcome.FAILED,
    "error": Outcome.RUNTIME_ERROR,
    "memory": Outcome.MEMORY_LIMIT_EXCEEDED,
    "ended": Outcome.RUNTIME_ERROR,
}


# The judge answers for every test it reaches, the program's crashes and hangs included ("ended"); it gives none
# only when it was stopped itself: over its CPU, memory or time on the values this program sent.
JUDGE_GAVE_NONE = "the judge gave no verdict (it exceeded its limits on this program's values)"


def _judge_verdict(verdict: dict) -> tuple[Outcome, str]:
    if verdict["outcome"] == "judge_error":
        raise TaskError(f"the task's own test code failed in the judge: {verdict['detail']}")
    return JUDGE_OUTCOMES[verdict["outcome"]], verdict["detail"]


def judge(result: JobResult, job: Job, index: int, timeout_s: float, expected_output: str | None) -> TestOutcome:
    """Turns what happened to test ``index``'s process (and its judge's verdict) into its verdict."""
    if result.status == "setup_error":
        raise SandboxError(f"the sandbox could not prepare a test: {result.message}")
    if result.verdict is not None and result.verdict["outcome"] == "judge_error":
        _judge_verdict(result.verdict)  # the task's own code failed: whatever the program did, no verdict
    judge_failed = expected_output is None and result.verdict is None and result.status != "not_run"
    verdict = (
        (Outcome.FAILED, JUDGE_GAVE_NONE) if judge_failed else _failure(result, expected_output is not None, timeout_s)
    )
    if verdict is None:
        verdict = (
            _output_verdict(result, expected_output) if expected_output is not None else _judge_verdict(result.verdict)
        )
    outcome, detail = verdict
    compared = result.verdict["compared"] if result.verdict else 0
    return TestOutcome(
        index=index,
        outcome=outcome,
        detail=detail,
        cpu_s=result.cpu_s,
        wall_s=result.wall_s,
        memory_kb=result.memory_kb,
        instructions=result.instructions,
        compared=compared,
        lines=result.lines,
    )


def _compile_failure(result: JobResult, limit_s: float) -> str:
    if result.status == "timeout" or result.cpu_s > limit_s:
        return f"compilation exceeded its limit ({limit_s} s of CPU)"
    if result.oom_killed:
        return "compilation exceeded the memory limit"
    where = f"signal {result.signal}" if result.signal is not None else f"exit code {result.exit_code}"
    return f"compilation failed ({where}): {_first_error_line(result.stderr_tail)}"


def _run_in_language(code: str, spec: TestSpec, sandbox: Sandbox, limit: float) -> list[TestOutcome]:
    """Another language's program (``languages.py``): compiled once, then one fresh process per test."""
    language = get_language(spec.language)
    missing = language.missing_tools()
    if missing:
        raise SandboxError(
            f"{language.name} tests need {', '.join(missing)} on this machine: apt-get install -y {language.package}"
        )
    if spec.kind == "program":
        harness = tests_harness(language, spec.prelude, code, spec.check_source)
    else:
        harness = program_harness(language, spec.prelude, code)
    files = harness.files
    memory = language.address_space_mb
    jobs = []
    compile_s = sandbox.config.compile_timeout_s
    # the program's compile, then (C++) the tests' in a job of their own, so the first never sees their files
    steps = [
        (command, step_files)
        for command, step_files in ((harness.compile, files), (harness.link, harness.link_files))
        if command
    ]
    for command, step_files in steps:
        compiler_memory = max(memory, COMPILER_ADDRESS_SPACE_MB)
        jobs.append(
            Job(
                "",
                timeout_s=compile_s,
                argv=command,
                files=step_files,
                compile=True,
                address_space_mb=compiler_memory,
            )
        )
    if steps:
        files = ()
    run = harness.run
    stdins = [stdin for stdin, _ in spec.stdio] if spec.kind == "stdio" else [""]
    # in-language tests share the program's process: no forked copy of it may try answers against them
    no_fork = spec.kind == "program"
    for position, stdin in enumerate(stdins):
        first = files if position == 0 else ()
        jobs.append(Job("", stdin, limit, argv=run, files=first, address_space_mb=memory, no_fork=no_fork))
    results = sandbox.run(jobs, harness.ro_binds)
    compiled, results = results[: len(steps)], results[len(steps) :]
    for step in compiled:  # a failed step leaves the next one not_compiled: the first failure is the reason
        if step.status == "setup_error":
            raise SandboxError(f"the sandbox could not prepare a test: {step.message}")
        if step.status != "ok":
            detail = _compile_failure(step, compile_s)
            return [TestOutcome(index, Outcome.COMPILATION_ERROR, detail) for index in range(len(stdins))]
    if spec.kind == "stdio":
        return [
            judge(result, jobs[-len(stdins) + index], index, limit, output)
            for index, (result, (_, output)) in enumerate(zip(results, spec.stdio))
        ]
    return [_judged_inside(results[0], limit, harness.marker)]


def _first_error_line(stderr: str) -> str:
    """The line of a failed run's stderr that says what went wrong (the first naming an error or assertion)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    named = [line for line in lines if any(word in line.lower() for word in ("error", "assert", "undefined reference"))]
    return escaped((named or lines or [""])[0], 300)


def _judged_inside(result: JobResult, limit: float, marker: str) -> TestOutcome:
    """The verdict of in-language tests: passed when the process exits 0 after the runner printed ``marker``
    (``harnesses``: the tests ran to their end)."""
    measured = {"cpu_s": result.cpu_s, "wall_s": result.wall_s, "memory_kb": result.memory_kb}
    if result.status == "setup_error":
        raise SandboxError(f"the sandbox could not prepare a test: {result.message}")
    failure = _failure(result, True, limit)
    if failure is None and marker in result.stdout.splitlines():
        return TestOutcome(0, Outcome.PASSED, "", judged_inside=True, **measured)
    if failure is None:
        detail = "the program ended (exit code 0) before its tests finished"
        return TestOutcome(0, Outcome.FAILED, detail, judged_inside=True, **measured)
    outcome, detail = failure
    if outcome is Outcome.RUNTIME_ERROR and result.status in ("exit", "signal"):  # a failed assertion ends it so
        how = f"signal {result.signal}" if result.status == "signal" else f"exit code {result.exit_code}"
        said = _first_error_line(result.stderr_tail)
        outcome, detail = Outcome.FAILED, f"the tests failed ({how}){': ' + said if said else ''}"
    return TestOutcome(0, outcome, detail, judged_inside=True, **measured)


def _run_uncached(
    code: str,
    spec: TestSpec,
    sandbox: Sandbox,
    timeout_s: float | None,
    count_lines: bool = False,
    no_fork: bool = False,
) -> list[TestOutcome]:
    limit = timeout_s if timeout_s is not None else sandbox.config.timeout_s
    if spec.language != "python":
        return _run_in_language(code, spec, sandbox, limit)
    if not parses(code):
        return [TestOutcome(index, Outcome.SYNTAX_ERROR, "the code does not parse") for index in range(len(spec))]
    jobs = [
        dataclasses.replace(job, timeout_s=limit, count_lines=count_lines, no_fork=no_fork) for job in spec.jobs(code)
    ]
    expected = [output for _, output in spec.stdio] if spec.kind == "stdio" else [None] * len(jobs)
    results = sandbox.run(jobs)
    cpu_limit = limit * LINE_COUNT_SLOWDOWN if count_lines else limit
    return [
        judge(result, job, index, cpu_limit, output)
        for index, (result, job, output) in enumerate(zip(results, jobs, expected))
    ]


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


def run_tests(
    code: str,
    spec: TestSpec,
    sandbox: Sandbox | None = None,
    timeout_s: float | None = None,
    cache: bool = True,
    count_lines: bool = False,
    no_fork: bool = False,
) -> list[TestOutcome]:
    """Runs every test of ``spec`` against ``code``; one outcome per test, in order.

    Code that does not parse gets SYNTAX_ERROR for every test without being run. ``timeout_s``
    overrides the sandbox's per-test limit; ``cache=False`` forces a fresh run (benchmarks);
    ``count_lines`` counts each test's executed lines (``TestOutcome.lines``) under a CPU limit
    ``sandbox.LINE_COUNT_SLOWDOWN`` times larger; ``no_fork`` runs a Python program where it can start threads but
    no process (``Job.no_fork``: what the ``efficiency`` reward measures). Raises :class:`SandboxError` (never a verdict) when the
    sandbox itself fails.
    """
    sandbox = sandbox or shared_sandbox()
    if not cache:
        return _run_uncached(code, spec, sandbox, timeout_s, count_lines, no_fork)
    key = (code, spec, timeout_s, sandbox.config, count_lines, no_fork)
    return _cache.get_or_run(key, lambda: _run_uncached(code, spec, sandbox, timeout_s, count_lines, no_fork))


def run_tests_many(
    items: Sequence[tuple[str, TestSpec]],
    sandbox: Sandbox | None = None,
    timeout_s: float | None = None,
    cache: bool = True,
    count_lines: bool = False,
    no_fork: bool = False,
) -> list[list[TestOutcome] | SandboxError | TaskError]:
    """:func:`run_tests` for many (code, spec) pairs, up to the sandbox's concurrency at once.

    A pair whose sandbox failed yields its :class:`SandboxError` in place of outcomes, one whose task's own code
    failed in the judge its :class:`TaskError`.
    """
    sandbox = sandbox or shared_sandbox()

    def one(item: tuple[str, TestSpec]) -> list[TestOutcome] | SandboxError | TaskError:
        try:
            return run_tests(item[0], item[1], sandbox, timeout_s, cache, count_lines, no_fork)
        except (SandboxError, TaskError) as exc:
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
