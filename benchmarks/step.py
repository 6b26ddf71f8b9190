"""Where a whole training step's time goes, with the reference sampler and with the fast one, same machine.

Runs the default job (``python -m verl.trainer.main algorithm=coupled_grpo``: the warm-started
tiny Dream-style model, synthetic code tasks, code + code_format rewards in the sandbox) twice,
one after the other, for ``--steps`` steps without validation or checkpoints: once with the
reference sampler (every fast-path lever off) and once with the job's default sampler, the fast
setting (or the ``--fast`` options added to it).
Each run's TensorBoard scalars give every step's time split the way verl measures it:
rollout (``timing_s/gen``: generation, plus reward scoring when it overlaps), old-policy and
reference log-probs, the update, and the whole step. The first step is left out (start-up,
first compilation of the sandbox), and the table gives medians over the rest and the ratio of
the reference's median to the fast one's.

    python benchmarks/step.py                          # 6 steps each, about 6 minutes on 2 cores
    python benchmarks/step.py --steps 10 --fast cache_refresh=4
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLER_KEY = "actor_rollout_ref.rollout.engine_kwargs.diffusion"
STAGES = (
    ("rollout", ("timing_s/gen",)),
    ("old + ref log-probs", ("timing_s/old_log_prob", "timing_s/ref")),
    ("update", ("timing_s/update_actor",)),
    ("step", ("timing_s/step",)),
)
# the plain sampler: every lever the training default turns on, off
PLAIN_LEVERS = {
    "kv_cache": False,
    "cache_refresh": None,
    "threshold": None,
    "compact": False,
    "reuse_logits": False,
    "head_on_masked": False,
}
# fast_path=false: the levers set null take the reference sampler's values, on any model
REFERENCE_SAMPLER = ("fast_path=false",) + tuple(
    f"{lever}={'null' if value is None else str(value).lower()}" for lever, value in PLAIN_LEVERS.items()
)


def run_job(label: str, steps: int, sampler_options: list[str], workdir: Path) -> dict[str, list[float]]:
    """One training run of ``steps`` steps; returns stage -> seconds of each step after the first."""
    from diffugrpo_plugin.tools.plotting import find_event_dir, read_scalars

    tensorboard = workdir / label / "tensorboard"
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main",
        "algorithm=coupled_grpo",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={workdir / label / 'checkpoints'}",
        f"hydra.run.dir={workdir / label / 'hydra'}",
        *[f"++{SAMPLER_KEY}.{option}" for option in sampler_options],
    ]
    started = time.perf_counter()
    result = subprocess.run(
        command, env={**os.environ, "TENSORBOARD_DIR": str(tensorboard)}, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise SystemExit(f"{label} run failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    print(f"{label}: {steps} steps in {time.perf_counter() - started:.0f} s", flush=True)
    scalars = read_scalars(find_event_dir(tensorboard))
    split = {}
    for stage, tags in STAGES:
        per_tag = [dict(zip(scalars[tag].steps, scalars[tag].values)) for tag in tags if tag in scalars]
        later_steps = sorted(step for step in per_tag[0] if step > 1) if per_tag else []
        split[stage] = [sum(values[step] for values in per_tag) for step in later_steps]
    return split


def print_table(reference: dict[str, list[float]], fast: dict[str, list[float]], fast_options: list[str]) -> None:
    print(
        f"\nmedian seconds per step (steps 2..N); reference = {' '.join(REFERENCE_SAMPLER)}; fast = the job's "
        f"default sampler{' + ' + ' '.join(fast_options) if fast_options else ''}"
    )
    header = f"{'stage':<22}{'reference':>11}{'fast':>9}{'x faster':>10}{'share (ref)':>13}"
    print(header + "\n" + "-" * len(header))
    step_reference = statistics.median(reference["step"])
    for stage, _ in STAGES:
        if not reference[stage] or not fast[stage]:
            continue
        slow, quick = statistics.median(reference[stage]), statistics.median(fast[stage])
        print(f"{stage:<22}{slow:>11.2f}{quick:>9.2f}{slow / quick:>10.2f}{slow / step_reference:>12.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="training steps per run (the first is not counted)")
    parser.add_argument(
        "--fast",
        nargs="+",
        default=[],
        help=f"sampler options added to the fast run, KEY=VALUE under {SAMPLER_KEY} (default: none, "
        f"the job's default fast setting)",
    )
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2: the first step is start-up and is not counted")
    with tempfile.TemporaryDirectory(prefix="diffugrpo-step-") as workdir:
        reference = run_job("reference", args.steps, list(REFERENCE_SAMPLER), Path(workdir))
        fast = run_job("fast", args.steps, ["fast_path=true", *args.fast], Path(workdir))
    print_table(reference, fast, args.fast)


if __name__ == "__main__":
    main()
