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
from typing import Any, Hashable, Mapping, Protocol, Sequence

import torch
import torch.nn.functional as F

from diffugrpo_plugin import hookimpl
from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
from diffugrpo_plugin.core.masking import make_sft, mask_seed_table
from diffugrpo_plugin.data import format_completion
from diffugrpo_plugin.models.kernels import DEFAULT_CHUNK_ROWS
from diffugrpo_plugin.rewards.code_tests import reference_from_row


@dataclass
class StepBatch:
    """What a term's ``prepare`` sees: one training step's samples, in batch order.

    ``groups``: each sample's prompt group (verl's ``uid``); ``rewards``: each sample's total reward
    ``[B]``; ``rows``: each sample's data columns (its ``extra_info``, where prepared data keeps
    ``reference_solution``, tests, ...); ``response_lengths``: each sample's canvas length ``[B]``;
    ``logratios``: each sample's sequence log-ratio ``sum(old - ref)`` over its scored tokens, one column per
    pass of the update (``actor.ppo_epochs``: pass ``k`` scores with mask ``k``; zero without a reference
    model) ``[B, K]``; ``real``: False on the padding samples verl adds to make the batch divide ``[B]``;
    ``step``: the training step; ``tokenizer``: the policy's. A field ``prepare`` returns as ``[B, K]`` is read
    in the update through ``TermInputs.iteration`` (see ``GroupPreference``)."""

    groups: Sequence[Hashable]
    rewards: torch.Tensor
    rows: Sequence[dict]
    response_lengths: torch.Tensor
    logratios: torch.Tensor
    real: torch.Tensor
    step: int = 0
    tokenizer: Any = None

    @property
    def passes(self) -> int:
        return int(self.logratios.shape[1])


@dataclass
class TermInputs:
    """What a term's ``loss`` sees in one micro-batch of the update (token-aligned: column ``p`` is token ``p``).

    ``lm``: the policy (:class:`~diffugrpo_plugin.models.dlm.DiffusionLM`); ``input_ids``, ``attention``,
    ``positions`` ``[B, L]``; ``prompt``, ``canvas`` (the response positions) and ``scored`` (the
    response tokens the loss counts) ``[B, L]`` bool; ``logp``: the policy's coupled log-probs, with
    gradient ``[B, L]``; ``reference_logp``: the reference model's for the same masks, or the old
    policy's without one, no gradient ``[B, L]``; ``iteration``: which pass of the
    update (``actor.ppo_epochs``) each sample is scored in, so which mask ``[B]``; ``fields``: this term's
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
    iteration: torch.Tensor
    fields: dict[str, torch.Tensor] = field(default_factory=dict)
    chunk_rows: int = DEFAULT_CHUNK_ROWS


class LossTerm(Protocol):
    """What a ``diffugrpo_loss_terms`` factory builds."""

    def prepare(self, step: StepBatch) -> dict[str, torch.Tensor]:
        """Per-sample tensors (``[B]`` or jagged ``[B, j]``) the update's ``loss`` reads from ``inputs.fields``."""

    def loss(self, inputs: TermInputs) -> torch.Tensor:
        """The per-sample loss ``[B]`` (0 for a sample the term does not apply to; the share of non-zero ones is
        logged as ``loss_terms/<name>/applied``)."""


CONFIG_KEY = "actor_rollout_ref.model.diffusion.loss_terms"


def configured_terms(settings: Mapping | None) -> dict[str, tuple[float, LossTerm]]:
    """``loss_terms`` from config (``name -> {weight, **options}``) as ``name -> (weight, term)``, each term built
    by its plugin; every mistake is a ``ValueError`` or ``PluginError`` naming the key to fix."""
    from diffugrpo_plugin.plugins import build

    if settings is None:
        return {}
    example = "e.g. {sft: {weight: 0.1}, preference: {weight: 0.1, beta: 0.1}}"
    if not isinstance(settings, Mapping):
        raise ValueError(f"{CONFIG_KEY} must map each term's name to its settings, {example}; got {settings!r}")
    terms = {}
    for name, options in settings.items():
        key = f"{CONFIG_KEY}.{name}"
        if not isinstance(options, Mapping):
            raise ValueError(f"{key} must be a mapping with the term's weight and options, {example}; got {options!r}")
        if "__" in str(name):
            raise ValueError(f"{key}: a loss term's name may not contain '__' (it separates the batch's field names)")
        options = dict(options)
        weight = options.pop("weight", None)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ValueError(
                f"{key}.weight must be a positive number (the term's weight beside the policy loss), got {weight!r}"
            )
        try:
            term = build("loss_term", str(name), options)
        except ValueError as error:
            raise ValueError(f"{key}: {error}") from error
        terms[str(name)] = (float(weight), term)
    return terms


def per_pass(values: torch.Tensor, iteration: torch.Tensor) -> torch.Tensor:
    """Each sample's entry for the pass it is scored in (the trainer's transfer may hand ``[B, K]`` over as a
    jagged tensor of rows of K).  # [B, K], [B] -> [B]"""
    if values.is_nested:
        values = torch.nested.to_padded_tensor(values, 0.0)
    return values.to(iteration.device).gather(1, iteration.long()[:, None]).squeeze(1)


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
    loss takes its partner's log-ratio from ``prepare`` (the rollout policy's, under the same pass's mask, a
    constant): member ``m`` with role ``s`` (+1 best, -1 worst) has ``z = s * beta * (r_m - r_partner)`` and loss
    ``softplus(-z)``. Both members carry the pair's DPO loss, so the logged value is twice the sum over pairs of
    DPO's loss, per completion; the gradient is once DPO's per pair, per completion, wherever the partner's
    log-ratio is still the rollout policy's (the first mini-batch of a step: every one with one mini-batch)."""

    def __init__(self, beta: float = 0.1):
        if not float(beta) > 0:
            raise ValueError(f"preference: beta must be positive (DPO's temperature), got {beta}")
        self.beta = float(beta)

    def prepare(self, step: StepBatch) -> dict[str, torch.Tensor]:
        role = best_and_worst(step.groups, step.rewards, step.real)  # [B]
        partner = torch.zeros(len(role), step.passes)  # [B, K]
        index_of = {(group, value): i for i, (group, value) in enumerate(zip(step.groups, role.tolist())) if value}
        for i, (group, value) in enumerate(zip(step.groups, role.tolist())):
            if value:
                partner[i] = step.logratios[index_of[(group, -value)]]
        return {"role": role, "partner_logratio": partner}

    def loss(self, inputs: TermInputs) -> torch.Tensor:
        role = inputs.fields["role"].to(inputs.logp.device, torch.float32)  # [B]
        partner = per_pass(inputs.fields["partner_logratio"], inputs.iteration).to(
            inputs.logp.device, torch.float32
        )  # [B]
        scored = inputs.scored.to(inputs.logp.dtype)
        logratio = ((inputs.logp - inputs.reference_logp) * scored).sum(dim=1).float()  # [B]
        z = role * self.beta * (logratio - partner)  # [B]
        return F.softplus(-z) * role.abs()  # [B]: -log sigmoid(z) on the pair's members


# --------------------------------------------------------------------------- sft (masked diffusion on references)


class ReferenceSFT:
    """LLaDA's masked-diffusion SFT loss on each row's reference solution, after the row's prompt: the solution
    written as a completion (``data.format_completion``), EOS-padded to the sample's canvas, masked at ``t ~ U(eps, 1)``
    with a seed of its own per step, sample and pass; per sample ``-sum(masked log-probs / t) / canvas length``."""

    SEED_BASE = 0x5F7  # its own seeds: fresh per step, sample and pass even where the coupled masks are fixed

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
        seeds = mask_seed_table(self.SEED_BASE, step.step, len(step.rows), step.passes)  # [B, K]
        return {"target": torch.nested.as_nested_tensor(targets, layout=torch.jagged), "has_target": has, "seed": seeds}

    def loss(self, inputs: TermInputs) -> torch.Tensor:
        # The forward runs on every row of every micro-batch, rows without a target weighted 0: under FSDP each
        # forward gathers parameters collectively, so every rank must run the same number of them.
        has = inputs.fields["has_target"].to(inputs.logp.device)  # [B]
        ids = inputs.input_ids.clone()  # [B, L]
        canvas = inputs.canvas  # [B, L]
        target = inputs.fields["target"]
        for row in has.nonzero().squeeze(1).tolist():
            ids[row, canvas[row]] = target[row].to(ids.device)
        seeds = per_pass(inputs.fields["seed"], inputs.iteration).cpu()  # [B]
        views = self.masker.views(ids, canvas, inputs.lm.mask_token_id, seeds)
        logp = coupled_token_logprobs(
            inputs.lm, views, ids, inputs.attention.long(), inputs.positions, chunk_rows=inputs.chunk_rows
        ).logp  # [B, L], weighted by 1/t where masked
        lengths = canvas.sum(dim=1).clamp(min=1)  # [B]
        return -(logp * canvas).sum(dim=1).float() / lengths * has.float()  # [B]


@hookimpl
def diffugrpo_loss_terms():
    return {"sft": ReferenceSFT, "preference": GroupPreference}
