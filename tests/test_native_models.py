"""Our native Dream / LLaDA classes: published layouts in and out, caches, checkpointing, tokenizer, mask ids.

Their logits against each family's own code are checked in ``test_model_families.py`` (stand-ins
of the published interfaces) and were checked once against the published modeling files
themselves (docs/guides/models.md).
"""

from __future__ import annotations

import json

import pytest
import torch

from diffugrpo_plugin.models.dlm import DiffusionLM, ModelConfigError, load_pretrained, resolve_mask_token
from diffugrpo_plugin.models.families import LLADA, LLADA_MASK_TOKEN_ID
from diffugrpo_plugin.models.load_plan import plan_loading
from diffugrpo_plugin.models.native import (
    DreamConfig,
    DreamModel,
    LLaDAConfig,
    LLaDAModelLM,
    register_with_transformers,
)
from diffugrpo_plugin.models.native.llada import unsupported_settings

register_with_transformers()  # what `import verl` (our plugin) and every loader of ours do

VOCAB, MASK = 96, 95

# A LLaDA config.json as published (OLMo fields we do not model included), at test size.
LLADA_JSON = {
    "architectures": ["LLaDAModelLM"],
    "model_type": "llada",
    "activation_type": "silu",
    "alibi": False,
    "alibi_bias_max": 8.0,
    "attention_dropout": 0.0,
    "attention_layer_norm": False,
    "bias_for_layer_norm": False,
    "block_group_size": 1,
    "block_type": "llama",
    "d_model": 32,
    "embedding_dropout": 0.0,
    "embedding_size": VOCAB,
    "flash_attention": False,
    "include_bias": False,
    "include_qkv_bias": False,
    "init_device": "meta",
    "init_fn": "mitchell",
    "init_std": 0.02,
    "input_emb_norm": False,
    "layer_norm_type": "rms",
    "layer_norm_with_affine": True,
    "max_sequence_length": 128,
    "mlp_hidden_size": 48,
    "mlp_ratio": 4,
    "multi_query_attention": None,
    "n_heads": 4,
    "n_kv_heads": 2,
    "n_layers": 2,
    "precision": "amp_bf16",
    "residual_dropout": 0.0,
    "rms_norm_eps": 1e-5,
    "rope": True,
    "rope_full_precision": True,
    "rope_theta": 500000.0,
    "scale_logits": False,
    "use_cache": False,
    "vocab_size": VOCAB,
    "weight_tying": False,
}


def dream(tied: bool = False) -> DreamModel:
    torch.manual_seed(0)
    return DreamModel(
        DreamConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            rope_theta=1e6,
            mask_token_id=MASK,
            tie_word_embeddings=tied,
        )
    ).eval()


def llada(**changes) -> LLaDAModelLM:
    torch.manual_seed(0)
    return LLaDAModelLM(LLaDAConfig(**{**LLADA_JSON, **changes})).eval()


def ids_of(*rows: list[int]) -> torch.Tensor:
    return torch.tensor(rows)  # [B, L]


def test_a_published_llada_config_json_loads_and_keeps_its_weight_names(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLADA_JSON))
    config = LLaDAConfig.from_pretrained(tmp_path)
    assert (config.hidden_size, config.num_attention_heads, config.num_key_value_heads) == (32, 4, 2)
    assert config.tie_word_embeddings is False  # transformers and verl read this name, LLaDA writes weight_tying
    names = set(LLaDAModelLM(config).state_dict())
    assert {
        "model.transformer.wte.weight",
        "model.transformer.ln_f.weight",
        "model.transformer.ff_out.weight",
        "model.transformer.blocks.1.attn_out.weight",
        "model.transformer.blocks.1.ff_proj.weight",
        "model.transformer.blocks.1.up_proj.weight",
        "model.transformer.blocks.1.ff_out.weight",
    } <= names
    tied = set(LLaDAModelLM(LLaDAConfig(**{**LLADA_JSON, "weight_tying": True})).state_dict())
    assert "model.transformer.ff_out.weight" not in tied  # the head is wte itself, as published


def test_llada_settings_this_implementation_cannot_run_are_named():
    assert unsupported_settings(LLADA_JSON) == []
    problems = unsupported_settings(
        {**LLADA_JSON, "block_type": "sequential", "alibi": True, "include_bias": True, "bias_for_layer_norm": None}
    )
    assert problems == ["block_type='sequential'", "alibi=True", "bias_for_layer_norm=True (a bias in the RMS norms)"]
    with pytest.raises(ModelConfigError, match="block_type='sequential'"):
        plan_loading({**LLADA_JSON, "block_type": "sequential"}, implementation="native")


@pytest.mark.parametrize("build", [dream, llada], ids=["dream", "llada"])
def test_save_and_reload_give_the_same_logits_through_the_auto_classes(build, tmp_path):
    from transformers import AutoModel

    model = build()
    model.save_pretrained(tmp_path)
    reloaded = AutoModel.from_pretrained(tmp_path).eval()  # no trust_remote_code: our registration answers
    assert type(reloaded) is type(model)
    x = ids_of([5, 9, 2, 44, 17, 3])
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=x).logits, model(input_ids=x).logits)


def test_a_saved_dream_config_carries_the_rope_keys_dreams_own_code_reads(tmp_path):
    dream().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    # Dream's code (transformers 4.x) reads rope_theta; without it, it would fall back to theta 10000
    assert saved["rope_theta"] == 1e6 and saved["rope_scaling"] is None
    assert saved["model_type"] == "Dream" and saved["architectures"] == ["DreamModel"]
    rotary = DreamModel.from_pretrained(tmp_path).model.rotary_emb.inv_freq  # [D/2]
    assert torch.allclose(rotary, 1.0 / 1e6 ** (torch.arange(0, 8, 2).float() / 8))


@pytest.mark.parametrize("build", [dream, llada], ids=["dream", "llada"])
def test_attention_is_bidirectional_and_left_padding_is_invisible(build):
    model = build()
    x = ids_of([5, 9, 2, 44, 17, 3])
    changed = x.clone()
    changed[0, -1] = 60
    padded = torch.cat([torch.full((1, 3), 7), x], dim=1)  # [1, 9], junk in the pads
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(x)], dim=1)
    with torch.no_grad():
        first = model(input_ids=x).logits[0, 0]
        assert not torch.allclose(first, model(input_ids=changed).logits[0, 0]), "a later token must be seen"
        alone = model(input_ids=x).logits[0]  # [6, V]
        in_batch = model(input_ids=padded, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits[
            0, 3:
        ]
    assert torch.allclose(alone, in_batch, atol=1e-5)


def test_llada_forward_matches_the_published_block_written_out():
    """One LLaDA block by its published algorithm, in plain torch: RMSNorm, RoPE over 0..L-1, attention
    over every position, attn_out, RMSNorm, ff_out(silu(ff_proj) * up_proj), ln_f, untied head."""
    model = llada(n_layers=1, n_kv_heads=4)
    t = model.model.transformer
    block = t.blocks[0]
    x = ids_of([5, 9, 2, 44, 17, 3])  # [1, 6]

    def rms(h, weight):
        return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5))

    def rope(v):  # [1, H, L, D]
        d = v.shape[-1]
        angles = torch.arange(v.shape[2]).float()[:, None] / 500000.0 ** (torch.arange(0, d, 2).float() / d)
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()  # [L, D]
        rotated = torch.cat([-v[..., d // 2 :], v[..., : d // 2]], dim=-1)
        return v * cos + rotated * sin

    with torch.no_grad():
        h = t.wte(x)  # [1, L, 32]
        normed = rms(h, block.attn_norm.weight)
        q, k, v = (proj(normed).view(1, 6, 4, 8).transpose(1, 2) for proj in (block.q_proj, block.k_proj, block.v_proj))
        weights = torch.softmax(rope(q) @ rope(k).transpose(-1, -2) / 8**0.5, dim=-1)  # [1, H, L, L]
        h = h + block.attn_out((weights @ v).transpose(1, 2).reshape(1, 6, 32))
        normed = rms(h, block.ff_norm.weight)
        h = h + block.ff_out(torch.nn.functional.silu(block.ff_proj(normed)) * block.up_proj(normed))
        expected = t.ff_out(rms(h, t.ln_f.weight))  # [1, L, V]
        assert torch.allclose(model(input_ids=x).logits, expected, atol=1e-5)


@pytest.mark.parametrize("build", [dream, llada], ids=["dream", "llada"])
def test_the_prefix_cache_reproduces_a_full_forward_on_an_unchanged_sequence(build):
    from diffugrpo_plugin.sampling.forward import PrefixCachedForward

    lm = DiffusionLM.wrap(build(), mask_token_id=MASK)
    x = torch.cat([ids_of([5, 9, 2, 44, 17, 3]), torch.full((1, 8), MASK)], dim=1)  # [1, 14]
    attention = torch.ones_like(x)
    positions = torch.arange(14)[None]
    with torch.no_grad():
        full = lm.logits(x, attention, positions)[:, 10:14]
        cached = PrefixCachedForward(lm)
        assert torch.allclose(cached(x, attention, positions, 10, 14, fresh=True), full, atol=1e-5)
        assert torch.allclose(cached(x, attention, positions, 10, 14, fresh=False), full, atol=1e-5)


def test_llada_gradient_checkpointing_gives_the_same_gradients():
    x = ids_of([5, 9, 2, 44, 17, 3])
    grads = []
    for checkpointing in (False, True):
        model = llada().train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model(input_ids=x).logits.logsumexp(-1).sum().backward()
        grads.append(model.model.transformer.blocks[0].q_proj.weight.grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_llada_mask_id_never_comes_from_the_config_objects_default(tmp_path):
    """LLaDA's published config class fills a missing mask_token_id with OLMo's 50256; ours keeps None, and
    the llada family trusts only a stated id, then the tokenizer's <|mdm_mask|>, then the published 126336."""
    from types import SimpleNamespace

    from transformers import PretrainedConfig

    class OlmoStyleConfig(PretrainedConfig):  # the published class's behaviour: defaults fill the object
        def __init__(self, mask_token_id=50256, vocab_size=126464, **kwargs):
            self.mask_token_id, self.vocab_size = mask_token_id, vocab_size
            super().__init__(**kwargs)

    assert resolve_mask_token(LLADA, OlmoStyleConfig()) == (LLADA_MASK_TOKEN_ID, "the llada family's published mask id")
    assert resolve_mask_token(LLADA, OlmoStyleConfig(mask_token_id=7))[0] == 7  # stated in config.json
    tokenizer = SimpleNamespace(mask_token_id=None, get_vocab=lambda: {"<|mdm_mask|>": 11})
    assert resolve_mask_token(LLADA, OlmoStyleConfig(), tokenizer) == (11, "tokenizer token '<|mdm_mask|>'")
    with pytest.raises(ModelConfigError, match="diffusion.mask_token_id"):
        resolve_mask_token(LLADA, OlmoStyleConfig(vocab_size=1000))  # too small a vocabulary for 126336


def test_dream_tokenizer_files_load_as_qwen2_bpe_without_remote_code(tmp_path):
    """Dream publishes its tokenizer as vocab.json + merges.txt under the class name DreamTokenizer (remote
    code); with our registration they load as Qwen2's byte-level BPE and tokenize like DiffuCoder's tokenizer."""
    from transformers import AutoTokenizer

    from diffugrpo_plugin.models.dlm import load_diffusion_lm
    from diffugrpo_plugin.models.tokenizer import QWEN_SPECIAL_IDS, build_qwen_tokenizer

    qwen = build_qwen_tokenizer()
    qwen.backend_tokenizer.model.save(str(tmp_path))  # vocab.json, merges.txt
    names = {token_id: name for name, token_id in QWEN_SPECIAL_IDS.items()}
    added = {
        str(i): {
            "content": names.get(i, f"<|reserved_{i}|>"),
            "special": True,
            "normalized": False,
            "lstrip": False,
            "rstrip": False,
            "single_word": False,
        }
        for i in range(min(names), max(names) + 1)
    }
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "DreamTokenizer",
                "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
                "added_tokens_decoder": added,
                "mask_token": "<|mask|>",
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "unk_token": None,
            }
        )
    )
    dream().save_pretrained(tmp_path)  # config.json: model_type Dream, so AutoTokenizer finds our registration
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert type(tokenizer).__name__ == "DreamTokenizer"
    assert tokenizer.mask_token_id == QWEN_SPECIAL_IDS["<|mask|>"]
    for text in (
        "def f(x):\n    return x + 1\n",
        "Hello, 世界! 42 \t\r\n  x",
        "<|im_start|>user\nhi<|im_end|>\n<|mask|>",
    ):
        assert tokenizer(text).input_ids == qwen(text).input_ids
    _, loaded = load_diffusion_lm(str(tmp_path), "cpu")  # the path every command takes
    assert loaded("x = 1").input_ids == qwen("x = 1").input_ids


def test_native_is_the_default_and_remote_code_is_never_run_unasked(tmp_path):
    model = dream()
    model.config.auto_map = {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"}
    model.save_pretrained(tmp_path)  # names code files that are not there: loading must not need them
    assert type(load_pretrained(str(tmp_path))) is DreamModel
    with pytest.raises(ModelConfigError, match="trust_remote_code=true"):
        load_pretrained(str(tmp_path), implementation="remote")
