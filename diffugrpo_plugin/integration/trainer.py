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
   (:func:`.prompt_tracking.sample_order`, so timing decides nothing below);
   :meth:`DiffuGRPOTrainer._compute_old_log_prob` writes ``num_iterations`` mask seeds per sample
   (``masking.mask_seed_table``, ``actor.ppo_epochs`` is DiffuCoder's ``num_iterations``; the fields:
   :mod:`.mask_iterations`), then runs verl's pass once for all of them: the worker
   (:class:`.workers.IterationMasksTrainingWorker`) scores the batch repeated once per iteration with that
   iteration's seeds, ``engine.DiffusionLMEngine.forward_step`` -> the masker's views ->
   ``logprobs.coupled_token_logprobs``, and splits the result back per iteration.
4. **ref**: :meth:`DiffuGRPOTrainer._compute_ref_log_prob`, the same on the reference. When the reference
   lives in the policy's worker (verl's hybrid worker, LoRA included) the worker already scored it in step 3's
   call (:meth:`.workers.DiffusionActorRolloutRefWorker.compute_log_prob`) and this stage only stores it.
5. **adv**: :meth:`DiffuGRPOTrainer._compute_advantage` first hands the step's completions to a custom data
   sampler, if ``data.sampler`` names one (the curriculum: ``curriculum.CurriculumSampler``, through
   :mod:`.data_sampler`), then rewrites the scores to group-normalised totals when
   ``diffugrpo.rewards.aggregation=group_normalized`` (GDPO-style, it needs the groups), or to the learned
   weights' totals (checkpointed by :mod:`.learned_weights_file`), then verl's step calls
   ``algorithm.compute_coupled_grpo_advantage`` (leave-one-out).
6. **update_actor**: :meth:`.workers.DiffusionActorRolloutRefWorker.update_actor` expands the batch
   iteration-major (:func:`.mask_iterations.expand_iterations`: copy ``k`` carries mask ``k`` and the old/reference
   log-probs computed with it; with ``actor.shuffle=False`` the order is the reference's), then
   verl's ``train_mini_batch`` -> ``forward_step`` -> verl's ``ppo_loss`` with
   ``algorithm.compute_coupled_grpo_policy_loss``, verl's k3 KL and the loss terms (:mod:`.loss_term_fields`).
7. **step end**: :meth:`DiffuGRPOTrainer.step` mixes the reference towards the policy every
   ``diffugrpo.ref_sync.steps`` steps (TRL's ``sync_ref_model``: ``alpha * policy + (1 - alpha) * reference``;
   DiffuCoder: 64 steps, 0.6); verl then saves checkpoints (a synced reference in the actor's folder,
   :data:`.reference_sync.REFERENCE_FOLDER`) and syncs the new weights to the rollout
   (``DiffusionRollout.update_weights``).
8. **metrics**: :meth:`DiffuGRPOTrainer._compute_metrics` adds each reward component's mean,
   None and failure fractions, the total, the split of rollout time into sampling and scoring,
   and completion lengths up to the EOS; a reward failing on most completions for
   ``stop_after_failed_steps`` steps in a row stops training (:class:`.reward_outcomes.FailureStop`). verl logs
   them all (TensorBoard, the log file); the step's key metrics go to the terminal in one line
   (:mod:`.console`).

CPU hosts: workers start their process group with plain gloo (verl asks for
``cpu:gloo,cpu:gloo`` otherwise), each trainer process reserves one Ray CPU instead of verl's
three, and the replay buffer polls without verl's 2 s sleep.
"""

from __future__ import annotations

import os

import ray
import torch
from omegaconf import OmegaConf, open_dict
from tensordict import TensorDict

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.device import get_device_name
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.utils.padding import response_from_nested

from diffugrpo_plugin.config.defaults import DIFFUSION_DEFAULTS
from diffugrpo_plugin.core.loss_terms import configured_terms
from diffugrpo_plugin.core.masking import mask_seed_table
from diffugrpo_plugin.integration.cluster import check_cluster_fits
from diffugrpo_plugin.integration.console import (
    LearningSummary,
    StepReporter,
    resume_line,
    step_line,
    validation_line,
)
from diffugrpo_plugin.integration.data_sampler import sampler_feedback, sampling_dataloader
from diffugrpo_plugin.integration.engine import MASK_SEED_FIELD, TRACE_FIELD
from diffugrpo_plugin.integration.in_process import InProcessRewardWorker
from diffugrpo_plugin.integration.layout import apply_lean_settings, rewards_in_agent_loop
from diffugrpo_plugin.integration.learned_weights_file import load_learned_weights, save_learned_weights
from diffugrpo_plugin.integration.loss_term_fields import log_prob_fields, loss_term_fields
from diffugrpo_plugin.integration.mask_iterations import MASK_ITERATIONS_KEY, iteration_field
from diffugrpo_plugin.integration.preflight import check_config, data_sampler_class
from diffugrpo_plugin.integration.prompt_tracking import groups_by_prompt, prompt_key, sample_order, still_pending
from diffugrpo_plugin.integration.reference_sync import ref_sync_settings
from diffugrpo_plugin.integration.reward_manager import SECONDS_KEY
from diffugrpo_plugin.integration.reward_outcomes import FailureStop, reward_components
from diffugrpo_plugin.integration.rollout import announced
from diffugrpo_plugin.integration.verl_internals import same_data_split
from diffugrpo_plugin.integration.workers import REFERENCE_PREFIX, WITH_REFERENCE_KEY, DiffusionActorRolloutRefWorker
from diffugrpo_plugin.rewards.aggregation import AGGREGATIONS, group_normalized_totals, step_metrics
from diffugrpo_plugin.rewards.learned_weights import LearnedWeights
from diffugrpo_plugin.rewards.spec import RewardSpec
from diffugrpo_plugin.serving.request_batcher import UNMASK_STEP_FIELD

TRAINER_MODE = "diffugrpo"
REPLAY_POLL_INTERVAL_S = 0.05


def real_rows(batch) -> list[int]:
    """Indices of the batch's completions, without the padding verl adds to make it divide."""
    return [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]


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
        self.mask_seed_base = int(diffusion.get("mask_seed", DIFFUSION_DEFAULTS.mask_seed))
        self.random_masking = bool(diffusion.get("random_masking", DIFFUSION_DEFAULTS.random_masking))
        self.record_trace = bool(diffusion.get("record_trace", DIFFUSION_DEFAULTS.record_trace))
        self.ref_sync_steps, self.ref_sync_alpha = ref_sync_settings(config)
        self.reward_spec = RewardSpec.from_config(OmegaConf.to_container(config.diffugrpo.rewards, resolve=True))
        self.learned_weights = (
            LearnedWeights(self.reward_spec.weights, self.reward_spec.gate_reward)
            if AGGREGATIONS[self.reward_spec.aggregation].learns_weights
            else None
        )
        self.loss_terms = configured_terms(diffusion.get("loss_terms"))
        self.prompt_rows: dict[str, tuple[int, dict]] = {}  # uid -> (step fetched, its extra_info): for the loss terms
        self.prompt_keys: dict[str, tuple[int, str]] = {}  # uid -> (step fetched, prompt_key): the prompt across steps
        self.failure_stop = FailureStop(self.reward_spec.names, self.reward_spec.stop_after_failed_steps)
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
        self.data_sampler, self.train_dataloader = sampling_dataloader(
            self.train_dataloader, sampler_class, self.train_dataset, self.config.data
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
        self.data_sampler.update(sampler_feedback(uids, totals, samples, real, self.prompt_positions))
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
        return (*reward_components(list(data["extra_fields"])), list(data["uid"]))

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
        """Each loss term's per-sample tensors into the batch the update reads (:mod:`.loss_term_fields`)."""
        olds, refs = log_prob_fields(self.num_iterations, self.use_reference_policy)
        data = self._get(batch, sorted({"uid", "rm_scores", "responses", "response_mask", *olds, *refs}))
        uids = list(data["uid"])
        fields = loss_term_fields(
            self.loss_terms,
            data,
            real_rows(batch),
            [self.prompt_rows.get(uid, (0, {}))[1] for uid in uids],
            self.num_iterations,
            self.use_reference_policy,
            step=self.global_steps,
            tokenizer=self.tokenizer,
        )
        self._put(batch, fields)
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
            save_learned_weights(self.learned_weights, folder)
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
        if self.learned_weights is not None:
            load_learned_weights(self.learned_weights, folder)

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        real = real_rows(batch)
        samples, failed, uids = self._reward_components(batch)
        data = self._get(batch, ["rm_scores", "extra_fields"])
        totals = [float(row.sum()) for row in data["rm_scores"].unbind()]
        metrics.update(step_metrics([samples[i] for i in real], [totals[i] for i in real], [failed[i] for i in real]))
        self.failure_stop.check([failed[i] for i in real], self.global_steps)
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
        self.learning.observe_groups(groups_by_prompt(samples, uids, real, self.prompt_keys))
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
