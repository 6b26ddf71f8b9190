"""benchmarks/dream_loop.py's baseline is Dream's loop: batched and left-padded, greedy, it produces our plain
entropy sampler's tokens, so the benchmark times the same work both ways."""

import pytest
import torch

from diffugrpo_plugin.sampling import build_sampler, left_pad
from diffugrpo_plugin.sampling.denoising import cut_after_eos
from dream_loop import dream_loop
from samplers_support import EOS, LONG, PAD, SHORT, lm_for
from step import PLAIN_LEVERS


@pytest.mark.parametrize("steps, top_k", [(16, None), (5, 5)])
def test_the_batched_dream_loop_gives_the_plain_samplers_tokens(steps, top_k):
    lm = lm_for("dream")
    ids, mask = left_pad([SHORT, LONG, [7, 8]], PAD)
    ours = build_sampler("entropy", steps=steps, temperature=0.0, top_p=None, top_k=top_k, **PLAIN_LEVERS)
    expected = ours.generate(lm, ids, mask, 16, eos_token_id=EOS, pad_token_id=PAD, seeds=[0, 1, 2]).completion_ids
    loop = dream_loop(lm, ids, mask, 16, steps, 0.0, None, top_k, torch.Generator().manual_seed(0))
    assert cut_after_eos(loop, EOS, PAD)[0].tolist() == expected.tolist()
