"""benchmarks/whole_step.py's reference-style step scores what our engine scores: its plain coupled log-probs
(three views, full-vocabulary log-softmax) equal the package's DiffuCoder-compatible ``get_per_token_logps`` on
every completion token the attention mask keeps, so the benchmark compares the same arithmetic both ways."""

import os
import sys

import torch

from diffugrpo_plugin.diffucoder_compat import get_per_token_logps
from diffugrpo_plugin.models.dlm import position_ids_from_mask
from samplers_support import lm_for
from whole_step import coupled_logprobs


def test_the_reference_style_log_probs_equal_the_packages_coupled_log_probs():
    lm = lm_for("dream")
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 20, (3, 5), generator=generator)  # [B, P]
    completion = torch.randint(3, 20, (3, 6), generator=generator)  # [B, N]
    input_ids = torch.cat([prompt, completion], dim=1)  # [B, T]
    attention = torch.ones_like(input_ids)
    attention[0, :2] = 0  # left padding
    attention[1, -2:] = 0  # after the EOS
    positions = position_ids_from_mask(attention)
    with torch.no_grad():
        ours = coupled_logprobs(lm.module, lm, input_ids, attention, positions, prompt_length=5, seed=7)  # [B, N]
        package = get_per_token_logps(lm, input_ids, 6, [7], attention_mask=attention)[:, 0]  # [B, N]
    kept = attention[:, 5:].bool()
    assert kept.sum() == 16
    torch.testing.assert_close(ours[kept], package[kept], rtol=1e-5, atol=1e-5)
    assert (ours[kept] < 0).all()


def test_the_table_gives_each_stage_the_reference_style_median_over_the_runs_and_the_memory_ratio(capsys):
    from whole_step import REWARD, SAMPLER_CALLS, STAGES, print_table

    baseline = {stage: [2.0, 3.0, 1.0] for stage, _ in (*STAGES, REWARD, SAMPLER_CALLS)}  # median 2
    ours = {stage: [0.5, 1.0, 4.0] for stage, _ in (*STAGES, REWARD, SAMPLER_CALLS)}  # median 1
    print_table({"reference-style": (baseline, 1024 * 1000), "ours": (ours, 1024 * 4500)})
    rows = {line[:22].strip(): line[22:].split() for line in capsys.readouterr().out.splitlines()[3:]}
    for stage, _ in STAGES:
        assert rows[stage] == ["2.00", "[1.00-3.00]", "x1.00", "1.00", "[0.50-4.00]", "x2.00"], rows[stage]
    # per step: 2/0.5, 3/1, 1/4
    assert rows["step, paired by step"] == ["x1.00", "[1.00-1.00]", "x3.00", "[0.25-4.00]"]
    assert rows["mean reward"] == ["2.00", "[1.00-3.00]", "1.83", "[0.50-4.00]"]
    assert rows["sampler calls"] == ["2.00", "[1.00-3.00]", "1.83", "[0.50-4.00]"]
    assert "of which sampling" in rows
    assert rows["peak PSS, whole tree"] == ["1000", "MiB", "x1.00", "4500", "MiB", "x4.50"]


def test_our_job_reads_the_prompts_in_the_reference_style_steps_order(tmp_path):
    import pyarrow.parquet as pq

    from diffugrpo_plugin.data import prepare
    from whole_step import data_settings, train_rows_in_order

    settings = dict(setting.split("=", 1) for setting in data_settings(tmp_path))
    assert settings["data.shuffle"] == "false"  # verl's sequential sampler: step k reads rows 4(k-1) .. 4k-1
    written = [row["prompt"][-1]["content"] for row in pq.read_table(settings["data.train_files"]).to_pylist()]
    in_order = [row["prompt"][-1]["content"] for row in train_rows_in_order()]
    assert written == in_order
    generated = [row["prompt"][-1]["content"] for row in prepare("synthetic", "train")]
    assert sorted(in_order) == sorted(generated) and in_order != generated  # a shuffle of the same rows


def test_the_peak_memory_sampler_catches_a_peak_shorter_than_its_pss_interval(tmp_path):
    from whole_step import PSS_EVERY_S, peak_pss_of

    holds = 0.8
    assert holds < PSS_EVERY_S  # only the resident size's new high can trigger the reading that sees it
    program = (
        "import time; time.sleep(0.6); block = bytearray(300 << 20); block[::4096] = b'x' * len(block[::4096]); "
        f"time.sleep({holds}); del block; time.sleep(1.0)"
    )
    peak_kib = peak_pss_of([sys.executable, "-c", program], dict(os.environ), tmp_path)
    assert 300 * 1024 < peak_kib < 600 * 1024


def test_shape_names_a_dream_style_tiny_model_and_a_bad_one_says_what_to_fix():
    from diffugrpo_plugin.models.tiny import TinySpec
    from whole_step import spec_of_shape

    assert spec_of_shape("256,8,8,4,704") == TinySpec(
        family="dream", hidden_size=256, num_layers=8, num_heads=8, num_kv_heads=4, intermediate_size=704
    )
    for bad in ("256,8,8,4", "256,8,8,4,x", "256,8,0,4,704", "256,8,8,4,7\u00b2"):
        try:
            spec_of_shape(bad)
        except ValueError as error:
            assert "HIDDEN,LAYERS,HEADS,KV_HEADS,MLP" in str(error) and bad in str(error)
        else:
            raise AssertionError(f"{bad} was accepted")


def test_shape_and_model_together_or_random_alone_stop_with_one_line(monkeypatch, capsys):
    import pytest

    import whole_step

    for argv, message in (
        (["--shape", "32,2,4,2,64", "--model", "x"], "pass --model or --shape, not both"),
        (["--random"], "--random needs --shape"),
        (["--shape", "30,2,4,2,64"], "must divide by num_heads"),
    ):
        monkeypatch.setattr(sys, "argv", ["whole_step.py", *argv])
        with pytest.raises(SystemExit) as stopped:
            whole_step.main()
        assert stopped.value.code == 2
        assert message in capsys.readouterr().err


def test_shape_builds_the_random_or_the_warm_started_model_of_that_shape(monkeypatch):
    import whole_step
    from diffugrpo_plugin.models import tiny
    from diffugrpo_plugin.training import warm_start

    built = []
    monkeypatch.setattr(tiny, "tiny_model_path", lambda spec: built.append(("random", spec)) or "/random")
    monkeypatch.setattr(warm_start, "warm_model_path", lambda spec: built.append(("warm", spec)) or "/warm")
    spec = whole_step.spec_of_shape("32,2,4,2,64")
    assert whole_step.model_of_shape(spec, random_weights=True) == "/random"
    assert whole_step.model_of_shape(spec, random_weights=False) == "/warm"
    assert built == [("random", spec), ("warm", spec)]
