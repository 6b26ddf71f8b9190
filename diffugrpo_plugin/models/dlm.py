"""A checkpoint as a diffusion LM: loaded natively or through its own code, called through its family.

:class:`DiffusionLM` puts every family (:mod:`diffugrpo_plugin.models.families`) behind one convention:
``logits[:, i]`` scores token ``i``, left padding is invisible to real tokens (the attention
mask and positions are built in the family's form), and the mask token id is resolved with an
error that says what to set. :func:`load_pretrained` picks how to build the network: our native
Dream/LLaDA classes when the family has one (no remote code), the checkpoint's own code when
asked (``implementation="remote"``, ``trust_remote_code``), a stock transformers class otherwise.

Plain torch + transformers; no verl.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from diffugrpo_plugin.models.detection import detect_family, family_named
from diffugrpo_plugin.models.family import (
    IMPLEMENTATIONS,
    ModelConfigError,
    ModelFamily,
    position_ids_from_mask,
    projected_rows,
    unwrap,
)
from diffugrpo_plugin.models.kernels import DEFAULT_CHUNK_ROWS, fused_head_logprob
from diffugrpo_plugin.models.native import register_with_transformers
from diffugrpo_plugin.models.weights import WeightFit, checkpoint_shapes, forward_problem, meta_model, one_line
from diffugrpo_plugin.models.weights import fit as weight_fit

__all__ = [
    "DiffusionLM",
    "LoadPlan",
    "ModelConfigError",
    "align_logits",
    "load_diffusion_lm",
    "load_model_config",
    "load_pretrained",
    "plan_loading",
    "position_ids_from_mask",
    "read_model_config",
    "remote_classes",
    "is_hub_id",
    "planned_meta_model",
    "refuse_unloaded_weights",
    "resolve_mask_token",
    "supports_attention",
    "tokenizer_without_remote_code",
]


def align_logits(logits: torch.Tensor, shift: bool) -> torch.Tensor:
    """Make ``logits[:, i]`` score token ``i``.  # [B, L, V] -> [B, L, V]

    For shifted models position 0 has no predictor; it gets position 0's own output, which
    is never used (position 0 is always prompt or padding).
    """
    if not shift:
        return logits
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def resolve_mask_token(
    family: ModelFamily, config: Any = None, tokenizer: Any = None, override: int | None = None
) -> tuple[int, str]:
    """The mask token id and where it came from, in this order: the override, the model config, the
    tokenizer's ``mask_token``, a family token name in the tokenizer, the family's published id."""
    vocab_size = getattr(config, "vocab_size", None)
    # the logits' width: LLaDA pads its embedding (and head) past vocab_size to embedding_size
    width = max(vocab_size or 0, getattr(config, "embedding_size", None) or 0) or None
    stated = (
        (override, "set in config (diffusion.mask_token_id)"),
        (family.config_mask_token_id(config) if config is not None else None, "model config (mask_token_id)"),
    )
    for mask_id, source in stated:
        if mask_id is None:
            continue
        if width is not None and not 0 <= int(mask_id) < width:
            raise ModelConfigError(
                f"mask token id {mask_id} ({source}) is outside the model's {width} logits: give the model's own mask "
                f"token id (actor_rollout_ref.model.diffusion.mask_token_id in training, mask_token_id in its "
                f"config.json), or leave diffusion.mask_token_id null to read it from the model and its tokenizer"
            )
        return int(mask_id), source
    if getattr(tokenizer, "mask_token_id", None) is not None:
        return int(tokenizer.mask_token_id), f"tokenizer mask_token {tokenizer.mask_token!r}"
    vocabulary = tokenizer.get_vocab() if tokenizer is not None else {}
    for name in family.mask_token_names:
        if name in vocabulary:
            return int(vocabulary[name]), f"tokenizer token {name!r}"
    if family.default_mask_token_id is not None and (vocab_size is None or family.default_mask_token_id < vocab_size):
        return family.default_mask_token_id, f"the {family.name} family's published mask id"
    name = getattr(tokenizer, "name_or_path", None) or getattr(config, "_name_or_path", None) or "the model"
    raise ModelConfigError(
        f"no mask token id for {name}: neither the model config nor the tokenizer defines mask_token_id "
        f"(tried tokens {', '.join(family.mask_token_names)}). Masked diffusion needs one: add a mask token to "
        f"the tokenizer or set actor_rollout_ref.model.diffusion.mask_token_id=<id>."
    )


@dataclass
class DiffusionLM:
    """A masked diffusion LM behind one convention: ``logits[:, i]`` scores token ``i``.

    ``module`` may be a plain model or an FSDP-wrapped one; it is only ever called whole, so FSDP
    gathers its parameters as usual.
    """

    module: torch.nn.Module
    mask_token_id: int
    shift_logits: bool
    family: ModelFamily

    @classmethod
    def wrap(
        cls,
        module: torch.nn.Module,
        tokenizer: Any = None,
        mask_token_id: int | None = None,
        logits_shift: bool | None = None,
        family: str | None = None,
    ) -> "DiffusionLM":
        """Wrap a loaded model, detecting its family from its config unless ``family`` names one."""
        config = unwrap(module).config
        found = family_named(family) if family else detect_family(config.to_dict())
        shift = logits_shift if logits_shift is not None else found.logits_shift_of(config)
        if shift is None:
            raise ModelConfigError(
                f"cannot tell whether {type(unwrap(module)).__name__} (family {found.name}) shifts its logits: set "
                f"actor_rollout_ref.model.diffusion.logits_shift=true (the output at i-1 predicts token i, as in "
                f"Dream) or false (as in LLaDA), or diffusion_logits_shift in its config.json."
            )
        mask_id, _ = resolve_mask_token(found, config, tokenizer, mask_token_id)
        return cls(module=module, mask_token_id=mask_id, shift_logits=bool(shift), family=found)

    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Aligned logits for every position.  # [B, L] -> [B, L, V]"""
        if position_ids is None:
            position_ids = position_ids_from_mask(attention_mask)
        return align_logits(self.family.call(self.module, input_ids, attention_mask, position_ids), self.shift_logits)

    def scored_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        token_rows: torch.Tensor,
        targets: torch.Tensor,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        with_entropy: bool = False,
    ):
        """fp32 ``log p(targets)`` at the flat positions ``token_rows`` of ``input_ids.flatten()`` (and the entropy
        of those predictive distributions), through the fused head (:func:`~diffugrpo_plugin.models.kernels.fused_head_logprob`).

        Only those rows are projected, inside the model's forward (see
        :func:`~diffugrpo_plugin.models.family.projected_rows`); a shifted model reads each token's
        prediction from the position before it, so no scored token may sit at position 0.
        token_rows [R], targets [R] (the clean tokens) -> logp [R] (differentiable), entropy [R] (detached) or None.
        """
        hidden_rows = token_rows - 1 if self.shift_logits else token_rows  # [R]
        if self.shift_logits and bool((token_rows % input_ids.shape[1] == 0).any()):
            raise ValueError(
                "a scored token sits at position 0, which a shifted (Dream-style) model cannot predict; "
                "every completion needs at least one prompt token before it"
            )
        scale = self.family.logit_scale(unwrap(self.module).config)

        def head_logprobs(hidden, weight, bias):  # -> [R, 1] or [R, 2] with the entropy
            result = fused_head_logprob(hidden, weight, targets, bias, scale, chunk_rows, with_entropy)
            return torch.stack(result, dim=-1) if with_entropy else result[:, None]

        with projected_rows(self.family, self.module, hidden_rows, head_logprobs):
            carried = self.family.call(self.module, input_ids, attention_mask, position_ids)
        carried = carried.reshape(token_rows.numel(), 2 if with_entropy else 1)  # [R, 1 or 2]; R may be 0
        return carried[:, 0], (carried[:, 1].detach() if with_entropy else None)

    def head_weight(self) -> torch.Tensor:
        """The vocabulary projection's weight, tied or not.  # [V, H]"""
        return self.family.head_weight(self.module)

    def supports_prefix_cache(self) -> bool:
        """Whether the model's own forward fills a transformers ``Cache`` (native and stock classes do)."""
        return self.family.takes_cache(self.module)


def read_model_config(path: str) -> dict:
    """The ``config.json`` of a local checkpoint or hub id, as a dict (no model code is run)."""
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(path)
    return config


def _ways_out(remote_tried: bool, names: tuple[str, ...] = ()) -> str:
    """What a user can do about weights that fit nothing we would build (one sentence)."""
    ways = (
        []
        if remote_tried
        else [
            "actor_rollout_ref.model.diffusion.implementation=remote with the checkpoint's own modeling code beside its "
            "weights (and actor_rollout_ref.model.trust_remote_code=true)"
        ]
    )
    ways += [
        "actor_rollout_ref.model.diffusion.family=<name> if it is another family",
        "or convert the weights to the family's published parameter names",
    ]
    adapter = (
        "They look like an un-merged adapter: merge it into the base weights (peft's merge_and_unload) first. "
        if any("lora_" in name for name in names)
        else ""
    )
    return f"{adapter}Ways out: {'; '.join(ways)}."


@dataclass(frozen=True)
class LoadPlan:
    """How a checkpoint becomes a network: ``native`` (our class), ``remote`` (its own code) or ``stock``."""

    family: ModelFamily
    implementation: str
    model_class: type | None = None  # the native class, for "native"
    reason: str = ""  # why this implementation, in words (``diffugrpo check-model`` shows it)
    native_refused: bool = False  # our native class was considered and does not fit

    @property
    def trust_remote_code(self) -> bool:
        return self.implementation == "remote"


def plan_loading(
    config: dict,
    family: str | None = None,
    implementation: str = "auto",
    trust_remote_code: bool = False,
    path: str | None = None,
) -> LoadPlan:
    """Choose how to build the network for a ``config.json`` dict; errors say which key to set.

    ``auto`` takes our native class when it runs the config's settings and, for a local checkpoint
    ``path``, the checkpoint's weights fit it name for name and shape for shape (read from the file
    headers, see :mod:`diffugrpo_plugin.models.weights`); else the checkpoint's own code when it ships some
    and ``trust_remote_code`` allows it; else one line saying which and why. Whatever is chosen, weights
    that would be freshly initialised or dropped are an error, never a model that runs on random weights.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ModelConfigError(
            f"unknown implementation '{implementation}' (actor_rollout_ref.model.diffusion."
            f"implementation); choose one of {', '.join(IMPLEMENTATIONS)}"
        )
    found = detect_family(config, family)
    local = path if path and os.path.isdir(path) else None
    misfit, misfit_names = None, ()
    if found.native and implementation != "remote":
        misfit, misfit_names = _native_misfit(found, config, local)
        if misfit is None:
            weights = "the checkpoint's weights fit it" if local else "its weights are checked as they load"
            return LoadPlan(found, "native", found.native()[1], f"it runs these settings and {weights}")
        if implementation == "native":
            fallback = (
                "Use implementation=auto (it runs the checkpoint's own code where ours does not fit)"
                + (f". {_ways_out(True, misfit_names)}" if misfit_names else ".")
                if config.get("auto_map")
                else _ways_out(False, misfit_names)
            )
            raise ModelConfigError(f"implementation=native cannot load this checkpoint: {misfit}. {fallback}")
        why = f"our native class does not fit: {misfit}"
    elif implementation == "native":
        raise ModelConfigError(
            f"implementation=native cannot load this checkpoint: the {found.name} family has no "
            f"native implementation. Use implementation=auto."
        )
    else:
        why = (
            "implementation=remote asks for it"
            if implementation == "remote"
            else f"the {found.name} family has no native implementation"
        )
    if config.get("auto_map"):
        if not trust_remote_code:
            raise ModelConfigError(
                f"this checkpoint must run its own modeling code ({why}). Set "
                f"actor_rollout_ref.model.trust_remote_code=true (CLI: --trust-remote-code) if "
                f"you trust the code shipped with it."
            )
        plan = LoadPlan(found, "remote", reason=why, native_refused=misfit is not None)
    elif found.native or implementation == "remote":
        raise ModelConfigError(
            f"cannot load this checkpoint: {why}; and its config.json has no auto_map, so it ships "
            f"no modeling code to run instead. {_ways_out(False, misfit_names)}"
        )
    else:
        plan = LoadPlan(found, "stock", reason=why)
    if local:
        _refuse_misfit_weights(plan, config, local)
    return plan


def _native_misfit(found: ModelFamily, config: dict, path: str | None) -> tuple[str | None, tuple[str, ...]]:
    """Why our native class cannot stand for this checkpoint (None when it can), and the checkpoint's
    tensor names that do not fit it."""
    unsupported = found.native_unsupported(config)
    if unsupported:
        return f"these settings need the published code: {', '.join(unsupported)}", ()
    config_class, model_class = found.native()
    try:
        model = meta_model(model_class, config_class.from_dict(config))
    except Exception as error:  # noqa: BLE001 - a config our class refuses is a reason to look elsewhere
        return f"{model_class.__name__} cannot be built from this config.json ({one_line(error)})", ()
    problem = forward_problem(model)
    if problem:
        return f"{model_class.__name__} cannot run these settings ({problem})", ()
    shapes = checkpoint_shapes(path) if path else None
    fit = weight_fit(model, shapes) if shapes is not None else None
    if fit is not None and not fit.fits:
        return (
            f"the checkpoint's weights do not fit {model_class.__name__}: {fit.describe()}",
            fit.unexpected or fit.missing or tuple(name for name, _, _ in fit.mismatched),
        )
    return None, ()


def _refuse_misfit_weights(plan: LoadPlan, config: dict, path: str) -> None:
    """A one-line error when the checkpoint's weights do not fit the remote or stock class the plan builds."""
    shapes = checkpoint_shapes(path)
    if shapes is None:
        return
    try:
        model = planned_meta_model(path, config, load_model_config(path, plan), plan)
    except Exception:  # noqa: BLE001 - code that cannot be built on the meta device is checked as it loads
        return
    _refuse_misfit(plan, model, shapes)


def planned_meta_model(path: str, config: dict, config_object: Any, plan: LoadPlan) -> torch.nn.Module:
    """The planned network built on the meta device: names, shapes and parameter count, no memory."""
    model_class = {
        "native": lambda: plan.model_class,
        "remote": lambda: remote_classes(path, config)[1],
        "stock": lambda: None,
    }[plan.implementation]()
    return meta_model(model_class, config_object)


def _refuse_misfit(plan: LoadPlan, model: torch.nn.Module, shapes: dict[str, tuple[int, ...]] | None) -> None:
    fit = weight_fit(model, shapes) if shapes is not None else None
    if fit is not None and not fit.fits:
        raise ModelConfigError(_misfit_message(plan, type(model).__name__, fit))


def refuse_unloaded_weights(module: torch.nn.Module, path: str, plan: LoadPlan) -> None:
    """After a loader we do not control (verl's engine) built ``module`` from ``path``: a one-line error when the
    checkpoint's tensors do not fit it. For a hub id, the files the loader just fetched into the hub cache are
    read (the pre-flight could not read them before the download)."""
    directory = path if os.path.isdir(path) else _cached_snapshot(path)
    _refuse_misfit(plan, module, checkpoint_shapes(directory) if directory else None)


def _cached_snapshot(repo_id: str) -> str | None:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - not a hub id, or not in the cache: nothing to read
        return None


def _misfit_message(plan: LoadPlan, class_name: str, fit: WeightFit) -> str:
    built = {"native": "our native class", "remote": "the checkpoint's own code", "stock": "a stock transformers class"}
    also = " (our native class does not fit either)" if plan.native_refused else ""
    consequence = (
        "it would run with those weights freshly initialised"
        if fit.missing or fit.mismatched
        else "loading would drop those weights"
    )
    return (
        f"the checkpoint's weights do not fit {class_name}, {built[plan.implementation]}{also}: {fit.describe()}; "
        f"{consequence}. {_ways_out(plan.implementation == 'remote', fit.unexpected or fit.missing)}"
    )


def remote_classes(path: str, config: dict) -> tuple[type, type]:
    """The config and model classes of the checkpoint's own code (``auto_map``), imported from its files.

    Taken directly rather than through ``AutoModel``: transformers 5 prefers a class registered in
    this process (our native ones) over a checkpoint's own code even with ``trust_remote_code``.
    Registered for the auto classes as transformers does, so ``save_pretrained`` copies the code files.
    """
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    auto_map = config["auto_map"]
    auto_name = "AutoModelForCausalLM" if "AutoModelForCausalLM" in auto_map else "AutoModel"
    if "AutoConfig" not in auto_map or auto_name not in auto_map:
        raise ModelConfigError(
            f"the checkpoint's auto_map {auto_map} names no AutoConfig and AutoModel classes to run its own code with"
        )
    config_class = get_class_from_dynamic_module(auto_map["AutoConfig"], path)
    model_class = get_class_from_dynamic_module(auto_map[auto_name], path)
    config_class.register_for_auto_class()
    model_class.register_for_auto_class(auto_name)
    return config_class, model_class


def supports_attention(model_class: type, attn_implementation: str | None) -> bool:
    """Whether a model class declares support for an attention implementation transformers would set on it.

    LLaDA's published class declares none (it calls SDPA itself); asking transformers for ``sdpa``
    on it raises, so its own choice is kept.
    """
    flags = {"sdpa": "_supports_sdpa", "flash_attention_2": "_supports_flash_attn", "eager": None}
    flag = flags.get(attn_implementation or "eager", "_supports_attention_backend")
    return flag is None or bool(getattr(model_class, flag, False))


def load_model_config(path: str, plan: LoadPlan):
    """The config object the planned implementation builds from (no weights are read)."""
    from transformers import AutoConfig

    register_with_transformers()
    if plan.implementation == "native":
        return plan.model_class.config_class.from_pretrained(path)
    if plan.implementation == "remote":
        return remote_classes(path, read_model_config(path))[0].from_pretrained(path)
    return AutoConfig.from_pretrained(path)


def is_hub_id(path: str) -> bool:
    """Whether ``path`` reads as a hub id (``owner/name``) rather than a local path."""
    return path.count("/") == 1 and not path.startswith((".", "/", "~"))


def _local_or_hub(path: str) -> str:
    """``path`` expanded when it exists locally; a hub id as given; else a one-line error."""
    expanded = os.path.expanduser(path)
    if not os.path.exists(expanded) and not is_hub_id(path):
        raise ModelConfigError(
            f"model path '{path}' does not exist. Point actor_rollout_ref.model.path at a "
            f"checkpoint directory or a hub id such as apple/DiffuCoder-7B-Instruct."
        )
    return expanded if os.path.exists(expanded) else path


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No weight-loading progress bars or advisory warnings from transformers inside the block (for tools that
    print their own report, and the warm start inside a quiet job)."""
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    bars = logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def load_pretrained(
    path: str,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
    family: str | None = None,
    implementation: str = "auto",
    plan: LoadPlan | None = None,
    quantization: dict[str, Any] | None = None,
    device: str | torch.device | None = None,
) -> torch.nn.Module:
    """Load a diffusion LM checkpoint from a local path or hub id, as :func:`plan_loading` decides (or ``plan``
    says, when it was already made for this path). ``quantization``: 4-bit base weights, as
    :func:`~diffugrpo_plugin.models.quantization.quantization_settings` returns them, quantized on ``device``
    (bitsandbytes quantizes where the weights land); the layers compute in ``dtype``. With ``device`` the weights
    load straight onto it."""
    from transformers import AutoModelForCausalLM

    register_with_transformers()
    path = _local_or_hub(path)
    config = read_model_config(path)
    plan = plan or plan_loading(config, family, implementation, trust_remote_code, path)
    kwargs: dict[str, Any] = {"dtype": dtype, "output_loading_info": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if quantization is not None:
        from diffugrpo_plugin.models.quantization import loading_kwargs

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        kwargs.update(loading_kwargs(quantization, dtype, device, plan.family.head))
    elif device is not None:
        # straight onto the device: a CPU copy first would cost every trainer worker the whole checkpoint in host
        # memory (8 x 15 GB a node for a 7B rollout copy in bf16)
        kwargs["device_map"] = str(torch.device(device))
    if plan.implementation == "native":
        module, info = plan.model_class.from_pretrained(path, **kwargs)
    elif plan.implementation == "remote":
        config_class, model_class = remote_classes(path, config)
        if not supports_attention(model_class, attn_implementation):
            kwargs.pop("attn_implementation", None)
        module, info = model_class.from_pretrained(path, config=config_class.from_pretrained(path), **kwargs)
    else:
        module, info = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    refuse_partial_load(module, plan, info)
    if quantization is not None:
        from diffugrpo_plugin.models.quantization import keep_canonical_packing

        keep_canonical_packing(module)
    return module


def refuse_partial_load(module: torch.nn.Module, plan: LoadPlan, info: dict) -> None:
    """After loading, what transformers reports (for a hub id, the first and only look at the weights):
    any weight freshly initialised, dropped or of another shape is an error."""
    fit = WeightFit.from_loading_info(info)
    if not fit.fits:
        raise ModelConfigError(_misfit_message(plan, type(module).__name__, fit))


def load_diffusion_lm(
    path: str,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    family: str | None = None,
    implementation: str = "auto",
    adapter: str | None = None,
    quantization: dict[str, Any] | None = None,
) -> tuple[DiffusionLM, Any]:
    """A checkpoint ready to sample from: the wrapped model in eval mode on ``device`` and its tokenizer; with a
    LoRA ``adapter`` folder (a training checkpoint's ``actor/lora_adapter``), the adapter merged in. With
    ``quantization`` (4-bit linear layers, as QLoRA trains them) the adapter is applied instead: merging it into 4-bit
    weights would round it away.

    The tokenizer runs the checkpoint's own code only when the model does (``trust_remote_code`` is a
    permission): a native load of a checkpoint whose ``tokenization_*.py`` is missing still has a tokenizer.
    """
    from transformers import AutoTokenizer

    register_with_transformers()  # Dream's tokenizer files name a tokenizer class only our registration knows
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = _local_or_hub(path)
    plan = plan_loading(read_model_config(path), family, implementation, trust_remote_code, path)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=plan.trust_remote_code)
    module = load_pretrained(path, dtype=dtype, plan=plan, quantization=quantization, device=device)
    if adapter is not None:
        from diffugrpo_plugin.models.lora import apply_adapter

        module = apply_adapter(module, adapter, merge=quantization is None)
    return DiffusionLM.wrap(module.to(device).eval(), tokenizer, family=family), tokenizer


TOKENIZER_CODE_FILES = ("tokenizer_config.json", "config.json")  # where an auto_map can send AutoTokenizer
TOKENIZER_FILES = re.compile(
    r"(tokenizer.*|vocab.*|merges\.txt|special_tokens_map\.json|added_tokens\.json|"
    r"chat_template\..*|additional_chat_templates|.*\.model|.*\.tiktoken|config\.json|"
    r"generation_config\.json|(pre)?processor_config\.json)"
)


def tokenizer_without_remote_code(path: str) -> str:
    """A directory holding the tokenizer at ``path`` whose files name no code to run: ``path`` itself when it is
    not a local directory or when neither its ``tokenizer_config.json`` nor its ``config.json`` has an
    ``auto_map``; else a copy of its tokenizer files (:data:`TOKENIZER_FILES`) without one, built once in the
    cache, keyed by their contents.

    verl's reward workers load the tokenizer with ``trust_remote_code=True`` whatever the job says; pointed at
    this directory they load it as the rest of the job does, without running (or needing) the checkpoint's
    ``tokenization_*.py``. The cache must be on storage every node sees (``$DIFFUGRPO_HOME``) for a
    multi-node job.
    """
    import hashlib
    import json
    import shutil

    from diffugrpo_plugin.data.cache import build_once, diffugrpo_home

    source = os.path.expanduser(path)
    if not os.path.isdir(source):
        return path
    names = sorted(name for name in os.listdir(source) if TOKENIZER_FILES.fullmatch(name))

    def settings(name: str) -> dict:
        with open(os.path.join(source, name)) as handle:
            return json.load(handle)

    if not any("auto_map" in settings(name) for name in TOKENIZER_CODE_FILES if name in names):
        return path
    digest = hashlib.sha256()
    for name in names:
        top = os.path.join(source, name)
        files = (
            [top]
            if os.path.isfile(top)
            else sorted(os.path.join(root, file) for root, _, found in os.walk(top) for file in found)
        )
        for file in files:
            with open(file, "rb") as handle:
                digest.update(os.path.relpath(file, source).encode() + b"\0" + hashlib.sha256(handle.read()).digest())

    def copy(staging) -> None:
        for name in names:
            if name in TOKENIZER_CODE_FILES:
                kept = {key: value for key, value in settings(name).items() if key != "auto_map"}
                (staging / name).write_text(json.dumps(kept, indent=2) + "\n")
            elif os.path.isdir(os.path.join(source, name)):
                shutil.copytree(os.path.join(source, name), staging / name)
            else:
                shutil.copy(os.path.join(source, name), staging / name)

    return str(build_once(diffugrpo_home() / "tokenizers" / digest.hexdigest()[:16], copy))
