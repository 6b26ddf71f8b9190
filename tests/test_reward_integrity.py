"""Reward integrity against programs written to fool it: each attack scores 0 (not 1, not None),
the harness keeps going, and no completion changes another's score.

The attacks a policy has been seen to find: objects that equal everything, forged harness
messages and exit codes, kernel features that outlive a job (user namespaces, the keyring),
resource use spread over processes or files, CPU hogs that slow their neighbours, programs that
crash a quality metric, work hidden in children nobody waits for, and huge completions.
"""

from __future__ import annotations

import pytest

from diffugrpo_plugin.rewards import code_tests as code_execution
from diffugrpo_plugin.rewards.judging import (
    MAX_COMPLETION_CHARS,
    code_outcomes,
    format_verdict,
    offered_code,
    syntax_problem,
)
from diffugrpo_plugin.rewards.scoring import value_of
from diffugrpo_plugin.rewards.spec import RewardSpec
from diffugrpo_plugin.rewards.test_runs import Outcome, run_tests
from diffugrpo_plugin.tools.evaluation import Completion, EvalProblem, judge_completions, summarize
from reward_plugins.code import code_reward
from reward_plugins.efficiency import CPU_SCORE_BAND, efficiency_reward
from reward_support import tight_sandbox

TESTS = ["assert solve(3) == 9", "assert solve(4) == 16"]
CORRECT = "def solve(x):\n    return x * x\n"


def fenced(code: str) -> str:
    return f"```python\n{code}```\n"


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(timeout_s=2.0, max_concurrency=5)


def scores(box, programs: list[str], tests=TESTS) -> list[float | None]:
    judged = code_reward([fenced(program) for program in programs], test_cases=[tests] * len(programs), sandbox=box)
    return [value_of(item) for item in judged]


# --------------------------------------------------------------------------- forged verdicts

FORGERIES = {
    "object equal to everything": "class Any:\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = object.__hash__\ndef solve(x):\n    return Any()\n",
    "int subclass equal to everything": "class Int(int):\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = int.__hash__\ndef solve(x):\n    return Int(0)\n",
    "class that lies about itself": "class Fake:\n    __class__ = int\n    def __eq__(self, other):\n"
    "        return True\ndef solve(x):\n    return Fake()\n",
    "comparison patched in builtins": "import builtins\nclass Int(int):\n    __eq__ = lambda self, other: True\n"
    "builtins.int = Int\ndef solve(x):\n    return Int(1)\n",
    "writes to every descriptor": (
        "import os, json\nok = json.dumps({'status': 'ok', 'probes': [{'value': ['int', '9']}]})\n"
        "frame = b'\\x00' * 8 + b'ok'\n"
        "for fd in [*range(0, 64), *[int(n) for n in os.listdir('/proc/self/fd')]]:\n"
        "    for payload in (ok.encode(), frame, b'setup_error'):\n        try:\n"
        "            os.write(fd, payload)\n        except OSError:\n            pass\n"
        "def solve(x):\n    return None\n"
    ),
    "forged report then exit": ('import os\nos.write(3, b\'{"status": "ok"}\')\nos._exit(0)\n'),
    "forged exit code with a non-ASCII digit": (
        'import os\nos.write(3, b\'{"status": "exit", "exit_code": "\\xd9\\xa3"}\')\nos._exit(0)\n'
    ),
    "SystemExit with a non-ASCII digit": "raise SystemExit('\\u0663')\n",
    "setup error claimed on stderr": "import sys\nsys.stderr.write('setup_error: PermissionError')\n"
    "raise SystemExit(70)\n",
    "a malformed number in its answer": (  # once crashed the decoder: `rewards score` stopped, training scored None
        'import os\ndef solve(x):\n    message = b\'["answer",["ok",["i","9x"]]]\'\n'
        "    os.write(6, len(message).to_bytes(8, 'little') + message)\n    return 9\n"
    ),
}


@pytest.mark.sandbox
@pytest.mark.parametrize("name", list(FORGERIES))
def test_forged_verdicts_score_zero_and_evaluation_goes_on(box, name):
    assert scores(box, [FORGERIES[name], CORRECT]) == [0.0, 1.0]
    problem = EvalProblem("sq", "toy", ({"role": "user", "content": "square"},), {"test_cases": TESTS})
    (judged,) = judge_completions(
        [problem], {"sq": [Completion(fenced(FORGERIES[name]), 0), Completion(fenced(CORRECT), 1)]}, sandbox=box
    )
    assert judged.passed == [False, True]


@pytest.mark.sandbox
def test_a_subclass_travels_as_the_builtin_value_it_holds(box):
    """Read through int's own methods: the value inside, not what its __eq__ claims."""
    honest_subclass = (
        "class Int(int):\n    __eq__ = lambda self, other: True\n"
        "    __hash__ = int.__hash__\ndef solve(x):\n    return Int(x * x)\n"
    )
    assert scores(box, [honest_subclass]) == [1.0]


SPY = """import gc, glob, os, re
def _texts():
    for item in gc.get_objects():
        values = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else ()
        for value in values:
            if isinstance(value, str):
                yield value
            elif isinstance(value, bytes):
                yield value.decode("latin-1")
    for path in glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/environ") + glob.glob("/proc/*/mem"):
        try:
            yield open(path, "rb").read(1 << 20).decode("latin-1")
        except OSError:
            pass
    for fd in range(64):
        try:
            yield os.pread(fd, 1 << 20, 0).decode("latin-1")
        except OSError:
            pass
def solve(x):
    asked = "solve(" + str(x) + ")"  # this call's own test, as it is written in the row
    for text in _texts():
        found = re.search(re.escape(asked) + r" == ([0-9]+)", text)
        if found:
            return int(found.group(1))
    return -1
"""


@pytest.mark.sandbox
def test_no_expected_value_reaches_the_programs_process(box):
    """Neither this test's expected value nor another test's: the program's process holds only its own calls
    (the launcher it was forked from never held the tests, the judge runs as another uid and is not dumpable)."""
    spec = code_execution.tests_from_row({"test_cases": ["assert solve(3) == 1234567", "assert solve(4) == 7654321"]})
    outcomes = run_tests(SPY, spec, box, cache=False)
    assert [outcome.outcome for outcome in outcomes] == [Outcome.FAILED, Outcome.FAILED], outcomes
    assert all("got" not in outcome.detail for outcome in outcomes)
    assert all("1234567" not in job.source + job.preamble for job in spec.jobs(SPY))
    honest = code_execution.tests_from_row({"test_cases": ["assert solve(3) == -1"]})
    assert run_tests(SPY, honest, box, cache=False)[0].passed  # it found nothing ...
    planted = code_execution.tests_from_row(
        {"test_cases": ["assert solve(3) == 5"], "test_imports": ["note = 'solve(' + '3) == 5'"]}
    )
    assert run_tests(SPY, planted, box, cache=False)[0].passed  # ... though it finds what its process does hold
    in_setup = code_execution.tests_from_row(
        {"test_cases": ["assert solve(3) == 5"], "test_setup_code": "note = 'solve(' + '3) == 5'"}
    )
    assert not run_tests(SPY, in_setup, box, cache=False)[0].passed  # the setup code runs in the judge alone


# --------------------------------------------------------------------------- kernel features and resources

import os  # noqa: E402

SYSCALL = {
    "x86_64": {"clone": 56, "add_key": 248, "keyctl": 250},
    "aarch64": {"clone": 220, "add_key": 217, "keyctl": 219},
}.get(os.uname().machine)
if SYSCALL is None:
    pytest.fail(
        f"the kernel-feature probes know the system call numbers of x86_64 and aarch64, not {os.uname().machine}",
        pytrace=False,
    )

CAPABILITY_PROBES = {
    "user namespace": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "def solve(x):\n    return x * x if libc.unshare(0x10000000) == 0 else -1\n",
    "user namespace through clone": (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"def solve(x):\n    pid = libc.syscall({SYSCALL['clone']}, 0x10000000 | 17, 0, 0, 0, 0)\n"
        "    if pid == 0:\n        os._exit(0)\n    return x * x if pid > 0 else -1\n"
    ),
    "the kernel keyring": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"def solve(x):\n    key = libc.syscall({SYSCALL['add_key']}, b'user', b'diffugrpo', b'secret', 6, -4)\n"
        "    return x * x if key >= 0 else -1\n"
    ),
    "150k files": (
        "import os\ndef solve(x):\n    try:\n        for i in range(150_000):\n"
        "            open(f'/work/f{i}', 'w').close()\n    except OSError:\n        return -1\n    return x * x\n"
    ),
    "memory spread over processes": (
        "import os\ndef solve(x):\n    pids = []\n    r, w = os.pipe()\n    for _ in range(4):\n"
        "        pid = os.fork()\n        if pid == 0:\n            try:\n"
        "                hoard = bytearray(200 << 20)\n                hoard[::4096] = b'x' * len(hoard[::4096])\n"
        "                os.write(w, b'1')\n                import time\n                time.sleep(5)\n"
        "            finally:\n                os._exit(0)\n        pids.append(pid)\n"
        "    held = b''\n    os.close(w)\n    while len(held) < 4:\n        chunk = os.read(r, 4)\n"
        "        if not chunk:\n            break\n        held += chunk\n    return x * x if len(held) == 4 else -1\n"
    ),
}


@pytest.mark.sandbox
@pytest.mark.parametrize("name", list(CAPABILITY_PROBES))
def test_a_program_that_needs_a_forbidden_capability_scores_zero(box, name):
    """Each passes its tests only if the capability works: 800 MB held at once by a job whose
    memory limit is 256 MB, a namespace with mount rights, a keyring entry a later job could read."""
    if name == "memory spread over processes" and not box.protections["cgroups"].active:
        pytest.fail("this host gives no cgroups (run as root): the whole-job memory limit cannot be tested")
    assert scores(box, [CAPABILITY_PROBES[name], CORRECT]) == [0.0, 1.0]


@pytest.mark.sandbox
def test_the_keyring_is_not_shared_between_completions(box):
    store = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"libc.syscall({SYSCALL['add_key']}, b'user', b'shared', b'9', 1, -4)\ndef solve(x):\n    return x * x\n"
    )
    read = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"def solve(x):\n    return x * x if libc.syscall({SYSCALL['keyctl']}, 10, -4, b'user', b'shared', 0) >= 0 else -1\n"
    )
    assert scores(box, [store]) == [1.0]
    assert scores(box, [read]) == [0.0]


# --------------------------------------------------------------------------- one completion, one score

CPU_HEAVY = (
    "def solve(x):\n    total = 0\n    for i in range(4_000_000):\n        total += i % 7\n"
    "    return x * x + 0 * total\n"
)
CPU_HOG = (
    "import os, time\ndef solve(x):\n    for _ in range(14):\n        if os.fork() == 0:\n"
    "            os.setsid()\n            while True:\n                pass\n"
    "    while True:\n        pass\n"
)


@pytest.mark.sandbox
def test_a_cpu_hog_does_not_turn_correct_neighbours_into_timeouts(box):
    """Five at once on a small machine: the hog's spinners escape its process group but not its
    cgroup, and the verdict is CPU time, so four correct CPU-heavy programs keep 1.0."""
    heavy = [CPU_HEAVY + f"# variant {index}\n" for index in range(4)]  # distinct: no cached run
    assert scores(box, [CPU_HOG, *heavy]) == [0.0, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.sandbox
def test_one_pathological_completion_does_not_change_another_rows_maintainability(box):
    pathological = "def solve(x):\n    return x * x" + " + 0" * 1000 + "\n"  # correct; too deep for radon
    honest = fenced("def solve(x):\n    square = x * x\n    return square\n")
    spec = RewardSpec.from_config({"reward_funcs": ["maintainability"], "sandbox": {"timeout_s": 5.0}})
    alone = spec.score([honest], {"test_cases": [TESTS]})
    together = spec.score([fenced(pathological), honest], {"test_cases": [TESTS, TESTS]})
    assert together[1].values == alone[0].values and alone[0].values["maintainability"] > 0
    assert together[0].values["maintainability"] is None and "maintainability" in together[0].errors


@pytest.mark.sandbox
def test_efficiency_counts_the_cpu_of_children_nobody_waits_for(box):
    """The work runs in a child that hands back its answer and is never waited for."""
    hidden = (
        "import os\ndef solve(x):\n    r, w = os.pipe()\n    if os.fork() == 0:\n        total = 0\n"
        "        for i in range(8_000_000):\n            total += i % 7\n"
        "        os.write(w, str(x * x + 0 * total).encode())\n        os._exit(0)\n"
        "    os.close(w)\n    return int(os.read(r, 64))\n"
    )
    direct = "def solve(x):\n    return x * x\n"
    spec = code_execution.tests_from_row({"test_cases": TESTS})
    hidden_cpu = sum(o.cpu_s for o in run_tests(hidden, spec, box, cache=False))
    direct_cpu = sum(o.cpu_s for o in run_tests(direct, spec, box, cache=False))
    assert hidden_cpu > 0.2 > direct_cpu
    judged = efficiency_reward(
        [fenced(hidden), fenced(direct)], test_cases=[TESTS, TESTS], reference_solution=[direct, direct], sandbox=box
    )
    hidden_score, direct_score = map(value_of, judged)
    assert hidden_score < 0.8 < direct_score


@pytest.mark.sandbox
def test_a_judged_programs_line_count_is_its_own_work_not_the_judges():
    """Answering the judge (encoding values, the wire) runs in the program's process but is not counted."""
    spec = code_execution.tests_from_row({"test_cases": TESTS})
    outcomes = run_tests(CORRECT, spec, tight_sandbox(timeout_s=2.0), cache=False, count_lines=True)
    assert [o.lines for o in outcomes] == [2, 2]  # the `def` line, then `return x * x` once per test


@pytest.mark.sandbox
def test_a_forged_line_count_earns_no_more_than_the_cpu_time_score_plus_its_band(box):
    """The program zeroes the counter it can reach (``sys.gettrace().__self__``), after a 4M-step loop."""
    forger = (
        "import sys\ndef solve(x):\n    total = 0\n    for i in range(4_000_000):\n        total += i\n"
        "    if sys.gettrace():\n        sys.gettrace().__self__.lines = 0\n    return x * x\n"
    )
    [score] = efficiency_reward(
        [fenced(forger)], test_cases=[TESTS], reference_solution=[CORRECT], sandbox=box, cost="lines", time_weight=1.0
    )
    spec = code_execution.tests_from_row({"test_cases": TESTS, "reference_solution": CORRECT})
    # the runs it was scored on: efficiency's own, where the program may start no process
    plain, reference = run_tests(forger, spec, box, no_fork=True), run_tests(CORRECT, spec, box, no_fork=True)
    by_cpu = min(1.0, (sum(o.cpu_s for o in reference) + 0.01) / (sum(o.cpu_s for o in plain) + 0.01))
    assert by_cpu < 0.5  # the loop is real work
    assert score.value == pytest.approx(by_cpu + CPU_SCORE_BAND)  # not the 1.0 its count of 1 line would give


# --------------------------------------------------------------------------- size caps


@pytest.mark.sandbox
def test_a_huge_completion_is_never_parsed():
    huge = fenced("x = 1\n" * (MAX_COMPLETION_CHARS // 6 + 1))
    assert format_verdict(huge)[0] == 0.0 and offered_code(huge, require_format=False).code is None
    [judged] = code_outcomes([huge], {"test_cases": [TESTS]})
    assert judged.code is None and judged.outcomes is None and judged.reason.kind == "too_long"


# --------------------------------------------------------------------------- what evaluation reports


@pytest.mark.sandbox
def test_the_evaluation_summary_counts_per_source_the_tests_that_rest_on_the_programs_comparison(box):
    point = (
        "class P:\n    def __init__(self, x):\n        self.x = x\n"
        "    def __eq__(self, other):\n        return self.x == other.x\n"
        "def make(x):\n    return P(x)\n"
    )
    problems = [
        EvalProblem("a", "values", ({"role": "user", "content": "x"},), {"test_cases": TESTS}),
        EvalProblem(
            "b",
            "objects",
            ({"role": "user", "content": "x"},),
            {"test_cases": ["assert make(1) == P(1)", "assert make(1).x == 1"]},
        ),
        EvalProblem("c", "stdio", ({"role": "user", "content": "x"},), {"inputs": ["3\n"], "outputs": ["9\n"]}),
    ]
    completions = {
        "a": [Completion(fenced(CORRECT), 0)],
        "b": [Completion(fenced(point), 0)],
        "c": [Completion(fenced("print(int(input()) ** 2)\n"), 0)],
    }
    summary = summarize(judge_completions(problems, completions, sandbox=box))
    counts = {
        source: (group["num_test_runs_program_compared"], group["num_test_runs"])
        for source, group in summary["by_data_source"].items()
    }
    assert counts == {"values": (0, 2), "objects": (1, 2), "stdio": (0, 1)}
    assert summary["pass@1"] == 1.0


# --------------------------------------------------------------------------- one parser at a time


def test_rewards_parse_python_one_thread_at_a_time(monkeypatch):
    """CPython 3.11's AST converter shares its recursion depth between threads (a training run's ``code`` reward
    crashed with 'AST constructor recursion depth mismatch'), so every parse in the reward path goes through
    one lock: rewards parsing in the test runner's threads never overlap inside ``ast.parse``."""
    import ast
    import threading
    import time

    from diffugrpo_plugin.rewards import task_code

    inside, most = [0], [0]
    real_parse = ast.parse

    def slow_parse(*args, **kwargs):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.01)
        inside[0] -= 1
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(task_code.ast, "parse", slow_parse)
    code = "def solve(x):\n    return x * x\n"
    calls = [
        lambda: task_code.parses(code),
        lambda: task_code.defined_names(code),
        lambda: syntax_problem(code),
        lambda: task_code.parse_python("solve(1) == 1", mode="eval"),
    ]
    threads = [threading.Thread(target=call) for call in calls * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 1
