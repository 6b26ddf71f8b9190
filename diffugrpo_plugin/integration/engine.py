"""verl training engine for masked diffusion LMs: verl's FSDP/FSDP2 engine with coupled log-probs.

Registered for ``model_type="diffusion_lm"`` (``actor_rollout_ref.model.model_type``) with the
fsdp and fsdp2 backends on cuda, npu and cpu. Only the forward changes: instead of
autoregressive log-probs, :meth:`forward_step` computes the coupled estimate of each response
token's log-probability (:func:`diffugrpo_plugin.core.logprobs.coupled_token_logprobs`) and hands it
to verl in verl's own layout, so verl's ``ppo_loss``, KL, entropy and metrics work unchanged.

Masks come from a per-sample ``mask_seed`` the trainer writes into the batch
(:mod:`diffugrpo_plugin.integration.trainer`), so the old-policy, reference and update passes of
a sample use identical masks, while different samples and steps get different ones.
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass, field

import torch
from tensordict import TensorDict

from verl.trainer.ppo.core_algos import agg_loss
from verl.utils import tensordict_utils as tu
from verl.utils.device import get_device_id, get_device_name
from verl.utils.fsdp_utils import load_fsdp_model_to_gpu, offload_fsdp_model_to_cpu
from verl.utils.metric import AggregationType, Metric
from verl.workers.config import HFModelConfig
from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

from diffugrpo_plugin.config.defaults import DIFFUSION_DEFAULTS
from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
from diffugrpo_plugin.core.loss_terms import TermInputs, configured_terms
from diffugrpo_plugin.core.masking import masker_options
from diffugrpo_plugin.core.views import check_views
from diffugrpo_plugin.integration.verl_internals import (
    apply_verl_model_patches,
    building_as_language_model,
    fsdp2_offload_unpinned_on_cpu,
    fsdp2_sharding_around_quantized,
    lora_enabled,
    parameters_offloaded,
    set_frozen_field,
    verl_autocast,
    verl_step_loss,
    verl_step_output,
)
from diffugrpo_plugin.models.dlm import DiffusionLM
from diffugrpo_plugin.models.family import unwrap
from diffugrpo_plugin.models.lean_mlp import make_lean
from diffugrpo_plugin.models.load_plan import (
    plan_loading,
    read_model_config,
    refuse_partial_load,
    refuse_unloaded_weights,
    remote_classes,
    supports_attention,
)
from diffugrpo_plugin.models.lora import (
    accept_causal_lm_wrapper,
    adapter_state,
    refuse_adapted_head,
    save_adapter,
    set_dropout,
)
from diffugrpo_plugin.models.native.block_attention import block_ids
from diffugrpo_plugin.models.quantization import (
    keep_canonical_packing,
    loading_kwargs,
    quantization_settings,
    quantized_parameters,
)
from diffugrpo_plugin.plugins import build
from diffugrpo_plugin.training.warm_start import built_if_default

MODEL_TYPE = "diffusion_lm"
MASK_SEED_FIELD = "mask_seed"
TRACE_FIELD = "unmask_step"  # the rollout's denoising trace per response token (diffusion.record_trace)
ITERATION_FIELD = "update_iteration"  # which pass of the update (ppo_epochs) a row of the expanded batch is
LOSS_TERM_FIELD = "loss_term__{name}__{field}"  # a term's prepared per-sample tensors in the batch
ADAPTER_FOLDER = "lora_adapter"  # in each checkpoint's actor folder: peft's adapter format


def block_training_problem(family: str, masker_name: str, masker, loss_terms: list[str]) -> str | None:
    """Why the coupled pass cannot train a block-diffusion model (``family``) with this masker and these loss terms,
    or None (the preflight asks before the job starts, the engine at its first block forward)."""
    if "block_ids" not in inspect.signature(masker.views).parameters:
        return (
            f"masker '{masker_name}' does not mask per block (its views() takes no block_ids), which a block-diffusion "
            f"model ({family}) needs: set actor_rollout_ref.model.diffusion.masker to one that does (coupled, "
            f"pair, ebpo, spg, trace_replay)"
        )
    if loss_terms:
        return (
            f"loss terms ({', '.join(loss_terms)}) score the canvas without the block-diffusion layout, "
            f"which a {family} model needs: set actor_rollout_ref.model.diffusion.loss_terms=null"
        )
    return None


@dataclass
class DiffusionModelConfig(HFModelConfig):
    """verl's model config plus the diffusion settings (``actor_rollout_ref.model.diffusion``).

    Keys of ``diffusion``: ``family`` (``dream``, ``llada``, ``bidirectional`` or a plugin's;
    default: detected from the checkpoint's config), ``implementation`` (``auto`` / ``native`` /
    ``remote``, see :func:`diffugrpo_plugin.models.load_plan.plan_loading`), ``masker`` (name, default
    ``coupled``), ``masker_kwargs`` (e.g. ``t_range``, ``p_mask_prompt``), ``mask_token_id`` /
    ``logits_shift`` (override what the family and model config say), ``chunk_rows`` (the fused
    head's memory cap: at most ``chunk_rows x vocab`` logits at a time), ``lean_mlp`` (default true:
    the SwiGLU blocks keep two of their four activations for the backward, see
    :mod:`diffugrpo_plugin.models.lean_mlp`; values and gradients are unchanged), ``block_origin`` (a block-diffusion
    model's block grid: ``sequence``, from the sample's first token, or ``response``, a fresh block at the response;
    the rollout must decode on the same grid).
    """

    diffusion: dict = field(default_factory=dict)

    def __post_init__(self):
        # the job's default model is named by its cache directory and built by the first to load it
        set_frozen_field(self, "path", built_if_default(self.path))
        super().__post_init__()


def _as_config_class(config, config_class, model_class=None):
    """``config`` as an instance of ``config_class``, the attention implementation verl chose carried over
    where the model class supports it.

    verl's model config is read through ``AutoConfig``, where our registered classes win; the auto
    model class then follows the config's class, so this decides which implementation verl builds.
    """
    if type(config) is config_class:
        return config
    attention = config._attn_implementation
    if model_class is not None and not supports_attention(model_class, attention):
        attention = None
    return config_class.from_dict(config.to_dict(), attn_implementation=attention)


def _padded(nested: torch.Tensor, length: int, value: int = 0) -> torch.Tensor:
    """Right-pad a jagged nested tensor to ``[B, length]``."""
    return torch.nested.to_padded_tensor(nested, padding=value, output_size=(nested.size(0), length))


def _on_canvas(per_response: torch.Tensor, in_response: torch.Tensor, response_cols: torch.Tensor) -> torch.Tensor:
    """Response-level values (jagged ``[B, r]``: verl's ``response_mask``, ``old_log_probs``) at their tokens' columns,
    0 elsewhere.  # -> [B, L]"""
    padded = _padded(per_response, in_response.size(1))  # [B, L], response-relative
    placed = torch.zeros_like(padded)  # [B, L]
    placed[in_response] = padded.gather(1, response_cols.clamp(min=0))[in_response]
    return placed


def _nested(padded: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The first ``lengths[b]`` entries of each row, as a jagged nested tensor.  # [B, L] -> [B, j]"""
    return torch.nested.as_nested_tensor([row[:n] for row, n in zip(padded, lengths.tolist())], layout=torch.jagged)


@EngineRegistry.register(model_type=MODEL_TYPE, backend=["fsdp", "fsdp2"], device=["cuda", "npu", "cpu"])
class DiffusionLMEngine(FSDPEngineWithLMHead):
    """FSDP/FSDP2 engine whose log-probs are coupled masked-diffusion estimates."""

    def _diffusion_settings(self) -> dict:
        return dict(getattr(self.model_config, "diffusion", None) or {})

    @functools.cached_property
    def _loss_terms(self):
        return configured_terms(self._diffusion_settings().get("loss_terms"))

    @functools.cached_property
    def _masker(self):
        settings = self._diffusion_settings()
        return build(
            "masker", settings.get("masker", DIFFUSION_DEFAULTS.masker), masker_options(settings.get("masker_kwargs"))
        )

    @functools.cached_property
    def _masker_reads_trace(self) -> bool:
        return "trace" in inspect.signature(self._masker.views).parameters

    def _build_module(self):
        # verl builds by model_type; ours loads through transformers' auto classes like a language model,
        # with the implementation our family resolution picks (native Dream/LLaDA: no remote code).
        settings = self._diffusion_settings()
        path = self.model_config.local_path
        config = read_model_config(path)
        plan = plan_loading(
            config,
            settings.get("family"),
            settings.get("implementation") or "auto",
            self.model_config.trust_remote_code,
            path,
        )
        self._family = plan.family
        if plan.implementation == "native":
            self.model_config.hf_config = _as_config_class(self.model_config.hf_config, plan.model_class.config_class)
        elif plan.implementation == "remote":
            config_class, model_class = remote_classes(path, config)
            self.model_config.hf_config = _as_config_class(self.model_config.hf_config, config_class, model_class)
            plan.family.complete_remote_config(self.model_config.hf_config)
        quantization = quantization_settings(self.model_config.lora)
        if quantization is not None:
            return self._build_4bit_module(quantization, plan)
        with building_as_language_model(self.model_config, plan.trust_remote_code):
            module = super()._build_module()
        refuse_unloaded_weights(module, path, plan)  # a hub id's weights are first readable here
        return module

    def _param_dtype(self) -> torch.dtype:
        """The dtype FSDP computes in (verl's default when ``mixed_precision`` is unset: bf16)."""
        from verl.utils.torch_dtypes import PrecisionType

        return PrecisionType.to_dtype((self.engine_config.mixed_precision or {}).get("param_dtype", "bf16"))

    def _build_4bit_module(self, quantization: dict, plan) -> torch.nn.Module:
        """verl's ``_build_module`` with the linear layers in 4 bits (QLoRA): every rank loads and quantizes the
        checkpoint itself, on its device (bitsandbytes quantizes where weights land; verl's meta-device start and
        rank-0 broadcast carry no quantization state), computing in the FSDP param dtype; the model keeps its dtypes
        (a 4-bit model cannot be cast)."""
        from verl.utils.model import get_hf_auto_model_class
        from verl.utils.torch_dtypes import PrecisionType

        device = "cpu" if get_device_name() == "cpu" else f"{get_device_name()}:{get_device_id()}"
        dtype = PrecisionType.to_dtype(self.engine_config.model_dtype or "fp32")
        module, info = get_hf_auto_model_class(hf_config=self.model_config.hf_config).from_pretrained(
            self.model_config.local_path,
            dtype=dtype,
            config=self.model_config.hf_config,
            trust_remote_code=plan.trust_remote_code,
            output_loading_info=True,
            **loading_kwargs(quantization, self._param_dtype(), device, plan.family.head),
        )
        refuse_partial_load(module, plan, info)
        apply_verl_model_patches(self, module)
        return keep_canonical_packing(module)

    def _build_lora_module(self, module):
        # verl's FSDP LoRA (lora_rank, lora_alpha, target_modules, exclude_modules, lora_adapter_path), plus
        # lora.dropout (verl's key, which its FSDP engine does not pass to peft) and the diffusion checks
        module = super()._build_lora_module(accept_causal_lm_wrapper(module))
        dropout = float((self.model_config.lora or {}).get("dropout", 0.0) or 0.0)
        if dropout:  # else peft's: none for a new adapter, its own for one from lora_adapter_path
            set_dropout(module, dropout)
        refuse_adapted_head(module, self._family)
        return module

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None, **kwargs):
        """verl's checkpoint (resumes the run exactly), plus with LoRA the adapter alone in peft's format in
        ``<local_path>/lora_adapter``, which ``diffugrpo generate/eval --adapter`` and peft load."""
        state = self._gathered_adapter() if lora_enabled(self) else None
        super().save_checkpoint(
            local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep, **kwargs
        )
        if state is None:
            return
        if self.rank == 0:
            settings = self.module.peft_config["default"].to_dict()
            save_adapter(os.path.join(local_path, ADAPTER_FOLDER), state, settings, base_model=self.model_config.path)
        torch.distributed.barrier()

    def _gathered_adapter(self) -> dict[str, torch.Tensor]:
        """The whole adapter on every rank (gathering the shards is collective), with offloaded parameters brought
        to the device for it."""
        if parameters_offloaded(self):
            load_fsdp_model_to_gpu(self.module)
        try:
            return adapter_state(self.module)
        finally:
            if parameters_offloaded(self):
                offload_fsdp_model_to_cpu(self.module)

    def _build_fsdp_module(self, module):
        # here, not in _build_module: LoRA adapters (and Liger, QAT) are in place, and a block they changed stays stock
        if self._diffusion_settings().get("lean_mlp", DIFFUSION_DEFAULTS.lean_mlp):
            report = make_lean(module, self._family.swiglu)
            if self.rank == 0:
                print(f"[diffugrpo] lean MLP: {report.summary()}")
        with fsdp2_offload_unpinned_on_cpu(), fsdp2_sharding_around_quantized(quantized_parameters(module)):
            return super()._build_fsdp_module(module)

    def _diffusion_lm(self) -> DiffusionLM:
        settings = self._diffusion_settings()
        return DiffusionLM.wrap(
            self.module,
            tokenizer=self.model_config.tokenizer,
            mask_token_id=settings.get("mask_token_id"),
            logits_shift=settings.get("logits_shift"),
            family=settings.get("family"),
        )

    def forward_step(self, micro_batch: TensorDict, loss_function, forward_only):
        if get_device_name() != "cpu":
            # on a CPU host the batch is already where the model is, and TensorDict.to would still rebuild every
            # per-sample non-tensor entry, at every micro-batch (docs/concepts/step-cost.md measures it)
            micro_batch = micro_batch.to(get_device_id())
        if MASK_SEED_FIELD not in micro_batch.keys():
            raise KeyError(
                f"the batch has no '{MASK_SEED_FIELD}' field: diffusion log-probs need one mask seed per "
                f"sample. Use the diffugrpo trainer (trainer.v1.trainer_mode=diffugrpo, set by "
                f"algorithm=coupled_grpo), which writes it."
            )
        input_ids = micro_batch["input_ids"]  # nested [B, j]
        seq_lens = input_ids.offsets().diff()  # [B]
        prompt_lens = micro_batch["prompts"].offsets().diff()  # [B]
        max_len = int(seq_lens.max())
        ids = _padded(input_ids, max_len)  # [B, L]
        positions = _padded(micro_batch["position_ids"], max_len)  # [B, L]
        columns = torch.arange(max_len, device=ids.device)[None]  # [1, L]
        attention = columns < seq_lens[:, None]  # [B, L]
        response_cols = columns - prompt_lens[:, None]  # [B, L], index into the response
        in_response = (response_cols >= 0) & attention  # [B, L]: the generation canvas
        # canvas tokens that count (up to the first EOS)
        scored = _on_canvas(micro_batch["response_mask"], in_response, response_cols).bool()  # [B, L]
        prompt = attention & (columns < prompt_lens[:, None])

        calculate_entropy = tu.get_non_tensor_data(data=micro_batch, key="calculate_entropy", default=False)
        settings = self._diffusion_settings()
        lm = self._diffusion_lm()
        # Noise the whole canvas, padding after the EOS included, as the model generated it; score only
        # the tokens the loss counts.
        masker_options = {}  # what a masker reads beyond the canvas: the rollout's trace, each token's block
        if self._masker_reads_trace:
            steps = (
                _on_canvas(micro_batch[TRACE_FIELD], in_response, response_cols)
                if TRACE_FIELD in micro_batch.keys()
                else None
            )
            masker_options["trace"] = None if steps is None else torch.where(in_response, steps, -1)
        blocks = self._block_ids(lm, positions, prompt_lens)  # [B, L] or None
        if blocks is not None:
            masker_options["block_ids"] = blocks
        views = check_views(
            self._masker.views(
                ids, in_response, lm.mask_token_id, micro_batch[MASK_SEED_FIELD].cpu(), prompt, **masker_options
            ),
            ids.shape,
            settings.get("masker", DIFFUSION_DEFAULTS.masker),
        )
        views.coef = views.coef * scored.to(views.coef.device)

        with verl_autocast(self):
            out = coupled_token_logprobs(
                lm,
                views,
                ids,
                attention.long(),
                positions,
                with_entropy=calculate_entropy,
                chunk_rows=int(settings.get("chunk_rows", DIFFUSION_DEFAULTS.chunk_rows)),
                block_ids=blocks,
            )
            if callable(getattr(self._masker, "combine", None)):  # an estimate other than the weighted sum
                out.logp = self._masker.combine(
                    out.per_view, views, scored, self._positive_advantage(micro_batch, in_response, response_cols)
                )
            # verl reads the log-prob of token p at index p - 1 (its autoregressive layout)
            model_output = {"log_probs": _nested(torch.roll(out.logp, shifts=-1, dims=1), seq_lens)}
            if calculate_entropy:
                model_output["entropy"] = _nested(torch.roll(out.entropy, shifts=-1, dims=1), seq_lens)

            loss, metrics = verl_step_loss(self, loss_function, model_output, micro_batch, forward_only)
            if loss_function is not None and not forward_only and self._loss_terms:
                inputs = TermInputs(
                    lm=lm,
                    input_ids=ids,
                    attention=attention,
                    positions=positions,
                    prompt=prompt,
                    canvas=in_response,
                    scored=scored,
                    logp=out.logp,
                    reference_logp=self._reference_logp(micro_batch, in_response, response_cols),
                    iteration=(
                        micro_batch[ITERATION_FIELD]
                        if ITERATION_FIELD in micro_batch.keys()
                        else torch.zeros(len(ids), dtype=torch.long)
                    ),
                    chunk_rows=int(settings.get("chunk_rows", DIFFUSION_DEFAULTS.chunk_rows)),
                )
                loss = loss + self._added_terms(inputs, micro_batch, metrics)
        return verl_step_output(loss, model_output, metrics)

    def _block_ids(self, lm: DiffusionLM, positions: torch.Tensor, prompt_lens: torch.Tensor) -> torch.Tensor | None:
        """Each token's block for a block-diffusion family (``[x_t | x_0]`` training layout), None for one that
        attends over the whole canvas.  # [B, L]"""
        block_size, _ = lm.family.block_size_of(unwrap(self.module).config.to_dict())
        if block_size is None:
            return None
        problem = block_training_problem(
            lm.family.name,
            self._diffusion_settings().get("masker", DIFFUSION_DEFAULTS.masker),
            self._masker,
            list(self._loss_terms),
        )
        if problem:
            raise ValueError(problem)
        origin = self._diffusion_settings().get("block_origin") or DIFFUSION_DEFAULTS.block_origin
        return block_ids(positions, prompt_lens.to(positions.device), block_size, origin)

    @staticmethod
    def _positive_advantage(micro_batch: TensorDict, in_response: torch.Tensor, response_cols: torch.Tensor):
        """Whether each sample's advantage is positive, in the update (None in the passes before the advantages).
        # [B] bool"""
        if "advantages" not in micro_batch.keys():
            return None
        return _on_canvas(micro_batch["advantages"], in_response, response_cols).sum(1) > 0

    @staticmethod
    def _reference_logp(micro_batch: TensorDict, in_response: torch.Tensor, response_cols: torch.Tensor):
        """The reference model's per-token log-probs for this sample's masks (the old policy's without a reference
        model), token-aligned.  # [B, L]"""
        name = next((key for key in ("ref_log_prob", "old_log_probs") if key in micro_batch.keys()), None)
        if name is None:
            raise KeyError(
                "loss terms need the batch's 'ref_log_prob' or 'old_log_probs' (the trainer's update "
                "batch has them); this batch has neither"
            )
        return _on_canvas(micro_batch[name], in_response, response_cols)

    def _added_terms(self, inputs: TermInputs, micro_batch: TensorDict, metrics: dict) -> torch.Tensor:
        """Each loss term's per-sample loss, aggregated as verl aggregates a per-sequence loss over the global
        mini-batch, times its weight; logged as ``loss_terms/<name>`` and ``loss_terms/<name>/applied``."""
        dp_size = tu.get_non_tensor_data(data=micro_batch, key="dp_size", default=1)
        global_batch_size = tu.get_non_tensor_data(data=micro_batch, key="global_batch_size", default=None)
        batch_num_tokens = tu.get_non_tensor_data(data=micro_batch, key="batch_num_tokens", default=None)
        summed = dp_size > 1 or global_batch_size is not None or batch_num_tokens is not None  # as ppo_loss decides
        total = inputs.logp.new_zeros(())
        for name, (weight, term) in self._loss_terms.items():
            prefix = LOSS_TERM_FIELD.format(name=name, field="")
            inputs.fields = {
                key[len(prefix) :]: micro_batch[key]
                for key in micro_batch.keys()
                if isinstance(key, str) and key.startswith(prefix)
            }
            per_sample = term.loss(inputs)
            if not (isinstance(per_sample, torch.Tensor) and per_sample.shape == (len(inputs.input_ids),)):
                raise ValueError(
                    f"loss term '{name}' returned {getattr(per_sample, 'shape', type(per_sample))}; "
                    f"loss(inputs) must return one loss per sample, [B] = [{len(inputs.input_ids)}] "
                    f"(diffugrpo_plugin/hookspecs.py)"
                )
            per_sample = per_sample.float()[:, None]  # [B, 1]
            value = agg_loss(
                loss_mat=per_sample,
                loss_mask=torch.ones_like(per_sample),
                loss_agg_mode="seq-mean-token-sum",
                dp_size=dp_size,
                global_batch_size=global_batch_size,
            )
            metrics[f"loss_terms/{name}"] = Metric(
                value=value.detach(), aggregation=AggregationType.SUM if summed else AggregationType.MEAN
            )
            metrics[f"loss_terms/{name}/applied"] = Metric(
                value=(per_sample != 0).float().mean(), aggregation=AggregationType.MEAN
            )
            total = total + weight * value
        return total
