"""Runs untrusted Python in a bubblewrap sandbox, one forked and limited process per job.

Threat model: the job's code was written by a policy that is rewarded for passing tests, and will
try anything that raises its reward: fool the comparison, forge the harness's messages, read or
break other jobs, exhaust the host. What stops it (the in-sandbox half is ``sandbox_launcher.py``,
the kernel-level limits ``limits.py``):

* **The judge** (``sandbox_judge``). A test's verdict is decided by a second process in the same
  sandbox that runs the test's own code and never the program's; the program's process answers its
  requests (``sandbox_program``) over a pair of pipes, values crossing as data (``sandbox_wire``).
  The tests and expected values reach the judge through a descriptor no job ever holds. What a job
  writes (stdout, files, its report) is data the harness parses strictly and shows escaped; the
  only channel that can claim a setup error is closed before the job's code runs.
* **Namespaces.** ``bwrap`` with new PID, network, IPC, UTS, cgroup and mount namespaces (plus a
  user namespace when not root): no network, the job sees only its own processes, every process
  dies with the sandbox. Read-only ``/usr`` (and the interpreter's prefix); ``/tmp``, ``/dev/shm`` and
  the work dir ``/work`` are fresh tmpfs mounts with a size cap and a file-count cap.
* **A private /proc** (root): only the sandbox's own processes (``subset=pid``) and no pseudo-terminals, so
  the machine-wide counters (threads, shared memory, terminals, ``/proc/sys``) carry nothing from one row's
  job to another's; seccomp refuses ``sysinfo``, which reports the same counters.
* **seccomp.** An allow list (``limits.ALLOWED_SYSCALLS``): new namespaces, mounts, the kernel
  keyring, ptrace, ``process_vm_*``, bpf, perf events, userfaultfd, io_uring, inotify, vsock and
  every call not on the list are refused; file locks lock nothing, so jobs share no lock state.
* **cgroups** (root): memory and processes of everything a job runs together, its CPU one core
  with an equal share, so escaping the process group escapes nothing and a job's spinners slow
  only that job.
* **Unprivileged uid** (root): each slot runs jobs as its own uid with every capability dropped,
  so the per-uid process limit holds and a job cannot signal or read the launcher.
* **rlimits** per process (address space, CPU seconds, processes, file size, open files, no core)
  and deadlines: a test's time verdict is its CPU time (every process of the job counted, waited
  for or not), so another job's load cannot turn a correct program into a time-out; a wall-clock
  backstop (``wall_timeout_factor`` x ``timeout_s``) ends programs that sleep.

Where the host lacks a protection (no root: no cgroups or uid switch; no libseccomp) the sandbox
says so once at start-up; the ones the config ``require``s must be there or it refuses to start.

No bubblewrap means untrusted code does not run: :class:`SandboxUnavailable` says how to install
it. Only an explicit opt-in (environment ``DIFFUGRPO_UNSAFE_NO_SANDBOX=1`` or config
``allow_unsandboxed_fallback_i_understand_the_risk: true``) runs jobs with rlimits alone.

This module imports no torch: only the standard library and the sandbox's other host-side modules.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import marshal
import math
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

from diffugrpo_plugin.sandbox.config import (
    FALLBACK_CONFIG_KEY,
    UNSAFE_ENV_VAR,
    SandboxConfig,
    SandboxError,
    SandboxUnavailable,
    unsafe_fallback_requested,
)
from diffugrpo_plugin.sandbox.jobs import Job, JobResult, job_result, launcher_frames
from diffugrpo_plugin.sandbox.languages import toolchain_binds
from diffugrpo_plugin.sandbox.limits import (
    CgroupSlots,
    Protection,
    SlotLimits,
    host_protections,
    seccomp_program,
)
from diffugrpo_plugin.sandbox.probe import (
    LAUNCHER_PATH,
    InterpreterLayout,
    instruction_counter_available,
    interpreter_layout,
)

logger = logging.getLogger("diffugrpo.sandbox")

SANDBOX_DIR = "/opt/diffugrpo"
_LAUNCH = "import sys; sys.path.insert(0, {!r}); import sandbox_launcher; sys.exit(sandbox_launcher.main())"
_COMPILE = """import importlib.util, os, py_compile, sys
source_dir, shown_dir, out = sys.argv[1:4]
for name in sys.argv[4:]:
    cached = os.path.basename(importlib.util.cache_from_source(os.path.join(source_dir, name)))
    py_compile.compile(os.path.join(source_dir, name), cfile=os.path.join(out, cached), dfile=os.path.join(shown_dir, name),
                       doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
"""
IN_SANDBOX_MODULES = (
    "sandbox_launcher.py",
    "sandbox_wire.py",
    "sandbox_program.py",
    "sandbox_refusals.py",
    "sandbox_remote.py",
    "sandbox_judge.py",
)
JUDGE_UID_OFFSET = 10_000_000  # the judge of slot s runs as uid_base + s + this: no job can signal or read it
WORK_DIR = "/work"
SCRATCH_DIR = "/run/diffugrpo"
PER_JOB_OVERHEAD_S = 0.5
# Counting lines (a Python callback per executed line) makes a pure-Python loop about 3.6x slower on
# CPython 3.11; a counted job gets this many times its CPU limit, so a program that passed its tests
# is not cut short only because it is being measured.
LINE_COUNT_SLOWDOWN = 6.0
MARSHAL_VERSION = 4  # the launcher speaks marshal: built in, so it costs nothing to import
INSTALL_HINT = "Install it with `apt-get install -y bubblewrap` (Debian/Ubuntu) or your distribution's package."
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORK_DIR,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    # glibc gives each thread its own malloc arena, reserving 64 MB of address space apiece: 16 threads would
    # spend the address-space limit before allocating anything ("can't start new thread").
    "MALLOC_ARENA_MAX": "2",
}


def _system_dir_args() -> list[str]:
    """Read-only views of the host's system directories, keeping merged-/usr symlinks as symlinks."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    # /etc holds only what is bound here; traversable, or a job's uid could not reach any of it
    args += ["--perms", "0755", "--dir", "/etc"]
    if os.path.exists("/etc/ld.so.cache"):  # the dynamic loader finds multiarch libraries through it
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args


def _ro_bind_args(paths: Sequence[str]) -> list[str]:
    """Read-only binds, with every ancestor created world-traversable first.

    Without this bwrap copies restrictive host modes (``/root`` is 0700), and a job's
    unprivileged uid could not reach an interpreter installed under ``/root``.
    """
    args: list[str] = []
    created: set[str] = set()
    for path in paths:
        ancestors = list(Path(path).parents)[::-1][1:]  # without "/"
        for ancestor in map(str, ancestors):
            if ancestor not in created and not ancestor.startswith("/usr"):
                created.add(ancestor)
                args += ["--perms", "0755", "--dir", ancestor]
        args += ["--ro-bind", path, path]
    return args


class Sandbox:
    """Runs batches of :class:`Job` in isolated sandboxes, at most ``max_concurrency`` at once.

    Thread-safe: share one instance per process and call :meth:`run` from many threads.
    """

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self.bwrap = shutil.which("bwrap")
        if self.bwrap is None and not unsafe_fallback_requested(self.config):
            raise SandboxUnavailable(
                "bubblewrap (`bwrap`) is not installed, so untrusted generated code will not run. "
                f"{INSTALL_HINT} Only if you accept running model-written code on this machine with "
                f"rlimits alone, set {UNSAFE_ENV_VAR}=1 or the sandbox option {FALLBACK_CONFIG_KEY}: true."
            )
        if self.bwrap is None:
            message = (
                "UNSAFE: bubblewrap is missing and the unsandboxed fallback was explicitly allowed: "
                "model-written code runs on this machine with rlimits only (no namespaces, "
                "no filesystem isolation, network reachable)."
            )
            logger.warning(message)
            print(f"[diffugrpo.sandbox] WARNING: {message}", file=sys.stderr, flush=True)
        self.python = os.path.realpath(self.config.python_executable or sys.executable)
        self.is_root = os.geteuid() == 0
        self._slots: queue.Queue[int] = queue.Queue()
        for slot in range(self.config.max_concurrency):
            self._slots.put(slot)
        uid_base = self.config.uid_base or 100_000 + (os.getpid() % 100_000) * 64
        self._uid_base = uid_base
        self._checked = False
        self._layout: InterpreterLayout | None = None
        self._layout_lock = threading.Lock()
        self._compiled: str | None = None
        self._baseline: dict | None = None  # what the forked interpreter itself costs (time, memory, instructions)
        self.protections = host_protections(
            self.bwrap, self.is_root, self.config.cgroups, self.config.seccomp, self.config.inode_cap
        )
        self._require_protections()
        self._seccomp = seccomp_program()[0] if self.protections["seccomp"].active else None
        self._cgroups = self._cgroup_slots() if self.protections["cgroups"].active else None

    def _require_protections(self) -> None:
        """Refuses to start without a required protection; says once per process what is missing."""
        missing = [p for name, p in self.protections.items() if not p.active]
        required = [p for p in missing if p.name in self.config.require]
        if required and self.isolated:
            raise SandboxUnavailable(
                "the sandbox config requires protection(s) this host does not give: "
                + "; ".join(f"{p.name} ({p.detail})" for p in required)
                + ". Fix the host, or take the name out of the sandbox option `require` "
                "(`diffugrpo sandbox check` lists what this machine offers)."
            )
        key = tuple(p.name for p in missing)
        with _reported_lock:
            if missing and key not in _reported_missing:
                _reported_missing.add(key)
                message = "sandbox protections not active on this host: " + "; ".join(
                    f"{p.name}: {p.detail}" for p in missing
                )
                print(f"[diffugrpo.sandbox] {message}", file=sys.stderr, flush=True)  # always seen, logging or not

    def _cgroup_slots(self) -> CgroupSlots | None:
        config = self.config
        limits = SlotLimits(
            memory_bytes=config.memory_mb << 20, processes=config.max_processes + 2
        )  # the launcher and bwrap's init are in it too
        try:
            slots = CgroupSlots(config.max_concurrency, limits, tag=f"{os.getpid()}-{id(self):x}")
        except OSError as error:
            logger.warning(
                "sandbox: could not create cgroups (%s); memory and processes are limited per process only", error
            )
            self.protections["cgroups"] = Protection("cgroups", False, f"creating them failed: {error}")
            return None
        atexit.register(slots.close)
        return slots

    def check(self) -> None:
        """Runs one trivial job; raises :class:`SandboxError` with bwrap's own words if it cannot."""
        if self._checked:
            return
        result = self.run([Job("print('ok')", timeout_s=self.config.startup_timeout_s)])[0]
        if result.status != "ok" or result.stdout != "ok\n":
            raise SandboxError(f"the sandbox runs but a trivial job did not succeed: {result}")
        self._checked = True

    @property
    def isolated(self) -> bool:
        """True when jobs run under bubblewrap (False only in the explicit unsafe fallback)."""
        return self.bwrap is not None

    def run(self, jobs: Sequence[Job], ro_binds: Sequence[str] = ()) -> list[JobResult]:
        """Runs ``jobs`` one after another in one fresh sandbox; one result per job, in order. ``ro_binds``: host
        folders of trusted files this run reads besides the toolchains (a precompiled header), bound read-only.

        Blocks at most the sum of the jobs' timeouts plus a fixed slack. Raises
        :class:`SandboxError` when the sandbox itself cannot start.
        """
        if not jobs:
            return []
        slot = self._slots.get()
        try:
            return self._run_in_slot(list(jobs), slot, tuple(ro_binds))
        finally:
            self._slots.put(slot)

    def _job_payload(self, job: Job) -> dict[str, Any]:
        timeout_s = job.timeout_s if job.timeout_s is not None else self.config.timeout_s
        # a counted job gets the CPU its tracer costs, and that much more wall clock (not the wall factor
        # times it: a program that sleeps is held no longer than uncounted, plus the tracer's share)
        tracer_s = timeout_s * (LINE_COUNT_SLOWDOWN - 1) if job.count_lines else 0.0
        payload = {
            "source": job.source,
            "preamble": job.preamble,
            "shared_classes": list(job.judged.shared_classes) if job.judged is not None else [],
            "stdin": job.stdin,
            "timeout_s": timeout_s,
            "serve": job.judged is not None,
            "count_lines": job.count_lines,
            "wall_s": timeout_s * self.config.wall_timeout_factor + tracer_s,
            "cpu_s": int(math.ceil(timeout_s + tracer_s)) + 1,
        }
        if job.argv:
            payload.update(argv=list(job.argv), files=dict(job.files), compile=job.compile)
        if job.no_fork and self._seccomp is not None:
            payload["seccomp"] = seccomp_program(allow_fork=False)[0]
        if job.address_space_mb > self.config.memory_mb:
            payload["limits"] = {"address_space_bytes": job.address_space_mb << 20}
        return payload

    def _judge_payload(self, jobs: list[Job], slot: int, judge_fd: int | None) -> dict[str, Any] | None:
        """The judge's limits and uid; its tests travel apart, through ``judge_fd`` (see :func:`judge_spec`)."""
        judged = [job for job in jobs if job.judged is not None]
        if not judged:
            return None
        uid = self._uid_base + slot + JUDGE_UID_OFFSET
        cpu_s = sum(int(math.ceil(job.timeout_s or self.config.timeout_s)) + 1 for job in judged) + 5
        return {
            "fd": judge_fd,
            "drop_to": [uid, uid] if self.is_root else None,
            "cpu_s": cpu_s,
            "limits": {
                "address_space_bytes": self.config.judge_memory_mb << 20,
                "processes": 4,
                "file_size_bytes": 1 << 20,
                "open_files": len(judged) + 32,
            },
        }

    def _payload(
        self,
        jobs: list[Job],
        slot: int,
        work_dir: str,
        scratch_dir: str,
        cgroup_fds: tuple[list[int], int | None],
        judge_fd: int | None,
    ) -> dict[str, Any]:
        config = self.config
        uid = self._uid_base + slot
        privileged = self.isolated and self.is_root
        capped = privileged and self.protections["tmpfs_inode_cap"].active
        return {
            "judge": self._judge_payload(jobs, slot, judge_fd),
            "baseline": self._baseline,
            "namespaced": self.isolated,
            "drop_to": [uid, uid] if self.is_root else None,
            "keep_capabilities": privileged,  # drops the CAP_SYS_ADMIN the capped tmpfs needed
            "private_proc": self.protections["private_proc"].active,
            "landlock": self.protections["no_proc_files"].active,
            "capped_tmpfs": {
                "directories": [["/tmp", 0o1777], ["/dev/shm", 0o1777], [work_dir, 0o1777], [scratch_dir, 0o700]],
                "size_bytes": config.tmpfs_mb << 20,
                "max_files": config.max_files,
            }
            if capped
            else None,
            "seccomp": self._seccomp,
            "cgroup_procs_fds": cgroup_fds[0],
            "oom_events_fd": cgroup_fds[1],
            "limits": {
                "address_space_bytes": config.memory_mb << 20,
                "processes": self._process_limit(),
                "file_size_bytes": int(config.max_file_size_mb * (1 << 20)),
                "open_files": config.max_open_files,
            },
            "max_output_bytes": config.max_output_bytes,
            "count_instructions": config.count_instructions and instruction_counter_available(),
            "sys_path": list(self.layout.site_dirs) if config.site_packages else [],
            "work_dir": work_dir,
            "scratch_dir": scratch_dir,
            "jobs": [self._job_payload(job) for job in jobs],
        }

    def _process_limit(self) -> int | None:
        """RLIMIT_NPROC for a job, or None where the kernel would count the wrong processes.

        Root mode: counted per job uid, which only that sandbox uses. Non-root under bwrap:
        counted per uid inside the sandbox's own user namespace (the launcher and bwrap's init
        live there too, hence the two extra). Non-root without bwrap: the count would include
        every process the user owns, so no limit can be set that is both safe and usable.
        """
        if self.is_root:
            return self.config.max_processes
        return self.config.max_processes + 2 if self.isolated else None

    def _interpreter_args(self) -> list[str]:
        # -S skips site's .pth processing (tens of ms per start); installed packages are
        # offered through sys_path instead (see _payload).
        return [self.python, "-I", "-S"]

    @property
    def compiled_modules(self) -> str | None:
        """A private folder of the in-sandbox modules compiled once by the sandbox's interpreter, bound in as
        their ``__pycache__`` (hash-checked against the sources): the launcher, the judge and the wire are then
        loaded, not compiled, at each sandbox's start. None where compiling failed (they compile at start)."""
        with self._layout_lock:
            if self._compiled is None:
                folder = tempfile.mkdtemp(prefix="diffugrpo-sandbox-pyc-")
                atexit.register(shutil.rmtree, folder, True)
                os.chmod(folder, 0o755)
                try:
                    subprocess.run(
                        [
                            self.python,
                            "-I",
                            "-S",
                            "-c",
                            _COMPILE,
                            str(LAUNCHER_PATH.parent),
                            SANDBOX_DIR,
                            folder,
                            *IN_SANDBOX_MODULES,
                        ],
                        check=True,
                        capture_output=True,
                        timeout=60,
                    )
                    for name in os.listdir(folder):
                        os.chmod(os.path.join(folder, name), 0o644)
                    self._compiled = folder
                except (OSError, subprocess.SubprocessError):
                    self._compiled = ""
            return self._compiled or None

    @property
    def layout(self) -> InterpreterLayout:
        with self._layout_lock:
            if self._layout is None:
                self._layout = interpreter_layout(self.python)
            return self._layout

    def _bwrap_argv(self, ro_binds: tuple[str, ...] = ()) -> list[str]:
        tmpfs_bytes = str(self.config.tmpfs_mb << 20)
        argv = [
            self.bwrap,
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
        ]
        if not self.is_root:
            argv.append("--unshare-user")
        for key, value in SANDBOX_ENV.items():
            argv += ["--setenv", key, value]
        argv += _system_dir_args()
        argv += _ro_bind_args(
            [
                path
                for path in [*self.layout.prefixes, *toolchain_binds(), *self.config.extra_ro_binds, *ro_binds]
                if not path.startswith("/usr/")
            ]
        )
        argv += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "1777",
            "--size",
            tmpfs_bytes,
            "--tmpfs",
            "/dev/shm",  # multiprocessing's semaphores
            "--perms",
            "1777",
            "--size",
            tmpfs_bytes,
            "--tmpfs",
            "/tmp",
            "--perms",
            "1777",
            "--size",
            tmpfs_bytes,
            "--tmpfs",
            WORK_DIR,
            "--perms",
            "0700",
            "--size",
            tmpfs_bytes,
            "--tmpfs",
            SCRATCH_DIR,
            *[
                arg
                for name in IN_SANDBOX_MODULES
                for arg in ("--ro-bind", str(LAUNCHER_PATH.with_name(name)), f"{SANDBOX_DIR}/{name}")
            ],
            "--chdir",
            WORK_DIR,
        ]
        if self.is_root:  # CAP_SYS_ADMIN mounts the capped tmpfs; the launcher drops it before any job
            argv += [
                "--cap-drop",
                "ALL",
                "--cap-add",
                "CAP_SETUID",
                "--cap-add",
                "CAP_SETGID",
                "--cap-add",
                "CAP_KILL",
                "--cap-add",
                "CAP_SYS_ADMIN",
            ]
        if self.compiled_modules:
            argv += ["--ro-bind", self.compiled_modules, f"{SANDBOX_DIR}/__pycache__"]
        return [*argv, "--", *self._interpreter_args(), "-c", _LAUNCH.format(SANDBOX_DIR)]

    def _deadline_s(self, payload: dict[str, Any]) -> float:
        jobs_s = sum(job["wall_s"] + PER_JOB_OVERHEAD_S for job in payload["jobs"])
        return jobs_s + self.config.startup_timeout_s

    def _run_in_slot(self, jobs: list[Job], slot: int, ro_binds: tuple[str, ...] = ()) -> list[JobResult]:
        with self._slot_cgroup_fds(slot) as cgroup_fds, _judge_tests(jobs) as judge_fd:
            if self.isolated:
                payload = self._payload(jobs, slot, WORK_DIR, SCRATCH_DIR, cgroup_fds, judge_fd)
                return self._launch(self._bwrap_argv(ro_binds), payload, cwd=None)
            with tempfile.TemporaryDirectory(prefix="diffugrpo-unsafe-") as host_dir:
                work_dir, scratch_dir = os.path.join(host_dir, "work"), os.path.join(host_dir, "scratch")
                os.chmod(host_dir, 0o711)  # the job's unprivileged uid must reach its work dir ...
                os.mkdir(work_dir)
                os.chmod(work_dir, 0o777)  # ... and write there
                os.mkdir(scratch_dir, 0o700)
                payload = self._payload(jobs, slot, work_dir, scratch_dir, cgroup_fds, judge_fd)
                argv = [*self._interpreter_args(), "-c", _LAUNCH.format(str(LAUNCHER_PATH.parent))]
                return self._launch(argv, payload, cwd=work_dir)

    @contextlib.contextmanager
    def _slot_cgroup_fds(self, slot: int):
        """Descriptors of the slot's ``cgroup.procs`` files (the launcher joins through them, since
        the cgroup filesystem is not mounted inside) and of its OOM counter; nothing without cgroups."""
        if self._cgroups is None:
            yield [], None
            return
        cgroup = self._cgroups.slots[slot]
        opened: list[int] = []
        try:
            procs = [os.open(path, os.O_WRONLY) for path in cgroup.procs_files]
            opened += procs
            oom = os.open(cgroup.oom_events, os.O_RDONLY)
            opened.append(oom)
            yield procs, oom
        finally:
            for fd in opened:
                os.close(fd)

    def _launch(self, argv: list[str], payload: dict[str, Any], cwd: str | None) -> list[JobResult]:
        env = SANDBOX_ENV if self.isolated else {**SANDBOX_ENV, "HOME": cwd or WORK_DIR}
        inherited = [
            *payload["cgroup_procs_fds"],
            *([payload["oom_events_fd"]] if payload["oom_events_fd"] else []),
            *([payload["judge"]["fd"]] if payload["judge"] else []),
        ]
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            pass_fds=inherited,
        )
        timed_out = False
        try:
            stdout, stderr = process.communicate(
                marshal.dumps(payload, MARSHAL_VERSION), timeout=self._deadline_s(payload)
            )
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process)
            stdout, stderr = process.communicate()
        frames, calibration = launcher_frames(stdout, len(payload["jobs"]))
        if calibration is not None and self._baseline is None:
            self._baseline = calibration  # measured once per sandbox, not once per completion
        if not timed_out and process.returncode != 0 and all(frame is None for frame in frames):
            raise SandboxError(
                f"the sandbox failed to start (exit code {process.returncode}): "
                f"{stderr.decode(errors='replace').strip()[-2000:]}. If bwrap reports a namespace or "
                "permission error, this machine forbids the namespaces bubblewrap needs."
            )
        missing = "timeout" if timed_out else "not_run"
        return [job_result(frame) if frame is not None else JobResult(status=missing) for frame in frames]


def judge_spec(jobs: Sequence[Job]) -> dict[str, Any]:
    """What the judge reads: the row's context and each judged test, in the order the jobs run."""
    judged = [job.judged for job in jobs if job.judged is not None]
    return {
        **judged[0].row(),
        "tests": [
            {"kind": test.kind, "code": test.code, "names": list(test.free_names), "called": list(test.called_only)}
            for test in judged
        ],
    }


@contextlib.contextmanager
def _judge_tests(jobs: Sequence[Job]):
    """An anonymous in-memory file holding the judge's tests (None when no job is judged): only the
    judge reads it; the launcher closes its copy before any job starts."""
    if not any(job.judged is not None for job in jobs):
        yield None
        return
    fd = os.memfd_create("diffugrpo-judge", 0)  # not close-on-exec: bwrap and the launcher inherit it
    try:
        data = json.dumps(judge_spec(jobs)).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, 9)
    except (ProcessLookupError, PermissionError):
        process.kill()


_reported_missing: set[tuple[str, ...]] = set()
_reported_lock = threading.Lock()
_shared: dict[SandboxConfig, Sandbox] = {}
_shared_lock = threading.Lock()


def shared_sandbox(config: SandboxConfig | None = None) -> Sandbox:
    """One :class:`Sandbox` per distinct config per process, so its concurrency cap is process-wide."""
    config = config or SandboxConfig()
    with _shared_lock:
        if config not in _shared:
            _shared[config] = Sandbox(config)
        return _shared[config]
