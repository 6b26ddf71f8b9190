"""The ``diffugrpo`` verl reward manager, driven through ``run_single`` on hand-built DataProtos
with a byte-level tokenizer built in the test (no network)."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from omegaconf import OmegaConf

from diffugrpo_plugin.integration import reward_manager
from diffugrpo_plugin.integration.reward_manager import extra_info, row_columns
from reward_manager_support import ADD_TESTS, CORRECT, WRONG, _row, tokenizer  # noqa: F401 - tokenizer is a fixture
from reward_support import TEST_UID_BASE, processes_with_uids


@pytest.fixture(scope="module")
def manager_class():
    return reward_manager.register()


def _config(**rewards):
    settings = {
        "reward_funcs": ["code", "code_format"],
        "reward_weights": [2.0, 0.5],
        "sandbox": {"timeout_s": 2.0, "memory_mb": 256, "max_concurrency": 2, "uid_base": TEST_UID_BASE},
    }
    settings.update(rewards)
    return OmegaConf.create({"diffugrpo": {"rewards": settings}, "trainer": {"experiment_name": "test"}})


def _score(manager_class, tokenizer, data, config=None):
    """run_single's result, with the scoring wall time (not a component) checked and set aside."""

    async def main():
        manager = manager_class(config or _config(), tokenizer, compute_score=None)
        return await manager.run_single(data)

    result = asyncio.run(main())
    seconds = result["reward_extra_info"].pop(reward_manager.SECONDS_KEY)
    assert 0.0 <= seconds < 60.0
    result["seconds"] = seconds
    return result


@pytest.mark.sandbox
def test_registered_in_verls_reward_loop_registry(manager_class):
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

    assert get_reward_manager_cls("diffugrpo") is manager_class
    assert issubclass(manager_class, RewardManagerBase)
    assert reward_manager.register() is manager_class  # a second import of the plugin is harmless


@pytest.mark.sandbox
def test_correct_completion_gets_the_weighted_total(manager_class, tokenizer):
    result = _score(manager_class, tokenizer, _row(tokenizer, CORRECT, {"test_cases": ADD_TESTS}))
    assert result["reward_score"] == 2.0 * 1.0 + 0.5 * 1.0
    # "acc" (all tests passed) is what verl's validation reports as pass@1 per data source
    assert result["reward_extra_info"] == {
        "reward/code": 1.0,
        "reward/code_format": 1.0,
        "acc": 1.0,
        "reward_failed/code": 0.0,
        "reward_failed/code_format": 0.0,
    }


@pytest.mark.sandbox
def test_wrong_completion_and_tests_given_as_a_top_level_column(manager_class, tokenizer):
    result = _score(manager_class, tokenizer, _row(tokenizer, WRONG, {}, test_cases=ADD_TESTS))
    assert result["reward_extra_info"] == {
        "reward/code": 0.0,
        "reward/code_format": 1.0,
        "acc": 0.0,
        "reward_failed/code": 0.0,
        "reward_failed/code_format": 0.0,
    }
    assert result["reward_score"] == 0.5


@pytest.mark.sandbox
def test_not_applicable_is_nan_in_extra_info_and_left_out_of_the_total(manager_class, tokenizer):
    result = _score(manager_class, tokenizer, _row(tokenizer, CORRECT, {"note": "no tests here"}))
    assert (
        math.isnan(result["reward_extra_info"]["reward/code"])
        and result["reward_extra_info"]["reward_failed/code"] == 0
    )
    assert math.isnan(result["reward_extra_info"]["acc"])
    assert result["reward_score"] == 0.5


@pytest.mark.sandbox
def test_a_completion_past_its_deadline_scores_none_without_blocking(manager_class, tokenizer):
    slow = "```python\nimport time\ndef add(a, b):\n    time.sleep(1.5)\n    return a + b\n```\n"
    config = _config(sample_deadline_s=0.3)
    result = _score(manager_class, tokenizer, _row(tokenizer, slow, {"test_cases": ADD_TESTS}), config)
    info = result["reward_extra_info"]
    assert all(math.isnan(info[key]) for key in ("reward/code", "reward/code_format", "acc"))
    assert info["reward_failed/code"] == info["reward_failed/code_format"] == 1.0  # counted as failures
    assert result["reward_score"] == 0.0
    assert 0.3 <= result["seconds"] < 1.5  # gave up at the deadline instead of waiting for the sandbox
    # The abandoned job still ends by itself within the sandbox's own limits (2 tests x (1.5 s + overhead)),
    # leaving no process behind. Between its two tests no process runs for a moment, so "none right now" is not
    # "done": the sandbox's uids must stay unused for quiet_s seconds in a row.
    quiet_s, quiet_since, give_up_at = 3.0, None, time.monotonic() + 20.0
    while time.monotonic() < give_up_at:
        if processes_with_uids(TEST_UID_BASE, TEST_UID_BASE + 64):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            break
        time.sleep(0.1)
    assert quiet_since is not None and time.monotonic() - quiet_since >= quiet_s, "sandbox processes still running"
    assert processes_with_uids(TEST_UID_BASE, TEST_UID_BASE + 64) == []


@pytest.mark.sandbox
def test_missing_rewards_config_says_what_to_add(manager_class, tokenizer):
    with pytest.raises(ValueError, match=r"needs config\.diffugrpo\.rewards"):
        _score(manager_class, tokenizer, _row(tokenizer, CORRECT, {}), OmegaConf.create({"trainer": {}}))


def test_row_columns_order_and_sources():
    non_tensor = {
        "data_source": "mbpp",
        "uid": "u1",
        "test_cases": ["a"],
        "reward_model": {"ground_truth": "gt"},
        "extra_info": {"test_cases": ["b"], "entry_point": "f"},
    }
    assert row_columns(non_tensor) == {
        "data_source": "mbpp",
        "test_cases": ["b"],
        "ground_truth": "gt",
        "entry_point": "f",
    }


def test_extra_info_uses_nan_for_none_and_flags_failures():
    from diffugrpo_plugin.rewards.scoring import ScoredCompletion

    values = extra_info(ScoredCompletion({"code": None, "syntax": 1, "fmt": None}, {"code": "SandboxError: gone"}))
    assert math.isnan(values["reward/code"]) and values["reward/syntax"] == 1.0 and math.isnan(values["reward/fmt"])
    assert (values["reward_failed/code"], values["reward_failed/syntax"], values["reward_failed/fmt"]) == (
        1.0,
        0.0,
        0.0,
    )


@pytest.mark.sandbox
def test_a_sandbox_failure_is_a_flagged_failure_not_a_silent_none(manager_class, tokenizer, monkeypatch, caplog):
    from diffugrpo_plugin.sandbox.config import SandboxError
    from diffugrpo_plugin.sandbox.host import Sandbox

    def broken(self, jobs):
        raise SandboxError("the sandbox failed to start (exit code 1): bwrap: Can't find source path /gone")

    monkeypatch.setattr(Sandbox, "run", broken)
    with caplog.at_level("ERROR", logger="diffugrpo.rewards"):
        uncached = "```python\ndef add(a, b):\n    return b + a\n```\n"  # a run no earlier test left in the cache
        result = _score(manager_class, tokenizer, _row(tokenizer, uncached, {"test_cases": ADD_TESTS}))
    info = result["reward_extra_info"]
    assert math.isnan(info["reward/code"]) and info["reward_failed/code"] == 1.0
    assert info["reward/code_format"] == 1.0 and info["reward_failed/code_format"] == 0.0
    assert "Can't find source path /gone" in caplog.text
