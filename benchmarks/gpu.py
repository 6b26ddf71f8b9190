"""The GPU path measured on a GPU: DiffuCoder's shapes on the published 7B/8B configs, random weights.

Three parts, each a table (and the whole record as JSON with ``--json PATH``):

* **logprob**: one coupled log-prob training pass (forward + backward of the token-mean) of the native
  Dream-7B and LLaDA-8B classes in bf16 at DiffuCoder's shapes (G=10 completions of 256 tokens after a
  200-token prompt, 3 views, gradient checkpointing as the training default has it), for the training
  engine's pass (fused head + lean MLP), the fused head on stock MLPs, and the model's own head
  (materialised logits). Peak memory is ``max_memory_allocated`` during the pass minus what was
  allocated before it (weights and already-allocated gradients), against the activation and fused-head
  terms of ``diffugrpo_plugin.tools.step_memory.memory_estimate`` for the same shape (``check-model``'s model).
  A second row without checkpointing, at G=2, checks the other activation formula. Also: the fused
  head's log-probs and gradient against an fp64 reference on the model's head weight, and which
  scaled-dot-product-attention kernel PyTorch ran, with and without left padding (profiler).
* **sampler**: generated tokens/s at 7B/8B shape, batch 1 and 16, 256 new tokens: the plain sampler
  (no cache, ``--steps`` forwards) against the training default's fast setting (prefix cache refreshed
  every 2 forwards, threshold 0.99, compact, reuse_logits, head_on_masked); LLaDA in blocks of 32; how
  many tokens agree with the plain sampler's (greedy). Random weights are nearly uniform, so the
  threshold rarely fires and no row ends early: these are the forwards' costs, not a trained model's.
* **step**: one training step under FSDP2 on one GPU, our pieces driven directly (verl does not run on
  the lent machine): the Dream-7B shape cut to ``--step-layers`` decoder layers so that fp32 weights,
  gradients and AdamW fit one GPU; rollout (the fast sampler on a bf16 copy, 32 steps), old and
  reference log-probs, the update (PPO clipped loss, clip_grad_norm, AdamW), the weight sync. Per
  stage: median seconds; the step's peak memory against ``memory_estimate`` (gpus=1); MFU of the update
  against the datasheet bf16 peak and against a bf16 matmul measured in the same run.

    python benchmarks/gpu.py                             # on a CUDA machine: every part (~4 min on an H100)
    python benchmarks/gpu.py --parts logprob --families dream
    python benchmarks/gpu.py --tiny --device cpu          # the same code on tiny configs (tests run this)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# Qwen2.5-7B's shape as Dream-v0 / DiffuCoder-7B publish it in config.json (the fields a config needs).
DREAM_7B = {
    "architectures": ["DreamModel"],
    "model_type": "Dream",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "mask_token_id": 151666,
    "pad_token_id": 151643,
    "eos_token_id": 151643,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
}
LLADA_8B_PATH = ROOT / "examples" / "d1_llada" / "llada_8b_config.json"
TINY = {
    "dream": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 600,
        "mask_token_id": 599,
        "pad_token_id": 0,
        "eos_token_id": 1,
    },
    "llada": {
        "d_model": 64,
        "mlp_hidden_size": 128,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 4,
        "vocab_size": 600,
        "embedding_size": 600,
        "mask_token_id": 599,
        "pad_token_id": 0,
        "eos_token_id": 1,
    },
}
DATASHEET_BF16 = {"H100": 989e12, "H200": 989e12}  # dense bf16 tensor-core peak, SXM parts
# stock blocks first: make_lean changes the model in place
PASS_VARIANTS = ("model head (materialised logits)", "fused head, stock MLP", "ours (fused head + lean MLP)")
FAST = {
    "kv_cache": True,
    "cache_refresh": 2,
    "threshold": 0.99,
    "compact": True,
    "reuse_logits": True,
    "head_on_masked": True,
}  # the training default (config/algorithm/coupled_grpo.yaml)
GIB = 2**30
CHUNK_ROWS_KEY = "actor_rollout_ref.model.diffusion.chunk_rows"  # the fused head's memory cap, as training runs it


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def family_config(family: str, tiny: bool, layers: int | None = None) -> dict:
    """The published config (or its tiny stand-in for a CPU run), optionally cut to ``layers``."""
    config = dict(DREAM_7B) if family == "dream" else json.loads(LLADA_8B_PATH.read_text())
    if tiny:
        config.update(TINY[family])
    if layers:
        config["num_hidden_layers" if family == "dream" else "n_layers"] = layers
    return config


def resolve(config: dict):
    """What ``check-model`` resolves for this config (family, plan, shape), with a tokenizer built in code."""
    from diffugrpo_plugin.models.tokenizer import build_tokenizer
    from diffugrpo_plugin.tools.model_check import resolve_checkpoint

    directory = tempfile.mkdtemp(prefix="gpu_bench_")
    (Path(directory) / "config.json").write_text(json.dumps(config))
    build_tokenizer().save_pretrained(directory)
    return resolve_checkpoint(directory)


def build_model(resolved, device: str, dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    """The planned class with random weights, initialised on ``device`` (a 7B init on the CPU takes minutes)."""
    torch.manual_seed(seed)
    with torch.device(device):
        module = resolved.plan.model_class._from_config(resolved.config_object, attn_implementation="sdpa", dtype=dtype)
    return module.eval()


def wrap(module, resolved):
    from diffugrpo_plugin.models.dlm import DiffusionLM

    return DiffusionLM.wrap(module, mask_token_id=resolved.resolution.mask_token_id)


def coupled_views(ids: torch.Tensor, completion_mask: torch.Tensor, mask_id: int, seed: int):
    """The coupled masker's views of ``ids`` [B, L], drawn on CPU as the engine draws them, on ids' device."""
    from diffugrpo_plugin.core.masking import make_coupled

    seeds = torch.arange(ids.shape[0], dtype=torch.int64) + 1000 * seed  # [B]
    views = make_coupled().views(ids.cpu(), completion_mask.cpu(), mask_id, seeds)
    return type(views)(**{name: value.to(ids.device) for name, value in vars(views).items()})


def batch(rows: int, prompt: int, completion: int, mask_id: int, device: str, seed: int = 0):
    """Random prompt + completion tokens (never the mask id) and their coupled views.  # [B, L] each, views [3, B, L]"""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, mask_id, (rows, prompt + completion), generator=generator).to(device)  # [B, L]
    completion_mask = torch.zeros_like(ids, dtype=torch.bool)  # [B, L]
    completion_mask[:, prompt:] = True
    return ids, torch.ones_like(ids), completion_mask, coupled_views(ids, completion_mask, mask_id, seed)


# ---------------------------------------------------------------------------------------------
# Timing and memory
# ---------------------------------------------------------------------------------------------


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@contextmanager
def measured(device: str, record: dict):
    """Seconds and, on CUDA, the peak bytes allocated above what was allocated on entry."""
    synchronize(device)
    before = 0
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    start = time.perf_counter()
    yield
    synchronize(device)
    record["seconds"] = time.perf_counter() - start
    on_cuda = device.startswith("cuda")
    record["peak_bytes"] = torch.cuda.max_memory_allocated() - before if on_cuda else None
    record["peak_absolute"] = torch.cuda.max_memory_allocated() if on_cuda else None


def matmul_rate(device: str, size: int) -> float | None:
    """bf16 FLOP/s of a ``size``-cubed matrix product on random data (median of 10 after 3 warm-ups)."""
    if not device.startswith("cuda"):
        return None
    a, b = (torch.randn(size, size, device=device, dtype=torch.bfloat16) for _ in range(2))
    times = []
    for i in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    return 2 * size**3 / statistics.median(times)


# ---------------------------------------------------------------------------------------------
# Part 1: the coupled log-prob pass
# ---------------------------------------------------------------------------------------------


def unfused_logprobs(lm, views, ids, attention):
    """The scored rows through the model's own head: ``[rows, V]`` logits materialised.  # -> [B, L]"""
    from diffugrpo_plugin.models.family import final_hidden_rows, position_ids_from_mask
    from diffugrpo_plugin.models.kernels import chunked_gathered_logprob

    num_views, rows, length = views.coef.shape
    stacked = views.noisy.reshape(num_views * rows, length)  # [V*B, L]
    stacked_attention = attention.repeat(num_views, 1)  # [V*B, L]
    targets = (views.coef.reshape(num_views * rows, length) != 0).flatten().nonzero(as_tuple=True)[0]  # [R]
    hidden_rows = targets - 1 if lm.shift_logits else targets
    with final_hidden_rows(lm.family, lm.module, hidden_rows):
        logits = lm.family.call(lm.module, stacked, stacked_attention, position_ids_from_mask(stacked_attention))
    row_logp = chunked_gathered_logprob(
        logits.reshape(-1, logits.shape[-1]), ids.repeat(num_views, 1).flatten().index_select(0, targets)
    )  # [R]
    flat = torch.zeros(num_views * rows * length, device=ids.device).index_put((targets,), row_logp)
    return (flat.view(num_views, rows, length) * views.coef).sum(0)  # [B, L]


def training_pass(lm, work, fused: bool) -> None:
    from diffugrpo_plugin.config import training_default
    from diffugrpo_plugin.core.logprobs import coupled_token_logprobs

    ids, attention, completion_mask, views = work
    logp = (
        coupled_token_logprobs(lm, views, ids, attention, chunk_rows=training_default(CHUNK_ROWS_KEY)).logp
        if fused
        else unfused_logprobs(lm, views, ids, attention)
    )  # [B, L]
    ((logp * completion_mask).sum() / completion_mask.sum()).backward()


def estimated_pass_bytes(shape, rows: int, prompt: int, completion: int, checkpointing: bool, lean: bool) -> dict:
    """The memory model's terms for the pass itself: activations and the fused head. The FSDP terms (gathered
    parameters, unsharded gradients) have no counterpart in an unsharded model whose ``.grad`` tensors exist
    before the pass; the ``step`` part checks them."""
    from diffugrpo_plugin.config import training_default
    from diffugrpo_plugin.tools.step_memory import StepSetup, memory_estimate

    setup = StepSetup(
        batch=rows,
        prompt_length=prompt,
        completion_length=completion,
        gpus=1,
        gradient_checkpointing=checkpointing,
        lean_mlp=lean,
        reference_dtype=None,
        chunk_rows=training_default(CHUNK_ROWS_KEY),
    )
    terms = [
        t
        for t in memory_estimate(shape, setup).terms
        if t.phase == "update" and t.name.startswith(("activations", "fused head"))
    ]
    return {t.name: t.bytes for t in terms}


def logprob_part(family: str, module, resolved, args, results: list) -> None:
    from diffugrpo_plugin.models.lean_mlp import make_lean

    lm = wrap(module, resolved)
    device, mask_id = args.device, lm.mask_token_id
    module.train()
    for p in module.parameters():
        p.requires_grad_(True)
    cases = [(args.rows, True), (args.rows_no_checkpointing, False)]
    for variant in PASS_VARIANTS:
        if variant.startswith("ours"):
            report = make_lean(module, lm.family.swiglu)
            if not report.installed:
                raise RuntimeError(f"{family}: no SwiGLU block was made lean ({report.summary()})")
        for rows, checkpointing in cases:
            if checkpointing:
                module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            else:
                module.gradient_checkpointing_disable()
            work = batch(rows, args.prompt, args.completion, mask_id, device)
            fused = not variant.startswith("model head")
            training_pass(lm, work, fused)  # warm-up; allocates every gradient, kept (zeroed) from here on
            record = {
                "part": "logprob",
                "family": family,
                "variant": variant,
                "rows": rows,
                "checkpointing": checkpointing,
                "seconds": [],
                "peak_bytes": [],
            }
            for _ in range(args.repeats):
                for p in module.parameters():
                    p.grad.zero_()
                one = {}
                with measured(device, one):
                    training_pass(lm, work, fused)
                record["seconds"].append(one["seconds"])
                record["peak_bytes"].append(one["peak_bytes"])
            tokens = rows * args.completion
            record["completion_tokens_per_s"] = tokens / statistics.median(record["seconds"])
            if fused:
                estimate = estimated_pass_bytes(
                    resolved.resolution.shape(),
                    rows,
                    args.prompt,
                    args.completion,
                    checkpointing,
                    variant.startswith("ours"),
                )
                record["estimate_bytes"] = sum(estimate.values())
                record["estimate_terms"] = estimate
            results.append(record)
            print_row(record)
            del work
    module.zero_grad(set_to_none=True)
    module.gradient_checkpointing_disable()
    results.append(head_values(family, lm, device))
    results.append(head_speed(family, lm, args))
    results.append(attention_kernels(family, lm, args))


def head_values(family: str, lm, device: str, rows: int = 2048) -> dict:
    """The fused head's log-probs and hidden-state gradient on the model's head weight against fp64; the
    model head's bf16 logits (then an fp32 log-softmax) against the same reference, for scale."""
    from diffugrpo_plugin.models.kernels import fused_head_logprob

    weight = lm.head_weight().detach()  # [V, H] bf16
    generator = torch.Generator(device=device).manual_seed(1)
    hidden = torch.randn(rows, weight.shape[1], device=device, generator=generator).to(weight.dtype)  # [R, H]
    hidden = (hidden * 3).to(weight.dtype).requires_grad_(True)  # logits of a few units, as a trained head gives
    targets = torch.randint(0, weight.shape[0], (rows,), device=device, generator=generator)  # [R]
    upstream = torch.randn(rows, device=device, generator=generator)  # [R]

    fused = fused_head_logprob(hidden, weight, targets)  # [R] fp32
    (fused * upstream).sum().backward()
    fused_grad = hidden.grad.double()
    reference_hidden = hidden.detach().double().requires_grad_(True)
    reference = torch.log_softmax(reference_hidden @ weight.double().T, -1).gather(-1, targets[:, None])[:, 0]
    (reference * upstream.double()).sum().backward()
    with torch.no_grad():
        plain = torch.log_softmax((hidden @ weight.T).float(), -1).gather(-1, targets[:, None])[:, 0]

    def relative(value, ref):
        return float((value.double() - ref).norm() / ref.norm())

    record = {
        "part": "head",
        "family": family,
        "rows": rows,
        "vocab": int(weight.shape[0]),
        "fused_logp_rel": relative(fused.detach(), reference.detach()),
        "fused_logp_max_abs": float((fused.detach().double() - reference.detach()).abs().max()),
        "fused_grad_rel": relative(fused_grad, reference_hidden.grad),
        "bf16_logits_logp_rel": relative(plain, reference.detach()),
        "bf16_logits_logp_max_abs": float((plain.double() - reference.detach()).abs().max()),
    }
    print(
        f"{family}: fused head vs fp64 ({rows} rows x {record['vocab']} vocab): log-prob rel. error "
        f"{record['fused_logp_rel']:.1e} (max |diff| {record['fused_logp_max_abs']:.1e}), hidden-gradient rel. "
        f"error {record['fused_grad_rel']:.1e}; the model head's bf16 logits: {record['bf16_logits_logp_rel']:.1e} "
        f"(max {record['bf16_logits_logp_max_abs']:.1e})"
    )
    return record


def head_speed(family: str, lm, args, widths=(1024, 4096, 16384), repeats: int = 5) -> dict:
    """Forward + backward of the vocabulary head alone on DiffuCoder's scored rows (2 x G x completion): the fused
    head at several slice widths (``kernels.SLICE_COLUMNS`` / ``SLICE_COLUMNS_GPU``) against the materialised
    logits."""
    from diffugrpo_plugin.models import kernels

    weight = lm.head_weight().detach().requires_grad_(True)  # [V, H]
    rows = 2 * args.rows * args.completion
    hidden = torch.randn(rows, weight.shape[1], device=args.device, dtype=weight.dtype, requires_grad=True)  # [R, H]
    targets = torch.randint(0, weight.shape[0], (rows,), device=args.device)  # [R]

    def fused():
        kernels.fused_head_logprob(hidden, weight, targets, chunk_rows=1024).sum().backward()

    def materialised():
        kernels.chunked_gathered_logprob(hidden @ weight.T, targets, chunk_rows=1024).sum().backward()

    record = {"part": "head_speed", "family": family, "rows": rows, "timings": {}}
    defaults = kernels.SLICE_COLUMNS, kernels.SLICE_COLUMNS_GPU
    try:
        for label, width, run in [
            *((f"fused, slices of {w}", w, fused) for w in widths),
            ("materialised logits", None, materialised),
        ]:
            if width:
                kernels.SLICE_COLUMNS = kernels.SLICE_COLUMNS_GPU = width
            run()
            times, peaks = [], []
            for _ in range(repeats):
                hidden.grad = weight.grad = None
                one = {}
                with measured(args.device, one):
                    run()
                times.append(one["seconds"])
                peaks.append(one["peak_bytes"])
            record["timings"][label] = {"seconds": times, "peak_bytes": peaks}
            print(
                f"{family}: head fwd+bwd, {rows} rows, {label:<24}{1e3 * statistics.median(times):>9.1f} ms"
                + (f"{statistics.median(peaks) / GIB:>8.2f} GiB" if peaks[0] is not None else "")
            )
    finally:
        kernels.SLICE_COLUMNS, kernels.SLICE_COLUMNS_GPU = defaults
    return record


def attention_kernels(family: str, lm, args) -> dict:
    """Which SDPA kernels one forward ran, without and with left padding (profiler op names)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    ids = torch.randint(0, lm.mask_token_id, (2, args.prompt + args.completion), device=args.device)  # [2, L]
    found = {}
    for label, pad in (("no padding", 0), ("left padding", 17)):
        attention = torch.ones_like(ids)
        attention[1, :pad] = 0
        with torch.no_grad(), profile(activities=activities) as prof:
            lm.logits(ids, attention)
            synchronize(args.device)
        names = {event.key for event in prof.key_averages()}
        found[label] = sorted(name for name in names if "attention" in name.lower() and name.startswith("aten::"))
    record = {"part": "sdpa", "family": family, "kernels": found}
    print(f"{family}: SDPA ops: " + "; ".join(f"{label}: {', '.join(ops) or '?'}" for label, ops in found.items()))
    return record


def print_row(record: dict) -> None:
    times = record["seconds"]
    line = (
        f"{record['family']:<7}{record['variant']:<34}{record['rows']:>5}"
        f"{'yes' if record['checkpointing'] else 'no':>6}{statistics.median(times):>9.3f}"
        f"{f'{min(times):.3f}-{max(times):.3f}':>15}{record['completion_tokens_per_s']:>10.0f}"
    )
    peaks = [p for p in record["peak_bytes"] if p is not None]
    if peaks:
        peak = statistics.median(peaks) / GIB
        line += f"{peak:>10.2f}"
        if "estimate_bytes" in record:
            estimate = record["estimate_bytes"] / GIB
            line += f"{estimate:>10.2f}{100 * (estimate - peak) / peak:>+8.0f}%"
    print(line, flush=True)


LOGPROB_HEADER = (
    f"{'family':<7}{'pass':<34}{'rows':>5}{'ckpt':>6}{'median s':>9}{'range':>15}{'tok/s':>10}"
    f"{'peak GiB':>10}{'est. GiB':>10}{'est-peak':>9}"
)


# ---------------------------------------------------------------------------------------------
# Part 2: the samplers
# ---------------------------------------------------------------------------------------------


def sampler_settings(family: str, steps: int, new_tokens: int) -> list[tuple[str, str, dict]]:
    """(label, sampler, options): the plain sampler and the training default's fast setting."""
    if family == "dream":
        plain = {"steps": steps, "temperature": 0.0}
        return [("plain", "entropy", plain), ("fast (training default)", "entropy", {**plain, **FAST})]
    plain = {"steps": steps, "block_length": min(32, new_tokens), "temperature": 0.0}
    return [
        ("plain, blocks of 32", "llada", plain),
        ("fast (training default), blocks of 32", "llada", {**plain, **FAST}),
    ]


def sampler_part(family: str, module, resolved, args, results: list) -> None:
    from diffugrpo_plugin.sampling import build_sampler

    lm = wrap(module.eval(), resolved)
    eos = int(resolved.config_object.eos_token_id)
    for rows in args.sampler_batches:
        generator = torch.Generator().manual_seed(rows)
        prompt = torch.randint(0, lm.mask_token_id, (rows, args.prompt), generator=generator).to(args.device)
        prompt_mask = torch.ones_like(prompt)
        baseline = None
        for label, name, options in sampler_settings(family, args.steps, args.completion):
            sampler = build_sampler(name, **options)
            record = {
                "part": "sampler",
                "family": family,
                "setting": label,
                "rows": rows,
                "options": options,
                "seconds": [],
                "peak_bytes": [],
            }
            blocks = max(1, args.completion // options.get("block_length", args.completion))
            warm = build_sampler(name, **{**options, "steps": blocks})  # one step per block: kernels loaded
            warm.generate(
                lm, prompt, prompt_mask, args.completion, eos_token_id=eos, pad_token_id=eos, seeds=list(range(rows))
            )
            for _ in range(args.repeats):
                one = {}
                with torch.no_grad(), measured(args.device, one):
                    out = sampler.generate(
                        lm,
                        prompt,
                        prompt_mask,
                        args.completion,
                        eos_token_id=eos,
                        pad_token_id=eos,
                        seeds=list(range(rows)),
                    )
                record["seconds"].append(one["seconds"])
                record["peak_bytes"].append(one["peak_bytes"])
            record["tokens_per_s"] = rows * args.completion / statistics.median(record["seconds"])
            record["forwards"] = out.forwards
            if baseline is None:
                baseline = out.completion_ids
            record["agreement"] = float((out.completion_ids == baseline).float().mean())
            results.append(record)
            times, peaks = record["seconds"], [p for p in record["peak_bytes"] if p is not None]
            print(
                f"{family:<7}{label:<40}{rows:>6}{statistics.median(times):>10.2f}"
                f"{f'{min(times):.2f}-{max(times):.2f}':>13}{record['tokens_per_s']:>10.0f}{out.forwards:>10}"
                f"{record['agreement']:>11.3f}" + (f"{statistics.median(peaks) / GIB:>10.2f}" if peaks else ""),
                flush=True,
            )


SAMPLER_HEADER = (
    f"{'family':<7}{'setting':<40}{'batch':>6}{'median s':>10}{'range':>13}{'tok/s':>10}"
    f"{'forwards':>10}{'agreement':>11}{'peak GiB':>10}"
)


# ---------------------------------------------------------------------------------------------
# Part 3: a training step under FSDP2 on one GPU
# ---------------------------------------------------------------------------------------------


@contextmanager
def one_process_group(device: str):
    import torch.distributed as dist

    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device).index or 0)
    port = 29500 + os.getpid() % 1000
    dist.init_process_group(
        "nccl" if device.startswith("cuda") else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def fsdp2(module: torch.nn.Module, resolved) -> torch.nn.Module:
    """verl's FSDP2 wrapping: each decoder layer (``_no_split_modules``) and an untied embedding a unit, then
    the root; bf16 compute, fp32 gradient reduction, fp32 sharded storage."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    layer_classes = set(module._no_split_modules or ())
    tied = resolved.resolution.head_tied
    units = [
        m
        for m in module.modules()
        if type(m).__name__ in layer_classes or (isinstance(m, torch.nn.Embedding) and not tied)
    ]
    for unit in units:
        fully_shard(unit, mp_policy=policy)
    fully_shard(module, mp_policy=policy)
    return module


def sync_rollout(policy: torch.nn.Module, rollout: torch.nn.Module) -> None:
    """The weight sync: every gathered parameter copied into the rollout's bf16 copy."""
    targets = dict(rollout.named_parameters())
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            full = parameter.full_tensor() if hasattr(parameter, "full_tensor") else parameter
            targets[name].copy_(full)


def ppo_loss(logp, old_logp, ref_logp, advantages, completion_mask, clip: float = 0.5, beta: float = 0.01):
    """PPO's clipped loss plus k3 KL to the reference, token-mean (DiffuCoder's settings).  # [B, L] -> []"""
    ratio = torch.exp(logp - old_logp)  # [B, L]
    surrogate = torch.minimum(ratio * advantages[:, None], ratio.clamp(1 - clip, 1 + clip) * advantages[:, None])
    log_ref_ratio = ref_logp - logp
    kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1  # [B, L]
    per_token = -surrogate + beta * kl
    return (per_token * completion_mask).sum() / completion_mask.sum()


def update_flops(shape, rows: int, prompt: int, completion: int, views: int = 3, scored_rows: int = 2) -> dict:
    """FLOPs of one coupled update: the body over every view's tokens, the fused head over the scored rows only
    (``scored_rows`` per completion token). ``hardware`` counts what runs with checkpointing (forward, recomputed
    forward, backward at twice the forward; the fused head recomputes its logits likewise); ``model`` what the
    maths needs (forward + backward, no recomputation), the numerator of MFU."""
    body = shape.parameters - shape.embedding_parameters - shape.head_parameters
    forward = (
        2 * body * views * rows * (prompt + completion)
        + 2 * shape.vocab * shape.hidden * scored_rows * rows * completion
    )
    return {"hardware": 4 * forward, "model": 3 * forward}


def first_matrix(module: torch.nn.Module) -> tuple[str, torch.Tensor]:
    """The first decoder-layer weight matrix and a copy of its full value (to see the update move it)."""
    name, parameter = next(
        (n, p) for n, p in module.named_parameters() if p.dim() == 2 and "embed" not in n and "wte" not in n
    )
    full = parameter.full_tensor() if hasattr(parameter, "full_tensor") else parameter
    return name, full.detach().clone()


def step_part(args, results: list) -> None:
    from diffugrpo_plugin.config import training_default
    from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
    from diffugrpo_plugin.models.lean_mlp import make_lean
    from diffugrpo_plugin.sampling import build_sampler
    from diffugrpo_plugin.tools.step_memory import StepSetup, memory_estimate

    device, rows, chunk_rows = args.device, args.step_rows, training_default(CHUNK_ROWS_KEY)
    resolved = resolve(family_config("dream", args.tiny, args.step_layers))
    shape = resolved.resolution.shape()
    trace = []

    def allocated(label: str) -> None:  # where the held memory comes from, as the models are built
        if device.startswith("cuda"):
            synchronize(device)
            trace.append((label, torch.cuda.memory_allocated()))

    with one_process_group(device):
        policy = build_model(resolved, device, torch.float32, seed=0)
        allocated("policy built (fp32)")
        make_lean(policy, wrap(policy, resolved).family.swiglu)
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        policy = fsdp2(policy.train(), resolved)
        allocated("policy sharded")
        reference = fsdp2(build_model(resolved, device, torch.float32, seed=0), resolved)
        for p in reference.parameters():
            p.requires_grad_(False)
        allocated("reference built and sharded")
        rollout = build_model(resolved, device, torch.bfloat16, seed=0)
        allocated("rollout copy built (bf16)")
        sync_rollout(policy, rollout)
        allocated("weights synced")
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6, betas=(0.9, 0.99), weight_decay=0.1)
        lm, ref_lm, rollout_lm = wrap(policy, resolved), wrap(reference, resolved), wrap(rollout, resolved)
        eos = int(resolved.config_object.eos_token_id)
        sampler = build_sampler("entropy", steps=32, temperature=1.0, top_p=0.95, **FAST)
        generator = torch.Generator().manual_seed(7)
        prompt = torch.randint(0, lm.mask_token_id, (1, args.prompt), generator=generator).repeat(rows, 1).to(device)
        steps = []
        watched, before = first_matrix(policy)
        for step in range(args.step_repeats):
            stages = {}
            synchronize(device)
            held = torch.cuda.memory_allocated() if device.startswith("cuda") else None
            with torch.no_grad(), measured(device, stages.setdefault("rollout", {})):
                out = sampler.generate(
                    rollout_lm,
                    prompt,
                    torch.ones_like(prompt),
                    args.completion,
                    eos_token_id=eos,
                    pad_token_id=eos,
                    seeds=[step * rows + r for r in range(rows)],
                )
            ids = torch.cat([prompt, out.completion_ids.to(device)], dim=1)  # [G, L]
            attention = torch.ones_like(ids)
            completion_mask = torch.zeros_like(ids, dtype=torch.bool)
            completion_mask[:, args.prompt :] = out.completion_mask.to(device).bool()
            views = coupled_views(ids, completion_mask, lm.mask_token_id, seed=step + 1)
            with torch.no_grad(), measured(device, stages.setdefault("old log-probs", {})):
                old_logp = coupled_token_logprobs(lm, views, ids, attention, chunk_rows=chunk_rows).logp
            with torch.no_grad(), measured(device, stages.setdefault("ref log-probs", {})):
                ref_logp = coupled_token_logprobs(ref_lm, views, ids, attention, chunk_rows=chunk_rows).logp
            advantages = torch.randn(rows, generator=generator).to(device)
            with measured(device, stages.setdefault("update", {})):
                logp = coupled_token_logprobs(lm, views, ids, attention, chunk_rows=chunk_rows).logp
                ppo_loss(logp, old_logp, ref_logp, advantages, completion_mask.float()).backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.2)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            with measured(device, stages.setdefault("weight sync", {})):
                sync_rollout(policy, rollout)
            steps.append({"held_bytes": held, "stages": stages, "forwards": out.forwards})
            allocated(f"after step {step + 1}")
        moved = not torch.equal(before, first_matrix(policy)[1])
        flops = update_flops(shape, rows, args.prompt, args.completion)
        setup = StepSetup(
            batch=rows,
            prompt_length=args.prompt,
            completion_length=args.completion,
            gpus=1,
            reference_dtype="fp32",
            reference_offloaded=False,  # this step keeps the reference's shards on the GPU (verl offloads them)
            rollout_micro_batch=rows,
            chunk_rows=chunk_rows,
        )
        estimate = memory_estimate(shape, setup)
    measured_steps = steps[1:] or steps  # the first step allocates AdamW's moments and compiles kernels
    record = {
        "part": "step",
        "layers": args.step_layers,
        "parameters": shape.parameters,
        "rows": rows,
        "steps": steps,
        "update_flops": flops,
        "allocated_trace": trace,
        "weights_moved": {watched: moved},
        "estimate": {
            "held_bytes": estimate.phase_bytes("held"),
            "update_bytes": estimate.phase_bytes("update"),
            "rollout_bytes": estimate.phase_bytes("rollout"),
            "total_bytes": estimate.total_bytes,
        },
    }
    print(
        f"\nstep: Dream-7B shape cut to {args.step_layers} layers ({shape.parameters / 1e9:.2f}B parameters), "
        f"G={rows}, prompt {args.prompt}, completion {args.completion}, FSDP2 on one device, fp32 states, bf16 compute"
    )
    for label, value in trace:
        print(f"  allocated {value / GIB:7.2f} GiB: {label}")
    print(f"{'stage':<16}{'median s':>10}{'range':>15}{'peak GiB':>10}")
    for stage in steps[0]["stages"]:
        times = [s["stages"][stage]["seconds"] for s in measured_steps]
        peaks = [s["stages"][stage]["peak_absolute"] for s in measured_steps if s["stages"][stage]["peak_absolute"]]
        print(
            f"{stage:<16}{statistics.median(times):>10.3f}{f'{min(times):.3f}-{max(times):.3f}':>15}"
            + (f"{max(peaks) / GIB:>10.2f}" if peaks else "")
        )
    update = statistics.median(s["stages"]["update"]["seconds"] for s in measured_steps)
    record["update_seconds"] = update
    record["update_flops_per_s"] = {kind: value / update for kind, value in flops.items()}
    print(
        f"update: {flops['hardware'] / 1e12:.1f} TFLOP run (with the recomputation; the head on the scored rows "
        f"only) in {update:.3f} s = {flops['hardware'] / update / 1e12:.0f} TFLOP/s; model FLOPs "
        f"{flops['model'] / update / 1e12:.0f} TFLOP/s; {watched} {'moved' if moved else 'DID NOT MOVE'}"
    )
    if device.startswith("cuda"):
        peak = max(s["stages"][stage]["peak_absolute"] for s in measured_steps for stage in s["stages"])
        held = statistics.median(s["held_bytes"] for s in measured_steps)
        record.update(measured_peak_bytes=peak, measured_held_bytes=held)
        print(
            f"memory: measured held {held / GIB:.2f} GiB, peak {peak / GIB:.2f} GiB; the memory model: held "
            f"{estimate.phase_bytes('held') / GIB:.2f}, peak (held + max(update, rollout)) "
            f"{estimate.total_gib:.2f} GiB ({100 * (estimate.total_bytes - peak) / peak:+.0f}% of the measured peak)"
        )
    results.append(record)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def environment(device: str) -> dict:
    record = {"part": "environment", "torch": torch.__version__, "cuda": torch.version.cuda, "device": device}
    if device.startswith("cuda"):
        properties = torch.cuda.get_device_properties(device)
        record.update(
            gpu=properties.name,
            memory_gib=properties.total_memory / GIB,
            sdpa_flash=torch.backends.cuda.flash_sdp_enabled(),
            matmul_bf16_flops=matmul_rate(device, 8192),
        )
    import transformers

    record["transformers"] = transformers.__version__
    return record


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny configs of the same classes (a CPU check)")
    parser.add_argument(
        "--parts", nargs="+", default=["logprob", "sampler", "step"], choices=["logprob", "sampler", "step"]
    )
    parser.add_argument("--families", nargs="+", default=["dream", "llada"], choices=["dream", "llada"])
    parser.add_argument("--rows", type=int, default=10, help="completions per pass (DiffuCoder's G)")
    parser.add_argument("--rows-no-checkpointing", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=200)
    parser.add_argument("--completion", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64, help="the samplers' denoising steps")
    parser.add_argument("--sampler-batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--step-layers", type=int, default=6, help="decoder layers of the FSDP2 step's model")
    parser.add_argument("--step-rows", type=int, default=10)
    parser.add_argument("--step-repeats", type=int, default=3)
    parser.add_argument("--json", help="write every record here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    results = [environment(args.device)]
    print(json.dumps(results[0]))
    failures, module = [], None

    def save():
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))

    started = time.perf_counter()
    for part in ("logprob", "step", "sampler"):  # the memory model's checks first
        if part not in args.parts:
            continue
        for family in args.families if part != "step" else ["dream"]:
            print(f"\n[{time.perf_counter() - started:.0f} s] {part}, {family}", flush=True)
            try:
                if part == "step":
                    step_part(args, results)
                    continue
                resolved = resolve(family_config(family, args.tiny))
                module = build_model(resolved, args.device, torch.bfloat16)
                print(LOGPROB_HEADER if part == "logprob" else SAMPLER_HEADER)
                (logprob_part if part == "logprob" else sampler_part)(family, module, resolved, args, results)
            except Exception:  # noqa: BLE001 - one part's failure must not hide the others' numbers
                failures.append(f"{part} ({family})")
                traceback.print_exc()
            finally:
                module = None
                gc.collect()  # the models hold reference cycles: free them before the next part measures
                if args.device.startswith("cuda"):
                    torch.cuda.empty_cache()
                save()
    save()
    if failures:
        print(f"failed: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
