"""Rewards and the judge: which reward functions run, with which options and weights (:mod:`.spec`), how their
values combine (:mod:`.aggregation`), running them in isolation (:mod:`.scoring`), learned weights, the code tests
and their verdicts (:mod:`.code_tests`, :mod:`.judging`), parsing untrusted source (:mod:`.verdicts`). Imports no
torch.

``from diffugrpo_plugin.rewards import X`` still works for the names the module ``diffugrpo_plugin.rewards`` had
before it became a package (now in :mod:`.spec`, :mod:`.aggregation`, :mod:`.scoring`); they are loaded when
first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

_OLD_NAMES = {  # the names the module diffugrpo_plugin.rewards had -> the module that holds each now
    "AGGREGATIONS": "aggregation",
    "DEFAULT_QUALITY_REWARDS": "spec",
    "CONFIG_KEYS": "spec",
    "SMOKE_TEST_REWARDS": "spec",
    "DIFFUCODER_REWARDS": "spec",
    "PASS_TOLERANCE": "aggregation",
    "CRASH_LOG_WINDOW_S": "scoring",
    "RewardConfigError": "spec",
    "value_of": "scoring",
    "RewardComponent": "spec",
    "parse_weights": "spec",
    "keyword_options": "spec",
    "plain": "spec",
    "ScoredCompletion": "scoring",
    "RewardSpec": "spec",
    "weighted_total": "aggregation",
    "gated_total": "aggregation",
    "normalize_by_group": "aggregation",
    "group_normalized_totals": "aggregation",
    "step_metrics": "aggregation",
}


def __getattr__(name: str) -> Any:
    if name in _OLD_NAMES:
        return getattr(importlib.import_module(f"{__name__}.{_OLD_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
