"""Model calls of a denoising step: logits for the positions of the current block.

Three interchangeable callables share one signature,
``forward(x [b, L], attention_mask [b, L], position_ids [b, L], window_start, window_end,
fresh) -> logits [b, W, V]`` with ``W = window_end - window_start`` and ``logits[:, j]``
scoring token ``window_start + j``; ``fresh`` is True on the first step of a block.

* :class:`FullForward` runs the whole sequence every step (the reference samplers' cost).
* :class:`PrefixCachedForward` is Fast-dLLM's prefix KV cache: at the first step of a block it
  runs the whole sequence and keeps the keys/values of everything before the block; later
  steps re-run only the block and what follows it against those cached keys/values. The
  cached prefix does not see the tokens unmasked since the block started, so with
  bidirectional attention the logits are an approximation; with causal attention it is exact.
* :class:`GuidedForward` wraps either for LLaDA's classifier-free guidance.
"""

from __future__ import annotations

import torch

from diffugrpo_plugin.families import final_hidden_rows, unwrap
from diffugrpo_plugin.models import DiffusionLM, ModelConfigError


class FullForward:
    """One forward over the whole sequence per step; the window's logits are sliced out."""

    def __init__(self, model: DiffusionLM):
        self.model = model

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                 window_start: int, window_end: int, fresh: bool) -> torch.Tensor:
        logits = self.model.logits(x, attention_mask, position_ids)  # [b, L, V]
        return logits[:, window_start:window_end]  # [b, W, V]


class PrefixCachedForward:
    """Block-wise prefix KV cache (approximate under bidirectional attention, see module doc).

    Needs a model whose forward fills a transformers ``Cache``: our native Dream/LLaDA classes and
    stock transformers models do; the families' published code does not. Only the window's
    hidden states go through the vocabulary projection.
    """

    def __init__(self, model: DiffusionLM):
        self.model = model
        if not model.supports_prefix_cache():
            raise self._unsupported("its forward takes no transformers Cache (past_key_values)")
        self.cache = None

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                 window_start: int, window_end: int, fresh: bool) -> torch.Tensor:
        from transformers import DynamicCache

        # Token i is scored by the output at i - shift, so the re-run part starts one earlier for shifted models.
        query_start = window_start - int(self.model.shift_logits)
        batch, length, width = x.shape[0], x.shape[1], window_end - window_start
        if fresh or self.cache is None:
            # Run the whole sequence, keep the keys/values of everything before the re-run part.
            self.cache = DynamicCache(config=unwrap(self.model.module).config)
            first_input = 0
        else:
            first_input = query_start
        run_length = length - first_input
        offset = query_start - first_input  # where the window's predicting rows start in this run
        rows = (torch.arange(batch, device=x.device)[:, None] * run_length + offset
                + torch.arange(width, device=x.device)[None]).flatten()  # [b * W]
        with final_hidden_rows(self.model.family, self.model.module, rows):
            out = self.model.module(input_ids=x[:, first_input:], attention_mask=attention_mask,
                                    position_ids=position_ids[:, first_input:], past_key_values=self.cache,
                                    use_cache=True)
        if self.cache.get_seq_length() != length:
            raise self._unsupported("its forward did not fill the Cache it was given")
        # The cache grows in place with every call: cut it back to the prefix.
        self.cache.crop(query_start)
        return out.logits.view(batch, width, -1)  # [b, W, V]

    def _unsupported(self, why: str) -> ModelConfigError:
        name = type(unwrap(self.model.module)).__name__
        return ModelConfigError(
            f"kv_cache=true cannot be used with {name}: {why}. The prefix cache needs our native Dream/LLaDA "
            f"classes (actor_rollout_ref.model.diffusion.implementation=auto or native) or a stock transformers "
            f"model; otherwise set the sampler option kv_cache=false."
        )


class GuidedForward:
    """LLaDA classifier-free guidance: ``u + (scale + 1) * (c - u)``, where the unconditional
    pass ``u`` sees the same sequence with every real prompt token replaced by the mask token."""

    def __init__(self, inner, cfg_scale: float, mask_token_id: int, prompt_length: int):
        self.inner = inner
        self.cfg_scale = cfg_scale
        self.mask_token_id = mask_token_id
        self.prompt_length = prompt_length

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                 window_start: int, window_end: int, fresh: bool) -> torch.Tensor:
        prompt_tokens = attention_mask.bool().clone()  # [b, L]
        prompt_tokens[:, self.prompt_length:] = False
        unconditional = x.masked_fill(prompt_tokens, self.mask_token_id)  # [b, L]
        both = self.inner(torch.cat([x, unconditional]), torch.cat([attention_mask, attention_mask]),
                          torch.cat([position_ids, position_ids]), window_start, window_end, fresh)  # [2b, W, V]
        conditional, unconditional_logits = both.chunk(2, dim=0)  # [b, W, V] each
        return unconditional_logits + (self.cfg_scale + 1) * (conditional - unconditional_logits)


def build_forward(model: DiffusionLM, kv_cache: bool, cfg_scale: float, prompt_length: int):
    """The forward callable for one micro-batch (a fresh cache for each)."""
    forward = PrefixCachedForward(model) if kv_cache else FullForward(model)
    if cfg_scale > 0:
        forward = GuidedForward(forward, cfg_scale, model.mask_token_id, prompt_length)
    return forward
