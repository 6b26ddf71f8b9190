"""diffugrpo: coupled-GRPO and diffusion rollouts for masked diffusion LMs, as a verl plugin.

Importing this package is cheap (no torch, no verl): reward plugins and the sandbox import
it for :data:`hookimpl` alone.
"""

import logging

import pluggy

from diffugrpo_plugin.hooktypes import Explained, Reason

# bitsandbytes (the qlora extra; peft imports it) warns at import on CPUs with AVX512-BF16 that it cannot fetch an
# optional kernel from the Hugging Face hub. That kernel serves a weight packing we never use
# (models.quantization.keep_canonical_packing), so the warning would only alarm.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

__version__ = "0.1.0"

PROJECT_NAME = "diffugrpo"
"""The pluggy project name; each kind's entry-point group is ``diffugrpo.<kind>`` (:mod:`diffugrpo_plugin.hookspecs`)."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marker for plugin hook implementations: ``@diffugrpo_plugin.hookimpl``."""

__all__ = ["PROJECT_NAME", "Explained", "Reason", "hookimpl", "__version__"]
