"""``diffugrpo rewards``: list the installed reward functions, or score completions from a file.

    diffugrpo rewards list
    diffugrpo rewards score FILE [--reward NAME=WEIGHT ...] [--aggregation fixed|gated|group_normalized]
                                 [--group-by FIELD] [--code-block first|last] [--timeout-s S]
                                 [--max-concurrency N]

``score`` reads rows with ``completion`` and the row's dataset columns (JSON Lines, a JSON
array or parquet; ``-`` reads standard input) and writes one JSON object per input row to
stdout, in order, with the row's line number (parquet: row number) and its ``id`` /
``task_id`` when it has one::

    {"line": 1, "task_id": "601", "total": 2.5, "rewards": {"code": 1.0, "code_format": 1.0},
     "tests": [{"outcome": "PASSED", ...}]}

``tests`` (per-test outcomes of the ``code`` reward) appears when ``code`` is selected; it is
null for rows without tests or completions that were not run. ``reasons`` says, for each reward
that explained its value (always below full marks for the built-ins), why:
``{"code": {"kind": "format", "detail": "tests not run: text after the closing fence: ..."}}``;
``errors`` gives the error of a reward that failed on the row. Every row's ``completion`` is checked before any
scoring starts. A row whose task cannot be judged (a malformed test column, tests that do not parse, a preamble
that fails in the judge) scores alone: its code rewards are null with the reason ``task_error``, a warning on
stderr names its line, and the other rows are scored. ``group_normalized`` standardises each
reward within the rows sharing ``--group-by`` (default ``task_id``: the completions of one
problem) before weighting, so its totals are written once the whole file is scored. Default
rewards: DiffuCoder's ``code=2.0 code_format=0.5``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Iterator

from diffugrpo_plugin.cli import report_error
from diffugrpo_plugin.data.records import DataError, Record, checked_field, read_records
from diffugrpo_plugin.plugins import PluginError
from diffugrpo_plugin.rewards.aggregation import AGGREGATIONS, group_normalized_totals
from diffugrpo_plugin.rewards.code_tests import FORMAT_ENDS, TaskError, tests_from_row
from diffugrpo_plugin.rewards.spec import RewardConfigError, RewardSpec
from diffugrpo_plugin.sandbox.config import SandboxError, SandboxUnavailable

DEFAULT_REWARDS = ("code=2.0", "code_format=0.5")
CHUNK_LINES = 64
ID_FIELDS = ("id", "task_id")
Scored = tuple[Record, dict[str, Any]]

TEST_COLUMNS_HELP = (
    "test columns, first match wins: test_cases (assert strings, or {input, output} pairs); "
    "test_list (MBPP) with test_setup_code / test_imports; test + entry_point (HumanEval); "
    "inputs + outputs (stdin/stdout; with fn_name, APPS/TACO's call-based tests); APPS/TACO's input_output"
)


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
    parser = subparsers.add_parser(
        "rewards", help="list reward functions or score completions", description=__doc__.split("\n\n")[0]
    )
    actions = parser.add_subparsers(dest="rewards_command", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="installed rewards: name, providing distribution, description")
    listing.set_defaults(func=list_command)

    score = actions.add_parser(
        "score", help="score completions from a file, one JSON object per row out", epilog=TEST_COLUMNS_HELP
    )
    score.add_argument(
        "file",
        metavar="FILE",
        help='rows of {"completion": ..., <dataset columns>}: .jsonl, .json or .parquet; - reads standard input',
    )
    score.add_argument(
        "--reward",
        dest="rewards",
        action="append",
        type=reward_weight,
        metavar="NAME=WEIGHT",
        help=f"a reward and its weight; repeat for several (default: {' '.join(DEFAULT_REWARDS)})",
    )
    score.add_argument(
        "--aggregation",
        choices=[name for name, aggregation in AGGREGATIONS.items() if not aggregation.learns_weights],
        default="fixed",
        help="how the weighted rewards combine (docs/guides/rewards.md; 'learned' fits its weights during "
        "training, so it has no offline form)",
    )
    score.add_argument(
        "--group-by",
        default="task_id",
        metavar="FIELD",
        help="group_normalized: rows with equal FIELD are one group (default: task_id)",
    )
    score.add_argument(
        "--code-block",
        choices=("first", "last"),
        default="first",
        help="which fenced python block is judged (first: DiffuCoder, last: open-r1)",
    )
    score.add_argument(
        "--format-end",
        choices=FORMAT_ENDS,
        default="exact",
        help="what may follow the closing fence: exact (DiffuCoder's pattern: one newline) or "
        "lenient (any whitespace or none)",
    )
    score.add_argument("--timeout-s", type=float, default=None, help="wall-clock limit per test")
    score.add_argument("--max-concurrency", type=int, default=None, help="sandboxes running at once")
    score.set_defaults(func=score_command)


def list_command(args: argparse.Namespace) -> int:
    from diffugrpo_plugin import plugins

    try:
        known = plugins.registrations("reward")
    except plugins.PluginError as exc:
        return report_error("rewards list", exc)
    rows = [(name, registration.distribution, registration.description) for name, registration in sorted(known.items())]
    header = ("NAME", "DISTRIBUTION", "DESCRIPTION")
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(2)]
    for name, distribution, description in [header, *rows]:
        print(f"{name:<{widths[0]}}  {distribution:<{widths[1]}}  {description}")
    return 0


def rewards_config(args: argparse.Namespace) -> dict[str, Any]:
    pairs = args.rewards or [reward_weight(text) for text in DEFAULT_REWARDS]
    sandbox = {
        key: value
        for key, value in (("timeout_s", args.timeout_s), ("max_concurrency", args.max_concurrency))
        if value is not None
    }
    return {
        "reward_funcs": {name: weight for name, weight in pairs},
        "aggregation": args.aggregation,
        "code_block": args.code_block,
        "format_end": args.format_end,
        "sandbox": sandbox,
    }


def score_rows(spec, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scores a chunk of input rows; one output object per row, in order."""
    from diffugrpo_plugin.rewards.judging import code_outcomes

    completions = [row["completion"] for row in rows]
    names = sorted({key for row in rows for key in row} - {"completion"})
    columns = {name: [row.get(name) for row in rows] for name in names}
    outputs = []
    for scored in spec.score(completions, columns):
        outputs.append(
            {
                "total": spec.total(scored.values),
                "rewards": scored.values,
                **(
                    {"reasons": {name: reason.to_dict() for name, reason in scored.reasons.items()}}
                    if scored.reasons
                    else {}
                ),
                **({"errors": scored.errors} if scored.errors else {}),
            }
        )
    code = next((component for component in spec.components if component.name == "code"), None)
    if code is not None:
        options = {
            "code_block": spec.code_block,
            "format_end": spec.format_end,
            "sandbox": spec.sandbox(),
            **code.options,
        }
        judged = code_outcomes(completions, columns, **options)  # cached: the code reward's own run
        for output, one in zip(outputs, judged):
            output["tests"] = [outcome.to_dict() for outcome in one.outcomes] if one.outcomes is not None else None
    return outputs


def checked_rows(records: list[Record]) -> None:
    """Every row has a completion, or a DataError names its line; a row whose tests cannot be read is scored alone
    (its code rewards null), with a warning on stderr naming its line."""
    for record in records:
        checked_field(record, "completion")
        try:
            tests_from_row(record.data)
        except TaskError as error:
            print(
                f"diffugrpo rewards score: warning: {record.where}: {error}; its code rewards are null "
                f"(fix the row's tests: {TEST_COLUMNS_HELP})",
                file=sys.stderr,
            )


def group_ids(records: list[Record], field: str) -> list[str]:
    """Each row's ``field`` (JSON text, so lists and objects compare by value) for ``group_normalized``."""
    missing = next((record for record in records if record.data.get(field) is None), None)
    if missing is not None:
        raise DataError(
            f"{missing.where}: aggregation group_normalized groups rows by '{field}', which this row "
            f"lacks; add it to every row or pass --group-by FIELD"
        )
    return [json.dumps(record.data[field], sort_keys=True) for record in records]


def labelled(record: Record, output: dict[str, Any]) -> dict[str, Any]:
    """An output object led by where its row came from: the line number and the row's id fields."""
    ids = {name: record.data[name] for name in ID_FIELDS if record.data.get(name) is not None}
    return {"line": record.line, **ids, **output}


def scored_rows(spec: RewardSpec, records: list[Record]) -> Iterator[Scored]:
    """``(record, output)`` for every row, scored chunk by chunk."""
    for start in range(0, len(records), CHUNK_LINES):
        chunk = records[start : start + CHUNK_LINES]
        yield from zip(chunk, score_rows(spec, [record.data for record in chunk]), strict=True)


def group_normalized(spec: RewardSpec, pairs: list[Scored], groups: list[str]) -> list[Scored]:
    """``pairs`` with each total replaced by its group-normalised one."""
    totals = group_normalized_totals([output["rewards"] for _, output in pairs], groups, spec.weights)
    return [(record, {**output, "total": total}) for (record, output), total in zip(pairs, totals, strict=True)]


def score_command(args: argparse.Namespace) -> int:
    try:
        spec = RewardSpec.from_config(rewards_config(args))
        records = read_records(args.file)
        checked_rows(records)  # every row is checked before any scoring starts
        pairs = scored_rows(spec, records)
        if AGGREGATIONS[spec.aggregation].whole_group:
            groups = group_ids(records, args.group_by)
            pairs = group_normalized(spec, list(pairs), groups)
        for record, output in pairs:
            sys.stdout.write(json.dumps(labelled(record, output)) + "\n")
            sys.stdout.flush()
    except (DataError, RewardConfigError, PluginError, SandboxUnavailable, SandboxError, OSError) as exc:
        return report_error("rewards score", exc)
    return 0
