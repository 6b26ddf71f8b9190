"""SwiGLU feed-forward blocks that keep two of their four activations for the backward.

A SwiGLU block computes ``down(silu(gate(x)) * up(x))``. Run op by op under autograd it saves four
``[tokens, intermediate]`` tensors: ``gate(x)`` and ``up(x)`` (for the activation's and the product's
gradients), ``silu(gate(x))`` (for the product's) and the product itself (the down projection's
input, for its weight gradient). Without gradient checkpointing they are the largest part of what
a model body holds through a coupled pass (180 of 327 MiB in ``benchmarks/coupled_logprob.py``).
:func:`swiglu_down` saves only ``gate(x)`` and ``up(x)`` and recomputes the other two in its backward:
two elementwise passes per block, with the kernels autograd itself would call (``silu``, ``mul``,
``silu_backward``, the down projection's two ``mm``), so the output and the gradients of ``gate`` and
``up`` equal the stock ones bit for bit, and the down projection's weight gradient to rounding (for
some input shapes autograd sums its rows in another order).

:func:`make_lean` installs it where a model family (``ModelFamily.swiglu``) says its SwiGLU
blocks are, for each block that is recognisably stock: the method is its class's own (Liger or
another patch has not replaced it), the down projection a plain ``nn.Linear`` (a LoRA or
quantised layer keeps its own forward) and the activation SiLU. Plain torch; no verl.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


class _SwiGLUDown(torch.autograd.Function):
    """``linear(silu(gate) * up, weight, bias)`` saving ``gate`` and ``up`` only.

    The backward allocates three ``[..., I]`` buffers and reuses them: the recomputed activation and
    product become the gradients of the product's two factors, and the down projection's input
    gradient becomes the gate's. Autocast is honoured as the unfused ops would meet it: the forward
    runs under the caller's autocast state, and the backward re-enters that state (the autograd
    engine's thread has none), so its matmuls run in the dtype the forward's ``linear`` ran in.
    """

    @staticmethod
    def forward(ctx, gate, up, weight, bias):
        if gate.dtype != up.dtype or gate.shape != up.shape:
            raise ValueError(
                f"a SwiGLU block's gate and up projections must agree: {gate.dtype} {tuple(gate.shape)} "
                f"vs {up.dtype} {tuple(up.shape)}"
            )
        device = gate.device.type
        ctx.autocast = (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        ctx.save_for_backward(gate, up, weight)
        ctx.bias_dtype = None if bias is None else bias.dtype
        return F.linear(F.silu(gate).mul_(up), weight, bias)  # [..., H]

    @staticmethod
    def backward(ctx, grad_out):  # grad_out [..., H]
        gate, up, weight = ctx.saved_tensors
        want_gate, want_up, want_weight, want_bias = ctx.needs_input_grad
        device, autocast_on, autocast_dtype = ctx.autocast
        with torch.autocast(device, dtype=autocast_dtype, enabled=autocast_on):
            activated = F.silu(gate)  # [..., I] recomputed
            product = activated * up  # [..., I] recomputed: the down projection's input
            grad_rows = grad_out.reshape(-1, grad_out.shape[-1])  # [T, H]
            grad_weight = grad_bias = None
            if want_weight:  # as mm's backward writes it: (input^T grad)^T
                grad_weight = product.reshape(-1, product.shape[-1]).t().mm(grad_rows).t().to(weight.dtype)  # [H, I]
            if want_bias:
                grad_bias = grad_rows.sum(0).to(ctx.bias_dtype)  # [H]
            grad_product = grad_rows.mm(weight).view(product.shape)  # [..., I]
        grad_up = torch.mul(grad_product, activated, out=product) if want_up else None  # product's buffer
        if not want_gate:
            return None, grad_up, grad_weight, grad_bias
        grad_activated = torch.mul(grad_product, up, out=activated)  # activation's buffer
        grad_gate = torch.ops.aten.silu_backward.grad_input(grad_activated, gate, grad_input=grad_product)
        return grad_gate, grad_up, grad_weight, grad_bias


def swiglu_down(
    gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``linear(silu(gate) * up, weight, bias)``, keeping only ``gate`` and ``up`` for the backward.

    gate, up [..., I]; weight [H, I]; bias [H] or None -> [..., H].
    """
    return _SwiGLUDown.apply(gate, up, weight, bias)


@dataclass(frozen=True)
class SwiGLUBlocks:
    """Where a family's SwiGLU feed-forwards are: modules of these classes whose ``method(x)`` returns
    ``down(act(gate(x)) * up(x))`` with the named submodules.

    Attributes:
        classes: class names of the modules that own the three projections (``Qwen2MLP``).
        method: the owner's method that takes the normalised hidden states and returns the block's output.
        gate, up, down: the owner's projection attributes.
        activation: the owner's activation attribute, checked to be SiLU; None when the method applies
            SiLU itself (our native LLaDA block).
    """

    classes: tuple[str, ...]
    method: str = "forward"
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    activation: str | None = "act_fn"


def _lean_method(owner: nn.Module, blocks: SwiGLUBlocks, hidden: torch.Tensor) -> torch.Tensor:
    down = getattr(owner, blocks.down)
    return swiglu_down(getattr(owner, blocks.gate)(hidden), getattr(owner, blocks.up)(hidden), down.weight, down.bias)


def _is_silu(module: object) -> bool:
    # transformers' ACT2FN["silu"] is its own SiLUActivation class, not nn.SiLU
    return isinstance(module, nn.SiLU) or type(module).__name__ == "SiLUActivation"


def _is_lean(owner: nn.Module, blocks: SwiGLUBlocks) -> bool:
    """Whether :func:`make_lean` gave ``owner`` the lean method."""
    method = vars(owner).get(blocks.method)
    return isinstance(method, functools.partial) and method.func is _lean_method


def _why_not(owner: nn.Module, blocks: SwiGLUBlocks) -> str | None:
    """Why ``owner`` cannot take the lean method (a short reason), or None when it can."""
    name = type(owner).__name__
    if not callable(getattr(type(owner), blocks.method, None)):
        return f"{name} has no {blocks.method}() of its own (its code computes the feed-forward inline)"
    if blocks.method in vars(owner):
        return f"{name}.{blocks.method} was already replaced on the instance (Liger or another patch)"
    down = type(getattr(owner, blocks.down, None))
    if down is not nn.Linear:
        return (
            f"{name}.{blocks.down} is a {down.__name__}, not a plain nn.Linear (LoRA and quantised layers keep "
            f"their own forward)"
        )
    if blocks.activation is not None:
        activation = getattr(owner, blocks.activation, None)
        if not _is_silu(activation):
            return f"{name}.{blocks.activation} is {type(activation).__name__}, not SiLU"
    return None


@dataclass
class LeanReport:
    """What :func:`make_lean` did: blocks made lean, and blocks left as they were with the reason."""

    installed: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> blocks

    def summary(self) -> str:
        parts = [f"{self.installed} SwiGLU block(s) keep 2 of 4 activations"]
        parts += [f"{count} left stock: {reason}" for reason, count in self.skipped.items()]
        return "; ".join(parts)


def make_lean(module: nn.Module, blocks: SwiGLUBlocks | None) -> LeanReport:
    """Give every SwiGLU block of ``module`` that ``blocks`` describes the lean method (:func:`swiglu_down`),
    in place, on the instance; blocks that do not qualify keep their own code and are counted with the reason.

    Structural only (parameters may still be on the meta device): call it on the model before FSDP wraps
    it and after LoRA adapters are in place. Calling it again changes nothing.
    """
    report = LeanReport()
    if blocks is None:
        return report
    for owner in module.modules():
        if type(owner).__name__ not in blocks.classes:
            continue
        reason = None if _is_lean(owner, blocks) else _why_not(owner, blocks)
        if reason is None:
            setattr(owner, blocks.method, functools.partial(_lean_method, owner, blocks))
            report.installed += 1
        else:
            report.skipped[reason] += 1
    return report
