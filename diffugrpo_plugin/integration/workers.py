"""verl's workers as the ``diffugrpo`` trainer runs them: the hybrid actor/rollout/reference worker and the training
worker inside it, with every iteration's masks in one log-prob call, the reference scored in the policy's call, the
iterations expanded in the update, the synced reference in checkpoints, and a gloo process group on CPU hosts."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import tensordict_utils as tu
from verl.utils.device import get_device_name
from verl.utils.distributed import initialize_global_process_group_ray
from verl.utils.profiler import DistProfiler
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

from diffugrpo_plugin.integration.mask_iterations import MASK_ITERATIONS_KEY, expand_iterations, split_iterations
from diffugrpo_plugin.integration.reference_sync import load_reference, mix_into_reference, save_reference
from diffugrpo_plugin.integration.rollout import DiffusionRollout

# a batch's non-tensor entry: the policy's log-prob call scores the reference too, its outputs prefixed
WITH_REFERENCE_KEY = "with_reference"
REFERENCE_PREFIX = "reference_"


def _gloo_process_group_on_cpu() -> None:
    """verl asks torch for ``cpu:gloo,<device>:<backend>``, i.e. ``cpu:gloo,cpu:gloo`` on a CPU host, which torch
    rejects; start the group with plain gloo first (verl then finds it initialised)."""
    if get_device_name() == "cpu":
        initialize_global_process_group_ray(backend="gloo")


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
            save_reference(self.ref.engine.module, local_path)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        # before verl's load, which may delete local_path
        if self.ref is not None and load_reference(self.ref.engine.module, local_path):
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
