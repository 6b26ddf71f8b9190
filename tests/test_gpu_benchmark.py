"""benchmarks/gpu.py runs the same code on CPU with tiny configs of the native Dream and LLaDA classes: every part
produces its records, the fused head agrees with fp64, and the FSDP2 step (gloo, one process) trains."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    output = tmp_path_factory.mktemp("gpu_bench") / "records.json"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "gpu.py"),
        "--tiny",
        "--device",
        "cpu",
        "--prompt",
        "8",
        "--completion",
        "16",
        "--rows",
        "2",
        "--repeats",
        "1",
        "--steps",
        "4",
        "--sampler-batches",
        "2",
        "--step-layers",
        "2",
        "--step-rows",
        "2",
        "--step-repeats",
        "2",
        "--json",
        str(output),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(output.read_text())


def by_part(records, part):
    return [record for record in records if record["part"] == part]


@pytest.mark.slow  # the benchmark's run on CPU (records)
def test_every_pass_variant_of_both_families_is_measured(records):
    passes = by_part(records, "logprob")
    assert {(r["family"], r["variant"], r["checkpointing"]) for r in passes} == {
        (family, variant, checkpointing)
        for family in ("dream", "llada")
        for variant in ("model head (materialised logits)", "fused head, stock MLP", "ours (fused head + lean MLP)")
        for checkpointing in (True, False)
    }
    fused = [r for r in passes if not r["variant"].startswith("model head")]
    # the memory model's pass terms: activations and the fused head, nothing of FSDP
    assert all(
        r["estimate_bytes"] > 0 and not any(name.startswith("FSDP") for name in r["estimate_terms"]) for r in fused
    )
    lean = {
        r["checkpointing"]: r["estimate_bytes"]
        for r in fused
        if r["variant"].startswith("ours") and r["family"] == "dream"
    }
    stock = {
        r["checkpointing"]: r["estimate_bytes"]
        for r in fused
        if r["variant"].startswith("fused head") and r["family"] == "dream"
    }
    assert lean[False] < stock[False]  # the lean blocks keep two activations fewer


@pytest.mark.slow  # the benchmark's run on CPU (records)
def test_fused_head_agrees_with_fp64_in_bf16(records):
    for record in by_part(records, "head"):
        assert record["fused_logp_rel"] < 1e-2 and record["fused_grad_rel"] < 2e-2, record
        # the fused head is no worse than bf16 logits through the model's own head
        assert record["fused_logp_rel"] <= 2 * record["bf16_logits_logp_rel"] + 1e-6, record


@pytest.mark.slow  # the benchmark's run on CPU (records)
def test_attention_kernels_are_named(records):
    for record in by_part(records, "sdpa"):
        for ops in record["kernels"].values():
            assert any("scaled_dot_product" in op for op in ops), record


@pytest.mark.slow  # the benchmark's run on CPU (records)
def test_samplers_report_speed_and_agreement(records):
    samplers = by_part(records, "sampler")
    assert {(r["family"], r["setting"].split(",")[0]) for r in samplers} == {
        ("dream", "plain"),
        ("dream", "fast (training default)"),
        ("llada", "plain"),
        ("llada", "fast (training default)"),
    }
    for record in samplers:
        assert record["tokens_per_s"] > 0 and 0 <= record["agreement"] <= 1
        if record["setting"].startswith("plain"):
            assert record["agreement"] == 1.0  # the baseline against itself


@pytest.mark.slow  # the benchmark's run on CPU (records)
def test_fsdp2_step_runs_every_stage(records):
    (step,) = by_part(records, "step")
    assert len(step["steps"]) == 2
    for one in step["steps"]:
        assert list(one["stages"]) == ["rollout", "old log-probs", "ref log-probs", "update", "weight sync"]
        assert all(stage["seconds"] > 0 for stage in one["stages"].values())
    assert step["estimate"]["total_bytes"] > step["estimate"]["held_bytes"]
    assert all(step["weights_moved"].values()), step["weights_moved"]  # AdamW changed the policy
    assert step["update_flops"]["hardware"] == pytest.approx(4 / 3 * step["update_flops"]["model"])


def test_update_flops_by_hand():
    """The body over 3 views of every token, the head over 2 rows per completion token (the scored rows)."""
    from diffugrpo_plugin.tools.step_memory import ModelShape
    from gpu import update_flops

    shape = ModelShape(
        parameters=1000,
        vocab=10,
        hidden=4,
        layers=1,
        intermediate=8,
        kv_dim=4,
        embedding_parameters=40,
        head_parameters=40,
    )
    forward = 2 * 920 * 3 * 2 * (5 + 3) + 2 * 10 * 4 * 2 * 2 * 3  # body 920 parameters; 2 completions of 3 tokens
    assert update_flops(shape, rows=2, prompt=5, completion=3) == {"hardware": 4 * forward, "model": 3 * forward}
