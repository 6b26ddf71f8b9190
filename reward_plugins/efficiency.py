"""The ``efficiency`` reward: how cheaply correct code runs, relative to the reference solution.

Measured inside the sandbox for each test (CPU time, or user-space instructions where the CPU
exposes a counter to both runs; peak memory above the bare interpreter), summed over tests
(memory: the maximum). Zero unless every test passes, so slow-but-right always beats
fast-but-wrong; None when the row has no tests (both with the reason).

With a reference solution (``reference_solution`` and friends, see
:func:`diffugrpo_plugin.code_execution.reference_from_row`) that passes its own tests::

    time   = min(1, (ref_cost + floor) / (cost + floor))
    memory = min(1, (ref_mem + 1 MiB) / (mem + 1 MiB))

Without one, absolute scales: ``time = scale / (scale + cpu_s per test)`` (scale
``time_scale_s``) and ``memory = scale / (scale + MiB)`` (scale ``memory_scale_mb``). The reward
is ``time_weight * time + (1 - time_weight) * memory``. The floors keep millisecond noise on
trivial tests from swinging the ratio.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.code_execution import TestOutcome, reference_from_row
from diffugrpo_plugin.judging import code_outcomes, correctness_gate, outcomes_for, rows_of
from diffugrpo_plugin.rewards import Explained
from diffugrpo_plugin.sandbox import Sandbox

logger = logging.getLogger("diffugrpo.rewards")

CPU_FLOOR_S = 0.005  # per test
INSTRUCTION_FLOOR = 5_000_000  # per test
MEMORY_FLOOR_KB = 1024


def _cost(outcomes: Sequence[TestOutcome], use_instructions: bool) -> float:
    if use_instructions:
        return float(sum(outcome.instructions for outcome in outcomes))
    return sum(outcome.cpu_s for outcome in outcomes)


def _has_instructions(outcomes: Sequence[TestOutcome]) -> bool:
    return all(outcome.instructions is not None for outcome in outcomes)


def relative_score(candidate: Sequence[TestOutcome], reference: Sequence[TestOutcome], time_weight: float) -> float:
    """Candidate against reference on the same tests (both must have passed them)."""
    use_instructions = _has_instructions(candidate) and _has_instructions(reference)
    floor = (INSTRUCTION_FLOOR if use_instructions else CPU_FLOOR_S) * len(candidate)
    time_score = min(1.0, (_cost(reference, use_instructions) + floor) / (_cost(candidate, use_instructions) + floor))
    memory = max(outcome.memory_kb for outcome in candidate)
    reference_memory = max(outcome.memory_kb for outcome in reference)
    memory_score = min(1.0, (reference_memory + MEMORY_FLOOR_KB) / (memory + MEMORY_FLOOR_KB))
    return time_weight * time_score + (1.0 - time_weight) * memory_score


def absolute_score(candidate: Sequence[TestOutcome], time_weight: float, time_scale_s: float,
                   memory_scale_mb: float) -> float:
    """Candidate alone: 1.0 for free, 0.5 at the scale, towards 0 beyond it."""
    cpu_per_test = _cost(candidate, use_instructions=False) / len(candidate)
    memory_mb = max(outcome.memory_kb for outcome in candidate) / 1024
    time_score = time_scale_s / (time_scale_s + cpu_per_test)
    memory_score = memory_scale_mb / (memory_scale_mb + memory_mb)
    return time_weight * time_score + (1.0 - time_weight) * memory_score


def efficiency_reward(completions: list, *, code_block: str = "first", require_format: bool = True,
                      timeout_s: float | None = None, sandbox: Sandbox | None = None, time_weight: float = 0.5,
                      time_scale_s: float = 0.1, memory_scale_mb: float = 64.0,
                      **columns: Any) -> list[float | Explained]:
    """Run time and peak memory inside the sandbox vs the reference; 0 unless all tests pass."""
    judged = code_outcomes(completions, columns, code_block=code_block, require_format=require_format,
                           timeout_s=timeout_s, sandbox=sandbox)
    references = [reference_from_row(row) if one.all_passed else None
                  for row, one in zip(rows_of(columns, len(completions)), judged)]
    reference_runs = outcomes_for([(reference, one.spec) if reference is not None else None
                                   for reference, one in zip(references, judged)], sandbox, timeout_s)
    scores: list[float | Explained] = []
    for one, reference, reference_outcomes in zip(judged, references, reference_runs):
        outcomes = one.outcomes
        if not one.all_passed:
            scores.append(correctness_gate(one))
        elif reference_outcomes is not None and all(outcome.passed for outcome in reference_outcomes):
            scores.append(relative_score(outcomes, reference_outcomes, time_weight))
        else:
            if reference is not None:
                logger.warning("efficiency: the row's reference solution failed its own tests or could not run; "
                               "scoring against absolute scales instead")
            scores.append(absolute_score(outcomes, time_weight, time_scale_s, memory_scale_mb))
    return scores


@hookimpl
def diffugrpo_reward_functions():
    return {"efficiency": efficiency_reward}
