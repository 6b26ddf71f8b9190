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

from diffugrpo_plugin.models import DiffusionLM, ModelConfigError, backbone_of, output_head_of


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

    Needs a transformers model whose body (``model.model``) accepts ``past_key_values`` and
    fills a :class:`~transformers.DynamicCache`, such as stock ``Qwen2ForCausalLM`` /
    ``LlamaForCausalLM`` with ``config.is_causal = False``. Only the window's hidden states go
    through the vocabulary projection.
    """

    def __init__(self, model: DiffusionLM):
        self.model = model
        try:
            self.backbone = backbone_of(model.module)
            self.head = output_head_of(model.module)
        except ModelConfigError as exc:
            raise self._unsupported(str(exc)) from exc
        self.cache = None
        self.cached_length = 0

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                 window_start: int, window_end: int, fresh: bool) -> torch.Tensor:
        # Token i is scored by the output at i - shift, so the re-run part starts one earlier for shifted models.
        query_start = window_start - int(self.model.shift_logits)
        width = window_end - window_start
        if fresh or self.cache is None:
            hidden = self._refill(x, attention_mask, position_ids, query_start)  # [b, L, H]
            window_hidden = hidden[:, query_start:query_start + width]  # [b, W, H]
        else:
            hidden = self.backbone(input_ids=x[:, query_start:], attention_mask=attention_mask,
                                   position_ids=position_ids[:, query_start:], past_key_values=self.cache,
                                   use_cache=True).last_hidden_state  # [b, L - query_start, H]
            # The cache grows in place with every call: cut it back to the prefix.
            self.cache.crop(self.cached_length)
            window_hidden = hidden[:, :width]  # [b, W, H]
        return self.head(window_hidden)  # [b, W, V]

    def _refill(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                prefix_length: int) -> torch.Tensor:
        """Run the whole sequence, keep the keys/values of its first ``prefix_length`` tokens.  # [b, L, H]"""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.module.config)
        try:
            out = self.backbone(input_ids=x, attention_mask=attention_mask, position_ids=position_ids,
                                past_key_values=cache, use_cache=True)
        except TypeError as exc:
            raise self._unsupported(f"its forward rejected past_key_values ({exc})") from exc
        if cache.get_seq_length() != x.shape[1]:
            raise self._unsupported("its forward did not fill the DynamicCache it was given")
        cache.crop(prefix_length)
        self.cache, self.cached_length = cache, prefix_length
        return out.last_hidden_state

    def _unsupported(self, why: str) -> ModelConfigError:
        name = type(self.model.module).__name__
        return ModelConfigError(
            f"kv_cache=true cannot be used with {name}: {why}. The prefix cache needs a transformers model "
            f"whose body takes past_key_values (stock Qwen2ForCausalLM / LlamaForCausalLM with "
            f"config.is_causal=False); set the sampler option kv_cache=false for this model."
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
