"""Every hook a diffugrpo plugin may implement.

A plugin is a module named by an entry point in the ``diffugrpo`` group of its
distribution's metadata::

    # pyproject.toml of a third-party package
    [project.entry-points.diffugrpo]
    my_rewards = "my_pkg.rewards"

and decorated with :data:`diffugrpo_plugin.hookimpl`::

    from diffugrpo_plugin import hookimpl

    @hookimpl
    def diffugrpo_reward_functions():
        return {"short": short_reward}

After ``pip install my_pkg`` the names it returns are selectable in config and listed by
``diffugrpo rewards list``; nothing in diffugrpo changes. Our own built-ins (rewards in
``reward_plugins/``, maskers, samplers) are registered exactly this way.

Each hook returns a mapping ``name -> object``. Names are global across plugins: the same
name from two distributions is an error naming both, so prefix names if they are generic.
The first line of each object's docstring is its one-line description in listings.
"""

from __future__ import annotations

from typing import Any, Callable

import pluggy

from diffugrpo_plugin import PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def diffugrpo_reward_functions() -> dict[str, Callable[..., list[float | None]]]:
    """Reward functions, TRL convention.

    Each function is called as ``fn(completions: list[str], **columns) -> list[float | None]``
    where ``columns`` holds, for every dataset column of the rows being scored (for example
    ``test_cases``), a list with one value per completion. It returns one value per
    completion: a float, or ``None`` for "not applicable to this row" (excluded from the
    component's mean and from the weighted total, never counted as zero).

    A function must accept and ignore columns it does not use (take ``**kwargs``). It runs in
    verl's reward workers, on CPU, and must not import torch. A function that raises is
    reported and scored ``None`` for that batch; it never stops training.

    Its options are its keyword-only parameters, set per reward in config
    (``diffugrpo.rewards.reward_kwargs.<name>``); an unknown option is an error listing the
    accepted ones. Two keyword-only parameters are filled in by diffugrpo when declared:
    ``sandbox`` (the shared bubblewrap :class:`~diffugrpo_plugin.sandbox.Sandbox`: run any model
    code through it, never in-process) and ``code_block`` (``"first"`` or ``"last"`` fenced block).
    """


@hookspec
def diffugrpo_maskers() -> dict[str, Callable[..., Any]]:
    """Maskers: how a completion is noised to estimate its log-likelihood.

    Each value is a factory called with the masker options from config
    (``actor_rollout_ref.model.diffusion.masker_kwargs``) that returns an object with::

        views(input_ids, completion_mask, mask_id, seeds) -> MaskedViews

    See :class:`diffugrpo_plugin.masking.MaskedViews` for the contract (shapes, coefficient
    rule) and ``examples/custom_masker/`` for a complete third-party masker.
    """


@hookspec
def diffugrpo_model_families() -> dict[str, Any]:
    """Model families: how a kind of diffusion LM is called, aligned, projected and masked.

    Each value is a :class:`diffugrpo_plugin.families.ModelFamily` (a frozen dataclass; build
    yours with it). Its fields say:

    * ``call(module, input_ids [B, L], attention_mask [B, L] 0/1, position_ids [B, L]) -> logits
      [B, L, V]``: the keyword arguments the network takes (mask form, positions or none);
    * ``logits_shift``: True when the output at ``i - 1`` scores token ``i``;
    * ``final_norm``: dotted path of the module whose output is the final hidden states (the
      row-selective log-prob pass hooks its output, so the head projects only scored rows);
      ``head`` / ``embedding``: where the vocabulary weight lives (``head=None``: tied, no module);
    * ``mask_token_names`` / ``default_mask_token_id`` / ``config_mask_token_id``: how to find
      the mask id when ``actor_rollout_ref.model.diffusion.mask_token_id`` is not set;
    * ``model_types`` / ``code_files`` / ``architectures``: the ``config.json`` values that select
      the family (``actor_rollout_ref.model.diffusion.family`` overrides detection);
    * ``native`` / ``native_unsupported``: an implementation that loads the checkpoint without
      remote code, and the settings it cannot run (optional).

    ``diffugrpo check-model PATH`` shows what a checkpoint resolves to. The built-ins (``dream``
    / ``diffucoder``, ``llada``, ``bidirectional``) are in :mod:`diffugrpo_plugin.families`.
    """


@hookspec
def diffugrpo_samplers() -> dict[str, Callable[..., Any]]:
    """Samplers: how a diffusion model turns masked completions into text.

    Each value is a factory called with the sampler options from config that returns an
    object with ``generate(model, prompt_ids, prompt_mask, ...)``; see
    :mod:`diffugrpo_plugin.sampling` for the contract.
    """
