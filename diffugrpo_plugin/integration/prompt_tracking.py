"""Which prompt each of a step's completions came from: a prompt's key across steps, what the trainer keeps per
prompt uid until its completions are scored, and the order of a step's completions by prompt and sample."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable


def prompt_key(messages) -> str:
    """A short fixed-size name for a prompt's messages: the same prompt drawn at two steps gets the same one, and a run
    over many prompts keeps 32 characters for each, not its text."""
    return hashlib.blake2b(str(messages).encode(), digest_size=16).hexdigest()


def still_pending(by_uid: dict[str, tuple[int, Any]], scored: Iterable[str], step: int) -> dict[str, tuple[int, Any]]:
    """What the trainer keeps per prompt uid, ``(step fetched, value)``, without this step's scored prompts and without
    any fetched before the previous step that never came back (a group filter dropped it)."""
    done = set(scored)
    return {uid: kept for uid, kept in by_uid.items() if uid not in done and kept[0] >= step - 1}


def sample_order(keys: list[str], prompt_keys: dict[str, tuple[int, str]]) -> list[int]:
    """The order that puts a step's completions by prompt, then by their index among the prompt's samples.

    ``keys``: verl's TransferQueue keys, ``{uid}_{session_id}_{output index}``, in the order the replay buffer hands
    them over, which is the order the completions were scored in; ``prompt_keys``: uid -> (step, :func:`prompt_key`).
    Row ``b`` of a step gets mask seed ``b`` (:func:`~diffugrpo_plugin.core.masking.mask_seed_table`) and its
    micro-batch by position, so with this order a seed's run pairs the same completion with the same masks whatever
    the timing (uids are random, so a prompt without a ``prompt_keys`` entry sorts by its uid).
    """

    def sample(key: str) -> tuple[str, int, int]:
        uid, session, output = key.rsplit("_", 2)
        return prompt_keys.get(uid, (0, uid))[1], int(session), int(output)

    try:
        samples = [sample(key) for key in keys]
    except ValueError:  # not verl's key format: keep the replay buffer's order
        return list(range(len(keys)))
    return sorted(range(len(keys)), key=samples.__getitem__)


def groups_by_prompt(
    samples: list[dict[str, float | None]], uids: list[str], real: list[int], prompt_keys: dict[str, tuple[int, str]]
) -> dict[str, list[dict[str, float | None]]]:
    """The step's ``real`` completions' reward components by :func:`prompt_key` (a prompt drawn again gets a new uid);
    a uid without a key (never fetched) is left out."""
    groups: dict[str, list[dict[str, float | None]]] = {}
    for i in real:
        if uids[i] in prompt_keys:
            groups.setdefault(prompt_keys[uids[i]][1], []).append(samples[i])
    return groups
