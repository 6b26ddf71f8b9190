"""What a model family is: how each kind of diffusion LM is called, aligned, projected and masked.

A checkpoint's family is read from its ``config.json`` (``model_type``, the ``auto_map`` code
files, ``architectures``) by :mod:`diffugrpo_plugin.models.detection`;
``actor_rollout_ref.model.diffusion.family`` overrides it. A family says:

* **calling convention**: the keyword arguments its network takes. Our native Dream/LLaDA
  classes and stock transformers models take a 2D padding mask and ``position_ids``. Dream's
  published code takes ``"full"`` or a 4D boolean mask (query and key both real); LLaDA's takes
  no ``position_ids`` at all (positions are ``0..L-1``) and a 2D mask it turns into a bias.
* **logit shift**: Dream's output at ``i - 1`` predicts token ``i``; LLaDA's output at ``i`` does.
* **head**: where the final hidden states are (``final_norm``'s output) and what projects them
  (a module, or for a tied LLaDA the token embedding's weight and no module at all).
* **mask token**: which id is ``[MASK]`` when the config does not say (LLaDA's is 126336,
  ``<|mdm_mask|>``, and its config object reports a meaningless default of 50256).
* **native implementation**: our own class that loads the published weights without remote code.

This module holds the record, the helpers that find a family's modules inside any FSDP or peft wrapper, and the
context managers that capture the final hidden states and project them. The built-ins are in
:mod:`diffugrpo_plugin.models.families`; third parties add families through the ``diffugrpo_model_families`` hook
(:mod:`diffugrpo_plugin.hookspecs`). Plain torch + transformers; no verl.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from diffugrpo_plugin.models.lean_mlp import SwiGLUBlocks

IMPLEMENTATIONS = ("auto", "native", "remote")


class ModelConfigError(ValueError):
    """The model (or its tokenizer) lacks something diffusion training needs; the message says what to set."""


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The model inside an FSDP1 wrapper (FSDP2 keeps the module itself) and a peft (LoRA) wrapper: the family's
    module paths and calling convention are the base model's; its adapted layers stay in place inside it."""
    model = getattr(module, "_fsdp_wrapped_module", module)
    base_model = getattr(model, "get_base_model", None)
    return base_model() if callable(base_model) else model


TRANSFORMERS_CONVENTION_MODULES = ("diffugrpo_plugin.", "transformers.models.")


def takes_padding_mask(module: torch.nn.Module) -> bool:
    """Whether the model is called the transformers way: a 2D padding mask, ``position_ids``, a ``Cache``.

    Our native classes and transformers' own model classes are (any class in the MRO, so FSDP2's
    wrapper class counts as what it wraps); a family's published code is called as that code expects,
    however it was imported (a checkpoint's ``auto_map`` or the file copied into a project), and a
    forward without ``position_ids`` (LLaDA's) never gets them.
    """
    model = unwrap(module)
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return False
    return any(cls.__module__.startswith(TRANSFORMERS_CONVENTION_MODULES) for cls in type(model).__mro__)


def _find(module: torch.nn.Module, path: str) -> torch.nn.Module | None:
    found: Any = unwrap(module)
    for name in path.split("."):
        found = getattr(found, name, None)
        if found is None:
            return None
    return found


def submodule(module: torch.nn.Module, path: str) -> torch.nn.Module:
    """``module.a.b`` for ``path="a.b"``, or an error naming the model and the missing attribute."""
    found = _find(module, path)
    if found is None:
        raise ModelConfigError(
            f"{type(unwrap(module)).__name__} has no '{path}': its layout does not match the "
            f"family it was detected as. Set actor_rollout_ref.model.diffusion.family to the "
            f"right one."
        )
    return found


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: ``cumsum(mask) - 1``, clamped at 0 on pads.  # [B, L]"""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


@dataclass(frozen=True)
class ModelFamily:
    """What differs between diffusion-LM families (see the module docstring).

    Attributes:
        name: the family's name in config and listings.
        description: one line for listings and ``diffugrpo check-model``.
        model_types: ``config.json`` ``model_type`` values that select it (compared case-insensitively).
        code_files: ``auto_map`` module names (``"modeling_dream"``) that select it.
        architectures: ``config.json`` ``architectures`` entries that select it.
        logits_shift: True when the output at ``i - 1`` scores token ``i``; None to read the
            config's ``diffusion_logits_shift`` (the ``bidirectional`` family).
        call: ``call(module, input_ids, attention_mask, position_ids) -> logits`` [B, L, V].
        attention_convention: how ``call`` presents attention and positions, in words.
        final_norm: dotted path of the module whose output is the final hidden states.
        head: dotted path of the vocabulary head module; None when the head is the tied
            ``embedding`` weight with no module of its own.
        embedding: dotted path of the token embedding.
        mask_token_names: tokenizer tokens that are the mask token, tried when neither the
            config nor the tokenizer names ``mask_token_id``.
        default_mask_token_id: the family's published mask id, the last resort.
        config_mask_token_id: the mask id a loaded config states, or None.
        native: returns our implementation's ``(config_class, model_class)``; None when there is none.
        native_unsupported: ``config.json`` dict -> settings the native class cannot run.
        remote_prefix_cache: whether the published code's forward fills a transformers ``Cache``.
        complete_remote_config: adds to the published config object what verl reads and it lacks.
        logit_scale: config -> the factor the network multiplies its head's output by (LLaDA's
            ``scale_logits``); the fused head (:mod:`diffugrpo_plugin.models.kernels`) applies it.
        swiglu: where the SwiGLU feed-forward blocks are, for the training engine's lean backward
            (:mod:`diffugrpo_plugin.models.lean_mlp`); None: every block keeps its own code.
        default_block_size: a block-diffusion family's published block, used when ``config.json`` states no
            ``block_size``; None for the families that attend over the whole canvas.
        default_sampler: the rollout's sampler for ``engine_kwargs.diffusion.sampler: auto`` (the block families'
            ``block``: block by block over the exact cache of finished blocks, as they were trained to decode).
    """

    name: str
    description: str
    call: Callable[..., torch.Tensor]
    attention_convention: str
    final_norm: str
    head: str | None
    embedding: str
    logits_shift: bool | None
    model_types: tuple[str, ...] = ()
    code_files: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    mask_token_names: tuple[str, ...] = ("<|mask|>",)
    default_mask_token_id: int | None = None
    config_mask_token_id: Callable[[Any], int | None] = field(
        default=lambda config: getattr(config, "mask_token_id", None)
    )
    native: Callable[[], tuple[type, type]] | None = None
    native_unsupported: Callable[[dict], list[str]] = field(default=lambda config: [])
    remote_prefix_cache: bool = False
    complete_remote_config: Callable[[Any], None] = field(default=lambda config: None)
    logit_scale: Callable[[Any], float] = field(default=lambda config: 1.0)
    swiglu: SwiGLUBlocks | None = None
    default_block_size: int | None = None
    default_sampler: str = "entropy"

    def matches(self, config: dict) -> bool:
        """Whether a ``config.json`` dict names this family."""
        return self.match_reason(config) is not None

    def match_reason(self, config: dict) -> str | None:
        """Which part of a ``config.json`` dict names this family (for reports), or None."""
        model_type = str(config.get("model_type") or "")
        if model_type.lower() in {t.lower() for t in self.model_types}:
            return f"model_type '{model_type}'"
        for ref in (config.get("auto_map") or {}).values():
            code = ref.split(".")[0].split("--")[-1] if isinstance(ref, str) else None
            if code in self.code_files:
                return f"auto_map code file {code}.py"
        architectures = [name for name in config.get("architectures") or () if name in self.architectures]
        return f"architectures {architectures[0]}" if architectures else None

    def block_size_of(self, config: dict) -> tuple[int | None, str | None]:
        """A block-diffusion family's block size for a ``config.json`` dict and where it came from; ``(None, None)``
        for a family that attends over the whole canvas."""
        if self.default_block_size is None:
            return None, None
        stated = config.get("block_size")
        if stated is not None:
            return int(stated), "config.json block_size"
        return self.default_block_size, f"the {self.name} family's published block (config.json states none)"

    def head_module(self, module: torch.nn.Module) -> torch.nn.Module | None:
        """The module that projects the final hidden states (inside any FSDP1 wrapper, where its weight is
        gathered while it runs), or None when the head is the tied embedding weight with no module (a tied LLaDA)."""
        head = _find(module, self.head) if self.head else None
        return unwrap(head) if head is not None else None

    def head_weight(self, module: torch.nn.Module) -> torch.Tensor:
        """The vocabulary projection's weight: the head module's, or the embedding's when the head has
        no module of its own.  # [V, H]"""
        head = self.head_module(module)
        weight = (head if head is not None else submodule(module, self.embedding)).weight
        assert isinstance(weight, torch.Tensor)
        return weight

    def head_is_tied(self, module: torch.nn.Module) -> bool:
        return self.head_weight(module) is submodule(module, self.embedding).weight

    def logits_shift_of(self, config: Any) -> bool | None:
        if self.logits_shift is not None:
            return self.logits_shift
        value = getattr(config, "diffusion_logits_shift", None)
        return None if value is None else bool(value)

    def takes_cache(self, module: torch.nn.Module) -> bool:
        """Whether the model's forward fills a transformers ``Cache`` (for the sampler's prefix cache)."""
        if not takes_padding_mask(module) and not self.remote_prefix_cache:
            return False
        return "past_key_values" in inspect.signature(unwrap(module).forward).parameters


@contextmanager
def final_hidden_rows(family: ModelFamily, module: torch.nn.Module, rows: torch.Tensor):
    """While active, the model's final hidden states are only ``hidden.flatten(0, 1)[rows]``.

    Hooked on the output of ``family.final_norm``, inside the model's own forward (so FSDP's
    parameter gathering is untouched): whatever projects the hidden states (a head module, or a
    tied embedding weight with no module) then projects only those rows, and the model returns
    logits shaped ``[1, R, V]``.
    """

    def keep_rows(_module, _args, hidden):
        return hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows)[None]  # [1, R, H]

    handle = submodule(module, family.final_norm).register_forward_hook(keep_rows)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def projected_rows(
    family: ModelFamily,
    module: torch.nn.Module,
    rows: torch.Tensor,
    project: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor],
):
    """While active, the model's forward returns ``project(hidden [R, H], weight [V, H], bias)`` ([R, k], returned
    as [1, R, k]) in place of its logits, for the final hidden states ``hidden.flatten(0, 1)[rows]``; the
    vocabulary head projects nothing.

    Everything runs inside the model's own forward, where FSDP has gathered the head's weight: an
    untied head module is hooked (its input swapped for zero rows, then ``project`` runs with its
    weight and bias before FSDP's post-forward hook can reshard them, and its result becomes the
    head's output), a tied head with no module of its own (LLaDA's ``F.linear(x, wte.weight)``) is
    served from a second hook on ``family.final_norm``. The model's forward then returns that tensor
    as its logits (whatever its code did to the head's output afterwards is discarded), so it is
    the output FSDP hooks, for the head's unit and the root, to gather the weight again before
    its backward.
    """
    head = family.head_module(module)
    projected: list[torch.Tensor] = []
    diverted: list[torch.Tensor] = []

    def as_output(result):  # [R, k] -> [1, R, k], a fresh tensor: FSDP2 will not hook a view it returns
        return result[None].clone()

    def project_tied(_norm, _args, hidden):
        projected.append(as_output(project(hidden[0], submodule(module, family.embedding).weight, None)))
        return hidden[:, :0]  # [1, 0, H]: the model's own projection has nothing left to do

    def divert_input(_head, args):
        diverted.append(args[0].reshape(-1, args[0].shape[-1]))  # [R, H]
        return (args[0][:, :0],) + tuple(args[1:])

    def project_diverted(head_module, _args, _output):  # prepended: runs before FSDP's post-forward reshards
        projected.append(as_output(project(diverted.pop(), head_module.weight, head_module.bias)))
        return projected[-1]

    def return_projected(_model, _args, output):  # prepended: runs before FSDP's own post-forward hook
        if len(projected) != 1:
            raise RuntimeError(
                f"{type(unwrap(module)).__name__} did not run its vocabulary head once on the final "
                f"hidden states (family {family.name}: final_norm '{family.final_norm}', head "
                f"'{family.head}'); the family's layout does not match the model"
            )
        if isinstance(output, dict):  # transformers' ModelOutput
            output.logits = projected.pop()
            return output
        return (projected.pop(),) + tuple(output[1:]) if isinstance(output, tuple) else projected.pop()

    with final_hidden_rows(family, module, rows):  # registered first: the hooks below see the selected rows
        if head is None:
            handles = [submodule(module, family.final_norm).register_forward_hook(project_tied)]
        else:
            handles = [
                head.register_forward_pre_hook(divert_input),
                head.register_forward_hook(project_diverted, prepend=True),
            ]
        handles.append(unwrap(module).register_forward_hook(return_projected, prepend=True))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
