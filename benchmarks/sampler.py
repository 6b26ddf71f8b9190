"""Generated tokens/s of the diffusion samplers on CPU: the reference-style plain sampler
against the fast path, on the same prompts in the same run.

Baseline: the sampler (``entropy`` by default) run as the reference runs it: one full forward
per step, steps = generation length, no cache (for ``entropy``: one block, as DiffuCoder). Each
fast-path part is then switched on alone and together: confidence-threshold and factor-rule
parallel decoding, the block-wise prefix KV cache (also refreshed every few forwards),
Fast-dLLM's DualCache (which pays off with blocks), and the levers that change no output:
``compact`` (finished rows leave the forwards), ``reuse_logits`` (rows whose tokens did not
change are not run again) and ``head_on_masked`` (only masked positions go through the
vocabulary head); "no waste" is all three. For every configuration the table gives the median
tokens/s over the repeats, the ratio to the baseline's median, the model forwards per
completion, the rows run through the model per prompt, how many of its tokens agree with the
baseline's (greedy, so the differences come from the sampler alone), the mean task reward
(DiffuCoder's: code x2.0 + code_format x0.5, tests run in the sandbox) and its difference from
the baseline's on the same prompts with the noise band (two standard errors of that paired
difference).

    python benchmarks/sampler.py                 # warm-started tiny Dream-style model, synthetic tasks
    DIFFUGRPO_MBPP_DIR=/path/to/mbpp python benchmarks/sampler.py --tasks mbpp --prompts 100
    python benchmarks/sampler.py --model PATH --tasks mbpp --prompts 8 --new-tokens 256 --repeats 3
    python benchmarks/sampler.py --sampler llada  # the tiny LLaDA-style model, warm-started the same way
    python benchmarks/sampler.py -o top_k=null -o suppress_mask_token=true   # docs/guides/samplers.md's table's sampling
    python benchmarks/sampler.py --block sdar    # block diffusion: the block sampler against full-canvas decoding

``--block sdar`` / ``--block llada2`` builds a tiny random SDAR- or LLaDA2-style model in code and compares the
``block`` sampler (block by block over the KV cache of finished blocks) with the same model decoded full-canvas by
the ``llada`` sampler (every forward over prompt + completion, blocks of the model's size, one token a step), greedy,
on the same random prompts (a whole number of blocks long, so both put the blocks at the same positions): tokens/s
median and range over the repeats, forwards, and the share of tokens equal to the full-canvas run's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch

MBPP_DIR_VAR = "DIFFUGRPO_MBPP_DIR"


@dataclass(frozen=True)
class Config:
    label: str
    options: dict


def configurations(
    new_tokens: int,
    block_length: int,
    threshold: float,
    low_threshold: float,
    factor: float,
    refreshes: list[int],
    reference_block_length: int | None,
) -> list[Config]:
    """The baseline, then each fast-path part on top of it, then combinations."""
    reference = {"block_length": reference_block_length} if reference_block_length else {}
    whole = {"block_length": reference_block_length or new_tokens}
    blocks = {"block_length": block_length}
    no_waste = {"compact": True, "reuse_logits": True, "head_on_masked": True}  # exact: no output changes
    return [
        Config("plain (reference)", reference),
        Config("compact", {**reference, "compact": True}),
        Config("reuse_logits", {**reference, "reuse_logits": True}),
        Config("head_on_masked", {**reference, "head_on_masked": True}),
        Config("no waste (all three)", {**reference, **no_waste}),
        Config(f"threshold {threshold}", {**reference, "threshold": threshold}),
        Config(f"threshold {threshold} + no waste", {**reference, "threshold": threshold, **no_waste}),
        Config("prefix cache (reference blocks)", {**whole, "kv_cache": True}),
        Config(f"prefix cache + threshold {threshold}", {**whole, "kv_cache": True, "threshold": threshold}),
        Config(
            f"prefix cache + threshold {threshold} + no waste",
            {**whole, "kv_cache": True, "threshold": threshold, **no_waste},
        ),
        *[
            Config(
                f"prefix cache refreshed every {every} + threshold {threshold} + no waste",
                {**whole, "kv_cache": True, "cache_refresh": every, "threshold": threshold, **no_waste},
            )
            for every in refreshes
        ],
        Config(
            f"prefix cache + threshold {low_threshold} + no waste",
            {**whole, "kv_cache": True, "threshold": low_threshold, **no_waste},
        ),
        Config(f"prefix cache + factor {factor} + no waste", {**whole, "kv_cache": True, "factor": factor, **no_waste}),
        Config(f"blocks of {block_length}", blocks),
        Config(f"blocks of {block_length} + prefix cache", {**blocks, "kv_cache": True}),
        Config(f"blocks of {block_length} + dual cache", {**blocks, "dual_cache": True}),
        Config(
            f"blocks + dual cache + threshold {threshold} + no waste",
            {**blocks, "dual_cache": True, "threshold": threshold, **no_waste},
        ),
    ]


def mbpp_path(tasks: str) -> str | None:
    """MBPP's test problems from the folder ``$DIFFUGRPO_MBPP_DIR`` names (only for ``--tasks mbpp``)."""
    if tasks != "mbpp":
        return None
    folder = os.environ.get(MBPP_DIR_VAR)
    if not folder:
        sys.exit(
            f"benchmarks/sampler.py: --tasks mbpp needs {MBPP_DIR_VAR}, the folder holding mbpp.jsonl; "
            f"set it (e.g. {MBPP_DIR_VAR}=path/to/mbpp)"
        )
    path = os.path.join(folder, "mbpp.jsonl")
    if not os.path.isfile(path):
        sys.exit(
            f"benchmarks/sampler.py: {MBPP_DIR_VAR}={folder}, but {path} does not exist; point {MBPP_DIR_VAR} "
            f"at the folder holding mbpp.jsonl"
        )
    return path


def task_rows(tasks: str, count: int, mbpp_file: str | None) -> list[dict]:
    """Prepared rows (prompt + test columns): the synthetic tasks or MBPP test problems.

    Synthetic: the 36 validation tasks, then the training tasks for more (the table compares
    samplers on the same prompts, so prompts the model was trained on serve that as well).
    """
    from diffugrpo_plugin.data import prepare

    if tasks == "synthetic":
        return (prepare("synthetic", "validation") + prepare("synthetic", "train"))[:count]
    return prepare("mbpp", "test", mbpp_file)[:count]


def task_reward(rows: list[dict]):
    """DiffuCoder's task reward (code x2.0 + code_format x0.5, tests in the sandbox) of each completion."""
    from diffugrpo_plugin.rewards.spec import RewardSpec

    spec = RewardSpec.from_config({})  # the framework's default: DiffuCoder's code x2.0 + code_format x0.5
    columns = {key: [row["extra_info"][key] for row in rows] for key in rows[0]["extra_info"]}

    def reward(texts: list[str]) -> list[float]:
        return [spec.total(scored.values) for scored in spec.score(texts, columns)]

    return reward


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default=None, help="checkpoint (default: the warm-started tiny model of the sampler's family)"
    )
    parser.add_argument("--sampler", default="entropy", help="a registered sampler (default: entropy)")
    parser.add_argument(
        "--reference-block-length",
        type=int,
        default=None,
        help="block length of the baseline (LLaDA's reference uses blocks; default: one block)",
    )
    parser.add_argument(
        "--prompts",
        type=int,
        default=36,
        help="synthetic: the 36 validation tasks, then training tasks (227 in all); mbpp: test problems",
    )
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--threshold", type=float, default=0.99)
    parser.add_argument(
        "--low-threshold", type=float, default=0.9, help="a second, faster threshold (Fast-dLLM's default, 0.9)"
    )
    parser.add_argument("--factor", type=float, default=1.0, help="Fast-dLLM's factor rule setting (its default, 1)")
    parser.add_argument(
        "--refresh",
        type=int,
        nargs="*",
        default=[2, 4],
        metavar="N",
        help="cache_refresh settings to measure with the prefix cache (default: 2 4)",
    )
    parser.add_argument(
        "--only",
        default=None,
        metavar="LABELS",
        help="comma-separated substrings: run only the configurations whose label contains one "
        "(the plain baseline always runs)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--block",
        choices=sorted(BLOCK_MODELS),
        default=None,
        help="block diffusion: a tiny random model of this family, the block sampler against full-canvas decoding",
    )
    parser.add_argument("--prompt-tokens", type=int, default=64, help="with --block: prompt length (whole blocks)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (1 is steadiest on a shared machine)"
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device (cpu by default; e.g. cuda for a real checkpoint)"
    )
    parser.add_argument(
        "--tasks",
        choices=["synthetic", "mbpp"],
        default="synthetic",
        help="prompts and tests: the synthetic validation tasks the warm-started model was trained "
        "for (default), or MBPP test problems",
    )
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a sampler option applied to every configuration (VALUE read as JSON); repeatable",
    )
    return parser.parse_args()


@dataclass
class Measurement:
    config: Config
    wall: list[float]  # seconds per repeat
    cpu: list[float]  # process CPU seconds per repeat
    output: object = None  # the last GenerationOutput


def measure(
    configs: list[Config], sampler_name: str, lm, ids, mask, new_tokens: int, eos: int, pad: int, repeats: int
) -> list[Measurement]:
    """Time every configuration ``repeats`` times, round-robin, so drifting machine load hits all alike."""
    from diffugrpo_plugin.sampling import build_sampler

    samplers = [build_sampler(sampler_name, **config.options) for config in configs]
    measurements = [Measurement(config, [], []) for config in configs]
    seeds = list(range(ids.shape[0]))
    for _ in range(repeats):
        for sampler, measurement in zip(samplers, measurements):
            wall, cpu = time.perf_counter(), time.process_time()
            measurement.output = sampler.generate(
                lm, ids, mask, new_tokens, eos_token_id=eos, pad_token_id=pad, seeds=seeds
            )
            if ids.is_cuda:
                torch.cuda.synchronize()
            measurement.wall.append(time.perf_counter() - wall)
            measurement.cpu.append(time.process_time() - cpu)
    return measurements


def print_table(measurements: list[Measurement], generated: int, texts_of, reward) -> None:
    baseline = measurements[0]
    prompts = baseline.output.completion_ids.shape[0]
    header = (
        f"{'configuration':<52}{'tokens/s':>10}{'x plain':>9}{'x plain cpu':>13}{'forwards':>10}"
        f"{'rows/prompt':>13}{'agree':>8}{'reward':>9}{'- plain':>9}{'+-2se':>8}"
    )
    print(header + "\n" + "-" * len(header), flush=True)
    baseline_rewards = reward(texts_of(baseline.output))
    for m in measurements:
        wall, cpu = statistics.median(m.wall), statistics.median(m.cpu)
        agreement = (m.output.completion_ids == baseline.output.completion_ids).float().mean().item()
        rewards = reward(texts_of(m.output))
        difference, band = paired_difference(rewards, baseline_rewards)
        print(
            f"{m.config.label:<52}{generated / wall:>10.1f}{statistics.median(baseline.wall) / wall:>9.2f}"
            f"{statistics.median(baseline.cpu) / cpu:>13.2f}{m.output.forwards:>10d}"
            f"{m.output.forwarded_rows / prompts:>13.1f}{agreement:>8.1%}{statistics.mean(rewards):>9.3f}"
            f"{difference:>+9.3f}{band:>8.3f}",
            flush=True,
        )


def paired_difference(rewards: list[float], baseline: list[float]) -> tuple[float, float]:
    """Mean reward minus the plain sampler's on the same prompts, and the noise band: two standard errors of
    that paired difference (a configuration within it is not distinguishable from the plain sampler)."""
    differences = [mine - theirs for mine, theirs in zip(rewards, baseline)]
    band = 2 * statistics.stdev(differences) / math.sqrt(len(differences)) if len(differences) > 1 else 0.0
    return statistics.mean(differences), band


BLOCK_MODELS = {  # tiny random block-diffusion models (the native classes' config keys)
    "sdar": dict(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        block_size=4,
        mask_token_id=511,
        pad_token_id=0,
        tie_word_embeddings=False,
    ),
    "llada2": dict(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=384,
        moe_intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        partial_rotary_factor=0.5,
        num_experts=8,
        num_experts_per_tok=2,
        n_group=4,
        topk_group=2,
        num_shared_experts=1,
        first_k_dense_replace=1,
        block_size=32,
        mask_token_id=511,
        pad_token_id=0,
        tie_word_embeddings=False,
    ),
}


def block_benchmark(args: argparse.Namespace) -> None:
    """The block sampler against full-canvas decoding of the same tiny block-diffusion model (see the docstring)."""
    from diffugrpo_plugin.models.dlm import DiffusionLM
    from diffugrpo_plugin.models.native import llada2, sdar
    from diffugrpo_plugin.sampling import build_sampler

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    settings = BLOCK_MODELS[args.block]
    config_class, model_class = (
        (sdar.SDARConfig, sdar.SDARForCausalLM)
        if args.block == "sdar"
        else (llada2.LLaDA2MoeConfig, llada2.LLaDA2MoeModelLM)
    )
    config = config_class(**settings)
    config._attn_implementation = "sdpa"
    lm = DiffusionLM.wrap(model_class(config).eval().to(args.device), mask_token_id=settings["mask_token_id"])
    block = settings["block_size"]
    prompt_length = block * max(1, args.prompt_tokens // block)
    ids = torch.randint(0, settings["vocab_size"] - 1, (args.prompts, prompt_length), device=args.device)
    mask = torch.ones_like(ids)
    configs = [
        ("full canvas (llada sampler)", "llada", dict(steps=args.new_tokens, block_length=block, temperature=0.0)),
        ("block sampler, static, 1 token a step", "block", dict(rule="static", temperature=0.0)),
        ("block sampler, llada2 rule 0.9", "block", dict(rule="llada2", threshold=0.9, temperature=0.0)),
    ]
    samplers = [(label, build_sampler(name, **options)) for label, name, options in configs]
    walls: dict[str, list[float]] = {label: [] for label, _ in samplers}
    outputs = {}
    eos = settings["vocab_size"] + 1  # none: every completion runs to the end
    for _ in range(args.repeats):
        for label, sampler in samplers:
            start = time.perf_counter()
            outputs[label] = sampler.generate(
                lm, ids, mask, args.new_tokens, eos_token_id=eos, pad_token_id=0, seeds=list(range(args.prompts))
            )
            if ids.is_cuda:
                torch.cuda.synchronize()
            walls[label].append(time.perf_counter() - start)
    generated = args.prompts * args.new_tokens
    print(
        f"tiny {args.block}-style model, {args.prompts} prompts of {prompt_length} tokens, {args.new_tokens} new "
        f"tokens, blocks of {block}, greedy, {args.threads} thread(s), {args.repeats} repeats\n"
    )
    header = f"{'configuration':<40}{'tokens/s':>10}{'range':>18}{'x full':>8}{'forwards':>10}{'agree':>8}"
    print(header + "\n" + "-" * len(header))
    full_label = samplers[0][0]
    full = statistics.median(walls[full_label])
    for label, _ in samplers:
        wall = statistics.median(walls[label])
        rates = sorted(generated / w for w in walls[label])
        agree = (outputs[label].completion_ids == outputs[full_label].completion_ids).float().mean().item()
        print(
            f"{label:<40}{generated / wall:>10.1f}{f'{rates[0]:.1f}-{rates[-1]:.1f}':>18}{full / wall:>8.2f}"
            f"{outputs[label].forwards:>10d}{agree:>8.1%}"
        )


def main() -> None:
    args = parse_args()
    if args.block:
        block_benchmark(args)
        return
    mbpp_file = mbpp_path(args.tasks)
    from diffugrpo_plugin.models.dlm import load_diffusion_lm
    from diffugrpo_plugin.models.tiny import TinySpec
    from diffugrpo_plugin.sampling import left_pad
    from diffugrpo_plugin.training.warm_start import warm_model_path

    torch.set_num_threads(args.threads)
    if args.model is None:
        # the warm-started model writes code for the synthetic tasks, so the reward column means something
        args.model = warm_model_path(TinySpec(family="llada" if args.sampler == "llada" else "dream"))
    lm, tokenizer = load_diffusion_lm(args.model, args.device)
    rows = task_rows(args.tasks, args.prompts, mbpp_file)
    prompts = [
        tokenizer.apply_chat_template(list(row["prompt"]), tokenize=False, add_generation_prompt=True) for row in rows
    ]
    ids, mask = left_pad(
        [tokenizer.encode(text, add_special_tokens=False) for text in prompts], pad_id(tokenizer), args.device
    )
    print(
        f"model {args.model}\n{len(rows)} {args.tasks} prompts (mean {mask.sum(1).float().mean():.0f} tokens), "
        f"{args.new_tokens} new tokens each, greedy '{args.sampler}' sampler, {args.threads} thread(s), "
        f"median of {args.repeats} runs\n"
    )
    shared = {name: json.loads(value) for name, value in (option.split("=", 1) for option in args.option)}
    configs = [
        Config(config.label, {**shared, **config.options})
        for config in configurations(
            args.new_tokens,
            args.block_length,
            args.threshold,
            args.low_threshold,
            args.factor,
            args.refresh,
            args.reference_block_length,
        )
    ]
    if args.only:
        wanted = [part.strip() for part in args.only.split(",")]
        configs = configs[:1] + [c for c in configs[1:] if any(part in c.label for part in wanted)]
    measurements = measure(
        configs, args.sampler, lm, ids, mask, args.new_tokens, tokenizer.eos_token_id, pad_id(tokenizer), args.repeats
    )

    def texts_of(output) -> list[str]:
        return [
            tokenizer.decode(row[:length], skip_special_tokens=True)
            for row, length in zip(output.completion_ids.tolist(), output.lengths.tolist())
        ]

    # Every position is decided or known to be padding, so all of them count as generated.
    print_table(measurements, len(rows) * args.new_tokens, texts_of, task_reward(rows))


if __name__ == "__main__":
    main()
