"""wd1, SPG and EBPO against hand-worked cases of their papers' formulas (plain arithmetic here, never our code
twice), through what training calls: verl's registries and the masker registry."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from verl.trainer.ppo import core_algos

from diffugrpo_plugin import plugins
from diffugrpo_plugin.core.views import MaskedViews
from diffugrpo_plugin.integration import algorithm

algorithm.register()  # what `import verl` does through our entry point; idempotent


def loss_config(low=0.2, high=0.2):
    return SimpleNamespace(clip_ratio=low, clip_ratio_low=low, clip_ratio_high=high, global_batch_info={})


# --- wd1 ------------------------------------------------------------------------------------------------------


def test_wd1_weights_are_the_two_group_softmaxes_of_the_centred_reward():
    # group a: rewards 1, 0, 0, 0 -> A = 0.75, -0.25, -0.25, -0.25; group b: a tie -> weights 0
    rewards = torch.zeros(6, 2)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.5])
    mask = torch.ones(6, 2)
    fn = core_algos.get_adv_estimator_fn("wd1")
    psi = 2.0
    advantages, _ = fn(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(["a", "a", "a", "a", "b", "b"]),
        config=OmegaConf.create({"wd1_psi": psi, "norm_adv_by_std_in_grpo": False}),
    )
    up = [math.exp(psi * a) for a in (0.75, -0.25, -0.25, -0.25)]
    down = [math.exp(-psi * a) for a in (0.75, -0.25, -0.25, -0.25)]
    expected = [u / sum(up) - d / sum(down) for u, d in zip(up, down)] + [0.0, 0.0]
    assert advantages[:, 0].tolist() == pytest.approx(expected, abs=1e-6)
    assert torch.equal(advantages[:, 0], advantages[:, 1])  # broadcast over the response
    assert expected[0] == pytest.approx(0.6680, abs=1e-3)  # 0.7112 - 0.0432: the winner is pushed up


def test_wd1_loss_has_no_ratio_and_weights_each_token_log_prob():
    log_prob = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
    old = torch.tensor([[-9.0, -9.0], [-9.0, 0.0]])  # ignored: no ratio
    weights = torch.tensor([[0.6, 0.6], [-0.3, -0.3]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, _ = core_algos.get_policy_loss_fn("wd1")(old, log_prob, weights, mask, "token-mean", loss_config())
    # token-mean of -w * logp over the 3 counted tokens: (0.6 + 1.2 - 0.15) / 3
    assert loss.item() == pytest.approx((0.6 * 1.0 + 0.6 * 2.0 - 0.3 * 0.5) / 3)


# --- EBPO -----------------------------------------------------------------------------------------------------


def test_ebpo_masks_each_block_at_its_stratified_level():
    # a completion of 5 tokens after 2 prompt tokens, blocks of 2: sizes 2, 2, 1; two views -> 6 cells
    ids = torch.arange(10, 17)[None]  # [1, 7]
    completion = torch.tensor([[False, False, True, True, True, True, True]])
    masker = plugins.build("masker", "ebpo", {"block_length": 2, "num_views": 2})
    views = masker.views(ids, completion, 99, torch.tensor([123]), None)
    generator = torch.Generator().manual_seed(123)
    offset = torch.rand((), generator=generator, dtype=torch.float64).item()  # the documented first draw
    blocks = [[2, 3], [4, 5], [6]]
    levels = []
    for v in range(2):
        for k, positions in enumerate(blocks):
            level = (offset + (v * 3 + k) / 6) % 1.0
            levels.append(level)
            count = min(math.floor(level * len(positions)) + 1, len(positions))
            masked = [p for p in positions if views.noisy[v, 0, p] == 99]
            assert len(masked) == count
            for p in positions:  # weight n / masked over the two views' mean, 0 on a visible token
                expected = len(positions) / count / 2 if p in masked else 0.0
                assert views.coef[v, 0, p].item() == pytest.approx(expected)
    assert sorted((level - offset) % 1.0 for level in levels) == pytest.approx([i / 6 for i in range(6)])
    assert torch.all(views.noisy[:, 0, :2] == ids[0, :2])  # the prompt is never masked
    assert torch.all(views.coef[:, 0, :2] == 0)


def test_ebpo_clips_the_ratio_of_whole_sequences_once():
    # sequence 1: ELBO ratio exp(0.3 + 0.2) = 1.649 with A = +1 -> clipped at 1.2;
    # sequence 2: exp(-0.1) = 0.905 with A = -1, inside [0.8, 1.2] -> 0.905; sequence 3: exp(-0.4) = 0.670 with
    # A = -1 -> the pessimistic side keeps max(0.670, 0.8) = 0.8 (clipped below)
    old = torch.zeros(3, 2)
    new = torch.tensor([[0.3, 0.2], [-0.1, 5.0], [-0.2, -0.2]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [-1.0, -1.0]])
    loss, metrics = core_algos.get_policy_loss_fn("ebpo")(old, new, advantages, mask, "token-mean", loss_config())
    assert loss.item() == pytest.approx((-1.2 + math.exp(-0.1) + 0.8) / 3, rel=1e-5)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 3)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 3)


# --- SPG ------------------------------------------------------------------------------------------------------


def test_spg_views_keep_earlier_blocks_clean_and_mask_later_ones():
    ids = torch.arange(20, 29)[None]  # [1, 9]: 1 prompt token, 8 completion tokens
    completion = torch.ones(1, 9, dtype=torch.bool)
    completion[0, 0] = False
    masker = plugins.build("masker", "spg", {"block_length": 4, "num_views": 6})
    views = masker.views(ids, completion, 99, torch.tensor([7]), None)
    seen_blocks = set()
    for v in range(6):
        masked = views.noisy[v, 0] == 99
        first = int(masked.nonzero()[0])
        block = (first - 1) // 4
        seen_blocks.add(block)
        assert not masked[: 1 + 4 * block].any()  # before the chosen block: clean
        assert masked[1 + 4 * (block + 1) :].all()  # after it: fully masked
        assert 1 <= int(masked[1 + 4 * block : 1 + 4 * (block + 1)].sum()) <= 4
        count = int(masked.sum())
        # ELBO weights: completion length x mean over the masked tokens / views
        assert views.coef[v, 0][masked].tolist() == pytest.approx([8 / count / 6] * count)
    assert seen_blocks == {0, 1}


def test_spg_combine_is_the_elbo_for_positive_and_the_eubo_mixture_otherwise():
    # one completion of 4 tokens; view 0 masks tokens 2, 3 (t = 1/2), view 1 masks 1, 2, 3 (t = 3/4)
    coef = torch.tensor([[[0.0, 0.0, 1.0, 1.0]], [[0.0, 1.0, 1.0, 1.0]]])  # [2, 1, 4]
    views = MaskedViews(noisy=torch.zeros(2, 1, 4, dtype=torch.long), coef=coef)
    a2, a3, b1, b2, b3 = -1.0, -2.0, -0.5, -1.5, -3.0
    per_view = torch.tensor([[[0.0, 0.0, a2, a3]], [[0.0, b1, b2, b3]]])
    scored = torch.ones(1, 4, dtype=torch.bool)
    beta, omega = 1.5, 0.5
    masker = plugins.build("masker", "spg", {"block_length": 2, "num_views": 2, "beta": beta, "omega": omega})
    elbo = ((a2 + a3) / 2 + (b1 + b2 + b3) / 3) / 2  # mean over views of the mean over masked tokens

    def token_eubo(terms):  # (1 / beta) log mean_v [1{masked} p^beta / t_v]
        return math.log(sum(math.exp(beta * lp) / t for lp, t in terms) / 2) / beta

    eubo = (
        token_eubo([(b1, 0.75)]) + token_eubo([(a2, 0.5), (b2, 0.75)]) + token_eubo([(a3, 0.5), (b3, 0.75)])
    ) / 3  # the mean over the tokens some view masks
    positive = masker.combine(per_view, views, scored, torch.tensor([True]))
    negative = masker.combine(per_view, views, scored, torch.tensor([False]))
    before_advantages = masker.combine(per_view, views, scored, None)
    assert positive.sum().item() == pytest.approx(4 * elbo, rel=1e-6)
    assert before_advantages.sum().item() == pytest.approx(4 * elbo, rel=1e-6)
    assert negative.sum().item() == pytest.approx(4 * (omega * eubo + (1 - omega) * elbo), rel=1e-6)
    assert eubo > elbo  # the sandwich: the upper bound lies above the lower


def test_spg_combine_differentiates_through_the_upper_bound():
    coef = torch.tensor([[[1.0, 1.0]], [[0.0, 1.0]]])
    views = MaskedViews(noisy=torch.zeros(2, 1, 2, dtype=torch.long), coef=coef)
    per_view = torch.tensor([[[-1.0, -2.0]], [[0.0, -0.5]]], requires_grad=True)
    masker = plugins.build("masker", "spg", {"block_length": 2, "num_views": 2, "omega": 1.0})
    masker.combine(per_view, views, torch.ones(1, 2, dtype=torch.bool), torch.tensor([False])).sum().backward()
    assert torch.isfinite(per_view.grad).all()
    assert per_view.grad[1, 0, 0] == 0  # a token view 1 does not mask gets nothing from it
    # token 1: d/dlp of (1/beta) log((e^{beta a}/1 + e^{beta b}/0.5)/2), times n / |U| = 1: softmax weights
    wa, wb = math.exp(1.5 * -2.0) / 1.0, math.exp(1.5 * -0.5) / 0.5
    assert per_view.grad[0, 0, 1].item() == pytest.approx(wa / (wa + wb), rel=1e-5)


# --- config ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "advantage", "loss", "masker"),
    [
        ("wd1", "wd1", "wd1", "d1"),
        ("spg", "coupled_grpo", "spg", "spg"),
        ("ebpo", "coupled_grpo", "ebpo", "ebpo"),
        ("tracerl", "coupled_grpo", "coupled_grpo", "trace_replay"),
    ],
)
def test_each_estimator_is_an_algorithm_choice_whose_masker_builds(name, advantage, loss, masker):
    from diffugrpo_plugin.core.masking import masker_options

    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        config = compose(config_name="diffugrpo", overrides=[f"algorithm={name}", "actor_rollout_ref.model.path=/u"])
    assert config.algorithm.adv_estimator == advantage
    assert config.actor_rollout_ref.actor.policy_loss.loss_mode == loss
    diffusion = config.actor_rollout_ref.model.diffusion
    assert diffusion.masker == masker
    plugins.build("masker", masker, masker_options(diffusion.masker_kwargs))
    core_algos.get_adv_estimator_fn(advantage)
    core_algos.get_policy_loss_fn(loss)


# --- TraceRL / CJ-GRPO trajectory replay -------------------------------------------------------------------------


def test_trace_replay_shows_what_was_decided_before_each_step_and_scores_that_step():
    # prompt 7 8, canvas 1 2 3 4 decided at steps 0, 2, 1 and never (the padding after the EOS); mask id 9
    ids = torch.tensor([[7, 8, 1, 2, 3, 4]])
    canvas = torch.tensor([[False, False, True, True, True, True]])
    trace = torch.tensor([[-1, -1, 0, 2, 1, -1]])
    seeds = torch.tensor([0])
    per_step = plugins.build("masker", "trace_replay", {"shrink": 1}).views(ids, canvas, 9, seeds, None, trace=trace)
    assert per_step.noisy[:, 0].tolist() == [
        [7, 8, 9, 9, 9, 9],  # step 0: nothing decided yet; scores token 1
        [7, 8, 1, 9, 9, 9],  # step 1: token 1 visible; scores token 3
        [7, 8, 1, 9, 3, 9],  # step 2: tokens 1 and 3 visible; scores token 2
    ]
    assert per_step.coef[:, 0].tolist() == [[0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 1, 0], [0, 0, 0, 1, 0, 0]]
    merged = plugins.build("masker", "trace_replay", {"shrink": 2}).views(ids, canvas, 9, seeds, None, trace=trace)
    assert merged.noisy[:, 0].tolist() == [[7, 8, 9, 9, 9, 9], [7, 8, 1, 9, 3, 9]]  # steps {0, 1}, then {2}
    assert merged.coef[:, 0].tolist() == [[0, 0, 1, 0, 1, 0], [0, 0, 0, 1, 0, 0]]


def test_trace_replay_without_a_trace_says_what_to_set():
    masker = plugins.build("masker", "trace_replay", {})
    with pytest.raises(ValueError, match="record_trace=true"):
        masker.views(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.bool), 9, torch.tensor([0]))
