"""The sandbox that runs untrusted Python: the host side (:mod:`.host`, :mod:`.limits`) and the modules that
run inside it (``sandbox_launcher``, ``sandbox_wire``, ``sandbox_program``, ``sandbox_judge``). Those keep
their ``sandbox_`` prefix because inside the sandbox they are top-level modules, beside the program's own.
Imports no torch.

``from diffugrpo_plugin.sandbox import X`` still works for the names the module ``diffugrpo_plugin.sandbox`` had
before 0.2.0, when it became :mod:`.host`; they are loaded when first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM_HOST = (
    "UNSAFE_ENV_VAR",
    "FALLBACK_CONFIG_KEY",
    "LAUNCHER_PATH",
    "SANDBOX_DIR",
    "IN_SANDBOX_MODULES",
    "JUDGE_UID_OFFSET",
    "WORK_DIR",
    "SCRATCH_DIR",
    "PER_JOB_OVERHEAD_S",
    "LINE_COUNT_SLOWDOWN",
    "MESSAGE_CHARS",
    "REPORT_MAX_BYTES",
    "REPORT_KEYS",
    "REPORT_STATUSES",
    "EXCEPTION_NAME",
    "MARSHAL_VERSION",
    "INSTALL_HINT",
    "SANDBOX_ENV",
    "SandboxUnavailable",
    "SandboxError",
    "SandboxConfig",
    "Judged",
    "Job",
    "JobResult",
    "unsafe_fallback_requested",
    "InterpreterLayout",
    "interpreter_layout",
    "instruction_counter_available",
    "Sandbox",
    "judge_spec",
    "escaped",
    "job_report",
    "judge_verdict",
    "job_result",
    "shared_sandbox",
)


def __getattr__(name: str) -> Any:
    if name in _FROM_HOST:
        return getattr(importlib.import_module(f"{__name__}.host"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
