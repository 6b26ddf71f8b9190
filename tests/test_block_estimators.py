"""EBPO, SPG and trajectory replay on block-diffusion models (SDAR, LLaDA2.x): their blocks are the model's own, on
the grid ``block_origin`` sets. Hand-worked views from the documented draw order (2 blocks of 4, a prompt of 3, both
grids), and the training engine's log-probs on a tiny SDAR model against the model run block by block here."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from verl.utils import tensordict_utils as tu

from diffugrpo_plugin import plugins
from diffugrpo_plugin.integration.engine import DiffusionLMEngine
from diffugrpo_plugin.models.dlm import DiffusionLM
from diffugrpo_plugin.models.tiny import TinySpec, build_tiny_model
from diffugrpo_plugin.sampling import build_sampler

MASK = 99
NO_EOS = 10**6  # no token of the tiny vocabulary: every completion runs to its full length

# A prompt of 3 tokens and a completion of 5, blocks of 4. The model's blocks, by position 0..7:
#   sequence grid: [0 0 0 0 | 1 1 1 1]: completion blocks {3} (the prompt's block, 1 completion token), {4 5 6 7};
#   response grid: [0 0 0 | 1 1 1 1 | 2]: completion blocks {3 4 5 6}, {7}.
# block_length=4 counted from the first completion token (the full-canvas rule) would give {3 4 5 6}, {7} on both.
IDS = torch.arange(10, 18)[None]  # [1, 8]
COMPLETION = torch.tensor([[False] * 3 + [True] * 5])
GRIDS = {
    "sequence": (torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]]), [[3], [4, 5, 6, 7]]),
    "response": (torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2]]), [[3, 4, 5, 6], [7]]),
}


@pytest.mark.parametrize("grid", GRIDS)
def test_ebpo_masks_the_models_own_blocks_at_stratified_levels(grid):
    block_ids, spans = GRIDS[grid]
    masker = plugins.build("masker", "ebpo", {"block_length": 16, "num_views": 2})  # block_length: unused here
    views = masker.views(IDS, COMPLETION, MASK, torch.tensor([11]), None, block_ids=block_ids)
    # the documented draws: the offset u, then one permutation per (view, block); 2 views x 2 blocks = 4 cells
    generator = torch.Generator().manual_seed(11)
    offset = torch.rand((), generator=generator, dtype=torch.float64).item()
    expected_masked = torch.zeros(2, 8, dtype=torch.bool)
    expected_coef = torch.zeros(2, 8, dtype=torch.float64)
    for v in range(2):
        for k, span in enumerate(spans):
            level = (offset + (v * 2 + k) / 4) % 1.0
            count = min(math.floor(level * len(span)) + 1, len(span))
            order = torch.randperm(len(span), generator=generator)[:count].tolist()
            for i in order:
                expected_masked[v, span[i]] = True
                expected_coef[v, span[i]] = len(span) / count / 2  # n / masked, over the 2 views' mean
    assert torch.equal(views.noisy[:, 0] == MASK, expected_masked)
    assert torch.allclose(views.coef[:, 0].double(), expected_coef)
    assert torch.all(views.noisy[:, 0, :3] == IDS[0, :3])  # the prompt is never masked
    # the one-token block is masked in every view at weight 1 / 2 (n = masked = 1)
    lone = spans[0][0] if len(spans[0]) == 1 else spans[1][0]
    assert views.coef[:, 0, lone].tolist() == [0.5, 0.5]


def test_ebpo_without_the_model_grid_keeps_its_block_length_blocks():
    """The full-canvas rule is unchanged: block_length-token blocks from the first completion token."""
    masker = plugins.build("masker", "ebpo", {"block_length": 4, "num_views": 2})
    on_grid = masker.views(IDS, COMPLETION, MASK, torch.tensor([11]), None, block_ids=GRIDS["response"][0])
    plain = masker.views(IDS, COMPLETION, MASK, torch.tensor([11]), None)
    assert torch.equal(on_grid.noisy, plain.noisy) and torch.equal(on_grid.coef, plain.coef)


@pytest.mark.parametrize("grid", GRIDS)
def test_spg_views_take_one_of_the_models_blocks(grid):
    block_ids, spans = GRIDS[grid]
    views_count = 6
    masker = plugins.build("masker", "spg", {"block_length": 16, "num_views": views_count, "t_range": (0.0, 1.0)})
    views = masker.views(IDS, COMPLETION, MASK, torch.tensor([7]), None, block_ids=block_ids)
    # the documented draws per view: the block (an integer), m in [max(floor(n t_min), 1), min(floor(n t_max), n)],
    # then a permutation of the block; the blocks after it fully masked, those before it clean
    generator = torch.Generator().manual_seed(7)
    chosen_blocks = set()
    for v in range(views_count):
        k = int(torch.randint(2, (), generator=generator))
        chosen_blocks.add(k)
        span = spans[k]
        n = len(span)
        m = int(torch.randint(1, n + 1, (), generator=generator))
        masked = sorted(span[i] for i in torch.randperm(n, generator=generator)[:m].tolist())
        if k == 0:
            masked += spans[1]
        got = (views.noisy[v, 0] == MASK).nonzero().flatten().tolist()
        assert got == masked, (v, k)
        # ELBO weights: completion length (5) x the mean over the view's masked tokens / views
        assert views.coef[v, 0, masked].tolist() == pytest.approx([5 / len(masked) / views_count] * len(masked))
    assert chosen_blocks == {0, 1}


def replay(block_ids, trace, shrink):
    masker = plugins.build("masker", "trace_replay", {"shrink": shrink})
    return masker.views(IDS, COMPLETION, MASK, torch.tensor([0]), None, trace=trace, block_ids=block_ids)


def test_trace_replay_replays_every_block_from_its_own_first_step():
    """Sequence grid: the sampler decided position 3 (block 0) at step 0, then block 1's 4, 5, 6, 7 at steps 3, 1, 4,
    2. Block 1's steps count from its first (1): 2, 0, 3, 1. View g shows each block's tokens decided before its step
    g, scores those of step g; block 0 is clean to block 1's noisy tokens in the layout, as it was to the sampler
    once finished."""
    block_ids, _ = GRIDS["sequence"]
    views = replay(block_ids, torch.tensor([[-1, -1, -1, 0, 3, 1, 4, 2]]), 1)
    m = MASK
    assert views.noisy[:, 0].tolist() == [
        [10, 11, 12, m, m, m, m, m],  # block 0's step 0 (position 3) and block 1's first (position 5)
        [10, 11, 12, 13, m, 15, m, m],  # block 1's second: position 7
        [10, 11, 12, 13, m, 15, m, 17],  # position 4
        [10, 11, 12, 13, 14, 15, m, 17],  # position 6
    ]
    assert views.coef[:, 0].tolist() == [
        [0, 0, 0, 1, 0, 1, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 1],
        [0, 0, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 1, 0],
    ]


def test_trace_replay_merges_steps_within_a_block_and_never_shows_what_was_never_decided():
    """Response grid, shrink 2: block 1 ({3 4 5 6}) decided at steps 3, 1, 0, 2: groups {0, 1} (positions 4, 5) and
    {2, 3} (positions 3, 6); block 2 ({7}) never (the sampler stopped at an EOS before it): masked, never scored."""
    block_ids, _ = GRIDS["response"]
    views = replay(block_ids, torch.tensor([[-1, -1, -1, 3, 1, 0, 2, -1]]), 2)
    m = MASK
    assert views.noisy[:, 0].tolist() == [[10, 11, 12, m, m, m, m, m], [10, 11, 12, m, 14, 15, m, m]]
    assert views.coef[:, 0].tolist() == [[0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 0, 0, 1, 0]]


# --- the training engine on a tiny SDAR model -------------------------------------------------------------------


def tiny_sdar():
    torch.manual_seed(0)
    model = build_tiny_model(TinySpec(family="sdar", hidden_size=32, num_layers=2, intermediate_size=64)).eval()
    assert model.config.block_size == 4
    return model


def engine_for(model, masker: str, masker_kwargs: dict, origin: str) -> DiffusionLMEngine:
    """The engine as verl builds it, reduced to what its forward step reads (the module, the diffusion settings, the
    fp32 autocast): no process group, no FSDP."""
    engine = object.__new__(DiffusionLMEngine)
    engine.module = model
    engine.model_config = SimpleNamespace(
        diffusion={"masker": masker, "masker_kwargs": masker_kwargs, "block_origin": origin}, tokenizer=None
    )
    engine._autocast_dtype = torch.float32
    return engine


def jagged(rows):
    return torch.nested.as_nested_tensor(list(rows), layout=torch.jagged)


def micro_batch(prompts, responses, response_masks, **per_response):
    """A micro-batch in verl's layout: jagged per-sample tensors, one mask seed each; ``per_response``: more [r]
    fields (the trace, the advantages)."""
    ids = [torch.cat([p, r]) for p, r in zip(prompts, responses)]
    fields = {
        "input_ids": jagged(ids),
        "prompts": jagged(prompts),
        "position_ids": jagged(torch.arange(len(i)) for i in ids),
        "response_mask": jagged(response_masks),
        "mask_seed": torch.tensor([3, 4]),
    }
    fields.update({key: jagged(values) for key, values in per_response.items()})
    return tu.get_tensordict(fields)


def engine_logprobs(engine, batch, prompts, responses) -> list[torch.Tensor]:
    """The engine's log-prob of each response token (verl reads token p's at index p - 1)."""
    _, out = engine.forward_step(batch, None, True)
    nested = out["model_output"]["log_probs"]
    return [row[len(p) - 1 : len(p) - 1 + len(r)] for row, p, r in zip(nested.unbind(), prompts, responses)]


def block_logprob(model, clean: torch.Tensor, noisy_block: torch.Tensor, blocks: torch.Tensor, start: int):
    """log p(clean token | the noisy block at ``start``, the clean tokens before it) at each of the block's
    positions, with a block-causal mask over ``clean prefix | noisy block`` built here.  # [W]"""
    stop = start + len(noisy_block)
    ids = torch.cat((clean[:start], noisy_block))[None]
    key_blocks = blocks[:stop]
    allowed = key_blocks[None, :] <= key_blocks[:, None]
    with torch.no_grad():
        logits = model(
            input_ids=ids, attention_mask=allowed[None, None], position_ids=torch.arange(stop)[None], use_cache=False
        ).logits[0, start:]
    return torch.log_softmax(logits.double(), -1).gather(1, clean[start:stop, None])[:, 0]


def direct_view_logprobs(model, clean, noisy, blocks) -> torch.Tensor:
    """Each token's log-prob in one view, block by block: its noisy block, the clean blocks before it.  # [L]"""
    out = torch.zeros(len(clean), dtype=torch.float64)
    for block in blocks.unique().tolist():
        span = (blocks == block).nonzero().flatten()
        start, stop = int(span[0]), int(span[-1]) + 1
        out[start:stop] = block_logprob(model, clean, noisy[start:stop], blocks, start)
    return out


SEQUENCE_GRID = [
    [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2],  # prompt 3 + response 9
    [0, 0, 0, 0, 1, 1, 1, 1, 2, 2],  # prompt 5 + response 5
]


@pytest.mark.parametrize(("masker", "kwargs"), [("ebpo", {"num_views": 2}), ("spg", {"num_views": 3})])
def test_the_engine_scores_ebpo_and_spg_on_the_models_blocks(masker, kwargs):
    """A step's log-probs with algorithm=ebpo / spg on a tiny SDAR model (sequence grid): the masker gets the model's
    block grid (positions // 4, written out here), and every scored token's estimate equals the masker's combination
    of the model run block by block. SPG's update pass (advantages present) mixes in the upper bound for the
    non-positive row."""
    model = tiny_sdar()
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(4, 200, (3,), generator=generator), torch.randint(4, 200, (5,), generator=generator)]
    responses = [torch.randint(4, 200, (9,), generator=generator), torch.randint(4, 200, (5,), generator=generator)]
    response_masks = [torch.ones(9, dtype=torch.long), torch.tensor([1, 1, 1, 1, 0])]  # row 1: the pad after EOS
    advantages = [torch.full((9,), 0.5), torch.full((5,), -0.5)]
    engine = engine_for(model, masker, kwargs, "sequence")
    for with_advantages in (False, True):
        extra = {"advantages": advantages} if with_advantages else {}
        batch = micro_batch(prompts, responses, response_masks, **extra)
        got = engine_logprobs(engine, batch, prompts, responses)
        # what the masker makes of the model's grid, and the model's log-probs of it computed here
        width = max(len(g) for g in SEQUENCE_GRID)
        ids = torch.zeros(2, width, dtype=torch.long)
        canvas = torch.zeros(2, width, dtype=torch.bool)
        for b, (p, r) in enumerate(zip(prompts, responses)):
            ids[b, : len(p) + len(r)] = torch.cat([p, r])
            canvas[b, len(p) : len(p) + len(r)] = True
        blocks = torch.tensor([g + [0] * (width - len(g)) for g in SEQUENCE_GRID])
        views = plugins.build("masker", masker, kwargs).views(
            ids, canvas, model.config.mask_token_id, torch.tensor([3, 4]), None, block_ids=blocks
        )
        scored = canvas.clone()
        scored[1, 9] = False
        per_view = torch.zeros(views.num_views, 2, width, dtype=torch.float64)
        for v in range(views.num_views):
            for b, grid in enumerate(SEQUENCE_GRID):
                n = len(grid)
                per_view[v, b, :n] = direct_view_logprobs(model, ids[b, :n], views.noisy[v, b, :n], torch.tensor(grid))
        coef = views.coef.double() * scored
        per_view = torch.where(coef != 0, per_view, 0.0)
        if masker == "spg":
            positive = torch.tensor([True, False]) if with_advantages else None
            views.coef = coef.float()
            expected = plugins.build("masker", masker, kwargs).combine(per_view, views, scored, positive).double()
        else:
            expected = (per_view * coef).sum(0)
        for b, (p, r) in enumerate(zip(prompts, responses)):
            want = expected[b, len(p) : len(p) + len(r)] * scored[b, len(p) : len(p) + len(r)]
            assert torch.allclose(got[b].double() * scored[b, len(p) : len(p) + len(r)], want, atol=1e-5), (b, got[b])
        assert (coef != 0).sum() >= 8
    if masker == "spg":  # the upper bound moved the non-positive row's estimate, not the positive one's
        plain = engine_logprobs(engine, micro_batch(prompts, responses, response_masks), prompts, responses)
        assert torch.allclose(plain[0], got[0]) and not torch.allclose(plain[1][:4], got[1][:4])


@pytest.mark.parametrize(("origin", "prompt_lengths", "new_tokens"), [("sequence", (3, 7), 9), ("response", (3, 6), 8)])
def test_the_engine_replays_the_block_samplers_trace_step_by_step(origin, prompt_lengths, new_tokens):
    """algorithm=tracerl on a tiny SDAR model: the block sampler's completions and trace (2 steps a block, 2 tokens
    a step, at temperature 1), replayed by the engine with shrink 1, equal the model's log-prob of each token at the
    step it was decided, computed here as the sampler saw it: the finished blocks before it clean, its own block with
    only the tokens decided at earlier steps. The replay takes 2 forwards (the steps of a block), not 6."""
    model = tiny_sdar()
    mask_id = model.config.mask_token_id
    lm = DiffusionLM.wrap(model, mask_token_id=mask_id)
    generator = torch.Generator().manual_seed(2)
    prompts = [torch.randint(4, 200, (n,), generator=generator) for n in prompt_lengths]
    width = max(prompt_lengths)
    prompt_ids = torch.zeros(2, width, dtype=torch.long)
    prompt_mask = torch.zeros(2, width, dtype=torch.long)
    for b, p in enumerate(prompts):
        prompt_ids[b, width - len(p) :], prompt_mask[b, width - len(p) :] = p, 1
    sampler = build_sampler(
        "block", rule="static", steps=2, temperature=1.0, top_k=None, top_p=None, block_origin=origin
    )
    with torch.no_grad():
        out = sampler.generate(
            lm,
            prompt_ids,
            prompt_mask,
            new_tokens,
            eos_token_id=NO_EOS,
            pad_token_id=0,
            seeds=[5, 6],
            record_trace=True,
        )
    responses = list(out.completion_ids)
    traces = list(out.unmask_step)
    assert all((trace >= 0).all() for trace in traces)
    engine = engine_for(model, "trace_replay", {"shrink": 1}, origin)
    masks = [torch.ones(new_tokens, dtype=torch.long)] * 2
    got = engine_logprobs(engine, micro_batch(prompts, responses, masks, unmask_step=traces), prompts, responses)
    for b, (p, r, trace) in enumerate(zip(prompts, responses, traces)):
        clean = torch.cat([p, r])
        positions = torch.arange(len(clean))
        if origin == "sequence":
            blocks = positions // 4
        else:
            blocks = torch.where(positions < len(p), positions // 4, (len(p) + 3) // 4 + (positions - len(p)) // 4)
        step = torch.cat([torch.full((len(p),), -1), trace])  # [L]
        expected = torch.zeros(len(r), dtype=torch.float64)
        for j in range(len(p), len(clean)):
            span = (blocks == blocks[j]).nonzero().flatten()
            start, stop = int(span[0]), int(span[-1]) + 1
            block = clean[start:stop].clone()
            later = (step[start:stop] >= step[j]) & (positions[start:stop] >= len(p))
            block[later] = mask_id  # what the sampler had not decided yet when it decided token j
            expected[j - len(p)] = block_logprob(model, clean, block, blocks, start)[j - start]
        assert torch.allclose(got[b].double(), expected, atol=1e-5), (b, (got[b].double() - expected).abs().max())
    views = engine._masker.views(
        torch.zeros(1, 6, dtype=torch.long),
        torch.ones(1, 6, dtype=torch.bool),
        mask_id,
        torch.tensor([0]),
        trace=torch.tensor([[0, 0, 1, 1, 2, 3]]),
        block_ids=torch.tensor([[0, 0, 0, 0, 1, 1]]),
    )
    assert views.num_views == 2  # block 0's steps 0, 1 and block 1's 2, 3 replayed side by side
