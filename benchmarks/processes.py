"""What each process of a training run holds: the default job's process tree, sampled while it trains.

Starts ``python -m verl.trainer.main algorithm=coupled_grpo`` (the default job, or with ``-o`` overrides) for
``--steps`` steps without validation or checkpoints, and every ``--interval`` seconds reads the proportional
set size (PSS: each shared page split among the processes that map it, so the sum over processes is the
tree's real footprint) of every process descended from it, Ray's included, from ``/proc/PID/smaps_rollup``.
Prints the peak of the summed PSS and, at that moment, each process by role (Ray's own daemons, the
trainer worker, reward workers, agent loops, sandboxes, the driver), with its PSS and RSS.

    python benchmarks/processes.py                     # the default job, 6 steps, ~2 minutes on 2 cores
    python benchmarks/processes.py -o diffugrpo.process_layout=verl   # verl's own processes, for comparison
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024  # statm counts pages
ROLES = (  # first match wins: (role, what to look for in the command line)
    ("ray: gcs server", "gcs_server"),
    ("ray: raylet", "raylet"),
    ("ray: dashboard agent", "DashboardAgent"),
    ("ray: dashboard", "dashboard"),
    ("ray: log monitor", "log_monitor"),
    ("ray: runtime env agent", "RuntimeEnvAgent"),
    ("ray: monitor", "monitor.py"),
    ("ray: idle worker", "ray::IDLE"),
    ("sandbox", "bwrap"),
    ("sandbox", "diffugrpo_sandbox"),
    ("trainer worker (policy, reference, rollout)", "WorkerDict"),
    ("trainer worker (policy, reference, rollout)", "ActorRolloutRef"),
    ("verl task runner (the trainer loop)", "TaskRunner"),
    ("reward worker", "Reward"),
    ("agent loop worker", "AgentLoop"),
    ("rollout server (batches requests)", "RequestBatcher"),
    ("rollout server and transfer queue directory", "RolloutServerAndDirectory"),
    ("verl request load balancer", "LoadBalancer"),
    ("request router (light)", "LeastBusyRouter"),
    ("verl replay buffer / transfer queue", "ReplayBuffer"),
    ("verl replay buffer / transfer queue", "TransferQueue"),
    ("verl replay buffer / transfer queue", "Controller"),
    ("verl replay buffer / transfer queue", "StorageUnit"),
    ("console board (step lines)", "StepBoard"),
    ("driver (verl.trainer.main)", "verl.trainer.main"),
    ("ray: idle worker", "default_worker.py"),
)


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def tree(root: int) -> list[int]:
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children(pid))
    return found


def memory_kib(pid: int) -> tuple[int, int] | None:
    """(PSS, RSS) in KiB, or None for a process that is gone or unreadable."""
    values = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                if name in ("Pss", "Rss"):
                    values[name] = int(rest.split()[0])
    except OSError:
        return None
    return (values["Pss"], values["Rss"]) if len(values) == 2 else None


def resident_kib(pid: int) -> int:
    """RSS in KiB from the kernel's counters (``statm``), without the page-table walk a PSS reading costs; 0 for a
    process that is gone."""
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE_KIB
    except (OSError, IndexError, ValueError):
        return 0


def role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    for name, clue in ROLES:
        if clue in command:
            return name
    return f"other: {command[:60]}"


def snapshot(root: int) -> list[tuple[int, str, int, int]]:
    rows = []
    for pid in tree(root):
        sizes = memory_kib(pid)
        if sizes:
            rows.append((pid, role(pid), *sizes))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("-o", "--override", action="append", default=[], help="a Hydra override for the job")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="processes_")
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main",
        "algorithm=coupled_grpo",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={workdir}/ckpt",
        *args.override,
    ]
    job = subprocess.Popen(
        command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    peak, peak_rows, counts = 0, [], []
    while job.poll() is None:
        rows = snapshot(job.pid)
        total = sum(pss for _, _, pss, _ in rows)
        counts.append(len(rows))
        if total > peak:
            peak, peak_rows = total, rows
        time.sleep(args.interval)
    if job.returncode:
        raise SystemExit(f"the job failed (exit {job.returncode}); run it by hand: {' '.join(command)}")
    by_role: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for _, name, pss, rss in peak_rows:
        by_role[name].append((pss, rss))
    print(
        f"{' '.join(command[1:])}\nprocesses in the tree: up to {max(counts)}; at the peak of the summed PSS "
        f"({len(peak_rows)} processes):\n"
    )
    print(f"{'role':<46}{'processes':>10}{'PSS MiB':>10}{'RSS MiB':>10}")
    for name, sizes in sorted(by_role.items(), key=lambda item: -sum(p for p, _ in item[1])):
        print(
            f"{name:<46}{len(sizes):>10}{sum(p for p, _ in sizes) / 1024:>10.0f}{sum(r for _, r in sizes) / 1024:>10.0f}"
        )
    print(f"{'total':<46}{len(peak_rows):>10}{peak / 1024:>10.0f}")
    os.system(f"rm -rf {workdir}")


if __name__ == "__main__":
    main()
