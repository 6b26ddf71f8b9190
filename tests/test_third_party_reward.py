"""A third-party reward package (``examples/third_party_reward``) is pip-installed into this
environment, then listed with its own distribution, selected and weighted, without any change to
diffugrpo. Discovery is cached per process, so the checks run in fresh subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import installed_example

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "third_party_reward"
DISTRIBUTION = "diffugrpo-example-reward"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    with installed_example(EXAMPLE.name, DISTRIBUTION, tmp_path_factory.mktemp("example")):
        yield


def in_fresh_process(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_listed_with_its_own_distribution(installed):
    out = in_fresh_process(
        "from diffugrpo_plugin import plugins\n"
        "r = plugins.registrations('reward')['example_brevity']\n"
        "print(r.distribution + '|' + r.description)"
    )
    assert out.strip() == f"{DISTRIBUTION} 0.1.0|Shorter completions score higher: target / (target + words)."


def test_cli_lists_it(installed):
    out = in_fresh_process(
        "import argparse\nfrom diffugrpo_plugin.cli import rewards\n"
        "p = argparse.ArgumentParser(); rewards.add_parser(p.add_subparsers(dest='c'))\n"
        "a = p.parse_args(['rewards', 'list']); a.func(a)"
    )
    line = next(line for line in out.splitlines() if line.startswith("example_brevity"))
    assert line.split()[1:3] == [DISTRIBUTION, "0.1.0"]


def test_selected_weighted_and_given_options(installed):
    out = in_fresh_process(
        "import json\nfrom diffugrpo_plugin.rewards.spec import RewardSpec\n"
        "spec = RewardSpec.from_config({'reward_funcs': ['code_format', 'example_brevity'],\n"
        "    'reward_weights': [0.5, 2.0], 'reward_kwargs': {'example_brevity': {'target_words': 4}}})\n"
        "values = spec.score(['```python\\nx = 1\\n```\\n'], {})[0].values\n"
        "print(json.dumps({'values': values, 'total': spec.total(values),\n"
        "    'provider': spec.components[1].distribution}))"
    )
    result = json.loads(out)
    # whitespace-separated words: "```python", "x", "=", "1", "```" -> 4 / (4 + 5)
    assert result["values"] == {"code_format": 1.0, "example_brevity": pytest.approx(4 / 9)}
    assert result["total"] == pytest.approx(0.5 * 1.0 + 2.0 * 4 / 9)
    assert result["provider"] == f"{DISTRIBUTION} 0.1.0"
