"""Discovery of diffugrpo plugins through entry points, with provenance, contracts and loud failures.

The hooks are documented in :mod:`diffugrpo_plugin.hookspecs`. Each kind of plugin has its own
entry-point group (``diffugrpo.rewards``, ``diffugrpo.maskers``, ``diffugrpo.samplers``,
``diffugrpo.model_families``), loaded only when that kind is first asked for: looking up a
reward imports no masker, sampler or model code (and so no torch). This module calls each
plugin's hook itself (rather than through pluggy's aggregate call) so that every registered name
keeps the distribution that provided it, checks what a plugin hands back against the contract of
its kind, and turns every way this can go wrong into an error that names the plugin and the fix.
Plugins written for the first published contract, one ``diffugrpo`` group for every hook, are still
found: each kind also reads that group, uses the modules that implement its hook, and warns once per
plugin and kind with the group to move it to. No torch import: reward workers and the CLI use it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import inspect
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import pluggy

from diffugrpo_plugin import PROJECT_NAME, hookspecs

HOOKSPEC_FILE = "diffugrpo_plugin/hookspecs.py"
INJECTED_REWARD_OPTIONS = ("sandbox", "code_block", "format_end")
"""Keyword-only reward parameters diffugrpo fills in itself: the ``RewardSpec`` attribute of that name (``sandbox``:
the shared sandbox), for a reward that declares it. Documented in the reward hook (hookspecs.py), which a test
keeps in step with this list."""


class PluginError(RuntimeError):
    """A plugin could not be loaded, breaks its contract, or its registrations conflict or are unknown."""


class PluginOptionError(PluginError):
    """A plugin was given an option its factory does not take; the message lists the ones it does."""


class OptionInfo(NamedTuple):
    """One option a factory accepts, for listings and checks."""

    name: str
    default: Any
    help: str


def factory_options(factory: Callable[..., Any]) -> list[OptionInfo]:
    """The options of a factory: dataclass fields (with their ``help`` metadata) or keyword parameters."""
    if dataclasses.is_dataclass(factory):
        return [
            OptionInfo(f.name, f.default, f.metadata.get("help", "")) for f in dataclasses.fields(factory) if f.init
        ]
    return [
        OptionInfo(p.name, None if p.default is inspect.Parameter.empty else p.default, "")
        for p in inspect.signature(factory).parameters.values()
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]


def _takes_any_keyword(function: Callable[..., Any]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(function).parameters.values())


def _binds(function: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def _signature(function: Any) -> str:
    try:
        return f"{getattr(function, '__name__', type(function).__name__)}{inspect.signature(function)}"
    except (TypeError, ValueError):
        return repr(function)


# ---------------------------------------------------------------------------------------------
# Contracts: what each kind's hook must hand back (documented in hookspecs.py)
# ---------------------------------------------------------------------------------------------


def _reward_problem(fn: Any) -> str | None:
    if not callable(fn):
        return f"got {type(fn).__name__}, not a function"
    parameters = inspect.signature(fn).parameters.values()
    required_keywords = [
        p.name
        for p in parameters
        if p.kind is inspect.Parameter.KEYWORD_ONLY
        and p.default is inspect.Parameter.empty
        and p.name not in INJECTED_REWARD_OPTIONS
    ]
    if not _binds(fn, []) or not _takes_any_keyword(fn) or required_keywords:
        return (
            f"it must be fn(completions, *, option=default, ..., **columns) -> list[float | None] "
            f"(every option with a default, **columns to accept the row's columns); got {_signature(fn)}"
        )
    return None


def _factory_problem(factory: Any) -> str | None:
    return None if callable(factory) else f"got {type(factory).__name__}; expected a factory: factory(**options)"


def _model_family_problem(family: Any) -> str | None:
    from diffugrpo_plugin.models.family import ModelFamily

    if not isinstance(family, ModelFamily):
        return f"got {type(family).__name__}; expected a diffugrpo_plugin.models.family.ModelFamily"
    return None


def _masker_problem(masker: Any) -> str | None:
    views = getattr(masker, "views", None)
    if not callable(views) or not _binds(views, *range(5)):
        return (
            f"the factory built {type(masker).__name__}, whose views() must accept "
            f"(input_ids, completion_mask, mask_id, seeds, prompt_mask); got "
            f"{_signature(views) if callable(views) else 'no views method'}"
        )
    combine = getattr(masker, "combine", None)
    if combine is not None and not (callable(combine) and _binds(combine, *range(4))):
        return (
            f"the factory built {type(masker).__name__}, whose optional combine() must accept "
            f"(per_view_logp, views, scored, positive); got {_signature(combine)}"
        )
    return None


def _sampler_problem(sampler: Any) -> str | None:
    generate = getattr(sampler, "generate", None)
    if not callable(generate) or not _binds(
        generate, *range(4), eos_token_id=0, pad_token_id=0, seeds=None, record_trace=False
    ):
        return (
            f"the factory built {type(sampler).__name__}, whose generate() must accept (model, prompt_ids, "
            f"prompt_mask, max_new_tokens, *, eos_token_id, pad_token_id, seeds, record_trace); got "
            f"{_signature(generate) if callable(generate) else 'no generate method'}"
        )
    return None


def _loss_term_problem(term: Any) -> str | None:
    prepare, loss = getattr(term, "prepare", None), getattr(term, "loss", None)
    if not (callable(prepare) and _binds(prepare, None) and callable(loss) and _binds(loss, None)):
        return (
            f"the factory built {type(term).__name__}, which must have prepare(step) -> dict of per-sample "
            f"tensors and loss(inputs) -> per-sample loss [B]; got prepare "
            f"{_signature(prepare) if callable(prepare) else 'missing'}, loss "
            f"{_signature(loss) if callable(loss) else 'missing'}"
        )
    return None


@dataclass(frozen=True)
class PluginKind:
    """One kind of plugin: its hook, its entry-point group and its contract."""

    hook: str
    group: str
    plural: str
    registered_problem: Callable[[Any], str | None]  # what the hook returned, per name
    built_problem: Callable[[Any], str | None] | None = None  # what the factory returned, per build


KINDS = {
    "reward": PluginKind("diffugrpo_reward_functions", "diffugrpo.rewards", "rewards", _reward_problem),
    "masker": PluginKind("diffugrpo_maskers", "diffugrpo.maskers", "maskers", _factory_problem, _masker_problem),
    "sampler": PluginKind("diffugrpo_samplers", "diffugrpo.samplers", "samplers", _factory_problem, _sampler_problem),
    "model_family": PluginKind(
        "diffugrpo_model_families", "diffugrpo.model_families", "model families", _model_family_problem
    ),
    "loss_term": PluginKind(
        "diffugrpo_loss_terms", "diffugrpo.loss_terms", "loss terms", _factory_problem, _loss_term_problem
    ),
}


# ---------------------------------------------------------------------------------------------
# Loading and lookup
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Registration:
    """One named object a plugin provides."""

    name: str
    kind: str  # a key of KINDS
    obj: Any
    plugin: str  # entry-point name
    distribution: str  # the installed distribution that declared the entry point

    @property
    def description(self) -> str:
        doc = inspect.getdoc(self.obj) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""

    @property
    def provider(self) -> str:
        return f"plugin '{self.plugin}' ({self.distribution})"


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return "<unknown distribution>"
    return f"{dist.metadata['Name']} {dist.version}"


def _kind(kind: str) -> PluginKind:
    if kind not in KINDS:
        raise ValueError(f"unknown plugin kind {kind!r}; expected one of {sorted(KINDS)}")
    return KINDS[kind]


def _load(entry_point: importlib.metadata.EntryPoint):
    """The plugin's module and the distribution that declared it; a failed import names the package to fix."""
    distribution = _distribution_of(entry_point)
    try:
        return entry_point.load(), distribution
    except Exception as exc:  # noqa: BLE001 - re-raised with the plugin named
        raise PluginError(
            f"diffugrpo plugin '{entry_point.name}' ({entry_point.value}) from {distribution} "
            f"failed to import: {type(exc).__name__}: {exc}. Fix or uninstall that package "
            f"(`pip uninstall {distribution.split()[0]}`)."
        ) from exc


@functools.lru_cache(maxsize=None)
def plugin_manager(kind: str) -> tuple[pluggy.PluginManager, dict[str, str]]:
    """Load the entry points of one kind's group, once per process.

    Returns the manager and a map plugin name -> providing distribution. Raises
    :class:`PluginError` naming the plugin and its exception if one fails to import, or if it
    does not implement the hook its group is for.
    """
    spec = _kind(kind)
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    provenance: dict[str, str] = {}
    # an editable install next to a regular one, or a package that re-exports another module's hook, names one
    # hook twice: it is registered once
    seen_values: set[str] = set()
    seen_hooks: set[int] = set()
    for entry_point in importlib.metadata.entry_points(group=spec.group):
        if entry_point.value in seen_values:
            continue
        seen_values.add(entry_point.value)
        module, distribution = _load(entry_point)
        hook = getattr(module, spec.hook, None)
        if not callable(hook):
            raise PluginError(
                f"diffugrpo plugin '{entry_point.name}' ({entry_point.value}) from {distribution} "
                f"is listed in the entry-point group '{spec.group}' but implements no {spec.hook}() "
                f"hook (see {HOOKSPEC_FILE})."
            )
        if id(hook) in seen_hooks:
            continue
        seen_hooks.add(id(hook))
        plugin_name = entry_point.name
        if manager.has_plugin(plugin_name):
            plugin_name = f"{entry_point.name}@{distribution}"
        try:
            manager.register(module, name=plugin_name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"diffugrpo plugin '{entry_point.name}' from {distribution} implements a hook "
                f"wrongly: {exc}. The hooks are documented in {HOOKSPEC_FILE}."
            ) from exc
        provenance[plugin_name] = distribution
    return manager, provenance


def registrations(kind: str) -> dict[str, Registration]:
    """All objects of one kind (``reward``, ``masker``, ``sampler``, ``model_family``) by name.

    Raises :class:`PluginError` when two plugins register the same name (naming both), a hook
    returns something other than a mapping of names to objects, or an object breaks its kind's
    contract (naming the plugin and the expected signature).
    """
    spec = _kind(kind)
    manager, provenance = plugin_manager(kind)
    found: dict[str, Registration] = {}
    for impl in getattr(manager.hook, spec.hook).get_hookimpls():
        distribution = provenance.get(impl.plugin_name, "<registered in code>")
        provided = impl.function()
        if not isinstance(provided, dict):
            raise PluginError(
                f"plugin '{impl.plugin_name}' from {distribution}: {spec.hook}() must return "
                f"a dict of name -> object, got {type(provided).__name__}"
            )
        for name, obj in provided.items():
            registration = Registration(name, kind, obj, impl.plugin_name, distribution)
            if not isinstance(name, str) or not name:
                raise PluginError(f"{registration.provider} registered a {kind} with an invalid name {name!r}")
            if name in found:
                raise PluginError(
                    f"{kind} '{name}' is registered twice: by {found[name].provider} and by "
                    f"{registration.provider}. Uninstall one of them."
                )
            problem = spec.registered_problem(obj)
            if problem is not None:
                raise PluginError(
                    f"{kind.replace('_', ' ')} '{name}' from {registration.provider} breaks the "
                    f"contract in {HOOKSPEC_FILE}: {problem}"
                )
            found[name] = registration
    return found


def lookup(kind: str, name: str) -> Registration:
    """The registration called ``name``, or an error that lists every known name and its provider."""
    known = registrations(kind)
    if name not in known:
        listing = ", ".join(f"{n} ({r.distribution})" for n, r in sorted(known.items())) or "none installed"
        raise PluginError(f"unknown {kind.replace('_', ' ')} '{name}'. Known {_kind(kind).plural}: {listing}.")
    return known[name]


def build(kind: str, name: str, options: dict[str, Any]) -> Any:
    """Build the ``kind`` registered as ``name`` with ``options`` and check what its factory returns.

    Raises :class:`PluginOptionError` for an option the factory does not take (listing the ones
    it does) and :class:`PluginError` when the built object breaks its kind's contract. Errors
    the factory itself raises (a bad option value) propagate unchanged.
    """
    registration = lookup(kind, name)
    factory = registration.obj
    if not _takes_any_keyword(factory):
        known = [option.name for option in factory_options(factory)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise PluginOptionError(
                f"{kind.replace('_', ' ')} '{name}' has no option {', '.join(unknown)}; "
                f"its options are: {', '.join(known) or 'none'}"
            )
    built = factory(**options)
    check = _kind(kind).built_problem
    problem = check(built) if check is not None else None
    if problem is not None:
        raise PluginError(
            f"{kind} '{name}' from {registration.provider} breaks the contract in {HOOKSPEC_FILE}: {problem}"
        )
    return built
