"""verl's internals we depend on, all in ``integration/verl_internals.py``, still as they were in verl 0.9.1.

* Each object of ``VERL_DEPENDENCIES`` still exists and has the fingerprint recorded there (signature, source hash,
  type, the instance attributes its source sets); a failure names the object and our code that depends on it.
* Every method of verl's classes that our subclasses override is in the table (concrete ones: an override of an
  abstract method implements verl's interface), and every name of ours the table gives exists.
* No module but ``verl_internals.py`` reaches a private verl (or TransferQueue) name or assigns to a verl module's
  attribute (an AST check, itself checked on a snippet that does each).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

from conftest import REPO
from diffugrpo_plugin.integration import verl_internals
from diffugrpo_plugin.integration.verl_internals import DOC, VERL_DEPENDENCIES, Dependency, resolve

PACKAGE = REPO / "diffugrpo_plugin"
OURS = PACKAGE / "integration" / "verl_internals.py"
UPSTREAM = ("verl", "transfer_queue")
OWNER = {"verl": "verl", "transfer_queue": "TransferQueue"}


def changes(target: str, dependency: Dependency) -> list[str]:
    """What differs between the installed ``target`` and its entry, each as the one line a failure prints."""
    owner = OWNER[target.split(".")[0].split(":")[0]]
    prefix = f"{owner} changed {target}, which diffugrpo {'; '.join(dependency.uses)}:"
    suffix = f"see {DOC} and verl_internals.py"
    try:
        found = resolve(target)
    except (ImportError, AttributeError) as error:
        return [f"{prefix} it is gone ({type(error).__name__}: {error}); {suffix}"]
    found_type = type(found).__name__
    problems = []
    if dependency.attribute_type is not None and found_type != dependency.attribute_type:
        problems.append(f"it is a {found_type}, was a {dependency.attribute_type}")
    if dependency.signature is not None and verl_internals.signature_of(found) != dependency.signature:
        problems.append(f"its signature is {verl_internals.signature_of(found)}, was {dependency.signature}")
    if dependency.source_sha256 is not None and verl_internals.source_sha256(found) != dependency.source_sha256:
        problems.append("its source changed (sha256 of inspect.getsource)")
    if dependency.assigns:
        source = inspect.getsource(found)
        missing = [name for name in dependency.assigns if not re.search(rf"self\.{name}\s*(:[^=\n]*)?=[^=]", source)]
        if missing:
            problems.append(f"it no longer sets self.{', self.'.join(missing)}")
    return [f"{prefix} {problem}; {suffix}" for problem in problems]


@pytest.mark.parametrize("target", sorted(VERL_DEPENDENCIES))
def test_verl_still_has_what_we_depend_on(target):
    assert changes(target, VERL_DEPENDENCIES[target]) == []


def test_a_changed_function_fails_naming_it_and_our_code():
    target = "verl.workers.engine.fsdp.transformer_impl:FSDPEngine._build_fsdp_module"
    recorded = VERL_DEPENDENCIES[target]
    changed = dataclasses.replace(recorded, signature="(self)", source_sha256="0" * 64, assigns=("_no_such",))
    found = changes(target, changed)
    assert len(found) == 3
    assert all(
        line.startswith(f"verl changed {target}, which diffugrpo overrides in DiffusionLMEngine.") for line in found
    )
    assert "patches in fsdp2_offload_unpinned_on_cpu" in found[0] and DOC in found[0]
    assert "its signature is (self, module), was (self)" in found[0]
    assert "its source changed" in found[1] and "no longer sets self._no_such" in found[2]
    assert changes("verl.workers.rollout.base:_NO_SUCH", recorded)[0].startswith(
        "verl changed verl.workers.rollout.base:_NO_SUCH, which diffugrpo overrides in DiffusionLMEngine._build_fsdp_module"
        "; patches in fsdp2_offload_unpinned_on_cpu; patches in fsdp2_sharding_around_quantized; reaches in "
        "verl_autocast: it is gone (AttributeError"
    )
    registry = VERL_DEPENDENCIES["verl.workers.rollout.base:_ROLLOUT_REGISTRY"]
    assert (
        "it is a dict, was a list"
        in changes("verl.workers.rollout.base:_ROLLOUT_REGISTRY", dataclasses.replace(registry, attribute_type="list"))[
            0
        ]
    )


def test_the_offload_policy_is_unpinned_on_a_cpu_host_only_inside_the_block(monkeypatch):
    from verl.workers.engine.fsdp import transformer_impl

    original = transformer_impl.CPUOffloadPolicy
    monkeypatch.setattr(verl_internals, "get_device_name", lambda: "cpu")
    with verl_internals.fsdp2_offload_unpinned_on_cpu():
        assert transformer_impl.CPUOffloadPolicy(pin_memory=True).pin_memory is False
    assert transformer_impl.CPUOffloadPolicy is original and original(pin_memory=True).pin_memory is True
    monkeypatch.setattr(verl_internals, "get_device_name", lambda: "cuda")
    with verl_internals.fsdp2_offload_unpinned_on_cpu():
        assert transformer_impl.CPUOffloadPolicy is original


def test_the_model_type_is_a_language_model_only_while_verl_builds_it():
    from verl.base_config import BaseConfig

    @dataclasses.dataclass
    class ModelConfig(BaseConfig):
        model_type: str = "diffusion_lm"
        trust_remote_code: bool = True

    config = ModelConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):  # why it goes around verl's __setattr__
        config.model_type = "language_model"
    with pytest.raises(RuntimeError, match="verl failed"):
        with verl_internals.building_as_language_model(config, trust_remote_code=False):
            assert (config.model_type, config.trust_remote_code) == ("language_model", False)
            raise RuntimeError("verl failed")
    assert (config.model_type, config.trust_remote_code) == ("diffusion_lm", True)


def our_verl_subclasses() -> list[type]:
    """Our classes with a verl (or TransferQueue) class among their bases, in every module of ``integration/``."""
    import importlib
    import pkgutil

    from diffugrpo_plugin import integration
    from diffugrpo_plugin.integration import reward_manager

    found = {reward_manager.register()}
    for info in pkgutil.walk_packages(integration.__path__, f"{integration.__name__}."):
        module = importlib.import_module(info.name)
        found.update(value for value in vars(module).values() if isinstance(value, type))
    return [
        cls
        for cls in found
        if cls.__module__.startswith("diffugrpo_plugin.")
        and any(base.__module__.split(".")[0] in UPSTREAM for base in cls.__mro__)
    ]


def overridden(cls: type) -> dict[str, str]:
    """``{name: table key}`` for each concrete verl method or class attribute ``cls`` itself redefines."""
    found = {}
    source = inspect.getsource(cls)
    for name in vars(cls):
        if name not in source:
            continue  # set on the class at run time (verl's init_class sets _class_initialized), not written by us
        if name.startswith("__") and name not in ("__init__", "__post_init__") or name.startswith("_abc"):
            continue
        if getattr(getattr(vars(cls)[name], "__code__", None), "co_filename", None) == "<string>":
            continue  # written by @dataclass, not by us
        upstream = next((base for base in cls.__mro__[1:] if name in vars(base)), None)
        if upstream is None or upstream.__module__.split(".")[0] not in UPSTREAM:
            continue
        if name in getattr(upstream, "__abstractmethods__", ()):
            continue
        found[name] = f"{upstream.__module__}:{upstream.__qualname__}.{name}"
    return found


def test_every_verl_method_we_override_is_in_the_table():
    classes = our_verl_subclasses()
    assert {"DiffusionLMEngine", "DiffuGRPOTrainer", "DiffusionActorRolloutRefWorker", "InProcessAgentLoopManager"} <= {
        cls.__name__ for cls in classes
    }
    missing = [
        f"{cls.__name__}.{name} overrides {key}"
        for cls in classes
        for name, key in overridden(cls).items()
        if f"overrides in {cls.__name__}.{name}" not in VERL_DEPENDENCIES.get(key, Dependency(uses=())).uses
    ]
    assert missing == [], (
        "add each to VERL_DEPENDENCIES in diffugrpo_plugin/integration/verl_internals.py (python -m "
        f"diffugrpo_plugin.integration.verl_internals prints its fingerprint) and to {DOC}"
    )


def test_every_name_of_ours_in_the_table_exists():
    named = {cls.__name__: cls for cls in our_verl_subclasses()}
    from diffugrpo_plugin.integration.in_process import InProcessTaskRunner

    named["InProcessTaskRunner"] = InProcessTaskRunner
    unknown = []
    for target, dependency in VERL_DEPENDENCIES.items():
        for use in dependency.uses:
            how, _, ours = use.partition(" in ")
            owner, _, member = ours.partition(".")
            exists = (
                callable(getattr(verl_internals, ours, None))
                if owner not in named
                else not member or member in vars(named[owner])
            )
            if how not in ("patches", "reaches", "overrides", "copies") or not exists:
                unknown.append(f"{target}: {use}")
    assert unknown == []


# ---- nothing outside verl_internals.py reaches a private verl name ---------------------------------------------------

# private names of ours that verl also happens to use (verl's are not reached through them)
OUR_OWN = {"_loop": "in_process._InProcessHandle", "_put": "trainer.DiffuGRPOTrainer", "_run": "several of ours",
           "_servers": "serving.request_router.LeastBusyRouter"}  # fmt: skip


@cache
def upstream_private_names() -> frozenset[str]:
    """Every ``_name`` verl or TransferQueue defines as a method or class attribute, or sets as ``self._name``."""
    names = set()
    for package in UPSTREAM:
        for path in Path(importlib.util.find_spec(package).origin).parent.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            names.add(item.name)
                        elif isinstance(item, ast.Assign):
                            names.update(target.id for target in item.targets if isinstance(target, ast.Name))
                elif (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    names.add(node.attr)
    return frozenset(name for name in names if name.startswith("_") and not name.startswith("__"))


def overridden_names() -> set[str]:
    """Private verl method names our subclasses override (the table lists them): calling them is not a reach."""
    return {
        use.rpartition(".")[2] for dependency in VERL_DEPENDENCIES.values() for use in dependency.uses
    } & upstream_private_names()


def upstream_aliases(tree: ast.AST) -> set[str]:
    """The names a file binds to verl or TransferQueue modules and objects by importing them."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update(
                (alias.asname or alias.name).split(".")[0]
                for alias in node.names
                if alias.name.split(".")[0] in UPSTREAM
            )
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in UPSTREAM:
            aliases.update(alias.asname or alias.name for alias in node.names)
    return aliases


def root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def private_reaches(source: str) -> list[str]:
    """Each place ``source`` imports a private verl name, reads a private attribute of a verl module or object, reads
    a private attribute verl defines (by that name), or assigns to an attribute of a verl module or object."""
    tree = ast.parse(source)
    aliases = upstream_aliases(tree)
    private = upstream_private_names() - overridden_names() - OUR_OWN.keys()
    found = []  # (line, what)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in UPSTREAM:
            found += [(line, f"imports {alias.name}") for alias in node.names if alias.name.startswith("_")]
        elif isinstance(node, ast.Attribute):
            if root_name(node) in aliases and node.attr.startswith("_") and node.attr not in ("__name__", "__module__"):
                found.append((line, f"reaches {ast.unparse(node)}"))
            elif node.attr in private:
                found.append((line, f"reaches verl's private {node.attr} in {ast.unparse(node)}"))
            if isinstance(node.ctx, ast.Store) and root_name(node) in aliases:
                found.append((line, f"assigns {ast.unparse(node)}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            subject, name = node.args[0], node.args[1]
            if node.func.id in ("setattr", "delattr") and root_name(subject) in aliases:
                found.append((line, f"assigns an attribute of {ast.unparse(subject)}"))
            elif (
                node.func.id in ("getattr", "hasattr", "setattr")
                and isinstance(name, ast.Constant)
                and name.value in private
            ):
                found.append((line, f"reaches verl's private {name.value}"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_only_verl_internals_reaches_verls_private_names():
    found = {
        path.relative_to(REPO).as_posix(): reaches
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != OURS and (reaches := private_reaches(path.read_text()))
    }
    assert found == {}, (
        "move each into diffugrpo_plugin/integration/verl_internals.py, with its VERL_DEPENDENCIES entry"
    )


def test_the_private_name_check_catches_each_kind_of_reach():
    source = """
from verl.workers.rollout.base import _ROLLOUT_REGISTRY
from verl.workers.engine.fsdp import transformer_impl
from verl.trainer import main_ppo
import transfer_queue

transformer_impl.CPUOffloadPolicy = None
setattr(transfer_queue, "close", None)
main_ppo.main.__wrapped__(None)
engine._is_offload_param
getattr(engine, "_autocast_dtype", None)
self._build_fsdp_module(module)  # an override's call: in the table
self._loop  # ours
"""
    assert private_reaches(source) == [
        "2: imports _ROLLOUT_REGISTRY",
        "7: assigns transformer_impl.CPUOffloadPolicy",
        "8: assigns an attribute of transfer_queue",
        "9: reaches main_ppo.main.__wrapped__",
        "10: reaches verl's private _is_offload_param in engine._is_offload_param",
        "11: reaches verl's private _autocast_dtype",
    ]
