"""Bad configuration stops before Ray starts, with one message naming the fix."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_module

from diffugrpo_plugin.integration.preflight import ConfigError, check_config
from family_standins import dream_standin  # noqa: F401  (session fixture, used by name)

pytestmark = pytest.mark.sandbox  # every test here runs code in the sandbox


def composed(*overrides: str):
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        return compose(config_name="diffugrpo", overrides=list(overrides))


@pytest.fixture
def valid(tiny_model_path, tmp_path):
    from diffugrpo_plugin.data import prepare_to_parquet

    prepare_to_parquet("synthetic", ["train", "validation"], tmp_path / "data")
    return [
        f"actor_rollout_ref.model.path={tiny_model_path}",
        f"data.train_files={tmp_path}/data/train.parquet",
        f"data.val_files={tmp_path}/data/validation.parquet",
    ]


def test_a_valid_configuration_passes(valid):
    check_config(composed(*valid))


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor_rollout_ref.model.path=/no/such/model", "does not exist"),
        ("actor_rollout_ref.rollout.engine_kwargs.diffusion.sampler=bogus", "unknown sampler 'bogus'. Known samplers:"),
        ("+actor_rollout_ref.rollout.engine_kwargs.diffusion.stepz=3", "no option stepz"),
        (
            "actor_rollout_ref.model.diffusion.loss_terms={dpo: {weight: 1.0}}",
            "unknown loss term 'dpo'. Known loss terms:",
        ),
        (
            "actor_rollout_ref.model.diffusion.loss_terms={sft: {eps: 0.01}}",
            "loss_terms.sft.weight must be a positive number",
        ),
        ("actor_rollout_ref.model.diffusion.masker=bogus", "unknown masker 'bogus'. Known maskers: coupled"),
        ("diffugrpo.rewards.reward_funcs=[code,bogus]", "unknown reward 'bogus'. Known rewards: code"),
        ("diffugrpo.rewards.reward_funcs=[nope]", "unknown reward 'nope'. Known rewards: code"),
        ("diffugrpo.rewards.reward_weights=[2.0]", "reward_weights"),
        ("data.train_batch_size=5", "must be a multiple of actor_rollout_ref.actor.ppo_mini_batch_size"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3", "not a multiple of"),
        ("actor_rollout_ref.rollout.n=1", "at least 2 completions per prompt"),
        ("actor_rollout_ref.actor.strategy=megatron", "the diffusion_lm engine exists for fsdp and fsdp2 only"),
        ("data.train_files=/no/such/train.parquet", "data.train_files: '/no/such/train.parquet' does not exist"),
        ("actor_rollout_ref.model.diffusion.lean_mlp=yes", "diffusion.lean_mlp='yes': set true"),
        ("actor_rollout_ref.model.diffusion.chunk_rows=0", "diffusion.chunk_rows=0: set a positive whole number"),
        ("actor_rollout_ref.model.diffusion.chunk_rows=1.5", "diffusion.chunk_rows=1.5: set a positive whole number"),
        (
            "actor_rollout_ref.model.diffusion.mask_token_id=126336",
            "outside the model's 1645 logits: give the model's own mask token id",
        ),
        (
            "actor_rollout_ref.actor.entropy_coeff=0.01",
            "actor_rollout_ref.actor.entropy_coeff=0.01 is not supported: an entropy bonus",
        ),
        (
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2 is not supported: Ulysses",
        ),
        (
            "actor_rollout_ref.ref.ulysses_sequence_parallel_size=4",
            "actor_rollout_ref.ref.ulysses_sequence_parallel_size=4 is not supported: Ulysses",
        ),
        ("trainer.use_v1=false", "trainer.use_v1=False is not supported: verl's legacy trainer"),
        (
            "actor_rollout_ref.model.use_remove_padding=true",
            "actor_rollout_ref.model.use_remove_padding=True is not supported: packed",
        ),
    ],
)
def test_each_mistake_names_its_fix(valid, override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        check_config(composed(*valid, override))


def test_missing_dataset_columns_are_named(valid, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"question": ["x"], "data_source": ["d"]}), bad)
    with pytest.raises(ConfigError, match=r"lacks column\(s\) \['prompt', 'reward_model', 'extra_info'\]"):
        check_config(composed(*valid, f"data.train_files={bad}"))


def test_a_corrupt_parquet_is_named_with_its_fix(valid, tmp_path):
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not a parquet file")
    with pytest.raises(
        ConfigError,
        match=r"data\.train_files: '.*corrupt\.parquet' is not a readable parquet file "
        r"\(.*\)\. Write it again with `diffugrpo data prepare",
    ):
        check_config(composed(*valid, f"data.train_files={corrupt}"))


def test_the_fast_path_with_remote_code_names_both_fixes(valid, dream_standin):
    """The fast path caches keys/values; a checkpoint run through its own (remote) code fills no Cache, so the
    run stops before Ray, naming the native implementation and the cache-free setting; that setting passes. A
    checkpoint that is not the tiny default samples with the reference sampler unless fast_path=true, so it passes
    as it is."""
    remote = [
        *valid,
        f"actor_rollout_ref.model.path={dream_standin}",
        "actor_rollout_ref.model.trust_remote_code=true",
        "actor_rollout_ref.model.diffusion.implementation=remote",
    ]
    check_config(composed(*remote))
    fast = [*remote, "actor_rollout_ref.rollout.engine_kwargs.diffusion.fast_path=true"]
    with pytest.raises(
        ConfigError,
        match=r"diffusion\.kv_cache=true \(part of the fast path\).*"
        r"implementation=auto.*fast_path=false, or .*kv_cache=false .*cache_refresh=null",
    ):
        check_config(composed(*fast))
    check_config(
        composed(
            *fast,
            "actor_rollout_ref.rollout.engine_kwargs.diffusion.kv_cache=false",
            "actor_rollout_ref.rollout.engine_kwargs.diffusion.cache_refresh=null",
        )
    )


def test_a_tokenizer_without_mask_token_is_refused(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    from diffugrpo_plugin.models.tiny import TinySpec, save_tiny_model

    path = save_tiny_model(
        tmp_path / "nomask", TinySpec(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64)
    )
    config = AutoConfig.from_pretrained(path)
    del config.mask_token_id
    config.save_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.mask_token = None
    tokenizer.save_pretrained(path)
    with pytest.raises(ConfigError, match="no mask token id"):
        check_config(composed(f"actor_rollout_ref.model.path={path}"))


@pytest.mark.slow
def test_the_command_line_stops_before_ray_starts():
    result = subprocess.run(
        [sys.executable, "-m", "diffugrpo_plugin.main", "actor_rollout_ref.model.path=/no/model"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert "diffugrpo: configuration error: actor_rollout_ref.model.path '/no/model' does not exist" in result.stderr
    assert "Ray" not in result.stdout + result.stderr and "Traceback" not in result.stderr


QLORA = ["actor_rollout_ref.model.lora_rank=8", "++actor_rollout_ref.model.lora.load_in_4bit=true"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["actor_rollout_ref.model.lora.rank=8"],
            "lora.rank=8 is verl's Megatron key; the FSDP engine adapts with actor_rollout_ref.model.lora_rank=8",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=8", "diffugrpo.ref_sync.enable=true"],
            "with LoRA the reference is the base model without its adapters",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.target_modules=[q_proj,lm_head]"],
            "LoRA adapts 'lm_head', the vocabulary projection",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.target_modules=[no_such_layer]"],
            "LoRA on Qwen2ForCausalLM: .*no_such_layer",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_adapter_path=/no/such/adapter"],
            "lora_adapter_path '/no/such/adapter' holds no adapter_config.json",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"],
            "backend=nccl sends the rollout the base weights without the LoRA adapters; use backend=naive",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora.dropout=1.5"],
            "lora.dropout=1.5: set a probability in",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.target_modules=[nope]"],
            "set actor_rollout_ref.model.target_modules to names among its linear layers: down_proj, gate_proj, k_proj",
        ),
        (
            ["++actor_rollout_ref.model.lora.load_in_4bit=true"],
            "load_in_4bit=true trains LoRA adapters on a frozen 4-bit base: set actor_rollout_ref.model.lora_rank > 0",
        ),
        (
            [*QLORA, "actor_rollout_ref.actor.strategy=fsdp", "actor_rollout_ref.ref.strategy=fsdp"],
            "load_in_4bit=true needs actor_rollout_ref.actor.strategy=fsdp2",
        ),
        (
            [*QLORA, "actor_rollout_ref.actor.fsdp_config.param_offload=true"],
            "which parameter offload would move: set actor_rollout_ref.actor.fsdp_config.param_offload=false",
        ),
        (
            [*QLORA, "actor_rollout_ref.rollout.dtype=bfloat16"],
            "quantizes the checkpoint as read in actor_rollout_ref.rollout.dtype=bfloat16, which rounds its float32 "
            "weights: .* Set actor_rollout_ref.rollout.dtype to float32, or save the checkpoint in bfloat16",
        ),
        (
            [*QLORA, "actor_rollout_ref.model.use_liger=true"],
            "applies no Liger kernels: set actor_rollout_ref.model.use_liger=false",
        ),
        (
            [*QLORA, "actor_rollout_ref.model.lora.merge=true"],
            "cannot merge adapters into 4-bit weights without rounding them",
        ),
        (
            [*QLORA, "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"],
            "saves no full Hugging Face model",
        ),
        (
            [*QLORA, "++actor_rollout_ref.model.lora.bnb_4bit_quant_type=int4"],
            "lora.bnb_4bit_quant_type=int4: bitsandbytes quantizes to nf4 or fp4",
        ),
    ],
)
def test_lora_mistakes_name_their_fix(valid, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        check_config(composed(*valid, *overrides))


def test_lora_target_names_that_adapt_nothing_are_said(valid, capsys):
    check_config(
        composed(
            *valid,
            "actor_rollout_ref.model.lora_rank=8",
            "actor_rollout_ref.model.target_modules=[q_proj,v_proj,attn_out]",
        )
    )
    assert (
        "LoRA: target_modules attn_out name no module of Qwen2ForCausalLM and adapt nothing; q_proj, v_proj do "
        "(4 modules)"
    ) in capsys.readouterr().err


def test_adapters_the_rollout_cannot_carry_are_refused(valid, tmp_path, tiny_model_path):
    """A DoRA adapter given as lora_adapter_path, or the same adapter folder without lora_rank: one line each."""
    import json

    from peft import LoraConfig, get_peft_model

    from diffugrpo_plugin.models.dlm import load_pretrained
    from diffugrpo_plugin.models.lora import adapter_state, save_adapter

    model = get_peft_model(load_pretrained(tiny_model_path), LoraConfig(r=4, target_modules=["q_proj"], use_dora=True))
    folder = save_adapter(tmp_path / "dora", adapter_state(model), model.peft_config["default"].to_dict())
    assert json.loads((folder / "adapter_config.json").read_text())["use_dora"] is True
    with pytest.raises(ConfigError, match=r"the adapter in .*dora asks for DoRA \(use_dora\)"):
        check_config(
            composed(
                *valid, "actor_rollout_ref.model.lora_rank=4", f"actor_rollout_ref.model.lora_adapter_path={folder}"
            )
        )
    with pytest.raises(ConfigError, match="lora_adapter_path needs actor_rollout_ref.model.lora_rank > 0"):
        check_config(composed(*valid, f"actor_rollout_ref.model.lora_adapter_path={folder}"))


CURRICULUM = [
    "data.sampler.class_path=pkg://diffugrpo_plugin.training.curriculum",
    "data.sampler.class_name=CurriculumSampler",
]


def test_the_curriculum_sampler_configuration_passes(valid):
    check_config(composed(*valid, *CURRICULUM, "data.sampler.curriculum.schedule=gated"))
    check_config(composed(*valid, *CURRICULUM, "data.sampler.curriculum.difficulty_key=extra_info.index"))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["data.sampler.class_path=pkg://diffugrpo_plugin.training.curriculum"],
            "needs both class_path and class_name",
        ),
        (
            ["data.sampler.class_path=pkg://diffugrpo_plugin.training.curriculum", "data.sampler.class_name=Nope"],
            "data.sampler: cannot load Nope from pkg://diffugrpo_plugin.training.curriculum",
        ),
        (["data.sampler.class_path=pkg://no_such_module", "data.sampler.class_name=Sampler"], "cannot load Sampler"),
        (
            ["data.sampler.class_path=pkg://diffugrpo_plugin.training.curriculum", "data.sampler.class_name=SCHEDULES"],
            "is a tuple, not a sampler class",
        ),
        ([*CURRICULUM, "data.dataloader_num_workers=2"], "needs data.dataloader_num_workers=0"),
        ([*CURRICULUM, "data.sampler.curriculum.schedule=cosine"], "schedule must be one of"),
        ([*CURRICULUM, "+data.sampler.curriculum.levels=3"], "unknown data.sampler.curriculum option(s) ['levels']"),
        (
            [*CURRICULUM, "data.sampler.curriculum.metric=syntax"],
            "data.sampler.curriculum.metric='syntax' is not one of the rewards in use ['code', 'code_format']",
        ),
        (
            [*CURRICULUM, "data.sampler.curriculum.difficulty_key=extra_info.level"],
            "difficulty_key='extra_info.level' is not a field of data.train_files",
        ),
        ([*CURRICULUM, "data.sampler.curriculum.difficulty_key=level"], "difficulty_key='level' is not a field"),
    ],
)
def test_data_sampler_mistakes_name_their_fix(valid, overrides, message):
    with pytest.raises(ConfigError) as error:
        check_config(composed(*valid, *overrides))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_valid_qlora_configuration_passes(valid):
    """4-bit base on this CPU: bitsandbytes >= 0.50 quantizes here, and the trainer and the rollout read the float32
    checkpoint in float32 (the CPU defaults). A bf16 checkpoint may be read in bf16 or float32 by either side: both hold
    its values exactly."""
    check_config(composed(*valid, *QLORA))
    import json
    from pathlib import Path

    import torch
    from transformers import AutoTokenizer

    from diffugrpo_plugin.models.dlm import load_pretrained

    tiny = valid[0].split("=", 1)[1]
    bf16 = Path(tiny).parent / "bf16_checkpoint"
    load_pretrained(tiny).to(torch.bfloat16).save_pretrained(bf16)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(bf16)
    assert json.loads((bf16 / "config.json").read_text()).get("dtype") == "bfloat16"
    mixed = [f"actor_rollout_ref.model.path={bf16}", "actor_rollout_ref.rollout.dtype=bfloat16"]
    check_config(composed(*valid, *QLORA, *mixed))


def test_a_masker_that_reads_the_trace_needs_the_rollout_to_record_it(valid):
    check_config(composed(*valid, "algorithm=tracerl"))
    with pytest.raises(ConfigError, match=r"masker 'trace_replay' reads the rollout's denoising trace: set "):
        check_config(composed(*valid, "algorithm=tracerl", "actor_rollout_ref.model.diffusion.record_trace=false"))
