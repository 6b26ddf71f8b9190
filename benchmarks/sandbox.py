"""Tests/s of the sandboxed test runner against the seeds' way of running tests, and what the judge and each protection cost.

Baseline (as the seeds' example does it): one plain ``python -c "<code>\\n<test>"`` subprocess
per test, one after another, pass = exit code 0; no isolation beyond a timeout. Ours: every
completion's tests in one bubblewrap sandbox, each test in its own forked, limited,
unprivileged process, its verdict decided by the judge (a second sandboxed process that runs the
test and asks the program for values), with every protection this host gives (seccomp, a cgroup
per slot, capped tmpfs), completions running 1, ``cores`` and ``2 x cores`` sandboxes at once
(``--concurrency`` to choose). At ``cores`` at once, the same runner with one protection switched
off shows that protection's cost, and "judge off" (each assert run inside the program's own
process, pass = no exception: what the judge replaces, and not trustworthy) shows the judge's. The batch is MBPP
problems (test split, 3 asserts each): their reference solutions plus broken variants, so
verdicts include failures and errors; the script asserts that every method gives the same
verdict for every test. Times are medians over ``--repeats`` runs of the whole batch, measured
in the same process on the same machine, the methods taking turns within each repeat.

    python benchmarks/sandbox.py --mbpp path/to/mbpp.jsonl   # 32 completions x 3 tests, 3 repeats
    python benchmarks/sandbox.py --completions 64 --repeats 5 --concurrency 1 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from diffugrpo_plugin.rewards.code_tests import TestSpec, tests_from_row
from diffugrpo_plugin.rewards.test_runs import run_tests_many
from diffugrpo_plugin.sandbox.config import SandboxConfig
from diffugrpo_plugin.sandbox.host import Sandbox
from diffugrpo_plugin.sandbox.jobs import Job

TIMEOUT_S = 10.0
PROTECTION_OPTIONS = {"seccomp": "seccomp", "cgroups": "cgroups", "tmpfs inode cap": "inode_cap"}


def batch(count: int, mbpp: str) -> list[tuple[str, TestSpec]]:
    """``count`` (code, tests) pairs: MBPP reference solutions, every third one broken, every fifth
    one returning a wrong value from the function the tests call."""
    with open(mbpp) as handle:
        rows = [json.loads(line) for line in handle]
    rows = [row for row in rows if 11 <= row["task_id"] <= 510 and not row["test_setup_code"]]
    pairs = []
    for index, row in enumerate(rows[:count]):
        code = row["code"]
        if index % 3 == 2:
            code += "\nraise RuntimeError('broken at import')\n"
        elif index % 5 == 4:
            name = row["test_list"][0].split("assert", 1)[1].strip().lstrip("(").split("(")[0].strip()
            code += f"\n{name} = lambda *args: None\n"
        pairs.append((code, tests_from_row(row)))
    return pairs


def baseline(pairs: list[tuple[str, TestSpec]]) -> list[list[bool]]:
    verdicts = []
    for code, spec in pairs:
        row = []
        for test in spec.asserts:
            try:
                done = subprocess.run(
                    [sys.executable, "-c", f"{code}\n{test}\n"], capture_output=True, timeout=TIMEOUT_S
                )
                row.append(done.returncode == 0)
            except subprocess.TimeoutExpired:
                row.append(False)
        verdicts.append(row)
    return verdicts


def sandboxed(pairs: list[tuple[str, TestSpec]], box: Sandbox) -> list[list[bool]]:
    results = run_tests_many(pairs, box, cache=False)
    return [[outcome.passed for outcome in outcomes] for outcomes in results]


def judge_off(pairs: list[tuple[str, TestSpec]], box: Sandbox) -> list[list[bool]]:
    """Each assert appended to the program and run in its process: the judge's cost is the difference."""

    def one(pair):
        code, spec = pair
        results = box.run([Job(f"{code}\n{test}\n", timeout_s=TIMEOUT_S) for test in spec.asserts])
        return [result.status == "ok" for result in results]

    with ThreadPoolExecutor(box.config.max_concurrency) as pool:
        return list(pool.map(one, pairs))


def interleaved_medians(methods: dict, repeats: int) -> dict[str, tuple[float, list[list[bool]]]]:
    """Every repeat's seconds and the verdicts of each method; the methods take turns within every repeat
    (in rotating order), so a change in the machine's load hits all of them alike."""
    durations: dict[str, list[float]] = {label: [] for label in methods}
    verdicts: dict[str, list[list[bool]]] = {}
    labels = list(methods)
    for repeat in range(repeats):
        for label in labels[repeat % len(labels) :] + labels[: repeat % len(labels)]:
            started = time.perf_counter()
            verdicts[label] = methods[label]()
            durations[label].append(time.perf_counter() - started)
    return {label: (durations[label], verdicts[label]) for label in labels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mbpp_dir = os.environ.get("DIFFUGRPO_MBPP_DIR")
    parser.add_argument(
        "--mbpp",
        default=os.path.join(mbpp_dir, "mbpp.jsonl") if mbpp_dir else None,
        help="MBPP's mbpp.jsonl (default: $DIFFUGRPO_MBPP_DIR/mbpp.jsonl)",
    )
    parser.add_argument("--completions", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    cores = os.cpu_count() or 2
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, cores, 2 * cores])
    args = parser.parse_args()
    args.concurrency = sorted(set(args.concurrency) | {cores})  # the protections' costs are taken there

    if not args.mbpp or not os.path.isfile(args.mbpp):
        parser.error(
            f"no MBPP file {args.mbpp or ''}: pass --mbpp path/to/mbpp.jsonl or set DIFFUGRPO_MBPP_DIR "
            f"to the folder holding it"
        )
    pairs = batch(args.completions, args.mbpp)
    tests = sum(len(spec) for _, spec in pairs)
    methods = {"baseline: plain subprocess per test, sequential": lambda: baseline(pairs)}
    for concurrency in args.concurrency:
        box = Sandbox(SandboxConfig(timeout_s=TIMEOUT_S, max_concurrency=concurrency))
        methods[f"sandbox, every protection, {concurrency} at a time"] = lambda box=box: sandboxed(pairs, box)
    for protection, option in PROTECTION_OPTIONS.items():
        box = Sandbox(
            SandboxConfig(timeout_s=TIMEOUT_S, max_concurrency=cores, require=("namespaces",), **{option: False})
        )
        methods[f"sandbox without {protection}, {cores} at a time"] = lambda box=box: sandboxed(pairs, box)
    box = Sandbox(SandboxConfig(timeout_s=TIMEOUT_S, max_concurrency=cores))
    methods[f"sandbox without the judge, {cores} at a time"] = lambda box=box: judge_off(pairs, box)
    measured = interleaved_medians(methods, args.repeats)
    reference = measured[next(iter(methods))][1]
    for label, (_, verdicts) in measured.items():
        assert verdicts == reference, f"{label}: verdicts differ from the baseline's"
    rows = [(label, statistics.median(times), min(times), max(times)) for label, (times, _) in measured.items()]
    passed = sum(map(sum, reference))
    print(
        f"{len(pairs)} completions x 3 tests = {tests} tests ({passed} pass), {os.cpu_count()} cores, "
        f"median (range) of {args.repeats}; verdicts identical across methods\n"
    )
    print("| method | isolated | median s (range) | tests/s | vs baseline (range) |")
    print("|---|---|---|---|---|")
    base = measured[next(iter(methods))][0]
    for label, seconds, low, high in rows:
        isolated = "no" if label.startswith("baseline") else "yes (bwrap)"
        ratios = [b / t for b, t in zip(base, measured[label][0])]  # paired within a repeat
        print(
            f"| {label} | {isolated} | {seconds:.2f} ({low:.2f}-{high:.2f}) | {tests / seconds:.1f} | "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )
    full = statistics.median(measured[f"sandbox, every protection, {cores} at a time"][0])
    print(f"\nWhat the judge and each protection cost at {cores} at a time (time with it / time without it):\n")
    print("| part | with s | without s | cost |")
    print("|---|---|---|---|")
    for part in ["the judge", *PROTECTION_OPTIONS]:
        without = statistics.median(measured[f"sandbox without {part}, {cores} at a time"][0])
        print(f"| {part} | {full:.2f} | {without:.2f} | {full / without:.2f}x |")


if __name__ == "__main__":
    main()
