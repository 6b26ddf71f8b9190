"""Auxiliary rewards a policy cannot raise without getting better: for each, a program written to raise the reward
without improving the program gains less than a stated margin over the honest one (the margins are in
docs/guides/rewards.md), and an honest better program still gains."""

from __future__ import annotations

import pytest

from diffugrpo_plugin.rewards.scoring import value_of
from reward_plugins.efficiency import efficiency_reward
from reward_support import tight_sandbox

TESTS = ["assert solve(300000) == sum(range(300000))", "assert solve(200000) == sum(range(200000))"]
REFERENCE = "def solve(n):\n    return n * (n - 1) // 2\n"
# the honest program builds a list of n values: about 12 MiB above the interpreter
HONEST = "def solve(n):\n    values = list(range(n))\n    return sum(values)\n"
# the same work in a child process nobody waits for: the launcher's peak memory is the main process's
FORKED = (
    "import os\ndef solve(n):\n    r, w = os.pipe()\n    if os.fork() == 0:\n        values = list(range(n))\n"
    "        os.write(w, str(sum(values)).encode())\n        os._exit(0)\n    os.close(w)\n"
    "    return int(os.read(r, 64))\n"
)
POOLED = (
    "import multiprocessing\ndef work(n):\n    return sum(list(range(n)))\n"
    "def solve(n):\n    with multiprocessing.get_context('fork').Pool(1) as pool:\n        return pool.apply(work, (n,))\n"
)
SPAWNED = (
    "import subprocess, sys\ndef solve(n):\n    code = f'print(sum(list(range({n}))))'\n"
    "    return int(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout)\n"
)
THREADED = (
    "import threading\ndef solve(n):\n    out = []\n    worker = threading.Thread(target=lambda: out.append(sum(list(range(n)))))\n"
    "    worker.start()\n    worker.join()\n    return out[0]\n"
)
EFFICIENCY_MARGIN = 0.0  # a program that starts a process scores 0: it gains nothing over the honest one


def fenced(code: str) -> str:
    return f"```python\n{code}```\n"


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(timeout_s=5.0, memory_mb=512)


@pytest.mark.sandbox
@pytest.mark.parametrize("cost", ["cpu", "lines"])
def test_efficiency_refuses_work_moved_into_another_process(box, cost):
    programs = [HONEST, FORKED, POOLED, SPAWNED, THREADED, REFERENCE]
    scored = efficiency_reward(
        [fenced(program) for program in programs],
        test_cases=[TESTS] * len(programs),
        reference_solution=[REFERENCE] * len(programs),
        sandbox=box,
        cost=cost,
    )
    honest, forked, pooled, spawned, threaded, better = map(value_of, scored)
    assert 0.0 < honest < 0.5  # 12 MiB against the reference's ~0.7
    for name, value, item in (("fork", forked, scored[1]), ("pool", pooled, scored[2]), ("spawn", spawned, scored[3])):
        assert value - honest <= EFFICIENCY_MARGIN, name
        assert (value, item.reason.kind) == (0.0, "forks"), name
    assert threaded == pytest.approx(honest, abs=0.15)  # threads are one process: measured, allowed
    assert better > honest + 0.3  # the honest better program still gains


# --------------------------------------------------------------------------- maintainability

SIGN_TESTS = ["assert sign(5) == 1", "assert sign(-2) == -1", "assert sign(0) == 0"]
THREE_IFS = (
    "def sign(x):\n    if x > 0:\n        return 1\n    if x < 0:\n        return -1\n"
    "    if x == 0:\n        return 0\n    return None\n"
)
SIMPLE_SIGN = "def sign(x):\n    return (x > 0) - (x < 0)\n"
PADDING = "".join(f'\n\ndef helper_{index}():\n    """Helper {index}."""\n    return {index}\n' for index in range(12))
# a dead one-line def before each branch: lizard, reading the code as written, counts the branch after a one-line
# def in that def (adversary round 8: the worst function's complexity 7 -> 3, +0.18)
ONE_LINERS = THREE_IFS.replace("\n    if", "\n    def _unused(): return 0\n    if")
COMMENTED = "# sign of x\n" + THREE_IFS.replace("\n    if", "  # a branch\n    if") + "# well documented\n" * 10
MAINTAINABILITY_MARGIN = 0.0  # padding, comments or layout never raise it


@pytest.mark.sandbox
def test_maintainability_is_not_raised_by_padding(box):
    """Against a reference whose worst function has complexity 2 (``THREE_IFS`` has 4)."""
    from reward_plugins.maintainability import maintainability_reward

    reference = "def sign(x):\n    if x == 0:\n        return 0\n    return 1 if x > 0 else -1\n"
    programs = [
        THREE_IFS,
        THREE_IFS + PADDING,
        ONE_LINERS,
        COMMENTED,
        THREE_IFS.replace("\n    ", "\n        "),
        SIMPLE_SIGN,
    ]
    honest, padded, one_liners, commented, reindented, better = map(
        value_of,
        maintainability_reward(
            [fenced(program) for program in programs],
            sandbox=box,
            test_cases=[SIGN_TESTS] * len(programs),
            reference_solution=[reference] * len(programs),
        ),
    )
    assert honest < 1.0
    assert padded - honest <= MAINTAINABILITY_MARGIN
    assert one_liners - honest <= MAINTAINABILITY_MARGIN
    assert commented == pytest.approx(honest) and reindented == pytest.approx(honest)
    assert better > honest + 0.1  # the honest simpler program still gains (0.82 -> 1.0)


# --------------------------------------------------------------------------- comments

MAX_LEN = (
    "def max_len(words):\n    best = 0\n    for word in words:\n        best = max(best, len(word))\n    return best\n"
)
MAX_LEN_TESTS = ["assert max_len(['a', 'abc']) == 3", "assert max_len([]) == 0"]
GENUINE = (
    'def max_len(words):\n    """Length of the longest word; zero for an empty list."""\n'
    "    best = 0  # an empty list has no longer word\n    for word in words:\n"
    "        best = max(best, len(word))\n    return best\n"
)
RESTATED = (
    'def max_len(words):\n    """Max len words."""\n    best = 0  # best\n    for word in words:  # word in words\n'
    "        best = max(best, len(word))  # best max best len word\n    return best  # return best\n"
)
COMMENTS_MARGIN = 0.0  # comments that restate identifiers, added to genuine ones, gain nothing


@pytest.mark.sandbox
def test_comments_reward_what_comments_say_beyond_the_names_and_only_correct_code(box):
    from reward_plugins.comments import comments_reward

    wrong = GENUINE.replace("    return best\n", "    return best - 1\n")
    padded = GENUINE.replace("    return best\n", "    return best  # return best\n").replace(
        "    for word in words:\n", "    for word in words:  # word in words\n"
    )
    programs = [MAX_LEN, RESTATED, GENUINE, padded, wrong]
    uncommented, restated, genuine, genuine_padded, wrong_score = map(
        value_of,
        comments_reward([fenced(program) for program in programs], test_cases=[MAX_LEN_TESTS] * 5, sandbox=box),
    )
    assert restated < genuine - 0.2  # restating names is no genuine comment
    assert genuine_padded - genuine <= COMMENTS_MARGIN
    assert genuine > uncommented + 0.5  # commenting honestly still gains
    assert wrong_score == 0.0  # gated: a wrong program keeps no comments score
