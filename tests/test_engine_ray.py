"""verl's real FSDP2 engine with our subclass, on 2 CPU Ray workers, against a direct computation.

The direct computation runs the HF model on every masked view with full logits and a full
log-softmax, then combines views with the coupled weights: the formula, unoptimised.
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import ray_cluster  # noqa: F401  (fixture)

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.ray]


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


def direct_response_logprobs(model_path, prompts, responses, seeds):
    """Per response token: sum over views of coef * log_softmax(full logits)[token], one sample at a time.

    The views noise the whole response canvas (padding after the EOS included, as generated); only the
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
        views = masker.views(ids, completion, lm.mask_token_id, seed[None])
        total = torch.zeros(ids.shape)
        with torch.no_grad():
            for v in range(views.num_views):
                raw = lm.module(input_ids=views.noisy[v], attention_mask=torch.ones_like(ids)).logits
                raw = torch.cat([raw[:, :1], raw[:, :-1]], 1) if lm.shift_logits else raw
                total += views.coef[v] * torch.log_softmax(raw.float(), -1).gather(-1, ids[..., None]).squeeze(-1)
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
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, TrainingWorkerConfig

    from diffugrpo_plugin.integration.engine import DiffusionModelConfig
    from diffugrpo_plugin.integration.trainer import DiffusionTrainingWorker

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
        ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(DiffusionTrainingWorker), config=config),
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


def test_engine_on_two_workers_matches_the_formula_and_trains(tiny_model_path):
    """Sharded parameters: the fused head's weight is the one FSDP2 gathered inside the forward, gathered again
    for its backward because the head's result leaves as the model's output. (verl's FSDP1 engine needs a GPU:
    it syncs module states from device memory.)"""
    prompts, responses, seeds = make_batch(vocab=64)
    want = direct_response_logprobs(tiny_model_path, prompts, responses, seeds)
    group = build_worker_group(tiny_model_path, workers=2)
    check_formula_then_one_ascent_step(group, want, prompts, responses, seeds)


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


def test_two_workers_take_the_same_step_as_one(tiny_model_path):
    from functools import partial

    from verl.workers.utils.losses import ppo_loss

    prompts, responses, seeds = make_batch(vocab=64)
    loss_fn = partial(ppo_loss, config=coupled_grpo_actor_config())
    results = {}
    for workers in (1, 2):
        group = build_worker_group(tiny_model_path, workers=workers)
        start = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
        group.set_loss_fn(loss_fn)
        metrics = group.train_batch(ppo_batch(prompts, responses, seeds, start, start)).get()["metrics"]
        after = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
        results[workers] = (metrics["loss"], metrics["grad_norm"], after)
        release(group)
    (loss1, grad1, after1), (loss2, grad2, after2) = results[1], results[2]
    assert loss1 == pytest.approx(loss2, rel=1e-4, abs=1e-6)
    assert grad1 == pytest.approx(grad2, rel=1e-4)
    for a, b in zip(after1, after2):
        assert torch.allclose(a, b, atol=1e-5)


def lean_blocks(worker) -> int:
    """On a worker: how many of its model's MLPs run the lean SwiGLU method."""
    return sum(
        "forward" in vars(module) for module in worker.engine.module.modules() if type(module).__name__ == "Qwen2MLP"
    )


def test_lean_swiglu_blocks_take_the_same_step_as_the_models_own(tiny_model_path):
    """By default the engine makes every SwiGLU block lean (counted on each worker); sharded by FSDP2 and
    recomputed under gradient checkpointing, they give the PPO update the model's own blocks give."""
    from functools import partial

    import ray

    from verl.workers.utils.losses import ppo_loss

    prompts, responses, seeds = make_batch(vocab=64)
    loss_fn = partial(ppo_loss, config=coupled_grpo_actor_config())
    results = {}
    for lean in (True, False):
        group = build_worker_group(tiny_model_path, workers=2, **({} if lean else {"lean_mlp": False}))
        try:
            blocks = ray.get([worker.__ray_call__.remote(lean_blocks) for worker in group.workers])
            start = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
            group.set_loss_fn(loss_fn)
            metrics = group.train_batch(ppo_batch(prompts, responses, seeds, start, start)).get()["metrics"]
            after = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
        finally:
            release(group)
        results[lean] = (blocks, start, metrics["loss"], metrics["grad_norm"], after)
    (lean_blocks_per_worker, *lean_step), (stock_blocks_per_worker, *stock_step) = results[True], results[False]
    assert lean_blocks_per_worker == [2, 2] and stock_blocks_per_worker == [0, 0]
    for lean_value, stock_value in zip(lean_step, stock_step):
        if isinstance(lean_value, list):
            assert all(torch.equal(a, b) for a, b in zip(lean_value, stock_value))
        else:
            assert lean_value == pytest.approx(stock_value, rel=1e-6)


def iteration_batch(prompts, responses, seeds, old, advantages):
    """The update batch of one step with ``K = seeds.shape[1]`` iterations, as the trainer leaves it:
    per iteration its mask seeds and the old / reference log-probs computed with them."""
    from diffugrpo_plugin.integration.trainer import iteration_field

    data = ppo_batch(prompts, responses, seeds[:, 0], old[0], old[0])
    data["advantages"] = nested([torch.full((len(r),), a) for r, a in zip(responses, advantages)])
    for k in range(seeds.shape[1]):
        data[iteration_field("mask_seed", k)] = seeds[:, k].contiguous()
        data[iteration_field("old_log_probs", k)] = nested(old[k])
        data[iteration_field("ref_log_prob", k)] = nested([o - 0.1 for o in old[k]])
    return data


def test_iteration_k_of_the_update_is_scored_with_mask_k(tiny_model_path):
    """ppo_epochs=2 (DiffuCoder's num_iterations) through verl's engine as the trainer runs it: old log-probs
    once per iteration with that iteration's seeds equal the formula, the update batch is expanded
    iteration-major, and with the weights fixed (lr 0) every row of every iteration has a ratio of exactly 1:
    row k is scored with mask k. Swapping the iterations' old log-probs is caught (control)."""
    from functools import partial

    from verl.workers.utils.losses import ppo_loss

    from diffugrpo_plugin.core.masking import mask_seed_table
    from diffugrpo_plugin.integration.trainer import expand_iterations

    prompts, responses, _ = make_batch(vocab=64)
    seeds = mask_seed_table(42, step=1, num_samples=len(prompts), num_iterations=2)  # [B, 2]
    group = build_worker_group(tiny_model_path, workers=2, lr=0.0)
    try:
        old = [
            response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds[:, k], 1)).get(), responses)
            for k in range(2)
        ]
        for k in range(2):
            want = direct_response_logprobs(tiny_model_path, prompts, responses, seeds[:, k])
            assert all(torch.allclose(g, w, atol=1e-4) for g, w in zip(old[k], want))
        assert not all(torch.allclose(a, b) for a, b in zip(old[0], old[1]))  # the iterations' masks differ
        group.set_loss_fn(partial(ppo_loss, config=coupled_grpo_actor_config()))
        advantages = (1.0, -1.0, 0.5, -0.5)
        matched = group.train_batch(
            expand_iterations(iteration_batch(prompts, responses, seeds, old, advantages), 2)
        ).get()["metrics"]
        swapped = group.train_batch(
            expand_iterations(iteration_batch(prompts, responses, seeds, old[::-1], advantages), 2)
        ).get()["metrics"]
    finally:
        release(group)

    def values(metrics, name):  # verl's Metric objects, one per worker, each holding its micro-batches' values
        return [value for metric in metrics[name] for value in metric.values]

    assert max(abs(value) for value in values(matched, "actor/ppo_kl")) < 1e-5
    assert values(matched, "actor/pg_clipfrac") == [0.0] * 8  # 2 iterations x 4 samples, one per micro-batch
    # ratio 1 everywhere: the loss is token-mean(-A) + beta k3 with ref - logp = -0.1 on every token
    counted = [len(r) - tail for r, tail in zip(responses, (0, 3, 0, 2))]  # tokens up to each EOS
    surrogate = -sum(a * n for a, n in zip(advantages, counted)) / sum(counted)
    beta = coupled_grpo_actor_config().kl_loss_coef
    assert matched["loss"] == pytest.approx(surrogate + beta * (math.exp(-0.1) + 0.1 - 1), rel=1e-4)
    assert max(abs(value) for value in values(swapped, "actor/ppo_kl")) > 1e-2  # the other mask shows at once


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


def test_lora_engine_scores_the_merged_model_trains_only_adapters_and_two_workers_agree(tiny_model_path, tmp_path):
    """LoRA through verl's FSDP2 engine (lora_rank / lora_alpha / lora_adapter_path): the coupled log-probs equal the
    formula on the merged model (W + alpha/r BA), and with verl's ``no_lora_adapter`` (how verl computes the
    reference from the actor) the formula on the base model. A PPO step on 2 workers equals the step on 1 (loss,
    gradient norm, log-probs after), and changes the adapters only."""
    from functools import partial

    import ray

    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    adapter = saved_random_adapter(tiny_model_path, tmp_path / "adapter")
    merged = saved_merged_model(tiny_model_path, adapter, tmp_path / "merged")
    prompts, responses, seeds = make_batch(vocab=64)
    want_policy = direct_response_logprobs(merged, prompts, responses, seeds)
    want_reference = direct_response_logprobs(tiny_model_path, prompts, responses, seeds)
    lora = {"lora_rank": 4, "lora_alpha": 8, "lora_adapter_path": adapter}
    loss_fn = partial(ppo_loss, config=coupled_grpo_actor_config())
    results = {}
    for workers in (2, 1):
        group = build_worker_group(tiny_model_path, workers=workers, lora=lora, lr=1e-2)
        try:
            policy = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
            base_batch = tensordict_for(prompts, responses, seeds, 1)
            tu.assign_non_tensor(base_batch, no_lora_adapter=True)
            reference = response_logprobs(group.infer_batch(base_batch).get(), responses)
            if workers == 2:
                for got, want in ((policy, want_policy), (reference, want_reference)):
                    assert all(torch.allclose(g, w, atol=1e-4) for g, w in zip(got, want))
                before = ray.get([worker.__ray_call__.remote(weight_sums) for worker in group.workers])
            group.set_loss_fn(loss_fn)
            metrics = group.train_batch(ppo_batch(prompts, responses, seeds, policy, reference)).get()["metrics"]
            after = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
            if workers == 2:
                moved = ray.get([worker.__ray_call__.remote(weight_sums) for worker in group.workers])
                group.save_checkpoint(str(tmp_path / "saved"), global_step=1)
        finally:
            release(group)
        results[workers] = (metrics["loss"], metrics["grad_norm"], after)
    for sums_before, sums_after in zip(before, moved):
        changed = {name for name in sums_before if sums_before[name] != sums_after[name]}
        assert changed and all("lora_" in name for name in changed), sorted(changed)[:5]
        assert any("lora_B" in name for name in changed) and any("lora_A" in name for name in changed)
    (loss2, grad2, after2), (loss1, grad1, after1) = results[2], results[1]
    assert loss1 == pytest.approx(loss2, rel=1e-4, abs=1e-6)
    assert grad1 == pytest.approx(grad2, rel=1e-4)
    for a, b in zip(after1, after2):
        assert torch.allclose(a, b, atol=1e-5)
    # the adapter the checkpoint holds (gathered from both shards) is the trained one: merged into the base, the
    # formula gives the log-probs the engine computed after the step
    trained = saved_merged_model(tiny_model_path, str(tmp_path / "saved" / "lora_adapter"), tmp_path / "trained")
    for got, want in zip(after2, direct_response_logprobs(trained, prompts, responses, seeds)):
        assert torch.allclose(got, want, atol=1e-4)


def test_loss_terms_join_the_update_by_their_formulas_and_two_workers_agree(tiny_model_path):
    """verl's PPO loss plus the preference term (DPO on groups {0, 1} and {2, 3}) and the SFT term, on 1 and 2
    workers: each term's logged value is its formula's (the SFT term computed here, in this process), and both
    runs take the same step."""
    from functools import partial

    from verl.utils.metric import Metric
    from verl.workers.utils.losses import ppo_loss

    from diffugrpo_plugin.core.loss_terms import ReferenceSFT, TermInputs
    from diffugrpo_plugin.integration.engine import LOSS_TERM_FIELD
    from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained

    prompts, responses, seeds = make_batch(vocab=64)
    generator = torch.Generator().manual_seed(5)
    targets = [torch.randint(5, 56, (len(r),), generator=generator) for r in responses]
    scored_counts = [int(m.sum()) for m in loss_masks(responses)]  # 5, 5, 3, 4
    terms = {"preference": {"weight": 0.5, "beta": 0.1}, "sft": {"weight": 0.2}}
    # the batch's old - ref is 0.15 per scored token (ppo_batch: old + 0.05, ref - 0.1), the policy's own - ref 0.1
    sft_seeds = torch.tensor([[21], [22], [23], [24]])
    fields = {
        "preference__role": torch.tensor([1.0, -1.0, -1.0, 1.0]),
        "preference__partner_logratio": torch.tensor([[0.15 * n] for n in (5, 5, 4, 3)]),
        "sft__target": nested(targets),
        "sft__has_target": torch.tensor([1.0, 1.0, 0.0, 1.0]),
        "sft__seed": sft_seeds,
    }
    z = [s * 0.1 * (0.1 * n - p) for s, n, p in zip((1, -1, -1, 1), scored_counts, (0.75, 0.75, 0.6, 0.45))]
    want_preference = sum(math.log1p(math.exp(-value)) for value in z) / 4

    lm = DiffusionLM.wrap(load_pretrained(tiny_model_path).eval())
    ids = [torch.cat([p, r]) for p, r in zip(prompts, responses)]
    per_sample = []
    with torch.no_grad():
        for prompt, row, index in zip(prompts, ids, range(4)):
            canvas = torch.zeros(1, len(row), dtype=torch.bool)
            canvas[0, len(prompt) :] = True
            inputs = TermInputs(
                lm=lm,
                input_ids=row[None],
                attention=torch.ones(1, len(row)),
                positions=torch.arange(len(row))[None],
                prompt=~canvas,
                canvas=canvas,
                scored=canvas,
                logp=torch.zeros(1, len(row)),
                reference_logp=torch.zeros(1, len(row)),
                iteration=torch.zeros(1, dtype=torch.long),
                fields={
                    "target": nested([targets[index]]),
                    "seed": sft_seeds[index : index + 1],
                    "has_target": fields["sft__has_target"][index : index + 1],
                },
            )
            per_sample.append(float(ReferenceSFT().loss(inputs)[0]))
    want_sft = sum(per_sample) / 4
    assert want_sft > 0

    loss_fn = partial(ppo_loss, config=coupled_grpo_actor_config())
    results = {}
    for workers in (1, 2):
        group = build_worker_group(tiny_model_path, workers=workers, loss_terms=terms)
        try:
            start = response_logprobs(group.infer_batch(tensordict_for(prompts, responses, seeds, 1)).get(), responses)
            data = ppo_batch(prompts, responses, seeds, start, start)
            for key, value in fields.items():
                name, field = key.split("__")
                data[LOSS_TERM_FIELD.format(name=name, field=field)] = value
            group.set_loss_fn(loss_fn)
            results[workers] = group.train_batch(data).get()["metrics"]
        finally:
            release(group)
    for metrics in results.values():  # per rank, per micro-batch: reduced as verl's update reduces them
        assert Metric.aggregate_dp(metrics["loss_terms/preference"]) == pytest.approx(want_preference, rel=1e-4)
        assert Metric.aggregate_dp(metrics["loss_terms/sft"]) == pytest.approx(want_sft, rel=1e-4)
        assert Metric.aggregate_dp(metrics["loss_terms/preference/applied"]) == 1.0  # every sample is paired
    assert results[1]["loss"] == pytest.approx(results[2]["loss"], rel=1e-4)
    assert results[1]["grad_norm"] == pytest.approx(results[2]["grad_norm"], rel=1e-4)
