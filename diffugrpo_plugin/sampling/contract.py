"""The sampler contract: what ``sampler.generate(...)`` takes and returns (no torch import).

Every sampler, built-in or from a third-party plugin, is an object with::

    generate(model: DiffusionLM, prompt_ids: LongTensor [B, P], prompt_mask: Tensor [B, P],
             max_new_tokens: int, *, eos_token_id: int, pad_token_id: int,
             seeds: list[int] | None = None, record_trace: bool = False) -> GenerationOutput

* ``prompt_ids`` are **left-padded**; ``prompt_mask`` is 1 on real tokens, 0 on padding, and
  every row holds at least one real token.
* ``seeds`` holds one seed per row. The same seed and prompt give the same completion whatever
  the other rows of the batch are; ``None`` draws fresh seeds (reported back in the output).
  The global RNG state (``torch.get_rng_state()``) is never read or changed.
* The output's ``completion_ids`` keep everything up to and including the first EOS; every
  later position holds ``pad_token_id`` and is 0 in ``completion_mask`` (the loss skips it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from diffugrpo_plugin.models.dlm import DiffusionLM


@dataclass
class GenerationOutput:
    """Completions of one ``generate`` call, in the order of the prompts.

    ``unmask_step[b, j]`` is the 0-based denoising step of row ``b`` at which completion token
    ``j`` was unmasked, or -1 for a position the sampler never had to decide (a row stops
    early once an EOS sits in a finished block, or with ``compact`` as soon as nothing before its
    first EOS is masked: everything after it is padding anyway).
    """

    completion_ids: torch.Tensor  # [B, N] long
    completion_mask: torch.Tensor  # [B, N] long: 1 up to and including the first EOS
    lengths: torch.Tensor  # [B] long: completion_mask.sum(-1)
    steps: torch.Tensor  # [B] long: denoising steps (model forwards) each row took part in
    forwards: int  # model forward calls over all micro-batches (a CFG pair counts once)
    seeds: list[int]  # the seed of every row, drawn when none were given
    unmask_step: torch.Tensor | None = None  # [B, N] long, only when record_trace=True
    forwarded_rows: int = 0  # rows run through the model in all (0: not counted by this sampler)


class Sampler(Protocol):
    """What a sampler factory (``factory(**options)``) must return."""

    def generate(
        self,
        model: DiffusionLM,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        max_new_tokens: int,
        *,
        eos_token_id: int,
        pad_token_id: int,
        seeds: list[int] | None = None,
        record_trace: bool = False,
    ) -> GenerationOutput: ...


class SamplerOptionError(ValueError):
    """A sampler option has a value the sampler cannot use; the message names the option."""
