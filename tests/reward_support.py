"""Helpers shared by the sandbox and reward tests (not a test module)."""

from __future__ import annotations

import os

from diffugrpo_plugin.sandbox.config import SandboxConfig
from diffugrpo_plugin.sandbox.host import Sandbox

# Far from real accounts and distinct per test process, so leftover checks see only this run's jobs.
TEST_UID_BASE = 3_000_000 + (os.getpid() % 10_000) * 256


def tight_sandbox(**overrides) -> Sandbox:
    """A sandbox with small limits so the adversarial tests stay fast (for tests marked ``sandbox``)."""
    settings = dict(
        timeout_s=1.0,
        memory_mb=256,
        max_processes=16,
        max_file_size_mb=1.0,
        max_output_bytes=20_000,
        max_concurrency=2,
        uid_base=TEST_UID_BASE,
        startup_timeout_s=20.0,
    )
    settings.update(overrides)
    return Sandbox(SandboxConfig(**settings))


def processes_with_uids(low: int, high: int) -> list[int]:
    """Pids of live (non-zombie) processes whose real uid lies in [low, high)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        uid = int(fields.get("Uid", "-1").split()[0])
        if low <= uid < high and not fields.get("State", "").strip().startswith("Z"):
            found.append(int(name))
    return found


def bwrap_children() -> list[int]:
    """bwrap processes whose parent is this test process (a sandbox left running)."""
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/comm") as comm:
                command = comm.read().strip()
        except OSError:
            continue
        if int(fields[1]) == me and command == "bwrap":
            found.append(int(name))
    return found
