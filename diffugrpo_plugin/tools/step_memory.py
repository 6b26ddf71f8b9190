"""Memory model of one training step, per GPU: pure arithmetic (no torch, no verl), for "What one step costs"
(``docs/concepts/step-cost.md``) and ``diffugrpo check-model``. The FLOP model is :mod:`.step_cost`.

Bytes; see :func:`memory_estimate`, each term documented where it is computed. Terms fall in three phases:
``held`` for the whole step (sharded training states, the reference shards, the rollout's policy copy), ``update``
(the peak of a training micro-batch) and ``rollout`` (the peak of a sampler step). Training and sampling never run at
the same time, so the total is ``held + max(update, rollout)``. Within a phase the terms are summed, a mild upper
bound: the fused head's vocabulary slice is freed before the layers' backward recomputation starts, and the sampler's
model logits before its fp32 window buffers peak. What is not counted is listed in :data:`NOT_COUNTED`. Two terms are
checked against the code they model (tests/test_check_model.py): a layer's saved activations against autograd's saved
tensors, and the sampler's window buffers against the peak memory of a real sampler step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diffugrpo_plugin.config.defaults import DIFFUSION_DEFAULTS
from diffugrpo_plugin.sampling.memory import (
    DEFAULT_BUDGET_GIB,
    WINDOW_COPIES,
    logits_bytes_per_row,
    rows_within,
    vocabulary_bytes_per_row,
    window_bytes_per_row,
)
from diffugrpo_plugin.tools.step_cost import dtype_bytes

GIB = 2**30


NOT_COUNTED = (
    "allocator fragmentation and the caching allocator's reserve (often 5-20% on top)",
    "NCCL communication buffers",
    "the CUDA context and kernels (about 0.5-1 GiB per process)",
    "the old-policy and reference log-prob passes (no gradient: they need less than the update)",
    "the fp32 cast of one FSDP unit's gradients for its reduce-scatter (reduce_dtype fp32), and "
    "optimizer-step temporaries",
    "attention score matrices: with SDPA's flash / memory-efficient kernels there is no tokens^2 term; eager "
    "attention adds heads x tokens^2 per sequence and layer",
    "CPU offload (param_offload / optimizer_offload move the sharded states off the GPU)",
)


@dataclass(frozen=True)
class ModelShape:
    """What the memory model needs to know about a network.

    Attributes:
        parameters: every parameter, a tied head counted once.
        vocab: the logit width (rows of the vocabulary head).
        hidden: hidden size.
        layers: decoder layers.
        intermediate: the MLP's inner width (gate/up projections).
        kv_dim: key/value width (``num_key_value_heads x head_dim``).
        embedding_parameters: the token embedding's parameters.
        head_parameters: an untied head's parameters; 0 when the head is the embedding.
    """

    parameters: int
    vocab: int
    hidden: int
    layers: int
    intermediate: int
    kv_dim: int
    embedding_parameters: int
    head_parameters: int = 0

    @property
    def root_parameters(self) -> int:
        """Parameters outside the decoder layers (embedding, head; the final norm's few are ignored):
        the root FSDP unit under verl's per-layer wrap policy."""
        return self.embedding_parameters + self.head_parameters

    @property
    def layer_parameters(self) -> float:
        """Parameters of one decoder layer (an FSDP unit), assuming equal layers."""
        return max(self.parameters - self.root_parameters, 0) / self.layers


# masker -> (views through the network, vocabulary-head rows per completion token)
MASKER_SHAPES = {
    "coupled": (3, 2),  # fully masked view scores every token, the complementary pair each token once more
    "pair": (2, 1),  # the complementary pair only: each token scored once
    "d1": (1, 1),  # one fully masked view
}


@dataclass(frozen=True)
class StepSetup:
    """One training step's shape per GPU.

    Attributes:
        batch: completions per training micro-batch per GPU (``ppo_micro_batch_size_per_gpu``).
        prompt_length, completion_length: tokens (``data.max_prompt_length`` / ``max_response_length``).
        gpus: FSDP shards (data-parallel workers).
        gradient_checkpointing: ``actor_rollout_ref.model.enable_gradient_checkpointing``.
        param_dtype: FSDP mixed-precision ``param_dtype``, also the compute dtype under autocast.
        reference_dtype: the reference model's sharded storage dtype (verl 0.9.1's
            ``ref.fsdp_config.model_dtype`` default is fp32); None when there is no reference (no KL).
        reference_offloaded: the reference's shards live in (pinned) host memory and reach the GPU one FSDP unit
            at a time: verl 0.9.1 builds every forward-only module so (FSDP2 ``CPUOffloadPolicy(pin_memory=True)``,
            FSDP1 ``CPUOffload(offload_params=True)``, workers/engine/fsdp/transformer_impl.py); False counts them on
            the GPU (benchmarks/gpu.py's direct step, which keeps them there).
        rollout_dtype: ``actor_rollout_ref.rollout.dtype``, the rollout copy's dtype.
        rollout_micro_batch: completions the sampler denoises together (``engine_kwargs.diffusion.micro_batch_size``);
            None: as many as ``sampler_budget_gib`` allows (:func:`sampler_rows`), at most ``rollout_rows``.
        sampler_budget_gib: ``engine_kwargs.diffusion.memory_budget_gib``, the cap on the sampler's vocabulary-sized
            buffers when no micro-batch is set (diffugrpo_plugin/sampling/memory.py).
        rollout_rows: completions one worker's sampler is given per step (``train_batch_size x rollout.n / GPUs``);
            None: no cap but the budget.
        views: masker views (3 for the coupled masker).
        scored_rows_per_token: vocabulary-head rows per completion token (2 for coupled: the fully masked
            view scores every token, the complementary pair scores each token once more).
        chunk_rows: the fused head's memory cap, at most ``chunk_rows x vocab`` logits at a time
            (``diffusion.chunk_rows``).
        slice_columns: the fused head's widest vocabulary slice on a GPU (kernels.SLICE_COLUMNS_GPU).
        logits_shift: the model shifts its logits (Dream): aligning them copies the sampler's logits once more.
        sampler_window_copies: fp32 window-sized ``[micro_batch, completion, vocab]`` buffers a sampler step
            holds at its peak (sampling/memory.py's WINDOW_COPIES; see the term's assumption).
        sampler_kv_cache: the sampler keeps the prompt's keys/values (the training default's prefix cache).
        lean_mlp: the training engine's SwiGLU blocks save 2 of their 4 activations (``diffusion.lean_mlp``,
            on by default, for the families and implementations whose blocks it recognises).
        lora_parameters: adapter parameters with LoRA (``actor_rollout_ref.model.lora_rank`` > 0; see
            ``diffugrpo check-model --lora-rank``); 0 trains every weight.
        lora_dropout_inputs: with adapter dropout, the elements per token and decoder layer it keeps for the
            backward: the sum of the adapted modules' input widths in one layer (0 without dropout, where the
            adapters read the input the base layer already keeps).
        model_dtype: the sharded policy weights' storage dtype (verl's ``actor.fsdp_config.model_dtype``,
            fp32 by default). Full fine-tuning keeps gradients and AdamW moments in it; with LoRA the base
            weights are frozen in it and the adapters train in it too (verl casts them to the base's dtype).
        four_bit_parameters: with a 4-bit base (QLoRA, ``lora.load_in_4bit``): the weights stored in 4 bits, every
            linear layer's but the vocabulary head's; whole on every GPU in the trainer and in the rollout copy.
        block_layout: a block-diffusion model (SDAR, LLaDA2.x): the coupled pass runs each view as ``[x_t | x_0]``,
            ``2 x tokens`` long, under a boolean ``[2L, 2L]`` mask per sequence (SDPA's; integration/engine.py).
    """

    batch: int
    prompt_length: int
    completion_length: int
    gpus: int = 1
    gradient_checkpointing: bool = True
    param_dtype: str = "bf16"
    reference_dtype: str | None = "fp32"
    reference_offloaded: bool = True
    rollout_dtype: str = "bf16"
    rollout_micro_batch: int | None = None
    sampler_budget_gib: float = DEFAULT_BUDGET_GIB
    rollout_rows: int | None = None
    views: int = 3
    scored_rows_per_token: int = 2
    chunk_rows: int = DIFFUSION_DEFAULTS.chunk_rows
    slice_columns: int = 16384  # kernels.SLICE_COLUMNS_GPU (a test ties the two)
    logits_shift: bool = True
    sampler_window_copies: int = WINDOW_COPIES
    sampler_kv_cache: bool = True  # engine_kwargs.diffusion.kv_cache, on in the training default
    lean_mlp: bool = DIFFUSION_DEFAULTS.lean_mlp
    lora_parameters: int = 0
    lora_dropout_inputs: int = 0
    model_dtype: str = "fp32"
    four_bit_parameters: int = 0
    block_layout: bool = False

    @property
    def tokens(self) -> int:
        return self.prompt_length + self.completion_length

    @property
    def trained_tokens(self) -> int:
        """Tokens a view runs through the coupled pass: ``2L`` in the block layout ``[x_t | x_0]``, else ``L``."""
        return 2 * self.tokens if self.block_layout else self.tokens

    @property
    def sequences(self) -> int:
        """Sequences one training forward runs: every view of every completion."""
        return self.views * self.batch

    def sampler_rows(self, model: "ModelShape") -> int:
        """Completions the sampler denoises together: the set micro-batch, or what the budget allows (as the
        sampler itself derives it, sampling/denoising.py ``micro_batch_for_budget``)."""
        if self.rollout_micro_batch:
            return self.rollout_micro_batch
        row_bytes = vocabulary_bytes_per_row(
            model.vocab, self.prompt_length, self.completion_length, dtype_bytes(self.rollout_dtype), self.logits_shift
        )
        return rows_within(self.sampler_budget_gib * GIB, row_bytes, self.rollout_rows or 2**31)


@dataclass(frozen=True)
class MemoryTerm:
    """One line of the estimate: ``bytes`` for ``name`` during ``phase`` (held / update / rollout)."""

    name: str
    phase: str
    bytes: float
    formula: str
    assumption: str

    @property
    def gib(self) -> float:
        return self.bytes / GIB


PHASES = ("held", "update", "rollout", "host")
"""``host`` terms live in the worker's host memory, not on its GPU: not in the per-GPU total."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU memory of one training step, term by term."""

    terms: tuple[MemoryTerm, ...]
    sampler_rows: int = 0  # completions the sampler denoises together
    gpus: int = 1  # the trainer workers the states are sharded over
    not_counted: tuple[str, ...] = field(default=NOT_COUNTED)

    def phase_bytes(self, phase: str) -> float:
        return sum(term.bytes for term in self.terms if term.phase == phase)

    @property
    def peak_phase(self) -> str:
        return "update" if self.phase_bytes("update") >= self.phase_bytes("rollout") else "rollout"

    @property
    def total_bytes(self) -> float:
        """``held + max(update, rollout)``: training and sampling never run at once."""
        return self.phase_bytes("held") + max(self.phase_bytes("update"), self.phase_bytes("rollout"))

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB

    def to_dict(self) -> dict:
        return {
            "terms": [
                {
                    "name": t.name,
                    "phase": t.phase,
                    "bytes": t.bytes,
                    "gib": t.gib,
                    "formula": t.formula,
                    "assumption": t.assumption,
                }
                for t in self.terms
            ],
            "phase_gib": {phase: self.phase_bytes(phase) / GIB for phase in PHASES},
            "sampler_rows": self.sampler_rows,
            "peak_phase": self.peak_phase,
            "total_bytes": self.total_bytes,
            "total_gib": self.total_gib,
            "not_counted": list(self.not_counted),
        }


def _n(value: float) -> str:
    """A number for a formula: integers as they are, large ones in short scientific notation."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


def policy_state_bytes(parameters: float, gpus: int, model_dtype: str = "fp32") -> float:
    """Sharded training states held for the whole step: master parameters and AdamW's two moments,
    3 x ``model_dtype`` bytes per parameter (12 in fp32), divided over the FSDP shards.

    verl builds the actor with ``model_dtype: fp32`` and keeps gradients and optimizer states
    in the sharded parameters' dtype; ``param_dtype`` only sets the gathered compute copy.
    The gradients are not held: see :func:`sharded_grad_bytes`.
    """
    return 3.0 * dtype_bytes(model_dtype) * parameters / gpus


def sharded_grad_bytes(parameters: float, gpus: int, model_dtype: str = "fp32") -> float:
    """The sharded gradients, ``model_dtype`` bytes per parameter over the shards: they exist during the update
    only (verl's train mode calls ``zero_grad()`` on exit, which frees them; measured on an H100,
    benchmarks/gpu.py: memory held between steps is parameters + moments + reference + rollout copy)."""
    return dtype_bytes(model_dtype) * parameters / gpus


# bytes per weight of a 4-bit base with d1's settings: the NF4 code (half a byte) and its block's scale, itself
# quantized (double quantization): one byte per block of 64 weights, plus a float32 scale per 256 such blocks
FOUR_BIT_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)


def frozen_base_bytes(parameters: float, gpus: int, model_dtype: str = "fp32") -> float:
    """With LoRA: the base weights, frozen (no gradients, no optimizer state), sharded in ``model_dtype``."""
    return dtype_bytes(model_dtype) * parameters / gpus


def reference_bytes(parameters: float, gpus: int, dtype: str) -> float:
    """The reference model: forward only (no gradients, no optimizer), sharded, in its storage dtype."""
    return parameters * dtype_bytes(dtype) / gpus


def rollout_copy_bytes(parameters: float, dtype: str) -> float:
    """The rollout's UNSHARDED policy copy, one per trainer worker, in the rollout dtype
    (integration/rollout/; our config sets ``free_cache_engine: false``, so it stays on the GPU)."""
    return parameters * dtype_bytes(dtype)


def fsdp_gathered_bytes(model: ModelShape, param_dtype: str, four_bit: float = 0) -> float:
    """Unsharded compute copies FSDP holds during a training pass, in ``param_dtype``.

    verl wraps each decoder layer as an FSDP unit; the current and the prefetched next one are
    gathered at once. The vocabulary-sized parameters (embedding, head) are counted as gathered
    for the whole pass, as the root unit is (FSDP2 does not reshard the root after forward). That is
    exact for a tied head and for LLaDA's ``ff_out`` (both stay in the root unit); for an untied
    ``embed_tokens`` / ``lm_head`` pair (Dream, Qwen2), which verl's FSDP2 wraps as units of their
    own, the embedding is gathered only around its own forward and backward, so this counts one
    embedding copy too many (here and in the unsharded gradients): an upper bound.
    ``four_bit`` weights (a 4-bit base) are not sharded, so not gathered.
    """
    return (model.root_parameters + 2 * (model.layer_parameters - four_bit / model.layers)) * dtype_bytes(param_dtype)


def fsdp_unsharded_grad_bytes(model: ModelShape, param_dtype: str) -> float:
    """Unsharded gradients before their reduce-scatter, in ``param_dtype``: the root unit's from the
    head's backward until the end of the backward, plus the layer being reduced."""
    return (model.root_parameters + model.layer_parameters) * dtype_bytes(param_dtype)


def norm_saved_bytes(model: ModelShape, compute_bytes: int) -> int:
    """Bytes per token an RMSNorm saves for its backward (transformers' Llama/Qwen2 RMSNorm, which our native
    classes use): its input upcast to fp32 (4H), the normalised and the weighted output in the compute dtype
    (2 x cH; in fp32 the upcast is the input itself, so 3 x 4H)."""
    return 4 * model.hidden + 2 * compute_bytes * model.hidden


def layer_saved_bytes(model: ModelShape, compute_bytes: int, lean_mlp: bool = False) -> int:
    """Bytes per token one Llama/Qwen2-style decoder layer saves for its backward.

    Two RMSNorms (:func:`norm_saved_bytes`); attention: q after RoPE and the attention output (2H),
    k and v (2 kv_dim), SDPA's flash / memory-efficient kernels keeping only a per-head log-sum-exp
    (no ``tokens^2`` term); MLP: gate, up, ``act(gate)`` and their product that feeds the down
    projection (4I), or with ``lean_mlp`` (lean_mlp.py, the training engine's default) gate and up
    only (2I). Checked against ``torch.autograd.graph.saved_tensors_hooks`` on a Qwen2 (Dream)
    layer and on our native LLaDA layer, stock and lean (tests/test_check_model.py): within 3%
    (RoPE's cos/sin).
    """
    mlp = 2 if lean_mlp else 4
    return 2 * norm_saved_bytes(model, compute_bytes) + compute_bytes * (
        2 * model.hidden + 2 * model.kv_dim + mlp * model.intermediate
    )


def backward_extra_bytes(model: ModelShape, compute_bytes: int, lean_mlp: bool = False) -> int:
    """Bytes per token a layer's backward adds: the gradients of its output and input hidden states (2H)
    and of the MLP's inner activations at their widest (2I; a lean block's backward holds one more, 3I: it
    recomputes the activation and the product before they become the gradients), in the compute dtype."""
    return compute_bytes * (2 * model.hidden + (3 if lean_mlp else 2) * model.intermediate)


def memory_estimate(model: ModelShape, setup: StepSetup) -> MemoryEstimate:
    """Per-GPU memory of one training step, term by term (see each term's ``assumption``)."""
    params, gpus = model.parameters, setup.gpus
    param_bytes, param_dtype = dtype_bytes(setup.param_dtype), setup.param_dtype
    rollout_bytes = dtype_bytes(setup.rollout_dtype)
    sequences, tokens, completion, vocab, hidden = (
        setup.sequences,
        setup.trained_tokens,
        setup.completion_length,
        model.vocab,
        model.hidden,
    )
    adapters, model_dtype = setup.lora_parameters, setup.model_dtype
    model_bytes = dtype_bytes(model_dtype)
    four_bit = setup.four_bit_parameters
    full = params - four_bit  # the weights kept in a floating-point dtype
    if adapters:
        terms: list[MemoryTerm] = [
            MemoryTerm(
                f"policy: frozen base weights ({model_dtype}, sharded)" + (", but the 4-bit ones" if four_bit else ""),
                "held",
                frozen_base_bytes(full, gpus, model_dtype),
                f"{model_bytes} B x {_n(full)} / {gpus}",
                "LoRA: the base weights take no gradient and no optimizer state (verl's actor model_dtype)",
            ),
            MemoryTerm(
                f"LoRA adapters: params + AdamW moments ({model_dtype}, sharded)",
                "held",
                policy_state_bytes(adapters, gpus, model_dtype),
                f"{3 * model_bytes} B x {_n(adapters)} / {gpus}",
                "the adapters train like full weights (param, two AdamW moments), in the base's dtype: "
                "verl casts them to it for FSDP",
            ),
        ]
        gradients = MemoryTerm(
            f"LoRA adapters: sharded grads ({model_dtype})",
            "update",
            sharded_grad_bytes(adapters, gpus, model_dtype),
            f"{model_bytes} B x {_n(adapters)} / {gpus}",
            "freed when the update ends (verl's zero_grad on exit)",
        )
    else:
        terms = [
            MemoryTerm(
                f"policy: {model_dtype} params + AdamW moments (sharded)",
                "held",
                policy_state_bytes(params, gpus, model_dtype),
                f"{3 * model_bytes} B x {_n(params)} / {gpus}",
                f"master params + AdamW exp_avg + exp_avg_sq, {model_bytes} bytes each per parameter, sharded "
                f"over the FSDP workers (verl's actor model_dtype, fp32 by default)",
            ),
        ]
        gradients = MemoryTerm(
            f"policy: sharded grads ({model_dtype})",
            "update",
            sharded_grad_bytes(params, gpus, model_dtype),
            f"{model_bytes} B x {_n(params)} / {gpus}",
            "every gradient counted for the whole update (an upper bound: the root's are written "
            "last); freed when the update ends (verl's zero_grad on exit), not held in the rollout",
        )
    if four_bit:
        terms.append(
            MemoryTerm(
                "policy: frozen 4-bit weights (whole on every GPU)",
                "held",
                four_bit * FOUR_BIT_BYTES,
                f"{FOUR_BIT_BYTES:.4f} B x {_n(four_bit)}",
                "NF4 with double quantization (d1's); FSDP2 leaves them unsharded",
            )
        )
    if setup.reference_dtype and adapters:
        terms.append(
            MemoryTerm(
                "reference model: the base without adapters",
                "held",
                0.0,
                "0",
                "with LoRA verl computes the reference with the actor's adapters disabled: no copy",
            )
        )
    elif setup.reference_dtype:
        terms.append(
            MemoryTerm(
                f"reference model ({setup.reference_dtype}, sharded)",
                "host" if setup.reference_offloaded else "held",
                reference_bytes(params, gpus, setup.reference_dtype),
                f"{dtype_bytes(setup.reference_dtype)} B x {_n(params)} / {gpus}",
                "forward only: no grads, no optimizer; verl 0.9.1 stores it in ref.fsdp_config."
                "model_dtype (default fp32), sharded like the actor"
                + (
                    ", in pinned host memory (verl offloads every forward-only module; its units visit the GPU "
                    "one at a time during the reference pass)"
                    if setup.reference_offloaded
                    else ", on the GPU"
                ),
            )
        )
    terms.append(
        MemoryTerm(
            f"rollout policy copy ({setup.rollout_dtype}, unsharded)",
            "held",
            rollout_copy_bytes(full + adapters, setup.rollout_dtype) + four_bit * FOUR_BIT_BYTES,
            f"{rollout_bytes} B x {_n(full + adapters)}"
            + (f" + {FOUR_BIT_BYTES:.4f} B x {_n(four_bit)}" if four_bit else ""),
            "one full copy per trainer worker (integration/rollout/), kept on the GPU "
            "(free_cache_engine: false)"
            + ("; with LoRA the base plus the adapters it samples through" if adapters else "")
            + ("; its linear layers in 4 bits, as the trainer's" if four_bit else ""),
        )
    )

    terms.append(gradients)
    layer_sharded = model.layer_parameters - four_bit / model.layers  # what FSDP gathers of one layer
    terms.append(
        MemoryTerm(
            f"FSDP gathered params ({param_dtype})",
            "update",
            fsdp_gathered_bytes(model, param_dtype, four_bit),
            f"{param_bytes} B x ({_n(model.root_parameters)} root + 2 x {_n(layer_sharded)} layer)",
            "root unit (embedding, head) gathered for the whole pass, plus the current and the "
            "prefetched decoder layer" + ("; not the 4-bit weights, which are not sharded" if four_bit else ""),
        )
    )
    if four_bit:
        terms.append(
            MemoryTerm(
                f"4-bit weight dequantized for its matmul ({model_dtype}, then {param_dtype})",
                "update",
                model.hidden * model.intermediate * (model_bytes + param_bytes),
                f"({model_bytes} + {param_bytes}) B x {model.hidden} x {model.intermediate}",
                "bitsandbytes dequantizes one weight at a time, the largest an MLP projection, into the dtype it "
                "was loaded in (model_dtype), then casts it to the compute dtype",
            )
        )
    if adapters:
        terms.append(
            MemoryTerm(
                f"FSDP unsharded adapter grads ({param_dtype})",
                "update",
                adapters * param_bytes,
                f"{param_bytes} B x {_n(adapters)}",
                "at most every adapter's gradient before its reduce-scatter; the frozen base has none",
            )
        )
    else:
        terms.append(
            MemoryTerm(
                f"FSDP unsharded grads ({param_dtype})",
                "update",
                fsdp_unsharded_grad_bytes(model, param_dtype),
                f"{param_bytes} B x ({_n(model.root_parameters)} root + {_n(model.layer_parameters)} layer)",
                "the root unit's gradients live from the head's backward to the end of the backward; "
                "plus one layer's before its reduce-scatter",
            )
        )
    per_layer, extra = (
        layer_saved_bytes(model, param_bytes, setup.lean_mlp),
        backward_extra_bytes(model, param_bytes, setup.lean_mlp),
    )
    norm = norm_saved_bytes(model, param_bytes)
    mlp_saved = "2 lean MLP activations" if setup.lean_mlp else "4 MLP activations"
    mlp_gradients = "3I" if setup.lean_mlp else "2I"
    if setup.gradient_checkpointing:
        terms.append(
            MemoryTerm(
                "activations: kept layer inputs (checkpointing)",
                "update",
                sequences * tokens * (model.layers * hidden * param_bytes + norm),
                f"{sequences} seq x {tokens} tok x ({model.layers} layers x {hidden} x {param_bytes} B + {norm} B final norm)",
                f"{setup.views} views x {setup.batch} completions; each layer's input hidden state "
                f"kept for the recomputation, and the final norm's saved tensors",
            )
        )
        terms.append(
            MemoryTerm(
                "activations: one layer recomputed + its backward",
                "update",
                sequences * tokens * (per_layer + extra),
                f"{sequences} x {tokens} x ({per_layer} + {extra}) B",
                f"one layer's saved tensors (2 RMSNorms, q, attention output, k, v, {mlp_saved}; "
                f"see layer_saved_bytes) plus its backward's gradients 2H + {mlp_gradients}",
            )
        )
    else:
        terms.append(
            MemoryTerm(
                "activations: every layer's saved tensors",
                "update",
                sequences * tokens * (model.layers * per_layer + norm),
                f"{sequences} x {tokens} x ({model.layers} x {per_layer} + {norm}) B",
                f"each layer's saved tensors ({mlp_saved}, see layer_saved_bytes; SDPA: no tokens^2 "
                f"term), plus the final norm's",
            )
        )
        terms.append(
            MemoryTerm(
                "activations: backward gradients of one layer",
                "update",
                sequences * tokens * extra,
                f"{sequences} x {tokens} x {extra} B",
                f"gradients of a layer's hidden states and MLP activations 2H + {mlp_gradients} per token",
            )
        )
    if setup.block_layout:
        terms.append(
            MemoryTerm(
                "block layout: boolean [x_t | x_0] attention mask",
                "update",
                sequences * tokens * tokens,
                f"{sequences} seq x {tokens} x {tokens} x 1 B",
                "one [2L, 2L] boolean mask per sequence, kept through the backward (SDPA with a mask: no tokens^2 "
                "scores; eager attention adds it once more in the compute dtype, FlexAttention's block mask is "
                "nearly nothing)",
            )
        )
    if setup.lora_dropout_inputs:
        kept_layers = 1 if setup.gradient_checkpointing else model.layers
        terms.append(
            MemoryTerm(
                "activations: adapter dropout's kept inputs",
                "update",
                sequences * tokens * kept_layers * setup.lora_dropout_inputs * (param_bytes + 1),
                f"{sequences} x {tokens} x {kept_layers} layers x {setup.lora_dropout_inputs} x ({param_bytes} + 1) B",
                "each adapted module keeps its dropped-out input for the adapter's backward, and the "
                "mask (1 byte); with checkpointing, one layer's at a time",
            )
        )
    rows = setup.scored_rows_per_token * setup.batch * completion
    width = min(vocab, max(1, min(setup.slice_columns, setup.chunk_rows * vocab // rows)))  # kernels._vocab_slices
    head_dtype_slice = 0 if param_bytes == 4 else param_bytes
    terms.append(
        MemoryTerm(
            f"fused head: saved rows ({param_dtype}) + their fp32 gradient",
            "update",
            rows * hidden * (param_bytes + 4),
            f"{rows} rows x {hidden} x ({param_bytes} + 4) B",
            f"fused head (logprobs.py): {setup.scored_rows_per_token} x {setup.batch} completions x "
            f"{completion} tokens, saved for the backward, which recomputes their logits",
        )
    )
    terms.append(
        MemoryTerm(
            "fused head: one vocabulary slice of logits",
            "update",
            width * rows * (4 + head_dtype_slice + 8),
            f"{width} x {rows} x (4 + {head_dtype_slice} + 8) B",
            f"{width} vocabulary columns (at most {setup.slice_columns}, and at most chunk_rows="
            f"{setup.chunk_rows} x {vocab} elements) x {rows} rows: the reused fp32 buffer, the slice in "
            f"the head's dtype (none when the head is fp32) and two fp32 temporaries when the entropy "
            f"is asked for. No [rows, vocab] tensor exists",
        )
    )

    m, L = setup.sampler_rows(model), setup.tokens
    copies = 2 if setup.logits_shift else 1
    terms.append(
        MemoryTerm(
            f"sampler: model logits ({setup.rollout_dtype})",
            "rollout",
            m * logits_bytes_per_row(vocab, L, rollout_bytes, setup.logits_shift),
            f"{copies} x {m} x {L} x {vocab} x {rollout_bytes} B",
            "the plain sampler runs the whole sequence and gets logits for every position "
            "(sampling/forward.py; an upper bound for head_on_masked)"
            + ("; aligning shifted logits concatenates a copy" if setup.logits_shift else ""),
        )
    )
    terms.append(
        MemoryTerm(
            "sampler: fp32 window buffers",
            "rollout",
            m * window_bytes_per_row(vocab, completion, setup.sampler_window_copies),
            f"{setup.sampler_window_copies} x {m} x {completion} x {vocab} x 4 B",
            "at the first step (every position masked), inside top-p: the window's .float() logits "
            "(sampling/denoising.py), their live-row copy, the packed masked rows, the temperature-scaled "
            "copy, top-p's sorted values, int64 indices (2), softmax, cumulative sum and its "
            "difference = 10 (7 greedy without top-p; both measured)"
            + (
                ""
                if setup.rollout_micro_batch
                else f"; {m} rows at a time: what keeps both terms under the sampler's {setup.sampler_budget_gib:g} GiB "
                "budget (engine_kwargs.diffusion.memory_budget_gib)"
            ),
        )
    )
    if setup.sampler_kv_cache:
        kept = 2 * model.layers * m * setup.prompt_length * model.kv_dim * rollout_bytes
        terms.append(
            MemoryTerm(
                f"sampler: prefix KV cache ({setup.rollout_dtype})",
                "rollout",
                kept,
                f"2 x {model.layers} x {m} x {setup.prompt_length} x {model.kv_dim} x {rollout_bytes} B",
                "keys and values of every layer for the prompt, kept between forwards "
                "(sampling/forward.py; kv_cache=false keeps none)",
            )
        )
    sampler_layer = layer_saved_bytes(model, rollout_bytes)
    terms.append(
        MemoryTerm(
            "sampler: one layer's forward working set",
            "rollout",
            m * L * sampler_layer,
            f"{m} x {L} x {sampler_layer} B",
            "no grad: one layer's intermediates at a time, at most what it would save for a backward",
        )
    )
    return MemoryEstimate(terms=tuple(terms), sampler_rows=m, gpus=gpus)


GPUS_PER_NODE = 8  # the trainer workers one node holds, for the host memory per node


def format_memory_table(estimate: MemoryEstimate, name_width: int = 56) -> str:
    """A plain-text table: each term with its phase, the phase sums and the total per GPU, in GiB (MiB when
    the total is under 1 GiB)."""
    unit, scale = ("GiB", GIB) if estimate.total_bytes >= GIB else ("MiB", 2**20)
    lines = [f"  {'component':<{name_width}} {unit:>9}  phase"]
    for term in estimate.terms:
        lines.append(f"  {term.name:<{name_width}} {term.bytes / scale:>9.3f}  {term.phase}")
    lines.append(
        f"  {'total per GPU (held + max(update, rollout))':<{name_width}} "
        f"{estimate.total_bytes / scale:>9.3f}  peak in {estimate.peak_phase}"
    )
    sums = ", ".join(f"{phase} {estimate.phase_bytes(phase) / scale:.3f}" for phase in PHASES)
    lines.append(f"  phases ({unit}): {sums}")
    if estimate.phase_bytes("host"):
        workers = min(estimate.gpus, GPUS_PER_NODE)
        lines.append(
            f"  host memory (not on the GPU): {estimate.phase_bytes('host') / scale:.3f} {unit} per trainer worker, "
            f"{workers * estimate.phase_bytes('host') / scale:.3f} {unit} for the {workers} on a node, pinned"
        )
    return "\n".join(lines)
