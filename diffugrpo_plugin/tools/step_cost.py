"""FLOP model of one training step, and the published recipes it prices.

Pure arithmetic (no torch, no verl): "What one step costs" (``docs/concepts/step-cost.md``) and ``diffugrpo
check-model`` both compute from the functions here, so their numbers come from one place.

**FLOPs.** ``F = 2 N x sequences x tokens`` is one forward over a batch (a multiply and an add
per weight and token). Attention's own FLOPs (``4 x layers x tokens x hidden`` per token with
bidirectional attention) are left out: about 1% of ``2N`` for DiffuCoder-7B at 456 tokens.

* generation: ``steps x F`` (one full forward per diffusion step, as the reference samples;
  the fast path's prefix cache and threshold do less);
* old-policy log-probs: ``views x F`` per iteration (the coupled masker has 3 views);
* reference log-probs: the same, when there is a reference (KL on);
* update: ``views x 3F`` per iteration (forward and a backward of twice the forward),
  ``views x 4F`` with gradient checkpointing (the forward runs again inside the backward).

The memory model is :mod:`.step_memory`.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


def dtype_bytes(name: str) -> int:
    """Bytes per element of ``fp32`` / ``bf16`` / ``fp16`` (or their torch spellings)."""
    try:
        return DTYPE_BYTES[str(name).lower()]
    except KeyError as error:
        raise ValueError(f"unknown dtype '{name}'; use one of {', '.join(DTYPE_BYTES)}") from error


# ---------------------------------------------------------------------------------------------
# FLOPs
# ---------------------------------------------------------------------------------------------


def forward_flops(parameters: float, sequences: int, tokens: int) -> float:
    """``F = 2 N x sequences x tokens``: one forward pass over ``sequences`` sequences of ``tokens`` tokens."""
    return 2.0 * parameters * sequences * tokens


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one step's stages (see the module docstring); ``forward`` is ``F``."""

    forward: float
    generation: float
    old_logprobs: float
    ref_logprobs: float
    update: float

    @property
    def training(self) -> float:
        """Old and reference log-probs plus the update: everything but generation."""
        return self.old_logprobs + self.ref_logprobs + self.update

    @property
    def total(self) -> float:
        return self.generation + self.training


def step_flops(
    parameters: float,
    sequences: int,
    tokens: int,
    diffusion_steps: int,
    iterations: int = 1,
    views: int = 3,
    gradient_checkpointing: bool = False,
    reference: bool = True,
) -> StepFlops:
    """FLOPs of one step: ``sequences`` completions of ``tokens`` (prompt + completion) tokens each.

    ``iterations`` is DiffuCoder's ``num_iterations`` (verl's ``ppo_epochs``): old-policy and
    reference log-probs are computed once per iteration (fresh masks), the update runs once per
    iteration; generation happens once per step.
    """
    f = forward_flops(parameters, sequences, tokens)
    passes = views * iterations
    return StepFlops(
        forward=f,
        generation=diffusion_steps * f,
        old_logprobs=passes * f,
        ref_logprobs=passes * f if reference else 0.0,
        update=passes * (4 if gradient_checkpointing else 3) * f,
    )


def seconds(flops: float, gpus: int, peak_flops_per_gpu: float, utilization: float) -> float:
    """Wall time of ``flops`` spread over ``gpus`` devices running at ``utilization`` of their peak."""
    return flops / (gpus * peak_flops_per_gpu * utilization)


H100_BF16_DENSE_FLOPS = 989e12  # H100 SXM dense bf16 tensor-core peak
DEFAULT_UTILIZATION = 0.4
CPU_SAMPLING_SLOWDOWN = 1.6  # measured on CPU: our sampler spends ~1.6x more time per FLOP than training passes


@dataclass(frozen=True)
class FlopRecipe:
    """A training recipe, as far as the FLOP model needs it."""

    name: str
    parameters: float
    prompts: int
    completions_per_prompt: int
    prompt_length: int
    completion_length: int
    diffusion_steps: int
    iterations: int
    gradient_checkpointing: bool
    gpus: int
    device: str = "H100"
    peak_flops_per_gpu: float = H100_BF16_DENSE_FLOPS
    utilization: float = DEFAULT_UTILIZATION
    sampling_slowdown: float = CPU_SAMPLING_SLOWDOWN
    views: int = 3

    @property
    def sequences(self) -> int:
        return self.prompts * self.completions_per_prompt

    @property
    def tokens(self) -> int:
        return self.prompt_length + self.completion_length

    def flops(self) -> StepFlops:
        return step_flops(
            self.parameters,
            self.sequences,
            self.tokens,
            self.diffusion_steps,
            self.iterations,
            self.views,
            self.gradient_checkpointing,
        )

    def seconds(self, flops: float) -> float:
        return seconds(flops, self.gpus, self.peak_flops_per_gpu, self.utilization)


# The paper estimate of docs/concepts/step-cost.md (examples/diffucoder_7b): 8 prompts x 10 completions, 200 + 256 tokens,
# 256 diffusion steps, 2 iterations, gradient checkpointing, 8 GPUs.
DIFFUCODER_7B = FlopRecipe(
    name="DiffuCoder-7B",
    parameters=7.6e9,
    prompts=8,
    completions_per_prompt=10,
    prompt_length=200,
    completion_length=256,
    diffusion_steps=256,
    iterations=2,
    gradient_checkpointing=True,
    gpus=8,
)


def format_flops(value: float, digits: int = 3) -> str:
    """``1.42e17`` style (no ``+``, no leading exponent zeros)."""
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def format_seconds(value: float) -> str:
    """Whole seconds from 10 s up, two significant digits below."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def flop_table_markdown(recipe: FlopRecipe = DIFFUCODER_7B) -> str:
    """The per-stage FLOP table of docs/concepts/step-cost.md for ``recipe`` (markdown)."""
    flops = recipe.flops()
    k, views = recipe.iterations, recipe.views
    passes = 4 if recipe.gradient_checkpointing else 3
    gen_s = recipe.seconds(flops.generation)
    slow_gen_s = gen_s * recipe.sampling_slowdown
    step_s = recipe.seconds(flops.total)
    rows = [
        f"| stage | FLOPs | seconds on {recipe.gpus} x {recipe.device} at {recipe.utilization:.0%} of "
        f"{recipe.peak_flops_per_gpu / 1e12:.0f} TFLOP/s |",
        "|---|---|---|",
        f"| generation ({recipe.diffusion_steps} x F) | {format_flops(flops.generation)} | {format_seconds(gen_s)} "
        f"({format_seconds(slow_gen_s)} if, as on CPU, sampling runs {recipe.sampling_slowdown:g}x less "
        f"efficiently) |",
        f"| old log-probs ({k} x {views}F) | {format_flops(flops.old_logprobs)} | "
        f"{format_seconds(recipe.seconds(flops.old_logprobs))} |",
        f"| reference log-probs ({k} x {views}F) | {format_flops(flops.ref_logprobs)} | "
        f"{format_seconds(recipe.seconds(flops.ref_logprobs))} |",
        f"| update ({k} x {views} views x {passes}F) | {format_flops(flops.update)} | "
        f"{format_seconds(recipe.seconds(flops.update))} |",
        f"| **step** | **{format_flops(flops.total)}** | **~{format_seconds(step_s)}-"
        f"{format_seconds(step_s - gen_s + slow_gen_s)} s** |",
    ]
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------


if __name__ == "__main__":
    recipe = DIFFUCODER_7B
    print(
        f"F = 2 x {format_flops(recipe.parameters, 2)} x {recipe.sequences} x {recipe.tokens} = "
        f"{format_flops(recipe.flops().forward, 2)} FLOPs"
    )
    print(flop_table_markdown(recipe))
