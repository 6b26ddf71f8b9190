"""What a training run shows on the terminal, and where everything else goes.

By default (``diffugrpo.verbose=false``) the terminal gets a progress bar and one line per step
(:func:`step_line`); everything else the run prints goes to ``train.log`` in the run's Hydra output
directory: verl's resolved config and full metric dump, Ray's and the libraries' warnings and
notices. Errors still reach the terminal: every process keeps its stderr, which Ray forwards to
the driver, and only records below ERROR and standard output are moved off it.

The pieces, by process:

* the driver (:func:`run_quietly`): writes the worker settings into ``ray_kwargs.ray_init``
  (:data:`QUIET_WORKER_ENV`, the log file, Ray's own logging level), sends its own standard output
  and warnings to the log, and runs a :class:`TerminalConsole`, which draws the bar and prints the
  lines it finds on the :class:`StepBoard` actor;
* every Ray worker (:func:`quiet_worker_output`, run where ``import verl`` loads our plugin):
  standard output and warnings to the log file, stderr logging handlers raised to ERROR;
* the trainer (:class:`StepReporter`): posts each step's line to the board, or prints it to stderr
  where no driver console runs (verl's own ``main_ppo``, tests).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sys
import threading
import time
from typing import Iterable, Mapping, TextIO

import ray

LOG_FILE_ENV = "DIFFUGRPO_LOG_FILE"
LOG_FILE_NAME = "train.log"
BOARD_NAME = "diffugrpo_step_board"
BOARD_POLL_S = 0.5
# Quiet at the source in every worker: library progress bars off, verl's and TransferQueue's own
# logging at ERROR (their INFO and warnings return with diffugrpo.verbose=true).
QUIET_WORKER_ENV = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "VERL_LOGGING_LEVEL": "ERROR",
    "TQ_LOGGING_LEVEL": "ERROR",
}

# (label, metric) pairs of the step line's time split; log-probs add old and reference passes
TIME_SPLIT = (
    ("rollout", ("timing_s/gen",)),
    ("log-probs", ("timing_s/old_log_prob", "timing_s/ref")),
    ("update", ("timing_s/update_actor",)),
    ("reward", ("timing_s/reward_scoring",)),
)
VALIDATION_PREFIX = "val-core/"


def _number(value: float) -> str:
    return f"{value:.3g}"


def _field(metrics: Mapping[str, float], label: str, key: str) -> list[str]:
    return [f"{label} {_number(float(metrics[key]))}"] if key in metrics else []


def is_held_out_mean(key: str) -> bool:
    """verl's held-out mean per data source (``val-core/<source>/acc/mean@N``: pass@1 over N samples); its
    best@/maj@ statistics, also "core", stay in the log and TensorBoard."""
    return key.startswith(VALIDATION_PREFIX) and re.search(r"/mean@\d+$", key) is not None


def _validation(metrics: Mapping[str, float]) -> list[str]:
    return [
        f"val {key[len(VALIDATION_PREFIX) :]} {_number(float(value))}"
        for key, value in sorted(metrics.items())
        if is_held_out_mean(key)
    ]


def _reward(metrics: Mapping[str, float], components: Iterable[str]) -> list[str]:
    if "reward/total/mean" not in metrics:
        return []
    parts = [
        f"{name} {_number(float(metrics[f'reward/{name}/mean']))}"
        for name in components
        if f"reward/{name}/mean" in metrics and not math.isnan(float(metrics[f"reward/{name}/mean"]))
    ]
    detail = f" ({', '.join(parts)})" if parts else ""
    return [f"reward {_number(float(metrics['reward/total/mean']))}{detail}"]


def _time_split(metrics: Mapping[str, float]) -> list[str]:
    if "timing_s/step" not in metrics:
        return []
    parts = [
        f"{label} {sum(float(metrics[key]) for key in keys if key in metrics):.1f}"
        for label, keys in TIME_SPLIT
        if any(key in metrics for key in keys)
    ]
    return [f"{float(metrics['timing_s/step']):.1f}s ({', '.join(parts)})"]


def step_line(step: int, total: int, metrics: Mapping[str, float], components: Iterable[str]) -> str:
    """One step's key metrics: total reward and its components, KL, clip fraction, completion length,
    the step's seconds split into rollout / log-probs / update / reward scoring (summed over
    completions, it overlaps the rollout), and held-out results on the steps that validate."""
    fields = [
        f"step {step}/{total}",
        *_reward(metrics, components),
        *_field(metrics, "kl", "actor/kl_loss"),
        *_field(metrics, "clip", "actor/pg_clipfrac"),
        *_field(metrics, "len", "response_length/mean"),
        *_time_split(metrics),
        *_validation(metrics),
    ]
    return " | ".join(fields)


def validation_line(step: int, metrics: Mapping[str, float]) -> str:
    return " | ".join([f"validation at step {step}", *_validation(metrics)])


def resume_line(step: int, total: int, folder: str) -> str:
    """What a run that continues a checkpoint says before it validates or trains (verl's ``trainer.resume_mode=auto``
    resumes silently)."""
    left = f"{total - step} steps to go" if step < total else "nothing left to train"
    return f"resumed at step {step} of {total} from {folder}: {left} (trainer.resume_mode=disable starts afresh)"


class LearningSummary:
    """Whether the run learned, in one line at its end: each reward component's mean over the first and
    the last ``window`` steps this process ran; the same on the prompts drawn more than once, at their first draw
    and their last (the same prompts before and after, so the difference is the policy's, not which prompts a step
    happened to draw, where the draws do not depend on past rewards as a curriculum's do); and each held-out
    result at its first and last validation."""

    def __init__(self, components: Iterable[str], window: int = 4):
        self.components = list(components)
        self.window = window
        self.rewards: list[dict[str, float]] = []  # per step: component -> mean
        self.first_draw: dict[str, dict[str, float]] = {}  # prompt -> component -> mean over its first group
        self.last_redraw: dict[str, dict[str, float]] = {}  # prompt -> the same at its latest group after that
        self.held_out: dict[str, list[tuple[int, float]]] = {}  # metric -> (step, value) per validation

    def observe(self, step: int, metrics: Mapping[str, float]) -> None:
        rewards = {
            name: float(metrics[f"reward/{name}/mean"]) for name in self.components if f"reward/{name}/mean" in metrics
        }
        if rewards:  # a validation before training has none
            self.rewards.append(rewards)
        for key, value in metrics.items():
            if is_held_out_mean(key) and "/acc/" in key:
                self.held_out.setdefault(key[len(VALIDATION_PREFIX) :], []).append((step, float(value)))

    def observe_groups(self, groups: Mapping[str, list[Mapping[str, float | None]]]) -> None:
        """One step's completions by prompt (a key that names it across steps): each one's reward components, None
        where not applicable or failed. A component's first draw is the first that scored it."""
        for prompt, completions in groups.items():
            means = {}
            for name in self.components:
                values = [row[name] for row in completions if row.get(name) is not None]
                if values:
                    means[name] = sum(values) / len(values)
            first = self.first_draw.setdefault(prompt, {})
            later = {name: mean for name, mean in means.items() if name in first}
            if later:
                self.last_redraw.setdefault(prompt, {}).update(later)
            first.update({name: mean for name, mean in means.items() if name not in first})

    def redrawn_means(self) -> dict[str, tuple[float, float]]:
        """Per component, its mean over the prompts drawn again at their first draw and at their last."""
        means = {}
        for name in self.components:
            pairs = [
                (self.first_draw[prompt][name], later[name])
                for prompt, later in self.last_redraw.items()
                if name in later
            ]
            if pairs:
                before, after = (sum(values) / len(pairs) for values in zip(*pairs))
                means[name] = (before, after)
        return means

    def redrawn_metrics(self) -> dict[str, float]:
        """:meth:`redrawn_means` as metrics (TensorBoard, benchmarks/masker_ablation.py): running values over the
        steps this process ran (a resumed run starts them again)."""
        metrics = {}
        for name, (before, after) in self.redrawn_means().items():
            metrics[f"learning/{name}/redrawn_first_draw"] = before
            metrics[f"learning/{name}/redrawn_last_draw"] = after
        if metrics:
            metrics["learning/redrawn_prompts"] = float(len(self.last_redraw))
        return metrics

    def _redrawn(self) -> list[str]:
        parts = [
            f"{name} {_number(before)} -> {_number(after)}" for name, (before, after) in self.redrawn_means().items()
        ]
        if parts:
            parts[0] = f"on the {len(self.last_redraw)} prompts drawn again (first draw -> last): {parts[0]}"
        return parts

    def _mean(self, steps: list[dict[str, float]], name: str) -> float | None:
        values = [step[name] for step in steps if name in step and not math.isnan(step[name])]
        return sum(values) / len(values) if values else None

    def line(self) -> str | None:
        window = min(self.window, len(self.rewards) // 2)
        parts = []
        if window:
            first, last = self.rewards[:window], self.rewards[-window:]
            for name in self.components:
                before, after = self._mean(first, name), self._mean(last, name)
                if before is not None and after is not None:
                    parts.append(f"{name} {_number(before)} -> {_number(after)}")
            if parts:
                parts[0] = f"reward (mean of the first {window} steps -> the last {window}): {parts[0]}"
        parts += self._redrawn()
        for key, points in sorted(self.held_out.items()):
            if len(points) > 1:
                (first_step, before), (last_step, after) = points[0], points[-1]
                parts.append(
                    f"held-out {key} {_number(before)} (step {first_step}) -> {_number(after)} (step {last_step})"
                )
        return "learning: " + " | ".join(parts) if parts else None


class StepBoard:
    """The lines the trainer has posted and the driver has not yet shown: an object of the driver where the trainer
    loop runs there (the lean layout), a Ray actor where it runs in an actor of its own."""

    def __init__(self):
        self.entries: list[dict] = []
        self.lock = (
            threading.Lock()
        )  # in the driver, the trainer posts from one thread and the console takes in another

    def post(self, entry: dict) -> None:
        with self.lock:
            self.entries.append(entry)

    def take(self) -> list[dict]:
        with self.lock:
            entries, self.entries = self.entries, []
        return entries


BOARD_HERE: StepBoard | None = None
"""The driver console's board while one runs in this process with the trainer loop beside it."""


class StepReporter:
    """The trainer's side: posts lines to the driver's board, or prints them where there is none."""

    def __init__(self):
        self.board = None

    def _find_board(self):
        if self.board is None:
            with contextlib.suppress(ValueError):  # no driver console in this job
                self.board = ray.get_actor(BOARD_NAME)
        return self.board

    def report(self, line: str, step: int | None = None) -> None:
        entry = {"line": line, "step": step}
        if BOARD_HERE is not None:
            BOARD_HERE.post(entry)
            return
        board = self._find_board()
        if board is None:
            print(line, file=sys.stderr, flush=True)
        else:
            board.post.remote(entry)


class TerminalConsole:
    """The driver's side: a progress bar (on a terminal) and the trainer's lines, as they come.

    With ``trainer_here`` (the trainer loop runs in this process) the board is an object here
    (:data:`BOARD_HERE`); otherwise a thread waits for verl's ``ray.init`` and creates the board actor. A thread
    polls the board; it shows what is left on it when the run ends, failed or not, before any traceback is
    printed."""

    def __init__(self, total_steps: int, out: TextIO, err: TextIO, trainer_here: bool = False):
        from tqdm import tqdm

        self.out = out
        # disable=None: no bar where stderr is not a terminal (a log file gets the lines only)
        self.bar = tqdm(
            total=total_steps or None, unit="step", desc="training", file=err, disable=None, dynamic_ncols=True
        )
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="diffugrpo-console", daemon=True)
        self.board_here = StepBoard() if trainer_here else None
        self.board = None

    def __enter__(self) -> TerminalConsole:
        global BOARD_HERE
        BOARD_HERE = self.board_here
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        global BOARD_HERE
        self.stopping.set()
        self.thread.join()
        BOARD_HERE = None
        self.bar.close()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self._show_board()
            self.stopping.wait(BOARD_POLL_S)
        self._show_board()

    def _show_board(self) -> None:
        if self.board_here is not None:
            self._show(self.board_here.take())
            return
        if self.board is None and ray.is_initialized():
            self.board = ray.remote(num_cpus=0)(StepBoard).options(name=BOARD_NAME, get_if_exists=True).remote()
        if self.board is None:
            return
        with contextlib.suppress(ray.exceptions.RayError):  # Ray going down at the end of a failed run
            self._show(ray.get(self.board.take.remote()))

    def _show(self, entries: list[dict]) -> None:
        for entry in entries:
            self.bar.write(entry["line"], file=self.out)
            if entry["step"] is not None:
                self.bar.update(entry["step"] - self.bar.n)


def route_logging(log: TextIO) -> None:
    """Every logging record to ``log``; on the terminal streams, only ERROR and above."""
    loggers = [
        logging.getLogger(),
        *(item for item in logging.Logger.manager.loggerDict.values() if isinstance(item, logging.Logger)),
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream in (
                sys.stderr,
                sys.stdout,
                sys.__stderr__,
                sys.__stdout__,
            ):
                handler.setLevel(max(handler.level, logging.ERROR))
        if logger.handlers and (logger is logging.getLogger() or not logger.propagate):
            file_handler = logging.StreamHandler(log)
            file_handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s %(name)s: %(message)s"))
            logger.addHandler(file_handler)
    logging.captureWarnings(True)


def quiet_worker_output() -> None:
    """In a Ray worker of a quiet run: standard output (verl's config and metric dumps, notices) and
    warnings to the run's log file; stderr keeps errors and tracebacks, which Ray forwards."""
    path = os.environ.get(LOG_FILE_ENV)
    if not path:
        return
    log = open(path, "a", buffering=1)  # noqa: SIM115 - the process's log until it exits
    sys.stdout.flush()
    os.dup2(log.fileno(), sys.stdout.fileno())  # at the descriptor: C libraries' output too
    sys.stdout.reconfigure(line_buffering=True)
    route_logging(log)


@contextlib.contextmanager
def progress_bars_off():
    """What ``TQDM_DISABLE=1`` does in a worker, for the driver, where the lean layout runs verl's trainer loop
    (its "Training Progress" bar, datasets' filtering bars): tqdm reads that variable once, at import, so every bar
    created meanwhile defaults to disabled instead. A bar that passes ``disable`` itself (the console's) is kept."""
    from functools import partialmethod

    from tqdm import std

    init = std.tqdm.__dict__["__init__"]
    std.tqdm.__init__ = partialmethod(init, disable=True)
    try:
        yield
    finally:
        std.tqdm.__init__ = init


def _set_quiet_worker_settings(config, log_path: str) -> None:
    from omegaconf import open_dict

    from diffugrpo_plugin.integration.platform import ray_worker_env_vars

    env_vars = ray_worker_env_vars(config)
    with open_dict(config):
        env_vars.update({**QUIET_WORKER_ENV, LOG_FILE_ENV: log_path})
        config.ray_kwargs.ray_init.logging_level = "ERROR"  # the driver's Ray notices ("Started a local Ray instance")


def run_quietly(config, run, log_dir: str) -> None:
    """``run(config)`` with the terminal kept for the bar, the step lines and errors."""
    log_path = os.path.abspath(os.path.join(log_dir, LOG_FILE_NAME))
    verbose = bool(config.diffugrpo.get("verbose", False))
    total = int(config.trainer.total_training_steps or 0)
    from diffugrpo_plugin.integration.layout import trainer_loop_in_driver
    from diffugrpo_plugin.integration.sampler_choice import sampler_choice

    trainer_here = trainer_loop_in_driver(config)
    out, err = sys.stdout, sys.stderr
    sampler, _, phrase = sampler_choice(config)
    if verbose:
        print(f"diffugrpo: {total} steps; sampler {sampler}, {phrase}", file=out, flush=True)
        with TerminalConsole(total, out, err, trainer_here):
            run(config)
        return
    _set_quiet_worker_settings(config, log_path)
    print(
        f"diffugrpo: {total} steps; sampler {sampler}, {phrase}; full log: {log_path} (diffugrpo.verbose=true "
        f"shows it here)",
        file=out,
        flush=True,
    )
    started = time.monotonic()
    with open(log_path, "a", buffering=1) as log:
        route_logging(log)
        with TerminalConsole(total, out, err, trainer_here), contextlib.redirect_stdout(log), progress_bars_off():
            run(config)
    print(f"diffugrpo: done in {time.monotonic() - started:.0f}s; full log: {log_path}", file=out, flush=True)
