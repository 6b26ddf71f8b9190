"""How much of the change between two validations is the sampling's: common random numbers against fresh seeds.

The default job validates on the held-out synthetic tasks, 16 completions each, sampled as the rollout samples
(temperature 1), and compares held-out pass@1 at step 0 with the last step's. Since 2026-11-29 every validation
samples the k-th completion of a task with the same seed (common random numbers, ``DiffusionRollout.seed_validation``),
so the two validations are not also two independent draws of noise. This script measures what that buys, on two
checkpoints of a run (``--before``, by default the job's warm-started model, and ``--after``, e.g. a checkpoint's
``huggingface`` folder): for each base seed it samples both models with the same per-(task, sample) seeds, then
reports

* the change with the same seeds for both (what the job now measures) and with the next base seed's ``before``
  (independent noise, what it measured before), over the base seeds: mean, sd and range;
* one change's standard error from the spread within each task (the k-th samples of a task are independent draws
  given the task): with common random numbers ``sqrt(sum_i var_k(after_ik - before_ik) / n) / tasks``, and with
  independent noise ``sqrt(sum_i (var_k(after_ik) + var_k(before_ik)) / n) / tasks``.

Both models sample with the job's sampler (``diffugrpo_plugin.training.warm_start.rollout_sampler``) in one process,
each completion judged in the sandbox by the job's ``code`` reward rules (pass@1: every test passed).

    python benchmarks/validation_noise.py --after CHECKPOINT/global_step_24/actor/huggingface
    python benchmarks/validation_noise.py --before MODEL --after MODEL --seeds 0 1 2 3 4 5 --n 16
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Sequence

import torch


def pass_matrix(lm, tokenizer, problems, sampler, n: int, seed: int, max_new_tokens: int) -> list[list[float]]:
    """1.0 / 0.0 for every (task, sample), in the order of ``problems``: sample k of a task has the same seed for
    any model under the same ``seed``."""
    from diffugrpo_plugin.tools import evaluation

    completions = evaluation.generate_completions(sampler, lm, tokenizer, problems, n, max_new_tokens, seed=seed)
    results = evaluation.judge_completions(problems, completions)
    return [[float(verdict.passed) for verdict in result.verdicts] for result in results]


def mean(matrix: Sequence[Sequence[float]]) -> float:
    return statistics.fmean(value for row in matrix for value in row)


def standard_error(after: Sequence[Sequence[float]], before: Sequence[Sequence[float]], paired: bool) -> float:
    """One change's standard error from the spread within each task (see the module docstring)."""
    total = 0.0
    for row_after, row_before in zip(after, before):
        if paired:
            total += statistics.variance([a - b for a, b in zip(row_after, row_before)]) / len(row_after)
        else:
            total += (statistics.variance(row_after) + statistics.variance(row_before)) / len(row_after)
    return total**0.5 / len(after)


def spread(values: Sequence[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{statistics.fmean(values):+.4f} ± {sd:.4f} [{min(values):+.4f}, {max(values):+.4f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=None, help="checkpoint at the first validation (default: the job's model)")
    parser.add_argument("--after", required=True, help="checkpoint at the last validation (Hugging Face format)")
    parser.add_argument("--data", default=None, help="validation parquet (default: the job's held-out tasks)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3], help="base seeds (at least 2)")
    parser.add_argument("--n", type=int, default=16, help="completions per task (the job's val_kwargs.n)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if len(args.seeds) < 2:
        parser.error("--seeds needs at least 2 base seeds: the independent change pairs each with the next")
    if args.n < 2:
        parser.error("--n needs at least 2 completions per task: the standard error uses their spread")

    from diffugrpo_plugin.config import training_default
    from diffugrpo_plugin.data import default_data_paths
    from diffugrpo_plugin.models.dlm import load_diffusion_lm
    from diffugrpo_plugin.tools import evaluation
    from diffugrpo_plugin.training.warm_start import default_warm_model_path, rollout_sampler

    torch.set_num_threads(args.threads)
    problems = evaluation.load_problems("parquet", path=args.data or default_data_paths()[1])
    max_new_tokens = int(training_default("data.max_response_length"))
    sampler = rollout_sampler()
    matrices: dict[str, dict[int, list[list[float]]]] = {}
    started = time.perf_counter()
    for name, path in (("before", args.before or default_warm_model_path()), ("after", args.after)):
        lm, tokenizer = load_diffusion_lm(path, "cpu")
        matrices[name] = {
            seed: pass_matrix(lm, tokenizer, problems, sampler, args.n, seed, max_new_tokens) for seed in args.seeds
        }
    before, after = matrices["before"], matrices["after"]
    seeds = args.seeds
    same = [mean(after[s]) - mean(before[s]) for s in seeds]
    fresh = [mean(after[s]) - mean(before[seeds[(i + 1) % len(seeds)]]) for i, s in enumerate(seeds)]
    print(f"{len(problems)} tasks x {args.n} completions, base seeds {' '.join(map(str, seeds))}")
    print("| base seed | before | after | change, same seeds | change, before from the next seed |")
    print("|---|---|---|---|---|")
    for i, s in enumerate(seeds):
        print(f"| {s} | {mean(before[s]):.4f} | {mean(after[s]):.4f} | {same[i]:+.4f} | {fresh[i]:+.4f} |")
    print(f"change, same seeds (common random numbers): {spread(same)}")
    print(f"change, independent seeds:                  {spread(fresh)}")
    paired_se = statistics.fmean(standard_error(after[s], before[s], paired=True) for s in seeds)
    fresh_se = statistics.fmean(standard_error(after[s], before[s], paired=False) for s in seeds)
    ratio = f" ({fresh_se / paired_se:.1f}x)" if paired_se else ""  # 0 when both models sample alike
    print(
        f"one change's standard error from the spread within tasks: {paired_se:.4f} with the same seeds, "
        f"{fresh_se:.4f} independent{ratio}"
    )
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
