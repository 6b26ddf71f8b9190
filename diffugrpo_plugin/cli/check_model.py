"""``diffugrpo check-model PATH``: what to run before booking GPUs (:data:`DESCRIPTION`, its help, says what it
reports and its exit statuses; :mod:`diffugrpo_plugin.tools.model_check` does the work)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap

from diffugrpo_plugin.cli.model_flags import add_model_flags
from diffugrpo_plugin.sampling.memory import DEFAULT_BUDGET_GIB

# Memory-estimate defaults: DiffuCoder's recipe per GPU (examples/diffucoder_7b): 5 completions per micro-batch,
# 200 + 256 tokens, 8 GPUs, the sampler denoising 10 completions together, 256 steps, 2 iterations.
DEFAULTS = dict(
    batch=5, prompt_length=200, completion_length=256, gpus=8, rollout_micro_batch=10, diffusion_steps=256, iterations=2
)
TEXT_WIDTH = 100
DESCRIPTION = """\
What to run before booking GPUs:
1. the checkpoint's config (no weights): family and the clue that selected it, the implementation that
   will load it, calling convention, logit shift, mask token id and its source, the vocabulary head (tied
   or not), vocabulary, hidden size, layers, dtype, parameters;
2. the weights on --device, five probes: padding (does left padding change a prompt's logits?), fused
   head (do the training pass's log-probs equal the model's own?), lean MLP (does a SwiGLU block's lean
   backward give its own code's gradients?), one coupled log-prob pass forward and backward, and a few
   sampling steps of the family's sampler;
3. the memory one training step needs per GPU, term by term, and its FLOPs.

Exit status: 0 all well, 1 a probe found a problem (padding leaks, the fused head or a lean block differs,
non-finite values, a probe raised), 2 an error (no such checkpoint, no family fits, code that must run is not trusted)."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check-model",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="before booking GPUs: what a checkpoint resolves to, whether it runs, the memory a step needs",
        description=DESCRIPTION,
    )
    parser.add_argument("path", metavar="PATH", help="checkpoint directory or hub id")
    add_model_flags(parser.add_argument_group("model"), with_model=False, default_device="cpu")
    probes = parser.add_argument_group("probes (step 2)")
    probes.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default=None,
        help="weights' dtype for the probes (default: float32 on CPU, else the checkpoint's own)",
    )
    probes.add_argument(
        "--config-only",
        action="store_true",
        help="read the config only: no weights, no probes (the estimate is still printed)",
    )
    probes.add_argument("--prompt", default=None, help="the probes' prompt (default: a short coding request)")
    probes.add_argument(
        "--sampler",
        default=None,
        help="sampler of the sampling probe (default: the family's own: entropy for dream, llada "
        "for llada, else entropy)",
    )
    probes.add_argument("--sample-tokens", type=int, default=16, help="tokens to generate (default: 16)")
    probes.add_argument("--sample-steps", type=int, default=8, help="denoising steps (default: 8)")
    probes.add_argument("--mask-seed", type=int, default=0, help="mask seed of the log-prob pass (default: 0)")
    probes.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="padding probe tolerance, times max(1, max |logit|) (default: 1e-4 in float32, 5e-2 in bfloat16)",
    )
    estimate = parser.add_argument_group("memory estimate (step 3; defaults: DiffuCoder's recipe per GPU)")
    estimate.add_argument(
        "--batch",
        type=int,
        default=DEFAULTS["batch"],
        help="completions per training micro-batch per GPU (ppo_micro_batch_size_per_gpu; default: %(default)s)",
    )
    estimate.add_argument(
        "--prompt-length", type=int, default=DEFAULTS["prompt_length"], help="prompt tokens (default: %(default)s)"
    )
    estimate.add_argument(
        "--completion-length",
        type=int,
        default=DEFAULTS["completion_length"],
        help="completion tokens (default: %(default)s)",
    )
    estimate.add_argument(
        "--gpus", type=int, default=DEFAULTS["gpus"], help="FSDP shards, data-parallel GPUs (default: %(default)s)"
    )
    estimate.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="enable_gradient_checkpointing (default: on)",
    )
    estimate.add_argument(
        "--param-dtype",
        choices=("bf16", "fp32"),
        default="bf16",
        help="FSDP mixed-precision param_dtype, the compute dtype (default: bf16)",
    )
    estimate.add_argument(
        "--rollout-dtype",
        choices=("bf16", "fp32"),
        default="bf16",
        help="actor_rollout_ref.rollout.dtype (default: bf16)",
    )
    estimate.add_argument(
        "--reference-dtype",
        choices=("fp32", "bf16"),
        default="fp32",
        help="reference model's stored dtype (verl 0.9.1's ref.fsdp_config.model_dtype; default: fp32)",
    )
    estimate.add_argument("--no-reference", action="store_true", help="no reference model (no KL loss)")
    estimate.add_argument(
        "--masker",
        choices=("coupled", "pair", "d1"),
        default="coupled",
        help="masker of the training passes: views through the network and head rows per token "
        "(coupled: 3 views, 2 rows; pair: 2, 1; d1: 1, 1; default: coupled)",
    )
    estimate.add_argument(
        "--rollout-micro-batch",
        type=_micro_batch,
        default=DEFAULTS["rollout_micro_batch"],
        help="completions the sampler denoises together (engine_kwargs.diffusion.micro_batch_size; "
        "default: %(default)s, the 7B recipe's); 'budget': as many as --sampler-budget-gib allows, what the "
        "sampler does when micro_batch_size is unset",
    )
    estimate.add_argument(
        "--sampler-budget-gib",
        type=float,
        default=DEFAULT_BUDGET_GIB,
        help="with --rollout-micro-batch budget: GiB the sampler's logits and fp32 window buffers may take "
        "(engine_kwargs.diffusion.memory_budget_gib; default: %(default)s)",
    )
    estimate.add_argument(
        "--chunk-rows",
        type=int,
        default=None,
        help="the fused head's memory cap, at most chunk_rows x vocabulary logits at a time "
        "(actor_rollout_ref.model.diffusion.chunk_rows; default: the training default's)",
    )
    estimate.add_argument(
        "--no-kv-cache",
        action="store_true",
        help="the rollout samples without the prefix KV cache (the reference sampler; the training default keeps one)",
    )
    estimate.add_argument(
        "--no-lean-mlp",
        action="store_true",
        help="the SwiGLU blocks save all four activations (diffusion.lean_mlp=false; the training "
        "default saves two where the model's blocks allow it)",
    )
    estimate.add_argument(
        "--model-dtype",
        choices=("fp32", "bf16"),
        default="fp32",
        help="the sharded policy weights' storage dtype (verl's actor.fsdp_config.model_dtype; default: fp32)",
    )
    estimate.add_argument(
        "--lora-rank",
        type=int,
        default=0,
        help="LoRA adapters of this rank (actor_rollout_ref.model.lora_rank): frozen base weights, "
        "adapters and their optimizer state, no reference copy (default: 0, every weight "
        "trains)",
    )
    estimate.add_argument(
        "--target-modules",
        default="all-linear",
        help="with --lora-rank: comma-separated module names to adapt, or all-linear "
        "(actor_rollout_ref.model.target_modules; default: all-linear)",
    )
    estimate.add_argument(
        "--lora-dropout",
        type=float,
        default=0.0,
        help="with --lora-rank: adapter dropout (actor_rollout_ref.model.lora.dropout); above 0 it "
        "keeps a copy of each adapted module's input for the backward (default: 0)",
    )
    estimate.add_argument(
        "--load-in-4bit",
        action="store_true",
        help="with --lora-rank: the frozen base's linear layers in 4 bits (QLoRA, actor_rollout_ref.model.lora."
        "load_in_4bit), whole on every GPU, in the trainer and the rollout copy",
    )
    estimate.add_argument(
        "--diffusion-steps",
        type=int,
        default=DEFAULTS["diffusion_steps"],
        help="rollout denoising steps, for the FLOP count (default: %(default)s)",
    )
    estimate.add_argument(
        "--iterations",
        type=int,
        default=DEFAULTS["iterations"],
        help="num_iterations (ppo_epochs), for the FLOP count (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print everything as one JSON object")
    parser.set_defaults(func=run)
    return parser


def _micro_batch(value: str) -> int | None:
    return None if value == "budget" else int(value)


def _fail(message: str) -> int:
    print(f"diffugrpo check-model: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def _check_numbers(args: argparse.Namespace) -> str | None:
    for name in (
        "batch",
        "prompt_length",
        "completion_length",
        "gpus",
        "rollout_micro_batch",
        "sample_tokens",
        "sample_steps",
        "diffusion_steps",
        "iterations",
        "chunk_rows",
    ):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be at least 1, got {value}"
    if args.lora_rank < 0:
        return f"--lora-rank must be 0 (no LoRA) or more, got {args.lora_rank}"
    if not 0 <= args.lora_dropout < 1:
        return f"--lora-dropout must be in [0, 1), got {args.lora_dropout}"
    if args.load_in_4bit and not args.lora_rank:
        return "--load-in-4bit trains LoRA adapters on a frozen 4-bit base: give --lora-rank too"
    return None


def _adapters(resolved, args) -> tuple[int, int, bool | None, int]:
    """With ``--lora-rank``: adapter parameters and adapted modules, as peft builds them on the planned network,
    whether every SwiGLU block stays lean with them in place (an adapted down projection keeps its block stock), and
    the elements per token and layer adapter dropout keeps."""
    if not args.lora_rank:
        return 0, 0, None, 0
    from diffugrpo_plugin.models.lean_mlp import make_lean
    from diffugrpo_plugin.models.lora import (
        adapted_copy,
        adapted_inputs_per_layer,
        adapted_module_names,
        adapter_parameters,
        parse_targets,
        refuse_adapted_head,
    )

    try:
        adapted = adapted_copy(resolved.meta, args.lora_rank, parse_targets(args.target_modules))
    except ValueError as error:  # peft's own: no module matched
        raise ValueError(f"--target-modules {args.target_modules}: {' '.join(str(error).split())}") from error
    refuse_adapted_head(adapted, resolved.plan.family)
    lean = make_lean(adapted, resolved.plan.family.swiglu)
    dropped = adapted_inputs_per_layer(adapted, resolved.resolution.layers) if args.lora_dropout > 0 else 0
    return (
        adapter_parameters(adapted),
        len(adapted_module_names(adapted)),
        lean.installed > 0 and not lean.skipped,
        dropped,
    )


def _four_bit_weights(resolved) -> int:
    """With ``--load-in-4bit``: the planned network's weights a 4-bit load stores in 4 bits."""
    from diffugrpo_plugin.models.quantization import four_bit_weight_count

    return four_bit_weight_count(resolved.meta, resolved.plan.family.head_module(resolved.meta))


def run(args: argparse.Namespace) -> int:
    problem = _check_numbers(args)
    if problem:
        return _fail(problem)
    from diffugrpo_plugin.tools.model_check import checkpoint_path_problem

    problem = checkpoint_path_problem(args.path)  # before the heavy imports: a typo answers at once
    if problem:
        return _fail(problem)
    from diffugrpo_plugin.models.dlm import quiet_transformers

    try:
        with quiet_transformers():
            return _run(args)
    except BrokenPipeError:  # the reader went away (| head): nothing left to say
        return 1
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        from diffugrpo_plugin.models.family import ModelConfigError
        from diffugrpo_plugin.plugins import PluginError

        known = (ModelConfigError, PluginError, OSError, ValueError)
        return _fail(str(exc) if isinstance(exc, known) else f"{type(exc).__name__}: {exc}")


def _run(args: argparse.Namespace) -> int:
    from diffugrpo_plugin.config import training_default
    from diffugrpo_plugin.tools import model_check, step_cost, step_memory

    resolved = model_check.resolve_checkpoint(
        args.path,
        family=args.family,
        implementation=args.implementation or "auto",
        trust_remote_code=bool(args.trust_remote_code),
    )
    resolution = resolved.resolution
    adapter_count, adapted_modules, lean_with_adapters, dropped = _adapters(resolved, args)
    lean_everywhere = resolution.lean_mlp_everywhere if lean_with_adapters is None else lean_with_adapters
    setup = step_memory.StepSetup(
        batch=args.batch,
        prompt_length=args.prompt_length,
        completion_length=args.completion_length,
        gpus=args.gpus,
        gradient_checkpointing=args.gradient_checkpointing,
        param_dtype=args.param_dtype,
        reference_dtype=None if args.no_reference else args.reference_dtype,
        rollout_dtype=args.rollout_dtype,
        rollout_micro_batch=args.rollout_micro_batch,
        sampler_budget_gib=args.sampler_budget_gib,
        chunk_rows=args.chunk_rows or training_default("actor_rollout_ref.model.diffusion.chunk_rows"),
        logits_shift=bool(resolution.logits_shift),
        views=step_memory.MASKER_SHAPES[args.masker][0],
        scored_rows_per_token=step_memory.MASKER_SHAPES[args.masker][1],
        sampler_kv_cache=not args.no_kv_cache,
        lean_mlp=lean_everywhere and not args.no_lean_mlp,
        lora_parameters=adapter_count,
        lora_dropout_inputs=dropped,
        model_dtype=args.model_dtype,
        four_bit_parameters=_four_bit_weights(resolved) if args.load_in_4bit else 0,
        block_layout=resolution.block_size is not None,
    )
    memory = step_memory.memory_estimate(resolution.shape(), setup)
    flops = step_cost.step_flops(
        resolution.active_parameters or resolution.parameters,  # a MoE token runs its active experts only
        args.batch,
        setup.tokens,
        args.diffusion_steps,
        args.iterations,
        setup.views,
        args.gradient_checkpointing,
        reference=not args.no_reference,
    )
    if not args.json:
        print(_resolution_text(resolution))
    check = model_check.ModelCheck(resolution=resolution)
    if not args.config_only:
        if not args.json:
            print("\nprobes: loading the weights ...", flush=True)
        check = model_check.run_probes(
            resolved,
            device=args.device or "cpu",
            dtype=args.dtype,
            prompt=args.prompt or model_check.DEFAULT_PROMPT,
            sampler=args.sampler,
            sample_tokens=args.sample_tokens,
            sample_steps=args.sample_steps,
            mask_seed=args.mask_seed,
            tolerance=args.tolerance,
        )
    if args.json:
        payload = check.to_dict()
        payload["ok"] = check.probes_ok
        payload["estimate"] = {
            "setup": dataclasses.asdict(setup),
            "memory": memory.to_dict(),
            "flops": _flops_dict(flops),
        }
        print(json.dumps(payload, default=str))
    else:
        if not args.config_only:
            print(_probes_text(check))
        print(_estimate_text(setup, memory, flops, resolution, args, adapted_modules))
    return 0 if check.probes_ok else 1


def _flops_dict(flops) -> dict:
    from diffugrpo_plugin.tools import step_cost

    values = {
        "forward": flops.forward,
        "generation": flops.generation,
        "old_logprobs": flops.old_logprobs,
        "ref_logprobs": flops.ref_logprobs,
        "update": flops.update,
        "total": flops.total,
    }
    h100 = {
        name: step_cost.seconds(value, 1, step_cost.H100_BF16_DENSE_FLOPS, step_cost.DEFAULT_UTILIZATION)
        for name, value in values.items()
    }
    return {**values, "seconds_on_one_h100_at_40_percent": h100}


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _escape(text: str, limit: int = 160) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def _count(value: int) -> str:
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if value >= scale:
            return f"{value / scale:.2f}{suffix} ({value:,})"
    return f"{value:,}"


def _resolution_text(r) -> str:
    shift = {
        True: "yes: the output at i-1 scores token i",
        False: "no: the output at i scores token i",
        None: "unknown (set diffusion.logits_shift)",
    }[r.logits_shift]
    mask = f"{r.mask_token_id}" + (f" {r.mask_token!r}" if r.mask_token is not None else "")
    vocab = f"{r.vocab_size:,} logits" + (
        f" (config vocab_size {r.config_vocab_size:,})" if r.config_vocab_size not in (None, r.vocab_size) else ""
    )
    rows = [
        ("family", f"{r.family} (detected from {r.detected_from}): {r.family_description}"),
        ("implementation", r.implementation_detail),
        ("calling convention", r.attention_convention),
        ("logit shift", shift),
        ("mask token", f"{mask}, from {r.mask_token_source}"),
        ("vocabulary head", r.head),
        ("vocabulary", vocab),
        ("hidden size", f"{r.hidden_size:,}"),
        ("layers", f"{r.layers} (MLP {r.intermediate_size:,}, key/value width {r.kv_dim:,})"),
        ("lean MLP blocks", r.lean_mlp),
        ("dtype", r.checkpoint_dtype or "not stated in config.json"),
        ("parameters", _count(r.parameters)),
    ]
    if r.block_size is not None:
        rows.insert(4, ("block size", f"{r.block_size}, from {r.block_size_source}"))
    if r.experts is not None:
        rows[-1] = (
            "parameters",
            f"{_count(r.parameters)} (every expert); {_count(r.active_parameters)} active per token",
        )
        rows.insert(-1, ("experts", r.experts))
    return f"model {r.path}\n" + "\n".join(f"  {name:<19} {value}" for name, value in rows)


def _probe_lines(label: str, probe, bad: str, finding, advice: str) -> list[str]:
    """A probe's report: FAILED with its error, or its verdict and ``finding(probe)``, then ``advice`` when it is
    not ok."""
    if probe.error:
        return [f"  {label:<19} FAILED: {probe.error}"]
    lines = [f"  {label:<19} {'ok' if probe.ok else bad}: {finding(probe)}"]
    return lines if probe.ok else lines + [f"{'':22}{advice}"]


def _probes_text(check) -> str:
    load, pad, head, lp, sm = check.load, check.padding, check.head, check.logprob, check.sampling
    lines = [f"  loaded              {load.model_class} on {load.device} in {load.dtype} ({load.seconds:.1f} s)"]
    lines += _probe_lines(
        "padding",
        pad,
        "LEAKS",
        lambda p: (
            f"max |diff| {p.max_abs_diff:.2e} on {p.positions} real positions with {p.padding} pads in front "
            f"(tolerance {p.tolerance:.1e})"
        ),
        "left padding changes the prompt's logits: the model's code does not hide padded keys (use the native "
        "implementation or fix the attention mask)",
    )
    lines += _probe_lines(
        "fused head",
        head,
        "DIFFERS",
        lambda p: (
            f"max |diff| {p.max_abs_diff:.2e} between the training pass's log p and the model's own logits on "
            f"{p.rows} tokens (tolerance {p.tolerance:.1e})"
        ),
        "the model changes its logits after the vocabulary head in a way its family does not describe (a logit "
        "scale or cap): add it to the family's logit_scale",
    )
    if check.lean_mlp is not None:
        lines += _probe_lines(
            "lean MLP",
            check.lean_mlp,
            "DIFFERS",
            lambda p: (
                f"max |diff| {p.max_abs_diff:.2e} between {p.block}'s own code and its lean backward, output "
                f"and gradients (tolerance {p.tolerance:.1e})"
            ),
            "this block's code is not the SwiGLU its family describes: train with "
            "actor_rollout_ref.model.diffusion.lean_mlp=false",
        )
    if lp.error:
        lines.append(f"  coupled log-probs   FAILED: {lp.error}")
    else:
        verdict = "ok" if lp.ok else "NOT FINITE"
        lines.append(
            f"  coupled log-probs   {verdict}: mean log p {lp.mean_logprob:.3f} over {lp.tokens} tokens, "
            f"{lp.head_rows} head rows, {lp.views} views, mask seed {lp.mask_seed}; forward "
            f"{lp.forward_seconds:.2f} s, backward {lp.backward_seconds:.2f} s, grad norm "
            f"{lp.gradient_norm if lp.gradient_norm is None else f'{lp.gradient_norm:.3g}'}"
        )
    if sm.error:
        lines.append(f"  sampling            FAILED ({sm.sampler}): {sm.error}")
    else:
        lines.append(
            f"  sampling            ok: {sm.sampler}, {sm.steps} steps, {sm.new_tokens} tokens in "
            f"{sm.seconds:.2f} s: {_escape(sm.text)}"
        )
    return "\n".join(lines)


def _estimate_text(setup, memory, flops, r, args, adapted_modules: int = 0) -> str:
    from diffugrpo_plugin.tools import step_cost, step_memory

    checkpointing = "on" if setup.gradient_checkpointing else "off"
    head = (
        f"\nmemory per GPU, one training step: {setup.batch} completions x ({setup.prompt_length} + "
        f"{setup.completion_length}) tokens x {setup.views} views"
        + (" (each run as [x_t | x_0], twice as long: the block layout)" if setup.block_layout else "")
        + f", {_plural(setup.gpus, 'GPU')}, param_dtype "
        f"{setup.param_dtype}, gradient checkpointing {checkpointing}, rollout micro-batch "
        f"{memory.sampler_rows}"
        + ("" if setup.rollout_micro_batch else f" (from the {setup.sampler_budget_gib:g} GiB sampler budget)")
        + f" in {setup.rollout_dtype}, weights stored in {setup.model_dtype}"
    )
    if setup.lora_parameters:
        head += (
            f"; LoRA rank {args.lora_rank} on {adapted_modules} modules ({args.target_modules}): "
            f"{_count(setup.lora_parameters)} adapter parameters"
            + (f", on {_count(setup.four_bit_parameters)} weights in 4 bits" if setup.four_bit_parameters else "")
        )
    h100 = step_cost.H100_BF16_DENSE_FLOPS * step_cost.DEFAULT_UTILIZATION
    flop_lines = [
        f"\nFLOPs of one micro-batch of {setup.batch} completions on one GPU (F = 2 x "
        f"{r.active_parameters or r.parameters:,} {'active ' if r.active_parameters else ''}params x "
        f"{setup.batch} x {setup.tokens} tokens = {step_cost.format_flops(flops.forward)}; "
        f"{_plural(args.iterations, 'iteration')}):",
        f"  generation ({args.diffusion_steps} x F) {step_cost.format_flops(flops.generation)}, old log-probs "
        f"{step_cost.format_flops(flops.old_logprobs)}, reference {step_cost.format_flops(flops.ref_logprobs)}, "
        f"update {step_cost.format_flops(flops.update)}; total {step_cost.format_flops(flops.total)} "
        f"= {flops.total / h100:.3g} s on one H100 at 40% of 989 TFLOP/s",
    ]
    not_counted = "  not counted: " + "; ".join(memory.not_counted)
    wrapped = textwrap.fill(not_counted, TEXT_WIDTH, subsequent_indent="    ")
    return "\n".join([head, step_memory.format_memory_table(memory), wrapped, *flop_lines])
