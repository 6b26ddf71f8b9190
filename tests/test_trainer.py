"""Pieces of the diffugrpo trainer that need no Ray: iteration expansion, reference syncing, reward failures."""

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict

from diffugrpo_plugin.integration.console import LearningSummary
from diffugrpo_plugin.integration.mask_iterations import expand_iterations, iteration_field, split_iterations
from diffugrpo_plugin.integration.prompt_tracking import prompt_key, sample_order
from diffugrpo_plugin.integration.reference_sync import mix_into_reference
from diffugrpo_plugin.integration.reward_outcomes import FailureStop, RewardFailure
from diffugrpo_plugin.integration.trainer import DiffuGRPOTrainer
from diffugrpo_plugin.integration.workers import REFERENCE_PREFIX, WITH_REFERENCE_KEY, DiffusionActorRolloutRefWorker


def nested(rows):
    return torch.nested.as_nested_tensor([torch.tensor(r, dtype=torch.float32) for r in rows], layout=torch.jagged)


def test_update_batch_is_expanded_iteration_major_with_each_iterations_masks_and_log_probs():
    data = TensorDict(
        {
            "responses": nested([[1, 2], [3, 4, 5]]),
            iteration_field("mask_seed", 0): torch.tensor([10, 11]),
            iteration_field("mask_seed", 1): torch.tensor([20, 21]),
            iteration_field("old_log_probs", 0): nested([[-1, -1], [-2, -2, -2]]),
            iteration_field("old_log_probs", 1): nested([[-3, -3], [-4, -4, -4]]),
            iteration_field("ref_log_prob", 0): nested([[-5, -5], [-6, -6, -6]]),
            iteration_field("ref_log_prob", 1): nested([[-7, -7], [-8, -8, -8]]),
        },
        batch_size=2,
    )
    expanded = expand_iterations(data, 2)
    assert expanded.batch_size[0] == 4
    assert expanded["mask_seed"].tolist() == [10, 11, 20, 21]
    assert [row.tolist() for row in expanded["responses"].unbind()] == [[1, 2], [3, 4, 5]] * 2
    assert [row[0].item() for row in expanded["old_log_probs"].unbind()] == [-1, -2, -3, -4]
    assert [row[0].item() for row in expanded["ref_log_prob"].unbind()] == [-5, -6, -7, -8]


def test_a_log_prob_pass_over_every_iterations_masks_is_split_back_per_iteration():
    """The worker scores the batch expanded iteration-major (K*B rows) in one call; the output goes back to B rows,
    copy k under <name>_iter<k> and copy 0 also under verl's own name."""
    output = TensorDict(
        {
            "log_probs": nested([[-1, -1], [-2, -2, -2], [-3, -3], [-4, -4, -4]]),
            "entropy": nested([[1, 1], [2, 2, 2], [3, 3], [4, 4, 4]]),
        },
        batch_size=4,
    )
    split = split_iterations(output, 2)
    assert split.batch_size[0] == 2
    rows = lambda name: [row.tolist() for row in split[name].unbind()]  # noqa: E731
    assert rows("log_probs") == rows(iteration_field("log_probs", 0)) == [[-1, -1], [-2, -2, -2]]
    assert rows(iteration_field("log_probs", 1)) == [[-3, -3], [-4, -4, -4]]
    assert rows("entropy") == [[1, 1], [2, 2, 2]] and rows(iteration_field("entropy", 1)) == [[3, 3], [4, 4, 4]]


class RecordingEngineWorker:
    """Stands in for verl's inner TrainingWorker: records each call's non-tensor settings and answers log-probs of
    its own (``offset`` apart, so policy and reference answers can be told apart)."""

    def __init__(self, offset: float):
        self.offset, self.calls = offset, []

    def infer_batch(self, data):
        from verl.utils import tensordict_utils as tu

        settings = {key: tu.get(data, key=key) for key in ("calculate_entropy", "no_lora_adapter", WITH_REFERENCE_KEY)}
        self.calls.append(settings)
        rows = [[self.offset - float(i)] * length for i, length in enumerate(data["lengths"].tolist())]
        output = {"log_probs": nested(rows)}
        if settings["calculate_entropy"]:
            output["entropy"] = nested([[1.0] * len(row) for row in rows])
        return TensorDict(output, batch_size=len(rows))


@pytest.mark.parametrize("lora", [False, True])
def test_the_policys_log_prob_call_scores_the_reference_too_when_asked(lora):
    """One worker call for old and reference log-probs: the reference model scores the same rows without entropy
    (under LoRA: the policy with its adapters off, verl's reference), its fields come back prefixed, and a call
    without the flag is verl's own."""
    from verl.utils import tensordict_utils as tu

    worker = object.__new__(DiffusionActorRolloutRefWorker)
    worker.enable_routing_replay = False
    worker.actor = RecordingEngineWorker(offset=-1.0)
    worker.ref = None if lora else RecordingEngineWorker(offset=-10.0)
    reference_engine = worker.actor if lora else worker.ref

    def batch(**flags):
        data = TensorDict({"lengths": torch.tensor([2, 3])}, batch_size=2)
        tu.assign_non_tensor(data, calculate_entropy=True, **flags)
        return data

    output = worker.compute_log_prob(batch(**{WITH_REFERENCE_KEY: True}))
    rows = lambda name: [row.tolist() for row in output[name].unbind()]  # noqa: E731
    assert rows("log_probs") == [[-1.0, -1.0], [-2.0, -2.0, -2.0]]
    assert rows("entropy") == [[1.0, 1.0], [1.0, 1.0, 1.0]]
    reference_rows = [[-1.0, -1.0], [-2.0, -2.0, -2.0]] if lora else [[-10.0, -10.0], [-11.0, -11.0, -11.0]]
    assert rows(REFERENCE_PREFIX + "log_probs") == reference_rows
    assert REFERENCE_PREFIX + "entropy" not in output.keys()
    assert worker.actor.calls[0] == {"calculate_entropy": True, "no_lora_adapter": None, WITH_REFERENCE_KEY: None}
    assert reference_engine.calls[-1] == {
        "calculate_entropy": False,
        "no_lora_adapter": True if lora else None,
        WITH_REFERENCE_KEY: None,
    }

    calls_before = len(worker.actor.calls) + (0 if lora else len(worker.ref.calls))
    plain = worker.compute_log_prob(batch())
    assert set(plain.keys()) == {"log_probs", "entropy"}
    assert len(worker.actor.calls) + (0 if lora else len(worker.ref.calls)) == calls_before + 1


class StubWorkerGroup:
    """verl's worker group as the trainer queries it: which ranks hold which data-parallel shard, per mesh."""

    def __init__(self, meshes: dict[str, list[int]]):
        self.meshes, self.queries = meshes, 0

    def _query_dispatch_info(self, mesh: str) -> list[int]:
        self.queries += 1
        return self.meshes[mesh]

    _query_collect_info = _query_dispatch_info


@pytest.mark.parametrize(
    "case, expected",
    [
        ("hybrid, same split", True),
        ("hybrid, other split", False),
        ("lora", True),
        ("reference group of its own", False),
        ("no reference", False),
        ("rollout-correction bypass", False),
    ],
)
def test_the_reference_rides_in_the_policys_call_only_where_the_policys_worker_holds_it_split_alike(case, expected):
    group = StubWorkerGroup({"actor": [0, 1], "ref": [0, 0] if case == "hybrid, other split" else [0, 1]})
    trainer = object.__new__(DiffuGRPOTrainer)
    trainer.reference_with_policy = None
    trainer.actor_rollout_wg = group
    trainer.ref_policy_wg = StubWorkerGroup({}) if case == "reference group of its own" else group
    trainer.use_reference_policy = case != "no reference"
    trainer.ref_in_actor = case == "lora"
    bypass = {"rollout_correction": {"bypass_mode": True}} if case == "rollout-correction bypass" else {}
    trainer.config = OmegaConf.create({"algorithm": bypass})
    assert trainer._scores_reference_with_policy() is expected
    queries = group.queries
    assert trainer._scores_reference_with_policy() is expected and group.queries == queries  # decided once


def test_reference_sync_mixes_parameters_by_the_formula():
    torch.manual_seed(0)
    policy, reference = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    before = {n: p.detach().clone() for n, p in reference.named_parameters()}
    mix_into_reference(reference, policy, alpha=0.6)
    for name, param in reference.named_parameters():
        expected = 0.6 * dict(policy.named_parameters())[name].detach() + 0.4 * before[name]
        assert torch.allclose(param, expected)


def test_the_steps_completions_are_trained_in_order_of_prompt_and_sample_whatever_order_they_were_scored_in(
    monkeypatch,
):
    from transfer_queue.metadata import KVBatchMeta

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    # two prompts' uids are random; their prompt keys say which prompt comes first in every run
    prompt_keys = {"f00d-2": (3, "a-prompt"), "0ace-1": (3, "b-prompt")}
    scored = ["0ace-1_1_0", "f00d-2_1_0", "0ace-1_0_0", "f00d-2_0_0", "f00d-2_0_1"]
    expected = ["f00d-2_0_0", "f00d-2_0_1", "f00d-2_1_0", "0ace-1_0_0", "0ace-1_1_0"]
    assert [scored[i] for i in sample_order(scored, prompt_keys)] == expected
    assert sample_order(["no-session-here"], {}) == [0]  # another key format: the given order stands

    seen = []
    monkeypatch.setattr(PPOTrainer, "_balance_batch", lambda self, batch, metrics, *a, **k: seen.append(batch) or batch)
    trainer = object.__new__(DiffuGRPOTrainer)
    trainer.prompt_keys = prompt_keys
    batch = KVBatchMeta(keys=list(scored), tags=[{"seq_len": len(key)} for key in scored], partition_id="train")
    trainer._balance_batch(batch, {})
    assert seen[0].keys == expected  # verl balances the batch from this order
    assert [tag["seq_len"] for tag in seen[0].tags] == [len(key) for key in expected]  # tags move with their keys


def test_the_agent_loop_tells_the_rollout_which_sample_of_its_prompt_a_request_is(monkeypatch):
    import asyncio

    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    from diffugrpo_plugin.integration.agent_loop import DiffusionAgentLoop
    from diffugrpo_plugin.serving.request_batcher import SAMPLE_INDEX_KEY

    sent = []

    async def verl_run(self, sampling_params, **kwargs):
        sent.append(sampling_params)
        return AgentLoopOutput(prompt_ids=[1], response_ids=[5, 0, 0], response_mask=[1, 1, 1], num_turns=2, metrics={})

    monkeypatch.setattr(SingleTurnAgentLoop, "run", verl_run)
    loop = object.__new__(DiffusionAgentLoop)
    loop.tokenizer = SimpleNamespace(eos_token_id=0)
    params = {"temperature": 1.0}
    output = asyncio.run(loop.run(params, session_id=3, raw_prompt=[]))
    assert sent[-1] == {"temperature": 1.0, SAMPLE_INDEX_KEY: 3} and params == {"temperature": 1.0}
    assert output.response_mask == [1, 1, 0]
    asyncio.run(loop.run(params, raw_prompt=[]))  # verl's older loop passes no session id: nothing added
    assert sent[-1] == {"temperature": 1.0}


def test_verl_tells_each_of_a_prompts_agent_loops_its_sample_index(monkeypatch):
    """What the rollout's seeds rest on: verl's TransferQueue agent-loop worker runs a prompt's ``n`` samples with
    ``session_id`` 0..n-1 (read by ``DiffusionAgentLoop``), for training and validation prompts alike."""
    import asyncio

    from verl.trainer.ppo.v1 import agent_loop_tq

    async def kv_put(**_):
        return None

    runs = []

    async def run_agent_loop(self, sampling_params, trajectory, trace=False, **kwargs):
        runs.append((trajectory["validate"], kwargs["session_id"], kwargs["uid"]))

    worker_class = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__  # the class behind ray.remote
    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_put", kv_put)
    monkeypatch.setattr(worker_class, "_run_agent_loop", run_agent_loop)
    worker = object.__new__(worker_class)
    worker.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 3, "val_kwargs": {"n": 2}}}})
    for validate in (False, True):
        prompt = {"uid": f"u{validate}", "raw_prompt": []}
        asyncio.run(worker._run_prompt(prompt, {}, trajectory={"validate": validate}))
    assert runs == [
        (False, 0, "uFalse"),
        (False, 1, "uFalse"),
        (False, 2, "uFalse"),
        (True, 0, "uTrue"),
        (True, 1, "uTrue"),
    ]


def test_loss_mask_stops_after_the_first_eos():
    from diffugrpo_plugin.integration.agent_loop import mask_after_first_eos

    eos = 0
    assert mask_after_first_eos([5, 6, eos, eos, eos], [1] * 5, eos) == [1, 1, 1, 0, 0]
    assert mask_after_first_eos([5, 6, 7], [1] * 3, eos) == [1, 1, 1]  # no EOS: the whole canvas counts
    assert mask_after_first_eos([eos, 4, eos], [1] * 3, eos) == [1, 0, 0]


def test_a_reward_failing_on_most_completions_is_reported_and_stops_training_after_its_patience(capsys):
    stop = FailureStop(["code", "code_format"], patience=2)
    stop.check([{"code"}, set(), set(), set()], step=1)  # a quarter of the rows: reported, no streak
    assert "step 1: reward 'code' failed on 1 of 4 completions" in capsys.readouterr().err
    assert stop.streaks == {"code": 0, "code_format": 0}
    stop.check([{"code"}, {"code"}, set(), set()], step=2)  # half: the sandbox-free half did not fail with it
    assert stop.streaks == {"code": 1, "code_format": 0}
    stop.check([set()] * 4, step=3)  # a good step resets the streak
    assert stop.streaks["code"] == 0 and capsys.readouterr().err.count("failed on") == 1
    stop.check([{"code"}] * 4, step=4)
    with pytest.raises(
        RewardFailure,
        match=r"reward\(s\) \['code'\] failed on at least half the completions for 2 "
        r"steps in a row \(step 5\).*stop_after_failed_steps=0 never stops",
    ):
        stop.check([{"code"}] * 4, step=5)
    never = FailureStop(["code"], patience=0)
    for step in range(1, 4):
        never.check([{"code"}] * 4, step=step)  # 0: report, never stop
    assert never.streaks == {"code": 3}


def test_a_prompt_drawn_again_under_a_new_uid_is_compared_with_its_first_draw():
    trainer = SimpleNamespace(learning=LearningSummary(["code"]), prompt_keys={}, global_steps=1)
    observe = DiffuGRPOTrainer._observe_prompts
    trainer.prompt_keys.update({"u1": (1, "add_2"), "u2": (1, "count_a"), "lost": (1, "dropped_by_a_filter")})
    # step 1: two groups of two, and a padding row (not real) that must not count
    observe(
        trainer,
        [{"code": 0.0}, {"code": 1.0}, {"code": 0.0}, {"code": 0.0}, {"code": 1.0}],
        ["u1"] * 2 + ["u2"] * 3,
        [0, 1, 2, 3],
    )
    assert trainer.prompt_keys == {"lost": (1, "dropped_by_a_filter")}  # scored uids are forgotten
    trainer.global_steps = 2
    trainer.prompt_keys.update({"u3": (2, "add_2"), "u4": (2, "sum_b")})  # add_2 again, under a new uid
    observe(
        trainer, [{"code": 1.0}, {"code": 1.0}, {"code": None}, {"code": 0.5}], ["u3", "u3", "u4", "u4"], [0, 1, 2, 3]
    )
    assert trainer.learning.redrawn_means() == {"code": (0.5, 1.0)}  # add_2 only: 0.5 at its first draw, 1.0 now
    assert trainer.learning.redrawn_metrics()["learning/redrawn_prompts"] == 1.0
    trainer.global_steps = 3
    observe(trainer, [{"code": 1.0}], ["u9"], [0])  # a uid with no key (never fetched) is left out
    assert trainer.prompt_keys == {}  # a uid fetched two steps ago and never scored is dropped
    assert set(trainer.learning.first_draw) == {"add_2", "count_a", "sum_b"}


def test_a_prompts_key_is_the_same_for_the_same_messages_at_any_step_and_short():
    import numpy as np

    def messages(text):  # as verl's dataset gives raw_prompt: an object array of chat messages
        return np.array([{"role": "user", "content": text}], dtype=object)

    first = prompt_key(messages("Write a function `add_2(x)` that returns x plus 2."))
    assert first == prompt_key(messages("Write a function `add_2(x)` that returns x plus 2."))
    assert first != prompt_key(messages("Write a function `add_3(x)` that returns x plus 3."))
    assert len(first) == 32


class SeedSwitchRecorder:
    """The hybrid worker group's ``seed_validation`` calls, in order with the validation between them."""

    def __init__(self):
        self.calls: list[object] = []

    def seed_validation(self, validating: bool) -> None:
        self.calls.append(validating)


@pytest.mark.parametrize("fails", [False, True])
def test_a_validation_samples_with_validation_seeds_and_training_gets_its_own_back(monkeypatch, fails):
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    group = SeedSwitchRecorder()

    def validate(trainer):
        group.calls.append("validation")
        if fails:
            raise RuntimeError("a reward crashed")
        return {"val-core/synthetic/acc/mean@16": 0.25}

    monkeypatch.setattr(PPOTrainer, "_validate", validate)
    trainer = object.__new__(DiffuGRPOTrainer)
    trainer.actor_rollout_wg, trainer.training_started = group, True
    if fails:
        with pytest.raises(RuntimeError, match="a reward crashed"):
            trainer._validate()
    else:
        assert trainer._validate() == {"val-core/synthetic/acc/mean@16": 0.25}
    assert group.calls == [True, "validation", False]
