"""The 7B/8B recipes fit the GPU they are written for, and the sampler's memory stays bounded as the batch grows.

Two kinds of evidence: the memory model (``check-model``'s, ``tools/step_memory.py``) on each recipe's settings at
its 8 GPUs, and the sampler run for real (our code, Dream-7B's vocabulary and hidden size, 2 of its layers) under
:class:`~diffugrpo_plugin.tools.simulated_memory.SimulatedMemory`, which counts every storage a run makes at its
real size without allocating it. benchmarks/simulated_memory.py runs the whole shapes; its Dream-7B and LLaDA-8B
sampler peaks equal the H100's within a few percent (docs/results/h100.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from diffugrpo_plugin.sampling import build_sampler
from diffugrpo_plugin.sampling.memory import DEFAULT_BUDGET_GIB, rows_within, vocabulary_bytes_per_row
from diffugrpo_plugin.tools.simulated_memory import DEVICE, GIB, SimulatedMemory
from diffugrpo_plugin.tools.step_memory import StepSetup, memory_estimate
from gpu import build_model, family_config, resolve, wrap

ROOT = Path(__file__).resolve().parents[1]

GPU_GIB = 80  # the recipes' GPU (H100 / A100 80 GB)
# what the memory model does not count (CUDA context and kernels, NCCL buffers, the caching allocator's reserve and
# fragmentation, step_memory.NOT_COUNTED) gets the rest: a fifth of the GPU
PER_GPU_BUDGET_GIB = 0.8 * GPU_GIB
RECIPES = {
    "dream": ROOT / "examples/diffucoder_7b/diffucoder_7b.yaml",
    "llada": ROOT / "examples/llada_8b/llada_8b.yaml",
}


def recipe_setup(family: str) -> StepSetup:
    """A recipe's per-GPU step as the memory model takes it, read from the recipe's own keys."""
    recipe = OmegaConf.load(RECIPES[family])
    actor, rollout, data = recipe.actor_rollout_ref.actor, recipe.actor_rollout_ref.rollout, recipe.data
    gpus = recipe.trainer.nnodes * recipe.trainer.n_gpus_per_node
    return StepSetup(
        batch=actor.ppo_micro_batch_size_per_gpu,
        prompt_length=data.max_prompt_length,
        completion_length=data.max_response_length,
        gpus=gpus,
        gradient_checkpointing=recipe.actor_rollout_ref.model.enable_gradient_checkpointing,
        param_dtype=actor.fsdp_config.mixed_precision.param_dtype,
        rollout_micro_batch=rollout.engine_kwargs.diffusion.micro_batch_size,
        rollout_rows=data.train_batch_size * rollout.n // gpus,
        logits_shift=family == "dream",
        sampler_kv_cache=False,  # the recipes run the reference sampler
    )


@pytest.mark.parametrize("family", ["dream", "llada"])
def test_each_recipe_fits_its_gpus_with_room_for_what_is_not_counted(family):
    shape = resolve(family_config(family, tiny=False)).resolution.shape()
    estimate = memory_estimate(shape, recipe_setup(family))
    assert estimate.total_gib <= PER_GPU_BUDGET_GIB, (
        f"the {family} recipe needs {estimate.total_gib:.1f} GiB per GPU, over the {PER_GPU_BUDGET_GIB:.0f} GiB budget"
    )
    # left to the default micro-batch (none set), the sampler takes what its budget allows, and the step still fits
    budgeted = memory_estimate(shape, StepSetup(**{**recipe_setup(family).__dict__, "rollout_micro_batch": None}))
    assert budgeted.total_gib <= PER_GPU_BUDGET_GIB
    assert budgeted.sampler_rows * 1.8e9 > DEFAULT_BUDGET_GIB * GIB * 0.75  # the budget, mostly used (~1.8 GB/row)


def sampler_peak_gib(rows: int, micro_batch_size: int | None) -> float:
    """The training default's sampler (fast path) at Dream-7B's vocabulary and width, 2 layers: GiB above the weights."""
    sim = SimulatedMemory()
    with sim:
        resolved = resolve(family_config("dream", tiny=False, layers=2))
        with sim.fake_factory():
            module = build_model(resolved, "cpu", torch.bfloat16)
        lm = wrap(module.eval(), resolved)
        eos = int(resolved.config_object.eos_token_id)
        prompt = torch.randint(0, lm.mask_token_id, (rows, 200), generator=torch.Generator().manual_seed(0))
        sampler = build_sampler(
            "entropy",
            steps=2,  # the peak is the first step's, every position masked
            temperature=1.0,
            top_p=0.95,
            kv_cache=True,
            cache_refresh=2,
            threshold=0.99,
            compact=True,
            reuse_logits=True,
            head_on_masked=True,
            micro_batch_size=micro_batch_size,
        )
        with sim.stage("sampler") as stage, sim.zero_decisions(), torch.no_grad():
            sampler.generate(
                lm, prompt, torch.ones_like(prompt), 256, eos_token_id=eos, pad_token_id=eos, seeds=list(range(rows))
            )
    return (stage.peak[DEVICE] - stage.start[DEVICE]) / GIB


def test_the_sampler_memory_stops_growing_with_the_batch_at_its_budget():
    # 152k vocabulary x (200 + 256) tokens: bf16 logits twice (shifted, aligned) + 10 fp32 window buffers = 1.83 GB
    # a row by the budget's count, so 16 GiB takes 9 rows at a time
    row_bytes = 2 * 456 * 152_064 * 2 + 10 * 256 * 152_064 * 4
    assert vocabulary_bytes_per_row(152_064, 200, 256, 2, True) == row_bytes
    per_micro_batch = rows_within(DEFAULT_BUDGET_GIB * GIB, row_bytes, 10**6)
    assert per_micro_batch == 9
    at_budget, at_4x = sampler_peak_gib(per_micro_batch, None), sampler_peak_gib(4 * per_micro_batch, None)
    assert at_4x == pytest.approx(at_budget, rel=0.02)  # 36 rows run as 4 micro-batches of 9
    assert at_4x <= DEFAULT_BUDGET_GIB
    # what the budget prevents: twice the rows at once take twice the memory
    assert sampler_peak_gib(2 * per_micro_batch, 2 * per_micro_batch) == pytest.approx(2 * at_budget, rel=0.1)
    # the memory model's rollout terms bound what the code allocates
    shape = resolve(family_config("dream", tiny=False, layers=2)).resolution.shape()
    modelled = memory_estimate(
        shape, StepSetup(batch=9, prompt_length=200, completion_length=256, rollout_micro_batch=per_micro_batch)
    )
    assert at_budget <= modelled.phase_bytes("rollout") / GIB


def test_simulated_memory_counts_each_storage_while_it_lives_and_only_big_floats_are_fake():
    from torch._subclasses.fake_tensor import FakeTensor

    sim = SimulatedMemory()
    with sim:
        weights = torch.empty(1000, 1000)  # 4e6 bytes: a big float made from nothing is fake
        ids = torch.arange(10)  # int64, real: the code's control flow reads these
        with sim.stage("work") as stage:
            doubled = weights * 2  # fake, +4e6
            picked = doubled[ids]  # real indices into a fake: fake [10, 1000], +40e3
            del doubled, picked
        after = dict(sim.current)
    assert isinstance(weights, FakeTensor) and not isinstance(ids, FakeTensor) and ids.tolist() == list(range(10))
    assert stage.start[DEVICE] == 4_000_000 + 80
    assert stage.peak[DEVICE] == 4_000_000 + 80 + 4_000_000 + 40_000
    assert after[DEVICE] == 4_000_000 + 80  # the temporaries freed
