"""Dataset preparation: code problems from any supported source become verl RL parquet rows.

Sources: ``mbpp``, ``humaneval``, ``acecode``, ``leetcode``, ``jsonl``, ``multipl-e`` (readers in
:mod:`.sources`) and ``synthetic`` (generated, :mod:`.synthetic`). Every source yields
:class:`~.rows.Problem` records that :func:`~.rows.to_row` turns into one verl row each, with
one arrow schema for all (:mod:`.rows`), so files from different sources concatenate. Input
files are read by :mod:`.records`, whose errors name the file, line and field.

No torch anywhere in this package.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterable

from diffugrpo_plugin.data.cache import build_once, diffugrpo_home
from diffugrpo_plugin.data.records import DataError, check_choice
from diffugrpo_plugin.data.rows import Problem, build_prompt, format_completion, to_row, write_parquet
from diffugrpo_plugin.data.sources import (
    acecode_problems,
    humaneval_problems,
    jsonl_problems,
    leetcode_problems,
    mbpp_problems,
    multiple_problems,
)
from diffugrpo_plugin.data.synthetic import (
    RL_FRACTION,
    SYNTHETIC_FAMILIES,
    SYNTHETIC_SPLITS,
    SYNTHETIC_VERSION,
    TRAIN_PARTS,
    synthetic_problems,
)

__all__ = [
    "DataError",
    "Problem",
    "RL_FRACTION",
    "SOURCES",
    "SYNTHETIC_FAMILIES",
    "SYNTHETIC_SPLITS",
    "SYNTHETIC_VERSION",
    "TRAIN_PARTS",
    "build_prompt",
    "default_data_paths",
    "default_warm_start_data",
    "format_completion",
    "load_problems",
    "prepare",
    "prepare_to_parquet",
    "synthetic_problems",
    "write_parquet",
]

SOURCES = ("mbpp", "humaneval", "acecode", "leetcode", "jsonl", "multipl-e", "synthetic")


def load_problems(
    source: str, split: str, input_path: str | os.PathLike | None = None, **options: Any
) -> list[Problem]:
    """Problems of one source and split. ``options`` are the source's keyword arguments."""
    check_choice(source, SOURCES, "data source", "sources")
    if source in ("acecode", "leetcode", "jsonl") and input_path is None:
        raise DataError(f"source '{source}' needs an input file: pass --input path/to/file.jsonl")
    if source == "mbpp":
        return mbpp_problems(input_path, split, **options)
    if source == "humaneval":
        return humaneval_problems(input_path, split)
    if source == "acecode":
        return acecode_problems(input_path, **options)
    if source == "leetcode":
        return leetcode_problems(input_path)
    if source == "jsonl":
        return jsonl_problems(input_path, **options)
    if source == "multipl-e":
        problems, left_out = multiple_problems(input_path, split, **options)
        if left_out:
            print(
                f"multipl-e: left out {left_out} rows whose tests use javatuples (not in the sandbox)", file=sys.stderr
            )
        return problems
    if input_path is not None:
        raise DataError("source 'synthetic' generates its problems and reads no --input")
    return synthetic_problems(split, **options)


def prepare(
    source: str,
    split: str,
    input_path: str | os.PathLike | None = None,
    data_source: str | None = None,
    limit: int | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    """verl rows for one source and split (``data_source`` defaults to the source name)."""
    problems = load_problems(source, split, input_path, **options)
    if limit is not None:
        problems = problems[:limit]
    name = data_source or source
    return [to_row(problem, name, split, index) for index, problem in enumerate(problems)]


def prepare_to_parquet(
    source: str,
    splits: Iterable[str],
    output_dir: str | os.PathLike,
    input_path: str | os.PathLike | None = None,
    **options: Any,
) -> dict[str, Path]:
    """Write ``{output_dir}/{split}.parquet`` for each split; returns the paths by split."""
    return {
        split: write_parquet(prepare(source, split, input_path, **options), Path(output_dir) / f"{split}.parquet")
        for split in splits
    }


def _default_data_dir(seed: int) -> Path:
    """The default job's synthetic parquet files (:data:`TRAIN_PARTS` and ``validation``), generated once into the
    cache. Safe to call from many processes at once (built under a file lock, published atomically)."""
    target = diffugrpo_home() / "data" / f"synthetic-v{SYNTHETIC_VERSION}-seed{seed}-rl{RL_FRACTION:g}"
    splits = (*TRAIN_PARTS, "validation")
    return build_once(target, lambda directory: prepare_to_parquet("synthetic", splits, directory, seed=seed))


def default_data_paths(seed: int = 0) -> tuple[str, str]:
    """The default job's train and validation parquet: its RL prompts (the synthetic ``rl`` part, functions its
    warm start never saw) and its held-out tasks (``validation``)."""
    directory = _default_data_dir(seed)
    return str(directory / "rl.parquet"), str(directory / "validation.parquet")


def default_warm_start_data(seed: int = 0) -> str:
    """The parquet the default model's warm start is fine-tuned on (the synthetic ``warm_start`` part)."""
    return str(_default_data_dir(seed) / "warm_start.parquet")
