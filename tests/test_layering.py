"""The layering rule of the README's module map, checked on the source and in fresh interpreters.

* verl and Ray are imported only by the verl glue (``integration/``) and the entry point (``main.py``).
* rewards, the sandbox, data and plugin discovery import no torch (reward workers run on CPU);
  the reward plugins import no torch either.
* nothing imports the CLI, and nothing in the framework imports the built-in reward plugins.
* the data-to-model chain only imports downwards: cache < data < tokenizer < tiny < sft < warm_start.
* no module of ours imports itself through others: no import cycle, counting imports inside functions and
  ``TYPE_CHECKING`` blocks (as import-linter does), so the layers above form a directed acyclic graph.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reward_support import require_bwrap

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "diffugrpo_plugin"

VERL_GLUE = ("diffugrpo_plugin/integration/", "diffugrpo_plugin/main.py")
TORCH_FREE = ("diffugrpo_plugin/__init__.py", "diffugrpo_plugin/hooktypes.py", "diffugrpo_plugin/rewards.py",
              "diffugrpo_plugin/plugins.py", "diffugrpo_plugin/hookspecs.py", "diffugrpo_plugin/sandbox",
              "diffugrpo_plugin/verdicts.py", "diffugrpo_plugin/code_execution.py", "diffugrpo_plugin/judging.py",
              "diffugrpo_plugin/cache.py", "diffugrpo_plugin/data/", "diffugrpo_plugin/step_cost.py", "reward_plugins/")
CHAIN = ("diffugrpo_plugin.cache", "diffugrpo_plugin.data", "diffugrpo_plugin.tokenizer", "diffugrpo_plugin.tiny",
         "diffugrpo_plugin.sft", "diffugrpo_plugin.warm_start")


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


def importers_of(prefixes: tuple[str, ...]) -> dict[str, set[str]]:
    """Source file -> the imported modules that start with one of ``prefixes``."""
    hits = {}
    for name, path in sources().items():
        matching = {module for module in imported_modules(path)
                    if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)}
        if matching:
            hits[name] = matching
    return hits


def test_only_the_verl_glue_imports_verl_or_ray():
    outside = {name: modules for name, modules in importers_of(("verl", "ray")).items()
               if not name.startswith(VERL_GLUE)}
    assert outside == {}


def test_rewards_sandbox_data_and_plugin_discovery_import_no_torch():
    offenders = {name: modules for name, modules in importers_of(("torch",)).items() if name.startswith(TORCH_FREE)}
    assert offenders == {}


IN_SANDBOX = ("sandbox_launcher", "sandbox_wire", "sandbox_program", "sandbox_judge")


@pytest.mark.parametrize("name", IN_SANDBOX)
def test_the_in_sandbox_modules_import_only_the_standard_library_and_each_other(name):
    """They run inside the sandbox, where diffugrpo is not visible (numpy only for a numpy value that arrives)."""
    outside = {module for module in imported_modules(PACKAGE / f"{name}.py")
               if module.split(".")[0] not in (*sys.stdlib_module_names, *IN_SANDBOX, "numpy", "__future__")}
    assert outside == set()


def test_nothing_imports_the_cli_and_the_framework_imports_no_reward_plugin():
    cli = {name for name in importers_of(("diffugrpo_plugin.cli",)) if not name.startswith("diffugrpo_plugin/cli/")}
    plugins = {name for name in importers_of(("reward_plugins",)) if name.startswith("diffugrpo_plugin/")}
    assert (cli, plugins) == (set(), set())


@pytest.mark.parametrize("position", range(len(CHAIN)))
def test_the_data_to_model_chain_only_imports_downwards(position):
    module = CHAIN[position]
    relative = module.replace(".", "/")
    files = [path for name, path in sources().items() if name == f"{relative}.py" or name.startswith(f"{relative}/")]
    assert files, module
    above = CHAIN[position + 1:]
    upward = {path.name: sorted(m for m in imported_modules(path) if m in above or m.startswith(tuple(f"{a}." for a in above)))
              for path in files}
    assert all(not modules for modules in upward.values()), upward


def module_name(relative: str) -> str:
    """``diffugrpo_plugin/sampling/__init__.py`` -> ``diffugrpo_plugin.sampling``."""
    parts = relative.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of ours -> the modules of ours it imports anywhere in its file."""
    files = {module_name(name): path for name, path in sources().items()}

    def owner(imported: str) -> str | None:  # ``diffugrpo_plugin.rewards.RewardSpec`` -> ``diffugrpo_plugin.rewards``
        while imported and imported not in files:
            imported = imported.rpartition(".")[0]
        return imported or None

    return {module: {found for found in map(owner, imported_modules(path)) if found not in (None, module)}
            for module, path in files.items()}


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
    assert "diffugrpo_plugin.kernels" in graph and "diffugrpo_plugin.kernels" in graph["diffugrpo_plugin.models"]
    reach = {module: reachable(graph, module) for module in graph}
    cycles = {frozenset({module} | {other for other in reach[module] if module in reach[other]})
              for module in graph if module in reach[module]}
    assert sorted(sorted(cycle) for cycle in cycles) == []


def test_the_cycle_check_sees_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert {module for module in graph if module in reachable(graph, module)} == {"a", "b", "c"}


def fresh(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_choosing_and_building_rewards_loads_no_torch_verl_or_ray():
    require_bwrap()  # building the code rewards checks the sandbox
    loaded = fresh("""
        import sys
        from diffugrpo_plugin.rewards import RewardSpec
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
        import diffugrpo_plugin.coupled, diffugrpo_plugin.kernels, diffugrpo_plugin.logprobs, diffugrpo_plugin.masking
        import diffugrpo_plugin.models
        import diffugrpo_plugin.sampling.samplers, diffugrpo_plugin.sft
        print(sorted(name for name in ("verl", "ray") if name in sys.modules))
    """)
    assert loaded == "[]"
