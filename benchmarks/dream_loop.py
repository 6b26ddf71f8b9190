"""Our plain Dream sampler against Dream's own loop, same model, same prompts, same forwards, one process.

Issue 33 asks that our reference sampler be no slower than Dream's ``diffusion_generate`` at identical
settings. The baseline here is that loop written out plainly and batched, as Dream runs it: every step one
full forward of every row, the masked positions' logits through temperature, top-p, top-k and a softmax, a
token drawn (``torch.multinomial``) or taken (greedy), the positions ranked by negative entropy and the
``int(m * (1 - s / t))`` best unmasked. ``m`` is the batch's mean number of masked positions, as in Dream.
Ours is the ``entropy`` sampler with every fast-path lever off (the job's ``reference`` sampler in
``benchmarks/step.py``).

Both run greedy first: there the two must produce the same tokens, which shows they do the same work. Then
both sample as the job does (temperature 1, top-p 0.95, top-k 50), where only the time is compared: the two
draw their random numbers differently. The two are timed in turn, ``--repeats`` times, so drifting load
hits both alike; the table gives the median seconds, the range, and our median over the loop's.

    python benchmarks/dream_loop.py                      # warm-started tiny model, 16 rows, 64 tokens, 64 steps
    python benchmarks/dream_loop.py --model PATH --prompts 4 --generations 4 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sampler import pad_id, task_rows
from step import PLAIN_LEVERS

JOB_SAMPLING = {"temperature": 1.0, "top_p": 0.95, "top_k": 50}
LOOP = "Dream's loop"


@torch.no_grad()
def dream_loop(
    lm,
    ids: torch.Tensor,
    mask: torch.Tensor,
    new_tokens: int,
    steps: int,
    temperature: float,
    top_p: float | None,
    top_k: int | None,
    generator: torch.Generator,
    eps: float = 1e-3,
) -> torch.Tensor:
    """Dream's diffusion_generate, alg=entropy, for a left-padded batch; returns the completions.  # [B, N]

    Its filtering and ranking are its own, not ``sampling.decoding``'s, so it shares no code with the sampler
    it is timed against and the greedy equality test compares two independent implementations.
    """
    from diffugrpo_plugin.models.dlm import position_ids_from_mask

    rows = ids.shape[0]
    x = torch.cat([ids, ids.new_full((rows, new_tokens), lm.mask_token_id)], dim=1)  # [B, T]
    attention = torch.cat([mask, mask.new_ones((rows, new_tokens))], dim=1)  # [B, T]
    positions = position_ids_from_mask(attention)  # [B, T]
    timesteps = torch.linspace(1, eps, steps + 1)
    row_index = torch.arange(rows)[:, None]  # [B, 1]
    for i in range(steps):
        masked = x == lm.mask_token_id  # [B, T]
        logits = lm.logits(x, attention, positions)[masked]  # [M, V]
        if temperature > 0:
            logits = logits / temperature
        if top_p is not None and top_p < 1:
            ordered, order = logits.sort(dim=-1, descending=True)
            beyond = ordered.softmax(dim=-1).cumsum(dim=-1) > top_p
            beyond[:, 1:] = beyond[:, :-1].clone()
            beyond[:, 0] = False
            logits = logits.masked_fill(beyond.scatter(-1, order, beyond), torch.finfo(logits.dtype).min)
        if top_k is not None:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]  # [M, 1]
            logits = logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)
        probs = logits.softmax(dim=-1)  # [M, V]
        if temperature > 0:
            tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # [M]
        else:
            tokens = probs.argmax(dim=-1)  # [M]
        confidence = (probs * torch.log(probs + 1e-10)).sum(dim=-1)  # [M] negative entropy
        masked_per_row = masked.sum() / rows
        count = int(masked_per_row) if i == steps - 1 else int(masked_per_row * (1 - timesteps[i + 1] / timesteps[i]))
        if count == 0:
            continue
        scores = torch.full(x.shape, float("-inf"))  # [B, T]
        scores[masked] = confidence
        proposal = torch.full_like(x, lm.mask_token_id)
        proposal[masked] = tokens
        chosen = scores.topk(count, dim=-1).indices  # [B, count]
        x[row_index, chosen] = proposal[row_index, chosen]
    return x[:, ids.shape[1] :]


def timed(run) -> tuple[float, object]:
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


def spread(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):.3f} [{min(seconds):.3f}-{max(seconds):.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint (default: the warm-started tiny Dream-style model)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt (rows = prompts x this)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from diffugrpo_plugin.models.dlm import load_diffusion_lm
    from diffugrpo_plugin.sampling import build_sampler, left_pad
    from diffugrpo_plugin.sampling.denoising import cut_after_eos
    from diffugrpo_plugin.training.warm_start import default_warm_model_path

    torch.set_num_threads(args.threads)
    lm, tokenizer = load_diffusion_lm(args.model or default_warm_model_path(), "cpu")
    rows = task_rows("synthetic", args.prompts, None)
    texts = [
        tokenizer.apply_chat_template(list(row["prompt"]), tokenize=False, add_generation_prompt=True)
        for row in rows
        for _ in range(args.generations)
    ]
    ids, mask = left_pad([tokenizer.encode(text, add_special_tokens=False) for text in texts], pad_id(tokenizer))
    eos, pad = tokenizer.eos_token_id, pad_id(tokenizer)
    print(
        f"{ids.shape[0]} rows ({args.prompts} synthetic prompts x {args.generations}), {args.new_tokens} new tokens "
        f"in {args.steps} steps, {args.threads} thread(s), {args.repeats} repeats each, timed in turn\n"
    )

    results = {}
    for mode, sampling in (("greedy", {"temperature": 0.0, "top_p": None, "top_k": 50}), ("sampled", JOB_SAMPLING)):
        ours = build_sampler("entropy", steps=args.steps, **sampling, **PLAIN_LEVERS)
        generator = torch.Generator().manual_seed(0)

        def run_ours():
            return ours.generate(
                lm, ids, mask, args.new_tokens, eos_token_id=eos, pad_token_id=pad, seeds=list(range(ids.shape[0]))
            ).completion_ids

        def run_loop():
            return cut_after_eos(
                dream_loop(
                    lm,
                    ids,
                    mask,
                    args.new_tokens,
                    args.steps,
                    sampling["temperature"],
                    sampling["top_p"],
                    sampling["top_k"],
                    generator,
                ),
                eos,
                pad,
            )[0]

        run_ours(), run_loop()  # warm-up: first-call allocations are not the sampler's cost
        seconds = {"ours": [], LOOP: []}
        outputs = {}
        for _ in range(args.repeats):
            for label, run in (("ours", run_ours), (LOOP, run_loop)):
                elapsed, outputs[label] = timed(run)
                seconds[label].append(elapsed)
        agree = (outputs["ours"] == outputs[LOOP]).float().mean().item()
        results[mode] = (seconds, agree)

    header = f"{'mode':<9}{'ours s':>24}{'Dream loop s':>24}{'ours / loop':>13}{'same tokens':>13}"
    print(header + "\n" + "-" * len(header))
    for mode, (seconds, agree) in results.items():
        ratio = statistics.median(seconds["ours"]) / statistics.median(seconds[LOOP])
        print(
            f"{mode:<9}{spread(seconds['ours']):>24}{spread(seconds[LOOP]):>24}"
            f"{ratio:>13.3f}{(f'{agree:.1%}' if mode == 'greedy' else 'n/a'):>13}"
        )


if __name__ == "__main__":
    main()
