"""verl's real FSDP2 engine with our subclass, on 2 CPU Ray workers, against a direct computation.

The direct computation runs the HF model on every masked view with full logits and a full
log-softmax, then combines views with the coupled weights: the formula, unoptimised.
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import ray_cluster  # noqa: F401  (fixture)
from engine_support import (
    build_worker_group,
    check_formula_then_one_ascent_step,
    coupled_grpo_actor_config,
    coupled_views_by_hand,
    direct_response_logprobs,
    loss_masks,
    make_batch,
    nested,
    ppo_batch,
    release,
    response_logprobs,
    saved_merged_model,
    saved_random_adapter,
    tensordict_for,
    weight_sums,
)

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.ray]


def test_the_oracles_coupled_views_by_hand_on_a_small_case():
    """The hand-written views on three completion tokens, first view {1st, 3rd}, t = 0.25: every entry spelled out."""
    ids = torch.tensor([[7, 8, 20, 21, 22]])
    completion = torch.tensor([[False, False, True, True, True]])
    noisy, coef = coupled_views_by_hand(ids, completion, 99, torch.tensor([[False, False, True, False, True]]), 0.25)
    assert noisy[:, 0].tolist() == [[7, 8, 99, 99, 99], [7, 8, 99, 21, 99], [7, 8, 20, 99, 22]]
    assert torch.allclose(coef[:, 0], torch.tensor([[0, 0, 0.5, 0.5, 0.5], [0, 0, 2.0, 0, 2.0], [0, 0, 0, 2 / 3, 0]]))


def test_engine_on_two_workers_matches_the_formula_and_trains(tiny_model_path):
    """Sharded parameters: the fused head's weight is the one FSDP2 gathered inside the forward, gathered again
    for its backward because the head's result leaves as the model's output. (verl's FSDP1 engine needs a GPU:
    it syncs module states from device memory.)"""
    prompts, responses, seeds = make_batch(vocab=64)
    want = direct_response_logprobs(tiny_model_path, prompts, responses, seeds)
    group = build_worker_group(tiny_model_path, workers=2)
    check_formula_then_one_ascent_step(group, want, prompts, responses, seeds)


@pytest.mark.slow  # the default run compares two workers with one in test_many_workers (ws2)
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


@pytest.mark.slow
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
    from diffugrpo_plugin.integration.mask_iterations import iteration_field

    data = ppo_batch(prompts, responses, seeds[:, 0], old[0], old[0])
    data["advantages"] = nested([torch.full((len(r),), a) for r, a in zip(responses, advantages)])
    for k in range(seeds.shape[1]):
        data[iteration_field("mask_seed", k)] = seeds[:, k].contiguous()
        data[iteration_field("old_log_probs", k)] = nested(old[k])
        data[iteration_field("ref_log_prob", k)] = nested([o - 0.1 for o in old[k]])
    return data


@pytest.mark.slow
def test_iteration_k_of_the_update_is_scored_with_mask_k(tiny_model_path):
    """ppo_epochs=2 (DiffuCoder's num_iterations) through verl's engine as the trainer runs it: old log-probs
    once per iteration with that iteration's seeds equal the formula, the update batch is expanded
    iteration-major, and with the weights fixed (lr 0) every row of every iteration has a ratio of exactly 1:
    row k is scored with mask k. Swapping the iterations' old log-probs is caught (control)."""
    from functools import partial

    from verl.workers.utils.losses import ppo_loss

    from diffugrpo_plugin.core.masking import mask_seed_table
    from diffugrpo_plugin.integration.mask_iterations import expand_iterations

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


@pytest.mark.slow
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


@pytest.mark.slow
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
