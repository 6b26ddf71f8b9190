"""Plugins that do not fit their hook's contract fail when loaded or built, naming the plugin and the signature."""

from __future__ import annotations

import importlib.metadata
import types

import pytest
import torch

from conftest import listed_plugins
from diffugrpo_plugin import hookimpl, plugins
from diffugrpo_plugin.core.views import MaskedViews, check_views
from diffugrpo_plugin.plugins import PluginError


@pytest.fixture
def register_in_code():
    """Adds a plugin module to one kind's manager for the test, then removes it."""
    added = []

    def register(kind: str, **hooks):
        module = types.ModuleType(f"contract_test_{kind}")
        for name, function in hooks.items():
            setattr(module, name, hookimpl(function))
        manager, _ = plugins.plugin_manager(kind)
        manager.register(module, name=module.__name__)
        added.append((manager, module.__name__))

    yield register
    for manager, name in added:
        manager.unregister(name=name)


def test_a_reward_without_columns_or_with_a_required_option_is_refused(register_in_code):
    def no_columns(completions):
        return [0.0] * len(completions)

    register_in_code("reward", diffugrpo_reward_functions=lambda: {"bad_reward": no_columns})
    with pytest.raises(
        PluginError,
        match=r"reward 'bad_reward' from plugin 'contract_test_reward' \(<registered in "
        r"code>\) breaks the contract in diffugrpo_plugin/hookspecs\.py: it must be "
        r"fn\(completions, \*, option=default, \.\.\., \*\*columns\).*"
        r"got no_columns\(completions\)",
    ):
        plugins.lookup("reward", "code")


def test_a_reward_option_without_a_default_is_refused(register_in_code):
    def needs_option(completions, *, threshold, sandbox=None, **columns):
        return [0.0] * len(completions)

    register_in_code("reward", diffugrpo_reward_functions=lambda: {"bad_reward": needs_option})
    with pytest.raises(PluginError, match=r"every option with a default.*needs_option\(completions, \*, threshold"):
        plugins.registrations("reward")


def test_a_masker_written_to_an_old_four_argument_views_fails_when_built(register_in_code):
    class OldMasker:
        def views(self, input_ids, completion_mask, mask_id, seeds):
            raise AssertionError("never called")

    register_in_code("masker", diffugrpo_maskers=lambda: {"old": OldMasker})
    with pytest.raises(
        PluginError,
        match=r"masker 'old' from plugin 'contract_test_masker'.*views\(\) must accept "
        r"\(input_ids, completion_mask, mask_id, seeds, prompt_mask\); got "
        r"views\(input_ids, completion_mask, mask_id, seeds\)",
    ):
        plugins.build("masker", "old", {})


def test_a_masker_option_it_does_not_take_lists_the_ones_it_does():
    with pytest.raises(
        plugins.PluginOptionError,
        match=r"masker 'coupled' has no option t_rnage; its options are: "
        r"t_range, p_mask_prompt",
    ):
        plugins.build("masker", "coupled", {"t_rnage": [0.2, 0.8]})


def test_what_a_masker_returns_is_checked_against_the_batch():
    ids = torch.zeros(2, 5, dtype=torch.long)
    good = MaskedViews(noisy=torch.zeros(3, 2, 5, dtype=torch.long), coef=torch.zeros(3, 2, 5))
    assert check_views(good, ids.shape, "mine") is good
    with pytest.raises(TypeError, match="masker 'mine' returned tuple from views"):
        check_views((good.noisy, good.coef), ids.shape, "mine")
    with pytest.raises(
        ValueError,
        match=r"masker 'mine' returned views with noisy \(3, 2, 4\) and coef \(3, 2, 4\); "
        r"both must be \[V, 2, 5\]",
    ):
        check_views(MaskedViews(torch.zeros(3, 2, 4), torch.zeros(3, 2, 4)), ids.shape, "mine")


def test_a_sampler_without_the_generate_contract_fails_when_built(register_in_code):
    class Positional:
        def generate(self, model, prompt_ids, prompt_mask, max_new_tokens, eos_token_id, pad_token_id):
            raise AssertionError("never called")

    register_in_code("sampler", diffugrpo_samplers=lambda: {"positional": Positional, "thing": lambda: object()})
    with pytest.raises(
        PluginError,
        match=r"generate\(\) must accept \(model, prompt_ids, prompt_mask, "
        r"max_new_tokens, \*, eos_token_id, pad_token_id, seeds, record_trace\)",
    ):
        plugins.build("sampler", "positional", {})
    with pytest.raises(PluginError, match="built object, whose generate.*got no generate method"):
        plugins.build("sampler", "thing", {})


def test_a_model_family_must_be_a_model_family_record(register_in_code):
    register_in_code("model_family", diffugrpo_model_families=lambda: {"mine": {"call": print}})
    with pytest.raises(
        PluginError,
        match=r"model family 'mine' from plugin 'contract_test_model_family'.*got dict; "
        r"expected a diffugrpo_plugin.models.family.ModelFamily",
    ):
        plugins.registrations("model_family")


def test_a_loss_term_without_prepare_fails_when_built(register_in_code):
    class LossOnly:
        def loss(self, inputs):
            return inputs

    register_in_code("loss_term", diffugrpo_loss_terms=lambda: {"loss_only": LossOnly})
    with pytest.raises(
        PluginError,
        match=r"loss_term 'loss_only' from .* breaks the contract in "
        r"diffugrpo_plugin/hookspecs\.py: the factory built LossOnly, which must have "
        r"prepare\(step\) -> dict of per-sample tensors and loss\(inputs\) -> "
        r"per-sample loss \[B\]; got prepare missing",
    ):
        plugins.build("loss_term", "loss_only", {})


@pytest.mark.parametrize(
    "group, source",
    [
        # a masker module listed as a reward
        (
            "diffugrpo.rewards",
            "from diffugrpo_plugin import hookimpl\n\n@hookimpl\ndef diffugrpo_maskers():\n    return {}\n",
        ),
        # a reward module whose hook's name is misspelt
        ("diffugrpo.rewards", "def diffugrpo_reward_functions_typo():\n    return {}\n"),
    ],
)
def test_a_module_listed_in_a_group_without_its_hook_is_named(tmp_path, monkeypatch, group, source):
    listed = importlib.metadata.EntryPoint(name="mine", value="misfiled_plugin", group=group)
    with listed_plugins(monkeypatch, tmp_path, {"misfiled_plugin.py": source}, listed):
        with pytest.raises(
            PluginError,
            match=rf"plugin 'mine' \(misfiled_plugin\) from <unknown distribution> is "
            rf"listed in the entry-point group '{group}' but implements no "
            rf"diffugrpo_reward_functions\(\) hook",
        ):
            plugins.registrations("reward")


def test_the_reward_hook_documents_every_option_diffugrpo_fills_in():
    from diffugrpo_plugin import hookspecs

    documented = " ".join(hookspecs.diffugrpo_reward_functions.__doc__.split())
    assert [name for name in plugins.INJECTED_REWARD_OPTIONS if f"``{name}``" not in documented] == []


def test_a_masker_whose_combine_takes_the_wrong_arguments_fails_when_built(register_in_code):
    class WrongCombine:
        def views(self, input_ids, completion_mask, mask_id, seeds, prompt_mask=None):
            raise AssertionError("never called")

        def combine(self, per_view_logp):
            raise AssertionError("never called")

    register_in_code("masker", diffugrpo_maskers=lambda: {"wrong_combine": WrongCombine})
    with pytest.raises(
        PluginError,
        match=r"masker 'wrong_combine' from plugin 'contract_test_masker'.*optional combine\(\) must accept "
        r"\(per_view_logp, views, scored, positive\); got combine\(per_view_logp\)",
    ):
        plugins.build("masker", "wrong_combine", {})
    assert callable(plugins.build("masker", "spg", {}).combine)  # the built-in that has one fits


def test_every_hook_documents_returns_when_called_options_and_errors_in_that_order():
    import inspect

    from diffugrpo_plugin import hookspecs

    sections = ["Returns:", "When called:", "Options:", "Errors:"]
    hooks = [hook for name, hook in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("diffugrpo_")]
    assert len(hooks) == 5
    for hook in hooks:
        headings = [line.strip() for line in inspect.getdoc(hook).splitlines() if line.strip() in sections]
        assert headings == sections, hook.__name__
