"""``diffugrpo check-model`` and the FLOP / memory model behind it (``diffugrpo_plugin.tools.step_cost``).

The CLI runs in-process through ``diffugrpo_plugin.cli.main`` on our tiny Dream-style checkpoint
and on stand-ins of Dream's and LLaDA's published code (``tests/family_standins.py``), loaded
natively and through their own code; a LLaDA stand-in patched to ignore the attention mask, as
some published LLaDA files do, must be reported as leaking. Subprocesses prove the exit codes
and that no traceback escapes. The memory model is checked term by term against numbers worked
out by hand for a made-up 1B model, and the FLOP model against the DiffuCoder-7B table of docs/concepts/step-cost.md.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diffugrpo_plugin.cli import main as cli_main
from diffugrpo_plugin.tools import step_cost, step_memory
from family_standins import (  # noqa: F401  (session fixtures are used by name)
    dream_standin,
    llada_standin,
    llada_tied_standin,
    save_standin,
    tokenizer,
)

REPO = Path(__file__).resolve().parents[1]
# a small step shape so the estimate's arithmetic stays readable; the defaults are DiffuCoder's recipe
SMALL_STEP = [
    "--batch",
    "2",
    "--prompt-length",
    "32",
    "--completion-length",
    "16",
    "--gpus",
    "2",
    "--rollout-micro-batch",
    "4",
]


def check_model(capsys, *argv: str) -> tuple[int, str, str]:
    """``diffugrpo check-model ARGV`` in-process: (exit code, stdout, stderr)."""
    code = cli_main(["check-model", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_model_json(capsys, *argv: str) -> dict:
    code, out, err = check_model(capsys, *argv, "--json", *SMALL_STEP)
    assert code == 0, err
    assert len(out.splitlines()) == 1, "--json prints exactly one line"
    return json.loads(out)


def report_field(out: str, name: str) -> str:
    """The value printed on the ``  <name>  value`` line of the text report."""
    for line in out.splitlines():
        if line.startswith(f"  {name:<19} "):
            return line[len(f"  {name:<19} ") :]
    raise AssertionError(f"no '{name}' line in:\n{out}")


# ---------------------------------------------------------------------------------------------
# The CLI on real (tiny) checkpoints
# ---------------------------------------------------------------------------------------------


def test_tiny_model_text_report(tiny_model_path, capsys):
    """Our tiny model: a stock Qwen2 run bidirectionally (is_causal: false), shifted, tied head, mask id in config."""
    code, out, err = check_model(capsys, tiny_model_path, *SMALL_STEP)
    assert code == 0, err
    assert report_field(out, "family").startswith("bidirectional (detected from is_causal: false")
    assert report_field(out, "implementation") == (
        "stock transformers: Qwen2ForCausalLM; chosen because the bidirectional family has no native implementation"
    )
    assert report_field(out, "calling convention") == "2D padding mask + position_ids (cumsum of the mask - 1)"
    assert report_field(out, "logit shift").startswith("yes")
    mask_id = tokenizer().mask_token_id
    assert report_field(out, "mask token") == f"{mask_id} '<|mask|>', from model config (mask_token_id)"
    assert report_field(out, "vocabulary head") == "lm_head (weight tied to model.embed_tokens)"
    assert report_field(out, "vocabulary") == f"{len(tokenizer()):,} logits"
    assert report_field(out, "hidden size") == "32"
    assert report_field(out, "layers") == "2 (MLP 64, key/value width 16)"
    assert report_field(out, "lean MLP blocks") == "2 SwiGLU block(s) keep 2 of 4 activations"
    assert report_field(out, "dtype") == "float32"
    assert report_field(out, "padding").startswith("ok: max |diff| ")
    assert report_field(out, "fused head").startswith("ok: max |diff| ")
    assert re.fullmatch(
        r"ok: max \|diff\| 0\.00e\+00 between Qwen2MLP model\.layers\.0\.mlp's own code and its lean "
        r"backward, output and gradients \(tolerance .*\)",
        report_field(out, "lean MLP"),
    )
    assert report_field(out, "coupled log-probs").startswith("ok: mean log p ")
    assert report_field(out, "sampling").startswith("ok: entropy, 8 steps, ")
    assert "total per GPU (held + max(update, rollout))" in out
    for missing in ("allocator fragmentation", "NCCL", "CUDA context"):
        assert missing in out
    assert not err


def test_tiny_model_json_report_and_estimate(tiny_model_path, capsys):
    """--json holds the resolution, every probe and the estimate, which is step_cost's arithmetic on the
    checkpoint's shape; the parameter count (taken without loading weights) matches the loaded model."""
    from transformers import AutoModelForCausalLM

    report = check_model_json(capsys, tiny_model_path)
    resolution = report["resolution"]
    assert (resolution["family"], resolution["implementation"], resolution["logits_shift"]) == (
        "bidirectional",
        "stock",
        True,
    )
    assert (resolution["mask_token_id"], resolution["mask_token_source"]) == (
        tokenizer().mask_token_id,
        "model config (mask_token_id)",
    )
    assert resolution["head_tied"] and resolution["head_parameters"] == 0
    loaded = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert resolution["parameters"] == sum(p.numel() for p in loaded.parameters())
    assert report["ok"] and report["load"]["dtype"] == "float32" and report["load"]["device"] == "cpu"
    padding = report["padding"]
    assert padding["ok"] and padding["max_abs_diff"] <= padding["tolerance"] and padding["padding"] > 0
    logprob = report["logprob"]
    assert logprob["ok"] and logprob["finite_logprobs"] and logprob["finite_gradients"]
    assert logprob["views"] == 3 and logprob["head_rows"] == 2 * logprob["tokens"] > 0
    assert report["sampling"]["ok"] and report["sampling"]["sampler"] == "entropy"
    assert report["sampling"]["new_tokens"] == len(report["sampling"]["token_ids"]) <= 16
    assert report["lean_mlp"]["ok"] and report["lean_mlp"]["max_abs_diff"] == 0.0

    estimate = report["estimate"]
    setup = step_memory.StepSetup(**estimate["setup"])
    assert (setup.batch, setup.tokens, setup.gpus, setup.rollout_micro_batch) == (2, 48, 2, 4)
    shape = step_memory.ModelShape(
        parameters=resolution["parameters"],
        vocab=resolution["vocab_size"],
        hidden=32,
        layers=2,
        intermediate=64,
        kv_dim=16,
        embedding_parameters=resolution["vocab_size"] * 32,
        head_parameters=0,
    )
    expected = step_memory.memory_estimate(shape, setup)
    assert estimate["memory"]["total_bytes"] == pytest.approx(expected.total_bytes)
    assert [t["name"] for t in estimate["memory"]["terms"]] == [t.name for t in expected.terms]
    assert estimate["memory"]["not_counted"] == list(step_memory.NOT_COUNTED)
    flops = estimate["flops"]
    assert flops["forward"] == 2 * resolution["parameters"] * 2 * 48
    assert flops["generation"] == 256 * flops["forward"]  # --diffusion-steps default: DiffuCoder's 256
    assert flops["update"] == 2 * 3 * 4 * flops["forward"]  # 2 iterations x 3 views x 4F (checkpointing)


def test_config_only_reads_no_weights(tiny_model_path, capsys):
    code, out, err = check_model(capsys, tiny_model_path, "--config-only", *SMALL_STEP)
    assert code == 0, err
    assert "probes:" not in out and "total per GPU" in out
    report = check_model_json(capsys, tiny_model_path, "--config-only")
    assert report["load"] is None and report["padding"] is None and report["ok"]
    assert (report["estimate"]["setup"]["views"], report["estimate"]["setup"]["scored_rows_per_token"]) == (3, 2)
    d1 = check_model_json(capsys, tiny_model_path, "--config-only", "--masker", "d1", "--no-reference")
    assert (d1["estimate"]["setup"]["views"], d1["estimate"]["setup"]["scored_rows_per_token"]) == (1, 1)
    assert d1["estimate"]["setup"]["reference_dtype"] is None and d1["estimate"]["flops"]["ref_logprobs"] == 0
    assert d1["estimate"]["flops"]["update"] == 2 * 1 * 4 * d1["estimate"]["flops"]["forward"]


def test_config_only_on_a_diffucoder_7b_config(tmp_path, capsys):
    """DiffuCoder-7B's config.json (Qwen2.5-7B shape, model_type Dream) beside a tokenizer: no weights needed
    for the resolution and the estimate; the parameter count is Qwen2.5-7B's published 7,615,616,512."""
    config = {
        "architectures": ["DreamModel"],
        "model_type": "Dream",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "mask_token_id": 151666,
        "pad_token_id": 151643,
        "eos_token_id": 151643,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
    }
    path = write_config(tmp_path / "diffucoder_7b", config)
    tokenizer().save_pretrained(path)
    code, out, err = check_model(capsys, path, "--config-only", "--json")  # the defaults: DiffuCoder's recipe
    assert code == 0, err
    report = json.loads(out)
    resolution = report["resolution"]
    assert resolution["parameters"] == 7_615_616_512
    assert (resolution["family"], resolution["implementation"], resolution["logits_shift"]) == ("dream", "native", True)
    assert (resolution["mask_token_id"], resolution["mask_token_source"]) == (151666, "model config (mask_token_id)")
    assert (resolution["head"], resolution["head_tied"], resolution["vocab_size"]) == ("lm_head", False, 152064)
    assert (resolution["layers"], resolution["intermediate_size"], resolution["kv_dim"]) == (28, 18944, 512)
    assert resolution["checkpoint_dtype"] == "bfloat16"
    memory = report["estimate"]["memory"]
    terms = {term["name"]: term["bytes"] for term in memory["terms"]}
    assert terms["policy: fp32 params + AdamW moments (sharded)"] == 12 * 7_615_616_512 / 8
    assert terms["policy: sharded grads (fp32)"] == 4 * 7_615_616_512 / 8
    assert terms["rollout policy copy (bf16, unsharded)"] == 2 * 7_615_616_512
    assert 40 < memory["total_gib"] < 80  # fits an 80 GB GPU, with room for what is not counted
    assert resolution["lean_mlp"] == "28 SwiGLU block(s) keep 2 of 4 activations"
    stock = json.loads(check_model(capsys, path, "--config-only", "--json", "--no-lean-mlp")[1])
    assert (report["estimate"]["setup"]["lean_mlp"], stock["estimate"]["setup"]["lean_mlp"]) == (True, False)
    stock_terms = {term["name"]: term["bytes"] for term in stock["estimate"]["memory"]["terms"]}
    layer = "activations: one layer recomputed + its backward"
    # 5 completions x 3 views x 456 tokens x bf16 x (2 fewer saved activations, 1 more in the backward) x 18,944
    assert stock_terms[layer] - terms[layer] == 5 * 3 * 456 * 2 * (2 - 1) * 18944
    assert report["estimate"]["flops"]["forward"] == 2 * 7_615_616_512 * 5 * 456


STANDIN_EXPECTED = {
    # name: family, clue, shift, head, tied, natural sampler
    "dream": ("dream", "model_type 'Dream'", True, "lm_head", False, "entropy"),
    "llada": ("llada", "model_type 'llada'", False, "model.transformer.ff_out", False, "llada"),
    "llada_tied": (
        "llada",
        "model_type 'llada'",
        False,
        "no head module: logits project with model.transformer.wte.weight (tied)",
        True,
        "llada",
    ),
}


@pytest.mark.parametrize("implementation", ["auto", "remote"])
@pytest.mark.parametrize("name", list(STANDIN_EXPECTED))
def test_family_standins(request, name, implementation, capsys):
    """Dream and LLaDA (untied and tied) checkpoints, natively and through their own code: the family, shift,
    mask id (the tokenizer's, never LLaDA's OLMo default 50256), head and tiedness are right, and every probe
    passes (these models mask padding)."""
    path = request.getfixturevalue(f"{name}_standin")
    extra = ["--trust-remote-code", "--implementation", "remote"] if implementation == "remote" else []
    report = check_model_json(capsys, path, *extra)
    resolution = report["resolution"]
    family, clue, shift, head, tied, sampler = STANDIN_EXPECTED[name]
    assert (resolution["family"], resolution["detected_from"], resolution["logits_shift"]) == (family, clue, shift)
    assert (resolution["head"], resolution["head_tied"]) == (head, tied)
    assert resolution["mask_token_id"] == tokenizer().mask_token_id
    assert resolution["vocab_size"] == len(tokenizer()) and resolution["hidden_size"] == 32
    assert (resolution["layers"], resolution["intermediate_size"], resolution["kv_dim"]) == (2, 64, 16)
    if implementation == "remote":
        assert resolution["implementation"] == "remote"
        assert report["load"]["model_class"].startswith("transformers_modules.")
    else:
        assert resolution["implementation"] == "native"
        assert report["load"]["model_class"].startswith(f"diffugrpo_plugin.models.native.{family}.")
    assert resolution["model_class"].rsplit(".", 1)[-1] == report["load"]["model_class"].rsplit(".", 1)[-1]
    assert all(report[probe]["ok"] for probe in ("padding", "head", "logprob", "sampling")), report
    assert report["sampling"]["sampler"] == sampler
    assert resolution["embedding_parameters"] == len(tokenizer()) * 32
    assert resolution["head_parameters"] == (0 if tied else len(tokenizer()) * 32)
    # the training engine's lean SwiGLU blocks: everywhere but in LLaDA's published code (its block computes the
    # feed-forward inline), and the memory estimate follows
    inline = family == "llada" and implementation == "remote"
    assert resolution["lean_mlp_everywhere"] is not inline
    assert report["lean_mlp"] is None if inline else report["lean_mlp"]["ok"]
    assert resolution["lean_mlp"] == (
        "0 SwiGLU block(s) keep 2 of 4 activations; 2 left stock: LLaDALlamaBlock has no "
        "feed_forward() of its own (its code computes the feed-forward inline)"
        if inline
        else "2 SwiGLU block(s) keep 2 of 4 activations"
    )
    assert report["estimate"]["setup"]["lean_mlp"] is not inline


@pytest.fixture(scope="module")
def leaky_llada(tmp_path_factory) -> str:
    """A LLaDA stand-in whose own code ignores the attention mask, as some published LLaDA files do."""
    path = save_standin("llada", tmp_path_factory.mktemp("standins") / "standin_llada_leaky", seed=2)
    code = path / "modeling_llada.py"
    source = code.read_text()
    masking = "if attention_mask is not None and 0.0 in attention_mask:"
    assert masking in source
    code.write_text(source.replace(masking, "if False:  # this copy ignores the attention mask"))
    return str(path)


def test_code_that_ignores_the_attention_mask_leaks(leaky_llada, capsys):
    """Through its own code the padding probe reports LEAKS (exit 1); the native class, which masks padding,
    loads the same weights and passes."""
    code, out, err = check_model(capsys, leaky_llada, "--trust-remote-code", "--implementation", "remote", *SMALL_STEP)
    assert code == 1, err
    assert report_field(out, "padding").startswith("LEAKS: max |diff| ")
    assert "does not hide padded keys" in out
    assert report_field(out, "coupled log-probs").startswith("ok")
    code, out, err = check_model(capsys, leaky_llada, *SMALL_STEP)
    assert code == 0, err
    assert report_field(out, "padding").startswith("ok")


def test_code_that_changes_its_logits_unknown_to_the_family_fails_the_fused_head_probe(tmp_path_factory, capsys):
    """A LLaDA stand-in that always scales its logits, whatever its config's scale_logits says: the training
    pass (fused head, scale from the config) would score other log-probs than the model's, so the probe says
    DIFFERS and exits 1."""
    path = save_standin("llada", tmp_path_factory.mktemp("standins") / "standin_llada_rescaled", seed=3)
    code = path / "modeling_llada.py"
    source = code.read_text()
    scaling = "if self.config.scale_logits:"
    assert scaling in source
    code.write_text(source.replace(scaling, "if True:  # this copy always scales its logits"))
    exit_code, out, err = check_model(
        capsys, str(path), "--trust-remote-code", "--implementation", "remote", *SMALL_STEP
    )
    assert exit_code == 1, err
    assert report_field(out, "fused head").startswith("DIFFERS: max |diff| ")
    assert "logit_scale" in out


def test_a_swiglu_block_whose_code_is_not_the_familys_fails_the_lean_mlp_probe(tmp_path_factory, capsys):
    """A Dream stand-in whose MLP halves its output: the lean backward (the family's SwiGLU) would train another
    function than the model computes, so the probe says DIFFERS, names the switch, and exits 1."""
    path = save_standin("dream", tmp_path_factory.mktemp("standins") / "standin_dream_halved_mlp", seed=4)
    code = path / "modeling_dream.py"
    source = code.read_text()
    mlp = "return self.down_proj(self.act_fn(self.gate_proj(hidden)) * self.up_proj(hidden))"
    assert mlp in source
    code.write_text(
        source.replace(
            mlp,
            "return 0.5 * self.down_proj(self.act_fn(self.gate_proj(hidden)) * "
            "self.up_proj(hidden))  # this copy halves its MLP",
        )
    )
    exit_code, out, err = check_model(
        capsys, str(path), "--trust-remote-code", "--implementation", "remote", *SMALL_STEP
    )
    assert exit_code == 1, err
    assert report_field(out, "lean MLP").startswith("DIFFERS: max |diff| ")
    assert "between DreamMLP model.layers.0.mlp's own code" in out and "diffusion.lean_mlp=false" in out
    assert report_field(out, "fused head").startswith("ok")


# ---------------------------------------------------------------------------------------------
# Errors: one line, exit 2
# ---------------------------------------------------------------------------------------------


def write_config(directory: Path, config: dict) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


@pytest.fixture
def error_case(request, tmp_path):
    """(argv, expected fragments) of each error case."""
    case = request.param
    if case == "missing path":
        return [str(tmp_path / "nope")], ["does not exist"]
    if case == "no config.json":
        return [str(tmp_path)], ["has no config.json"]
    if case == "no family fits":
        path = write_config(tmp_path / "mystery", {"model_type": "mystery", "architectures": ["MysteryModel"]})
        return [path], ["cannot tell which diffusion-LM family", "'mystery'", "--family"]
    if case == "unknown family":
        return [request.getfixturevalue("dream_standin"), "--family", "dreem"], ["dreem", "llada"]
    if case == "remote not trusted":
        return [request.getfixturevalue("dream_standin"), "--implementation", "remote"], ["--trust-remote-code"]
    if case == "settings need remote code":
        from diffugrpo_plugin.models.load_plan import read_model_config

        config = {**read_model_config(request.getfixturevalue("llada_standin")), "block_type": "sequential"}
        return [write_config(tmp_path / "sequential", config)], ["block_type='sequential'", "--trust-remote-code"]
    if case == "bad batch":
        return [str(tmp_path), "--batch", "0"], ["--batch must be at least 1"]
    raise AssertionError(case)


ERROR_CASES = [
    "missing path",
    "no config.json",
    "no family fits",
    "unknown family",
    "remote not trusted",
    "settings need remote code",
    "bad batch",
]


@pytest.mark.parametrize("error_case", ERROR_CASES, indirect=True)
def test_errors_are_one_line_and_exit_2(error_case, capsys):
    argv, fragments = error_case
    code, out, err = check_model(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("diffugrpo check-model: error: "), err
    for fragment in fragments:
        assert fragment in err


def run_module(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "diffugrpo_plugin.cli", "check-model", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


@pytest.mark.slow
def test_subprocess_exit_codes_and_no_traceback(tiny_model_path, tmp_path):
    """As a user runs it: 0 with one JSON line; 2 with one stderr line for a missing path and for a config no
    family fits (which fails after torch and transformers are loaded); never a traceback."""
    mystery = write_config(tmp_path / "mystery", {"model_type": "mystery"})
    runs = [(tiny_model_path, "--json", *SMALL_STEP), (str(tmp_path / "nope"),), (mystery,)]
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:  # three interpreters at once
        done, *refused = pool.map(lambda argv: run_module(*argv), runs)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True
    assert "Traceback" not in done.stderr
    for done, fragment in zip(refused, ("does not exist", "cannot tell which")):
        assert done.returncode == 2
        assert done.stdout == "" and "Traceback" not in done.stderr
        assert len(done.stderr.splitlines()) == 1 and fragment in done.stderr, done.stderr


def test_help_and_step_cost_import_no_torch():
    """`diffugrpo --help` stays instant (no torch), check-model is listed, and step_cost is pure arithmetic."""
    script = (
        "import sys, io, contextlib\n"
        "import diffugrpo_plugin.tools.step_cost\n"
        "from diffugrpo_plugin.cli import build_parser\n"
        "text = build_parser().format_help()\n"
        "print('check-model' in text, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.stdout.split() == ["True", "False"], done.stderr


# ---------------------------------------------------------------------------------------------
# step_cost: memory by hand
# ---------------------------------------------------------------------------------------------

# A made-up 1B model with round numbers: vocabulary 50,000, hidden 2048, 16 layers, MLP 8192, key/value
# width 512, untied head. Embedding = head = 50,000 x 2048 = 102.4M parameters; the 16 layers share the rest.
ONE_B = step_memory.ModelShape(
    parameters=1_000_000_000,
    vocab=50_000,
    hidden=2048,
    layers=16,
    intermediate=8192,
    kv_dim=512,
    embedding_parameters=102_400_000,
    head_parameters=102_400_000,
)
# 4 completions of 100 + 150 tokens per micro-batch on each of 4 GPUs; the sampler denoises 8 at once.
ONE_B_STEP = step_memory.StepSetup(
    batch=4,
    prompt_length=100,
    completion_length=150,
    gpus=4,
    gradient_checkpointing=True,
    param_dtype="bf16",
    reference_dtype="fp32",
    rollout_dtype="bf16",
    rollout_micro_batch=8,
    chunk_rows=1000,
    logits_shift=True,
)


def terms_by_name(estimate: step_memory.MemoryEstimate) -> dict[str, tuple[str, float]]:
    return {term.name: (term.phase, term.bytes) for term in estimate.terms}


def test_memory_terms_by_hand_with_checkpointing():
    layer = (1e9 - 204.8e6) / 16  # parameters of one decoder layer: 49.7M
    tokens = 3 * 4 * 250  # 3 views x 4 completions x (100 + 150) tokens = 3,000 token rows per forward
    # bf16 compute, per token: an RMSNorm saves its input in fp32 (4 x 2048) plus two bf16 outputs (2 x 2 x 2048)
    norm = 4 * 2048 + 2 * 2 * 2048  # = 16,384 bytes
    # a layer: two norms + bf16 x (q, attention output 2 x 2048; k, v 2 x 512; four MLP activations 4 x 8192)
    layer_saved = 2 * norm + 2 * (2 * 2048 + 2 * 512 + 4 * 8192)  # = 108,544 bytes
    # the training engine's lean SwiGLU blocks save two of the four: 108,544 - 2 x 2 x 8192 = 75,776 bytes
    lean_layer_saved = 2 * norm + 2 * (2 * 2048 + 2 * 512 + 2 * 8192)
    # hidden-state gradients (2 x 2048) and the lean MLP's backward buffers (3 x 8192) of one layer = 57,344 bytes
    backward = 2 * (2 * 2048 + 3 * 8192)
    rows = 2 * 4 * 150  # coupled: two head rows per completion token = 1,200
    expected = {
        "policy: fp32 params + AdamW moments (sharded)": ("held", (4 + 4 + 4) * 1e9 / 4),  # 3.0e9
        # 1.0e9, in pinned host memory: verl offloads every forward-only module
        "reference model (fp32, sharded)": ("host", 4 * 1e9 / 4),
        "rollout policy copy (bf16, unsharded)": ("held", 2 * 1e9),  # 2.0e9: unsharded
        "policy: sharded grads (fp32)": ("update", 4 * 1e9 / 4),  # 1.0e9: freed when the update ends
        "FSDP gathered params (bf16)": ("update", 2 * (204.8e6 + 2 * layer)),  # 608.4e6
        "FSDP unsharded grads (bf16)": ("update", 2 * (204.8e6 + layer)),  # 509.0e6
        "activations: kept layer inputs (checkpointing)": ("update", tokens * (16 * 2048 * 2 + norm)),  # 245.76e6
        # 399.4e6
        "activations: one layer recomputed + its backward": ("update", tokens * (lean_layer_saved + backward)),
        "fused head: saved rows (bf16) + their fp32 gradient": ("update", rows * 2048 * (2 + 4)),  # 14.7e6
        # 16,384 columns (the GPU width; the cap 1000 x 50k elements allows 41,666) x 1,200 rows x (fp32 buffer, bf16
        # slice, two entropy temporaries) = 275.3e6
        "fused head: one vocabulary slice of logits": ("update", 16384 * rows * (4 + 2 + 8)),
        "sampler: model logits (bf16)": ("rollout", 2 * 8 * 250 * 50_000 * 2),  # 400e6, x2: shifted logits aligned
        "sampler: fp32 window buffers": ("rollout", 10 * 8 * 150 * 50_000 * 4),  # 2.4e9: 10 copies at top-p's peak
        "sampler: prefix KV cache (bf16)": ("rollout", 2 * 16 * 8 * 100 * 512 * 2),  # 26.2e6: k and v, every layer
        "sampler: one layer's forward working set": ("rollout", 8 * 250 * layer_saved),  # 217.088e6
    }
    estimate = step_memory.memory_estimate(ONE_B, ONE_B_STEP)
    found = terms_by_name(estimate)
    assert list(found) == list(expected)
    for name, (phase, value) in expected.items():
        assert found[name][0] == phase, name
        assert found[name][1] == pytest.approx(value, rel=1e-12), name
    held, update, rollout = 5.0e9, 3_052_516_800, 3_043_302_400
    assert estimate.phase_bytes("held") == pytest.approx(held)
    assert estimate.phase_bytes("host") == pytest.approx(1.0e9)
    assert estimate.phase_bytes("update") == pytest.approx(update)
    assert estimate.phase_bytes("rollout") == pytest.approx(rollout)
    assert estimate.peak_phase == "update"
    assert estimate.total_bytes == pytest.approx(held + update)  # training and sampling never overlap
    assert estimate.total_gib == pytest.approx(8_052_516_800 / 2**30)
    table = step_memory.format_memory_table(estimate)
    assert f"{8_052_516_800 / 2**30:>9.3f}  peak in update" in table and "phases (GiB): held 4.657" in table
    # the 4 workers' reference shards, 1e9 bytes each, on their node's host
    assert f"{1e9 / 2**30:.3f} GiB per trainer worker, {4e9 / 2**30:.3f} GiB for the 4 on a node" in table


def test_the_block_layout_doubles_the_trained_tokens_and_adds_its_mask():
    """A block-diffusion model's coupled pass runs each view as [x_t | x_0] (2 x 250 = 500 tokens) under a boolean
    [500, 500] mask per sequence: by hand on ONE_B_STEP (checkpointing, lean MLP), only those terms change."""
    plain = terms_by_name(step_memory.memory_estimate(ONE_B, ONE_B_STEP))
    block = terms_by_name(step_memory.memory_estimate(ONE_B, dataclasses.replace(ONE_B_STEP, block_layout=True)))
    rows = 3 * 4 * 500  # 3 views x 4 completions x 2 x (100 + 150) tokens = 6,000 token rows
    norm = 4 * 2048 + 2 * 2 * 2048
    lean_layer_saved = 2 * norm + 2 * (2 * 2048 + 2 * 512 + 2 * 8192)
    backward = 2 * (2 * 2048 + 3 * 8192)
    changed = {
        "activations: kept layer inputs (checkpointing)": ("update", rows * (16 * 2048 * 2 + norm)),  # 491.52e6
        "activations: one layer recomputed + its backward": ("update", rows * (lean_layer_saved + backward)),
        "block layout: boolean [x_t | x_0] attention mask": ("update", 12 * 500 * 500),  # 3.0e6, 1 byte each
    }
    assert set(block) == set(plain) | set(changed)
    for name, (phase, value) in block.items():
        assert (phase, value) == (changed[name] if name in changed else plain[name]), name
    # 245.76e6 + 399.36e6 more activations (twice the tokens) and the 3.0e6 mask
    update = sum(value for phase, value in block.values() if phase == "update")
    assert update - sum(value for phase, value in plain.values() if phase == "update") == pytest.approx(648.12e6)


def test_the_sampler_takes_as_many_rows_as_its_budget_allows():
    # per row: logits 2 x 250 x 50,000 x 2 B = 50e6, fp32 window buffers 10 x 150 x 50,000 x 4 B = 300e6; 350e6
    row = 2 * 250 * 50_000 * 2 + 10 * 150 * 50_000 * 4
    for budget_gib, rows_cap, want in ((1.0, None, 3), (16.0, None, 49), (16.0, 40, 40), (0.1, None, 1)):
        setup = dataclasses.replace(
            ONE_B_STEP, rollout_micro_batch=None, sampler_budget_gib=budget_gib, rollout_rows=rows_cap
        )
        estimate = step_memory.memory_estimate(ONE_B, setup)
        assert estimate.sampler_rows == want == max(1, min(rows_cap or 10**9, int(budget_gib * 2**30 // row)))
        logits_and_window = (
            terms_by_name(estimate)["sampler: model logits (bf16)"][1]
            + terms_by_name(estimate)["sampler: fp32 window buffers"][1]
        )
        assert logits_and_window == want * row


def test_memory_model_uses_the_fused_heads_own_constants():
    from diffugrpo_plugin.models import kernels

    assert step_memory.StepSetup(batch=1, prompt_length=1, completion_length=1).chunk_rows == kernels.DEFAULT_CHUNK_ROWS
    assert (
        step_memory.StepSetup(batch=1, prompt_length=1, completion_length=1).slice_columns == kernels.SLICE_COLUMNS_GPU
    )


def test_memory_terms_by_hand_without_checkpointing_reference_or_shift():
    setup = step_memory.StepSetup(
        batch=4,
        prompt_length=100,
        completion_length=150,
        gpus=4,
        gradient_checkpointing=False,
        reference_dtype=None,
        rollout_micro_batch=8,
        chunk_rows=4096,
        logits_shift=False,
    )
    found = terms_by_name(step_memory.memory_estimate(ONE_B, setup))
    assert "reference model (fp32, sharded)" not in found
    # every lean layer keeps 75,776 bytes per token, plus the final norm's 16,384; its backward 57,344
    assert found["activations: every layer's saved tensors"][1] == 3000 * (16 * 75_776 + 16_384)
    assert found["activations: backward gradients of one layer"][1] == 3000 * 57_344
    # with the model's own MLPs (diffusion.lean_mlp=false): 108,544 and 2 x (2 x 2048 + 2 x 8192) = 40,960
    stock = terms_by_name(step_memory.memory_estimate(ONE_B, dataclasses.replace(setup, lean_mlp=False)))
    assert stock["activations: every layer's saved tensors"][1] == 3000 * (16 * 108_544 + 16_384)
    assert stock["activations: backward gradients of one layer"][1] == 3000 * 40_960
    assert found["fused head: one vocabulary slice of logits"][1] == 16384 * 1200 * 14  # slice_columns binds
    fp32 = step_memory.memory_estimate(
        ONE_B,
        step_memory.StepSetup(
            batch=4, prompt_length=100, completion_length=150, param_dtype="fp32", rollout_dtype="fp32", chunk_rows=128
        ),
    )
    in_fp32 = terms_by_name(fp32)
    # fp32: no copy of the slice; chunk_rows 128 caps it at 128 x 50k / 1,200 rows = 5,333 columns
    assert in_fp32["fused head: one vocabulary slice of logits"][1] == 5333 * 1200 * (4 + 8)
    capped = terms_by_name(
        step_memory.memory_estimate(
            ONE_B, step_memory.StepSetup(batch=4, prompt_length=100, completion_length=150, chunk_rows=1)
        )
    )
    assert capped["fused head: one vocabulary slice of logits"][1] == 41 * 1200 * 14  # 1 x 50k elements: 41 columns
    assert in_fp32["fused head: saved rows (fp32) + their fp32 gradient"][1] == 1200 * 2048 * (4 + 4)
    assert in_fp32["FSDP gathered params (fp32)"][1] == pytest.approx(4 * (204.8e6 + 2 * (1e9 - 204.8e6) / 16))
    assert found["sampler: model logits (bf16)"][1] == 1 * 8 * 250 * 50_000 * 2  # unshifted: no aligned copy
    reference_sampler = step_memory.StepSetup(batch=4, prompt_length=100, completion_length=150, sampler_kv_cache=False)
    assert "sampler: prefix KV cache (bf16)" not in terms_by_name(step_memory.memory_estimate(ONE_B, reference_sampler))


@pytest.mark.parametrize("lean", [False, True], ids=["stock", "lean"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["dream", "llada"])
def test_layer_saved_bytes_match_autograd(kind, dtype, lean):
    """step_cost's per-layer activation count equals what autograd saves in one decoder layer of a Qwen2-bodied
    Dream model and of our native LLaDA (counted with saved_tensors_hooks), up to RoPE's cos/sin; with the
    training engine's lean SwiGLU blocks too."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from diffugrpo_plugin.models.families import DREAM, LLADA
    from diffugrpo_plugin.models.lean_mlp import make_lean
    from diffugrpo_plugin.models.native.llada import LLaDAConfig, LLaDAModelLM

    hidden, inner, heads, kv_heads, batch, length = 128, 512, 8, 2, 2, 32
    torch_dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    if kind == "dream":
        config = Qwen2Config(
            vocab_size=64,
            hidden_size=hidden,
            intermediate_size=inner,
            num_hidden_layers=1,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
        )
        config.is_causal = False
        model = Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa")
        layer_of = lambda m: m.model.layers[0]  # noqa: E731
    else:
        config = LLaDAConfig(
            d_model=hidden,
            n_heads=heads,
            n_kv_heads=kv_heads,
            n_layers=1,
            mlp_hidden_size=inner,
            block_type="llama",
            layer_norm_type="rms",
            activation_type="silu",
            rope=True,
            vocab_size=64,
            embedding_size=64,
            attention_dropout=0.0,
            residual_dropout=0.0,
            embedding_dropout=0.0,
        )
        model = LLaDAModelLM._from_config(config, attn_implementation="sdpa")
        layer_of = lambda m: m.model.transformer.blocks[0]  # noqa: E731
    model = model.to(torch_dtype).train()
    if lean:
        assert make_lean(model, (DREAM if kind == "dream" else LLADA).swiglu).installed == 1
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}
    inputs: list = []

    def keep(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    def hooked(module, args, kwargs):  # count only inside the layer: its input arrives from outside
        inputs.append(torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor))
        inputs[-1].__enter__()

    def unhooked(module, args, kwargs, output):
        inputs.pop().__exit__(None, None, None)

    layer = layer_of(model)
    layer.register_forward_pre_hook(hooked, with_kwargs=True)
    layer.register_forward_hook(unhooked, with_kwargs=True)
    model(input_ids=torch.randint(0, 60, (batch, length)))
    shape = step_memory.ModelShape(
        parameters=0,
        vocab=64,
        hidden=hidden,
        layers=1,
        intermediate=inner,
        kv_dim=kv_heads * hidden // heads,
        embedding_parameters=0,
    )
    predicted = step_memory.layer_saved_bytes(shape, 2 if dtype == "bfloat16" else 4, lean_mlp=lean)
    measured = sum(saved.values()) / (batch * length)
    assert predicted <= measured <= 1.05 * predicted, (measured, predicted)


def test_memory_units_and_dtypes():
    assert step_memory.policy_state_bytes(1e9, 8) == 1.5e9  # 12 bytes per parameter (params, 2 moments) over 8 shards
    assert step_memory.sharded_grad_bytes(1e9, 8) == 0.5e9  # 4 bytes per parameter over 8 shards, update only
    assert step_memory.reference_bytes(1e9, 8, "bf16") == 0.25e9
    assert step_memory.rollout_copy_bytes(7e9, "bfloat16") == 14e9
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        step_cost.dtype_bytes("int8")
    tied = step_memory.ModelShape(
        parameters=1000, vocab=10, hidden=10, layers=2, intermediate=40, kv_dim=10, embedding_parameters=100
    )
    assert tied.root_parameters == 100 and tied.layer_parameters == 450


# ---------------------------------------------------------------------------------------------
# step_cost: FLOPs against docs/concepts/step-cost.md
# ---------------------------------------------------------------------------------------------


def test_flops_of_the_readme_cpu_job():
    """The default CPU job: 32 diffusion steps, one iteration, no checkpointing -> 32 : 15 = 2.1."""
    flops = step_cost.step_flops(parameters=1.0e6, sequences=16, tokens=208, diffusion_steps=32)
    f = 2 * 1.0e6 * 16 * 208
    assert flops.forward == f
    assert (flops.generation, flops.old_logprobs, flops.ref_logprobs, flops.update) == (32 * f, 3 * f, 3 * f, 9 * f)
    assert round(flops.generation / flops.training, 1) == 2.1
    no_kl = step_cost.step_flops(1.0e6, 16, 208, 32, iterations=2, gradient_checkpointing=True, reference=False)
    assert (no_kl.ref_logprobs, no_kl.update) == (0, 2 * 3 * 4 * f)


def test_flops_of_diffucoder_7b():
    recipe = step_cost.DIFFUCODER_7B
    f = 2 * 7.6e9 * 80 * 456
    flops = recipe.flops()
    assert flops.forward == pytest.approx(f) and f"{f:.1e}" == "5.5e+14"
    assert flops.generation == pytest.approx(256 * f)
    assert flops.old_logprobs == flops.ref_logprobs == pytest.approx(2 * 3 * f)
    assert flops.update == pytest.approx(2 * 3 * 4 * f)
    assert flops.total == pytest.approx((256 + 6 + 6 + 24) * f)
    rate = 8 * 989e12 * 0.4
    assert recipe.seconds(flops.total) == pytest.approx(292 * f / rate)
    assert step_cost.flop_table_markdown(recipe).splitlines() == [
        "| stage | FLOPs | seconds on 8 x H100 at 40% of 989 TFLOP/s |",
        "|---|---|---|",
        "| generation (256 x F) | 1.42e17 | 45 (72 if, as on CPU, sampling runs 1.6x less efficiently) |",
        "| old log-probs (2 x 3F) | 3.33e15 | 1.1 |",
        "| reference log-probs (2 x 3F) | 3.33e15 | 1.1 |",
        "| update (2 x 3 views x 4F) | 1.33e16 | 4.2 |",
        "| **step** | **1.62e17** | **~51-78 s** |",
    ]


def _matches(written: str, value: float) -> bool:
    """Whether ``value`` rounds to ``written`` at the precision it is written with (``3.3e15``, ``45``, ``1.1``)."""
    written = written.strip("*~ s")
    mantissa = written.split("e")[0]
    digits = len(mantissa.replace(".", "").lstrip("0"))
    return float(f"{value:.{max(digits, 1) - 1}e}") == pytest.approx(float(written), rel=1e-9)


def test_readme_7b_table_comes_from_step_cost():
    """Every number of the DiffuCoder-7B table in docs/concepts/step-cost.md (and F) is what step_cost computes,
    at the precision the page writes it."""
    text = (REPO / "docs" / "concepts" / "step-cost.md").read_text()
    section = text[text.index("Paper estimate for DiffuCoder-7B") :]
    section = section[: section.index("\n\n", section.index("| **step**"))]
    recipe = step_cost.DIFFUCODER_7B
    flops = recipe.flops()
    f_written = re.search(r"= ([0-9.]+e[0-9]+)` FLOPs", section).group(1)
    assert _matches(f_written, flops.forward)
    slow = recipe.sampling_slowdown
    rows = {
        "generation": (flops.generation, [recipe.seconds(flops.generation), recipe.seconds(flops.generation) * slow]),
        "old log-probs": (flops.old_logprobs, [recipe.seconds(flops.old_logprobs)]),
        "reference log-probs": (flops.ref_logprobs, [recipe.seconds(flops.ref_logprobs)]),
        "update": (flops.update, [recipe.seconds(flops.update)]),
        "**step**": (
            flops.total,
            [recipe.seconds(flops.total), recipe.seconds(flops.total) + recipe.seconds(flops.generation) * (slow - 1)],
        ),
    }
    seen = set()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        label = next((name for name in rows if cells[0].startswith(name)), None)
        if label is None or len(cells) != 3:
            continue
        seen.add(label)
        total, times = rows[label]
        assert _matches(cells[1], total), (label, cells[1], total)
        written_times = re.findall(r"[0-9]+(?:\.[0-9]+)?", cells[2])[: len(times)]
        assert len(written_times) == len(times), (label, cells[2])
        for written, value in zip(written_times, times):
            assert _matches(written, value), (label, written, value)
    assert seen == set(rows)
    assert math.isclose(flops.generation / flops.total, 256 / 292)  # "Generation is ~88% of the FLOPs"
    assert "~88% of the FLOPs" in text


def test_lora_memory_terms_by_hand():
    """LoRA (10M adapter parameters) on the 1B model, weights stored in bf16: frozen base 2 B per parameter, the
    adapters' param and two AdamW moments in bf16 (their grad during the update only) (verl casts adapters to the base's dtype), no reference
    copy, the rollout holding base + adapters, and only the adapters' gradients unsharded."""
    setup = dataclasses.replace(ONE_B_STEP, lora_parameters=10_000_000, model_dtype="bf16")
    found = terms_by_name(step_memory.memory_estimate(ONE_B, setup))
    assert found["policy: frozen base weights (bf16, sharded)"] == ("held", 2 * 1e9 / 4)
    assert found["LoRA adapters: params + AdamW moments (bf16, sharded)"] == ("held", 3 * 2 * 10e6 / 4)
    assert found["LoRA adapters: sharded grads (bf16)"] == ("update", 2 * 10e6 / 4)
    assert found["reference model: the base without adapters"] == ("held", 0.0)
    assert found["rollout policy copy (bf16, unsharded)"] == ("held", 2 * (1e9 + 10e6))
    assert found["FSDP unsharded adapter grads (bf16)"] == ("update", 2 * 10e6)
    assert "FSDP unsharded grads (bf16)" not in found and "reference model (fp32, sharded)" not in found
    # adapter dropout on adapters whose inputs add up to 6144 elements per token and layer: with checkpointing one
    # layer's dropped inputs (bf16) and masks (1 byte) at a time, over the 3,000 token rows; without, all 16 layers'
    dropout = dataclasses.replace(setup, lora_dropout_inputs=6144)
    term = "activations: adapter dropout's kept inputs"
    assert terms_by_name(step_memory.memory_estimate(ONE_B, dropout))[term] == ("update", 3000 * 6144 * 3)
    no_checkpointing = dataclasses.replace(dropout, gradient_checkpointing=False)
    assert terms_by_name(step_memory.memory_estimate(ONE_B, no_checkpointing))[term] == ("update", 3000 * 16 * 6144 * 3)
    assert term not in found
    full = terms_by_name(step_memory.memory_estimate(ONE_B, dataclasses.replace(ONE_B_STEP, model_dtype="bf16")))
    assert full["policy: bf16 params + AdamW moments (sharded)"] == ("held", 3 * 2 * 1e9 / 4)


def test_qlora_memory_terms_by_hand():
    """A 4-bit base (QLoRA) under the same adapters: of the 1B model's weights, 700M are 4-bit (every linear layer's
    but the head's), at 0.5 + 1/64 + 4/16384 bytes each, whole on each of the 4 GPUs; the other 300M stay bf16 and
    sharded. The rollout copy holds the same 4-bit weights; FSDP gathers only the layers' other weights (1M of each
    layer's 44.6M here), and one 2048 x 8192 MLP weight is dequantized at a time."""
    setup = dataclasses.replace(
        ONE_B_STEP, lora_parameters=10_000_000, model_dtype="bf16", four_bit_parameters=700_000_000
    )
    found = terms_by_name(step_memory.memory_estimate(ONE_B, setup))
    per_weight = 0.5 + 1 / 64 + 4 / 16384
    assert found["policy: frozen 4-bit weights (whole on every GPU)"] == ("held", pytest.approx(700e6 * per_weight))
    assert found["policy: frozen base weights (bf16, sharded), but the 4-bit ones"] == ("held", 2 * 300e6 / 4)
    assert found["rollout policy copy (bf16, unsharded)"] == (
        "held",
        pytest.approx(2 * (300e6 + 10e6) + 700e6 * per_weight),
    )
    layer = (1e9 - 2 * 102.4e6) / 16  # 49.7M per layer, of which 700M / 16 = 43.75M are 4-bit
    gathered = 2 * (2 * 102.4e6 + 2 * (layer - 700e6 / 16))
    assert found["FSDP gathered params (bf16)"] == ("update", pytest.approx(gathered))
    assert found["4-bit weight dequantized for its matmul (bf16, then bf16)"] == ("update", (2 + 2) * 2048 * 8192)


def test_check_model_counts_d1s_adapters_on_llada(llada_standin, capsys):
    """--lora-rank with d1's seven target names on LLaDA: peft adapts q/k/v/up only; the count is rank x (in + out)
    of each, summed by hand from the stand-in's sizes (hidden 32, MLP 64, 2 layers, 2 of 4 heads for k/v)."""
    d1 = "q_proj,k_proj,v_proj,o_proj,up_proj,down_proj,gate_proj"
    payload = check_model_json(capsys, llada_standin, "--config-only", "--lora-rank", "8", "--target-modules", d1)
    hidden, inner, kv = 32, 64, 16  # k/v project to 2 heads of 8
    per_layer = 8 * ((hidden + hidden) + 2 * (hidden + kv) + (hidden + inner))
    assert payload["estimate"]["setup"]["lora_parameters"] == 2 * per_layer
    names = [term["name"] for term in payload["estimate"]["memory"]["terms"]]
    assert "LoRA adapters: params + AdamW moments (fp32, sharded)" in names
    with_dropout = check_model_json(
        capsys, llada_standin, "--config-only", "--lora-rank", "8", "--target-modules", d1, "--lora-dropout", "0.05"
    )
    # per layer the adapted q, k, v and up projections each read the 32-wide hidden state
    assert with_dropout["estimate"]["setup"]["lora_dropout_inputs"] == 4 * hidden
    assert payload["estimate"]["setup"]["lora_dropout_inputs"] == 0
    code, out, err = check_model(
        capsys, llada_standin, "--config-only", "--lora-rank", "8", "--target-modules", "q_proj,ff_out"
    )
    assert code == 2 and "LoRA adapts 'model.transformer.ff_out', the vocabulary projection" in err
    # --load-in-4bit: per layer q and attn_out 32x32, k and v 32x16, ff_proj, up_proj and the blocks' ff_out 32x64; not
    # the head (model.transformer.ff_out)
    four_bit = check_model_json(capsys, llada_standin, "--config-only", "--lora-rank", "8", "--load-in-4bit")
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * inner
    assert four_bit["estimate"]["setup"]["four_bit_parameters"] == 2 * per_layer
    code, out, err = check_model(capsys, llada_standin, "--config-only", "--load-in-4bit")
    assert code == 2 and "--load-in-4bit trains LoRA adapters on a frozen 4-bit base: give --lora-rank too" in err


# the words by which the help and the report name each probe of model_check.PROBES
PROBE_WORDS = {
    "padding": "padding",
    "head": "fused head",
    "lean_mlp": "lean MLP",
    "logprob": "coupled log-prob",
    "sampling": "sampling",
}


def test_the_help_and_the_library_describe_every_probe():
    from diffugrpo_plugin.cli.check_model import DESCRIPTION
    from diffugrpo_plugin.tools import model_check

    assert set(PROBE_WORDS) == set(model_check.PROBES)
    help_text = " ".join(DESCRIPTION.split())
    library = " ".join(model_check.__doc__.split())
    assert f"{len(model_check.PROBES)} probes" in help_text.replace("five", "5")
    assert [word for word in PROBE_WORDS.values() if word not in help_text] == []
    assert [word for word in PROBE_WORDS.values() if f"**{word}" not in library] == []
