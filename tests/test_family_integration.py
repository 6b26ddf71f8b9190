"""Each family's checkpoints through every path a user takes: verl's engine on 2 Ray workers, the verl
rollout, ``diffugrpo generate`` / ``eval`` and SFT, on stand-ins of the published code (``remote``) and
through our native classes (the default)."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from conftest import ray_cluster  # noqa: F401  (fixture)
from engine_support import build_worker_group, check_formula_then_one_ascent_step, loss_masks, make_batch
from family_standins import dream_standin, llada_standin, llada_tied_standin  # noqa: F401  (fixtures)
from rollout_support import tiny_rollout

# case: (stand-in fixture, how it loads, its sampler options)
CASES = {
    "dream-remote": (
        "dream_standin",
        {"trust_remote_code": True, "implementation": "remote"},
        {"sampler": "entropy", "steps": 8},
    ),
    "llada-tied-remote": (
        "llada_tied_standin",
        {"trust_remote_code": True, "implementation": "remote"},
        {"sampler": "llada", "steps": 8, "block_length": 4},
    ),
    "llada-native": (
        "llada_standin",
        {"trust_remote_code": False, "implementation": "auto"},
        {"sampler": "llada", "steps": 8, "block_length": 4},
    ),
}


@pytest.fixture(params=list(CASES))
def case(request):
    fixture, loading, sampler = CASES[request.param]
    return request.param, request.getfixturevalue(fixture), loading, sampler


def published_call(name: str, module, ids: torch.Tensor) -> torch.Tensor:
    """Logits of one unpadded row, called the way each implementation's own code is called (written out here,
    not through diffugrpo's family conventions, which are under test)."""
    if name == "dream-remote":
        return module(ids).logits  # Dream's code: no mask means "full"
    if name == "llada-tied-remote":
        return module(input_ids=ids).logits  # LLaDA's code: no position_ids parameter at all
    return module(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def direct_response_logprobs(name, path, loading, prompts, responses, seeds):
    """The coupled formula, unoptimised: full logits and a full fp32 log-softmax per view, shifted by hand."""
    from diffugrpo_plugin.core.masking import make_coupled
    from diffugrpo_plugin.models.dlm import load_pretrained

    module = load_pretrained(path, **loading).eval()
    shift = name.startswith("dream")
    mask_id = module.config.mask_token_id if shift else _llada_mask_id(path)
    masker = make_coupled()
    results = []
    for prompt, response, seed, scored in zip(prompts, responses, seeds, loss_masks(responses)):
        ids = torch.cat([prompt, response])[None]  # [1, L]
        completion = torch.zeros_like(ids, dtype=torch.bool)
        completion[0, len(prompt) :] = True
        views = masker.views(ids, completion, mask_id, seed[None])
        total = torch.zeros(ids.shape)
        with torch.no_grad():
            for v in range(views.num_views):
                raw = published_call(name, module, views.noisy[v])  # [1, L, V]
                raw = torch.cat([raw[:, :1], raw[:, :-1]], 1) if shift else raw
                total += views.coef[v] * torch.log_softmax(raw.float(), -1).gather(-1, ids[..., None]).squeeze(-1)
        results.append(total[0, len(prompt) :] * scored)
    return results


def _llada_mask_id(path) -> int:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path).mask_token_id  # the stand-ins' config.json states none


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.ray
@pytest.mark.parametrize(  # the native class in the default run; the published remote code with the slow tests
    "case",
    [name if name == "llada-native" else pytest.param(name, marks=pytest.mark.slow) for name in CASES],
    indirect=True,
)
def test_engine_on_two_workers_matches_the_formula_and_trains(case):
    name, path, loading, _ = case
    prompts, responses, seeds = make_batch(vocab=512)
    # LLaDA's published class does not support transformers' gradient checkpointing (the pre-flight check says so)
    group = build_worker_group(
        path,
        workers=2,
        trust_remote_code=loading["trust_remote_code"],
        gradient_checkpointing=name != "llada-tied-remote",
        implementation=loading["implementation"],
    )
    want = direct_response_logprobs(name, path, loading, prompts, responses, seeds)
    check_formula_then_one_ascent_step(group, want, prompts, responses, seeds)


def test_the_verl_rollout_generates_and_follows_weight_updates(case):
    name, path, loading, sampler = case
    rollout = tiny_rollout(
        path,
        sampler,
        trust_remote_code=loading["trust_remote_code"],
        diffusion={"implementation": loading["implementation"]},
    )
    assert rollout.lm.family.name == name.split("-")[0]
    batch = [
        {
            "prompt_ids": rollout.tokenizer.encode(text),
            "sampling_params": {"temperature": 0.0, "top_p": 1.0, "top_k": -1},
        }
        for text in ("def add(a, b):", "Write a function")
    ]
    before = [r["token_ids"] for r in rollout.generate_batch(batch)]
    assert [len(tokens) for tokens in before] == [8, 8]
    original = {key: tensor.clone() for key, tensor in rollout.lm.module.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    moved = ((key, tensor + torch.randn(tensor.shape, generator=generator)) for key, tensor in original.items())
    asyncio.run(rollout.update_weights(moved, global_steps=1))
    assert [r["token_ids"] for r in rollout.generate_batch(batch)] != before
    asyncio.run(rollout.update_weights(iter(original.items()), global_steps=2))
    assert [r["token_ids"] for r in rollout.generate_batch(batch)] == before


def model_flags(loading) -> list[str]:
    flags = ["--implementation", loading["implementation"]]
    return flags + (["--trust-remote-code"] if loading["trust_remote_code"] else [])


def sampler_flags(sampler) -> list[str]:
    options = [f"{key}={value}" for key, value in sampler.items() if key != "sampler"]
    return ["--sampler", sampler["sampler"], *[flag for option in options for flag in ("-o", option)]]


@pytest.mark.sandbox
def test_diffugrpo_generate_and_eval_run_the_checkpoint(case, tmp_path, capsys):
    from diffugrpo_plugin.cli import main

    _, path, loading, sampler = case
    assert (
        main(
            [
                "generate",
                "--model",
                path,
                *model_flags(loading),
                *sampler_flags(sampler),
                "--prompt",
                "def f(x):",
                "--max-new-tokens",
                "8",
                "--json",
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert record["prompt"] == "def f(x):" and isinstance(record["completion"], str)

    from diffugrpo_plugin.data import prepare, write_parquet

    tasks = write_parquet(
        prepare("synthetic", "validation")[:2], tmp_path / "tasks.parquet"
    )  # prompts fit 128 positions
    assert (
        main(
            [
                "eval",
                "--dataset",
                "parquet",
                "--data",
                str(tasks),
                "--model",
                path,
                *model_flags(loading),
                *sampler_flags(sampler),
                "--max-new-tokens",
                "8",
                "--out",
                str(tmp_path / "eval"),
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_problems"] == 2 and "pass@1" in summary


def test_masked_sft_trains_the_checkpoint_and_saves_one_that_reloads(case, tmp_path):
    from diffugrpo_plugin.data import prepare, write_parquet
    from diffugrpo_plugin.models.dlm import load_diffusion_lm
    from diffugrpo_plugin.training import sft

    _, path, loading, _ = case
    train_file = str(write_parquet(prepare("synthetic", "train")[:16], tmp_path / "train.parquet"))
    config = sft.SFTConfig(
        train_files=(train_file,),
        output_dir=str(tmp_path / "sft"),
        model_path=path,
        steps=3,
        batch_size=2,
        lr=1e-3,
        warmup_steps=0,
        log_every=1,
        **loading,
    )
    result = sft.train(config, echo=lambda line: None)
    assert result.steps_done == 3 and all(torch.isfinite(torch.tensor(loss)) for _, loss in result.train_losses)
    lm, _ = load_diffusion_lm(config.output_dir, "cpu", **loading)
    before, _ = load_diffusion_lm(path, "cpu", **loading)
    moved = [
        name
        for name, tensor in lm.module.state_dict().items()
        if not torch.equal(tensor, before.module.state_dict()[name])
    ]
    assert moved, "the saved checkpoint holds the fine-tuned weights"
