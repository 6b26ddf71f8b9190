"""Maskers: complementarity, weights, per-sample reproducibility, prompt and padding untouched."""

import random

import numpy as np
import pytest
import torch

from diffugrpo_plugin.core.masking import make_coupled, make_d1, make_pair, make_sft
from diffugrpo_plugin.plugins import lookup, registrations

MASK = 99


def left_padded_batch():
    # row 0: 2 pads, prompt of 3, completion of 5; row 1: no pad, prompt 5, completion 5
    input_ids = torch.tensor([[0, 0, 11, 12, 13, 21, 22, 23, 24, 25], [14, 15, 16, 17, 18, 31, 32, 33, 34, 35]])
    attention = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1, 1], [1] * 10])
    completion = torch.zeros_like(input_ids, dtype=torch.bool)
    completion[:, 5:] = True
    prompt = attention.bool() & ~completion
    return input_ids, attention, completion, prompt


def test_builtin_maskers_are_registered_through_the_plugin_hook():
    assert lookup("masker", "coupled").obj is make_coupled
    assert lookup("masker", "sft").obj is make_sft
    assert {"coupled", "pair", "d1", "sft"} <= set(registrations("masker"))


def test_coupled_views_are_complementary_and_leave_prompt_and_padding_alone():
    input_ids, _, completion, prompt = left_padded_batch()
    views = make_coupled().views(input_ids, completion, MASK, torch.tensor([7, 8]), prompt_mask=prompt)
    assert views.noisy.shape == (3, 2, 10)
    masked = views.noisy == MASK  # [3, B, L]
    assert torch.equal(masked[0], completion)  # view 0: whole completion masked
    assert torch.equal(masked[1] ^ masked[2], completion)  # each completion token in exactly one of the pair
    assert not (masked[1] & masked[2]).any()
    for view in views.noisy:
        assert torch.equal(view[~completion], input_ids[~completion])  # prompt and padding untouched


def test_coupled_weights_follow_one_over_t_and_one_over_one_minus_t():
    input_ids, _, completion, _ = left_padded_batch()
    views = make_coupled(t_range=(0.2, 0.8)).views(input_ids, completion, MASK, torch.tensor([1, 2]))
    masked = views.noisy == MASK
    for b in range(2):
        assert torch.allclose(views.coef[0, b][completion[b]], torch.tensor(0.5))
        first = views.coef[1, b][masked[1, b]]
        second = views.coef[2, b][masked[2, b]]
        # every masked token of a view carries the same weight, zero elsewhere
        assert (views.coef[1, b][~masked[1, b]] == 0).all() and (views.coef[2, b][~masked[2, b]] == 0).all()
        # 0.5/t and 0.5/(1-t): recover t both ways, they must agree and lie in the range
        if first.numel() and second.numel():
            t_from_first, t_from_second = 0.5 / first[0].item(), 1 - 0.5 / second[0].item()
            assert t_from_first == pytest.approx(t_from_second, rel=1e-5)
            assert 0.2 <= t_from_first <= 0.8


def test_coupled_pair_weights_are_unbiased_on_average():
    # E[1{r<t} / t | t] = 1, so over many seeds each token's v1 coefficient averages 0.5 (with the 1/2).
    input_ids, _, completion, _ = left_padded_batch()
    masker = make_coupled()
    total = torch.zeros(2, 10)
    seeds = 3000
    for s in range(seeds):
        total += masker.views(input_ids, completion, MASK, torch.tensor([2 * s, 2 * s + 1])).coef[1]
    mean = total / seeds
    assert torch.allclose(mean[completion], torch.full_like(mean[completion], 0.5), atol=0.04)


def test_the_coupled_pairs_first_half_holds_t_times_the_completion_on_average_given_its_t():
    """Each completion token joins the pair's first view with probability ``t``: over many seeds, its masked count
    minus ``n * t`` averages 0, with ``t`` read back from the weights (``0.5 / t`` on the first view, ``0.5 / (1 - t)``
    on the second, whichever holds a token), and the counts spread over every value from 0 to ``n``."""
    completion = torch.ones(1, 8, dtype=torch.bool)
    input_ids = torch.arange(8)[None]
    masker = make_coupled()
    excess, counts = [], set()
    for s in range(3000):
        views = masker.views(input_ids, completion, MASK, torch.tensor([s]))
        first, second = views.noisy[1, 0] == MASK, views.noisy[2, 0] == MASK
        if first.any():
            t = 0.5 / views.coef[1, 0][first][0].item()
        else:
            t = 1 - 0.5 / views.coef[2, 0][second][0].item()
        excess.append(int(first.sum()) - 8 * t)
        counts.add(int(first.sum()))
    # 3 standard errors: given t the count varies by 8 t (1 - t), 1.76 on average over t ~ U(0.2, 0.8)
    assert abs(np.mean(excess)) < 3 * (1.76 / 3000) ** 0.5
    assert counts == set(range(9))


def test_pair_masker_has_two_views_weighted_without_the_half():
    input_ids, _, completion, _ = left_padded_batch()
    views = make_pair().views(input_ids, completion, MASK, torch.tensor([3, 4]))
    assert views.num_views == 2
    masked = views.noisy == MASK
    assert torch.equal(masked[0] ^ masked[1], completion)
    t = 1 / views.coef[0][masked[0]][0].item()
    assert 1 / views.coef[1][masked[1]][0].item() == pytest.approx(1 - t, rel=1e-5)


def test_d1_masks_completion_fully_and_prompt_at_the_given_rate():
    input_ids, _, completion, prompt = left_padded_batch()
    views = make_d1(p_mask_prompt=0.0).views(input_ids, completion, MASK, torch.tensor([1, 2]), prompt)
    assert views.num_views == 1 and torch.equal(views.noisy[0] == MASK, completion)
    assert torch.equal(views.coef[0], completion.float())
    hits = trials = 0
    masker = make_d1(p_mask_prompt=0.3)
    for s in range(400):
        v = masker.views(input_ids, completion, MASK, torch.tensor([s, s + 1000]), prompt)
        hits += int((v.noisy[0] == MASK)[prompt].sum())
        trials += int(prompt.sum())
        assert not (v.noisy[0] == MASK)[~completion & ~prompt].any()  # padding never masked
    assert hits / trials == pytest.approx(0.3, abs=0.03)


def test_prompt_is_untouched_unless_prompt_masking_is_on():
    input_ids, _, completion, prompt = left_padded_batch()
    off = make_coupled().views(input_ids, completion, MASK, torch.tensor([5, 6]), prompt)
    assert not (off.noisy == MASK)[:, prompt].any()
    on = make_coupled(p_mask_prompt=0.5).views(input_ids, completion, MASK, torch.tensor([5, 6]), prompt)
    assert (on.noisy == MASK)[:, prompt].any()


def test_same_seed_same_mask_different_seed_different_mask():
    input_ids, _, completion, _ = left_padded_batch()
    masker = make_coupled()
    a = masker.views(input_ids, completion, MASK, torch.tensor([10, 11]))
    b = masker.views(input_ids, completion, MASK, torch.tensor([10, 11]))
    c = masker.views(input_ids, completion, MASK, torch.tensor([12, 13]))
    assert torch.equal(a.noisy, b.noisy) and torch.equal(a.coef, b.coef)
    assert not torch.equal(a.coef, c.coef)


def test_a_samples_mask_does_not_depend_on_padding_or_batch_neighbours():
    input_ids, _, completion, _ = left_padded_batch()
    masker = make_coupled()
    together = masker.views(input_ids, completion, MASK, torch.tensor([42, 43]))
    # row 0 alone, with its two pads removed: same seed, same completion tokens -> same mask
    alone = masker.views(input_ids[:1, 2:], completion[:1, 2:], MASK, torch.tensor([42]))
    assert torch.equal(together.noisy[:, 0, 2:], alone.noisy[:, 0])
    assert torch.equal(together.coef[:, 0, 2:], alone.coef[:, 0])


def test_masking_never_touches_global_rng_state():
    input_ids, _, completion, prompt = left_padded_batch()
    torch_state, py_state, np_state = torch.get_rng_state(), random.getstate(), np.random.get_state()
    for factory in (make_coupled, make_pair, make_d1, make_sft):
        factory().views(input_ids, completion, MASK, torch.tensor([1, 2]), prompt)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert random.getstate() == py_state
    assert all(np.array_equal(x, y) for x, y in zip(np.random.get_state()[1:2], np_state[1:2]))


def test_bad_options_and_inputs_say_what_to_fix():
    with pytest.raises(ValueError, match="t_range"):
        make_coupled(t_range=(0.0, 0.8))
    with pytest.raises(ValueError, match="p_mask_prompt"):
        make_d1(p_mask_prompt=1.5)
    input_ids, _, completion, _ = left_padded_batch()
    with pytest.raises(ValueError, match="one integer per row"):
        make_coupled().views(input_ids, completion, MASK, torch.tensor([1]))


# --------------------------------------------------------------------------- sft (LLaDA's SFT noising)


def test_sft_masks_only_completion_tokens_each_weighted_one_over_t():
    """What the view states, whatever order its generator is drawn in: one view; a token is masked exactly where it
    has a weight; every other token (prompt, padding, the unmasked completion) keeps its id."""
    input_ids, _, completion, prompt = left_padded_batch()
    masker = make_sft()
    for s in range(50):
        views = masker.views(input_ids, completion, MASK, torch.tensor([s, s + 100]), prompt)
        assert views.num_views == 1 and views.noisy.shape == (1, 2, 10)
        masked = views.noisy[0] == MASK  # [B, L]
        assert not masked[~completion].any()  # prompt and padding are never masked
        assert torch.equal(masked, views.coef[0] > 0)
        assert torch.equal(views.noisy[0][~masked], input_ids[~masked])
        for b in range(2):
            weights = views.coef[0, b][masked[b]]
            if weights.numel():
                # one t per sample: every masked token weighs the same 1/t, with t in [eps, 1)
                assert torch.all(weights == weights[0])
                assert 1.0 < weights[0].item() <= 1e3


def test_sft_mask_rate_is_t_and_the_weighted_mask_is_unbiased():
    # t ~ U(eps, 1): the masked fraction averages (1 + eps) / 2; E[1{r < t} / t] = 1 for every token.
    completion = torch.ones(1, 40, dtype=torch.bool)
    input_ids = torch.arange(40)[None]
    masker = make_sft(eps=0.1)  # bounded weights (<= 10) keep the Monte Carlo error small
    samples = 4000
    rates, weight_sums, ts = [], torch.zeros(40, dtype=torch.float64), []
    for s in range(samples):
        views = masker.views(input_ids, completion, MASK, torch.tensor([s]))
        masked = views.noisy[0, 0] == MASK
        rates.append(masked.float().mean().item())
        weight_sums += views.coef[0, 0].double()
        if masked.any():
            ts.append(1.0 / views.coef[0, 0][masked][0].item())
    assert np.mean(rates) == pytest.approx((1 + 0.1) / 2, abs=0.015)
    assert torch.allclose(weight_sums / samples, torch.ones(40, dtype=torch.float64), atol=0.1)
    assert min(ts) >= 0.1 and max(ts) < 1.0
    # t is uniform on [0.1, 1): its quartiles sit at 0.325, 0.55, 0.775
    assert np.quantile(ts, [0.25, 0.5, 0.75]) == pytest.approx([0.325, 0.55, 0.775], abs=0.03)


def test_sft_masks_are_reproducible_and_per_sample():
    input_ids, _, completion, _ = left_padded_batch()
    masker = make_sft()
    a = masker.views(input_ids, completion, MASK, torch.tensor([10, 11]))
    b = masker.views(input_ids, completion, MASK, torch.tensor([10, 11]))
    assert torch.equal(a.noisy, b.noisy) and torch.equal(a.coef, b.coef)
    assert any(
        not torch.equal(a.coef, masker.views(input_ids, completion, MASK, torch.tensor([s, s + 1])).coef)
        for s in range(20, 25)
    )
    alone = masker.views(input_ids[:1, 2:], completion[:1, 2:], MASK, torch.tensor([10]))
    assert torch.equal(a.noisy[:, 0, 2:], alone.noisy[:, 0]) and torch.equal(a.coef[:, 0, 2:], alone.coef[:, 0])


def test_sft_bad_eps_says_what_to_fix():
    for eps in (0.0, 1.0, -0.5):
        with pytest.raises(ValueError, match="eps must be in"):
            make_sft(eps=eps)
