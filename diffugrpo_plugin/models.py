"""A checkpoint as a diffusion LM: loaded natively or through its own code, called through its family.

:class:`DiffusionLM` puts every family (:mod:`diffugrpo_plugin.families`) behind one convention:
``logits[:, i]`` scores token ``i``, left padding is invisible to real tokens (the attention
mask and positions are built in the family's form), and the mask token id is resolved with an
error that says what to set. :func:`load_pretrained` picks how to build the network: our native
Dream/LLaDA classes when the family has one (no remote code), the checkpoint's own code when
asked (``implementation="remote"``, ``trust_remote_code``), a stock transformers class otherwise.

Plain torch + transformers; no verl.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from diffugrpo_plugin.families import (
    IMPLEMENTATIONS,
    ModelConfigError,
    ModelFamily,
    detect_family,
    family_named,
    projected_rows,
    position_ids_from_mask,
    unwrap,
)
from diffugrpo_plugin.logprobs import DEFAULT_CHUNK_ROWS, fused_head_logprob
from diffugrpo_plugin.native import register_with_transformers

__all__ = ["DiffusionLM", "LoadPlan", "ModelConfigError", "align_logits", "load_diffusion_lm", "load_model_config",
           "load_pretrained", "plan_loading", "position_ids_from_mask", "read_model_config", "remote_classes",
           "resolve_mask_token", "supports_attention"]


def align_logits(logits: torch.Tensor, shift: bool) -> torch.Tensor:
    """Make ``logits[:, i]`` score token ``i``.  # [B, L, V] -> [B, L, V]

    For shifted models position 0 has no predictor; it gets position 0's own output, which
    is never used (position 0 is always prompt or padding).
    """
    if not shift:
        return logits
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def resolve_mask_token(family: ModelFamily, config: Any = None, tokenizer: Any = None,
                       override: int | None = None) -> tuple[int, str]:
    """The mask token id and where it came from, in this order: the override, the model config, the
    tokenizer's ``mask_token``, a family token name in the tokenizer, the family's published id."""
    if override is not None:
        return int(override), "set in config (diffusion.mask_token_id)"
    from_config = family.config_mask_token_id(config) if config is not None else None
    if from_config is not None:
        return int(from_config), "model config (mask_token_id)"
    if getattr(tokenizer, "mask_token_id", None) is not None:
        return int(tokenizer.mask_token_id), f"tokenizer mask_token {tokenizer.mask_token!r}"
    vocabulary = tokenizer.get_vocab() if tokenizer is not None else {}
    for name in family.mask_token_names:
        if name in vocabulary:
            return int(vocabulary[name]), f"tokenizer token {name!r}"
    vocab_size = getattr(config, "vocab_size", None)
    if family.default_mask_token_id is not None and (vocab_size is None or family.default_mask_token_id < vocab_size):
        return family.default_mask_token_id, f"the {family.name} family's published mask id"
    name = getattr(tokenizer, "name_or_path", None) or getattr(config, "_name_or_path", None) or "the model"
    raise ModelConfigError(
        f"no mask token id for {name}: neither the model config nor the tokenizer defines mask_token_id "
        f"(tried tokens {', '.join(family.mask_token_names)}). Masked diffusion needs one: add a mask token to "
        f"the tokenizer or set actor_rollout_ref.model.diffusion.mask_token_id=<id>.")


@dataclass
class DiffusionLM:
    """A masked diffusion LM behind one convention: ``logits[:, i]`` scores token ``i``.

    ``module`` may be a plain model or an FSDP-wrapped one; it is only ever called whole, so FSDP
    gathers its parameters as usual.
    """

    module: torch.nn.Module
    mask_token_id: int
    shift_logits: bool
    family: ModelFamily

    @classmethod
    def wrap(cls, module: torch.nn.Module, tokenizer: Any = None, mask_token_id: int | None = None,
             logits_shift: bool | None = None, family: str | None = None) -> "DiffusionLM":
        """Wrap a loaded model, detecting its family from its config unless ``family`` names one."""
        config = unwrap(module).config
        found = family_named(family) if family else detect_family(config.to_dict())
        shift = logits_shift if logits_shift is not None else found.logits_shift_of(config)
        if shift is None:
            raise ModelConfigError(
                f"cannot tell whether {type(unwrap(module)).__name__} (family {found.name}) shifts its logits: set "
                f"actor_rollout_ref.model.diffusion.logits_shift=true (the output at i-1 predicts token i, as in "
                f"Dream) or false (as in LLaDA), or diffusion_logits_shift in its config.json.")
        mask_id, _ = resolve_mask_token(found, config, tokenizer, mask_token_id)
        return cls(module=module, mask_token_id=mask_id, shift_logits=bool(shift), family=found)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Aligned logits for every position.  # [B, L] -> [B, L, V]"""
        if position_ids is None:
            position_ids = position_ids_from_mask(attention_mask)
        return align_logits(self.family.call(self.module, input_ids, attention_mask, position_ids), self.shift_logits)

    def scored_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                        token_rows: torch.Tensor, targets: torch.Tensor, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                        with_entropy: bool = False):
        """fp32 ``log p(targets)`` at the flat positions ``token_rows`` of ``input_ids.flatten()`` (and the entropy
        of those predictive distributions), through the fused head (:func:`~diffugrpo_plugin.logprobs.fused_head_logprob`).

        Only those rows are projected, inside the model's forward (see
        :func:`~diffugrpo_plugin.families.projected_rows`); a shifted model reads each token's
        prediction from the position before it, so no scored token may sit at position 0.
        token_rows [R], targets [R] (the clean tokens) -> logp [R] (differentiable), entropy [R] (detached) or None.
        """
        hidden_rows = token_rows - 1 if self.shift_logits else token_rows  # [R]
        if self.shift_logits and bool((token_rows % input_ids.shape[1] == 0).any()):
            raise ValueError("a scored token sits at position 0, which a shifted (Dream-style) model cannot predict; "
                             "every completion needs at least one prompt token before it")
        scale = self.family.logit_scale(unwrap(self.module).config)

        def head_logprobs(hidden, weight, bias):  # -> [R, 1] or [R, 2] with the entropy
            result = fused_head_logprob(hidden, weight, targets, bias, scale, chunk_rows, with_entropy)
            return torch.stack(result, dim=-1) if with_entropy else result[:, None]

        with projected_rows(self.family, self.module, hidden_rows, head_logprobs):
            carried = self.family.call(self.module, input_ids, attention_mask, position_ids)
        carried = carried.reshape(token_rows.numel(), 2 if with_entropy else 1)  # [R, 1 or 2]; R may be 0
        return carried[:, 0], (carried[:, 1].detach() if with_entropy else None)

    def head_weight(self) -> torch.Tensor:
        """The vocabulary projection's weight, tied or not.  # [V, H]"""
        return self.family.head_weight(self.module)

    def supports_prefix_cache(self) -> bool:
        """Whether the model's own forward fills a transformers ``Cache`` (native and stock classes do)."""
        return self.family.takes_cache(self.module)


def read_model_config(path: str) -> dict:
    """The ``config.json`` of a local checkpoint or hub id, as a dict (no model code is run)."""
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(path)
    return config


@dataclass(frozen=True)
class LoadPlan:
    """How a checkpoint becomes a network: ``native`` (our class), ``remote`` (its own code) or ``stock``."""

    family: ModelFamily
    implementation: str
    model_class: type | None = None  # the native class, for "native"

    @property
    def trust_remote_code(self) -> bool:
        return self.implementation == "remote"


def plan_loading(config: dict, family: str | None = None, implementation: str = "auto",
                 trust_remote_code: bool = False) -> LoadPlan:
    """Choose how to build the network for a ``config.json`` dict; errors say which key to set.

    ``auto`` takes our native class when the family has one that runs these settings, the
    checkpoint's own code otherwise (which needs ``trust_remote_code``).
    """
    if implementation not in IMPLEMENTATIONS:
        raise ModelConfigError(f"unknown implementation '{implementation}' (actor_rollout_ref.model.diffusion."
                               f"implementation); choose one of {', '.join(IMPLEMENTATIONS)}")
    found = detect_family(config, family)
    has_code = bool(config.get("auto_map"))
    unsupported = found.native_unsupported(config) if found.native else []
    if found.native and implementation != "remote" and not unsupported:
        return LoadPlan(found, "native", found.native()[1])
    if implementation == "native":
        why = (f"these settings need its published code: {', '.join(unsupported)}" if unsupported
               else f"the {found.name} family has no native implementation")
        raise ModelConfigError(f"implementation=native cannot load this checkpoint: {why}. Use implementation=auto.")
    if not has_code:
        if found.native or implementation == "remote":
            raise ModelConfigError(f"the checkpoint's config.json has no auto_map, so there is no remote code to run "
                                   f"(implementation={implementation}); "
                                   + (f"its settings need it: {', '.join(unsupported)}" if unsupported else
                                      "use implementation=auto"))
        return LoadPlan(found, "stock")
    if not trust_remote_code:
        reason = f"its settings need the published code ({', '.join(unsupported)})" if unsupported else (
            "implementation=remote asks for its own code" if implementation == "remote" else
            f"the {found.name} family has no native implementation")
        raise ModelConfigError(f"this checkpoint must run its own modeling code: {reason}. Set "
                               f"actor_rollout_ref.model.trust_remote_code=true (CLI: --trust-remote-code) if you "
                               f"trust the code shipped with it.")
    return LoadPlan(found, "remote")


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
        raise ModelConfigError(f"the checkpoint's auto_map {auto_map} names no AutoConfig and AutoModel classes to "
                               f"run its own code with")
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


def load_pretrained(path: str, dtype: torch.dtype = torch.float32, trust_remote_code: bool = False,
                    attn_implementation: str | None = None, family: str | None = None,
                    implementation: str = "auto") -> torch.nn.Module:
    """Load a diffusion LM checkpoint from a local path or hub id, as :func:`plan_loading` decides."""
    from transformers import AutoModelForCausalLM

    register_with_transformers()
    expanded = os.path.expanduser(path)
    is_hub_id = path.count("/") == 1 and not path.startswith((".", "/", "~"))
    if not os.path.exists(expanded) and not is_hub_id:
        raise ModelConfigError(f"model path '{path}' does not exist. Point actor_rollout_ref.model.path at a "
                               f"checkpoint directory or a hub id such as apple/DiffuCoder-7B-Instruct.")
    path = expanded if os.path.exists(expanded) else path
    config = read_model_config(path)
    plan = plan_loading(config, family, implementation, trust_remote_code)
    kwargs: dict[str, Any] = {"dtype": dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if plan.implementation == "native":
        return plan.model_class.from_pretrained(path, **kwargs)
    if plan.implementation == "remote":
        config_class, model_class = remote_classes(path, config)
        if not supports_attention(model_class, attn_implementation):
            kwargs.pop("attn_implementation", None)
        return model_class.from_pretrained(path, config=config_class.from_pretrained(path), **kwargs)
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def load_diffusion_lm(path: str, device: str | torch.device | None = None, dtype: torch.dtype = torch.float32,
                      trust_remote_code: bool = False, family: str | None = None,
                      implementation: str = "auto") -> tuple[DiffusionLM, Any]:
    """A checkpoint ready to sample from: the wrapped model in eval mode on ``device`` and its tokenizer."""
    from transformers import AutoTokenizer

    register_with_transformers()  # Dream's tokenizer files name a tokenizer class only our registration knows
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    module = load_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code, family=family,
                             implementation=implementation).to(device).eval()
    return DiffusionLM.wrap(module, tokenizer, family=family), tokenizer
