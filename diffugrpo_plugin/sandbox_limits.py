"""Kernel-level limits on a whole sandbox job: a seccomp filter, a cgroup per sandbox slot, what the host offers.

* **seccomp** (:func:`seccomp_program`): a BPF program, built with libseccomp through ``pyseccomp``,
  that the launcher installs in each job's process just before the job's code runs (so the launcher
  itself can still open the instruction counter). It denies, with ``EPERM``, what Docker's default
  profile denies and a code task never needs: new namespaces (``unshare``, ``setns``, ``clone`` with
  a namespace flag; ``clone3`` answers ``ENOSYS`` so the C library falls back to ``clone``), mounts,
  the kernel keyring, ``ptrace`` and ``process_vm_*``, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, module and kexec loading, io_uring, ``personality`` changes and the like.
* **cgroups** (:class:`CgroupSlots`): one cgroup per concurrency slot under the harness's own cgroup
  (v1 controllers or v2), limiting the memory and the number of processes of everything a job
  runs together, and its CPU to one core with an equal share, so escaping a process group escapes
  nothing and a job's spinners slow only that job. Needs root (or a delegated v2 subtree).
* :func:`protections` says which of these (and bubblewrap's namespaces, the unprivileged uid, the
  tmpfs inode cap) this host provides; the sandbox reports the missing ones once at start-up.

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

DENIED_SYSCALLS = (
    # new namespaces and mounts: no user namespace (with its mount rights) inside the sandbox
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    # the kernel keyring, shared by every process of a uid
    "keyctl", "add_key", "request_key",
    # reading or steering other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # kernel attack surface a program never needs
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
    "swapoff", "acct", "quotactl", "syslog", "lookup_dcookie", "open_by_handle_at", "name_to_handle_at",
    "fanotify_init", "iopl", "ioperm", "vhangup", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "nfsservctl", "personality", "mbind", "migrate_pages", "move_pages", "set_mempolicy",
)
CLONE_NAMESPACE_FLAGS = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
                         | 0x40000000 | 0x00000080)  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME


@functools.lru_cache(maxsize=1)
def seccomp_program() -> tuple[bytes | None, str]:
    """The filter as raw BPF (``struct sock_filter`` array) and a description, or None and why not."""
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError) as error:  # the binding, or libseccomp itself, is missing
        return None, f"pyseccomp / libseccomp unavailable ({error}); `pip install pyseccomp`, " \
                     f"`apt-get install -y libseccomp2`"
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        try:
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (ValueError, RuntimeError, OSError):  # a call this architecture or libseccomp does not know
            continue
    for bit in _bits(CLONE_NAMESPACE_FLAGS):
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, bit, bit))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as handle:
        rules.export_bpf(handle)
        handle.seek(0)
        program = handle.read()
    return program, f"{len(DENIED_SYSCALLS)} system calls denied, namespace flags of clone refused"


def _bits(mask: int) -> list[int]:
    return [1 << shift for shift in range(mask.bit_length()) if mask & (1 << shift)]


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


PROTECTION_NAMES = ("namespaces", "seccomp", "cgroups", "tmpfs_inode_cap", "unprivileged_uid")


def host_protections(bwrap: str | None, is_root: bool, want_cgroups: bool, want_seccomp: bool,
                     want_inode_cap: bool) -> dict[str, Protection]:
    """Each protection and whether this host (and the config) gives it; the reason when it does not."""
    program, why = seccomp_program() if want_seccomp else (None, "switched off in the sandbox config")
    version = _cgroup_version() if want_cgroups else None
    cgroup_why = (f"cgroup v{version}: memory and processes of the whole job, one CPU each" if version else
                  "switched off in the sandbox config" if not want_cgroups else
                  "needs root and a writable cgroup hierarchy (memory, pids, cpu); memory and processes are "
                  "limited per process only")
    return {
        "namespaces": Protection("namespaces", bwrap is not None,
                                 "bubblewrap: own PID, network, IPC, UTS, cgroup and mount namespaces" if bwrap else
                                 "bubblewrap missing: `apt-get install -y bubblewrap`"),
        "seccomp": Protection("seccomp", program is not None, why),
        "cgroups": Protection("cgroups", version is not None, cgroup_why),
        "tmpfs_inode_cap": Protection("tmpfs_inode_cap", bwrap is not None and is_root and want_inode_cap,
                                      "switched off in the sandbox config: size cap only" if not want_inode_cap else
                                      "size and file-count caps on /tmp and the work dir" if is_root else
                                      "needs root (mounting a tmpfs with a file-count cap): size cap only"),
        "unprivileged_uid": Protection("unprivileged_uid", is_root and bwrap is not None,
                                       "each slot runs jobs as its own uid, all capabilities dropped" if is_root else
                                       "not root: jobs keep your uid (inside a user namespace)"),
    }


def bwrap_path() -> str | None:
    return shutil.which("bwrap")
