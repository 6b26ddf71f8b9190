"""Block-diffusion rollout (SDAR / TraDo, LLaDA2.x): blocks decoded left to right over an exact KV cache.

A block-diffusion LM attends causally across blocks and bidirectionally within one, so a finished block never
changes what an earlier block sees: its keys and values are cached exactly. Per micro-batch:

1. **prefill**: the prompt tokens that fill whole blocks before the first decode block are written to the cache
   (block-causal, left padding masked);
2. **each block**: the block (the prompt's tail first, where the grid puts it there, then masks) is run over the
   cache read-only (``store_kv=False``) until nothing in it is masked. Every forward samples a token for each of the
   block's positions (temperature, top-k, then top-p, as the published ``generate()`` code does) and a transfer rule
   picks which masked positions keep their sample; the finished block is then written once (``store_kv=True``);
3. **EOS**: a row whose finished block holds an EOS in its completion stops there; later blocks stay undecided.

The block grid (``block_origin``): ``sequence`` counts blocks from the sample's first token, so the prompt's last,
partial block is completed by the first completion tokens (SDAR's ``generate.py``, LLaDA2's ``generate()``,
JetEngine). ``response`` starts a fresh block at the first completion token (dLLM-RL's training layout): the prompt
is prefilled whole. Both are exact; they give different completions unless the prompt length is a multiple of the
block size.

Transfer rules, on the sampled tokens' probabilities ``confidence`` of the masked positions, with ``k`` the step's
share of the block (``block_size`` split evenly over ``steps`` as SDAR's ``get_num_transfer_tokens``):

* ``static``: the ``k`` most confident;
* ``dynamic``: every position above ``threshold`` if at least ``k`` are, else the ``k`` most confident (SDAR's
  ``low_confidence_dynamic``; LLaDA2's ``generate()`` with ``steps`` < block);
* ``llada2``: every position above ``threshold``, else the single most confident (LLaDA2's ``generate()`` at its
  default ``steps`` = block, SGLang's LowConfidence); it runs up to ``block_size`` forwards a block.

``k`` never exceeds the masked positions left: SDAR's code takes the top ``k`` over all positions there, which
rewrites a decided token when fewer than ``k`` masks remain.

Randomness: one ``torch.Generator`` per row, one ``multinomial`` draw over the block's ``[block_size, V]``
probabilities per forward the row denoises in, so a row's completion depends only on its seed and prompt, and
equals the published code's single-prompt run after ``torch.manual_seed(seed)``. Temperature 0 takes the argmax,
with its softmax probability as the confidence.

Plain torch; the model is called directly (``past_key_values``, ``store_kv``), as our native block classes take it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache

from diffugrpo_plugin.models.dlm import DiffusionLM
from diffugrpo_plugin.models.family import unwrap
from diffugrpo_plugin.models.native.block_attention import block_causal_mask
from diffugrpo_plugin.sampling.contract import GenerationOutput
from diffugrpo_plugin.sampling.decoding import top_k_filter, top_p_filter
from diffugrpo_plugin.sampling.denoising import check_prompts, cut_after_eos, resolve_seeds
from diffugrpo_plugin.sampling.trace import NEVER


@dataclass(frozen=True)
class BlockPlan:
    """Resolved settings of one block rollout (the family's defaults already filled in)."""

    block_size: int
    steps: int  # forwards at most per block, the schedule's length (block_size for llada2)
    rule: str  # static / dynamic / llada2
    threshold: float | None
    temperature: float
    top_k: int | None
    top_p: float | None
    block_origin: str  # sequence / response
    micro_batch_size: int | None = None
    suppress_mask_token: bool = False


def transfer_schedule(block_size: int, steps: int) -> list[int]:
    """Tokens to transfer at each step of a block: ``block_size`` split evenly, the remainder to the first steps."""
    base, remainder = divmod(block_size, steps)
    return [base + (1 if step < remainder else 0) for step in range(steps)]


def choose_transfers(
    confidence: torch.Tensor, masked: torch.Tensor, rule: str, count: int, threshold: float | None
) -> torch.Tensor:
    """Which positions of one block keep their sampled token this step.  # [W], [W] -> [W] bool

    ``confidence`` [W]: the sampled token's probability at each position; ``masked`` [W]: still masked there
    (only those can be chosen); ``count``: the step's floor ``k`` (``static`` / ``dynamic``).
    """
    left = int(masked.sum())
    scores = confidence.masked_fill(~masked, -torch.inf)  # [W]
    if rule in ("dynamic", "llada2"):
        above = masked & (confidence > threshold)  # [W]
        floor = count if rule == "dynamic" else 1
        if int(above.sum()) >= floor:
            return above
        if rule == "llada2":
            count = 1
    chosen = torch.zeros_like(masked)
    chosen[torch.topk(scores, min(count, left)).indices] = True
    return chosen


def sample_block(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """A token for every position of one row's block and its probability.  # [W, V] -> ([W] long, [W] float)

    Temperature, then top-k, then top-p (the published order), one ``multinomial`` draw from ``generator``.
    """
    logits = logits.float()
    if temperature == 0:
        probs = torch.softmax(logits, dim=-1)  # [W, V]
        confidence, tokens = probs.max(dim=-1)
        return tokens, confidence
    if temperature != 1.0:
        logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits, dim=-1)  # [W, V]
    tokens = torch.multinomial(probs, num_samples=1, generator=generator)  # [W, 1]
    return tokens[:, 0], probs.gather(-1, tokens)[:, 0]


def takes_block_cache(module: torch.nn.Module) -> bool:
    """Whether a model's forward reads a cache of finished blocks without writing to it (``store_kv``)."""
    return "store_kv" in inspect.signature(unwrap(module).forward).parameters


def generate_blocks(
    plan: BlockPlan,
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
    """Generate ``max_new_tokens`` after each left-padded prompt block by block (see the sampler contract)."""
    check_prompts(prompt_ids, prompt_mask, max_new_tokens, seeds)
    if not takes_block_cache(model.module):
        raise ValueError(
            f"the block sampler needs a model whose forward takes store_kv (our native block classes); "
            f"{type(unwrap(model.module)).__name__} does not: load it with implementation=native"
        )
    seeds = resolve_seeds(seeds, prompt_ids.shape[0])
    generators = [torch.Generator(device=prompt_ids.device).manual_seed(seed) for seed in seeds]
    chunk = plan.micro_batch_size or prompt_ids.shape[0]
    module = model.module
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            parts = [
                _micro_batch(
                    plan,
                    model,
                    prompt_ids[start : start + chunk],
                    prompt_mask[start : start + chunk],
                    max_new_tokens,
                    generators[start : start + chunk],
                    eos_token_id,
                )
                for start in range(0, prompt_ids.shape[0], chunk)
            ]
    finally:
        module.train(was_training)
    completion = torch.cat([part[0] for part in parts])  # [B, N]
    completion_ids, completion_mask = cut_after_eos(completion, eos_token_id, pad_token_id)
    return GenerationOutput(
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        lengths=completion_mask.sum(dim=-1),
        steps=torch.cat([part[2] for part in parts]),
        forwards=sum(part[3] for part in parts),
        seeds=seeds,
        unmask_step=torch.cat([part[1] for part in parts]) if record_trace else None,
        forwarded_rows=sum(part[4] for part in parts),
    )


def _forward(module, ids, mask, positions, cache, store_kv: bool) -> torch.Tensor:
    out = module(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        store_kv=store_kv,
    )
    return out.logits


def _micro_batch(
    plan: BlockPlan,
    model: DiffusionLM,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    max_new_tokens: int,
    generators: list[torch.Generator],
    eos_token_id: int,
):
    """One micro-batch: ``(completion [b, N] (masked where never decided), unmask_step [b, N], steps [b], forwards,
    forwarded rows)``."""
    module, mask_id, block = model.module, model.mask_token_id, plan.block_size
    batch, width = prompt_ids.shape
    device = prompt_ids.device
    lengths = prompt_mask.long().sum(dim=1)  # [b] real prompt tokens
    if plan.block_origin == "sequence":
        prefilled = torch.div(lengths, block, rounding_mode="floor") * block  # [b]
    else:
        prefilled = lengths.clone()
    tails = lengths - prefilled  # [b] prompt tokens opening the first decode block (< block)
    row_blocks = torch.div(tails + max_new_tokens + block - 1, block, rounding_mode="floor")  # [b]
    num_blocks = int(row_blocks.max())
    cached = int(prefilled.max())  # cache width after the prefill, left-padded per row

    # The prefill: each row's first ``prefilled`` prompt tokens, right-aligned in ``cached`` columns.
    column = torch.arange(cached, device=device)[None]  # [1, C]
    cache_real = column >= (cached - prefilled)[:, None]  # [b, C]
    real_ids = [prompt_ids[b, width - int(lengths[b]) :] for b in range(batch)]
    prefill_ids = torch.zeros(batch, cached, dtype=prompt_ids.dtype, device=device)
    region = torch.full((batch, num_blocks * block), mask_id, dtype=prompt_ids.dtype, device=device)  # [b, NB*W]
    for b in range(batch):
        p, t = int(prefilled[b]), int(tails[b])
        prefill_ids[b, cached - p :] = real_ids[b][:p]
        region[b, :t] = real_ids[b][p:]
    prefill_positions = (column - (cached - prefilled)[:, None]).clamp(min=0)  # [b, C]
    cache = DynamicCache()
    forwards, forwarded_rows = 0, 0
    if cached:
        _forward(
            module,
            prefill_ids,
            block_causal_mask(prefill_positions, prefill_positions, block, cache_real.long()),
            prefill_positions,
            cache,
            store_kv=True,
        )
        forwards, forwarded_rows = 1, batch

    unmask_step = torch.full(region.shape, NEVER, dtype=torch.long, device=device)  # [b, NB*W]
    steps_taken = torch.zeros(batch, dtype=torch.long, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    schedule = transfer_schedule(block, plan.steps)
    offsets = torch.arange(block, device=device)[None]  # [1, W]
    for index in range(num_blocks):
        active = ~finished & (row_blocks > index)  # [b]
        if not bool(active.any()):
            break
        start = index * block
        current = region[:, start : start + block]  # [b, W] (a view: decisions land in region)
        positions = prefilled[:, None] + start + offsets  # [b, W]
        keys_real = torch.cat((cache_real, torch.ones(batch, start + block, dtype=torch.bool, device=device)), dim=1)
        mask = keys_real[:, None, None, :].expand(batch, 1, block, keys_real.shape[1])  # [b, 1, W, keys]
        for step in range(plan.steps):
            if not bool(((current == mask_id) & active[:, None]).any()):
                break
            logits = _forward(module, current, mask, positions, cache, store_kv=False)  # [b, W, V]
            forwards += 1
            forwarded_rows += batch
            if plan.suppress_mask_token:
                logits[..., mask_id] = -torch.inf
            for b in torch.nonzero(active).flatten().tolist():
                masked = current[b] == mask_id  # [W]
                if not bool(masked.any()):
                    continue
                tokens, confidence = sample_block(logits[b], plan.temperature, plan.top_k, plan.top_p, generators[b])
                chosen = choose_transfers(confidence, masked, plan.rule, schedule[step], plan.threshold)  # [W]
                current[b, chosen] = tokens[chosen]
                unmask_step[b, start : start + block][chosen] = int(steps_taken[b])
                steps_taken[b] += 1
        completion_part = (start + offsets >= tails[:, None]) & (start + offsets < tails[:, None] + max_new_tokens)
        finished |= active & ((current == eos_token_id) & completion_part).any(dim=1)
        if index + 1 < num_blocks and bool((~finished & (row_blocks > index + 1)).any()):
            _forward(module, current, mask, positions, cache, store_kv=True)
            forwards += 1
            forwarded_rows += batch

    take = tails[:, None] + torch.arange(max_new_tokens, device=device)[None]  # [b, N]
    return region.gather(1, take), unmask_step.gather(1, take), steps_taken, forwards, forwarded_rows
