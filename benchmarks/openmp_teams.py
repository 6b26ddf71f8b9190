"""A second thread's idle OpenMP team against the trainer worker's passes, and what releasing it gives back.

Why a second team slows the first, and where the trainer worker releases them: the docstring of
``diffugrpo_plugin.integration.platform.release_openmp_threads``.

This times the tiny model's forward + backward (the update's work, ``--rows`` rows of ``--tokens`` tokens) on a
thread of its own, three ways, in turn, ``--repeats`` times: alone; while another thread that ran a parallel op
waits (its team alive, as in the worker before); and while that thread waits after releasing its team (as now).

    python benchmarks/openmp_teams.py                  # 24 rows x 110 tokens (one micro-batch's three views)
    python benchmarks/openmp_teams.py --rows 8 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import threading
import time

import torch

from diffugrpo_plugin.integration.platform import release_openmp_threads
from diffugrpo_plugin.models.dlm import load_diffusion_lm
from diffugrpo_plugin.models.tiny import tiny_model_path

CONDITIONS = ("alone", "other team alive", "other team released")


def passes(lm, rows: int, tokens: int, count: int) -> tuple[float, float]:
    """Median seconds of ``count`` forward + backward passes on this thread, and the cores the process used."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, lm.module.config.vocab_size, (rows, tokens), generator=generator)  # [B, T]
    attention = torch.ones_like(ids)  # [B, T]
    positions = torch.arange(tokens).repeat(rows, 1)  # [B, T]
    seconds = []
    used = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    for _ in range(count):
        begun = time.perf_counter()
        lm.family.call(lm.module, ids, attention, positions).float().log_softmax(-1).mean().backward()  # [B, T, V]
        seconds.append(time.perf_counter() - begun)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (used.ru_utime + used.ru_stime)
    return statistics.median(seconds), cpu / (time.perf_counter() - started)


def timed(lm, args, condition: str) -> tuple[float, float]:
    """One measurement under ``condition``, on a fresh thread (as the worker's threads are its own)."""
    result, ready, done = {}, threading.Event(), threading.Event()

    def other_thread():
        torch.ones(1 << 20).exp_()  # [1M]: one parallel region, so this thread has its team
        if condition == "other team released":
            release_openmp_threads()
        ready.set()
        done.wait()

    other = None
    if condition != "alone":
        other = threading.Thread(target=other_thread)
        other.start()
        ready.wait()
    worker = threading.Thread(target=lambda: result.update(value=passes(lm, args.rows, args.tokens, args.passes)))
    worker.start()
    worker.join()
    done.set()
    if other is not None:
        other.join()
    return result["value"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=110)
    parser.add_argument("--passes", type=int, default=8, help="timed passes per measurement (median taken)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over the three conditions, in turn")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)  # every thread's first parallel op takes this count
    lm, _ = load_diffusion_lm(tiny_model_path(), "cpu")
    timed(lm, args, "alone")  # warm-up
    results = {condition: [] for condition in CONDITIONS}
    for _ in range(args.repeats):
        for condition in CONDITIONS:
            results[condition].append(timed(lm, args, condition))
    baseline = statistics.median(seconds for seconds, _ in results["alone"])
    print(
        f"tiny model forward + backward, {args.rows} rows x {args.tokens} tokens, {args.threads} torch threads, "
        f"{args.repeats} rounds of {args.passes} passes; 'x' = this median / alone's"
    )
    print(f"{'condition':<22}{'ms per pass, median [range]':>30}{'x':>7}{'cores used':>12}")
    for condition, runs in results.items():
        seconds = [1000 * s for s, _ in runs]
        cores = statistics.median(c for _, c in runs)
        median = statistics.median(seconds)
        print(
            f"{condition:<22}{f'{median:.0f} [{min(seconds):.0f}-{max(seconds):.0f}]':>30}"
            f"{median / (1000 * baseline):>7.2f}{cores:>12.2f}"
        )


if __name__ == "__main__":
    main()
