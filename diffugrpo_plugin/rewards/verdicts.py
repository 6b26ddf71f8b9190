"""Parsing untrusted Python source on the harness's side (the code rewards, the judge's set-up).

Verdicts themselves are decided in the sandbox, by the judge (``sandbox_judge``): this module only
keeps the one piece of parsing the harness shares. No torch.
"""

from __future__ import annotations

import ast
import threading

_PARSE_LOCK = threading.Lock()


def parse_python(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse``, one thread at a time. CPython 3.11 keeps the AST converter's recursion depth in state
    shared by the interpreter's threads, so two rewards parsing at once in the test-runner's thread pool can
    raise ``SystemError: AST constructor recursion depth mismatch`` (seen in a training run: the ``code``
    reward then scores None for the step); 3.12 fixed it."""
    with _PARSE_LOCK:
        return ast.parse(source, mode=mode)
