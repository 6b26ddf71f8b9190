"""The 7B/8B memory of a rollout and a training pass, simulated on a CPU at the real shapes, against the H100.

Dream-7B and LLaDA-8B are built from their published configs (benchmarks/gpu.py's) with every big tensor fake
(``diffugrpo_plugin.tools.simulated_memory``: shapes without data, every storage counted), and our real code runs
on them: the samplers at every setting the recipes and the H100 run used, and the coupled log-prob training pass
(forward + backward, fused head, lean MLP, gradient checkpointing). Each row's peak is the most alive at once above
the weights (the H100's ``max_memory_allocated`` minus what was allocated before), set against the H100's figure
where it measured the same thing (docs/results/h100.md) and against ``check-model``'s memory model
(``diffugrpo_plugin/tools/step_memory.py``).

Then, per GPU at the recipes' 8 workers: the simulated rollout and update peaks plus the sharded states the
memory model holds (per worker: fp32 params + AdamW moments / 8, the reference / 8 in host memory, the rollout's
bf16 copy whole), and per node (8 workers): host memory for the reference shards.

    python benchmarks/simulated_memory.py                 # every row (about 10 minutes on 2 cores)
    python benchmarks/simulated_memory.py --part sampler  # the samplers only
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from diffugrpo_plugin.tools.simulated_memory import DEVICE, GIB, SimulatedMemory  # noqa: E402
from diffugrpo_plugin.tools.step_memory import StepSetup, memory_estimate  # noqa: E402
from gpu import build_model, family_config, resolve, sampler_settings, training_pass, wrap  # noqa: E402

PROMPT, COMPLETION = 200, 256
# docs/results/h100.md: sampler peaks above the weights (64 forwards, greedy) and the training pass's ("ours")
H100_SAMPLER = {
    ("dream", "plain", 1): 0.87,
    ("dream", "fast", 1): 1.04,
    ("dream", "plain", 16): 13.92,
    ("dream", "fast", 16): 16.63,
    ("llada", "plain", 1): 0.36,
    ("llada", "fast", 1): 0.75,
    ("llada", "plain", 16): 5.82,
    ("llada", "fast", 16): 11.89,
}
H100_PASS = {"dream": 6.14, "llada": 6.37}  # 10 completions, checkpointing, fused head + lean MLP
# the recipes' rollout per worker (examples/diffucoder_7b, examples/llada_8b): the reference sampler
RECIPE_SAMPLER = {
    "dream": ("entropy", {"steps": 256, "temperature": 0.0, "micro_batch_size": 10}, 10),
    "llada": ("llada", {"steps": 128, "block_length": 32, "temperature": 0.0, "micro_batch_size": 8}, 8),
}
WORKERS = 8


def simulated_model(sim: SimulatedMemory, family: str):
    """The family's published shape, every weight fake (call inside ``sim``)."""
    resolved = resolve(family_config(family, tiny=False))
    with sim.fake_factory():
        module = build_model(resolved, "cpu", torch.bfloat16)
    return module, resolved


def sampler_peak(family: str, name: str, options: dict, rows: int) -> tuple[float, float]:
    """(peak above the weights in GiB, seconds the simulation took)."""
    from diffugrpo_plugin.sampling import build_sampler

    sim = SimulatedMemory()
    started = time.perf_counter()
    with sim:
        module, resolved = simulated_model(sim, family)
        lm = wrap(module.eval(), resolved)
        eos = int(resolved.config_object.eos_token_id)
        prompt = torch.randint(0, lm.mask_token_id, (rows, PROMPT), generator=torch.Generator().manual_seed(rows))
        with sim.stage("sampler") as stage, sim.zero_decisions(), torch.no_grad():
            build_sampler(name, **options).generate(
                lm,
                prompt,
                torch.ones_like(prompt),
                COMPLETION,
                eos_token_id=eos,
                pad_token_id=eos,
                seeds=list(range(rows)),
            )
    return (stage.peak[DEVICE] - stage.start[DEVICE]) / GIB, time.perf_counter() - started


def pass_peak(family: str, rows: int) -> float:
    """The coupled training pass's peak above the weights and their kept gradients, GiB."""
    from diffugrpo_plugin.models.lean_mlp import make_lean
    from gpu import batch

    sim = SimulatedMemory()
    with sim:
        module, resolved = simulated_model(sim, family)
        lm = wrap(module, resolved)
        module.train()
        make_lean(module, lm.family.swiglu)
        module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        work = batch(rows, PROMPT, COMPLETION, lm.mask_token_id, "cpu")
        training_pass(lm, work, fused=True)  # allocates every gradient, kept from here on (as on the H100)
        with sim.stage("pass") as stage:
            training_pass(lm, work, fused=True)
    return (stage.peak[DEVICE] - stage.start[DEVICE]) / GIB


def model_rollout_gib(family: str, rows: int, kv_cache: bool) -> float:
    shape = resolve(family_config(family, tiny=False)).resolution.shape()
    setup = StepSetup(
        batch=rows,
        prompt_length=PROMPT,
        completion_length=COMPLETION,
        rollout_micro_batch=rows,
        logits_shift=family == "dream",
        sampler_kv_cache=kv_cache,
    )
    return memory_estimate(shape, setup).phase_bytes("rollout") / GIB


def held_per_worker(family: str, rows: int) -> tuple[float, float]:
    """The memory model's held (GPU) and host terms per worker at 8 workers, GiB."""
    shape = resolve(family_config(family, tiny=False)).resolution.shape()
    setup = StepSetup(
        batch=5, prompt_length=PROMPT, completion_length=COMPLETION, gpus=WORKERS, rollout_micro_batch=rows
    )
    estimate = memory_estimate(shape, setup)
    return estimate.phase_bytes("held") / GIB, estimate.phase_bytes("host") / GIB


def relative(simulated: float, measured: float | None) -> str:
    return f"{100 * (simulated - measured) / measured:+.0f}%" if measured else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["sampler", "pass", "all"], default="all")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{'model':<7}{'setting':<42}{'rows':>5}{'simulated':>11}{'H100':>7}{'sim-H100':>9}{'model':>8}{'s':>6}")
    rollout = {}
    if args.part in ("sampler", "all"):
        for family in ("dream", "llada"):
            for label, name, options in sampler_settings(family, 64, COMPLETION):
                for rows in (1, 16):
                    # the H100 ran each batch at once (no micro-batches: what the memory budget now splits)
                    peak, seconds = sampler_peak(family, name, {**options, "micro_batch_size": rows}, rows)
                    measured = H100_SAMPLER.get((family, label.split(" ")[0].rstrip(","), rows))
                    estimate = model_rollout_gib(family, rows, options.get("kv_cache", False))
                    print(
                        f"{family:<7}{label:<42}{rows:>5}{peak:>11.2f}{measured or '':>7}"
                        f"{relative(peak, measured):>9}{estimate:>8.2f}{seconds:>6.0f}",
                        flush=True,
                    )
            name, options, rows = RECIPE_SAMPLER[family]
            peak, seconds = sampler_peak(family, name, options, rows)
            rollout[family] = peak
            label = f"recipe: reference, {options['steps']} steps"
            print(
                f"{family:<7}{label:<42}{rows:>5}{peak:>11.2f}{'':>7}{'':>9}"
                f"{model_rollout_gib(family, rows, False):>8.2f}{seconds:>6.0f}",
                flush=True,
            )
    update = {}
    if args.part in ("pass", "all"):
        for family in ("dream", "llada"):
            started = time.perf_counter()
            update[family] = pass_peak(family, 10)
            measured = H100_PASS[family]
            print(
                f"{family:<7}{'training pass, 10 completions, checkpointing':<42}{10:>5}{update[family]:>11.2f}"
                f"{measured:>7}{relative(update[family], measured):>9}{'':>8}{time.perf_counter() - started:>6.0f}",
                flush=True,
            )
    if rollout and update:
        print(f"\nper GPU at {WORKERS} workers (held from the memory model + the simulated phase peaks), GiB:")
        for family in ("dream", "llada"):
            rows = RECIPE_SAMPLER[family][2]
            held, host = held_per_worker(family, rows)
            print(
                f"  {family}: held {held:.2f}, rollout peak {held + rollout[family]:.2f}, update peak "
                f"{held + update[family]:.2f} (+ sharded grads, gathered units: check-model); host {host:.2f} "
                f"per worker, {WORKERS * host:.2f} per node"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
