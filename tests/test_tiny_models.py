"""Tiny local diffusion LMs: family conventions, bidirectional attention, determinism, cached builds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from diffugrpo_plugin.models import tiny
from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained
from diffugrpo_plugin.models.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One saved checkpoint per family, shared by the tests that only read them."""
    root = tmp_path_factory.mktemp("tiny")
    return {family: tiny.save_tiny_model(root / family, tiny.TinySpec(family=family)) for family in tiny.FAMILIES}


@pytest.mark.parametrize(
    "family, architecture, shift", [("dream", "Qwen2ForCausalLM", True), ("llada", "LlamaForCausalLM", False)]
)
def test_saved_checkpoint_loads_and_wraps_with_the_family_convention(saved, family, architecture, shift):
    from transformers import AutoTokenizer

    model = load_pretrained(str(saved[family]))
    tokenizer = AutoTokenizer.from_pretrained(saved[family])
    assert type(model).__name__ == architecture
    assert model.config.is_causal is False and model.config.diffusion_logits_shift is shift
    assert model.config.vocab_size == len(tokenizer)
    lm = DiffusionLM.wrap(model, tokenizer)
    assert lm.mask_token_id == tokenizer.mask_token_id == tokenizer.convert_tokens_to_ids("<|mask|>")
    assert lm.shift_logits is shift
    assert DiffusionLM.wrap(model).mask_token_id == lm.mask_token_id  # the config alone is enough


@pytest.mark.parametrize("family", list(tiny.FAMILIES))
def test_reloaded_weights_give_the_built_models_logits(saved, tok, family):
    built = tiny.build_tiny_model(tiny.TinySpec(family=family), tok).eval()
    loaded = load_pretrained(str(saved[family])).eval()
    ids = torch.tensor([tok("def f(x):\n    return x + 1").input_ids])  # [1, L]
    with torch.no_grad():
        assert torch.equal(built(input_ids=ids).logits, loaded(input_ids=ids).logits)


@pytest.mark.parametrize("family", list(tiny.FAMILIES))
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_attention_is_bidirectional_and_ignores_padding(tok, family, implementation):
    """Bidirectional over the canvas, or, for a block-diffusion family, within the first token's block."""
    model = tiny.build_tiny_model(tiny.TinySpec(family=family), tok).eval()
    model.set_attn_implementation(implementation)
    ids = torch.tensor([tok("def f(x):\n    return x + 1").input_ids])  # [1, L]
    block_size = getattr(model.config, "block_size", None)
    later = -1 if block_size is None else min(block_size, ids.shape[1]) - 1  # the last token the first one sees
    changed_last = ids.clone()
    changed_last[0, later] = tok.mask_token_id
    with torch.no_grad():
        first = model(input_ids=ids).logits[0, 0]  # [V]
        assert not torch.allclose(first, model(input_ids=changed_last).logits[0, 0]), "a later token must be seen"

        pad = 3
        padded = torch.cat([torch.full((1, pad), 7), ids], dim=1)  # [1, pad + L], arbitrary junk in the pads
        other_junk = padded.clone()
        other_junk[0, :pad] = 11
        mask = torch.ones_like(padded)
        mask[0, :pad] = 0
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        a = model(input_ids=padded, attention_mask=mask, position_ids=positions).logits[0, pad:]  # [L, V]
        b = model(input_ids=other_junk, attention_mask=mask, position_ids=positions).logits[0, pad:]
        unpadded = model(input_ids=ids).logits[0]
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(a, unpadded, atol=1e-4)


def test_same_seed_same_weights_and_the_global_rng_is_untouched(tok):
    torch.manual_seed(123)
    expected_next = torch.rand(4)
    torch.manual_seed(123)
    first = tiny.build_tiny_model(tiny.TinySpec(seed=5), tok).state_dict()
    assert torch.equal(torch.rand(4), expected_next)
    second = tiny.build_tiny_model(tiny.TinySpec(seed=5), tok).state_dict()
    third = tiny.build_tiny_model(tiny.TinySpec(seed=6), tok).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.equal(first["model.embed_tokens.weight"], third["model.embed_tokens.weight"])


def test_default_model_is_small(saved):
    weights = saved["dream"] / "model.safetensors"
    assert weights.stat().st_size < 8e6
    model = load_pretrained(str(saved["dream"]))
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    assert model.config.tie_word_embeddings


def test_spec_rejects_unknown_family_and_bad_shapes():
    with pytest.raises(ValueError, match="Known families: dream, llada"):
        tiny.TinySpec(family="gpt")
    with pytest.raises(ValueError, match="must divide"):
        tiny.TinySpec(hidden_size=130, num_heads=4)
    # head size 3: rotary positions would fail at the first forward, deep in the attention
    with pytest.raises(ValueError, match=r"hidden_size / num_heads \(24 / 8\) must be even"):
        tiny.TinySpec(hidden_size=24, num_heads=8, num_kv_heads=2)


def test_default_model_is_built_once_into_a_versioned_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("DIFFUGRPO_HOME", str(tmp_path))
    path = Path(tiny.default_tiny_model_path())
    assert path.parent == tmp_path / "models"
    assert f"tok{tiny.TOKENIZER_VERSION}" in path.name and f"v{tiny.MODEL_VERSION}" in path.name
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert Path(tiny.default_tiny_model_path()) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert Path(tiny.default_tiny_model_path("llada")) != path
    assert sorted(p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")) == sorted(
        [path.name, Path(tiny.default_tiny_model_path("llada")).name]
    )  # no staging left behind
