"""The denoising loop every built-in sampler runs: batching, blocks, steps, seeds, EOS.

A sampler family (Dream, LLaDA) supplies a :class:`StepRule`: how to propose a token and a
score for every masked position, and which positions to unmask at a step. Everything else
is shared here:

* prompts are split into micro-batches; columns that are padding in every row of a
  micro-batch are dropped, so a prompt gives the same result padded or not;
* the completion is split into blocks of ``block_length`` tokens generated left to right
  (one block = Dream's whole-sequence denoising), each with ``steps / num_blocks`` steps; a
  rule that revisits earlier blocks (LLaDA) also decides their leftover masks, unless the
  prefix cache has frozen them;
* a step unmasks the positions the rule chooses and, with a ``threshold``, also every masked
  position whose token probability exceeds it (so ``threshold=1.0`` changes nothing); a
  block ends early once it has no masked position left;
* as in both references, a position may be decided as the mask token itself (it then stays
  masked and is decided again later; a row's last step can leave it in the output), unless
  ``suppress_mask_token`` takes the mask token out of every proposal;
* ``factor`` (Fast-dLLM's factor rule) adds the leading run of most confident positions whose
  ``k``-th best clears ``1 - factor / (k + 1)``; unset changes nothing;
* each row draws from its own ``torch.Generator`` only while it still has masked positions,
  so its samples do not depend on the other rows; the global RNG is never used;
* once a finished block of a row contains EOS, the row stops: every later token would become
  padding anyway. Finally everything after the first EOS becomes ``pad_token_id``.

Three options change no output, only the work done: ``compact`` runs the model only on rows whose
output can still change (something masked, and not an EOS with nothing masked before it),
``reuse_logits`` runs it only on rows whose tokens changed since their last forward, reusing the
kept logits for the others (a step that decided nothing, e.g. while Dream's schedule asks for 0
tokens after a threshold step decided many, then costs no forward), and ``head_on_masked`` sends
only the still-masked positions through the vocabulary head (no other logits are ever read).
"""

from __future__ import annotations

import contextlib
import math
import secrets
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from diffugrpo_plugin.models.dlm import DiffusionLM, position_ids_from_mask
from diffugrpo_plugin.models.family import ModelConfigError, unwrap
from diffugrpo_plugin.sampling.contract import GenerationOutput, SamplerOptionError
from diffugrpo_plugin.sampling.decoding import factor_choice, packed_to_rows
from diffugrpo_plugin.sampling.forward import build_forward
from diffugrpo_plugin.sampling.memory import GIB, rows_within, vocabulary_bytes_per_row


class Proposal(NamedTuple):
    """A rule's proposal for the masked positions of one step, packed.  # each [M]"""

    tokens: torch.Tensor  # the token each position would take
    scores: torch.Tensor  # the rule's ranking score (higher = unmask sooner)
    token_probs: torch.Tensor  # the probability of that token, compared with the threshold


class StepRule(Protocol):
    """How one sampler family decodes a step; see :mod:`diffugrpo_plugin.sampling.dream`.

    ``revisits_earlier_blocks``: a block's steps may also decide positions of earlier blocks that
    are still masked (a position decided as the mask token stays masked), as LLaDA's ``generate``
    does; otherwise a block's steps only see the block.
    """

    revisits_earlier_blocks: bool

    def propose(self, masked_logits: torch.Tensor, sizes: list[int], generators: list[torch.Generator]) -> Proposal:
        """Tokens and scores for the packed masked positions (``sizes[r]`` of row ``r``).  # [M, V] -> [M]"""

    def choose(
        self,
        scores: torch.Tensor,
        masked: torch.Tensor,
        step: int,
        steps: int,
        block_length: int,
        generators: list[torch.Generator],
    ) -> torch.Tensor:
        """Positions to unmask at ``step`` of ``steps`` in this block.  # [b, W], [b, W] -> [b, W] bool"""


@dataclass(frozen=True)
class Plan:
    """The loop settings shared by every family: the sampler options of the same names (``_LoopOptions`` in
    ``samplers.py`` holds their meaning, checks and defaults; ``_LoopOptions._plan`` fills every field), and the
    guidance scale of the family's sampler."""

    steps: int | None  # None = one per generated token
    block_length: int | None  # None = the whole completion is one block
    threshold: float | None
    kv_cache: bool
    micro_batch_size: int | None  # None = as many rows as memory_budget_gib allows
    cfg_scale: float
    suppress_mask_token: bool
    dual_cache: bool
    factor: float | None
    compact: bool
    reuse_logits: bool
    head_on_masked: bool
    cache_refresh: int | None  # None = a KV cache is filled only at a block's first step
    memory_budget_gib: float

    @property
    def cached(self) -> bool:
        return self.kv_cache or self.dual_cache


@dataclass(frozen=True)
class BlockLayout:
    num_blocks: int
    block_length: int
    steps_per_block: int


def block_layout(max_new_tokens: int, plan: Plan) -> BlockLayout:
    """Blocks and steps per block, or an error naming the option to change."""
    block_length = plan.block_length or max_new_tokens
    if max_new_tokens % block_length:
        raise SamplerOptionError(
            f"max_new_tokens={max_new_tokens} is not a multiple of block_length={block_length}; "
            f"choose a block_length that divides it"
        )
    num_blocks = max_new_tokens // block_length
    steps = plan.steps or max_new_tokens
    if steps % num_blocks:
        raise SamplerOptionError(
            f"steps={steps} cannot be split equally over {num_blocks} blocks "
            f"(max_new_tokens={max_new_tokens} / block_length={block_length}); "
            f"use a multiple of {num_blocks}"
        )
    return BlockLayout(num_blocks, block_length, steps // num_blocks)


def check_prompts(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int, seeds: list[int] | None
) -> None:
    """Reject inputs the loop cannot handle, naming what to fix."""
    if prompt_ids.dim() != 2 or prompt_ids.shape != prompt_mask.shape:
        raise ValueError(
            f"prompt_ids and prompt_mask must both be [batch, prompt_length]; got "
            f"{tuple(prompt_ids.shape)} and {tuple(prompt_mask.shape)}"
        )
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    empty = (prompt_mask.sum(dim=1) == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"prompt rows {empty} have no real token (prompt_mask all 0); every prompt needs one")
    holes = (prompt_mask[:, 1:].long() < prompt_mask[:, :-1].long()).any(dim=1).nonzero().flatten().tolist()
    if holes:
        raise ValueError(
            f"prompt rows {holes} are not left-padded (a 0 in prompt_mask after a 1); pad prompts "
            f"on the left (tokenizer.padding_side = 'left')"
        )
    if seeds is not None and len(seeds) != prompt_ids.shape[0]:
        raise ValueError(f"seeds has {len(seeds)} entries for {prompt_ids.shape[0]} prompts; give one seed per prompt")


def resolve_seeds(seeds: list[int] | None, batch_size: int) -> list[int]:
    """The given seeds as ints, or fresh ones from the OS (never from the global RNG)."""
    if seeds is None:
        return [secrets.randbits(63) for _ in range(batch_size)]
    return [int(seed) for seed in seeds]


def run(
    rule: StepRule,
    plan: Plan,
    model: DiffusionLM,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    max_new_tokens: int,
    *,
    eos_token_id: int,
    pad_token_id: int,
    seeds: list[int] | None = None,
    record_trace: bool = False,
) -> GenerationOutput:
    """Generate ``max_new_tokens`` tokens after each left-padded prompt (see the contract)."""
    check_prompts(prompt_ids, prompt_mask, max_new_tokens, seeds)
    layout = block_layout(max_new_tokens, plan)
    seeds = resolve_seeds(seeds, prompt_ids.shape[0])
    generators = [torch.Generator(device=prompt_ids.device).manual_seed(seed) for seed in seeds]
    chunk = plan.micro_batch_size or micro_batch_for_budget(model, plan, prompt_ids.shape, max_new_tokens)
    with _eval_mode(model.module), torch.no_grad():
        parts = [
            _generate_micro_batch(
                rule,
                plan,
                layout,
                model,
                prompt_ids[start : start + chunk],
                prompt_mask[start : start + chunk],
                generators[start : start + chunk],
                eos_token_id,
            )
            for start in range(0, prompt_ids.shape[0], chunk)
        ]
    return _merge(parts, seeds, eos_token_id, pad_token_id, record_trace)


def micro_batch_for_budget(model: DiffusionLM, plan: Plan, prompt_shape: torch.Size, max_new_tokens: int) -> int:
    """Rows denoised together when ``micro_batch_size`` is unset: as many as keep the vocabulary-sized buffers
    (:mod:`~diffugrpo_plugin.sampling.memory`) under ``plan.memory_budget_gib``."""
    vocab, logits_bytes = _logit_width_and_bytes(model)
    row_bytes = vocabulary_bytes_per_row(vocab, prompt_shape[1], max_new_tokens, logits_bytes, model.shift_logits)
    return rows_within(plan.memory_budget_gib * GIB, row_bytes, prompt_shape[0])


def _logit_width_and_bytes(model: DiffusionLM) -> tuple[int, int]:
    """The vocabulary head's rows and element size; a model whose head the family cannot find (a plugin's
    own layout) gives its config's ``vocab_size``, counted as fp32 logits."""
    module = unwrap(model.module)
    try:
        head = model.family.head_weight(module)  # [V, H]
        return head.shape[0], head.element_size()
    except ModelConfigError:
        vocab = getattr(getattr(module, "config", None), "vocab_size", None)
        if not isinstance(vocab, int):
            raise SamplerOptionError(
                f"cannot tell the logit width of {type(module).__name__} (no head where the {model.family.name} "
                f"family looks, no config.vocab_size) to size micro-batches by memory_budget_gib; set micro_batch_size"
            ) from None
        return vocab, 4


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module):
    """Eval mode while generating (dropout would draw from the global RNG), then the previous mode."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def _merge(
    parts: list[_MicroBatchResult], seeds: list[int], eos_token_id: int, pad_token_id: int, record_trace: bool
) -> GenerationOutput:
    """One output for all micro-batches, with everything after the first EOS padded."""
    completion_ids, completion_mask = cut_after_eos(
        torch.cat([part.completion for part in parts]), eos_token_id, pad_token_id
    )  # [B, N] each
    return GenerationOutput(
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        lengths=completion_mask.sum(dim=1),
        steps=torch.cat([part.steps for part in parts]),
        forwards=sum(part.forwards for part in parts),
        forwarded_rows=sum(part.forwarded_rows for part in parts),
        seeds=seeds,
        unmask_step=torch.cat([part.unmask_step for part in parts]) if record_trace else None,
    )


def cut_after_eos(completion: torch.Tensor, eos_token_id: int, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep tokens up to and including the first EOS, pad the rest.  # [B, N] -> ([B, N], [B, N])"""
    is_eos = completion == eos_token_id  # [B, N]
    eos_before = is_eos.long().cumsum(dim=1) - is_eos.long()  # [B, N]: EOS strictly before each position
    keep = eos_before == 0  # [B, N]
    return completion.masked_fill(~keep, pad_token_id), keep.long()


class _MicroBatchResult(NamedTuple):
    completion: torch.Tensor  # [b, N]; still masked where the row stopped early
    unmask_step: torch.Tensor  # [b, N]
    steps: torch.Tensor  # [b]
    forwards: int
    forwarded_rows: int  # rows run through the model, over all forwards


@dataclass
class _Canvas:
    """A micro-batch being denoised: prompt + completion tokens, and what each row has done."""

    x: torch.Tensor  # [b, L]: prompt, then completion (mask tokens until decided)
    attention_mask: torch.Tensor  # [b, L]
    position_ids: torch.Tensor  # [b, L]
    prompt_length: int
    unmask_step: torch.Tensor  # [b, N]: step at which each completion token was decided, -1 if never
    steps_taken: torch.Tensor  # [b]: steps each row has taken part in


def _canvas(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, new_tokens: int, mask_id: int) -> _Canvas:
    """Prompts (minus columns that are padding in every row) followed by ``new_tokens`` masks."""
    first_real_column = int(prompt_mask.any(dim=0).long().argmax())
    prompt_ids, prompt_mask = prompt_ids[:, first_real_column:], prompt_mask[:, first_real_column:]  # [b, P]
    batch, device = prompt_ids.shape[0], prompt_ids.device
    x = torch.cat(
        [prompt_ids, torch.full((batch, new_tokens), mask_id, dtype=prompt_ids.dtype, device=device)], dim=1
    )  # [b, L]
    attention_mask = torch.cat(
        [prompt_mask.long(), torch.ones(batch, new_tokens, dtype=torch.long, device=device)], dim=1
    )  # [b, L]
    return _Canvas(
        x=x,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        prompt_length=prompt_ids.shape[1],
        unmask_step=torch.full((batch, new_tokens), -1, dtype=torch.long, device=device),
        steps_taken=torch.zeros(batch, dtype=torch.long, device=device),
    )


def _generate_micro_batch(
    rule: StepRule,
    plan: Plan,
    layout: BlockLayout,
    model: DiffusionLM,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    generators: list[torch.Generator],
    eos_token_id: int,
) -> _MicroBatchResult:
    canvas = _canvas(prompt_ids, prompt_mask, layout.num_blocks * layout.block_length, model.mask_token_id)
    forward = build_forward(model, plan.kv_cache, plan.cfg_scale, canvas.prompt_length, plan.dual_cache)
    # With a KV cache, earlier blocks are frozen context (Fast-dLLM); only the plain loop revisits them.
    revisit = rule.revisits_earlier_blocks and not plan.cached
    finished = torch.zeros(canvas.x.shape[0], dtype=torch.bool, device=canvas.x.device)  # [b]: EOS in a done block
    forwards = forwarded_rows = 0
    for block in range(layout.num_blocks):
        rows = (~finished).nonzero().flatten()  # [r]
        if rows.numel() == 0:
            break
        start = canvas.prompt_length + block * layout.block_length
        end = start + layout.block_length
        work = _denoise_block(
            rule,
            plan,
            layout,
            forward,
            canvas,
            rows,
            canvas.prompt_length if revisit else start,
            end,
            generators,
            model.mask_token_id,
            eos_token_id,
        )
        forwards += work.forwards
        forwarded_rows += work.rows
        finished[rows] = _has_final_eos(
            canvas.x[rows, canvas.prompt_length : end], eos_token_id, model.mask_token_id, revisit
        )
    return _MicroBatchResult(
        canvas.x[:, canvas.prompt_length :], canvas.unmask_step, canvas.steps_taken, forwards, forwarded_rows
    )


def _has_final_eos(decided: torch.Tensor, eos_token_id: int, mask_id: int, revisit: bool) -> torch.Tensor:
    """Rows whose completion so far holds an EOS that nothing can change any more.  # [r, N] -> [r]

    Everything after the first EOS becomes padding; when later blocks may still decide masks
    left before it, the row goes on until none is left there.
    """
    is_eos = decided == eos_token_id  # [r, N]
    if not revisit:
        return is_eos.any(dim=1)
    before_first_eos = is_eos.long().cumsum(dim=1) == 0  # [r, N]
    return is_eos.any(dim=1) & ~((decided == mask_id) & before_first_eos).any(dim=1)


class _BlockWork(NamedTuple):
    forwards: int  # model calls
    rows: int  # rows run through the model over those calls


def _output_is_final(completion: torch.Tensor, eos_token_id: int, mask_id: int) -> torch.Tensor:
    """Rows whose output nothing can change any more: an EOS with no mask before it.  # [r, N] -> [r]"""
    is_eos = completion == eos_token_id  # [r, N]
    before_first_eos = is_eos.long().cumsum(dim=1) == 0  # [r, N]
    return is_eos.any(dim=1) & ~((completion == mask_id) & before_first_eos).any(dim=1)


def _denoise_block(
    rule: StepRule,
    plan: Plan,
    layout: BlockLayout,
    forward,
    canvas: _Canvas,
    rows: torch.Tensor,
    start: int,
    end: int,
    generators: list[torch.Generator],
    mask_id: int,
    eos_token_id: int,
) -> _BlockWork:
    """Unmask positions ``start:end`` of ``rows`` over one block's steps; returns the model work done.

    By default every step runs the model on all ``rows`` (the references' cost). ``compact`` runs it
    only on rows that can still change their output; ``reuse_logits`` keeps each row's logits and
    runs the model again only for rows whose tokens changed since (the logits are a function of
    the tokens, so the reused ones are the ones the model would return).
    """
    x, attention_mask, position_ids = canvas.x[rows], canvas.attention_mask[rows], canvas.position_ids[rows]  # [r, L]
    in_completion = slice(start - canvas.prompt_length, end - canvas.prompt_length)
    steps = layout.steps_per_block
    # [r, W, V]: each row's latest logits at its masked positions, when rows or positions may be left out of a forward
    kept_logits = None
    stale = torch.ones(rows.numel(), dtype=torch.bool, device=rows.device)  # [r]: tokens changed since
    forwards = forwarded = 0
    for step in range(steps):
        # a KV cache is filled at the block's first step and, with cache_refresh, again every that many forwards
        fresh = step == 0 or (plan.cache_refresh is not None and forwards % plan.cache_refresh == 0)
        masked = x[:, start:end] == mask_id  # [r, W]
        undecided = masked.any(dim=1)  # [r]
        if plan.compact:
            undecided &= ~_output_is_final(x[:, canvas.prompt_length : end], eos_token_id, mask_id)
        live = undecided.nonzero().flatten()  # [l]: rows with something left to decide
        if live.numel() == 0:
            break
        if step == 0 or not (plan.compact or plan.reuse_logits):
            run_rows = None  # every row: the reference's cost, and a cache is filled for all of them
        else:
            run_rows = live[stale[live]] if plan.reuse_logits else live
        if run_rows is None or run_rows.numel():
            run_masked = masked if run_rows is None else masked[run_rows]  # [n, W]
            logits = forward(
                x,
                attention_mask,
                position_ids,
                start,
                end,
                fresh=fresh,
                rows=run_rows,
                positions=run_masked if plan.head_on_masked else None,
            ).float()  # [n, W, V] or [M, V]
            forwards += 1
            forwarded += rows.numel() if run_rows is None else run_rows.numel()
            if plan.suppress_mask_token:
                logits[..., mask_id] = -math.inf
            if plan.reuse_logits or plan.head_on_masked:
                kept_logits = _keep(kept_logits, logits, run_rows, run_masked, plan.head_on_masked)
                stale[slice(None) if run_rows is None else run_rows] = False
        live_masked = masked[live]  # [l, W]
        if kept_logits is not None:
            live_row, live_column = live_masked.nonzero(as_tuple=True)  # [M] each
            masked_logits = kept_logits[live[live_row], live_column]  # [M, V]
        else:
            masked_logits = (logits if run_rows is not None else logits[live])[live_masked]  # [M, V]
        live_rows = rows[live]  # [l]: indices into the micro-batch
        tokens, chosen = _decide(
            rule,
            plan,
            masked_logits,
            live_masked,
            step,
            steps,
            layout.block_length,
            [generators[i] for i in live_rows.tolist()],
            mask_id,
        )  # [l, W] each
        before = x[live, start:end]  # [l, W]
        after = torch.where(chosen, tokens, before)  # [l, W]
        x[live, start:end] = after
        stale[live] |= (after != before).any(dim=1)
        decided_at = canvas.unmask_step[live_rows, in_completion]  # [l, W]
        canvas.unmask_step[live_rows, in_completion] = torch.where(
            chosen, canvas.steps_taken[live_rows].unsqueeze(1), decided_at
        )
        canvas.steps_taken[live_rows] += 1
    canvas.x[rows] = x
    return _BlockWork(forwards, forwarded)


def _keep(
    kept: torch.Tensor | None,
    logits: torch.Tensor,
    run_rows: torch.Tensor | None,
    run_masked: torch.Tensor,
    packed: bool,
) -> torch.Tensor:
    """Write a forward's logits (``[n, W, V]``, or ``[M, V]`` for the masked positions) into the kept ones."""
    if kept is None:  # the block's first step, which runs every row
        if not packed:
            return logits
        kept = logits.new_empty((*run_masked.shape, logits.shape[-1]))  # [r, W, V]
    row_index = torch.arange(run_masked.shape[0], device=logits.device) if run_rows is None else run_rows  # [n]
    if packed:
        run_row, column = run_masked.nonzero(as_tuple=True)  # [M] each
        kept[row_index[run_row], column] = logits
    else:
        kept[row_index] = logits
    return kept


def _decide(
    rule: StepRule,
    plan: Plan,
    masked_logits: torch.Tensor,
    masked: torch.Tensor,
    step: int,
    steps: int,
    block_length: int,
    generators: list[torch.Generator],
    mask_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens for the window and the positions to unmask now.  # [M, V], [l, W] -> ([l, W], [l, W])"""
    sizes = masked.sum(dim=1).tolist()
    proposal = rule.propose(masked_logits, sizes, generators)  # [M] each
    chosen = (
        rule.choose(packed_to_rows(proposal.scores, masked, -math.inf), masked, step, steps, block_length, generators)
        & masked
    )  # [l, W]
    if plan.threshold is not None:
        chosen |= masked & (packed_to_rows(proposal.token_probs, masked, 0.0) > plan.threshold)
    if plan.factor is not None:
        chosen |= factor_choice(packed_to_rows(proposal.token_probs, masked, -math.inf), plan.factor)
    return packed_to_rows(proposal.tokens, masked, mask_id), chosen
