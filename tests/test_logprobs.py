"""Coupled log-probs: the row-selective pass equals a direct computation of the formula."""

import math

import pytest
import torch

from conftest import MASK_ID, build_tiny_module
from diffugrpo_plugin.logprobs import chunked_gathered_logprob, coupled_token_logprobs
from diffugrpo_plugin.masking import make_coupled, make_d1
from diffugrpo_plugin.models import DiffusionLM, ModelConfigError, align_logits, position_ids_from_mask


def batch_with_padding():
    # row 0 left-padded by 3; prompt then completion of 6 tokens (last one EOS-like id 5)
    input_ids = torch.tensor([[0, 0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 5],
                              [3, 4, 6, 7, 8, 9, 20, 21, 22, 23, 24, 5]])
    attention = torch.tensor([[0, 0, 0] + [1] * 9, [1] * 12])
    completion = torch.zeros_like(input_ids, dtype=torch.bool)
    completion[:, 6:] = True
    return input_ids, attention, completion


def direct_coupled_logprobs(lm: DiffusionLM, views, input_ids, attention):
    """The formula computed the slow way: full logits of every view, full log-softmax, gather, combine."""
    positions = position_ids_from_mask(attention)
    total = torch.zeros(input_ids.shape, dtype=torch.float32)
    for v in range(views.num_views):
        raw = lm.module(input_ids=views.noisy[v], attention_mask=attention, position_ids=positions).logits
        if lm.shift_logits:  # output at l-1 scores token l
            raw = torch.cat([raw[:, :1], raw[:, :-1]], dim=1)
        logp = torch.log_softmax(raw.float(), dim=-1).gather(-1, input_ids[..., None]).squeeze(-1)
        total = total + views.coef[v] * logp
    return total


@pytest.mark.parametrize("masker", [make_coupled(), make_d1(p_mask_prompt=0.0)], ids=["coupled", "d1"])
def test_row_selective_pass_equals_direct_formula_values_and_gradients(tiny_lm, masker):
    input_ids, attention, completion = batch_with_padding()
    views = masker.views(input_ids, completion, MASK_ID, torch.tensor([11, 12]))

    fast = coupled_token_logprobs(tiny_lm, views, input_ids, attention).logp
    fast.sum().backward()
    fast_grads = [p.grad.clone() for p in tiny_lm.module.parameters()]
    tiny_lm.module.zero_grad()

    slow = direct_coupled_logprobs(tiny_lm, views, input_ids, attention)
    slow.sum().backward()
    slow_grads = [p.grad.clone() for p in tiny_lm.module.parameters()]

    assert torch.allclose(fast, slow, atol=1e-5)
    assert (fast[~completion] == 0).all()
    for a, b in zip(fast_grads, slow_grads):
        assert torch.allclose(a, b, atol=1e-5)


def test_entropy_is_the_fully_masked_views_entropy(tiny_lm):
    input_ids, attention, completion = batch_with_padding()
    views = make_coupled().views(input_ids, completion, MASK_ID, torch.tensor([1, 2]))
    out = coupled_token_logprobs(tiny_lm, views, input_ids, attention, with_entropy=True)
    raw = tiny_lm.logits(views.noisy[0], attention)
    probs = torch.softmax(raw.float(), -1)
    expected = -(probs * torch.log(probs)).sum(-1)
    assert torch.allclose(out.entropy[completion], expected[completion], atol=1e-5)
    assert (out.entropy[~completion] == 0).all()


def test_left_padding_does_not_change_log_probs(tiny_lm):
    input_ids, attention, completion = batch_with_padding()
    masker = make_coupled()
    padded = coupled_token_logprobs(tiny_lm, masker.views(input_ids, completion, MASK_ID, torch.tensor([5, 6])),
                                    input_ids, attention).logp
    unpadded_ids, unpadded_completion = input_ids[:1, 3:], completion[:1, 3:]
    alone = coupled_token_logprobs(tiny_lm, masker.views(unpadded_ids, unpadded_completion, MASK_ID,
                                                         torch.tensor([5])),
                                   unpadded_ids, torch.ones_like(unpadded_ids)).logp
    assert torch.allclose(padded[0, 3:], alone[0], atol=1e-5)


def test_tied_embeddings_model_works_too():
    lm = DiffusionLM.wrap(build_tiny_module("dream", tie=True))
    input_ids, attention, completion = batch_with_padding()
    views = make_coupled().views(input_ids, completion, MASK_ID, torch.tensor([3, 4]))
    assert torch.allclose(coupled_token_logprobs(lm, views, input_ids, attention).logp,
                          direct_coupled_logprobs(lm, views, input_ids, attention), atol=1e-5)


def test_gathered_logprob_by_hand_and_in_fp32_for_bf16_logits():
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, math.log(2.0)]])
    logp, entropy = chunked_gathered_logprob(logits, torch.tensor([2, 0]), with_entropy=True)
    z0 = math.exp(1) + math.exp(2) + math.exp(3)
    assert logp[0].item() == pytest.approx(3 - math.log(z0), abs=1e-6)
    assert logp[1].item() == pytest.approx(math.log(1 / 4), abs=1e-6)  # probs 1/4, 1/4, 1/2
    assert entropy[1].item() == pytest.approx(-(0.25 * math.log(0.25) * 2 + 0.5 * math.log(0.5)), abs=1e-6)
    half = chunked_gathered_logprob(logits.to(torch.bfloat16), torch.tensor([2, 0]))
    assert half.dtype == torch.float32


def test_shift_and_no_shift_adapters_align_logits_by_hand():
    # a fake output where position i's logits are one-hot on token i
    raw = torch.eye(4)[None]  # [1, L=4, V=4]
    assert torch.equal(align_logits(raw, shift=False), raw)
    shifted = align_logits(raw, shift=True)
    # Dream-style: token i is scored by the output at i-1, so aligned[i] is one-hot on i-1
    assert torch.equal(shifted[0, 1:], torch.eye(4)[:-1])


def test_adapter_resolves_shift_and_mask_id_or_says_what_to_set():
    assert DiffusionLM.wrap(build_tiny_module("dream")).shift_logits is True
    assert DiffusionLM.wrap(build_tiny_module("llada")).shift_logits is False
    module = build_tiny_module("dream")
    del module.config.mask_token_id
    with pytest.raises(ModelConfigError, match="mask_token_id"):
        DiffusionLM.wrap(module)
    module.config.model_type = "mystery"
    del module.config.diffusion_logits_shift
    with pytest.raises(ModelConfigError, match="logits_shift"):
        DiffusionLM.wrap(module, mask_token_id=3)


def test_shifted_model_refuses_a_completion_at_position_zero():
    lm = DiffusionLM.wrap(build_tiny_module("dream"))
    ids = torch.tensor([[5, 6, 7]])
    completion = torch.ones_like(ids, dtype=torch.bool)
    views = make_d1(p_mask_prompt=0.0).views(ids, completion, MASK_ID, torch.tensor([1]))
    with pytest.raises(ValueError, match="position 0"):
        coupled_token_logprobs(lm, views, ids, torch.ones_like(ids))


def test_chunked_gradient_by_hand_is_upstream_times_onehot_minus_softmax():
    # softmax([0, ln 2, 0]) = [1/4, 1/2, 1/4]; d logp[target=1] / d logits = onehot - softmax
    logits = torch.tensor([[0.0, math.log(2.0), 0.0], [0.0, 0.0, 0.0]], requires_grad=True)
    logp = chunked_gathered_logprob(logits, torch.tensor([1, 2]), chunk_rows=1)
    assert logp.tolist() == pytest.approx([math.log(0.5), math.log(1 / 3)], abs=1e-6)
    (logp * torch.tensor([1.0, -3.0])).sum().backward()  # upstream gradients 1 and -3
    assert logits.grad[0].tolist() == pytest.approx([-0.25, 0.5, -0.25], abs=1e-6)
    assert logits.grad[1].tolist() == pytest.approx([1.0, 1.0, -2.0], abs=1e-6)  # -3 * ([0, 0, 1] - 1/3)


@pytest.mark.parametrize("chunk_rows", [1, 2, 5, 64])
def test_chunked_values_and_gradients_equal_full_log_softmax_for_any_chunking(chunk_rows):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 11, generator=generator, dtype=torch.float64, requires_grad=True)
    targets, upstream = torch.tensor([0, 10, 3, 3, 7]), torch.randn(5, generator=generator, dtype=torch.float64)
    expected = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)  # [5]
    (expected_grad,) = torch.autograd.grad((expected * upstream).sum(), logits)
    logp, entropy = chunked_gathered_logprob(logits, targets, chunk_rows, with_entropy=True)
    (grad,) = torch.autograd.grad((logp * upstream).sum(), logits)
    assert logp.dtype == torch.float32 and torch.allclose(logp.double(), expected, atol=1e-6)
    assert torch.allclose(grad, expected_grad, atol=1e-6)
    probs = torch.softmax(logits.detach(), -1)
    assert not entropy.requires_grad  # a metric, never part of the graph
    assert torch.allclose(entropy.double(), -(probs * probs.log()).sum(-1), atol=1e-6)


def test_chunked_gradient_keeps_bf16_logits_dtype():
    logits = torch.tensor([[0.0, math.log(2.0), 0.0]], dtype=torch.bfloat16, requires_grad=True)
    chunked_gathered_logprob(logits, torch.tensor([1])).backward()
    assert logits.grad.dtype == torch.bfloat16
    assert logits.grad[0].float().tolist() == pytest.approx([-0.25, 0.5, -0.25], abs=1e-2)
    with pytest.raises(ValueError, match="chunk_rows"):
        chunked_gathered_logprob(logits, torch.tensor([1]), chunk_rows=0)
