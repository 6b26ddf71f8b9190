"""benchmarks/processes.py's readings: the process tree, proportional set sizes and roles (on this test's own
process and a child it starts)."""

import os
import subprocess
import sys

from processes import memory_kib, role, snapshot, tree


def test_the_tree_holds_children_and_their_memory_and_roles():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)  # raylet"])
    try:
        assert child.pid in tree(os.getpid())
        pss, rss = memory_kib(os.getpid())
        assert 0 < pss <= rss  # a page shared with others counts in part in PSS, whole in RSS
        rows = {pid: (name, pss) for pid, name, pss, _ in snapshot(os.getpid())}
        assert rows[child.pid][0] == "ray: raylet"  # matched on its command line
        assert role(os.getpid()).startswith("other: ")
    finally:
        child.kill()
        child.wait()
    assert memory_kib(child.pid) is None  # gone: no reading, no error
