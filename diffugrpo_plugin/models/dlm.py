"""A checkpoint as a diffusion LM: loaded natively or through its own code, called through its family.

:class:`DiffusionLM` puts every family (:mod:`diffugrpo_plugin.models.families`) behind one convention:
``logits[:, i]`` scores token ``i``, left padding is invisible to real tokens (the attention
mask and positions are built in the family's form), and the mask token id is resolved with an
error that says what to set. :func:`load_pretrained` builds the network as
:func:`~diffugrpo_plugin.models.load_plan.plan_loading` decides: our native Dream/LLaDA classes when the family has
one (no remote code), the checkpoint's own code when asked (``implementation="remote"``, ``trust_remote_code``), a
stock transformers class otherwise.

Plain torch + transformers; no verl.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from diffugrpo_plugin.models.detection import detect_family, family_named
from diffugrpo_plugin.models.family import ModelConfigError, ModelFamily, position_ids_from_mask, projected_rows, unwrap
from diffugrpo_plugin.models.kernels import DEFAULT_CHUNK_ROWS, fused_head_logprob
from diffugrpo_plugin.models.load_plan import (
    LoadPlan,
    plan_loading,
    read_model_config,
    refuse_partial_load,
    remote_classes,
    supports_attention,
)
from diffugrpo_plugin.models.native import register_with_transformers

__all__ = [
    "DiffusionLM",
    "ModelConfigError",
    "align_logits",
    "is_hub_id",
    "load_diffusion_lm",
    "load_pretrained",
    "position_ids_from_mask",
    "quiet_transformers",
    "resolve_mask_token",
]


def align_logits(logits: torch.Tensor, shift: bool) -> torch.Tensor:
    """Make ``logits[:, i]`` score token ``i``.  # [B, L, V] -> [B, L, V]

    For shifted models position 0 has no predictor; it gets position 0's own output, which
    is never used (position 0 is always prompt or padding).
    """
    if not shift:
        return logits
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def resolve_mask_token(
    family: ModelFamily, config: Any = None, tokenizer: Any = None, override: int | None = None
) -> tuple[int, str]:
    """The mask token id and where it came from, in this order: the override, the model config, the
    tokenizer's ``mask_token``, a family token name in the tokenizer, the family's published id."""
    vocab_size = getattr(config, "vocab_size", None)
    # the logits' width: LLaDA pads its embedding (and head) past vocab_size to embedding_size
    width = max(vocab_size or 0, getattr(config, "embedding_size", None) or 0) or None
    stated = (
        (override, "set in config (diffusion.mask_token_id)"),
        (family.config_mask_token_id(config) if config is not None else None, "model config (mask_token_id)"),
    )
    for mask_id, source in stated:
        if mask_id is None:
            continue
        if width is not None and not 0 <= int(mask_id) < width:
            raise ModelConfigError(
                f"mask token id {mask_id} ({source}) is outside the model's {width} logits: give the model's own mask "
                f"token id (actor_rollout_ref.model.diffusion.mask_token_id in training, mask_token_id in its "
                f"config.json), or leave diffusion.mask_token_id null to read it from the model and its tokenizer"
            )
        return int(mask_id), source
    if getattr(tokenizer, "mask_token_id", None) is not None:
        return int(tokenizer.mask_token_id), f"tokenizer mask_token {tokenizer.mask_token!r}"
    vocabulary = tokenizer.get_vocab() if tokenizer is not None else {}
    for name in family.mask_token_names:
        if name in vocabulary:
            return int(vocabulary[name]), f"tokenizer token {name!r}"
    if family.default_mask_token_id is not None and (vocab_size is None or family.default_mask_token_id < vocab_size):
        return family.default_mask_token_id, f"the {family.name} family's published mask id"
    name = getattr(tokenizer, "name_or_path", None) or getattr(config, "_name_or_path", None) or "the model"
    raise ModelConfigError(
        f"no mask token id for {name}: neither the model config nor the tokenizer defines mask_token_id "
        f"(tried tokens {', '.join(family.mask_token_names)}). Masked diffusion needs one: add a mask token to "
        f"the tokenizer or set actor_rollout_ref.model.diffusion.mask_token_id=<id>."
    )


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
    def wrap(
        cls,
        module: torch.nn.Module,
        tokenizer: Any = None,
        mask_token_id: int | None = None,
        logits_shift: bool | None = None,
        family: str | None = None,
    ) -> "DiffusionLM":
        """Wrap a loaded model, detecting its family from its config unless ``family`` names one."""
        config = unwrap(module).config
        found = family_named(family) if family else detect_family(config.to_dict())
        shift = logits_shift if logits_shift is not None else found.logits_shift_of(config)
        if shift is None:
            raise ModelConfigError(
                f"cannot tell whether {type(unwrap(module)).__name__} (family {found.name}) shifts its logits: set "
                f"actor_rollout_ref.model.diffusion.logits_shift=true (the output at i-1 predicts token i, as in "
                f"Dream) or false (as in LLaDA), or diffusion_logits_shift in its config.json."
            )
        mask_id, _ = resolve_mask_token(found, config, tokenizer, mask_token_id)
        return cls(module=module, mask_token_id=mask_id, shift_logits=bool(shift), family=found)

    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Aligned logits for every position.  # [B, L] -> [B, L, V]"""
        if position_ids is None:
            position_ids = position_ids_from_mask(attention_mask)
        return align_logits(self.family.call(self.module, input_ids, attention_mask, position_ids), self.shift_logits)

    def scored_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        token_rows: torch.Tensor,
        targets: torch.Tensor,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        with_entropy: bool = False,
    ):
        """fp32 ``log p(targets)`` at the flat positions ``token_rows`` of ``input_ids.flatten()`` (and the entropy
        of those predictive distributions), through the fused head (:func:`~diffugrpo_plugin.models.kernels.fused_head_logprob`).

        Only those rows are projected, inside the model's forward (see
        :func:`~diffugrpo_plugin.models.family.projected_rows`); a shifted model reads each token's
        prediction from the position before it, so no scored token may sit at position 0.
        token_rows [R], targets [R] (the clean tokens) -> logp [R] (differentiable), entropy [R] (detached) or None.
        """
        hidden_rows = token_rows - 1 if self.shift_logits else token_rows  # [R]
        if self.shift_logits and bool((token_rows % input_ids.shape[1] == 0).any()):
            raise ValueError(
                "a scored token sits at position 0, which a shifted (Dream-style) model cannot predict; "
                "every completion needs at least one prompt token before it"
            )
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


def is_hub_id(path: str) -> bool:
    """Whether ``path`` reads as a hub id (``owner/name``) rather than a local path."""
    return path.count("/") == 1 and not path.startswith((".", "/", "~"))


def _local_or_hub(path: str) -> str:
    """``path`` expanded when it exists locally; a hub id as given; else a one-line error."""
    expanded = os.path.expanduser(path)
    if not os.path.exists(expanded) and not is_hub_id(path):
        raise ModelConfigError(
            f"model path '{path}' does not exist. Point actor_rollout_ref.model.path at a "
            f"checkpoint directory or a hub id such as apple/DiffuCoder-7B-Instruct."
        )
    return expanded if os.path.exists(expanded) else path


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No weight-loading progress bars or advisory warnings from transformers inside the block (for tools that
    print their own report, and the warm start inside a quiet job)."""
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    bars = logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def load_pretrained(
    path: str,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
    family: str | None = None,
    implementation: str = "auto",
    plan: LoadPlan | None = None,
    quantization: dict[str, Any] | None = None,
    device: str | torch.device | None = None,
) -> torch.nn.Module:
    """Load a diffusion LM checkpoint from a local path or hub id, as :func:`plan_loading` decides (or ``plan``
    says, when it was already made for this path). ``quantization``: 4-bit base weights, as
    :func:`~diffugrpo_plugin.models.quantization.quantization_settings` returns them, quantized on ``device``
    (bitsandbytes quantizes where the weights land); the layers compute in ``dtype``. With ``device`` the weights
    load straight onto it."""
    from transformers import AutoModelForCausalLM

    register_with_transformers()
    path = _local_or_hub(path)
    config = read_model_config(path)
    plan = plan or plan_loading(config, family, implementation, trust_remote_code, path)
    kwargs: dict[str, Any] = {"dtype": dtype, "output_loading_info": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if quantization is not None:
        from diffugrpo_plugin.models.quantization import loading_kwargs

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        kwargs.update(loading_kwargs(quantization, dtype, device, plan.family.head))
    elif device is not None:
        # straight onto the device: a CPU copy first would cost every trainer worker the whole checkpoint in host
        # memory (8 x 15 GB a node for a 7B rollout copy in bf16)
        kwargs["device_map"] = str(torch.device(device))
    if plan.implementation == "native":
        module, info = plan.model_class.from_pretrained(path, **kwargs)
    elif plan.implementation == "remote":
        config_class, model_class = remote_classes(path, config)
        if not supports_attention(model_class, attn_implementation):
            kwargs.pop("attn_implementation", None)
        module, info = model_class.from_pretrained(path, config=config_class.from_pretrained(path), **kwargs)
    else:
        module, info = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    refuse_partial_load(module, plan, info)
    if quantization is not None:
        from diffugrpo_plugin.models.quantization import keep_canonical_packing

        keep_canonical_packing(module)
    return module


def load_diffusion_lm(
    path: str,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    family: str | None = None,
    implementation: str = "auto",
    adapter: str | None = None,
    quantization: dict[str, Any] | None = None,
) -> tuple[DiffusionLM, Any]:
    """A checkpoint ready to sample from: the wrapped model in eval mode on ``device`` and its tokenizer; with a
    LoRA ``adapter`` folder (a training checkpoint's ``actor/lora_adapter``), the adapter merged in. With
    ``quantization`` (4-bit linear layers, as QLoRA trains them) the adapter is applied instead: merging it into 4-bit
    weights would round it away.

    The tokenizer runs the checkpoint's own code only when the model does (``trust_remote_code`` is a
    permission): a native load of a checkpoint whose ``tokenization_*.py`` is missing still has a tokenizer.
    """
    from transformers import AutoTokenizer

    register_with_transformers()  # Dream's tokenizer files name a tokenizer class only our registration knows
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = _local_or_hub(path)
    plan = plan_loading(read_model_config(path), family, implementation, trust_remote_code, path)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=plan.trust_remote_code)
    module = load_pretrained(path, dtype=dtype, plan=plan, quantization=quantization, device=device)
    if adapter is not None:
        from diffugrpo_plugin.models.lora import apply_adapter

        module = apply_adapter(module, adapter, merge=quantization is None)
    return DiffusionLM.wrap(module.to(device).eval(), tokenizer, family=family), tokenizer
