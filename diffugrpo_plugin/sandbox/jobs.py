"""What a sandbox job is and what comes back: the job, its result, and the strict parsing of the untrusted
reports the launcher and the judge write (the job's code may have written anything there)."""

from __future__ import annotations

import json
import marshal
import re
from dataclasses import dataclass
from typing import Any, Mapping

from diffugrpo_plugin.sandbox import sandbox_wire as wire

MESSAGE_CHARS = 500
REPORT_MAX_BYTES = 1 << 20
REPORT_KEYS = {"status", "exception", "message", "exit_code", "lines"}
REPORT_STATUSES = ("ok", "exception", "exit")
EXCEPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


@dataclass(frozen=True)
class Judged:
    """What the judge needs for one test (see ``sandbox_judge``): the test's own code (``kind`` ``assert``: one
    assert statement; ``check``: a module defining ``check(candidate)``, called with ``entry``), and the row's
    context: the preamble (run on both sides), the task's helpers (its reference code, run on the judge's side
    for the names a check uses) and ``program_names``, the names that mean the program's objects."""

    kind: str
    code: str
    preamble: str = ""
    helpers: str = ""
    program_names: frozenset[str] = frozenset()
    has_reference: bool = True  # whether the task's code says which names are its own
    imports: tuple[tuple[str, str, str], ...] = ()  # (name, module, attribute) the task's code imports
    shared_classes: tuple[str, ...] = ()  # classes the helpers define: the program's of that name travel as data
    entry: str = ""
    free_names: tuple[str, ...] = ()  # the names the test's code reads and never binds
    called_only: tuple[str, ...] = ()  # those of them it only ever calls
    task_methods: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the reference's classes' public attributes

    def row(self) -> dict[str, Any]:
        return {
            "preamble": self.preamble,
            "helpers": self.helpers,
            "program_names": sorted(self.program_names),
            "has_reference": self.has_reference,
            "imports": [list(entry) for entry in self.imports],
            "shared_classes": list(self.shared_classes),
            "entry": self.entry,
            "task_methods": [[name, list(names)] for name, names in self.task_methods],
        }


@dataclass(frozen=True)
class Job:
    """One program to run: Python source after the task's ``preamble``, its stdin, an optional CPU limit in
    seconds, and, for a judged test, what the judge runs against it (the program then answers the judge).

    Another language's job (see ``languages.py``) runs ``argv`` instead of Python source, after writing
    ``files`` (name, content) to the work dir; a ``compile`` job that fails leaves the jobs after it not run
    (``status`` ``not_compiled``). ``address_space_mb`` raises the address-space limit for a runtime that
    reserves more up front (the JVM). ``no_fork``: the job may start threads but no process."""

    source: str
    stdin: str = ""
    timeout_s: float | None = None
    judged: Judged | None = None
    preamble: str = ""
    count_lines: bool = False  # count the program's executed lines, under LINE_COUNT_SLOWDOWN x the CPU limit
    argv: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    compile: bool = False
    address_space_mb: int = 0
    no_fork: bool = False  # threads only: the seccomp filter refuses fork (limits.seccomp_program)


@dataclass(frozen=True)
class JobResult:
    """What happened to one job, measured inside the sandbox.

    ``status``: ``ok`` (ran to the end), ``exception`` (``exception`` names it; ``SyntaxError``
    included), ``exit`` (``SystemExit`` with ``exit_code``), ``signal`` (killed by ``signal``),
    ``timeout`` (the wall-clock backstop), ``output_limit`` (a job judged on its output wrote more than
    ``max_output_bytes``: stopped there), ``vanished`` (exited without a well-formed report, e.g.
    ``os._exit``), ``setup_error`` (the launcher could not prepare the job), ``not_run`` (the
    sandbox ended before reaching it, or its judge had already failed), ``not_compiled`` (the program's
    compile job before it failed). A job that ran ``argv`` ends ``ok`` (exit status 0) or ``exit``. ``verdict``: the judge's
    verdict for a judged test (``outcome`` in ``sandbox_wire.VERDICT_OUTCOMES``, ``detail``, ``compared``: how
    many comparisons the program's own code decided, ``untrusted``: how many of its objects were
    compared with a builtin value, ``sizes``: the largest value it sent, against the wire's limits);
    None when the judge gave none. Every text field came from the job or from values it sent: shown
    escaped, never interpreted.
    """

    status: str
    exception: str | None = None
    message: str = ""
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stdout_truncated: bool = False
    stderr_tail: str = ""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    peak_rss_kb: int = 0
    baseline_rss_kb: int = 0
    instructions: int | None = None
    lines: int | None = None  # executed source lines, for a job that counted them (the job's own claim)
    oom_killed: bool = False  # the job's cgroup hit its memory limit
    verdict: dict | None = None

    @property
    def memory_kb(self) -> int:
        """Peak resident memory the job added on top of the forked interpreter it started from."""
        return max(0, self.peak_rss_kb - self.baseline_rss_kb)


def launcher_frames(stdout: bytes, count: int) -> tuple[list[dict | None], dict | None]:
    """The launcher's length-prefixed marshal frames, one per job (a frame cut short by a kill is dropped), and
    its calibration (what a forked interpreter costs), when it measured one.

    The launcher is trusted (no job or judge holds its stdout); what the job wrote travels inside a
    frame as raw bytes and is parsed by :func:`job_result`.
    """
    frames: list[dict | None] = [None] * count
    calibration = None
    offset = 0
    while offset + 8 <= len(stdout):
        size = int.from_bytes(stdout[offset : offset + 8], "little")
        frame = stdout[offset + 8 : offset + 8 + size]
        offset += 8 + size
        if len(frame) < size:
            break
        try:
            report = marshal.loads(frame)
        except (ValueError, EOFError, TypeError):
            break
        index = report.get("index") if isinstance(report, dict) else None
        if type(index) is int and 0 <= index < count:
            frames[index] = report
        elif index == -1:
            calibration = report.get("baseline")
    return frames, calibration


def escaped(text: str, limit: int = MESSAGE_CHARS) -> str:
    """Job-written text made safe to show: capped, control and unprintable characters escaped."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text[:limit])


def job_report(raw: bytes) -> dict | None:
    """The job's own report (``{"status", "exception", "message", "exit_code"}``, and ``lines`` where it counted
    them), parsed strictly: None for anything but a size-capped JSON object of exactly that shape."""
    report = _small_json_object(raw)
    if report is None or not set(report) <= REPORT_KEYS or report.get("status") not in REPORT_STATUSES:
        return None
    exception, message, exit_code = report.get("exception"), report.get("message", ""), report.get("exit_code")
    lines = report.get("lines")
    if (
        (lines is not None and not (type(lines) is int and 0 <= lines < (1 << 63)))
        or (exception is not None and not (isinstance(exception, str) and EXCEPTION_NAME.fullmatch(exception)))
        or not isinstance(message, str)
        or (exit_code is not None and (type(exit_code) is not int or not -(1 << 31) <= exit_code < (1 << 31)))
    ):
        return None
    return {
        "status": report["status"],
        "exception": exception,
        "message": escaped(message),
        "exit_code": exit_code,
        "lines": lines,
    }


def judge_verdict(raw: bytes | None) -> dict | None:
    """The judge's verdict line, parsed strictly (it carries text the program's values produced)."""
    verdict = _small_json_object(raw)
    if (
        verdict is None
        or set(verdict) != set(wire.VERDICT_KEYS)
        or verdict["outcome"] not in wire.VERDICT_OUTCOMES
        or not isinstance(verdict["detail"], str)
        or not all(type(verdict[key]) is int and verdict[key] >= 0 for key in ("compared", "untrusted"))
        or not isinstance(verdict["sizes"], dict)
        or set(verdict["sizes"]) != set(wire.SIZE_KEYS)
        or not all(type(size) is int and size >= 0 for size in verdict["sizes"].values())
    ):
        return None
    return {**verdict, "detail": escaped(verdict["detail"])}


def _small_json_object(raw: bytes | None) -> dict | None:
    if not raw or len(raw) > REPORT_MAX_BYTES:
        return None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def job_result(frame: Mapping[str, Any]) -> JobResult:
    """What happened to one job, from the launcher's frame: the launcher's own observations (how the
    process ended, the setup channel) decide the status; the job's report only says what it ran into."""
    if frame.get("judge_gone"):
        return JobResult(
            status="not_run",
            message="not judged: the judge of this completion had already stopped (over its limits on an earlier test)",
        )
    if frame.get("not_compiled"):
        return JobResult(status="not_compiled", message="not run: the program did not compile")
    measured = {
        "stdout": frame["stdout"],
        "stdout_truncated": frame["stdout_truncated"],
        "stderr_tail": frame["stderr_tail"],
        "cpu_s": frame["cpu_s"],
        "wall_s": frame["wall_s"],
        "peak_rss_kb": frame["peak_rss_kb"],
        "baseline_rss_kb": frame["baseline_rss_kb"],
        "instructions": frame["instructions"],
        "oom_killed": frame["oom_killed"],
        "verdict": judge_verdict(frame["judge"]),
    }
    if frame["setup_error"] is not None:
        return JobResult(status="setup_error", message=escaped(frame["setup_error"]), **measured)
    if frame["output_overflow"]:
        return JobResult(status="output_limit", **measured)
    if not frame["finished"]:
        return JobResult(status="timeout", **measured)
    if frame["signal"] is not None:
        return JobResult(status="signal", signal=frame["signal"], **measured)
    if frame.get("executed"):  # another language's process: how it exited is all it says
        code = frame["exit_status"]
        return JobResult(status="ok" if code == 0 else "exit", exit_code=code, **measured)
    report = job_report(frame["report"]) if frame["exit_status"] == 0 else None
    if report is None:
        return JobResult(status="vanished", exit_code=frame["exit_status"], **measured)
    return JobResult(**report, **measured)
