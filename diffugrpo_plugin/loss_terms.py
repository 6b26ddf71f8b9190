"""Loss terms added to the policy loss of the update: the contract and two built-ins.

A loss term is named in config (``actor_rollout_ref.model.diffusion.loss_terms``, a mapping
``name -> {weight, **options}``) and built by the factory a plugin registers under that name
(:func:`diffugrpo_plugin.hookspecs.diffugrpo_loss_terms`). It works in two places:

1. ``prepare(step)`` on the trainer, once per step, after the rewards and the old/reference
   log-probs: it sees the whole batch (groups, rewards, the rows' data, the tokenizer) and returns
   per-sample tensors (``[B]``, or jagged ``[B, j]``) that travel with each sample into the update;
2. ``loss(inputs)`` in each micro-batch of the update: the per-sample loss ``[B]`` from the policy's
   coupled log-probs and those tensors (and the model, for a term that needs a forward of its own).

The engine adds ``weight x`` the term's mean over the mini-batch's samples to verl's policy loss
(with verl's normalisation over data-parallel ranks) and logs it as ``loss_terms/<name>``.

Built-ins (the composer recipe's extra channels next to the RL signal):

- ``sft``: LLaDA's masked-diffusion SFT loss on the row's reference solution (``reference_solution``,
  HumanEval's ``prompt + canonical_solution`` or MBPP's ``code``), written as a completion (one python
  fence, then EOS padding to the sample's canvas) after the same prompt; rows without one, or whose
  solution does not fit the canvas, contribute 0.
- ``preference``: DPO on each group's best and worst completion (highest and lowest reward; none when
  they tie), with sequence log-probs the sum of the coupled per-token estimates over the scored tokens.

Plain torch: this module imports neither verl nor Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Protocol, Sequence

import torch
import torch.nn.functional as F

from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.code_execution import reference_from_row
from diffugrpo_plugin.data import format_completion
from diffugrpo_plugin.logprobs import DEFAULT_CHUNK_ROWS, coupled_token_logprobs
from diffugrpo_plugin.masking import make_sft


@dataclass
class StepBatch:
    """What a term's ``prepare`` sees: one training step's samples, in batch order.

    ``groups``: each sample's prompt group (verl's ``uid``); ``rewards``: each sample's total reward
    ``[B]``; ``rows``: each sample's data columns (its ``extra_info``, where prepared data keeps
    ``reference_solution``, tests, ...); ``response_lengths``: each sample's canvas length ``[B]``;
    ``logratios``: each sample's sequence log-ratio ``sum(old - ref)`` over its scored tokens (the
    first iteration's masks; zero without a reference model) ``[B]``; ``real``: False on the padding
    samples verl adds to make the batch divide ``[B]``; ``tokenizer``: the policy's."""

    groups: Sequence[Hashable]
    rewards: torch.Tensor
    rows: Sequence[dict]
    response_lengths: torch.Tensor
    logratios: torch.Tensor
    real: torch.Tensor
    tokenizer: Any = None


@dataclass
class TermInputs:
    """What a term's ``loss`` sees in one micro-batch of the update (token-aligned: column ``p`` is token ``p``).

    ``lm``: the policy (:class:`~diffugrpo_plugin.models.DiffusionLM`); ``input_ids``, ``attention``,
    ``positions`` ``[B, L]``; ``prompt``, ``canvas`` (the response positions) and ``scored`` (the
    response tokens the loss counts) ``[B, L]`` bool; ``logp``: the policy's coupled log-probs, with
    gradient ``[B, L]``; ``reference_logp``: the reference model's for the same masks, or the old
    policy's without one, no gradient ``[B, L]``; ``mask_seeds`` ``[B]``; ``fields``: this term's
    prepared tensors for these samples (jagged ones as given)."""

    lm: Any
    input_ids: torch.Tensor
    attention: torch.Tensor
    positions: torch.Tensor
    prompt: torch.Tensor
    canvas: torch.Tensor
    scored: torch.Tensor
    logp: torch.Tensor
    reference_logp: torch.Tensor
    mask_seeds: torch.Tensor
    fields: dict[str, torch.Tensor] = field(default_factory=dict)
    chunk_rows: int = DEFAULT_CHUNK_ROWS


class LossTerm(Protocol):
    """What a ``diffugrpo_loss_terms`` factory builds."""

    def prepare(self, step: StepBatch) -> dict[str, torch.Tensor]:
        """Per-sample tensors (``[B]`` or jagged ``[B, j]``) the update's ``loss`` reads from ``inputs.fields``."""

    def loss(self, inputs: TermInputs) -> torch.Tensor:
        """The per-sample loss ``[B]`` (0 for a sample the term does not apply to)."""


def configured_terms(settings: dict | None) -> dict[str, tuple[float, LossTerm]]:
    """``loss_terms`` from config (``name -> {weight, **options}``) as ``name -> (weight, term)``, each term built
    by its plugin; a term without a positive weight, or with an option its factory lacks, is an error naming it."""
    from diffugrpo_plugin.plugins import build

    terms = {}
    for name, options in (settings or {}).items():
        options = dict(options or {})
        weight = options.pop("weight", None)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ValueError(f"actor_rollout_ref.model.diffusion.loss_terms.{name}.weight must be a positive number "
                             f"(the term's weight beside the policy loss), got {weight!r}")
        terms[str(name)] = (float(weight), build("loss_term", str(name), options))
    return terms


# --------------------------------------------------------------------------- preference (DPO on each group)


def best_and_worst(groups: Sequence[Hashable], rewards: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """``+1`` on each group's first highest-reward sample, ``-1`` on its first lowest, 0 elsewhere and in
    groups whose rewards all tie (padding samples never take part).  # [B]"""
    role = torch.zeros(len(groups))
    members: dict[Hashable, list[int]] = {}
    for index, (group, is_real) in enumerate(zip(groups, real.tolist())):
        if is_real:
            members.setdefault(group, []).append(index)
    for indices in members.values():
        values = rewards[indices]
        if values.max() > values.min():
            role[indices[int(values.argmax())]] = 1.0
            role[indices[int(values.argmin())]] = -1.0
    return role


class GroupPreference:
    """DPO (``-log sigmoid(beta * (r_best - r_worst))``, ``r = log pi - log pi_ref`` of the whole completion) on
    each group's best and worst completion.

    The two members of a pair may sit in different micro-batches or on different workers, so each member's
    loss takes its partner's log-ratio from ``prepare`` (the rollout policy's, a constant): member ``m`` with
    role ``s`` (+1 best, -1 worst) has ``z = s * beta * (r_m - r_partner)`` and loss ``softplus(-z)``. Both
    members carry the pair's DPO loss, so the term's value is the DPO loss summed over pairs, per sample; its
    gradient is DPO's wherever the partner's log-ratio is still the rollout policy's (the first mini-batch
    of a step, and every one with ``ppo_epochs=1`` and one mini-batch)."""

    def __init__(self, beta: float = 0.1):
        if not float(beta) > 0:
            raise ValueError(f"preference: beta must be positive (DPO's temperature), got {beta}")
        self.beta = float(beta)

    def prepare(self, step: StepBatch) -> dict[str, torch.Tensor]:
        role = best_and_worst(step.groups, step.rewards, step.real)  # [B]
        partner = torch.zeros(len(role))  # [B]
        index_of = {(group, value): i for i, (group, value) in enumerate(zip(step.groups, role.tolist())) if value}
        for i, (group, value) in enumerate(zip(step.groups, role.tolist())):
            if value:
                partner[i] = step.logratios[index_of[(group, -value)]]
        return {"role": role, "partner_logratio": partner}

    def loss(self, inputs: TermInputs) -> torch.Tensor:
        role = inputs.fields["role"].to(inputs.logp.device, torch.float32)  # [B]
        partner = inputs.fields["partner_logratio"].to(inputs.logp.device, torch.float32)  # [B]
        scored = inputs.scored.to(inputs.logp.dtype)
        logratio = ((inputs.logp - inputs.reference_logp) * scored).sum(dim=1).float()  # [B]
        z = role * self.beta * (logratio - partner)  # [B]
        return F.softplus(-z) * role.abs()  # [B]: -log sigmoid(z) on the pair's members


# --------------------------------------------------------------------------- sft (masked diffusion on references)


class ReferenceSFT:
    """LLaDA's masked-diffusion SFT loss on each row's reference solution, after the row's prompt: the solution
    written as a completion (``data.format_completion``), EOS-padded to the sample's canvas, masked at ``t ~ U(eps, 1)``
    with the sample's mask seed; per sample ``-sum(masked log-probs / t) / canvas length``."""

    SEED_OFFSET = 0x5F7_0000  # its masks apart from the coupled views', which the same sample seeds

    def __init__(self, eps: float = 1e-3):
        self.masker = make_sft(eps)

    def prepare(self, step: StepBatch) -> dict[str, torch.Tensor]:
        if step.tokenizer is None or step.tokenizer.eos_token_id is None:
            raise ValueError("loss term sft needs the policy's tokenizer, with an EOS token (it pads the targets)")
        eos = step.tokenizer.eos_token_id
        targets, has = [], torch.zeros(len(step.rows))
        cache: dict[str, list[int]] = {}
        for index, (row, length) in enumerate(zip(step.rows, step.response_lengths.tolist())):
            solution = reference_from_row(row or {}) if step.real[index] else None
            ids = []
            if solution is not None:
                if solution not in cache:
                    cache[solution] = step.tokenizer.encode(format_completion(solution), add_special_tokens=False)
                ids = cache[solution] + [eos]
            if solution is not None and len(ids) <= length:
                has[index] = 1.0
                targets.append(torch.tensor(ids + [eos] * (length - len(ids))))
            else:
                targets.append(torch.full((length,), eos))
        return {"target": torch.nested.as_nested_tensor(targets, layout=torch.jagged), "has_target": has}

    def loss(self, inputs: TermInputs) -> torch.Tensor:
        # The forward runs on every row of every micro-batch, rows without a target weighted 0: under FSDP each
        # forward gathers parameters collectively, so every rank must run the same number of them.
        has = inputs.fields["has_target"].to(inputs.logp.device)  # [B]
        ids = inputs.input_ids.clone()  # [B, L]
        canvas = inputs.canvas  # [B, L]
        target = inputs.fields["target"]
        for row in has.nonzero().squeeze(1).tolist():
            ids[row, canvas[row]] = target[row].to(ids.device)
        seeds = inputs.mask_seeds.cpu() + self.SEED_OFFSET
        views = self.masker.views(ids, canvas, inputs.lm.mask_token_id, seeds)
        logp = coupled_token_logprobs(inputs.lm, views, ids, inputs.attention.long(), inputs.positions,
                                      chunk_rows=inputs.chunk_rows).logp  # [B, L], weighted by 1/t where masked
        lengths = canvas.sum(dim=1).clamp(min=1)  # [B]
        return -(logp * canvas).sum(dim=1).float() / lengths * has.float()  # [B]


@hookimpl
def diffugrpo_loss_terms():
    return {"sft": ReferenceSFT, "preference": GroupPreference}
