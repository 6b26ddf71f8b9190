"""Every iteration's masks in one batch: the per-iteration field names, and a batch repeated once per iteration
(iteration-major) and split back.

DiffuCoder's ``num_iterations`` (verl's ``actor.ppo_epochs``) trains each completion ``K`` times with a different
mask each time; the trainer stores ``K`` mask seeds per sample (``mask_seed_iter<k>``) and the log-prob passes and
the update see the batch expanded to ``K * B`` rows.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu

from diffugrpo_plugin.integration.engine import ITERATION_FIELD, MASK_SEED_FIELD

# a batch's non-tensor entry: how many iterations' mask seeds (mask_seed_iter<k>) one log-prob pass scores
MASK_ITERATIONS_KEY = "mask_iterations"


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
