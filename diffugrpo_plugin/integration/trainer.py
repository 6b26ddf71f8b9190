"""The ``diffugrpo`` V1 trainer: verl's synchronous PPO trainer with coupled-GRPO's mask schedule.

Registered with ``verl.trainer.ppo.v1.register_trainer`` and selected by
``trainer.v1.trainer_mode=diffugrpo`` (``algorithm=coupled_grpo`` sets it).

One training step, in order: verl's stage (``PPOTrainer.fit`` / ``_step_once``), then what runs there.

1. **gen** (verl's replay buffer asks the agent loops): ``agent_loop.DiffusionAgentLoop`` sends each
   prompt ``n`` times to the rollout server (``request_batcher.RequestBatcher``), which batches requests
   that the trainer worker pulls into ``rollout.DiffusionRollout.generate_batch``: a sampler
   (``sampling/``) fills the whole canvas on the rollout's policy copy; the loop masks everything
   after the first EOS out of the loss.
2. **reward** (verl's reward workers, while generation goes on):
   ``reward_manager.DiffugrpoRewardManager.run_single`` -> ``rewards.RewardSpec.score`` -> the
   reward plugins (``reward_plugins/``; code runs in ``sandbox``); components and failure flags
   travel in ``reward_extra_info``.
3. **old_log_prob**: verl's balancing stage first puts the completions in order by prompt and sample
   (:func:`sample_order`, so timing decides nothing below); :meth:`DiffuGRPOTrainer._compute_old_log_prob` writes
   ``num_iterations`` mask seeds per sample (``masking.mask_seed_table``, ``actor.ppo_epochs`` is DiffuCoder's
   ``num_iterations``), then runs verl's pass once for all of them: the worker
   (:class:`IterationMasksTrainingWorker`) scores the batch repeated once per iteration with that iteration's
   seeds, ``engine.DiffusionLMEngine.forward_step`` -> the masker's views ->
   ``logprobs.coupled_token_logprobs``, and splits the result back per iteration.
4. **ref**: :meth:`DiffuGRPOTrainer._compute_ref_log_prob`, the same on the reference. When the reference
   lives in the policy's worker (verl's hybrid worker, LoRA included) the worker already scored it in step 3's
   call (:meth:`DiffusionActorRolloutRefWorker.compute_log_prob`) and this stage only stores it.
5. **adv**: :meth:`DiffuGRPOTrainer._compute_advantage` first hands the step's completions to a custom data
   sampler, if ``data.sampler`` names one (the curriculum: ``curriculum.CurriculumSampler``), then rewrites
   the scores to group-normalised
   totals when ``diffugrpo.rewards.aggregation=group_normalized`` (GDPO-style, it needs the groups),
   then verl's step calls ``algorithm.compute_coupled_grpo_advantage`` (leave-one-out).
6. **update_actor**: :meth:`DiffusionActorRolloutRefWorker.update_actor` expands the batch
   iteration-major (:func:`expand_iterations`: copy ``k`` carries mask ``k`` and the old/reference
   log-probs computed with it; with ``actor.shuffle=False`` the order is the reference's), then
   verl's ``train_mini_batch`` -> ``forward_step`` -> verl's ``ppo_loss`` with
   ``algorithm.compute_coupled_grpo_policy_loss`` and verl's k3 KL.
7. **step end**: :meth:`DiffuGRPOTrainer.step` mixes the reference towards the policy every
   ``diffugrpo.ref_sync.steps`` steps (TRL's ``sync_ref_model``: ``alpha * policy + (1 - alpha) * reference``;
   DiffuCoder: 64 steps, 0.6); verl then saves checkpoints (a synced reference in the actor's folder,
   :data:`REFERENCE_FOLDER`) and syncs the new weights to the rollout (``DiffusionRollout.update_weights``).
8. **metrics**: :meth:`DiffuGRPOTrainer._compute_metrics` adds each reward component's mean,
   None and failure fractions, the total, the split of rollout time into sampling and scoring,
   and completion lengths up to the EOS; a reward failing on most completions for
   ``stop_after_failed_steps`` steps in a row stops training (:class:`RewardFailure`). verl logs
   them all (TensorBoard, the log file); the step's key metrics go to the terminal in one line
   (:mod:`.console`).

CPU hosts: workers start their process group with plain gloo (verl asks for
``cpu:gloo,cpu:gloo`` otherwise), each trainer process reserves one Ray CPU instead of verl's
three, and the replay buffer polls without verl's 2 s sleep.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from typing import Any, Iterable

import ray
import torch
from omegaconf import OmegaConf, open_dict
from tensordict import TensorDict
from torch.distributed import checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor, distribute_tensor

from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu
from verl.utils.device import get_device_name
from verl.utils.distributed import initialize_global_process_group_ray
from verl.utils.profiler import DistProfiler
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker
from verl.workers.utils.padding import response_from_nested

from diffugrpo_plugin.core.loss_terms import StepBatch, configured_terms
from diffugrpo_plugin.core.masking import mask_seed_table
from diffugrpo_plugin.integration.console import (
    LearningSummary,
    StepReporter,
    resume_line,
    step_line,
    validation_line,
)
from diffugrpo_plugin.integration.engine import ITERATION_FIELD, LOSS_TERM_FIELD, MASK_SEED_FIELD, TRACE_FIELD
from diffugrpo_plugin.integration.layout import (
    InProcessRewardWorker,
    apply_lean_settings,
    check_cluster_fits,
    rewards_in_agent_loop,
)
from diffugrpo_plugin.integration.preflight import check_config, data_sampler_class
from diffugrpo_plugin.integration.reward_manager import ERROR_INFO_PREFIX, EXTRA_INFO_PREFIX, SECONDS_KEY
from diffugrpo_plugin.integration.rollout import DiffusionRollout, announced
from diffugrpo_plugin.integration.verl_internals import same_data_split
from diffugrpo_plugin.rewards.aggregation import AGGREGATIONS, group_normalized_totals, step_metrics
from diffugrpo_plugin.rewards.learned_weights import LearnedWeights
from diffugrpo_plugin.rewards.spec import RewardSpec
from diffugrpo_plugin.sampling.request_batcher import UNMASK_STEP_FIELD
from diffugrpo_plugin.training.curriculum import CurriculumFeedback, RecordingSampler, group_positions

TRAINER_MODE = "diffugrpo"
LEARNED_WEIGHTS_FILE = "diffugrpo_reward_weights.json"
REPLAY_POLL_INTERVAL_S = 0.05
# a batch's non-tensor entry: how many iterations' mask seeds (mask_seed_iter<k>) one log-prob pass scores
MASK_ITERATIONS_KEY = "mask_iterations"
# a batch's non-tensor entry: the policy's log-prob call scores the reference too, its outputs prefixed
WITH_REFERENCE_KEY = "with_reference"
REFERENCE_PREFIX = "reference_"
# in a checkpoint's actor folder: the synced reference (torch.distributed.checkpoint, any world size can load it)
REFERENCE_FOLDER = "diffugrpo_reference"


class RewardFailure(RuntimeError):
    """A reward failed on most completions for too many steps in a row; the message says what to do."""


def iteration_field(name: str, iteration: int) -> str:
    return f"{name}_iter{iteration}"


def expand_iterations(data: TensorDict, iterations: int) -> TensorDict:
    """Repeat a batch once per iteration, iteration-major, giving copy ``k`` mask seed ``k``, the old/reference
    log-probs computed with that mask, and ``k`` itself (``ITERATION_FIELD``: the loss terms' per-pass fields).
    # [B, ...] -> [K*B, ...]"""
    batch = data.batch_size[0]
    expanded = tu.index_select_tensor_dict(data, torch.arange(batch).repeat(iterations))
    expanded[MASK_SEED_FIELD] = torch.cat([data[iteration_field(MASK_SEED_FIELD, k)] for k in range(iterations)])
    expanded[ITERATION_FIELD] = torch.arange(iterations).repeat_interleave(batch)
    for name in ("old_log_probs", "ref_log_prob"):
        if iteration_field(name, 0) in data.keys():
            expanded[name] = tu.concat_nested_tensors([data[iteration_field(name, k)] for k in range(iterations)])
    return expanded


def split_iterations(output: TensorDict, iterations: int) -> TensorDict:
    """The inverse of :func:`expand_iterations` for a log-prob pass's output: copy ``k``'s fields under
    ``<name>_iter<k>``, and copy 0's also under verl's own names. # [K*B, ...] -> [B, ...]"""
    rows = output.batch_size[0] // iterations
    fields = [name for name, value in output.items() if isinstance(value, torch.Tensor)]
    parts = [tu.index_select_tensor_dict(output, torch.arange(k * rows, (k + 1) * rows)) for k in range(iterations)]
    result = parts[0]
    for k, part in enumerate(parts):
        for name in fields:
            result[iteration_field(name, k)] = part[name]
    return result


def prompt_key(messages) -> str:
    """A short fixed-size name for a prompt's messages: the same prompt drawn at two steps gets the same one, and a run
    over many prompts keeps 32 characters for each, not its text."""
    return hashlib.blake2b(str(messages).encode(), digest_size=16).hexdigest()


def still_pending(by_uid: dict[str, tuple[int, Any]], scored: Iterable[str], step: int) -> dict[str, tuple[int, Any]]:
    """What the trainer keeps per prompt uid, ``(step fetched, value)``, without this step's scored prompts and without
    any fetched before the previous step that never came back (a group filter dropped it)."""
    done = set(scored)
    return {uid: kept for uid, kept in by_uid.items() if uid not in done and kept[0] >= step - 1}


def sample_order(keys: list[str], prompt_keys: dict[str, tuple[int, str]]) -> list[int]:
    """The order that puts a step's completions by prompt, then by their index among the prompt's samples.

    ``keys``: verl's TransferQueue keys, ``{uid}_{session_id}_{output index}``, in the order the replay buffer hands
    them over, which is the order the completions were scored in; ``prompt_keys``: uid -> (step, :func:`prompt_key`).
    Row ``b`` of a step gets mask seed ``b`` (:func:`~diffugrpo_plugin.core.masking.mask_seed_table`) and its
    micro-batch by position, so with this order a seed's run pairs the same completion with the same masks whatever
    the timing (uids are random, so a prompt without a ``prompt_keys`` entry sorts by its uid).
    """

    def sample(key: str) -> tuple[str, int, int]:
        uid, session, output = key.rsplit("_", 2)
        return prompt_keys.get(uid, (0, uid))[1], int(session), int(output)

    try:
        samples = [sample(key) for key in keys]
    except ValueError:  # not verl's key format: keep the replay buffer's order
        return list(range(len(keys)))
    return sorted(range(len(keys)), key=samples.__getitem__)


def real_rows(batch) -> list[int]:
    """Indices of the batch's completions, without the padding verl adds to make it divide."""
    return [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]


def mix_into_reference(reference: torch.nn.Module, policy: torch.nn.Module, alpha: float) -> None:
    """``ref <- alpha * policy + (1 - alpha) * ref`` parameter by parameter (TRL's SyncRefModelCallback).

    On FSDP2 modules it works on the sharded parameters: shard by shard where the two are sharded alike (verl's
    default, one FSDP group over every worker for both), else from the gathered policy parameter, cut to the
    reference's shard (the actor's ``fsdp_size`` set without the reference's: hybrid against full sharding).
    """
    for module in (*reference.modules(), *policy.modules()):
        # after a forward with reshard_after_forward=false the unsharded copies are registered: writing them is lost
        if isinstance(module, FSDPModule):
            module.reshard()
    policy_params = dict(policy.named_parameters())
    with torch.no_grad():
        for name, ref_param in reference.named_parameters():
            if name not in policy_params:
                raise KeyError(f"reference parameter '{name}' has no policy counterpart")
            policy_param = policy_params[name]
            if (
                isinstance(ref_param, DTensor)
                and isinstance(policy_param, DTensor)
                and policy_param.device_mesh == ref_param.device_mesh
                and policy_param.placements == ref_param.placements
            ):
                policy_local = policy_param.to_local()
            else:
                whole = policy_param.full_tensor() if isinstance(policy_param, DTensor) else policy_param.data
                # every rank holds the whole tensor: each keeps its own shard of it, nothing is sent
                policy_local = (
                    distribute_tensor(whole, ref_param.device_mesh, ref_param.placements, src_data_rank=None).to_local()
                    if isinstance(ref_param, DTensor)
                    else whole
                )
            ref_local = ref_param.to_local() if isinstance(ref_param, DTensor) else ref_param.data
            ref_local.mul_(1.0 - alpha).add_(policy_local.to(ref_local.device, ref_local.dtype), alpha=alpha)


def _gloo_process_group_on_cpu() -> None:
    """verl asks torch for ``cpu:gloo,<device>:<backend>``, i.e. ``cpu:gloo,cpu:gloo`` on a CPU host, which torch
    rejects; start the group with plain gloo first (verl then finds it initialised)."""
    if get_device_name() == "cpu":
        initialize_global_process_group_ray(backend="gloo")


class DiffusionTrainingWorker(TrainingWorker):
    """verl's standalone training worker (SFT, tests), with a gloo process group on CPU hosts."""

    def __init__(self, config):
        _gloo_process_group_on_cpu()
        super().__init__(config)


class IterationMasksTrainingWorker(TrainingWorker):
    """The policy and the reference inside the hybrid worker: a log-prob pass over a batch that carries
    ``MASK_ITERATIONS_KEY`` iterations' mask seeds scores every iteration's masks in one call (one dispatch,
    one set of transfer-queue reads and writes instead of one per iteration: verl's ~0.15 s a call on the
    default job's CPU host, measured)."""

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"), blocking=False)
    def infer_batch(self, data: TensorDict) -> TensorDict:
        iterations = int(tu.get(data, key=MASK_ITERATIONS_KEY, default=1))
        if iterations <= 1:
            return super().infer_batch(data)
        output = super().infer_batch(expand_iterations(data, iterations))  # per-row entries (token counts) repeat too
        return None if output is None else split_iterations(output, iterations)


class DiffusionActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's hybrid worker, with a gloo process group on CPU, every iteration's masks in one log-prob call and
    per-iteration masks in the update."""

    actor_worker_cls = IterationMasksTrainingWorker
    ref_worker_cls = IterationMasksTrainingWorker
    reference_synced = False  # the reference is no longer model.path's weights: checkpoints must hold it

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        _gloo_process_group_on_cpu()
        return super().init_model()

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_log_prob(self, data: TensorDict) -> TensorDict:
        """verl's policy log-prob call; with ``WITH_REFERENCE_KEY`` set it also scores the reference on the same rows
        and masks (the reference model, or under LoRA the policy without its adapters) and returns those fields
        prefixed ``REFERENCE_PREFIX``: one dispatch and one set of transfer-queue reads and writes for both passes."""
        if not tu.pop(data, key=WITH_REFERENCE_KEY, default=False):
            return super().compute_log_prob(data)
        reference_data = data.copy()  # its own non-tensor settings; the tensors are shared, not copied
        output = super().compute_log_prob(data)
        tu.assign_non_tensor(reference_data, calculate_entropy=False)
        if self.ref is None:  # LoRA: verl's reference is the base model, the policy with its adapters off
            tu.assign_non_tensor(reference_data, no_lora_adapter=True)
            reference = super().compute_log_prob(reference_data)
        else:
            reference = super().compute_ref_log_prob(reference_data)
        if output is None:  # a rank whose outputs verl does not collect
            return None
        for name, value in list(reference.items()):
            if isinstance(value, torch.Tensor):
                output[REFERENCE_PREFIX + name] = value
        return output

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sync_reference(self, alpha: float) -> None:
        if self.ref is None or self.actor is None:
            raise RuntimeError(
                "diffugrpo.ref_sync needs the reference model in the actor's worker "
                "(actor_rollout_ref.hybrid_engine=true, no LoRA)"
            )
        mix_into_reference(self.ref.engine.module, self.actor.engine.module, float(alpha))
        self.reference_synced = True

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        super().save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)
        if self.ref is not None and self.reference_synced:
            # verl saves the actor alone and rebuilds the reference from model.path, which would undo every sync
            dcp.save(
                get_model_state_dict(self.ref.engine.module), checkpoint_id=os.path.join(local_path, REFERENCE_FOLDER)
            )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        folder = os.path.join(local_path, REFERENCE_FOLDER)
        if self.ref is not None and os.path.isdir(folder):  # before verl's load, which may delete local_path
            state = get_model_state_dict(self.ref.engine.module)
            dcp.load(state, checkpoint_id=folder)
            set_model_state_dict(self.ref.engine.module, state)
            self.reference_synced = True
        super().load_checkpoint(local_path, hdfs_path, del_local_after_load)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def seed_validation(self, validating: bool) -> None:
        """Seed the rollout's requests as a validation's (the same noise at every validation) or a training step's
        (:meth:`~diffugrpo_plugin.integration.rollout.DiffusionRollout.seed_validation`)."""
        if isinstance(self.rollout, DiffusionRollout):
            self.rollout.seed_validation(validating)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
    def update_actor(self, data: TensorDict) -> TensorDict:
        iterations = int(tu.get(data, key="epochs", default=1))
        if iterations > 1:
            data = expand_iterations(data, iterations)
            tu.assign_non_tensor(data, epochs=1)
        output = self.actor.train_mini_batch(data=data)
        return output.cpu() if output is not None else None


@register_trainer(TRAINER_MODE)
class DiffuGRPOTrainer(PPOTrainerSync):
    """Synchronous coupled-GRPO trainer (colocated diffusion rollout, hybrid engine)."""

    def __init__(self, config):
        # Our entry points check before Ray starts; verl's main_ppo reaches us first here.
        check_config(config)
        # verl switches to asynchronous behaviour for any trainer_mode other than "sync".
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        apply_lean_settings(config)
        super().__init__(config)
        diffusion = config.actor_rollout_ref.model.get("diffusion", {}) or {}
        self.num_iterations = int(config.actor_rollout_ref.actor.ppo_epochs)
        self.mask_seed_base = int(diffusion.get("mask_seed", 42))
        self.random_masking = bool(diffusion.get("random_masking", True))
        self.record_trace = bool(diffusion.get("record_trace", False))
        ref_sync = config.get("diffugrpo", {}).get("ref_sync", {}) or {}
        self.ref_sync_steps = int(ref_sync.get("steps", 0)) if ref_sync.get("enable", False) else 0
        self.ref_sync_alpha = float(ref_sync.get("alpha", 0.6))
        if self.ref_sync_steps and not 0.0 < self.ref_sync_alpha <= 1.0:
            raise ValueError(f"diffugrpo.ref_sync.alpha must be in (0, 1], got {self.ref_sync_alpha}")
        self.reward_spec = RewardSpec.from_config(OmegaConf.to_container(config.diffugrpo.rewards, resolve=True))
        self.learned_weights = (
            LearnedWeights(self.reward_spec.weights, self.reward_spec.gate_reward)
            if AGGREGATIONS[self.reward_spec.aggregation].learns_weights
            else None
        )
        self.loss_terms = configured_terms(diffusion.get("loss_terms"))
        self.prompt_rows: dict[str, tuple[int, dict]] = {}  # uid -> (step fetched, its extra_info): for the loss terms
        self.prompt_keys: dict[str, tuple[int, str]] = {}  # uid -> (step fetched, prompt_key): the prompt across steps
        self.failed_steps: dict[str, int] = {}  # per reward: consecutive steps it failed on half the completions
        self.reporter = StepReporter()
        self.learning = LearningSummary(self.reward_spec.names)
        self.training_started = False
        self.reference_with_policy: bool | None = None  # decided once the workers exist

    def fit(self, agent_loop_manager):
        """verl's loop, with each dispatch announced to the rollout server
        (:class:`~diffugrpo_plugin.integration.rollout.AnnouncedDispatches`)."""
        servers = self.llm_server_manager.server_handles  # verl's v1 trainer builds it (empty without servers)
        return super().fit(announced(agent_loop_manager, servers, self.config.actor_rollout_ref.rollout))

    def get_reward_handles(self):
        """What the agent-loop workers score rewards with: under the lean layout, in their own process."""
        if rewards_in_agent_loop(self.config):
            return [InProcessRewardWorker(self.config)]
        return super().get_reward_handles()

    def _init_dataloader(self):
        """verl's dataloaders; with ``data.sampler.class_path`` / ``class_name`` the training one draws through that
        sampler (verl 0.9.1 has no such hook; later versions read the same keys), recorded so that each prompt's
        dataset position is known when its rewards come back."""
        super()._init_dataloader()
        self.data_sampler, self.prompt_positions = None, {}
        sampler_class = data_sampler_class(self.config)
        if sampler_class is None:
            return
        from torchdata.stateful_dataloader import StatefulDataLoader

        loader = self.train_dataloader
        self.data_sampler = RecordingSampler(
            sampler_class(data_source=self.train_dataset, data_config=self.config.data)
        )
        self.train_dataloader = StatefulDataLoader(
            dataset=loader.dataset,
            batch_size=loader.batch_size,
            num_workers=loader.num_workers,
            drop_last=loader.drop_last,
            collate_fn=loader.collate_fn,
            sampler=self.data_sampler,
        )

    def _fetch_one_gen_batch(self):
        batch = super()._fetch_one_gen_batch()
        keys = [(self.global_steps, prompt_key(messages)) for messages in batch["raw_prompt"]]
        self.prompt_keys.update(zip(list(batch["uid"]), keys))
        if self.data_sampler is not None:
            self.prompt_positions.update(zip(list(batch["uid"]), self.data_sampler.take(len(batch))))
        if self.loss_terms:
            rows = list(batch["extra_info"]) if "extra_info" in batch.keys() else [{}] * len(batch)
            self.prompt_rows.update(zip(list(batch["uid"]), [(self.global_steps, dict(row or {})) for row in rows]))
        return batch

    def _update_data_sampler(self, batch, metrics) -> None:
        """The step's completions to the sampler (before the checkpoint, so a resumed run has seen them)."""
        real = real_rows(batch)
        samples, _, uids = self._reward_components(batch)
        totals = [float(row.sum()) for row in self._get(batch, ["rm_scores"])["rm_scores"].unbind()]
        positions = group_positions([uids[i] for i in real], self.prompt_positions)
        self.data_sampler.update(
            CurriculumFeedback(
                positions=positions, rewards=[totals[i] for i in real], components=[samples[i] for i in real]
            )
        )
        for uid in set(uids):
            self.prompt_positions.pop(uid, None)
        metrics.update(self.data_sampler.metrics())

    def step(self, metrics, timing_raw):
        batch = super().step(metrics, timing_raw)
        # here, not after verl's checkpoint of this step: the checkpoint must hold the reference the next step uses
        if self.ref_sync_steps and self.use_reference_policy and self.global_steps % self.ref_sync_steps == 0:
            self.actor_rollout_wg.sync_reference(self.ref_sync_alpha)
        return batch

    def _build_replay_buffer(self):
        replay_buffer = super()._build_replay_buffer()
        replay_buffer.poll_interval = REPLAY_POLL_INTERVAL_S
        return replay_buffer

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        for role, remote_cls in list(self.role_worker_mapping.items()):
            if getattr(remote_cls, "__ray_actor_class__", None) is ActorRolloutRefWorker:
                self.role_worker_mapping[role] = ray.remote(DiffusionActorRolloutRefWorker)
        if get_device_name() == "cpu" and not self.config.reward.reward_model.enable:
            # verl reserves 3 Ray CPUs per trainer process for up to 3 worker groups in it; V1 fuses all the
            # pool's roles into one process per bundle, so 1 is enough (and the config asks Ray for fewer)
            self.resource_pool_manager.max_colocate_count = 1
        check_cluster_fits(self.config, self.resource_pool_manager)

    def on_train_begin(self):
        super().on_train_begin()
        self.training_started = True

    def _validate(self):
        # common random numbers: every validation samples the k-th completion of a task with the same seed, so two
        # validations are not also two independent draws of noise
        self.actor_rollout_wg.seed_validation(True)
        try:
            metrics = super()._validate()
        finally:
            self.actor_rollout_wg.seed_validation(False)
        if not self.training_started:  # validations during training are on their step's line
            self.reporter.report(validation_line(self.global_steps, metrics))
            self.learning.observe(self.global_steps, metrics)
        return metrics

    def _put(self, batch, fields: dict) -> None:
        """Stores ``fields`` for the batch's samples; the batch's field list then names them, so the stages after
        this one (the update) fetch them."""
        import transfer_queue as tq

        stored = tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(fields, batch_size=len(batch))
        )
        batch.fields = stored.fields

    def _get(self, batch, fields: list[str]) -> TensorDict:
        import transfer_queue as tq

        return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)

    def _scores_reference_with_policy(self) -> bool:
        """Whether the policy's log-prob call can score the reference as well: the reference lives in the policy's
        worker (verl's hybrid worker, or LoRA's base model) and verl splits a batch across its ranks the same way
        for both."""
        if self.reference_with_policy is None:
            group = self.actor_rollout_wg
            correction = self.config.algorithm.get("rollout_correction", None) or {}
            self.reference_with_policy = (
                self.use_reference_policy
                and not correction.get("bypass_mode", False)  # verl's old-log-prob stage then calls no worker
                and self.ref_policy_wg is group
                and (self.ref_in_actor or same_data_split(group, "ref", "actor"))
            )
        return self.reference_with_policy

    def _balance_batch(self, batch, metrics, *args, **kwargs):
        """verl's reordering of the step's completions, from their order by prompt and sample (:func:`sample_order`)
        rather than the order they were scored in."""
        batch.reorder(sample_order(batch.keys, self.prompt_keys))
        return super()._balance_batch(batch, metrics, *args, **kwargs)

    def _store_trace(self, batch) -> None:
        """The rollout's denoising trace (each canvas token's decision step, in the sample's ``extra_fields``) as the
        batch field the engine hands a trace-reading masker, one entry per response token (nested ``[B, r]``)."""
        data = self._get(batch, ["extra_fields", "responses"])
        lengths = [row.numel() for row in data["responses"].unbind()]
        rows = []
        for extra, length in zip(list(data["extra_fields"]), lengths):
            steps = (extra or {}).get(UNMASK_STEP_FIELD)
            if steps is None:
                raise ValueError(
                    "diffusion.record_trace is on but a rollout sample carries no trace: its sampler ignores "
                    "record_trace; pick a built-in sampler (actor_rollout_ref.rollout.engine_kwargs.diffusion.sampler)"
                )
            rows.append(torch.tensor(list(steps)[:length], dtype=torch.long))
        self._put(batch, {TRACE_FIELD: torch.nested.as_nested_tensor(rows, layout=torch.jagged)})

    def _compute_old_log_prob(self, batch, metrics):
        if self.record_trace:
            self._store_trace(batch)
        seeds = mask_seed_table(
            self.mask_seed_base, self.global_steps, len(batch), self.num_iterations, self.random_masking
        )  # [B, K]
        per_iteration = {
            iteration_field(MASK_SEED_FIELD, k): seeds[:, k].contiguous() for k in range(self.num_iterations)
        }
        self._put(batch, per_iteration)
        flags = {WITH_REFERENCE_KEY: True} if self._scores_reference_with_policy() else {}
        return self._per_iteration(batch, metrics, super()._compute_old_log_prob, "old_log_probs", per_iteration, flags)

    def _compute_ref_log_prob(self, batch, metrics):
        if self._scores_reference_with_policy():  # scored with the old log-probs: only stored here
            self._store_iterations(batch, REFERENCE_PREFIX + "log_probs", "ref_log_prob", also_as_iteration_0=True)
            # the update fetches every field the batch names; it reads ref_log_prob_iter<k>, not these
            batch.fields = [name for name in batch.fields if not name.startswith(REFERENCE_PREFIX)]
            return batch
        fields = [iteration_field(MASK_SEED_FIELD, k) for k in range(self.num_iterations)]
        return self._per_iteration(
            batch, metrics, super()._compute_ref_log_prob, "ref_log_prob", self._get(batch, fields)
        )

    def _per_iteration(self, batch, metrics, compute, output_field: str, seeds, flags=None):
        """Run verl's pass ``compute`` once for every iteration's masks (``seeds``: the per-iteration seed fields;
        :class:`IterationMasksTrainingWorker` scores them all) and store each iteration's result under
        ``<output_field>_iter<k>``. verl's own uses of old/ref log-probs (metrics, rollout correction) see
        iteration 0 under ``output_field``. ``flags``: more non-tensor entries for this call only."""
        self._put(batch, {MASK_SEED_FIELD: seeds[iteration_field(MASK_SEED_FIELD, 0)]})
        sent = batch
        call_only = {MASK_ITERATIONS_KEY: self.num_iterations, **(flags or {})}
        sent.extra_info.update(call_only)
        try:
            batch = compute(sent, metrics)
        finally:  # later stages (the update) must not see them
            for key in call_only:
                sent.extra_info.pop(key, None)
                batch.extra_info.pop(key, None)
        self._store_iterations(batch, "log_probs", output_field)
        return batch

    def _store_iterations(self, batch, source: str, target: str, also_as_iteration_0: bool = False) -> None:
        """A log-prob call's per-iteration output ``<source>_iter<k>`` (``source`` itself for one iteration), aligned
        to the response, as ``<target>_iter<k>``; with ``also_as_iteration_0`` iteration 0's also as ``target``."""
        names = (
            [source] if self.num_iterations == 1 else [iteration_field(source, k) for k in range(self.num_iterations)]
        )
        data = self._get(batch, [*names, "response_mask"])
        fields = {
            iteration_field(target, k): response_from_nested(data[name], data["response_mask"])
            for k, name in enumerate(names)
        }
        if also_as_iteration_0:
            fields[target] = fields[iteration_field(target, 0)]
        self._put(batch, fields)

    def _reward_components(self, batch) -> tuple[list[dict[str, float | None]], list[set[str]], list]:
        """Each sample's reward components (None where not applicable or failed), the components that
        failed on it, and its group id."""
        data = self._get(batch, ["extra_fields", "uid"])
        samples, failed = [], []
        for extra in list(data["extra_fields"]):
            info = (extra or {}).get("reward_extra_info", {}) or {}
            samples.append(
                {
                    key[len(EXTRA_INFO_PREFIX) :]: None if math.isnan(value) else float(value)
                    for key, value in info.items()
                    if key.startswith(EXTRA_INFO_PREFIX)
                }
            )
            failed.append(
                {
                    key[len(ERROR_INFO_PREFIX) :]
                    for key, value in info.items()
                    if key.startswith(ERROR_INFO_PREFIX) and value
                }
            )
        return samples, failed, list(data["uid"])

    def _check_reward_failures(self, failed: list[set[str]]) -> None:
        """Reports the rewards that failed this step; stops training when one has failed on at least
        half the completions for ``stop_after_failed_steps`` steps in a row (a broken harness: its
        None values would leave the other components to be optimised alone, silently). Half, not
        all: completions a reward settles without its harness (the ``code`` reward's unformatted
        ones score 0 without the sandbox) do not fail with it."""
        counts = {name: sum(name in names for names in failed) for name in self.reward_spec.names}
        for name, count in counts.items():
            mostly = bool(failed) and 2 * count >= len(failed)
            self.failed_steps[name] = self.failed_steps.get(name, 0) + 1 if mostly else 0
            if count:
                print(
                    f"[diffugrpo] step {self.global_steps}: reward '{name}' failed on {count} of {len(failed)} "
                    f"completions and scored None there; the reward workers' log has the error",
                    file=sys.stderr,
                    flush=True,
                )
        patience = self.reward_spec.stop_after_failed_steps
        broken = sorted(name for name, streak in self.failed_steps.items() if patience and streak >= patience)
        if broken:
            raise RewardFailure(
                f"reward(s) {broken} failed on at least half the completions for {patience} steps in a row (step "
                f"{self.global_steps}); training on the other components alone would optimise something else. Fix "
                f"the cause in the reward workers' log (a broken sandbox: run `diffugrpo sandbox check`), then resume "
                f"from the last checkpoint; diffugrpo.rewards.stop_after_failed_steps=0 never stops."
            )

    def _compute_advantage(self, batch, metrics):
        if self.data_sampler is not None:
            self._update_data_sampler(batch, metrics)
        if AGGREGATIONS[self.reward_spec.aggregation].whole_group:
            samples, _, groups = self._reward_components(batch)
            self._rewrite_totals(batch, group_normalized_totals(samples, groups, self.reward_spec.weights))
        elif self.learned_weights is not None:
            samples, _, groups = self._reward_components(batch)
            real = real_rows(batch)
            self._rewrite_totals(batch, self.learned_weights.totals(samples))  # the weights before this step's fit
            metrics.update(self.learned_weights.metrics())
            metrics["reward_weights/groups_fitted"] = self.learned_weights.fit(
                [samples[i] for i in real], [groups[i] for i in real]
            )
        batch = super()._compute_advantage(batch, metrics)
        if self.loss_terms:
            self._prepare_loss_terms(batch)
        return batch

    def _prepare_loss_terms(self, batch) -> None:
        """Each loss term's per-sample tensors, from the step's groups, rewards, data and per-pass log-ratios, into
        the batch the update reads (``LOSS_TERM_FIELD``)."""
        passes = range(self.num_iterations)
        olds = [iteration_field("old_log_probs", k) for k in passes]
        refs = [iteration_field("ref_log_prob", k) for k in passes] if self.use_reference_policy else olds
        data = self._get(batch, sorted({"uid", "rm_scores", "responses", "response_mask", *olds, *refs}))
        uids = list(data["uid"])
        real = torch.zeros(len(uids), dtype=torch.bool)
        real[real_rows(batch)] = True
        masks = data["response_mask"].unbind()
        logratios = torch.stack(
            [
                torch.stack(
                    [
                        ((old - ref) * mask).sum()
                        for old, ref, mask in zip(data[old_name].unbind(), data[ref_name].unbind(), masks)
                    ]
                )
                for old_name, ref_name in zip(olds, refs)
            ],
            dim=1,
        ).float()  # [B, K]
        step = StepBatch(
            groups=uids,
            rewards=torch.tensor([float(row.sum()) for row in data["rm_scores"].unbind()]),
            rows=[self.prompt_rows.get(uid, (0, {}))[1] for uid in uids],
            response_lengths=data["responses"].offsets().diff(),
            logratios=logratios,
            real=real,
            step=self.global_steps,
            tokenizer=self.tokenizer,
        )
        for name, (_, term) in self.loss_terms.items():
            fields = term.prepare(step)
            wrong = [
                key
                for key, value in fields.items()
                if not (isinstance(value, torch.Tensor) and value.size(0) == len(uids))
            ]
            if wrong:
                raise ValueError(
                    f"loss term '{name}' prepared {wrong} without one entry per sample ({len(uids)}); "
                    f"prepare(step) must return [B] or jagged [B, j] tensors (diffugrpo_plugin/hookspecs.py)"
                )
            self._put(batch, {LOSS_TERM_FIELD.format(name=name, field=key): value for key, value in fields.items()})
        self.prompt_rows = still_pending(self.prompt_rows, uids, self.global_steps)

    def _rewrite_totals(self, batch, totals: list[float]) -> None:
        """Each completion's reward replaced by ``totals`` (verl's convention: on the sequence's last token)."""
        rm_scores = self._get(batch, ["rm_scores"])["rm_scores"]  # nested [B, j]
        rewritten = []
        for row, total in zip(rm_scores.unbind(), totals):
            outcome = torch.zeros_like(row)
            outcome[-1] = total
            rewritten.append(outcome)
        self._put(batch, {"rm_scores": torch.nested.as_nested_tensor(rewritten, layout=torch.jagged)})

    def _save_checkpoint(self):
        if self.learned_weights is not None:  # before verl marks the checkpoint as the latest
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
            os.makedirs(folder, exist_ok=True)
            staging = os.path.join(folder, LEARNED_WEIGHTS_FILE + ".tmp")
            with open(staging, "w") as handle:
                json.dump(self.learned_weights.state_dict(), handle)
            os.replace(staging, os.path.join(folder, LEARNED_WEIGHTS_FILE))
        super()._save_checkpoint()

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if not self.global_steps:
            return
        trainer = self.config.trainer
        folder = os.path.abspath(
            trainer.resume_from_path
            if trainer.resume_mode == "resume_path"
            else os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}")
        )
        # a rerun of a finished job would otherwise print its validation and stop, as if it had trained
        self.reporter.report(resume_line(self.global_steps, int(self.total_training_steps), folder), self.global_steps)
        if self.learned_weights is None:
            return
        path = os.path.join(folder, LEARNED_WEIGHTS_FILE)
        if not os.path.exists(path):
            print(
                f"[diffugrpo] {path} is missing: the learned reward weights start again from the fixed ones",
                file=sys.stderr,
                flush=True,
            )
            return
        with open(path) as handle:
            self.learned_weights.load_state_dict(json.load(handle))

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        real = real_rows(batch)
        samples, failed, uids = self._reward_components(batch)
        data = self._get(batch, ["rm_scores", "extra_fields"])
        totals = [float(row.sum()) for row in data["rm_scores"].unbind()]
        metrics.update(step_metrics([samples[i] for i in real], [totals[i] for i in real], [failed[i] for i in real]))
        self._check_reward_failures([failed[i] for i in real])
        extras = list(data["extra_fields"])
        reward_seconds = [(extras[i] or {}).get("reward_extra_info", {}).get(SECONDS_KEY, 0.0) for i in real]
        sampling = {
            (extras[i] or {}).get("generation_batch"): (extras[i] or {}).get("generation_seconds", 0.0) for i in real
        }
        metrics["timing_s/rollout_sampling"] = float(sum(sampling.values()))
        metrics["rollout/sampler_batches"] = len(sampling)  # sampler calls this step (each pays every forward)
        metrics["timing_s/reward_scoring"] = float(sum(reward_seconds))
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        metrics.update(self._completion_length_metrics(batch, real))
        self.reporter.report(
            step_line(global_steps, self.total_training_steps, metrics, self.reward_spec.names), step=global_steps
        )
        self.learning.observe(global_steps, metrics)
        self._observe_prompts(samples, uids, real)
        metrics.update(self.learning.redrawn_metrics())
        if global_steps >= self.total_training_steps and (summary := self.learning.line()):
            self.reporter.report(summary)

    def _observe_prompts(self, samples: list[dict[str, float | None]], uids: list[str], real: list[int]) -> None:
        """The step's completions (its ``real`` rows) to the learning summary by prompt: by :func:`prompt_key`, since a
        prompt drawn again gets a new uid."""
        groups: dict[str, list[dict[str, float | None]]] = {}
        for i in real:
            if uids[i] in self.prompt_keys:
                groups.setdefault(self.prompt_keys[uids[i]][1], []).append(samples[i])
        self.learning.observe_groups(groups)
        self.prompt_keys = still_pending(self.prompt_keys, uids, self.global_steps)

    def _completion_length_metrics(self, batch, real: list[int]) -> dict[str, float]:
        """Completion lengths up to the first EOS. verl measures the response, which for a diffusion
        rollout is the whole canvas; ``clip_ratio`` is the share of completions with no EOS in it."""
        data = self._get(batch, ["response_mask", "responses"])
        lengths = torch.tensor([float(row.sum()) for row in data["response_mask"].unbind()])[real]  # [B]
        canvas = torch.tensor([float(row.numel()) for row in data["responses"].unbind()])[real]  # [B]
        return {
            "response_length/mean": lengths.mean().item(),
            "response_length/max": lengths.max().item(),
            "response_length/min": lengths.min().item(),
            "response_length/clip_ratio": (lengths >= canvas).float().mean().item(),
        }
