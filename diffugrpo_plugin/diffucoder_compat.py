"""Compatibility with DiffuCoder's reference trainer, for porting code written against it: its coupled-GRPO functions
(``forward_process``, ``selective_log_softmax``, ``get_per_token_logps``) under the same names and argument orders,
so ported code reads the same, with its defects fixed (see ``docs/concepts/coupled-grpo.md``, "Differences from the
reference"):

* randomness comes from a private ``torch.Generator`` (the reference resets every global
  RNG with ``set_seed``), so the caller's sampling noise is untouched;
* log-probs are taken in fp32 and never over the full vocabulary of the whole batch at once;
* an attention mask and position ids are always passed (left padding never leaks).

The framework itself uses the per-sample :mod:`diffugrpo_plugin.core.masking` maskers (one ``t``
per sample, so a sample's mask does not depend on its micro-batch); these functions keep
the reference's one ``t`` per batch. Plain torch; no verl.
"""

from __future__ import annotations

from typing import Sequence

import torch

from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
from diffugrpo_plugin.core.masking import DEFAULT_T_RANGE
from diffugrpo_plugin.core.views import MaskedViews
from diffugrpo_plugin.models.dlm import DiffusionLM, position_ids_from_mask
from diffugrpo_plugin.models.kernels import DEFAULT_CHUNK_ROWS, chunked_gathered_logprob


def forward_process(
    batch: torch.Tensor,
    prompt_index: torch.Tensor,
    mask_id: int,
    seed: int | None = None,
    accumulate: bool = False,
    num_generations: int = 1,
    t_range: tuple[float, float] = DEFAULT_T_RANGE,
    p_mask_prompt: float = 0.0,
):
    """Three noised versions of ``batch`` for coupled sampling.

    Args:
        batch: token ids.  # [B, L]
        prompt_index: True on prompt positions.  # [L] or [B, L] bool
        mask_id: the mask token id.
        seed: seeds a private generator; the same seed gives identical output.
        accumulate: draw the random rows for ``B / num_generations`` rows and tile them
            (``r.repeat(num_generations, 1)``) so every block of ``B / num_generations`` rows shares them.
        t_range: ``t ~ U(t_range)``, one ``t`` for the whole batch.
        p_mask_prompt: probability of masking each prompt token (d1); 0 keeps the prompt intact.
    Returns:
        ``(noisy_batch, weights, completion_mask)``: a list of three [B, L] tensors
        (completion fully masked; masked iff ``r < t``; masked iff ``r >= t``),
        ``[1, 1/t, 1/(1-t)]``, and the [B, L] bool mask of tokens masked in version 2.
    """
    batch_size, length = batch.shape
    prompt_index = prompt_index.to(batch.device, torch.bool)
    if prompt_index.dim() == 1:
        prompt_index = prompt_index[None].expand(batch_size, length)
    if prompt_index.shape != batch.shape:
        raise ValueError(f"prompt_index must be [L] or [B, L] = {tuple(batch.shape)}, got {tuple(prompt_index.shape)}")
    if accumulate and batch_size % num_generations:
        raise ValueError(
            f"accumulate=True needs the batch size ({batch_size}) divisible by num_generations ({num_generations})"
        )
    t_min, t_max = t_range
    generator = torch.Generator(device="cpu")
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    t = t_min + (t_max - t_min) * torch.rand((), generator=generator, dtype=torch.float64).item()
    rows = batch_size // num_generations if accumulate else batch_size
    r = torch.rand(rows, length, generator=generator, dtype=torch.float64)  # [rows, L]
    if accumulate:
        r = r.repeat(num_generations, 1)  # [B, L]
    r = r.to(batch.device)
    masked_prompt = torch.zeros_like(prompt_index)
    if p_mask_prompt > 0:
        prompt_draw = torch.rand(batch_size, length, generator=generator, dtype=torch.float64).to(batch.device)
        masked_prompt = prompt_index & (prompt_draw < p_mask_prompt)
    completion = ~prompt_index
    completion_mask = completion & (r < t)  # [B, L]
    noisy_batch = [
        torch.where(completion | masked_prompt, mask_id, batch),
        torch.where(completion_mask | masked_prompt, mask_id, batch),
        torch.where((completion & ~completion_mask) | masked_prompt, mask_id, batch),
    ]
    return noisy_batch, [1.0, 1.0 / t, 1.0 / (1.0 - t)], completion_mask


def _token_logprobs(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """fp32 ``log_softmax(logits)[index]`` without a full-vocabulary copy.  # [N, L, V], [N, L] -> [N, L]"""
    flat = chunked_gathered_logprob(logits.reshape(-1, logits.shape[-1]), index.reshape(-1), DEFAULT_CHUNK_ROWS)
    return flat.view(index.shape)


def selective_log_softmax(
    logits: torch.Tensor, index: torch.Tensor, weights: Sequence[float] | None = None, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-token log-probs of ``index``; with ``weights``, the coupled combination.

    Without ``weights``: logits [N, L, V], index [N, L] -> [N, L].
    With ``weights`` (reference layout, ``K = num_iterations``): logits [K*3*B, L, V] in blocks
    of three consecutive [B, L, V] versions per iteration, index and mask [K*B, L], weights
    [K*3]; returns ``(logp_v1 + where(mask, logp_v2 * w2, logp_v3 * w3)) / 2`` per token, [K*B, L].
    """
    if weights is None:
        return _token_logprobs(logits, index)
    if mask is None:
        raise ValueError("selective_log_softmax with weights needs the completion mask of version 2")
    iterations = len(weights) // 3
    if len(weights) != 3 * iterations or logits.shape[0] != 3 * index.shape[0] or index.shape[0] % max(iterations, 1):
        raise ValueError(
            f"layout mismatch: logits {tuple(logits.shape)}, index {tuple(index.shape)}, "
            f"{len(weights)} weights; expected [K*3*B, L, V], [K*B, L] and 3*K weights"
        )
    rows = index.shape[0] // iterations
    combined = []
    for k in range(iterations):
        target = index[k * rows : (k + 1) * rows]  # [B, L]
        block = logits[3 * k * rows : 3 * (k + 1) * rows]  # [3B, L, V]
        logp_v1, logp_v2, logp_v3 = (_token_logprobs(block[v * rows : (v + 1) * rows], target) for v in range(3))
        w2, w3 = float(weights[3 * k + 1]), float(weights[3 * k + 2])
        in_v2 = mask[k * rows : (k + 1) * rows].bool()
        combined.append((logp_v1 + torch.where(in_v2, logp_v2 * w2, logp_v3 * w3)) / 2)
    return torch.cat(combined)


def get_per_token_logps(
    model,
    input_ids: torch.Tensor,
    logits_to_keep: int,
    mask_seeds: Sequence[int],
    *,
    attention_mask: torch.Tensor | None = None,
    mask_id: int | None = None,
    logits_shift: bool | None = None,
    accumulate: bool = False,
    num_generations: int = 1,
    t_range: tuple[float, float] = DEFAULT_T_RANGE,
    p_mask_prompt: float = 0.0,
) -> torch.Tensor:
    """Coupled log-probs of the last ``logits_to_keep`` tokens, one pass per mask seed.

    Args:
        model: a :class:`DiffusionLM` or an HF model (wrapped; mask id / shift resolved from its config).
        input_ids: prompt followed by completion.  # [B, L]
        logits_to_keep: completion length (the last positions).
        mask_seeds: one seed per iteration (``num_iterations`` of them).
        attention_mask: 1 on real tokens; defaults to all ones.  # [B, L]
    Returns:
        [B, num_iterations, logits_to_keep] fp32.
    """
    lm = (
        model
        if isinstance(model, DiffusionLM)
        else DiffusionLM.wrap(model, mask_token_id=mask_id, logits_shift=logits_shift)
    )
    mask_id = lm.mask_token_id if mask_id is None else mask_id
    length = input_ids.shape[1]
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    position_ids = position_ids_from_mask(attention_mask)
    prompt_index = torch.arange(length, device=input_ids.device) < length - logits_to_keep  # [L]
    completion = (~prompt_index)[None] & attention_mask.bool()  # [B, L]
    per_seed = []
    for seed in mask_seeds:
        noisy, weights, in_v2 = forward_process(
            input_ids, prompt_index, mask_id, seed, accumulate, num_generations, t_range, p_mask_prompt
        )
        coef = torch.stack(
            [
                completion * 0.5 * weights[0],
                (in_v2 & completion) * 0.5 * weights[1],
                (completion & ~in_v2) * 0.5 * weights[2],
            ]
        ).to(torch.float32)  # [3, B, L]
        views = MaskedViews(noisy=torch.stack(noisy), coef=coef)
        logp = coupled_token_logprobs(lm, views, input_ids, attention_mask, position_ids).logp  # [B, L]
        per_seed.append(logp[:, -logits_to_keep:])
    return torch.stack(per_seed, dim=1)  # [B, K, logits_to_keep]
