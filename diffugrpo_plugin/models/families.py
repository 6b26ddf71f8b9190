"""The built-in model families, ``dream`` (alias ``diffucoder``), ``llada``, the block-diffusion ``sdar`` (alias
``trado``), ``sdar_moe`` and ``llada2`` (alias ``llada2_moe``), and ``bidirectional`` (a stock transformers model run
with ``is_causal: false``, like our tiny models): their calling conventions and the hook that registers them (the ``diffugrpo.model_families`` entry point names this module). What a family is, and what it
says about a checkpoint: :mod:`diffugrpo_plugin.models.family`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.models.family import ModelFamily, takes_padding_mask
from diffugrpo_plugin.models.lean_mlp import SwiGLUBlocks

LLADA_MASK_TOKEN_ID = 126336  # `<|mdm_mask|>`; LLaDA's generate.py hard-codes it, its config does not carry it


# ---------------------------------------------------------------------------------------------
# Calling conventions: (module, input_ids [B, L], attention_mask [B, L] 0/1, position_ids [B, L]) -> logits
# ---------------------------------------------------------------------------------------------


def _logits_of(out: Any) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out[0]


def call_with_padding_mask(module, input_ids, attention_mask, position_ids) -> torch.Tensor:
    """Stock transformers and our native classes: 2D mask, explicit positions, no cache."""
    return _logits_of(
        module(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    )


def dream_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor | str:
    """Dream's own mask form: ``"full"`` without padding, else a 4D boolean ``[B, 1, L, L]``.

    Real queries see real keys only, as in Dream's generation code; a padded query sees itself,
    where Dream's code leaves it no key at all (NaN in some SDPA kernels, which the next layer's
    attention would mix into real rows).
    """
    real = attention_mask.bool()  # [B, L]
    if bool(real.all()):
        return "full"
    allowed = real[:, None, :, None] & real[:, None, None, :]  # [B, 1, L, L]
    diagonal = torch.eye(real.shape[1], dtype=torch.bool, device=real.device)[None, None]  # [1, 1, L, L]
    return allowed | (diagonal & ~real[:, None, :, None])


def call_dream_published(module, input_ids, attention_mask, position_ids) -> torch.Tensor:
    """Dream's published code: the mask as built by :func:`dream_attention_mask`, positions over real tokens."""
    if takes_padding_mask(module):
        return call_with_padding_mask(module, input_ids, attention_mask, position_ids)
    return _logits_of(
        module(input_ids=input_ids, attention_mask=dream_attention_mask(attention_mask), position_ids=position_ids)
    )


def call_llada_published(module, input_ids, attention_mask, position_ids) -> torch.Tensor:
    """LLaDA's published code: no ``position_ids`` parameter (positions are ``0..L-1``, which with left
    padding shifts every real token equally: RoPE attention depends on differences only), and a 2D mask."""
    if takes_padding_mask(module):
        return call_with_padding_mask(module, input_ids, attention_mask, position_ids)
    padded = not bool(attention_mask.bool().all())
    # use_cache stated: the published forward reads config.use_cache, which transformers 5 drops
    return _logits_of(module(input_ids=input_ids, attention_mask=attention_mask if padded else None, use_cache=False))


def call_block_published(module, input_ids, attention_mask, position_ids) -> torch.Tensor:
    """SDAR's and LLaDA2's published code: the block-causal mask over ``position_ids`` built here, as a 4D boolean
    ``[B, 1, L, L]`` (their ``forward`` turns a 2D mask into a causal one, or fails on it); no cache. A 4D mask
    (the training layout's) is passed as given."""
    from diffugrpo_plugin.models.native.block_attention import block_causal_mask

    if takes_padding_mask(module) or not (isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2):
        return call_with_padding_mask(module, input_ids, attention_mask, position_ids)
    config = getattr(module, "config", None)
    block_size = getattr(config, "block_size", None) or BLOCK_SIZES[getattr(config, "model_type", "")]
    mask = block_causal_mask(position_ids, position_ids, block_size, attention_mask)
    return _logits_of(module(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False))


# ---------------------------------------------------------------------------------------------
# The family record
# ---------------------------------------------------------------------------------------------


BIDIRECTIONAL = ModelFamily(
    name="bidirectional",
    description="a stock transformers model run with is_causal: false (our tiny models)",
    call=call_with_padding_mask,
    attention_convention="2D padding mask + position_ids (cumsum of the mask - 1)",
    final_norm="model.norm",
    head="lm_head",
    embedding="model.embed_tokens",
    logits_shift=None,
    mask_token_names=(),  # a stock model states its mask id (config or tokenizer) or is told it
    # transformers' Llama-style MLPs: forward(x) = down_proj(act_fn(gate_proj(x)) * up_proj(x))
    swiglu=SwiGLUBlocks(classes=("LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP")),
)


def _unless_class_default(config: Any, key: str) -> Any:
    """``config.<key>``, or None when it only repeats the config class's default.

    LLaDA's published config class fills a missing ``mask_token_id`` with OLMo's 50256, a
    meaningless id for LLaDA; only a value its ``config.json`` states is a mask id.
    """
    value = getattr(config, key, None)
    default = getattr(type(config)(), key, None)
    return None if default is not None and value == default else value


def _llada_kv_heads(config: Any) -> None:
    """verl's engine reads ``num_key_value_heads``; LLaDA's published config names it ``n_kv_heads``
    (None: as many as the query heads)."""
    if not hasattr(config, "num_key_value_heads"):
        config.num_key_value_heads = getattr(config, "n_kv_heads", None) or config.num_attention_heads


def _dream_native():
    from diffugrpo_plugin.models.native.dream import DreamConfig, DreamModel

    return DreamConfig, DreamModel


def _llada_native():
    from diffugrpo_plugin.models.native.llada import LLaDAConfig, LLaDAModelLM

    return LLaDAConfig, LLaDAModelLM


def _llada_unsupported(config: dict) -> list[str]:
    from diffugrpo_plugin.models.native.llada import unsupported_settings

    return unsupported_settings(config)


DREAM = ModelFamily(
    name="dream",
    description="Dream / DiffuCoder: Qwen2 body, bidirectional, shifted logits",
    call=call_dream_published,
    attention_convention=(
        'native: 2D padding mask + position_ids; published code: "full" or a 4D boolean '
        "mask (query and key real) + position_ids"
    ),
    final_norm="model.norm",
    head="lm_head",
    embedding="model.embed_tokens",
    logits_shift=True,
    model_types=("Dream",),
    code_files=("modeling_dream",),
    architectures=("DreamModel",),
    native=_dream_native,
    swiglu=SwiGLUBlocks(classes=("Qwen2MLP", "DreamMLP")),  # native: Qwen2's MLP; published: DreamMLP, the same code
)

LLADA = ModelFamily(
    name="llada",
    description="LLaDA: Llama-style body with its own weight names, bidirectional, unshifted logits",
    call=call_llada_published,
    attention_convention=(
        "native: 2D padding mask + position_ids; published code: 2D mask only, no position_ids (positions 0..L-1)"
    ),
    final_norm="model.transformer.ln_f",
    head="model.transformer.ff_out",
    embedding="model.transformer.wte",
    logits_shift=False,
    model_types=("llada",),
    code_files=("modeling_llada",),
    architectures=("LLaDAModelLM",),
    mask_token_names=("<|mdm_mask|>", "<|mask|>"),
    default_mask_token_id=LLADA_MASK_TOKEN_ID,
    config_mask_token_id=lambda config: _unless_class_default(config, "mask_token_id"),
    native=_llada_native,
    native_unsupported=_llada_unsupported,
    complete_remote_config=_llada_kv_heads,
    logit_scale=lambda config: 1 / math.sqrt(config.d_model) if getattr(config, "scale_logits", False) else 1.0,
    # our native block's feed_forward(); the published block computes its feed-forward inline and is left as it is
    swiglu=SwiGLUBlocks(
        classes=("LLaDALlamaBlock",),
        method="feed_forward",
        gate="ff_proj",
        up="up_proj",
        down="ff_out",
        activation=None,
    ),
)


def _sdar_native():
    from diffugrpo_plugin.models.native.sdar import SDARConfig, SDARForCausalLM

    return SDARConfig, SDARForCausalLM


def _sdar_moe_native():
    from diffugrpo_plugin.models.native.sdar import SDARMoeConfig, SDARMoeForCausalLM

    return SDARMoeConfig, SDARMoeForCausalLM


def _llada2_native():
    from diffugrpo_plugin.models.native.llada2 import LLaDA2MoeConfig, LLaDA2MoeModelLM

    return LLaDA2MoeConfig, LLaDA2MoeModelLM


def _sdar_unsupported(config: dict) -> list[str]:
    from diffugrpo_plugin.models.native.sdar import unsupported_settings

    return unsupported_settings(config)


def _llada2_unsupported(config: dict) -> list[str]:
    from diffugrpo_plugin.models.native.llada2 import unsupported_settings

    return unsupported_settings(config)


BLOCK_CONVENTION = (
    "native: a 4D mask (boolean or additive) as given, else block-causal over position_ids (+ 2D padding mask); "
    "a cache of finished blocks, store_kv=False to read it without writing; published code: a 4D block-causal "
    "boolean mask + position_ids"
)
# SDAR's and LLaDA2's published block sizes and mask ids (SGLang's dllm table agrees); from their model_type
BLOCK_SIZES = {"sdar": 4, "sdar_moe": 4, "llada2_moe": 32}
SDAR_MASK_TOKEN_ID = 151669  # `<|MASK|>` (SDAR-1.7B's added_tokens.json: `<MASK>`)
LLADA2_MASK_TOKEN_ID = 156895  # `<|mask|>`
# our native blocks' SwiGLU (dense layers and every expert), and the published files' own MLP classes
BLOCK_SWIGLU = ("BlockSwiGLU",)

SDAR = ModelFamily(
    name="sdar",
    description="SDAR / TraDo: Qwen3 body, block diffusion (block-causal, blocks of 4), unshifted logits",
    call=call_block_published,
    attention_convention=BLOCK_CONVENTION,
    final_norm="model.norm",
    head="lm_head",
    embedding="model.embed_tokens",
    logits_shift=False,
    model_types=("sdar",),
    code_files=("modeling_sdar",),
    architectures=("SDARForCausalLM",),
    mask_token_names=("<|MASK|>", "<MASK>"),
    default_mask_token_id=SDAR_MASK_TOKEN_ID,
    native=_sdar_native,
    native_unsupported=_sdar_unsupported,
    swiglu=SwiGLUBlocks(classes=BLOCK_SWIGLU + ("SDARMLP",)),
    default_block_size=BLOCK_SIZES["sdar"],
    default_sampler="block",
)

SDAR_MOE = ModelFamily(
    name="sdar_moe",
    description="SDAR-MoE: Qwen3-MoE body (softmax top-k experts), block diffusion (blocks of 4), unshifted logits",
    call=call_block_published,
    attention_convention=BLOCK_CONVENTION,
    final_norm="model.norm",
    head="lm_head",
    embedding="model.embed_tokens",
    logits_shift=False,
    model_types=("sdar_moe",),
    code_files=("modeling_sdar_moe",),
    architectures=("SDARMoeForCausalLM",),
    mask_token_names=("<|MASK|>", "<MASK>"),
    default_mask_token_id=SDAR_MASK_TOKEN_ID,
    native=_sdar_moe_native,
    native_unsupported=_sdar_unsupported,
    swiglu=SwiGLUBlocks(classes=BLOCK_SWIGLU + ("SDARMoeMLP",)),
    default_block_size=BLOCK_SIZES["sdar_moe"],
    default_sampler="block",
)

LLADA2 = ModelFamily(
    name="llada2",
    description=(
        "LLaDA2.0 / 2.1: MoE (group-limited sigmoid routing, shared expert), fused QKV, partial RoPE, block "
        "diffusion (blocks of 32), unshifted logits"
    ),
    call=call_block_published,
    attention_convention=BLOCK_CONVENTION,
    final_norm="model.norm",
    head="lm_head",
    embedding="model.word_embeddings",
    logits_shift=False,
    model_types=("llada2_moe",),
    code_files=("modeling_llada2_moe",),
    architectures=("LLaDA2MoeModelLM",),
    mask_token_names=("<|mask|>",),
    default_mask_token_id=LLADA2_MASK_TOKEN_ID,
    native=_llada2_native,
    native_unsupported=_llada2_unsupported,
    swiglu=SwiGLUBlocks(classes=BLOCK_SWIGLU + ("LLaDA2MoeMLP",)),
    default_block_size=BLOCK_SIZES["llada2_moe"],
    default_sampler="block",
)


@hookimpl
def diffugrpo_model_families() -> dict[str, ModelFamily]:
    """The built-in families (registered through the same entry point a third party uses)."""
    return {
        "dream": DREAM,
        "diffucoder": DREAM,
        "llada": LLADA,
        "sdar": SDAR,
        "trado": SDAR,
        "sdar_moe": SDAR_MOE,
        "llada2": LLADA2,
        "llada2_moe": LLADA2,
        "bidirectional": BIDIRECTIONAL,
    }
