"""Model adapters: one call that turns any supported masked diffusion LM into aligned logits.

Two families exist and differ in one convention:

* **Dream-style** (Dream, DiffuCoder): the network is a Qwen2 decoder run bidirectionally and
  keeps the autoregressive head alignment, so the output at position ``i - 1`` predicts the
  token at position ``i`` ("shifted logits").
* **LLaDA-style** (LLaDA): the output at position ``i`` predicts the token at position ``i``.

:class:`DiffusionLM` hides that difference: ``logits[:, i]`` always scores token ``i``. It
always passes the attention mask and position ids (``cumsum(mask) - 1``) so left padding
never leaks into real tokens, and it resolves the mask token id with a clear error.

Real checkpoints load through transformers (Dream/LLaDA ship ``trust_remote_code`` code that
registers ``AutoModel`` only); the tiny local models are stock ``Qwen2ForCausalLM`` /
``LlamaForCausalLM`` with ``config.is_causal = False``. Plain torch + transformers; no verl.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# model_type (config.json) -> logits are shifted (Dream-style)
KNOWN_SHIFT = {"dream": True, "llada": False, "llada_moe": False, "llama": False, "qwen2": True}


class ModelConfigError(ValueError):
    """The model (or its tokenizer) lacks something diffusion training needs."""


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: ``cumsum(mask) - 1``, clamped at 0 on pads.  # [B, L]"""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def resolve_logits_shift(config: Any, override: bool | None = None) -> bool:
    """Whether position ``i - 1`` predicts token ``i`` for this model.

    Order: explicit ``override``; the ``diffusion_logits_shift`` attribute our tiny
    checkpoints carry; the model type (Dream/DiffuCoder shift, LLaDA does not).
    """
    if override is not None:
        return bool(override)
    explicit = getattr(config, "diffusion_logits_shift", None)
    if explicit is not None:
        return bool(explicit)
    model_type = str(getattr(config, "model_type", "")).lower()
    if model_type in KNOWN_SHIFT:
        return KNOWN_SHIFT[model_type]
    raise ModelConfigError(
        f"cannot tell whether model_type '{model_type}' is Dream-style (shifted logits) or LLaDA-style "
        f"(unshifted). Set actor_rollout_ref.model.diffusion.logits_shift=true (Dream/DiffuCoder) or "
        f"false (LLaDA). Known model types: {sorted(KNOWN_SHIFT)}."
    )


def resolve_mask_token_id(config: Any = None, tokenizer: Any = None, override: int | None = None) -> int:
    """The id of the mask token: explicit override, then the model config, then the tokenizer."""
    if override is not None:
        return int(override)
    for source in (config, tokenizer):
        value = getattr(source, "mask_token_id", None) if source is not None else None
        if value is not None:
            return int(value)
    name = getattr(tokenizer, "name_or_path", None) or getattr(config, "_name_or_path", "the model")
    raise ModelConfigError(
        f"no mask token id: neither the model config nor the tokenizer of {name} defines mask_token_id. "
        f"Masked diffusion needs one: add a mask token to the tokenizer (e.g. '<|mask|>') or set "
        f"actor_rollout_ref.model.diffusion.mask_token_id=<id>."
    )


def align_logits(logits: torch.Tensor, shift: bool) -> torch.Tensor:
    """Make ``logits[:, i]`` score token ``i``.  # [B, L, V] -> [B, L, V]

    For shifted models position 0 has no predictor; it gets position 0's own output, which
    is never used (position 0 is always prompt or padding).
    """
    if not shift:
        return logits
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


@dataclass
class DiffusionLM:
    """A masked diffusion LM behind one convention: ``logits[:, i]`` scores token ``i``.

    ``module`` may be a plain HF model or an FSDP-wrapped one; only ``module(...)`` is called.
    """

    module: torch.nn.Module
    mask_token_id: int
    shift_logits: bool

    @classmethod
    def wrap(cls, module: torch.nn.Module, tokenizer: Any = None, mask_token_id: int | None = None,
             logits_shift: bool | None = None) -> "DiffusionLM":
        config = getattr(module, "config", None)
        return cls(
            module=module,
            mask_token_id=resolve_mask_token_id(config, tokenizer, mask_token_id),
            shift_logits=resolve_logits_shift(config, logits_shift),
        )

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Final hidden states aligned like :meth:`logits` (before the vocabulary projection).  # [B, L, H]"""
        if position_ids is None:
            position_ids = position_ids_from_mask(attention_mask)
        backbone = backbone_of(self.module)
        out = backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return align_logits(hidden, self.shift_logits)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Aligned logits for every position.  # [B, L] -> [B, L, V]"""
        if position_ids is None:
            position_ids = position_ids_from_mask(attention_mask)
        out = self.module(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=False)
        logits = out.logits if hasattr(out, "logits") else out[0]
        return align_logits(logits, self.shift_logits)

    @property
    def output_head(self) -> torch.nn.Module:
        return output_head_of(self.module)


def backbone_of(module: torch.nn.Module) -> torch.nn.Module:
    """The transformer body that returns hidden states (``model.model`` for HF causal LMs)."""
    inner = getattr(module, "_fsdp_wrapped_module", module)
    for name in ("model", "transformer"):
        body = getattr(inner, name, None)
        if isinstance(body, torch.nn.Module):
            return body
    raise ModelConfigError(f"{type(inner).__name__} has no .model/.transformer body to take hidden states from")


def output_head_of(module: torch.nn.Module) -> torch.nn.Module:
    """The vocabulary projection (``lm_head``) of an HF causal LM."""
    inner = getattr(module, "_fsdp_wrapped_module", module)
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    if head is None:
        raise ModelConfigError(f"{type(inner).__name__} exposes no output embeddings (lm_head)")
    return head


def load_pretrained(path: str, dtype: torch.dtype = torch.float32, trust_remote_code: bool = True,
                    attn_implementation: str | None = None) -> torch.nn.Module:
    """Load a diffusion LM checkpoint from a local path or hub id.

    Tries ``AutoModelForCausalLM`` (our tiny models, LLaDA) then ``AutoModel`` (Dream and
    DiffuCoder register only that). Raises a message naming the path when it does not exist.
    """
    import os

    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    expanded = os.path.expanduser(path)
    is_hub_id = path.count("/") == 1 and not path.startswith((".", "/", "~"))
    if not os.path.exists(expanded) and not is_hub_id:
        raise ModelConfigError(f"model path '{path}' does not exist. Point actor_rollout_ref.model.path at a "
                               f"checkpoint directory or a hub id such as apple/DiffuCoder-7B-Instruct.")
    path = expanded if os.path.exists(expanded) else path
    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": trust_remote_code}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    auto_map = getattr(config, "auto_map", None) or {}
    if "AutoModelForCausalLM" in auto_map or not auto_map:
        try:
            return AutoModelForCausalLM.from_pretrained(path, **kwargs)
        except ValueError:
            pass
    return AutoModel.from_pretrained(path, **kwargs)


def load_diffusion_lm(path: str, device: str | torch.device | None = None, dtype: torch.dtype = torch.float32,
                      trust_remote_code: bool = True) -> tuple[DiffusionLM, Any]:
    """A checkpoint ready to sample from: the wrapped model in eval mode on ``device`` and its tokenizer."""
    from transformers import AutoTokenizer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    module = load_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code).to(device).eval()
    return DiffusionLM.wrap(module, tokenizer), tokenizer
