"""The main job across two Ray nodes started with ``ray start`` on this machine (2 CPUs and 1 logical GPU each), as a
user launches a multi-node run (docs/guides/multi-node.md): its processes on both nodes, the second node's raylet
killed after the first checkpoint, a clear error, then the node back and the same command resuming (slow)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

from main_e2e_support import logged_steps

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))  # the command line of the Ray installed beside this Python
NODE = ["--num-cpus", "2", "--num-gpus", "1", "--disable-usage-stats"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TwoNodes:
    """A Ray head and a second node on this machine, in a temp dir of their own (so that no other Ray on the machine
    finds them, nor they it); stopped by killing, by pid, the processes that run under that temp dir."""

    def __init__(self):
        # short: Ray's socket paths under it must fit in 107 characters
        self.temp_dir = tempfile.mkdtemp(prefix="ray2n", dir="/tmp")
        self.address = f"127.0.0.1:{free_port()}"
        # Ray 2.60 turns on token authentication for a cluster that `ray start` starts: every client must use it.
        # The nodes' workers import the project from here, whatever installed it
        self.env = {
            **os.environ,
            "RAY_AUTH_MODE": "token",
            "RAY_ADDRESS": self.address,
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        }

    def ray(self, *args: str) -> None:
        done = subprocess.run([RAY, *args], env=self.env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr

    def start(self) -> None:
        port = self.address.rsplit(":", 1)[1]
        env = {name: value for name, value in self.env.items() if name != "RAY_ADDRESS"}
        done = subprocess.run(
            [RAY, "start", "--head", "--port", port, "--temp-dir", self.temp_dir, *NODE],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        self.start_second_node()

    def start_second_node(self) -> None:
        self.ray("start", "--address", self.address, *NODE)

    def pids(self, name: str = "") -> dict[int, str]:
        """pid -> command line of this cluster's processes (the raylets, ...) whose command line contains ``name``."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if self.temp_dir in command and name in command and entry.name != str(os.getpid()):
                found[int(entry.name)] = command
        return found

    def kill_second_raylet(self) -> None:
        raylets = {pid: command for pid, command in self.pids("raylet/raylet").items() if " --head" not in command}
        assert len(raylets) == 1, raylets
        os.kill(next(iter(raylets)), signal.SIGKILL)

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(3)
        shutil.rmtree(self.temp_dir, ignore_errors=True)  # the session's logs; pytest keeps the job's under tmp_path

    def actor_nodes(self) -> dict[str, set[str]]:
        """Actor class -> the nodes its actors ran on, dead actors included (Ray's state API, in a process of its
        own: this one's Ray client has read RAY_AUTH_MODE already)."""
        done = subprocess.run(
            [RAY, "list", "actors", "--detail", "--format", "json", "--limit", "10000"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        nodes = defaultdict(set)
        for actor in json.loads(done.stdout):
            nodes[actor["class_name"]].add(actor["node_id"])
        return nodes


def job(*overrides: str) -> list[str]:
    # verbose: the step lines are verl's metric dump, which a quiet run writes to its log file only
    return [
        sys.executable,
        "-m",
        "verl.trainer.main",
        "algorithm=coupled_grpo",
        "diffugrpo.verbose=true",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=4",
        "trainer.save_freq=2",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        *overrides,
    ]


def test_the_job_runs_on_two_nodes_stops_when_one_dies_and_resumes(tmp_path):
    cluster = TwoNodes()
    checkpoints = tmp_path / "ckpt"
    marker = checkpoints / "latest_checkpointed_iteration.txt"
    command = job(f"trainer.default_local_dir={checkpoints}")
    first_log = tmp_path / "first.log"
    try:
        cluster.start()
        with open(first_log, "w") as log:
            first = subprocess.Popen(command, cwd=tmp_path, env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 900
        while not (marker.is_file() and marker.read_text().strip() == "2"):
            assert first.poll() is None, first_log.read_text()[-5000:]
            assert time.monotonic() < deadline, "no checkpoint of step 2 in 15 minutes"
            time.sleep(1)
        # every part of the job on both nodes: the trainer workers (verl's fused worker), the rollout servers, the
        # agent-loop workers and the reward workers, each reward worker with the sandbox it runs code in
        nodes = cluster.actor_nodes()
        for part in ("WorkerDict", "RequestBatcher", "AgentLoopWorkerTQ", "RewardLoopWorker"):
            ran_on = set().union(*(found for name, found in nodes.items() if name.endswith(part)))
            assert len(ran_on) == 2, (part, dict(nodes))

        cluster.kill_second_raylet()
        killed = time.monotonic()
        try:
            first.wait(timeout=300)
        except subprocess.TimeoutExpired:
            first.kill()
            pytest.fail(f"the job did not stop in 5 minutes after a node died: {first_log.read_text()[-3000:]}")
        stopped_after = time.monotonic() - killed
        log = first_log.read_text()
        assert first.returncode == 1, log[-5000:]
        assert logged_steps(log)[-1] in (2, 3), log[-5000:]  # the node died after step 2's checkpoint
        lost = [line for line in log.splitlines() if line.startswith("diffugrpo: a Ray process of the job was lost")]
        assert len(lost) == 1, log[-5000:]
        assert " died);" in lost[0] and "the same command resumes from step 2" in lost[0], lost[0]
        print(f"the job stopped {stopped_after:.0f} s after the raylet was killed: {lost[0]}")

        cluster.start_second_node()
        resumed = subprocess.run(command, cwd=tmp_path, env=cluster.env, capture_output=True, text=True, timeout=900)
        log = resumed.stdout + resumed.stderr
        assert resumed.returncode == 0, log[-5000:]
        # two nodes on one machine run two log monitors, each forwarding the driver the same line once
        assert sorted(set(logged_steps(log))) == [3, 4], log[-5000:]
        assert marker.read_text().strip() == "4"
    finally:
        cluster.stop()
        assert not cluster.pids(), cluster.pids()
