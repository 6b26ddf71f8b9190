"""Rewards and the judge: which reward functions run and how their values combine (:mod:`.spec`), learned
weights, the code tests and their verdicts (:mod:`.code_tests`, :mod:`.judging`), parsing untrusted source
(:mod:`.verdicts`). Imports no torch.

``from diffugrpo_plugin.rewards import X`` still works for the names the module ``diffugrpo_plugin.rewards`` had
before it became a package, when its code moved to :mod:`.spec`; they are loaded when first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM_SPEC = (
    "AGGREGATIONS",
    "DEFAULT_QUALITY_REWARDS",
    "CONFIG_KEYS",
    "SMOKE_TEST_REWARDS",
    "DIFFUCODER_REWARDS",
    "PASS_TOLERANCE",
    "CRASH_LOG_WINDOW_S",
    "RewardConfigError",
    "value_of",
    "RewardComponent",
    "parse_weights",
    "keyword_options",
    "plain",
    "ScoredCompletion",
    "RewardSpec",
    "weighted_total",
    "gated_total",
    "normalize_by_group",
    "group_normalized_totals",
    "step_metrics",
)


def __getattr__(name: str) -> Any:
    if name in _FROM_SPEC:
        return getattr(importlib.import_module(f"{__name__}.spec"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
