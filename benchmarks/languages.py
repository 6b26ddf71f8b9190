"""What judging one completion costs in each language, sandboxed, against the same toolchain run directly.

For each language, one completion of a small stdin/stdout task (read two numbers, print their sum) with
``--tests`` tests is judged through the ``code`` reward's path (``run_tests``: compile once in the sandbox, then a
fresh sandboxed process per test) and, as the baseline, by the same compiler and runtime with the same flags
run directly in a temporary folder (no sandbox, no limits: the cost of the language itself). Python's line is
the same task through the same path. The programs are ours, not generated: the baseline never runs
model-written code. Medians and ranges over ``--repeats`` runs, the methods taking turns within each repeat.

    python benchmarks/languages.py                    # 5 repeats, 5 tests
    python benchmarks/languages.py --repeats 9 --languages cpp java
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from diffugrpo_plugin.rewards.code_tests import tests_from_row
from diffugrpo_plugin.rewards.harnesses import program_harness
from diffugrpo_plugin.rewards.test_runs import run_tests
from diffugrpo_plugin.sandbox.config import SandboxConfig
from diffugrpo_plugin.sandbox.host import Sandbox
from diffugrpo_plugin.sandbox.languages import LANGUAGES

PROGRAMS = {
    "python": "a, b = map(int, input().split())\nprint(a + b)\n",
    "cpp": "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }\n",
    "java": "import java.util.*;\npublic class Main {\n    public static void main(String[] args) {\n"
    "        Scanner in = new Scanner(System.in);\n        System.out.println(in.nextLong() + in.nextLong());\n    }\n}\n",
    "javascript": "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
    "console.log(a + b);\n",
}


def stdio_row(language: str, tests: int) -> dict:
    pairs = [(f"{n} {2 * n}\n", f"{3 * n}\n") for n in range(1, tests + 1)]
    return {"language": language, "inputs": [i for i, _ in pairs], "outputs": [o for _, o in pairs]}


def sandboxed(language: str, row: dict, box: Sandbox) -> float:
    started = time.perf_counter()
    outcomes = run_tests(PROGRAMS[language], tests_from_row(row), box, cache=False)
    elapsed = time.perf_counter() - started
    if not all(outcome.passed for outcome in outcomes):
        raise SystemExit(f"{language}: the benchmark's own program failed in the sandbox: {outcomes[0]}")
    return elapsed


def direct(language: str, row: dict) -> float:
    """The same compile and runs with no sandbox (our own program only)."""
    spec = tests_from_row(row)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        if language == "python":
            commands, compile_command = [[sys.executable, "-c", PROGRAMS[language]]], None
        else:
            harness = program_harness(LANGUAGES[language], "", PROGRAMS[language])
            for name, content in harness.files:
                with open(os.path.join(folder, name), "w") as handle:
                    handle.write(content)
            compile_command, commands = harness.compile, [list(harness.run)]
        if compile_command:
            subprocess.run(compile_command, cwd=folder, check=True, capture_output=True)
        for stdin, expected in spec.stdio:
            result = subprocess.run(commands[0], cwd=folder, input=stdin, capture_output=True, text=True, check=True)
            if result.stdout != expected:
                raise SystemExit(f"{language}: the direct run printed {result.stdout!r}, expected {expected!r}")
    return time.perf_counter() - started


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tests", type=int, default=5, help="stdin/stdout tests per completion")
    parser.add_argument("--languages", nargs="*", default=list(PROGRAMS), choices=list(PROGRAMS))
    args = parser.parse_args(argv)
    missing = {name: LANGUAGES[name].missing_tools() for name in args.languages if LANGUAGES[name].missing_tools()}
    if missing:
        raise SystemExit(f"missing toolchains: {missing}; apt-get install -y g++ default-jdk-headless nodejs")
    box = Sandbox(SandboxConfig(max_concurrency=1, timeout_s=10.0))
    for language in args.languages:  # warm-up: page cache, the sandbox's calibration
        sandboxed(language, stdio_row(language, 1), box)
    times: dict[str, dict[str, list[float]]] = {name: {"sandboxed": [], "direct": []} for name in args.languages}
    for _ in range(args.repeats):
        for language in args.languages:
            row = stdio_row(language, args.tests)
            times[language]["sandboxed"].append(sandboxed(language, row, box))
            times[language]["direct"].append(direct(language, row))
    print(f"one completion, {args.tests} stdin/stdout tests; medians (ranges) of {args.repeats} repeats, seconds\n")
    header = "| language | sandboxed s | direct s | sandboxed / direct (range) | vs python sandboxed |"
    print(header)
    print("|---|---|---|---|---|")
    python = statistics.median(times["python"]["sandboxed"]) if "python" in times else None
    for language, measured in times.items():
        ratios = [s / d for s, d in zip(measured["sandboxed"], measured["direct"])]
        versus = f"{statistics.median(measured['sandboxed']) / python:.1f}x" if python else "-"
        print(
            f"| {language} | {spread(measured['sandboxed'])} | {spread(measured['direct'])} | "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {versus} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
