"""Many workers, the numbers of one: verl's hybrid worker (policy, reference and rollout in each trainer process) at
world sizes 1, 2 and 4 on CPU with gloo, with the recipes' FSDP2 settings and the ones a user turns on at scale.

The recipes (examples/diffucoder_7b, examples/llada_8b, examples/d1_llada) keep verl's FSDP2 defaults: ``fsdp_size``
-1 (one shard group over every worker), reshard after forward, no parameter or optimizer offload (the reference
is always offloaded: verl gives forward-only modules ``CPUOffloadPolicy``). Each setting below runs the same two
update steps with a reference sync (``sync_reference``: ``mix_into_reference``), the rollout weight sync (verl's
``update_weights`` into ``DiffusionRollout``) and a checkpoint after step 1 that a rebuilt worker resumes from;
LoRA runs the same update with adapters. One Ray worker group per world size serves every setting (each setting
rebuilds the models in the same processes, as ``init_model`` builds them).

Tolerance: the model is fp32 and tiny, so world sizes differ only in the order of floating-point reductions
(gradient reduce-scatter, the loss's sum over ranks). Measured on this host (2026-12-02) against one worker, over
every setting: weights after a step differ by at most 1.1e-6 (Adam's first step divides each gradient by its own
size, so an entry near zero carries its rounding into the weight), loss, KL and gradient norm by 1.2e-5
relative, the synced reference's log-probs by 9.5e-7. ``WEIGHT_ATOL``, ``METRIC_REL`` and ``LOGPROB_ATOL`` leave a
margin of ~15-20x over that and stay ~500x below what one step moves (lr 1e-2: 1.1e-2 in the weights), so a rank
that skipped its update, mixed another rank's shard or resumed from other weights fails. The rollout copy and
the gathered policy are compared exactly (one copies the other), and so is a resumed run with its uninterrupted
one (same world size, same order of operations: measured 0).
"""

from __future__ import annotations

import functools

import pytest
import torch

from conftest import ray_cluster  # noqa: F401  (fixture)
from engine_support import make_batch, ppo_batch, release, response_logprobs, saved_random_adapter, tensordict_for

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.ray]

LOGPROB_ATOL = 2e-5
WEIGHT_ATOL = 2e-5
METRIC_REL = 2e-4
ALPHA = 0.6  # DiffuCoder's ref_sync alpha
LR = 1e-2  # large, so that one step is far above the tolerance

# name: (world size, FSDP settings of the actor and the reference); ws2 and ws4 are the recipes' FSDP2
FULL = {
    "ws1": (1, {}),
    "ws2": (2, {}),
    "ws2-no-reshard": (2, {"reshard_after_forward": False}),
    "ws2-offload": (2, {"param_offload": True, "optimizer_offload": True}),
    "ws4": (4, {}),
    "ws4-hybrid": (4, {"fsdp_size": 2}),  # hybrid sharding: 2 replicas of 2 shards
}
# the key a user sets for hybrid sharding is the actor's; verl's reference keeps its own fsdp_size (-1)
ACTOR_ONLY = {"ws4-hybrid-actor-only": (4, {"fsdp_size": 2})}
LORA = {name: FULL[name] for name in ("ws1", "ws2", "ws4-hybrid")}
BASELINE = "ws1"
# the default run keeps one worker and two; the other layouts (unsharded forward, offload, four workers plain and
# hybrid, the actor-only key) run with the slow tests, so the default suite stays in its budget
VARIANTS = frozenset(("ws2-no-reshard", "ws2-offload", "ws4", "ws4-hybrid", "ws4-hybrid-actor-only"))


def layouts(names) -> list:
    return [pytest.param(name, marks=pytest.mark.slow) if name in VARIANTS else name for name in names]


def hybrid_config(model_path: str, fsdp: dict, reference_fsdp: dict | None, adapter: str | None = None):
    """The ``actor_rollout_ref`` config ``algorithm=coupled_grpo`` composes, on the tiny model in fp32, with
    ``fsdp`` set on the actor's FSDP config and ``reference_fsdp`` (default: the same) on the reference's; with
    ``adapter``, LoRA (rank 4) starting from that saved adapter."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    import diffugrpo_plugin.integration.resolvers  # noqa: F401  (the config's ${diffugrpo...} resolvers)

    def fsdp_overrides(role: str, settings: dict) -> list[str]:
        return [f"actor_rollout_ref.{role}.fsdp_config.{key}={value}" for key, value in settings.items()]

    overrides = [
        f"actor_rollout_ref.model.path={model_path}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        f"actor_rollout_ref.actor.optim.lr={LR}",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.use_kl_loss=true",  # as the recipes: the reference's log-probs reach the update
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        *fsdp_overrides("actor", fsdp),
        *fsdp_overrides("ref", fsdp if reference_fsdp is None else reference_fsdp),
    ]
    if adapter is not None:
        overrides += [
            "actor_rollout_ref.model.lora_rank=4",
            "actor_rollout_ref.model.lora_alpha=8",
            f"actor_rollout_ref.model.lora_adapter_path={adapter}",
        ]
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        config = compose(config_name="diffugrpo", overrides=overrides)
    OmegaConf.resolve(config)
    return config.actor_rollout_ref


def hybrid_group(workers: int, config):
    """verl's hybrid worker (``DiffusionActorRolloutRefWorker``) on ``workers`` CPU Ray workers, models not built
    (each setting's ``_build`` gives the workers its config)."""
    import ray

    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    from diffugrpo_plugin.integration.workers import DiffusionActorRolloutRefWorker

    return RayWorkerGroup(
        resource_pool=RayResourcePool([workers], use_gpu=False, max_colocate_count=1),
        ray_cls_with_init=RayClassWithInitArgs(
            cls=ray.remote(DiffusionActorRolloutRefWorker), config=config, role="actor_rollout_ref"
        ),
        device_name="cpu",
    )


def _build(worker, config, role: str) -> None:
    """On a worker: verl's ``init_model`` for ``config`` and ``role``, replacing the models of any earlier build."""
    worker.config, worker.role = config, role
    worker._is_ref = "ref" in role
    worker.actor = worker.ref = worker.rollout = None
    for registry in (worker._Worker__dispatch_dp_rank, worker._Worker__collect_dp_rank):  # verl registers once
        for mesh in ("actor", "ref"):
            registry.pop(mesh, None)
    worker.init_model()


def on_all(group, function, *args):
    """``function(worker, *args)`` on every worker at once (collectives need every rank); rank 0's result."""
    import ray

    return ray.get([worker.__ray_call__.remote(function, *args) for worker in group.workers])[0]


def _full_weights(worker, which: str) -> dict[str, torch.Tensor]:
    """On a worker: the whole of each parameter of its policy (``actor``) or reference (``ref``), gathered from the
    shards (collective), adapters included; the rollout's canonical names."""
    from diffugrpo_plugin.models.lora import canonical_weight_name

    module = getattr(worker, which).engine.module
    return {
        canonical_weight_name(name): (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for name, p in module.named_parameters()
    }


def _rollout_gap(worker) -> float:
    """On a worker: the largest difference between its rollout copy's parameters and the gathered policy's (the
    rollout's adapters against the policy's, and the rollout's base against the policy's frozen base)."""
    from diffugrpo_plugin.models.lora import canonical_weight_name

    policy = _full_weights(worker, "actor")
    copy = {canonical_weight_name(n): p for n, p in worker.rollout.lm.module.named_parameters()}
    assert set(copy) == set(policy), sorted(set(copy) ^ set(policy))[:5]
    return max(float((copy[name] - policy[name]).abs().max()) for name in policy)


def scores(output, responses) -> list[torch.Tensor]:
    return response_logprobs(output, responses)


def update(group, prompts, responses, seeds, old, ref):
    """One optimizer step of verl's PPO loss on the whole batch, as the trainer asks for it; its loss and gradient
    norm."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import reduce_metrics

    data = ppo_batch(prompts, responses, seeds, old, ref)
    tu.assign_non_tensor(data, mini_batch_size=len(prompts), epochs=1, seed=42, dataloader_kwargs={"shuffle": False})
    metrics = group.update_actor(data)["metrics"]
    return reduce_metrics({name: metrics[name] for name in ("loss", "grad_norm", "actor/pg_loss", "kl_loss")})


def logprob_pass(group, prompts, responses, seeds, reference: bool = False, base: bool = False):
    from verl.utils import tensordict_utils as tu

    data = tensordict_for(prompts, responses, seeds, 1)
    if base:
        tu.assign_non_tensor(data, no_lora_adapter=True)
    call = group.compute_ref_log_prob if reference else group.compute_log_prob
    return scores(call(data), responses)


@functools.lru_cache(maxsize=None)
def second_batch():
    """The second step's batch: other completions, other masks."""
    prompts, responses, _ = make_batch(vocab=64)
    generator = torch.Generator().manual_seed(8)
    return (
        prompts,
        [torch.randint(5, 56, (len(r),), generator=generator) for r in responses],
        torch.tensor([21, 22, 23, 24]),
    )


def run_full(group, model_path: str, fsdp: dict, reference_fsdp: dict | None, checkpoint_dir) -> dict:
    """Step 1 (update, rollout sync, reference sync), a checkpoint, step 2; then a rebuilt worker resumes from the
    checkpoint and takes step 2 again. Everything the checks compare, from rank 0."""
    config = hybrid_config(model_path, fsdp, reference_fsdp)
    prompts, responses, seeds = make_batch(vocab=64)
    on_all(group, _build, config, "actor_rollout_ref")
    out = {"initial": on_all(group, _full_weights, "actor")}
    old = logprob_pass(group, prompts, responses, seeds)
    ref = logprob_pass(group, prompts, responses, seeds, reference=True)
    out["step 1"] = update(group, prompts, responses, seeds, old, ref)
    import ray

    ray.get(group.update_weights(global_steps=1))
    out["rollout gap"] = max(ray.get([worker.__ray_call__.remote(_rollout_gap) for worker in group.workers]))
    out["policy 1"] = on_all(group, _full_weights, "actor")
    group.sync_reference(ALPHA)
    out["reference 1"] = on_all(group, _full_weights, "ref")
    out["reference 1 log-probs"] = logprob_pass(group, prompts, responses, seeds, reference=True)
    group.save_checkpoint(str(checkpoint_dir), global_step=1)

    def step_2():
        batch = second_batch()
        old = logprob_pass(group, *batch)
        ref = logprob_pass(group, *batch, reference=True)
        return {"old": old, "ref": ref, "metrics": update(group, *batch, old, ref)}

    out["step 2"] = step_2()
    out["policy 2"] = on_all(group, _full_weights, "actor")
    on_all(group, _build, config, "actor_rollout_ref")  # a fresh start, as after kill -9
    group.load_checkpoint(str(checkpoint_dir))
    out["resumed step 2"] = step_2()
    out["resumed policy 2"] = on_all(group, _full_weights, "actor")
    return out


def run_lora(group, model_path: str, fsdp: dict, adapter: str) -> dict:
    """One LoRA step from ``adapter`` (verl's reference: the policy without its adapters) and the rollout sync
    after it. From a saved adapter with B != 0, so that both A and B get gradients; a new adapter's random A
    differs between world sizes (measured: by 0.35), which would hide the update's equality."""
    import ray

    config = hybrid_config(model_path, fsdp, None, adapter)
    prompts, responses, seeds = make_batch(vocab=64)
    on_all(group, _build, config, "actor_rollout")  # verl's role under LoRA: the reference is the base
    out = {"initial": on_all(group, _full_weights, "actor")}
    old = logprob_pass(group, prompts, responses, seeds)
    ref = logprob_pass(group, prompts, responses, seeds, base=True)
    out["step 1"] = update(group, prompts, responses, seeds, old, ref)
    out["policy 1"] = on_all(group, _full_weights, "actor")
    out["log-probs 1"] = logprob_pass(group, prompts, responses, seeds)
    ray.get(group.update_weights(global_steps=1))
    out["rollout gap"] = max(ray.get([worker.__ray_call__.remote(_rollout_gap) for worker in group.workers]))
    return out


class Runs:
    """Each setting run once (on first use), on one worker group per world size."""

    def __init__(self, model_path: str, scratch):
        self.model_path, self.scratch = model_path, scratch
        self.groups: dict[int, object] = {}
        self.results: dict[tuple[str, str], dict] = {}
        self.adapter: str | None = None

    def group(self, workers: int):
        if workers not in self.groups:  # kept to the end: 1 + 2 + 4 workers fit the cluster's 8 CPUs
            self.groups[workers] = hybrid_group(workers, hybrid_config(self.model_path, {}, None))
        return self.groups[workers]

    def full(self, name: str) -> dict:
        if ("full", name) not in self.results:
            table = FULL if name in FULL else ACTOR_ONLY
            workers, fsdp = table[name]
            reference_fsdp = {} if name in ACTOR_ONLY else None
            folder = self.scratch / f"checkpoint-{len(self.results)}"
            self.results["full", name] = run_full(self.group(workers), self.model_path, fsdp, reference_fsdp, folder)
        return self.results["full", name]

    def lora(self, name: str) -> dict:
        if ("lora", name) not in self.results:
            workers, fsdp = LORA[name]
            if self.adapter is None:
                self.adapter = saved_random_adapter(self.model_path, self.scratch / "adapter")
            self.results["lora", name] = run_lora(self.group(workers), self.model_path, fsdp, self.adapter)
        return self.results["lora", name]

    def close(self):
        for group in self.groups.values():
            release(group)


@pytest.fixture(scope="module")
def runs(tiny_model_path, tmp_path_factory, ray_cluster):  # noqa: F811
    runs = Runs(tiny_model_path, tmp_path_factory.mktemp("many_workers"))
    yield runs
    runs.close()


def assert_weights_close(got: dict, want: dict, atol: float = WEIGHT_ATOL) -> None:
    assert set(got) == set(want)
    worst = max(got, key=lambda name: float((got[name] - want[name]).abs().max()))
    assert torch.allclose(got[worst], want[worst], atol=atol, rtol=0), (worst, (got[worst] - want[worst]).abs().max())


def assert_logprobs_close(got: list, want: list, atol: float = LOGPROB_ATOL) -> None:
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, atol=atol, rtol=0), (g - w).abs().max()


def assert_metrics_close(got: dict, want: dict) -> None:
    for name in want:
        assert got[name] == pytest.approx(want[name], rel=METRIC_REL, abs=1e-7), name


def mixed_model_logprobs(model_path: str, policy: dict, reference: dict, directory) -> list[torch.Tensor]:
    """The formula on one process: the model with ``ALPHA * policy + (1 - ALPHA) * reference`` weights, saved and
    scored by the direct computation (every view's full logits)."""
    from transformers import AutoTokenizer

    from diffugrpo_plugin.models.dlm import load_pretrained
    from engine_support import direct_response_logprobs

    model = load_pretrained(model_path)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(ALPHA * policy[name] + (1 - ALPHA) * reference[name])
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(model_path).save_pretrained(directory)
    prompts, responses, seeds = make_batch(vocab=64)
    return direct_response_logprobs(str(directory), prompts, responses, seeds)


@pytest.mark.parametrize("name", layouts([*FULL, *ACTOR_ONLY]))
def test_reference_sync_mixes_the_whole_policy_into_the_reference(runs, name, tiny_model_path, tmp_path):
    """After ``sync_reference``, the reference's log-probs are those of the model with alpha * policy + (1 - alpha) *
    reference weights built on one process from the gathered weights; the weights are the same step's as on one
    worker."""
    result = runs.full(name)
    assert_weights_close(result["policy 1"], runs.full(BASELINE)["policy 1"])
    mixed = {n: ALPHA * result["policy 1"][n] + (1 - ALPHA) * result["initial"][n] for n in result["initial"]}
    assert_weights_close(result["reference 1"], mixed)
    want = mixed_model_logprobs(tiny_model_path, result["policy 1"], result["initial"], tmp_path / "mixed")
    assert_logprobs_close(result["reference 1 log-probs"], want, atol=1e-4)  # the direct computation's own order
    assert_logprobs_close(result["reference 1 log-probs"], runs.full(BASELINE)["reference 1 log-probs"])


@pytest.mark.parametrize("name", layouts(FULL))
def test_every_worker_takes_the_step_of_one(runs, name):
    result, baseline = runs.full(name), runs.full(BASELINE)
    assert_weights_close(result["initial"], baseline["initial"], atol=0)
    assert_metrics_close(result["step 1"], baseline["step 1"])
    assert_metrics_close(result["step 2"]["metrics"], baseline["step 2"]["metrics"])
    assert_weights_close(result["policy 2"], baseline["policy 2"])
    # the step is far above the tolerance
    moved = max(float((baseline["policy 1"][n] - baseline["initial"][n]).abs().max()) for n in baseline["initial"])
    assert moved > 100 * WEIGHT_ATOL


@pytest.mark.parametrize("name", layouts(FULL))
def test_the_rollout_copy_equals_the_gathered_policy_after_the_sync(runs, name):
    result = runs.full(name)
    assert result["rollout gap"] == 0.0


@pytest.mark.parametrize("name", layouts(FULL))
def test_a_resumed_worker_takes_the_step_the_uninterrupted_one_took(runs, name):
    """Rebuilt from scratch in the same processes (a killed job's workers start anew) and loaded from the checkpoint
    of step 1: the policy's and the reference's log-probs, the loss and the weights after step 2 are the
    uninterrupted run's."""
    result = runs.full(name)
    uninterrupted, resumed = result["step 2"], result["resumed step 2"]
    assert_logprobs_close(resumed["old"], uninterrupted["old"], atol=0)
    assert_logprobs_close(resumed["ref"], uninterrupted["ref"], atol=0)
    assert_metrics_close(resumed["metrics"], uninterrupted["metrics"])
    assert_weights_close(result["resumed policy 2"], result["policy 2"], atol=0)


@pytest.mark.parametrize("name", layouts(LORA))
def test_lora_trains_the_adapters_alone_as_one_worker_does(runs, name):
    result, baseline = runs.lora(name), runs.lora(BASELINE)
    assert_weights_close(result["initial"], baseline["initial"], atol=0)  # new adapters: one draw at every size
    assert_metrics_close(result["step 1"], baseline["step 1"])
    assert_weights_close(result["policy 1"], baseline["policy 1"])
    assert_logprobs_close(result["log-probs 1"], baseline["log-probs 1"])
    changed = {n for n in result["initial"] if not torch.equal(result["initial"][n], result["policy 1"][n])}
    assert changed and all("lora_" in n for n in changed), sorted(changed)[:5]  # the base is frozen
    assert any("lora_A" in n for n in changed) and any("lora_B" in n for n in changed)
    assert result["rollout gap"] == 0.0


@pytest.mark.slow
@pytest.mark.sandbox  # the default job's code rewards
@pytest.mark.parametrize("workers", [2, 4])
def test_the_main_job_killed_and_resumed_on_many_workers_takes_the_uninterrupted_step(workers, tmp_path):
    """``python -m verl.trainer.main algorithm=coupled_grpo`` on ``workers`` logical GPUs with the reference synced
    every step (alpha 0.6): SIGKILLed (the whole process group, Ray's workers included) once step 3 is logged,
    resumed from step 2's checkpoint, it takes steps 3 and 4, and its step 3 is the killed run's step 3: the same KL
    to the reference (the synced reference came back with the policy; the reference of model.path, which verl
    alone would rebuild, is further from the policy) and the same policy loss."""
    import subprocess

    from main_e2e_support import SHORT, logged_steps, main_command, metric_by_step, run_until_step

    common = [
        f"trainer.n_gpus_per_node={workers}",
        "trainer.total_training_steps=4",
        "trainer.save_freq=2",
        "actor_rollout_ref.actor.optim.lr=0.01",
        "diffugrpo.ref_sync.enable=true",
        "diffugrpo.ref_sync.steps=1",
        f"diffugrpo.ref_sync.alpha={ALPHA}",
        *SHORT,
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
    ]
    killed = run_until_step(main_command(*common), tmp_path, 3)
    assert logged_steps(killed) == [1, 2, 3], killed[-5000:]
    assert (tmp_path / "ckpt" / "global_step_2" / "actor" / "diffugrpo_reference").is_dir()
    resumed = subprocess.run(main_command(*common), cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    log = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, log[-5000:]
    assert logged_steps(log) == [3, 4]
    for name in ("actor/kl_loss", "actor/pg_loss"):
        before, after = metric_by_step(killed, name), metric_by_step(log, name)
        print(name, "killed run", before, "resumed", after)
        # the resumed step 3's KL was 0.26% off the killed run's in one run at 2 workers and 3.3% in another (CI
        # on a3a0a22; why it is not bit-exact is open). A reference rebuilt from model.path instead, as verl alone
        # does, put the loss off by 2.7x: 15% tells the two apart with room on both sides
        assert after[3] == pytest.approx(before[3], rel=0.15, abs=1e-7), (name, before, after)
