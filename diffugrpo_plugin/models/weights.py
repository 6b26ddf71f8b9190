"""Whether a checkpoint's weights fit a model class, decided from names and shapes before any weight is read.

transformers loads a checkpoint into any class whose config it accepts: weights the class has and the
checkpoint lacks are freshly initialised with a note in the log, weights only the checkpoint has are
dropped. For a fine-tune saved by other code, an un-merged adapter or a custom variant, that is a model
that runs, samples and trains on random weights. So every loading path here compares first:

* :func:`checkpoint_shapes` reads the parameter names and shapes from the checkpoint's safetensors
  headers (or a ``.bin``'s pickle, mapped to the meta device), never the tensors;
* :func:`class_shapes` builds the class on the meta device and lists what it would load;
* :func:`compare` says what is missing, unexpected or of another shape, counting a tied weight as
  present when any one of its names is saved (a tied head is saved once).

:func:`forward_problem` runs the class once on the meta device, which catches settings the class
cannot run (heads that do not divide, ...) with no memory and no arithmetic.

Plain torch + safetensors + transformers; no verl.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

Shape = tuple[int, ...]
SHOWN = 3  # names quoted per kind of problem; the count says how many in all


def checkpoint_shapes(path: str | os.PathLike) -> dict[str, Shape] | None:
    """Every tensor name and shape a local checkpoint directory holds, or None when it has no weight files
    read here (a hub id, a format other than safetensors / pytorch ``.bin``, or files that do not parse:
    loading then reports them in its own words)."""
    directory = Path(path)
    if not directory.is_dir():
        return None
    try:
        return _shapes_in(directory)
    except Exception:  # noqa: BLE001 - an unreadable header is the loader's to report, not a misfit
        return None


def _shapes_in(directory: Path) -> dict[str, Shape] | None:
    for index_name, reader in (
        ("model.safetensors.index.json", _safetensors_shapes),
        ("pytorch_model.bin.index.json", _bin_shapes),
    ):
        index = directory / index_name
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return {name: shape for shard in shards for name, shape in reader(directory / shard).items()}
    for file_name, reader in (("model.safetensors", _safetensors_shapes), ("pytorch_model.bin", _bin_shapes)):
        if (directory / file_name).is_file():
            return reader(directory / file_name)
    return None


def _safetensors_shapes(file: Path) -> dict[str, Shape]:
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as handle:  # reads the header only
        return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}


def _bin_shapes(file: Path) -> dict[str, Shape]:
    # mmap reads only what is needed, but works for zip-format files only (torch.save's default since 1.6)
    state = torch.load(str(file), map_location="meta", weights_only=True, mmap=zipfile.is_zipfile(file))
    return {name: tuple(tensor.shape) for name, tensor in state.items()}


def meta_model(model_class: Any, config: Any) -> torch.nn.Module:
    """``model_class`` built from ``config`` on the meta device (shapes only). ``model_class`` None: the stock
    transformers class for the config (``AutoModelForCausalLM``). Attention is SDPA's whatever the config
    asks (a kernel this machine lacks, flash-attn say, says nothing about names, shapes or settings)."""
    if getattr(config, "_attn_implementation", None) not in (None, "sdpa", "eager"):
        config._attn_implementation = "sdpa"
    with torch.device("meta"):
        if model_class is None:
            from transformers import AutoModelForCausalLM

            return AutoModelForCausalLM.from_config(config)
        return model_class(config)


def class_shapes(model: torch.nn.Module) -> tuple[dict[str, Shape], list[set[str]]]:
    """What a (meta) model loads: each state-dict name and shape, and the groups of names that share one tensor."""
    shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict(keep_vars=True).items()}
    sharing: dict[int, set[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        sharing.setdefault(id(parameter), set()).add(name)
    return shapes, [names for names in sharing.values() if len(names) > 1]


@dataclass(frozen=True)
class WeightFit:
    """How a checkpoint's tensors compare with a class's (names as the class spells them)."""

    missing: tuple[str, ...]  # the class has them, the checkpoint does not: they would be freshly initialised
    unexpected: tuple[str, ...]  # the checkpoint has them, the class does not: they would be dropped
    mismatched: tuple[tuple[str, Shape, Shape], ...]  # (name, checkpoint shape, class shape)
    checked: int  # the class's tensors compared

    @property
    def fits(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def describe(self) -> str:
        """One line: each kind of problem with its count and the first few names."""
        shapes = [
            f"{name} {list(saved)} vs {list(wanted)}" if saved else name for name, saved, wanted in self.mismatched
        ]
        parts = [
            f"{len(names)} {label} ({listed(names)})"
            for label, names in (
                ("missing", self.missing),
                ("unexpected", self.unexpected),
                ("of another shape", shapes),
            )
            if names
        ]
        return "; ".join(parts) if parts else f"all {self.checked} tensors fit"

    @classmethod
    def from_loading_info(cls, info: dict) -> WeightFit:
        """What ``from_pretrained(..., output_loading_info=True)`` reported (shapes, where it gives them)."""
        mismatched = tuple(
            (entry[0], tuple(entry[1]), tuple(entry[2]))
            if isinstance(entry, tuple) and len(entry) == 3
            else (str(entry), (), ())
            for entry in info.get("mismatched_keys") or ()
        )
        return cls(
            missing=tuple(sorted(info.get("missing_keys") or ())),
            unexpected=tuple(sorted(info.get("unexpected_keys") or ())),
            mismatched=mismatched,
            checked=0,
        )


def listed(names, shown: int = SHOWN) -> str:
    """The first ``shown`` names, then ``...`` when there are more."""
    names = list(names)
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")


def compare(
    expected: dict[str, Shape],
    shared: list[set[str]],
    found: dict[str, Shape],
    base_prefix: str = "",
    ignored_missing: tuple[str, ...] = (),
    ignored_unexpected: tuple[str, ...] = (),
) -> WeightFit:
    """Compare a checkpoint's tensors (``found``) with a class's (``expected``, ``shared`` from :func:`class_shapes`).

    A checkpoint saved from the bare body (no ``base_prefix.`` on its names) or from a wrapper around it
    is read as transformers reads it: the prefix is added or removed when that is what makes names meet.
    ``ignored_*``: regular expressions of names the class says may be absent or extra (transformers'
    ``_keys_to_ignore_on_load_missing`` / ``_unexpected``).
    """
    found = _as_class_names(expected, found, base_prefix)
    optional = {name for names in shared for name in names}
    missing = [name for name in expected if name not in found and name not in optional]
    missing += [sorted(names)[0] for names in shared if not names & found.keys()]
    unexpected = [name for name in found if name not in expected]
    mismatched = tuple(
        (name, found[name], shape) for name, shape in sorted(expected.items()) if name in found and found[name] != shape
    )
    return WeightFit(
        missing=tuple(sorted(_not_matching(missing, ignored_missing))),
        unexpected=tuple(sorted(_not_matching(unexpected, ignored_unexpected))),
        mismatched=mismatched,
        checked=len(expected),
    )


STALE_BUFFERS = {"rotary_emb.inv_freq": r"rotary_emb\.inv_freq", "position_ids": r"(^|\.)position_ids$"}


def fit(model: torch.nn.Module, found: dict[str, Shape]) -> WeightFit | None:
    """How the tensors ``found`` in a checkpoint fit ``model`` (built on the meta device), as transformers would
    load them: its key renames applied, and what it ignores ignored (the class's own patterns, and the buffers
    old checkpoints saved that are no longer persistent). None when the class converts keys in ways other than
    renaming (fused experts, say): names cannot then be compared one to one, and loading checks them."""
    renamed = _renamed_as_loaded(model, found)
    if renamed is None:
        return None
    expected, shared = class_shapes(model)
    buffers = [name for name, _ in model.named_buffers()]
    stale = tuple(
        pattern for suffix, pattern in STALE_BUFFERS.items() if any(name.endswith(suffix) for name in buffers)
    )
    return compare(
        expected,
        shared,
        renamed,
        getattr(model, "base_model_prefix", "") or "",
        tuple(getattr(model, "_keys_to_ignore_on_load_missing", None) or ()),
        tuple(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ()) + stale,
    )


def _renamed_as_loaded(model: torch.nn.Module, found: dict[str, Shape]) -> dict[str, Shape] | None:
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightRenaming

    if not hasattr(model, "config"):
        return found
    renamed = dict(found)
    for transform in get_model_conversion_mapping(model):
        if type(transform) is not WeightRenaming or getattr(transform, "scope_prefix", None):
            return None
        for source, target in zip(transform.source_patterns, transform.target_patterns):
            renamed = {re.sub(source, target, name): shape for name, shape in renamed.items()}
    return renamed


def _not_matching(names: list[str], patterns: tuple[str, ...]) -> list[str]:
    return [name for name in names if not any(re.search(pattern, name) for pattern in patterns)]


def _as_class_names(expected: dict[str, Shape], found: dict[str, Shape], base_prefix: str) -> dict[str, Shape]:
    if not base_prefix:
        return found
    prefix = base_prefix + "."
    candidates = [
        found,
        {prefix + name: shape for name, shape in found.items()},
        {name.removeprefix(prefix): shape for name, shape in found.items()},
    ]
    return max(candidates, key=lambda names: len(names.keys() & expected.keys()))


def forward_problem(model: torch.nn.Module) -> str | None:
    """Run a (meta) model once on 4 tokens; the error it raises, in one line, or None when it runs (or when the
    run is inconclusive: code that reads a tensor's values, such as dynamic RoPE scaling, cannot run on meta).

    No padding mask is passed: building one reads values, which meta tensors do not have.
    """
    input_ids = torch.zeros(1, 4, dtype=torch.long, device="meta")  # [1, 4]
    try:
        with torch.no_grad():
            model(input_ids=input_ids)
    except NotImplementedError:
        return None
    except Exception as error:  # noqa: BLE001 - any other failure means this class cannot run these settings
        return None if "meta tensor" in str(error) else one_line(error)
    return None


def one_line(error: Exception) -> str:
    """``Type: message`` with the message's whitespace (newlines included) collapsed."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"
