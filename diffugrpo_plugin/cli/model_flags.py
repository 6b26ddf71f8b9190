"""The model flags of every command that loads a model (generate, eval, check-model), and the load they ask for."""

from __future__ import annotations

import argparse

from diffugrpo_plugin.config import training_default

IMPLEMENTATION_CHOICES = ("auto", "native", "remote")  # diffugrpo_plugin.models.family.IMPLEMENTATIONS, without torch
# the training job's completion length, which the default model was fine-tuned for
DEFAULT_MAX_NEW_TOKENS = int(training_default("data.max_response_length"))
DEFAULT_MODEL_HELP = (
    "the training job's default: the tiny Dream-style model warm-started by a short SFT, "
    "built into the cache on first use"
)
SEED_HELP = "no effect at temperature 0 (the samplers' default), which always takes the most likely token"


def add_model_flags(group: argparse._ArgumentGroup, with_model: bool = True, default_device: str | None = None) -> None:
    """``--model``, ``--family``, ``--implementation``, ``--trust-remote-code``, ``--device`` (defaults None;
    ``default_device`` sets the device's)."""
    if with_model:
        group.add_argument(
            "--model", default=None, help=f"checkpoint directory or hub id (default: {DEFAULT_MODEL_HELP})"
        )
        group.add_argument(
            "--adapter",
            default=None,
            metavar="DIR",
            help="a LoRA adapter folder to merge into --model (a LoRA training checkpoint's "
            "global_step_N/actor/lora_adapter, or any peft adapter of the same model); applied unmerged with "
            "--load-in-4bit",
        )
        group.add_argument(
            "--load-in-4bit",
            action="store_true",
            default=None,
            help="load --model's linear layers in 4 bits (NF4, double quantization: what "
            "actor_rollout_ref.model.lora.load_in_4bit trains on), with --adapter applied rather than merged; "
            "needs bitsandbytes (pip install 'diffugrpo[qlora]')",
        )
    group.add_argument(
        "--family",
        default=None,
        help="model family: dream (DiffuCoder too), llada, bidirectional or a plugin's (default: "
        "detected from the checkpoint's config.json)",
    )
    group.add_argument(
        "--implementation",
        choices=IMPLEMENTATION_CHOICES,
        default=None,
        help="auto (default): our native Dream/LLaDA classes when they run the checkpoint's settings, "
        "else its own code; native; remote: the checkpoint's own code (needs --trust-remote-code)",
    )
    group.add_argument(
        "--trust-remote-code",
        action="store_true",
        default=None,
        help="allow running the modeling code shipped with the checkpoint",
    )
    group.add_argument(
        "--device",
        default=default_device,
        help=f"torch device (default: {default_device or 'cuda when available, else cpu'})",
    )


def model_path(args: argparse.Namespace) -> str:
    """``--model``, or the training job's default model (built on first use, once per machine)."""
    if getattr(args, "model", None) is not None:
        return args.model
    from diffugrpo_plugin.training.warm_start import default_warm_model_path

    return default_warm_model_path()


def load_model(args: argparse.Namespace):
    """The wrapped model (eval mode) and tokenizer the flags select."""
    from diffugrpo_plugin.models.dlm import load_diffusion_lm
    from diffugrpo_plugin.models.quantization import quantization_settings

    return load_diffusion_lm(
        model_path(args),
        args.device,
        trust_remote_code=bool(args.trust_remote_code),
        family=args.family,
        implementation=args.implementation or "auto",
        adapter=getattr(args, "adapter", None),
        quantization=quantization_settings({"load_in_4bit": getattr(args, "load_in_4bit", False)}),
    )
