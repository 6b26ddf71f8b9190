"""The layering of the package, checked by import-linter and in fresh interpreters.

``lint-imports`` checks the contracts in ``pyproject.toml``: the subsystems form layers (the CLI on top, nothing
imports it; the verl glue under it; then the training recipes; the tools and ``diffucoder_compat``; the algorithm
and the rollout; models and rewards; the sandbox and data; plugin discovery and the hook types), only the verl glue
imports verl or Ray, rewards, the sandbox, data and plugin discovery import no torch, and the framework imports no
built-in reward plugin. This file runs it, shows it catches a violation, and adds what it cannot express:

* the in-sandbox modules import only the standard library and each other;
* no module of ours imports itself through others: no import cycle, counting imports inside functions and
  ``TYPE_CHECKING`` blocks (import-linter's layers see cycles between packages only);
* what processes really load (rewards, data preparation, the math), in fresh interpreters.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from diffugrpo_plugin.sandbox.host import IN_SANDBOX_MODULES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "diffugrpo_plugin"
IN_SANDBOX = tuple(name.removesuffix(".py") for name in IN_SANDBOX_MODULES)


def sources() -> dict[str, Path]:
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "reward_plugins").rglob("*.py")]
    return {path.relative_to(ROOT).as_posix(): path for path in files}


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` anywhere in the file names (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
            "--no-cache",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_import_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "4 kept, 0 broken" in result.stdout


VIOLATIONS = {  # contract -> (file, a line that breaks it)
    "subsystems are layered": ("diffugrpo_plugin/models/dlm.py", "import diffugrpo_plugin.cli"),
    "rewards, the sandbox, data, plugin discovery and the rollout's light actors import no torch": (
        "diffugrpo_plugin/rewards/judging.py",
        "import torch",
    ),
    "only the verl glue and the entry point import verl or Ray (the rollout's light actors neither)": (
        "diffugrpo_plugin/serving/request_router.py",
        "import ray",
    ),
}


def test_each_import_contract_catches_its_violation(tmp_path):
    """A copy of the package with one violation of each contract: lint-imports reports each contract broken."""
    for name in ("diffugrpo_plugin", "reward_plugins"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for importer, line in VIOLATIONS.values():
        target = tmp_path / importer
        target.write_text(target.read_text() + f"\n{line}\n")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, '.'); from importlinter.cli import lint_imports_command; "
            "sys.exit(lint_imports_command())",
            "--no-cache",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = " ".join(result.stdout.split())
    assert result.returncode != 0 and f"{len(VIOLATIONS)} broken" in report, (
        result.stdout[-3000:] + result.stderr[-2000:]
    )
    assert [contract for contract in VIOLATIONS if f"{contract}" not in report] == []
    for importer, line in VIOLATIONS.values():
        assert importer.removesuffix(".py").replace("/", ".") in report, importer


@pytest.mark.parametrize("name", IN_SANDBOX)
def test_the_in_sandbox_modules_import_only_the_standard_library_and_each_other(name):
    """They run inside the sandbox, where diffugrpo is not visible (numpy only for a numpy value that arrives)."""
    outside = {
        module
        for module in imported_modules(PACKAGE / "sandbox" / f"{name}.py")
        if module.split(".")[0] not in (*sys.stdlib_module_names, *IN_SANDBOX, "numpy", "__future__")
    }
    assert outside == set()


def module_name(relative: str) -> str:
    """``diffugrpo_plugin/sampling/__init__.py`` -> ``diffugrpo_plugin.sampling``."""
    parts = relative.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of ours -> the modules of ours it imports anywhere in its file."""
    files = {module_name(name): path for name, path in sources().items()}

    def owner(
        imported: str,
    ) -> str | None:  # ``diffugrpo_plugin.rewards.spec.RewardSpec`` -> ``diffugrpo_plugin.rewards.spec``
        while imported and imported not in files:
            imported = imported.rpartition(".")[0]
        return imported or None

    return {
        module: {found for found in map(owner, imported_modules(path)) if found not in (None, module)}
        for module, path in files.items()
    }


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, stack = set(), list(graph[start])
    while stack:
        module = stack.pop()
        if module not in seen:
            seen.add(module)
            stack.extend(graph[module])
    return seen


def test_no_import_cycles():
    graph = import_graph()
    assert (
        "diffugrpo_plugin.models.kernels" in graph
        and "diffugrpo_plugin.models.kernels" in graph["diffugrpo_plugin.models.dlm"]
    )
    reach = {module: reachable(graph, module) for module in graph}
    cycles = {
        frozenset({module} | {other for other in reach[module] if module in reach[other]})
        for module in graph
        if module in reach[module]
    }
    assert sorted(sorted(cycle) for cycle in cycles) == []


def test_the_cycle_check_sees_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert {module for module in graph if module in reachable(graph, module)} == {"a", "b", "c"}


def fresh(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.sandbox
def test_choosing_and_building_rewards_loads_no_torch_verl_or_ray():
    loaded = fresh("""
        import sys
        from diffugrpo_plugin.rewards.spec import RewardSpec
        RewardSpec.from_config({"reward_funcs": ["code", "code_format", "efficiency", "maintainability", "comments"]})
        print(sorted(name for name in ("torch", "verl", "ray") if name in sys.modules))
    """)
    assert loaded == "[]"


def test_preparing_the_default_data_loads_no_torch(tmp_path):
    loaded = fresh(f"""
        import os, sys
        os.environ["DIFFUGRPO_HOME"] = {str(tmp_path)!r}
        from diffugrpo_plugin.data import default_data_paths
        train, validation = default_data_paths()
        assert os.path.isfile(train) and os.path.isfile(validation)
        print(sorted(name for name in ("torch", "verl", "ray") if name in sys.modules))
    """)
    assert loaded == "[]"


def test_the_math_loads_no_verl_or_ray():
    loaded = fresh("""
        import sys
        import diffugrpo_plugin.diffucoder_compat, diffugrpo_plugin.models.kernels
        import diffugrpo_plugin.core.logprobs, diffugrpo_plugin.core.masking
        import diffugrpo_plugin.models.dlm
        import diffugrpo_plugin.sampling.samplers, diffugrpo_plugin.training.sft
        print(sorted(name for name in ("verl", "ray") if name in sys.modules))
    """)
    assert loaded == "[]"
