"""The rollout's half in each trainer worker: :class:`DiffusionRollout` (verl's ``BaseRollout``) keeps an unsharded
copy of the policy, takes every weight update verl pushes, and samples; the threads :func:`_serve_from_worker` starts
pull batches from this worker's server and deliver the results.

Seeds: the ``k``-th sample of a prompt at step ``s`` samples with a seed derived from (``rollout.seed``, ``s``,
the prompt's tokens, ``k``), so the global RNG is never used and neither the replica nor the order in which the
requests arrive changes a completion (:meth:`DiffusionRollout._seed_for`). A validation's requests use
:data:`VALIDATION_SEED_STEP` for ``s`` (:meth:`DiffusionRollout.seed_validation`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any, Generator

import ray
import torch

from verl.utils.device import get_device_name
from verl.workers.rollout.base import BaseRollout

from diffugrpo_plugin.config.defaults import DIFFUSION_DEFAULTS
from diffugrpo_plugin.integration.platform import release_openmp_threads
from diffugrpo_plugin.integration.sampler_choice import is_default_model
from diffugrpo_plugin.models.dlm import DiffusionLM, load_pretrained
from diffugrpo_plugin.models.lora import (
    adapted_module_names,
    canonical_weight_name,
    inject_adapter,
    is_adapter_weight,
    refuse_adapted_head,
)
from diffugrpo_plugin.models.quantization import (
    QUANT_RECORD,
    is_quant_state,
    quantization_settings,
    quantized_parameter_names,
)
from diffugrpo_plugin.sampling import build_request_sampler, build_sampler, left_pad, padding_id
from diffugrpo_plugin.sampling.fast_path import resolve_sampler
from diffugrpo_plugin.serving.request_batcher import SAMPLE_INDEX_KEY, UNMASK_STEP_FIELD

logger = logging.getLogger("diffugrpo.rollout")

NAME = "diffusion"
POLL_S = 5.0  # how long one pull waits for a request; the worker polls again after
HEARTBEAT_S = 5.0
MAX_PULL_FAILURES = 10
VALIDATION_SEED_STEP = -1
"""The step every validation's requests are seeded with (training steps count from 0): see
:meth:`DiffusionRollout.seed_validation`."""

_local_rollout: "DiffusionRollout | None" = None


def _request_seed(base: int, step: int, source: tuple, prompt_ids: list[int], occurrence: int) -> int:
    digest = hashlib.blake2b(repr((base, step, source, tuple(prompt_ids), occurrence)).encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") & (2**62 - 1)


class DiffusionRollout(BaseRollout):
    """Per-worker rollout: an unsharded policy copy plus a diffusion sampler."""

    def __init__(self, config, model_config, device_mesh, *args, **kwargs):
        super().__init__(config, model_config, device_mesh)
        self.device = torch.device(get_device_name())
        dtype = getattr(torch, str(self.config.dtype)) if isinstance(self.config.dtype, str) else self.config.dtype
        diffusion = dict(getattr(self.model_config, "diffusion", None) or {})
        self.quantization = quantization_settings(self.model_config.lora)  # a 4-bit base (QLoRA), or None
        module = load_pretrained(
            self.model_config.local_path,
            dtype=dtype,
            trust_remote_code=self.model_config.trust_remote_code,
            attn_implementation=self._attn_implementation(),
            family=diffusion.get("family"),
            implementation=diffusion.get("implementation") or "auto",
            quantization=self.quantization,
            device=self.device,
        )
        self.lm = DiffusionLM.wrap(
            module.to(self.device).eval(),
            tokenizer=self.model_config.tokenizer,
            mask_token_id=diffusion.get("mask_token_id"),
            logits_shift=diffusion.get("logits_shift"),
            family=diffusion.get("family"),
        )
        # sampler auto: the loaded model's family's (block for SDAR / LLaDA2)
        self.sampler_name, self.sampler_settings, self.sampler_phrase = resolve_sampler(
            dict((self.config.engine_kwargs or {}).get(NAME, {}) or {}),
            self.lm.family.default_sampler,
            is_default_model(getattr(self.model_config, "path", None)),
        )
        build_sampler(self.sampler_name, **self.sampler_settings)  # fail at start-up on a bad option
        self.tokenizer = self.model_config.tokenizer
        # the step each token was decided at travels with the batch (trajectory replay's likelihood)
        self.record_trace = bool(diffusion.get("record_trace", DIFFUSION_DEFAULTS.record_trace))
        self.global_steps = 0
        self.replica_rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self._occurrences: dict[tuple[int, tuple[int, ...], tuple], int] = {}
        self._validating = False
        self._batches = 0
        if self.replica_rank == 0:
            print(f"[diffugrpo] rollout: sampler {self.sampler_name}, {self.sampler_phrase}", flush=True)
        global _local_rollout
        _local_rollout = self

    def _attn_implementation(self) -> str | None:
        override = dict(self.model_config.override_config or {})
        return override.get("attn_implementation")

    async def resume(self, tags: list[str]):
        if "weights" in tags and self.device.type != "cpu":
            self.lm.module.to(self.device)

    async def release(self):
        if self.device.type != "cpu":
            self.lm.module.to("cpu")
            torch.cuda.empty_cache()

    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        wire_format: str = "named_tensors",
        peft_config: dict | None = None,
        base_sync_done: bool = False,
        **kwargs,
    ):
        """Copy the trainer's weights in by name. With LoRA (verl's default ``lora.merge=false``) verl sends the
        adapters alone with their ``peft_config``: the first such update adds the same adapters to this copy, and
        sampling runs through them (exact; a sync moves the adapters only). ``lora.merge=true`` sends whole
        merged weights, as without LoRA."""
        if wire_format != "named_tensors":
            raise NotImplementedError(
                f"the diffusion rollout takes full named tensors, not '{wire_format}'; "
                f"use actor_rollout_ref.rollout.checkpoint_engine.backend=naive"
            )
        module = self.lm.module
        if peft_config is not None and not adapted_module_names(module):
            inject_adapter(module, peft_config)
            refuse_adapted_head(module, self.lm.family)
            module.to(self.device).eval()
        adapters_only = peft_config is not None and base_sync_done
        # one spelling per weight (peft's wrapper prefix, base_layer and adapter name dropped); state_dict keys
        # include both names of tied weights (embeddings / lm_head)
        targets = {canonical_weight_name(name): tensor for name, tensor in module.state_dict(keep_vars=True).items()}
        quantized = set()  # the 4-bit weights and their quantization state, by canonical name
        if self.quantization is not None:
            quantized = {canonical_weight_name(name) for name in quantized_parameter_names(module)}
            quantized |= {name for name in targets if is_quant_state(name)}
        updated = set()
        with torch.no_grad():
            for name, tensor in weights:
                target = targets.get(canonical_weight_name(name))
                if target is None:
                    raise KeyError(
                        f"weight '{name}' from the trainer has no counterpart in the rollout model "
                        f"({type(module).__name__}{' with LoRA adapters' if peft_config else ''}); the "
                        f"trainer and the rollout must build the same model: same path, family and "
                        f"implementation (actor_rollout_ref.model.diffusion)"
                    )
                if canonical_weight_name(name) in quantized:
                    # the 4-bit codes and their scales: both sides quantized the same checkpoint, so they must be
                    # equal (bitsandbytes' record of the state, which names the dtype each side computes in, is not)
                    if QUANT_RECORD not in name and not torch.equal(target, tensor.to(target.device)):
                        raise RuntimeError(
                            f"the trainer's 4-bit weight '{name}' differs from the rollout's: both must "
                            f"quantize the same checkpoint (actor_rollout_ref.model.path) with the same "
                            f"actor_rollout_ref.model.lora settings, each reading it in float32 or its own dtype"
                        )
                else:
                    target.copy_(tensor.to(device=target.device, dtype=target.dtype))
                updated.add(id(target))
        stale = [
            n for n, p in module.named_parameters() if id(p) not in updated and is_adapter_weight(n) == adapters_only
        ]
        if stale:
            raise RuntimeError(
                f"weight update left {len(stale)} rollout parameters stale, e.g. {stale[:3]}: the "
                f"trainer sent a different model (actor_rollout_ref.model and its diffusion settings "
                f"must describe one model for both)"
            )
        if kwargs.get("global_steps") is not None:
            self.global_steps = int(kwargs["global_steps"])
        release_openmp_threads()  # the training thread's last torch before sampling: the sampler's thread runs alone

    def _sampler(self, sampling_params: dict[str, Any]):
        """The configured sampler with the request's temperature / top-p / top-k where it takes them."""
        return build_request_sampler(
            self.sampler_name,
            self.sampler_settings,
            sampling_params.get("temperature"),
            sampling_params.get("top_p"),
            sampling_params.get("top_k"),
        )

    def seed_validation(self, validating: bool) -> None:
        """Seed the requests that follow from :data:`VALIDATION_SEED_STEP` (``True``, a validation starts) or from
        the training step again (``False``).

        Every validation then samples the k-th completion of a task with the same seed (common random numbers),
        so two validations are not also two independent draws of noise. How much that buys depends on how alike two
        policies sample from one seed (measured by ``benchmarks/validation_noise.py``: docs/results/learning.md).
        Exact with any number of rollout replicas under our agent loop (the seed names the sample, not the replica
        that serves it). Switched only between steps, when no training request is in flight (the synchronous
        trainer's ``_validate``).
        """
        self._validating = validating
        self._occurrences = {}

    def _seed_for(self, prompt_ids: list[int], sample_index: int | None) -> int:
        """The seed of one request: from the step, the prompt and which of the prompt's samples it is.

        ``sample_index`` is the request's index among its prompt's samples (our agent loop passes verl's
        ``session_id`` as :data:`~diffugrpo_plugin.serving.request_batcher.SAMPLE_INDEX_KEY`), so the k-th sample of a
        prompt gets the same seed whichever replica serves it and in whatever order the requests arrive. Without it
        (another agent loop) the k-th request of the prompt to reach this replica is the k-th sample. A prompt drawn
        twice in one step (a data sampler that draws with replacement) gets distinct seeds for its two k-th samples,
        in the order they arrive.
        """
        step = VALIDATION_SEED_STEP if self._validating else self.global_steps
        source = ("sample", sample_index) if sample_index is not None else ("replica", self.replica_rank)
        key = (step, tuple(prompt_ids), source)
        occurrence = self._occurrences.get(key, 0)
        self._occurrences = {k: v for k, v in self._occurrences.items() if k[0] == step}
        self._occurrences[key] = occurrence + 1
        return _request_seed(int(self.config.seed), step, source, prompt_ids, occurrence)

    @torch.no_grad()
    def generate_batch(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Generate one completion per request (``prompt_ids``, ``sampling_params``); same order out."""
        started = time.perf_counter()
        results: list[dict[str, Any] | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, request in enumerate(requests):
            params = request["sampling_params"]
            groups.setdefault((params.get("temperature"), params.get("top_p"), params.get("top_k")), []).append(i)
        for indices in groups.values():
            sampler = self._sampler(requests[indices[0]]["sampling_params"])
            prompts = [list(requests[i]["prompt_ids"]) for i in indices]
            seeds = [
                self._seed_for(prompt, requests[i]["sampling_params"].get(SAMPLE_INDEX_KEY))
                for prompt, i in zip(prompts, indices)
            ]
            pad = padding_id(self.tokenizer)
            prompt_ids, prompt_mask = left_pad(prompts, pad, self.device)
            out = sampler.generate(
                self.lm,
                prompt_ids,
                prompt_mask,
                int(self.config.response_length),
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=pad,
                seeds=seeds,
                record_trace=self.record_trace,
            )
            for row, i in enumerate(indices):
                # the whole canvas, padding after the first EOS included (see agent_loop.py)
                results[i] = {"token_ids": out.completion_ids[row].tolist(), "global_steps": self.global_steps}
                if self.record_trace:
                    results[i][UNMASK_STEP_FIELD] = out.unmask_step[row].tolist()
        self._batches += 1
        for result in results:
            result["generation_batch"] = f"{self.replica_rank}:{self._batches}"
            result["generation_seconds"] = time.perf_counter() - started
        return results


def _serve_from_worker(_worker_actor, server: ray.actor.ActorHandle) -> None:
    """Runs in the trainer worker (through ``__ray_call__``): starts the thread that takes batches from ``server``
    and generates them with this process's :class:`DiffusionRollout`, and the one that tells the server, while the
    first lives, that the worker does."""
    if _local_rollout is None:
        raise RuntimeError("no diffusion rollout in this worker process; is actor_rollout_ref.rollout.name=diffusion?")
    device = torch.accelerator.current_device_index() if torch.accelerator.is_available() else None
    generating = threading.Thread(
        target=_generate_batches, args=(_local_rollout, server, device), daemon=True, name="diffusion-rollout"
    )
    generating.start()
    threading.Thread(
        target=_send_heartbeats, args=(server, generating), daemon=True, name="diffusion-heartbeat"
    ).start()


def _generate_batches(rollout: DiffusionRollout, server: ray.actor.ActorHandle, device: int | None) -> None:
    if device is not None:
        torch.accelerator.set_device_index(device)  # the current device is per thread; the worker's main thread set it
    failures = 0
    while True:
        try:
            taken = ray.get(server.next_batch.remote(POLL_S))
        except ray.exceptions.ActorDiedError:
            return  # the server is gone: the run is shutting down
        except ray.exceptions.RayError:
            failures += 1
            if failures > MAX_PULL_FAILURES:
                logger.exception(
                    "diffusion rollout: the server did not answer %d pulls in a row; stopping, so that "
                    "its waiting requests fail",
                    failures,
                )
                return  # the heartbeats stop with this thread
            time.sleep(1.0)
            continue
        failures = 0
        if taken is None:
            continue
        batch_id, requests = taken
        try:
            results = rollout.generate_batch(requests)
            server.deliver.remote(batch_id, results)
        except Exception as exc:  # noqa: BLE001 - every waiting request learns why
            logger.exception("diffusion rollout: generating or delivering a batch failed")
            server.deliver.remote(batch_id, error=f"{type(exc).__name__}: {exc}")
        finally:
            release_openmp_threads()  # the training passes that follow run alone


def _send_heartbeats(server: ray.actor.ActorHandle, generating: threading.Thread) -> None:
    while generating.is_alive():
        try:
            ray.get(server.heartbeat.remote())
        except ray.exceptions.RayError:
            return
        time.sleep(HEARTBEAT_S)
