"""Never a silently wrong model: weights are compared with the class before any is used, ``auto`` decides from
the config and the weight names, every entry point refuses a checkpoint that does not fit, calling conventions
come from the forward itself, and a checkpoint in the published layout without its ``.py`` files loads (model
and tokenizer) in every process the way the pre-flight decided."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from diffugrpo_plugin.models.dlm import DiffusionLM, ModelConfigError, load_pretrained
from diffugrpo_plugin.models.family import takes_padding_mask
from diffugrpo_plugin.models.load_plan import plan_loading, read_model_config
from diffugrpo_plugin.models.weights import checkpoint_shapes, compare
from family_standins import STANDINS, llada_standin, save_standin, tokenizer  # noqa: F401  (fixture used by name)

# ---------------------------------------------------------------------------------------------
# a. The comparison itself, on hand-written name lists
# ---------------------------------------------------------------------------------------------


def test_compare_names_each_kind_of_problem():
    expected = {"model.embed.weight": (10, 4), "model.norm.weight": (4,), "lm_head.weight": (10, 4)}
    found = {"model.embed.weight": (10, 4), "model.norm.weight": (5,), "extra.weight": (1,)}
    fit = compare(expected, [], found)
    assert (fit.missing, fit.unexpected, fit.mismatched) == (
        ("lm_head.weight",),
        ("extra.weight",),
        (("model.norm.weight", (5,), (4,)),),
    )
    assert not fit.fits and fit.checked == 3
    assert fit.describe() == (
        "1 missing (lm_head.weight); 1 unexpected (extra.weight); 1 of another shape (model.norm.weight [5] vs [4])"
    )


def test_a_tied_weight_is_present_when_any_of_its_names_is_saved():
    expected = {"model.embed.weight": (10, 4), "lm_head.weight": (10, 4)}
    tied = [{"model.embed.weight", "lm_head.weight"}]
    assert compare(expected, tied, {"model.embed.weight": (10, 4)}).fits
    assert compare(expected, tied, {"lm_head.weight": (10, 4)}).fits
    assert compare(expected, tied, {}).missing == ("lm_head.weight",)  # the group, named once


def test_the_base_model_prefix_is_added_or_removed_as_transformers_does():
    expected = {"model.layer.weight": (2,), "model.norm.weight": (2,)}
    assert compare(expected, [], {"layer.weight": (2,), "norm.weight": (2,)}, base_prefix="model").fits
    assert not compare(expected, [], {"layer.weight": (2,), "norm.weight": (2,)}).fits
    ignored = compare(expected, [], {**expected, "model.rotary.inv_freq": (1,)}, ignored_unexpected=(r"inv_freq$",))
    assert ignored.fits


def test_checkpoint_shapes_reads_headers_of_sharded_and_bin_checkpoints(tmp_path):
    tensors = {"a.weight": torch.zeros(3, 2), "b.bias": torch.zeros(5)}
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    save_file({"a.weight": tensors["a.weight"]}, str(sharded / "model-00001-of-00002.safetensors"))
    save_file({"b.bias": tensors["b.bias"]}, str(sharded / "model-00002-of-00002.safetensors"))
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "weight_map": {
                    "a.weight": "model-00001-of-00002.safetensors",
                    "b.bias": "model-00002-of-00002.safetensors",
                }
            }
        )
    )
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    torch.save(tensors, legacy / "pytorch_model.bin")
    for directory in (sharded, legacy):
        assert checkpoint_shapes(directory) == {"a.weight": (3, 2), "b.bias": (5,)}
    assert checkpoint_shapes(tmp_path / "absent") is None and checkpoint_shapes(tmp_path) is None


# ---------------------------------------------------------------------------------------------
# b. Checkpoints that do not fit, and what `auto` does with each
# ---------------------------------------------------------------------------------------------


def renamed_weights(path: Path, rename) -> Path:
    weights = load_file(str(path / "model.safetensors"))
    save_file(
        {rename(name): tensor for name, tensor in weights.items()},
        str(path / "model.safetensors"),
        metadata={"format": "pt"},
    )
    return path


def without_code(path: Path) -> Path:
    """The checkpoint as a user copies it without its ``.py`` files: config.json keeps its ``auto_map``."""
    for code in path.glob("*.py"):
        code.unlink()
    return path


def without_auto_map(path: Path) -> Path:
    config = json.loads((path / "config.json").read_text())
    config.pop("auto_map")
    (path / "config.json").write_text(json.dumps(config))
    return without_code(path)


def own_code_with_other_names(path: Path) -> Path:
    """A Dream-typed checkpoint whose own code names the head ``output_head``, saved by that code: only it fits."""
    code = path / "modeling_dream.py"
    code.write_text(code.read_text().replace("lm_head", "output_head"))
    return renamed_weights(path, lambda name: name.replace("lm_head", "output_head"))


@pytest.fixture
def mismatched(tmp_path) -> Path:
    """A Dream config over weights saved by other code (every name under ``transformer.``), no code shipped."""
    path = save_standin("dream", tmp_path / "mismatched_dream")
    return without_auto_map(renamed_weights(path, lambda name: "transformer." + name))


def test_auto_loads_native_when_config_and_weights_fit(tmp_path):
    path = save_standin("dream", tmp_path / "fits_dream")
    plan = plan_loading(read_model_config(str(path)), path=str(path))
    assert plan.implementation == "native" and "weights fit" in plan.reason


def test_auto_runs_the_checkpoints_own_code_when_only_it_fits(tmp_path):
    path = own_code_with_other_names(save_standin("dream", tmp_path / "own_names_dream"))
    config = read_model_config(str(path))
    plan = plan_loading(config, trust_remote_code=True, path=str(path))
    assert plan.implementation == "remote" and "1 missing (lm_head.weight)" in plan.reason
    module = load_pretrained(str(path), trust_remote_code=True)
    saved = load_file(str(path / "model.safetensors"))
    assert all(torch.equal(module.state_dict()[name], tensor) for name, tensor in saved.items())
    with pytest.raises(ModelConfigError) as refused:  # the same checkpoint, remote code not allowed
        plan_loading(config, path=str(path))
    assert_one_line(
        refused, "must run its own modeling code", "1 unexpected (output_head.weight)", "trust_remote_code=true"
    )


def test_neither_fitting_is_one_line_naming_the_ways_out(mismatched):
    config = read_model_config(str(mismatched))
    for implementation in ("auto", "native"):
        with pytest.raises(ModelConfigError) as refused:
            plan_loading(config, implementation=implementation, path=str(mismatched))
        assert_one_line(
            refused,
            "do not fit DreamModel",
            "missing (lm_head.weight, model.embed_tokens.weight",
            "unexpected (transformer.lm_head.weight",
            "family=<name>",
            "convert the weights",
        )


def test_an_unmerged_adapter_is_named_as_such(tmp_path):
    path = without_auto_map(
        renamed_weights(
            save_standin("dream", tmp_path / "adapter_dream"),
            lambda name: name.replace(".q_proj.weight", ".q_proj.lora_A.weight"),
        )
    )
    with pytest.raises(ModelConfigError) as refused:
        load_pretrained(str(path))
    assert_one_line(refused, "un-merged adapter", "merge_and_unload")


def test_settings_the_native_class_cannot_run_fall_back_to_the_own_code_or_say_why(tmp_path):
    """Heads that do not divide: our class's attention cannot run them (found on the meta device, no memory), so
    `auto` takes the checkpoint's own code when allowed and otherwise says why in one line; no SDPA traceback."""
    path = save_standin("dream", tmp_path / "odd_heads_dream", overrides={"num_key_value_heads": 3})
    config = read_model_config(str(path))
    assert plan_loading(config, trust_remote_code=True, path=str(path)).implementation == "remote"
    with pytest.raises(ModelConfigError) as refused:
        plan_loading(config, path=str(path))
    assert_one_line(
        refused, "DreamModel cannot run these settings", "Number of heads in key and value", "trust_remote_code=true"
    )


@pytest.mark.sandbox
def test_every_entry_point_refuses_the_mismatched_checkpoint(mismatched, tmp_path, capsys):
    from hydra import compose, initialize_config_module

    from diffugrpo_plugin.cli import main
    from diffugrpo_plugin.data import prepare, write_parquet
    from diffugrpo_plugin.integration.preflight import ConfigError, check_config
    from diffugrpo_plugin.training import sft

    tasks = str(write_parquet(prepare("synthetic", "validation")[:2], tmp_path / "tasks.parquet"))
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        job = compose(
            config_name="diffugrpo",
            overrides=[
                f"actor_rollout_ref.model.path={mismatched}",
                f"data.train_files={tasks}",
                f"data.val_files={tasks}",
            ],
        )
    with pytest.raises(ConfigError, match="do not fit DreamModel"):
        check_config(job)
    for command in (
        ["generate", "--model", str(mismatched), "--prompt", "def f(x):"],
        ["eval", "--dataset", "parquet", "--data", tasks, "--model", str(mismatched), "--out", str(tmp_path / "eval")],
        ["check-model", str(mismatched)],
    ):
        assert main(command) != 0, command
        captured = capsys.readouterr()
        assert "do not fit DreamModel" in captured.err + captured.out, command
    with pytest.raises(ModelConfigError, match="do not fit DreamModel"):
        sft.train(
            sft.SFTConfig(
                train_files=(tasks,),
                output_dir=str(tmp_path / "sft"),
                model_path=str(mismatched),
                steps=1,
                batch_size=2,
            ),
            echo=lambda line: None,
        )
    assert not (tmp_path / "sft").exists()


def test_check_model_says_which_implementation_and_why(tmp_path, capsys):
    from diffugrpo_plugin.cli import main

    path = own_code_with_other_names(save_standin("dream", tmp_path / "why_dream"))
    assert main(["check-model", str(path), "--trust-remote-code", "--config-only"]) == 0
    report = capsys.readouterr().out
    line = next(line for line in report.splitlines() if line.strip().startswith("implementation"))
    assert "remote: modeling_dream.DreamModel" in line and "chosen because our native class does not fit" in line


# ---------------------------------------------------------------------------------------------
# c. Calling conventions from the forward, not from where the class was imported
# ---------------------------------------------------------------------------------------------


def test_a_copied_llada_class_is_called_as_its_code_expects(llada_standin, tmp_path, monkeypatch):
    """d1 and others copy LLaDA's modeling file into their project: the class comes from that module, not
    transformers_modules, and its forward takes no position_ids. The family calls it the published way, with
    the logits of the same code loaded from the checkpoint."""
    project = tmp_path / "my_project"
    project.mkdir()
    for source in (STANDINS / "llada").glob("*.py"):
        shutil.copy(source, project / source.name)
    (project / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.find_spec("my_project.modeling_llada")
    module_code = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module_code
    spec.loader.exec_module(module_code)
    copied_class = module_code.LLaDAModelLM
    assert copied_class.__module__ == "my_project.modeling_llada"
    copied = copied_class.from_pretrained(
        llada_standin, config=copied_class.config_class.from_pretrained(llada_standin), dtype=torch.float32
    ).eval()
    assert not takes_padding_mask(copied)
    ids = torch.tensor([[0, 0, 17, 18, 19, 40], [20, 21, 22, 23, 24, 25]])  # [2, 6], row 0 left-padded by 2
    attention = (ids != 0).long()
    lm = DiffusionLM.wrap(copied, tokenizer(), family="llada")
    with torch.no_grad():
        got = lm.logits(ids, attention)  # [2, 6, V]
        by_hand = copied(input_ids=ids[1:]).logits  # the unpadded row as LLaDA's code is called: no position_ids
    torch.testing.assert_close(got[1:], by_hand)


# ---------------------------------------------------------------------------------------------
# d. The published layout without its .py files: the tokenizer every process loads
# ---------------------------------------------------------------------------------------------


def dream_tokenizer_naming_its_code(path: Path) -> Path:
    """tokenizer_config.json as Dream publishes it: ``tokenizer_class`` DreamTokenizer and an ``auto_map`` entry
    for ``tokenization_dream.py`` (which the copy lacks)."""
    settings_file = path / "tokenizer_config.json"
    settings = json.loads(settings_file.read_text())
    settings.update(
        tokenizer_class="DreamTokenizer", auto_map={"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]}
    )
    settings_file.write_text(json.dumps(settings))
    return path


@pytest.mark.sandbox
def test_a_checkpoint_without_its_code_passes_the_preflight_that_verl_workers_honour(tmp_path):
    from hydra import compose, initialize_config_module

    from verl.utils import hf_tokenizer

    from diffugrpo_plugin.data import prepare, write_parquet
    from diffugrpo_plugin.integration.preflight import check_config

    path = dream_tokenizer_naming_its_code(without_code(save_standin("dream", tmp_path / "published_dream")))
    with pytest.raises(OSError):  # what verl's reward worker would have met
        hf_tokenizer(str(path), trust_remote_code=True)
    tasks = str(write_parquet(prepare("synthetic", "validation")[:2], tmp_path / "tasks.parquet"))
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        job = compose(
            config_name="diffugrpo",
            overrides=[
                f"actor_rollout_ref.model.path={path}",
                "actor_rollout_ref.model.trust_remote_code=true",
                f"data.train_files={tasks}",
                f"data.val_files={tasks}",
            ],
        )
    check_config(job)
    model = job.actor_rollout_ref.model
    assert model.trust_remote_code is False  # no remote code runs anywhere: the plan is native
    copy = Path(model.tokenizer_path)
    assert copy != path and "auto_map" not in json.loads((copy / "tokenizer_config.json").read_text())
    loaded = hf_tokenizer(str(copy), trust_remote_code=True)  # the reward worker's call
    assert loaded.encode("def f(x):") == tokenizer().encode("def f(x):")
    check_config(job)  # idempotent: verl's trainer runs it again in its own process
    assert job.actor_rollout_ref.model.tokenizer_path == str(copy)


def test_generate_loads_a_checkpoint_without_its_code_even_when_trusting(tmp_path, capsys):
    from diffugrpo_plugin.cli import main

    path = dream_tokenizer_naming_its_code(without_code(save_standin("dream", tmp_path / "trusting_dream")))
    assert (
        main(
            [
                "generate",
                "--model",
                str(path),
                "--trust-remote-code",
                "--prompt",
                "def f(x):",
                "--max-new-tokens",
                "4",
                "--json",
            ]
        )
        == 0
    )
    assert "completion" in json.loads(capsys.readouterr().out.splitlines()[0])


def assert_one_line(error: pytest.ExceptionInfo, *needles: str) -> None:
    message = str(error.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in: {message}"


# ---------------------------------------------------------------------------------------------
# e. What transformers itself accepts is accepted (found by review)
# ---------------------------------------------------------------------------------------------


def test_stale_rotary_buffers_of_old_checkpoints_are_ignored_as_transformers_ignores_them(tmp_path):
    path = renamed_weights(save_standin("dream", tmp_path / "old_buffers_dream"), lambda name: name)
    weights = load_file(str(path / "model.safetensors"))
    weights["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    assert plan_loading(read_model_config(str(path)), path=str(path)).implementation == "native"
    load_pretrained(str(path))


def test_unexpected_weights_alone_are_named_as_dropped_not_initialised(tmp_path):
    path = without_auto_map(save_standin("dream", tmp_path / "extra_dream"))
    weights = load_file(str(path / "model.safetensors"))
    save_file({**weights, "value_head.weight": torch.ones(1, 4)}, str(path / "model.safetensors"))
    with pytest.raises(ModelConfigError) as refused:
        plan_loading(read_model_config(str(path)), path=str(path))
    assert_one_line(refused, "1 unexpected (value_head.weight)")


def test_a_legacy_pickle_bin_checkpoint_is_read(tmp_path):
    path = save_standin("dream", tmp_path / "legacy_bin_dream")
    weights = load_file(str(path / "model.safetensors"))
    (path / "model.safetensors").unlink()
    torch.save(weights, path / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    assert checkpoint_shapes(path) == {name: tuple(tensor.shape) for name, tensor in weights.items()}
    assert plan_loading(read_model_config(str(path)), path=str(path)).implementation == "native"


def test_settings_the_meta_run_cannot_judge_keep_the_native_class(tmp_path):
    """Dynamic RoPE scaling reads a tensor's value: on the meta device that is inconclusive, not a misfit; and a
    config asking for an attention kernel this machine lacks still builds on meta."""
    path = save_standin("dream", tmp_path / "dynamic_rope_dream")
    config = json.loads((path / "config.json").read_text())
    config.update(rope_scaling={"type": "dynamic", "factor": 2.0}, attn_implementation="flash_attention_2")
    (path / "config.json").write_text(json.dumps(config))
    assert plan_loading(read_model_config(str(path)), path=str(path)).implementation == "native"


def test_a_stock_model_whose_keys_transformers_converts_is_not_refused(tmp_path):
    """Mixtral's experts are fused as they load (not a one-to-one rename): names cannot be compared before
    loading, so the check is left to the load, which finds them all."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=2,
        is_causal=False,
    )
    MixtralForCausalLM(config).save_pretrained(tmp_path / "moe")
    plan = plan_loading(read_model_config(str(tmp_path / "moe")), path=str(tmp_path / "moe"))
    assert plan.implementation == "stock"
    load_pretrained(str(tmp_path / "moe"))


def test_the_tokenizer_copy_keeps_chat_template_folders_and_leaves_hub_ids_alone(tmp_path, monkeypatch):
    from diffugrpo_plugin.models.tokenizer_files import tokenizer_without_remote_code

    monkeypatch.setenv("DIFFUGRPO_HOME", str(tmp_path / "home"))
    path = dream_tokenizer_naming_its_code(without_code(save_standin("dream", tmp_path / "templates_dream")))
    (path / "additional_chat_templates").mkdir()
    (path / "additional_chat_templates" / "tool_use.jinja").write_text("{{ messages }}")
    copy = Path(tokenizer_without_remote_code(str(path)))
    assert (copy / "additional_chat_templates" / "tool_use.jinja").read_text() == "{{ messages }}"
    assert not list(copy.glob("*.safetensors"))
    assert tokenizer_without_remote_code("Dream-org/Dream-v0-Instruct-7B") == "Dream-org/Dream-v0-Instruct-7B"


def test_weights_a_loader_fetched_from_the_hub_are_checked_after_it_built_the_model(tmp_path, monkeypatch):
    """verl's engine builds the module itself; for a hub id the files it downloaded into the hub cache are read
    then. A cache laid out as huggingface_hub lays it out, holding the mismatched checkpoint."""
    from diffugrpo_plugin.models.load_plan import refuse_unloaded_weights
    from diffugrpo_plugin.models.native.dream import DreamConfig, DreamModel

    checkpoint = without_auto_map(
        renamed_weights(save_standin("dream", tmp_path / "hub_dream"), lambda name: "transformer." + name)
    )
    cache = tmp_path / "hub"
    snapshot = cache / "models--someone--dream" / "snapshots" / "0123abcd"
    shutil.copytree(checkpoint, snapshot)
    (cache / "models--someone--dream" / "refs").mkdir()
    (cache / "models--someone--dream" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    plan = plan_loading(read_model_config(str(checkpoint)), implementation="native")  # no path: headers unread
    built = DreamModel(DreamConfig.from_pretrained(checkpoint))
    with pytest.raises(ModelConfigError) as refused:
        refuse_unloaded_weights(built, "someone/dream", plan)
    assert_one_line(refused, "do not fit DreamModel", "freshly initialised")
    refuse_unloaded_weights(built, "someone/absent", plan)  # nothing cached: nothing to read


@pytest.mark.parametrize("family", ["dream", "llada"])
def test_a_device_given_is_where_the_weights_load_with_no_host_copy(tmp_path, family):
    """The rollout loads its policy copy with ``device=``: on the meta device no weight is read into host memory at
    all (what a CUDA device gets: the checkpoint's tensors go straight there), and on the CPU the weights are the
    checkpoint's."""
    path = save_standin(family, tmp_path / family)
    on_meta = load_pretrained(str(path), device="meta")
    assert {parameter.device.type for parameter in on_meta.parameters()} == {"meta"}
    on_cpu = load_pretrained(str(path), device="cpu")
    saved = load_file(str(path / "model.safetensors"))
    assert all(torch.equal(on_cpu.state_dict()[name], tensor) for name, tensor in saved.items())
