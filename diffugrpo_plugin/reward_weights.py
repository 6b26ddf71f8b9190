"""Learned reward weights (``aggregation: learned``): auxiliary rewards count as far as they track correctness.

GRPO4CodeGen's weight network is trained to maximise the weighted reward itself, a target every weighting
reaches equally well up to scale, so nothing pins its weights down. Here the model is fitted to a target the
weights cannot move: the correctness reward (``gate_reward``, ``code`` by default) on the completions where it
was measured. For the auxiliary components ``x_k`` (every other reward in use; None counts as 0)::

    y_hat = b + sum_k a_k x_k,   a_k = softplus(theta_k) >= 0
    loss  = mean over rows with a correctness value (y_hat - y)^2 + RIDGE * sum_k a_k^2

fitted online: each step takes ``STEPS_PER_UPDATE`` gradient steps on that step's rows, from where the last
step left off. The completion's total is then the fixed weighted sum with each auxiliary's weight scaled by
``min(1, a_k)``::

    total = w_y y + sum_k w_k min(1, a_k) x_k

``a_k`` starts at 1 (the ``fixed`` total). An auxiliary that predicts a unit of correctness per unit of itself
keeps its configured weight; one that predicts nothing (a style score unrelated to passing) or works against
correctness decays towards 0. One that every completion gets equally is as well explained by the intercept, so
only the ridge term moves it, slowly (such a reward changes no group-relative advantage anyway); the ridge term
also settles what collinear auxiliaries share. The policy can raise an auxiliary's weight only by making it track correctness better, which is what the
weighting asks for; the correctness term keeps its weight whatever the fit says. Totals use the weights from
before the step's fit, so a step's rewards never weight themselves.

Plain Python and numpy (no torch): it runs in the trainer process. The state is a small dict, saved in each
checkpoint and restored on resume.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

RIDGE = 0.01
STEPS_PER_UPDATE = 20
LEARNING_RATE = 0.5
INITIAL_THETA = math.log(math.e - 1.0)  # softplus(INITIAL_THETA) == 1


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


class LearnedWeights:
    """The fit above for one run: ``target`` is the correctness reward, ``weights`` every reward's configured
    weight (the target's included)."""

    def __init__(self, weights: Mapping[str, float], target: str):
        if target not in weights:
            raise ValueError(f"aggregation 'learned' fits the auxiliary rewards to predict '{target}' (gate_reward), "
                             f"which is not among reward_funcs {list(weights)}")
        self.weights, self.target = dict(weights), target
        self.auxiliaries = [name for name in weights if name != target]
        self.theta = np.full(len(self.auxiliaries), INITIAL_THETA)  # [K]
        self.bias = 0.0
        self.updates = 0

    def scales(self) -> dict[str, float]:
        """Each auxiliary's ``min(1, a_k)``."""
        return {name: float(min(1.0, value)) for name, value in zip(self.auxiliaries, softplus(self.theta))}

    def effective_weights(self) -> dict[str, float]:
        scales = self.scales()
        return {name: weight * scales.get(name, 1.0) for name, weight in self.weights.items()}

    def totals(self, samples: Sequence[Mapping[str, float | None]]) -> list[float]:
        """Each completion's total under the current weights (a None component is left out, as in ``fixed``)."""
        weights = self.effective_weights()
        return [float(sum(weights[name] * value for name, value in sample.items()
                          if value is not None and name in weights)) for sample in samples]

    def fit(self, samples: Sequence[Mapping[str, float | None]]) -> float | None:
        """One step's gradient descent on the rows with a correctness value; returns their loss before it (None
        when no row has one, or there are no auxiliaries: nothing to learn)."""
        rows = [sample for sample in samples if sample.get(self.target) is not None]
        if not rows or not self.auxiliaries:
            return None
        x = np.array([[sample.get(name) or 0.0 for name in self.auxiliaries] for sample in rows])  # [R, K]
        y = np.array([float(sample[self.target]) for sample in rows])  # [R]
        first_loss = None
        for _ in range(STEPS_PER_UPDATE):
            a = softplus(self.theta)  # [K]
            residual = self.bias + x @ a - y  # [R]
            loss = float(np.mean(residual**2) + RIDGE * np.sum(a**2))
            first_loss = loss if first_loss is None else first_loss
            grad_a = 2 * (x.T @ residual) / len(y) + 2 * RIDGE * a  # [K]
            self.theta -= LEARNING_RATE * grad_a / (1.0 + np.exp(-self.theta))  # d softplus / d theta = sigmoid
            self.bias -= LEARNING_RATE * 2 * float(np.mean(residual))
        self.updates += 1
        return first_loss

    def metrics(self) -> dict[str, float]:
        return {f"reward_weights/{name}": value for name, value in self.effective_weights().items()}

    def state_dict(self) -> dict:
        return {"auxiliaries": self.auxiliaries, "theta": self.theta.tolist(), "bias": self.bias,
                "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        if state["auxiliaries"] != self.auxiliaries:
            raise ValueError(f"the checkpoint's learned reward weights are for {state['auxiliaries']}, this run's "
                             f"auxiliary rewards are {self.auxiliaries}: resume with the same reward_funcs")
        self.theta = np.asarray(state["theta"], dtype=np.float64)
        self.bias, self.updates = float(state["bias"]), int(state["updates"])
