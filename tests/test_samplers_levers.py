"""The rollout levers that do less work: each off reproduces the plain sampler bit for bit, the exact
ones (compact, reuse_logits) keep every output when on, and the approximate ones behave as stated."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from diffugrpo_plugin.models.dlm import ModelConfigError
from diffugrpo_plugin.sampling import SamplerOptionError
from diffugrpo_plugin.sampling.decoding import factor_choice
from diffugrpo_plugin.sampling.samplers import EntropySampler, LLaDASampler, MaskGitPlusSampler
from samplers_support import FAKE_EOS, FAKE_PAD, LONG, SHORT, fake_lm, lm_for, log_probs, run, single_thread

_one_thread = pytest.fixture(scope="module", autouse=True)(single_thread)

REPO = Path(__file__).resolve().parents[1]
PROMPTS = [SHORT, LONG, SHORT[::-1], LONG[:5]]
SEEDS = [3, 4, 5, 6]

# (style, sampler class, options shared by the plain and the lever run)
SETTINGS = [
    ("dream", EntropySampler, {}),
    ("dream", EntropySampler, {"threshold": 0.3, "kv_cache": True}),
    ("dream", MaskGitPlusSampler, {"block_length": 4, "steps": 8, "temperature": 1.0, "threshold": 0.2}),
    ("llada", LLaDASampler, {"block_length": 8, "threshold": 0.2}),
    (
        "llada",
        LLaDASampler,
        {"block_length": 4, "steps": 8, "temperature": 0.7, "kv_cache": True, "threshold": 0.2, "cfg_scale": 0.5},
    ),
    ("llada", LLaDASampler, {"block_length": 4, "steps": 8, "dual_cache": True, "threshold": 0.2}),
]


@pytest.fixture(scope="module")
def models():
    return {"dream": lm_for("dream"), "llada": lm_for("llada")}


def same_output(first, second) -> bool:
    return torch.equal(first.completion_ids, second.completion_ids)


@pytest.mark.parametrize("style, sampler_class, options", SETTINGS)
def test_each_lever_off_reproduces_the_plain_sampler_bit_for_bit(style, sampler_class, options, models):
    plain = run(sampler_class(**options), models[style], PROMPTS, seeds=SEEDS)
    off = run(
        sampler_class(compact=False, reuse_logits=False, head_on_masked=False, factor=None, **options),
        models[style],
        PROMPTS,
        seeds=SEEDS,
    )
    assert same_output(plain, off)
    assert torch.equal(plain.unmask_step, off.unmask_step) and torch.equal(plain.steps, off.steps)
    assert plain.forwards == off.forwards and plain.forwarded_rows == off.forwarded_rows


@pytest.mark.parametrize("style, sampler_class, options", SETTINGS)
def test_compaction_gives_each_row_the_completion_it_gets_alone_and_without_compaction(
    style, sampler_class, options, models
):
    lm = models[style]
    plain = run(sampler_class(**options), lm, PROMPTS, seeds=SEEDS)
    compact = run(sampler_class(compact=True, **options), lm, PROMPTS, seeds=SEEDS)
    assert same_output(plain, compact)
    for row, (prompt, seed) in enumerate(zip(PROMPTS, SEEDS)):
        alone = run(sampler_class(compact=True, **options), lm, [prompt], seeds=[seed])
        assert torch.equal(alone.completion_ids[0], compact.completion_ids[row])
    # up to the first EOS every token was decided at the same step; later ones may never be decided
    kept = plain.completion_mask.bool()
    assert torch.equal(plain.unmask_step[kept], compact.unmask_step[kept])
    assert compact.forwarded_rows <= plain.forwarded_rows


@pytest.mark.parametrize(
    "levers",
    [{"reuse_logits": True}, {"head_on_masked": True}, {"reuse_logits": True, "head_on_masked": True, "compact": True}],
)
@pytest.mark.parametrize("style, sampler_class, options", SETTINGS)
def test_reused_logits_and_the_masked_only_head_change_no_output(style, sampler_class, options, levers, models):
    lm = models[style]
    plain = run(sampler_class(**options), lm, PROMPTS, seeds=SEEDS)
    fast = run(sampler_class(**levers, **options), lm, PROMPTS, seeds=SEEDS)
    assert same_output(plain, fast)
    if "compact" not in levers:  # compact leaves positions after a final EOS undecided
        assert torch.equal(plain.unmask_step, fast.unmask_step) and torch.equal(plain.steps, fast.steps)
    assert fast.forwarded_rows <= plain.forwarded_rows


def test_the_masked_only_head_projects_only_masked_positions(models):
    lm = models["dream"]
    head_rows = []
    handle = lm.module.lm_head.register_forward_hook(lambda _m, args, _out: head_rows.append(args[0].shape[-2]))
    try:
        out = run(EntropySampler(steps=4, head_on_masked=True), lm, [LONG], new_tokens=8)
    finally:
        handle.remove()
    # Dream's schedule over 8 tokens in 4 steps decides int(8 * .2498) = 1, then 2, 2 and the last 3
    assert out.unmask_step[0].sort().values.tolist() == [0, 1, 1, 2, 2, 3, 3, 3]
    assert head_rows == [8, 7, 5, 3]  # the positions still masked at each step, not the 8 + prompt of the window


def test_the_levers_skip_real_work():
    # Row 0 is sure of EOS at its first position and unsure after it; row 1 is unsure everywhere.
    # With steps=4 over 4 tokens the schedule's int(m (1 - s/t)) decides 0, 1, 1, 2 positions
    # (0, 0, 1, 2 for row 0 once the threshold has taken its EOS at step 0).
    sure, eos = log_probs(0.999, 0.001), log_probs(0.0005, 0.0005, 0.0005, 0.0005, 0.998)
    unsure = log_probs(0.3, 0.3, 0.4)
    other = 2
    lm = fake_lm({1: [sure, eos, unsure, unsure, unsure], other: [sure, unsure, unsure, unsure, unsure]})
    ids = torch.tensor([[1], [other]])

    def generate(**options):
        return MaskGitPlusSampler(steps=4, threshold=0.99, **options).generate(
            lm, ids, torch.ones_like(ids), 4, eos_token_id=FAKE_EOS, pad_token_id=FAKE_PAD, seeds=[0, 1]
        )

    plain = generate()
    assert plain.forwards == 4 and plain.forwarded_rows == 8  # row 0 rides along to the end
    compact = generate(compact=True)
    assert same_output(plain, compact)
    assert compact.completion_ids[0].tolist() == [FAKE_EOS, FAKE_PAD, FAKE_PAD, FAKE_PAD]
    assert compact.forwarded_rows == 2 + 1 + 1 + 1  # row 0's output was final after step 0
    # Step 1 runs row 0 alone (row 1 did not change at step 0), step 2 row 1 alone (row 0 did not change at step 1).
    reused = generate(reuse_logits=True)
    assert same_output(plain, reused) and torch.equal(plain.steps, reused.steps)
    assert reused.forwards == 4 and reused.forwarded_rows == 2 + 1 + 1 + 2
    both = generate(compact=True, reuse_logits=True)
    assert same_output(plain, both) and both.forwarded_rows == 2 + 0 + 1 + 1 and both.forwards == 3


@pytest.mark.parametrize("style", ["dream", "llada"])
@pytest.mark.parametrize("sampler_class", [EntropySampler, LLaDASampler])
def test_dual_cache_is_exact_when_attention_is_causal(style, sampler_class):
    # Its only approximation is that the kept prefix and suffix do not see the block change; under
    # causal attention the prefix never would and the block never sees its suffix.
    lm = lm_for(style, causal=True)
    options = {"block_length": 4, "steps": 16, "temperature": 1.0}
    plain = run(sampler_class(**options), lm, [SHORT, LONG])
    cached = run(sampler_class(dual_cache=True, compact=True, reuse_logits=True, **options), lm, [SHORT, LONG])
    assert same_output(plain, cached)


@pytest.mark.parametrize(
    "style, sampler",
    [
        ("llada", LLaDASampler(block_length=4, steps=8, dual_cache=True)),
        ("dream", MaskGitPlusSampler(block_length=4, steps=8, dual_cache=True)),
    ],
)
def test_dual_cache_runs_only_the_block_after_its_first_step(style, sampler, models):
    lm = models[style]
    calls = []
    handle = lm.module.register_forward_pre_hook(
        lambda _m, _a, kwargs: calls.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        run(sampler, lm, [LONG], new_tokens=8)
    finally:
        handle.remove()
    full = len(LONG) + 8
    block = 4 + int(lm.shift_logits)  # a shifted model also re-runs the token whose output scores the block's first
    assert calls == [full, block, block, block] * 2  # each block's 4 steps: the whole sequence, then the block


@pytest.mark.parametrize("cache", ["kv_cache", "dual_cache"])
@pytest.mark.parametrize(
    "style, sampler_class, options",
    [
        ("dream", EntropySampler, {"threshold": 0.3}),
        ("dream", MaskGitPlusSampler, {"block_length": 4, "steps": 8, "temperature": 1.0}),
        ("llada", LLaDASampler, {"block_length": 16, "steps": 8, "temperature": 0.7, "cfg_scale": 0.5}),
    ],
)
def test_a_cache_refreshed_every_forward_reproduces_the_plain_sampler(cache, style, sampler_class, options, models):
    # Refilled at every step, the kept keys/values are never stale: the logits are the full forward's.
    lm = models[style]
    plain = run(sampler_class(**options), lm, PROMPTS, seeds=SEEDS)
    refreshed = run(
        sampler_class(
            **{cache: True}, cache_refresh=1, compact=True, reuse_logits=True, head_on_masked=True, **options
        ),
        lm,
        PROMPTS,
        seeds=SEEDS,
    )
    assert same_output(plain, refreshed)


def test_cache_refresh_refills_every_that_many_forwards(models):
    lm = models["llada"]
    calls = []
    handle = lm.module.register_forward_pre_hook(
        lambda _m, _a, kwargs: calls.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        run(LLaDASampler(steps=5, dual_cache=True, cache_refresh=2), lm, [LONG], new_tokens=5)
    finally:
        handle.remove()
    full = len(LONG) + 5
    assert calls == [full, 5, full, 5, full]


def test_factor_rule_by_hand():
    # bars: k=1: 1 - 1/2 = .5, k=2: 1 - 1/3 = .667, k=3: .75, k=4: .8
    confidence = torch.tensor([[0.9, 0.7, 0.76, -torch.inf], [0.4, 0.95, 0.3, 0.2], [0.99, 0.99, 0.99, 0.99]])
    chosen = factor_choice(confidence, factor=1.0)
    assert chosen.tolist() == [
        [True, False, True, False],  # ranked .9 > .5, .76 > .667, then .7 < .75
        [False, True, False, False],  # .95 > .5, then .4 < .667
        [True, True, True, True],
    ]  # all four clear their bars


def test_factor_rule_keeps_only_a_leading_run():
    confidence = torch.tensor([[0.9, 0.6, 0.99]])  # ranked .99, .9, .6: bars .5, .667, .75 -> the first two
    assert factor_choice(confidence, factor=1.0).tolist() == [[True, False, True]]
    assert not factor_choice(confidence, factor=1e-6).any()  # a tiny factor asks for certainty


def test_factor_rule_decides_several_tokens_per_forward(models):
    lm = models["dream"]
    plain = run(EntropySampler(), lm, PROMPTS, seeds=SEEDS)
    with_factor = run(EntropySampler(factor=1.0, reuse_logits=True), lm, PROMPTS, seeds=SEEDS)
    assert with_factor.forwards < plain.forwards


def test_dual_cache_refuses_a_model_without_cache_support():
    lm = fake_lm({1: [log_probs(0.5, 0.5)] * 3})
    ids = torch.tensor([[1]])
    with pytest.raises(ModelConfigError, match="dual_cache=true cannot be used with TableModel.*dual_cache=false"):
        LLaDASampler(dual_cache=True).generate(lm, ids, torch.ones_like(ids), 2, eos_token_id=4, pad_token_id=0)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"kv_cache": True, "dual_cache": True}, "dual_cache=True is invalid; it replaces the prefix cache"),
        ({"factor": 0}, "factor=0 is invalid; use a number > 0"),
        ({"compact": "yes"}, "compact='yes' is invalid; use true or false"),
        ({"reuse_logits": 1}, "reuse_logits=1 is invalid; use true or false"),
        ({"head_on_masked": None}, "head_on_masked=None is invalid; use true or false"),
        ({"cache_refresh": 2}, "cache_refresh=2 is invalid; it refreshes a KV cache: also set kv_cache=true"),
        ({"cache_refresh": 0, "kv_cache": True}, "cache_refresh=0 is invalid; use an integer >= 1"),
    ],
)
def test_bad_lever_options_are_named(options, message):
    with pytest.raises(SamplerOptionError, match=message):
        EntropySampler(**options)


def test_benchmark_names_the_mbpp_variable_when_it_is_unset():
    env = {key: value for key, value in os.environ.items() if key != "DIFFUGRPO_MBPP_DIR"}
    done = subprocess.run(
        [sys.executable, "benchmarks/sampler.py", "--tasks", "mbpp"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "benchmarks/sampler.py: --tasks mbpp needs DIFFUGRPO_MBPP_DIR, the folder holding mbpp.jsonl; set it "
        "(e.g. DIFFUGRPO_MBPP_DIR=path/to/mbpp)"
    ]
