"""The diffusion rollout: generation follows weight updates, seeds are reproducible, requests batch."""

from __future__ import annotations

import asyncio

import pytest
import torch

from rollout_support import CountingRollout, requests, rollout  # noqa: F401 - rollout is a fixture


def perturbed_weights(module, scale):
    generator = torch.Generator().manual_seed(0)
    for name, tensor in module.state_dict().items():
        yield name, tensor + scale * torch.randn(tensor.shape, generator=generator)


def test_greedy_generation_follows_every_weight_update(rollout):
    batch = requests(rollout, ["def add(a, b):", "Write a function"], temperature=0.0)
    before = [r["token_ids"] for r in rollout.generate_batch(batch)]
    # the whole canvas comes back (padding after the EOS included): the model trains in the context it sampled in
    assert [len(tokens) for tokens in before] == [rollout.config.response_length] * 2
    original = {name: tensor.clone() for name, tensor in rollout.lm.module.state_dict().items()}

    asyncio.run(rollout.update_weights(perturbed_weights(rollout.lm.module, 1.0), global_steps=1))
    after = [r["token_ids"] for r in rollout.generate_batch(batch)]
    assert after != before, "new actor weights must change what the rollout generates"

    asyncio.run(rollout.update_weights(iter(original.items()), global_steps=2))
    assert [r["token_ids"] for r in rollout.generate_batch(batch)] == before


def test_weight_update_rejects_unknown_names(rollout):
    with pytest.raises(KeyError, match="no counterpart"):
        asyncio.run(rollout.update_weights(iter([("not.a.weight", torch.zeros(1))])))


def test_sampled_completions_reproduce_across_runs_and_differ_within_a_group(rollout, tiny_model_path):
    prompts = ["def add(a, b):"] * 3 + ["Reverse a list"]
    first = [r["token_ids"] for r in rollout.generate_batch(requests(rollout, prompts))]
    # the same prompt repeated in one step gets different seeds, hence (almost surely) different samples
    assert len({tuple(t) for t in first[:3]}) > 1
    # a fresh rollout at the same step replays the same seeds
    from diffugrpo_plugin.integration.rollout import DiffusionRollout

    again = DiffusionRollout(rollout.config, rollout.model_config, device_mesh=None)
    assert [r["token_ids"] for r in again.generate_batch(requests(again, prompts))] == first


def test_a_sample_indexed_request_gets_its_seed_whatever_the_order_batch_or_replica(rollout):
    from diffugrpo_plugin.integration.rollout import DiffusionRollout
    from diffugrpo_plugin.serving.request_batcher import SAMPLE_INDEX_KEY

    def indexed(texts_and_indices, target):
        batch = requests(target, [text for text, _ in texts_and_indices])
        for request, (_, index) in zip(batch, texts_and_indices):
            request["sampling_params"][SAMPLE_INDEX_KEY] = index
        return batch

    samples = [("def add(a, b):", k) for k in range(3)] + [("Reverse a list", 0)]
    in_order = dict(zip(samples, (r["token_ids"] for r in rollout.generate_batch(indexed(samples, rollout)))))
    assert len({tuple(in_order[("def add(a, b):", k)]) for k in range(3)}) > 1  # a prompt's samples still differ

    # the samples arrive in another order, in two batches, at another replica: each gets the same completion
    other = DiffusionRollout(rollout.config, rollout.model_config, device_mesh=None)
    other.replica_rank = 1
    arrived = [samples[2], samples[3], samples[0]], [samples[1]]
    for batch in arrived:
        for sample, result in zip(batch, other.generate_batch(indexed(batch, other))):
            assert result["token_ids"] == in_order[sample], sample


def test_every_validation_draws_the_same_noise_and_training_steps_keep_theirs(rollout, tiny_model_path):
    from diffugrpo_plugin.integration.rollout import DiffusionRollout

    prompts = ["def add(a, b):"] * 3 + ["Reverse a list"]
    untouched = DiffusionRollout(rollout.config, rollout.model_config, device_mesh=None)
    untouched.global_steps = 5
    training = [r["token_ids"] for r in untouched.generate_batch(requests(untouched, prompts))]

    validations = []
    for step in (0, 5):  # validations at two steps, the second after training requests at its step
        rollout.global_steps = step
        if step:
            assert [r["token_ids"] for r in rollout.generate_batch(requests(rollout, prompts))] == training
        rollout.seed_validation(True)
        validations.append([r["token_ids"] for r in rollout.generate_batch(requests(rollout, prompts))])
        rollout.seed_validation(False)
    # the k-th completion of a task comes from the same seed at every validation: same weights, same tokens
    assert validations[0] == validations[1]
    assert len({tuple(t) for t in validations[0][:3]}) > 1  # the repeats of one task still differ
    assert validations[0] != training  # a validation does not replay a training step's seeds
    # after a validation the training step's seeds are the step's own again, counted afresh
    assert [r["token_ids"] for r in rollout.generate_batch(requests(rollout, prompts))] == training


def test_bad_sampler_option_fails_at_start_up(tiny_model_path):
    from verl.workers.config import RolloutConfig

    from diffugrpo_plugin.integration.engine import DiffusionModelConfig
    from diffugrpo_plugin.integration.rollout import DiffusionRollout
    from diffugrpo_plugin.plugins import PluginOptionError

    config = RolloutConfig(
        name="diffusion",
        engine_kwargs={"diffusion": {"sampler": "entropy", "stepz": 8}},
        response_length=8,
        dtype="float32",
        tensor_model_parallel_size=1,
    )
    with pytest.raises(PluginOptionError, match="stepz"):
        DiffusionRollout(config, DiffusionModelConfig(path=tiny_model_path, model_type="diffusion_lm"), None)


def pulling_worker(server, batches: list[int], stop: asyncio.Event, fail: bool = False):
    """What the trainer worker's thread does, in the test's event loop: pull a batch, answer it, again."""

    async def loop():
        while not stop.is_set():
            taken = await server.next_batch(0.05)
            if taken is None:
                continue
            batch_id, requests = taken
            batches.append(len(requests))
            await asyncio.sleep(0.01)
            if fail:
                await server.deliver(batch_id, error="ValueError: the sampler says no")
            else:
                await server.deliver(
                    batch_id,
                    [
                        {
                            "token_ids": [len(r["prompt_ids"])],
                            "global_steps": 3,
                            "generation_batch": "0:1",
                            "generation_seconds": 0.01,
                        }
                        for r in requests
                    ],
                )

    return asyncio.create_task(loop())


def test_server_batches_concurrent_requests_and_keeps_order():
    from diffugrpo_plugin.serving.request_batcher import RequestBatcher

    batches = []

    async def scenario():
        server, stop = RequestBatcher(batch_window_s=0.01), asyncio.Event()
        worker = pulling_worker(server, batches, stop)
        first = [server.generate(f"r{i}", [1] * (i + 1), {"temperature": 1.0}) for i in range(5)]
        outputs = await asyncio.gather(*first)
        late = await server.generate("late", [1] * 9, {"temperature": 1.0})
        stop.set()
        await worker
        return outputs, late

    outputs, late = asyncio.run(scenario())
    assert [o.token_ids for o in outputs] == [[1], [2], [3], [4], [5]]
    assert late.token_ids == [9] and late.extra_fields["global_steps"] == 3
    assert batches == [5, 1]


@pytest.mark.parametrize("announced", [False, True])
def test_announced_requests_that_trickle_in_reach_the_sampler_as_one_batch(announced):
    """Six requests 40 ms apart, each later than the 10 ms window: announced, one batch; else one batch each."""
    from diffugrpo_plugin.serving.request_batcher import RequestBatcher

    batches = []

    async def trickle(server):
        requests = []
        for i in range(6):
            requests.append(asyncio.ensure_future(server.generate(f"r{i}", [1] * (i + 1), {})))
            await asyncio.sleep(0.04)
        return await asyncio.gather(*requests)

    async def scenario():
        server, stop = RequestBatcher(batch_window_s=0.01), asyncio.Event()
        if announced:
            await server.expect(6)
        worker = pulling_worker(server, batches, stop)
        outputs = await trickle(server)
        stop.set()
        await worker
        return outputs, server.expected

    outputs, left = asyncio.run(scenario())
    assert [o.token_ids for o in outputs] == [[1], [2], [3], [4], [5], [6]]
    assert batches == ([6] if announced else [1] * 6)
    assert left == 0


def test_an_announced_request_that_never_comes_holds_the_batch_only_until_the_others_go_quiet():
    import time

    from diffugrpo_plugin.serving.request_batcher import RequestBatcher

    batches = []

    async def scenario():
        server, stop = RequestBatcher(batch_window_s=0.01, quiet_limit_s=0.2), asyncio.Event()
        await server.expect(3)  # one of them fails before it is sent
        worker = pulling_worker(server, batches, stop)
        started = time.monotonic()
        outputs = await asyncio.gather(server.generate("a", [1], {}), server.generate("b", [1, 1], {}))
        waited = time.monotonic() - started
        stop.set()
        await worker
        return outputs, waited, server.expected

    outputs, waited, left = asyncio.run(scenario())
    assert [o.token_ids for o in outputs] == [[1], [2]] and batches == [2]
    assert 0.2 <= waited < 1.0
    assert left == 0  # the missing one is no longer waited for: later batches go after the window again


@pytest.mark.ray
def test_the_trainer_announces_each_dispatch_to_a_single_diffusion_server(ray_cluster):
    """verl's trainer calls ``agent_loop_manager.generate_sequences(batch)`` with one row per prompt; the agent loop
    sends ``rollout.n`` requests a row (``val_kwargs.n`` when validating, a row's ``__rollout_n__`` first)."""
    import ray
    from omegaconf import OmegaConf
    from tensordict import NonTensorData, NonTensorStack, TensorDict

    from diffugrpo_plugin.integration.rollout import AnnouncedDispatches, announced
    from diffugrpo_plugin.serving.request_batcher import RequestBatcher

    class Manager:
        def __init__(self):
            self.dispatched, self.other = [], "verl's attribute"

        def generate_sequences(self, batch):
            self.dispatched.append(len(batch))

    config = OmegaConf.create({"name": "diffusion", "n": 8, "val_kwargs": {"n": 2}})
    prompts = TensorDict({"input_ids": torch.zeros(4, 3)}, [4])
    validation = prompts.clone()
    validation["validate"] = NonTensorData(True)
    per_row = prompts.clone()
    per_row["__rollout_n__"] = NonTensorStack(*[NonTensorData(n) for n in (1, 2, 3, 4)])
    server = ray.remote(RequestBatcher).remote()
    manager = Manager()
    wrapped = announced(manager, [server], config)
    assert isinstance(wrapped, AnnouncedDispatches) and wrapped.other == "verl's attribute"
    announced_so_far = []
    for batch in (prompts, validation, per_row):
        wrapped.generate_sequences(batch)
        announced_so_far.append(ray.get(server.__ray_call__.remote(lambda batcher: batcher.expected)))
    assert announced_so_far == [32, 40, 50] and manager.dispatched == [4, 4, 4]
    assert announced(manager, [server, server], config) is manager  # the router splits among servers
    assert announced(manager, [server], OmegaConf.create({"name": "vllm"})) is manager
    ray.kill(server)


def test_a_failed_batch_fails_each_of_its_requests_with_the_reason():
    from diffugrpo_plugin.serving.request_batcher import RequestBatcher

    async def scenario():
        server, stop = RequestBatcher(batch_window_s=0.01), asyncio.Event()
        worker = pulling_worker(server, [], stop, fail=True)
        outcomes = await asyncio.gather(*[server.generate(f"r{i}", [1], {}) for i in range(3)], return_exceptions=True)
        stop.set()
        await worker
        return outcomes

    assert [str(outcome) for outcome in asyncio.run(scenario())] == [
        "diffusion rollout: ValueError: the sampler says no"
    ] * 3


def test_requests_fail_once_the_worker_has_been_silent_too_long():
    """A worker that died mid-batch never delivers: its requests fail, saying so, instead of waiting for ever."""
    from diffugrpo_plugin.serving.request_batcher import RequestBatcher

    async def scenario():
        server = RequestBatcher(batch_window_s=0.01, silence_limit_s=0.2)
        waiting = asyncio.ensure_future(server.generate("r0", [1], {}))
        assert (await server.next_batch(1.0))[1] == [{"prompt_ids": [1], "sampling_params": {}}]  # taken, then silence
        return await asyncio.gather(waiting, return_exceptions=True)

    [outcome] = asyncio.run(scenario())
    assert isinstance(outcome, RuntimeError) and "has not been heard from for" in str(outcome)


def test_the_server_process_needs_neither_torch_verl_nor_ray():
    """Ray imports the server's class (and what it imports) into the server's own process."""
    import subprocess
    import sys

    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, diffugrpo_plugin.serving.request_batcher; "
            "print(sorted(m for m in ('torch', 'verl', 'ray') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.stdout.strip() == "[]", loaded.stderr


@pytest.mark.ray
def test_a_real_server_serves_more_waiting_requests_than_verls_concurrency_cap(ray_cluster, monkeypatch):
    """Through Ray, as in a run: 1,100 requests wait at once (verl's cap is 1,000 and up; each waiting request
    holds a slot) and the worker's pulling thread still gets them all, in order. After each batch that thread ends
    its OpenMP team, so that the training passes which follow run alone."""
    import threading
    import time

    import ray

    from diffugrpo_plugin.integration.rollout import worker as rollout_module
    from diffugrpo_plugin.integration.rollout.servers import SERVER_MAX_CONCURRENCY
    from diffugrpo_plugin.serving.request_batcher import RequestBatcher

    released = []
    monkeypatch.setattr(rollout_module, "release_openmp_threads", lambda: released.append(threading.get_ident()))
    server = ray.remote(RequestBatcher).options(max_concurrency=SERVER_MAX_CONCURRENCY).remote(batch_window_s=0.05)
    rollout = CountingRollout()
    generating = threading.Thread(target=rollout_module._generate_batches, args=(rollout, server, None), daemon=True)
    generating.start()
    outputs = ray.get([server.generate.remote(f"r{i}", [1] * (1 + i % 7), {}) for i in range(1100)], timeout=120)
    assert [o.token_ids for o in outputs] == [[1 + i % 7] for i in range(1100)]
    assert sum(rollout.batches) == 1100
    deadline = time.monotonic() + 30  # the last release follows its delivery
    while len(released) < len(rollout.batches) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert released == [generating.ident] * len(rollout.batches)
    ray.kill(server)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread dies on purpose
@pytest.mark.ray
def test_requests_fail_when_the_generating_thread_dies(ray_cluster):
    """A thread that dies (here on a BaseException no handler catches) stops the heartbeats, so the server fails
    its requests instead of leaving them waiting for ever."""
    import threading

    import ray

    from diffugrpo_plugin.integration.rollout import worker as rollout_module
    from diffugrpo_plugin.serving.request_batcher import RequestBatcher

    server = ray.remote(RequestBatcher).remote(batch_window_s=0.01, silence_limit_s=2.0)
    generating = threading.Thread(
        target=rollout_module._generate_batches,
        args=(CountingRollout(fail_with=SystemExit(3)), server, None),
        daemon=True,
    )
    generating.start()
    threading.Thread(target=rollout_module._send_heartbeats, args=(server, generating), daemon=True).start()
    with pytest.raises(ray.exceptions.RayTaskError, match="has not been heard from"):
        ray.get(server.generate.remote("r0", [1], {}), timeout=60)
    ray.kill(server)
