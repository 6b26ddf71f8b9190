"""The default RL model: the tiny Dream-style model after a short masked SFT, built once into the cache.

A random model scores 0 everywhere, which leaves GRPO nothing to learn from (every advantage is
0). After this SFT (:mod:`diffugrpo_plugin.training.sft`) on the synthetic train split
(:func:`diffugrpo_plugin.data.default_data_paths`), sampled completions are well formatted and pass
about a third to a half of the time, so GRPO groups see rewards that differ from the first step.
Sits on top of :mod:`~diffugrpo_plugin.models.tiny` and :mod:`~diffugrpo_plugin.training.sft`; the job's config
resolver and the CLIs' default model use it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from diffugrpo_plugin.config import training_default
from diffugrpo_plugin.data import SYNTHETIC_VERSION, default_data_paths
from diffugrpo_plugin.data.cache import build_once, diffugrpo_home
from diffugrpo_plugin.models.tiny import TinySpec, tiny_model_path
from diffugrpo_plugin.training.sft import SFTConfig, train

WARM_START_VERSION = (
    3  # 2: the SFT schedule became transformers' cosine_with_min_lr; 3: stopped inside a longer schedule
)
"""Bump when the warm-start procedure changes in a way :class:`WarmStart`'s fields do not show."""


@dataclass(frozen=True)
class WarmStart:
    """The SFT recipe of the warm-started model (see :class:`diffugrpo_plugin.training.sft.SFTConfig`).

    SFT runs ``steps`` steps of a learning-rate schedule ``schedule_steps`` long. The tiny model
    learns to copy the function's name and constant from the question in a sudden drop of the loss
    (about step 1500 of this schedule). Sampled at temperature 1 (the rollout's): stopped at 1000 steps
    (the previous recipe, its own schedule) it wrote the format but passed ~1% of the train tasks and none
    of the held-out ones, so every GRPO group had zero code advantage; at step 2250 of this schedule it
    passed 68% of train and 40% of held-out tasks, little headroom. At 1750: held-out pass@1 0.36 (8
    samples per task) and a train ``code`` reward of 0.37-0.59 over the first RL steps, formatted nearly
    always. About 2.5 minutes on 2 CPU cores (``threads`` torch threads: the job has started nothing else
    yet).
    """

    steps: int = 1750
    schedule_steps: int = 3000
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 30
    # the job's completion length: a model fine-tuned on other lengths scores 0 in it
    completion_length: int = field(default_factory=lambda: int(training_default("data.max_response_length")))
    seed: int = 0
    data_seed: int = 0
    threads: int = 2

    def __post_init__(self) -> None:
        if not 0 < self.steps <= self.schedule_steps:
            raise ValueError(
                f"steps ({self.steps}) must be positive and at most schedule_steps ({self.schedule_steps})"
            )

    @property
    def cache_suffix(self) -> str:
        return (
            f"sft-n{self.steps}of{self.schedule_steps}-b{self.batch_size}-lr{self.lr:g}-w{self.warmup_steps}"
            f"-c{self.completion_length}-s{self.seed}-syn{SYNTHETIC_VERSION}d{self.data_seed}-ws{WARM_START_VERSION}"
        )


def save_warm_model(
    directory: str | os.PathLike,
    spec: TinySpec = TinySpec(),
    recipe: WarmStart = WarmStart(),
    echo: Callable[[str], None] | None = None,
) -> Path:
    """Fine-tune the random tiny model of ``spec`` with ``recipe`` on the synthetic train split into ``directory``."""
    train_file, _ = default_data_paths(recipe.data_seed)
    config = SFTConfig(
        train_files=[train_file],
        output_dir=str(directory),
        model_path=tiny_model_path(spec),
        steps=recipe.schedule_steps,
        batch_size=recipe.batch_size,
        lr=recipe.lr,
        warmup_steps=recipe.warmup_steps,
        completion_length=recipe.completion_length,
        seed=recipe.seed,
        log_every=max(1, recipe.steps // 5),
        threads=min(recipe.threads, os.cpu_count() or 1),
    )
    train(
        config,
        echo=echo or (lambda line: print(f"diffugrpo: warm start: {line}", file=sys.stderr)),
        stop_when=lambda steps_done, _lm, _tokenizer: steps_done >= recipe.steps,
    )
    return Path(directory)


def warm_model_dir(spec: TinySpec = TinySpec(), recipe: WarmStart = WarmStart()) -> Path:
    """Where the warm-started checkpoint of ``spec`` and ``recipe`` lives in the cache (nothing is built)."""
    return diffugrpo_home() / "models" / f"{spec.cache_name}-{recipe.cache_suffix}"


def warm_model_path(spec: TinySpec = TinySpec(), recipe: WarmStart = WarmStart()) -> str:
    """Path of the cached warm-started checkpoint, fine-tuned on first use (once per machine)."""
    target = warm_model_dir(spec, recipe)
    if not target.is_dir():
        print(
            f"diffugrpo: building the warm-started tiny model once into {target} "
            f"({recipe.steps} SFT steps, a few minutes on CPU)",
            file=sys.stderr,
        )
    return str(build_once(target, lambda staging: save_warm_model(staging, spec, recipe)))


def default_warm_model_path() -> str:
    """The default model of the RL job: the Dream-style tiny model, warm-started by SFT (built if needed)."""
    return warm_model_path()


def built_if_default(path: str) -> str:
    """``path``, first built when it is the default model's cache directory and not there yet.

    The job's config names the default model by its directory (:func:`warm_model_dir`), so composing a
    config costs nothing; whoever loads the model first builds it (once per machine, under a lock).
    """
    return default_warm_model_path() if Path(path) == warm_model_dir() else path
