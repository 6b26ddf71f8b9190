"""Samplers through the plugin registry: names, options, and errors that name the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from diffugrpo_plugin.plugins import PluginError, PluginOptionError, factory_options, registrations
from diffugrpo_plugin.sampling import SamplerOptionError, build_sampler
from diffugrpo_plugin.sampling.builtin import diffugrpo_samplers
from diffugrpo_plugin.sampling.samplers import DreamSampler, LLaDASampler

BUILT_IN = {"dream", "entropy", "maskgit_plus", "topk_margin", "origin", "llada"}


def test_entry_point_declares_the_builtin_plugin():
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["diffugrpo.samplers"]["builtin"] == "diffugrpo_plugin.sampling.builtin"


def test_every_builtin_sampler_is_registered_with_a_description():
    registered = registrations("sampler")
    assert BUILT_IN <= set(registered)
    for name in BUILT_IN:
        assert registered[name].description, name
        assert registered[name].obj is diffugrpo_samplers()[name]


def test_alg_named_samplers_fix_their_alg():
    assert build_sampler("entropy").alg == "entropy"
    assert build_sampler("topk_margin", steps=8).alg == "topk_margin"
    assert "alg" not in {option.name for option in factory_options(diffugrpo_samplers()["origin"])}
    with pytest.raises(PluginOptionError, match="has no option alg"):
        build_sampler("origin", alg="entropy")


def test_unknown_sampler_lists_the_known_ones():
    with pytest.raises(PluginError, match=r"unknown sampler 'nope'.*entropy.*llada"):
        build_sampler("nope")


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(PluginOptionError, match=r"no option stpes.*steps.*remasking"):
        build_sampler("llada", stpes=8)


@pytest.mark.parametrize(
    "factory, options, message",
    [
        (DreamSampler, {"alg": "greedy"}, "alg='greedy' is invalid; choose one of origin, maskgit_plus"),
        (DreamSampler, {"steps": 0}, "steps=0 is invalid"),
        (DreamSampler, {"top_p": 1.5}, "top_p=1.5 is invalid"),
        (DreamSampler, {"temperature": -1}, "temperature=-1 is invalid"),
        (LLaDASampler, {"remasking": "lowest"}, "remasking='lowest' is invalid; choose one of low_confidence, random"),
        (LLaDASampler, {"threshold": 0}, "threshold=0 is invalid"),
        (LLaDASampler, {"kv_cache": "yes"}, "kv_cache='yes' is invalid"),
        (LLaDASampler, {"micro_batch_size": 2.5}, "micro_batch_size=2.5 is invalid"),
    ],
)
def test_bad_option_values_are_named(factory, options, message):
    with pytest.raises(SamplerOptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        factory(**options)


def test_layout_errors_name_the_option():
    import torch

    from samplers_support import FAKE_EOS, FAKE_PAD, fake_lm, log_probs

    lm = fake_lm({1: [log_probs(0.5, 0.5)] * 9})
    ids = torch.tensor([[1]])
    with pytest.raises(SamplerOptionError, match="max_new_tokens=8 is not a multiple of block_length=3"):
        LLaDASampler(block_length=3).generate(
            lm, ids, torch.ones_like(ids), 8, eos_token_id=FAKE_EOS, pad_token_id=FAKE_PAD
        )
    with pytest.raises(SamplerOptionError, match="steps=3 cannot be split equally over 2 blocks"):
        LLaDASampler(block_length=4, steps=3).generate(
            lm, ids, torch.ones_like(ids), 8, eos_token_id=FAKE_EOS, pad_token_id=FAKE_PAD
        )


def test_bad_prompts_are_named():
    import torch

    from samplers_support import FAKE_EOS, FAKE_PAD, fake_lm, log_probs

    lm = fake_lm({1: [log_probs(0.5, 0.5)] * 5})
    sampler = DreamSampler()
    ids = torch.tensor([[1, 1, 0], [1, 1, 1]])
    with pytest.raises(ValueError, match=r"rows \[0\] are not left-padded"):
        sampler.generate(lm, ids, torch.tensor([[1, 1, 0], [1, 1, 1]]), 2, eos_token_id=FAKE_EOS, pad_token_id=FAKE_PAD)
    with pytest.raises(ValueError, match=r"rows \[1\] have no real token"):
        sampler.generate(lm, ids, torch.tensor([[0, 1, 1], [0, 0, 0]]), 2, eos_token_id=FAKE_EOS, pad_token_id=FAKE_PAD)
    with pytest.raises(ValueError, match="seeds has 1 entries for 2 prompts"):
        sampler.generate(lm, ids, torch.ones_like(ids), 2, eos_token_id=FAKE_EOS, pad_token_id=FAKE_PAD, seeds=[1])


def test_listing_samplers_does_not_import_torch():
    code = (
        "import sys; from diffugrpo_plugin.plugins import factory_options, registrations; "
        "[factory_options(r.obj) for r in registrations('sampler').values()]; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
