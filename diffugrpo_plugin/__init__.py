"""diffugrpo: coupled-GRPO and diffusion rollouts for masked diffusion LMs, as a verl plugin.

Importing this package is cheap (no torch, no verl): reward plugins and the sandbox import
it for :data:`hookimpl` alone.
"""

import pluggy

from diffugrpo_plugin import _moved
from diffugrpo_plugin.hooktypes import Explained, Reason

_moved.install()

__version__ = "0.1.0"

PROJECT_NAME = "diffugrpo"
"""The pluggy project name and the entry-point group third-party plugins register under."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marker for plugin hook implementations: ``@diffugrpo_plugin.hookimpl``."""

__all__ = ["PROJECT_NAME", "Explained", "Reason", "hookimpl", "__version__"]
