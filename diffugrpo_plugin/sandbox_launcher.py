"""The in-sandbox half of :mod:`diffugrpo_plugin.sandbox`: runs each job in a forked, limited child.

This file is executed as a script by the sandbox's own Python interpreter (it imports only the
standard library and nothing from diffugrpo, which is not visible inside the sandbox). It reads
one ``marshal``-encoded payload on stdin and writes one length-prefixed ``marshal`` frame per job
on stdout. The launcher never interprets what a job wrote: the job's own report (its status and
its probes' values, a JSON document in a file) travels as raw bytes to the harness, which parses it
strictly. A job can therefore forge nothing but its own answers.

Start-up (as the sandbox's uid 0 with four capabilities, root mode): mount ``/tmp`` and the work
dir as tmpfs with size and file-count caps (CAP_SYS_ADMIN, then dropped for good), join the slot's
cgroups through the descriptors the harness passed in, become the child subreaper (every process a
job leaves behind is reaped here, so its CPU time is counted), make itself non-dumpable.

Per job: fork; the child makes its own session, opens its files, sets rlimits, raises its OOM
score, drops to the slot's unprivileged uid, installs the seccomp filter, closes the setup pipe
(the only channel that can report a setup error) and only then runs the job's code, then each
probe expression, and writes its report. Time, memory and CPU (of every process of the job,
waited for or not) are measured here, inside the PID namespace.
"""

from __future__ import annotations

import builtins
import fcntl
import io
import marshal
import os
import resource
import select
import sys
import time

MARSHAL_VERSION = 4  # readable by every Python 3 the harness might run
REPORT_READ_CAP = (1 << 20) + 1
SETUP_READ_CAP = 4096
STDERR_TAIL_CHARS = 2000
MESSAGE_CHARS = 500
SWEEP_PATIENCE_S = 1.0

SIGKILL = 9  # Linux; the signal module would import enum, a sixth of the launcher's start-up
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
MS_NOSUID, MS_NODEV = 2, 4
CAPABILITY_VERSION_3 = 0x20080522
KEPT_CAPABILITIES = (5, 6, 7)  # CAP_KILL, CAP_SETGID, CAP_SETUID
PERF_EVENT_OPEN_SYSCALL = {"x86_64": 298, "aarch64": 241}
PERF_ATTR_SIZE = 64
PERF_FLAG_INHERIT = 1 << 1
PERF_FLAG_EXCLUDE_KERNEL = 1 << 5
PERF_FLAG_EXCLUDE_HV = 1 << 6

# Taken before any job's code runs, and applied to the builtin base of a value, never its subclass's methods.
_TYPE, _TYPE_NAME, _ISSUBCLASS, _BOOL = type, type.__dict__["__name__"].__get__, issubclass, bool
_STR_T, _INT_T, _FLOAT_T, _COMPLEX_T, _BYTES_T, _DICT_T = str, int, float, complex, bytes, dict
_STR, _INT_REPR, _FLOAT_HEX, _BYTES_HEX = str.__str__, int.__repr__, float.hex, bytes.hex
_COMPLEX_PARTS = (complex.__dict__["real"].__get__, complex.__dict__["imag"].__get__)
_ITERATE = {list: list.__iter__, tuple: tuple.__iter__, set: set.__iter__, frozenset: frozenset.__iter__}
_DICT_ITEMS = dict.items


def load_libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


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


# --------------------------------------------------------------------------- start-up (the launcher itself)


def _check(result: int, what: str, libc) -> None:
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def mount_capped_tmpfs(libc, directories: list[str], size_bytes: int, max_files: int) -> None:
    """A fresh tmpfs on each directory with a size and a file-count cap (bubblewrap can set the size only)."""
    options = f"size={size_bytes},nr_inodes={max_files},mode=1777".encode()
    for directory in directories:
        _check(libc.mount(b"tmpfs", directory.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options),
               f"mounting the capped tmpfs on {directory}", libc)


def keep_only_capabilities(libc, kept: tuple[int, ...]) -> None:
    """Drop every capability but ``kept`` from the effective, permitted, inheritable and ambient sets."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    mask = 0
    for capability in kept:
        mask |= 1 << capability
    data = (Data * 2)()
    data[0].effective = data[0].permitted = data[0].inheritable = mask & 0xFFFFFFFF
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities", libc)
    _check(libc.capset(ctypes.byref(Header(CAPABILITY_VERSION_3, 0)), data), "dropping capabilities", libc)


def install_seccomp(libc, program: bytes) -> None:
    """Load a BPF filter (from ``sandbox_limits.seccomp_program``) on this process and its descendants."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no_new_privs", libc)
    filters = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(filters, ctypes.c_char_p))
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "installing seccomp", libc)


def join_cgroups(procs_fds: list[int]) -> None:
    """Move this process (and so every job it forks) into the slot's cgroups; the descriptors close after."""
    for fd in procs_fds:
        os.write(fd, b"0")
        os.close(fd)


# --------------------------------------------------------------------------- in the job's child


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


def _child(job: dict, payload: dict, paths: dict, setup_w: int, libc) -> None:
    """Runs in the forked child: isolate, limit, drop privileges, filter, then run the job and report."""
    try:
        os.setsid()  # own process group, so a timeout can kill the job's whole group
        setup_fd = fcntl.fcntl(setup_w, fcntl.F_DUPFD, 100)  # out of the way of the descriptors set below
        os.close(setup_w)
        stdin_fd = os.open(paths["stdin"], os.O_RDONLY)
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        stdout_fd = os.open(paths["stdout"], create, 0o600)
        stderr_fd = os.open(paths["stderr"], create, 0o600)
        report_fd = os.open(paths["report"], create, 0o600)
        # 0-2 first: the files opened above all sit at 3 or higher, and are copied before 3 is reused
        for target, fd in ((0, stdin_fd), (1, stdout_fd), (2, stderr_fd), (3, report_fd), (4, setup_fd)):
            os.dup2(fd, target)
        os.closerange(5, 65536)  # the launcher's stdout, counters and cgroup files among them
        _set_limits(payload["limits"], job["cpu_s"])
        try:
            with open("/proc/self/oom_score_adj", "w") as adj:
                adj.write("1000")  # the OOM killer picks a job process, never the launcher
        except OSError:
            pass  # not root: /proc/self of a non-dumpable process belongs to root; the rlimits still hold
        if payload.get("drop_to"):
            uid, gid = payload["drop_to"]
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        os.chdir(payload["work_dir"])
        if payload.get("seccomp"):
            install_seccomp(libc, payload["seccomp"])
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace",
                                      line_buffering=True)
        sys.argv = ["solution.py"]
    except BaseException as exc:  # noqa: BLE001 - setup failure is reported, never run untrusted code then
        os.write(4, repr(exc).encode("utf-8", errors="replace")[:SETUP_READ_CAP])
        os._exit(70)
    os.close(4)  # from here on the job's code runs: no channel left to claim a setup error
    job_pid = os.getpid()
    report = _execute(job["source"], job.get("probes") or ())
    if os.getpid() != job_pid:
        os._exit(0)  # a process the job forked came back out of its code: only the job itself reports
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a full disk or closed fd is the job's own problem
            pass
    try:
        os.write(3, to_json(report).encode("ascii"))
    finally:
        os._exit(0)


def to_json(value) -> str:
    """JSON text of a report (dicts, lists, str, int, bool, None), pure ASCII. Written here because
    importing the json module (and the re and enum it pulls in) would add 12 ms to every sandbox."""
    kind = _TYPE(value)
    if value is None or kind is _BOOL:
        return {None: "null", True: "true", False: "false"}[value]
    if kind is _INT_T:
        return _INT_REPR(value)
    if kind is _STR_T:
        return '"' + "".join(map(_json_char, value)) + '"'
    if kind is list:
        return "[" + ",".join(map(to_json, value)) + "]"
    if kind is _DICT_T:
        return "{" + ",".join(to_json(key) + ":" + to_json(item) for key, item in value.items()) + "}"
    raise TypeError(f"not JSON data: {_TYPE_NAME(kind)}")


def _json_char(char: str) -> str:
    code = ord(char)
    if 0x20 <= code < 0x7F and char != '"' and char != "\\":
        return char
    if code > 0xFFFF:  # a surrogate pair, as JSON spells characters beyond the basic plane
        code -= 0x10000
        return "\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))
    return "\\u%04x" % code


def _describe(exc: BaseException) -> tuple[str, str]:
    try:
        message = str(exc)[:MESSAGE_CHARS]
    except BaseException:  # noqa: BLE001 - a hostile __str__
        message = "<unprintable>"
    return _TYPE(exc).__name__, message


class NotPlain(Exception):
    """A probe value that is not plain builtin data."""


def encode(value, depth: int = 0):
    """A probe's value as tagged JSON that ``verdicts.decode_value`` reads: the builtin value itself.

    A subclass of a builtin type is read through the builtin's own methods (an ``int`` subclass
    whose ``__eq__`` is always true travels as the int it holds); any other object travels as
    ``opaque``, its type name and truth value only, equal to nothing on the other side.
    """
    kind = _TYPE(value)
    if depth > 64:
        raise NotPlain("nested too deeply")
    if value is None or kind is _BOOL:
        return value
    if _ISSUBCLASS(kind, _STR_T):
        return _STR(value)
    if _ISSUBCLASS(kind, _INT_T):
        return ["int", _INT_REPR(value)]
    if _ISSUBCLASS(kind, _FLOAT_T):
        return ["float", _FLOAT_HEX(value)]
    if _ISSUBCLASS(kind, _COMPLEX_T):
        return ["complex", [_FLOAT_HEX(part(value)) for part in _COMPLEX_PARTS]]
    if _ISSUBCLASS(kind, _BYTES_T):
        return ["bytes", _BYTES_HEX(value)]
    for base, iterate in _ITERATE.items():
        if _ISSUBCLASS(kind, base):
            return [_TYPE_NAME(base), [encode(item, depth + 1) for item in iterate(value)]]
    if _ISSUBCLASS(kind, _DICT_T):
        return ["dict", [[encode(key, depth + 1), encode(item, depth + 1)] for key, item in _DICT_ITEMS(value)]]
    return ["opaque", [_TYPE_NAME(kind)[:100], _BOOL(value)]]


def _probe(expression: str, namespace: dict) -> dict:
    try:
        value = eval(compile(expression, "<probe>", "eval"), namespace)  # noqa: S307 - this is the sandboxed job
    except BaseException as exc:  # noqa: BLE001 - the job's failure, reported with its probe
        name, message = _describe(exc)
        return {"raised": f"{name}: {message}"}
    try:
        return {"value": encode(value)}
    except NotPlain as exc:
        return {"unserializable": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - a value whose own methods fail (a hostile subclass)
        return {"unserializable": _describe(exc)[0]}


def _execute(source: str, probes) -> dict:
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)  # noqa: S102 - this is the sandboxed job
    except SyntaxError as exc:
        return {"status": "exception", "exception": "SyntaxError", "message": str(exc)[:MESSAGE_CHARS]}
    except SystemExit as exc:
        code = exc.code
        return {"status": "exit", "exit_code": code if _TYPE(code) is int else (None if code is None else 1)}
    except BaseException as exc:  # noqa: BLE001 - every failure of the job is reported
        name, message = _describe(exc)
        return {"status": "exception", "exception": name, "message": message}
    return {"status": "ok", "probes": [_probe(expression, namespace) for expression in probes]}


# --------------------------------------------------------------------------- the launcher's side of a job


def _wait_with_deadline(pid: int, timeout_s: float) -> bool:
    """True when the child exited by itself before the deadline."""
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(max(0.0, timeout_s) * 1000))
    finally:
        os.close(pidfd)


def _sweep_and_reap(namespaced: bool, group: int) -> None:
    """Kill every process the job left (everything in our PID namespace but its init and us, or in the
    unsafe fallback the job's process group), then reap them all: as the child subreaper we inherit
    the orphans, and reaping adds their CPU time to ours-for-children."""
    me = os.getpid()
    deadline = time.monotonic() + SWEEP_PATIENCE_S
    while time.monotonic() < deadline:
        if namespaced:
            for pid in [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) not in (1, me)]:
                _kill_quietly(os.kill, pid)
        else:
            _kill_quietly(os.killpg, group)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return  # nothing left to reap: every process of the job is gone
        time.sleep(0.002)


def _kill_quietly(kill, target: int) -> None:
    try:
        kill(target, SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_capped(path: str, limit: int, tail: bool = False) -> tuple[bytes, bool]:
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            if tail and size > limit:
                handle.seek(size - limit)
            data = handle.read(limit)
        os.unlink(path)
    except OSError:
        return b"", False
    return data, size > limit


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _oom_kills(fd: int | None) -> int:
    """The ``oom_kill`` count of the slot's memory cgroup (0 without one)."""
    if fd is None:
        return 0
    for line in os.pread(fd, 4096, 0).decode(errors="replace").splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


def run_job(index: int, job: dict, payload: dict, state: dict) -> dict:
    """Runs one job in a forked child under its limits; returns what happened, the report unparsed."""
    names = ("stdin", "stdout", "stderr", "report")
    paths = {name: os.path.join(payload["scratch_dir"], f"job{index}.{name}") for name in names}
    with open(paths["stdin"], "w", encoding="utf-8") as handle:
        handle.write(job.get("stdin") or "")
    setup_r, setup_w = os.pipe()
    sys.stdout.flush()
    instructions_before = _read_counter(state["counter_fd"])
    cpu_before, ooms_before = _children_cpu_s(), _oom_kills(state["oom_fd"])
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(setup_r)
        _child(job, payload, paths, setup_w, state["libc"])
    os.close(setup_w)
    finished = _wait_with_deadline(pid, job["wall_s"])
    if not finished:
        _kill_quietly(os.killpg, pid)
        _kill_quietly(os.kill, pid)  # in case it had not yet made its own process group
    _, wait_status, usage = os.wait4(pid, 0)
    wall_s = time.monotonic() - started
    _sweep_and_reap(payload["namespaced"], pid)
    setup_error = os.read(setup_r, SETUP_READ_CAP)
    os.close(setup_r)
    instructions_after = _read_counter(state["counter_fd"])
    report, _ = _read_capped(paths["report"], REPORT_READ_CAP)
    stdout, stdout_truncated = _read_capped(paths["stdout"], payload["max_output_bytes"])
    stderr_tail, _ = _read_capped(paths["stderr"], STDERR_TAIL_CHARS, tail=True)
    os.unlink(paths["stdin"])
    baseline = state["baseline"]
    return {
        "index": index,
        "finished": finished,
        "signal": os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None,
        "exit_status": os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else None,
        "setup_error": setup_error.decode("utf-8", errors="replace") if setup_error else None,
        "report": report,
        "oom_killed": _oom_kills(state["oom_fd"]) > ooms_before,
        "stdout": stdout.decode("utf-8", errors="replace"),
        "stdout_truncated": stdout_truncated,
        "stderr_tail": stderr_tail.decode("utf-8", errors="replace"),
        "cpu_s": max(0.0, _children_cpu_s() - cpu_before - baseline.get("cpu_s", 0.0)),
        "wall_s": wall_s,
        "peak_rss_kb": usage.ru_maxrss,
        "baseline_rss_kb": baseline.get("peak_rss_kb", 0),
        "instructions": (None if instructions_before is None or instructions_after is None else
                         max(0, instructions_after - instructions_before - baseline.get("instructions", 0))),
    }


def start(payload: dict) -> dict:
    """Everything the launcher does once, before any job: see the module docstring."""
    libc = load_libc()
    capped = payload.get("capped_tmpfs")
    if capped:
        mount_capped_tmpfs(libc, capped["directories"], capped["size_bytes"], capped["max_files"])
    if payload.get("keep_capabilities"):
        keep_only_capabilities(libc, KEPT_CAPABILITIES if payload["drop_to"] else ())
    join_cgroups(payload.get("cgroup_procs_fds") or [])
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if payload["drop_to"] is None:  # jobs share our uid: keep them out of our memory and fds
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    counter_fd = open_instruction_counter(libc) if payload.get("count_instructions") else None
    return {"libc": libc, "counter_fd": counter_fd, "oom_fd": payload.get("oom_events_fd"), "baseline": {}}


def main() -> int:
    payload = marshal.loads(sys.stdin.buffer.read())
    sys.path.extend(payload.get("sys_path", []))
    state = start(payload)
    # An empty job measures what the forked interpreter itself costs; reports subtract it.
    calibration = run_job(-1, {"source": "", "wall_s": 10.0, "cpu_s": 11}, payload, state)
    state["baseline"] = {"peak_rss_kb": calibration["peak_rss_kb"], "cpu_s": calibration["cpu_s"],
                         "instructions": calibration["instructions"] or 0}
    for index, job in enumerate(payload["jobs"]):
        frame = marshal.dumps(run_job(index, job, payload, state), MARSHAL_VERSION)
        sys.stdout.buffer.write(len(frame).to_bytes(8, "little") + frame)
        sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
