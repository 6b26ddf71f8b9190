"""LoRA adapters (peft) on masked diffusion LMs: what the engine, the rollout and the CLI share.

verl's FSDP engine builds the adapters (``actor_rollout_ref.model.lora_rank`` / ``lora_alpha`` /
``target_modules`` / ``exclude_modules`` / ``lora_adapter_path``) with peft's ``CAUSAL_LM`` wrapper.
Three things differ for a diffusion LM, and live here:

* the wrapper reads ``prepare_inputs_for_generation`` when it is built, for an autoregressive
  ``generate`` a diffusion LM never runs; LLaDA's classes have none (:func:`accept_causal_lm_wrapper`);
* the coupled log-probs and the samplers project with the vocabulary head's weight directly, so an
  adapter on the head (or on a tied embedding) would be silently ignored: refused
  (:func:`refuse_adapted_head`);
* the rollout keeps its own copy of the policy and receives only the adapters after each step, under
  the names verl sends (:func:`canonical_weight_name`, :func:`inject_adapter`).

Plain torch and peft: no verl.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

import torch

from diffugrpo_plugin.models.family import ModelConfigError, ModelFamily, submodule, unwrap

ADAPTER_NAME = "default"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_ADAPTER_TENSOR = re.compile(r"\.(lora_[A-Za-z_]+)\.(?:default)(?=\.|$)")


def _no_autoregressive_generation(*args, **kwargs):
    raise NotImplementedError(
        "a masked diffusion LM does not generate autoregressively; sample with diffugrpo's "
        "samplers (diffugrpo generate)"
    )


def accept_causal_lm_wrapper(module: torch.nn.Module) -> torch.nn.Module:
    """Give ``module`` the ``prepare_inputs_for_generation`` peft's ``CAUSAL_LM`` wrapper reads when it is built
    (for an autoregressive ``generate`` that a diffusion LM never runs) where its class has none (LLaDA's)."""
    if not hasattr(module, "prepare_inputs_for_generation"):
        module.prepare_inputs_for_generation = _no_autoregressive_generation
    return module


def is_adapter_weight(name: str) -> bool:
    """Whether a parameter name belongs to a LoRA adapter (peft names them ``lora_A`` / ``lora_B`` / ...)."""
    return ".lora_" in name


def canonical_weight_name(name: str) -> str:
    """One spelling of a weight's name, whichever peft wrapper or verl sync path wrote it: without peft's
    ``base_model.model.`` prefix, its ``base_layer`` level and the adapter name.

    >>> canonical_weight_name("base_model.model.model.layers.0.q_proj.lora_A.default.weight")
    'model.layers.0.q_proj.lora_A.weight'
    >>> canonical_weight_name("model.layers.0.q_proj.base_layer.weight")
    'model.layers.0.q_proj.weight'
    """
    name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
    return _ADAPTER_TENSOR.sub(r".\1", name)


def adapted_module_names(module: torch.nn.Module) -> list[str]:
    """Names of the modules that carry a LoRA adapter (inside any peft / FSDP wrapper)."""
    from peft.tuners.lora import LoraLayer

    return [name for name, layer in unwrap(module).named_modules() if isinstance(layer, LoraLayer)]


def refuse_adapted_head(module: torch.nn.Module, family: ModelFamily) -> None:
    """One-line error when an adapter sits where the coupled log-probs and the samplers would not see it: the
    vocabulary head, or the embedding when the head projects with the embedding's weight (tied)."""
    from peft.tuners.lora import LoraLayer

    head = family.head_module(module)
    tied = head is None or family.head_is_tied(module)
    places = [(family.head, head)] + ([(family.embedding, submodule(module, family.embedding))] if tied else [])
    adapted = [path for path, layer in places if isinstance(layer, LoraLayer)]
    if adapted:
        raise ModelConfigError(
            f"LoRA adapts '{adapted[0]}', the vocabulary projection{' (tied to the embedding)' if tied else ''}: the "
            f"coupled log-probs and the samplers project with its base weight, so the adapter would be ignored. Leave "
            f"it out of actor_rollout_ref.model.target_modules (or name it in exclude_modules)."
        )


UNSUPPORTED = {
    "use_dora": "DoRA (use_dora)",
    "modules_to_save": "fully trained modules (modules_to_save)",
    "target_parameters": "adapters on bare parameters (target_parameters)",
    "bias": "trained biases (bias other than none)",
}


def refuse_unsupported(settings: dict[str, Any], where: str) -> None:
    """One-line error for the peft features the rollout sync and the coupled pass do not carry: they would train
    weights the rollout never receives under their names."""
    found = [label for key, label in UNSUPPORTED.items() if settings.get(key) not in (None, False, [], (), "none", {})]
    if found:
        raise ModelConfigError(
            f"{where} asks for {', '.join(found)}, which diffugrpo's LoRA does not carry to the "
            f"rollout; use plain LoRA adapters (peft's LoraConfig without them)"
        )


def linear_names(module: torch.nn.Module) -> list[str]:
    """The distinct last names of a model's linear layers: what ``target_modules`` may list."""
    return sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, layer in unwrap(module).named_modules()
            if isinstance(layer, torch.nn.Linear)
        }
    )


def set_dropout(module: torch.nn.Module, probability: float) -> None:
    """Dropout on every adapter's input at ``probability`` (peft's ``lora_dropout``), in the adapters and in the
    saved adapter config. verl's FSDP engine builds its ``LoraConfig`` without a dropout key."""
    from peft.tuners.lora import LoraLayer

    if not 0.0 <= probability < 1.0:
        raise ModelConfigError(f"actor_rollout_ref.model.lora.dropout must be in [0, 1), got {probability}")
    for layer in unwrap(module).modules():
        if isinstance(layer, LoraLayer):
            for adapter in layer.lora_dropout:
                layer.lora_dropout[adapter] = torch.nn.Dropout(probability) if probability else torch.nn.Identity()
    for config in getattr(module, "peft_config", {}).values():
        config.lora_dropout = probability


def lora_config(settings: dict[str, Any]):
    """peft's ``LoraConfig`` from its ``to_dict()`` (what verl sends the rollout, and ``adapter_config.json``)."""
    from peft import LoraConfig

    known = LoraConfig.__dataclass_fields__
    return LoraConfig(**{key: value for key, value in settings.items() if key in known})


def inject_adapter(module: torch.nn.Module, settings: dict[str, Any]) -> None:
    """Add empty LoRA adapters described by ``settings`` (a ``LoraConfig`` as a dict) to a plain model, in place;
    the weights come later by name. The rollout samples through them (adapters applied, never merged: exact,
    and a sync moves the adapters only)."""
    from peft import inject_adapter_in_model

    refuse_unsupported(settings, "the trainer's LoRA config")
    inject_adapter_in_model(lora_config(settings), module, adapter_name=ADAPTER_NAME)


def adapter_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's weights under peft's file names (``base_model.model.<path>.lora_A.weight``), whole tensors
    on the CPU; FSDP2 shards are gathered, so every rank must call it."""
    from peft.utils.save_and_load import get_peft_model_state_dict

    state = get_peft_model_state_dict(module)
    return {
        name: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach().cpu().contiguous()
        for name, value in state.items()
    }


def save_adapter(
    directory: str | Path, state: dict[str, torch.Tensor], settings: dict[str, Any], base_model: str | None = None
) -> Path:
    """Write ``state`` and its config as peft's adapter folder (``PeftModel.from_pretrained`` reads it)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = {**settings, "base_model_name_or_path": base_model or settings.get("base_model_name_or_path")}
    config = {key: sorted(value) if isinstance(value, set) else value for key, value in config.items()}
    (directory / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, default=str) + "\n")
    save_file(state, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    return directory


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def apply_adapter(module: torch.nn.Module, adapter_dir: str | Path, merge: bool = True) -> torch.nn.Module:
    """``module`` with the peft adapter saved in ``adapter_dir``: merged into its weights (``merge``, for
    sampling) or as trainable adapters. A weight the adapter names that the model lacks is an error."""
    from peft import PeftModel

    if not is_adapter_dir(adapter_dir):
        raise ModelConfigError(
            f"{adapter_dir} is not a LoRA adapter folder (no {ADAPTER_CONFIG}); pass the "
            f"checkpoint's actor/lora_adapter folder or one saved by peft's save_pretrained"
        )
    refuse_unsupported(json.loads((Path(adapter_dir) / ADAPTER_CONFIG).read_text()), f"the adapter in {adapter_dir}")
    accept_causal_lm_wrapper(module)
    try:
        adapted = PeftModel.from_pretrained(module, str(adapter_dir), is_trainable=not merge)
    except (ValueError, RuntimeError) as error:  # targets it cannot find, shapes that do not fit
        raise ModelConfigError(
            f"the adapter in {adapter_dir} does not fit {type(module).__name__}, it was trained on "
            f"another model: {' '.join(str(error).split())[:300]}"
        ) from error
    expected = {canonical_weight_name(name) for name in adapter_file_names(adapter_dir)}
    present = {canonical_weight_name(name) for name, _ in adapted.named_parameters() if is_adapter_weight(name)}
    missing = sorted(expected - present)
    if missing:
        raise ModelConfigError(
            f"the adapter in {adapter_dir} names {len(missing)} weights this model does not have, "
            f"e.g. {missing[:3]}: it was trained on another model"
        )
    return adapted.merge_and_unload() if merge else adapted


def adapter_file_names(adapter_dir: str | Path) -> list[str]:
    """The tensor names in an adapter folder's weights file (read from its header)."""
    from safetensors import safe_open

    with safe_open(str(Path(adapter_dir) / ADAPTER_WEIGHTS), framework="pt") as handle:
        return list(handle.keys())


def parse_targets(text: str) -> str | list[str]:
    """A command line's ``--target-modules``: ``all-linear`` as it is, else the comma-separated module names."""
    return text if text == "all-linear" else [name.strip() for name in text.split(",") if name.strip()]


def with_adapters(
    model: torch.nn.Module,
    rank: int,
    targets: Any = "all-linear",
    exclude: Any = None,
    alpha: float | None = None,
    dropout: float = 0.0,
    on_meta: bool = False,
):
    """``model`` wrapped with trainable LoRA adapters of ``rank`` where verl's engine puts them: peft's ``CAUSAL_LM``
    wrapper resolves ``targets`` and ``exclude``; every other weight is frozen. ``on_meta``: a model built on the
    meta device (the adapters are made there too)."""
    from peft import LoraConfig, TaskType, get_peft_model

    return get_peft_model(
        accept_causal_lm_wrapper(model),
        LoraConfig(
            task_type=TaskType.CAUSAL_LM,
            r=rank,
            lora_alpha=rank if alpha is None else alpha,
            lora_dropout=dropout,
            target_modules=targets,
            exclude_modules=exclude,
        ),
        low_cpu_mem_usage=on_meta,
    )


def adapted_copy(model: torch.nn.Module, rank: int, targets: Any = "all-linear", exclude: Any = None):
    """A copy of a model built on the meta device with the adapters the engine would give it (see
    :func:`with_adapters`): what the pre-flight and ``check-model`` count and check, without any memory."""
    import copy

    return with_adapters(copy.deepcopy(model), rank, targets, exclude, on_meta=True)


def adapted_inputs_per_layer(model: torch.nn.Module, layers: int) -> int:
    """The adapted modules' input widths summed and divided over ``layers``: the elements per token and layer that
    adapter dropout keeps for the backward (see ``step_memory.StepSetup.lora_dropout_inputs``)."""
    from peft.tuners.lora import LoraLayer

    widths = [layer.in_features for layer in unwrap(model).modules() if isinstance(layer, LoraLayer)]
    return sum(widths) // max(layers, 1)


def adapter_parameters(model: torch.nn.Module) -> int:
    """How many parameters the LoRA adapters of ``model`` hold."""
    return sum(parameter.numel() for name, parameter in model.named_parameters() if is_adapter_weight(name))


def target_report(module_names: Iterable[str], targets: Any) -> tuple[list[str], list[str]]:
    """For a list of target module names (verl's ``target_modules``): those that name some module of the
    model and those that name none (peft adapts the first and ignores the second without a word).
    ``all-linear`` and regular expressions are peft's to resolve: ``([], [])``."""
    if isinstance(targets, str) or not targets:
        return [], []
    names = list(module_names)

    def names_some(target: str) -> bool:  # peft's rule for a listed name: the whole name or its last parts
        return any(name == target or name.endswith(f".{target}") for name in names)

    matched = [target for target in targets if names_some(target)]
    return matched, [target for target in targets if target not in matched]
