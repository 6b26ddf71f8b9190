"""The reference mixed towards the policy every few steps (TRL's ``sync_ref_model``), and kept in checkpoints.

``diffugrpo.ref_sync``: every ``steps`` steps ``ref <- alpha * policy + (1 - alpha) * ref`` (DiffuCoder: 64 steps,
0.6). verl saves the actor alone and rebuilds the reference from ``model.path``, which would undo every sync, so a
synced reference is saved beside the actor (:data:`REFERENCE_FOLDER`) and restored on resume.
"""

from __future__ import annotations

import os

import torch
from torch.distributed import checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor, distribute_tensor

# in a checkpoint's actor folder: the synced reference (torch.distributed.checkpoint, any world size can load it)
REFERENCE_FOLDER = "diffugrpo_reference"


def ref_sync_settings(config) -> tuple[int, float]:
    """``(steps, alpha)`` from ``diffugrpo.ref_sync``; ``steps`` is 0 when syncing is off."""
    ref_sync = config.get("diffugrpo", {}).get("ref_sync", {}) or {}
    steps = int(ref_sync.get("steps", 0)) if ref_sync.get("enable", False) else 0
    alpha = float(ref_sync.get("alpha", 0.6))
    if steps and not 0.0 < alpha <= 1.0:
        raise ValueError(f"diffugrpo.ref_sync.alpha must be in (0, 1], got {alpha}")
    return steps, alpha


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


def save_reference(reference: torch.nn.Module, actor_folder: str) -> None:
    """The reference's weights into the checkpoint's actor folder (every rank calls it)."""
    dcp.save(get_model_state_dict(reference), checkpoint_id=os.path.join(actor_folder, REFERENCE_FOLDER))


def load_reference(reference: torch.nn.Module, actor_folder: str) -> bool:
    """The reference's weights from the checkpoint's actor folder, if it holds them; whether it did."""
    folder = os.path.join(actor_folder, REFERENCE_FOLDER)
    if not os.path.isdir(folder):
        return False
    state = get_model_state_dict(reference)
    dcp.load(state, checkpoint_id=folder)
    set_model_state_dict(reference, state)
    return True
