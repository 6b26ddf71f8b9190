"""The built-in samplers as option objects: validated settings plus ``generate`` (no torch import).

Each class is its own factory: ``DreamSampler(steps=64, alg="entropy")`` validates the options
(a clear :class:`SamplerOptionError` naming the option otherwise) and its ``generate`` runs
the shared loop of :mod:`diffugrpo_plugin.sampling.denoising` with the family's step rule. The
dataclass fields, with their ``help`` metadata, are the options ``diffugrpo generate --help``
lists. Importing this module stays cheap because torch is imported only inside ``generate``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from diffugrpo_plugin.sampling.contract import GenerationOutput, SamplerOptionError
from diffugrpo_plugin.sampling.memory import DEFAULT_BUDGET_GIB

if TYPE_CHECKING:
    import torch

    from diffugrpo_plugin.models.dlm import DiffusionLM

DREAM_ALGS = ("origin", "maskgit_plus", "topk_margin", "entropy")
LLADA_REMASKING = ("low_confidence", "random")


def _option(default, help_text: str):
    return field(default=default, metadata={"help": help_text})


def _check(condition: bool, sampler: str, option: str, value, requirement: str) -> None:
    if not condition:
        raise SamplerOptionError(f"{sampler} sampler: option {option}={value!r} is invalid; {requirement}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class _LoopOptions:
    """Options every built-in sampler shares (the loop and the fast path)."""

    steps: int | None = _option(
        None, "denoising steps in all, split equally over the blocks (default: one per generated token)"
    )
    block_length: int | None = _option(
        None, "tokens per block, generated left to right; must divide max_new_tokens (default: one block)"
    )
    temperature: float = _option(0.0, "token sampling temperature; 0 takes the most likely token")
    threshold: float | None = _option(
        None,
        "fast path: also unmask every masked position whose token "
        "probability exceeds this (1.0 changes nothing; default off)",
    )
    kv_cache: bool = _option(
        False,
        "fast path: Fast-dLLM block-wise prefix KV cache (approximate with "
        "bidirectional attention; needs a model body that takes past_key_values)",
    )
    dual_cache: bool = _option(
        False,
        "fast path: Fast-dLLM DualCache, keys/values before and after the block kept "
        "from the block's first step and only the block re-run (approximate with "
        "bidirectional attention; pays off with blocks; excludes kv_cache)",
    )
    cache_refresh: int | None = _option(
        None,
        "with kv_cache or dual_cache: recompute the kept keys/values every "
        "this many forwards of a block (1 = every step, as without a cache; "
        "default: only at the block's start, as Fast-dLLM)",
    )
    factor: float | None = _option(
        None,
        "fast path: Fast-dLLM's factor rule, also unmask the n most confident "
        "positions where the k-th best has probability >= 1 - factor / (k + 1) "
        "for every k <= n (default off)",
    )
    compact: bool = _option(
        False,
        "no model work for finished rows: a row leaves the forwards once its output "
        "is final (an EOS with nothing masked before it, or nothing masked); outputs "
        "unchanged",
    )
    reuse_logits: bool = _option(
        False,
        "no model work for unchanged rows: a row whose tokens did not change since "
        "its last forward reuses those logits; outputs unchanged",
    )
    head_on_masked: bool = _option(
        False,
        "no vocabulary projection for decided positions: only the masked ones "
        "of the rows run go through the head; outputs unchanged",
    )
    micro_batch_size: int | None = _option(
        None,
        "prompts generated together (default: as many as keep the sampler's vocabulary-sized "
        "buffers under memory_budget_gib)",
    )
    memory_budget_gib: float = _option(
        DEFAULT_BUDGET_GIB,
        "without micro_batch_size: GiB the logits and fp32 window buffers of the prompts generated "
        "together may take (weights and KV cache not counted; outputs do not depend on it)",
    )
    suppress_mask_token: bool = _option(
        False,
        "never propose the mask token itself (the Dream and LLaDA references "
        "do not suppress it; default off, as they run)",
    )

    sampler_name = "diffusion"

    def __post_init__(self) -> None:
        name = self.sampler_name
        for option in ("steps", "block_length", "micro_batch_size", "cache_refresh"):
            value = getattr(self, option)
            _check(value is None or (_is_int(value) and value >= 1), name, option, value, "use an integer >= 1")
        _check(
            _is_number(self.memory_budget_gib) and self.memory_budget_gib > 0,
            name,
            "memory_budget_gib",
            self.memory_budget_gib,
            "use a number of GiB > 0",
        )
        _check(
            _is_number(self.temperature) and self.temperature >= 0,
            name,
            "temperature",
            self.temperature,
            "use a number >= 0",
        )
        _check(
            self.threshold is None or (_is_number(self.threshold) and 0 < self.threshold <= 1),
            name,
            "threshold",
            self.threshold,
            "use a number in (0, 1] or leave it unset",
        )
        _check(
            self.factor is None or (_is_number(self.factor) and self.factor > 0),
            name,
            "factor",
            self.factor,
            "use a number > 0 (Fast-dLLM uses 1) or leave it unset",
        )
        for option in ("kv_cache", "dual_cache", "compact", "reuse_logits", "head_on_masked", "suppress_mask_token"):
            _check(isinstance(getattr(self, option), bool), name, option, getattr(self, option), "use true or false")
        _check(
            not (self.kv_cache and self.dual_cache),
            name,
            "dual_cache",
            self.dual_cache,
            "it replaces the prefix cache: set kv_cache=false or dual_cache=false",
        )
        _check(
            self.cache_refresh is None or self.kv_cache or self.dual_cache,
            name,
            "cache_refresh",
            self.cache_refresh,
            "it refreshes a KV cache: also set kv_cache=true or dual_cache=true, or leave it unset",
        )

    def _plan(self, cfg_scale: float = 0.0):
        """The denoising loop's settings: this sampler's options of the same name (so their defaults live here)."""
        from diffugrpo_plugin.sampling.denoising import Plan

        loop = {
            field.name: getattr(self, field.name) for field in dataclasses.fields(Plan) if field.name != "cfg_scale"
        }
        return Plan(**loop, cfg_scale=cfg_scale)


@dataclass(frozen=True)
class DreamSampler(_LoopOptions):
    """Dream / DiffuCoder diffusion_generate: unmask int(m * (1 - s/t)) positions per step, ranked by alg."""

    top_p: float | None = _option(
        None, "nucleus sampling: keep the most likely tokens up to this cumulative probability"
    )
    top_k: int | None = _option(
        50,
        "keep only the k most likely tokens; 50 is what Dream's diffusion_generate "
        "runs when not given one (transformers 4.x's generation default), as in "
        "DiffuCoder's rollout; null keeps every token",
    )
    eps: float = _option(1e-3, "last timestep of linspace(1, eps, steps + 1)")
    alg: str = _option("entropy", "position ranking: " + " / ".join(DREAM_ALGS))
    alg_temp: float = _option(
        0.0, "0 unmasks the best-ranked positions; > 0 samples them from softmax(score / alg_temp)"
    )

    sampler_name = "dream"

    def __post_init__(self) -> None:
        super().__post_init__()
        name = self.sampler_name
        _check(self.alg in DREAM_ALGS, name, "alg", self.alg, "choose one of " + ", ".join(DREAM_ALGS))
        _check(
            self.top_p is None or (_is_number(self.top_p) and 0 < self.top_p <= 1),
            name,
            "top_p",
            self.top_p,
            "use a number in (0, 1]",
        )
        _check(
            self.top_k is None or (_is_int(self.top_k) and self.top_k >= 1),
            name,
            "top_k",
            self.top_k,
            "use an integer >= 1",
        )
        _check(_is_number(self.eps) and 0 <= self.eps < 1, name, "eps", self.eps, "use a number in [0, 1)")
        _check(_is_number(self.alg_temp) and self.alg_temp >= 0, name, "alg_temp", self.alg_temp, "use a number >= 0")

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
    ) -> GenerationOutput:
        from diffugrpo_plugin.sampling.denoising import run
        from diffugrpo_plugin.sampling.dream import DreamRule

        rule = DreamRule(self.alg, self.temperature, self.top_p, self.top_k, self.eps, self.alg_temp)
        return run(
            rule,
            self._plan(),
            model,
            prompt_ids,
            prompt_mask,
            max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            seeds=seeds,
            record_trace=record_trace,
        )


@dataclass(frozen=True)
class EntropySampler(DreamSampler):
    """Dream sampler with alg=entropy: unmask the positions with the lowest entropy first (DiffuCoder's choice)."""

    alg: str = field(default="entropy", init=False)
    sampler_name = "entropy"


@dataclass(frozen=True)
class MaskGitPlusSampler(DreamSampler):
    """Dream sampler with alg=maskgit_plus: unmask the positions whose proposed token is most likely first."""

    alg: str = field(default="maskgit_plus", init=False)
    sampler_name = "maskgit_plus"


@dataclass(frozen=True)
class TopKMarginSampler(DreamSampler):
    """Dream sampler with alg=topk_margin: unmask the positions with the largest top-1 minus top-2 margin first."""

    alg: str = field(default="topk_margin", init=False)
    sampler_name = "topk_margin"


@dataclass(frozen=True)
class OriginSampler(DreamSampler):
    """Dream sampler with alg=origin: unmask each masked position with probability 1 - s/t, in random order."""

    alg: str = field(default="origin", init=False)
    sampler_name = "origin"


@dataclass(frozen=True)
class LLaDASampler(_LoopOptions):
    """LLaDA generate: block-wise semi-autoregressive, equal tokens per step, Gumbel-max in float64."""

    remasking: str = _option("low_confidence", "which positions to unmask: " + " / ".join(LLADA_REMASKING))
    cfg_scale: float = _option(
        0.0, "classifier-free guidance scale; > 0 adds an unconditional pass with the prompt masked"
    )

    sampler_name = "llada"

    def __post_init__(self) -> None:
        super().__post_init__()
        name = self.sampler_name
        _check(
            self.remasking in LLADA_REMASKING,
            name,
            "remasking",
            self.remasking,
            "choose one of " + ", ".join(LLADA_REMASKING),
        )
        _check(
            _is_number(self.cfg_scale) and self.cfg_scale >= 0, name, "cfg_scale", self.cfg_scale, "use a number >= 0"
        )

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
    ) -> GenerationOutput:
        from diffugrpo_plugin.sampling.denoising import run
        from diffugrpo_plugin.sampling.llada import LLaDARule

        rule = LLaDARule(self.remasking, self.temperature)
        return run(
            rule,
            self._plan(self.cfg_scale),
            model,
            prompt_ids,
            prompt_mask,
            max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            seeds=seeds,
            record_trace=record_trace,
        )


BLOCK_RULES = ("static", "dynamic", "llada2")
BLOCK_ORIGINS = ("sequence", "response")  # models.native.block_attention.BLOCK_ORIGINS, without importing torch
# family -> (rule, threshold) its published rollout runs: TraDo / dLLM-RL's low_confidence_dynamic at 0.9 for SDAR,
# LLaDA2's generate() at 0.95 (threshold, else the most confident)
BLOCK_FAMILY_DEFAULTS = {"sdar": ("dynamic", 0.9), "sdar_moe": ("dynamic", 0.9), "llada2": ("llada2", 0.95)}
BLOCK_ORIGIN_DEFAULT = "sequence"  # SDAR's generate.py, LLaDA2's generate() and JetEngine count blocks from token 0


@dataclass(frozen=True)
class BlockDiffusionSampler:
    """Block-diffusion rollout (SDAR / TraDo, LLaDA2.x): block by block over the exact KV cache of finished blocks.

    Unset options take the model's: its config's ``block_size`` (else the family's), the family's rule and threshold
    (:data:`BLOCK_FAMILY_DEFAULTS`) and the published block grid (``sequence``).
    """

    block_size: int | None = _option(
        None, "tokens per block (default: the checkpoint's config block_size, else its family's: SDAR 4, LLaDA2 32)"
    )
    steps: int | None = _option(
        None,
        "denoising forwards budgeted per block; static / dynamic transfer block_size / steps tokens a step at least "
        "(default: block_size, one token a step)",
    )
    rule: str | None = _option(
        None,
        "which masked positions keep their sample each step: static (the k most confident), dynamic (all above "
        "threshold if at least k, else the k most confident), llada2 (all above threshold, else the most "
        "confident) (default: the family's, SDAR dynamic, LLaDA2 llada2)",
    )
    threshold: float | None = _option(
        None, "confidence threshold of the dynamic and llada2 rules (default: SDAR 0.9, LLaDA2 0.95)"
    )
    temperature: float = _option(1.0, "token sampling temperature; 0 takes the most likely token")
    top_k: int | None = _option(None, "keep only the k most likely tokens before sampling (default: all)")
    top_p: float | None = _option(
        None, "nucleus sampling after top_k: keep the most likely tokens up to this cumulative probability"
    )
    block_origin: str | None = _option(
        None,
        "where the block grid starts: sequence (the sample's first token, the prompt's last partial block "
        "completed by the response, as the published generate() code) or response (a fresh block at the "
        "response's first token); training must use the same (actor_rollout_ref.model.diffusion.block_origin) "
        "(default: sequence)",
    )
    micro_batch_size: int | None = _option(None, "prompts generated together (default: all)")
    suppress_mask_token: bool = _option(
        False, "never sample the mask token itself (the published generate() code does not suppress it)"
    )

    sampler_name = "block"

    def __post_init__(self) -> None:
        name = self.sampler_name
        for option in ("block_size", "steps", "micro_batch_size"):
            value = getattr(self, option)
            _check(value is None or (_is_int(value) and value >= 1), name, option, value, "use an integer >= 1")
        _check(
            self.rule is None or self.rule in BLOCK_RULES, name, "rule", self.rule, "choose " + ", ".join(BLOCK_RULES)
        )
        _check(
            self.threshold is None or (_is_number(self.threshold) and 0 <= self.threshold < 1),
            name,
            "threshold",
            self.threshold,
            "use a number in [0, 1)",
        )
        _check(
            not (self.rule == "static" and self.threshold is not None),
            name,
            "threshold",
            self.threshold,
            "the static rule takes none: leave it unset or choose rule=dynamic or llada2",
        )
        _check(
            _is_number(self.temperature) and self.temperature >= 0,
            name,
            "temperature",
            self.temperature,
            "use a number >= 0",
        )
        _check(self.top_k is None or (_is_int(self.top_k) and self.top_k >= 1), name, "top_k", self.top_k, "use >= 1")
        _check(
            self.top_p is None or (_is_number(self.top_p) and 0 < self.top_p <= 1),
            name,
            "top_p",
            self.top_p,
            "use a number in (0, 1]",
        )
        _check(
            isinstance(self.suppress_mask_token, bool),
            name,
            "suppress_mask_token",
            self.suppress_mask_token,
            "use true or false",
        )
        _check(
            self.block_origin is None or self.block_origin in BLOCK_ORIGINS,
            name,
            "block_origin",
            self.block_origin,
            "choose " + " or ".join(BLOCK_ORIGINS),
        )

    def plan_for(self, model: DiffusionLM):
        """The settings for ``model``, unset ones from its config and family."""
        from diffugrpo_plugin.models.family import unwrap

        return self.plan(model.family.name, model.family.block_size_of(unwrap(model.module).config.to_dict())[0])

    def plan(self, family: str, model_block_size: int | None):
        """The settings for a model of ``family`` whose attention runs blocks of ``model_block_size`` (None: the
        whole canvas), unset ones from the family (the preflight's check, before any model is loaded)."""
        from diffugrpo_plugin.sampling.block import BlockPlan

        if model_block_size is None or family not in BLOCK_FAMILY_DEFAULTS:
            raise SamplerOptionError(
                f"{self.sampler_name} sampler: family {family} attends over the whole canvas, not in blocks; "
                f"choose sampler auto (entropy), dream or llada for it"
            )
        _check(
            self.block_size is None or self.block_size == model_block_size,
            self.sampler_name,
            "block_size",
            self.block_size,
            f"the model attends in blocks of {model_block_size} (its config's block_size, else its family's): "
            f"leave it unset or set {model_block_size}",
        )
        block_size = model_block_size
        steps = self.steps or block_size
        _check(steps <= block_size, self.sampler_name, "steps", steps, f"use at most block_size ({block_size})")
        rule, threshold = BLOCK_FAMILY_DEFAULTS[family]
        rule = self.rule or rule
        _check(
            not (rule == "llada2" and self.steps is not None and self.steps != block_size),
            self.sampler_name,
            "steps",
            self.steps,
            "the llada2 rule transfers one token a step at least, up to block_size steps: leave steps unset, or "
            "choose rule=dynamic for a floor of block_size / steps",
        )
        return BlockPlan(
            block_size=block_size,
            steps=steps,
            rule=rule,
            threshold=None if rule == "static" else (self.threshold if self.threshold is not None else threshold),
            temperature=float(self.temperature),
            top_k=self.top_k,
            top_p=self.top_p,
            block_origin=self.block_origin or BLOCK_ORIGIN_DEFAULT,
            micro_batch_size=self.micro_batch_size,
            suppress_mask_token=self.suppress_mask_token,
        )

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
    ) -> GenerationOutput:
        from diffugrpo_plugin.sampling.block import generate_blocks

        return generate_blocks(
            self.plan_for(model),
            model,
            prompt_ids,
            prompt_mask,
            max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            seeds=seeds,
            record_trace=record_trace,
        )
