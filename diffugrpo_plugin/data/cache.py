"""The machine-wide cache of artefacts built in code (tiny models, their tokenizer, generated data).

The cache lives in ``$DIFFUGRPO_HOME`` (default ``~/.cache/diffugrpo``). :func:`build_once` lets
many Ray workers ask for the same artefact at once: one builds it under a file lock into a
staging directory and publishes it with an atomic rename, the others wait and reuse it.

A leaf: standard library and ``filelock`` only, so the data, model and SFT layers can all use it.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock


def diffugrpo_home() -> Path:
    """Root of our cache: ``$DIFFUGRPO_HOME`` or ``~/.cache/diffugrpo``."""
    return Path(os.environ.get("DIFFUGRPO_HOME") or "~/.cache/diffugrpo").expanduser()


def build_once(target: str | os.PathLike, build: Callable[[Path], Any]) -> Path:
    """Make sure directory ``target`` exists, calling ``build(staging_dir)`` at most once per machine.

    ``build`` fills a fresh staging directory next to ``target``; it is renamed to ``target``
    only when ``build`` returns, so readers never see a half-built directory, and a failed
    build leaves nothing behind. Concurrent callers (threads or processes) serialise on
    ``{target}.lock``; those that waited find ``target`` built and return it. A build killed
    outright (``kill -9``, a lost node) cannot clean up: its staging directory is removed by the
    next build of the same target, which holds the lock, so no build of it can still be running.
    """
    target = Path(target)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.lock"):
        if target.is_dir():
            return target
        for stale in target.parent.glob(f".{glob.escape(target.name)}.building-*"):
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
        try:
            build(staging)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return target
