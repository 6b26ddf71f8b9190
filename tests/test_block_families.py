"""The block-diffusion families (SDAR, SDAR-MoE, LLaDA2.x): our native classes against the published code, their
masks and block cache, and what ``check-model --config-only`` says about the published configs.

The published code is not run here: ``tests/fixtures/block_families/make_reference.py`` ran it once in a scratch
environment (ENVIRONMENT.md beside it) and saved its logits; the weights are rebuilt from the same seed recipe
(imported from that script), and their checksum proves it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import DynamicCache

from diffugrpo_plugin.cli import main as cli_main
from diffugrpo_plugin.models.families import BLOCK_SIZES, LLADA2, SDAR, SDAR_MOE
from diffugrpo_plugin.models.native import llada2, sdar
from diffugrpo_plugin.models.native.block_attention import (
    block_causal_mask,
    training_layout,
    training_layout_mask,
)
from family_standins import tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "block_families"
RECORD = json.loads((FIXTURES / "reference.json").read_text())
TENSORS = load_file(str(FIXTURES / "reference.safetensors"))
TOLERANCE = 1e-4
CLASSES = {
    "sdar": (sdar.SDARConfig, sdar.SDARForCausalLM),
    "sdar_moe": (sdar.SDARMoeConfig, sdar.SDARMoeForCausalLM),
    "llada2": (llada2.LLaDA2MoeConfig, llada2.LLaDA2MoeModelLM),
}


def _recipe():
    spec = importlib.util.spec_from_file_location("make_reference", FIXTURES / "make_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECIPE = _recipe()


def native_model(name: str) -> torch.nn.Module:
    case = RECORD["cases"][name]
    config_class, model_class = CLASSES[case["family"]]
    config = config_class(**case["config"])
    config._attn_implementation = "sdpa"
    model = model_class(config).eval()
    checksum = RECIPE.fill_weights(model, case["seed"], case["config"]["tie_word_embeddings"])
    assert checksum == case["weights_checksum"], "the seed recipe did not rebuild the published run's weights"
    return model


def test_the_reference_covers_what_the_issue_asks():
    """>= 6 configs: dense and MoE, tied and untied, GQA, partial rotary; and the published code agreed with itself."""
    configs = [case["config"] for case in RECORD["cases"].values()]
    families = {case["family"] for case in RECORD["cases"].values()}
    assert len(configs) >= 6 and families == {"sdar", "sdar_moe", "llada2"}
    assert {c["tie_word_embeddings"] for c in configs} == {True, False}
    assert any(c["num_key_value_heads"] < c["num_attention_heads"] for c in configs)
    assert any(c.get("partial_rotary_factor", 1.0) < 1.0 for c in configs)
    for case in RECORD["cases"].values():
        assert case.get("published_cached_vs_recomputed", 0.0) < TOLERANCE
        assert case.get("published_flex_vs_sdpa_training", 0.0) < TOLERANCE
        if "dare_copy" in case:
            assert case["dare_copy"]["training_vs_reference"] < TOLERANCE


@pytest.mark.parametrize("name", sorted(RECORD["cases"]))
def test_training_layout_logits_equal_the_published_code(name):
    """``[x_t | x_0]`` with the block mask: all 2L logits within 1e-4 of the published code's (fp32)."""
    model, case = native_model(name), RECORD["cases"][name]
    clean, noisy = TENSORS[f"{name}/clean_ids"], TENSORS[f"{name}/noisy_ids"]
    positions = torch.arange(clean.shape[1])[None].expand(clean.shape[0], -1)
    ids, doubled, mask = training_layout(noisy, clean, positions, case["config"]["block_size"])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=doubled).logits
    assert (logits - TENSORS[f"{name}/training_logits"]).abs().max() < TOLERANCE


@pytest.mark.parametrize("name", sorted(RECORD["cases"]))
def test_cached_block_by_block_equals_the_published_code_and_our_recompute(name):
    """Blocks 1.. denoised over the exact cache of the clean earlier blocks (read-only), as SDAR's generate.py runs it,
    equal the published code's and a no-cache recompute; a read-only step leaves the cache as it was."""
    model, case = native_model(name), RECORD["cases"][name]
    block = case["config"]["block_size"]
    clean, noisy = TENSORS[f"{name}/clean_ids"], TENSORS[f"{name}/noisy_ids"]
    batch, length = clean.shape
    cache, cached, recomputed = DynamicCache(), [], []
    with torch.no_grad():
        for start in range(0, length, block):
            end = start + block
            positions = torch.arange(start, end)[None].expand(batch, -1)
            if start:
                out = model(
                    input_ids=noisy[:, start:end],
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                    store_kv=False,
                )
                assert cache.get_seq_length() == start
                cached.append(out.logits)
                prefix = torch.cat((clean[:, :start], noisy[:, start:end]), dim=1)
                recomputed.append(model(input_ids=prefix).logits[:, start:end])  # block-causal from position 0
            model(input_ids=clean[:, start:end], position_ids=positions, past_key_values=cache, use_cache=True)
    reference = TENSORS[f"{name}/blockwise_logits"]
    assert (torch.cat(cached, dim=1) - reference).abs().max() < TOLERANCE
    assert (torch.cat(recomputed, dim=1) - reference).abs().max() < TOLERANCE


def test_left_padding_changes_nothing_with_positions_over_real_tokens():
    model = native_model("llada2_partial_half")
    ids = TENSORS["llada2_partial_half/clean_ids"][:1]  # [1, 12]
    padded = torch.cat((torch.zeros(1, 3, dtype=torch.long), ids), dim=1)
    real = torch.cat((torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)), dim=1)
    positions = (real.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        alone = model(input_ids=ids).logits
        shifted = model(input_ids=padded, attention_mask=real, position_ids=positions).logits[:, 3:]
    assert (alone - shifted).abs().max() < 1e-5


def test_masks_by_hand():
    """Blocks of 2 over 4 tokens: the block-causal mask and the training layout's four quadrants."""
    positions = torch.arange(4)[None]
    causal = block_causal_mask(positions, positions, 2)[0, 0].int()
    assert causal.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    layout = training_layout_mask(positions, 2)[0, 0].int()
    noisy_to_noisy, noisy_to_clean = layout[:4, :4], layout[:4, 4:]
    clean_to_noisy, clean_to_clean = layout[4:, :4], layout[4:, 4:]
    assert noisy_to_noisy.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]  # own block only
    assert noisy_to_clean.tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]  # earlier blocks
    assert clean_to_noisy.sum() == 0
    assert clean_to_clean.tolist() == causal.tolist()
    # a padded key is no key to anyone; a row left with nothing sees everything (no NaN), never read by a real token
    padded = block_causal_mask(positions, positions, 2, torch.tensor([[0, 1, 1, 1]]))[0, 0].int()
    assert padded[:, 0].tolist() == [0, 0, 0, 0] and padded[0].tolist() == [0, 1, 0, 0]
    empty = block_causal_mask(positions, positions, 2, torch.tensor([[0, 0, 1, 1]]))[0, 0].int()
    assert empty[:2].tolist() == [[1, 1, 1, 1]] * 2 and empty[2:].tolist() == [[0, 0, 1, 1]] * 2


def test_family_constants_agree_with_the_native_defaults():
    assert (sdar.SDARConfig().block_size, sdar.SDARMoeConfig().block_size) == (BLOCK_SIZES["sdar"],) * 2
    assert llada2.LLaDA2MoeConfig().block_size == BLOCK_SIZES["llada2_moe"] == LLADA2.default_block_size


# ---------------------------------------------------------------------------------------------
# check-model --config-only on the published config.json files
# ---------------------------------------------------------------------------------------------


# config file -> family, block size and its source, mask id and its source, parameters (safetensors index total_size
# / 2 where the weights are bf16: 4B, 8B, 30B-A3B), active parameters (MoE)
PUBLISHED = {
    "sdar_1.7b": ("sdar", 4, "config.json block_size", 151669, "model config (mask_token_id)", None, None),
    "sdar_4b": ("sdar", 4, "config.json block_size", 151669, "model config (mask_token_id)", 4_411_424_256, None),
    "sdar_8b": ("sdar", 4, "config.json block_size", 151669, "model config (mask_token_id)", 8_190_735_360, None),
    "sdar_30b_a3b": (
        "sdar_moe",
        4,
        "the sdar_moe family's published block (config.json states none)",
        151669,
        "the sdar_moe family's published mask id",
        30_532_122_624,
        None,
    ),
    "llada2_mini": (
        "llada2",
        32,
        "the llada2 family's published block (config.json states none)",
        "<|mask|>",
        "tokenizer token '<|mask|>'",
        None,
        None,
    ),
    "llada2_flash": (
        "llada2",
        32,
        "the llada2 family's published block (config.json states none)",
        "<|mask|>",
        "tokenizer token '<|mask|>'",
        None,
        None,
    ),
}


def checkpoint_without_mask_token(tmp_path: Path, name: str) -> Path:
    """The published config.json beside our tokenizer with its mask token removed (so the config or the family is
    what names the mask id, as it is for a tokenizer without one)."""
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text((FIXTURES / "configs" / f"{name}.json").read_text())
    tokenizer().save_pretrained(path)
    settings = json.loads((path / "tokenizer_config.json").read_text())
    settings.pop("mask_token", None)
    (path / "tokenizer_config.json").write_text(json.dumps(settings))
    return path


# the two largest (a meta-device build of every expert) run with the slow tests
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in ("sdar_30b_a3b", "llada2_flash") else name
        for name in PUBLISHED
    ],
)
def test_check_model_resolves_the_published_configs(name, tmp_path, capsys):
    family, block, block_source, mask, mask_source, parameters, _ = PUBLISHED[name]
    path = checkpoint_without_mask_token(tmp_path, name)
    if isinstance(mask, str):  # a family token name our tokenizer has too (LLaDA2's real one: <|mask|> = 156895)
        mask = tokenizer().get_vocab()[mask]
    code = cli_main(["check-model", str(path), "--config-only", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    r = report["resolution"]
    assert (r["family"], r["implementation"], r["logits_shift"]) == (family, "native", False)
    assert (r["block_size"], r["block_size_source"]) == (block, block_source)
    assert (r["mask_token_id"], r["mask_token_source"]) == (mask, mask_source)
    if parameters is not None:
        assert r["parameters"] == parameters
    moe = family != "sdar"
    assert (r["experts"] is not None, r["active_parameters"] is not None) == (moe, moe)
    if moe:
        assert r["active_parameters"] < r["parameters"] / 5  # e.g. 30B-A3B: about 3B of 30B active
        assert report["estimate"]["flops"]["forward"] < 2 * r["parameters"] * 5 * 456
    assert report["estimate"]["memory"]["total_gib"] > 0
    # the coupled pass runs [x_t | x_0]: the estimate counts 2L tokens a view and the [2L, 2L] boolean mask
    assert report["estimate"]["setup"]["block_layout"] is True
    terms = {term["name"]: term for term in report["estimate"]["memory"]["terms"]}
    setup = report["estimate"]["setup"]
    doubled = 2 * (setup["prompt_length"] + setup["completion_length"])
    assert terms["block layout: boolean [x_t | x_0] attention mask"]["bytes"] == 3 * setup["batch"] * doubled**2
    text_code = cli_main(["check-model", str(path), "--config-only"])
    text = capsys.readouterr().out
    assert text_code == 0 and f"block size          {block}, from {block_source}" in text
    assert "(each run as [x_t | x_0], twice as long: the block layout)" in text


def test_detection_of_the_block_families():
    for name, family in (("sdar_4b", SDAR), ("sdar_30b_a3b", SDAR_MOE), ("llada2_mini", LLADA2)):
        config = json.loads((FIXTURES / "configs" / f"{name}.json").read_text())
        assert family.matches(config)
