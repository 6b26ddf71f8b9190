"""The trainer worker's torch threads: each thread that hands over to the other ends its OpenMP team."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import threading

import pytest

from diffugrpo_plugin.integration import rollout as rollout_module
from rollout_support import tiny_rollout

# Run in a fresh interpreter, so that no other thread of the test process starts or ends meanwhile.
TEAM_CHECK = """
import os, threading, torch
from diffugrpo_plugin.integration import platform

def threads():
    return len(os.listdir("/proc/self/task"))

counts = {}
def work():
    torch.set_num_threads(2)  # this thread's team: itself and one helper
    torch.randn(1 << 20).exp_()  # [1M], far above ATen's grain size: a parallel region
    counts["team"] = threads()
    platform.release_openmp_threads()
    counts["released"] = threads()
    counts["sum"] = torch.ones(1 << 20).exp_().sum().item()  # parallel again, with a new helper
    counts["again"] = threads()

assert platform._gnu_openmp_pause() is not None, "torch here runs GNU OpenMP, whose pause this relies on"
worker = threading.Thread(target=work)
worker.start()
worker.join()
print(counts["team"], counts["released"], counts["again"], counts["sum"])
"""


def test_a_thread_that_released_its_openmp_team_leaves_only_itself_behind():
    """A thread that ran a parallel op keeps its OpenMP helper while it lives (the second team that parks the other
    thread's helpers); after ``release_openmp_threads`` it is gone, and the thread's next parallel op gets it back."""
    result = subprocess.run([sys.executable, "-c", TEAM_CHECK], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    team, released, again, total = (float(word) for word in result.stdout.split())
    assert team - released == 1  # its one helper ended (the thread itself and torch's other threads remain)
    assert again - released == 1  # and came back for the next parallel op
    assert total == pytest.approx(math.e * (1 << 20), rel=1e-5)


def test_the_weight_sync_ends_the_training_threads_team(tiny_model_path, monkeypatch):
    """verl syncs the weights on the thread that trains, as that thread's last call before sampling."""
    released = []
    monkeypatch.setattr(rollout_module, "release_openmp_threads", lambda: released.append(threading.get_ident()))
    rollout = tiny_rollout(tiny_model_path)
    asyncio.run(rollout.update_weights(iter(rollout.lm.module.state_dict().items()), global_steps=1))
    assert released == [threading.get_ident()]
