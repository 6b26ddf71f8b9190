"""Shared test fixtures: tiny randomly initialised bidirectional models built in code."""

from __future__ import annotations

import pytest
import torch

VOCAB = 64
MASK_ID = 63


def build_tiny_module(style: str, vocab: int = VOCAB, seed: int = 0, tie: bool = False) -> torch.nn.Module:
    """A 2-layer bidirectional HF model: ``dream`` = Qwen2 (shifted logits), ``llada`` = Llama (unshifted)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if style == "dream" else (LlamaConfig, LlamaForCausalLM)
    config = config_cls(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        tie_word_embeddings=tie)
    config.is_causal = False
    config.diffusion_logits_shift = style == "dream"
    config.mask_token_id = vocab - 1
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return model_cls(config).eval()


@pytest.fixture(params=["dream", "llada"])
def tiny_lm(request):
    from diffugrpo_plugin.models import DiffusionLM

    return DiffusionLM.wrap(build_tiny_module(request.param))
