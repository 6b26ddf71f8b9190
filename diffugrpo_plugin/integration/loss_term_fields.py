"""Each configured loss term's per-sample tensors for the update, prepared from the step's groups, rewards, data and
per-pass log-ratios (``LossTerm.prepare``), checked to hold one entry per sample."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from diffugrpo_plugin.core.loss_terms import StepBatch
from diffugrpo_plugin.integration.engine import LOSS_TERM_FIELD
from diffugrpo_plugin.integration.mask_iterations import iteration_field


def log_prob_fields(iterations: int, use_reference: bool) -> tuple[list[str], list[str]]:
    """The batch fields of each pass's old and reference log-probs (the old ones again without a reference)."""
    olds = [iteration_field("old_log_probs", k) for k in range(iterations)]
    return olds, [iteration_field("ref_log_prob", k) for k in range(iterations)] if use_reference else olds


def loss_term_fields(
    terms: dict, data: TensorDict, real: list[int], rows: list[dict], iterations: int, use_reference: bool, **step
) -> dict[str, torch.Tensor]:
    """The batch fields (``LOSS_TERM_FIELD``) of every term in ``terms`` (name -> (weight, term)).

    ``data``: the step's ``uid``, ``rm_scores``, ``responses``, ``response_mask`` and :func:`log_prob_fields`;
    ``real``: the rows that are not verl's padding; ``rows``: each sample's dataset row (its ``extra_info``);
    ``step``: the rest of :class:`~diffugrpo_plugin.core.loss_terms.StepBatch` (``step``, ``tokenizer``)."""
    olds, refs = log_prob_fields(iterations, use_reference)
    uids = list(data["uid"])
    is_real = torch.zeros(len(uids), dtype=torch.bool)
    is_real[real] = True
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
    batch = StepBatch(
        groups=uids,
        rewards=torch.tensor([float(row.sum()) for row in data["rm_scores"].unbind()]),
        rows=rows,
        response_lengths=data["responses"].offsets().diff(),
        logratios=logratios,
        real=is_real,
        **step,
    )
    fields = {}
    for name, (_, term) in terms.items():
        prepared = term.prepare(batch)
        wrong = [
            key
            for key, value in prepared.items()
            if not (isinstance(value, torch.Tensor) and value.size(0) == len(uids))
        ]
        if wrong:
            raise ValueError(
                f"loss term '{name}' prepared {wrong} without one entry per sample ({len(uids)}); "
                f"prepare(step) must return [B] or jagged [B, j] tensors (diffugrpo_plugin/hookspecs.py)"
            )
        fields.update({LOSS_TERM_FIELD.format(name=name, field=key): value for key, value in prepared.items()})
    return fields
