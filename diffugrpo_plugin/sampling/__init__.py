"""Diffusion samplers: how a masked diffusion LM turns masked completions into text.

Samplers are found by name through the plugin registry (``diffugrpo_samplers()`` hook; ours
live in :mod:`diffugrpo_plugin.sampling.builtin`) and built with :func:`build_sampler`::

    sampler = build_sampler("entropy", steps=64, temperature=0.2)
    out = sampler.generate(model, prompt_ids, prompt_mask, max_new_tokens=64,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, seeds=[1, 2])

The contract every sampler follows (inputs, seeds, EOS and padding, the output fields) is in
:mod:`diffugrpo_plugin.sampling.contract`. Built-in samplers:

=================  ==============================================================
``dream``          Dream / DiffuCoder ``diffusion_generate``; option ``alg``
``entropy``        ``dream`` with ``alg=entropy`` (DiffuCoder's rollout sampler)
``maskgit_plus``   ``dream`` with ``alg=maskgit_plus``
``topk_margin``    ``dream`` with ``alg=topk_margin``
``origin``         ``dream`` with ``alg=origin``
``llada``          LLaDA block-wise ``generate`` with remasking and CFG
=================  ==============================================================

All of them share the fast-path options ``threshold`` and ``kv_cache`` and the loop options
``steps``, ``block_length``, ``temperature`` and ``micro_batch_size``. This package imports
no torch until a sampler generates, so listing samplers stays cheap.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from diffugrpo_plugin.sampling.contract import GenerationOutput, Sampler, SamplerOptionError

__all__ = ["GenerationOutput", "OptionInfo", "Sampler", "SamplerOptionError", "build_sampler", "sampler_options"]


class OptionInfo(NamedTuple):
    """One option a sampler factory accepts, for listings."""

    name: str
    default: Any
    help: str


def sampler_options(factory: Callable[..., Any]) -> list[OptionInfo]:
    """The options of a factory: dataclass fields (with their ``help`` metadata) or keyword parameters."""
    if dataclasses.is_dataclass(factory):
        return [OptionInfo(f.name, f.default, f.metadata.get("help", ""))
                for f in dataclasses.fields(factory) if f.init]
    return [OptionInfo(p.name, None if p.default is inspect.Parameter.empty else p.default, "")
            for p in inspect.signature(factory).parameters.values()
            if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]


def _accepts_any_keyword(factory: Callable[..., Any]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(factory).parameters.values())


def build_sampler(name: str, **options: Any) -> Sampler:
    """The sampler registered as ``name``, built with ``options``.

    Raises :class:`~diffugrpo_plugin.plugins.PluginError` for an unknown name (listing the
    known ones) and :class:`SamplerOptionError` for an unknown option (listing the valid ones).
    """
    from diffugrpo_plugin.plugins import lookup

    factory = lookup("sampler", name).obj
    if not _accepts_any_keyword(factory):
        known = [option.name for option in sampler_options(factory)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise SamplerOptionError(f"sampler '{name}' has no option {', '.join(unknown)}; "
                                     f"its options are: {', '.join(known) or 'none'}")
    return factory(**options)


def left_pad(token_lists, pad_id: int, device=None):
    """Prompts as samplers take them: left-padded ids and their attention mask.  # -> [B, P], [B, P]"""
    import torch

    width = max(len(tokens) for tokens in token_lists)
    ids = torch.tensor([[pad_id] * (width - len(t)) + list(t) for t in token_lists], device=device)  # [B, P]
    mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in token_lists], device=device)  # [B, P]
    return ids, mask
