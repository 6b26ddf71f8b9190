"""Helpers for the sampler tests: a fake model with hand-crafted logits, prompt batches, tiny random models
(:func:`lm_for`) and one sampler call on them (:func:`run`)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from conftest import build_tiny_module
from diffugrpo_plugin.models.dlm import DiffusionLM
from diffugrpo_plugin.models.families import BIDIRECTIONAL
from diffugrpo_plugin.sampling import left_pad

FAKE_VOCAB = 6
FAKE_MASK = 5
FAKE_EOS = 4
FAKE_PAD = 0
ABSENT = 1e-9  # probability given to tokens a crafted distribution leaves out


def log_probs(*probs: float) -> list[float]:
    """Logits of a distribution over the fake vocabulary: given tokens first, the rest absent."""
    padded = list(probs) + [ABSENT] * (FAKE_VOCAB - len(probs))
    return [math.log(p) for p in padded]


class TableModel(torch.nn.Module):
    """Logits looked up by position id in a table chosen by the row's first real prompt token.

    ``tables[first_token][position]`` are the logits at that position; the same sequence with
    its prompt masked (CFG's unconditional pass) uses ``tables[FAKE_MASK]``. The output does
    not depend on the other tokens, so the right choice of every step is known by hand.
    """

    def __init__(self, tables: dict[int, list[list[float]]]):
        super().__init__()
        self.tables = {key: torch.tensor(rows, dtype=torch.float32) for key, rows in tables.items()}
        self.config = SimpleNamespace(vocab_size=FAKE_VOCAB)  # the logit width, which sizes micro-batches
        self.calls = 0

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        self.calls += 1
        first_real = attention_mask.long().argmax(dim=1)  # [b]
        keys = input_ids.gather(1, first_real.unsqueeze(1)).squeeze(1).tolist()
        logits = torch.stack([self.tables[key][positions] for key, positions in zip(keys, position_ids)])
        return SimpleNamespace(logits=logits)  # [b, L, V]


def fake_lm(tables: dict[int, list[list[float]]]) -> DiffusionLM:
    return DiffusionLM(TableModel(tables), mask_token_id=FAKE_MASK, shift_logits=False, family=BIDIRECTIONAL)


def single_thread():
    """Generator for a module-scoped fixture: one intra-op thread while a test module runs.

    The models here are tiny; on a shared 2-core machine two threads spin against other
    processes and a forward takes ~50x longer than with one.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


EOS, PAD = 2, 0


SHORT = [5, 6, 7]


LONG = [11, 12, 13, 14, 15, 16, 17, 18]


def lm_for(style: str, causal: bool = False) -> DiffusionLM:
    """A tiny random model with weights drawn wide (std 0.5), so its predictions are peaked.

    At the default init every position is near-uniform and near-tied with its neighbours, so
    float rounding (~1e-7 between a padded and an unpadded forward) would decide greedy
    choices; with spread-out logits the comparisons below test the sampler, not the rounding.
    """
    module = build_tiny_module(style)
    module.config.is_causal = causal
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for weight in module.parameters():
            if weight.dim() == 2:
                weight.copy_(torch.randn(weight.shape, generator=generator) * 0.5)
    # a causal variant is no diffusion LM by its config: name the calling convention explicitly
    return DiffusionLM.wrap(module, family="bidirectional")


def run(sampler, lm, prompts, new_tokens=16, seeds=None, trace=True):
    ids, mask = left_pad(prompts, PAD)
    return sampler.generate(
        lm,
        ids,
        mask,
        new_tokens,
        eos_token_id=EOS,
        pad_token_id=PAD,
        seeds=seeds or list(range(len(prompts))),
        record_trace=trace,
    )
