"""``diffugrpo generate``: complete prompts with a diffusion sampler and show how it denoised them.

Prompts come from ``--prompt`` (repeatable) or a JSONL file (one ``{"prompt": ...}`` per
line); the model is a checkpoint path or, by default, the training job's default model (the tiny
Dream-style model warm-started by SFT, built on first use).
``--help`` lists every installed sampler with its options, read from the plugin registry.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any

from diffugrpo_plugin.cli.model_flags import DEFAULT_MAX_NEW_TOKENS, SEED_HELP, add_model_flags, load_model
from diffugrpo_plugin.data.records import checked_field, read_records
from diffugrpo_plugin.plugins import PluginError, factory_options, registrations
from diffugrpo_plugin.sampling import SamplerOptionError, build_sampler, left_pad, padding_id

DEFAULT_SAMPLER = "the model family's (entropy; block for SDAR / LLaDA2.x)"  # ModelFamily.default_sampler


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "generate",
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="complete prompts with a diffusion sampler (optionally showing the unmasking order)",
        description="Complete prompts with a masked diffusion LM and one of the installed samplers.",
    )
    parser.add_argument(
        "-h",
        "--help",
        action=_HelpWithSamplers,
        nargs=0,
        help="show this help, with every installed sampler and its options, and exit",
    )
    add_model_flags(parser.add_argument_group("model"))
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", action="append", default=[], metavar="TEXT", help="a prompt; repeat for a batch")
    source.add_argument("--prompts", metavar="FILE.jsonl", help='one JSON object per line with a "prompt" string')
    parser.add_argument("--sampler", default=None, help=f"sampler name (default: {DEFAULT_SAMPLER})")
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a sampler option, VALUE read as JSON when it parses (steps=64, kv_cache=true), else as text; repeatable",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEFAULT_MAX_NEW_TOKENS,
        help=f"completion length (default: {DEFAULT_MAX_NEW_TOKENS}, as in training)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help=f"prompt i is sampled with seed SEED + i (default: 0); {SEED_HELP}"
    )
    parser.add_argument(
        "--no-chat-template",
        action="store_true",
        help="feed prompts as they are instead of through the tokenizer's chat template",
    )
    parser.add_argument(
        "--trace", action="store_true", help="show each completion coloured by the step that unmasked each token"
    )
    parser.add_argument("--trace-html", metavar="PATH", help="write the trace as an HTML page with a step slider")
    parser.add_argument("--trace-png", metavar="PATH", help="write the trace as a heatmap picture")
    parser.add_argument("--json", action="store_true", help="print one JSON object per completion")
    parser.set_defaults(func=run)
    return parser


class _HelpWithSamplers(argparse.Action):
    """``--help`` that lists the installed samplers; the registry is read only when help is asked for."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.epilog = sampler_listing()
        parser.print_help()
        parser.exit()


def sampler_listing(width: int = 100) -> str:
    """Every registered sampler with its description, provider and options (shared ones listed once)."""

    try:
        registered = registrations("sampler")
    except PluginError as exc:
        return f"samplers: the plugin registry could not be read: {exc}"
    if not registered:
        return "samplers: none installed (is diffugrpo installed? `pip install -e .`)"
    options = {name: factory_options(registration.obj) for name, registration in sorted(registered.items())}
    shared = set.intersection(*(set(found) for found in options.values()))
    lines = ["samplers (choose with --sampler NAME, set options with -o NAME=VALUE):"]
    for name, found in options.items():
        lines.append(f"  {name}: {registered[name].description}  [{registered[name].distribution}]")
        lines.extend(_option_lines([option for option in found if option not in shared], width))
    if shared:
        lines.append("options every sampler above takes:")
        lines.extend(_option_lines([option for option in next(iter(options.values())) if option in shared], width))
    return "\n".join(lines)


def _option_lines(options, width: int) -> list[str]:
    lines = []
    for option in options:
        head = f"      {option.name}={json.dumps(option.default)}"
        help_lines = textwrap.wrap(option.help, width - 34) or [""]
        lines.append(f"{head:<34}{help_lines[0]}".rstrip())
        lines.extend(" " * 34 + more for more in help_lines[1:])
    return lines


def parse_options(items: list[str]) -> dict[str, Any]:
    """``["steps=64", "alg=entropy"]`` -> ``{"steps": 64, "alg": "entropy"}`` (JSON values, else text)."""
    options: dict[str, Any] = {}
    for item in items:
        name, separator, value = item.partition("=")
        if not separator or not name.strip():
            raise ValueError(f"sampler option '{item}' must look like NAME=VALUE, e.g. -o steps=64")
        try:
            options[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[name.strip()] = value
    return options


def read_prompts_jsonl(path: str) -> list[str]:
    """The ``prompt`` of every record of a JSONL file (``-``: standard input), or an error naming the line."""
    return [checked_field(record, "prompt") for record in read_records(path)]


def run(args: argparse.Namespace) -> int:
    from diffugrpo_plugin.models.dlm import ModelConfigError

    try:
        prompts = read_prompts_jsonl(args.prompts) if args.prompts else list(args.prompt)
        if not prompts:
            raise ValueError("no prompt given: use --prompt TEXT (repeatable) or --prompts FILE.jsonl")
        options = parse_options(args.option)
        # a named sampler is checked before the model loads; the family's once it has
        sampler = build_sampler(args.sampler, **options) if args.sampler else None
        lm, tokenizer = load_model(args)
        sampler = sampler or build_sampler(lm.family.default_sampler, **options)
        results = _generate(sampler, lm, tokenizer, prompts, args)
    except (ValueError, OSError, PluginError, SamplerOptionError, ModelConfigError) as exc:
        print(f"diffugrpo generate: error: {exc}", file=sys.stderr)
        return 2
    _report(results, args)
    return 0


def _encode(tokenizer, prompts: list[str], chat_template: bool, device):
    """Left-padded prompt ids and mask, through the chat template unless disabled.  # -> [B, P], [B, P]"""
    if chat_template:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"the tokenizer of {tokenizer.name_or_path} has no chat template; "
                f"pass --no-chat-template to use the prompts as they are"
            )
        prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            for prompt in prompts
        ]
    encoded = [tokenizer.encode(prompt, add_special_tokens=False) for prompt in prompts]
    ids, mask = left_pad(encoded, padding_id(tokenizer), device)
    return prompts, ids, mask


def _generate(sampler, lm, tokenizer, prompts: list[str], args) -> list[dict[str, Any]]:
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer of {tokenizer.name_or_path} has no EOS token; generation needs one")
    device = next(lm.module.parameters()).device
    texts, ids, mask = _encode(tokenizer, prompts, not args.no_chat_template, device)
    want_trace = bool(args.trace or args.trace_html or args.trace_png)
    out = sampler.generate(
        lm,
        ids,
        mask,
        args.max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=padding_id(tokenizer),
        seeds=[args.seed + i for i in range(len(prompts))],
        record_trace=want_trace,
    )
    results = []
    for row, prompt in enumerate(prompts):
        length = int(out.lengths[row])
        completion_ids = out.completion_ids[row, :length].tolist()
        result = {
            "prompt": prompt,
            "model_input": texts[row],
            "completion": tokenizer.decode(completion_ids, skip_special_tokens=True),
            "completion_ids": completion_ids,
            "length": length,
            "steps": int(out.steps[row]),
            "seed": out.seeds[row],
        }
        if want_trace:
            result["unmask_step"] = out.unmask_step[row, :length].tolist()
            result["tokens"] = [tokenizer.decode([token]) for token in completion_ids]
        results.append(result)
    return results


def _report(results: list[dict[str, Any]], args) -> None:
    from diffugrpo_plugin.sampling.trace import TraceRow, render_ansi

    rows = [TraceRow(r["model_input"], r["tokens"], r["unmask_step"], r["steps"]) for r in results if "tokens" in r]
    _write_trace_files(rows, args.trace_html, args.trace_png)
    if args.json:
        for result in results:
            print(json.dumps(result, ensure_ascii=False))
    elif args.trace:
        print(render_ansi(rows))
    else:
        for index, result in enumerate(results):
            print(
                f"=== completion {index + 1} ({result['length']} tokens, {result['steps']} steps, "
                f"seed {result['seed']}) ===\n{result['completion']}"
            )


def _write_trace_files(rows, html_path: str | None, png_path: str | None) -> None:
    from diffugrpo_plugin.sampling.trace import render_html, render_png

    if html_path:
        with open(html_path, "w", encoding="utf-8") as handle:
            handle.write(render_html(rows))
    if png_path:
        render_png(rows, png_path)
