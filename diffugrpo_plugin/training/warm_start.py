"""The default RL model: the tiny Dream-style model after a short masked SFT, shipped with the package.

A random model scores 0 everywhere, which leaves GRPO nothing to learn from (every advantage is
0). This SFT (:mod:`diffugrpo_plugin.training.sft`) runs on the synthetic ``warm_start`` part of the train
split (:func:`diffugrpo_plugin.data.default_warm_start_data`) and stops once sampled completions pass the tests
of at least a third of the ``rl`` part, the job's RL prompts, which it never trains on (:class:`WarmStart`):
GRPO groups then see rewards that differ from the first step, and the model has learned the rule behind the
functions (copy the name and constant from the question), not only the functions.

The default shape's result ships in :data:`SHIPPED_DIR` (4 MB): a first run copies it into the cache in a
second, where the SFT takes minutes to a quarter of an hour, depending on the machine's load. The recipe stays
the source: ``python -m diffugrpo_plugin.training.warm_start`` rebuilds the shipped files (``--check`` compares
a rebuild with them), and any other shape or recipe is fine-tuned on first use, announced with its duration.
Sits on top of :mod:`~diffugrpo_plugin.models.tiny`, :mod:`~diffugrpo_plugin.training.sft` and
:mod:`~diffugrpo_plugin.training.stop_rules` (which measures the pass rate); the job's config resolver and the
CLIs' default model use it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from diffugrpo_plugin.config import training_default
from diffugrpo_plugin.data import RL_FRACTION, SYNTHETIC_VERSION, default_data_paths, default_warm_start_data
from diffugrpo_plugin.data.cache import build_once, diffugrpo_home
from diffugrpo_plugin.models.dlm import quiet_transformers
from diffugrpo_plugin.models.tiny import TinySpec, tiny_model_path
from diffugrpo_plugin.tools import evaluation
from diffugrpo_plugin.training.sft import SFTConfig, train
from diffugrpo_plugin.training.stop_rules import PassRateCheck, stop_at_pass_rate

WARM_START_VERSION = 6
"""Bump when the warm-start procedure changes in a way :class:`WarmStart`'s fields do not show."""

WARM_START_RECORD = "warm_start.json"
"""The file in the checkpoint that records the pass rates measured while it was built."""


@dataclass(frozen=True)
class WarmStart:
    """The SFT recipe of the warm-started model (see :class:`diffugrpo_plugin.training.sft.SFTConfig`).

    SFT on the synthetic ``warm_start`` functions follows a learning-rate schedule ``schedule_steps`` long, then
    its floor up to ``max_steps``, and stops as soon as the model passes ``target_pass_rate`` of the tests of the
    ``rl`` functions, which it never trains on: measured as the rollout samples (temperature 1, the job's
    sampler) on the first ``check_tasks`` of them, ``check_samples`` completions each, judged in the sandbox, at
    step ``first_check`` and every ``check_every`` steps after. Why measured rather than a fixed step: the tiny
    model learns to copy the function's name and constant from the question in a sudden drop of the loss, and
    where that drop falls depends on the machine's floating-point kernels (at step 1750 one machine's model
    passed 36% of the held-out tasks, another's 1%). Why on unseen functions: a model passes the functions it was
    fine-tuned on by heart long before it passes new ones (one passed 39% of its train tasks and about 15% of the
    held-out ones), and GRPO from such a start raises the reward on train prompts without moving held-out
    pass@1. Reaching ``max_steps`` without the target is reported, not hidden (the record says so). It trains
    with ``threads`` torch threads.
    """

    schedule_steps: int = 3000
    max_steps: int = 5000
    first_check: int = 1500
    check_every: int = 250
    target_pass_rate: float = 0.35
    check_tasks: int = 64  # every rl function of the small family (62)
    check_samples: int = 2
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 30
    # AdamW's decoupled weight decay, which favours the general solution over a lookup table. Without it, on the
    # whole train split, the tiny model passed 39% of its train tasks at step 4250 and about 15% of the held-out
    # ones (AMD EPYC); with 0.1 on the warm_start part, the same machine's passed 36% of the unseen rl functions
    # at step 1750 (20% at 1500), and its held-out pass@1 was 0.22-0.26 at the job's first validation.
    weight_decay: float = 0.1
    # the job's completion length: a model fine-tuned on other lengths scores 0 in it
    completion_length: int = field(default_factory=lambda: int(training_default("data.max_response_length")))
    seed: int = 0
    data_seed: int = 0
    threads: int = 2

    def __post_init__(self) -> None:
        if not 0 < self.first_check <= self.schedule_steps <= self.max_steps:
            raise ValueError(
                f"first_check ({self.first_check}), schedule_steps ({self.schedule_steps}) and max_steps "
                f"({self.max_steps}) must be positive and in that order"
            )
        if self.check_every < 1 or self.check_tasks < 1 or self.check_samples < 1:
            raise ValueError(
                f"check_every ({self.check_every}), check_tasks ({self.check_tasks}) and check_samples "
                f"({self.check_samples}) must be at least 1"
            )
        if not 0 < self.target_pass_rate <= 1:
            raise ValueError(f"target_pass_rate ({self.target_pass_rate}) must be in (0, 1]")

    @property
    def cache_suffix(self) -> str:
        return (
            f"sft-max{self.max_steps}-cos{self.schedule_steps}-b{self.batch_size}-lr{self.lr:g}-w{self.warmup_steps}"
            f"-wd{self.weight_decay:g}"
            f"-c{self.completion_length}-s{self.seed}-syn{SYNTHETIC_VERSION}d{self.data_seed}rl{RL_FRACTION:g}"
            f"-pass{self.target_pass_rate:g}at{self.first_check}+{self.check_every}"
            f"n{self.check_tasks}x{self.check_samples}-ws{WARM_START_VERSION}"
        )


def rollout_sampler() -> Any:
    """The sampler the default job's rollout builds, at its temperature, top-p and top-k."""
    from diffugrpo_plugin.models.families import DREAM
    from diffugrpo_plugin.sampling import build_request_sampler
    from diffugrpo_plugin.sampling.fast_path import resolve_sampler

    rollout = training_default("actor_rollout_ref.rollout")
    settings = dict(rollout.engine_kwargs.diffusion)
    name, settings, _ = resolve_sampler(settings, DREAM.default_sampler, tiny_default=True)  # the tiny default's family
    return build_request_sampler(name, settings, rollout.temperature, rollout.top_p, rollout.top_k)


def save_warm_model(
    directory: str | os.PathLike,
    spec: TinySpec = TinySpec(),
    recipe: WarmStart = WarmStart(),
    echo: Callable[[str], None] | None = None,
) -> Path:
    """Fine-tune the random tiny model of ``spec`` with ``recipe`` on the synthetic ``warm_start`` part, into
    ``directory``.

    Writes :data:`WARM_START_RECORD` beside the checkpoint: each measured (step, pass rate) and whether the
    target was reached.
    """
    say = echo or (lambda line: print(f"diffugrpo: warm start: {line}", file=sys.stderr))
    rl_prompts, _ = default_data_paths(recipe.data_seed)
    config = SFTConfig(
        train_files=[default_warm_start_data(recipe.data_seed)],
        output_dir=str(directory),
        model_path=tiny_model_path(spec),
        steps=recipe.max_steps,
        schedule_steps=recipe.schedule_steps,
        batch_size=recipe.batch_size,
        lr=recipe.lr,
        warmup_steps=recipe.warmup_steps,
        weight_decay=recipe.weight_decay,
        completion_length=recipe.completion_length,
        seed=recipe.seed,
        log_every=max(1, recipe.first_check // 5),
        threads=min(recipe.threads, os.cpu_count() or 1),
    )
    check = PassRateCheck(
        problems=evaluation.load_problems("parquet", path=rl_prompts, limit=recipe.check_tasks),
        sampler=rollout_sampler(),
        completion_length=recipe.completion_length,
        target=recipe.target_pass_rate,
        first=recipe.first_check,
        every=recipe.check_every,
        samples=recipe.check_samples,
        metric="test_pass_rate",
    )
    checks: list[dict[str, float]] = []
    early: dict[str, Any] = {}
    reached_target = stop_at_pass_rate(check, checks, say)

    def stop_when(steps_done: int, lm: Any, tokenizer: Any) -> bool:
        if steps_done == ARITHMETIC_CHECK_STEP:
            early.update(step=steps_done, weights_sha256=tensors_digest(lm.module.state_dict()))
        return reached_target(steps_done, lm, tokenizer)

    with quiet_transformers():  # the job's terminal gets our lines, not the loading bars
        result = train(config, echo=say, stop_when=stop_when)
    reached = bool(checks) and checks[-1][check.metric] >= recipe.target_pass_rate
    if not reached:
        measured = f"{checks[-1][check.metric]:.3f}" if checks else "never"
        say(
            f"the pass rate on the RL prompts stayed below {recipe.target_pass_rate:g} for all {result.steps_done} "
            f"steps (last measured: {measured}); GRPO groups will see little code reward"
        )
    record = {"checks": checks, "target_pass_rate": recipe.target_pass_rate, "reached": reached, "early": early}
    (Path(directory) / WARM_START_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return Path(directory)


def warm_model_dir(spec: TinySpec = TinySpec(), recipe: WarmStart = WarmStart()) -> Path:
    """Where the warm-started checkpoint of ``spec`` and ``recipe`` lives in the cache (nothing is built)."""
    return diffugrpo_home() / "models" / f"{spec.cache_name}-{recipe.cache_suffix}"


SHIPPED_DIR = Path(__file__).with_name("default_model")
"""The default model's warm-started weights, shipped with the package (written by :func:`ship`)."""

SHIPPED_RECORD = "shipped.json"
"""In :data:`SHIPPED_DIR`: the cache directory the weights stand for, their digest, and where they were built."""

SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", WARM_START_RECORD)
"""What is shipped of a built checkpoint: the tokenizer is rebuilt in code, the SFT settings name the builder's
paths."""

BUILD_MINUTES = 5
"""What a warm start at the default shape is announced to take on 2 idle CPU cores (docs/guides/sft.md measures
it; a loaded machine takes several times longer)."""


def weights_digest(directory: str | os.PathLike) -> str:
    """SHA-256 over a checkpoint's tensors (name, dtype, shape and bytes, in name order): the weights
    themselves, whatever metadata the file format writes beside them."""
    from safetensors import safe_open

    with safe_open(str(Path(directory) / "model.safetensors"), framework="pt") as weights:
        return tensors_digest({name: weights.get_tensor(name) for name in weights.keys()})


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """:func:`weights_digest` of tensors in memory."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def shipped_record(source: Path = SHIPPED_DIR) -> dict[str, Any]:
    """What :data:`SHIPPED_RECORD` says of the shipped weights; empty when nothing is shipped."""
    record = source / SHIPPED_RECORD
    return json.loads(record.read_text()) if record.is_file() else {}


def shipped_checkpoint(spec: TinySpec = TinySpec(), recipe: WarmStart = WarmStart()) -> Path | None:
    """The shipped checkpoint when it is the one ``spec`` and ``recipe`` build, else None (then it is built)."""
    return SHIPPED_DIR if shipped_record().get("cache_dir") == warm_model_dir(spec, recipe).name else None


def install_shipped(staging: Path, source: Path = SHIPPED_DIR) -> Path:
    """Copy the shipped checkpoint into ``staging`` with the tokenizer rebuilt in code; a copy whose weights
    differ from the recorded digest (a damaged install) stops here, naming the file."""
    from diffugrpo_plugin.models.tokenizer import build_tokenizer

    for name in SHIPPED_FILES:
        shutil.copyfile(source / name, staging / name)
    build_tokenizer().save_pretrained(staging)
    if weights_digest(staging) != shipped_record(source)["weights_sha256"]:
        raise RuntimeError(
            f"{source / 'model.safetensors'} does not hold the weights {source / SHIPPED_RECORD} records: "
            "reinstall diffugrpo"
        )
    return staging


def warm_model_path(spec: TinySpec = TinySpec(), recipe: WarmStart = WarmStart()) -> str:
    """Path of the warm-started checkpoint in the cache: the shipped one copied there, or, for another shape or
    recipe, fine-tuned on first use (once per machine, announced with its duration)."""
    target = warm_model_dir(spec, recipe)
    shipped = shipped_checkpoint(spec, recipe)
    if shipped is not None:
        return str(build_once(target, lambda staging: install_shipped(staging, shipped)))
    if not target.is_dir():
        duration = f"about {BUILD_MINUTES} minutes on 2 idle CPU cores, longer on a loaded machine" + (
            "" if spec == TinySpec() else " at the default shape, more at larger ones"
        )
        print(
            f"diffugrpo: building the warm-started tiny model once into {target}, {duration} "
            f"(SFT until it passes {recipe.target_pass_rate:g} of the tests of the RL prompts it never trains on; "
            f"progress every {max(1, recipe.first_check // 5)} steps of at most {recipe.max_steps})",
            file=sys.stderr,
        )
    return str(build_once(target, lambda staging: save_warm_model(staging, spec, recipe)))


def ship(built: Path) -> None:
    """(Re)write :data:`SHIPPED_DIR` from ``built``, a warm start of the default shape and recipe."""
    import platform

    SHIPPED_DIR.mkdir(exist_ok=True)
    for name in SHIPPED_FILES:
        shutil.copyfile(built / name, SHIPPED_DIR / name)
    record = {
        "cache_dir": warm_model_dir().name,
        "weights_sha256": weights_digest(built),
        "steps_done": json.loads((built / "sft_config.json").read_text())["steps_done"],
        "early": json.loads((built / WARM_START_RECORD).read_text())["early"],
        "built_with": f"torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} cores, {PINNED_KERNELS}",
    }
    (SHIPPED_DIR / SHIPPED_RECORD).write_text(json.dumps(record, indent=2) + "\n")


PINNED_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""The floating-point kernels the shipped model is built with, on any x86-64 CPU with AVX2.

Thousands of SFT steps amplify the last bit of every matmul, and by default torch picks its kernels by the
CPU: ATen's vectorised ones by its widest instruction set (AVX2 or AVX-512), MKL's by vendor and instruction set.
A rebuild on another CPU then gives other weights (one CI machine's loss at step 300 was 1.4121, this machine's
1.4185), so the hash check would test the machine, not the recipe. These variables pin ATen to AVX2, MKL to its
vendor-independent code path and oneDNN to AVX2; torch reads them once, when it starts, so the build runs in a
fresh interpreter (:func:`build_with_pinned_kernels`). Pinned, a build repeats its bytes on one machine, but two
machines of the CI kind still differed by step 300 (loss 1.4105 and 1.4108): :data:`ARITHMETIC_CHECK_STEP` tells
such a machine apart (:func:`rebuild_against_shipped`)."""

ARITHMETIC_CHECK_STEP = 300
"""The step whose weights' digest a build records (``early`` in :data:`WARM_START_RECORD` and
:data:`SHIPPED_RECORD`): a rebuild with another digest there ran on arithmetic other than the shipping machine's,
so its last bytes cannot be the shipped ones."""


@dataclass(frozen=True)
class Rebuild:
    """A rebuild from the recipe set against the shipped weights."""

    same_arithmetic: bool
    """Its weights at :data:`ARITHMETIC_CHECK_STEP` equal the shipping build's."""
    same_weights: bool
    """Its final weights equal the shipped ones."""
    reached_target: bool
    """It stopped on the recipe's measured pass rate, as the shipped build did."""


def build_with_pinned_kernels(directory: Path) -> Path:
    """:func:`save_warm_model` of the default shape and recipe into ``directory``, in a fresh interpreter that
    runs with :data:`PINNED_KERNELS`; its progress lines go to this process's stderr."""
    import subprocess

    command = [sys.executable, "-m", "diffugrpo_plugin.training.warm_start", "--build-into", str(directory)]
    subprocess.run(command, env={**os.environ, **PINNED_KERNELS}, check=True)
    return directory


def rebuild_against_shipped() -> Rebuild:
    """Rebuild the default model from its recipe (:class:`WarmStart`) with :data:`PINNED_KERNELS`, as the shipped
    one was built, and set it against the shipped weights."""
    import tempfile

    shipped = shipped_record()
    with tempfile.TemporaryDirectory(prefix="diffugrpo-rebuild-") as scratch:
        built = build_with_pinned_kernels(Path(scratch))
        record = json.loads((built / WARM_START_RECORD).read_text())
        return Rebuild(
            same_arithmetic=record["early"] == shipped["early"],
            same_weights=shipped_checkpoint() is not None and shipped["weights_sha256"] == weights_digest(built),
            reached_target=record["reached"],
        )


def default_warm_model_path() -> str:
    """The default model of the RL job: the Dream-style tiny model, warm-started by SFT (built if needed)."""
    return warm_model_path()


def built_if_default(path: str) -> str:
    """``path``, first built when it is the default model's cache directory and not there yet.

    The job's config names the default model by its directory (:func:`warm_model_dir`), so composing a
    config costs nothing; whoever loads the model first builds it (once per machine, under a lock).
    """
    return default_warm_model_path() if Path(path) == warm_model_dir() else path


def main(argv: list[str] | None = None) -> int:
    """``python -m diffugrpo_plugin.training.warm_start [--check]``: rebuild the shipped model."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(
        prog="python -m diffugrpo_plugin.training.warm_start",
        description=f"Rebuild the shipped default model from its recipe (about {BUILD_MINUTES} minutes on 2 idle CPU "
        f"cores) into {SHIPPED_DIR}.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="compare a rebuild with the shipped weights instead")
    action.add_argument("--build-into", metavar="DIR", help=argparse.SUPPRESS)  # build_with_pinned_kernels' child
    args = parser.parse_args(argv)
    if args.build_into:
        unpinned = {
            name: os.environ.get(name) for name, value in PINNED_KERNELS.items() if os.environ.get(name) != value
        }
        if unpinned or torch.backends.cpu.get_cpu_capability() != "AVX2":
            parser.error(
                f"--build-into needs {PINNED_KERNELS} and a CPU with AVX2 (found {unpinned or 'the variables set'}, "
                f"ATen kernels {torch.backends.cpu.get_cpu_capability()}): run it without --build-into"
            )
        save_warm_model(Path(args.build_into))
        return 0
    if args.check:
        rebuild = rebuild_against_shipped()
        if rebuild.same_weights:
            print("the rebuild equals the shipped weights")
        elif rebuild.same_arithmetic:
            print(
                "the rebuild differs from the shipped weights on the shipping machine's arithmetic: the recipe changed"
            )
        else:
            print(
                f"this machine's arithmetic differs from the shipping machine's by step {ARITHMETIC_CHECK_STEP}, so "
                "its rebuild has other bytes; it "
                + ("reached the recipe's target pass rate" if rebuild.reached_target else "missed the target pass rate")
            )
        return 0 if rebuild.same_weights or (not rebuild.same_arithmetic and rebuild.reached_target) else 1
    with tempfile.TemporaryDirectory(prefix="diffugrpo-rebuild-") as scratch:
        ship(build_with_pinned_kernels(Path(scratch)))
    print(f"shipped {SHIPPED_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
