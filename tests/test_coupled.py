"""DiffuCoder-compatible functions, checked against the reference's formulas by hand."""

import math
import random

import numpy as np
import pytest
import torch

from conftest import MASK_ID, build_tiny_module
from diffugrpo_plugin.diffucoder_compat import forward_process, get_per_token_logps, selective_log_softmax
from diffugrpo_plugin.models.dlm import DiffusionLM


def prompt_and_batch(batch_size=4, prompt_len=3, length=10):
    batch = torch.arange(batch_size * length).reshape(batch_size, length) % 50 + 1
    return batch, torch.arange(length) < prompt_len


def test_forward_process_versions_weights_and_completion_mask():
    batch, prompt_index = prompt_and_batch()
    noisy, weights, completion_mask = forward_process(batch, prompt_index, MASK_ID, seed=3)
    assert len(noisy) == 3 and all(v.shape == batch.shape for v in noisy)
    completion = ~prompt_index.expand_as(batch)
    assert torch.equal(noisy[0] == MASK_ID, completion)  # version 1: completion fully masked
    assert torch.equal((noisy[1] == MASK_ID) ^ (noisy[2] == MASK_ID), completion)  # complementary pair
    assert torch.equal(completion_mask, noisy[1] == MASK_ID)  # tokens masked in version 2
    for v in noisy:
        assert torch.equal(v[:, :3], batch[:, :3])  # prompt untouched
    t = 1 / weights[1]
    assert weights[0] == 1.0 and 0.2 <= t <= 0.8 and weights[2] == pytest.approx(1 / (1 - t))


def test_forward_process_accepts_batched_prompt_index_and_reproduces_with_seed():
    batch, prompt_index = prompt_and_batch()
    per_row = prompt_index.expand_as(batch).clone()
    a = forward_process(batch, prompt_index, MASK_ID, seed=11)
    b = forward_process(batch, per_row, MASK_ID, seed=11)
    assert all(torch.equal(x, y) for x, y in zip(a[0], b[0])) and a[1] == b[1]
    c = forward_process(batch, prompt_index, MASK_ID, seed=12)
    assert not torch.equal(a[2], c[2])


def test_forward_process_never_touches_global_rng():
    batch, prompt_index = prompt_and_batch()
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    forward_process(batch, prompt_index, MASK_ID, seed=1)
    forward_process(batch, prompt_index, MASK_ID, seed=None)
    assert torch.equal(torch.get_rng_state(), states[0])
    assert random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])


def test_accumulate_tiles_the_random_rows_across_generations():
    batch, prompt_index = prompt_and_batch(batch_size=6)
    _, _, completion_mask = forward_process(batch, prompt_index, MASK_ID, seed=5, accumulate=True, num_generations=3)
    # 6 rows = 3 tiles of the 2 drawn rows
    assert torch.equal(completion_mask[0:2], completion_mask[2:4])
    assert torch.equal(completion_mask[0:2], completion_mask[4:6])
    with pytest.raises(ValueError, match="divisible"):
        forward_process(batch[:5], prompt_index, MASK_ID, seed=5, accumulate=True, num_generations=3)


def test_prompt_masking_only_when_switched_on():
    batch, prompt_index = prompt_and_batch(batch_size=8, prompt_len=8, length=12)
    noisy, _, _ = forward_process(batch, prompt_index, MASK_ID, seed=2, p_mask_prompt=0.5)
    assert (noisy[0][:, :8] == MASK_ID).any()
    noisy, _, _ = forward_process(batch, prompt_index, MASK_ID, seed=2)
    assert not (noisy[0][:, :8] == MASK_ID).any()


def test_selective_log_softmax_without_weights_is_a_plain_gather():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])  # probs 1/4, 3/4
    assert selective_log_softmax(logits, torch.tensor([[1]])).item() == pytest.approx(math.log(0.75))


def test_selective_log_softmax_coupled_layout_by_hand():
    # K=1 iteration, B=1, L=2, V=2: three versions, each a [1, 2, 2] block
    def logits_for(p_of_token1):  # two positions, same distribution
        return torch.tensor([[0.0, math.log(p_of_token1 / (1 - p_of_token1))]] * 2)

    logits = torch.stack([logits_for(0.5), logits_for(0.8), logits_for(0.25)])  # [3, L, V]
    index = torch.tensor([[1, 1]])
    mask = torch.tensor([[True, False]])  # position 0 masked in version 2, position 1 in version 3
    w = [1.0, 1 / 0.4, 1 / 0.6]
    out = selective_log_softmax(logits, index, w, mask)
    expected_0 = (math.log(0.5) + math.log(0.8) * w[1]) / 2
    expected_1 = (math.log(0.5) + math.log(0.25) * w[2]) / 2
    assert out[0, 0].item() == pytest.approx(expected_0, rel=1e-6)
    assert out[0, 1].item() == pytest.approx(expected_1, rel=1e-6)


def test_selective_log_softmax_iteration_blocks_and_bf16():
    torch.manual_seed(0)
    k, b, length, vocab = 2, 2, 3, 5
    logits = torch.randn(k * 3 * b, length, vocab)
    index = torch.randint(0, vocab, (k * b, length))
    mask = torch.rand(k * b, length) < 0.5
    weights = [1.0, 2.0, 3.0, 1.0, 4.0, 5.0]
    out = selective_log_softmax(logits, index, weights, mask)
    logp = torch.log_softmax(logits, -1)
    for it in range(k):
        rows = slice(it * b, (it + 1) * b)
        lp = [
            logp[(3 * it + v) * b : (3 * it + v + 1) * b].gather(-1, index[rows, :, None]).squeeze(-1) for v in range(3)
        ]
        want = (lp[0] + torch.where(mask[rows], lp[1] * weights[3 * it + 1], lp[2] * weights[3 * it + 2])) / 2
        assert torch.allclose(out[rows], want, atol=1e-6)
    half = selective_log_softmax(logits.to(torch.bfloat16), index, weights, mask)
    assert half.dtype == torch.float32
    assert torch.allclose(half, out, atol=0.1)


@pytest.mark.parametrize("style", ["dream", "llada"])
def test_get_per_token_logps_matches_a_direct_computation(style):
    module = build_tiny_module(style)
    lm = DiffusionLM.wrap(module)
    torch.manual_seed(1)
    input_ids = torch.randint(1, 60, (3, 9))
    logits_to_keep = 5
    got = get_per_token_logps(module, input_ids, logits_to_keep, [7, 8])
    assert got.shape == (3, 2, logits_to_keep)
    prompt_index = torch.arange(9) < 9 - logits_to_keep
    for k, seed in enumerate([7, 8]):
        noisy, weights, mask = forward_process(input_ids, prompt_index, MASK_ID, seed)
        # the reference's formula, unoptimised: full log-softmax of each version's aligned logits, gathered
        logp = [
            torch.log_softmax(lm.logits(v, torch.ones_like(v)).float(), -1).gather(-1, input_ids[..., None])[..., 0]
            for v in noisy
        ]  # 3 x [B, L]
        want = (logp[0] * weights[0] + torch.where(mask, logp[1] * weights[1], logp[2] * weights[2])) / 2
        assert torch.allclose(got[:, k], want[:, -logits_to_keep:], atol=1e-5)
