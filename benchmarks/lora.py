"""LoRA against full fine-tuning on the same model: peak memory and seconds of a coupled-GRPO training step, and the
rollout sampling through adapters against merged weights.

Both variants train the same seeded bidirectional Qwen2 (Dream-style, untied head) on the same batch with the same
coupled masks, as the training engine does: the coupled log-probs (:func:`~diffugrpo_plugin.core.logprobs.
coupled_token_logprobs`), the backward of their token-mean, an AdamW step.

* **full**: every weight trains (SwiGLU blocks lean, the engine's default);
* **lora**: peft's LoRA at ``--rank`` on every linear layer but the head (verl's ``target_modules: all-linear``), the
  base frozen; AdamW holds the adapters only;
* **qlora**: the same adapters on the same weights loaded in 4 bits (``actor_rollout_ref.model.lora.load_in_4bit``:
  NF4 with double quantization, d1's), the way the engine and the rollout load them
  (:func:`~diffugrpo_plugin.models.dlm.load_pretrained` from a saved copy of the model).

Method (as in ``benchmarks/coupled_logprob.py``, whose helpers this reuses): each variant lives in its own fresh
process (spawn); the processes take turns, one measured step per request, round-robin. **held** is the process's
RSS after two warm-up steps (model, optimizer state) less its RSS before the model was built; **step peak** is the
peak RSS during a step above the RSS just before it; seconds are per step. On ``--device cuda`` both read the GPU's
allocated memory instead (torch's allocator). Medians over ``--repeats`` rounds, with the range; the ratios are
full's median over each variant's.

The rollout table: the ``lora`` process samples a batch (the ``entropy`` sampler at temperature 0) with the
adapters applied (how ``integration/rollout/`` samples after each sync: exact, and a sync moves the adapters
only) and with the adapters merged into a copy of the weights (what ``lora.merge=true`` would give it); same
tokens required, then seconds per batch, round-robin.

    python benchmarks/lora.py --repeats 5        # hidden 512, 8 layers, vocab 32k; about 8 min on 2 cores
    python benchmarks/lora.py --hidden 128 --layers 4 --vocab 1645 --repeats 5   # the tiny default's shape
    python benchmarks/lora.py --device cuda --dtype bfloat16 --hidden 4096 --layers 8 --vocab 126464 --batch 6 \
        --prompt 200 --completion 256 --rank 128   # LLaDA-8B's widths and d1's rank, 8 of its 32 layers (a GPU)
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

VARIANTS = ("full", "lora", "qlora")


class Memory:
    """The process's memory: resident set on the CPU, torch's allocated GPU memory on CUDA."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def now(self) -> int:
        return torch.cuda.memory_allocated() if self.cuda else _status_kib("VmRSS") * 1024

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats() if self.cuda else _reset_peak_rss()

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated() if self.cuda else _status_kib("VmHWM") * 1024


def four_bit_copy(module: torch.nn.Module, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """``module`` saved and loaded back with its linear layers in 4 bits, as the engine and the rollout load it."""
    import tempfile

    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.quantization import quantization_settings

    with tempfile.TemporaryDirectory() as directory:
        module.save_pretrained(directory)
        del module
        quantized = load_pretrained(
            directory, dtype=dtype, quantization=quantization_settings({"load_in_4bit": True}), device=device
        )
    quantized.config.is_causal = False  # a bidirectional Qwen2 (Dream-style), as build_workload made it
    return quantized


def build(settings: Settings, variant: str, rank: int, device: torch.device, dtype: torch.dtype):
    """The workload and its optimizer for one variant, on ``device`` in ``dtype``."""
    from diffugrpo_plugin.models.dlm import DiffusionLM
    from diffugrpo_plugin.models.lean_mlp import make_lean
    from diffugrpo_plugin.models.lora import with_adapters

    work = build_workload(settings, lean_mlp=variant == "full")
    if variant == "qlora":
        module = four_bit_copy(work.lm.module, dtype, device)
        if settings.checkpointing:
            module.gradient_checkpointing_enable()
    else:
        module = work.lm.module.to(device=device, dtype=dtype)
    if variant != "full":
        module = with_adapters(module, rank, "all-linear", alpha=2 * rank)
        make_lean(module, work.lm.family.swiglu)  # as the engine does: adapted blocks stay stock
    work.lm = DiffusionLM.wrap(module, mask_token_id=work.lm.mask_token_id, logits_shift=True)
    work.input_ids, work.attention_mask, work.completion_mask = (
        tensor.to(device) for tensor in (work.input_ids, work.attention_mask, work.completion_mask)
    )
    work.views = type(work.views)(work.views.noisy.to(device), work.views.coef.to(device))
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


@torch.no_grad()
def four_bit_error(module: torch.nn.Module) -> float:
    """The largest relative difference, over every 4-bit layer of ``module``, between its output and the formula
    ``x @ dequantize(W4).T + b`` on random inputs: bitsandbytes' 4-bit kernels against its dequantization."""
    from bitsandbytes.functional import dequantize_4bit
    from bitsandbytes.nn import Linear4bit

    worst = 0.0
    for layer in module.modules():
        if isinstance(layer, Linear4bit):
            dtype = layer.compute_dtype or torch.float32
            x = torch.randn(8, layer.in_features, device=layer.weight.device, dtype=dtype)  # [8, in]
            weight = dequantize_4bit(layer.weight.data, layer.weight.quant_state).to(dtype)  # [out, in]
            bias = None if layer.bias is None else layer.bias.to(dtype)
            want = torch.nn.functional.linear(x.float(), weight.float(), None if bias is None else bias.float())
            worst = max(worst, float((layer(x).float() - want).abs().max() / want.abs().max()))
    return worst


def worker(connection, settings: Settings, variant: str, rank: int, device: str, dtype: str) -> None:
    """Requests: ``("step",)``, ``("sample", applied|merged)``, ``("stop",)``."""
    from diffugrpo_plugin.models.dlm import DiffusionLM

    memory = Memory(torch.device(device))
    before = memory.now()
    work, optimizer, trainable = build(settings, variant, rank, torch.device(device), getattr(torch, dtype))
    for _ in range(2):
        training_step(work, optimizer)
    held = memory.now() - before
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
    if variant == "qlora":
        prompts = work.input_ids[:, : settings.prompt]  # [B, P]
        work.lm.module.eval()
        samplers = {"applied": lambda: sample(work.lm, prompts, settings.completion)}
        agree = four_bit_error(work.lm.module)
        work.lm.module.train()
    connection.send(("ready", held, trainable, agree if samplers else None))
    while (request := connection.recv())[0] != "stop":
        if request[0] == "step":
            memory.reset_peak()
            start_memory = memory.now()
            start = time.perf_counter()
            training_step(work, optimizer)
            if memory.cuda:
                torch.cuda.synchronize()
            connection.send((time.perf_counter() - start, memory.peak() - start_memory))
        else:
            with torch.no_grad():
                start = time.perf_counter()
                samplers[request[1]]()
                if memory.cuda:
                    torch.cuda.synchronize()
                connection.send(time.perf_counter() - start)


@contextmanager
def workers(settings: Settings, rank: int, device: str, dtype: str):
    context = multiprocessing.get_context("spawn")
    connections, processes, ready = {}, [], {}
    try:
        for variant in VARIANTS:  # one at a time: building them at once would mix their memory baselines' timing
            parent, child = context.Pipe()
            arguments = (child, settings, variant, rank, device, dtype)
            processes.append(context.Process(target=worker, args=arguments, daemon=True))
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
    parser.add_argument("--device", default="cpu", help="cpu (resident memory) or cuda (GPU memory)")
    parser.add_argument("--dtype", default="float32", help="the weights' and the 4-bit layers' compute dtype")
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing in every variant")
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
        checkpointing=args.checkpointing,
    )
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")  # freed tensors go back to the OS (see coupled_logprob)
    steps = {variant: [] for variant in VARIANTS}
    peaks = {variant: [] for variant in VARIANTS}
    sampling = {"applied": [], "merged": []}
    four_bit_sampling = []
    with workers(settings, args.rank, args.device, args.dtype) as (connections, ready):
        for _ in range(args.repeats):
            for variant in VARIANTS:
                seconds, peak = ask(connections[variant], "step")
                steps[variant].append(seconds)
                peaks[variant].append(peak)
            for mode in sampling:
                sampling[mode].append(ask(connections["lora"], "sample", mode))
            four_bit_sampling.append(ask(connections["qlora"], "sample", "applied"))
    mib = 1 / 2**20
    print(
        f"Qwen2 (bidirectional), hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}; {args.batch} "
        f"completions of {args.prompt} + {args.completion} tokens, 3 coupled views; LoRA rank {args.rank} on every "
        f"linear layer but the head (qlora: on 4-bit NF4 weights); {args.dtype} on {args.device}"
        f"{', gradient checkpointing' if args.checkpointing else ''}; {args.threads} threads; {args.repeats} rounds\n"
    )
    print("| variant | trainable parameters | held MiB (model + optimizer) | step peak MiB | step seconds |")
    print("|---|---|---|---|---|")
    for variant in VARIANTS:
        print(
            f"| {variant} | {ready[variant][2]:,} | {ready[variant][1] * mib:.0f} | {spread(peaks[variant], mib)} | "
            f"{spread(steps[variant])} |"
        )
    print()
    for variant in VARIANTS[1:]:
        ratio = [f / other for f, other in zip(steps["full"], steps[variant])]
        print(
            f"full / {variant}: held memory {ready['full'][1] / ready[variant][1]:.2f}x, step peak "
            f"{statistics.median(peaks['full']) / statistics.median(peaks[variant]):.2f}x, step seconds "
            f"{spread(ratio)}x (median and range over paired rounds)"
        )
    print()
    print(f"| rollout | seconds per batch (greedy; lora: {ready['lora'][3]:.0%} of the tokens agree) |")
    print("|---|---|")
    for mode, values in sampling.items():
        print(f"| lora, adapters {mode} | {spread(values)} |")
    print(f"| qlora, adapters applied to the 4-bit base | {spread(four_bit_sampling)} |")
    paired = [a / m for a, m in zip(sampling["applied"], sampling["merged"])]
    print(f"\napplied / merged: {spread(paired)}x (paired rounds)")
    print(
        f"4-bit layers against x @ dequantize(W4).T: largest relative difference {ready['qlora'][3]:.2g} "
        f"(bitsandbytes' {args.device} kernels)"
    )


if __name__ == "__main__":
    main()
