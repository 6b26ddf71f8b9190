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
``block``          block-diffusion rollout (SDAR / TraDo, LLaDA2.x) over the KV cache of finished blocks
=================  ==============================================================

All of them share the fast-path options ``threshold``, ``factor``, ``kv_cache``, ``dual_cache``,
``compact``, ``reuse_logits`` and ``head_on_masked`` and the loop options ``steps``, ``block_length``, ``temperature``
and ``micro_batch_size``
(:func:`diffugrpo_plugin.plugins.factory_options` lists a sampler's options). This package imports
no torch until a sampler generates, so listing samplers stays cheap.
"""

from __future__ import annotations

from typing import Any

from diffugrpo_plugin.sampling.contract import GenerationOutput, Sampler, SamplerOptionError

__all__ = [
    "GenerationOutput",
    "Sampler",
    "SamplerOptionError",
    "build_request_sampler",
    "build_sampler",
    "left_pad",
    "padding_id",
]


def build_sampler(name: str, **options: Any) -> Sampler:
    """The sampler registered as ``name``, built with ``options``.

    Raises :class:`~diffugrpo_plugin.plugins.PluginError` for an unknown name (listing the known
    ones), :class:`~diffugrpo_plugin.plugins.PluginOptionError` for an unknown option (listing the
    valid ones) and :class:`SamplerOptionError` for a value the sampler cannot use.
    """
    from diffugrpo_plugin.plugins import build

    return build("sampler", name, options)


def build_request_sampler(
    name: str, settings: dict[str, Any], temperature: float | None, top_p: float | None, top_k: int | None
) -> Sampler:
    """The sampler ``name`` built with ``settings`` and a request's temperature / top-p / top-k, each where the
    sampler takes it (top-p of 1 or more and top-k of 0 or less mean off, as in verl's sampling params)."""
    from diffugrpo_plugin.plugins import factory_options, lookup

    accepted = {option.name for option in factory_options(lookup("sampler", name).obj)}
    options = dict(settings)
    if temperature is not None and "temperature" in accepted:
        options["temperature"] = float(temperature)
    if "top_p" in accepted:
        options["top_p"] = None if top_p is None or float(top_p) >= 1.0 else float(top_p)
    if "top_k" in accepted:
        options["top_k"] = None if top_k is None or int(top_k) <= 0 else int(top_k)
    return build_sampler(name, **options)


def padding_id(tokenizer: Any) -> int:
    """The id prompts are left-padded with: the tokenizer's pad token, else its EOS (never attended either way)."""
    for name in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, name, None) is not None:
            return int(getattr(tokenizer, name))
    raise ValueError(
        f"the tokenizer of {getattr(tokenizer, 'name_or_path', 'the model')} has neither a pad nor an "
        f"EOS token; add one (tokenizer.pad_token = ...) to batch prompts"
    )


def left_pad(token_lists, pad_id: int, device=None):
    """Prompts as samplers take them: left-padded ids and their attention mask.  # -> [B, P], [B, P]"""
    import torch

    width = max(len(tokens) for tokens in token_lists)
    ids = torch.tensor([[pad_id] * (width - len(t)) + list(t) for t in token_lists], device=device)  # [B, P]
    mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in token_lists], device=device)  # [B, P]
    return ids, mask
