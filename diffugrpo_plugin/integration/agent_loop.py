"""verl agent loop ``diffusion_single_turn``: verl's single-turn loop with diffusion's EOS convention.

A diffusion sampler fills a fixed canvas of ``response_length`` tokens; everything after the first
EOS is padding. The reference trains on that whole canvas (the model must see the same context it
generated in) but scores only up to the first EOS. So the rollout returns the full canvas and this
loop sets ``response_mask`` to 0 after the first EOS: the padding stays in the sequence and is
excluded from the loss.

It also tells the rollout which completion of its prompt a request is: verl's loop passes each of a prompt's ``n``
samples its ``session_id`` (0 to n-1), and the rollout seeds the request from it (:data:`SAMPLE_INDEX_KEY`), not
from the order the requests reach the sampler, so a seed's run gives each sample the same completion whatever the
timing.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from diffugrpo_plugin.serving.request_batcher import SAMPLE_INDEX_KEY

NAME = "diffusion_single_turn"


def mask_after_first_eos(response_ids: list[int], response_mask: list[int], eos_token_id: int) -> list[int]:
    """``response_mask`` with every position after the first EOS set to 0 (the EOS itself kept)."""
    if eos_token_id not in response_ids:
        return list(response_mask)
    end = response_ids.index(eos_token_id) + 1
    return list(response_mask[:end]) + [0] * (len(response_mask) - end)


class DiffusionAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        if kwargs.get("session_id") is not None:
            sampling_params = {**sampling_params, SAMPLE_INDEX_KEY: int(kwargs["session_id"])}
        output = await super().run(sampling_params, **kwargs)
        output.response_mask = mask_after_first_eos(
            output.response_ids, output.response_mask, self.tokenizer.eos_token_id
        )
        return output
