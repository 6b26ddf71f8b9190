"""The flat modules of the first layout moved into subsystem folders: their old names still import, as the very same
module, with a FutureWarning naming the new place; the three that became packages still export their names."""

from __future__ import annotations

import json
import subprocess
import sys

from diffugrpo_plugin import _moved
from diffugrpo_plugin.sandbox.probe import LAUNCHER_PATH

SANDBOX_FOLDER = LAUNCHER_PATH.parent


def fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "always::FutureWarning", "-c", code], capture_output=True, text=True, timeout=300
    )


def test_every_old_name_imports_the_module_at_its_new_place_and_says_where():
    # one interpreter for all of them; the in-sandbox modules import each other by top-level name, as in the sandbox
    done = fresh(
        "import importlib, json, sys, warnings\n"
        f"sys.path.append({str(SANDBOX_FOLDER)!r})\n"
        "from diffugrpo_plugin import _moved\n"
        "found = {}\n"
        "for old, new in sorted(_moved.NEW_PLACE.items()):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(f'diffugrpo_plugin.{old}')\n"
        "    found[old] = [module is sys.modules[f'diffugrpo_plugin.{new}'], [str(w.message) for w in caught]]\n"
        "from diffugrpo_plugin.native import dream  # a submodule of a moved package follows it\n"
        "found['native.dream'] = [dream.__name__, []]\n"
        "print(json.dumps(found))\n"
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found.pop("native.dream")[0] == "diffugrpo_plugin.models.native.dream"
    assert sorted(found) == sorted(_moved.NEW_PLACE)
    for old, (same_module, warned) in found.items():
        new = _moved.NEW_PLACE[old]
        assert same_module, old
        assert f"diffugrpo_plugin.{old} moved to diffugrpo_plugin.{new}: import it from there" in " ".join(warned), old


def test_python_dash_m_runs_a_moved_module_by_its_old_name():
    done = subprocess.run(
        [sys.executable, "-m", "diffugrpo_plugin.sft", "--help"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "moved to diffugrpo_plugin.training.sft" in done.stderr


def test_a_module_that_became_a_package_still_exports_its_names():
    done = fresh(
        "from diffugrpo_plugin.models import load_diffusion_lm\n"
        "from diffugrpo_plugin.rewards import RewardSpec, weighted_total\n"
        "from diffugrpo_plugin.sandbox import Sandbox, SandboxConfig\n"
        "for obj in (load_diffusion_lm, RewardSpec, weighted_total, Sandbox, SandboxConfig):\n"
        "    print(obj.__module__)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "diffugrpo_plugin.models.dlm",
        "diffugrpo_plugin.rewards.spec",
        "diffugrpo_plugin.rewards.aggregation",
        "diffugrpo_plugin.sandbox.host",
        "diffugrpo_plugin.sandbox.config",
    ]
    assert "FutureWarning" not in done.stderr


def test_a_name_that_never_existed_is_still_an_import_error():
    done = fresh("import diffugrpo_plugin.no_such_module")
    assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr
