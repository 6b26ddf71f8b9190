"""``diffugrpo plot RUN_DIR [--out DIR]``: PNG figures of a training run's logged metrics.

RUN_DIR is the run's TensorBoard directory (verl's ``TENSORBOARD_DIR``, by default
``tensorboard_log/<project>/<experiment>``) or a parent holding it. The figures are described
in :mod:`diffugrpo_plugin.plotting`.
"""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "plot", help="PNG figures of a training run: rewards, KL and clipping, response length, validation",
        description="Write PNG figures of a run's TensorBoard scalars: the total reward and each component, "
                    "KL loss, clip fraction and entropy, response length, validation metrics (pass@1 ...) "
                    "and time per step.")
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="the run's TensorBoard directory (TENSORBOARD_DIR) or a parent holding it")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="where to write the PNGs (default: RUN_DIR's event directory /plots)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from diffugrpo_plugin.plotting import PlotError, plot_run

    try:
        paths = plot_run(args.run_dir, args.out)
    except PlotError as exc:
        print(f"diffugrpo plot: error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0
