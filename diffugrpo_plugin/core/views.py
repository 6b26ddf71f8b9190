"""What a masker returns: noised views of a batch and the coefficients that combine their log-probs.

Its own module, imported by :mod:`diffugrpo_plugin.core.masking` and by the estimators' maskers
(:mod:`diffugrpo_plugin.core.estimators`) that the masking module registers; a plugin imports ``MaskedViews`` from here.
``diffugrpo_plugin.core.masking`` still re-exports both names: the hook documentation named that path before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MaskedViews:
    """Noised copies of a batch and how to combine their per-token log-probs.

    Attributes:
        noisy: token ids with ``mask_id`` at masked positions.  # [V, B, L]
        coef: weight of view ``v``'s log-prob of token ``(b, l)``; zero where unused.  # [V, B, L]
    """

    noisy: torch.Tensor
    coef: torch.Tensor

    @property
    def num_views(self) -> int:
        return self.noisy.shape[0]


def check_views(views: object, shape: tuple[int, ...], masker: str) -> MaskedViews:
    """What masker ``masker`` returned for a ``[B, L]`` batch, checked against the contract:
    a :class:`MaskedViews` with ``noisy`` and ``coef`` both ``[V, B, L]``."""
    if not isinstance(views, MaskedViews):
        raise TypeError(
            f"masker '{masker}' returned {type(views).__name__} from views(); it must return "
            f"diffugrpo_plugin.core.views.MaskedViews"
        )
    expected = tuple(shape)
    if views.noisy.dim() != 3 or tuple(views.noisy.shape[1:]) != expected or views.coef.shape != views.noisy.shape:
        raise ValueError(
            f"masker '{masker}' returned views with noisy {tuple(views.noisy.shape)} and coef "
            f"{tuple(views.coef.shape)}; both must be [V, {expected[0]}, {expected[1]}] for a batch "
            f"of {list(expected)}"
        )
    return views
