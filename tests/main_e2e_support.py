"""Running the main job in a subprocess and reading its log: what the end-to-end tests share (not a test module)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

SHORT = ["trainer.val_before_train=false", "trainer.test_freq=-1"]


def main_command(*overrides: str) -> list[str]:
    # verbose: these tests read verl's full per-step metric dump, which a quiet run writes to its log file only
    return [sys.executable, "-m", "verl.trainer.main", "algorithm=coupled_grpo", "diffugrpo.verbose=true", *overrides]


# verl's metric dump, one line a step: "step:3 - name:value - ...", after Ray's "(Actor pid=...) " prefix (colour
# codes included) where an actor printed it (verl's layout), at the line's start where the driver did (lean)
# verl's metric line; tqdm's bar may end just before it on the same line ("...2.13s/it]step:3 - "), and
# "training/global_step:3 - " inside it is no line of its own
METRIC_LINE = re.compile(r"(?<![\w/])step:(\d+) - ")


def metric_line_step(line: str) -> int | None:
    match = METRIC_LINE.search(line)
    return int(match.group(1)) if match else None


def logged_steps(log: str) -> list[int]:
    return [step for step in map(metric_line_step, log.splitlines()) if step is not None]


def run_until_step(command, cwd, stop_at_step: int) -> str:
    """Start a run and SIGKILL its whole process group (Ray included) once step ``stop_at_step`` is logged."""
    process = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines = []
    deadline = time.monotonic() + 1200
    for line in process.stdout:
        lines.append(line)
        if metric_line_step(line) == stop_at_step or time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            break
    process.wait()
    return "".join(lines)


def metric_by_step(log: str, name: str) -> dict[int, float]:
    """``name``'s value on each step line verl printed (``step:N - ... - name:value - ...``)."""
    values = {}
    for line in log.splitlines():
        if metric_line_step(line) is not None and f" {name}:" in line:
            step = int(line.split("step:")[1].split()[0])
            values[step] = float(line.split(f" {name}:")[1].split()[0])
    return values


def random_d1_adapter(model_path: Path, directory: Path) -> Path:
    """d1's LoRA (its seven target names, dropout 0.05; rank 8 here) on the checkpoint, with B random: the policy
    starts away from the base model, so the KL to the reference is visible from step 1."""
    import torch
    from peft import LoraConfig, TaskType, get_peft_model

    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.lora import accept_causal_lm_wrapper, adapter_state, save_adapter

    model = get_peft_model(
        accept_causal_lm_wrapper(load_pretrained(str(model_path))),
        LoraConfig(
            task_type=TaskType.CAUSAL_LM,
            r=8,
            lora_alpha=16,
            lora_dropout=0.05,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"],
        ),
    )
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
    return save_adapter(directory, adapter_state(model), model.peft_config["default"].to_dict(), str(model_path))
