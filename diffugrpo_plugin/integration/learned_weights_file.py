"""The learned reward weights (``diffugrpo.rewards.aggregation`` that learns them) in a checkpoint's step folder, so a
resumed run goes on from the weights it had."""

from __future__ import annotations

import json
import os
import sys

from diffugrpo_plugin.rewards.learned_weights import LearnedWeights

LEARNED_WEIGHTS_FILE = "diffugrpo_reward_weights.json"


def save_learned_weights(weights: LearnedWeights, step_folder: str) -> None:
    """Written whole or not at all: a half-written file is never taken for the weights."""
    os.makedirs(step_folder, exist_ok=True)
    staging = os.path.join(step_folder, LEARNED_WEIGHTS_FILE + ".tmp")
    with open(staging, "w") as handle:
        json.dump(weights.state_dict(), handle)
    os.replace(staging, os.path.join(step_folder, LEARNED_WEIGHTS_FILE))


def load_learned_weights(weights: LearnedWeights, step_folder: str) -> None:
    """The weights saved in ``step_folder``; without the file they start again from the fixed ones, said on stderr."""
    path = os.path.join(step_folder, LEARNED_WEIGHTS_FILE)
    if not os.path.exists(path):
        print(
            f"[diffugrpo] {path} is missing: the learned reward weights start again from the fixed ones",
            file=sys.stderr,
            flush=True,
        )
        return
    with open(path) as handle:
        weights.load_state_dict(json.load(handle))
