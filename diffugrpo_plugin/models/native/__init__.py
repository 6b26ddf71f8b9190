"""Our own implementations of the published dLLM architectures, on the transformers verl pins.

Dream / DiffuCoder, LLaDA, SDAR (dense and MoE) and LLaDA2.x publish their networks as ``trust_remote_code`` modules written for
transformers 4.x; under transformers 5 they do not load (or, for Dream's RoPE, load and compute
wrong logits). These re-implementations load the published ``config.json`` and safetensors
directly, with the published parameter names. :func:`register_with_transformers` makes
``AutoConfig`` / ``AutoModel`` / ``AutoModelForCausalLM`` / ``AutoTokenizer`` answer for the
published model types without remote code, which is how verl's own engine finds them
(``import verl`` runs it through our ``verl.plugins`` entry point).

Plain torch + transformers; no verl.
"""

from __future__ import annotations

from diffugrpo_plugin.models.native.dream import DreamConfig, DreamModel, DreamTokenizer
from diffugrpo_plugin.models.native.llada import LLaDAConfig, LLaDAModelLM
from diffugrpo_plugin.models.native.llada2 import LLaDA2MoeConfig, LLaDA2MoeModelLM
from diffugrpo_plugin.models.native.sdar import SDARConfig, SDARForCausalLM, SDARMoeConfig, SDARMoeForCausalLM

__all__ = [
    "DreamConfig",
    "DreamModel",
    "DreamTokenizer",
    "LLaDA2MoeConfig",
    "LLaDA2MoeModelLM",
    "LLaDAConfig",
    "LLaDAModelLM",
    "SDARConfig",
    "SDARForCausalLM",
    "SDARMoeConfig",
    "SDARMoeForCausalLM",
    "register_with_transformers",
]
NATIVE_CLASSES = (
    (DreamConfig, DreamModel),
    (LLaDAConfig, LLaDAModelLM),
    (SDARConfig, SDARForCausalLM),
    (SDARMoeConfig, SDARMoeForCausalLM),
    (LLaDA2MoeConfig, LLaDA2MoeModelLM),
)


def register_with_transformers() -> None:
    """Register every native architecture with transformers' auto classes (idempotent).

    Keys are our config classes, so a remote-code module that later registers its own classes
    under the same ``model_type`` (LLaDA's does, at import) cannot redirect loads made with ours.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    for config_class, model_class in NATIVE_CLASSES:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, model_class, exist_ok=True)
        AutoModelForCausalLM.register(config_class, model_class, exist_ok=True)
    AutoTokenizer.register(DreamConfig, tokenizer_class=DreamTokenizer, exist_ok=True)
