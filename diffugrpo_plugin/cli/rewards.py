"""``diffugrpo rewards``: list the installed reward functions, or score completions from a file.

    diffugrpo rewards list
    diffugrpo rewards score FILE.jsonl [--reward NAME=WEIGHT ...] [--aggregation fixed|gated]
                                       [--code-block first|last] [--timeout-s S] [--max-concurrency N]

``score`` reads one JSON object per line, with ``completion`` and the row's dataset columns,
and writes one JSON object per input line to stdout, in order::

    {"total": 2.5, "rewards": {"code": 1.0, "code_format": 1.0}, "tests": [{"outcome": "PASSED", ...}]}

``tests`` (per-test outcomes of the ``code`` reward) appears when ``code`` is selected; it is
null for rows without tests or completions that were not run. Default rewards: DiffuCoder's
``code=2.0 code_format=0.5``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

DEFAULT_REWARDS = ("code=2.0", "code_format=0.5")
CHUNK_LINES = 64


def reward_weight(text: str) -> tuple[str, float]:
    """``NAME=WEIGHT`` (or ``NAME``, weight 1.0) from the command line."""
    name, _, weight = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME=WEIGHT, got {text!r}")
    try:
        return name, float(weight) if weight else 1.0
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"weight of {name!r} must be a number, got {weight!r}") from error


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("rewards", help="list reward functions or score completions",
                                   description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="rewards_command", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="installed rewards: name, providing distribution, description")
    listing.set_defaults(func=list_command)

    score = actions.add_parser("score", help="score completions from a JSONL file, one JSON object per line out")
    score.add_argument("file", metavar="FILE.jsonl", help="lines of {\"completion\": ..., <dataset columns>}")
    score.add_argument("--reward", dest="rewards", action="append", type=reward_weight, metavar="NAME=WEIGHT",
                       help=f"a reward and its weight; repeat for several (default: {' '.join(DEFAULT_REWARDS)})")
    score.add_argument("--aggregation", choices=("fixed", "gated"), default="fixed")
    score.add_argument("--code-block", choices=("first", "last"), default="first",
                       help="which fenced python block is judged (first: DiffuCoder, last: open-r1)")
    score.add_argument("--timeout-s", type=float, default=None, help="wall-clock limit per test")
    score.add_argument("--max-concurrency", type=int, default=None, help="sandboxes running at once")
    score.set_defaults(func=score_command)


def list_command(args: argparse.Namespace) -> int:
    from diffugrpo_plugin import plugins

    try:
        known = plugins.registrations("reward")
    except plugins.PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = [(name, registration.distribution, registration.description)
            for name, registration in sorted(known.items())]
    header = ("NAME", "DISTRIBUTION", "DESCRIPTION")
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(2)]
    for name, distribution, description in [header, *rows]:
        print(f"{name:<{widths[0]}}  {distribution:<{widths[1]}}  {description}")
    return 0


def rewards_config(args: argparse.Namespace) -> dict[str, Any]:
    pairs = args.rewards or [reward_weight(text) for text in DEFAULT_REWARDS]
    sandbox = {key: value for key, value in (("timeout_s", args.timeout_s), ("max_concurrency", args.max_concurrency))
               if value is not None}
    return {"reward_funcs": {name: weight for name, weight in pairs}, "aggregation": args.aggregation,
            "code_block": args.code_block, "sandbox": sandbox}


def score_rows(spec, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scores a chunk of input rows; one output object per row, in order."""
    from diffugrpo_plugin.judging import code_outcomes

    completions = [row["completion"] for row in rows]
    names = sorted({key for row in rows for key in row} - {"completion"})
    columns = {name: [row.get(name) for row in rows] for name in names}
    outputs = []
    for scored in spec.score(completions, columns):
        outputs.append({"total": spec.total(scored.values), "rewards": scored.values,
                        **({"errors": scored.errors} if scored.errors else {})})
    code = next((component for component in spec.components if component.name == "code"), None)
    if code is not None:
        options = {"code_block": spec.code_block, "sandbox": spec.sandbox(), **code.options}
        judged = code_outcomes(completions, columns, **options)  # cached: the code reward's own run
        for output, (_, _, outcomes) in zip(outputs, judged):
            output["tests"] = [outcome.to_dict() for outcome in outcomes] if outcomes is not None else None
    return outputs


def score_command(args: argparse.Namespace) -> int:
    from diffugrpo_plugin.data.records import DataError, checked_field, read_records
    from diffugrpo_plugin.plugins import PluginError
    from diffugrpo_plugin.rewards import RewardConfigError, RewardSpec
    from diffugrpo_plugin.sandbox import SandboxError, SandboxUnavailable

    try:
        spec = RewardSpec.from_config(rewards_config(args))
        records = read_records(args.file)
        for record in records:
            checked_field(record, "completion")  # every line is checked before any scoring starts
        rows = [record.data for record in records]
        for start in range(0, len(rows), CHUNK_LINES):
            chunk = rows[start:start + CHUNK_LINES]
            for output in score_rows(spec, chunk):
                sys.stdout.write(json.dumps(output) + "\n")
            sys.stdout.flush()
    except (DataError, RewardConfigError, PluginError, SandboxUnavailable, SandboxError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
