"""Every hook a diffugrpo plugin may implement, and the contract of what it hands back.

A plugin is a module named by an entry point in the group of the kind it provides, in its
distribution's metadata, and decorated with :data:`diffugrpo_plugin.hookimpl`::

    # pyproject.toml of a third-party package
    [project.entry-points."diffugrpo.rewards"]
    my_rewards = "my_pkg.rewards"

    # my_pkg/rewards.py
    from diffugrpo_plugin import hookimpl

    @hookimpl
    def diffugrpo_reward_functions():
        return {"short": short_reward}

==================================  ==============================  ===========================
hook                                entry-point group               the objects it returns
==================================  ==============================  ===========================
``diffugrpo_reward_functions``      ``diffugrpo.rewards``           reward functions
``diffugrpo_maskers``               ``diffugrpo.maskers``           masker factories
``diffugrpo_samplers``              ``diffugrpo.samplers``          sampler factories
``diffugrpo_model_families``        ``diffugrpo.model_families``    ``ModelFamily`` records
``diffugrpo_loss_terms``            ``diffugrpo.loss_terms``        loss-term factories
==================================  ==============================  ===========================

A group is loaded only when its kind is first needed, so a reward worker never imports
maskers, samplers or model code (a module that provides several kinds is listed in each group).
After ``pip install my_pkg`` the names it returns are selectable in config and listed by
``diffugrpo rewards list`` / ``diffugrpo generate --help``; nothing in diffugrpo changes. Our
own built-ins (rewards in ``reward_plugins/``, maskers, samplers, model families) are
registered exactly this way.

Each hook returns a mapping ``name -> object``. Names are global across plugins: the same
name from two distributions is an error naming both, so prefix names if they are generic.
The first line of each object's docstring is its one-line description in listings.

Contracts are checked (:mod:`diffugrpo_plugin.plugins`): each returned object when the kind is
first loaded, and what a masker or sampler factory builds when it is built, so a plugin that
does not fit fails at start-up with an error naming the plugin and the expected signature.
A factory's options are its keyword parameters (or dataclass fields); an option it does not
take is an error that lists the ones it does.
"""

from __future__ import annotations

from typing import Any, Callable

import pluggy

from diffugrpo_plugin import PROJECT_NAME
from diffugrpo_plugin.hooktypes import Explained

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def diffugrpo_reward_functions() -> dict[str, Callable[..., list[float | None | Explained]]]:
    """Reward functions, TRL convention, optionally saying why each completion scored what it did.

    Returns:
        ``name -> fn`` with ``fn(completions, *, option=default, ..., **columns) -> list[float | None |
        Explained]``. ``completions`` is a list of strings; ``columns`` holds, for every dataset column of the
        rows being scored (for example ``test_cases``), a list with one plain Python value per completion
        (lists, dicts, strings, numbers; never numpy arrays). ``fn`` must accept and ignore the columns it does
        not use (the ``**columns``). It returns one item per completion: a finite float, or ``None`` for "not
        applicable to this row" (excluded from the component's mean and from the weighted total, never counted
        as zero).

        Either may come with its reason: ``Explained(value, Reason(kind, detail))`` (both exported beside
        ``hookimpl``: ``from diffugrpo_plugin import Explained, Reason, hookimpl``) in place of the bare value,
        above all where the value is 0 or ``None``. ``kind`` is a short fixed code a program can count
        (``no_code_block``, ``syntax_error``, ``tests_failed``: the built-in kinds are listed in
        :mod:`diffugrpo_plugin.rewards.judging`), ``detail`` the sentence a person reads (``syntax error at
        line 3 of the code: invalid syntax``). Only the value enters the totals and the metrics; the reason is
        printed per row by ``diffugrpo rewards score`` (``reasons``) and ``diffugrpo eval`` (``reason`` in
        ``outcomes.jsonl``). A function that returns plain floats and ``None`` gives no reasons and needs
        nothing else; to call one that explains from TRL itself, take
        :func:`diffugrpo_plugin.rewards.scoring.value_of` of each item.

    When called:
        On CPU in verl's reward workers (in its agent-loop workers under the lean process layout, the default
        for a one-node CPU job), once per batch of completions; also by ``diffugrpo rewards score`` and
        ``diffugrpo eval``. It must not import torch.

    Options:
        Its keyword-only parameters, set per reward in config (``diffugrpo.rewards.reward_kwargs.<name>``).
        These are filled in by diffugrpo when declared (``plugins.INJECTED_REWARD_OPTIONS``): ``sandbox`` (the
        shared bubblewrap :class:`~diffugrpo_plugin.sandbox.host.Sandbox`: run any model code through it, never
        in-process), ``code_block`` (``"first"`` or ``"last"`` fenced block) and ``format_end`` (``"exact"`` or
        ``"lenient"``: what may follow the closing fence of DiffuCoder's format).

    Errors:
        An unknown option is an error at start-up listing the accepted ones. A function that raises is called
        again one completion at a time: the completions it fails on score ``None`` (flagged as failed, counted
        in ``reward/<name>/error_fraction`` and reported), the others are scored. Training stops only when it
        fails on half the completions or more for ``diffugrpo.rewards.stop_after_failed_steps`` steps in a row.
    """


@hookspec
def diffugrpo_maskers() -> dict[str, Callable[..., Any]]:
    """Maskers: how a completion is noised to estimate its log-likelihood.

    Returns:
        ``name -> factory``; the factory builds an object with::

            views(input_ids [B, L], completion_mask [B, L] bool, mask_id: int, seeds [B] int64,
                  prompt_mask [B, L] bool | None) -> MaskedViews   # noisy, coef: [V, B, L]

        ``completion_mask`` marks the generation canvas, ``prompt_mask`` the real prompt tokens (a masker that
        never masks the prompt ignores it). The estimate of a token is ``sum_v coef[v] * log p_v`` unless the
        object also has::

            combine(per_view_logp [V, B, L], views: MaskedViews, scored [B, L] bool,
                    positive [B] bool | None) -> Tensor [B, L]

        which then turns each view's log-prob of the tokens it scores (``coef != 0``; 0 elsewhere, with
        gradient) into the per-token estimate the loss sees: an estimator that is not linear in the log-probs
        (SPG's upper bound) or that depends on the advantage's sign. ``scored`` marks the tokens the loss
        counts, ``positive`` whether each sample's advantage is positive, ``None`` in the passes before the
        advantages exist (the old-policy and reference log-probs).

        See :class:`diffugrpo_plugin.core.masking.Masker` and :class:`~diffugrpo_plugin.core.views.MaskedViews`
        for the coefficient rule, and ``examples/custom_masker/`` for a complete third-party masker.

    When called:
        ``views`` in every log-prob pass of the engine: old policy, reference and each update pass. They
        recompute the masks, so row ``b``'s masks must depend on ``seeds[b]`` and its own tokens only.

    Options:
        The factory's keyword parameters (or dataclass fields), from
        ``actor_rollout_ref.model.diffusion.masker_kwargs``. Two keywords of ``views`` are filled in when it
        declares them: ``trace [B, L]`` int64, the rollout's denoising trace (the step the sampler decided each
        completion token at, -1 where it never did and off the completion;
        ``actor_rollout_ref.model.diffusion.record_trace=true`` makes the rollout record it, ``None`` without
        it); and ``block_ids [B, L]`` int64 for a block-diffusion model (SDAR, LLaDA2.x), each token's block on
        the model's grid (``block_origin``; non-decreasing along a row). With ``block_ids`` the engine runs
        each view in the ``[x_t | x_0]`` layout, where a noisy block sees only itself and the clean blocks
        before it.

    Errors:
        An option the factory does not take is an error listing the ones it does. A built object whose
        ``views`` or ``combine`` has another signature fails when it is built, naming the plugin and the
        expected signature. The engine refuses a masker without ``block_ids`` for a block-diffusion model.
    """


@hookspec
def diffugrpo_model_families() -> dict[str, Any]:
    """Model families: how a kind of diffusion LM is called, aligned, projected and masked.

    Returns:
        ``name -> ModelFamily``: a :class:`diffugrpo_plugin.models.family.ModelFamily` (a frozen dataclass;
        build yours with it). Its fields say:

        * ``call(module, input_ids [B, L], attention_mask [B, L] 0/1, position_ids [B, L]) -> logits
          [B, L, V]``: the keyword arguments the network takes (mask form, positions or none);
        * ``logits_shift``: True when the output at ``i - 1`` scores token ``i``;
        * ``final_norm``: dotted path of the module whose output is the final hidden states (the row-selective
          log-prob pass hooks its output, so the head projects only scored rows); ``head`` / ``embedding``:
          where the vocabulary weight lives (``head=None``: tied, no module);
        * ``mask_token_names`` / ``default_mask_token_id`` / ``config_mask_token_id``: how to find the mask id;
        * ``model_types`` / ``code_files`` / ``architectures``: the ``config.json`` values that select the
          family;
        * ``native`` / ``native_unsupported``: an implementation that loads the checkpoint without remote
          code, and the settings it cannot run (optional);
        * ``swiglu``: a :class:`diffugrpo_plugin.models.lean_mlp.SwiGLUBlocks` naming the classes and
          attributes of its SwiGLU feed-forwards, which training then runs with a lean backward (optional).

        The built-ins (``dream`` / ``diffucoder``, ``llada``, ``bidirectional``, the block families) are in
        :mod:`diffugrpo_plugin.models.families`.

    When called:
        When a checkpoint is loaded (training, rollout, ``generate``, ``eval``) and by ``diffugrpo check-model
        PATH``, which shows what a checkpoint resolves to.

    Options:
        None in config for the family itself. ``actor_rollout_ref.model.diffusion.family`` overrides detection
        and ``actor_rollout_ref.model.diffusion.mask_token_id`` the mask id.

    Errors:
        A checkpoint that no family selects is refused naming its ``model_type``, ``architectures`` and
        ``auto_map`` and listing the known families; one that several select, naming them. With
        ``implementation=native``, a checkpoint or setting the native class does not fit is refused saying what
        does not fit.
    """


@hookspec
def diffugrpo_samplers() -> dict[str, Callable[..., Any]]:
    """Samplers: how a diffusion model turns masked completions into text.

    Returns:
        ``name -> factory``; the factory builds an object with::

            generate(model: DiffusionLM, prompt_ids [B, P], prompt_mask [B, P], max_new_tokens: int, *,
                     eos_token_id: int, pad_token_id: int, seeds: list[int] | None = None,
                     record_trace: bool = False) -> GenerationOutput

        See :mod:`diffugrpo_plugin.sampling.contract` for what the arguments and the output mean (left
        padding, per-row seeds, padding after the first EOS).

    When called:
        ``generate`` in the rollout of every step (the verl rollout server), and by ``diffugrpo generate`` and
        ``diffugrpo eval``.

    Options:
        The factory's keyword parameters (or dataclass fields), from
        ``actor_rollout_ref.rollout.engine_kwargs.diffusion`` (``-o name=value`` for ``generate`` and
        ``eval``).

    Errors:
        An option the factory does not take is an error listing the ones it does; a built object without a
        fitting ``generate`` fails when it is built, naming the plugin and the expected signature.
    """


@hookspec
def diffugrpo_loss_terms() -> dict[str, Callable[..., Any]]:
    """Loss terms: named terms added, with a weight, to the policy loss of each update.

    Returns:
        ``name -> factory``; the factory builds an object with::

            prepare(step: StepBatch) -> dict[str, Tensor]   # [B] or jagged [B, j]
            loss(inputs: TermInputs) -> Tensor               # [B]

        What ``prepare`` returns travels with each sample into the update, where ``loss`` reads it from
        ``inputs.fields`` beside the policy's coupled log-probs (with gradient), the reference's, the pass each
        sample is scored in (``inputs.iteration``: a ``[B, K]`` field holds one column per pass) and the model.
        The engine adds ``weight x`` the mean per-sample loss over the mini-batch and logs it as
        ``loss_terms/<name>``, and the share of samples with a non-zero loss as ``loss_terms/<name>/applied``.
        See :mod:`diffugrpo_plugin.core.loss_terms` for both records and the built-ins (``sft``,
        ``preference``).

    When called:
        ``prepare`` on the trainer, once per step; it sees the whole step (groups, rewards, the rows' data,
        sequence log-ratios per pass of the update, the tokenizer). ``loss`` in each micro-batch of the update.
        A term that runs the model must run it on every micro-batch, whatever its samples (under FSDP a forward
        gathers parameters collectively: ranks that ran different forwards wait on each other forever); weight
        the samples it does not apply to by 0.

    Options:
        The factory's keyword parameters, from ``actor_rollout_ref.model.diffusion.loss_terms.<name>`` (all but
        ``weight``, which the engine takes).

    Errors:
        An option the factory does not take is an error listing the ones it does; a built object without
        ``prepare`` and ``loss`` fails when it is built, naming the plugin and the missing method.
    """
