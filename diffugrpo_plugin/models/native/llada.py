"""LLaDA on the transformers that verl pins: a Llama-style body, bidirectional, with LLaDA's weight names.

LLaDA's published network (OLMo lineage, ``block_type: "llama"``) is, per block: RMSNorm ->
q/k/v projections -> RoPE -> attention over every position -> ``attn_out``; RMSNorm ->
``ff_out(silu(ff_proj(x)) * up_proj(x))``; residuals around both. A final RMSNorm ``ln_f`` and
the vocabulary head ``ff_out``, or with ``weight_tying`` the token embedding ``wte`` reused as
the head (no head module at all). The modules here carry the published names
(``model.transformer.wte``, ``model.transformer.blocks.N.q_proj`` / ``attn_out`` / ``ff_proj`` /
``up_proj`` / ``ff_out`` / ``attn_norm`` / ``ff_norm``, ``model.transformer.ln_f``,
``model.transformer.ff_out``), so a published checkpoint loads without a key mapping and a
checkpoint saved here loads in LLaDA's own code.

What differs from LLaDA's own code, on purpose:

* ``forward`` takes ``position_ids`` (default ``0..L-1``, what LLaDA always uses), so left
  padding can be made exactly position-neutral; a 2D padding mask hides padded keys, as LLaDA's
  additive bias does.
* It takes a transformers ``Cache`` (LLaDA asserts that MDMs have none), which the sampler's
  optional prefix cache uses.
* Attention goes through transformers' attention functions (``sdpa`` / ``eager``).

Built from transformers' shared pieces (RMSNorm, rotate-half RoPE, attention interface,
bidirectional masks). Configuration variants LLaDA's code supports but this does not are
refused by :func:`unsupported_settings` with the key that causes it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRMSNorm, eager_attention_forward, rotate_half

MODEL_TYPE = "llada"


@strict
class LLaDAConfig(PreTrainedConfig):
    """LLaDA's ``config.json`` fields that shape the network, with LLaDA's own defaults."""

    model_type = MODEL_TYPE
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {"hidden_size": "d_model", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"}

    d_model: int = 768
    n_heads: int = 12
    n_kv_heads: int | None = None
    multi_query_attention: bool | None = None
    n_layers: int = 12
    mlp_ratio: int = 4
    mlp_hidden_size: int | None = None
    activation_type: str = "swiglu"
    block_type: str = "sequential"
    block_group_size: int = 1
    alibi: bool = False
    rope: bool = False
    rope_theta: float | int = 10000.0
    rope_full_precision: bool = True
    attention_dropout: float | int = 0.1
    residual_dropout: float | int = 0.1
    embedding_dropout: float | int = 0.1
    attention_layer_norm: bool = False
    input_emb_norm: bool = False
    layer_norm_type: str = "default"
    layer_norm_with_affine: bool = True
    rms_norm_eps: float | int = 1e-5
    max_sequence_length: int = 1024
    include_qkv_bias: bool | None = False
    include_bias: bool = False
    bias_for_layer_norm: bool | None = None
    scale_logits: bool = False
    vocab_size: int = 50257
    embedding_size: int | None = 50304
    weight_tying: bool = True
    init_std: float | int = 0.02
    mask_token_id: int | None = None
    pad_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    bos_token_id: int | None = None
    use_cache: bool = False
    is_causal: bool = False
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs):
        # transformers and verl read `tie_word_embeddings`; LLaDA says `weight_tying`.
        self.tie_word_embeddings = self.weight_tying
        super().__post_init__(**kwargs)

    @property
    def num_key_value_heads(self) -> int:
        if self.n_kv_heads is not None:
            return self.n_kv_heads
        return 1 if self.multi_query_attention else self.n_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def feed_forward_size(self) -> int:
        return self.mlp_hidden_size if self.mlp_hidden_size is not None else self.mlp_ratio * self.d_model

    @property
    def logits_size(self) -> int:
        """Width of LLaDA's logits: the (possibly padded) embedding table, not ``vocab_size``."""
        return self.embedding_size or self.vocab_size


# LLaDA-config keys whose other values LLaDA's code supports and this implementation does not: key -> allowed
SUPPORTED_SETTINGS: dict[str, tuple[Any, ...]] = {
    "block_type": ("llama",),
    "activation_type": ("silu",),
    "layer_norm_type": ("rms",),
    "layer_norm_with_affine": (True,),
    "rope": (True,),
    "alibi": (False,),
    "attention_layer_norm": (False,),
    "block_group_size": (1,),
}


def unsupported_settings(config: dict[str, Any]) -> list[str]:
    """``key=value`` for every setting of a LLaDA ``config.json`` dict that this implementation cannot run."""
    defaults = LLaDAConfig()
    problems = [
        f"{key}={config.get(key, getattr(defaults, key))!r}"
        for key, allowed in SUPPORTED_SETTINGS.items()
        if config.get(key, getattr(defaults, key)) not in allowed
    ]
    norm_bias = config.get("bias_for_layer_norm")
    if norm_bias or (norm_bias is None and config.get("include_bias", False)):
        problems.append("bias_for_layer_norm=True (a bias in the RMS norms)")
    return problems


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """LLaDA's rotary tables in fp32: ``cat(f, f)`` with ``f = position * theta^(-2i/d)``.  # [B, L] -> 2 x [B, L, D]

    Computed on the fly (no buffer), so weights loaded onto a meta device never leave it stale.
    """
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim)
    )  # [D/2]
    freqs = position_ids.float()[..., None] * inv_freq  # [B, L, D/2]
    angles = torch.cat((freqs, freqs), dim=-1)  # [B, L, D]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, full_precision: bool) -> torch.Tensor:
    """Rotate ``x`` [B, H, L, D] by ``cos``/``sin`` [B, L, D]; in fp32 when LLaDA's ``rope_full_precision`` says so."""
    work = x.float() if full_precision else x
    cos, sin = cos[:, None].to(work.dtype), sin[:, None].to(work.dtype)  # [B, 1, L, D]
    return (work * cos + rotate_half(work) * sin).to(x.dtype)


class LLaDALlamaBlock(GradientCheckpointingLayer):
    """One LLaDA block (``block_type: "llama"``), parameter names as published."""

    def __init__(self, config: LLaDAConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.n_heads // config.num_key_value_heads  # read by the attention functions
        self.scaling = self.head_dim**-0.5
        self.is_causal = False
        d_model, kv_width, qkv_bias = (
            config.d_model,
            config.num_key_value_heads * config.head_dim,
            bool(config.include_bias or config.include_qkv_bias),
        )
        self.attn_norm = LlamaRMSNorm(d_model, eps=config.rms_norm_eps)
        self.ff_norm = LlamaRMSNorm(d_model, eps=config.rms_norm_eps)
        self.q_proj = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.k_proj = nn.Linear(d_model, kv_width, bias=qkv_bias)
        self.v_proj = nn.Linear(d_model, kv_width, bias=qkv_bias)
        self.attn_out = nn.Linear(d_model, d_model, bias=config.include_bias)
        self.ff_proj = nn.Linear(d_model, config.feed_forward_size, bias=config.include_bias)
        self.up_proj = nn.Linear(d_model, config.feed_forward_size, bias=config.include_bias)
        self.ff_out = nn.Linear(config.feed_forward_size, d_model, bias=config.include_bias)
        self.dropout = nn.Dropout(config.residual_dropout)

    def forward(
        self,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor | None,
        rope: tuple[torch.Tensor, torch.Tensor],
        past_key_values: Cache | None = None,
    ) -> torch.Tensor:
        batch, length, _ = hidden.shape
        normed = self.attn_norm(hidden)  # [B, L, d]
        shape = (batch, length, -1, self.head_dim)
        query = self.q_proj(normed).view(shape).transpose(1, 2)  # [B, H, L, D]
        key = self.k_proj(normed).view(shape).transpose(1, 2)  # [B, Hkv, L, D]
        value = self.v_proj(normed).view(shape).transpose(1, 2)  # [B, Hkv, L, D]
        cos, sin = rope
        query = apply_rope(query, cos, sin, self.config.rope_full_precision)
        key = apply_rope(key, cos, sin, self.config.rope_full_precision)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)  # [B, Hkv, P + L, D]
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        attended, _ = attention(
            self,
            query,
            key,
            value,
            attention_mask,
            scaling=self.scaling,
            is_causal=False,
            dropout=self.config.attention_dropout if self.training else 0.0,
        )  # [B, L, H, D]
        hidden = hidden + self.dropout(self.attn_out(attended.reshape(batch, length, -1)))
        return hidden + self.dropout(self.feed_forward(self.ff_norm(hidden)))

    def feed_forward(self, normed: torch.Tensor) -> torch.Tensor:
        """The SwiGLU feed-forward (its own method so the training engine can give it a lean backward,
        :mod:`diffugrpo_plugin.models.lean_mlp`).  # [B, L, d] -> [B, L, d]"""
        return self.ff_out(F.silu(self.ff_proj(normed)) * self.up_proj(normed))


class LLaDAPreTrainedModel(PreTrainedModel):
    config_class = LLaDAConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["LLaDALlamaBlock"]
    _supports_sdpa = True
    _tied_weights_keys = None


class LLaDAModel(LLaDAPreTrainedModel):
    """The body: ``model.transformer`` with ``wte``, ``blocks``, ``ln_f`` and (untied) ``ff_out``.

    ``forward`` returns the final hidden states after ``ln_f``; :class:`LLaDAModelLM` projects them.
    """

    def __init__(self, config: LLaDAConfig):
        super().__init__(config)
        problems = unsupported_settings(config.to_dict())
        if problems:
            raise ValueError(f"this LLaDA configuration needs LLaDA's own modeling code: {', '.join(problems)}")
        parts = {
            "wte": nn.Embedding(config.logits_size, config.d_model),
            "emb_drop": nn.Dropout(config.embedding_dropout),
            "ln_f": LlamaRMSNorm(config.d_model, eps=config.rms_norm_eps),
            "blocks": nn.ModuleList(LLaDALlamaBlock(config, i) for i in range(config.n_layers)),
        }
        if not config.weight_tying:
            parts["ff_out"] = nn.Linear(config.d_model, config.logits_size, bias=config.include_bias)
        self.transformer = nn.ModuleDict(parts)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.transformer.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.transformer.wte = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        hidden = self.transformer.wte(input_ids) if inputs_embeds is None else inputs_embeds  # [B, L, d]
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + hidden.shape[1], device=hidden.device)[None].expand(
                hidden.shape[0], -1
            )  # [B, L]
        if self.config.input_emb_norm:
            hidden = hidden * self.config.d_model**0.5
        hidden = self.transformer.emb_drop(hidden)
        mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden, attention_mask=attention_mask, past_key_values=past_key_values
        )
        rope = rope_cos_sin(position_ids, self.config.head_dim, float(self.config.rope_theta))
        for block in self.transformer.blocks:
            hidden = block(hidden, mask, rope, past_key_values)
        return BaseModelOutputWithPast(
            last_hidden_state=self.transformer.ln_f(hidden), past_key_values=past_key_values if use_cache else None
        )


class LLaDAModelLM(LLaDAPreTrainedModel):
    """LLaDA's network: ``forward(input_ids, attention_mask [B, L], position_ids) -> logits [B, L, embedding_size]``.

    No logit shift: the output at position ``i`` scores token ``i``.
    """

    def __init__(self, config: LLaDAConfig):
        super().__init__(config)
        self.model = LLaDAModel(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.transformer.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.transformer.wte = value

    def get_output_embeddings(self) -> nn.Linear | None:
        """The head module; ``None`` with ``weight_tying`` (the head is then ``wte.weight``, not a module)."""
        return None if self.config.weight_tying else self.model.transformer.ff_out

    def head_weight(self) -> torch.Tensor:
        """The vocabulary projection's weight.  # [embedding_size, d_model]"""
        return self.model.transformer.wte.weight if self.config.weight_tying else self.model.transformer.ff_out.weight

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        body = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
        )
        hidden = body.last_hidden_state  # [B, L, d]
        if self.config.weight_tying:
            logits = F.linear(hidden, self.model.transformer.wte.weight)  # [B, L, V]
        else:
            logits = self.model.transformer.ff_out(hidden)  # [B, L, V]
        if self.config.scale_logits:
            logits = logits * (1 / math.sqrt(self.config.d_model))
        return CausalLMOutputWithPast(logits=logits, past_key_values=body.past_key_values)
