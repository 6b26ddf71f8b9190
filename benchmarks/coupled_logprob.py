"""Completion tokens/s and peak memory of the coupled log-prob pass against a reference-style baseline.

Both variants compute DiffuCoder's coupled estimate for the same tiny bidirectional Qwen2
model (Dream-style, shifted logits), the same batch and the same ``coupled`` masks:

* **ours**: the training engine's pass: :func:`diffugrpo_plugin.core.logprobs.coupled_token_logprobs` on the
  model with lean SwiGLU blocks (:func:`diffugrpo_plugin.models.lean_mlp.make_lean`, each MLP keeps two of
  its four activations for the backward). The transformer body runs on the three views; only the
  rows a view scores (every completion token in the fully masked view, each completion token once
  across the complementary pair: ``2 x B x completion`` rows) reach the fused head, which projects
  and log-softmaxes one vocabulary slice at a time and recomputes the logits in the backward: no
  ``[rows, V]`` tensor exists.
* **fused head**: the same pass on the stock model (its MLPs save all four activations), to show
  what the head and the MLPs each take off.
* **unfused**: the previous release's pass: the same rows through the model's own head, so
  their ``[2 x B x completion, V]`` logits are materialised, then a chunked fp32 log-softmax
  with a one-buffer backward (``kernels.chunked_gathered_logprob``).
* **reference-style**: written the way DiffuCoder's trainer does it: the three views
  concatenated through the model, full aligned logits ``[3B, L, V]``, the completion slice,
  then per sample a full-vocabulary ``log_softmax`` over its three versions, a gather, and the
  weighted combination.

A **training pass** is forward + backward of the token-mean of the log-probs (parameter
gradients freed afterwards); a **forward pass** runs without autograd, as the old-policy and
reference log-probs are computed. The ``head rows`` column is how many rows go through the
vocabulary projection (``3 x B x L`` against ``2 x B x completion``).

Method. Each variant runs in its own fresh process (``multiprocessing`` spawn), so neither
inherits the other's heap. Both processes first compute the log-probs and gradients of one
training pass (which doubles as the warm-up), and the main process compares them: the
script stops, timing nothing, if they differ. Then the processes take turns, round-robin
(drifting load on a shared machine hits both alike), one measured pass per request. Around a
measured pass the process resets its peak-RSS mark (``echo 5 > /proc/self/clear_refs``), reads
``VmRSS`` just before and ``VmHWM`` just after: **peak memory = VmHWM - VmRSS before**, the RAM
the pass itself needed on top of the model and batch. glibc is told to serve every allocation
of 64 KiB or more with its own mapping (``MALLOC_MMAP_THRESHOLD_``), so freed tensors go back
to the OS and RSS follows live tensor bytes (every variant then pays the page faults of its
fresh allocations, as it would on a host that returns memory). Reported: medians over the repeats;
ratios are the reference-style median over the variant's (higher is better in both ratio
columns); ``x unfused`` is the unfused pass's seconds over the variant's, paired round by round,
median and range over the rounds: the speed against the previous release, with its spread.

    python benchmarks/coupled_logprob.py                      # vocab 32k and 150k, about 3 min on 2 cores
    python benchmarks/coupled_logprob.py --vocabs 150000 --batch 4 --no-forward  # a bigger batch, training only
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

VARIANTS = ("reference-style", "unfused", "fused head", "ours")
PASSES = ("train", "forward")


@dataclass(frozen=True)
class Settings:
    """One benchmark configuration (everything that shapes the model and the batch)."""

    vocab: int
    batch: int
    prompt: int
    completion: int
    hidden: int
    layers: int
    threads: int
    checkpointing: bool = False
    seed: int = 0

    @property
    def completion_tokens(self) -> int:
        return self.batch * self.completion


@dataclass
class Workload:
    """The model and one batch with its coupled masks, identical in every process for equal settings."""

    lm: object  # diffugrpo_plugin.models.dlm.DiffusionLM
    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    completion_mask: torch.Tensor  # [B, L] bool
    views: object  # diffugrpo_plugin.core.views.MaskedViews, [3, B, L]


def build_workload(settings: Settings, lean_mlp: bool = False) -> Workload:
    """A seeded tiny bidirectional Qwen2 (untied head, like Dream-7B) and a prompt + completion batch; with
    ``lean_mlp`` its SwiGLU blocks made lean as the training engine makes them."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from diffugrpo_plugin.core.masking import make_coupled
    from diffugrpo_plugin.models.dlm import DiffusionLM
    from diffugrpo_plugin.models.lean_mlp import make_lean

    torch.set_num_threads(settings.threads)
    config = Qwen2Config(
        vocab_size=settings.vocab,
        hidden_size=settings.hidden,
        intermediate_size=3 * settings.hidden,
        num_hidden_layers=settings.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=settings.prompt + settings.completion,
        tie_word_embeddings=False,
        use_cache=False,
    )
    config.is_causal = False
    mask_id = settings.vocab - 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        module = Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    if settings.checkpointing:
        module.gradient_checkpointing_enable()
    lm = DiffusionLM.wrap(module, mask_token_id=mask_id, logits_shift=True)
    if lean_mlp and not make_lean(module, lm.family.swiglu).installed:
        raise RuntimeError("no SwiGLU block was made lean")

    length = settings.prompt + settings.completion
    generator = torch.Generator().manual_seed(settings.seed)
    input_ids = torch.randint(0, mask_id, (settings.batch, length), generator=generator)  # [B, L]
    attention_mask = torch.ones_like(input_ids)  # [B, L]
    completion_mask = torch.zeros_like(input_ids, dtype=torch.bool)  # [B, L]
    completion_mask[:, settings.prompt :] = True
    seeds = torch.arange(settings.batch, dtype=torch.int64) + 1000 * settings.seed  # [B]
    views = make_coupled().views(input_ids, completion_mask, mask_id, seeds)
    return Workload(lm, input_ids, attention_mask, completion_mask, views)


def fused_head(work: Workload) -> torch.Tensor:
    """The coupled log-probs through the row-selective pass and the fused head (``ours`` when the model's
    SwiGLU blocks are lean).  # -> [B, L]"""
    from diffugrpo_plugin.core.logprobs import coupled_token_logprobs

    return coupled_token_logprobs(work.lm, work.views, work.input_ids, work.attention_mask).logp


def reference_style(work: Workload) -> torch.Tensor:
    """The coupled log-probs the way the reference computes them (the baseline).  # -> [B, L]

    Views concatenated through the model, full aligned logits, completion slice, then per
    sample: full-vocabulary log-softmax of its three versions, gather, weighted combination.
    """
    num_views, batch, length = work.views.noisy.shape
    stacked = work.views.noisy.reshape(num_views * batch, length)  # [3B, L]
    logits = work.lm.logits(stacked, work.attention_mask.repeat(num_views, 1))  # [3B, L, V]
    start = int(work.completion_mask[0].nonzero()[0])  # every row: prompt first, completion after
    completion_logits = logits[:, start:]  # [3B, C, V]
    targets = work.input_ids[:, start:]  # [B, C]
    rows = []
    for b in range(batch):
        versions = completion_logits[[b + v * batch for v in range(num_views)]]  # [3, C, V]
        logp = torch.log_softmax(versions, dim=-1)  # [3, C, V]
        picked = logp.gather(-1, targets[b].expand(num_views, -1)[..., None]).squeeze(-1)  # [3, C]
        rows.append((picked * work.views.coef[:, b, start:]).sum(0))  # [C]
    prompt_part = torch.zeros(batch, start, dtype=torch.float32)  # [B, P] nothing scored there
    return torch.cat([prompt_part, torch.stack(rows)], dim=1)  # [B, L]


def unfused(work: Workload) -> torch.Tensor:
    """The scored rows through the model's own head (materialised logits), then the chunked log-softmax.  # -> [B, L]"""
    from diffugrpo_plugin.models.dlm import position_ids_from_mask
    from diffugrpo_plugin.models.family import final_hidden_rows
    from diffugrpo_plugin.models.kernels import chunked_gathered_logprob

    lm, views = work.lm, work.views
    num_views, batch, length = views.coef.shape
    stacked_ids = views.noisy.reshape(num_views * batch, length)  # [V*B, L]
    attention = work.attention_mask.repeat(num_views, 1)  # [V*B, L]
    target_rows = (views.coef.reshape(num_views * batch, length) != 0).flatten().nonzero(as_tuple=True)[0]  # [R]
    with final_hidden_rows(lm.family, lm.module, target_rows - 1):  # shifted: row i - 1 scores token i
        logits = lm.family.call(lm.module, stacked_ids, attention, position_ids_from_mask(attention))
    row_targets = work.input_ids.repeat(num_views, 1).flatten().index_select(0, target_rows)  # [R]
    row_logp = chunked_gathered_logprob(logits.reshape(-1, logits.shape[-1]), row_targets)  # [R]
    per_view = torch.zeros(num_views * batch * length).index_put((target_rows,), row_logp)
    return (per_view.view(num_views, batch, length) * views.coef).sum(0)  # [B, L]


FUNCTIONS = {"reference-style": reference_style, "unfused": unfused, "fused head": fused_head, "ours": fused_head}


def train_values(work: Workload, variant: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A training pass: log-probs [B, L] and the parameter gradients of their token-mean."""
    logp = FUNCTIONS[variant](work)  # [B, L]
    ((logp * work.completion_mask).sum() / work.completion_mask.sum()).backward()
    grads = [p.grad for p in work.lm.module.parameters()]
    work.lm.module.zero_grad(set_to_none=True)
    return logp.detach(), grads


def one_pass(work: Workload, variant: str, pass_kind: str) -> None:
    """A training pass (forward + backward) or a forward pass without autograd."""
    if pass_kind == "train":
        train_values(work, variant)
        return
    with torch.no_grad():
        FUNCTIONS[variant](work)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}: peak memory needs Linux")


def _reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # resets VmHWM to the current RSS
    except OSError as exc:
        raise RuntimeError(
            f"cannot reset the peak-RSS mark ({exc}); this benchmark needs a Linux kernel that "
            f"allows writing /proc/self/clear_refs"
        ) from exc


def measured_pass(work: Workload, variant: str, pass_kind: str) -> tuple[float, int]:
    """Seconds and peak bytes above the pre-pass RSS for one pass."""
    _reset_peak_rss()
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    one_pass(work, variant, pass_kind)
    seconds = time.perf_counter() - start
    return seconds, (_status_kib("VmHWM") - before) * 1024


def worker(connection, settings: Settings, variant: str) -> None:
    """A fresh process for one variant. Requests: ``("values",)``, ``("run", pass)``, ``("stop",)``."""
    work = build_workload(settings, lean_mlp=variant == "ours")
    connection.send("ready")
    while (request := connection.recv())[0] != "stop":
        if request[0] == "values":
            connection.send(train_values(work, variant))
        else:
            connection.send(measured_pass(work, variant, request[1]))


@dataclass
class Measurement:
    variant: str
    pass_kind: str
    seconds: list[float]
    peak_bytes: list[int]


def agreement(values: dict) -> dict:
    """Largest differences between each variant's log-probs and gradients and the baseline's, and whether all
    are close."""
    base_logp, base_grads = values["reference-style"]
    logp_diff = max((logp - base_logp).abs().max().item() for logp, _ in values.values())
    grad_diff = max((a - b).abs().max().item() for _, grads in values.values() for a, b in zip(grads, base_grads))
    close = all(
        torch.allclose(logp, base_logp, rtol=1e-5, atol=1e-4)
        and all(torch.allclose(a, b, rtol=1e-3, atol=1e-6) for a, b in zip(grads, base_grads))
        for logp, grads in values.values()
    )
    return {"logp_max_abs": logp_diff, "grad_max_abs": grad_diff, "close": close}


def ask(connection, *request):
    connection.send(request)
    return connection.recv()


@contextmanager
def variant_workers(settings: Settings):
    """One fresh process per variant, built at the same time; yields variant -> connection."""
    context = multiprocessing.get_context("spawn")
    connections, processes = {}, []
    try:
        for variant in VARIANTS:
            parent, child = context.Pipe()
            processes.append(context.Process(target=worker, args=(child, settings, variant), daemon=True))
            processes[-1].start()
            connections[variant] = parent
        for variant, connection in connections.items():
            if connection.recv() != "ready":
                raise RuntimeError(f"the {variant} worker failed to start")
        yield connections
    finally:
        for connection in connections.values():
            connection.send(("stop",))
        for process in processes:
            process.join(timeout=30)


def measure(settings: Settings, pass_kinds: tuple[str, ...], repeats: int) -> tuple[list[Measurement], dict]:
    """Agreement first (also the warm-up), then ``repeats`` round-robin rounds of every (pass, variant)."""
    with variant_workers(settings) as connections:
        check = agreement({variant: ask(connection, "values") for variant, connection in connections.items()})
        if not check["close"]:
            raise SystemExit(
                f"vocab {settings.vocab}: the variants disagree (log-prob max |diff| "
                f"{check['logp_max_abs']:.2e}, gradient max |diff| {check['grad_max_abs']:.2e}); "
                f"nothing timed"
            )
        results = [Measurement(variant, kind, [], []) for kind in pass_kinds for variant in VARIANTS]
        for _ in range(repeats):
            for result in results:
                seconds, peak = ask(connections[result.variant], "run", result.pass_kind)
                result.seconds.append(seconds)
                result.peak_bytes.append(peak)
    return results, check


def head_rows(settings: Settings, variant: str) -> int:
    """Rows through the vocabulary projection: three full views, or each completion token twice."""
    if variant != "reference-style":
        return 2 * settings.batch * settings.completion
    return 3 * settings.batch * (settings.prompt + settings.completion)


def print_table(settings: Settings, measurements: list[Measurement], check: dict) -> None:
    print(
        f"\nvocab {settings.vocab:,}: batch {settings.batch}, prompt {settings.prompt}, completion "
        f"{settings.completion}, hidden {settings.hidden}, {settings.layers} layers, {settings.threads} thread(s)"
        f"{', gradient checkpointing' if settings.checkpointing else ''}; "
        f"agreement: log-prob max |diff| {check['logp_max_abs']:.1e}, grad max |diff| {check['grad_max_abs']:.1e}"
    )
    header = (
        f"{'pass':<9}{'variant':<17}{'head rows':>10}{'tokens/s':>10}{'x speed':>9}{'peak MiB':>10}"
        f"{'x less mem':>12}{'x unfused (range)':>22}"
    )
    print(header + "\n" + "-" * len(header))
    baselines = {m.pass_kind: m for m in measurements if m.variant == "reference-style"}
    previous = {m.pass_kind: m for m in measurements if m.variant == "unfused"}
    for m in measurements:
        base = baselines[m.pass_kind]
        seconds, peak = statistics.median(m.seconds), statistics.median(m.peak_bytes)
        speedup = statistics.median(base.seconds) / seconds
        memory_ratio = statistics.median(base.peak_bytes) / peak
        # paired by round: both passes ran back to back, so a slow spell of the machine hits both
        paired = sorted(u / s for u, s in zip(previous[m.pass_kind].seconds, m.seconds))
        print(
            f"{m.pass_kind:<9}{m.variant:<17}{head_rows(settings, m.variant):>10}"
            f"{settings.completion_tokens / seconds:>10.0f}{speedup:>9.2f}"
            f"{peak / 2**20:>10.0f}{memory_ratio:>12.2f}"
            f"{f'{statistics.median(paired):.2f} ({paired[0]:.2f}-{paired[-1]:.2f})':>22}"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocabs", type=int, nargs="+", default=[32000, 150000])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--completion", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads in every process (1 is steadiest on a shared machine)",
    )
    parser.add_argument("--no-forward", action="store_true", help="only time training passes")
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute each layer in the backward, in every variant (as training runs)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # Read by glibc when each spawned process starts: big frees go straight back to the OS.
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(64 * 1024)
    pass_kinds = ("train",) if args.no_forward else PASSES
    started = time.perf_counter()
    print(
        "peak memory = VmHWM - VmRSS around one pass in a fresh process per variant; medians of "
        f"{args.repeats} round-robin repeats; ratios = reference-style / the variant"
    )
    for vocab in args.vocabs:
        settings = Settings(
            vocab,
            args.batch,
            args.prompt,
            args.completion,
            args.hidden,
            args.layers,
            args.threads,
            args.gradient_checkpointing,
        )
        measurements, check = measure(settings, pass_kinds, args.repeats)
        print_table(settings, measurements, check)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
