"""Tiny local masked diffusion LMs, built in code on demand, and the machine-wide cache they
(and the default dataset) are built into once.

Two kinds of tiny checkpoint: the plain seeded random init (:func:`tiny_model_path`) and the
**warm-started** default RL model (:func:`warm_model_path`): the random Dream-style model after a
short masked-diffusion SFT (:mod:`diffugrpo_plugin.sft`) on the synthetic train split, so its
sampled completions are mostly well formatted and sometimes pass, and GRPO groups see rewards
that differ (a random model scores 0 everywhere, which leaves nothing to learn from).

* Dream-style: stock ``transformers.Qwen2ForCausalLM`` run bidirectionally
  (``config.is_causal = False``) with shifted logits (``config.diffusion_logits_shift = True``),
  the layout of Dream and DiffuCoder.
* LLaDA-style: stock ``LlamaForCausalLM``, bidirectional, unshifted logits.

Both carry ``config.mask_token_id`` and use the tokenizer of :mod:`diffugrpo_plugin.tokenizer`;
weights are a seeded random init (a few MB in float32) and are never committed: they are
rebuilt from code. The cache lives in ``$DIFFUGRPO_HOME`` (default ``~/.cache/diffugrpo``);
:func:`build_once` lets many Ray workers ask for the same artefact at once: one builds it
under a file lock into a staging directory and publishes it with an atomic rename, the others
wait and reuse it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from filelock import FileLock

from diffugrpo_plugin.tokenizer import TOKENIZER_VERSION, build_tokenizer

MODEL_VERSION = 1
"""Bump when the architecture or init of the tiny models changes: cached copies are keyed by it."""

FAMILIES = {
    # family: (transformers config class, model class, logits shifted)
    "dream": ("Qwen2Config", "Qwen2ForCausalLM", True),
    "llada": ("LlamaConfig", "LlamaForCausalLM", False),
}


@dataclass(frozen=True)
class TinySpec:
    """Shape and seed of a tiny model. The defaults train a step on 2 CPU cores in well under a second."""

    family: str = "dream"
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown tiny model family '{self.family}'. Known families: {', '.join(FAMILIES)}.")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must divide by num_heads ({self.num_heads}) "
                             f"and num_heads by num_kv_heads ({self.num_kv_heads})")

    @property
    def cache_name(self) -> str:
        """Directory name in the cache: every field that changes the weights, plus both versions."""
        return (f"tiny-{self.family}-h{self.hidden_size}-l{self.num_layers}-a{self.num_heads}"
                f"-kv{self.num_kv_heads}-f{self.intermediate_size}-p{self.max_positions}-s{self.seed}"
                f"-tok{TOKENIZER_VERSION}-v{MODEL_VERSION}")


def diffugrpo_home() -> Path:
    """Root of our cache: ``$DIFFUGRPO_HOME`` or ``~/.cache/diffugrpo``."""
    return Path(os.environ.get("DIFFUGRPO_HOME") or "~/.cache/diffugrpo").expanduser()


def build_once(target: str | os.PathLike, build: Callable[[Path], Any]) -> Path:
    """Make sure directory ``target`` exists, calling ``build(staging_dir)`` at most once per machine.

    ``build`` fills a fresh staging directory next to ``target``; it is renamed to ``target``
    only when ``build`` returns, so readers never see a half-built directory, and a failed
    build leaves nothing behind. Concurrent callers (threads or processes) serialise on
    ``{target}.lock``; those that waited find ``target`` built and return it.
    """
    target = Path(target)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.lock"):
        if target.is_dir():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
        try:
            build(staging)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return target


def tiny_config(spec: TinySpec, tokenizer: Any):
    """The transformers config of a tiny model for ``tokenizer`` (vocabulary = the whole tokenizer)."""
    import transformers

    config_name, _, shift = FAMILIES[spec.family]
    config = getattr(transformers, config_name)(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,  # halves the parameters; the vocabulary dominates at this size
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        use_cache=False,  # a bidirectional model cannot reuse a key/value cache
    )
    config.is_causal = False
    config.diffusion_logits_shift = shift
    config.mask_token_id = tokenizer.mask_token_id
    config.tiny_spec = asdict(spec)  # provenance: how to rebuild these exact weights
    return config


def build_tiny_model(spec: TinySpec = TinySpec(), tokenizer: Any = None) -> torch.nn.Module:
    """A freshly initialised tiny model in float32. Same spec (and tokenizer), same weights.

    Initialisation draws from a forked RNG seeded with ``spec.seed``: the caller's global
    RNG state is left untouched.
    """
    import transformers

    tokenizer = tokenizer if tokenizer is not None else build_tokenizer()
    config = tiny_config(spec, tokenizer)
    model_class = getattr(transformers, FAMILIES[spec.family][1])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        try:
            model = model_class._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
        except (ValueError, ImportError):  # a torch build without SDPA support
            model = model_class._from_config(config, attn_implementation="eager", dtype=torch.float32)
    return model


def save_tiny_model(directory: str | os.PathLike, spec: TinySpec = TinySpec()) -> Path:
    """Build a tiny model and its tokenizer into ``directory`` as an HF checkpoint."""
    directory = Path(directory)
    tokenizer = build_tokenizer()
    model = build_tiny_model(spec, tokenizer)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def tiny_model_path(spec: TinySpec = TinySpec()) -> str:
    """Path of the cached checkpoint for ``spec``, built on first use (safe across processes)."""
    target = diffugrpo_home() / "models" / spec.cache_name
    return str(build_once(target, lambda staging: save_tiny_model(staging, spec)))


def default_tiny_model_path(family: str = "dream", seed: int = 0) -> str:
    """The default tiny model of a family (Dream-style unless asked), built once into the cache."""
    return tiny_model_path(TinySpec(family=family, seed=seed))


WARM_START_VERSION = 1
"""Bump when the warm-start procedure changes in a way :class:`WarmStart`'s fields do not show."""


@dataclass(frozen=True)
class WarmStart:
    """The SFT recipe of the warm-started model (see :class:`diffugrpo_plugin.sft.SFTConfig`).

    The defaults take about two minutes on 2 CPU cores and give, sampling at temperature 1 with
    the default rollout settings (entropy sampler, 32 steps, 48 tokens), about 70-90% completions
    in the training format and a few percent that pass every test.
    """

    steps: int = 1000
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 30
    completion_length: int = 48
    seed: int = 0
    data_seed: int = 0

    @property
    def cache_suffix(self) -> str:
        from diffugrpo_plugin.data import SYNTHETIC_VERSION

        return (f"sft-n{self.steps}-b{self.batch_size}-lr{self.lr:g}-w{self.warmup_steps}-c{self.completion_length}"
                f"-s{self.seed}-syn{SYNTHETIC_VERSION}d{self.data_seed}-ws{WARM_START_VERSION}")


def save_warm_model(directory: str | os.PathLike, spec: TinySpec = TinySpec(), recipe: WarmStart = WarmStart(),
                    echo: Callable[[str], None] | None = None) -> Path:
    """Fine-tune the random tiny model of ``spec`` with ``recipe`` on the synthetic train split into ``directory``."""
    from diffugrpo_plugin.data import default_data_paths
    from diffugrpo_plugin.sft import SFTConfig, train

    train_file, _ = default_data_paths(recipe.data_seed)
    config = SFTConfig(train_files=(train_file,), output_dir=str(directory), model_path=tiny_model_path(spec),
                       steps=recipe.steps, batch_size=recipe.batch_size, lr=recipe.lr,
                       warmup_steps=recipe.warmup_steps, completion_length=recipe.completion_length,
                       seed=recipe.seed, log_every=max(1, recipe.steps // 5))
    train(config, echo=echo or (lambda line: print(f"diffugrpo: warm start: {line}", file=sys.stderr)))
    return Path(directory)


def warm_model_path(spec: TinySpec = TinySpec(), recipe: WarmStart = WarmStart()) -> str:
    """Path of the cached warm-started checkpoint, fine-tuned on first use (once per machine)."""
    target = diffugrpo_home() / "models" / f"{spec.cache_name}-{recipe.cache_suffix}"
    if not target.is_dir():
        print(f"diffugrpo: building the warm-started tiny model once into {target} "
              f"({recipe.steps} SFT steps, a few minutes on CPU)", file=sys.stderr)
    return str(build_once(target, lambda staging: save_warm_model(staging, spec, recipe)))


def default_warm_model_path() -> str:
    """The default model of the RL job: the Dream-style tiny model, warm-started by SFT."""
    return warm_model_path()
