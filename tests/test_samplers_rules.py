"""Each sampler rule on a fake model whose logits make the right choice known by hand."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from diffugrpo_plugin.sampling.decoding import (
    dream_transfer_count,
    gumbel_argmax,
    llada_transfer_count,
    sample_categorical,
    top_k_filter,
    top_k_mask,
    top_p_filter,
    top_p_then_top_k_filter,
)
from diffugrpo_plugin.sampling.denoising import cut_after_eos
from diffugrpo_plugin.sampling.samplers import (
    DreamSampler,
    EntropySampler,
    LLaDASampler,
    MaskGitPlusSampler,
    OriginSampler,
    TopKMarginSampler,
)
from samplers_support import FAKE_EOS, FAKE_MASK, FAKE_PAD, fake_lm, log_probs, single_thread

_one_thread = pytest.fixture(scope="module", autouse=True)(single_thread)

# Three completion positions whose distributions rank differently under each alg:
#   C = [.15 .15 .15 .55] -> token 3; top1 .55, margin .40, entropy 1.183
#   A = [.48 .52  0   0 ] -> token 1; top1 .52, margin .04, entropy 0.692
#   B = [.05 .30 .60 .05] -> token 2; top1 .60, margin .30, entropy 0.967
C = log_probs(0.15, 0.15, 0.15, 0.55)
A = log_probs(0.48, 0.52)
B = log_probs(0.05, 0.30, 0.60, 0.05)
D = log_probs(0.99, 0.01)  # very confident: token 0
PROMPT = 1  # the single prompt token (position 0); its own row is never read
THREE = fake_lm({PROMPT: [C, C, A, B]})


def generate(sampler, lm, rows: int = 1, new_tokens: int = 3, seeds=None):
    ids = torch.full((rows, 1), PROMPT)
    return sampler.generate(
        lm,
        ids,
        torch.ones_like(ids),
        new_tokens,
        eos_token_id=FAKE_EOS,
        pad_token_id=FAKE_PAD,
        seeds=seeds or list(range(rows)),
        record_trace=True,
    )


def test_dream_schedule_matches_hand_computed_counts():
    # steps=2, eps=1e-3: t = [1, .5005, .001]; int(3 * (1 - .5005)) = 1, then the remaining 2.
    timesteps = torch.linspace(1, 1e-3, 3)
    assert [dream_transfer_count(3, 0, 2, timesteps), dream_transfer_count(2, 1, 2, timesteps)] == [1, 2]
    # steps == m == 4 (the reference's quirk): int(4 * .24975) = 0, int(4 * .3329) = 1, int(3 * .4993) = 1, rest 2.
    timesteps = torch.linspace(1, 1e-3, 5)
    counts, masked = [], 4
    for step in range(4):
        counts.append(dream_transfer_count(masked, step, 4, timesteps))
        masked -= counts[-1]
    assert counts == [0, 1, 1, 2]


def test_llada_schedule_is_an_equal_split_fixed_at_the_block_start():
    # 10 tokens over 4 steps: LLaDA gives 10 // 4 = 2 each, one more in the first 10 % 4 = 2 steps.
    assert [llada_transfer_count(10, step, 4, num_masked=10) for step in range(4)] == [3, 3, 2, 2]
    # A position that took the mask token stays masked; the split is not redone (10 masks, 3 left after 3 steps).
    assert llada_transfer_count(10, 3, 4, num_masked=3) == 2
    # A threshold step that unmasked extra tokens leaves fewer than the split asks for: all of them.
    assert llada_transfer_count(10, 1, 4, num_masked=1) == 1


@pytest.mark.parametrize(
    "sampler, first_position",
    [
        (MaskGitPlusSampler(steps=2), 2),  # B has the most likely token (.60)
        (TopKMarginSampler(steps=2), 0),  # C has the largest margin (.40)
        (EntropySampler(steps=2), 1),  # A has the lowest entropy (.692)
        (DreamSampler(steps=2, alg="entropy"), 1),
    ],
)
def test_dream_alg_unmasks_its_best_position_first(sampler, first_position):
    out = generate(sampler, THREE)
    assert out.completion_ids.tolist() == [[3, 1, 2]]
    expected_steps = [1, 1, 1]
    expected_steps[first_position] = 0
    assert out.unmask_step.tolist() == [expected_steps]
    assert out.steps.tolist() == [2] and out.forwards == 2


def test_alg_temp_samples_positions_from_softmax_of_confidence():
    # maskgit_plus confidences [.55, .52, .60] / alg_temp .1 -> softmax([5.5, 5.2, 6.0]) = [.295, .219, .486].
    rows = 3000
    out = generate(MaskGitPlusSampler(steps=2, alg_temp=0.1), THREE, rows=rows)
    first = (out.unmask_step == 0).long().argmax(dim=1)
    frequencies = torch.bincount(first, minlength=3).double() / rows
    assert torch.allclose(frequencies, torch.tensor([0.295, 0.219, 0.486], dtype=torch.float64), atol=0.03)
    assert (out.unmask_step == 0).sum(dim=1).eq(1).all()  # exactly one position at step 0


def test_origin_unmasks_each_position_with_probability_one_minus_s_over_t():
    rows = 3000
    out = generate(OriginSampler(steps=2), THREE, rows=rows)
    assert out.completion_ids.eq(torch.tensor([3, 1, 2])).all()
    fraction_first_step = (out.unmask_step == 0).double().mean().item()
    assert abs(fraction_first_step - (1 - 0.5005)) < 0.02
    assert out.unmask_step.ge(0).all()  # the last step unmasks whatever is left


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"temperature": 1.0}, {0: 0.05, 1: 0.30, 2: 0.60, 3: 0.05}),
        ({"temperature": 0.5}, {0: 0.0055, 1: 0.1978, 2: 0.7912, 3: 0.0055}),  # p^2 renormalised
        ({"temperature": 1.0, "top_k": 2}, {1: 1 / 3, 2: 2 / 3}),
        ({"temperature": 1.0, "top_p": 0.7}, {1: 1 / 3, 2: 2 / 3}),  # .60 then .30 reach .7
        ({"temperature": 1.0, "top_p": 0.5}, {2: 1.0}),  # .60 alone exceeds .5
    ],
)
def test_dream_token_sampling_follows_temperature_top_k_top_p(options, expected):
    # One position decided in one step, so the token is sampled exactly once from the filtered distribution.
    rows = 3000
    out = generate(MaskGitPlusSampler(**options), fake_lm({PROMPT: [C, B]}), rows=rows, new_tokens=1)
    counts = Counter(out.completion_ids[:, 0].tolist())
    assert set(counts) <= set(expected)
    for token, probability in expected.items():
        assert abs(counts[token] / rows - probability) < 0.03, (token, counts)


def test_sample_categorical_inverse_cdf_by_hand():
    probs = torch.tensor([[0.2, 0.0, 0.5, 0.3]] * 4)
    uniforms = torch.tensor([0.0, 0.19, 0.2, 0.999999])
    # CDF [.2, .2, .7, 1.0]: u < .2 -> 0; .2 <= u < .7 -> 2 (never the empty token 1); else 3
    assert sample_categorical(probs, uniforms).tolist() == [0, 0, 2, 3]


def test_top_p_keeps_tokens_until_the_cumulative_probability_exceeds_it():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))
    assert torch.isinf(top_p_filter(logits, 0.5)).tolist() == [[True, False, True]]
    assert torch.isinf(top_p_filter(logits, 0.65)).tolist() == [[True, False, False]]


def test_nucleus_then_top_k_by_hand():
    """Probabilities [.05, .4, .1, .3, .15]: ranked 1, 3, 4, 2, 0 with 0, .4, .7, .85, .95 before each."""
    logits = torch.log(torch.tensor([[0.05, 0.4, 0.1, 0.3, 0.15]]))
    kept = lambda top_p, top_k: torch.isfinite(top_p_then_top_k_filter(logits, top_p, top_k))[0].tolist()  # noqa: E731
    assert kept(0.5, 4) == [False, True, False, True, False]  # the nucleus ends first
    assert kept(0.9, 2) == [False, True, False, True, False]  # top-k ends first
    assert kept(0.99, 5) == [True] * 5
    assert kept(0.3, 3) == [False, True, False, False, False]  # the best token always stays


@pytest.mark.parametrize("kind", ["continuous", "ties", "some -inf", "bf16"])
def test_nucleus_then_top_k_keeps_what_the_sorting_filters_keep(kind):
    """The same logits as ``top_p_filter`` then ``top_k_filter`` (Dream's order), which sort every row: ties at
    either edge included, where the sort's order among equal logits decides."""
    generator = torch.Generator().manual_seed(["continuous", "ties", "some -inf", "bf16"].index(kind))
    for _ in range(60):
        rows, vocab = (int(torch.randint(1, n, (1,), generator=generator)) for n in (64, 1500))
        logits = torch.randn(rows, vocab + 1, generator=generator) * float(1 + 6 * torch.rand(1, generator=generator))
        if kind == "ties":
            logits = logits.round()
        elif kind == "some -inf":
            logits[:, : vocab // 3] = -math.inf
        elif kind == "bf16":
            logits = logits.bfloat16().float()
        top_p, top_k = float(torch.rand(1, generator=generator)), int(torch.randint(1, 80, (1,), generator=generator))
        expected = top_k_filter(top_p_filter(logits, top_p), top_k)
        assert torch.equal(top_p_then_top_k_filter(logits, top_p, top_k), expected)


def test_top_k_mask_picks_per_row_counts_with_lower_index_on_ties():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.9], [1.0, -math.inf, 2.0, 0.0]])
    assert top_k_mask(scores, torch.tensor([2, 1])).tolist() == [
        [False, True, False, True],
        [False, False, True, False],
    ]


def test_gumbel_argmax_by_hand():
    logits = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    # exp(l) / (-log u): row 0: [1 / .693, e / 4.605] = [1.44, .59] -> 0; row 1: [1 / 4.605, e / .693] -> 1
    uniforms = torch.tensor([[0.5, 0.01], [0.01, 0.5]], dtype=torch.float64)
    assert gumbel_argmax(logits, 1.0, uniforms).tolist() == [0, 1]
    assert gumbel_argmax(logits, 0.0, None).tolist() == [1, 1]


# LLaDA: two blocks of two tokens, two steps per block (one token per step).
# Block 1 = [A (.52), B (.60)]; block 2 = [D (.99), C (.55)]. D is the most confident position of all,
# yet it must wait for block 1.
FOUR = fake_lm({PROMPT: [C, A, B, D, C]})


def test_llada_low_confidence_is_blockwise_and_picks_the_most_likely_token():
    out = generate(LLaDASampler(steps=4, block_length=2), FOUR, new_tokens=4)
    assert out.completion_ids.tolist() == [[1, 2, 0, 3]]
    assert out.unmask_step.tolist() == [[1, 0, 2, 3]]


def test_llada_random_remasking_orders_uniformly_within_the_block():
    rows = 2000
    out = generate(LLaDASampler(steps=4, block_length=2, remasking="random"), FOUR, rows=rows, new_tokens=4)
    first_in_block_1 = (out.unmask_step[:, 0] == 0).double().mean().item()
    first_in_block_2 = (out.unmask_step[:, 2] == 2).double().mean().item()
    assert abs(first_in_block_1 - 0.5) < 0.04 and abs(first_in_block_2 - 0.5) < 0.04
    assert out.unmask_step[:, :2].lt(2).all() and out.unmask_step[:, 2:].ge(2).all()


def test_llada_gumbel_sampling_follows_the_softmax():
    rows = 3000
    out = generate(LLaDASampler(temperature=1.0), fake_lm({PROMPT: [C, B]}), rows=rows, new_tokens=1)
    counts = Counter(out.completion_ids[:, 0].tolist())
    for token, probability in {0: 0.05, 1: 0.30, 2: 0.60, 3: 0.05}.items():
        assert abs(counts[token] / rows - probability) < 0.03, counts


def test_llada_classifier_free_guidance_by_hand():
    # conditional [1.0, 1.2] -> token 1; unconditional [0, 1.5];
    # cfg_scale 1: u + 2 (c - u) = [2.0, 0.9] -> token 0.
    lm = fake_lm({PROMPT: [C, [1.0, 1.2, 0, 0, 0, 0]], FAKE_MASK: [C, [0.0, 1.5, 0, 0, 0, 0]]})
    assert generate(LLaDASampler(), lm, new_tokens=1).completion_ids.tolist() == [[1]]
    guided = generate(LLaDASampler(cfg_scale=1.0), lm, new_tokens=1)
    assert guided.completion_ids.tolist() == [[0]]
    assert guided.forwards == 1 and lm.module.calls == 2  # one batched pass per step for both branches


def test_everything_after_the_first_eos_becomes_padding():
    completion = torch.tensor([[7, FAKE_EOS, 8, FAKE_EOS], [FAKE_EOS, 7, 7, 7], [7, 8, 9, 7]])
    ids, mask = cut_after_eos(completion, FAKE_EOS, FAKE_PAD)
    assert ids.tolist() == [[7, FAKE_EOS, 0, 0], [FAKE_EOS, 0, 0, 0], [7, 8, 9, 7]]
    assert mask.tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]]


def test_a_row_stops_after_a_finished_block_with_eos_and_others_continue():
    eos_first = log_probs(0.1, 0.1, 0.1, 0.1, 0.6)  # EOS is the most likely token
    other_prompt = 2
    lm = fake_lm({PROMPT: [C, A, eos_first, D, C], other_prompt: [C, A, B, D, C]})
    sampler = LLaDASampler(steps=4, block_length=2)
    ids = torch.tensor([[PROMPT], [other_prompt]])
    out = sampler.generate(
        lm, ids, torch.ones_like(ids), 4, eos_token_id=FAKE_EOS, pad_token_id=FAKE_PAD, seeds=[0, 1], record_trace=True
    )
    assert out.completion_ids.tolist() == [[1, FAKE_EOS, FAKE_PAD, FAKE_PAD], [1, 2, 0, 3]]
    assert out.completion_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert out.lengths.tolist() == [2, 4]
    assert out.steps.tolist() == [2, 4]
    assert out.unmask_step[0, 2:].tolist() == [-1, -1]  # never decided: padding anyway
    # The second block ran for the second row alone.
    assert lm.module.calls == 4


def test_seeded_rows_do_not_depend_on_the_rest_of_the_batch():
    sampler = MaskGitPlusSampler(steps=2, temperature=1.0, alg_temp=0.5)
    together = generate(sampler, THREE, rows=6, seeds=[10, 11, 12, 13, 14, 15])
    alone = generate(sampler, THREE, rows=1, seeds=[13])
    split = MaskGitPlusSampler(steps=2, temperature=1.0, alg_temp=0.5, micro_batch_size=4)
    in_micro_batches = generate(split, THREE, rows=6, seeds=[10, 11, 12, 13, 14, 15])
    assert torch.equal(together.completion_ids[3], alone.completion_ids[0])
    assert torch.equal(together.unmask_step[3], alone.unmask_step[0])
    assert torch.equal(together.completion_ids, in_micro_batches.completion_ids)
    assert torch.equal(together.unmask_step, in_micro_batches.unmask_step)
    different = generate(sampler, THREE, rows=6, seeds=[20, 21, 22, 23, 24, 25])
    assert not torch.equal(together.unmask_step, different.unmask_step)


def test_without_a_micro_batch_the_sampler_takes_what_its_memory_budget_allows():
    # One row of THREE's fake model (vocabulary 6, no head module: its config's vocab_size, counted as fp32
    # logits) at 1 prompt + 3 new tokens: unshifted logits 4 x 6 x 4 B = 96 B, fp32 window buffers 10 x 3 x 6 x 4 B
    # = 720 B; 816 B in all. A budget of 2.5 rows takes 2 rows at a time: 6 rows are 3 micro-batches.
    row_bytes = 4 * 6 * 4 + 10 * 3 * 6 * 4
    seeds = [10, 11, 12, 13, 14, 15]
    whole = generate(MaskGitPlusSampler(steps=2, temperature=1.0, alg_temp=0.5), THREE, rows=6, seeds=seeds)
    budget = MaskGitPlusSampler(steps=2, temperature=1.0, alg_temp=0.5, memory_budget_gib=2.5 * row_bytes / 2**30)
    calls_before = THREE.module.calls
    split = generate(budget, THREE, rows=6, seeds=seeds)
    assert THREE.module.calls - calls_before == split.forwards == 3 * whole.forwards == 3 * 2  # 2 steps each
    assert torch.equal(whole.completion_ids, split.completion_ids) and torch.equal(whole.unmask_step, split.unmask_step)
    # the default budget (16 GiB) takes the whole batch at once here; a set micro_batch_size wins over any budget
    assert whole.forwards == 2
    set_size = MaskGitPlusSampler(steps=2, micro_batch_size=3, memory_budget_gib=2.5 * row_bytes / 2**30)
    assert generate(set_size, THREE, rows=6).forwards == 2 * 2


def test_threshold_also_unmasks_every_position_above_it():
    # Schedule of steps=2 takes 1 position at step 0 (B, .60 for maskgit_plus); threshold .5 adds C (.55) and A (.52).
    out = generate(MaskGitPlusSampler(steps=2, threshold=0.5), THREE)
    assert out.unmask_step.tolist() == [[0, 0, 0]] and out.forwards == 1
    out = generate(MaskGitPlusSampler(steps=2, threshold=0.53), THREE)
    assert out.unmask_step.tolist() == [[0, 1, 0]]
    plain = generate(MaskGitPlusSampler(steps=2), THREE)
    at_one = generate(MaskGitPlusSampler(steps=2, threshold=1.0), THREE)
    assert torch.equal(plain.unmask_step, at_one.unmask_step) and plain.forwards == at_one.forwards
