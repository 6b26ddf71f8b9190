"""Model families against stand-ins of Dream's and LLaDA's own modeling code (``trust_remote_code``).

The stand-ins (``tests/standins``) reproduce the published interfaces: Dream hands the attention
mask to SDPA as given and leaves the logit shift to the caller; LLaDA takes no ``position_ids``,
turns a 2D mask into a bias, refuses a cache, projects a tied head with ``wte.weight`` and reports
OLMo's mask id 50256 when ``config.json`` names none. These tests check that our loading, family
detection and calling conventions get the same numbers as calling that code by hand, and that
our native classes agree with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
from diffugrpo_plugin.core.masking import make_coupled
from diffugrpo_plugin.models.detection import detect_family
from diffugrpo_plugin.models.dlm import DiffusionLM, load_diffusion_lm, load_pretrained
from diffugrpo_plugin.models.family import ModelConfigError, takes_padding_mask
from diffugrpo_plugin.models.load_plan import plan_loading, read_model_config
from diffugrpo_plugin.models.native import register_with_transformers
from diffugrpo_plugin.models.native.dream import DreamModel as NativeDream
from diffugrpo_plugin.models.native.llada import LLaDAConfig as NativeLLaDAConfig
from diffugrpo_plugin.models.native.llada import LLaDAModelLM as NativeLLaDA
from family_standins import (  # noqa: F401  (session fixtures are used by name)
    dream_standin,
    llada_scaled_standin,
    llada_standin,
    llada_tied_standin,
    load_remote,
    remote_class,
    tokenizer,
)

CHECKPOINTS = ["dream", "llada", "llada_tied"]
OLMO_MASK_ID = 50256


@pytest.fixture(params=CHECKPOINTS)
def checkpoint(request) -> tuple[str, str]:
    """(name, path) of each stand-in checkpoint: dream, llada (untied head), llada_tied."""
    return request.param, request.getfixturevalue(f"{request.param}_standin")


def left_padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row 0 left-padded by 3; each row: prompt, then a 6-token completion ending in EOS (id 2 here).

    Ids avoid our tokenizer's pad (0) and mask (3) tokens except where padding is meant.
    """
    input_ids = torch.tensor(
        [[0, 0, 0, 17, 18, 19, 40, 41, 42, 43, 44, 2], [20, 21, 22, 23, 24, 25, 50, 51, 52, 53, 54, 2]]
    )  # [B=2, L=12]
    attention = torch.ones_like(input_ids)  # [2, 12]
    attention[0, :3] = 0
    completion = torch.zeros_like(input_ids, dtype=torch.bool)  # [2, 12]
    completion[:, 6:] = True
    return input_ids, attention, completion


def scored_positions(attention: torch.Tensor, shift: bool) -> torch.Tensor:
    """Positions whose aligned logits come from a real token's output.  # [B, L] bool

    With a shift, position i reads the output at i - 1, so the first real token of a padded row does not count.
    """
    real = attention.bool()
    if not shift:
        return real
    return real & torch.cat([torch.zeros_like(real[:, :1]), real[:, :-1]], dim=1)


def saved_weights(path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


def assert_close_at_scale(got: torch.Tensor, want: torch.Tensor, tol: float = 1e-5, what: str = "") -> None:
    """``|got - want| <= tol * max(1, max|want|)`` everywhere: fp32 rounding grows with the values' scale, and the
    wide stand-in weights give logits around 10."""
    scale = max(1.0, want.abs().max().item())
    worst = (got - want).abs().max().item()
    assert worst <= tol * scale, f"{what}: max |difference| {worst:.3g} > {tol:g} x {scale:.3g}"


def assert_one_line(error: pytest.ExceptionInfo, *needles: str) -> None:
    message = str(error.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in: {message}"


# ---------------------------------------------------------------------------------------------
# a. The stand-ins load through transformers' remote-code path and keep the published interfaces
# ---------------------------------------------------------------------------------------------

FRESH_INTERPRETER_LOAD = textwrap.dedent("""
    import json, sys
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoModelForCausalLM

    results = []
    for path, auto in json.loads(sys.argv[1]):
        model = {"AutoModel": AutoModel, "AutoModelForCausalLM": AutoModelForCausalLM}[auto].from_pretrained(
            path, trust_remote_code=True, dtype=torch.float32)
        state, saved = model.state_dict(), load_file(path + "/model.safetensors")
        results.append({"auto": auto, "module": type(model).__module__, "name": type(model).__name__,
                        "weights_equal": all(torch.equal(state[key], value) for key, value in saved.items())})
    print(json.dumps(results))
""")


def test_standins_load_through_auto_classes_with_trust_remote_code(dream_standin, llada_standin, llada_tied_standin):
    """A user's `AutoModel.from_pretrained(path, trust_remote_code=True)` gets the checkpoint's own class with its
    saved weights. Run in a fresh interpreter: once our native classes are registered (as `import verl` does),
    transformers 5 prefers them over the checkpoint's code."""
    loads = [
        [dream_standin, "AutoModel"],
        [llada_standin, "AutoModel"],
        [llada_standin, "AutoModelForCausalLM"],
        [llada_tied_standin, "AutoModelForCausalLM"],
    ]
    done = subprocess.run(
        [sys.executable, "-c", FRESH_INTERPRETER_LOAD, json.dumps(loads)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert [result["name"] for result in results] == ["DreamModel", "LLaDAModelLM", "LLaDAModelLM", "LLaDAModelLM"]
    for result in results:
        assert result["module"].startswith("transformers_modules."), result
        assert result["weights_equal"], result


def test_dream_standin_hands_the_mask_to_sdpa_as_given(dream_standin):
    """Dream's published attention takes "full" or a 4D boolean mask; a 2D integer padding mask reaches SDPA
    and raises there."""
    model = load_remote(dream_standin)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])  # [1, 6]
    with torch.no_grad():
        plain = model(input_ids=ids).logits  # [1, 6, V]
        with pytest.raises(RuntimeError, match="attn_mask"):
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
        assert torch.equal(model(input_ids=ids, attention_mask="full").logits, plain)
        everything = torch.ones(1, 1, 6, 6, dtype=torch.bool)  # [1, 1, L, L]
        torch.testing.assert_close(model(input_ids=ids, attention_mask=everything).logits, plain)
        assert torch.equal(model(input_ids=ids, position_ids=torch.arange(6)[None]).logits, plain)  # default 0..L-1
        assert plain.shape == (1, 6, len(tokenizer()))  # num_logits_to_keep=0 keeps every position
        torch.testing.assert_close(model(input_ids=ids, num_logits_to_keep=2).logits, plain[:, -2:])
    assert model.get_output_embeddings() is model.lm_head


def test_llada_standin_takes_no_position_ids_and_no_cache(llada_standin):
    """LLaDA's published forward has no position_ids (nor **kwargs), asserts there is no KV cache, and turns a
    2D mask into a bias that hides padded keys."""
    model = load_remote(llada_standin)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])  # [1, 6]
    with pytest.raises(TypeError, match="position_ids"):
        model(input_ids=ids, position_ids=torch.arange(6)[None])
    with pytest.raises(AssertionError, match="kvcache is not supported"):
        model(input_ids=ids, use_cache=True)
    with torch.no_grad():
        plain = model(input_ids=ids).logits  # [1, 6, V]
        assert torch.equal(model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits, plain)
        mask = torch.tensor([[0, 0, 1, 1, 1, 1]])
        changed_pads = torch.tensor([[11, 12, 7, 8, 9, 10]])
        hidden_pads = model(input_ids=ids, attention_mask=mask).logits[:, 2:]  # [1, 4, V]
        torch.testing.assert_close(model(input_ids=changed_pads, attention_mask=mask).logits[:, 2:], hidden_pads)
        assert not torch.allclose(plain[:, 2:], hidden_pads, atol=1e-3)  # the pads were visible without the mask


def test_tied_llada_projects_with_the_input_embedding(llada_standin, llada_tied_standin):
    """With weight_tying, LLaDA has no head module: logits are `F.linear(x, wte.weight)` and
    get_output_embeddings() returns the INPUT embedding."""
    tied, untied = load_remote(llada_tied_standin), load_remote(llada_standin)
    assert tied.get_output_embeddings() is tied.model.transformer.wte
    assert "ff_out" not in tied.model.transformer
    assert untied.get_output_embeddings() is untied.model.transformer.ff_out
    ids = torch.tensor([[5, 6, 7, 8]])  # [1, 4]
    with torch.no_grad():
        out = tied(input_ids=ids, output_hidden_states=True)
        final_hidden = out.hidden_states[-1]  # [1, 4, d], after ln_f
        torch.testing.assert_close(out.logits, F.linear(final_hidden, tied.model.transformer.wte.weight))


def test_gradient_checkpointing_as_published(dream_standin, llada_standin):
    """Dream's class supports transformers' gradient checkpointing (same gradients); LLaDA's does not, so
    `gradient_checkpointing_enable()` (verl's enable_gradient_checkpointing) raises on its published code."""
    dream = load_remote(dream_standin).train()  # dropout is 0 in config.json: train mode only switches checkpointing
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])  # [1, 6]
    weight = dream.model.layers[0].self_attn.q_proj.weight
    (plain,) = torch.autograd.grad(dream(input_ids=ids).logits.logsumexp(-1).sum(), weight)
    dream.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert dream.model.gradient_checkpointing
    (checkpointed,) = torch.autograd.grad(dream(input_ids=ids).logits.logsumexp(-1).sum(), weight)
    assert_close_at_scale(checkpointed, plain, what="q_proj gradient")
    with pytest.raises(ValueError, match="gradient checkpointing"):
        load_remote(llada_standin).gradient_checkpointing_enable()


def test_attn_implementation_request_as_published(dream_standin, llada_standin):
    """Dream's class declares SDPA support; LLaDA's declares none (it calls SDPA itself), so asking transformers for
    attn_implementation="sdpa" (as verl does) raises on its published code."""
    dream_class = remote_class(dream_standin, read_model_config(dream_standin))
    assert dream_class.from_pretrained(dream_standin, attn_implementation="sdpa").config._attn_implementation == "sdpa"
    llada_class = remote_class(llada_standin, read_model_config(llada_standin))
    with pytest.raises(ValueError, match="scaled_dot_product_attention"):
        llada_class.from_pretrained(llada_standin, attn_implementation="sdpa")
    assert isinstance(llada_class.from_pretrained(llada_standin), llada_class)  # no request: it loads


def test_llada_config_reports_olmo_mask_id_when_config_json_has_none(llada_standin):
    """The published LLaDA config class fills an absent mask_token_id with OLMo's 50256: a trap for callers."""
    raw = json.loads((Path(llada_standin) / "config.json").read_text())
    assert "mask_token_id" not in raw
    config = load_remote(llada_standin).config
    assert config.mask_token_id == OLMO_MASK_ID
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (
        raw["d_model"],
        raw["n_heads"],
        raw["n_layers"],
    )


# ---------------------------------------------------------------------------------------------
# b. Loading: native by default, the checkpoint's code when asked; both give the same logits
# ---------------------------------------------------------------------------------------------


def test_default_loading_gives_the_native_class_without_remote_code(checkpoint):
    """No trust_remote_code needed: our native class loads the published weights unchanged."""
    name, path = checkpoint
    module = load_pretrained(path)
    assert type(module) is (NativeDream if name == "dream" else NativeLLaDA)
    assert takes_padding_mask(module)  # called the transformers way
    state = module.state_dict()
    for key, value in saved_weights(path).items():
        assert torch.equal(state[key], value), key


def test_remote_implementation_loads_the_checkpoints_own_code(checkpoint):
    """implementation=remote with trust_remote_code gives the stand-in class with its saved weights (transformers 5
    re-initialises a class's loaded weights unless it knows the class as remote code)."""
    _, path = checkpoint
    remote_class(path, read_model_config(path))._auto_class = None  # as fresh as in a new process
    module = load_pretrained(path, trust_remote_code=True, implementation="remote")
    assert type(module).__module__.startswith("transformers_modules.") and not takes_padding_mask(module)
    state = module.state_dict()
    assert all(torch.equal(state[key], value) for key, value in saved_weights(path).items())


def test_native_registration_survives_llada_self_registration(llada_standin):
    """LLaDA's published modules register their classes for "llada" at import; loading without remote code must
    still build our native classes (load_pretrained, and AutoConfig/AutoModelForCausalLM as verl calls them)."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    remote = load_remote(llada_standin)
    try:
        AutoConfig.register("llada", type(remote.config), exist_ok=True)  # what the published module does at import
        AutoModel.register(type(remote.config), type(remote), exist_ok=True)
        assert type(load_pretrained(llada_standin)) is NativeLLaDA
        # load_pretrained has registered ours again: verl's AutoConfig / AutoModelForCausalLM calls find them
        assert type(AutoConfig.from_pretrained(llada_standin)) is NativeLLaDAConfig
        assert type(AutoModelForCausalLM.from_pretrained(llada_standin, dtype=torch.float32)) is NativeLLaDA
    finally:
        register_with_transformers()  # leave the registry as other tests expect it


def test_native_and_remote_give_equal_logits(checkpoint):
    """The same checkpoint through our native class and through its own code, each called in its family's
    convention by DiffusionLM: equal aligned logits, unpadded and at real positions of a left-padded batch."""
    name, path = checkpoint
    tok = tokenizer()
    native = DiffusionLM.wrap(load_pretrained(path), tok)
    remote = DiffusionLM.wrap(load_remote(path), tok)
    input_ids, attention, _ = left_padded_batch()
    with torch.no_grad():
        unpadded_native = native.logits(input_ids[1:], attention[1:])  # [1, L, V]
        unpadded_remote = remote.logits(input_ids[1:], attention[1:])  # [1, L, V]
        assert_close_at_scale(unpadded_remote, unpadded_native, what="unpadded logits")
        real = scored_positions(attention, native.shift_logits)  # [B, L]
        padded_native = native.logits(input_ids, attention)[real]  # [R, V]
        padded_remote = remote.logits(input_ids, attention)[real]  # [R, V]
        assert_close_at_scale(padded_remote, padded_native, what="left-padded logits")
    assert real.sum() == attention.sum() - (2 if name == "dream" else 0)  # all but each row's first token if shifted


@pytest.mark.parametrize("implementation", ["native", "remote"])
def test_wrap_resolves_family_shift_and_head(checkpoint, implementation):
    """DiffusionLM.wrap reads the family from the config: Dream shifts, LLaDA does not; a tied LLaDA projects
    with the embedding weight itself; only our native classes fill a prefix cache."""
    name, path = checkpoint
    module = load_pretrained(path) if implementation == "native" else load_remote(path)
    lm = DiffusionLM.wrap(module, tokenizer())
    assert lm.family.name == ("dream" if name == "dream" else "llada")
    assert lm.shift_logits is (name == "dream")
    embedding = module.get_input_embeddings().weight
    assert (lm.head_weight() is embedding) is (name == "llada_tied")
    assert lm.head_weight().shape == embedding.shape
    assert lm.supports_prefix_cache() is (implementation == "native")


@pytest.mark.parametrize("implementation", ["native", "remote"])
@pytest.mark.parametrize("name", CHECKPOINTS)
def test_wrap_takes_the_mask_id_the_checkpoint_states_not_olmos_default(request, name, implementation):
    """Dream states its mask id in config.json; LLaDA's config.json does not, so the tokenizer's mask token
    must win over the 50256 the published config object reports."""
    path = request.getfixturevalue(f"{name}_standin")
    module = load_pretrained(path) if implementation == "native" else load_remote(path)
    lm = DiffusionLM.wrap(module, tokenizer())
    assert lm.mask_token_id == tokenizer().mask_token_id != OLMO_MASK_ID


@pytest.mark.parametrize("implementation", ["native", "remote"])
def test_load_diffusion_lm_wires_model_tokenizer_and_family(checkpoint, implementation):
    """What the CLIs and SFT call: the checkpoint's tokenizer, the planned class, the family's shift and mask id,
    in eval mode."""
    name, path = checkpoint
    lm, tok = load_diffusion_lm(
        path, "cpu", trust_remote_code=implementation == "remote", implementation=implementation
    )
    assert takes_padding_mask(lm.module) is (implementation != "remote")
    assert not lm.module.training
    assert (lm.family.name, lm.shift_logits) == (("dream", True) if name == "dream" else ("llada", False))
    assert lm.mask_token_id == tok.mask_token_id == tokenizer().mask_token_id


def test_llada_call_works_when_the_config_lost_use_cache(llada_standin):
    """Under transformers 5 a config built with **kwargs loses use_cache (a generation key), so the published
    LLaDA forward, which reads config.use_cache when the caller passes none, needs use_cache=False passed."""
    from transformers import PretrainedConfig

    assert not hasattr(PretrainedConfig(use_cache=False), "use_cache")  # the transformers 5 behaviour
    module = load_remote(llada_standin)
    del module.config.use_cache  # as the published LLaDAConfig ends up
    input_ids, attention, _ = left_padded_batch()
    assert DiffusionLM.wrap(module, tokenizer()).logits(input_ids, attention).isfinite().all()


# ---------------------------------------------------------------------------------------------
# c. Coupled log-probs through the remote stand-ins equal the formula computed by hand
# ---------------------------------------------------------------------------------------------


def published_logits(
    module: torch.nn.Module, name: str, input_ids: torch.Tensor, attention: torch.Tensor
) -> torch.Tensor:
    """The stand-in called the way its own authors call it (no family code).  # [B, L] -> [B, L, V]

    Dream: "full" without padding, else the 4D mask `m[:, None, None, :] & m[:, None, :, None]` with
    positions `cumsum - 1`; LLaDA: the 2D mask only.
    """
    if name != "dream":
        return module(input_ids=input_ids, attention_mask=attention).logits
    real = attention.bool()  # [B, L]
    if bool(real.all()):
        return module(input_ids=input_ids, attention_mask="full").logits
    both_real = real[:, None, None, :] & real[:, None, :, None]  # [B, 1, L, L]
    return module(input_ids=input_ids, attention_mask=both_real, position_ids=attention.long().cumsum(-1) - 1).logits


def coupled_by_hand(module, name, views, input_ids, attention) -> torch.Tensor:
    """sum_v coef[v] * log softmax(logits of view v)[token], full vocabulary, fp32, Dream shifted by hand.  # [B, L]"""
    total = torch.zeros(input_ids.shape, dtype=torch.float32)  # [B, L]
    for view in range(views.num_views):
        logits = published_logits(module, name, views.noisy[view], attention).float()  # [B, L, V]
        if name == "dream":  # the output at i - 1 scores token i
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[..., None]).squeeze(-1)  # [B, L]
        coef = views.coef[view]  # [B, L]
        total = total + torch.where(coef != 0, coef * logp, torch.zeros_like(logp))
    return total


def head_name(name: str) -> str:
    return {
        "dream": "lm_head.weight",
        "llada": "model.transformer.ff_out.weight",
        "llada_tied": "model.transformer.wte.weight",
    }[name]


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
def test_coupled_logprobs_through_remote_code_equal_the_formula(checkpoint, padded):
    """coupled_token_logprobs on the checkpoint's own code (row-selective head, family calling convention) equals
    the coupled estimate computed by hand in the published convention: values and every parameter gradient."""
    name, path = checkpoint
    module = load_remote(path)
    tok = tokenizer()
    input_ids, attention, completion = left_padded_batch()
    if not padded:
        input_ids, attention, completion = input_ids[1:], attention[1:], completion[1:]
    views = make_coupled().views(input_ids, completion, tok.mask_token_id, torch.arange(7, 7 + len(input_ids)))
    upstream = torch.linspace(-1.0, 2.0, input_ids.numel()).view(input_ids.shape)  # [B, L], arbitrary weights
    parameters = dict(module.named_parameters())

    fast = coupled_token_logprobs(DiffusionLM.wrap(module, tok), views, input_ids, attention).logp  # [B, L]
    fast_grads = torch.autograd.grad((fast * upstream).sum(), list(parameters.values()), allow_unused=True)
    expected = coupled_by_hand(module, name, views, input_ids, attention)  # [B, L]
    expected_grads = torch.autograd.grad((expected * upstream).sum(), list(parameters.values()), allow_unused=True)

    torch.testing.assert_close(fast, expected, atol=1e-5, rtol=1e-5)
    assert (fast[completion] != 0).all() and (fast[~completion] == 0).all()
    for key, got, want in zip(parameters, fast_grads, expected_grads):
        got = torch.zeros_like(parameters[key]) if got is None else got
        want = torch.zeros_like(parameters[key]) if want is None else want
        assert_close_at_scale(got, want, what=f"gradient of {key}")
    head_grad = fast_grads[list(parameters).index(head_name(name))]
    assert head_grad is not None and head_grad.abs().sum() > 0  # the head (or tied embedding) is trained


def test_fused_head_applies_llada_logit_scale_and_head_bias(llada_scaled_standin):
    """LLaDA's ``scale_logits`` multiplies the head's output (with its bias) by 1/sqrt(d_model) inside the published
    forward; the fused head never runs that forward's projection, so it must apply both itself."""
    module = load_remote(llada_scaled_standin)
    assert module.config.scale_logits and module.model.transformer.ff_out.bias is not None
    input_ids, attention, completion = left_padded_batch()
    views = make_coupled().views(input_ids, completion, tokenizer().mask_token_id, torch.tensor([3, 4]))
    parameters = dict(module.named_parameters())
    head = ["model.transformer.ff_out.weight", "model.transformer.ff_out.bias"]

    fast = coupled_token_logprobs(DiffusionLM.wrap(module, tokenizer()), views, input_ids, attention).logp
    fast_grads = torch.autograd.grad(fast.sum(), [parameters[key] for key in head])
    expected = coupled_by_hand(module, "llada", views, input_ids, attention)
    expected_grads = torch.autograd.grad(expected.sum(), [parameters[key] for key in head])

    torch.testing.assert_close(fast, expected, atol=1e-5, rtol=1e-5)
    for key, got, want in zip(head, fast_grads, expected_grads):
        assert_close_at_scale(got, want, what=f"gradient of {key}")


# ---------------------------------------------------------------------------------------------
# d. Left padding changes nothing
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", ["native", "remote"])
def test_left_padding_does_not_change_coupled_logprobs(checkpoint, implementation):
    """A row's coupled log-probs alone and inside a left-padded batch are equal (same per-sample mask seed):
    the family's mask and positions make padding invisible, for our classes and for the published code."""
    _, path = checkpoint
    module = load_pretrained(path) if implementation == "native" else load_remote(path)
    lm, tok, masker = DiffusionLM.wrap(module, tokenizer()), tokenizer(), make_coupled()
    input_ids, attention, completion = left_padded_batch()
    with torch.no_grad():
        batch = coupled_token_logprobs(
            lm, masker.views(input_ids, completion, tok.mask_token_id, torch.tensor([5, 6])), input_ids, attention
        ).logp  # [2, L]
        alone_ids, alone_completion = input_ids[:1, 3:], completion[:1, 3:]  # row 0 without its padding
        alone = coupled_token_logprobs(
            lm,
            masker.views(alone_ids, alone_completion, tok.mask_token_id, torch.tensor([5])),
            alone_ids,
            torch.ones_like(alone_ids),
        ).logp  # [1, L - 3]
    assert (alone[0, 3:] != 0).all()  # the completion is scored
    torch.testing.assert_close(batch[0, 3:], alone[0], atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# e. Errors: one line, naming what to set
# ---------------------------------------------------------------------------------------------


def write_config(directory: Path, config: dict) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def test_unknown_family_name_lists_the_known_ones(dream_standin):
    """A misspelt family is refused with the registered names to choose from."""
    with pytest.raises(ModelConfigError) as error:
        load_pretrained(dream_standin, family="dreem")
    assert_one_line(error, "dreem", "dream", "llada", "bidirectional")
    with pytest.raises(ModelConfigError) as error:
        DiffusionLM.wrap(load_pretrained(dream_standin), tokenizer(), family="dreem")
    assert_one_line(error, "dreem", "llada")


def test_unknown_family_name_says_which_key_sets_it(dream_standin):
    with pytest.raises(ModelConfigError) as error:
        load_pretrained(dream_standin, family="dreem")
    assert_one_line(error, "actor_rollout_ref.model.diffusion.family")


def test_config_of_no_known_family_says_how_to_name_one(tmp_path):
    """A checkpoint with its own code that no family recognises: say what was seen and which key names the family."""
    path = write_config(
        tmp_path / "mystery",
        {
            "model_type": "mystery",
            "architectures": ["MysteryModel"],
            "auto_map": {"AutoModel": "modeling_mystery.MysteryModel"},
        },
    )
    with pytest.raises(ModelConfigError) as error:
        load_pretrained(path, trust_remote_code=True)
    assert_one_line(
        error,
        "'mystery'",
        "modeling_mystery.MysteryModel",
        "actor_rollout_ref.model.diffusion.family",
        "dream",
        "llada",
    )


def test_remote_implementation_needs_trust_remote_code(dream_standin):
    with pytest.raises(ModelConfigError) as error:
        load_pretrained(dream_standin, implementation="remote")
    assert_one_line(error, "actor_rollout_ref.model.trust_remote_code=true")


def test_native_refuses_llada_settings_it_cannot_run(llada_standin, tmp_path):
    """block_type "sequential" needs LLaDA's own code: implementation=native names the setting; auto without
    trust_remote_code names it and the key to set."""
    config = {**read_model_config(llada_standin), "block_type": "sequential"}
    path = write_config(tmp_path / "sequential", config)
    with pytest.raises(ModelConfigError) as error:
        load_pretrained(path, implementation="native")
    assert_one_line(error, "block_type='sequential'", "implementation=auto")
    with pytest.raises(ModelConfigError) as error:
        load_pretrained(path)
    assert_one_line(error, "block_type='sequential'", "actor_rollout_ref.model.trust_remote_code=true")
    assert plan_loading(config, trust_remote_code=True).implementation == "remote"


def test_stock_causal_checkpoint_is_refused_with_is_causal_hint(tmp_path):
    """A plain autoregressive Qwen2 checkpoint is no diffusion LM until its config says is_causal: false."""
    from transformers import Qwen2Config

    path = tmp_path / "qwen2"
    Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    ).save_pretrained(path)
    with pytest.raises(ModelConfigError) as error:
        load_pretrained(str(path))
    assert_one_line(error, "is_causal: false", "actor_rollout_ref.model.diffusion.family")


# ---------------------------------------------------------------------------------------------
# f. Detection from any one of the config's clues
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("clue", ["model_type", "auto_map", "architectures"])
@pytest.mark.parametrize("name", ["dream", "llada"])
def test_family_is_detected_from_each_clue_alone(request, name, clue):
    """model_type, the auto_map code file name or the architectures list each suffice."""
    config = read_model_config(request.getfixturevalue(f"{name}_standin"))
    assert detect_family({clue: config[clue]}).name == name


@pytest.mark.parametrize(
    ("config", "name"),
    [
        ({"model_type": "dream"}, "dream"),  # model_type compares case-insensitively
        (
            {"auto_map": {"AutoModel": "Dream-org/Dream-v0-Base-7B--modeling_dream.DreamModel"}},
            "dream",
        ),  # hub reference
        ({"auto_map": {"AutoModelForCausalLM": "GSAI-ML/LLaDA-8B-Instruct--modeling_llada.LLaDAModelLM"}}, "llada"),
        ({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "is_causal": False}, "bidirectional"),
    ],
)
def test_family_detection_spellings(config, name):
    assert detect_family(config).name == name
