"""Completion-only masked-diffusion SFT (the first stage of LLaDA / d1): ``python -m diffugrpo_plugin.training.sft``.

Each prepared row (see :mod:`diffugrpo_plugin.data`) becomes one example: the prompt through
the tokenizer's chat template with the assistant turn opened (exactly what the RL rollout and
``diffugrpo eval`` feed the model), then the target ``format_completion(reference_solution)``
followed by EOS, right-padded with EOS to a fixed ``completion_length``. Learning the EOS run
is how a diffusion model learns to stop: the sampler fills a fixed canvas of masked positions,
and the RL loss (like the reward) ends at the completion's first EOS.

The target has **no** ``<|im_end|>`` before the EOS. The rollout stops at EOS only, and the
reward decodes the response with special tokens skipped, so an ``<|im_end|>`` would be
invisible to it anyway; without it the text the reward sees ends exactly with the closing
fence and its newline, which DiffuCoder's ``code_format`` regex requires, and the model has
one token less to learn. (A ``<|im_end|>\\n`` would be worse: the newline survives decoding
and breaks the format.)

Loss (LLaDA's): per sample ``t ~ U(eps, 1)``, each completion token (EOS padding included)
masked with probability ``t`` (the ``sft`` masker), and::

    loss_b = -sum_l coef[b, l] * log p(x[b, l] | noisy[b]) / completion_length_b
    loss   = mean_b loss_b,                  coef = 1/t on masked tokens, 0 elsewhere

computed by the same row-selective, fp32 :func:`~diffugrpo_plugin.core.logprobs.coupled_token_logprobs`
the RL engine uses, on the same :class:`~diffugrpo_plugin.models.dlm.DiffusionLM` adapters. Mask
seeds come from :func:`~diffugrpo_plugin.core.masking.mask_seed_table` (base seed, step), batches
from a seeded ``torch.Generator``: the global RNG is never touched. The result is an HF
checkpoint (model + tokenizer via ``save_pretrained``), the format the RL job loads with
``actor_rollout_ref.model.path=<dir>``; with ``load_in_4bit``, the LoRA adapter alone, which the RL job continues
with ``lora_adapter_path=<dir>/lora_adapter`` on the same base.

Why not verl's SFT trainer: verl 0.9.1's ``SFTTrainer`` (and ``sft_trainer_ray``) builds its
engine with ``model_type="language_model"`` hard-coded, so our ``diffusion_lm`` engine cannot
be selected by config; its dataset expects chat ``messages`` including the answer; its
``sft_loss`` knows nothing of mask seeds or the 1/t weights; it starts the process group with
``cpu:gloo,cuda:nccl`` and saves sharded checkpoints by default. Plain torch; no verl.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import HfArgumentParser
from transformers.optimization import get_cosine_with_min_lr_schedule_with_warmup

from diffugrpo_plugin.config import training_default
from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
from diffugrpo_plugin.core.masking import make_sft, mask_seed_table
from diffugrpo_plugin.data import DataError, format_completion
from diffugrpo_plugin.data.rows import read_parquet_rows
from diffugrpo_plugin.models.dlm import DiffusionLM
from diffugrpo_plugin.models.family import IMPLEMENTATIONS
from diffugrpo_plugin.sampling import padding_id

EVAL_STEP = 2**31 - 1
"""The mask-seed "step" of validation losses: far from any training step, so never a training mask."""


class SFTError(ValueError):
    """The SFT data or settings cannot be used; the message names what to fix."""


@dataclass(frozen=True)
class SFTConfig:
    """Everything one SFT run depends on (also written next to the checkpoint as ``sft_config.json``).

    The command line is built from these fields (``--train-files``, ``--lr``, ...; ``--help``
    shows each field's help). ``completion_length`` counts the target's tokens and its EOS
    padding; longer targets (and prompts longer than ``max_prompt_length``) are left out and
    counted. The learning rate warms up linearly over ``warmup_steps``, then follows a cosine down
    to ``min_lr_ratio * lr`` (transformers' ``cosine_with_min_lr``, DiffuCoder's schedule) at step
    ``schedule_steps`` (0: ``steps``) and stays there.
    """

    train_files: list[str] = field(
        metadata={"help": "prepared rows (`diffugrpo data prepare`); each needs extra_info.reference_solution"}
    )
    output_dir: str = field(metadata={"help": "where the checkpoint is written"})
    model_path: str | None = field(
        default=None,
        metadata={
            "aliases": ["--model"],
            "help": "checkpoint to start from (default: the tiny built-in Dream-style model)",
        },
    )
    family: str | None = field(default=None, metadata={"help": "model family (default: detected from config.json)"})
    implementation: str = field(
        default="auto",
        metadata={
            "help": "auto: our native Dream/LLaDA classes when they fit, else the checkpoint's own code; native; remote"
        },
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "allow the checkpoint's own modeling code"})
    val_files: list[str] = field(default_factory=list, metadata={"help": "rows for a validation loss"})
    steps: int = 1000
    schedule_steps: int = field(
        default=0,
        metadata={"help": "the cosine's length (0: --steps); the steps after it run at the floor, min_lr_ratio * lr"},
    )
    batch_size: int = 8
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    max_prompt_length: int = 160
    completion_length: int = field(
        default_factory=lambda: int(training_default("data.max_response_length")),
        metadata={"help": "completion tokens (default: the RL job's data.max_response_length)"},
    )
    eps: float = field(default=1e-3, metadata={"help": "mask ratios are drawn from U(eps, 1)"})
    seed: int = 0
    log_every: int = 50
    eval_every: int = field(default=0, metadata={"help": "validation loss every N steps (0: at the end only)"})
    val_masks: int = field(default=4, metadata={"help": "fixed masks per validation example"})
    tensorboard_dir: str | None = field(default=None, metadata={"help": "write train/loss, train/lr, val/loss here"})
    lora_rank: int = field(
        default=0,
        metadata={
            "help": "train LoRA adapters of this rank instead of every weight (0: full fine-tuning); the checkpoint is the "
            "merged model, with the adapter alone in <output_dir>/lora_adapter (with --load-in-4bit: the adapter only)"
        },
    )
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scale numerator (scale = lora_alpha / lora_rank)"})
    lora_dropout: float = field(default=0.0, metadata={"help": "dropout on each adapter's input"})
    load_in_4bit: bool = field(
        default=False,
        metadata={
            "help": "with --lora-rank: the frozen base in 4 bits (QLoRA: NF4, double quantization); the checkpoint is "
            "then the adapter alone in <output_dir>/lora_adapter (merging would round it into 4-bit weights), which "
            "the RL job continues with lora_adapter_path and lora.load_in_4bit=true on the same base"
        },
    )
    target_modules: str = field(
        default="all-linear",
        metadata={
            "help": "comma-separated module names to adapt, or all-linear (every linear layer but the vocabulary head)"
        },
    )
    threads: int = field(
        default=1,
        metadata={
            "help": "torch intra-op threads while training (0: leave torch's setting); one suits tiny models, several "
            "spin against each other on a loaded host (measured 3-5x slower on a busy 2-core machine)"
        },
    )

    def __post_init__(self) -> None:
        positive = ("steps", "batch_size", "max_prompt_length", "completion_length", "log_every", "val_masks")
        bad = [f"{name}={getattr(self, name)}" for name in positive if getattr(self, name) < 1]
        bad += [
            f"{name}={getattr(self, name)}"
            for name in ("warmup_steps", "eval_every", "weight_decay", "threads", "lora_rank", "schedule_steps")
            if getattr(self, name) < 0
        ]
        if not 0 <= self.lora_dropout < 1:
            bad.append(f"lora_dropout={self.lora_dropout} (must be in [0, 1))")
        if self.seed < 0:
            bad.append(f"seed={self.seed} (must be non-negative)")
        if 0 < self.schedule_steps <= self.warmup_steps:
            bad.append(
                f"schedule_steps={self.schedule_steps} (must end after warmup_steps={self.warmup_steps}, or be 0)"
            )
        if not self.lr > 0 or not 0 <= self.min_lr_ratio <= 1:
            bad.append(f"lr={self.lr}, min_lr_ratio={self.min_lr_ratio} (need lr > 0, 0 <= min_lr_ratio <= 1)")
        if self.implementation not in IMPLEMENTATIONS:
            bad.append(f"implementation={self.implementation} (one of {', '.join(IMPLEMENTATIONS)})")
        if bad:
            raise SFTError(f"invalid SFT settings: {', '.join(bad)} (counts must be at least 1, rates non-negative)")
        if self.load_in_4bit and not self.lora_rank:
            raise SFTError("--load-in-4bit trains LoRA adapters on a frozen 4-bit base: give --lora-rank too")
        if self.load_in_4bit and (Path(self.output_dir) / "config.json").exists():
            raise SFTError(
                f"--output-dir {self.output_dir} holds a model, which a 4-bit run (saving its adapter alone) would leave "
                f"beside the adapter as if it were the result: choose an empty directory"
            )
        if not self.train_files:
            raise SFTError("no training data: give at least one prepared parquet (--train-files)")


@dataclass(frozen=True)
class Example:
    """One training pair: prompt ids (chat template applied) and target ids ending with EOS (unpadded)."""

    prompt_ids: tuple[int, ...]
    target_ids: tuple[int, ...]


@dataclass
class LoadedExamples:
    """The examples of some files, and how many rows were left out for being too long."""

    examples: list[Example] = field(default_factory=list)
    overlong_prompts: int = 0
    overlong_targets: int = 0


@dataclass(frozen=True)
class Batch:
    """A collated batch: prompts left-padded to the batch's widest, completions of fixed length.

    Attributes:
        input_ids: prompt then target then EOS padding.  # [B, P + C]
        attention_mask: 1 on prompt tokens and on every completion position (EOS padding too).  # [B, P + C]
        completion_mask: True on the ``C`` completion positions.  # [B, P + C]
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor


# --------------------------------------------------------------------------- data


def target_text(reference_solution: str) -> str:
    """The text a model is trained to write: one python fence ending with a newline (then EOS)."""
    return format_completion(reference_solution)


def prompt_ids_of(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """The prompt as the rollout sees it: the chat template with the assistant turn opened."""
    text = tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def examples_from_rows(
    rows: Sequence[dict[str, Any]], tokenizer: Any, completion_length: int, max_prompt_length: int, where: str = "rows"
) -> LoadedExamples:
    """Examples from prepared rows; a row without ``prompt`` or ``extra_info.reference_solution`` is an error."""
    loaded = LoadedExamples()
    for number, row in enumerate(rows, start=1):
        messages = row.get("prompt")
        solution = (row.get("extra_info") or {}).get("reference_solution")
        if not isinstance(messages, list) or not messages:
            raise SFTError(f"{where} row {number}: missing field 'prompt' (a chat list)")
        if not isinstance(solution, str) or not solution.strip():
            raise SFTError(
                f"{where} row {number}: missing field 'extra_info.reference_solution'; SFT needs a "
                f"reference solution for every row (prepare a source that ships them: mbpp, synthetic, "
                f"leetcode with 'completion', jsonl with --solution-field)"
            )
        prompt = prompt_ids_of(tokenizer, messages)
        target = tokenizer.encode(target_text(solution), add_special_tokens=False) + [tokenizer.eos_token_id]
        if len(prompt) > max_prompt_length:
            loaded.overlong_prompts += 1
        elif len(target) > completion_length:
            loaded.overlong_targets += 1
        else:
            loaded.examples.append(Example(tuple(prompt), tuple(target)))
    return loaded


def load_examples(
    paths: Sequence[str], tokenizer: Any, completion_length: int, max_prompt_length: int
) -> LoadedExamples:
    """Examples of every file, in file order; an error when none fits the lengths."""
    if tokenizer.eos_token_id is None:
        raise SFTError(f"the tokenizer of {tokenizer.name_or_path} has no EOS token; SFT pads targets with it")
    loaded = LoadedExamples()
    for path in paths:
        try:
            rows = read_parquet_rows(path)
        except DataError as error:
            raise SFTError(str(error)) from error
        part = examples_from_rows(rows, tokenizer, completion_length, max_prompt_length, Path(path).name)
        loaded.examples += part.examples
        loaded.overlong_prompts += part.overlong_prompts
        loaded.overlong_targets += part.overlong_targets
    if not loaded.examples:
        raise SFTError(
            f"no example of {list(paths)} fits: {loaded.overlong_targets} targets are longer than "
            f"completion_length={completion_length} tokens (EOS included) and {loaded.overlong_prompts} "
            f"prompts longer than max_prompt_length={max_prompt_length}; raise them"
        )
    return loaded


def collate(examples: Sequence[Example], completion_length: int, pad_id: int, eos_id: int) -> Batch:
    """Left-pad prompts (with ``pad_id``, not attended), right-pad targets with EOS to ``completion_length``."""
    width = max(len(example.prompt_ids) for example in examples)
    rows, attention = [], []
    for example in examples:
        padding = width - len(example.prompt_ids)
        eos_run = completion_length - len(example.target_ids)
        rows.append([pad_id] * padding + list(example.prompt_ids) + list(example.target_ids) + [eos_id] * eos_run)
        attention.append([0] * padding + [1] * (len(example.prompt_ids) + completion_length))
    input_ids = torch.tensor(rows)  # [B, P + C]
    completion_mask = torch.zeros_like(input_ids, dtype=torch.bool)  # [B, P + C]
    completion_mask[:, width:] = True
    return Batch(input_ids=input_ids, attention_mask=torch.tensor(attention), completion_mask=completion_mask)


# --------------------------------------------------------------------------- loss


def masked_diffusion_loss(lm: DiffusionLM, batch: Batch, seeds: torch.Tensor, masker: Any) -> torch.Tensor:
    """LLaDA's SFT loss: ``mean_b -sum_l coef * logp / completion_length_b`` (see the module docstring).

    ``seeds`` [B] int64 seed each sample's mask; ``masker`` is an ``sft`` masker (any masker works).
    """
    views = masker.views(batch.input_ids, batch.completion_mask, lm.mask_token_id, seeds)
    logp = coupled_token_logprobs(lm, views, batch.input_ids, batch.attention_mask).logp  # [B, L], coef-weighted
    lengths = batch.completion_mask.sum(dim=1)  # [B]
    per_sample = -(logp * batch.completion_mask).sum(dim=1) / lengths  # [B]
    return per_sample.mean()


def lr_schedule(optimizer: torch.optim.Optimizer, config: SFTConfig) -> torch.optim.lr_scheduler.LRScheduler:
    """transformers' ``cosine_with_min_lr`` (DiffuCoder's, and verl's ``cosine`` for the RL job): step ``s`` runs at
    ``lr s / warmup_steps`` during the warm-up, then ``(s - warmup_steps) / (S - warmup_steps)`` of the way
    down a half cosine from ``lr`` to ``min_lr_ratio * lr``, ``S`` being ``schedule_steps`` (or ``steps``); from
    step ``S`` on it stays at ``min_lr_ratio * lr``."""
    length = config.schedule_steps or config.steps
    schedule = get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, config.warmup_steps, length, min_lr_rate=config.min_lr_ratio
    )
    # past its end transformers' cosine climbs again
    schedule.lr_lambdas[0] = functools.partial(_held_after, schedule.lr_lambdas[0], length)
    return schedule


def _held_after(factor: Callable[[int], float], length: int, step: int) -> float:
    return factor(min(step, length))


def batch_order(num_examples: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """Example indices of each step: seeded reshuffles (epochs) cut into batches; an epoch's tail
    runs into the next epoch's start, so every batch is full and every example is seen equally."""
    generator = torch.Generator().manual_seed(seed)
    stream: list[int] = []
    while len(stream) < steps * batch_size:
        stream += torch.randperm(num_examples, generator=generator).tolist()
    return [stream[i * batch_size : (i + 1) * batch_size] for i in range(steps)]


@torch.no_grad()
def validation_loss(
    lm: DiffusionLM, examples: Sequence[Example], config: SFTConfig, pad_id: int, eos_id: int, masker: Any
) -> float:
    """Mean loss over ``examples``, each under ``val_masks`` fixed masks: the same value every call
    for the same weights, so curves compare."""
    total, count = 0.0, 0
    repeated = [example for example in examples for _ in range(config.val_masks)]
    seeds = mask_seed_table(config.seed, EVAL_STEP, len(repeated), 1)[:, 0]  # [N]
    for start in range(0, len(repeated), config.batch_size):
        chunk = repeated[start : start + config.batch_size]
        batch = collate(chunk, config.completion_length, pad_id, eos_id)
        loss = masked_diffusion_loss(lm, batch, seeds[start : start + len(chunk)], masker)
        total += float(loss) * len(chunk)
        count += len(chunk)
    return total / count


# --------------------------------------------------------------------------- training


@dataclass
class SFTResult:
    """What a run produced: the checkpoint, the logged (step, loss) pairs and the wall time."""

    output_dir: str
    train_losses: list[tuple[int, float]]
    val_losses: list[tuple[int, float]]
    seconds: float
    num_examples: int
    steps_done: int = 0


class _Scalars:
    """TensorBoard scalars when a directory is given, nothing otherwise."""

    def __init__(self, tensorboard_dir: str | None):
        self.writer = None
        if tensorboard_dir:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(tensorboard_dir)

    def add(self, step: int, values: dict[str, float]) -> None:
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(name, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


@dataclass
class _Learner:
    """The model being trained and what a step needs besides the batch."""

    lm: DiffusionLM
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    masker: Any
    pad_id: int
    eos_id: int

    def step(self, examples: Sequence[Example], seeds: torch.Tensor, config: SFTConfig) -> dict[str, float]:
        """One optimiser step on ``examples`` (and one of the schedule); returns the step's scalars."""
        lr = self.schedule.get_last_lr()[0]
        batch = collate(examples, config.completion_length, self.pad_id, self.eos_id)
        loss = masked_diffusion_loss(self.lm, batch, seeds, self.masker)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.lm.module.parameters(), config.max_grad_norm)
        self.optimizer.step()
        self.schedule.step()
        return {"train/loss": loss.item(), "train/lr": lr, "train/grad_norm": grad_norm.item()}

    def validation_loss(self, examples: Sequence[Example], config: SFTConfig) -> float:
        return validation_loss(self.lm, examples, config, self.pad_id, self.eos_id, self.masker)


def base_model_path(config: SFTConfig) -> str:
    """The checkpoint fine-tuned: ``model_path``, or the tiny built-in Dream-style one."""
    if config.model_path is not None:
        return config.model_path
    from diffugrpo_plugin.models.tiny import default_tiny_model_path

    return default_tiny_model_path()


def load_model_and_tokenizer(config: SFTConfig) -> tuple[DiffusionLM, Any]:
    """The model to fine-tune (float32, train mode) and its tokenizer; no path: the tiny built-in Dream-style one."""
    from diffugrpo_plugin.models.dlm import load_diffusion_lm
    from diffugrpo_plugin.models.quantization import quantization_settings

    lm, tokenizer = load_diffusion_lm(
        base_model_path(config),
        "cpu",
        trust_remote_code=config.trust_remote_code,
        family=config.family,
        implementation=config.implementation,
        quantization=quantization_settings({"load_in_4bit": config.load_in_4bit}),
    )
    if config.lora_rank:
        lm = _with_adapters(lm, tokenizer, config)
    lm.module.train()
    return lm, tokenizer


def _with_adapters(lm: DiffusionLM, tokenizer: Any, config: SFTConfig) -> DiffusionLM:
    """The model with trainable LoRA adapters (peft, as the RL engine builds them) and every other weight frozen."""
    from diffugrpo_plugin.models.lora import parse_targets, refuse_adapted_head, with_adapters

    try:
        model = with_adapters(
            lm.module,
            config.lora_rank,
            parse_targets(config.target_modules),
            alpha=config.lora_alpha,
            dropout=config.lora_dropout,
        )
    except ValueError as error:
        raise SFTError(f"LoRA: {' '.join(str(error).split())} (--target-modules)") from error
    refuse_adapted_head(model, lm.family)
    return DiffusionLM.wrap(
        model, tokenizer, mask_token_id=lm.mask_token_id, logits_shift=lm.shift_logits, family=lm.family.name
    )


StopRule = Callable[[int, DiffusionLM, Any], bool]
"""``(steps_done, lm, tokenizer) -> stop now?``: called after every step with the model in eval mode
and gradients off, e.g. to stop once sampled completions start passing tests (the CPU demo)."""


def train(config: SFTConfig, echo: Callable[[str], None] = print, stop_when: StopRule | None = None) -> SFTResult:
    """Run SFT (``config.steps`` steps, fewer when ``stop_when`` says so) and save the checkpoint into
    ``config.output_dir``; the learning-rate schedule is always the one of ``config.steps`` (and
    ``config.schedule_steps``), wherever the run stops."""
    previous_threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        return _train(config, echo, stop_when)
    finally:
        torch.set_num_threads(previous_threads)


def _load_data(config: SFTConfig, tokenizer: Any, echo: Callable[[str], None]) -> tuple[list[Example], list[Example]]:
    loaded = load_examples(config.train_files, tokenizer, config.completion_length, config.max_prompt_length)
    val = (
        load_examples(config.val_files, tokenizer, config.completion_length, config.max_prompt_length).examples
        if config.val_files
        else []
    )
    echo(
        f"sft: {len(loaded.examples)} examples ({loaded.overlong_targets} targets over {config.completion_length} "
        f"tokens and {loaded.overlong_prompts} prompts over {config.max_prompt_length} left out), "
        f"{len(val)} validation examples, {config.steps} steps of {config.batch_size}"
    )
    return loaded.examples, val


def _train(config: SFTConfig, echo: Callable[[str], None], stop_when: StopRule | None) -> SFTResult:
    started = time.perf_counter()
    lm, tokenizer = load_model_and_tokenizer(config)
    examples, val = _load_data(config, tokenizer, echo)
    trainable = [parameter for parameter in lm.module.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    learner = _Learner(
        lm=lm,
        optimizer=optimizer,
        schedule=lr_schedule(optimizer, config),
        masker=make_sft(config.eps),
        pad_id=padding_id(tokenizer),
        eos_id=tokenizer.eos_token_id,
    )
    scalars = _Scalars(config.tensorboard_dir)
    result = SFTResult(config.output_dir, [], [], 0.0, len(examples))
    window: list[float] = []
    for step, indices in enumerate(batch_order(len(examples), config.batch_size, config.steps, config.seed)):
        seeds = mask_seed_table(config.seed, step, len(indices), 1)[:, 0]  # [B]
        values = learner.step([examples[i] for i in indices], seeds, config)
        scalars.add(step + 1, values)
        window.append(values["train/loss"])
        done = step + 1
        if done % config.log_every == 0 or done == config.steps:
            result.train_losses.append((done, sum(window) / len(window)))
            window = []
            echo(
                f"sft: step {done}/{config.steps} loss {result.train_losses[-1][1]:.4f} lr {values['train/lr']:.2e} "
                f"({time.perf_counter() - started:.0f} s)"
            )
        if val and ((config.eval_every and done % config.eval_every == 0) or done == config.steps):
            result.val_losses.append((done, learner.validation_loss(val, config)))
            scalars.add(done, {"val/loss": result.val_losses[-1][1]})
            echo(f"sft: step {done} validation loss {result.val_losses[-1][1]:.4f}")
        if stop_when is not None and _asks_to_stop(stop_when, done, learner.lm, tokenizer):
            echo(f"sft: stopped after step {done} of {config.steps}")
            break
    result.steps_done = done
    scalars.close()
    save_checkpoint(lm.module, tokenizer, config, done)
    result.seconds = time.perf_counter() - started
    echo(f"sft: saved {config.output_dir} after {result.seconds:.0f} s")
    return result


def _asks_to_stop(stop_when: StopRule, done: int, lm: DiffusionLM, tokenizer: Any) -> bool:
    lm.module.eval()
    try:
        with torch.no_grad():
            return stop_when(done, lm, tokenizer)
    finally:
        lm.module.train()


def save_checkpoint(module: torch.nn.Module, tokenizer: Any, config: SFTConfig, steps_done: int) -> Path:
    """An HF checkpoint the RL job loads (``actor_rollout_ref.model.path``), plus the run's settings
    and how many steps it ran. A LoRA ``module`` (peft) also leaves its adapter in ``lora_adapter/`` and is merged
    in place: call this last. On a 4-bit base (``load_in_4bit``) the adapter, naming its base, is the checkpoint:
    no model."""
    output = Path(config.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    if hasattr(module, "peft_config"):  # LoRA: the adapter alone, then the merged model (what the RL job loads)
        from diffugrpo_plugin.models.lora import adapter_state, save_adapter

        adapter = module.peft_config["default"].to_dict()
        save_adapter(output / "lora_adapter", adapter_state(module), adapter, base_model_path(config))
        module = None if config.load_in_4bit else module.merge_and_unload()
    if module is not None:
        module.save_pretrained(output)
    tokenizer.save_pretrained(output)
    settings = {name: value for name, value in asdict(config).items() if name != "output_dir"}  # may be a staging dir
    settings["steps_done"] = steps_done
    (output / "sft_config.json").write_text(json.dumps(settings, indent=2) + "\n")
    return output


# --------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None = None) -> SFTConfig:
    """An :class:`SFTConfig` from the command line, one option per field."""
    parser = HfArgumentParser(
        SFTConfig,
        prog="python -m diffugrpo_plugin.training.sft",
        description="Completion-only masked-diffusion SFT (LLaDA's loss) on prepared parquet "
        "rows; saves an HF checkpoint the RL job loads with "
        "actor_rollout_ref.model.path=OUTPUT_DIR.",
    )
    (config,) = parser.parse_args_into_dataclasses(args=argv)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    from diffugrpo_plugin.models.dlm import ModelConfigError

    try:
        train(parse_args(argv))
    except (SFTError, ModelConfigError, OSError) as error:
        print(f"diffugrpo sft: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
