"""Adversarial programs through the ``code`` reward: each scores 0 with the right verdict, leaves
no process behind, changes nothing outside its sandbox, and the harness keeps working (a correct
solution scored right after still gets 1.0)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from diffugrpo_plugin.rewards.judging import code_outcomes
from diffugrpo_plugin.rewards.test_runs import Outcome
from reward_plugins.code import code_reward
from reward_support import TEST_UID_BASE, bwrap_children, processes_with_uids, tight_sandbox

pytestmark = pytest.mark.sandbox  # every test here runs code in the sandbox

SECRET_NAME, SECRET_VALUE = "DIFFUGRPO_TEST_SECRET", "s3cr3t-harness-value"
HOST_MARKER = Path("/tmp/diffugrpo_escape_marker")
TESTS = ["assert attack() == 'escaped'"]
CORRECT = "def attack():\n    return 'escaped'\n"  # the honest solution of the same task


def fenced(code: str) -> str:
    return f"```python\n{code}```\n"


ATTACKS = {
    "fork bomb": ("import os\ndef attack():\n    while True:\n        os.fork()\n", Outcome.RUNTIME_ERROR),
    "memory bomb": (
        "def attack():\n    hoard = []\n    while True:\n        hoard.append(bytearray(10**7))\n",
        Outcome.MEMORY_LIMIT_EXCEEDED,
    ),
    "infinite loop": ("def attack():\n    while True:\n        pass\n", Outcome.TIME_LIMIT_EXCEEDED),
    "long sleep": ("import time\ndef attack():\n    time.sleep(60)\n", Outcome.TIME_LIMIT_EXCEEDED),
    "setsid grandchild": (
        "import os, time\ndef attack():\n    if os.fork() == 0:\n        os.setsid()\n"
        "        if os.fork() == 0:\n            time.sleep(60)\n        os._exit(0)\n"
        "    return 'spawned'\n",
        Outcome.FAILED,
    ),
    "kill the parent": (
        "import os, signal\ndef attack():\n    os.kill(os.getppid(), signal.SIGKILL)\n"
        "    os.kill(1, signal.SIGKILL)\n    return 'escaped'\n",
        Outcome.RUNTIME_ERROR,
    ),
    "network": (
        "import socket\ndef attack():\n    socket.create_connection(('127.0.0.1', {port}), timeout=0.5)\n"
        "    return 'escaped'\n",
        Outcome.RUNTIME_ERROR,
    ),
    "external network": (
        "import socket\ndef attack():\n    socket.create_connection(('1.1.1.1', 53), timeout=0.5)\n"
        "    return 'escaped'\n",
        Outcome.RUNTIME_ERROR,
    ),
    "write outside": (
        "def attack():\n    for path in ({victim!r}, {marker!r}, '/usr/lib/escape', '/escape'):\n"
        "        open(path, 'w').write('pwned')\n    return 'escaped'\n",
        Outcome.RUNTIME_ERROR,
    ),
    "read the harness environment": (
        "import glob, os\ndef attack():\n    seen = os.environ.get({secret_name!r}, '')\n"
        "    for path in glob.glob('/proc/*/environ'):\n        try:\n            seen += open(path).read()\n"
        "        except OSError:\n            pass\n    return 'escaped' if {secret_value!r} in seen else seen\n",
        Outcome.FAILED,
    ),
    "endless output": ("def attack():\n    while True:\n        print('y' * 4096)\n", Outcome.TIME_LIMIT_EXCEEDED),
    "ctypes segfault": ("import ctypes\ndef attack():\n    return ctypes.string_at(0)\n", Outcome.RUNTIME_ERROR),
}


@pytest.fixture(scope="module")
def box():
    # 2 s, not 1: a refused connection must not read as a time-out on a loaded host
    return tight_sandbox(timeout_s=2.0)


@pytest.fixture
def listener():
    """A TCP server on the host's loopback: a sandboxed program must not reach it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list = []

    def accept():
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    server.close()
    thread.join()


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_scores_zero_and_leaves_nothing_behind(name, box, tmp_path, listener, monkeypatch):
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    port, accepted = listener
    victim = tmp_path / "victim.txt"
    template, expected = ATTACKS[name]
    program = template.format(
        port=port, victim=str(victim), marker=str(HOST_MARKER), secret_name=SECRET_NAME, secret_value=SECRET_VALUE
    )
    host_before = sorted(path.name for path in tmp_path.iterdir())

    [score] = code_reward([fenced(program)], test_cases=[TESTS], sandbox=box)
    [judged] = code_outcomes([fenced(program)], {"test_cases": [TESTS]}, sandbox=box)

    assert score.value == 0.0 and score.reason.kind == "tests_failed"
    assert [outcome.outcome for outcome in judged.outcomes] == [expected], judged.outcomes[0].detail
    assert processes_with_uids(TEST_UID_BASE, TEST_UID_BASE + 64) == []
    assert bwrap_children() == []
    assert sorted(path.name for path in tmp_path.iterdir()) == host_before
    assert not HOST_MARKER.exists() and not Path("/escape").exists() and not Path("/usr/lib/escape").exists()
    assert accepted == []
    assert code_reward([fenced(CORRECT)], test_cases=[TESTS], sandbox=box) == [1.0]
