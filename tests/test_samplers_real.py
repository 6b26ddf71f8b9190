"""Samplers on real tiny random transformers: padding, seeds, RNG, fast-path exactness, KV cache."""

from __future__ import annotations

import pytest
import torch

from conftest import MASK_ID
from diffugrpo_plugin.models.dlm import DiffusionLM, ModelConfigError
from diffugrpo_plugin.sampling import left_pad
from diffugrpo_plugin.sampling.forward import DualCachedForward, FullForward, PrefixCachedForward
from diffugrpo_plugin.sampling.samplers import (
    DreamSampler,
    EntropySampler,
    LLaDASampler,
    MaskGitPlusSampler,
    OriginSampler,
    TopKMarginSampler,
)
from samplers_support import EOS, LONG, PAD, SHORT, fake_lm, lm_for, log_probs, run, single_thread

_one_thread = pytest.fixture(scope="module", autouse=True)(single_thread)


@pytest.fixture(scope="module")
def dream_lm():
    return lm_for("dream")


@pytest.fixture(scope="module")
def llada_lm():
    return lm_for("llada")


GREEDY = [
    ("dream", EntropySampler()),
    ("dream", TopKMarginSampler(steps=8)),
    ("dream", MaskGitPlusSampler(block_length=8, steps=8)),
    ("llada", LLaDASampler(block_length=4, steps=8)),
    ("llada", LLaDASampler(block_length=8, cfg_scale=0.5)),
]


@pytest.mark.parametrize("style, sampler", GREEDY)
def test_left_padding_does_not_change_greedy_output(style, sampler, dream_lm, llada_lm):
    lm = dream_lm if style == "dream" else llada_lm
    alone = run(sampler, lm, [SHORT])
    padded = run(sampler, lm, [LONG, SHORT])
    assert torch.equal(padded.completion_ids[1], alone.completion_ids[0])
    assert torch.equal(padded.unmask_step[1], alone.unmask_step[0])


SAMPLING = [
    ("dream", DreamSampler(alg="maskgit_plus", temperature=1.0, top_p=0.9, top_k=20, alg_temp=0.3)),
    ("dream", OriginSampler(temperature=0.8, steps=8)),
    ("llada", LLaDASampler(temperature=1.0, block_length=8, remasking="random")),
    ("llada", LLaDASampler(temperature=0.7, block_length=4, steps=8, threshold=0.2, kv_cache=True)),
]


@pytest.mark.parametrize("style, sampler", SAMPLING)
def test_same_seed_same_completion_whatever_the_batch(style, sampler, dream_lm, llada_lm):
    lm = dream_lm if style == "dream" else llada_lm
    first = run(sampler, lm, [SHORT, LONG, SHORT], seeds=[7, 8, 9])
    again = run(sampler, lm, [SHORT, LONG, SHORT], seeds=[7, 8, 9])
    alone = run(sampler, lm, [SHORT], seeds=[9])
    assert torch.equal(first.completion_ids, again.completion_ids)
    assert torch.equal(first.completion_ids[2], alone.completion_ids[0])
    assert not torch.equal(first.completion_ids[0], first.completion_ids[2])  # seeds 7 and 9 differ


@pytest.mark.parametrize("style, sampler", SAMPLING)
def test_global_rng_state_is_never_touched(style, sampler, dream_lm, llada_lm):
    lm = dream_lm if style == "dream" else llada_lm
    lm.module.train()  # dropout would use the global RNG: the sampler must switch it off
    before = torch.get_rng_state()
    out = run(sampler, lm, [SHORT, LONG], seeds=None)
    assert torch.equal(before, torch.get_rng_state())
    assert lm.module.training  # and put the mode back
    lm.module.eval()
    assert len(out.seeds) == 2 and out.seeds[0] != out.seeds[1]


@pytest.mark.parametrize(
    "style, sampler_class, options",
    [
        ("dream", EntropySampler, {}),
        ("dream", MaskGitPlusSampler, {"block_length": 4, "steps": 8, "temperature": 1.0}),
        ("llada", LLaDASampler, {"block_length": 8}),
        ("llada", LLaDASampler, {"block_length": 4, "steps": 8, "temperature": 1.0, "kv_cache": True}),
    ],
)
def test_threshold_one_reproduces_the_plain_sampler_exactly(style, sampler_class, options, dream_lm, llada_lm):
    lm = dream_lm if style == "dream" else llada_lm
    plain = run(sampler_class(**options), lm, [SHORT, LONG])
    at_one = run(sampler_class(threshold=1.0, **options), lm, [SHORT, LONG])
    assert torch.equal(plain.completion_ids, at_one.completion_ids)
    assert torch.equal(plain.unmask_step, at_one.unmask_step)
    assert plain.forwards == at_one.forwards


def test_cache_off_is_one_full_forward_per_step(dream_lm):
    ids, mask = left_pad([LONG, SHORT], PAD)
    x = torch.cat([ids, torch.full((2, 8), MASK_ID)], dim=1)
    attention = torch.cat([mask, torch.ones(2, 8, dtype=torch.long)], dim=1)
    from diffugrpo_plugin.models.dlm import position_ids_from_mask

    positions = position_ids_from_mask(attention)
    window = FullForward(dream_lm)(x, attention, positions, 10, 14, fresh=False)
    assert torch.equal(window, dream_lm.logits(x, attention, positions)[:, 10:14])
    out = run(EntropySampler(steps=8), dream_lm, [SHORT, LONG], new_tokens=8)
    assert out.forwards == 8 and out.steps.tolist() == [8, 8]


@pytest.mark.parametrize("style", ["dream", "llada"])
@pytest.mark.parametrize("sampler_class", [EntropySampler, LLaDASampler])
def test_prefix_cache_is_exact_when_attention_is_causal(style, sampler_class):
    # The cache's only approximation is that the prefix does not see later tokens change;
    # under causal attention it never would, so cache on must equal cache off.
    lm = lm_for(style, causal=True)
    options = {"block_length": 4, "steps": 16, "temperature": 1.0}
    plain = run(sampler_class(**options), lm, [SHORT, LONG])
    cached = run(sampler_class(kv_cache=True, **options), lm, [SHORT, LONG])
    assert torch.equal(plain.completion_ids, cached.completion_ids)
    assert plain.forwards == cached.forwards


@pytest.mark.parametrize("cache_class", [PrefixCachedForward, DualCachedForward])
@pytest.mark.parametrize("style", ["dream", "llada"])
def test_cache_logits_match_a_full_forward_until_the_block_changes(style, cache_class):
    from diffugrpo_plugin.models.dlm import position_ids_from_mask

    lm = lm_for(style)
    ids, mask = left_pad([LONG, SHORT], PAD)
    x = torch.cat([ids, torch.full((2, 12), MASK_ID)], dim=1)
    attention = torch.cat([mask, torch.ones(2, 12, dtype=torch.long)], dim=1)
    positions = position_ids_from_mask(attention)
    start, end = ids.shape[1] + 4, ids.shape[1] + 8  # the second block of 4
    full = lm.logits(x, attention, positions)[:, start:end]
    cached = cache_class(lm)
    assert torch.allclose(cached(x, attention, positions, start, end, fresh=True), full, atol=1e-5)
    # A later step with the same sequence reuses the kept keys/values: still the full-forward logits,
    # also for a subset of the rows.
    assert torch.allclose(cached(x, attention, positions, start, end, fresh=False), full, atol=1e-5)
    assert torch.allclose(
        cached(x, attention, positions, start, end, fresh=False, rows=torch.tensor([1])), full[1:], atol=1e-5
    )
    # Once a block token changes, only the block (and, for the prefix cache, the rest) is recomputed: the
    # kept keys/values are what was seen at the block start (the approximation), the block sees the new token.
    changed = x.clone()
    changed[:, start] = 9
    step_logits = cached(changed, attention, positions, start, end, fresh=False)
    exact = lm.logits(changed, attention, positions)[:, start:end]
    assert not torch.allclose(step_logits, full, atol=1e-5)
    assert (step_logits - exact).abs().max() < (full - exact).abs().max()


def test_prefix_cache_refuses_a_model_without_cache_support():
    lm = fake_lm({1: [log_probs(0.5, 0.5)] * 3})
    ids = torch.tensor([[1]])
    with pytest.raises(ModelConfigError, match="kv_cache"):
        LLaDASampler(kv_cache=True).generate(lm, ids, torch.ones_like(ids), 2, eos_token_id=4, pad_token_id=0)


def padded_after_eos(tokens: list[int]) -> list[int]:
    """What every sampler returns: the tokens up to and including the first EOS, then padding."""
    if EOS not in tokens:
        return tokens
    end = tokens.index(EOS) + 1
    return tokens[:end] + [PAD] * (len(tokens) - end)


def reference_dream_greedy(
    lm: DiffusionLM,
    prompt: list[int],
    new_tokens: int,
    steps: int,
    alg: str,
    top_k: int | None = None,
    suppress_mask: bool = False,
    eps: float = 1e-3,
) -> list[int]:
    """Dream's diffusion_generate loop for one unpadded prompt at temperature 0, written out plainly.

    As in Dream's code: top-k filtering before the softmax (it shapes the confidence even at
    temperature 0), and nothing stops a position from taking the mask token itself.
    """
    x = torch.tensor([prompt + [lm.mask_token_id] * new_tokens])
    timesteps = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        is_masked = x[0] == lm.mask_token_id
        logits = lm.logits(x, torch.ones_like(x))[0]
        if suppress_mask:
            logits[:, lm.mask_token_id] = float("-inf")
        if top_k is not None:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)
        probs = torch.softmax(logits[is_masked], dim=-1)
        confidence, best = probs.max(dim=-1)
        if alg == "topk_margin":
            top2 = probs.topk(2, dim=-1).values
            confidence = top2[:, 0] - top2[:, 1]
        elif alg == "entropy":
            confidence = (probs * torch.log(probs + 1e-10)).sum(dim=-1)
        n = int(is_masked.sum())
        count = n if i == steps - 1 else int(n * (1 - timesteps[i + 1] / timesteps[i]))
        scores = torch.full((x.shape[1],), float("-inf"))
        scores[is_masked] = confidence
        proposal = x[0].clone()
        proposal[is_masked] = best
        for position in scores.topk(count).indices.tolist() if count else []:
            x[0, position] = proposal[position]
    return padded_after_eos(x[0, len(prompt) :].tolist())


def reference_llada_greedy(
    lm: DiffusionLM, prompt: list[int], new_tokens: int, steps: int, block_length: int, suppress_mask: bool = False
) -> list[int]:
    """LLaDA's generate for one prompt at temperature 0, low-confidence remasking, written out plainly.

    Each block's share per step is fixed when the block starts; every masked position before the
    block's end is a candidate, so a position an earlier block decided as the mask token can be
    decided again.
    """
    x = torch.tensor([prompt + [lm.mask_token_id] * new_tokens])
    blocks = new_tokens // block_length
    steps_per_block = steps // blocks
    for block in range(blocks):
        start = len(prompt) + block * block_length
        block_masks = int((x[0, start : start + block_length] == lm.mask_token_id).sum())
        base, extra = divmod(block_masks, steps_per_block)
        schedule = [base + (1 if i < extra else 0) for i in range(steps_per_block)]
        for count in schedule:
            logits = lm.logits(x, torch.ones_like(x))[0].double()
            if suppress_mask:
                logits[:, lm.mask_token_id] = float("-inf")
            best = logits.argmax(dim=-1)
            confidence = torch.softmax(logits, dim=-1).gather(-1, best.unsqueeze(-1)).squeeze(-1)
            confidence[start + block_length :] = float("-inf")  # earlier blocks' leftover masks still compete
            confidence[x[0] != lm.mask_token_id] = float("-inf")
            for position in confidence.topk(count).indices.tolist() if count else []:
                x[0, position] = best[position]
    return padded_after_eos(x[0, len(prompt) :].tolist())


def mask_prone_lm(style: str) -> DiffusionLM:
    """The wide tiny model with the mask token's output row boosted, so greedy decoding sometimes picks it."""
    lm = lm_for(style)
    head = lm.head_weight()  # [V, H]
    with torch.no_grad():
        head[MASK_ID] = head[MASK_ID] * 4 + head.mean(dim=0)
    return lm


@pytest.fixture(scope="module")
def mask_prone():
    return {style: mask_prone_lm(style) for style in ("dream", "llada")}


@pytest.mark.parametrize("alg", ["maskgit_plus", "topk_margin", "entropy"])
@pytest.mark.parametrize("steps", [16, 5])
@pytest.mark.parametrize("top_k", [None, 5])
def test_plain_dream_sampler_matches_the_reference_loop(alg, steps, top_k, dream_lm):
    ours = run(DreamSampler(alg=alg, steps=steps, top_k=top_k), dream_lm, [LONG], trace=False).completion_ids[0]
    assert ours.tolist() == reference_dream_greedy(dream_lm, LONG, 16, steps, alg, top_k)


@pytest.mark.parametrize("steps, block_length", [(16, 4), (8, 8), (4, 16)])
def test_plain_llada_sampler_matches_the_reference_loop(steps, block_length, llada_lm):
    sampler = LLaDASampler(steps=steps, block_length=block_length)
    ours = run(sampler, llada_lm, [LONG], trace=False).completion_ids[0].tolist()
    assert ours == reference_llada_greedy(llada_lm, LONG, 16, steps, block_length)


@pytest.mark.parametrize("suppress", [False, True])
def test_mask_token_proposals_follow_the_references_unless_suppressed(suppress, mask_prone):
    """Neither reference keeps a position from taking the mask token; suppress_mask_token does."""
    dream, llada = mask_prone["dream"], mask_prone["llada"]
    for alg in ("maskgit_plus", "entropy"):
        ours = (
            run(DreamSampler(alg=alg, steps=8, top_k=None, suppress_mask_token=suppress), dream, [LONG], trace=False)
            .completion_ids[0]
            .tolist()
        )
        assert ours == reference_dream_greedy(dream, LONG, 16, 8, alg, suppress_mask=suppress)
    ours = (
        run(LLaDASampler(steps=8, block_length=8, suppress_mask_token=suppress), llada, [LONG], trace=False)
        .completion_ids[0]
        .tolist()
    )
    assert ours == reference_llada_greedy(llada, LONG, 16, 8, 8, suppress_mask=suppress)


def test_the_mask_prone_model_really_proposes_the_mask_token(mask_prone):
    """Keeps the test above meaningful: without suppression some output keeps a mask token, with it none does."""
    for style, sampler_class in (("dream", EntropySampler), ("llada", LLaDASampler)):
        options = {"steps": 8, "block_length": 8} if style == "llada" else {"steps": 8}
        kept = run(sampler_class(**options), mask_prone[style], [LONG, SHORT], trace=False).completion_ids
        suppressed = run(
            sampler_class(suppress_mask_token=True, **options), mask_prone[style], [LONG, SHORT], trace=False
        ).completion_ids
        assert (kept == MASK_ID).any() and not (suppressed == MASK_ID).any()
