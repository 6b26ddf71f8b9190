"""The diffusion rollout's server: gathers the generation requests that arrive together into batches that the
trainer worker pulls, and answers each request when its batch comes back.

verl's agent loop sends one token-in/token-out ``generate`` request per sample to a rollout server (a Ray actor of
its own). A diffusion sampler pays every denoising forward once per batch, so the server holds the first request
``batch_window_s`` for others to join. The trainer worker, where the policy copy and the sampler live
(:mod:`diffugrpo_plugin.integration.rollout`), takes batches with :meth:`RequestBatcher.next_batch` and returns
them with :meth:`RequestBatcher.deliver`: the server never calls the worker, so it never holds the worker's Ray
handle, whose class Ray would import here, and with it torch and verl (about 430 MiB a process; this one stays
near Ray's bare worker). For the same reason this module imports neither torch, verl nor Ray, and answers with
:class:`GeneratedTokens`, which has the fields verl's ``TokenOutput`` has and that verl reads.

When the trainer announces how many requests a dispatch of its batch sends (:meth:`RequestBatcher.expect`), the batch
waits for all of them instead: verl's agent loop sends one request per sample, each after its prompt's TransferQueue
update, so on a busy host a step's requests arrive over more than the window, and each batch pays every denoising
forward (docs/concepts/step-cost.md: with the announcement every step of the benchmark took one sampler call). A
request that never comes holds the batch ``quiet_limit_s`` after the last one, and is then no longer waited for.

A worker that dies mid-batch would leave its requests waiting for ever; it sends :meth:`RequestBatcher.heartbeat`
every few seconds, and requests waiting on a worker not heard from for ``silence_limit_s`` fail with the reason.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

BATCH_WINDOW_S = 0.02
QUIET_LIMIT_S = 0.5
SILENCE_LIMIT_S = 120.0
SAMPLE_INDEX_KEY = "diffusion_sample_index"
"""The sampling parameter by which our agent loop tells the rollout which of its prompt's samples a request is
(verl's ``session_id``); the rollout seeds the request from it."""
UNMASK_STEP_FIELD = "unmask_step"  # a result's denoising trace: the step each canvas token was decided at


@dataclass
class GeneratedTokens:
    """One request's answer, with the fields of verl's ``TokenOutput`` that its agent loop and client read."""

    token_ids: list[int]
    log_probs: list[float] | None = None
    routed_experts: Any = None
    stop_reason: str | None = "completed"
    num_preempted: int | None = None
    extra_fields: dict[str, Any] = field(default_factory=dict)


class RequestBatcher:
    """verl's rollout-server surface, batching for a worker that pulls (see the module docstring)."""

    def __init__(
        self,
        batch_window_s: float = BATCH_WINDOW_S,
        silence_limit_s: float = SILENCE_LIMIT_S,
        quiet_limit_s: float = QUIET_LIMIT_S,
    ):
        self.batch_window_s = batch_window_s
        self.silence_limit_s = silence_limit_s
        self.quiet_limit_s = quiet_limit_s
        self.expected = 0  # announced requests not yet handed to the worker
        self.pending: list[tuple[dict[str, Any], asyncio.Future]] = []
        self.taken: dict[int, list[asyncio.Future]] = {}
        self.batch_ids = itertools.count(1)
        self.last_heard = time.monotonic()
        self._arrived: asyncio.Event | None = None
        self._watchdog: asyncio.Task | None = None

    def _arrival(self) -> asyncio.Event:
        if self._arrived is None:  # created inside the actor's event loop
            self._arrived = asyncio.Event()
        return self._arrived

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data=None,
        video_data=None,
        **kwargs,
    ) -> GeneratedTokens:
        if image_data or video_data:
            raise ValueError("the diffusion rollout generates text only; this request carries images/video")
        future = asyncio.get_running_loop().create_future()
        self.pending.append(({"prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params)}, future))
        self._arrival().set()
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.create_task(self._watch_worker())
        result = await future
        return GeneratedTokens(
            token_ids=result["token_ids"],
            extra_fields={
                key: result[key]
                for key in ("global_steps", "generation_batch", "generation_seconds", UNMASK_STEP_FIELD)
                if key in result
            },
        )

    async def expect(self, count: int) -> None:
        """The trainer's word that ``count`` more requests are on their way (see the module docstring)."""
        self.expected += count

    async def next_batch(self, wait_s: float) -> tuple[int, list[dict[str, Any]]] | None:
        """The worker's pull: waits up to ``wait_s`` for a request, then for the announced ones
        (:meth:`expect`), or else ``batch_window_s`` for the ones arriving with it, and hands over all that are
        waiting as one batch; None when none came."""
        self.last_heard = time.monotonic()
        if not self.pending:
            self._arrival().clear()
            try:
                await asyncio.wait_for(self._arrival().wait(), wait_s)
            except asyncio.TimeoutError:
                return None
        if self.expected:
            await self._until_announced_arrive()  # at once when they are all here
        else:
            await asyncio.sleep(self.batch_window_s)
        batch, self.pending = self.pending, []
        self.expected = max(0, self.expected - len(batch))
        batch_id = next(self.batch_ids)
        self.taken[batch_id] = [future for _, future in batch]
        return batch_id, [request for request, _ in batch]

    async def _until_announced_arrive(self) -> None:
        while len(self.pending) < self.expected:
            self._arrival().clear()
            try:
                await asyncio.wait_for(self._arrival().wait(), self.quiet_limit_s)
            except asyncio.TimeoutError:
                # quiet for too long: what came goes now, and the rest counts as lost, or every later batch would wait
                self.expected = len(self.pending)
                return

    async def deliver(self, batch_id: int, results: list[dict[str, Any]] | None = None, error: str | None = None):
        """The worker's answer to batch ``batch_id``: one result per request in order, or why it failed."""
        self.last_heard = time.monotonic()
        futures = self.taken.pop(batch_id, [])
        if error is None and (results is None or len(results) != len(futures)):
            error = f"the worker returned {0 if results is None else len(results)} results for {len(futures)} requests"
        for i, future in enumerate(futures):
            if future.done():
                continue
            if error is not None:
                future.set_exception(RuntimeError(f"diffusion rollout: {error}"))
            else:
                future.set_result(results[i])

    async def heartbeat(self):
        self.last_heard = time.monotonic()

    async def _watch_worker(self):
        """Fails every waiting request once the worker has been silent for ``silence_limit_s``; ends when none wait."""
        while self.pending or self.taken:
            await asyncio.sleep(min(1.0, self.silence_limit_s / 4))
            silent = time.monotonic() - self.last_heard
            if silent > self.silence_limit_s:
                error = RuntimeError(
                    f"diffusion rollout: the trainer worker that generates for this server has not "
                    f"been heard from for {silent:.0f} s; did it die? Its log says why"
                )
                waiting = [future for _, future in self.pending] + [f for fs in self.taken.values() for f in fs]
                self.pending, self.taken = [], {}
                for future in waiting:
                    if not future.done():
                        future.set_exception(error)

    # verl's replica control surface: the policy copy lives in the worker, so these are no-ops here.
    async def wake_up(self): ...

    async def sleep(self): ...

    async def clear_kv_cache(self): ...

    async def release_kv_cache(self): ...

    async def resume_kv_cache(self): ...

    async def abort_all_requests(self, reject_request: bool = False): ...

    async def resume_generation(self): ...

    async def start_profile(self, **kwargs): ...

    async def stop_profile(self): ...
