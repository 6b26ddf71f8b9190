"""How much the sequence log-likelihood estimate, and its gradient, vary across mask draws: coupled
sampling against d1's one-step estimate, one random mask and K random masks, at equal forward passes.

Coupled-GRPO's case (DiffuCoder) is that its three views (the completion fully masked, then a
complementary pair in which every completion token is masked exactly once) estimate the completion's
log-likelihood with less variance than the alternatives at the same cost. This script measures that on a
model and on completions that model sampled itself. Every estimator is a registered masker scored by the
training engine's own pass (:func:`diffugrpo_plugin.core.logprobs.coupled_token_logprobs`):

* ``coupled``: one draw of the ``coupled`` masker (3 views, so 3 forward passes);
* ``d1 x3``: d1's one-step estimate (the ``d1`` masker: completion fully masked, prompt tokens masked at
  15%), averaged over 3 draws, so 3 passes;
* ``random x1``: one random mask (the ``sft`` masker, LLaDA's: ``t ~ U(eps, 1)``, each completion token
  masked with probability ``t``, weight ``1/t``), 1 pass;
* ``random x3``: the mean of 3 independent random masks, 3 passes (K follows ``--passes``).

For each completion ``b`` an estimate is ``S_b = sum_l logp[b, l]`` over its completion tokens (the
quantity whose differences drive the policy ratio). Per estimator, ``--draws`` estimates are drawn, each
from fresh mask seeds. Reported, per estimator:

* ``mean S``: the estimate's mean over draws, averaged over completions. The estimators do not estimate
  the same number: coupled's weights sum to 1.5 per token in expectation (DiffuCoder's), d1's is the
  log-likelihood with nothing visible (a biased, nearly deterministic estimate), the random masks' is the
  masked-diffusion ELBO. So variances are compared on a scale-free footing too:
* ``var S`` (the variance across draws, averaged over completions) and ``CV`` = ``sqrt(var S) / |mean S|``;
* ``grad var``: the total variance ``E ||g - E g||^2`` of the gradient ``g`` of the batch's token-mean
  estimate with respect to the model's parameters (``--grad-params`` restricts it to names matching a
  regular expression, for a large checkpoint), and ``rel grad var`` = that over ``||E g||^2``;
* ``x coupled``: each estimator's ``CV`` and ``rel grad var`` over coupled's (above 1: coupled varies less);
  ``(x/ f)`` is its approximate 95% interval, the ratio divided or multiplied by ``f``.

Confidence intervals (95%) come from batch means: the draws are split into ``--groups`` equal groups, the
statistic is computed in each, and the interval is the groups' mean +- t(0.975, groups-1) x their
standard error. A plot of ``CV`` and ``rel grad var`` with those intervals is written to ``--plot``.

    python benchmarks/estimator_variance.py                       # warm-started tiny model, ~2 min on 2 cores
    python benchmarks/estimator_variance.py --model PATH --completions 4 --draws 100 --grad-params 'lm_head'
    python benchmarks/estimator_variance.py --random-model --draws 40  # the untrained tiny model (a smoke run)
    python benchmarks/estimator_variance.py --published  # also EBPO's, SPG's and trajectory replay's (#61)

``--published`` adds the estimators of issue 61, each at ``K`` forward passes:

* ``ebpo xK``: EBPO's per-block stratified masking, ``K`` views, blocks of ``PUBLISHED_BLOCK`` tokens;
* ``spg elbo xK`` / ``spg eubo xK``: SPG's block-wise views (``K`` of them, one draw), combined into its lower bound
  (the estimate of a positive advantage) or into its upper bound alone (``omega = 1``, a non-positive advantage's
  term: the log-mean-exp over views, ``beta = 1.5``), through the masker's own ``combine``;
* ``trace replay``: trajectory replay of the completions' own denoising trace (sampled with it kept), steps merged
  in ``ceil(sampler steps / K)`` groups so that it takes about ``K`` passes. Its views follow the trace alone: no
  mask is drawn, so the estimate does not vary across draws (its randomness is the rollout's), and it estimates the
  log-likelihood of the trajectory the sampler took, not the completion's ELBO.
"""

from __future__ import annotations

import argparse
import inspect
import math
import re
import statistics
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from diffugrpo_plugin.core.estimators.ebpo import make_ebpo
from diffugrpo_plugin.core.estimators.spg import make_spg
from diffugrpo_plugin.core.estimators.trace_replay import make_trace_replay
from diffugrpo_plugin.core.masking import Masker, make_coupled, make_d1, make_sft
from diffugrpo_plugin.core.views import MaskedViews

# t quantiles (0.975) by degrees of freedom: the batch-means interval with few groups needs Student's t
T_975 = {
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    14: 2.145,
    15: 2.131,
    19: 2.093,
    24: 2.064,
    29: 2.045,
    39: 2.023,
    49: 2.010,
}

Scorer = Callable[[MaskedViews], torch.Tensor]
"""views [V, B, L] -> each view's log-prob of the tokens it scores, ``log p(x | noisy[v])`` where ``coef[v] != 0``,
0 elsewhere [V, B, L] (what the training engine's pass hands a masker's ``combine``)."""
PUBLISHED_BLOCK = 16  # algorithm=ebpo / spg's block_length on the default job


@dataclass(frozen=True)
class Estimator:
    """A masker and how many of its draws are averaged into one estimate."""

    name: str
    masker: Masker
    draws_per_estimate: int = 1
    # the advantage's sign a masker's combine() is told (SPG: positive -> the ELBO, not -> its upper-bound side);
    # None: the passes before the advantages
    positive: bool | None = None


def estimators(
    passes: int = 3, eps: float = 1e-3, published: bool = False, trace_steps: int | None = None
) -> list[Estimator]:
    """The four estimators of the table, each costing ``passes`` forward passes but the single random mask
    (``eps``: the random masks' smallest mask rate, LLaDA's 1e-3 by default); with ``published`` also EBPO's, SPG's
    ELBO and EUBO at ``passes`` views (blocks of ``PUBLISHED_BLOCK`` tokens) and, given the sampler's ``trace_steps``,
    trajectory replay with ``ceil(trace_steps / passes)`` steps a view."""
    chosen = [
        Estimator("coupled", make_coupled()),
        Estimator(f"d1 x{passes}", make_d1(), passes),
        Estimator("random x1", make_sft(eps)),
        Estimator(f"random x{passes}", make_sft(eps), passes),
    ]
    if published:
        chosen += [
            Estimator(f"ebpo x{passes}", make_ebpo(block_length=PUBLISHED_BLOCK, num_views=passes)),
            Estimator(f"spg elbo x{passes}", make_spg(block_length=PUBLISHED_BLOCK, num_views=passes)),
            Estimator(
                f"spg eubo x{passes}",
                make_spg(block_length=PUBLISHED_BLOCK, num_views=passes, omega=1.0),
                positive=False,
            ),
        ]
        if trace_steps is not None:
            chosen.append(Estimator("trace replay", make_trace_replay(shrink=math.ceil(trace_steps / passes))))
    return chosen


@dataclass
class Batch:
    """Prompts followed by completions, as the engine scores them."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    completion_mask: torch.Tensor  # [B, L] bool
    prompt_mask: torch.Tensor  # [B, L] bool
    mask_id: int
    trace: torch.Tensor | None = None  # [B, L] the step the sampler decided each completion token at, -1 elsewhere


def estimate(estimator: Estimator, scorer: Scorer, batch: Batch, seeds: torch.Tensor) -> tuple[torch.Tensor, int]:
    """One estimate ``S_b`` per completion and the forward passes it took.  # seeds [D, B] -> [B], int

    Row ``d`` of ``seeds`` seeds the ``d``-th of the ``draws_per_estimate`` masker calls averaged.
    """
    total, passes = 0.0, 0
    masker = estimator.masker
    options = {"trace": batch.trace} if "trace" in inspect.signature(masker.views).parameters else {}
    for draw_seeds in seeds:
        views = masker.views(
            batch.input_ids, batch.completion_mask, batch.mask_id, draw_seeds, batch.prompt_mask, **options
        )
        per_view = scorer(views)  # [V, B, L]
        if callable(getattr(masker, "combine", None)):  # as the engine combines them
            positive = None
            if estimator.positive is not None:
                positive = torch.full((len(draw_seeds),), estimator.positive, dtype=torch.bool)
            logp = masker.combine(per_view, views, batch.completion_mask, positive)  # [B, L]
        else:
            logp = (per_view * views.coef.to(per_view)).sum(0)  # [B, L]
        total = total + (logp * batch.completion_mask).sum(-1)  # [B]
        passes += views.num_views
    return total / len(seeds), passes


@dataclass
class Interval:
    """A non-negative statistic (a variance, a ratio of them) with its batch-means 95% confidence interval,
    cut at 0."""

    value: float
    low: float
    high: float

    @classmethod
    def of_groups(cls, values: Sequence[float]) -> "Interval":
        mean = statistics.fmean(values)
        half = T_975[len(values) - 1] * statistics.stdev(values) / math.sqrt(len(values))
        return cls(mean, max(mean - half, 0.0), mean + half)

    def __str__(self) -> str:
        return f"{self.value:.4g} [{self.low:.3g}, {self.high:.3g}]"


@dataclass
class Measurement:
    """What :func:`measure` found for one estimator (see the module docstring for each field)."""

    name: str
    passes: int
    draws: int
    mean: float
    variance: Interval
    cv: Interval
    grad_variance: Interval | None
    rel_grad_variance: Interval | None


def measure(
    estimator: Estimator,
    scorer: Scorer,
    batch: Batch,
    draws: int,
    groups: int,
    seed: int,
    params: Sequence[torch.nn.Parameter] = (),
) -> Measurement:
    """``draws`` estimates of ``estimator`` in ``groups`` groups; gradients with respect to ``params`` if any.

    Mask seeds come from a generator seeded with ``seed``, so each estimator draws its own masks.
    Gradients are accumulated group by group (their sum and summed squared norm), never all kept.
    """
    if draws % groups or draws // groups < 2 or groups - 1 not in T_975:
        raise ValueError(
            f"draws ({draws}) must split into groups ({groups}) of at least 2, with groups one of "
            f"{sorted(k + 1 for k in T_975)}"
        )
    per_group = draws // groups
    generator = torch.Generator().manual_seed(seed)
    rows = batch.input_ids.shape[0]
    tokens = batch.completion_mask.sum()
    variances, cvs, grad_vars, rel_grad_vars, means = [], [], [], [], []
    passes = 0
    for _ in range(groups):
        values = []
        grad_sum = [torch.zeros_like(p) for p in params]
        grad_square_norms = 0.0
        for _ in range(per_group):
            seeds = torch.randint(0, 2**62, (estimator.draws_per_estimate, rows), generator=generator)
            with torch.enable_grad() if params else torch.no_grad():
                values_b, passes = estimate(estimator, scorer, batch, seeds)  # [B]
                if params:
                    grads = torch.autograd.grad(values_b.sum() / tokens, params, allow_unused=True)
                    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]
                    for accumulated, g in zip(grad_sum, grads):
                        accumulated += g
                    grad_square_norms += sum(float(g.pow(2).sum()) for g in grads)
            values.append(values_b.detach().double())
        stacked = torch.stack(values)  # [per_group, B]
        mean_b, var_b = stacked.mean(0), stacked.var(0, unbiased=True)  # [B], [B]
        means.append(float(mean_b.mean()))
        variances.append(float(var_b.mean()))
        cvs.append(float((var_b.sqrt() / mean_b.abs().clamp_min(1e-12)).mean()))
        if params:
            mean_norm = sum(float((g / per_group).pow(2).sum()) for g in grad_sum)  # ||mean g||^2
            # unbiased total variance: (sum ||g||^2 - n ||mean g||^2) / (n - 1)
            total = (grad_square_norms - per_group * mean_norm) / (per_group - 1)
            grad_vars.append(total)
            rel_grad_vars.append(total / max(mean_norm, 1e-30))
    return Measurement(
        estimator.name,
        passes,
        draws,
        statistics.fmean(means),
        Interval.of_groups(variances),
        Interval.of_groups(cvs),
        Interval.of_groups(grad_vars) if params else None,
        Interval.of_groups(rel_grad_vars) if params else None,
    )


def ratio(value: Interval, baseline: Interval) -> str:
    """``value / baseline`` with an approximate 95% interval (the relative errors added in quadrature); ``0 (none)``
    for a statistic that is 0 in every group (an estimate that does not vary)."""
    if value.high == 0:
        return "0 (none)"
    point = value.value / baseline.value
    relative = (
        math.hypot((value.high - value.low) / 2 / value.value, (baseline.high - baseline.low) / 2 / baseline.value)
        if value.value and baseline.value
        else float("inf")
    )
    return f"{point:.2f} (x/ {math.exp(relative):.2f})"


def print_table(results: list[Measurement], out=None) -> None:
    out = out or sys.stdout
    base = results[0]
    header = [
        "estimator",
        "passes",
        "draws",
        "mean S",
        "var S [95% CI]",
        "CV [95% CI]",
        "CV x coupled",
        "grad var [95% CI]",
        "rel grad var [95% CI]",
        "rel grad var x coupled",
    ]
    rows = []
    for result in results:
        with_grads = result.grad_variance is not None
        rows.append(
            [
                result.name,
                str(result.passes),
                str(result.draws),
                f"{result.mean:.3f}",
                str(result.variance),
                str(result.cv),
                ratio(result.cv, base.cv),
                str(result.grad_variance) if with_grads else "-",
                str(result.rel_grad_variance) if with_grads else "-",
                ratio(result.rel_grad_variance, base.rel_grad_variance) if with_grads else "-",
            ]
        )
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(len(header))]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)), file=out)
    print("-|-".join("-" * w for w in widths), file=out)
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)), file=out)


def plot(results: list[Measurement], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("CV of the sequence estimate", lambda r: r.cv)]
    if results[0].rel_grad_variance is not None:
        panels.append(("relative gradient variance", lambda r: r.rel_grad_variance))
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for axis, (title, field) in zip(axes[0], panels):
        names = [f"{r.name}\n({r.passes} pass{'es' if r.passes > 1 else ''})" for r in results]
        values = [field(r) for r in results]
        errors = [[max(v.value - v.low, 0) for v in values], [max(v.high - v.value, 0) for v in values]]
        axis.bar(names, [v.value for v in values], yerr=errors, capsize=4, color="#4c72b0")
        axis.set_title(title)
        axis.set_yscale("log")
        axis.tick_params(axis="x", labelsize=8)
    figure.suptitle(f"across {results[0].draws} mask draws, 95% batch-means intervals")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# --------------------------------------------------------------------------- the real model


def completions_batch(lm, tokenizer, count: int, new_tokens: int, sampler_steps: int, seed: int) -> Batch:
    """``count`` synthetic prompts (validation split first) with one completion each, sampled by the model
    itself at temperature 1 (the rollout's setting), joined as the engine joins them."""
    from diffugrpo_plugin.data import default_data_paths
    from diffugrpo_plugin.sampling import build_sampler, left_pad
    from diffugrpo_plugin.tools import evaluation

    train_file, validation_file = default_data_paths()
    problems = (
        evaluation.load_problems("parquet", path=validation_file) + evaluation.load_problems("parquet", path=train_file)
    )[:count]
    prompts = evaluation.encode_prompts(tokenizer, problems, new_tokens, None, True)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompt_ids, prompt_mask = left_pad(prompts, pad)
    sampler = build_sampler("entropy", steps=sampler_steps, temperature=1.0, top_p=0.95)
    # the trace kept for trajectory replay
    with torch.no_grad():
        output = sampler.generate(
            lm,
            prompt_ids,
            prompt_mask,
            new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=pad,
            seeds=[seed + i for i in range(count)],
            record_trace=True,
        )
    input_ids = torch.cat([prompt_ids, output.completion_ids], 1)  # [B, P + N]
    completion = torch.cat([torch.zeros_like(prompt_mask), output.completion_mask], 1).bool()  # [B, P + N]
    attention = torch.cat([prompt_mask, torch.ones_like(output.completion_mask)], 1)  # [B, P + N]
    prompt_real = torch.cat([prompt_mask, torch.zeros_like(output.completion_mask)], 1).bool()  # [B, P + N]
    trace = torch.cat([torch.full_like(prompt_ids, -1), output.unmask_step], 1)  # [B, P + N]
    return Batch(input_ids, attention, completion, prompt_real, lm.mask_token_id, torch.where(completion, trace, -1))


def model_scorer(lm, batch: Batch) -> Scorer:
    """The training engine's coupled pass on ``lm``: each view's log-probs."""
    from diffugrpo_plugin.core.logprobs import coupled_token_logprobs

    return lambda views: coupled_token_logprobs(lm, views, batch.input_ids, batch.attention_mask).per_view


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: the training job's warm-started tiny model)")
    parser.add_argument("--random-model", action="store_true", help="the untrained tiny Dream-style model")
    parser.add_argument("--completions", type=int, default=8, help="synthetic prompts, one sampled completion each")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--sampler-steps", type=int, default=32)
    parser.add_argument("--draws", type=int, default=200, help="estimates per estimator")
    parser.add_argument("--groups", type=int, default=10, help="batch-means groups for the confidence intervals")
    parser.add_argument("--passes", type=int, default=3, help="forward passes of the multi-draw estimators (K)")
    parser.add_argument(
        "--published",
        action="store_true",
        help="also EBPO's, SPG's (ELBO, EUBO) and trajectory replay's estimates, about K passes each (#61)",
    )
    parser.add_argument(
        "--grad-params",
        default="",
        help="regular expression on parameter names: the gradient's "
        "variance is over these (default: all); 'none' skips it",
    )
    parser.add_argument("--plot", default="estimator_variance.png", help="where the figure goes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from diffugrpo_plugin.models.dlm import load_diffusion_lm
    from diffugrpo_plugin.models.tiny import TinySpec, tiny_model_path
    from diffugrpo_plugin.training.warm_start import warm_model_path

    torch.set_num_threads(args.threads)
    path = args.model or (tiny_model_path(TinySpec()) if args.random_model else warm_model_path())
    lm, tokenizer = load_diffusion_lm(path, args.device)
    lm.module.eval()  # no dropout: the masks are the only randomness measured
    batch = completions_batch(lm, tokenizer, args.completions, args.new_tokens, args.sampler_steps, args.seed)
    params = (
        []
        if args.grad_params == "none"
        else [p for name, p in lm.module.named_parameters() if re.search(args.grad_params, name) and p.requires_grad]
    )
    scorer = model_scorer(lm, batch)
    lengths = batch.completion_mask.sum(1).tolist()
    print(
        f"model {path}\n{len(lengths)} completions of {min(lengths)}-{max(lengths)} tokens (mean "
        f"{statistics.fmean(lengths):.1f}), sampled by the model; {args.draws} draws per estimator in "
        f"{args.groups} groups; gradient over {sum(p.numel() for p in params):,} parameters\n"
    )
    results = [
        measure(estimator, scorer, batch, args.draws, args.groups, args.seed + index, params)
        for index, estimator in enumerate(
            estimators(args.passes, published=args.published, trace_steps=args.sampler_steps)
        )
    ]
    print_table(results)
    plot(results, args.plot)
    print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
