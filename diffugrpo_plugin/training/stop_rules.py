"""When an SFT run stops: once its model passes tests the way the RL job will see it.

A fixed step count is a poor stopping point for a small model: the step at which it learns a skill
moves with the machine's floating-point kernels and the seed. :func:`stop_at_pass_rate` measures
instead: at chosen steps it samples completions of a few problems with the sampler the RL rollout
uses and judges them in the sandbox (:mod:`diffugrpo_plugin.tools.evaluation`), and stops the run
(:func:`diffugrpo_plugin.training.sft.train`'s ``stop_when``) once a pass rate reaches its target. The
default job's warm start and the CPU demo both stop this way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from diffugrpo_plugin.tools import evaluation

METRICS = ("pass@1", "test_pass_rate")
"""What a check can measure: the share of completions that pass every test, or the mean share of tests
passed per completion (the ``code`` reward's mean)."""


@dataclass(frozen=True)
class PassRateCheck:
    """Measure ``metric`` at step ``first`` and every ``every`` steps after; stop once it reaches ``target``.

    Each check samples ``samples`` completions of ``completion_length`` tokens per problem of
    ``problems`` with ``sampler``, seeded by ``seed`` (the same draws at every check).
    """

    problems: Sequence[evaluation.EvalProblem]
    sampler: Any
    completion_length: int
    target: float
    first: int
    every: int
    samples: int = 1
    metric: str = "pass@1"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric '{self.metric}'; a check measures one of {', '.join(METRICS)}")
        if self.first < 1 or self.every < 1 or self.samples < 1:
            raise ValueError(
                f"first ({self.first}), every ({self.every}) and samples ({self.samples}) must be at least 1"
            )

    def due(self, steps_done: int) -> bool:
        """Whether the model is measured after ``steps_done`` steps."""
        return steps_done >= self.first and (steps_done - self.first) % self.every == 0

    def measure(self, lm: Any, tokenizer: Any) -> float:
        """``metric`` of ``lm``'s completions (a :class:`~diffugrpo_plugin.models.dlm.DiffusionLM` in eval mode)."""
        completions = evaluation.generate_completions(
            self.sampler,
            lm,
            tokenizer,
            self.problems,
            self.samples,
            self.completion_length,
            seed=self.seed,
            batch_size=32,
        )
        return float(evaluation.summarize(evaluation.judge_completions(self.problems, completions))[self.metric])


def stop_at_pass_rate(
    check: PassRateCheck, record: list[dict[str, float]], echo: Callable[[str], None]
) -> Callable[[int, Any, Any], bool]:
    """A ``stop_when`` rule for :func:`~diffugrpo_plugin.training.sft.train` that runs ``check``.

    Each measurement is appended to ``record`` as ``{"step", <metric>, "seconds"}`` and echoed.
    """

    def reached(steps_done: int, lm: Any, tokenizer: Any) -> bool:
        if not check.due(steps_done):
            return False
        started = time.perf_counter()
        value = check.measure(lm, tokenizer)
        record.append({"step": steps_done, check.metric: value, "seconds": time.perf_counter() - started})
        echo(
            f"sft check: step {steps_done} {check.metric} {value:.3f} on {len(check.problems)} check problems "
            f"(stop at {check.target:g})"
        )
        return value >= check.target

    return reached
