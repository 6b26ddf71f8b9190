"""``diffugrpo plot RUN_DIR [--out DIR]``: PNG figures of a training run's logged metrics.

RUN_DIR is the run's TensorBoard directory (verl's ``TENSORBOARD_DIR``, by default
``tensorboard_log/<project>/<experiment>``) or a parent holding it. The figures are described
in :mod:`diffugrpo_plugin.tools.plotting`.

The PNGs go to ``./plots`` in the current directory unless ``--out`` names another, and each
path is printed: the logs are left as they are unless the user points ``--out`` at them, and a
first ``diffugrpo plot RUN_DIR`` needs no other argument.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_OUT = "plots"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "plot",
        help="PNG figures of a training run: reward, its components, policy movement, time, held-out pass@1",
        description="Write PNG figures of a run's TensorBoard scalars, one per question: is the reward going up "
        "(rewards.png)? which component moves (reward_components.png)? is the policy moving: KL, clip "
        "fraction, entropy, completion length (policy.png)? where does the time go (timing.png)? does "
        "held-out pass@1 rise (validation.png)? Each written path is printed.",
    )
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="the run's TensorBoard directory (TENSORBOARD_DIR) or a parent holding it"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=DEFAULT_OUT,
        help=f"where to write the PNGs, created if missing (default: ./{DEFAULT_OUT} in the current "
        f"directory; nothing is written into RUN_DIR unless DIR is inside it)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from diffugrpo_plugin.tools.plotting import PlotError, plot_run

    try:
        paths = plot_run(args.run_dir, args.out)
    except PlotError as exc:
        print(f"diffugrpo plot: error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0
