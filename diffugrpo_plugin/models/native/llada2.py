"""LLaDA2.0 / 2.1 (``model_type: "llada2_moe"``, ``LLaDA2MoeModelLM``) on the transformers that verl pins.

A Bailing-MoE-v2 (Ling 2.0) decoder run as a block-diffusion LM. Per layer, as published:

* attention: one fused ``attention.query_key_value`` projection (queries, then keys, then values, by heads),
  ``query_layernorm`` / ``key_layernorm`` RMS norms over each head, RoPE on the first ``partial_rotary_factor`` of
  each head's dimensions only, the output projection ``attention.dense``;
* feed-forward: the first ``first_k_dense_replace`` layers a SwiGLU ``mlp`` of width ``intermediate_size``; the
  others a mixture of experts: a sigmoid router in fp32 (``mlp.gate.weight``) whose choice of experts adds the
  per-expert ``mlp.gate.expert_bias`` and is group-limited (the experts form ``n_group`` groups, a group scores the
  sum of its best two, the best ``topk_group`` groups are eligible, the top ``num_experts_per_tok`` experts among
  them are taken); the chosen experts are weighted by their unbiased scores renormalised over the chosen ones, times
  ``routed_scaling_factor``; plus ``mlp.shared_experts``, one SwiGLU of width ``moe_intermediate_size x
  num_shared_experts`` every token goes through;
* ``model.word_embeddings``, ``model.norm`` and an ``lm_head`` (tied when ``tie_word_embeddings``).

As in the published code, the query/key norms are applied whatever ``use_qk_norm`` says and the chosen experts'
weights are renormalised whatever ``norm_topk_prob`` says (with one expert per token: not renormalised).

Attention is block-causal (:mod:`.block_attention`) with the same ``forward`` as our SDAR class: a 4D mask as
given, else the block-causal mask from ``position_ids`` and ``config.block_size`` (32, LLaDA2's published block;
its ``config.json`` does not state one), a cache of finished blocks read with ``store_kv=False``. No logit shift.
The published code keeps no block cache (its ``generate()`` recomputes the prefix at every step); its ``forward``
appends to a cache it is given, as ``store_kv=True`` does here.
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
    rotary_tables,
    run_experts,
    with_cache,
)
from diffugrpo_plugin.models.native.sdar import block_body_inputs, block_positions_and_mask

MODEL_TYPE = "llada2_moe"
BLOCK_SIZE = 32  # LLaDA2's published block (its generate() default, SGLang's table); not in its config.json


@strict
class LLaDA2MoeConfig(PreTrainedConfig):
    """LLaDA2's ``config.json`` fields that shape the network, with its published defaults."""

    model_type = MODEL_TYPE
    keys_to_ignore_at_inference = ["past_key_values"]

    vocab_size: int = 30592
    hidden_size: int = 1024
    intermediate_size: int | None = None
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    num_key_value_heads: int = 0
    hidden_act: str = "silu"
    use_qkv_bias: bool = False
    use_qk_norm: bool = False
    use_bias: bool = True
    rms_norm_eps: float = 1e-5
    norm_head: bool = False
    tie_word_embeddings: bool = False
    embedding_dropout: float | int = 0.1
    attention_dropout: float | int = 0.1
    output_dropout: float | int = 0.1
    initializer_range: float = 0.02
    max_position_embeddings: int = 16384
    rope_theta: float | int = 10000.0
    use_cache: bool = True
    use_sliding_window: bool = False
    sliding_window: int | None = 4096
    max_window_layers: int = 28
    rope_scaling: dict | None = None
    pad_token_id: int | None = 126081
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    num_experts: int | None = 16
    num_shared_experts: int | None = 0
    num_experts_per_tok: int = 2
    n_group: int = 8
    topk_group: int = 4
    routed_scaling_factor: float = 2.5
    moe_intermediate_size: int | None = None
    first_k_dense_replace: int = 0
    head_dim: int | None = None
    output_router_logits: bool = False
    partial_rotary_factor: float = 0.5
    score_function: str = "sigmoid"
    moe_router_enable_expert_bias: bool = True
    rotary_dim: int | None = None
    block_size: int = BLOCK_SIZE
    mask_token_id: int | None = None
    is_causal: bool = False

    def __post_init__(self, **kwargs):
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        super().__post_init__(**kwargs)

    @property
    def rope_dim(self) -> int:
        """Rotated dimensions per head: ``head_dim x partial_rotary_factor``, as the published code computes them (its
        config.json's ``rotary_dim`` is not read there, nor here)."""
        return int(self.head_dim * self.partial_rotary_factor)


# LLaDA2-config keys whose other values LLaDA2's code (or a variant of it) accepts and this does not: key -> allowed
SUPPORTED_SETTINGS: dict[str, tuple[Any, ...]] = {
    "hidden_act": ("silu",),
    "rope_scaling": (None,),
    "score_function": ("sigmoid",),
    "use_sliding_window": (False,),
    "norm_head": (False,),
    "using_split_qkv_in_self_attention": (False,),
}


def unsupported_settings(config: dict[str, Any]) -> list[str]:
    """``key=value`` for every setting of a LLaDA2 ``config.json`` dict this implementation cannot run."""
    problems = [
        f"{key}={config[key]!r}"
        for key, allowed in SUPPORTED_SETTINGS.items()
        if key in config and config[key] not in allowed
    ]
    if config.get("num_experts") and config.get("n_group"):
        per_group = config["num_experts"] // config["n_group"]
        if config["num_experts"] % config["n_group"] or per_group < 2:
            problems.append(
                f"num_experts={config['num_experts']} in n_group={config['n_group']} groups (a group's score is the "
                f"sum of its best two experts: each group needs at least 2, all the same size)"
            )
    return problems


class LLaDA2MoeAttention(nn.Module):
    """Fused-QKV attention with per-head query/key RMS norms and partial RoPE, names as published."""

    def __init__(self, config: LLaDA2MoeConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads  # read by the attention functions
        self.scaling = self.head_dim**-0.5
        self.is_causal = False
        self.query_key_value = nn.Linear(
            config.hidden_size,
            (self.num_heads + 2 * self.num_key_value_heads) * self.head_dim,
            bias=config.use_qkv_bias,
        )
        self.query_layernorm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.key_layernorm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.dense = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=config.use_bias)

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        past_key_values: Cache | None,
        store_kv: bool,
    ) -> torch.Tensor:
        batch, length, _ = hidden.shape
        qkv = self.query_key_value(hidden).view(batch, length, -1, self.head_dim)  # [B, L, H + 2 Hkv, D]
        query, key, value = (
            part.transpose(1, 2)
            for part in qkv.split([self.num_heads, self.num_key_value_heads, self.num_key_value_heads], dim=2)
        )  # [B, H, L, D], [B, Hkv, L, D] x 2
        cos, sin = rope
        query = apply_rotary(self.query_layernorm(query), cos, sin)
        key = apply_rotary(self.key_layernorm(key), cos, sin)
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
        return self.dense(attended.reshape(batch, length, -1))


class LLaDA2MoeGate(nn.Module):
    """The group-limited, bias-corrected sigmoid router (computed in fp32, as published)."""

    def __init__(self, config: LLaDA2MoeConfig):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.n_group = config.n_group
        self.topk_group = config.topk_group
        self.routed_scaling_factor = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))
        self.register_buffer("expert_bias", torch.zeros(config.num_experts))  # saved: checkpoints carry it

    def forward(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(chosen [N, k] expert ids, weights [N, k] fp32)`` for hidden states ``flat`` [N, H]."""
        scores = torch.sigmoid(torch.nn.functional.linear(flat.float(), self.weight.float()))  # [N, E]
        biased = scores + self.expert_bias  # [N, E]: used to choose, not to weigh
        tokens = biased.shape[0]
        grouped = biased.view(tokens, self.n_group, -1)  # [N, G, E / G]
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)  # [N, G]
        kept = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(
            1, group_scores.topk(self.topk_group, dim=-1, sorted=False).indices, True
        )  # [N, G]
        eligible = biased.masked_fill(~kept[..., None].expand_as(grouped).reshape(tokens, -1), float("-inf"))
        chosen = eligible.topk(self.top_k, dim=-1).indices  # [N, k]
        weights = scores.gather(1, chosen)  # [N, k]
        if self.top_k > 1:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return chosen, weights * self.routed_scaling_factor


class LLaDA2MoeSparseMoeBlock(nn.Module):
    """Routed experts plus the shared expert every token goes through."""

    def __init__(self, config: LLaDA2MoeConfig):
        super().__init__()
        self.gate = LLaDA2MoeGate(config)
        self.experts = nn.ModuleList(
            BlockSwiGLU(config.hidden_size, config.moe_intermediate_size) for _ in range(config.num_experts)
        )
        self.shared_experts = (
            BlockSwiGLU(config.hidden_size, config.moe_intermediate_size * config.num_shared_experts)
            if config.num_shared_experts
            else None
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        flat = hidden.reshape(-1, hidden.shape[-1])  # [N, H]
        chosen, weights = self.gate(flat)
        out = run_experts(self.experts, flat, chosen, weights).view(hidden.shape)
        return out if self.shared_experts is None else out + self.shared_experts(hidden)


class LLaDA2MoeDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: LLaDA2MoeConfig, layer_idx: int):
        super().__init__()
        self.attention = LLaDA2MoeAttention(config, layer_idx)
        sparse = config.num_experts is not None and layer_idx >= config.first_k_dense_replace
        self.mlp = (
            LLaDA2MoeSparseMoeBlock(config) if sparse else BlockSwiGLU(config.hidden_size, config.intermediate_size)
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
        hidden = hidden + self.attention(self.input_layernorm(hidden), mask, rope, past_key_values, store_kv)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LLaDA2MoePreTrainedModel(PreTrainedModel):
    config_class = LLaDA2MoeConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["LLaDA2MoeDecoderLayer"]
    _supports_sdpa = True

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, LLaDA2MoeGate):
            # transformers' own init functions: they leave a tensor alone once a checkpoint has loaded it
            from transformers import initialization

            initialization.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            initialization.zeros_(module.expert_bias)


class LLaDA2MoeModel(LLaDA2MoePreTrainedModel):
    """The body: ``word_embeddings``, ``layers``, ``norm``; returns the final hidden states after ``norm``."""

    def __init__(self, config: LLaDA2MoeConfig):
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(LLaDA2MoeDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.word_embeddings = value

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
        hidden = block_body_inputs(self.word_embeddings, input_ids, inputs_embeds)  # [B, L, H]
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        position_ids, mask = block_positions_and_mask(
            self.config, hidden, attention_mask, position_ids, past_key_values
        )
        rope = rotary_tables(position_ids, self.config.rope_dim, float(self.config.rope_theta), hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, mask, rope, past_key_values, store_kv)
        return BaseModelOutputWithPast(
            last_hidden_state=self.norm(hidden), past_key_values=past_key_values if use_cache else None
        )


class LLaDA2MoeModelLM(LLaDA2MoePreTrainedModel):
    """LLaDA2's network: ``forward(input_ids, attention_mask, position_ids, past_key_values, store_kv) -> logits``.

    ``logits`` [B, L, vocab_size] in fp32 (the published head's output is cast so); no logit shift.
    """

    _tied_weights_keys = {"lm_head.weight": "model.word_embeddings.weight"}

    def __init__(self, config: LLaDA2MoeConfig):
        super().__init__(config)
        self.model = LLaDA2MoeModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.word_embeddings = value

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
        logits = self.lm_head(body.last_hidden_state).float()  # [B, L, V]
        return CausalLMOutputWithPast(logits=logits, past_key_values=body.past_key_values)
