"""A whole training step two ways, same model, same settings, one run: DiffuCoder's trainer written out
reference-style (one process, plain loops) against our job through verl.

Settings (issue 33's): 4 prompts x 4 completions, 64 tokens in 64 diffusion steps, 2 iterations, beta 0.01,
clip 0.5, fp32, lr 1e-4, code x2.0 + code_format x0.5 in the sandbox, the warm-started tiny model. That model
was fine-tuned on 48-token completions and writes no passing code at 64 (its mean reward row says so);
``--new-tokens 48 --diffusion-steps 32``, the job's own lengths, compares the samplers where it does.

* **reference-style**, in a process of its own, as DiffuCoder's TRL trainer does a step: generate with Dream's
  loop (``dream_loop.py``: entropy, temperature 1, top-p 0.95, top-k 50); score the rewards; leave-one-out
  advantages; for each iteration's mask seed, the three coupled views (DiffuCoder's ``forward_process``)
  through the policy and the reference, full-vocabulary log-softmax in fp32 (old and reference log-probs);
  then per iteration the same views with gradients, the clipped loss plus k3 KL, token mean, gradient norm
  clipped at 0.2, one AdamW step.
* **ours**: ``python -m verl.trainer.main algorithm=coupled_grpo`` with the same settings
  (``ppo_epochs=2`` is the iterations), once with the reference sampler (every fast-path lever off) and
  once with the job's fast sampler; stage times from verl's ``timing_s/*`` (rollout includes the reward
  scoring that overlaps it).

The first step of each is start-up and is left out; the table gives the median and range of the rest and
the ratio of ours to the reference-style median; then each run's mean reward per step (mean and range over
the same steps: a check that the samplers' completions score alike). Every run reads the same shuffle of the
train rows in order, so step k samples the same prompts in each (a step's cost follows its longest prompt), and
the ``step, paired by step`` row gives the median and range of the steps' own ratios. Memory: the peak of the
summed proportional set size (PSS) of each run's whole process tree, sandboxes included, read whenever the tree's
resident size reaches a new high and at least every 5 s (``peak_pss_of``).

    python benchmarks/whole_step.py                  # 6 steps each, about 12 minutes on 2 cores
    python benchmarks/whole_step.py --new-tokens 48 --diffusion-steps 32   # the job's lengths: rewards above 0
    python benchmarks/whole_step.py --steps 4 --model PATH
    python benchmarks/whole_step.py --steps 5 --shape 512,8,8,4,1408 --random    # the larger random config (24.5M)
    python benchmarks/whole_step.py --shape 256,8,8,4,704 --new-tokens 48 --diffusion-steps 32   # a fine-tuned 6.3M
    python benchmarks/whole_step.py -o actor_rollout_ref.model.diffusion.lean_mlp=false   # a setting of ours
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
PROMPTS, GENERATIONS, ITERATIONS, BETA, CLIP, LR = 4, 4, 2, 0.01, 0.5, 1e-4
JOB_SETTINGS = [
    f"data.train_batch_size={PROMPTS}",
    f"actor_rollout_ref.rollout.n={GENERATIONS}",
    f"actor_rollout_ref.actor.ppo_epochs={ITERATIONS}",
    f"actor_rollout_ref.actor.kl_loss_coef={BETA}",
    f"actor_rollout_ref.actor.optim.lr={LR}",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
]
PSS_EVERY_S = 5.0  # the longest the peak-memory sampler goes without a PSS reading (see peak_pss_of)
# one fixed shuffle of the train rows, read in order by every run: step k gets the same prompts in each
PROMPT_ORDER_SEED = 0
REWARD = ("mean reward", ("critic/score/mean",))  # code x2.0 + code_format x0.5, mean over the step's completions
SAMPLER_CALLS = ("sampler calls", ("rollout/sampler_batches",))  # each pays every diffusion forward
STEP_PARTS = ("rollout + reward", "old + ref log-probs", "update")  # the reference-style step is their sum
STAGES = (
    ("rollout + reward", ("timing_s/gen",)),
    # the sampler's own seconds: the reference-style loop's; ours summed over the step's sampler calls (the rest of
    # our rollout is batching the requests across processes and the reward scoring after the last call)
    ("of which sampling", ("timing_s/rollout_sampling",)),
    ("old + ref log-probs", ("timing_s/old_log_prob", "timing_s/ref")),
    ("update", ("timing_s/update_actor",)),
    ("step", ("timing_s/step",)),
)
ROWS = (*STAGES, REWARD, SAMPLER_CALLS)  # every row a run records


def coupled_logprobs(module, lm, input_ids, attention, positions, prompt_length: int, seed: int):
    """DiffuCoder's coupled per-token log-probs of the completion, written plainly.  # [B, N]"""
    import torch

    from diffugrpo_plugin.diffucoder_compat import forward_process
    from diffugrpo_plugin.models.dlm import align_logits

    rows, length = input_ids.shape
    prompt_index = torch.arange(length) < prompt_length  # [T]
    noisy, weights, in_v2 = forward_process(input_ids, prompt_index, lm.mask_token_id, seed)
    views = torch.cat(noisy)  # [3B, T]
    logits = align_logits(
        lm.family.call(module, views, attention.repeat(3, 1), positions.repeat(3, 1)), lm.shift_logits
    )  # [3B, T, V]
    logp = logits.float().log_softmax(dim=-1).gather(-1, input_ids.repeat(3, 1).unsqueeze(-1)).squeeze(-1)  # [3B, T]
    full, first, second = logp.split(rows)  # [B, T] each
    combined = (full * weights[0] + torch.where(in_v2, first * weights[1], second * weights[2])) / 2  # [B, T]
    return combined[:, prompt_length:]  # [B, N]


def train_rows_in_order() -> list[dict]:
    """The synthetic train rows in the order every run reads them.

    Each step's cost grows with its longest prompt (51 to 112 tokens here), so runs that drew their prompts in
    different orders would compare different work: one fixed shuffle, read in order by the reference-style loop
    and by our job (``data.shuffle=false``), gives each step the same prompts in every run.
    """
    import random

    from diffugrpo_plugin.data import prepare

    rows = prepare("synthetic", "train")
    random.Random(PROMPT_ORDER_SEED).shuffle(rows)
    return rows


def data_settings(workdir: Path) -> list[str]:
    """Our job reads :func:`train_rows_in_order` in order."""
    from diffugrpo_plugin.data.rows import write_parquet

    path = write_parquet(train_rows_in_order(), workdir / "train_in_order.parquet")
    return [f"data.train_files={path}", "data.shuffle=false"]


SHAPE_FIELDS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size")


def spec_of_shape(shape: str):
    """``--shape``'s ``HIDDEN,LAYERS,HEADS,KV_HEADS,MLP`` as a Dream-style ``TinySpec``; ``ValueError`` saying what
    to fix otherwise."""
    from diffugrpo_plugin.models.tiny import TinySpec

    parts = shape.split(",")
    if len(parts) != len(SHAPE_FIELDS) or not all(part.strip().isdecimal() and int(part) > 0 for part in parts):
        raise ValueError(f"--shape takes five positive integers, HIDDEN,LAYERS,HEADS,KV_HEADS,MLP; got '{shape}'")
    return TinySpec(**dict(zip(SHAPE_FIELDS, map(int, parts))))


def model_of_shape(spec, random_weights: bool) -> str:
    """The cached tiny model of ``spec``, built on first use: randomly initialised, or warm-started by the
    default job's recipe (masked SFT on the synthetic ``warm_start`` functions, ``WarmStart``)."""
    from diffugrpo_plugin.models.tiny import tiny_model_path
    from diffugrpo_plugin.training.warm_start import warm_model_path

    return tiny_model_path(spec) if random_weights else warm_model_path(spec)


def length_settings(new_tokens: int, diffusion_steps: int) -> list[str]:
    return [
        f"data.max_response_length={new_tokens}",
        f"actor_rollout_ref.rollout.engine_kwargs.diffusion.steps={diffusion_steps}",
    ]


def reference_style(steps: int, model: str, new_tokens: int, diffusion_steps: int, out: Path) -> None:
    """Runs ``steps`` reference-style steps in this process; writes each step's stage seconds to ``out``."""
    import torch

    from diffugrpo_plugin.models.dlm import load_diffusion_lm, position_ids_from_mask
    from diffugrpo_plugin.rewards.spec import RewardSpec
    from diffugrpo_plugin.sampling import left_pad
    from diffugrpo_plugin.sampling.denoising import cut_after_eos
    from dream_loop import JOB_SAMPLING, dream_loop
    from sampler import pad_id

    torch.set_num_threads(os.cpu_count() or 1)
    lm, tokenizer = load_diffusion_lm(model, "cpu")
    policy, reference = lm.module, copy.deepcopy(lm.module).eval()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=LR, betas=(0.9, 0.99), weight_decay=0.1)
    all_rows = train_rows_in_order()
    generator = torch.Generator().manual_seed(0)
    eos, pad = tokenizer.eos_token_id, pad_id(tokenizer)
    spec = RewardSpec.from_config({})  # the framework's default: DiffuCoder's code x2.0 + code_format x0.5
    timings = []
    for step in range(steps):
        rows = [row for row in all_rows[step * PROMPTS : (step + 1) * PROMPTS] for _ in range(GENERATIONS)]
        texts = [
            tokenizer.apply_chat_template(list(row["prompt"]), tokenize=False, add_generation_prompt=True)
            for row in rows
        ]
        ids, mask = left_pad([tokenizer.encode(text, add_special_tokens=False) for text in texts], pad)
        seconds = {}
        policy.eval()
        started = time.perf_counter()
        completion = dream_loop(
            lm,
            ids,
            mask,
            new_tokens,
            diffusion_steps,
            JOB_SAMPLING["temperature"],
            JOB_SAMPLING["top_p"],
            JOB_SAMPLING["top_k"],
            generator,
        )  # [B, N]
        seconds["of which sampling"] = time.perf_counter() - started
        completion, kept = cut_after_eos(completion, eos, pad)  # [B, N] each
        answers = [tokenizer.decode(row[: int(n)], skip_special_tokens=True) for row, n in zip(completion, kept.sum(1))]
        columns = {key: [row["extra_info"][key] for row in rows] for key in rows[0]["extra_info"]}
        rewards = torch.tensor([spec.total(scored.values) for scored in spec.score(answers, columns)])  # [B]
        seconds["rollout + reward"] = time.perf_counter() - started

        grouped = rewards.view(PROMPTS, GENERATIONS)  # [P, G]
        advantages = (grouped - (grouped.sum(1, keepdim=True) - grouped) / (GENERATIONS - 1)).view(-1, 1)  # [B, 1]
        input_ids = torch.cat([ids, completion], dim=1)  # [B, T]
        attention = torch.cat([mask, kept], dim=1)  # [B, T]
        positions = position_ids_from_mask(attention)  # [B, T]
        seeds = torch.randint(0, 2**31, (ITERATIONS,), generator=generator).tolist()
        started = time.perf_counter()
        with torch.no_grad():
            old = [coupled_logprobs(policy, lm, input_ids, attention, positions, ids.shape[1], s) for s in seeds]
            ref = [coupled_logprobs(reference, lm, input_ids, attention, positions, ids.shape[1], s) for s in seeds]
        seconds["old + ref log-probs"] = time.perf_counter() - started

        started = time.perf_counter()
        policy.train()
        weight = kept.float()  # [B, N]
        for k, seed in enumerate(seeds):
            new = coupled_logprobs(policy, lm, input_ids, attention, positions, ids.shape[1], seed)  # [B, N]
            ratio = torch.exp(new - old[k])
            surrogate = torch.min(ratio * advantages, ratio.clamp(1 - CLIP, 1 + CLIP) * advantages)
            gap = ref[k] - new
            kl = torch.exp(gap) - gap - 1
            loss = ((-surrogate + BETA * kl) * weight).sum() / weight.sum()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.2)
            optimizer.step()
        seconds["update"] = time.perf_counter() - started
        seconds["step"] = sum(seconds[part] for part in STEP_PARTS)
        timings.append({**seconds, REWARD[0]: rewards.mean().item(), SAMPLER_CALLS[0]: 1})
        print(f"reference-style step {step + 1}/{steps}: {seconds['step']:.1f} s", file=sys.stderr, flush=True)
    out.write_text(json.dumps(timings))


def peak_pss_of(command: list[str], env: dict[str, str], cwd: Path) -> int:
    """Runs ``command``; returns the peak summed PSS (KiB) of its process tree.

    A PSS reading walks the page tables of every process in the tree (70 ms median on the tiny job's tree, under
    load): read every 0.5 s it took 5-7% of this 2-core machine from the job being timed, more from our job's eight
    processes than from the reference-style one. So the tree's resident size (the kernel's counters, cheap) is read
    every 0.25 s, and PSS when that passes its highest so far by 1%, and at least every ``PSS_EVERY_S`` seconds.
    """
    from processes import resident_kib, snapshot, tree

    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: a chatty job never blocks on a full pipe
        job = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=errors, text=True, start_new_session=True
        )
        peak = highest_resident = 0
        last_reading = -PSS_EVERY_S
        while job.poll() is None:
            resident = sum(resident_kib(pid) for pid in tree(job.pid))
            if resident > highest_resident * 1.01 or time.monotonic() - last_reading >= PSS_EVERY_S:
                highest_resident = max(highest_resident, resident)
                peak = max(peak, sum(pss for _, _, pss, _ in snapshot(job.pid)))
                last_reading = time.monotonic()
            time.sleep(0.25)
        if job.returncode:
            errors.seek(0)
            raise SystemExit(f"{' '.join(command)} failed (exit {job.returncode}):\n{errors.read()[-3000:]}")
    return peak


def run_ours(label: str, steps: int, model: str, sampler_options: list[str], settings: list[str], workdir: Path):
    from diffugrpo_plugin.tools.plotting import find_event_dir, read_scalars
    from step import SAMPLER_KEY

    tensorboard = workdir / label / "tensorboard"
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main",
        "algorithm=coupled_grpo",
        *JOB_SETTINGS,
        f"actor_rollout_ref.model.path={model}",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={workdir / label / 'checkpoints'}",
        f"hydra.run.dir={workdir / label / 'hydra'}",
        *[f"++{SAMPLER_KEY}.{option}" for option in sampler_options],
        *settings,
    ]
    peak = peak_pss_of(command, {**os.environ, "TENSORBOARD_DIR": str(tensorboard)}, workdir)
    scalars = read_scalars(find_event_dir(tensorboard))
    split = {}
    for stage, tags in ROWS:
        per_tag = [dict(zip(scalars[tag].steps, scalars[tag].values)) for tag in tags if tag in scalars]
        later = sorted(step for step in per_tag[0] if step > 1)
        split[stage] = [sum(values[step] for values in per_tag) for step in later]
    print(f"{label}: done", flush=True)
    return split, peak


def run_reference_style(steps: int, model: str, new_tokens: int, diffusion_steps: int, workdir: Path):
    out = workdir / "reference_style.json"
    command = [
        sys.executable,
        __file__,
        "--reference-style-worker",
        str(out),
        "--steps",
        str(steps),
        "--model",
        model,
        "--new-tokens",
        str(new_tokens),
        "--diffusion-steps",
        str(diffusion_steps),
    ]
    peak = peak_pss_of(
        command,
        {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCHMARKS), os.environ.get("PYTHONPATH")]))},
        workdir,
    )
    timings = json.loads(out.read_text())[1:]
    print("reference-style: done", flush=True)
    return {stage: [t[stage] for t in timings] for stage, _ in ROWS}, peak


def print_table(runs: dict[str, tuple[dict[str, list[float]], int]]) -> None:
    baseline, baseline_peak = runs["reference-style"]
    labels = list(runs)
    print(
        "\nseconds per step, median [range] of steps 2..N; 'x' = reference-style median / this run's median "
        "(above 1: faster than the reference-style step)"
    )
    header = f"{'stage':<22}" + "".join(f"{label:>30}" for label in labels)
    print(header + "\n" + "-" * len(header))
    for stage, _ in STAGES:
        cells = []
        for label in labels:
            values = runs[label][0][stage]
            ratio = statistics.median(baseline[stage]) / statistics.median(values)
            cells.append(f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}] x{ratio:.2f}")
        print(f"{stage:<22}" + "".join(f"{cell:>30}" for cell in cells))
    # the same step's prompts in every run: each step's own ratio, without the spread between steps' prompts
    cells = []
    for label in labels:
        ratios = [theirs / this for theirs, this in zip(baseline["step"], runs[label][0]["step"])]
        cells.append(f"x{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
    print(f"{'step, paired by step':<22}" + "".join(f"{cell:>30}" for cell in cells))
    for row, _ in (REWARD, SAMPLER_CALLS):  # means: a check that the runs compare, not a speed
        values = [runs[label][0][row] for label in labels]
        cells = [f"{statistics.mean(v):.2f} [{min(v):.2f}-{max(v):.2f}]" for v in values]
        print(f"{row:<22}" + "".join(f"{cell:>30}" for cell in cells))
    print(
        f"{'peak PSS, whole tree':<22}"
        + "".join(f"{f'{peak / 1024:.0f} MiB x{peak / baseline_peak:.2f}':>30}" for _, peak in runs.values())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="steps per run (the first is not counted)")
    parser.add_argument("--model", default=None, help="checkpoint (default: the warm-started tiny Dream-style model)")
    parser.add_argument(
        "--shape",
        help="instead of --model: a tiny Dream-style model of this shape, HIDDEN,LAYERS,HEADS,KV_HEADS,MLP, built once "
        "into the cache and warm-started by the default job's recipe (256,8,8,4,704: about 36 minutes on 2 cores)",
    )
    parser.add_argument("--random", action="store_true", help="with --shape: random weights, no warm start")
    parser.add_argument("--new-tokens", type=int, default=64, help="completion length (issue 33's: 64; the job's: 48)")
    parser.add_argument("--diffusion-steps", type=int, default=64, help="issue 33's: 64; the job's: 32")
    parser.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        help="a Hydra override added to both of our runs (to try a setting of ours; the "
        "reference-style step is unchanged)",
    )
    parser.add_argument("--reference-style-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2: the first step is start-up and is not counted")
    if args.shape is not None and args.model is not None:
        parser.error("pass --model or --shape, not both")
    if args.random and args.shape is None:
        parser.error("--random needs --shape")
    if args.shape is not None:
        try:
            spec = spec_of_shape(args.shape)
        except ValueError as error:
            parser.error(str(error))
        args.model = model_of_shape(spec, args.random)
    if args.model is None:
        from diffugrpo_plugin.training.warm_start import default_warm_model_path

        args.model = default_warm_model_path()
    if args.reference_style_worker:
        reference_style(args.steps, args.model, args.new_tokens, args.diffusion_steps, args.reference_style_worker)
        return
    from step import REFERENCE_SAMPLER

    with tempfile.TemporaryDirectory(prefix="diffugrpo-whole-step-") as workdir:
        settings = [
            *length_settings(args.new_tokens, args.diffusion_steps),
            *data_settings(Path(workdir)),
            *args.override,
        ]
        runs = {
            "reference-style": run_reference_style(
                args.steps, args.model, args.new_tokens, args.diffusion_steps, Path(workdir)
            ),
            "ours, reference sampler": run_ours(
                "reference", args.steps, args.model, list(REFERENCE_SAMPLER), settings, Path(workdir)
            ),
            "ours, fast sampler": run_ours("fast", args.steps, args.model, ["fast_path=true"], settings, Path(workdir)),
        }
    print_table(runs)


if __name__ == "__main__":
    main()
