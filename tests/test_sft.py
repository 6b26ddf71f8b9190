"""Masked-diffusion SFT: data layout, LLaDA's loss by hand, schedule, a short run that learns, and a
checkpoint the RL side loads."""

import json
import math
import pickle
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import MASK_ID, VOCAB, build_tiny_module, mbpp_file
from diffugrpo_plugin.core.masking import make_sft
from diffugrpo_plugin.data import prepare, write_parquet
from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained
from diffugrpo_plugin.training import sft

EOS = 0
PAD = 0


def small_batch():
    # two prompts (3 and 5 tokens) and targets of 2 and 4 tokens (EOS included), completion length 6
    examples = [
        sft.Example(prompt_ids=(11, 12, 13), target_ids=(21, EOS)),
        sft.Example(prompt_ids=(14, 15, 16, 17, 18), target_ids=(31, 32, 33, EOS)),
    ]
    return examples, sft.collate(examples, completion_length=6, pad_id=PAD, eos_id=EOS)


def test_collate_left_pads_prompts_and_fills_the_completion_with_eos():
    _, batch = small_batch()
    assert batch.input_ids.tolist() == [
        [PAD, PAD, 11, 12, 13, 21, EOS, EOS, EOS, EOS, EOS],
        [14, 15, 16, 17, 18, 31, 32, 33, EOS, EOS, EOS],
    ]
    assert batch.attention_mask.tolist() == [[0, 0] + [1] * 9, [1] * 11]
    assert batch.completion_mask.tolist() == [[False] * 5 + [True] * 6] * 2


def test_loss_with_uniform_predictions_is_log_vocab_times_the_weighted_mask_count():
    # A model whose head is zero predicts uniformly: log p = -log V for every token, so
    # loss_b = sum_l coef[b, l] * log V / C and the loss is their mean.
    _, batch = small_batch()
    module = build_tiny_module("dream")
    torch.nn.init.zeros_(module.lm_head.weight)
    lm = DiffusionLM.wrap(module)
    seeds = torch.tensor([3, 4])
    masker = make_sft(eps=0.2)
    views = masker.views(batch.input_ids, batch.completion_mask, MASK_ID, seeds)
    weighted_counts = views.coef[0].sum(dim=1)  # [B]: (number masked) / t per sample
    expected = (weighted_counts * math.log(VOCAB) / 6).mean()
    loss = sft.masked_diffusion_loss(lm, batch, seeds, masker)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("style", ["dream", "llada"])
def test_loss_equals_the_formula_on_full_logits(style):
    # The row-selective path against the plain formula: full logits of the noised input, log-softmax,
    # the clean token's log-prob at masked positions times 1/t, summed, over C, averaged.
    _, batch = small_batch()
    lm = DiffusionLM.wrap(build_tiny_module(style, seed=1))
    seeds = torch.tensor([7, 8])
    masker = make_sft()
    views = masker.views(batch.input_ids, batch.completion_mask, MASK_ID, seeds)
    with torch.no_grad():
        logits = lm.logits(views.noisy[0], batch.attention_mask)  # [B, L, V], logits[:, i] scores token i
        logp = torch.log_softmax(logits.double(), -1).gather(-1, batch.input_ids[..., None])[..., 0]  # [B, L]
        expected = (-(views.coef[0].double() * logp).sum(1) / 6).mean()
        loss = sft.masked_diffusion_loss(lm, batch, seeds, masker)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)


def test_examples_end_with_the_closing_fence_then_eos_and_skip_what_does_not_fit(tiny_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    rows = prepare("synthetic", "train")[:3]
    loaded = sft.examples_from_rows(rows, tokenizer, completion_length=48, max_prompt_length=160)
    assert len(loaded.examples) == 3
    example = loaded.examples[0]
    assert example.target_ids[-1] == tokenizer.eos_token_id
    text = tokenizer.decode(example.target_ids, skip_special_tokens=True)
    assert text == f"```python\n{rows[0]['extra_info']['reference_solution']}\n```\n"  # what code_format needs
    prompt = tokenizer.decode(example.prompt_ids)
    assert prompt.endswith("<|im_start|>assistant\n") and rows[0]["prompt"][0]["content"] in prompt

    short = sft.examples_from_rows(rows, tokenizer, completion_length=5, max_prompt_length=160)
    assert (len(short.examples), short.overlong_targets) == (0, 3)
    with pytest.raises(sft.SFTError, match="row 2: missing field 'extra_info.reference_solution'"):
        broken = [rows[0], {**rows[1], "extra_info": {**rows[1]["extra_info"], "reference_solution": None}}]
        sft.examples_from_rows(broken, tokenizer, 48, 160)


def _learning_rates(config: sft.SFTConfig):
    """The schedule of ``config`` and the learning rate of each of its steps."""
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=config.lr)
    schedule = sft.lr_schedule(optimizer, config)
    lrs = []
    for _ in range(config.steps):
        lrs.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
    return schedule, lrs


def test_learning_rate_warms_up_then_follows_the_cosine():
    config = sft.SFTConfig(train_files=["x"], output_dir="y", steps=110, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    _, lrs = _learning_rates(config)
    assert lrs[0] == 0.0 and lrs[5] == pytest.approx(5e-4)  # s / 10 of the peak
    # after warm-up, step s is (s - 10) / 100 of the way down the cosine from 1e-3 to 1e-4
    assert lrs[10] == pytest.approx(1e-3)
    assert lrs[60] == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # half way: cos(pi / 2) = 0
    assert lrs[109] == pytest.approx(1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi * 0.99)))


def test_steps_past_a_shorter_schedule_stay_at_its_floor():
    config = sft.SFTConfig(
        train_files=["x"], output_dir="y", steps=80, schedule_steps=50, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1
    )
    schedule, lrs = _learning_rates(config)
    assert lrs[30] == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # half way down the 40 steps after warm-up
    assert lrs[49] == pytest.approx(1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi * 39 / 40)))
    assert lrs[50:] == pytest.approx([1e-4] * 30)  # transformers' curve would climb back after step 50
    restored = pickle.loads(pickle.dumps(schedule))  # a schedule that can be saved whole, as transformers' can
    assert restored.lr_lambdas[0](79) == pytest.approx(0.1)
    with pytest.raises(sft.SFTError, match="schedule_steps=10 .must end after warmup_steps=10, or be 0."):
        sft.SFTConfig(train_files=["x"], output_dir="y", steps=80, schedule_steps=10, warmup_steps=10)


def test_batch_order_is_seeded_full_and_balanced():
    order = sft.batch_order(num_examples=5, batch_size=3, steps=10, seed=1)
    assert order == sft.batch_order(5, 3, 10, seed=1) and order != sft.batch_order(5, 3, 10, seed=2)
    assert all(len(batch) == 3 for batch in order)
    flat = [i for batch in order for i in batch]
    assert all(sorted(flat[e * 5 : (e + 1) * 5]) == list(range(5)) for e in range(6))  # each epoch a permutation


def test_bad_settings_and_files_name_the_fix(tmp_path):
    with pytest.raises(sft.SFTError, match="steps=0"):
        sft.SFTConfig(train_files=("x",), output_dir="y", steps=0)
    with pytest.raises(sft.SFTError, match="no training data"):
        sft.SFTConfig(train_files=(), output_dir="y")
    with pytest.raises(sft.SFTError, match="does not exist"):
        sft.load_examples([str(tmp_path / "missing.parquet")], SimpleNamespace(eos_token_id=EOS), 48, 160)


def test_sft_never_touches_the_global_rng(tiny_model_path, tmp_path):
    data = write_parquet(prepare("synthetic", "train")[:8], tmp_path / "train.parquet")
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    sft.train(
        sft.SFTConfig(
            train_files=(str(data),),
            output_dir=str(tmp_path / "out"),
            model_path=tiny_model_path,
            steps=2,
            batch_size=4,
            log_every=1,
        ),
        echo=lambda line: None,
    )
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])


def test_a_stop_rule_ends_training_early_and_the_checkpoint_says_where(tiny_model_path, tmp_path):
    data = write_parquet(prepare("synthetic", "train")[:8], tmp_path / "train.parquet")
    seen = []

    def stop_after_three(done, lm, tokenizer):
        seen.append((done, lm.module.training, torch.is_grad_enabled(), tokenizer.eos_token_id is not None))
        return done == 3

    config = sft.SFTConfig(
        train_files=(str(data),),
        output_dir=str(tmp_path / "out"),
        model_path=tiny_model_path,
        steps=10,
        batch_size=4,
        log_every=1,
    )
    result = sft.train(config, echo=lambda line: None, stop_when=stop_after_three)
    # asked after every step, with the model in eval mode and no autograd
    assert seen == [(1, False, False, True), (2, False, False, True), (3, False, False, True)]
    assert result.steps_done == 3 and [step for step, _ in result.train_losses] == [1, 2, 3]
    saved = json.loads((tmp_path / "out" / "sft_config.json").read_text())
    assert saved["steps"] == 10 and saved["steps_done"] == 3


def test_loss_goes_down_and_the_checkpoint_loads_as_the_rl_side_loads_it(tiny_model_path, tmp_path):
    from diffugrpo_plugin.integration.engine import DiffusionModelConfig

    # the demo's data: MBPP train (601-974) and the synthetic family; held out: their validation splits
    mbpp = mbpp_file("mbpp.jsonl")
    train_files = (
        str(write_parquet(prepare("mbpp", "train", mbpp), tmp_path / "mbpp_train.parquet")),
        str(write_parquet(prepare("synthetic", "train"), tmp_path / "train.parquet")),
    )
    val_files = (
        str(write_parquet(prepare("mbpp", "validation", mbpp), tmp_path / "mbpp_val.parquet")),
        str(write_parquet(prepare("synthetic", "validation"), tmp_path / "validation.parquet")),
    )
    config = sft.SFTConfig(
        train_files=train_files,
        val_files=val_files,
        output_dir=str(tmp_path / "ckpt"),
        model_path=tiny_model_path,
        steps=40,
        batch_size=8,
        lr=3e-3,
        warmup_steps=5,
        log_every=10,
        tensorboard_dir=str(tmp_path / "tb"),
    )
    lm, tokenizer = sft.load_model_and_tokenizer(config)
    val_examples = sft.load_examples(config.val_files, tokenizer, 48, 160).examples
    before = sft.validation_loss(lm, val_examples, config, tokenizer.pad_token_id, tokenizer.eos_token_id, make_sft())
    result = sft.train(config, echo=lambda line: None)
    after = result.val_losses[-1][1]
    assert after < 0.7 * before, (before, after)  # random init: ~log V per weighted token
    assert result.train_losses[-1][1] < result.train_losses[0][1]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))

    # The RL side: verl's model config (as the engine builds it) and the rollout's loader accept the checkpoint.
    model_config = DiffusionModelConfig(
        path=config.output_dir,
        model_type="diffusion_lm",
        use_remove_padding=False,
        override_config={"attn_implementation": "sdpa"},
        diffusion={"masker": "coupled"},
    )
    reloaded = DiffusionLM.wrap(load_pretrained(model_config.local_path).eval(), tokenizer=model_config.tokenizer)
    assert reloaded.shift_logits and reloaded.mask_token_id == tokenizer.mask_token_id
    reloaded_val = sft.validation_loss(
        reloaded, val_examples, config, tokenizer.pad_token_id, tokenizer.eos_token_id, make_sft()
    )
    assert reloaded_val == pytest.approx(after, rel=1e-5)
    saved = json.loads((tmp_path / "ckpt" / "sft_config.json").read_text())
    assert saved["steps"] == saved["steps_done"] == result.steps_done == 40


def test_lora_sft_trains_only_adapters_and_saves_the_merged_model_and_the_adapter(tiny_model_path, tmp_path):
    """--lora-rank: the loss goes down with every base weight frozen; the checkpoint is the merged model (what the RL
    job loads), and the adapter folder merged into the starting checkpoint gives the same model."""
    from transformers import AutoTokenizer

    from diffugrpo_plugin.models.lora import apply_adapter

    # a random model's head (std 0.02) caps its logits near 0 whatever the layers do; frozen, it would leave LoRA
    # nothing to learn, so this starting model's (tied) head is scaled up
    start = load_pretrained(tiny_model_path)
    with torch.no_grad():
        start.get_output_embeddings().weight.mul_(40)
    start.save_pretrained(tmp_path / "start")
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(tmp_path / "start")
    tiny_model_path = str(tmp_path / "start")
    data = write_parquet(prepare("synthetic", "train")[:64], tmp_path / "train.parquet")
    config = sft.SFTConfig(
        train_files=(str(data),),
        val_files=(str(data),),
        output_dir=str(tmp_path / "out"),
        model_path=tiny_model_path,
        steps=40,
        batch_size=8,
        lr=3e-2,
        warmup_steps=2,
        log_every=10,
        lora_rank=8,
        lora_alpha=16,
        target_modules="q_proj,v_proj,up_proj,down_proj",
    )
    lm, tokenizer = sft.load_model_and_tokenizer(config)
    trainable = {name for name, parameter in lm.module.named_parameters() if parameter.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    assert {name.split(".")[-4] for name in trainable} == {"q_proj", "v_proj", "up_proj", "down_proj"}
    val_examples = sft.load_examples(config.val_files, tokenizer, 48, 160).examples
    before = sft.validation_loss(lm, val_examples, config, tokenizer.pad_token_id, tokenizer.eos_token_id, make_sft())
    result = sft.train(config, echo=lambda line: None)
    assert result.val_losses[-1][1] < 0.7 * before, (before, result.val_losses)

    saved = load_pretrained(config.output_dir).eval()
    assert not any("lora_" in name for name, _ in saved.named_parameters())
    merged_again = apply_adapter(load_pretrained(tiny_model_path), tmp_path / "out" / "lora_adapter").eval()
    ids = torch.randint(5, 60, (2, 10))
    with torch.no_grad():
        assert torch.allclose(saved(input_ids=ids).logits, merged_again(input_ids=ids).logits, atol=1e-5)
        assert not torch.allclose(saved(input_ids=ids).logits, load_pretrained(tiny_model_path)(input_ids=ids).logits)
    with pytest.raises(sft.SFTError, match="target-modules"):
        sft.load_model_and_tokenizer(
            sft.SFTConfig(
                train_files=("x",),
                output_dir="y",
                model_path=tiny_model_path,
                lora_rank=4,
                target_modules="no_such_layer",
            )
        )


# --------------------------------------------------------------------------- the warm-started default model


def test_warm_start_fine_tunes_until_the_measured_pass_rate_reaches_its_target_once_into_the_cache(
    monkeypatch, tmp_path
):
    from safetensors.torch import load_file

    from diffugrpo_plugin.data import default_warm_start_data, synthetic_problems
    from diffugrpo_plugin.models import tiny
    from diffugrpo_plugin.training import stop_rules, warm_start

    monkeypatch.setenv("DIFFUGRPO_HOME", str(tmp_path))
    spec = tiny.TinySpec(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    recipe = warm_start.WarmStart(
        schedule_steps=6, max_steps=9, first_check=2, check_every=3, target_pass_rate=0.4, batch_size=2, warmup_steps=1
    )
    measured = []  # whether the model was in training mode at each check: the sandboxed judge is stood in for

    def pass_rate(check, lm, tokenizer):
        measured.append(lm.module.training)
        # measured on the RL prompts, all 62 of them: functions the warm start never trains on
        assert (check.metric, check.samples, len(check.problems)) == ("test_pass_rate", 2, 62)
        assert {problem.task_id for problem in check.problems} == {p.task_id for p in synthetic_problems("rl")}
        return [0.1, 0.39, 0.4][len(measured) - 1]

    monkeypatch.setattr(stop_rules.PassRateCheck, "measure", pass_rate)
    path = warm_start.warm_model_path(spec, recipe)
    assert path.startswith(str(tmp_path)) and recipe.cache_suffix in path and spec.cache_name in path
    saved = json.loads((tmp_path / path / "sft_config.json").read_text())
    # measured after steps 2, 5 and 8; 0.4 reaches the target: stopped after step 8 of at most 9 (the schedule's 6, then
    # its floor)
    assert measured == [False, False, False]  # measured in eval mode
    assert (saved["steps"], saved["schedule_steps"], saved["steps_done"]) == (9, 6, 8)
    assert (saved["batch_size"], saved["lr"], saved["weight_decay"]) == (2, recipe.lr, recipe.weight_decay)
    record = json.loads((tmp_path / path / warm_start.WARM_START_RECORD).read_text())
    assert [(check["step"], check["test_pass_rate"]) for check in record["checks"]] == [(2, 0.1), (5, 0.39), (8, 0.4)]
    assert (record["target_pass_rate"], record["reached"]) == (0.4, True)
    assert saved["model_path"] == tiny.tiny_model_path(spec)
    assert saved["train_files"] == [default_warm_start_data()]
    warm = load_file(f"{path}/model.safetensors")
    random_init = load_file(f"{tiny.tiny_model_path(spec)}/model.safetensors")
    assert any(not torch.equal(warm[name], random_init[name]) for name in random_init)
    modified = (tmp_path / path / "model.safetensors").stat().st_mtime_ns
    assert warm_start.warm_model_path(spec, recipe) == path  # cached: not fine-tuned again
    assert (tmp_path / path / "model.safetensors").stat().st_mtime_ns == modified and len(measured) == 3


def test_a_warm_start_that_never_reaches_its_target_says_so_and_records_it(monkeypatch, tmp_path):
    from diffugrpo_plugin.models import tiny
    from diffugrpo_plugin.training import stop_rules, warm_start

    spec = tiny.TinySpec(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    recipe = warm_start.WarmStart(
        schedule_steps=3, max_steps=4, first_check=2, check_every=2, batch_size=2, warmup_steps=1
    )
    monkeypatch.setattr(stop_rules.PassRateCheck, "measure", lambda *args: 0.125)
    lines = []
    warm_start.save_warm_model(tmp_path / "warm", spec, recipe, echo=lines.append)
    assert json.loads((tmp_path / "warm" / "sft_config.json").read_text())["steps_done"] == 4
    record = json.loads((tmp_path / "warm" / warm_start.WARM_START_RECORD).read_text())
    assert [(check["step"], check["test_pass_rate"]) for check in record["checks"]] == [(2, 0.125), (4, 0.125)]
    assert not record["reached"]
    assert "sft check: step 2 test_pass_rate 0.125 on 62 check problems (stop at 0.35)" in lines, lines
    assert any("stayed below 0.35 for all 4 steps (last measured: 0.125)" in line for line in lines), lines


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"first_check": 10, "schedule_steps": 5}, "must be positive and in that order"),
        ({"schedule_steps": 6000, "max_steps": 5000}, "must be positive and in that order"),
        ({"check_every": 0}, "must be at least 1"),
        ({"target_pass_rate": 0.0}, r"must be in \(0, 1\]"),
    ],
)
def test_a_warm_start_recipe_that_cannot_run_is_refused(fields, message):
    from diffugrpo_plugin.training import warm_start

    with pytest.raises(ValueError, match=message):
        warm_start.WarmStart(**fields)


def test_a_pass_rate_check_is_due_at_its_first_step_and_every_interval_after_and_refuses_unknown_metrics():
    from diffugrpo_plugin.training.stop_rules import PassRateCheck

    check = PassRateCheck(problems=(), sampler=None, completion_length=8, target=0.5, first=4, every=3)
    assert [step for step in range(1, 14) if check.due(step)] == [4, 7, 10, 13]
    with pytest.raises(ValueError, match="unknown metric 'pass@8'; a check measures one of pass@1, test_pass_rate"):
        PassRateCheck(problems=(), sampler=None, completion_length=8, target=0.5, first=4, every=3, metric="pass@8")
    with pytest.raises(ValueError, match=r"every \(0\)"):
        PassRateCheck(problems=(), sampler=None, completion_length=8, target=0.5, first=4, every=0)


@pytest.mark.sandbox
def test_a_pass_rate_check_samples_with_the_rollouts_sampler_and_judges_in_the_sandbox(monkeypatch):
    from transformers import AutoTokenizer

    from diffugrpo_plugin.data import default_data_paths
    from diffugrpo_plugin.models import tiny
    from diffugrpo_plugin.tools import evaluation
    from diffugrpo_plugin.training import stop_rules, warm_start

    rollout = warm_start.rollout_sampler()
    assert (rollout.temperature, rollout.top_p, rollout.top_k, rollout.steps) == (1.0, 0.95, 50, 32)
    spec = tiny.TinySpec(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    tokenizer = AutoTokenizer.from_pretrained(tiny.tiny_model_path(spec))
    lm = DiffusionLM.wrap(load_pretrained(tiny.tiny_model_path(spec)).eval(), tokenizer)
    problems = evaluation.load_problems("parquet", path=default_data_paths()[0], limit=2)
    judged = []
    real_judge = evaluation.judge_completions
    monkeypatch.setattr(evaluation, "judge_completions", lambda p, c, **kw: judged.append(c) or real_judge(p, c, **kw))
    check = stop_rules.PassRateCheck(problems, rollout, 48, target=0.5, first=1, every=1, metric="test_pass_rate")
    lines, record = [], []
    # a random model writes no passing code; what matters is that both tasks were sampled once and judged
    assert stop_rules.stop_at_pass_rate(check, record, lines.append)(1, lm, tokenizer) is False
    assert [len(completions) for completions in judged[0].values()] == [1, 1]
    assert record[0]["step"] == 1 and record[0]["test_pass_rate"] == 0.0 and record[0]["seconds"] > 0
    assert lines == ["sft check: step 1 test_pass_rate 0.000 on 2 check problems (stop at 0.5)"]


def test_the_rl_default_model_is_the_warm_started_one_built_by_its_first_loader(monkeypatch, tmp_path):
    from hydra import compose, initialize_config_module

    from diffugrpo_plugin.integration import resolvers
    from diffugrpo_plugin.training import warm_start

    monkeypatch.setenv("DIFFUGRPO_HOME", str(tmp_path))
    built = []
    monkeypatch.setattr(warm_start, "default_warm_model_path", lambda: built.append(1) or "/built/warm")
    assert resolvers.default_model() == str(warm_start.warm_model_dir())  # named, not built
    with initialize_config_module(config_module="diffugrpo_plugin.config", version_base=None):
        job = compose(config_name="diffugrpo", overrides=["actor_rollout_ref.model.path=/my/model"])
    assert job.actor_rollout_ref.model.path == "/my/model" and built == []  # a user's model builds nothing
    assert warm_start.built_if_default("/my/model") == "/my/model" and built == []
    assert warm_start.built_if_default(str(warm_start.warm_model_dir())) == "/built/warm" and built == [1]


@pytest.mark.slow
@pytest.mark.sandbox
def test_default_warm_model_writes_formatted_code_and_sometimes_passes():
    # Builds the real default (about 2.5 minutes on 2 cores, once per machine) and samples like the rollout.
    from transformers import AutoTokenizer

    from diffugrpo_plugin.data import default_data_paths
    from diffugrpo_plugin.sampling import build_sampler
    from diffugrpo_plugin.tools import evaluation
    from diffugrpo_plugin.training import warm_start

    path = warm_start.default_warm_model_path()
    record = json.loads((Path(path) / warm_start.WARM_START_RECORD).read_text())
    assert record["reached"] and record["checks"][-1]["test_pass_rate"] >= warm_start.WarmStart().target_pass_rate, (
        record
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    lm = DiffusionLM.wrap(load_pretrained(path).eval(), tokenizer)
    problems = evaluation.load_problems("parquet", path=default_data_paths()[0], limit=48)
    sampler = build_sampler("entropy", steps=32, temperature=1.0, top_p=0.95)
    completions = evaluation.generate_completions(sampler, lm, tokenizer, problems, 4, 48, seed=0, batch_size=32)
    summary = evaluation.summarize(evaluation.judge_completions(problems, completions), [1])
    assert summary["code_extracted_rate"] > 0.8, summary  # well formatted (and parses) nearly always
    assert 0.15 < summary["test_pass_rate"] < 0.85, summary  # right often, wrong often: GRPO groups differ
