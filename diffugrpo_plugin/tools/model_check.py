"""What a checkpoint resolves to and whether it runs (the library behind ``diffugrpo check-model``).

:func:`resolve_checkpoint` reads the checkpoint's config and tokenizer, never its weights: the
family and the clue that selected it, the implementation that will load it, the calling
convention, logit shift, mask token and where it came from, the vocabulary head (tied or not),
the network's shape and parameter count (the network is built on the ``meta`` device, so no
memory is allocated). :func:`run_probes` then loads the weights and runs the five probes of :data:`PROBES`:

* **padding**: logits of a prompt alone vs the same prompt left-padded in a batch with a longer
  one, compared on its real positions (a model whose code ignores the attention mask leaks);
* **fused head**: the training pass's log-probs, which project the final hidden states with the
  family's head weight, bias and logit scale outside the model's projection code, against a
  log-softmax of the model's own logits (a forward that changes its logits in a way the family
  does not know about, e.g. a soft cap, would train on the wrong log-probs);
* **lean MLP**: one SwiGLU block's output and gradients through its own code against the lean backward the
  training engine gives it (a block whose code is not the family's SwiGLU would train on wrong gradients);
  not run when no block of the model can be made lean;
* **coupled log-probs**: one coupled-masker pass over prompt + completion with a fixed mask
  seed, forward and backward, checked for finite log-probs and gradients;
* **sampling**: a few steps of the family's natural sampler on the prompt.

Everything is returned as dataclasses (:class:`ModelCheck`); nothing is printed here.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from diffugrpo_plugin.tools.step_memory import ModelShape

DEFAULT_PROMPT = "Write a Python function that adds two numbers."
LONGER_PROMPT_SUFFIX = " Give it a docstring and type hints."
DEFAULT_COMPLETION = "```python\ndef add(a, b):\n    return a + b\n```"
PROBES = ("padding", "head", "lean_mlp", "logprob", "sampling")
"""The probes :func:`run_probes` runs, in order: the names of their fields in :class:`ModelCheck`."""
# Largest |difference| allowed by the padding probe, times max(1, max |logit|) of the unpadded pass.
PADDING_TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}
NATURAL_SAMPLERS = {"dream": "entropy", "llada": "llada"}  # any other family: entropy


def natural_sampler(family: str) -> str:
    """The sampler a family's own generation code runs: Dream's entropy ranking, LLaDA's block-wise low-confidence."""
    return NATURAL_SAMPLERS.get(family, "entropy")


@dataclass
class Resolution:
    """What a checkpoint resolves to, from its config alone (no weights read)."""

    path: str
    family: str
    family_description: str
    detected_from: str
    implementation: str  # native / remote / stock
    implementation_detail: str
    model_class: str
    attention_convention: str
    logits_shift: bool | None
    mask_token_id: int
    mask_token: str | None
    mask_token_source: str
    head: str
    head_tied: bool
    embedding: str
    vocab_size: int  # the logit width: rows of the vocabulary head
    config_vocab_size: int | None
    hidden_size: int
    layers: int
    intermediate_size: int
    kv_dim: int
    checkpoint_dtype: str | None
    parameters: int
    embedding_parameters: int
    head_parameters: int  # 0 when tied
    lean_mlp: str  # what the training engine's diffusion.lean_mlp does to this model's SwiGLU blocks
    lean_mlp_everywhere: bool  # every SwiGLU block it knows for the family takes the lean backward
    block_size: int | None = None  # block-diffusion families: tokens per block
    block_size_source: str | None = None
    experts: str | None = None  # mixture-of-experts models: the experts layers, in words
    active_parameters: int | None = None  # mixture-of-experts models: parameters one token runs through

    def shape(self) -> ModelShape:
        return ModelShape(
            parameters=self.parameters,
            vocab=self.vocab_size,
            hidden=self.hidden_size,
            layers=self.layers,
            intermediate=self.intermediate_size,
            kv_dim=self.kv_dim,
            embedding_parameters=self.embedding_parameters,
            head_parameters=self.head_parameters,
        )


@dataclass
class LoadResult:
    device: str
    dtype: str
    seconds: float
    model_class: str


@dataclass
class PaddingProbe:
    """``ok`` when ``max_abs_diff <= tolerance`` on the ``positions`` real positions compared."""

    ok: bool
    max_abs_diff: float | None = None
    tolerance: float | None = None
    positions: int = 0
    padding: int = 0  # pad tokens in front of the prompt in the batched pass
    error: str | None = None


@dataclass
class HeadProbe:
    """``ok`` when the fused head's log-probs are within ``tolerance`` of the model's own on ``rows`` positions."""

    ok: bool
    max_abs_diff: float | None = None
    tolerance: float | None = None
    rows: int = 0
    error: str | None = None


@dataclass
class LeanProbe:
    """``ok`` when a lean SwiGLU block's output and gradients are within ``tolerance`` of the block's own code."""

    ok: bool
    block: str = ""  # the block compared (its class and where it sits)
    max_abs_diff: float | None = None
    tolerance: float | None = None
    error: str | None = None


@dataclass
class LogprobProbe:
    ok: bool
    finite_logprobs: bool = False
    finite_gradients: bool = False
    mean_logprob: float | None = None
    gradient_norm: float | None = None
    tokens: int = 0  # completion tokens scored
    head_rows: int = 0  # rows that reached the vocabulary head (2 x tokens for the coupled masker)
    views: int = 0
    mask_seed: int = 0
    forward_seconds: float | None = None
    backward_seconds: float | None = None
    error: str | None = None


@dataclass
class SamplingProbe:
    ok: bool
    sampler: str = ""
    steps: int = 0
    new_tokens: int = 0
    seconds: float | None = None
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    error: str | None = None


@dataclass
class ModelCheck:
    """Everything ``diffugrpo check-model`` reports about a checkpoint (probes None when not run)."""

    resolution: Resolution
    load: LoadResult | None = None
    padding: PaddingProbe | None = None
    head: HeadProbe | None = None
    lean_mlp: LeanProbe | None = None  # None when no block of the model can be made lean
    logprob: LogprobProbe | None = None
    sampling: SamplingProbe | None = None

    def probes(self) -> dict[str, Any]:
        """Each probe's result by name, in :data:`PROBES` order (None: not run)."""
        return {name: getattr(self, name) for name in PROBES}

    @property
    def probes_ok(self) -> bool:
        return all(probe.ok for probe in self.probes().values() if probe is not None)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ResolvedCheckpoint:
    """A resolved checkpoint: the report plus what loading and probing it needs."""

    resolution: Resolution
    config: dict
    config_object: Any = field(repr=False)
    plan: Any = field(repr=False)
    tokenizer: Any = field(repr=False)
    family_override: str | None = None
    meta: Any = field(repr=False, default=None)  # the planned network on the meta device


# ---------------------------------------------------------------------------------------------
# Stage 1: the config
# ---------------------------------------------------------------------------------------------


def checkpoint_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a checkpoint, or None (a local directory, or something shaped like a hub id)."""
    expanded = os.path.expanduser(path)
    if os.path.isdir(expanded):
        return (
            None
            if os.path.isfile(os.path.join(expanded, "config.json"))
            else (f"'{path}' has no config.json: point PATH at a checkpoint directory")
        )
    if os.path.exists(expanded):
        return f"'{path}' is a file; point PATH at a checkpoint directory (holding config.json) or a hub id"
    from diffugrpo_plugin.models.dlm import is_hub_id

    if is_hub_id(path):
        return None  # a hub id such as apple/DiffuCoder-7B-Instruct
    return f"model path '{path}' does not exist: point PATH at a checkpoint directory or a hub id"


def detection_clue(family, config: dict, override: str | None = None) -> str:
    """Which part of ``config.json`` selected ``family``."""
    if override:
        return f"--family {override}"
    reason = family.match_reason(config)
    if reason is None and config.get("is_causal") is False:
        return "is_causal: false, no family named it"
    return reason or "registered matching rule"


def _first(config: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None and not callable(value):
            return value
    return None


def _shape_from_config(config: Any, hidden: int) -> tuple[int, int, int]:
    """``(layers, intermediate_size, kv_dim)`` from a Qwen2/Llama-style or LLaDA-style config."""
    layers = _first(config, ("num_hidden_layers", "n_layers", "num_layers"))
    heads = _first(config, ("num_attention_heads", "n_heads")) or 1
    kv_heads = _first(config, ("num_key_value_heads", "n_kv_heads"))
    if kv_heads is None:
        kv_heads = 1 if getattr(config, "multi_query_attention", False) else heads
    head_dim = getattr(config, "head_dim", None)
    head_dim = head_dim if isinstance(head_dim, int) else hidden // heads
    intermediate = _first(config, ("intermediate_size", "mlp_hidden_size"))
    if intermediate is None:
        intermediate = int((getattr(config, "mlp_ratio", None) or 4) * hidden)
    return int(layers or 0), int(intermediate), int(kv_heads) * int(head_dim)


@dataclass(frozen=True)
class Experts:
    """A mixture-of-experts network's routed layers, counted on its (meta) modules."""

    layers: int  # layers with routed experts
    experts: int  # routed experts per such layer
    active: int  # routed experts each token runs through
    shared: int  # shared-expert parameters per layer (every token runs them), 0 when none
    expert_width: int  # an expert's inner (gate/up) width
    idle_parameters: int  # routed-expert parameters a token does not run through, over the whole network

    def describe(self) -> str:
        shared = ", plus a shared expert" if self.shared else ""
        return (
            f"{self.layers} layers of {self.experts} experts (width {self.expert_width:,}), {self.active} active per "
            f"token{shared}"
        )


def count_experts(meta: Any, config: Any) -> Experts | None:
    """The routed-expert layers of ``meta`` (modules with an ``experts`` list; ``config.num_experts_per_tok`` of them
    run per token), or None for a dense network."""
    import torch

    blocks = [
        module
        for module in meta.modules()
        if isinstance(getattr(module, "experts", None), torch.nn.ModuleList) and len(module.experts)
    ]
    active = getattr(config, "num_experts_per_tok", None)
    if not blocks or not active:
        return None
    per_block = [sum(p.numel() for p in block.experts.parameters()) for block in blocks]
    experts = len(blocks[0].experts)
    shared = getattr(blocks[0], "shared_experts", None)
    first = blocks[0].experts[0]
    return Experts(
        layers=len(blocks),
        experts=experts,
        active=int(active),
        shared=sum(p.numel() for p in shared.parameters()) if shared is not None else 0,
        expert_width=int(first.gate_proj.weight.shape[0]) if hasattr(first, "gate_proj") else 0,
        idle_parameters=sum(total * (experts - int(active)) // experts for total in per_block),
    )


def _implementation_detail(plan: Any, config: dict, meta: Any) -> str:
    """Which class runs and why (:attr:`~diffugrpo_plugin.models.load_plan.LoadPlan.reason`)."""
    cls = type(meta)
    if plan.implementation == "native":
        chosen = f"native: {cls.__module__}.{cls.__name__} (no remote code runs)"
    elif plan.implementation == "remote":
        auto_map = config.get("auto_map") or {}
        entry = auto_map.get("AutoModelForCausalLM") or auto_map.get("AutoModel") or cls.__name__
        chosen = f"remote: {entry} (trust_remote_code)"
    else:
        chosen = f"stock transformers: {cls.__name__}"
    return f"{chosen}; chosen because {plan.reason}"


def load_tokenizer(path: str, trust_remote_code: bool = False):
    """The checkpoint's tokenizer, or a :class:`ModelConfigError` naming the path."""
    from transformers import AutoTokenizer

    from diffugrpo_plugin.models.family import ModelConfigError
    from diffugrpo_plugin.models.native import register_with_transformers

    register_with_transformers()  # Dream's tokenizer files name a class only our registration knows
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelConfigError(
            f"cannot load the tokenizer of '{path}' ({type(exc).__name__}: {exc}); the "
            f"training job needs it beside the weights"
        ) from exc


def resolve_checkpoint(
    path: str, family: str | None = None, implementation: str = "auto", trust_remote_code: bool = False
) -> ResolvedCheckpoint:
    """Stage 1: what ``path`` resolves to, from its config and tokenizer (no weights are read).

    Raises :class:`~diffugrpo_plugin.models.family.ModelConfigError` for a path that is not a checkpoint,
    a config no family fits, or code that must run but is not trusted.
    """
    from diffugrpo_plugin.models.dlm import resolve_mask_token
    from diffugrpo_plugin.models.family import ModelConfigError, submodule
    from diffugrpo_plugin.models.lean_mlp import make_lean
    from diffugrpo_plugin.models.load_plan import load_model_config, plan_loading, planned_meta_model, read_model_config

    problem = checkpoint_path_problem(path)
    if problem:
        raise ModelConfigError(problem)
    local = os.path.expanduser(path)
    path = local if os.path.exists(local) else path
    config = read_model_config(path)
    plan = plan_loading(config, family, implementation, trust_remote_code, path)
    found = plan.family
    config_object = load_model_config(path, plan)
    tokenizer = load_tokenizer(path, plan.trust_remote_code)  # remote code runs only where the model's does
    meta = planned_meta_model(path, config, config_object, plan)

    mask_id, mask_source = resolve_mask_token(found, config_object, tokenizer)
    head_weight = found.head_weight(meta)  # [V, H]
    embedding_weight = submodule(meta, found.embedding).weight  # [V_embedding, H]
    tied = found.head_is_tied(meta)
    try:
        has_head_module = found.head is not None and submodule(meta, found.head) is not None
    except ModelConfigError:
        has_head_module = False
    if has_head_module:
        head = f"{found.head} (weight tied to {found.embedding})" if tied else found.head
    else:
        head = f"no head module: logits project with {found.embedding}.weight (tied)"
    vocab, hidden = (int(d) for d in head_weight.shape)
    layers, intermediate, kv_dim = _shape_from_config(config_object, hidden)
    dtype = config.get("dtype") or config.get("torch_dtype")
    lean = make_lean(meta, found.swiglu)  # structural, as the engine decides it before FSDP wraps the model
    mask_token = None
    if mask_id < len(tokenizer):
        mask_token = tokenizer.convert_ids_to_tokens(mask_id)
    block_size, block_size_source = found.block_size_of(config)
    experts = count_experts(meta, config_object)
    parameters = sum(p.numel() for p in meta.parameters())  # a tied weight is one parameter
    if experts is not None:
        # a token's feed-forward runs k experts (and the shared one): the activations' width in a sparse layer
        shared_width = experts.shared // 3 // hidden if experts.shared else 0
        intermediate = experts.active * experts.expert_width + shared_width
    resolution = Resolution(
        path=path,
        family=found.name,
        family_description=found.description,
        detected_from=detection_clue(found, config, family),
        implementation=plan.implementation,
        implementation_detail=_implementation_detail(plan, config, meta),
        model_class=f"{type(meta).__module__}.{type(meta).__name__}",
        attention_convention=found.attention_convention,
        logits_shift=found.logits_shift_of(config_object),
        mask_token_id=mask_id,
        mask_token=mask_token,
        mask_token_source=mask_source,
        head=head,
        head_tied=tied,
        embedding=found.embedding,
        vocab_size=vocab,
        config_vocab_size=getattr(config_object, "vocab_size", None),
        hidden_size=hidden,
        layers=layers,
        intermediate_size=intermediate,
        kv_dim=kv_dim,
        checkpoint_dtype=str(dtype) if dtype else None,
        parameters=parameters,
        embedding_parameters=embedding_weight.numel(),
        head_parameters=0 if tied else head_weight.numel(),
        lean_mlp=lean.summary(),
        lean_mlp_everywhere=lean.installed > 0 and not lean.skipped,
        block_size=block_size,
        block_size_source=block_size_source,
        experts=experts.describe() if experts is not None else None,
        active_parameters=parameters - experts.idle_parameters if experts is not None else None,
    )
    return ResolvedCheckpoint(
        resolution=resolution,
        config=config,
        config_object=config_object,
        plan=plan,
        tokenizer=tokenizer,
        family_override=family,
        meta=meta,
    )


# ---------------------------------------------------------------------------------------------
# Stage 2: the weights and the probes
# ---------------------------------------------------------------------------------------------


def probe_dtype(device: str, requested: str | None, checkpoint_dtype: str | None) -> str:
    """``requested``, else float32 on CPU, else the checkpoint's own dtype when it is float32/bfloat16."""
    if requested:
        return requested
    if str(device).split(":")[0] == "cpu":
        return "float32"
    return checkpoint_dtype if checkpoint_dtype in ("float32", "bfloat16") else "float32"


def _chat(tokenizer, text: str) -> list[int]:
    """``text`` as a user turn through the chat template with the assistant turn opened (as the rollout
    feeds prompts), or as it is when the tokenizer has no template."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    return list(tokenizer.encode(text, add_special_tokens=False))


def padding_probe(lm, short_ids: list[int], long_ids: list[int], pad_id: int, tolerance: float) -> PaddingProbe:
    """Logits of ``short_ids`` alone vs left-padded beside ``long_ids``; compared on the short prompt's
    real positions (for a shifted model not its first one, whose logits come from the position before).

    ``tolerance`` is multiplied by ``max(1, max |logit|)`` of the unpadded pass.
    """
    import torch

    from diffugrpo_plugin.sampling import left_pad

    if len(long_ids) <= len(short_ids):
        raise ValueError("the padding probe needs a second prompt longer than the first")
    device = next(lm.module.parameters()).device
    n = len(short_ids)
    with torch.no_grad():
        alone = lm.logits(torch.tensor([short_ids], device=device), torch.ones(1, n, dtype=torch.long, device=device))[
            0
        ].float()  # [n, V]
        ids, mask = left_pad([short_ids, long_ids], pad_id, device)  # [2, P]
        batched = lm.logits(ids, mask)[0, -n:].float()  # [n, V]: the short row's real positions
    start = 1 if lm.shift_logits else 0
    diff = float((alone[start:] - batched[start:]).abs().max())
    scaled = tolerance * max(1.0, float(alone.abs().max()))
    ok = diff <= scaled  # NaN compares False: a NaN leak fails
    return PaddingProbe(
        ok=bool(ok), max_abs_diff=diff, tolerance=scaled, positions=n - start, padding=len(long_ids) - n
    )


def head_probe(lm, ids: list[int], tolerance: float) -> HeadProbe:
    """fp32 log p of every token of ``ids`` (but a shifted model's first) through the fused head vs the
    log-softmax of the model's own logits. ``tolerance`` is multiplied by ``max(1, max |log p|)``."""
    import torch

    from diffugrpo_plugin.models.family import position_ids_from_mask

    device = next(lm.module.parameters()).device
    tokens = torch.tensor([ids], device=device)  # [1, n]
    mask = torch.ones_like(tokens)  # [1, n]
    rows = torch.arange(1 if lm.shift_logits else 0, len(ids), device=device)  # [R]
    with torch.no_grad():
        own = torch.log_softmax(lm.logits(tokens, mask)[0].float(), dim=-1)  # [n, V]
        own = own[rows].gather(-1, tokens[0, rows, None]).squeeze(-1)  # [R]
        fused, _ = lm.scored_logprobs(tokens, mask, position_ids_from_mask(mask), rows, tokens[0, rows])  # [R]
    diff = float((fused - own).abs().max())
    scaled = tolerance * max(1.0, float(own.abs().max()))
    return HeadProbe(ok=bool(diff <= scaled), max_abs_diff=diff, tolerance=scaled, rows=int(rows.numel()))


def lean_mlp_probe(lm, tolerance: float) -> LeanProbe | None:
    """The first SwiGLU block the training engine would make lean, run by the lean method and then by its own code
    on the same random input: output and gradients (input, the three projections) compared. ``tolerance`` is multiplied
    by ``max(1, max |value|)``. None when no block of the model can be made lean.

    The block is made lean in place and given its own method back afterwards (no copy of its weights)."""
    import torch

    from diffugrpo_plugin.models.lean_mlp import make_lean

    blocks = lm.family.swiglu
    found = next(
        (
            (name, module)
            for name, module in lm.module.named_modules()
            if blocks is not None and type(module).__name__ in blocks.classes
        ),
        None,
    )
    if found is None or not make_lean(found[1], blocks).installed:
        return None
    name, block = found
    parameter = next(block.parameters())
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, getattr(block, blocks.gate).in_features, generator=generator).to(parameter)  # [2, 5, H]
    upstream = torch.randn(2, 5, getattr(block, blocks.down).out_features, generator=generator).to(parameter)
    projections = torch.nn.ModuleList([getattr(block, part) for part in (blocks.gate, blocks.up, blocks.down)])

    def output_and_gradients() -> list:
        given = x.clone().requires_grad_()
        out = getattr(block, blocks.method)(given)
        out.backward(upstream)
        values = [out.detach(), given.grad, *(p.grad for p in projections.parameters())]
        block.zero_grad(set_to_none=True)
        return values

    try:
        lean = output_and_gradients()
    finally:
        vars(block).pop(blocks.method)  # the class's own method again
    own = output_and_gradients()
    diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(lean, own))
    scaled = tolerance * max(1.0, max(float(a.float().abs().max()) for a in own))
    return LeanProbe(
        ok=bool(diff <= scaled), block=f"{type(block).__name__} {name}", max_abs_diff=diff, tolerance=scaled
    )


def logprob_probe(lm, rows: list[tuple[list[int], list[int]]], pad_id: int, mask_seed: int = 0) -> LogprobProbe:
    """One coupled-masker pass over left-padded ``(prompt, completion)`` rows, forward and backward.

    Row ``i`` uses mask seed ``mask_seed + i``; the loss is the mean coupled log-prob of the
    completion tokens. Gradients are cleared afterwards.
    """
    import torch

    from diffugrpo_plugin.core.logprobs import coupled_token_logprobs
    from diffugrpo_plugin.core.masking import make_coupled
    from diffugrpo_plugin.sampling import left_pad

    device = next(lm.module.parameters()).device
    ids, mask = left_pad([prompt + completion for prompt, completion in rows], pad_id, device)  # [B, L]
    completion = torch.zeros_like(ids, dtype=torch.bool)  # [B, L]
    for row, (_, tokens) in enumerate(rows):
        completion[row, ids.shape[1] - len(tokens) :] = True
    seeds = torch.arange(len(rows), dtype=torch.int64) + mask_seed  # [B]
    views = make_coupled().views(ids, completion, lm.mask_token_id, seeds, mask.bool() & ~completion)
    parameters = [p for p in lm.module.parameters() if p.requires_grad]
    lm.module.zero_grad(set_to_none=True)
    try:
        with torch.enable_grad():
            started = time.perf_counter()
            logp = coupled_token_logprobs(lm, views, ids, mask).logp[completion]  # [tokens]
            forward_s = time.perf_counter() - started
            started = time.perf_counter()
            (-logp.mean()).backward()
            backward_s = time.perf_counter() - started
        grads = [p.grad.float() for p in parameters if p.grad is not None]
        finite_logp = bool(torch.isfinite(logp).all())
        finite_grads = bool(grads) and all(bool(torch.isfinite(g).all()) for g in grads)
        norm = (
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
            if grads
            else None
        )
    finally:
        lm.module.zero_grad(set_to_none=True)
    return LogprobProbe(
        ok=finite_logp and finite_grads,
        finite_logprobs=finite_logp,
        finite_gradients=finite_grads,
        mean_logprob=float(logp.detach().float().mean()),
        gradient_norm=norm,
        tokens=int(completion.sum()),
        head_rows=int((views.coef != 0).sum()),
        views=views.num_views,
        mask_seed=mask_seed,
        forward_seconds=forward_s,
        backward_seconds=backward_s,
    )


def sampling_probe(
    lm, tokenizer, prompt_ids: list[int], sampler: str, new_tokens: int, steps: int, seed: int = 0
) -> SamplingProbe:
    """``steps`` greedy denoising steps of ``sampler`` for ``new_tokens`` tokens after the prompt."""
    from diffugrpo_plugin.sampling import build_sampler, left_pad, padding_id

    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no EOS token; generation needs one")
    device = next(lm.module.parameters()).device
    ids, mask = left_pad([prompt_ids], padding_id(tokenizer), device)
    started = time.perf_counter()
    out = build_sampler(sampler, steps=steps, temperature=0.0).generate(
        lm, ids, mask, new_tokens, eos_token_id=tokenizer.eos_token_id, pad_token_id=padding_id(tokenizer), seeds=[seed]
    )
    seconds = time.perf_counter() - started
    tokens = out.completion_ids[0, : int(out.lengths[0])].tolist()
    return SamplingProbe(
        ok=True,
        sampler=sampler,
        steps=int(out.steps[0]),
        new_tokens=len(tokens),
        seconds=seconds,
        text=tokenizer.decode(tokens, skip_special_tokens=False),
        token_ids=tokens,
    )


def load_for_probes(resolved: ResolvedCheckpoint, device: str = "cpu", dtype: str = "float32"):
    """The checkpoint's weights as a wrapped :class:`~diffugrpo_plugin.models.dlm.DiffusionLM` in eval mode."""
    import torch

    from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained

    started = time.perf_counter()
    module = load_pretrained(resolved.resolution.path, dtype=getattr(torch, dtype), plan=resolved.plan)
    module = module.to(device).eval()
    lm = DiffusionLM.wrap(module, resolved.tokenizer, family=resolved.family_override)
    cls = type(module)
    return lm, LoadResult(
        device=str(device),
        dtype=dtype,
        seconds=time.perf_counter() - started,
        model_class=f"{cls.__module__}.{cls.__name__}",
    )


def run_probes(
    resolved: ResolvedCheckpoint,
    device: str = "cpu",
    dtype: str | None = None,
    prompt: str = DEFAULT_PROMPT,
    completion: str = DEFAULT_COMPLETION,
    sampler: str | None = None,
    sample_tokens: int = 16,
    sample_steps: int = 8,
    mask_seed: int = 0,
    tolerance: float | None = None,
) -> ModelCheck:
    """Stage 2: load the weights on ``device`` in ``dtype`` (see :func:`probe_dtype`) and run the probes.

    Loading errors propagate; a probe that raises is reported as failed with its error.
    """
    from diffugrpo_plugin.models.weights import one_line
    from diffugrpo_plugin.sampling import padding_id

    dtype = probe_dtype(device, dtype, resolved.resolution.checkpoint_dtype)
    lm, load = load_for_probes(resolved, device, dtype)
    tokenizer = resolved.tokenizer
    pad_id = padding_id(tokenizer)
    short_ids = _chat(tokenizer, prompt)
    long_ids = _chat(tokenizer, prompt + LONGER_PROMPT_SUFFIX)
    if len(long_ids) <= len(short_ids):
        long_ids = short_ids + short_ids
    answer = list(tokenizer.encode(completion, add_special_tokens=False))
    if tokenizer.eos_token_id is not None:
        answer.append(int(tokenizer.eos_token_id))
    check = ModelCheck(resolution=resolved.resolution, load=load)
    base = tolerance if tolerance is not None else PADDING_TOLERANCE.get(dtype, PADDING_TOLERANCE["bfloat16"])
    sampler_name = sampler or natural_sampler(resolved.resolution.family)
    runs = {  # each probe: how to run it, and its record when it raises (a probe's failure is a finding)
        "padding": (
            lambda: padding_probe(lm, short_ids, long_ids, pad_id, base),
            lambda error: PaddingProbe(ok=False, error=error),
        ),
        "head": (lambda: head_probe(lm, long_ids + answer, base), lambda error: HeadProbe(ok=False, error=error)),
        "lean_mlp": (lambda: lean_mlp_probe(lm, base), lambda error: LeanProbe(ok=False, error=error)),
        "logprob": (
            lambda: logprob_probe(lm, [(short_ids, answer), (long_ids, answer)], pad_id, mask_seed),
            lambda error: LogprobProbe(ok=False, mask_seed=mask_seed, error=error),
        ),
        "sampling": (
            lambda: sampling_probe(lm, tokenizer, short_ids, sampler_name, sample_tokens, sample_steps, mask_seed),
            lambda error: SamplingProbe(ok=False, sampler=sampler_name, error=error),
        ),
    }
    for name in PROBES:
        run, failed = runs[name]
        try:
            setattr(check, name, run())
        except Exception as exc:  # noqa: BLE001 - reported with its error
            setattr(check, name, failed(one_line(exc)))
    return check
