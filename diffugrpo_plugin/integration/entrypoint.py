"""Make ``python -m verl.trainer.main algorithm=coupled_grpo`` work on stock verl 0.9.1.

verl has no ``verl.trainer.main`` module (its entry is ``verl.trainer.main_ppo``). Running
``python -m verl.trainer.main`` imports the ``verl`` package first, which loads our
``verl.plugins`` entry point; at that moment we append one finder to ``sys.meta_path`` that
answers for exactly that module name, loading :mod:`diffugrpo_plugin.main` under it. The finder
sits last, so if verl ever ships its own ``verl.trainer.main``, verl's wins.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

ALIAS = "verl.trainer.main"
TARGET = "diffugrpo_plugin.main"


class _VerlTrainerMainAlias(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != ALIAS:
            return None
        target_spec = importlib.util.find_spec(TARGET)
        return importlib.util.spec_from_file_location(ALIAS, target_spec.origin)


def install_verl_trainer_main_alias() -> None:
    if not any(isinstance(finder, _VerlTrainerMainAlias) for finder in sys.meta_path):
        sys.meta_path.append(_VerlTrainerMainAlias())
