"""How a checkpoint becomes a network, decided before a weight is read: our native class, the checkpoint's own code
or a stock transformers class (:class:`LoadPlan`, :func:`plan_loading`), and a one-line error wherever the checkpoint's
weights do not fit what would be built: freshly initialised or dropped weights are never a model that runs.

Plain torch + transformers; no verl.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from diffugrpo_plugin.models.detection import detect_family
from diffugrpo_plugin.models.family import IMPLEMENTATIONS, ModelConfigError, ModelFamily
from diffugrpo_plugin.models.native import register_with_transformers
from diffugrpo_plugin.models.weights import WeightFit, checkpoint_shapes, forward_problem, meta_model, one_line
from diffugrpo_plugin.models.weights import fit as weight_fit


def read_model_config(path: str) -> dict:
    """The ``config.json`` of a local checkpoint or hub id, as a dict (no model code is run)."""
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(path)
    return config


def _ways_out(remote_tried: bool, names: tuple[str, ...] = ()) -> str:
    """What a user can do about weights that fit nothing we would build (one sentence)."""
    ways = (
        []
        if remote_tried
        else [
            "actor_rollout_ref.model.diffusion.implementation=remote with the checkpoint's own modeling code beside its "
            "weights (and actor_rollout_ref.model.trust_remote_code=true)"
        ]
    )
    ways += [
        "actor_rollout_ref.model.diffusion.family=<name> if it is another family",
        "or convert the weights to the family's published parameter names",
    ]
    adapter = (
        "They look like an un-merged adapter: merge it into the base weights (peft's merge_and_unload) first. "
        if any("lora_" in name for name in names)
        else ""
    )
    return f"{adapter}Ways out: {'; '.join(ways)}."


@dataclass(frozen=True)
class LoadPlan:
    """How a checkpoint becomes a network: ``native`` (our class), ``remote`` (its own code) or ``stock``."""

    family: ModelFamily
    implementation: str
    model_class: type | None = None  # the native class, for "native"
    reason: str = ""  # why this implementation, in words (``diffugrpo check-model`` shows it)
    native_refused: bool = False  # our native class was considered and does not fit

    @property
    def trust_remote_code(self) -> bool:
        return self.implementation == "remote"


def plan_loading(
    config: dict,
    family: str | None = None,
    implementation: str = "auto",
    trust_remote_code: bool = False,
    path: str | None = None,
) -> LoadPlan:
    """Choose how to build the network for a ``config.json`` dict; errors say which key to set.

    ``auto`` takes our native class when it runs the config's settings and, for a local checkpoint
    ``path``, the checkpoint's weights fit it name for name and shape for shape (read from the file
    headers, see :mod:`diffugrpo_plugin.models.weights`); else the checkpoint's own code when it ships some
    and ``trust_remote_code`` allows it; else one line saying which and why. Whatever is chosen, weights
    that would be freshly initialised or dropped are an error, never a model that runs on random weights.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ModelConfigError(
            f"unknown implementation '{implementation}' (actor_rollout_ref.model.diffusion."
            f"implementation); choose one of {', '.join(IMPLEMENTATIONS)}"
        )
    found = detect_family(config, family)
    local = path if path and os.path.isdir(path) else None
    misfit, misfit_names = None, ()
    if found.native and implementation != "remote":
        misfit, misfit_names = _native_misfit(found, config, local)
        if misfit is None:
            weights = "the checkpoint's weights fit it" if local else "its weights are checked as they load"
            return LoadPlan(found, "native", found.native()[1], f"it runs these settings and {weights}")
        if implementation == "native":
            fallback = (
                "Use implementation=auto (it runs the checkpoint's own code where ours does not fit)"
                + (f". {_ways_out(True, misfit_names)}" if misfit_names else ".")
                if config.get("auto_map")
                else _ways_out(False, misfit_names)
            )
            raise ModelConfigError(f"implementation=native cannot load this checkpoint: {misfit}. {fallback}")
        why = f"our native class does not fit: {misfit}"
    elif implementation == "native":
        raise ModelConfigError(
            f"implementation=native cannot load this checkpoint: the {found.name} family has no "
            f"native implementation. Use implementation=auto."
        )
    else:
        why = (
            "implementation=remote asks for it"
            if implementation == "remote"
            else f"the {found.name} family has no native implementation"
        )
    if config.get("auto_map"):
        if not trust_remote_code:
            raise ModelConfigError(
                f"this checkpoint must run its own modeling code ({why}). Set "
                f"actor_rollout_ref.model.trust_remote_code=true (CLI: --trust-remote-code) if "
                f"you trust the code shipped with it."
            )
        plan = LoadPlan(found, "remote", reason=why, native_refused=misfit is not None)
    elif found.native or implementation == "remote":
        raise ModelConfigError(
            f"cannot load this checkpoint: {why}; and its config.json has no auto_map, so it ships "
            f"no modeling code to run instead. {_ways_out(False, misfit_names)}"
        )
    else:
        plan = LoadPlan(found, "stock", reason=why)
    if local:
        _refuse_misfit_weights(plan, config, local)
    return plan


def _native_misfit(found: ModelFamily, config: dict, path: str | None) -> tuple[str | None, tuple[str, ...]]:
    """Why our native class cannot stand for this checkpoint (None when it can), and the checkpoint's
    tensor names that do not fit it."""
    unsupported = found.native_unsupported(config)
    if unsupported:
        return f"these settings need the published code: {', '.join(unsupported)}", ()
    config_class, model_class = found.native()
    try:
        model = meta_model(model_class, config_class.from_dict(config))
    except Exception as error:  # noqa: BLE001 - a config our class refuses is a reason to look elsewhere
        return f"{model_class.__name__} cannot be built from this config.json ({one_line(error)})", ()
    problem = forward_problem(model)
    if problem:
        return f"{model_class.__name__} cannot run these settings ({problem})", ()
    shapes = checkpoint_shapes(path) if path else None
    fit = weight_fit(model, shapes) if shapes is not None else None
    if fit is not None and not fit.fits:
        return (
            f"the checkpoint's weights do not fit {model_class.__name__}: {fit.describe()}",
            fit.unexpected or fit.missing or tuple(name for name, _, _ in fit.mismatched),
        )
    return None, ()


def _refuse_misfit_weights(plan: LoadPlan, config: dict, path: str) -> None:
    """A one-line error when the checkpoint's weights do not fit the remote or stock class the plan builds."""
    shapes = checkpoint_shapes(path)
    if shapes is None:
        return
    try:
        model = planned_meta_model(path, config, load_model_config(path, plan), plan)
    except Exception:  # noqa: BLE001 - code that cannot be built on the meta device is checked as it loads
        return
    _refuse_misfit(plan, model, shapes)


def planned_meta_model(path: str, config: dict, config_object: Any, plan: LoadPlan) -> torch.nn.Module:
    """The planned network built on the meta device: names, shapes and parameter count, no memory."""
    model_class = {
        "native": lambda: plan.model_class,
        "remote": lambda: remote_classes(path, config)[1],
        "stock": lambda: None,
    }[plan.implementation]()
    return meta_model(model_class, config_object)


def _refuse_misfit(plan: LoadPlan, model: torch.nn.Module, shapes: dict[str, tuple[int, ...]] | None) -> None:
    fit = weight_fit(model, shapes) if shapes is not None else None
    if fit is not None and not fit.fits:
        raise ModelConfigError(_misfit_message(plan, type(model).__name__, fit))


def refuse_unloaded_weights(module: torch.nn.Module, path: str, plan: LoadPlan) -> None:
    """After a loader we do not control (verl's engine) built ``module`` from ``path``: a one-line error when the
    checkpoint's tensors do not fit it. For a hub id, the files the loader just fetched into the hub cache are
    read (the pre-flight could not read them before the download)."""
    directory = path if os.path.isdir(path) else _cached_snapshot(path)
    _refuse_misfit(plan, module, checkpoint_shapes(directory) if directory else None)


def _cached_snapshot(repo_id: str) -> str | None:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - not a hub id, or not in the cache: nothing to read
        return None


def _misfit_message(plan: LoadPlan, class_name: str, fit: WeightFit) -> str:
    built = {"native": "our native class", "remote": "the checkpoint's own code", "stock": "a stock transformers class"}
    also = " (our native class does not fit either)" if plan.native_refused else ""
    consequence = (
        "it would run with those weights freshly initialised"
        if fit.missing or fit.mismatched
        else "loading would drop those weights"
    )
    return (
        f"the checkpoint's weights do not fit {class_name}, {built[plan.implementation]}{also}: {fit.describe()}; "
        f"{consequence}. {_ways_out(plan.implementation == 'remote', fit.unexpected or fit.missing)}"
    )


def remote_classes(path: str, config: dict) -> tuple[type, type]:
    """The config and model classes of the checkpoint's own code (``auto_map``), imported from its files.

    Taken directly rather than through ``AutoModel``: transformers 5 prefers a class registered in
    this process (our native ones) over a checkpoint's own code even with ``trust_remote_code``.
    Registered for the auto classes as transformers does, so ``save_pretrained`` copies the code files.
    """
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    auto_map = config["auto_map"]
    auto_name = "AutoModelForCausalLM" if "AutoModelForCausalLM" in auto_map else "AutoModel"
    if "AutoConfig" not in auto_map or auto_name not in auto_map:
        raise ModelConfigError(
            f"the checkpoint's auto_map {auto_map} names no AutoConfig and AutoModel classes to run its own code with"
        )
    config_class = get_class_from_dynamic_module(auto_map["AutoConfig"], path)
    model_class = get_class_from_dynamic_module(auto_map[auto_name], path)
    config_class.register_for_auto_class()
    model_class.register_for_auto_class(auto_name)
    return config_class, model_class


def supports_attention(model_class: type, attn_implementation: str | None) -> bool:
    """Whether a model class declares support for an attention implementation transformers would set on it.

    LLaDA's published class declares none (it calls SDPA itself); asking transformers for ``sdpa``
    on it raises, so its own choice is kept.
    """
    flags = {"sdpa": "_supports_sdpa", "flash_attention_2": "_supports_flash_attn", "eager": None}
    flag = flags.get(attn_implementation or "eager", "_supports_attention_backend")
    return flag is None or bool(getattr(model_class, flag, False))


def load_model_config(path: str, plan: LoadPlan):
    """The config object the planned implementation builds from (no weights are read)."""
    from transformers import AutoConfig

    register_with_transformers()
    if plan.implementation == "native":
        return plan.model_class.config_class.from_pretrained(path)
    if plan.implementation == "remote":
        return remote_classes(path, read_model_config(path))[0].from_pretrained(path)
    return AutoConfig.from_pretrained(path)


def refuse_partial_load(module: torch.nn.Module, plan: LoadPlan, info: dict) -> None:
    """After loading, what transformers reports (for a hub id, the first and only look at the weights):
    any weight freshly initialised, dropped or of another shape is an error."""
    fit = WeightFit.from_loading_info(info)
    if not fit.fits:
        raise ModelConfigError(_misfit_message(plan, type(module).__name__, fit))
