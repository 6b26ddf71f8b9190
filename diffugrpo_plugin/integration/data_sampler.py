"""A custom data sampler (``data.sampler``: the curriculum) in verl's training dataloader, recording which dataset
positions each batch drew so that each prompt's rewards go back to it by position."""

from __future__ import annotations

from diffugrpo_plugin.training.curriculum import CurriculumFeedback, RecordingSampler, group_positions


def sampling_dataloader(loader, sampler_class, dataset, data_config):
    """``(sampler, dataloader)``: verl's training ``loader`` drawing through ``sampler_class`` (verl 0.9.1 has no such
    hook; later versions read the same keys), wrapped to record the positions it draws."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    sampler = RecordingSampler(sampler_class(data_source=dataset, data_config=data_config))
    return sampler, StatefulDataLoader(
        dataset=loader.dataset,
        batch_size=loader.batch_size,
        num_workers=loader.num_workers,
        drop_last=loader.drop_last,
        collate_fn=loader.collate_fn,
        sampler=sampler,
    )


def sampler_feedback(
    uids: list[str],
    totals: list[float],
    samples: list[dict[str, float | None]],
    real: list[int],
    positions: dict[str, int],
) -> CurriculumFeedback:
    """The step's ``real`` completions as the sampler reads them: their prompts' dataset positions (``positions``:
    uid -> position), total rewards and reward components."""
    return CurriculumFeedback(
        positions=group_positions([uids[i] for i in real], positions),
        rewards=[totals[i] for i in real],
        components=[samples[i] for i in real],
    )
