"""The trainer worker's torch threads: each thread that hands over to the other ends its OpenMP team."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import threading

import pytest

from diffugrpo_plugin.integration.rollout import worker as rollout_module
from rollout_support import tiny_rollout

# Run in a fresh interpreter, so that no other thread of the test process starts or ends meanwhile.
TEAM_CHECK = """
import os, threading, time, torch
from diffugrpo_plugin.integration import platform

def threads(at_most=None):
    # an ended helper leaves /proc/self/task a moment after it was joined
    deadline = time.monotonic() + 10
    while at_most is not None and len(os.listdir("/proc/self/task")) > at_most and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(os.listdir("/proc/self/task"))

counts = {}
def work():
    torch.set_num_threads(2)  # this thread's team: itself and one helper
    torch.randn(1 << 20).exp_()  # [1M], far above ATen's grain size: a parallel region
    counts["team"] = threads()
    platform.release_openmp_threads()
    counts["released"] = threads(at_most=counts["team"] - 1)
    counts["sum"] = torch.ones(1 << 20).exp_().sum().item()  # parallel again, with a new helper
    counts["again"] = threads()

assert platform._gnu_openmp_pauses(), "torch here runs GNU OpenMP, whose pause this relies on"
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


def test_a_library_that_cannot_be_opened_leaves_nothing_to_release(monkeypatch):
    """A libgomp replaced on disk while the job runs (``(deleted)`` in the maps) or unreadable is skipped: the release
    then does nothing instead of failing the sampler's thread."""
    from diffugrpo_plugin.integration import platform

    def refuse(path):
        raise OSError(f"{path}: cannot open shared object file")

    monkeypatch.setattr(platform.ctypes, "CDLL", refuse)
    assert platform._gnu_openmp_pauses.__wrapped__() == ()


@pytest.mark.ray
def test_ray_runs_an_async_actors_plain_and_async_methods_on_one_thread(ray_cluster):
    """What the release's placement rests on: in verl's worker (an async Ray actor) the training calls (plain methods)
    and the weight sync (async) run on one thread, so the sync's release ends the training passes' team."""
    import ray

    @ray.remote
    class Worker:
        def train(self):
            return threading.get_ident()

        async def sync_weights(self):
            return threading.get_ident()

    worker = Worker.remote()
    assert ray.get(worker.train.remote()) == ray.get(worker.sync_weights.remote()) == ray.get(worker.train.remote())
    ray.kill(worker)
