"""How much each cost the ``efficiency`` reward can use moves when nothing about the program did.

The same three correct programs (a task's sieve reference, a trial-division candidate ~50x slower, and a
candidate that sorts in C) run ``--repeats`` times through the sandbox, first on an idle host, then with
``--load`` busy processes competing for the cores. Each run is measured by CPU time, executed lines (a
second, line-counted run) and peak memory, and the trial-division candidate gets the efficiency reward's
time score against the reference of the same repeat by each cost. The table gives per cost and program the
median, range and spread ((max - min) / median); then the candidate's time score by CPU time, by lines,
and as ``cost=lines`` gives it (lines kept within ``CPU_SCORE_BAND`` of CPU time's); the summary compares
CPU time's spread with the line count's, and prints how far the CPU-time score strayed from its median,
which the band is meant to cover.

    python benchmarks/efficiency_spread.py                 # 7 repeats, 2 x cores busy processes
    python benchmarks/efficiency_spread.py --repeats 3 --load 0
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from diffugrpo_plugin.rewards.code_tests import TestSpec, tests_from_row
from diffugrpo_plugin.rewards.test_runs import run_tests
from diffugrpo_plugin.sandbox.config import SandboxConfig
from diffugrpo_plugin.sandbox.host import Sandbox
from diffugrpo_plugin.sandbox.probe import instruction_counter_available
from reward_plugins.efficiency import CPU_SCORE_BAND, Runs, cost_ratio, relative_time

TESTS = ["assert count_primes(30000) == 3245", "assert count_primes(20000) == 2262", "assert count_primes(2) == 0"]
PROGRAMS = {
    "reference (sieve)": (
        "def count_primes(n):\n    if n < 3:\n        return 0\n    sieve = bytearray([1]) * n\n"
        "    sieve[0] = sieve[1] = 0\n    for i in range(2, int(n ** 0.5) + 1):\n        if sieve[i]:\n"
        "            sieve[i * i::i] = bytearray(len(range(i * i, n, i)))\n    return sum(sieve)\n"
    ),
    "trial division": (
        "def count_primes(n):\n    count = 0\n    for k in range(2, n):\n        d = 2\n"
        "        while d * d <= k:\n            if k % d == 0:\n                break\n            d += 1\n"
        "        else:\n            count += 1\n    return count\n"
    ),
    "sorts in C": (
        "def count_primes(n):\n    flags = sorted(range(n * 20))\n    sieve = [True] * n\n    total = 0\n"
        "    for i in range(2, n):\n        if sieve[i]:\n            total += 1\n"
        "            for j in range(i * i, n, i):\n                sieve[j] = False\n    return total\n"
    ),
}
MEASURES = ("cpu_s", "lines", "memory_kb")


def measure_once(code: str, spec: TestSpec, box: Sandbox) -> tuple[list, list]:
    plain = run_tests(code, spec, box, cache=False)
    counted = run_tests(code, spec, box, cache=False, count_lines=True)
    assert all(o.passed for o in plain + counted), [o.detail for o in plain + counted]
    return plain, counted


def readings(plain: list, counted: list) -> dict[str, float]:
    return {
        "cpu_s": sum(o.cpu_s for o in plain),
        "lines": sum(o.lines for o in counted),
        "memory_kb": max(o.memory_kb for o in plain),
    }


def spread(values: list[float]) -> float:
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


def start_load(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def run(repeats: int, load: int) -> dict:
    box = Sandbox(SandboxConfig(timeout_s=20.0, max_concurrency=1))
    spec = tests_from_row({"test_list": TESTS})
    results: dict = {}
    for condition, busy in (("idle", 0), (f"{load} busy", load)) if load else (("idle", 0),):
        hogs = start_load(busy)
        try:
            rows = {name: [] for name in PROGRAMS}
            scores = {"cpu": [], "lines": [], "reward": []}
            for _ in range(repeats):
                runs = {name: Runs(*measure_once(code, spec, box)) for name, code in PROGRAMS.items()}
                for name, one in runs.items():
                    rows[name].append(readings(one.plain, one.counted))
                candidate, reference = runs["trial division"], runs["reference (sieve)"]
                scores["cpu"].append(cost_ratio(candidate, reference, "cpu"))
                scores["lines"].append(cost_ratio(candidate, reference, "lines"))
                scores["reward"].append(relative_time(candidate, reference, "lines"))
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        results[condition] = {"rows": rows, "scores": scores}
    return results


def report(results: dict) -> None:
    print(f"hardware instruction counter on this host: {instruction_counter_available()}")
    print(f"{'condition':<10} {'program':<18} {'measure':<10} {'median':>12} {'min':>12} {'max':>12} {'spread':>8}")
    for condition, result in results.items():
        for name, rows in result["rows"].items():
            for measure in MEASURES:
                values = [row[measure] for row in rows]
                print(
                    f"{condition:<10} {name:<18} {measure:<10} {statistics.median(values):>12.6g} "
                    f"{min(values):>12.6g} {max(values):>12.6g} {spread(values):>7.1%}"
                )
    print(
        "\ntime score of the trial-division candidate against the reference, by cost (reward: the lines score "
        "kept within the band of the CPU-time score, as cost=lines scores it):"
    )
    print(f"{'condition':<10} {'cost':<7} {'median':>8} {'min':>8} {'max':>8} {'range':>8}")
    for condition, result in results.items():
        for cost, values in result["scores"].items():
            print(
                f"{condition:<10} {cost:<7} {statistics.median(values):>8.4f} {min(values):>8.4f} "
                f"{max(values):>8.4f} {max(values) - min(values):>8.4f}"
            )
    print("\nspread of CPU time over spread of executed lines (same runs; lines spread 0 shows as inf):")
    for condition, result in results.items():
        for name, rows in result["rows"].items():
            cpu, lines = spread([r["cpu_s"] for r in rows]), spread([r["lines"] for r in rows])
            ratio = cpu / lines if lines else float("inf")
            print(f"  {condition:<10} {name:<18} cpu {cpu:6.1%}  lines {lines:6.1%}  ratio {ratio:.3g}")
    widest = max(
        max(abs(score - statistics.median(r["scores"]["cpu"])) for score in r["scores"]["cpu"])
        for r in results.values()
    )
    print(f"\nwidest CPU-time score deviation from its median: {widest:.4f} (CPU_SCORE_BAND = {CPU_SCORE_BAND})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--load", type=int, default=2 * (os.cpu_count() or 1), help="busy processes (0: idle only)")
    args = parser.parse_args(argv)
    report(run(args.repeats, args.load))


if __name__ == "__main__":
    main()
