"""The ``efficiency`` reward: how cheaply correct code runs, relative to the reference solution.

Zero unless every test passes, so slow-but-right always beats fast-but-wrong; None when the row has
no tests (both with the reason). A passing completion's score says which cost measured it.

Time is measured by one of three costs (``cost``, default ``auto``):

- ``instructions``: user-space instructions from the CPU's counter, opened by the sandbox's launcher
  and never reachable by the program. Deterministic up to a few per mille; only where the host
  exposes the counter (``auto`` takes it then).
- ``lines``: the source lines the program executes, counted in a second, traced run of the candidate
  and the reference (``auto`` takes it where there is no counter). Deterministic, and it does not move
  with the host's load. But a line count does not see work done inside C functions (``x in big_list`` is
  one line), and it lives in the program's process, which could stop or forge it. So the lines score is
  kept within ``CPU_SCORE_BAND`` (the CPU-time score's spread under load) of the CPU-time score the
  launcher measured from outside: a forged count earns at most what one lucky CPU-time measurement
  would, and a program whose work is in C is not scored as if it did none (or as if it did it in Python).
  A program that sets its own tracer or profiler gets no count: CPU time measures it, and says so.
- ``cpu``: CPU seconds of every process of the test, measured by the launcher; moves with load.

Every measurement comes from runs where the program may start threads but no process (``Job.no_fork``, the
sandbox's seccomp filter): the launcher's peak memory is its main process's, and a line count lives in one process,
so work in a forked child (``os.fork``, ``multiprocessing``, ``subprocess``) would go unmeasured. A program that
passes its tests (the ``code`` reward's run) but not without starting a process scores 0, with the reason
``forks``. These runs are the reward's own (one more sandbox run per passing completion and reference; the
line-counted run, where the cost is ``lines``, is one of them).

Memory is the peak resident memory above the bare interpreter, measured by the launcher from outside
(it spreads by up to ~40% on sub-MiB peaks and ~1% on a 24 MiB one; the 1 MiB floor damps the former:
``benchmarks/efficiency_spread.py`` measures each cost's spread).

With a reference solution (``reference_solution`` and friends, see
:func:`diffugrpo_plugin.rewards.code_tests.reference_from_row`) that passes its own tests::

    time   = min(1, (ref_cost + floor) / (cost + floor))
    memory = min(1, (ref_mem + 1 MiB) / (mem + 1 MiB))

Without one, absolute scales: ``time = scale / (scale + cost per test)`` (scale ``time_scale_s`` CPU
seconds, or as many lines as CPython runs in that time) and ``memory = scale / (scale + MiB)`` (scale
``memory_scale_mb``). The reward is ``time_weight * time + (1 - time_weight) * memory``. The floors keep
noise on trivial tests from swinging the ratio.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from diffugrpo_plugin import Explained, Reason, hookimpl
from diffugrpo_plugin.rewards.code_tests import reference_from_row
from diffugrpo_plugin.rewards.judging import code_outcomes, correctness_gate, outcomes_for, python_only, rows_of
from diffugrpo_plugin.rewards.test_runs import TestOutcome
from diffugrpo_plugin.sandbox.host import Sandbox, shared_sandbox

logger = logging.getLogger("diffugrpo.rewards")

COSTS = ("auto", "instructions", "lines", "cpu")
CPU_FLOOR_S = 0.005  # per test
LINES_PER_CPU_SECOND = 50_000_000  # CPython 3.11, loops of simple statements, untraced (52M-64M measured)
FLOORS = {"cpu": CPU_FLOOR_S, "instructions": 5_000_000, "lines": CPU_FLOOR_S * LINES_PER_CPU_SECOND}
CPU_SCORE_BAND = 0.1  # see benchmarks/efficiency_spread.py
MEMORY_FLOOR_KB = 1024
FORKS = Reason(
    "forks",
    "passes its tests only when it may start a process (fork, multiprocessing, subprocess): efficiency measures "
    "one process's work, so it scores 0",
)


@dataclass(frozen=True)
class Runs:
    """One completion's (or reference's) outcomes on the row's tests: the plain run, and the line-counted
    run when the cost is ``lines`` (None otherwise, or when that run did not pass or gave no count)."""

    plain: Sequence[TestOutcome]
    counted: Sequence[TestOutcome] | None = None


def _cost(runs: Runs, measure: str) -> float:
    if measure == "instructions":
        return float(sum(outcome.instructions for outcome in runs.plain))
    if measure == "lines":
        return float(sum(outcome.lines for outcome in runs.counted))
    return sum(outcome.cpu_s for outcome in runs.plain)


def _shown(runs: Runs, measure: str) -> str:
    cost = _cost(runs, measure)
    return f"{cost:.4f} s" if measure == "cpu" else f"{cost:,.0f}"


def _memory_kb(runs: Runs) -> int:
    return max(outcome.memory_kb for outcome in runs.plain)


def within_cpu_band(lines_score: float, cpu_score: float) -> float:
    """A lines score, kept within ``CPU_SCORE_BAND`` of the CPU-time score of the same completion."""
    return min(max(lines_score, cpu_score - CPU_SCORE_BAND), cpu_score + CPU_SCORE_BAND)


def cost_ratio(candidate: Runs, reference: Runs, measure: str) -> float:
    """``min(1, (ref_cost + floor) / (cost + floor))``, the floor per test."""
    floor = FLOORS[measure] * len(candidate.plain)
    return min(1.0, (_cost(reference, measure) + floor) / (_cost(candidate, measure) + floor))


def relative_time(candidate: Runs, reference: Runs, measure: str) -> float:
    """The time score against the reference: the cost ratio; by lines, kept within the band of CPU time's."""
    score = cost_ratio(candidate, reference, measure)
    if measure == "lines":
        score = within_cpu_band(score, cost_ratio(candidate, reference, "cpu"))
    return score


def absolute_time(candidate: Runs, measure: str, time_scale_s: float) -> float:
    """``scale / (scale + cost per test)``: 1.0 for free, 0.5 at the scale; by lines, kept within the band."""
    scale = time_scale_s * (LINES_PER_CPU_SECOND if measure == "lines" else 1.0)
    per_test = _cost(candidate, measure) / len(candidate.plain)
    score = scale / (scale + per_test)
    if measure == "lines":
        score = within_cpu_band(score, absolute_time(candidate, "cpu", time_scale_s))
    return score


def relative_score(candidate: Runs, reference: Runs, time_weight: float, measure: str = "cpu") -> float:
    """Candidate against reference on the same tests (both must have passed them)."""
    memory_score = min(1.0, (_memory_kb(reference) + MEMORY_FLOOR_KB) / (_memory_kb(candidate) + MEMORY_FLOOR_KB))
    return time_weight * relative_time(candidate, reference, measure) + (1.0 - time_weight) * memory_score


def absolute_score(
    candidate: Runs, time_weight: float, time_scale_s: float, memory_scale_mb: float, measure: str = "cpu"
) -> float:
    """Candidate alone: 1.0 for free, 0.5 at the scales, towards 0 beyond them."""
    memory_score = memory_scale_mb / (memory_scale_mb + _memory_kb(candidate) / 1024)
    return time_weight * absolute_time(candidate, measure, time_scale_s) + (1.0 - time_weight) * memory_score


def _counts_instructions(outcomes: Sequence[TestOutcome]) -> bool:
    """Whether the hardware counter measured these runs (it is there for every run on a host, or for none)."""
    return all(outcome.instructions is not None for outcome in outcomes)


def _passed(outcomes: Sequence[TestOutcome] | None) -> bool:
    return outcomes is not None and all(outcome.passed for outcome in outcomes)


def _counted(outcomes: Sequence[TestOutcome] | None) -> Sequence[TestOutcome] | None:
    return outcomes if _passed(outcomes) and all(o.lines is not None for o in outcomes) else None


def _measure(cost: str, candidate: Runs, reference: Runs | None) -> tuple[str, str]:
    """The cost that measures this row, and what the reason says about it."""
    runs = [candidate] if reference is None else [candidate, reference]
    if cost in ("auto", "instructions") and all(_counts_instructions(r.plain) for r in runs):
        return "instructions", "user-space instructions"
    if cost == "instructions":
        raise ValueError(
            "efficiency: cost=instructions, but this host offers no hardware instruction counter "
            "(a VM without a virtual PMU, or kernel.perf_event_paranoid > 2); set cost to lines or auto"
        )
    if cost == "cpu":
        return "cpu", "CPU time"
    if all(r.counted is not None for r in runs):
        return "lines", "executed lines"
    return (
        "cpu",
        "CPU time (the line-counted run gave no count: it failed a test, ran over its limit or replaced the tracer)",
    )


def efficiency_reward(
    completions: list,
    *,
    code_block: str = "first",
    require_format: bool = True,
    format_end: str = "exact",
    timeout_s: float | None = None,
    sandbox: Sandbox | None = None,
    time_weight: float = 0.5,
    time_scale_s: float = 0.1,
    memory_scale_mb: float = 64.0,
    cost: str = "auto",
    **columns: Any,
) -> list[float | Explained]:
    """Time (by ``cost``) and peak memory inside the sandbox vs the reference; 0 unless all tests pass."""
    if cost not in COSTS:
        raise ValueError(f"efficiency: cost must be one of {list(COSTS)}, got {cost!r}")
    sandbox = sandbox or shared_sandbox()
    if not sandbox.protections["seccomp"].active:
        raise ValueError(
            "efficiency measures programs that cannot start processes, which needs the sandbox's seccomp filter; "
            "turn rewards.sandbox.seccomp back on (pip install pyseccomp, apt-get install -y libseccomp2)"
        )
    judged = code_outcomes(
        completions,
        columns,
        code_block=code_block,
        require_format=require_format,
        format_end=format_end,
        timeout_s=timeout_s,
        sandbox=sandbox,
    )
    single = outcomes_for(
        [(one.code, one.spec) if one.all_passed else None for one in judged], sandbox, timeout_s, no_fork=True
    )
    references = [
        reference_from_row(row) if one.all_passed else None
        for row, one in zip(rows_of(columns, len(completions)), judged)
    ]
    reference_pairs = [
        (reference, one.spec) if reference is not None else None for reference, one in zip(references, judged)
    ]
    reference_runs = outcomes_for(reference_pairs, sandbox, timeout_s, no_fork=True)
    reference_runs = [runs if _passed(runs) else None for runs in reference_runs]
    for reference, runs in zip(references, reference_runs):
        if reference is not None and runs is None:
            logger.warning(
                "efficiency: the row's reference solution failed its own tests or could not run; "
                "scoring against absolute scales instead"
            )
    counted, counted_references = _counted_runs(cost, judged, reference_pairs, reference_runs, sandbox, timeout_s)
    scores: list[float | Explained] = []
    for one, plain, plain_reference, candidate_counted, reference_counted in zip(
        judged, single, reference_runs, counted, counted_references
    ):
        if not one.all_passed:
            scores.append(correctness_gate(one))
            continue
        if not _passed(plain):
            scores.append(Explained(0.0, FORKS))
            continue
        candidate = Runs(plain, _counted(candidate_counted))
        reference = None if plain_reference is None else Runs(plain_reference, _counted(reference_counted))
        measure, named = _measure(cost, candidate, reference)
        if reference is not None:
            value = relative_score(candidate, reference, time_weight, measure)
            detail = (
                f"time by {named}: {_shown(candidate, measure)} against the reference's "
                f"{_shown(reference, measure)}; peak memory above the interpreter: "
                f"{_memory_kb(candidate):,} KiB against {_memory_kb(reference):,}"
            )
        else:
            value = absolute_score(candidate, time_weight, time_scale_s, memory_scale_mb, measure)
            detail = (
                f"time by {named}: {_shown(candidate, measure)} over {len(candidate.plain)} tests, on "
                f"absolute scales (no passing reference solution); peak memory above the interpreter: "
                f"{_memory_kb(candidate):,} KiB"
            )
        scores.append(Explained(value, Reason("measured", detail)))
    return scores


def _counted_runs(
    cost: str,
    judged: list,
    reference_pairs: list,
    reference_runs: list,
    sandbox: Sandbox | None,
    timeout_s: float | None,
) -> tuple[list, list]:
    """The line-counted runs of the passing completions and of their passing references (Nones where not
    needed: another cost, a host with the hardware counter under ``auto``, a failing completion)."""
    wanted = cost == "lines" or (
        cost == "auto" and not any(one.all_passed and _counts_instructions(one.outcomes) for one in judged)
    )
    if not wanted:
        return [None] * len(judged), [None] * len(judged)
    candidates = [(one.code, one.spec) if one.all_passed else None for one in judged]
    references = [
        pair if one.all_passed and runs is not None else None
        for one, pair, runs in zip(judged, reference_pairs, reference_runs)
    ]
    both = outcomes_for(candidates + references, sandbox, timeout_s, count_lines=True, no_fork=True)
    return both[: len(judged)], both[len(judged) :]


@hookimpl
def diffugrpo_reward_functions():
    return {"efficiency": python_only(efficiency_reward)}
