"""The verl glue: the only part of diffugrpo that knows verl's internals.

Everything here is thin: it adapts the plain-torch math in ``diffugrpo_plugin`` to verl's
registries (advantage estimator, policy loss, engine, rollout, trainer, platform, reward
manager). ``register`` is the ``verl.plugins`` entry point that wires them on ``import verl``.
"""
