"""What the block-diffusion families (SDAR, LLaDA2.x) share: their attention masks, a KV cache of finished blocks that
the block being denoised reads without writing to, partial rotary embeddings, and the SwiGLU experts of their MoE layers.

A block-diffusion LM attends causally across blocks and bidirectionally within one: a token at position ``p`` sits
in block ``p // block_size`` and sees every token of its own block and of earlier blocks. Two layouts use that rule:

* **inference**: the sequence as it is, block-causal (:func:`block_causal_mask`). Finished blocks never change, so
  their keys and values are cached exactly; the block being denoised attends to the cache and to itself
  (``store_kv=False``: read, not written) and is written once it is final (``store_kv=True``);
* **training** (:func:`training_layout`): ``[x_t | x_0]`` of length ``2L`` with duplicated position ids. A noisy
  query sees its own noisy block and the clean blocks strictly before it; a clean query sees the clean blocks up to
  and including its own (block-causal). The published SDAR ``block_diff_mask`` and dFactory's BD3LM mask are this rule.

Masks are boolean, ``True`` = attend, ``[B, 1, Lq, Lk]``; a query left with no key at all (a padded one) is given
every key, so no softmax row is empty (NaN), and no real query ever sees a padded key.

Plain torch + transformers; no verl.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from transformers.cache_utils import Cache


def block_of(position_ids: torch.Tensor, block_size: int) -> torch.Tensor:
    """Each token's block: ``position // block_size`` (the grid starts at position 0).  # [B, L] -> [B, L]"""
    return torch.div(position_ids, block_size, rounding_mode="floor")


def _no_empty_rows(allowed: torch.Tensor) -> torch.Tensor:
    """A query that may attend to nothing (a pad) attends to everything instead: its row is never read by a real
    token, and an empty softmax row would be NaN.  # [B, 1, Lq, Lk]"""
    return allowed | ~allowed.any(dim=-1, keepdim=True)


def block_causal_mask(
    query_positions: torch.Tensor,
    key_positions: torch.Tensor,
    block_size: int,
    key_real: torch.Tensor | None = None,
) -> torch.Tensor:
    """Query ``i`` sees key ``j`` when ``block(j) <= block(i)`` and key ``j`` is real.  # -> [B, 1, Lq, Lk] bool

    ``query_positions`` [B, Lq], ``key_positions`` [B, Lk] (position ids), ``key_real`` [B, Lk] (1 = a real token).
    """
    allowed = (
        block_of(key_positions, block_size)[:, None, None, :] <= block_of(query_positions, block_size)[:, None, :, None]
    )
    if key_real is not None:
        allowed = allowed & key_real.bool()[:, None, None, :]
    return _no_empty_rows(allowed)


BLOCK_ORIGINS = ("sequence", "response")


def block_ids(
    position_ids: torch.Tensor, prompt_lengths: torch.Tensor, block_size: int, origin: str = "sequence"
) -> torch.Tensor:
    """Each token's block on the grid ``origin`` names.  # [B, L] -> [B, L]

    ``sequence``: ``position // block_size``, the grid from the sample's first token (SDAR's training and
    ``generate()``, DARE's ``global``). ``response``: the prompt on that grid, then a fresh block at the response's
    first token (dLLM-RL's training layout, DARE's ``response``): response token ``p`` is in block
    ``ceil(P / block_size) + (p - P) // block_size`` for a prompt of ``P`` tokens. ``position_ids`` [B, L] count from
    the sample's first real token; ``prompt_lengths`` [B] real prompt tokens.
    """
    if origin not in BLOCK_ORIGINS:
        raise ValueError(f"block_origin must be one of {', '.join(BLOCK_ORIGINS)}; got {origin!r}")
    on_grid = block_of(position_ids, block_size)  # [B, L]
    if origin == "sequence":
        return on_grid
    prompt = prompt_lengths.to(position_ids.device)[:, None]  # [B, 1]
    prompt_blocks = torch.div(prompt + block_size - 1, block_size, rounding_mode="floor")  # [B, 1]
    in_response = prompt_blocks + block_of((position_ids - prompt).clamp(min=0), block_size)  # [B, L]
    return torch.where(position_ids < prompt, on_grid, in_response)


def _layout_rule(query_block, key_block, query_clean, key_clean):
    """The ``[x_t | x_0]`` rule on broadcastable tensors: a noisy query sees its own noisy block and earlier clean
    blocks; a clean query sees clean blocks up to its own."""
    noisy_query = ~query_clean
    return (
        (noisy_query & ~key_clean & (key_block == query_block))
        | (noisy_query & key_clean & (key_block < query_block))
        | (query_clean & key_clean & (key_block <= query_block))
    )


def layout_mask_from_blocks(blocks: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """The ``[x_t | x_0]`` boolean mask over ``2L`` tokens whose halves share the blocks ``blocks`` [B, L] (any
    non-decreasing block ids, :func:`block_ids`); ``real`` [B, L]: padded tokens are no key to anyone.
    # -> [B, 1, 2L, 2L]
    """
    batch, length = blocks.shape
    doubled = blocks.repeat(1, 2)  # [B, 2L]
    clean = (torch.arange(2 * length, device=blocks.device) >= length)[None].expand(batch, -1)  # [B, 2L]
    allowed = _layout_rule(
        doubled[:, None, :, None], doubled[:, None, None, :], clean[:, None, :, None], clean[:, None, None, :]
    )  # [B, 1, 2L, 2L]
    if real is not None:
        allowed = allowed & real.bool().repeat(1, 2)[:, None, None, :]
    return _no_empty_rows(allowed)


def training_layout_mask(position_ids: torch.Tensor, block_size: int, real: torch.Tensor | None = None) -> torch.Tensor:
    """The ``[x_t | x_0]`` mask over ``2L`` tokens whose halves share ``position_ids`` [B, L], the grid from position
    0.  # -> [B, 1, 2L, 2L]

    Noisy query (first half): its own block of the noisy half, and clean blocks strictly earlier. Clean query
    (second half): clean blocks up to and including its own. ``real`` [B, L]: padded tokens are no key to anyone.
    """
    return layout_mask_from_blocks(block_of(position_ids, block_size), real)


def flex_layout_mask(blocks: torch.Tensor, real: torch.Tensor | None = None):
    """:func:`layout_mask_from_blocks` as FlexAttention's ``BlockMask`` (for ``attn_implementation=flex_attention``):
    the same rule as a ``mask_mod``, so the kernel skips the tiles no query sees. A padded query sees itself only
    (never read by a real token)."""
    batch, length = blocks.shape
    doubled = blocks.repeat(1, 2)  # [B, 2L]
    doubled_real = (torch.ones_like(blocks, dtype=torch.bool) if real is None else real.bool()).repeat(1, 2)

    def mask_mod(b, _head, q, kv):
        allowed = _layout_rule(doubled[b, q], doubled[b, kv], q >= length, kv >= length)
        return (allowed & doubled_real[b, kv]) | (~doubled_real[b, q] & (q == kv))

    return create_block_mask(mask_mod, batch, None, 2 * length, 2 * length, device=blocks.device)


def layout_attention_mask(blocks: torch.Tensor, real: torch.Tensor | None, attn_implementation: str | None):
    """The ``[x_t | x_0]`` mask in the form the model's attention takes: a ``BlockMask`` for ``flex_attention``,
    else the boolean ``[B, 1, 2L, 2L]`` of :func:`layout_mask_from_blocks` (SDPA, eager)."""
    if attn_implementation == "flex_attention":
        return flex_layout_mask(blocks, real)
    return layout_mask_from_blocks(blocks, real)


def training_layout(
    noisy_ids: torch.Tensor,
    clean_ids: torch.Tensor,
    position_ids: torch.Tensor,
    block_size: int,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids [B, 2L], position_ids [B, 2L], mask [B, 1, 2L, 2L])`` of the training layout ``[x_t | x_0]``.

    The logits of the first ``L`` positions score the noisy half (no logit shift in these families).
    """
    if noisy_ids.shape != clean_ids.shape or clean_ids.shape != position_ids.shape:
        raise ValueError(
            f"noisy ids {tuple(noisy_ids.shape)}, clean ids {tuple(clean_ids.shape)} and position ids "
            f"{tuple(position_ids.shape)} must have one shape [B, L]"
        )
    mask = training_layout_mask(position_ids, block_size, attention_mask)
    return torch.cat((noisy_ids, clean_ids), dim=1), position_ids.repeat(1, 2), mask


def forward_mask(
    attention_mask: torch.Tensor | BlockMask | None,
    position_ids: torch.Tensor,
    block_size: int,
    cached: int,
    dtype: torch.dtype,
    additive: bool,
) -> torch.Tensor:
    """The 4D mask a forward hands to its attention function.  # -> [B, 1, L, cached + L]

    A FlexAttention ``BlockMask`` or a 4D ``attention_mask`` is the caller's (boolean: ``True`` = attend; floating: added to the scores) and is used
    as given. Otherwise (``None`` or a 2D padding mask over ``cached + L`` or ``L`` keys, 1 = real) the block-causal
    mask over ``position_ids`` [B, L]: the ``cached`` keys of finished blocks are all visible (they are earlier
    blocks), the current tokens by block. ``additive``: as 0 / dtype-min for an attention function that adds it.
    """
    if isinstance(attention_mask, BlockMask):
        return attention_mask
    if attention_mask is not None and attention_mask.dim() == 4:
        mask = attention_mask
    else:
        batch, length = position_ids.shape
        real = None
        if attention_mask is not None:
            if attention_mask.dim() != 2 or attention_mask.shape[1] not in (length, cached + length):
                raise ValueError(
                    f"attention_mask {tuple(attention_mask.shape)} must be 4D [B, 1, L, keys] or a 2D padding mask "
                    f"over the {length} new tokens or all {cached + length} keys"
                )
            real = attention_mask.bool()
            if real.shape[1] == length and cached:
                real = torch.cat((real.new_ones(batch, cached), real), dim=1)
        current = block_causal_mask(position_ids, position_ids, block_size, None)
        mask = torch.cat((current.new_ones(batch, 1, length, cached), current), dim=-1)
        if real is not None:
            mask = _no_empty_rows(mask & real[:, None, None, :])
    if additive and mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    return mask


def cached_length(past_key_values: Cache | None) -> int:
    return past_key_values.get_seq_length() if past_key_values is not None else 0


def with_cache(
    past_key_values: Cache | None, key: torch.Tensor, value: torch.Tensor, layer_idx: int, store_kv: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values to attend to: the cached ones of finished blocks, then these.  # [B, Hkv, cached + L, D]

    ``store_kv`` True appends these to the cache (a block that is final, or a prefill); False reads the cache and
    leaves it as it was (a block still being denoised).
    """
    if past_key_values is None:
        return key, value
    if store_kv:
        return past_key_values.update(key, value, layer_idx)
    layers = getattr(past_key_values, "layers", ())
    if layer_idx < len(layers) and layers[layer_idx].get_seq_length() > 0:
        layer = layers[layer_idx]
        return torch.cat((layer.keys, key), dim=-2), torch.cat((layer.values, value), dim=-2)
    return key, value


def rotary_tables(
    position_ids: torch.Tensor, rotary_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE ``cos``/``sin`` over the first ``rotary_dim`` dimensions of a head, computed in fp32 and handed over in
    the hidden states' dtype, as the published code does.  # [B, L] -> 2 x [B, L, rotary_dim]

    Computed on the fly (no buffer), so weights loaded onto a meta device never leave it stale.
    """
    exponents = torch.arange(0, rotary_dim, 2, device=position_ids.device, dtype=torch.int64).float() / rotary_dim
    inv_freq = 1.0 / (theta**exponents)  # [rotary_dim / 2]
    freqs = position_ids.float()[..., None] * inv_freq  # [B, L, rotary_dim / 2]
    angles = torch.cat((freqs, freqs), dim=-1)  # [B, L, rotary_dim]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` dimensions of ``x`` [B, H, L, D]; the rest pass unchanged (partial rotary)."""
    rotary_dim = cos.shape[-1]
    cos, sin = cos[:, None], sin[:, None]  # [B, 1, L, rotary_dim]
    rotated, passed = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((rotated * cos + _rotate_half(rotated) * sin, passed), dim=-1)


class BlockSwiGLU(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))``, the feed-forward of every layer and expert in these families."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = nn.SiLU()  # the attribute transformers' MLPs have, which the lean backward checks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def run_experts(
    experts: nn.ModuleList, hidden: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """``sum_k weights[n, k] * experts[chosen[n, k]](hidden[n])``: each expert runs once, on the tokens routed to it.

    ``hidden`` [N, H], ``chosen`` [N, k] expert ids, ``weights`` [N, k]; the weighted sum is formed in the
    weights' dtype and returned in the hidden states'.  # -> [N, H]
    """
    out = torch.zeros(hidden.shape, dtype=weights.dtype, device=hidden.device)  # [N, H]
    for expert_id in chosen.unique().tolist():
        rows, slots = torch.where(chosen == expert_id)  # tokens routed to this expert, and in which of their k slots
        contribution = experts[expert_id](hidden[rows]).to(weights.dtype) * weights[rows, slots, None]  # [n, H]
        out.index_add_(0, rows, contribution)
    return out.to(hidden.dtype)
