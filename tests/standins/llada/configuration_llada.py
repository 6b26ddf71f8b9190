"""Stand-in for LLaDA's published ``configuration_llada.py`` (test fixture, written from its interface).

LLaDA's config class starts from its OLMo-derived model defaults, lays ``config.json`` over them and
hands everything to ``super().__init__``. So a key the file lacks still reads as OLMo's default on
the config object: notably ``mask_token_id`` reads 50256 (OLMo's EOS) although LLaDA's mask is
126336. ``hidden_size`` / ``num_attention_heads`` / ``num_hidden_layers`` are read-only properties
over ``d_model`` / ``n_heads`` / ``n_layers``.
"""

from transformers import AutoConfig, PretrainedConfig

# The model defaults LLaDA inherits from OLMo's ModelConfig (the ones that shape or name things).
MODEL_DEFAULTS = dict(
    d_model=768,
    n_heads=12,
    n_kv_heads=None,
    n_layers=12,
    mlp_ratio=4,
    mlp_hidden_size=None,
    activation_type="swiglu",
    block_type="sequential",
    block_group_size=1,
    alibi=False,
    alibi_bias_max=8.0,
    rope=False,
    rope_full_precision=True,
    rope_theta=10000.0,
    flash_attention=False,
    attention_dropout=0.1,
    multi_query_attention=None,
    attention_layer_norm=False,
    residual_dropout=0.1,
    embedding_dropout=0.1,
    input_emb_norm=False,
    layer_norm_type="default",
    layer_norm_with_affine=True,
    rms_norm_eps=1e-05,
    attention_layer_norm_with_affine=True,
    max_sequence_length=1024,
    include_qkv_bias=False,
    include_bias=False,
    bias_for_layer_norm=None,
    scale_logits=False,
    vocab_size=50257,
    embedding_size=50304,
    weight_tying=True,
    eos_token_id=50256,
    pad_token_id=50256,
    mask_token_id=50256,
    init_device=None,
    init_fn="normal",
    init_std=0.02,
    init_cutoff_factor=None,
    precision=None,
)


class LLaDAConfig(PretrainedConfig):
    model_type = "llada"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(self, use_cache: bool = False, **kwargs):
        all_kwargs = dict(MODEL_DEFAULTS)
        all_kwargs.update(kwargs)
        all_kwargs["use_cache"] = use_cache
        all_kwargs["architectures"] = all_kwargs.get("architectures", ["LLaDAModelLM"])
        super().__init__(**all_kwargs)
        # transformers 5 drops generation keys such as `use_cache` from config kwargs, so the published
        # class ends up without the attribute its forward reads (`self.config.use_cache` when the caller
        # passes no use_cache). Set again so the stand-in runs; tests/test_model_families.py checks the
        # family call without it (test_llada_call_works_when_the_config_lost_use_cache).
        self.use_cache = use_cache

    @property
    def num_attention_heads(self):
        return self.n_heads

    @property
    def num_hidden_layers(self):
        return self.n_layers

    @property
    def hidden_size(self):
        return self.d_model

    @property
    def effective_n_kv_heads(self):
        if self.n_kv_heads is not None:
            return self.n_kv_heads
        return 1 if self.multi_query_attention else self.n_heads


# Registered at import, as the published file does (no exist_ok: transformers 5 does not need it here).
AutoConfig.register("llada", LLaDAConfig)
