"""The loss-term contract and its two built-ins, against their formulas: DPO on each group's best and worst
completion (by hand, and its gradient against DPO's written with both completions in one graph), the masked-
diffusion SFT term against the SFT trainer's loss, and config errors (the plugin contract: test_plugin_contracts.py;
through verl's engine on two workers: test_engine_ray.py)."""

from __future__ import annotations

import math

import pytest
import torch

from diffugrpo_plugin.core.loss_terms import (
    GroupPreference,
    ReferenceSFT,
    StepBatch,
    TermInputs,
    best_and_worst,
    configured_terms,
)
from diffugrpo_plugin.plugins import PluginError, PluginOptionError


def step(groups, rewards, logratios=None, rows=None, lengths=None, real=None, tokenizer=None, number=1) -> StepBatch:
    """One step's batch; ``logratios`` per sample, or per sample and pass."""
    count = len(groups)
    logratios = torch.tensor(logratios or [0.0] * count)
    return StepBatch(
        groups=groups,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        rows=rows or [{}] * count,
        response_lengths=torch.tensor(lengths or [4] * count),
        logratios=logratios[:, None] if logratios.dim() == 1 else logratios,
        real=torch.tensor(real or [True] * count),
        step=number,
        tokenizer=tokenizer,
    )


def test_each_group_pairs_its_first_best_and_first_worst_and_ties_pair_nothing():
    groups = ["a", "a", "a", "a", "b", "b", "c", "c"]
    rewards = [0.5, 2.0, 0.0, 2.0, 1.0, 1.0, 3.0, -1.0]
    real = [True] * 7 + [False]  # c's worst is verl's padding
    assert best_and_worst(groups, torch.tensor(rewards), torch.tensor(real)).tolist() == [
        0.0,
        1.0,
        -1.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ]


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def preference_inputs(
    logp: torch.Tensor, reference: torch.Tensor, scored: torch.Tensor, fields: dict, iteration=None
) -> TermInputs:
    shape = logp.shape
    return TermInputs(
        lm=None,
        input_ids=torch.zeros(shape, dtype=torch.long),
        attention=torch.ones(shape),
        positions=torch.zeros(shape, dtype=torch.long),
        prompt=torch.zeros(shape, dtype=torch.bool),
        canvas=scored,
        scored=scored,
        logp=logp,
        reference_logp=reference,
        iteration=torch.zeros(shape[0], dtype=torch.long) if iteration is None else iteration,
        fields=fields,
    )


def test_preference_by_hand():
    term = GroupPreference(beta=0.5)
    # group g: sample 0 best (reward 1), sample 1 worst (0); the rollout's log-ratios 0.5 and -0.3; sample 2 unpaired
    fields = term.prepare(step(["g", "g", "h"], [1.0, 0.0, 0.7], logratios=[0.5, -0.3, 9.0]))
    assert fields["role"].tolist() == [1.0, -1.0, 0.0]
    assert fields["partner_logratio"].tolist() == [pytest.approx([-0.3]), pytest.approx([0.5]), [0.0]]
    scored = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    logp = torch.tensor([[-1.0, -2.0, -50.0], [-1.0, -1.0, -1.0], [-3.0, 0.0, 0.0]])
    reference = torch.tensor([[-1.2, -2.2, 0.0], [-0.9, -0.9, -0.9], [0.0, 0.0, 0.0]])
    losses = term.loss(preference_inputs(logp, reference, scored, fields))
    # best: r = 0.2 + 0.2 (the unscored -50 left out) = 0.4; z = 0.5 * (0.4 - (-0.3)) = 0.35
    # worst: r = -0.3; z = -0.5 * (-0.3 - 0.5) = 0.4
    assert losses.tolist() == pytest.approx([softplus(-0.35), softplus(-0.4), 0.0], abs=1e-6)


def test_each_pass_of_the_update_takes_the_partners_log_ratio_under_its_own_mask():
    term = GroupPreference(beta=1.0)
    # two passes (ppo_epochs=2): the rollout's log-ratios under mask 0 and mask 1
    fields = term.prepare(step(["g", "g"], [1.0, 0.0], logratios=[[0.5, 0.1], [-0.3, 0.2]]))
    assert fields["partner_logratio"].tolist() == [pytest.approx([-0.3, 0.2]), pytest.approx([0.5, 0.1])]
    scored = torch.ones(2, 1, dtype=torch.bool)
    logp, reference = torch.tensor([[0.1], [0.2]]), torch.zeros(2, 1)  # the policy at the rollout, under mask 1
    losses = term.loss(preference_inputs(logp, reference, scored, fields, iteration=torch.tensor([1, 1])))
    # pass 1: z = 1 * (0.1 - 0.2) for the best, -1 * (0.2 - 0.1) for the worst: one pair, one loss
    assert losses.tolist() == pytest.approx([softplus(0.1)] * 2, abs=1e-6)
    # under pass 0's mask the same policy scores the pair 0.5 against -0.3: z = 0.8 for both
    at_pass_0 = term.loss(preference_inputs(torch.tensor([[0.5], [-0.3]]), reference, scored, fields))
    assert at_pass_0.tolist() == pytest.approx([softplus(-0.8)] * 2, abs=1e-6)


def test_preference_gradient_is_dpos_with_both_completions_in_one_graph():
    """DPO written whole: -log sigmoid(beta * ((sum lw - sum refw) - (sum ll - sum refl))); our two members, each
    holding the other's log-ratio as a constant, sum to the same value twice over and to the same gradient."""
    beta = 0.3
    torch.manual_seed(0)
    logp = torch.randn(2, 5, requires_grad=True)  # row 0 the best, row 1 the worst
    reference = torch.randn(2, 5)
    scored = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    ratio = ((logp - reference) * scored).sum(dim=1)
    dpo = -torch.nn.functional.logsigmoid(beta * (ratio[0] - ratio[1]))
    (want,) = torch.autograd.grad(dpo, logp)
    term = GroupPreference(beta=beta)
    fields = term.prepare(step(["g", "g"], [1.0, 0.0], logratios=ratio.detach().tolist()))
    ours = term.loss(preference_inputs(logp, reference, scored, fields))
    assert ours.tolist() == pytest.approx([dpo.item()] * 2, abs=1e-6)
    (got,) = torch.autograd.grad(ours.sum(), logp)
    assert torch.allclose(got, want, atol=1e-6)


def test_sft_targets_are_the_reference_as_a_completion_padded_with_eos(tiny_model_path):
    from transformers import AutoTokenizer

    from diffugrpo_plugin.data import format_completion

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    eos = tokenizer.eos_token_id
    solution = "def f(x):\n    return x\n"
    encoded = tokenizer.encode(format_completion(solution), add_special_tokens=False)
    rows = [{"reference_solution": solution}, {"reference_solution": solution}, {}, {"reference_solution": solution}]
    lengths = [len(encoded) + 3, len(encoded), len(encoded) + 3, len(encoded) + 3]
    fields = ReferenceSFT().prepare(
        step(["a"] * 4, [0.0] * 4, rows=rows, lengths=lengths, real=[True, True, True, False], tokenizer=tokenizer)
    )
    # row 0 fits (EOS, then EOS padding); row 1 lacks the room for its EOS; row 2 has no reference; row 3 is padding
    assert fields["has_target"].tolist() == [1.0, 0.0, 0.0, 0.0]
    targets = fields["target"].unbind()
    assert targets[0].tolist() == encoded + [eos] * 3
    assert [len(t) for t in targets] == lengths


def test_sft_term_is_the_sft_trainers_loss_on_the_same_masks(tiny_model_path):
    from diffugrpo_plugin.core.masking import make_sft
    from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained
    from diffugrpo_plugin.training import sft

    lm = DiffusionLM.wrap(load_pretrained(tiny_model_path).eval())
    generator = torch.Generator().manual_seed(1)
    prompt_len, canvas_len = 5, 7
    prompts = torch.randint(5, 50, (3, prompt_len), generator=generator)
    targets = torch.randint(5, 50, (3, canvas_len), generator=generator)
    rollout = torch.randint(5, 50, (3, canvas_len), generator=generator)  # what the policy wrote: replaced
    canvas = torch.zeros(3, prompt_len + canvas_len, dtype=torch.bool)
    canvas[:, prompt_len:] = True
    seeds = torch.tensor([7, 8, 9])
    fields = {
        "target": torch.nested.as_nested_tensor(list(targets), layout=torch.jagged),
        "has_target": torch.tensor([1.0, 0.0, 1.0]),
        "seed": seeds[:, None],
    }
    ids = torch.cat([prompts, rollout], dim=1)
    inputs = TermInputs(
        lm=lm,
        input_ids=ids,
        attention=torch.ones_like(ids),
        positions=torch.arange(ids.size(1)).expand_as(ids),
        prompt=~canvas,
        canvas=canvas,
        scored=canvas,
        logp=torch.zeros(ids.shape),
        reference_logp=torch.zeros(ids.shape),
        iteration=torch.zeros(3, dtype=torch.long),
        fields=fields,
    )
    with torch.no_grad():
        ours = ReferenceSFT(eps=1e-3).loss(inputs)
        rows = [0, 2]
        batch = sft.Batch(
            input_ids=torch.cat([prompts, targets], dim=1)[rows],
            attention_mask=torch.ones(2, 12),
            completion_mask=canvas[rows],
        )
        theirs = sft.masked_diffusion_loss(lm, batch, seeds[rows], make_sft(1e-3))
    assert ours[1] == 0.0 and ours.sum() > 0  # a sample may draw a t that masks none of its 7 tokens: 0
    assert ours[rows].mean().item() == pytest.approx(theirs.item(), rel=1e-5)


def test_sft_masks_are_seeded_afresh_per_step_sample_and_pass(tiny_model_path):
    """Even where the coupled masks are fixed (random_masking=false), the SFT term trains at every noise level."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    rows = [{"reference_solution": "x = 1\n"}] * 3
    seeds = [
        ReferenceSFT().prepare(
            step(
                ["a"] * 3,
                [0.0] * 3,
                logratios=[[0.0, 0.0]] * 3,
                rows=rows,
                lengths=[40] * 3,
                tokenizer=tokenizer,
                number=number,
            )
        )["seed"]
        for number in (1, 1, 2)
    ]
    assert seeds[0].shape == (3, 2) and torch.equal(seeds[0], seeds[1])  # reproducible
    assert len(set(seeds[0].flatten().tolist()) | set(seeds[2].flatten().tolist())) == 12


def test_config_names_each_mistake():
    assert configured_terms({}) == {}
    terms = configured_terms({"preference": {"weight": 0.5, "beta": 0.2}, "sft": {"weight": 1}})
    assert terms["preference"][0] == 0.5 and terms["preference"][1].beta == 0.2 and terms["sft"][0] == 1.0
    with pytest.raises(ValueError, match=r"loss_terms.sft.weight must be a positive number .* got None"):
        configured_terms({"sft": {}})
    with pytest.raises(PluginOptionError, match="loss term 'preference' has no option temperature"):
        configured_terms({"preference": {"weight": 1.0, "temperature": 2}})
    with pytest.raises(PluginError, match="unknown loss term 'dpo'. Known loss terms: "):
        configured_terms({"dpo": {"weight": 1.0}})
    with pytest.raises(
        ValueError,
        match=r"^actor_rollout_ref.model.diffusion.loss_terms.preference: .*beta must be "
        r"positive",
    ):
        configured_terms({"preference": {"weight": 1.0, "beta": 0}})
    with pytest.raises(
        ValueError,
        match=r"loss_terms.sft must be a mapping with the term's weight and options, "
        r"e.g. \{sft: \{weight: 0.1\}",
    ):
        configured_terms({"sft": 0.1})
    with pytest.raises(ValueError, match=r"loss_terms must map each term's name to its settings"):
        configured_terms(["sft"])
    with pytest.raises(ValueError, match=r"loss_terms.a__b: a loss term's name may not contain '__'"):
        configured_terms({"a__b": {"weight": 1.0}})
