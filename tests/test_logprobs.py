"""Coupled log-probs: the row-selective pass equals a direct computation of the formula."""

import math

import pytest
import torch

from conftest import MASK_ID, build_tiny_module
from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
from diffugrpo_plugin.core.masking import make_coupled, make_d1
from diffugrpo_plugin.models.dlm import DiffusionLM, ModelConfigError, align_logits, position_ids_from_mask
from diffugrpo_plugin.models.kernels import chunked_gathered_logprob, fused_head_logprob


def batch_with_padding():
    # row 0 left-padded by 3; prompt then completion of 6 tokens (last one EOS-like id 5)
    input_ids = torch.tensor([[0, 0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 5], [3, 4, 6, 7, 8, 9, 20, 21, 22, 23, 24, 5]])
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


def test_a_draw_that_masks_nothing_scores_zero_with_a_zero_gradient(tiny_lm):
    """A random mask (the sft masker at a small t) can leave every completion token visible: no row is
    projected, and the pass returns zeros instead of failing."""
    input_ids, attention, completion = batch_with_padding()
    views = make_d1(p_mask_prompt=0.0).views(input_ids, completion, MASK_ID, torch.tensor([1, 2]))
    views.coef.zero_()
    out = coupled_token_logprobs(tiny_lm, views, input_ids, attention, with_entropy=True)
    assert (out.logp == 0).all() and (out.entropy == 0).all()
    out.logp.sum().backward()
    assert all(p.grad is None or (p.grad == 0).all() for p in tiny_lm.module.parameters())


def test_left_padding_does_not_change_log_probs(tiny_lm):
    input_ids, attention, completion = batch_with_padding()
    masker = make_coupled()
    padded = coupled_token_logprobs(
        tiny_lm, masker.views(input_ids, completion, MASK_ID, torch.tensor([5, 6])), input_ids, attention
    ).logp
    unpadded_ids, unpadded_completion = input_ids[:1, 3:], completion[:1, 3:]
    alone = coupled_token_logprobs(
        tiny_lm,
        masker.views(unpadded_ids, unpadded_completion, MASK_ID, torch.tensor([5])),
        unpadded_ids,
        torch.ones_like(unpadded_ids),
    ).logp
    assert torch.allclose(padded[0, 3:], alone[0], atol=1e-5)


def test_tied_embeddings_model_works_too():
    lm = DiffusionLM.wrap(build_tiny_module("dream", tie=True))
    input_ids, attention, completion = batch_with_padding()
    views = make_coupled().views(input_ids, completion, MASK_ID, torch.tensor([3, 4]))
    assert torch.allclose(
        coupled_token_logprobs(lm, views, input_ids, attention).logp,
        direct_coupled_logprobs(lm, views, input_ids, attention),
        atol=1e-5,
    )


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


def test_fused_head_by_hand():
    """hidden (1, 0) against head rows e0, e1, 0: logits (1, 0, 0), so log p(0) = 1 - log(e + 2); the gradient of
    the logits is onehot - softmax, of the weight (onehot - softmax)^T hidden, of the hidden softmax-weighted rows."""
    hidden = torch.tensor([[1.0, 0.0]], requires_grad=True)
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], requires_grad=True)
    logp = fused_head_logprob(hidden, weight, torch.tensor([0]), chunk_rows=1)
    assert logp.item() == pytest.approx(1 - math.log(math.e + 2), abs=1e-6)
    logp.sum().backward()
    softmax = torch.tensor([math.e, 1.0, 1.0]) / (math.e + 2)
    grad_logits = torch.tensor([1.0, 0.0, 0.0]) - softmax  # [V]
    assert torch.allclose(weight.grad, grad_logits[:, None] * torch.tensor([1.0, 0.0]), atol=1e-6)
    assert torch.allclose(hidden.grad, (grad_logits[:, None] * weight.detach()).sum(0, keepdim=True), atol=1e-6)


def direct_head_logprob(hidden, weight, bias, targets, scale):
    """The formula, unfused: full logits, fp32 log-softmax, gather.  # -> [R]"""
    logits = torch.nn.functional.linear(hidden, weight, bias) * scale  # [R, V]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[:, None]).squeeze(-1)


def head_inputs(dtype, rows=7, hidden_size=5, vocab=11, seed=0):
    generator = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=generator).to(dtype).requires_grad_()  # noqa: E731
    return (
        make(rows, hidden_size),
        make(vocab, hidden_size),
        make(vocab),
        torch.randint(0, vocab, (rows,), generator=generator),
    )


@pytest.mark.parametrize("chunk_rows", [1, 3, 7, 64])
@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_fused_head_values_and_gradients_equal_the_formula_in_fp32(chunk_rows, scale):
    """Every chunking (rows in the forward, vocabulary slices of any width in the backward) gives the formula's
    values and gradients of hidden, weight and bias within 1e-5, with an arbitrary upstream gradient."""
    hidden, weight, bias, targets = head_inputs(torch.float32)
    upstream = torch.linspace(-2.0, 3.0, hidden.shape[0])  # [R]
    inputs = (hidden, weight, bias)
    fused = fused_head_logprob(hidden, weight, targets, bias, scale, chunk_rows)
    fused_grads = torch.autograd.grad((fused * upstream).sum(), inputs)
    direct = direct_head_logprob(hidden, weight, bias, targets, scale)
    direct_grads = torch.autograd.grad((direct * upstream).sum(), inputs)
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, direct, atol=1e-5, rtol=1e-5)
    for got, want in zip(fused_grads, direct_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_fused_head_with_bf16_inputs_matches_the_formula_and_keeps_dtypes():
    """bf16 hidden and weight (the GPU setting): log-probs in fp32 from the bf16 logits the model would compute,
    gradients in bf16, within bf16 rounding of the formula's."""
    hidden, weight, bias, targets = head_inputs(torch.bfloat16, rows=9, hidden_size=16, vocab=40)
    fused = fused_head_logprob(hidden, weight, targets, bias, chunk_rows=2)
    fused_grads = torch.autograd.grad(fused.sum(), (hidden, weight, bias))
    direct = direct_head_logprob(hidden, weight, bias, targets, 1.0)
    direct_grads = torch.autograd.grad(direct.sum(), (hidden, weight, bias))
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, direct, atol=1e-5, rtol=1e-5)  # same bf16 logits, same fp32 log-softmax
    for got, want in zip(fused_grads, direct_grads):
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


def test_fused_head_entropy_is_the_predictive_entropy_and_detached():
    hidden, weight, bias, targets = head_inputs(torch.float32)
    _, entropy = fused_head_logprob(hidden, weight, targets, bias, chunk_rows=2, with_entropy=True)
    probs = torch.softmax(torch.nn.functional.linear(hidden, weight, bias), dim=-1)  # [R, V]
    torch.testing.assert_close(entropy, -(probs * probs.log()).sum(-1).detach(), atol=1e-5, rtol=1e-5)
    assert not entropy.requires_grad


def test_fused_head_never_holds_more_than_one_chunk_of_logits(monkeypatch):
    """Forward and backward walk the vocabulary in slices of at most chunk_rows x V logits elements, and every
    slice is written into one buffer per pass (no fresh [v, R] tensor per slice)."""
    import diffugrpo_plugin.models.kernels as kernels

    hidden, weight, bias, targets = head_inputs(torch.float32, rows=40, vocab=50)
    slices = []

    def recording(hidden, weight, bias, scale, out):
        logits = kernels._slice_logits.__wrapped__(hidden, weight, bias, scale, out)
        slices.append((logits.numel(), logits.untyped_storage().data_ptr()))
        return logits

    recording.__wrapped__ = kernels._slice_logits
    monkeypatch.setattr(kernels, "_slice_logits", recording)
    fused_head_logprob(hidden, weight, targets, bias, chunk_rows=4).sum().backward()
    assert [size for size, _ in slices] == [5 * 40] * 20  # forward, then backward: 10 slices of 5 columns x 40 rows
    assert len({pointer for _, pointer in slices[:10]}) == 1 and len({pointer for _, pointer in slices[10:]}) == 1


def test_fused_head_slices_are_cache_sized_below_the_memory_cap():
    """Slices are SLICE_COLUMNS wide unless the chunk_rows x V memory cap allows fewer columns (never fewer than one)."""
    from diffugrpo_plugin.models.kernels import SLICE_COLUMNS, _vocab_slices

    wide = _vocab_slices(num_rows=16, vocab=10 * SLICE_COLUMNS + 3, chunk_rows=128)
    assert [s.stop - s.start for s in wide] == [SLICE_COLUMNS] * 10 + [3]
    capped = _vocab_slices(num_rows=100, vocab=5000, chunk_rows=4)  # 4 x 5000 elements = 200 columns x 100 rows
    assert {s.stop - s.start for s in capped} == {200} and capped[-1].stop == 5000
    assert {s.stop - s.start for s in _vocab_slices(num_rows=100, vocab=50, chunk_rows=1)} == {1}


def test_fused_head_slices_are_wider_on_a_gpu():
    """The slice width follows the head's device: 1024 columns on CPU, 16384 elsewhere (measured on an H100)."""
    from diffugrpo_plugin.models.kernels import SLICE_COLUMNS, SLICE_COLUMNS_GPU, _vocab_slices, slice_columns

    assert (slice_columns(torch.device("cpu")), slice_columns(torch.device("cuda", 0))) == (1024, 16384)
    wide = _vocab_slices(num_rows=64, vocab=40_000, chunk_rows=1024, columns=SLICE_COLUMNS_GPU)
    assert [s.stop - s.start for s in wide] == [16384, 16384, 40_000 - 2 * 16384]
    assert SLICE_COLUMNS < SLICE_COLUMNS_GPU


def test_fused_head_online_normaliser_when_every_slice_raises_the_maximum():
    """Logits 0, 10, ..., 200 (exp overflows fp32 past 88) seen one column at a time, so every slice raises the
    running maximum: log-probs and entropy equal the float64 formula."""
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    weight = torch.stack([torch.arange(21.0) * 10, torch.zeros(21)], dim=1)  # [21, 2]: row 0 ascends, row 1 is flat
    targets = torch.tensor([19, 3])
    logp, entropy = fused_head_logprob(hidden, weight, targets, chunk_rows=1, with_entropy=True)
    log_softmax = torch.log_softmax(hidden.double() @ weight.double().t(), dim=-1)  # [2, 21]
    assert logp.tolist() == pytest.approx(log_softmax.gather(-1, targets[:, None]).squeeze(-1).tolist(), abs=1e-5)
    want_entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    assert entropy.tolist() == pytest.approx(want_entropy.tolist(), abs=1e-5)
    assert entropy[1].item() == pytest.approx(math.log(21), abs=1e-6)  # flat row: uniform
