"""LoRA on diffusion LMs: the coupled log-probs through adapters against the merged model's formula, the rollout's
adapter sync, adapter folders, the checks that refuse an adapter where it would be ignored."""

from __future__ import annotations

import asyncio

import pytest
import torch

from conftest import build_tiny_module
from family_standins import dream_standin, llada_standin, llada_tied_standin  # noqa: F401  (fixtures)
from rollout_support import tiny_rollout

RANK, ALPHA = 4, 8


def adapted(module, targets="all-linear", seed=1, **options):
    """``module`` with LoRA adapters whose B is random (peft starts it at 0, which would hide the adapter)."""
    from peft import LoraConfig, TaskType, get_peft_model

    from diffugrpo_plugin.models.lora import accept_causal_lm_wrapper

    model = get_peft_model(
        accept_causal_lm_wrapper(module),
        LoraConfig(task_type=TaskType.CAUSAL_LM, r=RANK, lora_alpha=ALPHA, target_modules=targets, **options),
    )
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


def merged_weights(model) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The base model's weights with every adapter merged as ``W + alpha / r * B @ A`` (the LoRA formula, written
    out here, not peft's merge), as functions of leaf copies of A and B; and those leaves by adapter name."""
    from peft.tuners.lora import LoraLayer

    leaves, weights = {}, {}
    base = model.get_base_model()
    for name, layer in base.named_modules():
        if isinstance(layer, LoraLayer):
            a = layer.lora_A["default"].weight.detach().clone().requires_grad_(True)  # [r, in]
            b = layer.lora_B["default"].weight.detach().clone().requires_grad_(True)  # [out, r]
            leaves[f"{name}.lora_A"], leaves[f"{name}.lora_B"] = a, b
            weights[f"{name}.base_layer.weight"] = layer.base_layer.weight.detach() + ALPHA / RANK * b @ a
    return weights, leaves


def formula_logprobs(model, lm, views, ids) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """sum over views of coef x log_softmax(full logits of the merged model)[token]: the coupled estimate, computed
    on whole logits one view at a time."""
    from torch.func import functional_call

    weights, leaves = merged_weights(model)
    base = model.get_base_model()
    total = torch.zeros(ids.shape)
    with model.disable_adapter():  # the adapters' own path off: only the merged weights act
        for v in range(views.num_views):
            out = functional_call(
                base, weights, kwargs={"input_ids": views.noisy[v], "attention_mask": torch.ones_like(ids)}
            )
            raw = out.logits if hasattr(out, "logits") else out[0]
            raw = torch.cat([raw[:, :1], raw[:, :-1]], 1) if lm.shift_logits else raw
            total = total + views.coef[v] * torch.log_softmax(raw.float(), -1).gather(-1, ids[..., None]).squeeze(-1)
    return total, leaves


def adapter_gradients(model) -> dict[str, torch.Tensor]:
    return {
        name.removeprefix("base_model.model.").replace(".default.weight", ""): parameter.grad
        for name, parameter in model.named_parameters()
        if "lora_" in name
    }


@pytest.mark.parametrize("source", ["qwen2", "llama", "dream_standin", "llada_standin", "llada_tied_standin"])
def test_coupled_logprobs_and_gradients_through_adapters_equal_the_merged_formula(source, request):
    """Our fused head and family hooks look through peft's wrapper: the coupled log-probs with adapters equal the
    formula on the merged model (W + alpha/r BA), and so do the gradients of A and B (for the standins: native
    Dream, native LLaDA untied and tied, loaded from published-layout checkpoints)."""
    from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
    from diffugrpo_plugin.core.masking import make_coupled
    from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained

    if source in ("qwen2", "llama"):
        module, tokenizer = build_tiny_module("dream" if source == "qwen2" else "llada"), None
    else:
        from family_standins import tokenizer as standin_tokenizer

        module, tokenizer = load_pretrained(request.getfixturevalue(source)).eval(), standin_tokenizer()
    model = adapted(module)
    lm = DiffusionLM.wrap(model, tokenizer=tokenizer)
    vocab = model.get_base_model().config.vocab_size
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(5, min(vocab, 60), (2, 12), generator=generator)  # [B, L]
    completion = torch.zeros_like(ids, dtype=torch.bool)
    completion[:, 5:] = True
    views = make_coupled().views(ids, completion, lm.mask_token_id, torch.tensor([3, 4]))
    weights = torch.linspace(0.5, 1.5, ids.numel()).view(ids.shape)  # a loss that weighs tokens differently

    got = coupled_token_logprobs(lm, views, ids, torch.ones_like(ids)).logp  # [B, L]
    (got * weights).sum().backward()
    want, leaves = formula_logprobs(model, lm, views, ids)
    (want * weights).sum().backward()

    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    gradients = adapter_gradients(model)
    assert set(gradients) == set(leaves) and leaves
    for name, leaf in leaves.items():
        assert gradients[name] is not None and leaf.grad is not None, name
        scale = float(leaf.grad.abs().max())  # fp32 sums over thousands of terms: compare relative to the largest
        assert torch.allclose(gradients[name], leaf.grad, atol=1e-5 * scale, rtol=1e-4), name
    assert all(p.grad is None for n, p in model.named_parameters() if "lora_" not in n)  # the base stays frozen


def test_canonical_names_join_what_peft_and_verl_write():
    from diffugrpo_plugin.models.lora import canonical_weight_name

    assert (
        canonical_weight_name("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight")
        == "model.layers.0.self_attn.q_proj.lora_A.weight"
    )
    assert (
        canonical_weight_name("model.layers.0.self_attn.q_proj.lora_B.default.weight")
        == "model.layers.0.self_attn.q_proj.lora_B.weight"
    )
    assert (
        canonical_weight_name("model.layers.0.self_attn.q_proj.base_layer.weight")
        == "model.layers.0.self_attn.q_proj.weight"
    )
    assert canonical_weight_name("model.embed_tokens.lora_embedding_A.default") == "model.embed_tokens.lora_embedding_A"
    assert canonical_weight_name("model.norm.weight") == "model.norm.weight"


@pytest.mark.parametrize("targets, where", [(["q_proj", "lm_head"], "lm_head")])
def test_an_adapter_on_the_vocabulary_head_is_refused(targets, where):
    from diffugrpo_plugin.models.dlm import DiffusionLM
    from diffugrpo_plugin.models.family import ModelConfigError
    from diffugrpo_plugin.models.lora import refuse_adapted_head

    model = adapted(build_tiny_module("dream"), targets=targets)
    with pytest.raises(ModelConfigError, match=f"LoRA adapts '{where}'.*exclude_modules"):
        refuse_adapted_head(model, DiffusionLM.wrap(model).family)
    refuse_adapted_head(adapted(build_tiny_module("dream")), DiffusionLM.wrap(model).family)  # all-linear: fine


def test_an_adapter_on_a_tied_embedding_is_refused(llada_tied_standin):
    from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained
    from diffugrpo_plugin.models.family import ModelConfigError
    from diffugrpo_plugin.models.lora import refuse_adapted_head
    from family_standins import tokenizer

    model = adapted(load_pretrained(llada_tied_standin), targets=["q_proj", "wte"])
    family = DiffusionLM.wrap(model, tokenizer=tokenizer()).family
    with pytest.raises(ModelConfigError, match="'model.transformer.wte'.*tied to the embedding"):
        refuse_adapted_head(model, family)


def test_target_report_names_what_adapts_nothing():
    """d1's seven target names on LLaDA's module names: four adapt something (peft drops the rest silently)."""
    from diffugrpo_plugin.models.lora import target_report

    names = [
        f"model.transformer.blocks.0.{leaf}"
        for leaf in ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out")
    ]
    d1 = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"]
    assert target_report(names, d1) == (["q_proj", "k_proj", "v_proj", "up_proj"], ["o_proj", "down_proj", "gate_proj"])
    assert target_report(names, ["blocks.0.q_proj"]) == (["blocks.0.q_proj"], [])
    assert target_report(names, "all-linear") == ([], [])


def test_adapter_folder_round_trip_merges_into_the_same_model(tmp_path, tiny_model_path, llada_standin):
    """An adapter saved as the engine saves it loads with peft and merges: the merged model's logits equal the
    adapted model's; an adapter for another model is refused by name."""
    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.family import ModelConfigError
    from diffugrpo_plugin.models.lora import adapter_state, apply_adapter, save_adapter

    model = adapted(load_pretrained(tiny_model_path).eval())
    save_adapter(tmp_path / "adapter", adapter_state(model), model.peft_config["default"].to_dict(), tiny_model_path)
    ids = torch.randint(5, 60, (2, 9))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        merged = apply_adapter(load_pretrained(tiny_model_path).eval(), tmp_path / "adapter")
        assert not any("lora_" in name for name, _ in merged.named_parameters())
        assert torch.allclose(merged(input_ids=ids).logits, want, atol=1e-5)
    with pytest.raises(ModelConfigError, match="not a LoRA adapter folder"):
        apply_adapter(load_pretrained(tiny_model_path), tmp_path)
    other = adapted(load_pretrained(llada_standin))
    save_adapter(tmp_path / "other", adapter_state(other), other.peft_config["default"].to_dict())
    with pytest.raises(ModelConfigError, match="another model"):
        apply_adapter(load_pretrained(tiny_model_path), tmp_path / "other")


@pytest.fixture
def rollout(tiny_model_path):
    return tiny_rollout(tiny_model_path)


def greedy(rollout, texts):
    tokenizer = rollout.tokenizer
    batch = [
        {"prompt_ids": tokenizer.encode(text), "sampling_params": {"temperature": 0.0, "top_p": 1.0, "top_k": -1}}
        for text in texts
    ]
    return [result["token_ids"] for result in rollout.generate_batch(batch)]


def test_rollout_samples_through_synced_adapters_as_the_merged_model_does(rollout, tiny_model_path):
    """verl's default LoRA sync (lora.merge=false): the adapters alone, under peft's names, with their config.
    The rollout adds the adapters once and copies them in at every sync; its model then computes what a rollout
    holding the merged weights (lora.merge=true's full update) computes, and its greedy completions differ from the
    base model's."""
    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.lora import adapter_state

    prompts = ["def add(a, b):", "Write a function", "Reverse a list"]
    base = greedy(rollout, prompts)
    policy = adapted(load_pretrained(tiny_model_path).eval(), seed=3)
    settings = policy.peft_config["default"].to_dict()
    asyncio.run(
        rollout.update_weights(
            iter(adapter_state(policy).items()), peft_config=settings, base_sync_done=True, global_steps=1
        )
    )
    with_adapters = greedy(rollout, prompts)
    assert with_adapters != base

    # the same model as the merged weights: their logits agree to rounding. Not their greedy completions: on a tiny
    # random model many masked positions tie, and which of two near-equal confidences wins depends on that rounding
    # (it flipped after an earlier test had loaded a Dream stand-in in the same process)
    merged_rollout = type(rollout)(rollout.config, rollout.model_config, device_mesh=None)
    merged = policy.merge_and_unload()
    asyncio.run(merged_rollout.update_weights(iter(merged.state_dict().items()), global_steps=1))
    ids = torch.tensor([rollout.tokenizer.encode(text)[:3] for text in prompts])
    with torch.no_grad():
        through_adapters = rollout.lm.module(input_ids=ids).logits  # [3, 3, V]
        through_merged = merged_rollout.lm.module(input_ids=ids).logits  # [3, 3, V]
    torch.testing.assert_close(through_adapters, through_merged, rtol=0, atol=1e-5)

    # a second sync moves the adapters again; a sync missing an adapter tensor is refused
    zeroed = {
        name: torch.zeros_like(value)
        for name, value in adapter_state(adapted(load_pretrained(tiny_model_path), seed=4)).items()
    }
    asyncio.run(rollout.update_weights(iter(zeroed.items()), peft_config=settings, base_sync_done=True, global_steps=2))
    assert greedy(rollout, prompts) == base  # B = 0: the base model again
    partial = dict(list(zeroed.items())[1:])
    with pytest.raises(RuntimeError, match="stale"):
        asyncio.run(rollout.update_weights(iter(partial.items()), peft_config=settings, base_sync_done=True))


def test_dropout_is_applied_to_every_adapter_and_saved():
    from diffugrpo_plugin.models.family import ModelConfigError
    from diffugrpo_plugin.models.lora import set_dropout

    model = adapted(build_tiny_module("dream"), targets=["q_proj", "up_proj"])
    set_dropout(model, 0.5)
    assert model.peft_config["default"].lora_dropout == 0.5
    ids = torch.randint(5, 60, (2, 9))
    model.train()
    assert not torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)  # dropout draws differ
    model.eval()
    assert torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)
    with pytest.raises(ModelConfigError, match=r"lora.dropout must be in \[0, 1\)"):
        set_dropout(model, 1.0)


def test_rollout_follows_verls_own_sync_of_base_then_adapters(rollout, tiny_model_path):
    """What verl's engine really sends (verl.utils.fsdp_utils.collect_lora_params and replace_lora_wrapper): a base
    sync (base_sync_done=False: base weights, targeted ones under ``base_layer`` names) then the adapters alone.
    The rollout ends up computing exactly the trainer's logits."""
    from verl.utils.fsdp_utils import collect_lora_params, replace_lora_wrapper

    from diffugrpo_plugin.models.dlm import load_pretrained

    policy = adapted(load_pretrained(tiny_model_path).eval(), targets=["q_proj", "v_proj", "down_proj"], seed=6)
    with torch.no_grad():  # the trainer's base moved too, as after full-weight training before the adapters
        for name, parameter in policy.named_parameters():
            if "lora_" not in name:
                parameter.mul_(1.01)
    settings = policy.peft_config["default"]
    base = collect_lora_params(policy, layered_summon=False, base_sync_done=False)
    base = {replace_lora_wrapper(name, settings): tensor for name, tensor in base.items()}
    assert any(".base_layer.weight" in name for name in base) and not any("lora_" in name for name in base)
    asyncio.run(rollout.update_weights(iter(base.items()), peft_config=settings.to_dict(), base_sync_done=False))
    adapters = collect_lora_params(policy, layered_summon=False, base_sync_done=True)
    assert adapters and all("lora_" in name for name in adapters)
    asyncio.run(
        rollout.update_weights(
            iter(adapters.items()), peft_config=settings.to_dict(), base_sync_done=True, global_steps=1
        )
    )
    ids = torch.randint(5, 60, (3, 12))
    with torch.no_grad():
        assert torch.equal(rollout.lm.module(input_ids=ids).logits, policy(input_ids=ids).logits)


def test_adapters_the_rollout_cannot_carry_are_refused_where_they_load(tmp_path, tiny_model_path):
    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.family import ModelConfigError
    from diffugrpo_plugin.models.lora import adapter_state, apply_adapter, inject_adapter, save_adapter

    dora = adapted(load_pretrained(tiny_model_path), targets=["q_proj"], use_dora=True)
    settings = dora.peft_config["default"].to_dict()
    save_adapter(tmp_path / "dora", adapter_state(dora), settings)
    with pytest.raises(ModelConfigError, match=r"asks for DoRA \(use_dora\)"):
        apply_adapter(load_pretrained(tiny_model_path), tmp_path / "dora")
    with pytest.raises(ModelConfigError, match=r"the trainer's LoRA config asks for DoRA"):
        inject_adapter(load_pretrained(tiny_model_path), settings)


@pytest.mark.slow
def test_the_lora_benchmark_trains_the_parameters_it_says():
    """``benchmarks/lora.py`` at a tiny shape (the 4-bit variant too, through bitsandbytes' CPU kernels): its trainable counts are the ones worked out by hand for a Qwen2 of
    hidden 64 (MLP 192, 4 heads of 16, 2 key/value heads), 2 layers, vocabulary 1000, untied head."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/lora.py",
            "--hidden",
            "64",
            "--layers",
            "2",
            "--vocab",
            "1000",
            "--prompt",
            "16",
            "--completion",
            "16",
            "--repeats",
            "1",
            "--threads",
            "1",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("| ")}
    # per layer: q 64x64 + 64, k and v 64x32 + 32, o 64x64, gate/up/down 64x192, two norms; embeddings, head, norm
    full = 1000 * 64 * 2 + 2 * (4160 + 2 * 2080 + 4096 + 3 * 12288 + 128) + 64
    # rank 16 x (in + out) of q, k, v, o, gate, up, down in each layer
    lora = 2 * 16 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 3 * (64 + 192))
    assert f"| {full:,} |" in rows["full"] and f"| {lora:,} |" in rows["lora"] and f"| {lora:,} |" in rows["qlora"]
    assert {"lora, adapters applied", "lora, adapters merged", "qlora, adapters applied to the 4-bit base"} <= set(rows)
    assert "applied / merged:" in done.stdout
    # bitsandbytes' CPU 4-bit layers against the dequantization formula, in fp32
    error = float(done.stdout.split("largest relative difference ")[1].split()[0])
    assert error < 1e-5, error
