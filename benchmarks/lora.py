"""LoRA against full fine-tuning on the same model: peak memory and seconds of a coupled-GRPO training step, and the
rollout sampling through adapters against merged weights.

Both variants train the same seeded bidirectional Qwen2 (Dream-style, untied head) on the same batch with the same
coupled masks, as the training engine does: the coupled log-probs (:func:`~diffugrpo_plugin.core.logprobs.
coupled_token_logprobs`), the backward of their token-mean, an AdamW step.

* **full**: every weight trains (SwiGLU blocks lean, the engine's default);
* **lora**: peft's LoRA at ``--rank`` on every linear layer but the head (verl's ``target_modules: all-linear``), the
  base frozen; AdamW holds the adapters only.

Method (as in ``benchmarks/coupled_logprob.py``, whose helpers this reuses): each variant lives in its own fresh
process (spawn); the processes take turns, one measured step per request, round-robin. **held** is the process's
RSS after two warm-up steps (model, optimizer state) less its RSS before the model was built; **step peak** is the
peak RSS during a step above the RSS just before it; seconds are per step. Medians over ``--repeats`` rounds, with
the range; ``x`` columns are full's median over lora's.

The rollout table: the ``lora`` process samples a batch (the ``entropy`` sampler at temperature 0) with the
adapters applied (how ``integration/rollout.py`` samples after each sync: exact, and a sync moves the adapters
only) and with the adapters merged into a copy of the weights (what ``lora.merge=true`` would give it); same
tokens required, then seconds per batch, round-robin.

    python benchmarks/lora.py --repeats 5        # hidden 512, 8 layers, vocab 32k; about 8 min on 2 cores
    python benchmarks/lora.py --hidden 128 --layers 4 --vocab 1645 --repeats 5   # the tiny default's shape
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from contextlib import contextmanager

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from coupled_logprob import Settings, _reset_peak_rss, _status_kib, build_workload  # noqa: E402

VARIANTS = ("full", "lora")


def build(settings: Settings, variant: str, rank: int):
    """The workload and its optimizer for one variant."""
    from diffugrpo_plugin.models.dlm import DiffusionLM
    from diffugrpo_plugin.models.lean_mlp import make_lean
    from diffugrpo_plugin.models.lora import with_adapters

    work = build_workload(settings, lean_mlp=variant == "full")
    if variant == "lora":
        module = with_adapters(work.lm.module, rank, "all-linear", alpha=2 * rank)
        make_lean(module, work.lm.family.swiglu)  # as the engine does: adapted blocks stay stock
        work.lm = DiffusionLM.wrap(module, mask_token_id=work.lm.mask_token_id, logits_shift=True)
    trainable = [p for p in work.lm.module.parameters() if p.requires_grad]
    return work, torch.optim.AdamW(trainable, lr=1e-5), sum(p.numel() for p in trainable)


def training_step(work, optimizer) -> None:
    from diffugrpo_plugin.core.logprobs import coupled_token_logprobs

    logp = coupled_token_logprobs(work.lm, work.views, work.input_ids, work.attention_mask).logp  # [B, L]
    ((logp * work.completion_mask).sum() / work.completion_mask.sum()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def sample(lm, prompt_ids, new_tokens: int) -> torch.Tensor:
    from diffugrpo_plugin.sampling import build_sampler

    sampler = build_sampler("entropy", steps=new_tokens // 2, temperature=0.0)
    eos = lm.mask_token_id - 1  # any token: a random model stops where it lands on it
    return sampler.generate(
        lm, prompt_ids, torch.ones_like(prompt_ids), new_tokens, eos_token_id=eos, pad_token_id=eos
    ).completion_ids


def worker(connection, settings: Settings, variant: str, rank: int) -> None:
    """Requests: ``("step",)``, ``("sample", applied|merged)``, ``("stop",)``."""
    from diffugrpo_plugin.models.dlm import DiffusionLM

    before = _status_kib("VmRSS")
    work, optimizer, trainable = build(settings, variant, rank)
    for _ in range(2):
        training_step(work, optimizer)
    held = (_status_kib("VmRSS") - before) * 1024
    samplers = {}
    if variant == "lora":
        import copy

        prompts = work.input_ids[:, : settings.prompt]  # [B, P]
        merged = DiffusionLM.wrap(
            copy.deepcopy(work.lm.module).merge_and_unload().eval(),
            mask_token_id=work.lm.mask_token_id,
            logits_shift=True,
        )
        work.lm.module.eval()
        samplers = {
            "applied": lambda: sample(work.lm, prompts, settings.completion),
            "merged": lambda: sample(merged, prompts, settings.completion),
        }
        with torch.no_grad():
            agree = (samplers["applied"]() == samplers["merged"]()).float().mean().item()
        work.lm.module.train()
    connection.send(("ready", held, trainable, agree if samplers else None))
    while (request := connection.recv())[0] != "stop":
        if request[0] == "step":
            _reset_peak_rss()
            start_rss = _status_kib("VmRSS")
            start = time.perf_counter()
            training_step(work, optimizer)
            connection.send((time.perf_counter() - start, (_status_kib("VmHWM") - start_rss) * 1024))
        else:
            with torch.no_grad():
                start = time.perf_counter()
                samplers[request[1]]()
                connection.send(time.perf_counter() - start)


@contextmanager
def workers(settings: Settings, rank: int):
    context = multiprocessing.get_context("spawn")
    connections, processes, ready = {}, [], {}
    try:
        for variant in VARIANTS:  # one at a time: building both at once would mix their RSS baselines' timing
            parent, child = context.Pipe()
            processes.append(context.Process(target=worker, args=(child, settings, variant, rank), daemon=True))
            processes[-1].start()
            connections[variant] = parent
            ready[variant] = parent.recv()
        yield connections, ready
    finally:
        for connection in connections.values():
            connection.send(("stop",))
        for process in processes:
            process.join(timeout=30)


def ask(connection, *request):
    connection.send(request)
    return connection.recv()


def spread(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    return (
        f"{statistics.median(values) * scale:.{digits}g} ({min(values) * scale:.{digits}g}-"
        f"{max(values) * scale:.{digits}g})"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=4, help="completions per training step")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--completion", type=int, default=64)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    settings = Settings(
        vocab=args.vocab,
        batch=args.batch,
        prompt=args.prompt,
        completion=args.completion,
        hidden=args.hidden,
        layers=args.layers,
        threads=args.threads,
    )
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")  # freed tensors go back to the OS (see coupled_logprob)
    steps = {variant: [] for variant in VARIANTS}
    peaks = {variant: [] for variant in VARIANTS}
    sampling = {"applied": [], "merged": []}
    with workers(settings, args.rank) as (connections, ready):
        for _ in range(args.repeats):
            for variant in VARIANTS:
                seconds, peak = ask(connections[variant], "step")
                steps[variant].append(seconds)
                peaks[variant].append(peak)
            for mode in sampling:
                sampling[mode].append(ask(connections["lora"], "sample", mode))
    mib = 1 / 2**20
    print(
        f"Qwen2 (bidirectional), hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}; {args.batch} "
        f"completions of {args.prompt} + {args.completion} tokens, 3 coupled views; LoRA rank {args.rank} on every "
        f"linear layer but the head; {args.threads} threads; {args.repeats} rounds\n"
    )
    print("| variant | trainable parameters | held MiB (model + optimizer) | step peak MiB | step seconds |")
    print("|---|---|---|---|---|")
    for variant in VARIANTS:
        print(
            f"| {variant} | {ready[variant][2]:,} | {ready[variant][1] * mib:.0f} | {spread(peaks[variant], mib)} | "
            f"{spread(steps[variant])} |"
        )
    ratio = [f / lo for f, lo in zip(steps["full"], steps["lora"])]
    print(
        f"\nfull / lora: held memory {ready['full'][1] / ready['lora'][1]:.2f}x, step peak "
        f"{statistics.median(peaks['full']) / statistics.median(peaks['lora']):.2f}x, step seconds "
        f"{spread(ratio)}x (median and range over paired rounds)\n"
    )
    print(f"| rollout, lora process | seconds per batch (greedy; {ready['lora'][3]:.0%} of the tokens agree) |")
    print("|---|---|")
    for mode, values in sampling.items():
        print(f"| adapters {mode} | {spread(values)} |")
    paired = [a / m for a, m in zip(sampling["applied"], sampling["merged"])]
    print(f"\napplied / merged: {spread(paired)}x (paired rounds)")


if __name__ == "__main__":
    main()
