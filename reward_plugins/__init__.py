"""diffugrpo's built-in reward functions, one pluggy plugin module per reward.

Each module implements ``diffugrpo_reward_functions()`` and is registered through the
``diffugrpo.rewards`` entry-point group in our own ``pyproject.toml``, exactly as a third-party
package would be. Every function follows the TRL convention ``fn(completions, **columns) ->
list[float | None]``; its keyword-only parameters are its options (``reward_kwargs`` in config).
What several of them share (the format rule, the code judged, its sandboxed test outcomes) is in
:mod:`diffugrpo_plugin.rewards.judging`, below them. No torch.
"""
