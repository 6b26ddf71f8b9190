"""The sandbox that runs untrusted Python. The host side: :mod:`.host` (the sandbox, launching its jobs; its threat
model is the module docstring), :mod:`.config` (settings and errors), :mod:`.jobs` (a job, its result, parsing the
untrusted reports), :mod:`.probe` (what the interpreter and CPU offer), :mod:`.limits` (seccomp, cgroups, the host's
protections). The modules that run inside it (``sandbox_launcher``, ``sandbox_wire``, ``sandbox_program``, ``sandbox_judge``). Those keep
their ``sandbox_`` prefix because inside the sandbox they are top-level modules, beside the program's own.
Imports no torch.

``from diffugrpo_plugin.sandbox import X`` still works for the names the module ``diffugrpo_plugin.sandbox`` had
before it became a package (now in :mod:`.host`, :mod:`.config`, :mod:`.jobs`, :mod:`.probe`); they are
loaded when first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

_OLD_NAMES = {  # the names the module diffugrpo_plugin.sandbox had -> the module that holds each now
    "SANDBOX_DIR": "host",
    "IN_SANDBOX_MODULES": "host",
    "JUDGE_UID_OFFSET": "host",
    "WORK_DIR": "host",
    "SCRATCH_DIR": "host",
    "PER_JOB_OVERHEAD_S": "host",
    "LINE_COUNT_SLOWDOWN": "host",
    "MARSHAL_VERSION": "host",
    "INSTALL_HINT": "host",
    "SANDBOX_ENV": "host",
    "Sandbox": "host",
    "judge_spec": "host",
    "shared_sandbox": "host",
    "UNSAFE_ENV_VAR": "config",
    "FALLBACK_CONFIG_KEY": "config",
    "SandboxUnavailable": "config",
    "SandboxError": "config",
    "SandboxConfig": "config",
    "unsafe_fallback_requested": "config",
    "MESSAGE_CHARS": "jobs",
    "REPORT_MAX_BYTES": "jobs",
    "REPORT_KEYS": "jobs",
    "REPORT_STATUSES": "jobs",
    "EXCEPTION_NAME": "jobs",
    "Judged": "jobs",
    "Job": "jobs",
    "JobResult": "jobs",
    "escaped": "jobs",
    "job_report": "jobs",
    "judge_verdict": "jobs",
    "job_result": "jobs",
    "LAUNCHER_PATH": "probe",
    "InterpreterLayout": "probe",
    "interpreter_layout": "probe",
    "instruction_counter_available": "probe",
}


def __getattr__(name: str) -> Any:
    if name in _OLD_NAMES:
        return getattr(importlib.import_module(f"{__name__}.{_OLD_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
