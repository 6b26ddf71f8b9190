"""The third-party masker package (``examples/custom_masker``): its estimator against its formula, and,
once pip-installed, listed with its own distribution, selected by name and run through the coupled
log-prob pass of a tiny model. Discovery is cached per process, so those checks run functions of
this module in fresh subprocesses."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import MASK_ID, build_tiny_module, installed_example

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "custom_masker"
DISTRIBUTION = "diffugrpo-example-masker"
NAME = "example_stratified"


def load_source_module():
    """The example's masker module straight from its sources (the math needs no installation)."""
    path = EXAMPLE / "diffugrpo_example_masker" / "stratified.py"
    spec = importlib.util.spec_from_file_location("example_stratified_source", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stratified = load_source_module()


def padded_batch():
    # row 0: 2 pads, prompt of 3, completion of 5; row 1: prompt of 5, completion of 5
    input_ids = torch.tensor([[0, 0, 11, 12, 13, 21, 22, 23, 24, 25], [14, 15, 16, 17, 18, 31, 32, 33, 34, 35]])
    attention = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1, 1], [1] * 10])
    completion = torch.zeros_like(input_ids, dtype=torch.bool)
    completion[:, 5:] = True
    return input_ids, attention, completion


def documented_ratios(seeds: list[int], num_views: int, t_range: tuple[float, float]) -> torch.Tensor:
    """t_k = t_min + (t_max - t_min) (k + u_k) / K, u_k the first K draws of the row's generator.  # [B, K]"""
    t_min, t_max = t_range
    offsets = torch.stack(
        [torch.rand(num_views, generator=torch.Generator().manual_seed(s), dtype=torch.float64) for s in seeds]
    )  # [B, K]
    strata = torch.arange(num_views, dtype=torch.float64)  # [K]
    return t_min + (t_max - t_min) * (strata[None] + offsets) / num_views


def test_views_mask_only_the_completion_with_one_ratio_per_stratum_and_weight_one_over_k_t():
    input_ids, _, completion = padded_batch()
    seeds = [7, 8]
    views = stratified.make_stratified(num_views=4, t_range=(0.2, 0.8)).views(
        input_ids, completion, MASK_ID, torch.tensor(seeds)
    )
    assert views.noisy.shape == views.coef.shape == (4, 2, 10)
    masked = views.noisy == MASK_ID  # [K, B, L]
    assert not (masked & ~completion).any()  # prompt and padding never masked
    assert torch.equal(views.noisy[~masked], input_ids.expand(4, -1, -1)[~masked])
    t = documented_ratios(seeds, 4, (0.2, 0.8))  # [B, K]
    for k in range(4):
        lower, upper = 0.2 + 0.15 * k, 0.2 + 0.15 * (k + 1)  # the k-th of 4 strata of [0.2, 0.8]
        assert ((lower <= t[:, k]) & (t[:, k] < upper)).all()
        expected = masked[k] / (4 * t[:, k, None])  # [B, L]
        assert torch.allclose(views.coef[k].double(), expected, rtol=1e-6)


def test_estimator_is_unbiased_for_the_t_average_by_monte_carlo():
    # With a stand-in log-prob h(t_k) for every token masked in view k, the estimate is
    # sum_k 1{masked in k} h(t_k) / (K t_k); its mean must be E_{t ~ U(0.2, 0.8)}[h(t)]:
    # 1 for h = 1, and (0.8^3 - 0.2^3) / (3 * 0.6) = 0.28 for h(t) = t^2.
    rows, num_views = 4000, 4
    input_ids = torch.full((rows, 6), 5)
    completion = torch.zeros_like(input_ids, dtype=torch.bool)
    completion[:, 1:] = True
    seeds = torch.arange(rows) * 7919 + 3
    views = stratified.make_stratified(num_views).views(input_ids, completion, MASK_ID, seeds)
    coef = views.coef.double()  # [K, B, L]
    t = torch.where(coef > 0, 1 / (num_views * coef), 0.0)  # [K, B, L]: a masked token's weight is 1/(K t_k)
    weight_sum = coef.sum(0)[completion]  # [B * 5]
    squared = (coef * t**2).sum(0)[completion]
    assert weight_sum.mean().item() == pytest.approx(1.0, abs=0.02)
    assert squared.mean().item() == pytest.approx(0.28, abs=0.01)
    masked_fraction = (views.noisy == MASK_ID)[:, completion].double().mean(1)  # [K], per stratum
    assert masked_fraction.tolist() == pytest.approx([0.275, 0.425, 0.575, 0.725], abs=0.02)  # stratum centres


def test_stratified_ratios_have_k_squared_less_variance_than_independent_ones():
    # The mean of the K ratios has variance w^2 / (12 K^3) with one uniform draw per stratum,
    # against w^2 / (12 K) for K independent uniform ratios: 4.7e-4 against 7.5e-3 (w = 0.6, K = 4).
    rows, num_views = 2000, 4
    input_ids = torch.full((rows, 61), 5)
    completion = torch.zeros_like(input_ids, dtype=torch.bool)
    completion[:, 1:] = True  # 60 tokens: every view masks some (P(none) <= 0.8^60 per view)
    views = stratified.make_stratified(num_views).views(input_ids, completion, MASK_ID, torch.arange(rows))
    ratios = 1 / (num_views * views.coef.double().amax(-1))  # [K, B]: the weight of a masked token is 1/(K t_k)
    mean_ratio = ratios.mean(0)  # [B]
    assert mean_ratio.mean().item() == pytest.approx(0.5, abs=0.003)
    assert mean_ratio.var().item() == pytest.approx(0.36 / (12 * num_views**3), rel=0.12)


def test_masks_depend_on_the_rows_own_seed_and_tokens_only_and_leave_the_global_rng_alone():
    input_ids, _, completion = padded_batch()
    masker = stratified.make_stratified(num_views=3)
    rng_state = torch.get_rng_state()
    batched = masker.views(input_ids, completion, MASK_ID, torch.tensor([5, 6]))
    alone = masker.views(input_ids[:1, 2:], completion[:1, 2:], MASK_ID, torch.tensor([5]))
    assert torch.equal(batched.noisy[:, 0, 2:], alone.noisy[:, 0])  # padding and batch-mates change nothing
    assert torch.equal(batched.coef[:, 0, 2:], alone.coef[:, 0])
    assert torch.equal(torch.get_rng_state(), rng_state)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"num_views": 0}, "num_views must be a positive integer"),
        ({"num_views": 2.5}, "num_views must be a positive integer"),
        ({"t_range": (0.0, 0.5)}, "0 < t_min <= t_max <= 1"),
        ({"t_range": (0.7, 0.3)}, "0 < t_min <= t_max <= 1"),
        ({"t_range": (0.5,)}, "two numbers"),
    ],
)
def test_bad_options_name_the_option(options, message):
    with pytest.raises(ValueError, match=message):
        stratified.make_stratified(**options)


# --- run in fresh processes after the package is installed --------------------------------------


def discovery_report() -> dict:
    from diffugrpo_plugin import plugins

    registration = plugins.registrations("masker")[NAME]
    try:
        plugins.lookup("masker", "no_such_masker")
    except plugins.PluginError as error:
        unknown = str(error)
    return {
        "distribution": registration.distribution,
        "description": registration.description,
        "module": plugins.lookup("masker", NAME).obj.__module__,
        "unknown": unknown,
        "estimator": plugins.registrations("masker")["example_logmeanexp"].distribution,
        "estimator_combines": callable(plugins.build("masker", "example_logmeanexp", {}).combine),
    }


def coupled_pass_report() -> dict:
    """The installed masker, found by name, through ``coupled_token_logprobs`` on a tiny Dream-style model,
    next to its formula computed from full logits: sum_k 1{masked in k} / (K t_k) * log softmax(view k)[x]."""
    from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
    from diffugrpo_plugin.models.dlm import DiffusionLM
    from diffugrpo_plugin.plugins import lookup

    lm = DiffusionLM.wrap(build_tiny_module("dream"))
    input_ids, attention, completion = padded_batch()
    seeds, num_views, t_range = [21, 22], 3, (0.3, 0.9)
    views = (
        lookup("masker", NAME)
        .obj(num_views=num_views, t_range=list(t_range))
        .views(input_ids, completion, lm.mask_token_id, torch.tensor(seeds))
    )
    fast = coupled_token_logprobs(lm, views, input_ids, attention).logp  # [B, L]
    (fast * completion).sum().backward()
    fast_grads = [p.grad.clone() for p in lm.module.parameters()]
    lm.module.zero_grad()

    t = documented_ratios(seeds, num_views, t_range)  # [B, K]
    formula = torch.zeros(input_ids.shape)  # [B, L]
    for k in range(num_views):
        logp = torch.log_softmax(lm.logits(views.noisy[k], attention).float(), -1)  # [B, L, V]
        picked = logp.gather(-1, input_ids[..., None]).squeeze(-1)  # [B, L]
        weight = (views.noisy[k] == lm.mask_token_id) / (num_views * t[:, k, None])  # [B, L]
        formula = formula + weight.float() * picked
    (formula * completion).sum().backward()
    grad_gap = max((a - p.grad).abs().max().item() for a, p in zip(fast_grads, lm.module.parameters()))
    return {
        "fast": fast.tolist(),
        "formula": formula.tolist(),
        "grad_gap": grad_gap,
        "scored_per_view": (views.coef != 0).sum((1, 2)).tolist(),
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    with installed_example(EXAMPLE.name, DISTRIBUTION, tmp_path_factory.mktemp("example")):
        yield


def in_fresh_process(function_name: str) -> dict:
    code = f"import json, {Path(__file__).stem} as t; print(json.dumps(t.{function_name}()))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_listed_with_its_own_distribution_and_selectable_by_name(installed):
    report = in_fresh_process("discovery_report")
    assert report["distribution"] == f"{DISTRIBUTION} 0.1.0"
    assert report["estimator"] == f"{DISTRIBUTION} 0.1.0" and report["estimator_combines"]
    assert report["description"].startswith("Stratified mask ratios: K views")
    assert report["module"] == "diffugrpo_example_masker.stratified"  # the installed copy, not the sources
    assert f"{NAME} ({DISTRIBUTION} 0.1.0)" in report["unknown"]  # listed among the known maskers


def test_coupled_pass_with_the_installed_masker_equals_its_formula(installed):
    report = in_fresh_process("coupled_pass_report")
    fast, formula = torch.tensor(report["fast"]), torch.tensor(report["formula"])
    _, _, completion = padded_batch()
    assert torch.allclose(fast, formula, atol=1e-5)
    assert (fast[~completion] == 0).all()
    assert report["grad_gap"] < 1e-5
    assert all(count > 0 for count in report["scored_per_view"])


def test_the_example_estimator_combines_views_by_a_log_mean_exp(monkeypatch):
    from diffugrpo_plugin.core.views import MaskedViews

    monkeypatch.syspath_prepend(str(EXAMPLE))
    from diffugrpo_example_masker.logmeanexp import make_logmeanexp

    masker = make_logmeanexp(num_views=2)
    # view 0 masks tokens 0 and 1 at t = 0.5 (coef 1 / (2 x 0.5) = 1), view 1 masks token 1 at t = 0.25 (coef 2)
    views = MaskedViews(
        noisy=torch.zeros(2, 1, 3, dtype=torch.long), coef=torch.tensor([[[1.0, 1.0, 0]], [[0, 2.0, 0]]])
    )
    per_view = torch.tensor([[[-1.0, -2.0, 0.0]], [[0.0, -0.5, 0.0]]], requires_grad=True)
    estimate = masker.combine(per_view, views, torch.ones(1, 3, dtype=torch.bool), None)
    # token 0: log(1 x e^-1); token 1: log(1 x e^-2 + 2 x e^-0.5); token 2: no view masks it
    assert estimate[0].tolist() == pytest.approx([-1.0, math.log(math.exp(-2.0) + 2 * math.exp(-0.5)), 0.0])
    estimate.sum().backward()
    share = math.exp(-2.0) / (math.exp(-2.0) + 2 * math.exp(-0.5))  # each view's gradient: its share of the mean
    assert per_view.grad[:, 0, 1].tolist() == pytest.approx([share, 1 - share])
    assert torch.isfinite(per_view.grad).all()
