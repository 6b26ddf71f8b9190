"""The default model ships with the package: a first run copies it into the cache instead of fine-tuning for
a quarter of an hour, and a rebuild from its recipe gives the same weights."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from diffugrpo_plugin.models.tiny import TinySpec
from diffugrpo_plugin.models.tokenizer import build_tokenizer
from diffugrpo_plugin.training import warm_start


def test_the_shipped_weights_are_the_ones_the_current_recipe_names():
    record = json.loads((warm_start.SHIPPED_DIR / warm_start.SHIPPED_RECORD).read_text())
    # a changed recipe, tokenizer, tiny shape or synthetic data names another cache directory: then the shipped
    # weights are stale, and `python -m diffugrpo_plugin.training.warm_start` rebuilds them
    assert record["cache_dir"] == warm_start.warm_model_dir().name
    assert warm_start.shipped_checkpoint() == warm_start.SHIPPED_DIR
    assert warm_start.weights_digest(warm_start.SHIPPED_DIR) == record["weights_sha256"]
    assert (warm_start.SHIPPED_DIR / "model.safetensors").stat().st_size < 8 * 2**20
    assert json.loads((warm_start.SHIPPED_DIR / warm_start.WARM_START_RECORD).read_text())["reached"] is True


def test_another_shape_is_not_served_the_shipped_weights():
    assert warm_start.shipped_checkpoint(TinySpec(hidden_size=64)) is None
    assert warm_start.shipped_checkpoint(recipe=warm_start.WarmStart(seed=1)) is None


def test_a_first_run_installs_the_shipped_model_without_training(tmp_path, monkeypatch):
    from diffugrpo_plugin.models.dlm import load_diffusion_lm

    monkeypatch.setenv("DIFFUGRPO_HOME", str(tmp_path))

    def no_training(*args, **kwargs):
        raise AssertionError("the default model was fine-tuned instead of installed")

    monkeypatch.setattr(warm_start, "save_warm_model", no_training)
    path = warm_start.default_warm_model_path()
    assert path == str(warm_start.warm_model_dir())
    assert warm_start.weights_digest(path) == warm_start.weights_digest(warm_start.SHIPPED_DIR)
    assert [p.name for p in (tmp_path / "models").iterdir() if ".building-" in p.name] == []
    lm, tokenizer = load_diffusion_lm(path, "cpu")
    assert tokenizer.get_vocab() == build_tokenizer().get_vocab()
    weights = load_file(f"{warm_start.SHIPPED_DIR}/model.safetensors")
    state = lm.module.state_dict()
    assert weights.keys() <= state.keys()
    assert all(torch.equal(state[name], tensor) for name, tensor in weights.items())


def test_a_damaged_shipped_file_stops_the_install_naming_it(tmp_path):
    source = tmp_path / "shipped"
    shutil.copytree(warm_start.SHIPPED_DIR, source)
    weights = source / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # the last byte of the last tensor
    weights.write_bytes(bytes(data))
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(RuntimeError, match="model.safetensors does not hold the weights .*reinstall diffugrpo"):
        warm_start.install_shipped(staging, source)


def test_the_weights_digest_is_sha256_over_names_dtypes_shapes_and_bytes(tmp_path):
    save_file(
        {"b": torch.tensor([1.0, 2.0]), "a": torch.tensor([[3]], dtype=torch.int32)}, tmp_path / "model.safetensors"
    )
    expected = hashlib.sha256()
    expected.update(b"a:torch.int32:(1, 1);")
    expected.update((3).to_bytes(4, "little"))
    expected.update(b"b:torch.float32:(2,);")
    expected.update(torch.tensor([1.0, 2.0]).numpy().tobytes())
    assert warm_start.weights_digest(tmp_path) == expected.hexdigest()


def test_a_build_that_must_train_says_so_first_with_its_duration(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFUGRPO_HOME", str(tmp_path))
    monkeypatch.setattr(warm_start, "save_warm_model", lambda staging, spec, recipe: staging)
    warm_start.warm_model_path(recipe=warm_start.WarmStart(seed=1))
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("diffugrpo: building the warm-started tiny model once into ")
    assert f"about {warm_start.BUILD_MINUTES} minutes on 2 idle CPU cores" in first
    assert "progress every 300 steps of at most 5000" in first


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_rebuild_from_the_recipe_gives_the_shipped_weights(tmp_path, monkeypatch):
    """On the shipping machine's arithmetic (the same weights at step 300) a rebuild gives the shipped bytes. A
    machine whose arithmetic differs cannot; its rebuild must still stop where the recipe says, on the measured
    pass rate, and the check says which case it met."""
    monkeypatch.setenv("DIFFUGRPO_HOME", str(tmp_path))
    rebuild = warm_start.rebuild_against_shipped()
    if rebuild.same_arithmetic:
        assert rebuild.same_weights, (
            "the default model's recipe no longer rebuilds the shipped weights: "
            "run `python -m diffugrpo_plugin.training.warm_start` and commit diffugrpo_plugin/training/default_model"
        )
    else:
        assert rebuild.reached_target, "a rebuild on this machine's arithmetic missed the recipe's target pass rate"


def test_a_build_records_its_weights_digest_at_the_arithmetic_check_step():
    early = warm_start.shipped_record()["early"]
    assert early["step"] == warm_start.ARITHMETIC_CHECK_STEP
    assert len(early["weights_sha256"]) == 64
    shipped_build = json.loads((warm_start.SHIPPED_DIR / warm_start.WARM_START_RECORD).read_text())
    assert shipped_build["early"] == early


_TRAIN_A_FEW_STEPS = """
import hashlib, torch
from diffugrpo_plugin.models.tiny import build_tiny_model
torch.manual_seed(0)
torch.set_num_threads(2)
model = build_tiny_model().float()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)
batches = torch.Generator().manual_seed(1)
for _ in range(10):
    ids = torch.randint(0, model.config.vocab_size, (8, 96), generator=batches)  # [B, L]
    logits = model(input_ids=ids).logits  # [B, L, V]
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())
"""


def _weights_after_a_few_steps(env: dict[str, str]) -> str:
    import os
    import subprocess
    import sys

    command = [sys.executable, "-c", _TRAIN_A_FEW_STEPS]
    return subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
@pytest.mark.skipif(not torch.backends.cpu.get_cpu_capability().startswith("AVX"), reason="needs an x86-64 CPU")
def test_pinned_kernels_give_the_same_bits_whatever_instructions_mkl_may_use():
    """A CI machine's CPU may lack this one's AVX-512: MKL held to AVX2 (or SSE4.2) stands in for it. With
    the pinned kernels the weights are the same bits; without MKL's vendor-independent path they are not, so the
    few steps are enough to see a kernel change."""
    pinned = _weights_after_a_few_steps(warm_start.PINNED_KERNELS)
    assert _weights_after_a_few_steps({**warm_start.PINNED_KERNELS, "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}) == pinned
    unpinned_mkl = {**warm_start.PINNED_KERNELS, "MKL_CBWR": "AUTO", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert _weights_after_a_few_steps(unpinned_mkl) != pinned
