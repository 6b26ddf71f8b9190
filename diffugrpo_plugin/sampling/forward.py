"""Model calls of a denoising step: logits for the positions of the current block.

Four interchangeable callables share one signature,
``forward(x [b, L], attention_mask [b, L], position_ids [b, L], window_start, window_end,
fresh, rows=None, positions=None) -> logits [r, W, V]`` with ``W = window_end - window_start``
and ``logits[:, j]`` scoring token ``window_start + j``; ``fresh`` is True on the first step of a
block, when every row of ``x`` is run, and when a cache is refreshed; a call may run only ``rows`` (indices into ``x``,
``None`` = all of them: finished rows then cost nothing). With ``positions`` (``[r, W]`` bool)
only those positions go through the vocabulary head and the logits come packed, ``[M, V]`` in
the order of ``logits[positions]``.

* :class:`FullForward` runs the whole sequence every step (the reference samplers' cost).
* :class:`PrefixCachedForward` is Fast-dLLM's prefix KV cache: at the first step of a block it
  runs the whole sequence and keeps the keys/values of everything before the block; later
  steps re-run only the block and what follows it against those cached keys/values. The
  cached prefix does not see the tokens unmasked since the block started, so with
  bidirectional attention the logits are an approximation; with causal attention it is exact.
* :class:`DualCachedForward` is Fast-dLLM's DualCache: the keys/values of everything outside
  the block (prefix and the still-masked suffix) are kept from the block's first step, and
  later steps re-run the block alone. Same approximation as the prefix cache, also for the
  suffix; with causal attention it is exact too (the block never attends to its suffix).
* :class:`GuidedForward` wraps any of them for LLaDA's classifier-free guidance.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from diffugrpo_plugin.models.dlm import DiffusionLM, ModelConfigError
from diffugrpo_plugin.models.family import final_hidden_rows, unwrap


def _select(rows: torch.Tensor | None, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The given rows of every tensor (all of them for ``None``)."""
    return tensors if rows is None else tuple(tensor[rows] for tensor in tensors)


def _hidden_rows(
    batch: int, run_length: int, offset: int, width: int, positions: torch.Tensor | None, device: torch.device
) -> torch.Tensor:
    """Flat indices of the hidden states that score the wanted window positions (all ``width`` of them without
    ``positions``); the window's predicting rows start at ``offset`` of each row's ``run_length``."""
    if positions is None:
        return (
            torch.arange(batch, device=device)[:, None] * run_length + offset + torch.arange(width, device=device)[None]
        ).flatten()  # [r * W]
    row, column = positions.nonzero(as_tuple=True)  # [M] each, in the order of logits[positions]
    return row * run_length + offset + column  # [M]


def _shaped(logits: torch.Tensor, batch: int, width: int, positions: torch.Tensor | None) -> torch.Tensor:
    """The head's ``[1, R, V]`` output as ``[r, W, V]``, or packed ``[M, V]`` for chosen positions."""
    return logits.view(batch, width, -1) if positions is None else logits.view(-1, logits.shape[-1])


class FullForward:
    """One forward over the whole sequence per step; the window's logits are sliced out."""

    def __init__(self, model: DiffusionLM):
        self.model = model

    def __call__(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        window_start: int,
        window_end: int,
        fresh: bool,
        rows: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x, attention_mask, position_ids = _select(rows, x, attention_mask, position_ids)
        if positions is None:
            return self.model.logits(x, attention_mask, position_ids)[:, window_start:window_end]  # [r, W, V]
        width = window_end - window_start
        hidden_rows = _hidden_rows(
            x.shape[0], x.shape[1], _query_start(self.model, window_start), width, positions, x.device
        )
        with final_hidden_rows(self.model.family, self.model.module, hidden_rows):
            logits = self.model.family.call(self.model.module, x, attention_mask, position_ids)  # [1, M, V]
        return _shaped(logits, x.shape[0], width, positions)  # [M, V]


class _CachedForward:
    """What both caches share: the model's own forward on part of the sequence with a transformers
    ``Cache``, projecting only the window's hidden states."""

    option = "kv_cache"

    def __init__(self, model: DiffusionLM):
        self.model = model
        if not model.supports_prefix_cache():
            raise self._unsupported("its forward takes no transformers Cache (past_key_values)")
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer: the cached keys, values

    def __call__(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        window_start: int,
        window_end: int,
        fresh: bool,
        rows: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        query_start, width = _query_start(self.model, window_start), window_end - window_start
        if fresh or not self.kept:
            return self._fill(x, attention_mask, position_ids, query_start, width, positions, rows)
        x, attention_mask, position_ids = _select(rows, x, attention_mask, position_ids)
        kept = self.kept if rows is None else [(keys[rows], values[rows]) for keys, values in self.kept]
        cache, last_input = self._reused(kept, query_start, window_end, x.shape[1])
        return self._run(x, attention_mask, position_ids, query_start, last_input, query_start, width, cache, positions)

    def _reused(
        self, kept: list[tuple[torch.Tensor, torch.Tensor]], query_start: int, window_end: int, length: int
    ) -> tuple[Cache, int]:
        """The cache a later step of the block runs against, and the end of the inputs it re-runs."""
        raise NotImplementedError

    def _run(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        first_input: int,
        last_input: int,
        query_start: int,
        width: int,
        cache: Cache,
        positions: torch.Tensor | None,
    ) -> torch.Tensor:
        """Logits of ``width`` positions from ``query_start`` (or of ``positions`` among them, packed), running
        inputs ``first_input:last_input``."""
        batch, run_length = x.shape[0], last_input - first_input
        hidden_rows = _hidden_rows(batch, run_length, query_start - first_input, width, positions, x.device)
        with final_hidden_rows(self.model.family, self.model.module, hidden_rows):
            out = self.model.module(
                input_ids=x[:, first_input:last_input],
                attention_mask=attention_mask,
                position_ids=position_ids[:, first_input:last_input],
                past_key_values=cache,
                use_cache=True,
            )
        return _shaped(out.logits, batch, width, positions)  # [r, W, V] or [M, V]

    def _fill(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        query_start: int,
        width: int,
        positions: torch.Tensor | None,
        rows: torch.Tensor | None,
    ) -> torch.Tensor:
        """The block's first step, or a refresh of ``rows``: the whole sequence, its keys/values kept per layer."""
        x, attention_mask, position_ids = _select(rows, x, attention_mask, position_ids)
        cache = DynamicCache(config=unwrap(self.model.module).config)
        logits = self._run(x, attention_mask, position_ids, 0, x.shape[1], query_start, width, cache, positions)
        if cache.get_seq_length() != x.shape[1]:
            raise self._unsupported("its forward did not fill the Cache it was given")
        filled = [(layer.keys, layer.values) for layer in cache.layers]  # each [r, Hkv, L, D]
        if rows is None or not self.kept:
            self.kept = filled
        else:
            for (keys, values), (new_keys, new_values) in zip(self.kept, filled):
                keys[rows], values[rows] = new_keys, new_values
        return logits

    def _unsupported(self, why: str) -> ModelConfigError:
        name = type(unwrap(self.model.module)).__name__
        return ModelConfigError(
            f"{self.option}=true cannot be used with {name}: {why}. The KV cache needs our native Dream/LLaDA "
            f"classes (actor_rollout_ref.model.diffusion.implementation=auto or native) or a stock transformers "
            f"model; otherwise set the sampler option {self.option}=false."
        )


def _query_start(model: DiffusionLM, window_start: int) -> int:
    """Token i is scored by the output at i - shift, so the predicting rows start one earlier for shifted models."""
    return window_start - int(model.shift_logits)


class PrefixCachedForward(_CachedForward):
    """Block-wise prefix KV cache (approximate under bidirectional attention, see module doc).

    Needs a model whose forward fills a transformers ``Cache``: our native Dream/LLaDA classes and
    stock transformers models do; the families' published code does not. Only the window's
    hidden states go through the vocabulary projection.
    """

    def _reused(self, kept, query_start, window_end, length):
        # everything from the token that scores the block's first one on is re-run
        return _prefilled_cache(
            [(keys[..., :query_start, :], values[..., :query_start, :]) for keys, values in kept]
        ), length


class DualCachedForward(_CachedForward):
    """Fast-dLLM's DualCache: prefix and suffix keys/values kept, only the block re-run (see module doc)."""

    option = "dual_cache"

    def _reused(self, kept, query_start, window_end, length):
        # The re-run part is the block and, for a shifted model, the token before it (whose output scores the
        # block's first token), so every block token's keys/values are fresh.
        return Cache(layers=[_BlockLayer(keys, values, query_start, window_end) for keys, values in kept]), window_end


def _prefilled_cache(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> Cache:
    """A transformers ``Cache`` already holding these keys/values; the model appends to it."""
    cache_layers = []
    for keys, values in layers:
        layer = DynamicLayer()
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
        cache_layers.append(layer)
    return Cache(layers=cache_layers)


class _BlockLayer(DynamicLayer):
    """Keys/values of the whole sequence in which those of the re-run part ``run_start:run_end`` replace the kept ones.

    To the model, ``run_start`` tokens precede its input and its queries attend to all ``L`` positions.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, run_start: int, run_end: int):
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values  # [r, Hkv, L, D]
        self.run_start, self.run_end = run_start, run_end

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return self._spliced(self.keys, key_states), self._spliced(self.values, value_states)

    def _spliced(self, kept: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
        return torch.cat([kept[..., : self.run_start, :], block, kept[..., self.run_end :, :]], dim=-2)

    def get_seq_length(self) -> int:
        return self.run_start

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2], 0


class GuidedForward:
    """LLaDA classifier-free guidance: ``u + (scale + 1) * (c - u)``, where the unconditional
    pass ``u`` sees the same sequence with every real prompt token replaced by the mask token."""

    def __init__(self, inner, cfg_scale: float, mask_token_id: int, prompt_length: int):
        self.inner = inner
        self.cfg_scale = cfg_scale
        self.mask_token_id = mask_token_id
        self.prompt_length = prompt_length

    def __call__(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        window_start: int,
        window_end: int,
        fresh: bool,
        rows: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        prompt_tokens = attention_mask.bool().clone()  # [b, L]
        prompt_tokens[:, self.prompt_length :] = False
        unconditional = x.masked_fill(prompt_tokens, self.mask_token_id)  # [b, L]
        # the inner forward sees conditional rows first, then their unconditional twins
        both_rows = None if rows is None else torch.cat([rows, rows + x.shape[0]])
        both_positions = None if positions is None else torch.cat([positions, positions])
        both = self.inner(
            torch.cat([x, unconditional]),
            torch.cat([attention_mask, attention_mask]),
            torch.cat([position_ids, position_ids]),
            window_start,
            window_end,
            fresh,
            both_rows,
            both_positions,
        )  # [2r, W, V] or [2M, V]
        conditional, unconditional_logits = both.chunk(2, dim=0)  # [r, W, V] or [M, V] each
        return unconditional_logits + (self.cfg_scale + 1) * (conditional - unconditional_logits)


def build_forward(model: DiffusionLM, kv_cache: bool, cfg_scale: float, prompt_length: int, dual_cache: bool = False):
    """The forward callable for one micro-batch (a fresh cache for each)."""
    if dual_cache:
        forward = DualCachedForward(model)
    else:
        forward = PrefixCachedForward(model) if kv_cache else FullForward(model)
    if cfg_scale > 0:
        forward = GuidedForward(forward, cfg_scale, model.mask_token_id, prompt_length)
    return forward
