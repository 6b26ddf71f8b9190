"""``diffugrpo generate`` on a small checkpoint built in the test."""

from __future__ import annotations

import argparse
import json

import pytest

from diffugrpo_plugin.cli import generate
from samplers_support import single_thread

_one_thread = pytest.fixture(scope="module", autouse=True)(single_thread)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from diffugrpo_plugin.models.tiny import TinySpec, save_tiny_model

    spec = TinySpec(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64, max_positions=256)
    return str(save_tiny_model(tmp_path_factory.mktemp("tiny"), spec))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="diffugrpo")
    generate.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["generate", *argv])
    return args.func(args)


def test_help_lists_every_sampler_and_its_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for name in ("dream", "entropy", "maskgit_plus", "topk_margin", "origin", "llada"):
        assert f"  {name}: " in text
    for option in (
        "steps=null",
        "block_length=null",
        "threshold=null",
        "kv_cache=false",
        'alg="entropy"',
        "alg_temp=0.0",
        'remasking="low_confidence"',
        "cfg_scale=0.0",
        "micro_batch_size=null",
    ):
        assert option in text, option


def test_json_output_is_reproducible_per_seed(checkpoint, capsys):
    argv = [
        "--model",
        checkpoint,
        "--prompt",
        "def add(a, b):",
        "--prompt",
        "Sort a list.",
        "--sampler",
        "dream",
        "-o",
        "temperature=1.0",
        "-o",
        "alg=maskgit_plus",
        "--max-new-tokens",
        "8",
        "--seed",
        "5",
        "--json",
    ]
    assert main(argv) == 0
    first = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(argv) == 0
    again = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert first == again
    assert [row["seed"] for row in first] == [5, 6]
    assert [row["prompt"] for row in first] == ["def add(a, b):", "Sort a list."]
    assert first[0]["model_input"].startswith("<|im_start|>system") and first[0]["model_input"].endswith(
        "<|im_start|>assistant\n"
    )
    for row in first:
        assert 1 <= row["length"] == len(row["completion_ids"]) <= 8 and row["steps"] == 8


def test_trace_renders_terminal_html_and_png(checkpoint, tmp_path, capsys):
    html_path, png_path = tmp_path / "trace.html", tmp_path / "trace.png"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "x = 1"}) + "\n\n")
    argv = [
        "--model",
        checkpoint,
        "--prompts",
        str(prompts),
        "--sampler",
        "llada",
        "-o",
        "block_length=4",
        "--max-new-tokens",
        "8",
        "--no-chat-template",
        "--trace",
        "--trace-html",
        str(html_path),
        "--trace-png",
        str(png_path),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("\x1b[2mx = 1\x1b[0m") and "\x1b[48;2;" in out
    assert 'data-step="0"' in html_path.read_text()
    assert png_path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--prompt", "x", "--sampler", "nope"], "unknown sampler 'nope'"),
        (["--prompt", "x", "-o", "steps"], "must look like NAME=VALUE"),
        (["--prompt", "x", "-o", "stesp=3"], "has no option stesp"),
        (["--prompt", "x", "--sampler", "dream", "-o", "alg=greedy"], "alg='greedy' is invalid"),
        ([], "no prompt given"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_bad_jsonl_names_the_line(tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    assert main(["--prompts", str(path)]) == 2
    assert "p.jsonl line 2: missing field 'prompt'" in capsys.readouterr().err
    path.write_text('{"prompt": "ok"}\nnot json\n')
    assert main(["--prompts", str(path)]) == 2
    assert "p.jsonl line 2: not valid JSON" in capsys.readouterr().err


def test_option_values_are_read_as_json_then_text():
    assert generate.parse_options(["steps=64", "kv_cache=true", "alg=entropy", "threshold=0.9", "top_k=null"]) == {
        "steps": 64,
        "kv_cache": True,
        "alg": "entropy",
        "threshold": 0.9,
        "top_k": None,
    }


def test_the_default_model_is_the_training_jobs(capsys, chosen_model):
    from diffugrpo_plugin.integration.resolvers import default_model

    assert main(["--prompt", "def add(a, b):"]) == 2
    assert chosen_model == [default_model()]
    assert "stopped after choosing the model" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["generate", "eval"])
def test_seed_help_says_it_does_nothing_at_temperature_zero(command, capsys):
    from diffugrpo_plugin.cli import main as cli_main

    with pytest.raises(SystemExit):
        cli_main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "no effect at temperature 0 (the samplers' default)" in help_text
    assert "completion length (default: 48, as in training)" in help_text


def test_adapter_flag_generates_as_the_merged_model(checkpoint, tmp_path, capsys):
    """``--adapter`` merges a LoRA folder into ``--model``: the completions are the merged checkpoint's. A folder
    that holds no adapter is a one-line error naming it."""
    from engine_support import saved_merged_model, saved_random_adapter

    adapter = saved_random_adapter(checkpoint, tmp_path / "adapter")
    merged = saved_merged_model(checkpoint, adapter, tmp_path / "merged")
    argv = ["--prompt", "def add(a, b):", "--prompt", "Sort a list.", "--max-new-tokens", "8", "--json"]
    outputs = {}
    for name, model_args in (
        ("base", ["--model", checkpoint]),
        ("adapter", ["--model", checkpoint, "--adapter", adapter]),
        ("merged", ["--model", merged]),
    ):
        assert main([*model_args, *argv]) == 0
        outputs[name] = [json.loads(line)["completion"] for line in capsys.readouterr().out.splitlines()]
    assert outputs["adapter"] == outputs["merged"] != outputs["base"]
    assert main(["--model", checkpoint, "--adapter", str(tmp_path), *argv]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("diffugrpo generate: error")]
    assert len(errors) == 1 and "not a LoRA adapter folder" in errors[0]


def test_load_in_4bit_applies_the_adapter_to_the_4bit_base(checkpoint, tmp_path, capsys):
    """``--load-in-4bit --adapter``: a QLoRA run's adapter applied to the 4-bit base it trained on. The model it loads
    computes what an ordinary checkpoint holding the dequantized weights with the adapter merged computes (the
    formula); its greedy completions are not compared, since on a tiny random model near-ties flip on rounding."""
    pytest.importorskip("bitsandbytes", reason="QLoRA needs the qlora extra: pip install 'diffugrpo[qlora]'")
    import torch

    from diffugrpo_plugin.cli.model_flags import load_model
    from diffugrpo_plugin.models.dlm import load_pretrained
    from engine_support import saved_dequantized, saved_merged_model, saved_random_adapter

    adapter = saved_random_adapter(checkpoint, tmp_path / "adapter")
    formula = saved_merged_model(saved_dequantized(checkpoint, tmp_path / "dequantized"), adapter, tmp_path / "merged")
    argv = ["--model", checkpoint, "--adapter", adapter, "--load-in-4bit", "--prompt", "def add(a, b):", "--json"]
    assert main([*argv, "--max-new-tokens", "8"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    parser = argparse.ArgumentParser()
    generate.add_parser(parser.add_subparsers(dest="command"))
    lm, _ = load_model(parser.parse_args(["generate", *argv]))
    ids = torch.randint(5, 60, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(
            lm.module(input_ids=ids).logits, load_pretrained(formula).eval()(input_ids=ids).logits, rtol=0, atol=1e-4
        )


@pytest.mark.parametrize("family, sampler", [("dream", "entropy"), ("sdar", "block")])
def test_without_sampler_the_model_familys_runs(family, sampler, tmp_path, capsys):
    """No --sampler: the family's (ModelFamily.default_sampler), the same completions as naming it."""
    from diffugrpo_plugin.models.tiny import TinySpec, save_tiny_model

    spec = TinySpec(family=family, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64)
    argv = ["--model", str(save_tiny_model(tmp_path / family, spec)), "--prompt", "def add(a, b):"]
    argv += ["--max-new-tokens", "8", "--seed", "3", "--json"]
    outputs = []
    for named in ([], ["--sampler", sampler]):
        assert main(argv + named) == 0
        outputs.append([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert outputs[0] == outputs[1] and outputs[0][0]["length"] >= 1
