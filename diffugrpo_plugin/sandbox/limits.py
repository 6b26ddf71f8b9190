"""Kernel-level limits on a whole sandbox job: a seccomp filter, a cgroup per sandbox slot, what the host offers.

* **seccomp** (:func:`seccomp_program`): a BPF program, built with libseccomp through ``pyseccomp``,
  that the launcher installs in each job's process (and the judge's) just before their code runs (so
  the launcher itself can still open the instruction counter). An allow list (:data:`ALLOWED_SYSCALLS`,
  Docker's default profile as the reference): everything not on it, a system call newer than the list
  included, answers ``EPERM``. Off the list: new namespaces (``unshare``, ``setns``, ``clone`` with a
  namespace flag; ``clone3`` answers ``ENOSYS`` so the C library falls back to ``clone``), mounts, the
  kernel keyring, ``ptrace`` and ``process_vm_*``, ``bpf``, ``perf_event_open``, ``userfaultfd``, module
  and kexec loading, io_uring, inotify and fanotify; sockets only in the unix, inet and netlink
  families (no vsock, which the network namespace does not isolate); file locks succeed without locking anything,
  so no lock on a shared read-only file is seen by another job; ``sysinfo`` answers ``ENOSYS`` (its thread
  count, shared and free memory and load are the whole machine's: a signal from one job to another).
* **cgroups** (:class:`CgroupSlots`): one cgroup per concurrency slot under the harness's own cgroup
  (v1 controllers or v2), limiting the memory and the number of processes of everything a job
  runs together, and its CPU to one core with an equal share, so escaping a process group escapes
  nothing and a job's spinners slow only that job. Needs root (or a delegated v2 subtree).
* :func:`protections` says which of these (and bubblewrap's namespaces, the unprivileged uid, the
  tmpfs inode cap, the private ``/proc``) this host provides; the sandbox reports the missing ones once at start-up.

Standard library only, plus ``pyseccomp`` when installed. No torch.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000

# Docker's default profile (moby profiles/seccomp/default.json) is the reference: its unconditional allow list,
# less what a code task never needs and what would let one job see another's state (ptrace and process_vm_*,
# io_uring, inotify/fanotify, name_to_handle_at, modify_ldt, memfd_secret, landlock). Anything else, a call
# newer than this list included, is refused with EPERM, as Docker does.
ALLOWED_SYSCALLS = (
    "accept",
    "accept4",
    "access",
    "alarm",
    "bind",
    "brk",
    "capget",
    "capset",
    "chdir",
    "chmod",
    "chown",
    "clock_getres",
    "clock_gettime",
    "clock_nanosleep",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "creat",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fallocate",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchown",
    "fchownat",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstatfs",
    "fsync",
    "ftruncate",
    "futex",
    "futex_waitv",
    "futimesat",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "geteuid",
    "getgid",
    "getgroups",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresuid",
    "getrlimit",
    "get_robust_list",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "get_thread_area",
    "gettid",
    "gettimeofday",
    "getuid",
    "getxattr",
    "ioctl",
    "io_cancel",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "ioprio_get",
    "ioprio_set",
    "io_setup",
    "io_submit",
    "kill",
    "lchown",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listxattr",
    "llistxattr",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lstat",
    "madvise",
    "membarrier",
    "memfd_create",
    "mincore",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedsend",
    "mq_unlink",
    "mremap",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "nanosleep",
    "newfstatat",
    "open",
    "openat",
    "openat2",
    "pause",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "poll",
    "ppoll",
    "pread64",
    "preadv",
    "preadv2",
    "prlimit64",
    "process_mrelease",
    "pselect6",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readahead",
    "readlink",
    "readlinkat",
    "readv",
    "recvfrom",
    "recvmmsg",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_tgsigqueueinfo",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "sendfile",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "setfsgid",
    "setfsuid",
    "setgid",
    "setgroups",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setresgid",
    "setresuid",
    "setreuid",
    "setrlimit",
    "set_robust_list",
    "setsid",
    "setsockopt",
    "set_thread_area",
    "set_tid_address",
    "setuid",
    "setxattr",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "splice",
    "stat",
    "statfs",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_settime",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_settime",
    "times",
    "tkill",
    "truncate",
    "ugetrlimit",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "waitpid",
    "write",
    "writev",
    "arch_prctl",
)
# Families a program may open a socket in, each isolated by the sandbox's network namespace (nothing behind
# INET, netlink sees only the namespace's loopback); vsock, packet and every other family are refused.
SOCKET_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
# fcntl commands allowed as they are; record locks (F_SETLK, F_SETLKW and their OFD forms) succeed without
# taking a lock, like flock(): a lock on a shared read-only file (/usr) would otherwise be seen by another job.
# Asking about locks, leases and directory notification (F_GETLK, F_NOTIFY, ...) is refused.
FCNTL_ALLOWED = (0, 1, 2, 3, 4, 8, 9, 10, 11, 15, 16, 1030, 1031, 1032, 1033, 1034)  # DUPFD .. GET_SEALS
FCNTL_LOCKS_AS_NOOPS = (6, 7, 37, 38)
CLONE_NAMESPACE_FLAGS = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080
)  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME


CLONE_THREAD = 0x00010000
PR_SET_SECCOMP = 22
FORKING_SYSCALLS = ("fork", "vfork")


@functools.lru_cache(maxsize=2)
def seccomp_program(allow_fork: bool = True) -> tuple[bytes | None, str]:
    """The filter as raw BPF (``struct sock_filter`` array) and a description, or None and why not.

    ``allow_fork=False``: threads only (``clone`` with ``CLONE_THREAD``; no ``fork``/``vfork``), for a process whose
    own children could serve as an oracle (another language's in-language tests: a forked copy could try an
    answer against the tests and report back)."""
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError) as error:  # the binding, or libseccomp itself, is missing
        return (
            None,
            f"pyseccomp / libseccomp unavailable ({error}); `pip install pyseccomp`, `apt-get install -y libseccomp2`",
        )
    rules = seccomp.SyscallFilter(defaction=seccomp.ERRNO(errno.EPERM))
    try:
        rules.set_attr(seccomp.Attr.CTL_OPTIMIZE, 2)  # a binary search over call numbers, not a 270-step list
    except (AttributeError, ValueError, RuntimeError, OSError):
        pass  # an older libseccomp: the linear filter, slower per system call, the same decisions
    allowed = 0
    for name in ALLOWED_SYSCALLS:
        if not allow_fork and name in FORKING_SYSCALLS:
            continue
        try:
            rules.add_rule(seccomp.ALLOW, name)
            allowed += 1
        except (ValueError, RuntimeError, OSError):  # a call this architecture or libseccomp does not know
            continue
    if allow_fork:
        rules.add_rule(seccomp.ALLOW, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NAMESPACE_FLAGS, 0))
    else:
        thread = CLONE_NAMESPACE_FLAGS | CLONE_THREAD
        rules.add_rule(seccomp.ALLOW, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, thread, CLONE_THREAD))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # so the C library falls back to clone, whose flags we see
    # the machine's thread count, shared and free memory: what one job sets there another would read
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "sysinfo")
    for family in SOCKET_FAMILIES:
        rules.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.EQ, family))
    rules.add_rule(seccomp.ALLOW, "socketpair", seccomp.Arg(0, seccomp.EQ, 1))
    for command in FCNTL_ALLOWED:
        rules.add_rule(seccomp.ALLOW, "fcntl", seccomp.Arg(1, seccomp.EQ, command))
    for command in FCNTL_LOCKS_AS_NOOPS:
        rules.add_rule(seccomp.ERRNO(0), "fcntl", seccomp.Arg(1, seccomp.EQ, command))
    rules.add_rule(seccomp.ERRNO(0), "flock")
    # prctl, but no filter of the program's own (PR_SET_SECCOMP; the seccomp call is refused too): a stacked filter can
    # make any later call fail, the in-language tests' exit_group(1) on a failed check among them, and a program that
    # survives its failed check can rewind and try another answer
    rules.add_rule(seccomp.ALLOW, "prctl", seccomp.Arg(0, seccomp.NE, PR_SET_SECCOMP))
    with tempfile.TemporaryFile() as handle:
        rules.export_bpf(handle)
        handle.seek(0)
        program = handle.read()
    return program, (
        f"allow list: {allowed} system calls (Docker's default profile as the reference), clone "
        f"without namespace flags, sockets of the unix/inet/inet6/netlink families; everything else refused"
    )


# --------------------------------------------------------------------------- cgroups


@dataclass(frozen=True)
class SlotLimits:
    memory_bytes: int
    processes: int
    cpus: float = 1.0


@dataclass
class Cgroup:
    """One slot's cgroup: the ``cgroup.procs`` files a process joins it through, and where it counts OOM kills."""

    directories: tuple[Path, ...]
    procs_files: tuple[Path, ...]
    oom_events: Path  # v1 memory.oom_control or v2 memory.events: "oom_kill N"


class CgroupSlots:
    """One cgroup per sandbox slot, created under the harness's own cgroup and removed at :meth:`close`."""

    def __init__(self, count: int, limits: SlotLimits, tag: str):
        self.slots: list[Cgroup] = []
        self.version = _cgroup_version()
        if self.version is None:
            raise OSError("no writable cgroup hierarchy with the memory, pids and cpu controllers (not root?)")
        try:
            for slot in range(count):
                self.slots.append(self._create(f"diffugrpo-{tag}-{slot}", limits))
        except OSError:
            self.close()
            raise

    def _create(self, name: str, limits: SlotLimits) -> Cgroup:
        if self.version == 1:
            directories = tuple(_own_cgroup_dir(controller) / name for controller in V1_CONTROLLERS)
            for directory in directories:
                directory.mkdir(exist_ok=True)
            memory, pids, cpu = directories
            _write(memory / "memory.limit_in_bytes", limits.memory_bytes)
            swap = memory / "memory.memsw.limit_in_bytes"
            if swap.exists():
                _write(swap, limits.memory_bytes)
            _write(pids / "pids.max", limits.processes)
            _write(cpu / "cpu.cfs_period_us", CPU_PERIOD_US)
            _write(cpu / "cpu.cfs_quota_us", int(CPU_PERIOD_US * limits.cpus))
            return Cgroup(directories, tuple(d / "cgroup.procs" for d in directories), memory / "memory.oom_control")
        directory = _own_cgroup_dir(None) / name
        directory.mkdir(exist_ok=True)
        _write(directory / "memory.max", limits.memory_bytes)
        if (directory / "memory.swap.max").exists():
            _write(directory / "memory.swap.max", 0)
        _write(directory / "pids.max", limits.processes)
        _write(directory / "cpu.max", f"{int(CPU_PERIOD_US * limits.cpus)} {CPU_PERIOD_US}")
        return Cgroup((directory,), (directory / "cgroup.procs",), directory / "memory.events")

    def close(self) -> None:
        for cgroup in self.slots:
            for directory in cgroup.directories:
                try:
                    directory.rmdir()
                except OSError:
                    pass  # a process still inside (it is being killed): the empty cgroup is left behind
        self.slots = []


def _write(path: Path, value) -> None:
    path.write_text(f"{value}\n")


def _own_cgroup_dir(controller: str | None) -> Path:
    """The harness's own cgroup directory for a v1 ``controller`` (or the v2 one for None)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (controller is None and controllers == "") or (controller in controllers.split(",")):
            base = CGROUP_ROOT if controller is None else CGROUP_ROOT / controller
            if controller is None and not (base / "cgroup.controllers").exists():
                base = CGROUP_ROOT / "unified"
            return base / path.lstrip("/")
    raise OSError(f"this process is in no {controller or 'v2'} cgroup")


def _cgroup_version() -> int | None:
    """1 when the v1 memory, pids and cpu controllers are writable here, 2 for a usable v2 subtree."""
    if os.geteuid() != 0:
        return None
    try:
        if all(os.access(_own_cgroup_dir(c), os.W_OK) for c in V1_CONTROLLERS):
            return 1
    except OSError:
        pass
    try:
        own = _own_cgroup_dir(None)
        enabled = (own / "cgroup.subtree_control").read_text().split()
        if {"memory", "pids", "cpu"} <= set(enabled) and os.access(own, os.W_OK):
            return 2
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------- what this host offers


@dataclass(frozen=True)
class Protection:
    name: str
    active: bool
    detail: str


PROTECTION_NAMES = (
    "namespaces",
    "seccomp",
    "cgroups",
    "tmpfs_inode_cap",
    "unprivileged_uid",
    "private_proc",
    "no_proc_files",
)
LANDLOCK_CREATE_RULESET_VERSION = 1


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none, or switched off at boot)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(444, None, 0, LANDLOCK_CREATE_RULESET_VERSION)  # landlock_create_ruleset
    return max(int(version), 0)


def host_protections(
    bwrap: str | None, is_root: bool, want_cgroups: bool, want_seccomp: bool, want_inode_cap: bool
) -> dict[str, Protection]:
    """Each protection and whether this host (and the config) gives it; the reason when it does not."""
    program, why = seccomp_program() if want_seccomp else (None, "switched off in the sandbox config")
    version = _cgroup_version() if want_cgroups else None
    cgroup_why = (
        f"cgroup v{version}: memory and processes of the whole job, one CPU each"
        if version
        else "switched off in the sandbox config"
        if not want_cgroups
        else "needs root and a writable cgroup hierarchy (memory, pids, cpu); memory and processes are "
        "limited per process only"
    )
    return {
        "namespaces": Protection(
            "namespaces",
            bwrap is not None,
            "bubblewrap: own PID, network, IPC, UTS, cgroup and mount namespaces"
            if bwrap
            else "bubblewrap missing: `apt-get install -y bubblewrap`",
        ),
        "seccomp": Protection("seccomp", program is not None, why),
        "cgroups": Protection("cgroups", version is not None, cgroup_why),
        "tmpfs_inode_cap": Protection(
            "tmpfs_inode_cap",
            bwrap is not None and is_root and want_inode_cap,
            "switched off in the sandbox config: size cap only"
            if not want_inode_cap
            else "size and file-count caps on /tmp, /dev/shm, the work dir and the launcher's scratch dir"
            if is_root
            else "needs root (mounting a tmpfs with a file-count cap): size cap only",
        ),
        "unprivileged_uid": Protection(
            "unprivileged_uid",
            is_root and bwrap is not None,
            "each slot runs jobs as its own uid, all capabilities dropped"
            if is_root
            else "not root: jobs keep your uid (inside a user namespace)",
        ),
        "private_proc": Protection(
            "private_proc",
            is_root and bwrap is not None,
            "/proc shows the sandbox's own processes only, no pseudo-terminals"
            if is_root
            else "needs root (mounting /proc with subset=pid): the machine-wide /proc files are visible",
        ),
        "no_proc_files": Protection(
            "no_proc_files",
            bwrap is not None and landlock_abi() > 0,
            "jobs open no file under /proc (Landlock): not their own memory, nor the machine-wide counters"
            if landlock_abi() > 0
            else "needs Landlock (Linux 5.13+, enabled at boot): a job can read its own memory through "
            "/proc/self/mem, and without root the machine-wide /proc files",
        ),
    }


def bwrap_path() -> str | None:
    return shutil.which("bwrap")
