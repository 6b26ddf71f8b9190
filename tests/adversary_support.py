"""What the adversary rounds' tests share (#58): scoring a policy's completions through ``diffugrpo rewards score``
run in this process, and the prime-counting task the auxiliary rewards are measured on."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

from diffugrpo_plugin.cli import rewards as rewards_cli
from reward_support import TEST_UID_BASE

MULTIPL_E = Path(__file__).parent / "fixtures" / "multipl_e.jsonl"


def fenced(code: str, language: str = "python") -> str:
    return f"```{language}\n{code}\n```\n"


def score(tmp_path, rows: list[dict], *options: str) -> dict[str, dict]:
    """Each row's output of ``diffugrpo rewards score`` (the CLI in this process), by its task_id."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    parser = argparse.ArgumentParser(prog="diffugrpo")
    rewards_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["rewards", "score", *options, str(path)])
    original = rewards_cli.rewards_config
    out = io.StringIO()
    try:
        rewards_cli.rewards_config = lambda a: {
            **original(a),
            "sandbox": {**original(a)["sandbox"], "uid_base": TEST_UID_BASE},
        }
        with contextlib.redirect_stdout(out):
            assert args.func(args) == 0
    finally:
        rewards_cli.rewards_config = original
    records = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    return {record["task_id"]: record for record in records}


SIEVE = """def count_primes(n):
    sieve = [True] * max(n, 2)
    sieve[0] = sieve[1] = False
    for k in range(2, int(n ** 0.5) + 1):
        if sieve[k]:
            sieve[k * k::k] = [False] * len(sieve[k * k::k])
    return sum(sieve[:n]) if n > 2 else 0
"""
PRIME_TESTS = ["assert count_primes(10) == 4", "assert count_primes(2) == 0", "assert count_primes(3000) == 430"]
# how much an auxiliary reward may gain over the honest program
MAINTAINABILITY_MARGIN = 0.05
