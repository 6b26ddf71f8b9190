"""Training block-diffusion models (SDAR, LLaDA2.x) through the coupled pass: the block grid, the ``[x_t | x_0]``
mask, the per-block maskers, and the layout's log-probs against the model run block by block."""

from __future__ import annotations

import pytest
import torch

from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
from diffugrpo_plugin.core.masking import make_coupled, make_pair
from diffugrpo_plugin.models.dlm import DiffusionLM
from diffugrpo_plugin.models.native.block_attention import (
    block_ids,
    flex_layout_mask,
    layout_attention_mask,
    layout_mask_from_blocks,
)
from diffugrpo_plugin.models.tiny import TinySpec, build_tiny_model

MASK = 99


def test_block_grid_from_the_sequence_or_from_the_response():
    """Block 4, a prompt of 3 then 7 response tokens: hand-worked block of every position."""
    positions = torch.arange(10)[None]
    prompt = torch.tensor([3])
    assert block_ids(positions, prompt, 4, "sequence").tolist() == [[0, 0, 0, 0, 1, 1, 1, 1, 2, 2]]
    # the prompt on the grid from 0 (one partial block), the response from a fresh block 1
    assert block_ids(positions, prompt, 4, "response").tolist() == [[0, 0, 0, 1, 1, 1, 1, 2, 2, 2]]
    # a prompt of 4 fills its block: both grids agree
    assert torch.equal(
        block_ids(positions, torch.tensor([4]), 4, "response"), block_ids(positions, torch.tensor([4]), 4, "sequence")
    )
    with pytest.raises(ValueError, match="block_origin must be one of sequence, response"):
        block_ids(positions, prompt, 4, "global")


# [x_t | x_0] over L = 6 tokens in blocks [0, 0, 0, 0, 1, 1] (block 4); the last token is padding.
# Rows: queries x_t 0..5 then x_0 0..5; columns: keys in the same order. 1 = attend. No one sees a padded key
# (columns 5 and 11); the padded queries (rows 5 and 11) follow the rule like any other.
EXPECTED_LAYOUT = """
111100 000000
111100 000000
111100 000000
111100 000000
000010 111100
000010 111100
000000 111100
000000 111100
000000 111100
000000 111100
000000 111110
000000 111110
"""


def parse(rows: str) -> torch.Tensor:
    return torch.tensor([[c == "1" for c in line.replace(" ", "")] for line in rows.strip().splitlines()])


def test_layout_mask_entries_hand_worked():
    blocks = torch.tensor([[0, 0, 0, 0, 1, 1]])
    real = torch.tensor([[1, 1, 1, 1, 1, 0]])
    mask = layout_mask_from_blocks(blocks, real)[0, 0]  # [12, 12]
    assert torch.equal(mask, parse(EXPECTED_LAYOUT))
    # noisy token 4 (block 1): its own noisy block and clean block 0, not the clean copy of itself
    assert mask[4, 4] and mask[4, 6:10].all() and not mask[4, 10] and not mask[4, :4].any()


def test_flex_block_mask_states_the_same_rule():
    """The FlexAttention BlockMask's mask_mod, evaluated at every (query, key), equals the boolean mask on every
    real query's row (padded queries: itself only there, every key in the boolean one; neither is read)."""
    blocks = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2], [0, 1, 1, 1, 1, 2, 2, 2]])
    real = torch.tensor([[1] * 8, [1] * 6 + [0, 0]])
    dense = layout_mask_from_blocks(blocks, real)[:, 0]  # [B, 16, 16]
    block_mask = flex_layout_mask(blocks, real)
    assert type(layout_attention_mask(blocks, real, "flex_attention")) is type(block_mask)
    assert torch.equal(layout_attention_mask(blocks, real, "sdpa"), layout_mask_from_blocks(blocks, real))
    b = torch.arange(2)[:, None, None]
    q = torch.arange(16)[None, :, None]
    kv = torch.arange(16)[None, None, :]
    evaluated = block_mask.mask_mod(b, torch.zeros(()), q, kv)  # [B, 16, 16]
    real_query = real.bool().repeat(1, 2)  # [B, 16]
    assert torch.equal(evaluated[real_query], dense[real_query])


def block_batch():
    """Block 4 (sequence grid): row 0 a prompt of 3 and a completion of 7 (positions 3..9: block 0 holds 1 of them,
    block 1 four, block 2 two); row 1 a prompt of 4 and a completion of 4, then 2 right pads."""
    input_ids = torch.tensor([[11, 12, 13, 21, 22, 23, 24, 25, 26, 27], [14, 15, 16, 17, 31, 32, 33, 34, 0, 0]])
    real = torch.tensor([[1] * 10, [1] * 8 + [0, 0]]).bool()
    completion = torch.zeros_like(real)
    completion[0, 3:] = True
    completion[1, 4:8] = True
    positions = torch.arange(10)[None].expand(2, -1)
    blocks = block_ids(positions, torch.tensor([3, 4]), 4, "sequence")
    return input_ids, real, completion, blocks


def test_block_coupled_masks_each_block_by_its_own_count():
    """Hand-worked for row 0 with seed 5: t_b per block from the row's generator, then r per completion token;
    block b masks the k_b = clamp(round(t_b n_b), 1, n_b - 1) tokens of smallest r, weight n_b / k_b; the complement
    the rest, weight n_b / (n_b - k_b); the fully masked view every completion token, weight 1/2."""
    input_ids, _, completion, blocks = block_batch()
    views = make_coupled((0.2, 0.8)).views(input_ids, completion, MASK, torch.tensor([5, 6]), block_ids=blocks)
    generator = torch.Generator().manual_seed(5)
    t = 0.2 + 0.6 * torch.rand(3, generator=generator, dtype=torch.float64)
    r = torch.rand(7, generator=generator, dtype=torch.float64)
    spans = {0: [3], 1: [4, 5, 6, 7], 2: [8, 9]}
    start = 0
    masked = views.noisy[:, 0] == MASK  # [3, L]
    assert torch.equal(masked[0], completion[0])
    assert torch.equal(views.coef[0, 0], completion[0] * 0.5)
    for block, span in spans.items():
        n = len(span)
        k = 1 if n == 1 else int(min(max(round(float(t[block]) * n), 1), n - 1))
        order = torch.argsort(r[start : start + n])[:k]
        first = sorted(span[i] for i in order.tolist())
        start += n
        assert masked[1, span].nonzero().flatten().add(span[0]).tolist() == first, block
        second = [p for p in span if p not in first]
        assert masked[2, span].nonzero().flatten().add(span[0]).tolist() == second, block
        assert views.coef[1, 0, first].tolist() == pytest.approx([0.5 * n / k] * k)
        assert views.coef[2, 0, second].tolist() == pytest.approx([0.5 * n / (n - k)] * (n - k) if second else [])
    # the one-token block: masked in the first view, nothing in the second
    assert masked[1, 3] and not masked[2, 3]
    # the prompt and the pads are never masked
    assert not masked[:, :3].any() and not (views.noisy[:, 1] == MASK)[:, ~completion[1]].any()


def test_every_block_has_a_masked_token_and_the_weights_average_one():
    """Over many seeds: each block with >= 2 completion tokens has a masked token in both views of the pair; each
    token's weight in a view, averaged over masks, is 1 (the inverse of the masked fraction)."""
    input_ids, _, completion, blocks = block_batch()
    masker = make_pair((0.2, 0.8))
    total = torch.zeros(2, 2, 10, dtype=torch.float64)
    draws = 3000
    for seed in range(draws):
        views = masker.views(input_ids, completion, MASK, torch.tensor([seed, seed + draws]), block_ids=blocks)
        masked = views.noisy == MASK  # [2, B, L]
        for span in ([4, 5, 6, 7], [8, 9]):
            assert masked[0, 0, span].any() and masked[1, 0, span].any()
        assert masked[0, 1, 4:8].any() and masked[1, 1, 4:8].any()
        assert torch.equal(masked[0] ^ masked[1], completion)
        total += views.coef.double()
    mean_weight = (total / draws)[0] + 0.0  # first view: the token's mean weight
    first_view_mean = mean_weight[completion]
    # the one-token block is always in the first view at weight 1
    assert (total[0, 0, 3] / draws).item() == pytest.approx(1.0)
    assert first_view_mean.tolist() == pytest.approx([1.0] * int(completion.sum()), abs=0.08)


def test_block_maskers_refuse_prompt_masking():
    input_ids, _, completion, blocks = block_batch()
    with pytest.raises(ValueError, match="p_mask_prompt must be 0 for a block-diffusion model"):
        make_coupled((0.2, 0.8), p_mask_prompt=0.1).views(
            input_ids, completion, MASK, torch.tensor([1, 2]), None, blocks
        )


def direct_block_logprobs(model, noisy, clean, real, blocks, origin) -> torch.Tensor:
    """log p(clean token | its noisy block, the clean blocks before it), one block at a time, without the duplicated
    layout: ``sequence`` through the model's own cache of finished blocks (prefill, then the noisy block read-only);
    ``response`` over ``clean prefix | noisy block`` with a block-causal mask built here from the block ids.
    # -> [B, L] (0 on pads)"""
    from transformers import DynamicCache

    batch, length = clean.shape
    out = torch.zeros(batch, length, dtype=torch.float64)
    for b in range(batch):
        n = int(real[b].sum())
        row_blocks = blocks[b, :n]
        for block in row_blocks.unique().tolist():
            span = (row_blocks == block).nonzero().flatten()
            start, stop = int(span[0]), int(span[-1]) + 1
            positions = torch.arange(stop)[None]
            if origin == "sequence":
                cache = DynamicCache(config=model.config)
                if start:
                    model(
                        input_ids=clean[b : b + 1, :start],
                        position_ids=positions[:, :start],
                        past_key_values=cache,
                        use_cache=True,
                        store_kv=True,
                    )
                logits = model(
                    input_ids=noisy[b : b + 1, start:stop],
                    position_ids=positions[:, start:stop],
                    past_key_values=cache if start else None,
                    use_cache=bool(start),
                    store_kv=False,
                ).logits
            else:
                ids = torch.cat((clean[b : b + 1, :start], noisy[b : b + 1, start:stop]), dim=1)
                key_blocks = row_blocks[:stop]
                allowed = key_blocks[None, :] <= key_blocks[:, None]  # block-causal over the block ids
                logits = model(
                    input_ids=ids, attention_mask=allowed[None, None], position_ids=positions, use_cache=False
                ).logits[:, start:]
            logp = torch.log_softmax(logits[0].double(), dim=-1)  # [n, V]
            out[b, start:stop] = logp.gather(1, clean[b, start:stop, None])[:, 0]
    return out


@pytest.mark.parametrize("family", ["sdar", "llada2"])
@pytest.mark.parametrize("origin", ["sequence", "response"])
def test_layout_logprobs_equal_the_model_run_block_by_block(family, origin):
    """Each view's 2L-layout log-prob of every scored token equals the model's own block-by-block computation within
    1e-5 in fp32, for a right-padded batch, on both block grids."""
    torch.manual_seed(0)
    model = build_tiny_model(TinySpec(family=family, hidden_size=32, num_layers=2, intermediate_size=64)).eval()
    mask_id = model.config.mask_token_id
    lm = DiffusionLM.wrap(model, mask_token_id=mask_id)
    block = model.config.block_size
    prompts = torch.tensor([3, 5])
    lengths = torch.tensor([3 + 3 * block, 5 + 2 * block - 1])
    width = int(lengths.max())
    clean = torch.randint(4, 200, (2, width))
    real = torch.arange(width)[None] < lengths[:, None]
    clean = torch.where(real, clean, 0)
    completion = real & (torch.arange(width)[None] >= prompts[:, None])
    positions = torch.arange(width)[None].expand(2, -1)
    blocks = block_ids(positions, prompts, block, origin)
    views = make_coupled().views(clean, completion, mask_id, torch.tensor([3, 4]), block_ids=blocks)
    with torch.no_grad():
        got = coupled_token_logprobs(lm, views, clean, real.long(), positions, block_ids=blocks).logp
        expected = torch.zeros(2, width, dtype=torch.float64)
        for v in range(views.num_views):
            direct = direct_block_logprobs(model, views.noisy[v], clean, real, blocks, origin)
            expected += views.coef[v].double() * direct
    assert (views.coef != 0).sum() > 20
    assert torch.allclose(got.double(), expected, atol=1e-5, rtol=0), (got.double() - expected).abs().max()


@pytest.mark.parametrize("family", ["sdar", "llada2"])
def test_the_layouts_kl_gradient_brings_a_lora_policy_back_to_its_base(family):
    """A random LoRA adapter (B drawn, so the policy starts away from the base), fixed sequences: eight Adam steps
    (lr 0.003) on the per-token low-variance KL (k3) from the layout's log-probs to the base's, the adapter disabled,
    take it below half its start. A wrong gradient through the ``[x_t | x_0]`` layout would not."""
    from peft import LoraConfig, TaskType, get_peft_model

    from diffugrpo_plugin.models.lora import accept_causal_lm_wrapper

    torch.manual_seed(0)
    base = build_tiny_model(TinySpec(family=family))
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"]
    policy = get_peft_model(
        accept_causal_lm_wrapper(base),
        LoraConfig(task_type=TaskType.CAUSAL_LM, r=8, lora_alpha=16, target_modules=targets),
    )
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    lm = DiffusionLM.wrap(policy, mask_token_id=base.config.mask_token_id)
    batch, prompt, width = 4, 8, 8 + 3 * base.config.block_size
    clean = torch.randint(4, 200, (batch, width))
    real = torch.ones(batch, width, dtype=torch.long)
    positions = torch.arange(width)[None].expand(batch, -1)
    completion = positions >= prompt
    blocks = block_ids(positions, torch.full((batch,), prompt), base.config.block_size, "response")
    views = make_coupled().views(clean, completion, base.config.mask_token_id, torch.arange(batch), block_ids=blocks)
    with torch.no_grad(), policy.disable_adapter():
        reference = coupled_token_logprobs(lm, views, clean, real, positions, block_ids=blocks).logp  # [B, L]
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=0.003)
    kls = []
    for _ in range(8):
        gap = reference - coupled_token_logprobs(lm, views, clean, real, positions, block_ids=blocks).logp  # [B, L]
        kl = ((gap.exp() - 1 - gap) * completion).sum() / completion.sum()
        optimizer.zero_grad()
        kl.backward()
        optimizer.step()
        kls.append(kl.item())
    assert kls[0] > 1e-3 and kls[-1] < 0.5 * kls[0], kls


def test_a_shifted_family_is_refused_in_the_block_layout():
    model = build_tiny_model(TinySpec(family="sdar", hidden_size=32, num_layers=1, intermediate_size=64))
    lm = DiffusionLM.wrap(model, mask_token_id=model.config.mask_token_id, logits_shift=True)
    input_ids, real, completion, blocks = block_batch()
    views = make_coupled().views(input_ids, completion, 3, torch.tensor([1, 2]), block_ids=blocks)
    with pytest.raises(ValueError, match="scores each token at its own position"):
        coupled_token_logprobs(lm, views, input_ids, real.long(), block_ids=blocks)
