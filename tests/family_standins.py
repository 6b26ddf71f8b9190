"""Tiny checkpoints that load through stand-ins of Dream's and LLaDA's own modeling code.

:func:`save_standin` writes what a published checkpoint holds: ``config.json`` with the family's
``model_type``, ``architectures`` and an ``auto_map`` pointing at the code files, the code files
themselves (``tests/standins/<kind>/``, our re-writes of the published interfaces), random
safetensors weights and our tokenizer. Session fixtures save each variant once per test session.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
import torch

STANDINS = Path(__file__).resolve().parent / "standins"
SIZES = dict(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64, positions=128)


@functools.lru_cache(maxsize=1)
def tokenizer():
    """Our tokenizer, trained once per process (about a second); treat it as read-only."""
    from diffugrpo_plugin.models.tokenizer import build_tokenizer

    return build_tokenizer()


def dream_config(tok, tied: bool) -> dict:
    """A ``config.json`` laid out like Dream's published ones, at stand-in size."""
    return {
        "architectures": ["DreamModel"],
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "model_type": "Dream",
        "attention_dropout": 0.0,
        "bos_token_id": tok.eos_token_id,
        "eos_token_id": tok.eos_token_id,
        "hidden_act": "silu",
        "hidden_size": SIZES["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": SIZES["intermediate"],
        "mask_token_id": tok.mask_token_id,
        "max_position_embeddings": SIZES["positions"],
        "max_window_layers": SIZES["layers"],
        "num_attention_heads": SIZES["heads"],
        "num_hidden_layers": SIZES["layers"],
        "num_key_value_heads": SIZES["kv_heads"],
        "pad_token_id": tok.pad_token_id,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "sliding_window": None,
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
        "transformers_version": "4.46.2",
        "use_cache": False,
        "use_sliding_window": False,
        "vocab_size": len(tok),
    }


def llada_config(tok, tied: bool) -> dict:
    """A ``config.json`` laid out like LLaDA's published ones, at stand-in size, WITHOUT ``mask_token_id``
    (so the config object falls back to OLMo's 50256)."""
    return {
        "architectures": ["LLaDAModelLM"],
        "auto_map": {
            "AutoConfig": "configuration_llada.LLaDAConfig",
            "AutoModel": "modeling_llada.LLaDAModelLM",
            "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
        },
        "model_type": "llada",
        "activation_type": "silu",
        "alibi": False,
        "alibi_bias_max": 8.0,
        "attention_dropout": 0.0,
        "attention_layer_norm": False,
        "attention_layer_norm_with_affine": True,
        "bias_for_layer_norm": False,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": SIZES["hidden"],
        "embedding_dropout": 0.0,
        "embedding_size": len(tok),
        "eos_token_id": tok.eos_token_id,
        "flash_attention": False,
        "include_bias": False,
        "include_qkv_bias": False,
        "init_cutoff_factor": None,
        "init_device": "meta",
        "init_fn": "mitchell",
        "init_std": 0.02,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "max_sequence_length": SIZES["positions"],
        "mlp_hidden_size": SIZES["intermediate"],
        "mlp_ratio": 4,
        "multi_query_attention": None,
        "n_heads": SIZES["heads"],
        "n_kv_heads": SIZES["kv_heads"],
        "n_layers": SIZES["layers"],
        "pad_token_id": tok.pad_token_id,
        "precision": "amp_bf16",
        "residual_dropout": 0.0,
        "rms_norm_eps": 1e-05,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "torch_dtype": "float32",
        "transformers_version": "4.46.3",
        "use_cache": False,
        "vocab_size": len(tok),
        "weight_tying": tied,
    }


def fill_weights(model: torch.nn.Module, seed: int, wide: bool) -> None:
    """Seeded random weights: matrices N(0, 0.5) when ``wide`` (peaked predictions) else N(0, 0.02);
    norm weights 1 + N(0, 0.1) and biases N(0, 0.1), so neither is a no-op."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, weight in sorted(model.named_parameters()):  # named_parameters skips tied duplicates
            noise = torch.randn(weight.shape, generator=generator)
            if weight.dim() == 2:
                weight.copy_(noise * (0.5 if wide else 0.02))
            elif name.endswith("bias"):
                weight.copy_(noise * 0.1)
            else:
                weight.copy_(1.0 + noise * 0.1)


def remote_class(path, config: dict) -> type:
    """The model class a checkpoint's ``auto_map`` names, imported from the checkpoint's own code.

    Resolved from ``auto_map`` directly, because under transformers 5 ``AutoModel`` prefers any class
    registered locally for the model type (our native ones, once registered) over the checkpoint's code.
    """
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    auto_name = "AutoModelForCausalLM" if "AutoModelForCausalLM" in config["auto_map"] else "AutoModel"
    model_class = get_class_from_dynamic_module(config["auto_map"][auto_name], str(path))
    # what an auto class does for remote code; transformers 5 then treats it as remote code and does not
    # re-run its `_init_weights` (which writes tensors in place, as the published ones do) over loaded weights
    model_class.register_for_auto_class(auto_name)
    return model_class


def load_remote(path) -> torch.nn.Module:
    """A stand-in checkpoint through its own code, in fp32 and eval mode."""
    config = json.loads((Path(path) / "config.json").read_text())
    return remote_class(path, config).from_pretrained(str(path), dtype=torch.float32).eval()


def save_standin(
    kind: str, directory, *, tied: bool = False, seed: int = 0, wide: bool = True, overrides: dict | None = None
) -> Path:
    """Write a stand-in checkpoint of ``kind`` ("dream" or "llada") into ``directory`` and return it;
    ``overrides`` replaces config.json keys."""
    from safetensors.torch import save_file

    from diffugrpo_plugin.models.native import register_with_transformers

    if kind not in ("dream", "llada"):
        raise ValueError(f"unknown stand-in kind {kind!r}; choose dream or llada")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    config = {**(dream_config if kind == "dream" else llada_config)(tok, tied), **(overrides or {})}
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for source in sorted((STANDINS / kind).glob("*.py")):
        shutil.copy(source, directory / source.name)

    model_class = remote_class(directory, config)  # LLaDA's code registers its classes for "llada" at import ...
    register_with_transformers()  # ... so put ours back, as load_pretrained would, for the tests that follow
    model = model_class(model_class.config_class.from_pretrained(directory)).to(torch.float32)
    fill_weights(model, seed, wide)
    state = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    for tied_target in getattr(model, "all_tied_weights_keys", {}) or {}:
        state.pop(tied_target, None)  # a tied head is saved once, under its source's name
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    tok.save_pretrained(directory)
    return directory


def _saved(factory, name: str, kind: str, **options) -> str:
    # distinct folder names: transformers names the dynamic module after the folder
    return str(save_standin(kind, factory.mktemp("standins") / name, **options))


@pytest.fixture(scope="session")
def dream_standin(tmp_path_factory) -> str:
    """A Dream / DiffuCoder checkpoint that loads through the Dream stand-in code."""
    return _saved(tmp_path_factory, "standin_dream", "dream")


@pytest.fixture(scope="session")
def llada_standin(tmp_path_factory) -> str:
    """An untied LLaDA checkpoint (head ``transformer.ff_out``) through the LLaDA stand-in code."""
    return _saved(tmp_path_factory, "standin_llada", "llada")


@pytest.fixture(scope="session")
def llada_tied_standin(tmp_path_factory) -> str:
    """A LLaDA checkpoint with ``weight_tying`` (logits project with ``wte.weight``; no ``ff_out``)."""
    return _saved(tmp_path_factory, "standin_llada_tied", "llada", tied=True, seed=1)


@pytest.fixture(scope="session")
def llada_scaled_standin(tmp_path_factory) -> str:
    """An untied LLaDA checkpoint with ``scale_logits`` (logits times 1/sqrt(d_model)) and biases, the head's too."""
    return _saved(
        tmp_path_factory,
        "standin_llada_scaled",
        "llada",
        seed=2,
        overrides={"scale_logits": True, "include_bias": True},
    )
