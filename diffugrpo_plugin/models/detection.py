"""Which :class:`~diffugrpo_plugin.models.family.ModelFamily` a checkpoint belongs to: the one its config names
(``model_type``, ``auto_map`` code files, ``architectures``) among the installed families (built-in or a
plugin's, through :mod:`diffugrpo_plugin.plugins`), the one config asks for by name, or an error naming what
to set. Kept apart from the families themselves so that plugin discovery, which checks what a family plugin
returns against the record, and the families do not import each other.
"""

from __future__ import annotations

from diffugrpo_plugin.models.families import BIDIRECTIONAL
from diffugrpo_plugin.models.family import ModelConfigError, ModelFamily
from diffugrpo_plugin.plugins import PluginError, lookup, registrations

SELECT_HINT = (
    "Set actor_rollout_ref.model.diffusion.family=<name> (CLI: --family), or register a family for "
    "your model through the diffugrpo_model_families hook (diffugrpo_plugin/hookspecs.py)"
)


def known_families() -> dict[str, ModelFamily]:
    return {name: registration.obj for name, registration in registrations("model_family").items()}


def _names_by_family(families: dict[str, ModelFamily]) -> list[tuple[ModelFamily, list[str]]]:
    """Each family once, with every name it is registered under (``dream / diffucoder``)."""
    grouped: dict[int, tuple[ModelFamily, list[str]]] = {}
    for name, family in families.items():
        grouped.setdefault(id(family), (family, []))[1].append(name)
    return list(grouped.values())


def family_named(name: str) -> ModelFamily:
    """The registered family ``name``, or an error listing the known ones."""
    try:
        return lookup("model_family", name).obj
    except PluginError as error:
        raise ModelConfigError(f"{error} {SELECT_HINT}.") from error


def detect_family(config: dict, override: str | None = None) -> ModelFamily:
    """The family a ``config.json`` dict belongs to (``override`` wins), or an error naming what to set."""
    if override:
        return family_named(override)
    families = known_families()
    found = {
        family.name: family for family in families.values() if family is not BIDIRECTIONAL and family.matches(config)
    }
    if len(found) == 1:
        return next(iter(found.values()))
    if len(found) > 1:
        raise ModelConfigError(
            f"the model config matches several families ({', '.join(sorted(found))}). {SELECT_HINT}."
        )
    if config.get("is_causal") is False:
        return BIDIRECTIONAL
    listing = "; ".join(f"{' / '.join(names)}: {family.description}" for family, names in _names_by_family(families))
    causal = (
        " It has causal attention (no is_causal: false), so it looks like an autoregressive model; a stock "
        "transformers model trained as a masked diffusion LM needs is_causal: false in its config.json."
        if not config.get("auto_map")
        else ""
    )
    raise ModelConfigError(
        f"cannot tell which diffusion-LM family this model is: model_type={config.get('model_type')!r}, "
        f"architectures={config.get('architectures')}, auto_map={sorted((config.get('auto_map') or {}).values())}."
        f"{causal} Known families: {listing}. {SELECT_HINT}."
    )
