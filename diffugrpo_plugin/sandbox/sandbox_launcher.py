"""The in-sandbox half of :mod:`diffugrpo_plugin.sandbox.host`: runs each job in a forked, limited child.

This file is executed as a script by the sandbox's own Python interpreter (it imports only the
standard library and the three ``sandbox_*`` files bound beside it; diffugrpo itself is not visible
inside the sandbox). It reads one ``marshal``-encoded payload on stdin (the program's side of the
row: its source, the task's preamble, each test's stdin and limits) and writes one length-prefixed
``marshal`` frame per job on stdout. The launcher never interprets what a job wrote: the job's own
report (a JSON document in a file) and the judge's verdict travel as raw bytes to the harness,
which parses them strictly.

The judge (:mod:`sandbox_judge`) is forked once per row before any job, reads the tests and
expected values from a descriptor the harness passed in and this launcher closes at once, and runs
as its own uid; each judged job gets its own pair of pipes to it. No job process ever holds another test's
calls or any expected value.

Start-up (as the sandbox's uid 0 with four capabilities, root mode): mount ``/tmp``, ``/dev/shm``, the work
dir and the scratch dir as tmpfs with size and file-count caps, ``/proc`` with the sandbox's own processes only,
and unmount ``/dev/pts`` (CAP_SYS_ADMIN, then dropped for good), join the slot's
cgroups through the descriptors the harness passed in, become the child subreaper (every process a
job leaves behind is reaped here, so its CPU time is counted), make itself non-dumpable.

Per job: fork; the child makes its own session, opens its files, sets rlimits, raises its OOM
score, drops to the slot's unprivileged uid, closes ``/proc``'s files to itself (Landlock), installs the seccomp filter, closes the setup pipe
(the only channel that can report a setup error) and only then runs the task's preamble and the
job's code, then (a judged test) answers the judge's requests until it says goodbye, and writes its
report. stdout and stderr are pipes read here (the first ``max_output_bytes`` and the last
``STDERR_TAIL_CHARS`` kept), so a program's debug output never hits a file-size limit. Time, memory and CPU (of every process of the job,
waited for or not) are measured here, inside the PID namespace.
"""

from __future__ import annotations

import builtins
import fcntl
import marshal
import os
import resource
import select
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # sandbox_wire, sandbox_program, sandbox_judge

MARSHAL_VERSION = 4  # readable by every Python 3 the harness might run
REPORT_READ_CAP = (1 << 20) + 1
SETUP_READ_CAP = 4096
STDERR_TAIL_CHARS = 2000
MESSAGE_CHARS = 500
SWEEP_PATIENCE_S = 1.0
EXEC_FAILED = 127  # a program that could not be started, as shells report it

SIGKILL = 9  # Linux; the signal module would import enum, a sixth of the launcher's start-up
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MNT_DETACH = 2
CAPABILITY_VERSION_3 = 0x20080522
KEPT_CAPABILITIES = (5, 6, 7)  # CAP_KILL, CAP_SETGID, CAP_SETUID
PERF_EVENT_OPEN_SYSCALL = {"x86_64": 298, "aarch64": 241}
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446  # one number on every arch
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_FILE_ACCESS = 2 | 4  # LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE
PERF_ATTR_SIZE = 64
PERF_FLAG_INHERIT = 1 << 1
PERF_FLAG_EXCLUDE_KERNEL = 1 << 5
PERF_FLAG_EXCLUDE_HV = 1 << 6

# Standard-library code (files, and packages by their directory) whose lines wait on other threads or processes
WAITING_LIBRARY = (
    "threading.py",
    "queue.py",
    "selectors.py",
    "subprocess.py",
    "multiprocessing" + os.sep,
    "concurrent" + os.sep,
    "asyncio" + os.sep,
)


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
    fd = libc.syscall(
        ctypes.c_long(number), buffer, ctypes.c_int(0), ctypes.c_int(-1), ctypes.c_int(-1), ctypes.c_ulong(0)
    )
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


def mount_capped_tmpfs(libc, directories: list, size_bytes: int, max_files: int) -> None:
    """A fresh tmpfs on each (directory, mode) with a size and a file-count cap (bubblewrap can set the size only)."""
    for directory, mode in directories:
        options = f"size={size_bytes},nr_inodes={max_files},mode={mode:o}".encode()
        _check(
            libc.mount(b"tmpfs", directory.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options),
            f"mounting the capped tmpfs on {directory}",
            libc,
        )


def hide_the_machine(libc) -> None:
    """What the kernel counts for the whole machine stays out of the sandbox, so no job reads what another one
    sets there: ``/proc`` is mounted again with ``subset=pid`` (the sandbox's own processes, ``self``; no
    ``loadavg``, ``meminfo``, ``stat`` or ``/proc/sys``), and the pseudo-terminal filesystem is unmounted (no
    ``/dev/ptmx``: the count of terminals is the machine's)."""
    _check(
        libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"subset=pid"),
        "mounting /proc with subset=pid",
        libc,
    )
    _check(libc.umount2(b"/dev/pts", MNT_DETACH), "unmounting /dev/pts", libc)


def close_proc_files(libc) -> None:
    """This process and its descendants open no file under ``/proc`` (Landlock): not their own memory
    (``/proc/self/mem``, where an in-language test's marker and expected values live), nor, without root (no
    ``subset=pid`` mount), the machine-wide counters another row could set. Every other top-level directory
    keeps its permissions; ``/dev/stdin`` and ``/dev/fd/N`` still open, since they resolve to the file itself."""
    import ctypes

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(LANDLOCK_FILE_ACCESS)
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    _check(min(ruleset, 0), "creating the Landlock ruleset", libc)
    try:
        for name in os.listdir("/"):
            if name == "proc":
                continue
            try:
                top = os.open("/" + name, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a dangling link at the root opens nothing anyway
            try:
                rule = PathBeneath(LANDLOCK_FILE_ACCESS, top)
                _check(
                    libc.syscall(LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0),
                    f"allowing /{name} in the Landlock ruleset",
                    libc,
                )
            finally:
                os.close(top)
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no_new_privs", libc)
        _check(libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0), "restricting files with Landlock", libc)
    finally:
        os.close(ruleset)


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
    """Load a BPF filter (from ``limits.seccomp_program``, on the host) on this process and its descendants."""
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


def _place_descriptors(targets: list[tuple[int, int]]) -> None:
    """Puts each descriptor at its fixed number (0, 1, 2, ...) and closes every other one."""
    high = [(target, fcntl.fcntl(fd, fcntl.F_DUPFD, 100)) for target, fd in targets]  # out of the targets' way
    for target, fd in high:
        os.dup2(fd, target)
    os.closerange(max(target for target, _ in targets) + 1, 65536)


def _isolate(payload: dict, limits: dict, cpu_s: int, drop_to, libc) -> None:
    """What every untrusted-facing process does before its work: limits, OOM score, uid, working dir, no
    ``/proc`` files (Landlock), seccomp."""
    _set_limits(limits, cpu_s)
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")  # the OOM killer picks a job process, never the launcher
    except OSError:
        pass  # not root: /proc/self of a non-dumpable process belongs to root; the rlimits still hold
    if drop_to:
        uid, gid = drop_to
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    os.chdir(payload["work_dir"])
    if payload.get("landlock"):
        close_proc_files(libc)
    if payload.get("seccomp"):
        install_seccomp(libc, payload["seccomp"])


def _child(job: dict, payload: dict, paths: dict, streams: dict, setup_w: int, libc) -> None:
    """Runs in the forked child: isolate, limit, drop privileges, filter, then run the job and report."""
    try:
        os.setsid()  # own process group, so a timeout can kill the job's whole group
        stdin_fd = os.open(paths["stdin"], os.O_RDONLY)
        report_fd = os.open(paths["report"], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        targets = [(0, stdin_fd), (1, streams["stdout"]), (2, streams["stderr"]), (3, report_fd), (4, setup_w)]
        if streams.get("judge") is not None:
            targets += [(5, streams["judge"][0]), (6, streams["judge"][1])]
        _place_descriptors(targets)  # the launcher's stdout, counters, cgroup files and other tests' pipes close
        seccomp = job.get("seccomp") or payload.get("seccomp")  # a job's own filter is the stricter one
        isolation = {**payload, "seccomp": seccomp}
        _isolate(isolation, {**payload["limits"], **job.get("limits", {})}, job["cpu_s"], payload.get("drop_to"), libc)
        if job.get("argv"):
            _exec_program(job["argv"], job.get("files") or {})
        # Opened as the interpreter opens its own (a ``.mode``, which PyRival's FastIO reads), and standing for
        # ``sys.__stdout__`` too: the launcher's own is gone, and output written there at exit is the job's.
        sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = sys.__stderr__ = open(  # noqa: SIM115
            2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False
        )
        sys.argv = ["solution.py"]
    except BaseException as exc:  # noqa: BLE001 - setup failure is reported, never run untrusted code then
        os.write(4, repr(exc).encode("utf-8", errors="replace")[:SETUP_READ_CAP])
        os._exit(70)
    os.close(4)  # from here on the job's code runs: no channel left to claim a setup error
    job_pid = os.getpid()
    counter = LineCounter() if job.get("count_lines") else None
    report = _execute(job, counter)
    if counter is not None:
        counter.stop()
        report["lines"] = None if counter.tampered else counter.lines
    if os.getpid() != job_pid:
        os._exit(0)  # a process the job forked came back out of its code: only the job itself reports
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed fd is the job's own problem
            pass
    try:
        os.write(3, to_json(report).encode("ascii"))
    finally:
        os._exit(0)


def _exec_program(argv: list, files: dict) -> None:
    """Replaces this child with another language's compiler or program (``languages.py``): the limits, uid
    and seccomp filter set above hold across ``execve``. Its files are written first, as the job's own uid (in
    the work dir, a program may delete its own files). Its verdict is how it exits, so it gets no report
    descriptor and no setup channel."""
    for name, content in files.items():
        with open(os.path.basename(name), "x", encoding="utf-8") as handle:
            handle.write(content)
    os.close(3)
    os.close(4)
    try:
        os.execve(argv[0], argv, os.environ)
    finally:
        os._exit(EXEC_FAILED)


def to_json(value) -> str:
    """JSON text of a report (dicts, str, int, None), pure ASCII; the json module in this process may
    have been replaced by the job, so the report is written by hand."""
    kind = type(value)
    if value is None:
        return "null"
    if kind is int:
        return int.__repr__(value)
    if kind is str:
        return '"' + "".join(map(_json_char, value)) + '"'
    if kind is dict:
        return "{" + ",".join(to_json(key) + ":" + to_json(item) for key, item in value.items()) + "}"
    raise TypeError(f"not JSON data: {kind.__name__}")


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
    return type(exc).__name__, message


def _leave(code=None):
    """``exit()`` and ``quit()`` as the site module defines them (the sandbox's interpreter starts without site)."""
    raise SystemExit(code)


def _finish_like_the_interpreter(counter: "LineCounter | None") -> None:
    """What CPython does when a script ends: wait for non-daemon threads, then run the atexit handlers
    (a threaded ``main()``, output written at exit, a ``multiprocessing.Pool`` closed by its finaliser).
    The main thread's lines stop counting here (this waiting is the harness's); the threads' own go on."""
    if counter is not None:
        counter.stop()
    threading = sys.modules.get("threading")
    try:
        if threading is not None:
            threading._shutdown()
    except BaseException:  # noqa: BLE001 - the job's threads are its own problem
        pass
    import atexit

    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass


class LineCounter:
    """Counts the source lines the program executes (Python's ``line`` trace events), its threads included:
    a cost that does not move with the host's load, for hosts without a hardware instruction counter.

    It lives in the job's own process, so a program can stop or forge it. A program that sets a tracer or a
    profiler of its own gets no count (an audit hook sees it); other forgeries are bounded by the efficiency
    reward, which never lets this count claim more than the CPU time measured out here allows.
    The harness's own frames (this file, ``sandbox_program``, ``sandbox_wire``: answering the judge) are not
    counted, so the count is the program's work alone; nor is the standard library's waiting code
    (``WAITING_LIBRARY``: its loops run as often as the scheduler makes them). Processes the program forks
    are not counted.
    """

    def __init__(self):
        self.lines = 0
        self.waiting_code: tuple[str, ...] = ()
        self.counting = False
        self.tampered = False
        # the functions it calls, held before the program runs: the program may replace sys's attributes or
        # remove modules from sys.modules, and nothing it does may make the harness's own calls fail
        self._settrace, self._getframe = sys.settrace, sys._getframe
        self._threading = None
        self.harness_files = {_execute.__code__.co_filename}
        for name in ("sandbox_program", "sandbox_wire"):
            module = sys.modules.get(name)
            if module is not None:
                self.harness_files.update(
                    value.__code__.co_filename
                    for value in vars(module).values()
                    if hasattr(value, "__code__") and value.__module__ == name
                )

    def start(self) -> None:
        import threading

        self._threading = threading
        # these wait on locks, queues, pipes and timers: how many of their lines run depends on the scheduler
        library = os.path.dirname(threading.Thread.join.__code__.co_filename)
        self.waiting_code = tuple(os.path.join(library, name) for name in WAITING_LIBRARY)
        sys.addaudithook(self._on_audit)  # for good: an audit hook cannot be removed
        threading.settrace(self._on_call)
        self._settrace(self._on_call)
        self.counting = True

    def stop(self) -> None:
        """Stops counting this thread and threads started from now on (threads already running count on).
        Never raises, whatever the program did to the interpreter: a job's process must reach its report."""
        if not self.counting:
            return
        self.counting = False
        try:
            if self._threading._trace_hook != self._on_call:
                self.tampered = True  # the program set the tracer of its threads (threading.settrace is not audited)
            self._settrace(None)
            self._threading.settrace(None)
        except BaseException:  # noqa: BLE001 - the program broke what stopping needs: its count is void
            self.tampered = True

    def _on_audit(self, event, args):
        # a thread started by threading sets the tracer threading holds: harness code; the program's own call
        # replaces the tracer, and its count no longer says what it ran
        if (
            self.counting
            and event in ("sys.settrace", "sys.setprofile")
            and not self._uncounted(self._getframe(1).f_code.co_filename)
        ):
            self.tampered = True

    def _uncounted(self, filename: str) -> bool:
        return filename in self.harness_files or filename.startswith(self.waiting_code)

    def _on_call(self, frame, event, arg):
        return None if self._uncounted(frame.f_code.co_filename) else self._on_line

    def _on_line(self, frame, event, arg):
        if event == "line":
            self.lines += 1
        return self._on_line


def _execute(job: dict, counter: "LineCounter | None" = None) -> dict:
    """Runs the task's preamble and the program as ``__main__``; for a judged test, then answers the judge.
    With a ``counter``, the program's lines are counted from its first statement on."""
    # A judged program is imported as a module, as the datasets' own harnesses exec it: its
    # `if __name__ == "__main__":` block (a demo reading stdin) does not run. A stdin/stdout program is the
    # script. Either way a real module in sys.modules, so pickle (multiprocessing) finds its functions.
    name = "solution" if job.get("serve") else "__main__"
    main_module = type(sys)(name)
    sys.modules[name] = main_module
    namespace = main_module.__dict__
    namespace["__builtins__"] = builtins
    builtins.exit = builtins.quit = _leave
    try:
        task_classes = {}
        if job.get("preamble"):
            exec(compile(job["preamble"], "<preamble>", "exec"), namespace)  # noqa: S102 - the task's own code
            task_classes = {
                key: value for key, value in namespace.items() if isinstance(value, type) and value.__module__ == name
            }
        program = compile(job["source"], "solution.py", "exec")
        if counter is not None:
            counter.start()
        exec(program, namespace)  # noqa: S102 - this is the sandboxed job
        if job.get("serve"):
            for shared in job.get("shared_classes") or ():  # the program's class named like the task's travels as data
                if isinstance(namespace.get(shared), type) and shared not in task_classes:
                    task_classes[shared] = namespace[shared]
            sandbox_program = sys.modules["sandbox_program"]  # imported by the launcher before the fork
            sandbox_program.ProgramSide(5, 6, namespace, task_classes).serve()
        else:
            _finish_like_the_interpreter(counter)
    except SyntaxError as exc:
        return {"status": "exception", "exception": "SyntaxError", "message": str(exc)[:MESSAGE_CHARS]}
    except SystemExit as exc:
        _finish_like_the_interpreter(counter)
        code = exc.code
        return {"status": "exit", "exit_code": code if type(code) is int else (None if code is None else 1)}
    except BaseException as exc:  # noqa: BLE001 - every failure of the job is reported
        name, message = _describe(exc)
        return {"status": "exception", "exception": name, "message": message}
    return {"status": "ok"}


# --------------------------------------------------------------------------- the judge


def start_judge(payload: dict, served: list[int], libc) -> dict:
    """Forks the judge before any job runs: it reads the tests from a descriptor this launcher closes at once
    (so no job, forked later from here, ever holds them) and talks to each test's process over its own pipes."""
    import sandbox_judge

    spec = payload["judge"]
    to_program = [os.pipe() for _ in served]
    to_judge = [os.pipe() for _ in served]
    verdict_r, verdict_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            ends = [(reading, writing) for (reading, _), (_, writing) in zip(to_judge, to_program)]
            nothing = os.open(os.devnull, os.O_RDWR)  # the launcher's stdout carries the frames: never the judge's
            _place_descriptors(
                [
                    (0, nothing),
                    (1, nothing),
                    (2, nothing),
                    (3, verdict_w),
                    (4, spec["fd"]),
                    *((5 + 2 * n + side, fd) for n, pair in enumerate(ends) for side, fd in enumerate(pair)),
                ]
            )
            if payload["drop_to"] is None:
                libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
            _isolate(payload, spec["limits"], spec["cpu_s"], spec.get("drop_to"), libc)
            os.chdir("/")  # not the jobs' work dir: nothing the judge might write is left for a later test's program
            sandbox_judge.main(4, [(5 + 2 * n, 6 + 2 * n) for n in range(len(ends))], 3)
        except BaseException:  # noqa: BLE001 - a broken judge gives no verdicts; the tests then fail
            pass
        os._exit(0)
    os.close(verdict_w)
    os.close(spec["fd"])
    for (judge_reads, _), (_, judge_writes) in zip(to_judge, to_program):
        os.close(judge_reads)
        os.close(judge_writes)
    return {
        "pid": pid,
        "channels": {
            index: (program_reads, program_writes)
            for index, (program_reads, _), (_, program_writes) in zip(served, to_program, to_judge)
        },
        "verdicts": verdict_r,
        "pending": b"",
        "alive": True,
    }


def _judge_verdict(judge: dict, patience_s: float) -> bytes | None:
    """The judge's next verdict line (raw: the harness parses it), or None when it gave none in time."""
    deadline = time.monotonic() + patience_s
    while b"\n" not in judge["pending"]:
        poller = select.poll()
        poller.register(judge["verdicts"], select.POLLIN)
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return None
        chunk = os.read(judge["verdicts"], 65536)
        if not chunk:
            return None
        judge["pending"] += chunk
        if len(judge["pending"]) > REPORT_READ_CAP:
            return None
    line, judge["pending"] = judge["pending"].split(b"\n", 1)
    return line


def stop_judge(judge: dict) -> None:
    _kill_quietly(os.killpg, judge["pid"])
    _kill_quietly(os.kill, judge["pid"])
    try:
        _, _, usage = os.wait4(judge["pid"], 0)
        _judge_cpu_s[0] += usage.ru_utime + usage.ru_stime
    except ChildProcessError:
        pass  # already reaped by a sweep
    judge["alive"] = False


# --------------------------------------------------------------------------- the launcher's side of a job


class _Capture:
    """Bytes read from a job's pipe: the first ``limit`` (stdout) or the last ``limit`` (stderr)."""

    def __init__(self, limit: int, tail: bool):
        self.limit, self.tail = limit, tail
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        if self.tail:
            self.data += chunk
            if len(self.data) > self.limit:
                del self.data[: len(self.data) - self.limit]
                self.truncated = True
        else:
            room = self.limit - len(self.data)
            self.data += chunk[:room]
            self.truncated = self.truncated or len(chunk) > room


def _drain(streams: dict, pidfd: int | None, deadline: float, overflow: "_Capture | None" = None) -> bool:
    """Reads the job's stdout and stderr until its process exits (True), the deadline passes or ``overflow``
    (the stdout of a job judged on its output) goes past its cap (False); with no pidfd, until every pipe
    reaches its end."""
    poller = select.poll()
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    for fd in streams:
        poller.register(fd, select.POLLIN)
    open_streams = set(streams)
    while pidfd is not None or open_streams:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        for fd, _ in poller.poll(left * 1000):
            if fd == pidfd:
                return True
            chunk = os.read(fd, 1 << 16)
            if chunk:
                streams[fd].add(chunk)
                if streams[fd] is overflow and overflow.truncated:
                    return False
            else:
                poller.unregister(fd)
                open_streams.discard(fd)
    return True


def _sweep_and_reap(namespaced: bool, group: int) -> None:
    """Kill every process the job left (everything in our PID namespace but its init, us and the judge,
    or in the unsafe fallback the job's process group), then reap them: as the child subreaper we
    inherit the orphans, and reaping adds their CPU time to ours-for-children."""
    keep = {1, os.getpid(), *_judge_pids}
    deadline = time.monotonic() + SWEEP_PATIENCE_S
    while True:
        if namespaced:
            left = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if pid not in keep]
            for pid in left:
                _kill_quietly(os.kill, pid)
        else:
            left = [group] if _group_alive(group) else []
            _kill_quietly(os.killpg, group)
        _reap()
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.002)


_judge_pids: set[int] = set()
_judge_cpu_s = [0.0]  # CPU of a judge reaped here: never counted as a job's


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _reap() -> None:
    try:
        while True:
            pid, _, usage = os.wait4(-1, os.WNOHANG)
            if not pid:
                return
            if pid in _judge_pids:
                _judge_cpu_s[0] += usage.ru_utime + usage.ru_stime
    except ChildProcessError:
        pass


def _kill_quietly(kill, target: int) -> None:
    try:
        kill(target, SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_report(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(REPORT_READ_CAP)
        os.unlink(path)
    except OSError:
        return b""
    return data


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
    names = ("stdin", "report")
    paths = {name: os.path.join(payload["scratch_dir"], f"job{index}.{name}") for name in names}
    with open(paths["stdin"], "w", encoding="utf-8") as handle:
        handle.write(job.get("stdin") or "")
    judge = state.get("judge")
    channel = judge["channels"].get(index) if judge is not None else None
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    setup_r, setup_w = os.pipe()
    sys.stdout.flush()
    instructions_before = _read_counter(state["counter_fd"])
    cpu_before, ooms_before = _children_cpu_s() - _judge_cpu_s[0], _oom_kills(state["oom_fd"])
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(setup_r)
        _child(job, payload, paths, {"stdout": stdout_w, "stderr": stderr_w, "judge": channel}, setup_w, state["libc"])
    for fd in (setup_w, stdout_w, stderr_w, *(channel or ())):
        os.close(fd)
    captured = {
        stdout_r: _Capture(payload["max_output_bytes"], tail=False),
        stderr_r: _Capture(STDERR_TAIL_CHARS, tail=True),
    }
    pidfd = os.pidfd_open(pid)
    judged_on_output = not job.get("serve")
    finished = _drain(captured, pidfd, started + job["wall_s"], captured[stdout_r] if judged_on_output else None)
    os.close(pidfd)
    if not finished:
        _kill_quietly(os.killpg, pid)
        _kill_quietly(os.kill, pid)  # in case it had not yet made its own process group
    _, wait_status, usage = os.wait4(pid, 0)
    wall_s = time.monotonic() - started
    _sweep_and_reap(payload["namespaced"], pid)
    _drain(captured, None, time.monotonic() + SWEEP_PATIENCE_S)  # every writer is gone: read to the end
    for fd in (stdout_r, stderr_r):
        os.close(fd)
    setup_error = os.read(setup_r, SETUP_READ_CAP)
    os.close(setup_r)
    verdict = None
    if channel is not None and judge["alive"]:
        verdict = _judge_verdict(judge, job["wall_s"])
        if verdict is None:
            stop_judge(judge)
    instructions_after = _read_counter(state["counter_fd"])
    report = _read_report(paths["report"])
    os.unlink(paths["stdin"])
    baseline = state["baseline"]
    stdout, stderr = captured[stdout_r], captured[stderr_r]
    return {
        "index": index,
        "executed": bool(job.get("argv")),
        "finished": finished or captured[stdout_r].truncated,
        "output_overflow": judged_on_output and captured[stdout_r].truncated,
        "signal": os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None,
        "exit_status": os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else None,
        "setup_error": setup_error.decode("utf-8", errors="replace") if setup_error else None,
        "report": report,
        "judge": verdict,
        "oom_killed": _oom_kills(state["oom_fd"]) > ooms_before,
        "stdout": bytes(stdout.data).decode("utf-8", errors="replace"),
        "stdout_truncated": stdout.truncated,
        "stderr_tail": bytes(stderr.data).decode("utf-8", errors="replace"),
        "cpu_s": max(0.0, _children_cpu_s() - _judge_cpu_s[0] - cpu_before - baseline.get("cpu_s", 0.0)),
        "wall_s": wall_s,
        "peak_rss_kb": usage.ru_maxrss,
        "baseline_rss_kb": baseline.get("peak_rss_kb", 0),
        "instructions": (
            None
            if instructions_before is None or instructions_after is None
            else max(0, instructions_after - instructions_before - baseline.get("instructions", 0))
        ),
    }


def start(payload: dict) -> dict:
    """Everything the launcher does once, before any job: see the module docstring."""
    libc = load_libc()
    capped = payload.get("capped_tmpfs")
    if capped:
        mount_capped_tmpfs(libc, capped["directories"], capped["size_bytes"], capped["max_files"])
    if payload.get("private_proc"):
        hide_the_machine(libc)
    if payload.get("keep_capabilities"):
        keep_only_capabilities(libc, KEPT_CAPABILITIES if payload["drop_to"] else ())
    join_cgroups(payload.get("cgroup_procs_fds") or [])
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if payload["drop_to"] is None:  # jobs share our uid: keep them out of our memory and fds
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    counter_fd = open_instruction_counter(libc) if payload.get("count_instructions") else None
    return {"libc": libc, "counter_fd": counter_fd, "oom_fd": payload.get("oom_events_fd"), "baseline": {}}


def _write_frame(frame: dict) -> None:
    data = marshal.dumps(frame, MARSHAL_VERSION)
    sys.stdout.buffer.write(len(data).to_bytes(8, "little") + data)
    sys.stdout.buffer.flush()


def main() -> int:
    payload = marshal.loads(sys.stdin.buffer.read())
    sys.path.extend(payload.get("sys_path", []))
    state = start(payload)
    # An empty job measures what the forked interpreter itself costs; reports subtract it. Measured by the
    # first sandbox of a Sandbox, then given to the others in the payload.
    state["baseline"] = payload.get("baseline")
    if state["baseline"] is None:
        calibration = run_job(-1, {"source": "", "wall_s": 10.0, "cpu_s": 11}, payload, {**state, "baseline": {}})
        state["baseline"] = {
            "peak_rss_kb": calibration["peak_rss_kb"],
            "cpu_s": calibration["cpu_s"],
            "instructions": calibration["instructions"] or 0,
        }
        _write_frame({"index": -1, "baseline": state["baseline"]})
    served = [index for index, job in enumerate(payload["jobs"]) if job.get("serve")]
    if served:
        import sandbox_program  # noqa: F401 - imported here, where the files are readable, for every job to use

        state["judge"] = start_judge(payload, served, state["libc"])
        _judge_pids.add(state["judge"]["pid"])
    compiled = True
    for index, job in enumerate(payload["jobs"]):
        judge = state.get("judge")
        if job.get("serve") and not judge["alive"]:
            frame = {"index": index, "judge_gone": True}
        elif not compiled:
            frame = {"index": index, "not_compiled": True}
        else:
            frame = run_job(index, job, payload, state)
            if job.get("compile"):
                compiled = frame["finished"] and frame["exit_status"] == 0
        _write_frame(frame)
    if state.get("judge") is not None:
        stop_judge(state["judge"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
