"""The sandbox's settings (``diffugrpo.sandbox`` in config), its two errors, and the opt-in that runs jobs
without it."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from diffugrpo_plugin.sandbox.limits import PROTECTION_NAMES

UNSAFE_ENV_VAR = "DIFFUGRPO_UNSAFE_NO_SANDBOX"
FALLBACK_CONFIG_KEY = "allow_unsandboxed_fallback_i_understand_the_risk"


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and options of one :class:`Sandbox`; every field can come from a config mapping."""

    timeout_s: float = 5.0  # CPU seconds per job (a test), every process of it counted
    wall_timeout_factor: float = 3.0  # wall-clock backstop per job: this times timeout_s (sleeping programs)
    memory_mb: int = 1024  # address space per process; with cgroups, resident memory of the whole job
    max_processes: int = 64  # per job's uid, threads included (sized for threaded solutions, see docs)
    max_file_size_mb: float = 16.0  # any single file the job writes
    max_output_bytes: int = 8 << 20  # captured stdout per job (a stdin/stdout answer of a few MB fits)
    max_open_files: int = 64
    compile_timeout_s: float = 10.0  # CPU seconds to compile one program in a compiled language (languages.py)
    judge_memory_mb: int = 1024  # address space of the judge process (decoding and comparing the program's values)
    max_concurrency: int = max(1, os.cpu_count() or 1)  # sandboxes running at once in this process
    tmpfs_mb: int = 64  # size of each of /tmp and /work inside the sandbox (memory-backed)
    max_files: int = 4096  # files and directories each of /tmp and /work may hold (tmpfs inodes)
    startup_timeout_s: float = 20.0  # slack for starting the sandbox, added to the whole-run deadline
    python_executable: str | None = None  # defaults to the harness's own interpreter
    site_packages: bool = True  # whether jobs can import the interpreter's installed packages
    count_instructions: bool = True  # where the CPU and kernel offer a user-space counter
    extra_ro_binds: tuple[str, ...] = ()  # more host paths visible read-only inside
    uid_base: int | None = None  # root mode: jobs run as uid_base + slot (default derived from the pid)
    seccomp: bool = True  # the seccomp allow list (limits.ALLOWED_SYSCALLS)
    cgroups: bool = True  # a cgroup per slot where the host allows (root)
    inode_cap: bool = True  # the file-count cap on /tmp and /work
    require: tuple[str, ...] = ("namespaces", "seccomp")  # protections without which the sandbox will not start
    allow_unsandboxed_fallback_i_understand_the_risk: bool = False

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> "SandboxConfig":
        """Builds a config from a plain mapping, naming any unknown key or bad value."""
        mapping = dict(mapping or {})
        known = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(mapping) - set(known))
        if unknown:
            raise ValueError(f"unknown sandbox option(s) {unknown}; known options: {sorted(known)}")
        return cls(**{name: _coerce(name, value, getattr(cls, name)) for name, value in mapping.items()})


def _coerce(name: str, value: Any, default: Any) -> Any:
    """One sandbox option, checked against the type of its default."""
    if name == "extra_ro_binds":
        return tuple(str(path) for path in (value or ()))
    if name == "require":
        unknown = sorted(set(map(str, value or ())) - set(PROTECTION_NAMES))
        if unknown:
            raise ValueError(
                f"sandbox option require names unknown protection(s) {unknown}; known: {list(PROTECTION_NAMES)}"
            )
        return tuple(str(item) for item in (value or ()))
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"sandbox option {name} must be true or false, got {value!r}")
        return value
    if not isinstance(default, (int, float)) and name != "uid_base":
        return value
    if value is None and name == "uid_base":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"sandbox option {name} must be a positive number, got {value!r}")
    return int(value) if isinstance(default, int) or name == "uid_base" else float(value)


def unsafe_fallback_requested(config: SandboxConfig) -> bool:
    return config.allow_unsandboxed_fallback_i_understand_the_risk or os.environ.get(UNSAFE_ENV_VAR) == "1"


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here, and no unsafe fallback was allowed."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the job): a harness problem, never scored as the job's fault."""
