"""The verl glue: the only part of diffugrpo that knows verl's internals.

Everything here is thin: it adapts the plain-torch math in ``diffugrpo_plugin`` to verl's
registries (advantage estimator, policy loss, engine, rollout, trainer, platform, reward
manager). ``register`` is the ``verl.plugins`` entry point that wires them on ``import verl``.
"""

# Importing verl first runs its plugin loader, hence our ``register`` module, to completion before
# any module of this package executes; otherwise a process whose first import is, say,
# ``diffugrpo_plugin.integration.rollout`` would re-enter that half-initialised module from
# ``register`` while verl loads its plugins.
import verl  # noqa: F401
