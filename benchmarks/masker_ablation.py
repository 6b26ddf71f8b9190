"""Coupled sampling against d1's one-step masker and the other estimators in the same training job: held-out results
before and after, step time and memory.

Each run is the default job (``python -m diffugrpo_plugin.main``: the warm-started tiny Dream-style model,
the synthetic task family, code + code_format rewards in the sandbox) with one masker and one seed, and
nothing else changed but the job's seeds (``data.seed``, ``actor_rollout_ref.rollout.seed``,
``actor_rollout_ref.model.diffusion.mask_seed``):

* ``coupled``: DiffuCoder's three views (the default);
* ``d1``: d1's estimate, one view with the completion fully masked and prompt tokens masked at 15%
  (``masker_kwargs``: ``p_mask_prompt: 0.15``, d1's setting, and no ``t_range``);
* ``wd1``, ``spg``, ``ebpo``, ``tracerl``: those algorithms (``algorithm=<name>``, docs/concepts/estimators.md),
  each its own masker, advantage and loss on the same job.

Read from each run's TensorBoard scalars: held-out pass@1 (``val-core/synthetic/acc/mean@N``: the 36
validation functions, N completions each sampled as the rollout samples) and held-out total reward
(``val-aux/synthetic/reward/mean@N``) at the first validation (step 0, before any update) and the last; and the training ``code`` reward, mean of the first
and of the last 4 steps, and on the prompts drawn more than once at their first and last draw (the
console's learning line). Step time is verl's ``perf/time_per_step`` averaged over the steps after the first;
memory verl's ``perf/max_memory_allocated_gb`` at its largest (an accelerator's; "-" on a CPU-only host). The table gives each masker's mean and standard deviation over seeds (a change's standard error; the costs' median, range and ratio to coupled's median), then every
run. A run whose results exist is not run again, so an interrupted ablation picks up where it stopped.

    python benchmarks/masker_ablation.py                      # 6 estimators x seeds 0 1 2, ~4 min a run on 2 cores
    python benchmarks/masker_ablation.py --seeds 0 --maskers d1 -- trainer.total_training_steps=8
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

MASKER_OVERRIDES = {
    "coupled": [],
    "d1": [
        "actor_rollout_ref.model.diffusion.masker=d1",
        "~actor_rollout_ref.model.diffusion.masker_kwargs.t_range",
        "actor_rollout_ref.model.diffusion.masker_kwargs.p_mask_prompt=0.15",
    ],
    **{name: [f"algorithm={name}"] for name in ("wd1", "spg", "ebpo", "tracerl")},
}
HELD_OUT = {"pass@1": r"val-core/synthetic/acc/mean@\d+", "total reward": r"val-aux/synthetic/reward/mean@\d+"}
CODE = "reward/code/mean"
STEP_TIME = "perf/time_per_step"
MEMORY = "perf/max_memory_allocated_gb"
REDRAWN = {
    "code redrawn first": "learning/code/redrawn_first_draw",
    "code redrawn last": "learning/code/redrawn_last_draw",
}
WINDOW = 4


def run_command(masker: str, seed: int, run_dir: Path, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "diffugrpo_plugin.main",
        *MASKER_OVERRIDES[masker],
        f"data.seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",
        f"actor_rollout_ref.model.diffusion.mask_seed={seed}",
        f"trainer.experiment_name=ablation_{masker}_seed{seed}",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={run_dir / 'ckpt'}",
        f"hydra.run.dir={run_dir / 'hydra'}",
        *extra,
    ]


def summarise(event_dir: Path) -> dict[str, float]:
    """First and last held-out values, the code reward's first and last :data:`WINDOW`-step means, and (runs that
    logged it) the code reward on the prompts drawn again at their first and last draw, as the run ended."""
    from diffugrpo_plugin.tools.plotting import find_event_dir, read_scalars

    scalars = read_scalars(find_event_dir(event_dir))
    tags = {
        label: next((tag for tag in scalars if re.fullmatch(pattern, tag)), None) for label, pattern in HELD_OUT.items()
    }
    missing = [HELD_OUT[label] for label, tag in tags.items() if tag is None] + ([CODE] if CODE not in scalars else [])
    if missing:
        raise SystemExit(
            f"benchmarks/masker_ablation.py: {event_dir} lacks {', '.join(missing)}; did the run "
            f"validate at step 0 and at its end (trainer.val_before_train, trainer.test_freq)?"
        )
    result = {}
    for label, tag in tags.items():
        values = scalars[tag].values
        result[f"{label} before"], result[f"{label} after"] = float(values[0]), float(values[-1])
    code = [value for value in scalars[CODE].values if value == value]  # NaN: no code scored that step
    window = min(WINDOW, len(code) // 2)
    result["code first"] = statistics.fmean(code[:window])
    result["code last"] = statistics.fmean(code[-window:])
    for label, tag in REDRAWN.items():  # at the end of the run; absent from runs before these metrics
        if tag in scalars:
            result[label] = float(scalars[tag].values[-1])
    if STEP_TIME in scalars and len(scalars[STEP_TIME].values) > 1:  # the first step also starts the workers
        result["step seconds"] = statistics.fmean(float(v) for v in scalars[STEP_TIME].values[1:])
    if MEMORY in scalars and max(scalars[MEMORY].values) > 0:
        result["memory GiB"] = float(max(scalars[MEMORY].values))
    return result


def run(masker: str, seed: int, out: Path, extra: list[str]) -> dict[str, float]:
    run_dir = out / f"{masker}_seed{seed}"
    results_file = run_dir / "results.json"
    if results_file.is_file():
        return json.loads(results_file.read_text())
    run_dir.mkdir(parents=True, exist_ok=True)
    command = run_command(masker, seed, run_dir, extra)
    print(f"[{masker} seed {seed}] {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    with open(run_dir / "console.log", "w") as log:
        done = subprocess.run(
            command,
            cwd=run_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
            env={**os.environ, "TENSORBOARD_DIR": str(run_dir / "tb")},
        )
    if done.returncode != 0:
        raise SystemExit(
            f"[{masker} seed {seed}] the job failed (exit {done.returncode}); see {run_dir / 'console.log'}"
        )
    result = {**summarise(run_dir / "tb"), "seconds": time.perf_counter() - started}
    results_file.write_text(json.dumps(result, indent=1) + "\n")
    return result


def spread(values: list[float], signed: bool = False) -> str:
    """The mean over seeds ± their sample standard deviation."""
    mean = statistics.fmean(values)
    text = f"{mean:+.3f}" if signed else f"{mean:.3f}"
    return f"{text} ± {statistics.stdev(values):.3f}" if len(values) > 1 else text


def change(values: list[float]) -> str:
    """A change's mean over seeds ± its standard error (the sample standard deviation over sqrt(seeds))."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:+.3f}"
    return f"{mean:+.3f} ± {statistics.stdev(values) / math.sqrt(len(values)):.3f}"


def median_range(values: list[float]) -> str:
    """The median over seeds and, with more than one, the range (a cost: one run beside another job is an outlier)."""
    text = f"{statistics.median(values):.3f}"
    return f"{text} ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else text


def relative(runs: list[dict[str, float]], baseline: list[dict[str, float]] | None, label: str) -> str:
    """The median of ``label`` over ``runs`` against the baseline's (``x1.20``: 20% more); "-" unless both logged it."""
    if not baseline or not all(label in r for r in runs + baseline):
        return "-"
    return f"x{statistics.median(r[label] for r in runs) / statistics.median(r[label] for r in baseline):.2f}"


def has_redrawn(run: dict[str, float]) -> bool:
    return all(label in run for label in REDRAWN)


def _redrawn(run: dict[str, float]) -> str:
    return f"{run['code redrawn first']:.3f} -> {run['code redrawn last']:.3f}" if has_redrawn(run) else "-"


def table(results: dict[str, dict[int, dict[str, float]]]) -> str:
    lines = [
        "| masker | seeds | held-out pass@1 before -> after | change ± s.e. | held-out total reward before -> after | "
        "change ± s.e. | train code reward, first 4 -> last 4 steps | code on the prompts drawn again, first -> last "
        "draw | step seconds | x coupled | memory GiB | x coupled |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    baseline = list(results["coupled"].values()) if "coupled" in results else None
    for masker, by_seed in results.items():
        runs = list(by_seed.values())
        cells = [masker, " ".join(str(seed) for seed in by_seed)]
        for label in HELD_OUT:
            before, after = [r[f"{label} before"] for r in runs], [r[f"{label} after"] for r in runs]
            cells += [f"{spread(before)} -> {spread(after)}", change([a - b for a, b in zip(after, before)])]
        cells.append(f"{spread([r['code first'] for r in runs])} -> {spread([r['code last'] for r in runs])}")
        cells.append(
            f"{spread([r['code redrawn first'] for r in runs])} -> {spread([r['code redrawn last'] for r in runs])}"
            if all(map(has_redrawn, runs))
            else "-"
        )
        for label in ("step seconds", "memory GiB"):
            logged = all(label in r for r in runs)
            cells += [median_range([r[label] for r in runs]) if logged else "-", relative(runs, baseline, label)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| masker | seed | pass@1 before -> after | total reward before -> after | code first -> last | "
        "code drawn again, first -> last | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for masker, by_seed in results.items():
        for seed, r in by_seed.items():
            lines.append(
                f"| {masker} | {seed} | {r['pass@1 before']:.3f} -> {r['pass@1 after']:.3f} | "
                f"{r['total reward before']:.3f} -> {r['total reward after']:.3f} | "
                f"{r['code first']:.3f} -> {r['code last']:.3f} | {_redrawn(r)} | {r['seconds']:.0f} |"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="arguments after -- go to every run as Hydra overrides"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--maskers", nargs="+", default=list(MASKER_OVERRIDES), choices=list(MASKER_OVERRIDES))
    parser.add_argument("--out", type=Path, default=Path("runs/masker_ablation"))
    parser.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = args.out.resolve()
    results = {masker: {seed: run(masker, seed, out, args.overrides) for seed in args.seeds} for masker in args.maskers}
    text = table(results)
    (out / "results.md").write_text(text + "\n")
    print(text)
    print(f"\nwritten to {out / 'results.md'}")


if __name__ == "__main__":
    main()
