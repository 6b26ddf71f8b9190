"""The curriculum sampler: ranks, schedules, pools, zero-advantage prompts, options, and resuming through
torchdata's StatefulDataLoader (what verl checkpoints)."""

import numpy as np
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from diffugrpo_plugin.training.curriculum import (
    CurriculumConfigError,
    CurriculumFeedback,
    CurriculumOptions,
    CurriculumSampler,
    RecordingSampler,
    difficulty_ranks,
    group_positions,
    scheduled_level,
)


def rows(difficulties):
    return [{"prompt": f"p{i}", "extra_info": {"difficulty": d}} for i, d in enumerate(difficulties)]


def config(seed=0, **curriculum):
    return {"seed": seed, "sampler": {"curriculum": curriculum}}


def draws(sampler, count):
    """``count`` draws, over as many epochs as that takes."""
    drawn = []
    while len(drawn) < count:
        drawn.extend(sampler)
    return drawn[:count]


def test_ranks_are_the_fraction_of_prompts_strictly_easier():
    # sorted 1, 2, 2, 3: no prompt is easier than the 1, one than each 2, three than the 3
    assert difficulty_ranks(np.array([3.0, 1.0, 2.0, 2.0])).tolist() == [0.75, 0.0, 0.25, 0.25]


def test_schedules_by_hand():
    linear = CurriculumOptions(schedule="linear", start=0.25, linear_steps=100)
    assert scheduled_level(linear, 50, 0.25, None) == pytest.approx(0.625)  # 0.25 + 0.75 x 50/100
    assert scheduled_level(linear, 200, 0.25, None) == 1.0
    step = CurriculumOptions(schedule="step", start=0.25, every=10, increment=0.25)
    assert [scheduled_level(step, s, 0.25, None) for s in (9, 10, 25, 35)] == [0.25, 0.5, 0.75, 1.0]
    gated = CurriculumOptions(schedule="gated", increment=0.25, threshold=0.6)
    assert scheduled_level(gated, 7, 0.5, None) == 0.5  # window not full yet
    assert scheduled_level(gated, 7, 0.5, 0.59) == 0.5
    assert scheduled_level(gated, 7, 0.5, 0.6) == 0.75
    assert scheduled_level(gated, 7, 0.9, 0.9) == 1.0


def test_the_pool_is_the_easiest_fraction_of_the_data_column():
    data = rows([5, 0, 7, 1, 3, 2, 6, 4])  # positions 1 and 3 hold the two easiest (difficulty 0 and 1)
    sampler = CurriculumSampler(data, config(difficulty_key="extra_info.difficulty", start=0.25))
    assert set(draws(sampler, 200)) == {1, 3}
    assert sampler.metrics()["curriculum/pool"] == 2.0


def test_linear_schedule_widens_the_pool_as_steps_pass():
    data = rows(list(range(8)))
    sampler = CurriculumSampler(data, config(difficulty_key="extra_info.difficulty", start=0.25, linear_steps=3))
    levels = []
    for _ in range(3):
        sampler.update(CurriculumFeedback(positions=[0, 0], rewards=[1.0, 0.0]))
        levels.append(sampler.level)
    assert levels == pytest.approx([0.5, 0.75, 1.0])
    assert set(draws(sampler, 400)) == set(range(8))


def test_gated_schedule_raises_the_level_once_the_window_of_steps_passes_then_starts_the_window_again():
    data = rows(list(range(8)))
    sampler = CurriculumSampler(
        data,
        config(
            difficulty_key="extra_info.difficulty",
            schedule="gated",
            start=0.25,
            increment=0.25,
            threshold=0.6,
            window=2,
        ),
    )

    def step(*group_rates):  # one step: a group of two completions per prompt, each group's pass rate given
        positions = [p for p in range(len(group_rates)) for _ in range(2)]
        passes = [rate for rate in group_rates for _ in range(2)]
        sampler.update(
            CurriculumFeedback(
                positions=positions, rewards=[0.0] * len(positions), components=[{"code": passed} for passed in passes]
            )
        )

    step(1.0, 0.0, 0.5, 0.5)  # the step's pass rate: the mean over its 4 groups, 0.5
    step(1.0, 1.0, 0.0, 0.0)  # 0.5: the window (0.5, 0.5) is full, its mean 0.5 < 0.6
    assert sampler.level == 0.25 and list(sampler.window) == [0.5, 0.5]
    step(1.0, 1.0, 1.0, 0.6)  # 0.9: window (0.5, 0.9), mean 0.7 >= 0.6; the window starts again
    assert sampler.level == 0.5 and list(sampler.window) == []
    step(1.0, 1.0)
    assert sampler.level == 0.5 and list(sampler.window) == [1.0]


def test_measured_difficulty_holds_back_the_seen_prompts_the_policy_fails_most():
    sampler = CurriculumSampler(list(range(4)), config(start=0.25, metric="code"))
    assert set(draws(sampler, 100)) == {0, 1, 2, 3}  # nothing rolled out yet: nothing is known, all in play
    # prompt 2 solved by its whole group, prompt 0 by half of it, prompts 1 and 3 not rolled out
    sampler.update(
        CurriculumFeedback(
            positions=[2, 2, 0, 0],
            rewards=[2.5, 2.5, 2.5, 0.5],
            components=[{"code": 1.0}, {"code": 1.0}, {"code": 1.0}, {"code": 0.0}],
        )
    )
    assert np.array_equal(sampler.difficulty(), [0.5, np.nan, 0.0, np.nan], equal_nan=True)
    # among the seen, prompt 2 ranks 0 and prompt 0 ranks 0.5, above the level 0.25 + 0.75/100
    assert set(draws(sampler, 200)) == {1, 2, 3}


def test_completions_without_the_metric_do_not_count_as_passes():
    sampler = CurriculumSampler(list(range(2)), config(metric="code", schedule="gated"))
    # prompt 0: one completion passed, one has no code score (failed harness); prompt 1: none has one
    sampler.update(
        CurriculumFeedback(
            positions=[0, 0, 1, 1],
            rewards=[2.5, 0.5, 0.5, 0.5],
            components=[{"code": 1.0}, {"code": None}, {"code": None}, {}],
        )
    )
    assert sampler.pass_sum.tolist() == [1.0, 0.0] and sampler.groups_seen.tolist() == [1, 0]
    assert list(sampler.window) == [1.0]


def test_zero_advantage_prompts_are_skipped_at_weight_zero():
    data = rows([0, 0, 0, 0])  # all in the pool at any level
    sampler = CurriculumSampler(data, config(difficulty_key="extra_info.difficulty", zero_advantage_weight=0.0))
    sampler.update(CurriculumFeedback(positions=[0, 0, 1, 1], rewards=[2.5, 2.5, 2.5, 0.0]))
    assert sampler.zero_advantage().tolist() == [True, False, False, False]
    assert 0 not in set(draws(sampler, 300))
    assert sampler.metrics()["curriculum/zero_advantage_share"] == 0.5  # of the step's 2 groups
    expiring = CurriculumSampler(
        data, config(difficulty_key="extra_info.difficulty", zero_advantage_weight=0.0, zero_advantage_steps=2)
    )
    expiring.update(CurriculumFeedback(positions=[0, 0], rewards=[1.0, 1.0]))  # one reward: skip for 2 steps
    assert expiring.weights()[0] == 0.0  # the next step's draws
    expiring.update(CurriculumFeedback(positions=[1, 1], rewards=[1.0, 0.0]))
    assert expiring.weights()[0] == 0.0  # and the one after
    expiring.update(CurriculumFeedback(positions=[1, 1], rewards=[1.0, 0.0]))
    assert expiring.weights()[0] > 0.0  # then the mark has expired: the policy may have moved
    halved = CurriculumSampler(data, config(difficulty_key="extra_info.difficulty", zero_advantage_weight=0.5))
    halved.update(CurriculumFeedback(positions=[0, 0], rewards=[1.0, 1.0]))
    assert halved.weights().tolist() == pytest.approx([0.5 / 3.5, 1 / 3.5, 1 / 3.5, 1 / 3.5])


def test_an_epoch_is_as_long_as_the_data():
    sampler = CurriculumSampler(list(range(5)), config())
    assert len(list(sampler)) == 5 and len(list(sampler)) == 5


@pytest.mark.parametrize(
    "options, message",
    [
        ({"schedul": "linear"}, "unknown data.sampler.curriculum option(s) ['schedul']"),
        ({"schedule": "cosine"}, "schedule must be one of ['linear', 'step', 'gated'], got 'cosine'"),
        ({"start": 0}, "start must be in (0.0, 1.0], got 0"),
        ({"window": 0}, "window must be a whole number of steps >= 1, got 0"),
        ({"zero_advantage_weight": 2}, "zero_advantage_weight must be in [0, 1]"),
    ],
)
def test_bad_options_say_which_key_to_fix(options, message):
    with pytest.raises(CurriculumConfigError) as error:
        CurriculumOptions.from_config(options)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_difficulty_column_must_exist_and_be_numeric():
    with pytest.raises(CurriculumConfigError, match="'extra_info.level' is not a field of the training data"):
        CurriculumSampler(rows([1, 2]), config(difficulty_key="extra_info.level"))
    with pytest.raises(CurriculumConfigError, match="holds non-numeric values"):
        CurriculumSampler(rows(["easy", "hard"]), config(difficulty_key="extra_info.difficulty"))
    with pytest.raises(CurriculumConfigError, match="missing or non-finite"):
        CurriculumSampler(rows([1, None]), config(difficulty_key="extra_info.difficulty"))


class Rows:
    """A verl RLHFDataset's shape: ``dataframe`` columns and ``__getitem__`` rows."""

    def __init__(self, data):
        self.dataframe = {"extra_info": [row["extra_info"] for row in data], "prompt": [row["prompt"] for row in data]}
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return {"position": index}


def loader(sampler, dataset):
    return StatefulDataLoader(
        dataset,
        batch_size=2,
        num_workers=0,
        drop_last=True,
        sampler=sampler,
        collate_fn=lambda items: [item["position"] for item in items],
    )


def test_resuming_through_the_stateful_dataloader_draws_what_the_uninterrupted_run_draws():
    """Two batches, feedback after each (raising a gated level), a checkpoint of the dataloader's state, then
    the next batches from the original and from a fresh loader restored from that state."""
    dataset = Rows(rows(list(range(10))))
    settings = config(
        seed=3,
        difficulty_key="extra_info.difficulty",
        schedule="gated",
        start=0.2,
        window=1,
        threshold=0.5,
        increment=0.3,
    )

    def run_steps(recording, iterator, steps):
        batches = []
        for _ in range(steps):
            batch = next(iterator)
            assert recording.take(len(batch)) == batch  # the trainer's record of each prompt's position
            recording.update(
                CurriculumFeedback(positions=batch, rewards=[1.0] * len(batch), components=[{"code": 1.0}] * len(batch))
            )
            batches.append(batch)
        return batches

    original = RecordingSampler(CurriculumSampler(dataset, settings))
    first = loader(original, dataset)
    iterator = iter(first)
    early = run_steps(original, iterator, 2)
    assert all(position in (0, 1) for position in early[0])  # level 0.2: the two easiest of ten
    checkpoint = first.state_dict()
    level_at_checkpoint = original.inner.level
    later = run_steps(original, iterator, 3)

    restored_sampler = RecordingSampler(CurriculumSampler(dataset, settings))
    restored = loader(restored_sampler, dataset)
    restored.load_state_dict(checkpoint)
    resumed = iter(restored)  # the loader applies a loaded state when iterated
    assert restored_sampler.inner.level == level_at_checkpoint > 0.2
    assert run_steps(restored_sampler, resumed, 3) == later


def test_draws_of_a_dropped_partial_batch_never_pair_with_later_prompts():
    """5 prompts in batches of 2 with drop_last: each epoch draws 5 and drops the fifth; the next epoch's
    batches must still map to their own draws."""
    dataset = Rows(rows(list(range(5))))
    recording = RecordingSampler(
        CurriculumSampler(dataset, config(seed=1, difficulty_key="extra_info.difficulty", start=1.0))
    )
    data = loader(recording, dataset)
    for _ in range(3):  # epochs
        for batch in data:
            assert recording.take(len(batch)) == batch


def test_recorded_positions_map_completions_to_their_prompts():
    recording = RecordingSampler(CurriculumSampler(list(range(3)), config()))
    iterator = iter(recording)
    drawn = [next(iterator), next(iterator)]
    assert recording.take(2) == drawn
    with pytest.raises(RuntimeError, match="dataloader_num_workers=0"):
        recording.take(1)
    assert group_positions(["a", "a", "b"], {"a": 4, "b": 0}) == [4, 4, 0]
    with pytest.raises(RuntimeError, match="never drew"):
        group_positions(["c"], {"a": 4})


def test_a_checkpoint_of_other_data_is_refused():
    small, large = CurriculumSampler(list(range(3)), config()), CurriculumSampler(list(range(4)), config())
    with pytest.raises(CurriculumConfigError, match="covers 3 prompts but the training set has 4"):
        large.load_state_dict(small.state_dict())
