"""Modules that moved when the package was laid out by subsystem, still importable by their old names until 0.2.

``import diffugrpo_plugin.masking`` (or ``python -m diffugrpo_plugin.sft``) keeps working: it hands back the
module at its new place, the same object, and warns once, naming that place. The three old modules that became
packages (``models``, ``rewards``, ``sandbox``) re-export their public names from the package instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

NEW_PLACE = {
    "masking": "core.masking",
    "kernels": "models.kernels",
    "logprobs": "core.logprobs",
    "loss_terms": "core.loss_terms",
    "families": "models.families",
    "family_detection": "models.detection",
    "weights": "models.weights",
    "lora": "models.lora",
    "lean_mlp": "models.lean_mlp",
    "native": "models.native",
    "tiny": "models.tiny",
    "tokenizer": "models.tokenizer",
    "reward_weights": "rewards.learned_weights",
    "code_execution": "rewards.code_tests",
    "judging": "rewards.judging",
    "verdicts": "rewards.verdicts",
    "sandbox_limits": "sandbox.limits",
    "sandbox_launcher": "sandbox.sandbox_launcher",
    "sandbox_wire": "sandbox.sandbox_wire",
    "sandbox_program": "sandbox.sandbox_program",
    "sandbox_judge": "sandbox.sandbox_judge",
    "cache": "data.cache",
    "request_batcher": "sampling.request_batcher",
    "sft": "training.sft",
    "warm_start": "training.warm_start",
    "curriculum": "training.curriculum",
    "model_check": "tools.model_check",
    "step_cost": "tools.step_cost",
    "plotting": "tools.plotting",
    "evaluation": "tools.evaluation",
}
"""Old module name under ``diffugrpo_plugin`` -> its name now (a moved package's submodules follow it)."""


def new_name(fullname: str) -> str | None:
    """``diffugrpo_plugin.native.dream`` -> ``diffugrpo_plugin.models.native.dream``; None if it did not move."""
    package, _, rest = fullname.partition(".")
    if package != "diffugrpo_plugin" or not rest:
        return None
    head, dot, tail = rest.partition(".")
    return f"diffugrpo_plugin.{NEW_PLACE[head]}{dot}{tail}" if head in NEW_PLACE else None


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module already at its new name (``get_code`` serves ``python -m``)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:
        """The module ran when it was imported under its new name."""

    def get_code(self, fullname: str):
        spec = importlib.util.find_spec(self.target)
        return spec.loader.get_code(self.target)


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        moved_to = new_name(fullname)
        if moved_to is None:
            return None
        warnings.warn(
            f"{fullname} moved to {moved_to}: import it from there (the old name goes in 0.2)",
            FutureWarning,
            stacklevel=2,
        )
        target = importlib.util.find_spec(moved_to)
        spec = importlib.machinery.ModuleSpec(
            fullname, _Alias(moved_to), origin=target.origin, is_package=target.submodule_search_locations is not None
        )
        spec.has_location = target.has_location  # ``python -m`` sets ``__file__`` from it
        return spec


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
