"""Learned reward weights (``aggregation: learned``): auxiliary rewards count as far as they track correctness.

GRPO4CodeGen's weight network is trained to maximise the weighted reward itself, a target every weighting
reaches equally well up to scale, so nothing pins its weights down. Here each auxiliary's weight is fitted to a
target the weights cannot move: the correctness reward (``gate_reward``, ``code`` by default) of the completions
where it was measured.

What counts is what the advantage sees. The advantage compares the completions of one prompt, so the fit does
too: for every group of completions of a prompt, the deviations of an auxiliary ``x_k`` and of the correctness
``y`` from their group means. For each auxiliary separately, the least-squares line through the standardised
deviations has slope

    rho_k = sum(dx_k dy) / sqrt(sum(dx_k^2) sum(dy^2))

(the within-group correlation, in [-1, 1], whatever the auxiliary's units), and the completion's total is the
fixed weighted sum with each auxiliary's weight scaled by ``max(0, rho_k)``::

    total = w_y y + sum_k w_k max(0, rho_k) x_k

The sums are kept across steps with a decay of ``DECAY`` per step (a running fit that follows the policy) and
start empty: until an auxiliary and the correctness have both varied within a group, its scale stays 1, the
``fixed`` total. An auxiliary that tracks which completions of a prompt pass keeps its weight; one that does not
(a style score that differs between completions regardless of passing, one that works against passing) falls
to 0, and one that every completion of a prompt gets alike changes no advantage and keeps its scale. Easy and
hard prompts cannot prop an auxiliary up: only differences inside a group count. The policy can raise a weight
only by making the auxiliary tell its passing completions from its failing ones, which is what the weighting
asks for; the correctness term keeps its weight whatever the fit says, and every step's totals use the scales
from before its own fit, so a step's rewards never weight themselves. Rows with a non-finite value are left
out of the fit.

Plain Python and numpy (no torch): it runs in the trainer process. The state is a few sums per auxiliary, saved
in each checkpoint and restored on resume.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

DECAY = 0.9  # per step: the sums' memory is about ten steps


class LearnedWeights:
    """The fit above for one run: ``target`` is the correctness reward, ``weights`` every reward's configured
    weight (the target's included)."""

    def __init__(self, weights: Mapping[str, float], target: str):
        if target not in weights:
            raise ValueError(
                f"aggregation 'learned' fits the auxiliary rewards to predict '{target}' (gate_reward), "
                f"which is not among reward_funcs {list(weights)}"
            )
        self.weights, self.target = dict(weights), target
        self.auxiliaries = [name for name in weights if name != target]
        self.sum_xy = np.zeros(len(self.auxiliaries))  # [K] decayed sums of within-group deviation products
        self.sum_xx = np.zeros(len(self.auxiliaries))  # [K]
        self.sum_yy = np.zeros(len(self.auxiliaries))  # [K] per auxiliary: only rows where it has a value count
        self.updates = 0

    def scales(self) -> dict[str, float]:
        """Each auxiliary's ``max(0, rho_k)``; 1 while it or the correctness has not varied within a group."""
        scales = {}
        for name, xy, xx, yy in zip(self.auxiliaries, self.sum_xy, self.sum_xx, self.sum_yy):
            scales[name] = float(max(0.0, xy / math.sqrt(xx * yy))) if xx > 0 and yy > 0 else 1.0
        return scales

    def effective_weights(self) -> dict[str, float]:
        scales = self.scales()
        return {name: weight * scales.get(name, 1.0) for name, weight in self.weights.items()}

    def totals(self, samples: Sequence[Mapping[str, float | None]]) -> list[float]:
        """Each completion's total under the current weights (a None component is left out, as in ``fixed``)."""
        weights = self.effective_weights()
        return [
            float(sum(weights[name] * value for name, value in sample.items() if value is not None and name in weights))
            for sample in samples
        ]

    def fit(self, samples: Sequence[Mapping[str, float | None]], groups: Sequence[Hashable]) -> int:
        """Add one step's completions (``groups``: each one's prompt); returns how many groups taught something."""
        rows: dict[Hashable, list[Mapping[str, float | None]]] = {}
        for sample, group in zip(samples, groups, strict=True):
            rows.setdefault(group, []).append(sample)
        self.sum_xy *= DECAY
        self.sum_xx *= DECAY
        self.sum_yy *= DECAY
        used = 0
        for members in rows.values():
            taught = False
            for k, name in enumerate(self.auxiliaries):
                pairs = np.array(
                    [
                        (sample[name], sample[self.target])
                        for sample in members
                        if _finite(sample.get(name)) and _finite(sample.get(self.target))
                    ],
                    dtype=np.float64,
                )
                if len(pairs) < 2:
                    continue
                deviations = pairs - pairs.mean(axis=0)  # [n, 2]: dx, dy within the group
                self.sum_xy[k] += float(deviations[:, 0] @ deviations[:, 1])
                self.sum_xx[k] += float(deviations[:, 0] @ deviations[:, 0])
                self.sum_yy[k] += float(deviations[:, 1] @ deviations[:, 1])
                taught = True
            used += taught
        self.updates += 1
        return used

    def metrics(self) -> dict[str, float]:
        return {f"reward_weights/{name}": value for name, value in self.effective_weights().items()}

    def state_dict(self) -> dict:
        return {
            "auxiliaries": self.auxiliaries,
            "sum_xy": self.sum_xy.tolist(),
            "sum_xx": self.sum_xx.tolist(),
            "sum_yy": self.sum_yy.tolist(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        if state["auxiliaries"] != self.auxiliaries:
            raise ValueError(
                f"the checkpoint's learned reward weights are for {state['auxiliaries']}, this run's "
                f"auxiliary rewards are {self.auxiliaries}: resume with the same reward_funcs"
            )
        self.sum_xy, self.sum_xx, self.sum_yy = (
            np.asarray(state[key], dtype=np.float64) for key in ("sum_xy", "sum_xx", "sum_yy")
        )
        self.updates = int(state["updates"])


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
