"""The ``example_brevity`` reward: shorter answers score higher.

A complete diffugrpo reward plugin: a function following the TRL convention, returned by the
``diffugrpo_reward_functions`` hook, and an entry point in this package's ``pyproject.toml``.
Its keyword-only parameter ``target_words`` is an option users set with
``reward_kwargs: {example_brevity: {target_words: 50}}``.
"""

from __future__ import annotations

from diffugrpo_plugin import hookimpl


def brevity_reward(completions, *, target_words: float = 100.0, **columns):
    """Shorter completions score higher: target / (target + words)."""
    scores = []
    for completion in completions:
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        scores.append(target_words / (target_words + len(text.split())))
    return scores


@hookimpl
def diffugrpo_reward_functions():
    return {"example_brevity": brevity_reward}
