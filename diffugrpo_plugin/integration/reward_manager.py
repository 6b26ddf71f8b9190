"""The verl reward manager ``diffugrpo``: scores one rollout with the configured reward plugins.

verl (0.9.1, ``verl.experimental.reward_loop``) creates it in every reward worker with the full
trainer config and calls :meth:`run_single` once per completion. It decodes the response, reads
the row's columns, runs every component of ``config.diffugrpo.rewards`` (see
:mod:`diffugrpo_plugin.rewards.spec`) in a worker thread under a per-completion deadline, and returns::

    {"reward_score": total, "reward_extra_info": {"reward/<name>": value, "reward_failed/<name>": 0 or 1, ...}}

so verl stores each component next to the batch (and logs them in validation). A component that
does not apply (None) is reported as NaN, because verl stacks these values into numpy arrays;
``reward_failed/<name>`` is 1.0 where that None came from the reward raising (or the deadline),
which the trainer counts, reports and, when a reward keeps failing on most completions, stops on.

Columns the reward functions receive, for this row (later sources win on a clash):

1. every top-level non-tensor field of the row that is not verl bookkeeping (``data_source``,
   ``test_cases``, ... when the data preparer put them there);
2. ``ground_truth`` = ``reward_model["ground_truth"]`` when present;
3. every key of the ``extra_info`` dict (where the data preparer puts ``test_cases``, ``test``,
   ``entry_point``, ``inputs``/``outputs``, ``reference_solution``, ...).

Import is light (no verl); :func:`register` imports verl and registers the class.
"""

from __future__ import annotations

import asyncio
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

from diffugrpo_plugin.rewards.aggregation import PASS_TOLERANCE
from diffugrpo_plugin.rewards.scoring import ScoredCompletion
from diffugrpo_plugin.rewards.spec import RewardSpec

logger = logging.getLogger("diffugrpo.reward_manager")

MANAGER_NAME = "diffugrpo"
EXTRA_INFO_PREFIX = "reward/"
ERROR_INFO_PREFIX = "reward_failed/"  # 1.0 where a component's reward raised on the completion
PASSED_KEY = "acc"  # verl's validation reports it as val-core/<data_source>/acc/mean@<n>: pass@1 per data source
SECONDS_KEY = "scoring_seconds"  # wall time spent scoring the completion: a timing, not a component
NOT_APPLICABLE = math.nan
VERL_BOOKKEEPING = frozenset(
    {
        "reward_model",
        "extra_info",
        "raw_prompt",
        "raw_prompt_ids",
        "tools_kwargs",
        "interaction_kwargs",
        "index",
        "uid",
        "tool_extra_fields",
        "__num_turns__",
        "reward_scores",
        "multi_modal_data",
        "multi_modal_inputs",
        "agent_name",
        "prompt_len",
        "response_len",
    }
)

_manager_class: type | None = None


def rewards_config(config: Any) -> Mapping[str, Any]:
    """``config.diffugrpo.rewards`` of the full trainer config, or an error saying what is missing."""
    diffugrpo = config.get("diffugrpo") if hasattr(config, "get") else None
    rewards = diffugrpo.get("rewards") if diffugrpo is not None else None
    if rewards is None:
        raise ValueError(
            "reward manager 'diffugrpo' needs config.diffugrpo.rewards (e.g. "
            "+diffugrpo.rewards.reward_funcs=[code,code_format] "
            "+diffugrpo.rewards.reward_weights=[2.0,0.5])"
        )
    return rewards


def row_columns(non_tensor: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset columns of one row (see the module docstring for the order), as verl holds them:
    :meth:`RewardSpec.score` turns numpy values into plain Python before any reward sees them."""
    columns = {key: value for key, value in non_tensor.items() if key not in VERL_BOOKKEEPING}
    reward_model = non_tensor.get("reward_model")
    if isinstance(reward_model, Mapping) and reward_model.get("ground_truth") is not None:
        columns["ground_truth"] = reward_model["ground_truth"]
    extra_info = non_tensor.get("extra_info")
    if isinstance(extra_info, Mapping):
        columns.update(extra_info)
    return columns


def passed_all_tests(code_reward: float | None) -> float:
    """1.0 when the ``code`` reward (a test pass rate) is full, 0.0 otherwise, NaN where it does not apply."""
    if code_reward is None:
        return NOT_APPLICABLE
    return 1.0 if code_reward >= 1.0 - PASS_TOLERANCE else 0.0


def extra_info(scored: ScoredCompletion) -> dict[str, float]:
    """Per-component values for verl's ``reward_extra_info`` (None becomes NaN), and a 0/1 flag per
    component saying whether the reward failed on this completion (verl stores numbers only)."""
    info = {
        f"{EXTRA_INFO_PREFIX}{name}": NOT_APPLICABLE if value is None else float(value)
        for name, value in scored.values.items()
    }
    info.update({f"{ERROR_INFO_PREFIX}{name}": float(name in scored.errors) for name in scored.values})
    return info


_task_errors_logged: set[str] = set()


def _log_task_errors(scored: ScoredCompletion) -> None:
    """Logs, once per distinct reason, a row whose task cannot be judged: it scores None (left out of its total, as
    a row without tests), not a failure of the reward, so the run goes on and the policy is not trained on it."""
    for name, reason in scored.reasons.items():
        if reason.kind == "task_error" and reason.detail not in _task_errors_logged:
            _task_errors_logged.add(reason.detail)
            logger.warning("diffugrpo rewards: reward '%s' scored a row None: %s", name, reason.detail)


def _build_manager_class(base: type) -> type:
    class DiffugrpoRewardManager(base):
        """Scores a completion with the reward plugins selected in ``config.diffugrpo.rewards``."""

        executor: ThreadPoolExecutor | None = None

        def __init__(
            self,
            config,
            tokenizer,
            compute_score=None,
            reward_router_address=None,
            reward_model_tokenizer=None,
            **kwargs,
        ):
            super().__init__(config, tokenizer, compute_score)
            self.spec = RewardSpec.from_config(rewards_config(config))
            if DiffugrpoRewardManager.executor is None:
                # One pool per process; the sandbox's own slots cap how many sandboxes run at once.
                DiffugrpoRewardManager.executor = ThreadPoolExecutor(
                    max_workers=self.spec.sandbox_config.max_concurrency + 2, thread_name_prefix="diffugrpo-reward"
                )

        async def run_single(self, data) -> dict:
            loop = asyncio.get_running_loop()
            item = data[-1:][0]  # multi-turn outputs: the last sequence carries the answer
            response_ids = item.batch["responses"]
            valid_length = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
            text = await loop.run_in_executor(
                None, lambda: self.tokenizer.decode(response_ids[:valid_length], skip_special_tokens=True)
            )
            columns = {name: [value] for name, value in row_columns(item.non_tensor_batch).items()}
            step = data.meta_info.get("global_steps") if data.meta_info else None
            started = loop.time()
            try:
                scored = await asyncio.wait_for(
                    loop.run_in_executor(self.executor, lambda: self.spec.score([text], columns, step)[0]),
                    timeout=self.spec.sample_deadline_s,
                )
            except asyncio.TimeoutError:
                late = f"took longer than sample_deadline_s={self.spec.sample_deadline_s:.0f} s"
                logger.error("diffugrpo rewards: a completion %s; every component scores None for it", late)
                scored = ScoredCompletion(
                    values={name: None for name in self.spec.names}, errors={name: late for name in self.spec.names}
                )
            _log_task_errors(scored)
            info = {**extra_info(scored), SECONDS_KEY: loop.time() - started}
            if "code" in scored.values:
                info[PASSED_KEY] = passed_all_tests(scored.values["code"])
            return {"reward_score": self.spec.total(scored.values), "reward_extra_info": info}

    DiffugrpoRewardManager.__module__ = __name__
    return DiffugrpoRewardManager


def register() -> type:
    """Registers the ``diffugrpo`` reward manager in verl's reward-loop registry (idempotent)."""
    global _manager_class
    from verl.experimental.reward_loop.reward_manager import register as register_manager
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

    if _manager_class is None:
        _manager_class = _build_manager_class(RewardManagerBase)
    return register_manager(MANAGER_NAME)(_manager_class)
