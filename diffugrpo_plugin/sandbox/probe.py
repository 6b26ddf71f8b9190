"""What the host's interpreter and CPU offer the sandbox: where the interpreter's files are (bound read-only
into the sandbox), and whether the hardware instruction counter can time jobs."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from diffugrpo_plugin.sandbox.config import SandboxError

LAUNCHER_PATH = Path(__file__).with_name("sandbox_launcher.py")


@dataclass(frozen=True)
class InterpreterLayout:
    """Where an interpreter lives: the prefixes to bind read-only and its site-packages dirs."""

    prefixes: tuple[str, ...]
    site_dirs: tuple[str, ...]


_LAYOUT_PROBE = (
    "import json, sys, sysconfig; paths = sysconfig.get_paths(); "
    "print(json.dumps([[sys.prefix, sys.base_prefix], [paths['purelib'], paths['platlib']]]))"
)


def interpreter_layout(executable: str) -> InterpreterLayout:
    """Asks ``executable`` (isolated mode, so no user site) where it lives."""
    try:
        probe = subprocess.run(
            [executable, "-I", "-c", _LAYOUT_PROBE], capture_output=True, text=True, timeout=60, check=True
        )
        prefixes, site_dirs = json.loads(probe.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise SandboxError(
            f"cannot use {executable!r} as the sandbox's Python interpreter (sandbox option python_executable): {exc}"
        ) from exc
    return InterpreterLayout(
        prefixes=tuple(sorted({os.path.realpath(prefix) for prefix in prefixes})),
        site_dirs=tuple(dict.fromkeys(site_dirs)),
    )


@functools.lru_cache(maxsize=1)
def instruction_counter_available() -> bool:
    """Whether this machine offers the user-space instruction counter the launcher would open
    (virtual machines often do not); asked once, so sandboxes skip the attempt when it cannot work."""
    # Loaded by path: this module stays usable on its own, outside the diffugrpo package.
    spec = importlib.util.spec_from_file_location("diffugrpo_sandbox_launcher", LAUNCHER_PATH)
    sandbox_launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sandbox_launcher)
    try:
        fd = sandbox_launcher.open_instruction_counter(sandbox_launcher.load_libc())
    except OSError:
        return False
    if fd is None:
        return False
    os.close(fd)
    return True
