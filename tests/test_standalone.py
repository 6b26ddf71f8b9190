"""A clone stands alone: the README's set-up commands are what CI runs from a copy with nothing beside it,
nothing a user runs points beside the clone, and the tests that need the real MBPP skip or fail on purpose."""

from __future__ import annotations

import re

import pytest

from conftest import MBPP_DIR_VAR, REPO, mbpp_file


def readme_commands() -> list[str]:
    """The commands of the README's "Two commands" block, in order, each on one line (as bash joins a line ending
    in a backslash with the next)."""
    section = (REPO / "README.md").read_text().split("## Two commands", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    lines = [line for line in block.replace("\\\n", "").splitlines() if line.strip() and not line.startswith("#")]
    return [re.sub(r" {2,}", " ", line) for line in lines]


def test_the_readme_gives_two_commands_that_install_then_train_and_install_then_test():
    train, test = readme_commands()
    assert train.endswith("pip install -e . && python -m verl.trainer.main algorithm=coupled_grpo")
    assert test.endswith('pip install -e ".[test]" && python -m pytest')
    assert train.split("pip install -e")[0] == test.split("pip install -e")[0]  # the same system set-up


def test_ci_first_runs_the_readme_test_command_verbatim_in_a_copy_without_mbpp():
    script = (REPO / ".ci" / "run").read_text()
    test = readme_commands()[1]
    alone = f"env -u {MBPP_DIR_VAR} bash -c '{test}'"
    assert alone in script
    clone = script.index('git clone -q . "$alone/diffugrpo"')
    enter = script.index('cd "$alone/diffugrpo"')
    back_home = script.index('pip install -e ".[test]"\n')  # re-points the editable install at this checkout
    with_data = script.index(f"export {MBPP_DIR_VAR}=")
    assert clone < enter < script.index(alone) < back_home < with_data
    assert script.index("python -m pytest --durations", with_data) < script.index("python -m pytest -m slow")


def test_nothing_a_user_runs_points_beside_the_clone():
    files = [REPO / "README.md", REPO / "pyproject.toml"] + [
        path
        for folder in ("examples", "diffugrpo_plugin", "reward_plugins", "hydra_plugins", "tests")
        for path in (REPO / folder).rglob("*")
        if path.suffix in {".py", ".md", ".yaml", ".toml"}
    ]
    beside = re.compile(r"\.\./shared|parent\s*/\s*[\"']shared")
    offenders = [
        str(path.relative_to(REPO))
        for path in files
        if path.name != "test_standalone.py" and beside.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_mbpp_tests_skip_with_the_reason_when_no_copy_is_named(monkeypatch):
    monkeypatch.delenv(MBPP_DIR_VAR, raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"{MBPP_DIR_VAR} is not set; point it at the folder holding"):
        mbpp_file("mbpp.jsonl")


def test_mbpp_tests_fail_when_the_named_copy_lacks_the_file(monkeypatch, tmp_path):
    monkeypatch.setenv(MBPP_DIR_VAR, str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=re.escape(f"{tmp_path / 'mbpp.jsonl'} does not exist")):
        mbpp_file("mbpp.jsonl")
    (tmp_path / "mbpp.jsonl").write_text("{}\n")
    assert mbpp_file("mbpp.jsonl") == tmp_path / "mbpp.jsonl"
