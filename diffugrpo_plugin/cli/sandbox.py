"""``diffugrpo sandbox check``: which sandbox protections this machine gives, and a short self-test.

Lists each protection (namespaces, seccomp, cgroups, tmpfs inode cap, unprivileged uid) with
whether it is active here and why not, then judges a few programs through the same path the
``code`` reward uses: a correct solution must pass; programs that forge equality, forge their
report, create a user namespace, use the kernel keyring, fork without end or write outside must
all fail. Then, for each other language (C++, Java, JavaScript), whether its toolchain is installed and a
small program in it passes its stdin/stdout test; a missing toolchain is reported with the package to
install (rows in that language cannot be judged) but does not fail the check. Exit code 0 only when every
protection the config requires is active and the self-test holds; 1 otherwise (2: bad arguments).
"""

from __future__ import annotations

import argparse
import os
import sys

SELF_TEST_TESTS = ["assert solve(3) == 9", "assert solve(-2) == 4"]
SELF_TEST_PROGRAMS = {
    "a correct solution passes": ("def solve(x):\n    return x * x\n", True),
    "an object equal to everything fails": (
        "class Any:\n    def __eq__(self, other):\n        return True\ndef solve(x):\n    return Any()\n",
        False,
    ),
    "a forged report fails": ('import os\nos.write(3, b\'{"status": "ok"}\')\nos._exit(0)\n', False),
    "a user namespace is refused": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def solve(x):\n    return x * x if libc.unshare(0x10000000) == 0 else None\n",
        False,
    ),
    "the kernel keyring is refused": (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "ADD_KEY = {'x86_64': 248, 'aarch64': 217}.get(os.uname().machine, -1)\n"
        "def solve(x):\n    ok = libc.syscall(ADD_KEY, b'user', b'selftest', b'1', 1, -4) >= 0\n"
        "    return x * x if ok else None\n",
        False,
    ),
    "a fork bomb fails": ("import os\ndef solve(x):\n    while True:\n        os.fork()\n", False),
    "writing outside the sandbox fails": (
        "def solve(x):\n    open('/usr/diffugrpo-escape', 'w').write('x')\n    return x * x\n",
        False,
    ),
}
LANGUAGE_SELF_TEST = {"inputs": ["3\n"], "outputs": ["9\n"]}
LANGUAGE_PROGRAMS = {
    "cpp": "#include <iostream>\nint main() { long x; std::cin >> x; std::cout << x * x << std::endl; }",
    "java": "import java.util.*;\npublic class Main {\n    public static void main(String[] args) {\n"
    "        long x = new Scanner(System.in).nextLong();\n        System.out.println(x * x);\n    }\n}",
    "javascript": "const x = Number(require('fs').readFileSync(0, 'utf8'));\nconsole.log(x * x);",
}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "sandbox",
        help="the code sandbox: `check` lists its protections on this machine and self-tests it",
        description="Inspect the sandbox that runs model-written code.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="list each protection and whether it is active here; run a short self-test",
        description=__doc__.split("\n\n", 1)[1],
    )
    check.add_argument(
        "--require",
        nargs="*",
        metavar="PROTECTION",
        default=None,
        help="protections that must be active (default: the sandbox config's own, "
        "namespaces and seccomp); names: namespaces seccomp cgroups tmpfs_inode_cap "
        "unprivileged_uid private_proc no_proc_files",
    )
    check.add_argument("--timeout-s", type=float, default=5.0, help="CPU seconds per self-test program")
    check.set_defaults(func=run_check)
    return parser


def run_check(args: argparse.Namespace) -> int:
    from diffugrpo_plugin.rewards.code_tests import tests_from_row
    from diffugrpo_plugin.rewards.test_runs import run_tests
    from diffugrpo_plugin.sandbox.config import SandboxConfig, SandboxError, SandboxUnavailable
    from diffugrpo_plugin.sandbox.host import Sandbox
    from diffugrpo_plugin.sandbox.limits import bwrap_path, host_protections

    options = {"timeout_s": args.timeout_s, "max_processes": 16}
    if args.require is not None:
        options["require"] = args.require
    try:
        config = SandboxConfig.from_mapping(options)
    except ValueError as error:
        print(f"diffugrpo sandbox check: error: {error}", file=sys.stderr)
        return 2
    protections = host_protections(bwrap_path(), os.geteuid() == 0, config.cgroups, config.seccomp, config.inode_cap)
    width = max(map(len, protections))
    print("protection".ljust(width), " active  required  detail")
    for name, protection in protections.items():
        print(
            name.ljust(width),
            " yes    " if protection.active else " NO     ",
            " yes     " if name in config.require else " no      ",
            protection.detail,
        )
    missing = [name for name in config.require if not protections[name].active]
    if missing:
        print(f"\nrequired but not active: {', '.join(missing)}: the sandbox will refuse to run code here")
        return 1
    try:
        box = Sandbox(config)
    except (SandboxUnavailable, SandboxError) as error:
        print(f"\nthe sandbox cannot start: {error}")
        return 1
    print("\nself-test:")
    spec = tests_from_row({"test_cases": SELF_TEST_TESTS})
    failures = 0
    for label, (program, should_pass) in SELF_TEST_PROGRAMS.items():
        try:
            outcomes = run_tests(program, spec, box, cache=False)
        except SandboxError as error:
            print(f"  FAILED  {label}: the sandbox itself failed: {error}")
            failures += 1
            continue
        passed = all(outcome.passed for outcome in outcomes)
        held = passed == should_pass
        failures += not held
        print(f"  {'ok    ' if held else 'FAILED'}  {label} ({outcomes[0].outcome.value})")
    failures += _check_languages(box)
    print("\nisolation is as configured" if not failures else f"\n{failures} self-test(s) failed")
    return 0 if not failures else 1


def _check_languages(box) -> int:
    """Each other language: installed or not (with the package), and a small program in it through the sandbox."""
    from diffugrpo_plugin.rewards.code_tests import tests_from_row
    from diffugrpo_plugin.rewards.test_runs import run_tests
    from diffugrpo_plugin.sandbox.config import SandboxError
    from diffugrpo_plugin.sandbox.languages import LANGUAGES

    print("\nother languages (rows with a `language` column):")
    failures = 0
    for name, program in LANGUAGE_PROGRAMS.items():
        missing = LANGUAGES[name].missing_tools()
        if missing:
            print(
                f"  -       {name}: not installed ({', '.join(missing)}): apt-get install -y {LANGUAGES[name].package}"
            )
            continue
        try:
            outcomes = run_tests(program, tests_from_row({**LANGUAGE_SELF_TEST, "language": name}), box, cache=False)
            verdict = outcomes[0].outcome.value
        except SandboxError as error:
            verdict = f"the sandbox itself failed: {error}"
        held = verdict == "PASSED"
        failures += not held
        print(f"  {'ok    ' if held else 'FAILED'}  {name}: a program reading stdin passes ({verdict})")
    return failures
