"""The build-once cache: one build per machine under concurrent processes, nothing left by a failed one."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from diffugrpo_plugin.data import cache


def _slow_build(staging: Path, log: Path) -> None:
    with open(log, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    time.sleep(0.5)  # a wide window for a racing process to start a second build
    (staging / "done.txt").write_text("ok")


def _race(target: str, log: str, barrier, results) -> None:
    barrier.wait()
    results.put(str(cache.build_once(Path(target), lambda staging: _slow_build(staging, Path(log)))))


def test_build_once_builds_exactly_once_under_concurrent_processes(tmp_path):
    context = multiprocessing.get_context("fork")
    workers = 4
    barrier, results = context.Barrier(workers), context.Queue()
    target, log = tmp_path / "artefact", tmp_path / "builds.log"
    processes = [context.Process(target=_race, args=(str(target), str(log), barrier, results)) for _ in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert [results.get(timeout=5) for _ in range(workers)] == [str(target)] * workers
    assert len(log.read_text().splitlines()) == 1
    assert (target / "done.txt").read_text() == "ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artefact", "artefact.lock", "builds.log"]


def test_build_once_leaves_nothing_after_a_failed_build_and_retries(tmp_path):
    target = tmp_path / "artefact"

    def failing(staging: Path) -> None:
        (staging / "half.txt").write_text("partial")
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match="build failed"):
        cache.build_once(target, failing)
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["artefact.lock"]
    cache.build_once(target, lambda staging: (staging / "done.txt").write_text("ok"))
    assert (target / "done.txt").read_text() == "ok"


def _build_until_killed(target: str, started) -> None:
    def hang(staging: Path) -> None:
        (staging / "half.txt").write_text("partial")
        started.set()
        time.sleep(600)

    cache.build_once(Path(target), hang)


def test_a_build_killed_outright_leaves_nothing_the_next_build_keeps(tmp_path):
    context = multiprocessing.get_context("fork")
    target, started = tmp_path / "artefact", context.Event()
    process = context.Process(target=_build_until_killed, args=(str(target), started))
    process.start()
    assert started.wait(timeout=30)
    process.kill()  # SIGKILL: no handler, no finally, the staging directory stays behind
    process.join(timeout=30)
    assert [p.name for p in tmp_path.iterdir() if ".building-" in p.name], "the killed build left no staging"
    cache.build_once(target, lambda staging: (staging / "done.txt").write_text("ok"))
    assert (target / "done.txt").read_text() == "ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artefact", "artefact.lock"]


def test_a_stale_staging_directory_of_another_target_is_left_alone(tmp_path):
    neighbour = tmp_path / ".artefact-large.building-abc"
    neighbour.mkdir()
    cache.build_once(tmp_path / "artefact", lambda staging: (staging / "done.txt").write_text("ok"))
    assert neighbour.is_dir()
