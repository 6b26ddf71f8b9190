"""Dream / DiffuCoder on the transformers that verl pins: Qwen2's decoder run bidirectionally.

Dream (and DiffuCoder, which uses Dream's architecture) is a Qwen2 decoder whose attention sees
every position, trained so that the output at position ``i - 1`` predicts token ``i`` (shifted
logits, handled by :mod:`diffugrpo_plugin.models.families`, not here). Its parameter names are Qwen2's
(``model.embed_tokens``, ``model.layers.N.self_attn.q_proj``, ..., ``lm_head``), so a published
checkpoint (``config.json`` with ``model_type: "Dream"`` and its safetensors) loads into
transformers' own Qwen2 classes with no key mapping and no remote code. Only two things differ
from a stock Qwen2 config: ``is_causal`` is False (transformers then builds a bidirectional,
padding-aware mask) and ``mask_token_id`` is a first-class field.

The class names are the published ones (``DreamModel``) and the config also writes Dream's
own RoPE keys, so a checkpoint saved from here loads in Dream's code with the same logits
(its ``.py`` files are not copied: add them beside the weights to use that code). Dream's tokenizer is Qwen2's byte-level BPE
(``vocab.json`` + ``merges.txt``) published under the name ``DreamTokenizer``; it loads here as
transformers' ``Qwen2Tokenizer``.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer

MODEL_TYPE = "Dream"


@strict
class DreamConfig(Qwen2Config):
    """A Qwen2 config that attends bidirectionally and names its mask token."""

    model_type = MODEL_TYPE
    mask_token_id: int | None = None
    is_causal: bool = False

    def to_dict(self) -> dict:
        """Also writes the RoPE settings under the names Dream's own code reads (transformers 4.x:
        ``rope_theta``, ``rope_scaling``); without them a checkpoint saved here would load in that
        code with its default theta and silently different logits."""
        output = super().to_dict()
        rope = dict(output.get("rope_parameters") or {})
        output["rope_theta"] = rope.pop("rope_theta", None)
        output["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
        return output


class DreamModel(Qwen2ForCausalLM):
    """Dream's network: ``forward(input_ids, attention_mask [B, L] 0/1, position_ids) -> logits [B, L, V]``.

    Unlike Dream's published code, the attention mask is the usual 2D padding mask (no 4D mask,
    no ``"full"`` string): padding is never attended to, and the logits of real tokens do not
    depend on how much left padding the row has when ``position_ids`` count real tokens.
    """

    config_class = DreamConfig


class DreamTokenizer(Qwen2Tokenizer):
    """Dream's tokenizer files read as Qwen2's byte-level BPE (same pre-tokenizer, same merges)."""
