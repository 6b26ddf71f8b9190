"""A plugin package written for the first published contract (one ``diffugrpo`` entry-point group for every
hook) is pip-installed: its reward and its masker are still found, listed and used, a reward lookup still
imports no torch, and each lookup warns in one line naming the entry point and the group to move it to.
Discovery is cached per process, so the checks run in fresh subprocesses."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import installed_package, listed_plugins

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTION = "diffugrpo-legacy-plugin"

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "diffugrpo-legacy-plugin"
version = "0.3.0"

[project.entry-points.diffugrpo]
legacy = "diffugrpo_legacy_plugin"

[tool.setuptools]
py-modules = ["diffugrpo_legacy_plugin"]
"""

MODULE = '''
"""A reward and a masker in one module, listed once under the old group (no torch at import)."""
from diffugrpo_plugin import hookimpl


def word_count(completions, **columns):
    """The number of words."""
    return [float(len(text.split())) for text in completions]


def legacy_coupled():
    """DiffuCoder's coupled masker, built lazily."""
    from diffugrpo_plugin.core.masking import make_coupled

    return make_coupled()


@hookimpl
def diffugrpo_reward_functions():
    return {"legacy_words": word_count}


@hookimpl
def diffugrpo_maskers():
    return {"legacy_coupled": legacy_coupled}
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    source = tmp_path_factory.mktemp("legacy")
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "diffugrpo_legacy_plugin.py").write_text(MODULE)
    with installed_package(source, DISTRIBUTION):
        yield


def in_fresh_process(code: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "FutureWarning" in line]


def test_its_reward_is_scored_without_torch_and_the_warning_names_the_new_group(installed):
    done = in_fresh_process("""
        import sys
        from diffugrpo_plugin.rewards.spec import RewardSpec
        spec = RewardSpec.from_config({"reward_funcs": ["legacy_words"], "reward_weights": [1.0]})
        print(spec.score(["a b c"], {})[0].values["legacy_words"], spec.components[0].distribution,
              "torch" in sys.modules)
    """)
    assert done.stdout.split() == ["3.0", DISTRIBUTION, "0.3.0", "False"]
    [warning] = warning_lines(done.stderr)
    assert (
        "diffugrpo plugin 'legacy' (diffugrpo_legacy_plugin) from diffugrpo-legacy-plugin 0.3.0 is listed in the "
        "first contract's entry-point group 'diffugrpo'; it still works, but move its diffugrpo_reward_functions() "
        "to the group 'diffugrpo.rewards'"
    ) in warning


def test_its_masker_is_built_and_the_warning_names_the_maskers_group(installed):
    done = in_fresh_process("""
        from diffugrpo_plugin import plugins
        masker = plugins.build("masker", "legacy_coupled", {})
        print(type(masker).__name__, plugins.registrations("masker")["legacy_coupled"].distribution)
    """)
    from diffugrpo_plugin.core.masking import make_coupled

    assert done.stdout.split() == [type(make_coupled()).__name__, DISTRIBUTION, "0.3.0"]
    [warning] = warning_lines(done.stderr)
    assert "move its diffugrpo_maskers() to the group 'diffugrpo.maskers'" in warning


def test_rewards_list_shows_it(installed):
    done = subprocess.run(
        [sys.executable, "-m", "diffugrpo_plugin.cli", "rewards", "list"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("legacy_words"))
    assert line.split()[1:3] == [DISTRIBUTION, "0.3.0"]


def test_a_plugin_in_both_groups_is_registered_once(tmp_path, monkeypatch):
    """A package moving to the new group may list its module there and, still, the package (which re-exports the
    hook) under the old one: one hook, one registration, no 'registered twice' error."""
    import importlib.metadata

    from diffugrpo_plugin import plugins

    sources = {
        "moving_plugin/rewards.py": "from diffugrpo_plugin import hookimpl\n\n\n"
        "def short(completions, **columns):\n    return [1.0 for _ in completions]\n"
        "\n\n@hookimpl\ndef diffugrpo_reward_functions():\n"
        "    return {'moving_short': short}\n",
        "moving_plugin/__init__.py": "from moving_plugin.rewards import diffugrpo_reward_functions\n",
    }
    with listed_plugins(
        monkeypatch,
        tmp_path,
        sources,
        importlib.metadata.EntryPoint("moving", "moving_plugin.rewards", "diffugrpo.rewards"),
        importlib.metadata.EntryPoint("moving", "moving_plugin", "diffugrpo"),
    ):
        assert plugins.registrations("reward")["moving_short"].plugin == "moving"
