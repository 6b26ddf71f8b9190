"""The algorithm of coupled-GRPO: maskers, coupled per-token log-probs, the loss terms added to the update.

Plain torch over :mod:`diffugrpo_plugin.models`: imports neither verl nor Ray.
"""
