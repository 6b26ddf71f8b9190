"""Discovery of diffugrpo plugins through entry points, with provenance and loud failures.

The hooks are documented in :mod:`diffugrpo_plugin.hookspecs`. This module loads every
entry point of the ``diffugrpo`` group, calls each plugin's hooks itself (rather than
through pluggy's aggregate call) so that every registered name keeps the distribution that
provided it, and turns every way this can go wrong into an error that names the fix.
No torch import: reward workers and the CLI use it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
from dataclasses import dataclass
from typing import Any

import pluggy

from diffugrpo_plugin import PROJECT_NAME, hookspecs

HOOK_FOR_KIND = {
    "reward": "diffugrpo_reward_functions",
    "masker": "diffugrpo_maskers",
    "sampler": "diffugrpo_samplers",
    "model_family": "diffugrpo_model_families",
}


class PluginError(RuntimeError):
    """A plugin could not be loaded, or its registrations conflict or are unknown."""


@dataclass(frozen=True)
class Registration:
    """One named object a plugin provides."""

    name: str
    kind: str  # "reward" | "masker" | "sampler" | "model_family"
    obj: Any
    plugin: str  # entry-point name
    distribution: str  # the installed distribution that declared the entry point

    @property
    def description(self) -> str:
        doc = inspect.getdoc(self.obj) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return "<unknown distribution>"
    return f"{dist.metadata['Name']} {dist.version}"


@functools.lru_cache(maxsize=1)
def plugin_manager() -> tuple[pluggy.PluginManager, dict[str, str]]:
    """Load every ``diffugrpo`` entry point once per process.

    Returns the manager and a map plugin name -> providing distribution.
    Raises :class:`PluginError` naming the plugin and its exception if one fails to import.
    """
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    provenance: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    for entry_point in importlib.metadata.entry_points(group=PROJECT_NAME):
        distribution = _distribution_of(entry_point)
        # An editable install next to a regular one lists the same entry point twice.
        if (entry_point.name, entry_point.value) in seen:
            continue
        seen.add((entry_point.name, entry_point.value))
        try:
            module = entry_point.load()
        except Exception as exc:  # noqa: BLE001 - re-raised with the plugin named
            raise PluginError(
                f"diffugrpo plugin '{entry_point.name}' ({entry_point.value}) from {distribution} "
                f"failed to import: {type(exc).__name__}: {exc}. Fix or uninstall that package "
                f"(`pip uninstall {distribution.split()[0]}`)."
            ) from exc
        plugin_name = entry_point.name
        if manager.has_plugin(plugin_name):
            plugin_name = f"{entry_point.name}@{distribution}"
        try:
            manager.register(module, name=plugin_name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"diffugrpo plugin '{entry_point.name}' from {distribution} implements a hook "
                f"wrongly: {exc}. The hooks are documented in diffugrpo_plugin/hookspecs.py."
            ) from exc
        provenance[plugin_name] = distribution
    return manager, provenance


def registrations(kind: str) -> dict[str, Registration]:
    """All objects of one kind (``reward``, ``masker``, ``sampler``, ``model_family``) by name.

    Raises :class:`PluginError` when two plugins register the same name (naming both) or a
    hook returns something other than a mapping of names to objects.
    """
    if kind not in HOOK_FOR_KIND:
        raise ValueError(f"unknown plugin kind {kind!r}; expected one of {sorted(HOOK_FOR_KIND)}")
    manager, provenance = plugin_manager()
    hook = getattr(manager.hook, HOOK_FOR_KIND[kind])
    found: dict[str, Registration] = {}
    for impl in hook.get_hookimpls():
        distribution = provenance.get(impl.plugin_name, "<registered in code>")
        provided = impl.function()
        if not isinstance(provided, dict):
            raise PluginError(
                f"plugin '{impl.plugin_name}' from {distribution}: {HOOK_FOR_KIND[kind]}() must return "
                f"a dict of name -> object, got {type(provided).__name__}"
            )
        for name, obj in provided.items():
            if not isinstance(name, str) or not name:
                raise PluginError(f"plugin '{impl.plugin_name}' from {distribution} registered a {kind} "
                                  f"with an invalid name {name!r}")
            if name in found:
                other = found[name]
                raise PluginError(
                    f"{kind} '{name}' is registered twice: by plugin '{other.plugin}' ({other.distribution}) "
                    f"and by plugin '{impl.plugin_name}' ({distribution}). Uninstall one of them."
                )
            found[name] = Registration(name, kind, obj, impl.plugin_name, distribution)
    return found


def lookup(kind: str, name: str) -> Registration:
    """The registration called ``name``, or an error that lists every known name and its provider."""
    known = registrations(kind)
    if name not in known:
        listing = ", ".join(f"{n} ({r.distribution})" for n, r in sorted(known.items())) or "none installed"
        plural = "model families" if kind == "model_family" else f"{kind}s"
        raise PluginError(f"unknown {kind.replace('_', ' ')} '{name}'. Known {plural}: {listing}.")
    return known[name]
