"""Stand-in for LLaDA's published ``modeling_llada.py`` (test fixture, written from its interface).

What it reproduces (``block_type: "llama"``, RMS norms, SiLU gate, RoPE, no biases by default):

* ``LLaDAModelLM(PreTrainedModel)`` whose ``.model`` is a plain ``nn.Module`` holding
  ``.transformer = ModuleDict(wte, emb_drop, blocks, ln_f[, ff_out])``; ``ff_out`` (the head)
  exists only without ``weight_tying``. Blocks carry ``attn_norm``, ``q_proj``, ``k_proj``,
  ``v_proj``, ``attn_out``, ``ff_norm``, ``ff_proj``, ``up_proj``, ``ff_out``.
* ``forward(input_ids, inputs_embeds, attention_mask, attention_bias, past_key_values, labels,
  use_cache, output_attentions, output_hidden_states, return_dict, cache_position)``: no
  ``position_ids`` and no ``**kwargs`` (passing either raises ``TypeError``); positions are always
  ``0..L-1``; a 2D mask with any zero becomes an additive bias ``[B, 1, 1, L]`` of ``finfo.min`` on
  padded keys (a mask of ones, like none, means no bias; ``attention_bias`` itself is ignored, as
  in the published code); a key/value cache is refused with an assertion.
* Logits: ``F.linear(x, wte.weight)`` with ``weight_tying``, else ``transformer.ff_out(x)``;
  ``get_output_embeddings()`` returns ``wte`` (the INPUT embedding) when tied.
* Registers itself with ``AutoModel`` at import, as the published file does.
* No ``supports_gradient_checkpointing``: transformers' ``gradient_checkpointing_enable()`` raises, as
  for the published class (which has its own ``set_activation_checkpointing`` strategies instead).

Differences kept on purpose: only the ``llama`` block with RMS norms and SiLU is built (other
variants raise ``NotImplementedError``), rotary tables are computed on the fly, and the class
calls ``post_init()`` and has no v4-style ``tie_weights()`` override, which transformers 5 needs.
"""

import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_llada import LLaDAConfig


class RMSLayerNorm(nn.Module):
    """Normalise in fp32, cast back to the input dtype, then scale by the weight."""

    def __init__(self, config, size=None):
        super().__init__()
        self.eps = config.rms_norm_eps
        self.weight = nn.Parameter(torch.ones(size or config.d_model))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(q, k, theta, full_precision):
    """Rotate q/k [B, H, L, D] by positions ``0..L-1`` (fp32 when ``full_precision``)."""
    work_q, work_k = (q.float(), k.float()) if full_precision else (q, k)
    length, head_dim = work_q.shape[-2], work_q.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=q.device, dtype=torch.float32) / head_dim))
    freqs = torch.arange(length, device=q.device, dtype=torch.float32)[:, None] * inv_freq  # [L, D/2]
    angles = torch.cat((freqs, freqs), dim=-1)  # [L, D]
    cos, sin = angles.cos().to(work_q.dtype), angles.sin().to(work_q.dtype)  # [L, D]
    rotated_q = work_q * cos + rotate_half(work_q) * sin
    rotated_k = work_k * cos + rotate_half(work_k) * sin
    return rotated_q.type_as(q), rotated_k.type_as(k)


class LLaDALlamaBlock(nn.Module):
    def __init__(self, layer_id, config):
        super().__init__()
        if config.activation_type != "silu" or config.layer_norm_type != "rms" or not config.rope:
            raise NotImplementedError("this stand-in builds only llama blocks with rms norms, silu and rope")
        self.layer_id = layer_id
        self.config = config
        hidden = config.mlp_hidden_size if config.mlp_hidden_size is not None else config.mlp_ratio * config.d_model
        head_dim = config.d_model // config.n_heads
        kv_width = config.effective_n_kv_heads * head_dim
        qkv_bias = bool(config.include_bias or config.include_qkv_bias)
        self.dropout = nn.Dropout(config.residual_dropout)
        self.act = nn.SiLU()
        self.attn_norm = RMSLayerNorm(config)
        self.ff_norm = RMSLayerNorm(config)
        self.q_proj = nn.Linear(config.d_model, config.d_model, bias=qkv_bias)
        self.k_proj = nn.Linear(config.d_model, kv_width, bias=qkv_bias)
        self.v_proj = nn.Linear(config.d_model, kv_width, bias=qkv_bias)
        self.attn_out = nn.Linear(config.d_model, config.d_model, bias=config.include_bias)
        self.ff_proj = nn.Linear(config.d_model, hidden, bias=config.include_bias)
        self.up_proj = nn.Linear(config.d_model, hidden, bias=config.include_bias)
        self.ff_out = nn.Linear(hidden, config.d_model, bias=config.include_bias)

    def attention(self, q, k, v, attention_bias):
        batch, length, width = q.shape
        heads, head_dim = self.config.n_heads, width // self.config.n_heads
        q = q.view(batch, length, heads, head_dim).transpose(1, 2)  # [B, H, L, D]
        k = k.view(batch, length, -1, head_dim).transpose(1, 2)  # [B, Hkv, L, D]
        v = v.view(batch, length, -1, head_dim).transpose(1, 2)  # [B, Hkv, L, D]
        q, k = rope(q, k, float(self.config.rope_theta), self.config.rope_full_precision)
        if attention_bias is not None:  # in the compute dtype; finfo(fp32).min turns -inf in bf16: keep it finite
            attention_bias = attention_bias.to(q.dtype)
            attention_bias = attention_bias.masked_fill(attention_bias == float("-inf"), torch.finfo(q.dtype).min)
        if k.shape[1] != heads:
            k = k.repeat_interleave(heads // k.shape[1], dim=1)  # [B, H, L, D]
            v = v.repeat_interleave(heads // v.shape[1], dim=1)  # [B, H, L, D]
        attended = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attention_bias,
            dropout_p=self.config.attention_dropout if self.training else 0.0,
            is_causal=False,
        )  # [B, H, L, D]
        return self.attn_out(attended.transpose(1, 2).contiguous().view(batch, length, width))

    def forward(self, x, attention_bias=None):
        normed = self.attn_norm(x)
        x = x + self.dropout(
            self.attention(self.q_proj(normed), self.k_proj(normed), self.v_proj(normed), attention_bias)
        )
        normed = self.ff_norm(x)
        return x + self.dropout(self.ff_out(self.act(self.ff_proj(normed)) * self.up_proj(normed)))


class LLaDAModel(nn.Module):
    """The network itself (a plain module, as published): ``transformer`` holds every weight."""

    def __init__(self, config):
        super().__init__()
        if config.block_type != "llama":
            raise NotImplementedError(f"this stand-in builds only block_type 'llama', not {config.block_type!r}")
        self.config = config
        width = config.embedding_size or config.vocab_size
        parts = dict(
            wte=nn.Embedding(width, config.d_model),
            emb_drop=nn.Dropout(config.embedding_dropout),
            ln_f=RMSLayerNorm(config),
            blocks=nn.ModuleList(LLaDALlamaBlock(i, config) for i in range(config.n_layers)),
        )
        if not config.weight_tying:
            parts["ff_out"] = nn.Linear(config.d_model, width, bias=config.include_bias)
        self.transformer = nn.ModuleDict(parts)

    def forward(
        self,
        input_ids,
        input_embeddings=None,
        attention_mask=None,
        attention_bias=None,
        past_key_values=None,
        use_cache=False,
        output_hidden_states=None,
    ):
        assert not self.config.alibi, "Alibi length extrapolation is not supported for MDM."
        assert self.config.rope, "Rope must be used in Llama-Encoder for MDM."
        assert past_key_values is None and not use_cache, "The kvcache is not supported for MDM."
        x = self.transformer.wte(input_ids) if input_embeddings is None else input_embeddings  # [B, L, d]
        batch = x.shape[0]
        if self.config.input_emb_norm:
            x = x * self.config.d_model**0.5
        x = self.transformer.emb_drop(x)
        if attention_mask is not None and 0.0 in attention_mask:
            keep = attention_mask.to(torch.float).view(batch, -1)[:, None, None, :]  # [B, 1, 1, L]
            attention_bias = (1.0 - keep) * torch.finfo(keep.dtype).min  # [B, 1, 1, L]
        else:
            attention_bias = None  # the published code drops a caller's attention_bias here too
        hidden_states = []
        for block in self.transformer.blocks:
            if output_hidden_states:
                hidden_states.append(x)
            x = block(x, attention_bias=attention_bias)
        x = self.transformer.ln_f(x)
        if output_hidden_states:
            hidden_states.append(x)
        if self.config.weight_tying:
            logits = F.linear(x, self.transformer.wte.weight, None)  # [B, L, V]
        else:
            logits = self.transformer.ff_out(x)  # [B, L, V]
        if self.config.scale_logits:
            logits = logits * (1 / math.sqrt(self.config.d_model))
        return logits, tuple(hidden_states) if output_hidden_states else None


class LLaDAModelLM(PreTrainedModel):
    config_class = LLaDAConfig
    base_model_prefix = "model"
    _no_split_modules = ["LLaDALlamaBlock"]

    def __init__(self, config: LLaDAConfig, model: Optional[LLaDAModel] = None, init_params: bool = False):
        super().__init__(config)
        self.model = model if model is not None else LLaDAModel(config)
        self.post_init()  # transformers 5 needs it (the published class does not call it)

    def _init_weights(self, module):
        std = self.config.init_std
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                module.bias.data.zero_()
        elif isinstance(module, RMSLayerNorm):
            module.weight.data.fill_(1.0)

    def forward(
        self,
        input_ids: torch.LongTensor = None,
        inputs_embeds: Optional[torch.FloatTensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        attention_bias: Optional[torch.Tensor] = None,
        past_key_values: Optional[List[torch.FloatTensor]] = None,
        labels: Optional[torch.LongTensor] = None,
        use_cache: Optional[bool] = None,
        output_attentions: Optional[bool] = None,
        output_hidden_states: Optional[bool] = None,
        return_dict: Optional[bool] = None,
        cache_position=None,
    ):
        if use_cache is None:
            use_cache = self.config.use_cache
        if output_attentions:
            raise ValueError("output_attentions is not yet supported in LLaDA")
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        logits, hidden_states = self.model(
            input_ids=input_ids,
            input_embeddings=inputs_embeds,
            attention_mask=attention_mask,
            attention_bias=attention_bias,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
        )
        if not return_dict:
            return (logits,) + ((hidden_states,) if hidden_states is not None else ())
        return CausalLMOutputWithPast(logits=logits, hidden_states=hidden_states)

    def get_input_embeddings(self):
        return self.model.transformer.wte

    def set_input_embeddings(self, value):
        self.model.transformer.wte = value

    def get_output_embeddings(self):
        if self.config.weight_tying:
            return self.model.transformer.wte
        return self.model.transformer.ff_out

    def set_output_embeddings(self, value):
        if self.config.weight_tying:
            self.model.transformer.wte = value
        else:
            self.model.transformer.ff_out = value


# Registered at import, as the published file does.
AutoModel.register(LLaDAConfig, LLaDAModelLM)
