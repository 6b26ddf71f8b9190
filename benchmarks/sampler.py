"""Generated tokens/s of the diffusion samplers on CPU: the reference-style plain sampler
against the fast path, on the same prompts in the same run.

Baseline: the sampler (``entropy`` by default) run as the reference runs it: one full forward
per step, steps = generation length, no cache (for ``entropy``: one block, as DiffuCoder). Each fast-path part is then switched
on alone and together: confidence-threshold parallel decoding, the block-wise prefix KV cache
(which needs blocks). For every configuration the table gives the median tokens/s over the
repeats, the ratio to the baseline's median, the model forwards per completion, how many of
its tokens agree with the baseline's (greedy, so the differences come from the sampler alone)
and the mean ``code_format`` reward when that reward plugin is installed.

    python benchmarks/sampler.py                 # the default tiny Dream-style model, MBPP prompts
    python benchmarks/sampler.py --model PATH --prompts 8 --new-tokens 256 --repeats 3
    python benchmarks/sampler.py --sampler llada  # the default tiny LLaDA-style model
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import torch

MBPP = "/work/shared/data/mbpp/mbpp.jsonl"


@dataclass(frozen=True)
class Config:
    label: str
    options: dict


def configurations(block_length: int, threshold: float, reference_block_length: int | None) -> list[Config]:
    """The baseline, then each fast-path part on top of it, then all of them."""
    reference = {"block_length": reference_block_length} if reference_block_length else {}
    blocks = {"block_length": block_length}
    return [
        Config("plain (reference)", reference),
        Config(f"threshold {threshold}", {**reference, "threshold": threshold}),
        Config(f"blocks of {block_length}", blocks),
        Config("blocks + prefix cache", {**blocks, "kv_cache": True}),
        Config("fast: blocks + cache + threshold", {**blocks, "kv_cache": True, "threshold": threshold}),
    ]


def mbpp_prompts(tokenizer, count: int, path: str) -> list[str]:
    from diffugrpo_plugin.data import build_prompt, mbpp_problems

    problems = mbpp_problems(path, split="test")[:count]
    return [tokenizer.apply_chat_template([{"role": "user", "content": build_prompt(p.question, p.test_cases)}],
                                          tokenize=False, add_generation_prompt=True) for p in problems]


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def encode(tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and mask.  # -> [B, P], [B, P]"""
    rows = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    width = max(len(row) for row in rows)
    pad = pad_id(tokenizer)
    ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    return ids, mask


def format_reward():
    """The ``code_format`` reward function, or None when that plugin is not installed."""
    from diffugrpo_plugin.plugins import PluginError, lookup

    try:
        return lookup("reward", "code_format").obj
    except PluginError:
        return None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint (default: the tiny built-in model of the family)")
    parser.add_argument("--sampler", default="entropy", help="a registered sampler (default: entropy)")
    parser.add_argument("--reference-block-length", type=int, default=None,
                        help="block length of the baseline (LLaDA's reference uses blocks; default: one block)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is steadiest on a "
                                                                "shared machine)")
    parser.add_argument("--device", default="cpu", help="torch device (cpu by default; e.g. cuda for a real "
                                                           "checkpoint)")
    parser.add_argument("--mbpp", default=MBPP)
    return parser.parse_args()


@dataclass
class Measurement:
    config: Config
    wall: list[float]  # seconds per repeat
    cpu: list[float]  # process CPU seconds per repeat
    output: object = None  # the last GenerationOutput


def measure(configs: list[Config], sampler_name: str, lm, ids, mask, new_tokens: int, eos: int, pad: int,
            repeats: int) -> list[Measurement]:
    """Time every configuration ``repeats`` times, round-robin, so drifting machine load hits all alike."""
    from diffugrpo_plugin.sampling import build_sampler

    samplers = [build_sampler(sampler_name, **config.options) for config in configs]
    measurements = [Measurement(config, [], []) for config in configs]
    seeds = list(range(ids.shape[0]))
    for _ in range(repeats):
        for sampler, measurement in zip(samplers, measurements):
            wall, cpu = time.perf_counter(), time.process_time()
            measurement.output = sampler.generate(lm, ids, mask, new_tokens, eos_token_id=eos, pad_token_id=pad,
                                                  seeds=seeds)
            if ids.is_cuda:
                torch.cuda.synchronize()
            measurement.wall.append(time.perf_counter() - wall)
            measurement.cpu.append(time.process_time() - cpu)
    return measurements


def print_table(measurements: list[Measurement], generated: int, texts_of, reward) -> None:
    baseline = measurements[0]
    header = (f"{'configuration':<36}{'tokens/s':>10}{'x plain':>9}{'x plain cpu':>13}{'forwards':>10}"
              f"{'agree':>8}{'code_format':>13}")
    print(header + "\n" + "-" * len(header))
    for m in measurements:
        wall, cpu = statistics.median(m.wall), statistics.median(m.cpu)
        agreement = (m.output.completion_ids == baseline.output.completion_ids).float().mean().item()
        reward_text = f"{statistics.mean(s or 0.0 for s in reward(texts_of(m.output))):.3f}" if reward else "n/a"
        print(f"{m.config.label:<36}{generated / wall:>10.1f}{statistics.median(baseline.wall) / wall:>9.2f}"
              f"{statistics.median(baseline.cpu) / cpu:>13.2f}{m.output.forwards:>10d}{agreement:>8.1%}"
              f"{reward_text:>13}")


def main() -> None:
    args = parse_args()
    from transformers import AutoTokenizer

    from diffugrpo_plugin.models import DiffusionLM, load_pretrained

    torch.set_num_threads(args.threads)
    if args.model is None:
        from diffugrpo_plugin.tiny import default_tiny_model_path

        args.model = default_tiny_model_path(family="llada" if args.sampler == "llada" else "dream")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    lm = DiffusionLM.wrap(load_pretrained(args.model).eval().to(args.device), tokenizer)
    ids, mask = (t.to(args.device) for t in encode(tokenizer, mbpp_prompts(tokenizer, args.prompts, args.mbpp)))
    print(f"model {args.model}\n{args.prompts} MBPP prompts (mean {mask.sum(1).float().mean():.0f} tokens), "
          f"{args.new_tokens} new tokens each, greedy '{args.sampler}' sampler, {args.threads} thread(s), "
          f"median of {args.repeats} runs\n")
    configs = configurations(args.block_length, args.threshold, args.reference_block_length)
    measurements = measure(configs, args.sampler, lm, ids, mask, args.new_tokens, tokenizer.eos_token_id,
                           pad_id(tokenizer), args.repeats)

    def texts_of(output) -> list[str]:
        return [tokenizer.decode(row[:length], skip_special_tokens=True)
                for row, length in zip(output.completion_ids.tolist(), output.lengths.tolist())]

    # Every position is decided or known to be padding, so all of them count as generated.
    print_table(measurements, args.prompts * args.new_tokens, texts_of, format_reward())


if __name__ == "__main__":
    main()
