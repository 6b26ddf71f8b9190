"""SDAR (and TraDo, which is SDAR fine-tuned) on the transformers that verl pins: Qwen3 run as a block-diffusion LM.

SDAR's dense models (``model_type: "sdar"``, ``SDARForCausalLM``) are Qwen3 decoders: per-head ``q_norm`` /
``k_norm`` RMS norms on queries and keys, full RoPE, SwiGLU, an untied ``lm_head`` allowed. SDAR-MoE
(``"sdar_moe"``, ``SDARMoeForCausalLM``) is Qwen3-MoE: each sparse layer's ``mlp`` is a ``gate`` (softmax over
``num_experts``, top ``num_experts_per_tok``, renormalised over those when ``norm_topk_prob``) and ``experts.N``
SwiGLUs of width ``moe_intermediate_size``. Module and parameter names are the published checkpoints', so their
``config.json`` and safetensors load without remote code or a key mapping.

They attend block-causally (:mod:`.block_attention`): ``forward`` takes a 4D mask (boolean or additive) as given,
and builds the block-causal one from ``position_ids`` for ``None`` or a 2D padding mask. ``past_key_values`` is a
cache of finished blocks; ``store_kv=False`` reads it without writing (a block being denoised), ``store_kv=True``
(the default, as in transformers) appends to it. No logit shift: the output at ``i`` scores token ``i``.

What differs from SDAR's own code, on purpose: no ``flash_attn`` / liger / flex imports (attention goes through
transformers' ``sdpa`` / ``eager`` functions); no training path inside ``forward`` (the published one adds noise
and builds the ``[x_t | x_0]`` layout itself when ``self.training``: here the layout is the caller's,
:func:`~.block_attention.training_layout`); ``store_kv`` defaults to True where SDAR's defaults to a read.
Settings SDAR's code supports and this does not are refused by :func:`unsupported_settings` with their key.
"""

from __future__ import annotations

from typing import Any

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRMSNorm, eager_attention_forward

from diffugrpo_plugin.models.native.block_attention import (
    BlockSwiGLU,
    apply_rotary,
    cached_length,
    forward_mask,
    rotary_tables,
    run_experts,
    with_cache,
)

MODEL_TYPE = "sdar"
MOE_MODEL_TYPE = "sdar_moe"
BLOCK_SIZE = 4  # SDAR's published block; SDAR-MoE's config.json does not state it (SGLang hard-codes 4 too)


@strict
class SDARConfig(PreTrainedConfig):
    """SDAR's ``config.json`` fields that shape the network, with its published defaults."""

    model_type = MODEL_TYPE
    keys_to_ignore_at_inference = ["past_key_values"]

    vocab_size: int = 151936
    hidden_size: int = 4096
    intermediate_size: int = 22016
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = 32
    head_dim: int | None = 128
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    use_cache: bool = True
    tie_word_embeddings: bool = False
    rope_theta: float | int = 10000.0
    rope_scaling: dict | None = None
    attention_bias: bool = False
    use_sliding_window: bool = False
    sliding_window: int | None = 4096
    max_window_layers: int = 28
    attention_dropout: float | int = 0.0
    block_size: int = BLOCK_SIZE
    mask_token_id: int | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    is_causal: bool = False

    def __post_init__(self, **kwargs):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        super().__post_init__(**kwargs)


@strict
class SDARMoeConfig(SDARConfig):
    """SDAR-MoE's ``config.json``: SDAR's fields plus Qwen3-MoE's routing ones."""

    model_type = MOE_MODEL_TYPE

    hidden_size: int = 2048
    intermediate_size: int = 6144
    num_hidden_layers: int = 48
    num_key_value_heads: int | None = 4
    decoder_sparse_step: int = 1
    moe_intermediate_size: int = 768
    num_experts_per_tok: int = 8
    num_experts: int = 128
    norm_topk_prob: bool = False
    output_router_logits: bool = False
    router_aux_loss_coef: float = 0.001
    mlp_only_layers: list[int] | None = None


# SDAR-config keys whose other values SDAR's code accepts and this implementation does not: key -> allowed
SUPPORTED_SETTINGS: dict[str, tuple[Any, ...]] = {
    "hidden_act": ("silu",),
    "rope_scaling": (None,),
    "use_sliding_window": (False,),
}


def unsupported_settings(config: dict[str, Any]) -> list[str]:
    """``key=value`` for every setting of an SDAR / SDAR-MoE ``config.json`` dict this implementation cannot run."""
    return [
        f"{key}={config[key]!r}"
        for key, allowed in SUPPORTED_SETTINGS.items()
        if key in config and config[key] not in allowed
    ]


def is_sparse_layer(config: SDARConfig, layer_idx: int) -> bool:
    """Whether layer ``layer_idx`` is a mixture of experts (Qwen3-MoE's rule)."""
    experts = getattr(config, "num_experts", 0) or 0
    dense = getattr(config, "mlp_only_layers", None) or ()
    step = getattr(config, "decoder_sparse_step", 1) or 1
    return experts > 0 and layer_idx not in dense and (layer_idx + 1) % step == 0


class SDARAttention(nn.Module):
    """Qwen3 attention under its published names; keys and values through a cache of finished blocks."""

    def __init__(self, config: SDARConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads  # read by attention fns
        self.scaling = self.head_dim**-0.5
        self.is_causal = False
        heads, kv_heads, bias = config.num_attention_heads, config.num_key_value_heads, config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        past_key_values: Cache | None,
        store_kv: bool,
    ) -> torch.Tensor:
        batch, length, _ = hidden.shape
        shape = (batch, length, -1, self.head_dim)
        query = self.q_norm(self.q_proj(hidden).view(shape)).transpose(1, 2)  # [B, H, L, D]
        key = self.k_norm(self.k_proj(hidden).view(shape)).transpose(1, 2)  # [B, Hkv, L, D]
        value = self.v_proj(hidden).view(shape).transpose(1, 2)  # [B, Hkv, L, D]
        cos, sin = rope
        query, key = apply_rotary(query, cos, sin), apply_rotary(key, cos, sin)
        key, value = with_cache(past_key_values, key, value, self.layer_idx, store_kv)  # [B, Hkv, cached + L, D]
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        attended, _ = attention(
            self,
            query,
            key,
            value,
            mask,
            scaling=self.scaling,
            is_causal=False,
            dropout=self.config.attention_dropout if self.training else 0.0,
        )  # [B, L, H, D]
        return self.o_proj(attended.reshape(batch, length, -1))


class SDARSparseMoeBlock(nn.Module):
    """Qwen3-MoE's experts layer: softmax router, top-k, renormalised over the chosen k when ``norm_topk_prob``."""

    def __init__(self, config: SDARMoeConfig):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList(
            BlockSwiGLU(config.hidden_size, config.moe_intermediate_size) for _ in range(config.num_experts)
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        flat = hidden.reshape(-1, hidden.shape[-1])  # [N, H]
        probs = torch.softmax(self.gate(flat), dim=-1, dtype=torch.float32)  # [N, E]
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # [N, k]
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return run_experts(self.experts, flat, chosen, weights.to(flat.dtype)).view(hidden.shape)


class SDARDecoderLayer(GradientCheckpointingLayer):
    """One SDAR / SDAR-MoE layer, parameter names as published."""

    def __init__(self, config: SDARConfig, layer_idx: int):
        super().__init__()
        self.self_attn = SDARAttention(config, layer_idx)
        self.mlp = (
            SDARSparseMoeBlock(config)
            if is_sparse_layer(config, layer_idx)
            else BlockSwiGLU(config.hidden_size, config.intermediate_size)
        )
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        past_key_values: Cache | None = None,
        store_kv: bool = True,
    ) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), mask, rope, past_key_values, store_kv)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class SDARPreTrainedModel(PreTrainedModel):
    config_class = SDARConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["SDARDecoderLayer"]
    _supports_sdpa = True


class SDARModel(SDARPreTrainedModel):
    """The body: ``embed_tokens``, ``layers``, ``norm``; returns the final hidden states after ``norm``."""

    def __init__(self, config: SDARConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(SDARDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        store_kv: bool = True,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        hidden = block_body_inputs(self.embed_tokens, input_ids, inputs_embeds)  # [B, L, H]
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        position_ids, mask = block_positions_and_mask(
            self.config, hidden, attention_mask, position_ids, past_key_values
        )
        rope = rotary_tables(position_ids, self.config.head_dim, float(self.config.rope_theta), hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, mask, rope, past_key_values, store_kv)
        return BaseModelOutputWithPast(
            last_hidden_state=self.norm(hidden), past_key_values=past_key_values if use_cache else None
        )


def block_body_inputs(
    embedding: nn.Embedding, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None
) -> torch.Tensor:
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids and inputs_embeds")
    return embedding(input_ids) if inputs_embeds is None else inputs_embeds


def block_positions_and_mask(
    config: Any,
    hidden: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    past_key_values: Cache | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``position_ids`` (default: after the cached tokens) and the 4D mask the attention functions get."""
    cached = cached_length(past_key_values)
    if position_ids is None:
        position_ids = torch.arange(cached, cached + hidden.shape[1], device=hidden.device)[None].expand(
            hidden.shape[0], -1
        )  # [B, L]
    additive = config._attn_implementation not in ("sdpa", "flex_attention")
    mask = forward_mask(attention_mask, position_ids, config.block_size, cached, hidden.dtype, additive)
    return position_ids, mask


class SDARForCausalLM(SDARPreTrainedModel):
    """SDAR's network: ``forward(input_ids, attention_mask, position_ids, past_key_values, store_kv) -> logits``.

    ``logits`` [B, L, vocab_size]; no logit shift: the output at ``i`` scores token ``i``.
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: SDARConfig):
        super().__init__(config)
        self.model = SDARModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        store_kv: bool = True,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        body = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            store_kv=store_kv,
        )
        return CausalLMOutputWithPast(logits=self.lm_head(body.last_hidden_state), past_key_values=body.past_key_values)


class SDARMoeForCausalLM(SDARForCausalLM):
    """SDAR-MoE's network: the same forward, sparse layers as its config says."""

    config_class = SDARMoeConfig
