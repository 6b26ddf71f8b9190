"""A new user's first run, timed from an empty cache: README command 1, then ``diffugrpo generate``.

Clones this repository's HEAD into a scratch directory and, with an empty ``DIFFUGRPO_HOME``, times the three
parts of README command 1 one after the other:

* **install**: the command's system-package check and its two ``pip install`` calls, in the clone (with the
  dependencies already on the machine, as on a second clone; a bare machine adds their download);
* **build**: everything the job takes from the cache before it trains (the default model, the generated tasks);
* **job**: ``python -m verl.trainer.main algorithm=coupled_grpo``, whose ``learning:`` line is printed.

Then, from another empty cache, ``diffugrpo generate --prompt ...``. The clone's ``pip install -e`` points the
installed package at the clone: it is pointed back at this checkout at the end (not timed).

    python benchmarks/first_run.py            # about 5 minutes on 2 cores
    python benchmarks/first_run.py --skip-job # install, build and generate only
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
BUILD = (
    "from diffugrpo_plugin.data import default_data_paths; "
    "from diffugrpo_plugin.training.warm_start import default_warm_model_path; "
    "default_warm_model_path(); default_data_paths()"
)


def readme_command(number: int) -> str:
    """README command ``number`` (1 or 2), as the README's "Two commands" block writes it."""
    lines = (REPOSITORY / "README.md").read_text().replace("\\\n", "").splitlines()  # bash's line continuations
    marker = f"# {number}. "
    start = next(i for i, line in enumerate(lines) if line.startswith(marker))
    return re.sub(r" {2,}", " ", next(line for line in lines[start + 1 :] if line and not line.startswith("#")))


def install_part(command: str) -> str:
    """README command 1 up to (not including) the job it starts."""
    job = " && python -m verl.trainer.main"
    if job not in command:
        raise SystemExit(f"README command 1 no longer ends with '{job.strip(' &')}': update {__file__}")
    return command[: command.index(job)]


def timed(label: str, command: list[str] | str, cwd: Path, env: dict[str, str], log: Path) -> tuple[float, str]:
    started = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, shell=isinstance(command, str)
        )
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{label} failed (exit {done.returncode}); its output: {log}")
    return seconds, log.read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-job", action="store_true", help="time install, build and generate only")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (its logs) and print it")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="diffugrpo-first-run-"))
    clone, logs = scratch / "diffugrpo", scratch / "logs"
    logs.mkdir()
    subprocess.run(["git", "clone", "-q", str(REPOSITORY), str(clone)], check=True)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "DIFFUGRPO_MBPP_DIR")}
    rows: list[tuple[str, float]] = []
    learning = ""
    try:
        env["DIFFUGRPO_HOME"] = str(scratch / "home-job")
        seconds, _ = timed("install", install_part(readme_command(1)), clone, env, logs / "install.log")
        rows.append(("install (dependencies present)", seconds))
        seconds, _ = timed("build", [sys.executable, "-c", BUILD], clone, env, logs / "build.log")
        rows.append(("build (model + tasks, empty cache)", seconds))
        if not args.skip_job:
            job = [sys.executable, "-m", "verl.trainer.main", "algorithm=coupled_grpo"]
            seconds, output = timed("job", job, clone, env, logs / "job.log")
            rows.append(("job", seconds))
            learning = next((line for line in output.splitlines() if line.startswith("learning:")), "")
        env["DIFFUGRPO_HOME"] = str(scratch / "home-generate")
        generate = ["diffugrpo", "generate", "--prompt", "Write a function add_two(x) that returns x + 2."]
        seconds, _ = timed("generate", generate, clone, env, logs / "generate.log")
        rows.append(("generate --prompt, empty cache", seconds))
    finally:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "-e", str(REPOSITORY)], check=False, capture_output=True
        )
    command_1 = sum(seconds for label, seconds in rows if not label.startswith("generate"))
    print(f"first run from an empty cache, {os.cpu_count()} cores, commit {head()}")
    print(f"{'part':40} {'seconds':>8}")
    for label, seconds in rows:
        print(f"{label:40} {seconds:8.0f}")
    if not args.skip_job:
        print(f"{'README command 1 (install + build + job)':40} {command_1:8.0f}")
        print(learning or "the job printed no learning: line")
    print(f"logs: {logs}" if args.keep else "")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(scratch)], check=False)
    return 0


def head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True
    ).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
