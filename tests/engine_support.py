"""verl's FSDP2 engine on CPU Ray workers, and the direct computation its tests check it against: what the engine
tests share (not a test module)."""

from __future__ import annotations

import torch


def nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def make_batch(vocab: int):
    generator = torch.Generator().manual_seed(3)
    prompts = [torch.randint(5, vocab - 8, (n,), generator=generator) for n in (6, 4, 7, 5)]
    responses = [torch.randint(5, vocab - 8, (n,), generator=generator) for n in (5, 8, 3, 6)]
    return prompts, responses, torch.tensor([11, 12, 13, 14])


def loss_masks(responses, padded_tail=(0, 3, 0, 2)):
    """Response masks where the last ``padded_tail[i]`` tokens of sample i follow its EOS (canvas padding)."""
    return [torch.tensor([1] * (len(r) - tail) + [0] * tail) for r, tail in zip(responses, padded_tail)]


def tensordict_for(prompts, responses, seeds, micro_batch: int):
    from tensordict import TensorDict

    from verl.utils import tensordict_utils as tu

    data = TensorDict(
        {
            "input_ids": nested([torch.cat([p, r]) for p, r in zip(prompts, responses)]),
            "position_ids": nested([torch.arange(len(p) + len(r)) for p, r in zip(prompts, responses)]),
            "prompts": nested(prompts),
            "responses": nested(responses),
            "response_mask": nested(loss_masks(responses)),
            "loss_mask": nested(loss_masks(responses)),
            "mask_seed": seeds,
        },
        batch_size=len(prompts),
    )
    tu.assign_non_tensor(
        data,
        use_remove_padding=False,
        use_dynamic_bsz=False,
        micro_batch_size_per_gpu=micro_batch,
        calculate_entropy=False,
        temperature=1.0,
        compute_loss=False,
        global_token_num=None,
    )
    return data


def coupled_views_by_hand(ids, completion, mask_id, in_first, t):
    """DiffuCoder's coupled views of one sample written out from their definition: the completion fully masked
    (weight 1/2), the tokens ``in_first`` masked (weight 1 / 2t), the rest of the completion masked (weight
    1 / 2(1 - t)); the prompt is never masked and unmasked tokens weigh 0. # ids [1, L] -> [3, 1, L] each"""
    in_second = completion & ~in_first
    noisy = torch.stack([torch.where(masked, mask_id, ids) for masked in (completion, in_first, in_second)])
    coef = torch.stack([0.5 * completion, in_first / (2 * t), in_second / (2 * (1 - t))]).float()
    return noisy, coef


def coupled_draw(views, completion, mask_id) -> tuple[torch.Tensor, float]:
    """The two random choices the coupled masker made for one sample, the only thing taken from it: the tokens of
    its pair's first view and ``t``, read from that view's weight 1 / 2t (or the second's, 1 / 2(1 - t), when the
    first is empty)."""
    in_first = (views.noisy[1] == mask_id) & completion
    if in_first.any():
        return in_first, 0.5 / views.coef[1][in_first][0].item()
    return in_first, 1 - 0.5 / views.coef[2][completion][0].item()


def direct_response_logprobs(model_path, prompts, responses, seeds):
    """Per response token: sum over views of coef * log_softmax(full logits)[token], one sample at a time.

    The views are written out by hand (:func:`coupled_views_by_hand`) from the masker's random draw for the sample's
    seed, and the masker's own views must equal them, so a masker that builds its views or weights wrongly fails
    here too. The views noise the whole response canvas (padding after the EOS included, as generated); only the
    tokens the loss counts are scored, the rest get 0."""
    from diffugrpo_plugin.core.masking import make_coupled
    from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained

    lm = DiffusionLM.wrap(load_pretrained(model_path).eval())
    masker = make_coupled()
    results = []
    for prompt, response, seed, scored in zip(prompts, responses, seeds, loss_masks(responses)):
        ids = torch.cat([prompt, response])[None]
        completion = torch.zeros_like(ids, dtype=torch.bool)
        completion[0, len(prompt) :] = True
        drawn = masker.views(ids, completion, lm.mask_token_id, seed[None])
        in_first, t = coupled_draw(drawn, completion, lm.mask_token_id)
        assert 0.2 <= t <= 0.8  # the masker's t_range
        noisy, coef = coupled_views_by_hand(ids, completion, lm.mask_token_id, in_first, t)
        assert torch.equal(drawn.noisy, noisy) and torch.allclose(drawn.coef, coef)
        total = torch.zeros(ids.shape)
        with torch.no_grad():
            for v in range(len(noisy)):
                raw = lm.module(input_ids=noisy[v], attention_mask=torch.ones_like(ids)).logits
                raw = torch.cat([raw[:, :1], raw[:, :-1]], 1) if lm.shift_logits else raw
                total += coef[v] * torch.log_softmax(raw.float(), -1).gather(-1, ids[..., None]).squeeze(-1)
        results.append(total[0, len(prompt) :] * scored)
    return results


def build_worker_group(
    model_path: str,
    workers: int,
    trust_remote_code: bool = False,
    gradient_checkpointing: bool = True,
    lr: float = 1e-2,
    lora: dict | None = None,
    **diffusion,
):
    import ray

    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.trainer.config import CheckpointConfig
    from verl.utils.distributed import initialize_global_process_group_ray
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, TrainingWorkerConfig

    from diffugrpo_plugin.integration.engine import DiffusionModelConfig
    from diffugrpo_plugin.integration.workers import IterationMasksTrainingWorker

    class CPUTrainingWorker(IterationMasksTrainingWorker):
        """The worker the hybrid worker holds, standalone: the hybrid worker's init_model starts its gloo process
        group (verl asks torch for ``cpu:gloo,cpu:gloo`` on a CPU host, which torch rejects)."""

        def __init__(self, config):
            initialize_global_process_group_ray(backend="gloo")
            super().__init__(config)

    config = TrainingWorkerConfig(
        model_type="diffusion_lm",
        model_config=DiffusionModelConfig(
            path=model_path,
            model_type="diffusion_lm",
            use_remove_padding=False,
            override_config={"attn_implementation": "sdpa"},
            trust_remote_code=trust_remote_code,
            enable_gradient_checkpointing=gradient_checkpointing,
            diffusion={"masker": "coupled", **diffusion},
            **(lora or {}),
        ),
        engine_config=FSDPEngineConfig(
            strategy="fsdp2",
            use_torch_compile=False,
            mixed_precision={"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
        ),
        optimizer_config=FSDPOptimizerConfig(lr=lr, clip_grad=1.0),
        checkpoint_config=CheckpointConfig(),
    )
    group = RayWorkerGroup(
        resource_pool=RayResourcePool([workers], use_gpu=False, max_colocate_count=1),
        ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(CPUTrainingWorker), config=config),
        device_name="cpu",
    )
    group.reset()
    return group


def release(group) -> None:
    """Stop a group's workers and free their placement group, so later tests find the CPUs free."""
    import ray
    from ray.util.placement_group import remove_placement_group

    for worker in group.workers:
        ray.kill(worker)
    for placement in group.resource_pool.pgs or []:
        remove_placement_group(placement)


def mean_logprob_loss(model_output, data, dp_group=None):
    from verl.workers.utils.padding import no_padding_2_padding

    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    return -log_prob.mean(), {}


def response_logprobs(output, responses):
    values = output["log_probs"]
    rows = values.unbind() if values.is_nested else list(values)
    # verl's layout: the log-prob of the token at position p sits at index p - 1
    return [row[len(row) - len(r) - 1 : len(row) - 1] for row, r in zip(rows, responses)]


def check_formula_then_one_ascent_step(group, want, prompts, responses, seeds) -> None:
    """The engine's log-probs equal ``want`` (the formula), and one training step on the mean log-prob
    raises it; the group is released either way."""
    from verl.utils import tensordict_utils as tu

    try:
        got = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
        for g, w in zip(got, want):
            assert torch.allclose(g, w, atol=1e-4), (g, w)
        group.set_loss_fn(mean_logprob_loss)
        train = tensordict_for(prompts, responses, seeds, micro_batch=1)
        tu.assign_non_tensor(train, global_token_num=[len(p) + len(r) for p, r in zip(prompts, responses)])
        metrics = group.train_batch(train).get()["metrics"]
        assert torch.isfinite(torch.tensor(metrics["grad_norm"])) and metrics["grad_norm"] > 0
        after = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
    finally:
        release(group)
    # one step of gradient ascent on the mean log-prob raises it
    assert sum(float(a.mean()) for a in after) > sum(float(g.mean()) for g in got)


def coupled_grpo_actor_config():
    """The actor config `algorithm=coupled_grpo` composes (verl's dataclass)."""
    from hydra import compose, initialize_config_module

    from verl.utils.config import omega_conf_to_dataclass

    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        config = compose(config_name="diffugrpo")
    return omega_conf_to_dataclass(config.actor_rollout_ref.actor)


def ppo_batch(prompts, responses, seeds, old, ref):
    from verl.utils import tensordict_utils as tu

    data = tensordict_for(prompts, responses, seeds, micro_batch=1)
    data["old_log_probs"] = nested([o + 0.05 for o in old])  # a policy that moved a little
    data["ref_log_prob"] = nested([r - 0.1 for r in ref])
    data["advantages"] = nested([torch.full((len(r),), a) for r, a in zip(responses, (1.0, -1.0, 0.5, -0.5))])
    tu.assign_non_tensor(
        data, global_batch_size=len(prompts), global_token_num=[len(p) + len(r) for p, r in zip(prompts, responses)]
    )
    return data


def saved_random_adapter(model_path: str, directory) -> str:
    """A LoRA adapter (rank 4 on every linear layer, B random so it changes the model) in peft's folder format."""
    from peft import LoraConfig, TaskType, get_peft_model

    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.lora import adapter_state, save_adapter

    model = get_peft_model(
        load_pretrained(model_path),
        LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, lora_alpha=8, target_modules="all-linear"),
    )
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.2 * torch.randn(parameter.shape, generator=generator))
    return str(save_adapter(directory, adapter_state(model), model.peft_config["default"].to_dict(), model_path))


def saved_merged_model(model_path: str, adapter: str, directory) -> str:
    """The checkpoint with the adapter merged into its weights, and its tokenizer."""
    from transformers import AutoTokenizer

    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.lora import apply_adapter

    apply_adapter(load_pretrained(model_path), adapter).save_pretrained(directory)
    AutoTokenizer.from_pretrained(model_path).save_pretrained(directory)
    return str(directory)


def weight_sums(worker) -> dict[str, float]:
    """On a worker: the sum of its local shard of every parameter (adapters' names contain ``lora_``)."""
    return {
        name: float((p.to_local() if hasattr(p, "to_local") else p).detach().double().sum())
        for name, p in worker.engine.module.named_parameters()
    }


FOUR_BIT = {"load_in_4bit": True}  # d1's settings otherwise: nf4, double quantization


def four_bit_model(path: str):
    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.quantization import quantization_settings

    return load_pretrained(path, quantization=quantization_settings(FOUR_BIT), device="cpu")


def saved_dequantized(path: str, directory) -> str:
    """The checkpoint with every linear weight replaced by its 4-bit value (bitsandbytes' dequantization): the
    weights a 4-bit model computes with, as an ordinary full-precision checkpoint."""
    import bitsandbytes.functional as bnb_functional
    from transformers import AutoTokenizer

    from diffugrpo_plugin.models.dlm import load_pretrained

    quantized = dict(four_bit_model(path).named_modules())
    plain = load_pretrained(path)
    replaced = 0
    with torch.no_grad():
        for name, layer in plain.named_modules():
            weight = getattr(quantized.get(name), "weight", None)
            if type(weight).__name__ == "Params4bit":
                layer.weight.copy_(bnb_functional.dequantize_4bit(weight.data, weight.quant_state))
                replaced += 1
    assert replaced > 0
    plain.save_pretrained(directory)
    AutoTokenizer.from_pretrained(path).save_pretrained(directory)
    return str(directory)
