"""The model flags of every command that loads a model (generate, eval, check-model), and the load they ask for."""

from __future__ import annotations

import argparse

IMPLEMENTATION_CHOICES = ("auto", "native", "remote")  # diffugrpo_plugin.families.IMPLEMENTATIONS, without torch


def add_model_flags(group: argparse._ArgumentGroup, with_model: bool = True,
                    default_device: str | None = None) -> None:
    """``--model``, ``--family``, ``--implementation``, ``--trust-remote-code``, ``--device`` (defaults None;
    ``default_device`` sets the device's)."""
    if with_model:
        group.add_argument("--model", default=None,
                           help="checkpoint directory or hub id (default: the tiny built-in Dream-style model)")
    group.add_argument("--family", default=None,
                       help="model family: dream (DiffuCoder too), llada, bidirectional or a plugin's (default: "
                            "detected from the checkpoint's config.json)")
    group.add_argument("--implementation", choices=IMPLEMENTATION_CHOICES, default=None,
                       help="auto (default): our native Dream/LLaDA classes when they run the checkpoint's settings, "
                            "else its own code; native; remote: the checkpoint's own code (needs --trust-remote-code)")
    group.add_argument("--trust-remote-code", action="store_true", default=None,
                       help="allow running the modeling code shipped with the checkpoint")
    group.add_argument("--device", default=default_device,
                       help=f"torch device (default: {default_device or 'cuda when available, else cpu'})")


def load_model(args: argparse.Namespace, model_path: str | None = None):
    """The wrapped model (eval mode) and tokenizer the flags select; the tiny built-in when no path is given."""
    from diffugrpo_plugin.models import load_diffusion_lm

    path = model_path or getattr(args, "model", None)
    if path is None:
        from diffugrpo_plugin.tiny import default_tiny_model_path

        path = default_tiny_model_path()
    return load_diffusion_lm(path, args.device, trust_remote_code=bool(args.trust_remote_code), family=args.family,
                             implementation=args.implementation or "auto")
