"""Stand-in for Dream's published ``modeling_dream.py`` (test fixture, written from its interface).

What it reproduces, as the published copies that hand the mask to SDPA as given do:

* ``DreamModel`` with ``.model`` (Qwen2 names: ``embed_tokens``, ``layers[i].self_attn.{q,k,v,o}_proj``
  with biases on q/k/v only, ``layers[i].mlp.{gate,up,down}_proj``, ``input_layernorm``,
  ``post_attention_layernorm``, ``norm``) and ``.lm_head``.
* Bidirectional attention: ``attention_mask`` goes to ``F.scaled_dot_product_attention`` untouched
  when it is a tensor (so a 2D integer padding mask raises there), and a string such as ``"full"``
  means no mask. ``position_ids`` default to ``0..L-1``.
* Logits are the raw per-position outputs (the caller shifts them: position ``i - 1`` predicts
  token ``i``); ``lm_head(hidden[:, -num_logits_to_keep:])``, so the default 0 keeps every position.

Like the published class it supports transformers' ``gradient_checkpointing_enable()``.

Differences kept on purpose: no key/value cache (the published class can fill one; diffusion
training never asks), rotary tables computed on the fly (no buffer), and the small set of class
attributes transformers 5 needs to build and load a remote-code model.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput
from transformers.modeling_utils import PreTrainedModel

from .configuration_dream import DreamConfig


class DreamRMSNorm(nn.Module):
    """Normalise in fp32, cast back, then scale by the weight."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden):
        dtype = hidden.dtype
        hidden = hidden.to(torch.float32)
        hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * hidden.to(dtype)


def rotary_cos_sin(position_ids, head_dim, theta, dtype):
    """``cat(f, f)`` with ``f = position * theta^(-2i/d)``, in fp32, cast to ``dtype``.  # [B, L] -> 2 x [B, L, D]"""
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=position_ids.device) / head_dim)
    )  # [D/2]
    freqs = position_ids.to(torch.float32)[..., None] * inv_freq  # [B, L, D/2]
    angles = torch.cat((freqs, freqs), dim=-1)  # [B, L, D]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x, cos, sin):
    """x [B, H, L, D], cos/sin [B, L, D] -> [B, H, L, D]"""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def repeat_kv(hidden, groups):
    """Each key/value head repeated ``groups`` times in place (GQA).  # [B, Hkv, L, D] -> [B, Hkv*groups, L, D]"""
    batch, heads, length, dim = hidden.shape
    if groups == 1:
        return hidden
    return hidden[:, :, None].expand(batch, heads, groups, length, dim).reshape(batch, heads * groups, length, dim)


class DreamMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden):
        return self.down_proj(self.act_fn(self.gate_proj(hidden)) * self.up_proj(hidden))


class DreamSdpaAttention(nn.Module):
    """Bidirectional SDPA attention; the mask is SDPA's ``attn_mask`` exactly as the caller gave it."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.is_causal = False
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden, attention_mask, position_embeddings):
        batch, length, _ = hidden.shape
        query = self.q_proj(hidden).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # [B, H, L, D]
        key = self.k_proj(hidden).view(batch, length, -1, self.head_dim).transpose(1, 2)  # [B, Hkv, L, D]
        value = self.v_proj(hidden).view(batch, length, -1, self.head_dim).transpose(1, 2)  # [B, Hkv, L, D]
        cos, sin = position_embeddings
        query, key = apply_rotary(query, cos, sin), apply_rotary(key, cos, sin)
        key = repeat_kv(key, self.num_key_value_groups)  # [B, H, L, D]
        value = repeat_kv(value, self.num_key_value_groups)  # [B, H, L, D]
        attended = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attention_mask if isinstance(attention_mask, torch.Tensor) else None,
            dropout_p=self.config.attention_dropout if self.training else 0.0,
            is_causal=False,
        )  # [B, H, L, D]
        return self.o_proj(attended.transpose(1, 2).reshape(batch, length, -1))


class DreamDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = DreamSdpaAttention(config, layer_idx)
        self.mlp = DreamMLP(config)
        self.input_layernorm = DreamRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = DreamRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden, attention_mask, position_embeddings):
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), attention_mask, position_embeddings)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class DreamPreTrainedModel(PreTrainedModel):
    config_class = DreamConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["DreamDecoderLayer"]
    _skip_keys_device_placement = "past_key_values"
    _supports_sdpa = True

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=std)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, DreamRMSNorm):
            module.weight.data.fill_(1.0)


class DreamBaseModel(DreamPreTrainedModel):
    """The decoder body: embeddings, bidirectional layers, final norm."""

    def __init__(self, config):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList(DreamDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = DreamRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.gradient_checkpointing = False  # transformers' gradient_checkpointing_enable() switches it
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(
        self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, output_hidden_states=False
    ):
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        hidden = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds  # [B, L, d]
        if position_ids is None:
            position_ids = torch.arange(hidden.shape[1], device=hidden.device)[None]  # [1, L]
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        position_embeddings = rotary_cos_sin(position_ids, head_dim, float(self.config.rope_theta), hidden.dtype)
        all_hidden = [] if output_hidden_states else None
        for layer in self.layers:
            if output_hidden_states:
                all_hidden.append(hidden)
            if self.gradient_checkpointing and self.training:
                hidden = self._gradient_checkpointing_func(layer.__call__, hidden, attention_mask, position_embeddings)
            else:
                hidden = layer(hidden, attention_mask, position_embeddings)
        hidden = self.norm(hidden)
        if output_hidden_states:
            all_hidden.append(hidden)
        return BaseModelOutput(last_hidden_state=hidden, hidden_states=tuple(all_hidden) if all_hidden else None)


class DreamModel(DreamPreTrainedModel):
    # transformers 5 reads a {target: source} dict (the published file has a v4 list)
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.model = DreamBaseModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def get_decoder(self):
        return self.model

    def forward(
        self,
        input_ids: torch.LongTensor = None,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        past_key_values=None,
        inputs_embeds: Optional[torch.FloatTensor] = None,
        labels: Optional[torch.LongTensor] = None,
        use_cache: Optional[bool] = None,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
        return_dict: Optional[bool] = None,
        cache_position: Optional[torch.LongTensor] = None,
        num_logits_to_keep: int = 0,
        **kwargs,
    ):
        if past_key_values is not None or use_cache:
            raise NotImplementedError("this stand-in keeps no key/value cache")
        if labels is not None:
            raise NotImplementedError("this stand-in computes no loss")
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_hidden_states=bool(output_hidden_states),
        )
        hidden = outputs.last_hidden_state  # [B, L, d]
        logits = self.lm_head(hidden[:, -num_logits_to_keep:, :])  # [B, L, V] for num_logits_to_keep=0
        if not return_dict:
            return (logits,) + ((outputs.hidden_states,) if outputs.hidden_states is not None else ())
        return MaskedLMOutput(logits=logits, hidden_states=outputs.hidden_states)
