"""Tiny local masked diffusion LMs, built in code on demand into the cache (:mod:`diffugrpo_plugin.data.cache`).

* Dream-style: stock ``transformers.Qwen2ForCausalLM`` run bidirectionally
  (``config.is_causal = False``) with shifted logits (``config.diffusion_logits_shift = True``),
  the layout of Dream and DiffuCoder.
* LLaDA-style: stock ``LlamaForCausalLM``, bidirectional, unshifted logits.
* SDAR-style: our native ``SDARForCausalLM`` (Qwen3 body, block-causal, blocks of 4), unshifted logits.
* LLaDA2-style: our native ``LLaDA2MoeModelLM`` (a dense first layer, then 4 experts in 2 groups with a shared
  expert, partial rotary), block-causal in blocks of 8 (the published 32 would leave a tiny job's response one
  block), unshifted logits.

Both carry ``config.mask_token_id`` and use the tokenizer of :mod:`diffugrpo_plugin.models.tokenizer`;
weights are a seeded random init (a few MB in float32) and are never committed: they are
rebuilt from code. The warm-started default RL model is built on top of these by
:mod:`diffugrpo_plugin.training.warm_start`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from diffugrpo_plugin.data.cache import build_once, diffugrpo_home
from diffugrpo_plugin.models.tokenizer import TOKENIZER_VERSION, build_tokenizer

MODEL_VERSION = 1
"""Bump when the architecture or init of the tiny models changes: cached copies are keyed by it."""

FAMILIES = {
    # family: (config class, model class, logits shifted); transformers' classes, or our native ones (module path)
    "dream": ("Qwen2Config", "Qwen2ForCausalLM", True),
    "llada": ("LlamaConfig", "LlamaForCausalLM", False),
    "sdar": ("native.sdar.SDARConfig", "native.sdar.SDARForCausalLM", False),
    "llada2": ("native.llada2.LLaDA2MoeConfig", "native.llada2.LLaDA2MoeModelLM", False),
}
BLOCK_SIZES = {"sdar": 4, "llada2": 8}
LLADA2_ROUTING = dict(
    num_experts=4,
    num_experts_per_tok=2,
    n_group=2,  # two experts a group: a group scores the sum of its best two
    topk_group=1,
    num_shared_experts=1,
    first_k_dense_replace=1,
    routed_scaling_factor=2.5,
    partial_rotary_factor=0.5,
    use_qk_norm=True,
    # LLaDA2's config class defaults to dropout 0.1; RL's old / new log-probs must come from the same network
    embedding_dropout=0.0,
    attention_dropout=0.0,
    output_dropout=0.0,
)


def _class(name: str):
    """A transformers class by name, or one of our native classes by ``native.<module>.<Class>``."""
    import importlib

    import transformers

    if not name.startswith("native."):
        return getattr(transformers, name)
    _, module, cls = name.split(".")
    return getattr(importlib.import_module(f"diffugrpo_plugin.models.native.{module}"), cls)


@dataclass(frozen=True)
class TinySpec:
    """Shape and seed of a tiny model. The defaults train a step on 2 CPU cores in well under a second."""

    family: str = "dream"
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown tiny model family '{self.family}'. Known families: {', '.join(FAMILIES)}.")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must divide by num_heads ({self.num_heads}) "
                f"and num_heads by num_kv_heads ({self.num_kv_heads})"
            )
        if (self.hidden_size // self.num_heads) % 2:
            raise ValueError(
                f"hidden_size / num_heads ({self.hidden_size} / {self.num_heads}) must be even: rotary positions "
                "rotate the head's dimensions in pairs"
            )

    @property
    def cache_name(self) -> str:
        """Directory name in the cache: every field that changes the weights, plus both versions."""
        return (
            f"tiny-{self.family}-h{self.hidden_size}-l{self.num_layers}-a{self.num_heads}"
            f"-kv{self.num_kv_heads}-f{self.intermediate_size}-p{self.max_positions}-s{self.seed}"
            f"-tok{TOKENIZER_VERSION}-v{MODEL_VERSION}"
        )


def tiny_config(spec: TinySpec, tokenizer: Any):
    """The transformers config of a tiny model for ``tokenizer`` (vocabulary = the whole tokenizer)."""
    config_name, _, shift = FAMILIES[spec.family]
    extra: dict[str, Any] = {}
    if spec.family in BLOCK_SIZES:
        extra.update(block_size=BLOCK_SIZES[spec.family], mask_token_id=tokenizer.mask_token_id)
        extra["head_dim"] = spec.hidden_size // spec.num_heads
    if spec.family == "llada2":
        extra.update(LLADA2_ROUTING, moe_intermediate_size=spec.intermediate_size // 4)
    config = _class(config_name)(
        **extra,
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,  # halves the parameters; the vocabulary dominates at this size
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        use_cache=False,  # a bidirectional model cannot reuse a key/value cache
    )
    config.is_causal = False
    if spec.family not in BLOCK_SIZES:  # the block families' records say it
        config.diffusion_logits_shift = shift
    config.mask_token_id = tokenizer.mask_token_id
    config.tiny_spec = asdict(spec)  # provenance: how to rebuild these exact weights
    return config


def build_tiny_model(spec: TinySpec = TinySpec(), tokenizer: Any = None) -> torch.nn.Module:
    """A freshly initialised tiny model in float32. Same spec (and tokenizer), same weights.

    Initialisation draws from a forked RNG seeded with ``spec.seed``: the caller's global
    RNG state is left untouched.
    """
    tokenizer = tokenizer if tokenizer is not None else build_tokenizer()
    config = tiny_config(spec, tokenizer)
    model_class = _class(FAMILIES[spec.family][1])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        return model_class._from_config(config, attn_implementation="sdpa", dtype=torch.float32)


def save_tiny_model(directory: str | os.PathLike, spec: TinySpec = TinySpec()) -> Path:
    """Build a tiny model and its tokenizer into ``directory`` as an HF checkpoint."""
    directory = Path(directory)
    tokenizer = build_tokenizer()
    model = build_tiny_model(spec, tokenizer)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def tiny_model_path(spec: TinySpec = TinySpec()) -> str:
    """Path of the cached checkpoint for ``spec``, built on first use (safe across processes)."""
    target = diffugrpo_home() / "models" / spec.cache_name
    return str(build_once(target, lambda staging: save_tiny_model(staging, spec)))


def default_tiny_model_path(family: str = "dream", seed: int = 0) -> str:
    """The default tiny model of a family (Dream-style unless asked), built once into the cache."""
    return tiny_model_path(TinySpec(family=family, seed=seed))
