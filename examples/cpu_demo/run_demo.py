"""The CPU demo: masked SFT, then coupled-GRPO, then held-out evaluation of a tiny Dream-style model, per seed.

    python examples/cpu_demo/run_demo.py                       # seeds 0 1 2 into runs/cpu_demo
    python examples/cpu_demo/run_demo.py --seeds 0 --smoke     # wiring check: a few steps of each stage
    python examples/cpu_demo/run_demo.py --plain-sampler       # the reference's plain sampler (~3x slower)

What one seed does, into ``OUT/seed<S>/`` (a stage whose output exists is not run again, so an
interrupted demo picks up where it stopped):

1. ``sft/``: masked-diffusion SFT (:mod:`diffugrpo_plugin.training.sft`, LLaDA's loss) of the randomly
   initialised tiny Dream-style model on **MBPP train** (task_ids 601-974; when there is an MBPP
   file, see below) **plus the synthetic train split** (generated one-line function problems with
   asserts, the task family a model this small can learn to pass; by default the ``wide`` family,
   whose 3,925 train functions cannot be memorised, so passing held-out ones means copying the
   constant from the question). Targets longer than ``--response-length`` tokens are left out. SFT stops early, at the first check
   where sampled completions of the **SFT check split** (96 synthetic train functions that SFT and
   RL never train on) pass at ``--sft-stop-pass`` or more: RL needs a start that passes some tests
   (a group with no passing completion has no test signal) and fails others (headroom). Without the
   stop, copying is learned in a sudden drop of the loss whose timing varies by seed, and a fixed
   step count leaves some seeds passing nothing and others nearly everything.
2. ``eval_sft.json``: the held-out evaluation of the SFT checkpoint (below).
3. ``rl/``: coupled-GRPO with ``python -m diffugrpo_plugin.main`` and command-line overrides only:
   start from ``sft/``, train on the synthetic train prompts (``--rl-mbpp``: MBPP train's too), KL
   ``--rl-kl`` to the SFT model. TensorBoard scalars in ``rl/tb``, the log in ``rl/train.log``, the
   final policy as an HF checkpoint.
4. ``eval_rl.json``: the same evaluation of the RL policy; ``plots/``: ``diffugrpo plot`` of the run.

Held-out evaluation: MBPP validation (task_ids 511-600) and the synthetic validation split (no
function in common with train). ``--eval-n`` completions per problem, sampled exactly like the
rollout (entropy sampler with its fast path, same steps, temperature, top-p, length), with
per-(task, sample) seeds that are the same before and after RL (a paired comparison). Each
completion is scored by the training reward itself (``code`` x2.0 + ``code_format`` x0.5,
DiffuCoder's weights, through :class:`~diffugrpo_plugin.rewards.spec.RewardSpec`) and judged for pass@1
by :mod:`diffugrpo_plugin.tools.evaluation` (sandboxed; a completion passes when all its tests pass).

MBPP comes from ``--mbpp``, by default ``$DIFFUGRPO_MBPP_DIR/mbpp.jsonl``. With neither, the demo
says so and trains and evaluates on the synthetic family alone.

At the end ``OUT/results.md`` holds the per-seed table and the mean and standard deviation
over seeds, and ``OUT/figures/`` the summary figure plus each seed's training reward curves.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MBPP_DIR_VAR = "DIFFUGRPO_MBPP_DIR"
REWARD_CONFIG = {"reward_funcs": ["code", "code_format"], "reward_weights": [2.0, 0.5]}
COMPONENTS = ("total", "code", "code_format", "pass@1")
# The sampler options behind the demo's default: the fast path its results (docs/results/cpu-demo.md) were measured with (prefix
# cache never refreshed + threshold 0.99), pinned so that re-running reproduces them; the training job's own
# default refreshes the cache every 2 forwards. --plain-sampler turns every approximate lever off.
FAST_PATH = {"kv_cache": True, "cache_refresh": None, "threshold": 0.99}
PLAIN_SAMPLER = {"kv_cache": False, "cache_refresh": None, "threshold": None}
# How the results in docs/results/cpu-demo.md were sampled (before the reference-faithful defaults of top_k 50 and
# no mask-token suppression): kept so that re-running the demo reproduces them.
MEASURED_SAMPLING = {"top_k": None, "suppress_mask_token": True}
# held-out share of each synthetic template's functions: about 90 held-out tasks either way, like MBPP validation
SYNTHETIC_VALIDATION_FRACTION = {"small": 0.15, "wide": 0.02}
SFT_CHECK_PROBLEMS = 96  # synthetic train functions set aside to decide when SFT stops


@dataclass(frozen=True)
class DemoData:
    """Prepared parquet files: the SFT training files, the RL prompts and the held-out ones by data source."""

    train: tuple[str, ...]
    sft_check: str
    held_out: dict[str, str]
    rl_train: tuple[str, ...]


@dataclass(frozen=True)
class Settings:
    """Every knob of one demo run (the command-line options)."""

    out: Path
    mbpp: Path | None  # None: the synthetic family alone
    response_length: int
    sft_steps: int
    sft_lr: float
    sft_stop_pass: float
    sft_check_from: int
    sft_check_every: int
    sft_check_problems: int
    rl_steps: int
    rl_lr: float
    rl_kl: float
    rl_on_mbpp: bool
    rl_n: int
    rl_batch: int
    rl_mini_batch: int
    rl_epochs: int
    temperature: float
    sampler_steps: int
    eval_n: int
    eval_limit: int | None
    fast_sampler: bool
    synthetic_family: str
    threads: int
    rl_overrides: tuple[str, ...]

    @property
    def sampler_fast_path(self) -> dict[str, Any]:
        """The sampler options of rollout and evaluation: :data:`FAST_PATH`, or :data:`PLAIN_SAMPLER` with
        ``--plain-sampler``."""
        return FAST_PATH if self.fast_sampler else PLAIN_SAMPLER

    def sampler(self):
        """The rollout's sampler, for evaluation and SFT checks: entropy, same steps, temperature, top-p, top-k."""
        from diffugrpo_plugin.sampling import build_sampler

        return build_sampler(
            "entropy",
            steps=self.sampler_steps,
            temperature=self.temperature,
            top_p=0.95,
            **MEASURED_SAMPLING,
            **self.sampler_fast_path,
        )


# --------------------------------------------------------------------------- stages


def _override_value(value: Any) -> str:
    """A Python value as Hydra reads it on the command line (None -> null, True -> true)."""
    return "null" if value is None else str(value).lower()


def default_mbpp(environ: dict[str, str]) -> Path | None:
    """``$DIFFUGRPO_MBPP_DIR/mbpp.jsonl`` when that variable is set, else None (no MBPP)."""
    folder = environ.get(MBPP_DIR_VAR)
    return Path(folder) / "mbpp.jsonl" if folder else None


def prepare_data(settings: Settings) -> DemoData:
    """MBPP train/validation from the local file (when there is one) and the synthetic splits, as parquet
    under OUT/data; the synthetic train split loses every k-th row to ``sft_check.parquet``
    (``SFT_CHECK_PROBLEMS`` rows spread over the templates)."""
    from diffugrpo_plugin.data import prepare, prepare_to_parquet, write_parquet

    directory = settings.out / "data"
    train, held_out = [], {}
    if settings.mbpp is not None:
        if not (directory / "mbpp" / "validation.parquet").is_file():
            prepare_to_parquet("mbpp", ("train", "validation"), directory / "mbpp", input_path=settings.mbpp)
        train.append(str(directory / "mbpp" / "train.parquet"))
        held_out["mbpp"] = str(directory / "mbpp" / "validation.parquet")
    synthetic = directory / f"synthetic-{settings.synthetic_family}"
    options = {
        "family": settings.synthetic_family,
        "validation_fraction": SYNTHETIC_VALIDATION_FRACTION[settings.synthetic_family],
    }
    if not (synthetic / "sft_check.parquet").is_file():  # also rebuilds data from before the check split
        rows = prepare("synthetic", "train", **options)
        every = len(rows) // SFT_CHECK_PROBLEMS
        check = set(range(0, every * SFT_CHECK_PROBLEMS, every))
        write_parquet([row for index, row in enumerate(rows) if index in check], synthetic / "sft_check.parquet")
        write_parquet([row for index, row in enumerate(rows) if index not in check], synthetic / "train.parquet")
        prepare_to_parquet("synthetic", ("validation",), synthetic, **options)
    train.append(str(synthetic / "train.parquet"))
    held_out["synthetic"] = str(synthetic / "validation.parquet")
    rl_train = tuple(train) if settings.rl_on_mbpp else (str(synthetic / "train.parquet"),)
    return DemoData(
        train=tuple(train), sft_check=str(synthetic / "sft_check.parquet"), held_out=held_out, rl_train=rl_train
    )


def run_sft(settings: Settings, data: DemoData, seed: int, directory: Path) -> dict[str, Any]:
    """Masked SFT of the random tiny model into ``directory``, stopped by :func:`sft_stop_rule`; returns
    the wall time in seconds, the steps run and the checks made (also saved as ``sft/timing.json``)."""
    from diffugrpo_plugin.training.sft import SFTConfig, train

    if (directory / "sft_config.json").is_file():
        return json.loads((directory / "timing.json").read_text())
    echo = lambda line: print(f"[seed {seed}] {line}", flush=True)  # noqa: E731
    checks: list[dict[str, float]] = []
    result = train(
        SFTConfig(
            train_files=data.train,
            output_dir=str(directory),
            steps=settings.sft_steps,
            lr=settings.sft_lr,
            warmup_steps=min(30, settings.sft_steps),
            completion_length=settings.response_length,
            seed=seed,
            threads=settings.threads,
            log_every=max(1, settings.sft_steps // 20),
            tensorboard_dir=str(directory / "tb"),
        ),
        echo=echo,
        stop_when=sft_stop_rule(settings, data.sft_check, seed, checks, echo),
    )
    record = {"seconds": result.seconds, "steps": result.steps_done, "checks": checks}
    (directory / "timing.json").write_text(json.dumps(record, indent=1))
    return record


def sft_stop_rule(settings: Settings, check_file: str, seed: int, checks: list[dict[str, float]], echo):
    """From step ``sft_check_from`` on, every ``sft_check_every`` steps: one completion per SFT check
    problem, sampled like the rollout and judged in the sandbox; stop once pass@1 >= ``sft_stop_pass``.
    Each check is appended to ``checks``. None (train every step) when ``sft_stop_pass`` is 0."""
    if settings.sft_stop_pass <= 0:
        return None
    from diffugrpo_plugin.tools import evaluation
    from diffugrpo_plugin.training.stop_rules import PassRateCheck, stop_at_pass_rate

    check = PassRateCheck(
        problems=evaluation.load_problems("parquet", path=check_file, limit=settings.sft_check_problems),
        sampler=settings.sampler(),
        completion_length=settings.response_length,
        target=settings.sft_stop_pass,
        first=settings.sft_check_from,
        every=settings.sft_check_every,
        seed=seed,
    )
    return stop_at_pass_rate(check, checks, echo)


def rl_command(settings: Settings, data: DemoData, sft_dir: Path, rl_dir: Path, seed: int) -> list[str]:
    """``python -m diffugrpo_plugin.main`` with the demo's overrides (the coupled_grpo defaults otherwise)."""
    steps = settings.rl_steps
    return [
        sys.executable,
        "-m",
        "diffugrpo_plugin.main",
        f"actor_rollout_ref.model.path={sft_dir}",
        f"data.train_files=[{','.join(data.rl_train)}]",
        f"data.val_files=[{','.join(data.held_out.values())}]",
        f"data.max_response_length={settings.response_length}",
        f"data.train_batch_size={settings.rl_batch}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={settings.rl_mini_batch}",
        f"actor_rollout_ref.actor.ppo_epochs={settings.rl_epochs}",
        f"data.seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",
        f"actor_rollout_ref.model.diffusion.mask_seed={seed}",
        f"actor_rollout_ref.rollout.n={settings.rl_n}",
        f"actor_rollout_ref.rollout.temperature={settings.temperature}",
        f"actor_rollout_ref.rollout.engine_kwargs.diffusion.steps={settings.sampler_steps}",
        "actor_rollout_ref.rollout.top_k=-1",
        "actor_rollout_ref.rollout.engine_kwargs.diffusion.suppress_mask_token=true",
        # a lever below left null takes the reference sampler's value, whichever model the demo trains
        "actor_rollout_ref.rollout.engine_kwargs.diffusion.fast_path=false",
        *(
            f"actor_rollout_ref.rollout.engine_kwargs.diffusion.{key}={_override_value(value)}"
            for key, value in settings.sampler_fast_path.items()
        ),
        f"actor_rollout_ref.actor.optim.lr={settings.rl_lr}",
        f"actor_rollout_ref.actor.kl_loss_coef={settings.rl_kl}",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,extra,hf_model]",
        f"trainer.total_training_steps={steps}",
        f"trainer.save_freq={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        f"trainer.experiment_name=cpu_demo_seed{seed}",
        f"trainer.default_local_dir={rl_dir / 'ckpt'}",
        *settings.rl_overrides,
    ]


def run_rl(settings: Settings, data: DemoData, sft_dir: Path, rl_dir: Path, seed: int) -> tuple[Path, float]:
    """Coupled-GRPO from the SFT checkpoint; returns the final policy's HF checkpoint and the wall time."""
    policy = rl_dir / "ckpt" / f"global_step_{settings.rl_steps}" / "actor" / "huggingface"
    if (policy / "model.safetensors").is_file():
        return policy, json.loads((rl_dir / "timing.json").read_text())["seconds"]
    rl_dir.mkdir(parents=True, exist_ok=True)
    command = rl_command(settings, data, sft_dir, rl_dir, seed)
    (rl_dir / "command.txt").write_text(" ".join(command) + "\n")
    started = time.perf_counter()
    with open(rl_dir / "train.log", "w") as log:
        result = subprocess.run(
            command,
            cwd=rl_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
            env={**os.environ, "TENSORBOARD_DIR": str(rl_dir / "tb")},
        )
    seconds = time.perf_counter() - started
    if result.returncode != 0 or not (policy / "model.safetensors").is_file():
        raise SystemExit(f"[seed {seed}] the RL job failed (exit {result.returncode}); see {rl_dir / 'train.log'}")
    (rl_dir / "timing.json").write_text(json.dumps({"seconds": seconds}))
    return policy, seconds


def plot_rl(rl_dir: Path, plots_dir: Path) -> None:
    """The run's figures, as ``diffugrpo plot`` draws them."""
    from diffugrpo_plugin.tools.plotting import plot_run

    plot_run(rl_dir / "tb", plots_dir)


# --------------------------------------------------------------------------- evaluation


def evaluate(settings: Settings, data: DemoData, model_path: Path, seed: int, path: Path) -> dict[str, Any]:
    """Held-out rewards (each component and the total) and pass@1 per data source, saved to ``path``."""
    if path.is_file():
        return json.loads(path.read_text())
    from diffugrpo_plugin.models.dlm import load_diffusion_lm
    from diffugrpo_plugin.tools import evaluation

    started = time.perf_counter()
    problems = [
        problem
        for source, file in data.held_out.items()
        for problem in evaluation.load_problems("parquet", path=file, limit=settings.eval_limit)
    ]
    lm, tokenizer = load_diffusion_lm(str(model_path), "cpu")
    completions = evaluation.generate_completions(
        settings.sampler(), lm, tokenizer, problems, settings.eval_n, settings.response_length, seed=seed, batch_size=32
    )
    results = evaluation.judge_completions(problems, completions)
    summary = evaluation.summarize(results, [1])
    report = reward_report(problems, completions, summary)
    report["seconds"] = time.perf_counter() - started
    evaluation.write_outputs(path.with_suffix(""), results, summary)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return report


def reward_report(problems, completions, summary: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Mean of each reward component and of the weighted total per data source (and ``all``), plus pass@1."""
    from diffugrpo_plugin.rewards.spec import RewardSpec

    spec = RewardSpec.from_config(REWARD_CONFIG)
    per_source: dict[str, list[dict[str, float]]] = {}
    for problem in problems:
        texts = [completion.text for completion in completions[problem.task_id]]
        columns = {name: [value] * len(texts) for name, value in problem.columns.items()}
        for scored in spec.score(texts, columns):
            if scored.errors:
                raise SystemExit(f"a reward failed on task {problem.task_id}: {scored.errors}")
            per_source.setdefault(problem.data_source, []).append({**scored.values, "total": spec.total(scored.values)})
    per_source["all"] = [row for rows in list(per_source.values()) for row in rows]
    report = {}
    for source, rows in per_source.items():
        pass_at_1 = summary["pass@1"] if source == "all" else summary["by_data_source"][source]["pass@1"]
        report[source] = {
            name: statistics.fmean(row[name] for row in rows) for name in ("total", "code", "code_format")
        }
        report[source]["pass@1"] = pass_at_1
    return report


# --------------------------------------------------------------------------- reporting


def mean_and_spread(values: list[float], sign: str = "") -> str:
    """``mean ± sample standard deviation`` (just the value for one seed); ``sign="+"`` shows the sign."""
    if len(values) == 1:
        return f"{values[0]:{sign}.3f}"
    return f"{statistics.fmean(values):{sign}.3f} ± {statistics.stdev(values):.3f}"


def results_table(runs: dict[int, dict[str, Any]], sources: tuple[str, ...]) -> str:
    """Markdown: per seed and metric the SFT and RL values and the change, then mean ± std over seeds."""
    lines = ["| seed | data | metric | after SFT | after RL | change |", "|---|---|---|---|---|---|"]
    for seed, run in sorted(runs.items()):
        for source in sources:
            for metric in COMPONENTS:
                before, after = run["sft"][source][metric], run["rl"][source][metric]
                lines.append(f"| {seed} | {source} | {metric} | {before:.3f} | {after:.3f} | {after - before:+.3f} |")
    lines += [
        "",
        f"Mean ± standard deviation over {len(runs)} seed(s):",
        "",
        "| data | metric | after SFT | after RL | change |",
        "|---|---|---|---|---|",
    ]
    for source in sources:
        for metric in COMPONENTS:
            before = [run["sft"][source][metric] for run in runs.values()]
            after = [run["rl"][source][metric] for run in runs.values()]
            change = [a - b for a, b in zip(after, before)]
            lines.append(
                f"| {source} | {metric} | {mean_and_spread(before)} | {mean_and_spread(after)} | "
                f"{mean_and_spread(change, '+')} |"
            )
    lines += [
        "",
        "SFT steps run and wall time per seed (s, 2 CPU cores; SFT includes its checks):",
        "",
        "| seed | SFT steps | last check pass@1 | SFT | eval SFT | RL | eval RL | total |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for seed, run in sorted(runs.items()):
        times = [run["sft_seconds"], run["sft"]["seconds"], run["rl_seconds"], run["rl"]["seconds"]]
        last_check = f"{run['sft_checks'][-1]['pass@1']:.3f}" if run["sft_checks"] else "-"
        lines.append(
            f"| {seed} | {run['sft_steps']} | {last_check} | "
            + " | ".join(f"{t:.0f}" for t in times)
            + f" | {sum(times):.0f} |"
        )
    return "\n".join(lines) + "\n"


def summary_figure(runs: dict[int, dict[str, Any]], sources: tuple[str, ...], path: Path) -> None:
    """Held-out reward components after SFT and after RL, one panel per data source, one dot per seed."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4 * len(sources), 3.6), dpi=100)
    for column, source in enumerate(sources):
        axes = figure.add_subplot(1, len(sources), column + 1)
        for index, metric in enumerate(COMPONENTS):
            for offset, stage, color in ((-0.17, "sft", "tab:gray"), (0.17, "rl", "tab:blue")):
                values = [run[stage][source][metric] for run in runs.values()]
                axes.bar(
                    index + offset,
                    statistics.fmean(values),
                    width=0.32,
                    color=color,
                    label=("after SFT" if stage == "sft" else "after RL") if index == 0 else None,
                )
                axes.scatter([index + offset] * len(values), values, color="black", s=8, zorder=3)
        axes.set_xticks(range(len(COMPONENTS)), ["total", "code x1", "format x1", "pass@1"])
        axes.set_title(f"held-out {source}")
        axes.grid(axis="y", alpha=0.3)
        if column == 0:
            axes.set_ylabel("mean over completions")
            axes.legend(loc="upper left", fontsize=8)
    figure.suptitle(
        f"CPU demo: held-out reward before and after coupled-GRPO ({len(runs)} seeds; bars: mean, dots: seeds)"
    )
    figure.tight_layout()
    figure.savefig(path)


# --------------------------------------------------------------------------- main


def run_seed(settings: Settings, data: DemoData, seed: int) -> dict[str, Any]:
    directory = settings.out / f"seed{seed}"
    sft_dir, rl_dir = directory / "sft", directory / "rl"
    sft = run_sft(settings, data, seed, sft_dir)
    before = evaluate(settings, data, sft_dir, seed, directory / "eval_sft.json")
    print(f"[seed {seed}] after SFT: {json.dumps(before['all'])}", flush=True)
    policy, rl_seconds = run_rl(settings, data, sft_dir, rl_dir, seed)
    after = evaluate(settings, data, policy, seed, directory / "eval_rl.json")
    print(f"[seed {seed}] after RL: {json.dumps(after['all'])}", flush=True)
    plot_rl(rl_dir, directory / "plots")
    return {
        "sft": before,
        "rl": after,
        "sft_seconds": sft["seconds"],
        "sft_steps": sft["steps"],
        "sft_checks": sft["checks"],
        "rl_seconds": rl_seconds,
    }


def parse_args(argv: list[str] | None = None) -> tuple[Settings, list[int]]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/cpu_demo"))
    parser.add_argument(
        "--mbpp",
        type=Path,
        default=default_mbpp(os.environ),
        help=f"MBPP's mbpp.jsonl (default: ${MBPP_DIR_VAR}/mbpp.jsonl; unset: synthetic tasks only)",
    )
    parser.add_argument(
        "--response-length",
        type=int,
        default=48,
        help="SFT target length = rollout and evaluation length (tokens); they must agree",
    )
    parser.add_argument(
        "--sft-steps",
        type=int,
        default=12000,
        help="most SFT steps (the learning-rate schedule's length); the stop rule may end it earlier",
    )
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument(
        "--sft-stop-pass",
        type=float,
        default=0.25,
        help="stop SFT at the first check whose pass@1 on the SFT check split reaches this (0: never)",
    )
    parser.add_argument("--sft-check-from", type=int, default=2000, help="first SFT step that is checked")
    parser.add_argument("--sft-check-every", type=int, default=250, help="SFT steps between checks")
    parser.add_argument("--rl-steps", type=int, default=160)
    parser.add_argument("--rl-lr", type=float, default=1e-4)
    parser.add_argument(
        "--rl-kl",
        type=float,
        default=0.01,
        help="weight of the KL term to the SFT model (DiffuCoder's beta; the default job uses 0.05)",
    )
    parser.add_argument(
        "--rl-mbpp",
        action="store_true",
        help="RL prompts from MBPP train too (default: the synthetic train split only; MBPP prompts "
        "give this model no test signal, its code does not pass them)",
    )
    parser.add_argument("--rl-n", type=int, default=8, help="completions per prompt (GRPO group size)")
    parser.add_argument("--rl-batch", type=int, default=4, help="prompts per RL step")
    parser.add_argument("--rl-mini-batch", type=int, default=4, help="prompts per policy update")
    parser.add_argument(
        "--rl-epochs",
        type=int,
        default=2,
        help="passes over each step's rollouts, each with fresh masks (DiffuCoder's num_iterations)",
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="rollout and evaluation temperature")
    parser.add_argument("--sampler-steps", type=int, default=32, help="denoising steps (rollout and evaluation)")
    parser.add_argument("--eval-n", type=int, default=4, help="held-out completions per problem")
    parser.add_argument("--eval-limit", type=int, default=None, help="held-out problems per data source (all)")
    parser.add_argument(
        "--synthetic-family",
        default="wide",
        choices=list(SYNTHETIC_VALIDATION_FRACTION),
        help="wide: constants up to 999 (3925 train functions); small: the default job's 191",
    )
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads of SFT and evaluation (1 when seeds run side by side)"
    )
    parser.add_argument(
        "--plain-sampler",
        action="store_true",
        help="rollout and evaluation with the reference's plain sampler instead of the fast path "
        "(prompt KV cache, threshold 0.99; ~3x faster sampling)",
    )
    parser.add_argument(
        "--rl-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any further verl/diffugrpo override for the RL job; repeatable",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="check the wiring only: 20 SFT steps (checked at 10 and 20 on 4 problems), 2 RL steps, "
        "4 held-out problems per source",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.sft_steps, args.rl_steps, args.eval_n, args.eval_limit = 20, 2, 1, 4
        args.sft_check_from, args.sft_check_every = 10, 10
    settings = Settings(
        out=args.out.resolve(),
        mbpp=args.mbpp,
        response_length=args.response_length,
        sft_steps=args.sft_steps,
        sft_lr=args.sft_lr,
        sft_stop_pass=args.sft_stop_pass,
        sft_check_from=args.sft_check_from,
        sft_check_every=args.sft_check_every,
        sft_check_problems=4 if args.smoke else SFT_CHECK_PROBLEMS,
        rl_steps=args.rl_steps,
        rl_lr=args.rl_lr,
        rl_kl=args.rl_kl,
        rl_on_mbpp=args.rl_mbpp,
        rl_n=args.rl_n,
        rl_batch=args.rl_batch,
        rl_mini_batch=args.rl_mini_batch,
        rl_epochs=args.rl_epochs,
        temperature=args.temperature,
        sampler_steps=args.sampler_steps,
        eval_n=args.eval_n,
        eval_limit=args.eval_limit,
        fast_sampler=not args.plain_sampler,
        synthetic_family=args.synthetic_family,
        threads=args.threads,
        rl_overrides=tuple(args.rl_override),
    )
    return settings, args.seeds


def mbpp_usable(mbpp: Path | None) -> bool:
    """False, with the error printed, for a named MBPP file that does not exist; without one (None) the
    demo goes on with the synthetic tasks alone and says so."""
    if mbpp is None:
        print(
            f"run_demo: no MBPP file ({MBPP_DIR_VAR} is not set), so the synthetic tasks only; "
            f"add MBPP with --mbpp path/to/mbpp.jsonl",
            flush=True,
        )
    elif not mbpp.is_file():
        print(f"run_demo: MBPP file {mbpp} does not exist; pass --mbpp path/to/mbpp.jsonl", file=sys.stderr)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    import torch

    settings, seeds = parse_args(argv)
    torch.set_num_threads(settings.threads)
    if not mbpp_usable(settings.mbpp):
        return 2
    settings.out.mkdir(parents=True, exist_ok=True)
    data = prepare_data(settings)
    runs = {seed: run_seed(settings, data, seed) for seed in seeds}
    sources = (*data.held_out, "all")
    figures = settings.out / "figures"
    figures.mkdir(exist_ok=True)
    summary_figure(runs, sources, figures / "held_out_rewards.png")
    for seed in seeds:
        shutil.copy(settings.out / f"seed{seed}" / "plots" / "rewards.png", figures / f"seed{seed}_train_rewards.png")
    (settings.out / "results.json").write_text(json.dumps(runs, indent=2) + "\n")
    table = results_table(runs, sources)
    (settings.out / "results.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
