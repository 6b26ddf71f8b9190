"""The in-sandbox half of :mod:`diffugrpo_plugin.sandbox`: runs each job in a forked, limited child.

This file is executed as a script by the sandbox's own Python interpreter (it imports only the
standard library and nothing from diffugrpo, which is not visible inside the sandbox). It reads
one ``marshal``-encoded payload on stdin and writes one length-prefixed ``marshal`` report per
job on stdout (``marshal`` is built in: importing ``json`` would cost a third of the start-up).
A job reports back to the launcher with one tab-separated text line, which the launcher parses
without ``marshal`` because the job is untrusted.

Why a launcher rather than ``preexec_fn``: limits must be set between ``fork`` and running the
untrusted code, and ``preexec_fn`` is not thread-safe in the harness. Why fork per job rather
than a fresh interpreter per job: a fork of a warm interpreter costs about a millisecond, a new
interpreter tens of milliseconds, and every job still gets its own process, limits and deadline.

Privilege layout (root mode): the launcher stays uid 0 inside the sandbox but holds only
CAP_SETUID, CAP_SETGID and CAP_KILL; each job's child sets its limits, then drops to the
unprivileged uid it is given before any untrusted code runs. The job therefore cannot signal,
trace or read the launcher, and cannot write to the report pipe (which it closes). Time, memory
and instructions are measured here, inside the PID namespace, because the harness's own
``wait4`` no longer describes the job once a namespace sits between them.
"""

from __future__ import annotations

import builtins
import io
import marshal
import os
import resource
import select
import sys
import time

STATUS_READ_CAP = 65536
MARSHAL_VERSION = 4  # readable by every Python 3 the harness might run
JOB_STATUSES = ("ok", "exception", "exit", "setup_error")
STDERR_TAIL_CHARS = 2000
MESSAGE_CHARS = 500
SWEEP_PATIENCE_S = 1.0

SIGKILL = 9  # Linux; the signal module would import enum, a sixth of the launcher's start-up
PR_SET_DUMPABLE = 4
PERF_EVENT_OPEN_SYSCALL = {"x86_64": 298, "aarch64": 241}
PERF_ATTR_SIZE = 64
PERF_FLAG_INHERIT = 1 << 1
PERF_FLAG_EXCLUDE_KERNEL = 1 << 5
PERF_FLAG_EXCLUDE_HV = 1 << 6


def load_libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _make_undumpable(libc) -> None:
    # Blocks ptrace and /proc/<launcher>/fd|mem access by same-uid processes (non-root mode).
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def open_instruction_counter(libc) -> int | None:
    """A user-space instruction counter on this process, inherited by every job it forks.

    A job's counts are added to this counter when the job exits, so the job never holds the
    descriptor and cannot tamper with it. Returns None where the kernel or the CPU does not
    offer the counter (virtual machines often do not).
    """
    import ctypes

    number = PERF_EVENT_OPEN_SYSCALL.get(os.uname().machine)
    if number is None:
        return None
    attr = bytearray(PERF_ATTR_SIZE)
    # type=PERF_TYPE_HARDWARE(0), size, config=PERF_COUNT_HW_INSTRUCTIONS(1), then flags at offset 40.
    attr[0:4] = (0).to_bytes(4, "little")
    attr[4:8] = PERF_ATTR_SIZE.to_bytes(4, "little")
    attr[8:16] = (1).to_bytes(8, "little")
    flags = PERF_FLAG_INHERIT | PERF_FLAG_EXCLUDE_KERNEL | PERF_FLAG_EXCLUDE_HV
    attr[40:48] = flags.to_bytes(8, "little")
    buffer = (ctypes.c_char * PERF_ATTR_SIZE).from_buffer(attr)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(ctypes.c_long(number), buffer, ctypes.c_int(0), ctypes.c_int(-1),
                      ctypes.c_int(-1), ctypes.c_ulong(0))
    return fd if fd >= 0 else None


def _read_counter(fd: int | None) -> int | None:
    if fd is None:
        return None
    try:
        return int.from_bytes(os.read(fd, 8), "little")
    except OSError:
        return None


def _set_limits(limits: dict, cpu_s: int) -> None:
    """Soft and hard limits alike, so the job cannot raise them back."""
    pairs = {
        resource.RLIMIT_AS: limits["address_space_bytes"],
        resource.RLIMIT_CPU: cpu_s,
        resource.RLIMIT_NPROC: limits["processes"],
        resource.RLIMIT_FSIZE: limits["file_size_bytes"],
        resource.RLIMIT_NOFILE: limits["open_files"],
        resource.RLIMIT_CORE: 0,
    }
    for which, value in pairs.items():
        if value is None:
            continue
        hard = value + 1 if which == resource.RLIMIT_CPU else value
        resource.setrlimit(which, (value, hard))


def _child(job: dict, payload: dict, paths: dict, status_w: int) -> None:
    """Runs in the forked child: isolate, limit, drop privileges, run the source, report, exit."""
    try:
        os.setsid()  # own process group, so a timeout can kill the job's whole group
        stdin_fd = os.open(paths["stdin"], os.O_RDONLY)
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        stdout_fd = os.open(paths["stdout"], create, 0o600)
        stderr_fd = os.open(paths["stderr"], create, 0o600)
        for target, fd in ((0, stdin_fd), (1, stdout_fd), (2, stderr_fd)):
            os.dup2(fd, target)
        os.closerange(3, status_w)
        os.closerange(status_w + 1, 65536)
        _set_limits(payload["limits"], job["cpu_s"])
        if payload.get("drop_to"):
            uid, gid = payload["drop_to"]
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        os.chdir(payload["work_dir"])
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace",
                                      line_buffering=True)
        sys.argv = ["solution.py"]
    except BaseException as exc:  # noqa: BLE001 - setup failure is reported, never run untrusted code then
        os.write(status_w, _status_line({"status": "setup_error", "message": repr(exc)}))
        os._exit(70)
    report = _execute(job["source"])
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a full disk or closed fd is the job's own problem
            pass
    try:
        os.write(status_w, _status_line(report))
    finally:
        os._exit(0)


def _status_line(report: dict) -> bytes:
    """pid, status, exception, exit code, message: tab-separated, one line. Tagged with the pid
    because processes the job forked inherit the pipe and may write lines of their own."""
    exit_code = report.get("exit_code")
    message = " ".join(str(report.get("message", ""))[:MESSAGE_CHARS].split())
    fields = (str(os.getpid()), report["status"], report.get("exception") or "",
              "" if exit_code is None else str(exit_code), message)
    return ("\t".join(fields) + "\n").encode("utf-8", errors="replace")


def _execute(source: str) -> dict:
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)  # noqa: S102 - this is the sandboxed job
    except SyntaxError as exc:
        return {"status": "exception", "exception": "SyntaxError", "message": str(exc)[:MESSAGE_CHARS]}
    except SystemExit as exc:
        code = exc.code
        return {"status": "exit", "exit_code": code if isinstance(code, int) or code is None else 1}
    except BaseException as exc:  # noqa: BLE001 - every failure of the job is reported
        try:
            message = str(exc)[:MESSAGE_CHARS]
        except BaseException:  # noqa: BLE001 - a hostile __str__
            message = "<unprintable>"
        return {"status": "exception", "exception": type(exc).__name__, "message": message}
    return {"status": "ok"}


def _wait_with_deadline(pid: int, timeout_s: float) -> bool:
    """True when the child exited by itself before the deadline."""
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(max(0.0, timeout_s) * 1000))
    finally:
        os.close(pidfd)


def _sweep_namespace() -> None:
    """Kill every process in this PID namespace except its init (pid 1) and the launcher."""
    me = os.getpid()
    deadline = time.monotonic() + SWEEP_PATIENCE_S
    while True:
        others = [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) not in (1, me)]
        if not others or time.monotonic() > deadline:
            return
        for pid in others:
            try:
                os.kill(pid, SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.002)


def _read_capped(path: str, limit: int, tail: bool = False) -> tuple[str, bool]:
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            if tail and size > limit:
                handle.seek(size - limit)
            data = handle.read(limit)
        os.unlink(path)
    except OSError:
        return "", False
    return data.decode("utf-8", errors="replace"), size > limit


def _drain(fd: int) -> bytes:
    """What is already in the pipe, up to the cap, without waiting for writers still alive."""
    os.set_blocking(fd, False)
    chunks, total = [], 0
    try:
        while total < STATUS_READ_CAP:
            chunk = os.read(fd, STATUS_READ_CAP - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except BlockingIOError:
        pass
    return b"".join(chunks)


def _parse_status_line(line: str) -> dict | None:
    fields = line.split("\t", 4)
    if len(fields) != 5 or fields[1] not in JOB_STATUSES:
        return None
    _, status, exception, exit_code, message = fields
    parsed = {"status": status, "message": message}
    if exception:
        parsed["exception"] = exception
    if exit_code.lstrip("-").isdigit():
        parsed["exit_code"] = int(exit_code)
    return parsed


def _read_status(status_r: int, pid: int) -> dict | None:
    """The status line the job's own process wrote (not one written by a process it forked)."""
    for line in _drain(status_r).decode("utf-8", errors="replace").splitlines():
        if line.split("\t", 1)[0] == str(pid):
            parsed = _parse_status_line(line)
            if parsed is not None:
                return parsed
    return None


def _kill_quietly(kill, target: int) -> None:
    try:
        kill(target, SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _clean_up_after(pid: int, namespaced: bool) -> None:
    """Remove whatever the job left running: everything in our own PID namespace, or (unsafe
    fallback, where that would be the whole host) the job's process group."""
    if namespaced:
        _sweep_namespace()
    else:
        _kill_quietly(os.killpg, pid)


def _final_status(finished: bool, wait_status: int, reported: dict | None) -> dict:
    if not finished:
        return {"status": "timeout"}
    if os.WIFSIGNALED(wait_status):
        return {"status": "signal", "signal": os.WTERMSIG(wait_status)}
    if reported is None:
        # Exited without reporting: os._exit, or the job wrote garbage into its own status pipe.
        return {"status": "vanished", "exit_code": os.WEXITSTATUS(wait_status)}
    return reported


def _instructions(before: int | None, after: int | None, baseline: dict) -> int | None:
    if before is None or after is None:
        return None
    return max(0, after - before - baseline.get("instructions", 0))


def run_job(index: int, job: dict, payload: dict, counter_fd: int | None, baseline: dict) -> dict:
    """Runs one job in a forked child under its limits; returns its report (see JobResult)."""
    paths = {name: os.path.join(payload["scratch_dir"], f"job{index}.{name}") for name in ("stdin", "stdout", "stderr")}
    with open(paths["stdin"], "w", encoding="utf-8") as handle:
        handle.write(job.get("stdin") or "")
    status_r, status_w = os.pipe()
    sys.stdout.flush()
    instructions_before = _read_counter(counter_fd)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(status_r)
        _child(job, payload, paths, status_w)
    os.close(status_w)
    finished = _wait_with_deadline(pid, job["timeout_s"])
    if not finished:
        _kill_quietly(os.killpg, pid)
        _kill_quietly(os.kill, pid)  # in case it had not yet made its own process group
    _, wait_status, usage = os.wait4(pid, 0)
    wall_s = time.monotonic() - started
    reported = _read_status(status_r, pid)
    os.close(status_r)
    _clean_up_after(pid, payload["namespaced"])
    instructions = _instructions(instructions_before, _read_counter(counter_fd), baseline)
    stdout, stdout_truncated = _read_capped(paths["stdout"], payload["max_output_bytes"])
    stderr_tail, _ = _read_capped(paths["stderr"], STDERR_TAIL_CHARS, tail=True)
    os.unlink(paths["stdin"])
    return {
        "index": index,
        **_final_status(finished, wait_status, reported),
        "stdout": stdout,
        "stdout_truncated": stdout_truncated,
        "stderr_tail": stderr_tail,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "wall_s": wall_s,
        "peak_rss_kb": usage.ru_maxrss,
        "baseline_rss_kb": baseline.get("peak_rss_kb", 0),
        "instructions": instructions,
    }


def main() -> int:
    payload = marshal.loads(sys.stdin.buffer.read())
    sys.path.extend(payload.get("sys_path", []))
    counter_fd = None
    if payload["drop_to"] is None or payload.get("count_instructions"):  # ctypes costs start-up time
        libc = load_libc()
        if payload["drop_to"] is None:  # jobs share our uid: keep them out of our memory and fds
            _make_undumpable(libc)
        if payload.get("count_instructions"):
            counter_fd = open_instruction_counter(libc)
    # An empty job measures what the forked interpreter itself costs; reports subtract it.
    calibration = run_job(-1, {"source": "", "timeout_s": 10.0, "cpu_s": 11}, payload, counter_fd, {})
    baseline = {"peak_rss_kb": calibration["peak_rss_kb"], "instructions": calibration["instructions"] or 0}
    for index, job in enumerate(payload["jobs"]):
        result = run_job(index, job, payload, counter_fd, baseline)
        frame = marshal.dumps(result, MARSHAL_VERSION)
        sys.stdout.buffer.write(len(frame).to_bytes(8, "little") + frame)
        sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
