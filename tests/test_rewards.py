"""Reward selection and weighting: config spellings and their errors, totals, gating, GDPO-style
group normalisation (hand-computed), per-step metrics, and crashing reward functions."""

from __future__ import annotations

import logging
import math
import re

import pytest

from diffugrpo_plugin import Explained, Reason, __version__
from diffugrpo_plugin.plugins import PluginError
from diffugrpo_plugin.rewards.aggregation import (
    gated_total,
    group_normalized_totals,
    normalize_by_group,
    step_metrics,
    weighted_total,
)
from diffugrpo_plugin.rewards.scoring import value_of
from diffugrpo_plugin.rewards.spec import (
    RewardComponent,
    RewardConfigError,
    RewardSpec,
    parse_weights,
)

# --- config ----------------------------------------------------------------------------------


def test_seed_spelling_and_mapping_spelling_agree():
    assert parse_weights(["code", "code_format"], [2.0, 0.5]) == {"code": 2.0, "code_format": 0.5}
    assert parse_weights({"code": 2.0, "code_format": 0.5}) == {"code": 2.0, "code_format": 0.5}
    assert parse_weights(["code", "syntax"]) == {"code": 1.0, "syntax": 1.0}


@pytest.mark.parametrize(
    "funcs, weights, message",
    [
        (["code", "code_format"], [2.0], r"2 names \['code', 'code_format'\] but reward_weights has 1"),
        (["code"], ["high"], "weight of reward 'code' must be a number, got 'high'"),
        (["code"], [True], "weight of reward 'code' must be a number"),
        (["code"], [-1.0], "must be a finite number >= 0, got -1.0"),
        (["code"], [float("nan")], "must be a finite number >= 0, got nan"),
        ({"code": 1.0}, [1.0], r"reward_weights \(\[1.0\]\) must not also be given: put the weights in the mapping"),
        (["code", "code"], None, r"lists \['code'\] more than once"),
        ([], None, "needs reward_funcs"),
        ("code", None, "must be a list of names or a mapping"),
    ],
)
def test_weight_errors_say_what_to_fix(funcs, weights, message):
    with pytest.raises(RewardConfigError, match=message):
        parse_weights(funcs, weights)


@pytest.mark.sandbox
def test_from_config_resolves_builtins_with_provenance_and_options():
    spec = RewardSpec.from_config(
        {
            "reward_funcs": ["code", "code_format"],
            "reward_weights": [2.0, 0.5],
            "reward_kwargs": {"code": {"timeout_s": 3}},
            "code_block": "last",
            "sandbox": {"max_concurrency": 3},
        }
    )
    assert spec.weights == {"code": 2.0, "code_format": 0.5}
    assert all(component.distribution.startswith("diffugrpo ") for component in spec.components)
    assert spec.components[0].options == {"timeout_s": 3}
    assert (spec.code_block, spec.sandbox_config.max_concurrency, spec.aggregation) == ("last", 3, "fixed")


def test_unknown_reward_lists_known_names_and_providers():
    with pytest.raises(
        PluginError, match=rf"unknown reward 'cod'\. Known rewards: .*code \(diffugrpo {re.escape(__version__)}\)"
    ):
        RewardSpec.from_config({"reward_funcs": ["cod"]})


def test_an_unknown_name_is_reported_before_the_weights_it_miscounts():
    with pytest.raises(
        PluginError, match=rf"unknown reward 'nope'\. Known rewards: code \(diffugrpo {re.escape(__version__)}\), "
    ):
        RewardSpec.from_config({"reward_funcs": ["nope"], "reward_weights": [2.0, 0.5]})
    with pytest.raises(PluginError, match=r"unknown reward 'nope'\. Known rewards: "):
        RewardSpec.from_config({"reward_funcs": {"code": 1.0, "nope": 2.0}})


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "config, message",
    [
        (
            {"reward_funcs": ["code"], "reward_kwargs": {"code": {"timeout": 3}}},
            r"reward 'code' has no option\(s\) \['timeout'\]; its options are \['code_block', 'format_end', "
            r"'require_format', 'timeout_s'\]",
        ),
        (
            {"reward_funcs": ["code"], "reward_kwargs": {"syntax": {}}},
            r"gives options for \['syntax'\], which reward_funcs",
        ),
        (
            {"reward_funcs": ["code"], "aggregation": "dynamic"},
            r"aggregation must be one of \[.fixed., .gated., .group_normalized., .learned.\], got .dynamic.",
        ),
        ({"reward_funcs": ["code_format"], "aggregation": "gated"}, "needs its gate_reward 'code' among reward_funcs"),
        (
            {"reward_funcs": ["code"], "code_block": "middle"},
            r"code_block must be one of \[.first., .last.\], got .middle.",
        ),
        (
            {"reward_funcs": ["code"], "format_end": "loose"},
            r"format_end must be one of \[.exact., .lenient.\], got .loose.",
        ),
        (
            {"reward_funcs": ["code_format"], "reward_kwargs": {"code_format": {"format_end": "any"}}},
            r"reward_kwargs.code_format.format_end must be one of \[.exact., .lenient.\], got .any.",
        ),
        ({"reward_funcs": ["code"], "rewards_weights": [1]}, r"unknown rewards option\(s\) \['rewards_weights'\]"),
        ({"reward_funcs": ["code"], "sandbox": {"memroy_mb": 1}}, r"rewards.sandbox: unknown sandbox option"),
        ({"reward_funcs": ["code"], "sample_deadline_s": 0}, "sample_deadline_s must be a positive number"),
    ],
)
def test_config_errors_name_the_key(config, message):
    with pytest.raises(RewardConfigError, match=message):
        RewardSpec.from_config(config)


def test_constant_reward_warns_loudly(caplog, capsys):
    with caplog.at_level(logging.WARNING, logger="diffugrpo.rewards"):
        spec = RewardSpec.from_config({"reward_funcs": {"constant": 1.0}})
    assert "smoke tests only" in caplog.text and "smoke tests only" in capsys.readouterr().err
    assert [scored.values for scored in spec.score(["a", "b"], {})] == [{"constant": 1.0}, {"constant": 1.0}]


# --- totals ----------------------------------------------------------------------------------


def test_fixed_total_leaves_out_none():
    weights = {"code": 2.0, "code_format": 0.5, "efficiency": 1.0}
    assert weighted_total({"code": 0.5, "code_format": 1.0, "efficiency": None}, weights) == 2.0 * 0.5 + 0.5
    assert weighted_total({"code": None, "code_format": None, "efficiency": None}, weights) == 0.0


def test_gated_total_counts_quality_only_when_all_tests_pass():
    weights = {"code": 2.0, "code_format": 0.5, "comments": 1.0}
    quality = {"comments"}
    assert gated_total({"code": 1.0, "code_format": 1.0, "comments": 0.4}, weights, "code", quality) == 2.9
    assert gated_total({"code": 0.5, "code_format": 1.0, "comments": 0.4}, weights, "code", quality) == 1.5
    assert gated_total({"code": None, "code_format": 1.0, "comments": 0.4}, weights, "code", quality) == 0.5


@pytest.mark.sandbox
def test_spec_total_follows_its_aggregation():
    gated = RewardSpec.from_config({"reward_funcs": {"code": 2.0, "comments": 1.0}, "aggregation": "gated"})
    fixed = RewardSpec.from_config({"reward_funcs": {"code": 2.0, "comments": 1.0}})
    values = {"code": 0.5, "comments": 1.0}
    assert (gated.total(values), fixed.total(values)) == (1.0, 2.0)


def test_group_normalisation_by_hand():
    samples = [
        {"code": 1.0, "fmt": 1.0},
        {"code": 0.0, "fmt": 1.0},
        {"code": 0.5, "fmt": None},  # group a
        {"code": 2.0, "fmt": 0.0},
    ]  # group b, alone
    groups = ["a", "a", "a", "b"]
    normalized = normalize_by_group(samples, groups, eps=0.0)
    # group a, code: mean 0.5, unbiased std sqrt(((0.5)^2 + (0.5)^2 + 0) / 2) = 0.5
    assert [n["code"] for n in normalized[:3]] == pytest.approx([1.0, -1.0, 0.0])
    # group a, fmt: values {1, 1} (None left out): no spread -> 0, None stays None
    assert [n["fmt"] for n in normalized[:3]] == [0.0, 0.0, None]
    assert normalized[3] == {"code": 0.0, "fmt": 0.0}  # a single value carries no signal
    totals = group_normalized_totals(samples, groups, {"code": 2.0, "fmt": 0.5}, eps=0.0)
    assert totals == pytest.approx([2.0, -2.0, 0.0, 0.0])


def test_group_normalisation_puts_components_on_one_scale():
    """A component with a 100x larger raw spread no longer dominates after normalisation."""
    samples = [{"big": 100.0, "small": 0.0}, {"big": 0.0, "small": 1.0}]
    totals = group_normalized_totals(samples, [0, 0], {"big": 1.0, "small": 1.0})
    assert totals == pytest.approx([0.0, 0.0], abs=1e-5)


def test_group_ids_must_match_samples():
    with pytest.raises(ValueError, match="2 samples but 1 group ids"):
        normalize_by_group([{}, {}], [0])


def test_step_metrics_mean_none_fraction_and_total():
    samples = [
        {"code": 1.0, "eff": None},
        {"code": 0.0, "eff": 0.5},
        {"code": 0.5, "eff": math.nan},
        {"code": None, "eff": None},
    ]
    metrics = step_metrics(samples, totals=[2.0, 1.0, 0.0, 1.0], failed=[set(), set(), set(), {"code"}])
    assert metrics["reward/code/mean"] == pytest.approx(0.5)
    assert metrics["reward/code/none_fraction"] == pytest.approx(0.25)
    assert metrics["reward/code/error_fraction"] == pytest.approx(0.25)
    assert metrics["reward/eff/error_fraction"] == 0.0
    assert metrics["reward/eff/mean"] == pytest.approx(0.5)
    assert metrics["reward/eff/none_fraction"] == pytest.approx(0.75)
    assert metrics["reward/total/mean"] == pytest.approx(1.0)


# --- failing reward functions ----------------------------------------------------------------


def _spec(*components: RewardComponent) -> RewardSpec:
    return RewardSpec(components=components)


def _component(name, fn, weight=1.0):
    return RewardComponent(name=name, weight=weight, fn=fn, distribution="tests 0")


def test_a_crashing_reward_scores_none_is_flagged_and_logged_once_per_step(caplog):
    def explodes(completions, **columns):
        raise RuntimeError("boom")

    def length(completions, **columns):
        return [float(len(c)) for c in completions]

    spec = _spec(_component("explodes", explodes), _component("length", length))
    with caplog.at_level(logging.ERROR, logger="diffugrpo.rewards"):
        first = spec.score(["ab", "c"], {}, step=1)
        spec.score(["ab"], {}, step=1)
        spec.score(["ab"], {}, step=2)
    assert [scored.values for scored in first] == [{"explodes": None, "length": 2.0}, {"explodes": None, "length": 1.0}]
    assert [scored.errors for scored in first] == [{"explodes": "RuntimeError: boom"}] * 2
    logged = [record for record in caplog.records if "reward 'explodes'" in record.getMessage()]
    assert len(logged) == 2 and "RuntimeError: boom" in logged[0].getMessage()
    assert spec.crash_log.counts == {"explodes": 4}  # each row of the first call, then one per call
    assert spec.total(first[0].values) == 2.0


def test_a_fault_on_one_completion_stays_in_its_row():
    calls = []

    def fragile(completions, *, threshold: int = 2, **columns):
        calls.append(list(completions))
        if any(len(completion) > threshold for completion in completions):
            raise RecursionError("maximum recursion depth exceeded")
        return [float(len(completion)) for completion in completions]

    spec = _spec(_component("fragile", fragile))
    scored = spec.score(["a", "pathological", "bb"], {"test_cases": [["x"], ["y"], ["z"]]})
    assert [s.values["fragile"] for s in scored] == [1.0, None, 2.0]
    assert [s.errors for s in scored] == [{}, {"fragile": "RecursionError: maximum recursion depth exceeded"}, {}]
    assert calls == [["a", "pathological", "bb"], ["a"], ["pathological"], ["bb"]]


@pytest.mark.parametrize("returned", [[1.0, 2.0, 3.0], "1.0", [float("inf"), 0.0], [True, 1.0], [object(), 1.0]])
def test_a_reward_returning_garbage_is_treated_as_crashed(returned):
    spec = _spec(_component("bad", lambda completions, **columns: returned))
    scored = spec.score(["x", "y"], {})
    assert [s.values for s in scored] == [{"bad": None}, {"bad": None}]
    assert all(s.errors["bad"].startswith("TypeError: reward 'bad' ") for s in scored)


def test_nan_means_not_applicable_and_columns_are_passed():
    seen = {}

    def picky(completions, **columns):
        seen.update(columns)
        return [math.nan, 0.25]

    spec = _spec(_component("picky", picky))
    scored = spec.score(["x", "y"], {"test_cases": [[], ["assert 1"]]})
    assert [s.values for s in scored] == [{"picky": None}, {"picky": 0.25}] and all(not s.errors for s in scored)
    assert seen == {"test_cases": [[], ["assert 1"]]}


def test_reasons_a_reward_returns_reach_each_row_and_plain_floats_still_work():
    no_block = Reason("no_code_block", "no fenced ```python block")
    not_applicable = Reason("no_tests", "the row has no tests")

    def explains(completions, **columns):
        return [Explained(0.0, no_block), 1.0, Explained(None, not_applicable)]

    def plain_floats(completions, **columns):
        return [0.0, 0.5, None]

    spec = _spec(_component("explains", explains, weight=2.0), _component("plain", plain_floats))
    scored = spec.score(["a", "b", "c"], {})
    assert [s.values for s in scored] == [
        {"explains": 0.0, "plain": 0.0},
        {"explains": 1.0, "plain": 0.5},
        {"explains": None, "plain": None},
    ]
    assert [s.reasons for s in scored] == [{"explains": no_block}, {}, {"explains": not_applicable}]
    assert [spec.total(s.values) for s in scored] == [0.0, 2.5, 0.0]
    assert [value_of(item) for item in explains([])] == [0.0, 1.0, None]  # what TRL would be handed


def test_a_reason_must_be_a_reason():
    spec = _spec(_component("sloppy", lambda completions, **columns: [Explained(0.0, "no block")]))
    [scored] = spec.score(["x"], {})
    assert scored.values == {"sloppy": None}
    assert scored.errors["sloppy"] == (
        "TypeError: reward 'sloppy' returned Explained with reason 'no block'; give a Reason(kind, detail)"
    )
