"""Configuration checks that run before Ray starts, each failing with one message naming the fix.

Covers what users most often get wrong: a model path that does not exist, a tokenizer without a
mask token, dataset files missing or lacking the columns the rewards need, batch sizes that do not
divide, unknown sampler / masker / reward names, bad reward weights.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from diffugrpo_plugin.config.defaults import DIFFUSION_DEFAULTS
from diffugrpo_plugin.plugins import PluginError, build


class ConfigError(ValueError):
    """A configuration mistake the user can fix; the message says how."""


def _check_plugins(config: DictConfig) -> None:
    """The masker, sampler and loss terms build from their config (names, option names and values, weights); a
    plugin's own bug (any other exception) propagates with its traceback."""
    from diffugrpo_plugin.core.loss_terms import configured_terms
    from diffugrpo_plugin.core.masking import masker_options
    from diffugrpo_plugin.integration.sampler_choice import sampler_choice
    from diffugrpo_plugin.sampling import build_sampler

    diffusion = config.actor_rollout_ref.model.get("diffusion", {}) or {}
    try:
        masker_name = diffusion.get("masker", DIFFUSION_DEFAULTS.masker)
        masker = build("masker", masker_name, masker_options(diffusion.get("masker_kwargs")))
        if "trace" in inspect.signature(masker.views).parameters and not diffusion.get(
            "record_trace", DIFFUSION_DEFAULTS.record_trace
        ):
            raise ConfigError(
                f"masker '{masker_name}' reads the rollout's denoising trace: set "
                f"actor_rollout_ref.model.diffusion.record_trace=true so the rollout records it"
            )
        sampler, settings, _ = sampler_choice(config)
        build_sampler(sampler, **settings)
        terms = diffusion.get("loss_terms")
        configured_terms(OmegaConf.to_container(terms, resolve=True) if terms is not None else None)
    except (PluginError, ValueError) as error:
        raise ConfigError(str(error)) from error


def _check_training_pass(config: DictConfig) -> None:
    """The coupled pass's memory settings: ``lean_mlp`` a boolean, ``chunk_rows`` a positive whole number."""
    diffusion = config.actor_rollout_ref.model.get("diffusion", {}) or {}
    prefix = "actor_rollout_ref.model.diffusion"
    lean = diffusion.get("lean_mlp", DIFFUSION_DEFAULTS.lean_mlp)
    if not isinstance(lean, bool):
        raise ConfigError(
            f"{prefix}.lean_mlp={lean!r}: set true (SwiGLU blocks keep 2 of 4 activations for the "
            f"backward; same values and gradients) or false (the model's own code)"
        )
    chunk_rows = diffusion.get("chunk_rows", DIFFUSION_DEFAULTS.chunk_rows)
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ConfigError(
            f"{prefix}.chunk_rows={chunk_rows!r}: set a positive whole number (the fused head holds at "
            f"most chunk_rows x vocabulary logits at a time; default {DIFFUSION_DEFAULTS.chunk_rows})"
        )


def _check_rewards(config: DictConfig) -> None:
    from diffugrpo_plugin.rewards.spec import RewardSpec

    node = OmegaConf.select(config, "diffugrpo.rewards")
    if node is None:
        raise ConfigError(
            "no reward configuration: set diffugrpo.rewards.reward_funcs, e.g. {code: 2.0, "
            "code_format: 0.5}, or [code, code_format] with diffugrpo.rewards.reward_weights"
        )
    try:
        RewardSpec.from_config(OmegaConf.to_container(node, resolve=True))
    except (PluginError, ValueError) as error:
        raise ConfigError(str(error)) from error


def _check_model(config: DictConfig) -> None:
    from diffugrpo_plugin.models.dlm import ModelConfigError, is_hub_id, resolve_mask_token
    from diffugrpo_plugin.models.load_plan import (
        load_model_config,
        plan_loading,
        planned_meta_model,
        read_model_config,
        remote_classes,
    )
    from diffugrpo_plugin.models.weights import one_line
    from diffugrpo_plugin.training.warm_start import built_if_default

    model = config.actor_rollout_ref.model
    path = built_if_default(str(model.path))
    expanded = os.path.expanduser(path)
    if not os.path.exists(expanded):
        if is_hub_id(path):
            return  # a hub id: checked when it is downloaded
        raise ConfigError(
            f"actor_rollout_ref.model.path '{path}' does not exist. Point it at a checkpoint directory "
            f"or a hub id such as apple/DiffuCoder-7B-Instruct."
        )
    from verl.utils import hf_tokenizer

    trust = bool(model.get("trust_remote_code", False))
    diffusion = model.get("diffusion", {}) or {}
    tokenizer_path = os.path.expanduser(str(model.get("tokenizer_path") or expanded))
    try:
        checkpoint_config = read_model_config(expanded)
        plan = plan_loading(
            checkpoint_config, diffusion.get("family"), diffusion.get("implementation") or "auto", trust, expanded
        )
    except ModelConfigError as error:
        raise ConfigError(str(error)) from error
    if not plan.trust_remote_code:
        tokenizer_path = _load_without_remote_code(config, tokenizer_path)
    # loaded as verl's reward workers load it (trust_remote_code=True always): a passing pre-flight is a job that runs
    try:
        tokenizer = hf_tokenizer(tokenizer_path, trust_remote_code=True)
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"cannot load the tokenizer at '{tokenizer_path}' ({one_line(error)}); set "
            f"actor_rollout_ref.model.tokenizer_path to a directory with the checkpoint's tokenizer "
            f"files"
        ) from error
    try:
        config_object = load_model_config(expanded, plan)
        resolve_mask_token(plan.family, config_object, tokenizer, diffusion.get("mask_token_id"))
    except ModelConfigError as error:
        raise ConfigError(str(error)) from error
    if int(model.get("lora_rank", 0) or 0) > 0:
        _check_adapters(model, planned_meta_model(expanded, checkpoint_config, config_object, plan), plan.family)
    if plan.implementation == "remote" and model.get("enable_gradient_checkpointing", False):
        model_class = remote_classes(expanded, checkpoint_config)[1]
        if not getattr(model_class, "supports_gradient_checkpointing", False):
            raise ConfigError(
                f"{model_class.__name__} (the checkpoint's own code) does not support transformers' gradient "
                f"checkpointing. Use our native implementation (actor_rollout_ref.model.diffusion.implementation=auto)"
                f" or set actor_rollout_ref.model.enable_gradient_checkpointing=false."
            )
    _check_blocks(config, plan.family, checkpoint_config)
    from diffugrpo_plugin.integration.sampler_choice import sampler_choice

    _, sampler, _ = sampler_choice(config)
    cache = next((option for option in ("kv_cache", "dual_cache") if sampler.get(option)), None)
    if cache and plan.implementation == "remote" and not plan.family.remote_prefix_cache:
        default = " (part of the fast path)" if cache == "kv_cache" else ""
        raise ConfigError(
            f"actor_rollout_ref.rollout.engine_kwargs.diffusion.{cache}=true{default} needs "
            f"a model whose forward fills a transformers Cache; the checkpoint's own code ({plan.family.name} family, "
            f"implementation=remote) does not. Use our native implementation "
            f"(actor_rollout_ref.model.diffusion.implementation=auto), or run without the cache: "
            f"...engine_kwargs.diffusion.fast_path=false, or ...engine_kwargs.diffusion.{cache}=false "
            f"...engine_kwargs.diffusion.cache_refresh=null."
        )


MODEL_ORIGIN_KEY = "actor_rollout_ref.model.diffusion.block_origin"
ROLLOUT_KEY = "actor_rollout_ref.rollout.engine_kwargs.diffusion"


def _check_block_origin(config: DictConfig) -> None:
    """One block grid: training's ``diffusion.block_origin`` a known origin, and the rollout's (which the shipped
    config sets to it) the same."""
    from diffugrpo_plugin.sampling.samplers import BLOCK_ORIGIN_DEFAULT, BLOCK_ORIGINS

    trained = OmegaConf.select(config, MODEL_ORIGIN_KEY, default=None)
    if trained is not None and trained not in BLOCK_ORIGINS:
        raise ConfigError(f"{MODEL_ORIGIN_KEY}={trained!r}: choose {' or '.join(BLOCK_ORIGINS)}")
    sampled = OmegaConf.select(config, f"{ROLLOUT_KEY}.block_origin", default=None)
    if sampled is not None and sampled != (trained or BLOCK_ORIGIN_DEFAULT):
        raise ConfigError(
            f"{ROLLOUT_KEY}.block_origin={sampled} differs from {MODEL_ORIGIN_KEY}={trained or BLOCK_ORIGIN_DEFAULT}: "
            f"the rollout would decode on another block grid than training scores; set one of them only (the "
            f"rollout's defaults to training's)"
        )


def _check_blocks(config: DictConfig, family, checkpoint_config: dict) -> None:
    """The sampler and the coupled pass fit the model's attention: the block sampler only on a block-diffusion model
    and with its block size, never a full-canvas sampler on one; a masker that masks per block and no loss terms for the ``[x_t | x_0]`` layout (what the first rollout or update would refuse)."""
    from diffugrpo_plugin.core.loss_terms import configured_terms
    from diffugrpo_plugin.core.masking import masker_options
    from diffugrpo_plugin.integration.engine import block_training_problem
    from diffugrpo_plugin.integration.sampler_choice import sampler_choice
    from diffugrpo_plugin.sampling import build_sampler
    from diffugrpo_plugin.sampling.contract import SamplerOptionError
    from diffugrpo_plugin.sampling.fast_path import takes_fast_path
    from diffugrpo_plugin.sampling.samplers import BlockDiffusionSampler

    block_size, source = family.block_size_of(checkpoint_config)
    name, settings, _ = sampler_choice(config)
    sampler = build_sampler(name, **settings)
    if isinstance(sampler, BlockDiffusionSampler):
        try:
            sampler.plan(family.name, block_size)
        except SamplerOptionError as error:
            raise ConfigError(f"{ROLLOUT_KEY}.sampler={name}: {error}") from None
    if block_size is None:
        return
    if takes_fast_path(name):
        raise ConfigError(
            f"{ROLLOUT_KEY}.sampler={name} decodes the whole canvas, which a block-diffusion model ({family.name}, "
            f"blocks of {block_size}: {source}) never saw in training (later blocks decided while earlier ones are "
            f"masked, and its blocks off the model's grid unless each prompt fills whole blocks): use sampler=auto "
            f"(the family's: block) or block"
        )
    diffusion = config.actor_rollout_ref.model.get("diffusion", {}) or {}
    masker_name = diffusion.get("masker", DIFFUSION_DEFAULTS.masker)
    masker = build("masker", masker_name, masker_options(diffusion.get("masker_kwargs")))
    terms = diffusion.get("loss_terms")
    terms = configured_terms(OmegaConf.to_container(terms, resolve=True) if terms is not None else None)
    problem = block_training_problem(family.name, masker_name, masker, list(terms))
    if problem:
        raise ConfigError(problem)


def _check_lora_keys(config: DictConfig) -> None:
    """verl's FSDP engine adapts with ``lora_rank``; ``lora.rank`` is its Megatron key, which makes verl's trainer
    take the reference from the actor without adapters while the FSDP engine builds none."""
    model = config.actor_rollout_ref.model
    rank, megatron_rank = int(model.get("lora_rank", 0) or 0), int((model.get("lora") or {}).get("rank", 0) or 0)
    if megatron_rank > 0 and rank <= 0:
        raise ConfigError(
            f"actor_rollout_ref.model.lora.rank={megatron_rank} is verl's Megatron key; the FSDP engine "
            f"adapts with actor_rollout_ref.model.lora_rank={megatron_rank} (and lora_alpha, "
            f"target_modules)"
        )
    from diffugrpo_plugin.models.lora import ADAPTER_CONFIG

    adapter = model.get("lora_adapter_path")
    local = adapter and "://" not in str(adapter)  # verl copies remote (hdfs://) adapters to local itself
    if local and not os.path.isfile(os.path.join(os.path.expanduser(str(adapter)), ADAPTER_CONFIG)):
        raise ConfigError(
            f"actor_rollout_ref.model.lora_adapter_path '{adapter}' holds no {ADAPTER_CONFIG}; "
            f"point it at a peft adapter folder (a checkpoint's actor/lora_adapter)"
        )
    if adapter and rank <= 0:
        raise ConfigError(
            "actor_rollout_ref.model.lora_adapter_path needs actor_rollout_ref.model.lora_rank > 0: "
            "without it verl's FSDP engine builds no adapters, while its trainer takes the reference "
            "from the actor with adapters disabled"
        )
    _check_4bit_base(config, rank)
    if rank <= 0:
        return
    if OmegaConf.select(config, "diffugrpo.ref_sync.enable", default=False):
        raise ConfigError(
            "diffugrpo.ref_sync mixes the policy into a separate reference model; with LoRA the reference "
            "is the base model without its adapters (verl's way: no second copy), which cannot move "
            "alone. Set diffugrpo.ref_sync.enable=false"
        )
    backend = OmegaConf.select(config, "actor_rollout_ref.rollout.checkpoint_engine.backend", default="naive")
    merge = bool((model.get("lora") or {}).get("merge", False))
    if backend != "naive" and not merge:
        raise ConfigError(
            f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend} sends the rollout the base "
            f"weights without the LoRA adapters; use backend=naive (the diffusion rollout's), or "
            f"actor_rollout_ref.model.lora.merge=true"
        )
    dropout = (model.get("lora") or {}).get("dropout", 0.0) or 0.0
    if not 0.0 <= float(dropout) < 1.0:
        raise ConfigError(f"actor_rollout_ref.model.lora.dropout={dropout}: set a probability in [0, 1)")


def _check_4bit_base(config: DictConfig, rank: int) -> None:
    """``actor_rollout_ref.model.lora.load_in_4bit`` (QLoRA): adapters on a frozen 4-bit base, sharded by FSDP2
    around the 4-bit weights, which stay on the device; bitsandbytes must quantize on the job's device."""
    from diffugrpo_plugin.models.dlm import ModelConfigError
    from diffugrpo_plugin.models.quantization import quantization_settings, require_bitsandbytes

    model = config.actor_rollout_ref.model
    lora = OmegaConf.to_container(model.get("lora") or {}, resolve=True)
    try:
        if quantization_settings(lora) is None:
            return
    except ModelConfigError as error:
        raise ConfigError(str(error)) from None
    key = "actor_rollout_ref.model.lora.load_in_4bit=true"
    actor = config.actor_rollout_ref.actor
    refusals = [
        (rank <= 0, "trains LoRA adapters on a frozen 4-bit base: set actor_rollout_ref.model.lora_rank > 0"),
        (actor.get("strategy") != "fsdp2", f"needs actor_rollout_ref.actor.strategy=fsdp2 (got {actor.strategy})"),
        (
            bool(OmegaConf.select(actor, "fsdp_config.param_offload", default=False))
            or bool(OmegaConf.select(actor, "fsdp_config.offload_policy", default=False)),
            "keeps the 4-bit base on the device, which parameter offload would move: set "
            "actor_rollout_ref.actor.fsdp_config.param_offload=false and offload_policy=false",
        ),
        (
            bool(model.get("use_liger", False)),
            "loads the model itself and applies no Liger kernels: set actor_rollout_ref.model.use_liger=false",
        ),
        (
            bool(lora.get("merge", False)),
            "cannot merge adapters into 4-bit weights without rounding them: set actor_rollout_ref.model.lora.merge="
            "false (the rollout applies the adapters)",
        ),
        (
            "hf_model" in list(OmegaConf.select(actor, "checkpoint.save_contents", default=[]) or []),
            "saves no full Hugging Face model (its base is 4-bit); drop hf_model from "
            "actor_rollout_ref.actor.checkpoint.save_contents and merge the saved lora_adapter later",
        ),
    ]
    for refused, reason in refusals:
        if refused:
            raise ConfigError(f"{key} {reason}")
    _check_4bit_sources(config)
    import torch

    on_cpu = str(OmegaConf.select(config, "trainer.device", default="cuda")) == "cpu"
    if on_cpu or torch.cuda.is_available():  # a driver without the workers' GPU leaves it to the workers' own check
        try:
            require_bitsandbytes("cpu" if on_cpu else "cuda")
        except ModelConfigError as error:
            raise ConfigError(str(error)) from None


def _check_4bit_sources(config: DictConfig) -> None:
    """Each side quantizes the checkpoint as read in its dtype: the trainer in ``model_dtype``, the rollout in
    ``rollout.dtype``, ``generate``/``eval``/SFT ``--load-in-4bit`` in float32. They hold the same 4-bit weights only
    when every dtype holds the checkpoint's values exactly: float32, or the checkpoint's own dtype. Else the rollout
    would refuse the first weight sync mid-run, or generate/eval would rebuild another base than the one trained on.
    A checkpoint not on this machine (a hub id) is checked by the rollout at the first sync."""
    from diffugrpo_plugin.training.warm_start import built_if_default

    def name(dtype) -> str:
        aliases = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
        return aliases.get(str(dtype), str(dtype)).removeprefix("torch.")

    path = os.path.join(os.path.expanduser(built_if_default(str(config.actor_rollout_ref.model.path))), "config.json")
    if not os.path.isfile(path):
        return
    stored = json.loads(Path(path).read_text())
    stored = name(stored.get("dtype") or stored.get("torch_dtype") or "float32")  # transformers' default: float32
    sides = {
        "actor_rollout_ref.actor.fsdp_config.model_dtype": name(
            OmegaConf.select(config, "actor_rollout_ref.actor.fsdp_config.model_dtype", default=None) or "fp32"
        ),
        "actor_rollout_ref.rollout.dtype": name(config.actor_rollout_ref.rollout.get("dtype") or "bfloat16"),
    }
    for key, dtype in sides.items():
        if dtype not in ("float32", stored):
            raise ConfigError(
                f"actor_rollout_ref.model.lora.load_in_4bit=true quantizes the checkpoint as read in {key}={dtype}, "
                f"which rounds its {stored} weights: the trainer, the rollout and generate/eval would hold other 4-bit "
                f"weights. Set {key} to float32{'' if stored == 'float32' else f' or {stored}'}, or save the "
                f"checkpoint in {dtype}"
            )


def _check_adapters(model: DictConfig, meta, family) -> None:
    """Build the adapters on the meta device as the engine will (peft resolves ``target_modules``): names that
    match nothing are said (peft ignores them silently), an adapter on the vocabulary projection is refused."""
    import sys

    from diffugrpo_plugin.models.dlm import ModelConfigError
    from diffugrpo_plugin.models.lora import (
        ADAPTER_CONFIG,
        adapted_copy,
        adapted_module_names,
        linear_names,
        refuse_adapted_head,
        refuse_unsupported,
        target_report,
    )
    from diffugrpo_plugin.models.weights import one_line

    targets, exclude = (
        OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        for value in (model.get("target_modules"), model.get("exclude_modules"))
    )
    rank, where = int(model.lora_rank), "actor_rollout_ref.model"
    settings = {"target_parameters": OmegaConf.select(model, "target_parameters", default=None)}
    adapter = model.get("lora_adapter_path")
    if adapter and "://" not in str(adapter):  # verl's engine then builds the adapter the folder describes
        settings = json.loads(Path(os.path.expanduser(str(adapter)), ADAPTER_CONFIG).read_text())
        targets, exclude, rank = settings.get("target_modules"), settings.get("exclude_modules"), int(settings["r"])
        where = f"the adapter in {adapter}"
    try:
        refuse_unsupported(settings, where)
        adapted = adapted_copy(meta, rank, targets, exclude)
        refuse_adapted_head(adapted, family)
    except ModelConfigError as error:
        raise ConfigError(str(error)) from error
    except ValueError as error:  # peft's own: no module matched
        fix = (
            f"{where} was made for another model"
            if adapter
            else f"set actor_rollout_ref.model.target_modules to names among its linear layers: "
            f"{', '.join(linear_names(meta))}"
        )
        raise ConfigError(f"LoRA on {type(meta).__name__}: {one_line(error)}; {fix}") from error
    matched, unmatched = target_report([name for name, _ in meta.named_modules()], targets)
    if unmatched:
        print(
            f"[diffugrpo] LoRA: target_modules {', '.join(unmatched)} name no module of {type(meta).__name__} "
            f"and adapt nothing; {', '.join(matched)} do ({len(adapted_module_names(adapted))} modules)",
            file=sys.stderr,
        )


def _load_without_remote_code(config: DictConfig, tokenizer_path: str) -> str:
    """The plan runs no remote code, so no process of the job does: ``trust_remote_code`` off for verl's model
    config, and ``tokenizer_path`` at a copy whose files name no code when the checkpoint's do (verl's reward
    workers load the tokenizer trusting remote code whatever the job says; a ``tokenization_*.py`` named there
    might not even be beside the weights). Returns the tokenizer path the job now uses."""
    from diffugrpo_plugin.models.tokenizer_files import tokenizer_without_remote_code

    clean = tokenizer_without_remote_code(tokenizer_path)
    with open_dict(config):
        config.actor_rollout_ref.model.trust_remote_code = False
        if clean != tokenizer_path:
            config.actor_rollout_ref.model.tokenizer_path = clean
    return clean


def _check_data(config: DictConfig) -> None:
    import pyarrow.parquet as pq

    prompt_key = config.data.get("prompt_key", "prompt")
    for key in ("train_files", "val_files"):
        files = config.data.get(key)
        for path in [files] if isinstance(files, str) else list(files or []):
            expanded = os.path.expanduser(str(path))
            if not os.path.exists(expanded):
                raise ConfigError(
                    f"data.{key}: '{path}' does not exist. Prepare data with "
                    f"`diffugrpo data prepare --source mbpp ...` (see docs/guides/data.md)."
                )
            try:
                columns = set(pq.read_schema(expanded).names)
            except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
                raise ConfigError(
                    f"data.{key}: '{path}' is not a readable parquet file ({str(exc).splitlines()[0]}). "
                    f"Write it again with `diffugrpo data prepare ... --output DIR`."
                ) from None
            missing = [c for c in (prompt_key, "data_source", "reward_model", "extra_info") if c not in columns]
            if missing:
                raise ConfigError(
                    f"data.{key}: '{path}' lacks column(s) {missing} (has {sorted(columns)}). "
                    f"Files from `diffugrpo data prepare` have them; set data.prompt_key if your "
                    f"prompt column has another name."
                )


def _check_batch_sizes(config: DictConfig) -> None:
    rollout, actor, trainer = config.actor_rollout_ref.rollout, config.actor_rollout_ref.actor, config.trainer
    generations = int(rollout.n)
    workers = int(trainer.n_gpus_per_node) * int(trainer.nnodes)
    train_batch, mini_batch = int(config.data.train_batch_size), int(actor.ppo_mini_batch_size)
    if generations < 2:
        raise ConfigError(
            f"actor_rollout_ref.rollout.n (num_generations) is {generations}; the leave-one-out "
            f"advantage needs at least 2 completions per prompt"
        )
    if train_batch % mini_batch:
        raise ConfigError(
            f"data.train_batch_size ({train_batch} prompts, i.e. {train_batch * generations} completions "
            f"with num_generations n={generations}) must be a multiple of "
            f"actor_rollout_ref.actor.ppo_mini_batch_size ({mini_batch} prompts)"
        )
    samples_per_update = mini_batch * generations
    if samples_per_update % workers:
        raise ConfigError(
            f"each update takes ppo_mini_batch_size x n = {samples_per_update} completions, which does "
            f"not split over {workers} workers (trainer.n_gpus_per_node x trainer.nnodes)"
        )
    micro = actor.get("ppo_micro_batch_size_per_gpu")
    if micro and (samples_per_update // workers) % int(micro):
        raise ConfigError(
            f"each worker gets {samples_per_update // workers} completions per update "
            f"(ppo_mini_batch_size {mini_batch} x n {generations} / {workers} workers), not a multiple "
            f"of actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu ({micro})"
        )


def data_sampler_class(config: DictConfig):
    """The class ``data.sampler.class_path`` / ``class_name`` name (verl's loader), or None when unset."""
    from verl.utils.import_utils import load_extern_object

    sampler = config.data.get("sampler") or {}
    path, name = sampler.get("class_path"), sampler.get("class_name")
    if not path and not name:
        return None
    if not (path and name):
        raise ConfigError(
            "data.sampler needs both class_path and class_name (the curriculum: class_path="
            "pkg://diffugrpo_plugin.training.curriculum class_name=CurriculumSampler)"
        )
    try:
        found = load_extern_object(path, name)
    except Exception as error:  # noqa: BLE001 - any import failure becomes the one-line message
        raise ConfigError(f"data.sampler: cannot load {name} from {path} ({type(error).__name__}: {error})") from None
    if not isinstance(found, type):
        raise ConfigError(f"data.sampler: {name} in {path} is a {type(found).__name__}, not a sampler class")
    return found


def _check_data_sampler(config: DictConfig) -> None:
    from diffugrpo_plugin.training.curriculum import CurriculumConfigError, CurriculumOptions, CurriculumSampler

    sampler_class = data_sampler_class(config)
    if sampler_class is None:
        return
    if int(config.data.get("dataloader_num_workers", 0) or 0):
        raise ConfigError(
            "data.sampler: a custom sampler needs data.dataloader_num_workers=0 (worker processes "
            "draw ahead, and the trainer must know which draw each prompt came from)"
        )
    if not issubclass(sampler_class, CurriculumSampler):
        return
    try:
        options = CurriculumOptions.from_config((config.data.get("sampler") or {}).get("curriculum"))
    except CurriculumConfigError as error:
        raise ConfigError(str(error)) from None
    _check_curriculum_fields(config, options)


def _check_curriculum_fields(config: DictConfig, options) -> None:
    """The curriculum's pass is a reward in use, and its difficulty column is in every training file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from diffugrpo_plugin.rewards.spec import RewardSpec

    rewards = RewardSpec.from_config(OmegaConf.to_container(config.diffugrpo.rewards, resolve=True)).names
    if options.metric not in rewards:
        raise ConfigError(
            f"data.sampler.curriculum.metric='{options.metric}' is not one of the rewards in use "
            f"{list(rewards)}; name the reward whose value in [0, 1] is the pass (code)"
        )
    if not options.difficulty_key:
        return
    head, *rest = options.difficulty_key.split(".")
    files = config.data.get("train_files")
    for path in [files] if isinstance(files, str) else list(files or []):
        schema = pq.read_schema(os.path.expanduser(str(path)))
        field_type = schema.field(head).type if head in schema.names else None
        for part in rest:
            is_struct = field_type is not None and pa.types.is_struct(field_type)
            field_type = {child.name: child.type for child in field_type}.get(part) if is_struct else None
        if field_type is None:
            raise ConfigError(
                f"data.sampler.curriculum.difficulty_key='{options.difficulty_key}' is not a field of "
                f"data.train_files '{path}' (columns {schema.names}); name a numeric column, dotted "
                f"for nested fields, or null to measure pass rates"
            )


SUPPORTED_STRATEGIES = ("fsdp", "fsdp2")


def _check_strategy(config: DictConfig) -> None:
    for role in ("actor", "ref"):
        strategy = config.actor_rollout_ref[role].get("strategy")
        if strategy not in SUPPORTED_STRATEGIES:
            raise ConfigError(
                f"actor_rollout_ref.{role}.strategy={strategy}: the diffusion_lm engine exists for "
                f"{' and '.join(SUPPORTED_STRATEGIES)} only (Megatron's engine computes autoregressive "
                f"log-probs inside its pipeline schedule and has no diffusion counterpart yet); use fsdp2"
            )


# verl settings the diffusion_lm engine does not honour; each would otherwise be ignored without a word
UNSUPPORTED_SETTINGS = (
    (
        ("actor_rollout_ref.actor.entropy_coeff",),
        lambda value: value not in (None, 0, 0.0),
        "an entropy bonus: the coupled log-prob pass computes the entropy for metrics only, with no gradient "
        "through it, so the bonus would change nothing; set 0",
    ),
    (
        (
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
            "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
            "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
            "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size",
        ),
        lambda value: value not in (None, 1),
        "Ulysses sequence parallelism: the diffusion_lm engine runs whole sequences through bidirectional "
        "attention without verl's input preparation (no all-to-all over the sequence); set 1 (shard over data "
        "parallel workers instead, trainer.n_gpus_per_node)",
    ),
    (
        ("actor_rollout_ref.model.use_remove_padding", "actor_rollout_ref.actor.use_remove_padding"),
        lambda value: bool(value),
        "packed (remove-padding) batches: the diffusion_lm engine attends bidirectionally over a padded batch "
        "and has no packed path; set false",
    ),
    (
        ("trainer.use_v1",),
        lambda value: value is False,
        "verl's legacy trainer: the diffugrpo trainer (trainer.v1.trainer_mode=diffugrpo) and the diffusion "
        "rollout run on verl's V1 trainer; set true",
    ),
)


def _check_unsupported(config: DictConfig) -> None:
    for keys, unsupported, why in UNSUPPORTED_SETTINGS:
        for key in keys:
            value = OmegaConf.select(config, key, default=None)
            if unsupported(value):
                raise ConfigError(f"{key}={value} is not supported: {why}")


def _check_process_layout(config: DictConfig) -> None:
    from diffugrpo_plugin.integration.layout import process_layout

    try:
        process_layout(config)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def check_config(config: DictConfig) -> None:
    """Raise :class:`ConfigError` for the first problem found."""
    _check_strategy(config)
    _check_unsupported(config)
    _check_process_layout(config)
    _check_lora_keys(config)
    _check_batch_sizes(config)
    _check_block_origin(config)
    _check_plugins(config)
    _check_training_pass(config)
    _check_rewards(config)
    _check_model(config)
    _check_data(config)
    _check_data_sampler(config)
