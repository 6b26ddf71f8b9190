"""The types a hook implementation hands back, exported beside :data:`diffugrpo_plugin.hookimpl` (as pytest
exports its hook types): a reward says why a completion scored what it did with ``Explained(value, Reason(kind,
detail))`` (:func:`diffugrpo_plugin.hookspecs.diffugrpo_reward_functions`). A leaf: the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    """Why a completion scored what it did: ``kind``, a short fixed code a program can count
    (``no_code_block``, ``syntax_error``, ...), and ``detail``, the sentence a person reads."""

    kind: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "detail": self.detail}


@dataclass(frozen=True)
class Explained:
    """One completion's reward value (a finite float, or None: not applicable) with its :class:`Reason`."""

    value: float | None
    reason: Reason
