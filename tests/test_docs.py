"""The documentation: a README that fits on a screen, a docs site that builds with warnings as errors, generated
reference pages that match the code, and no broken relative link (on GitHub's view of the files, and the site's)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import generate
import pytest

from conftest import REPO

LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_the_readme_fits_in_250_lines():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", sorted(generate.generated_pages()))
def test_generated_pages_match_the_code(page):
    assert (REPO / "docs" / page).read_text() == generate.generated_pages()[page], (
        f"docs/{page} is stale: run `python docs/generate.py`"
    )


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: path.relative_to(REPO).as_posix())
def test_every_relative_link_names_a_file_that_exists(path):
    targets = [target for target in LINK.findall(path.read_text()) if not re.match(r"[a-z]+:|#", target)]
    missing = [target for target in targets if not (path.parent / target.split("#")[0]).exists()]
    assert missing == []


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARNING" not in result.stderr
    assert (tmp_path / "reference" / "hooks" / "index.html").is_file()


def test_the_site_build_fails_on_a_broken_link(tmp_path):
    """--strict is what makes a broken link fail: the same build on a page with one does."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [a page](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nstrict: true\n")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode != 0 and "missing.md" in result.stderr


def test_the_readme_plugin_example_is_a_reward_that_fits_the_contract():
    from diffugrpo_plugin import Explained, plugins

    block = re.search(r"```python\n# my_pkg/rewards.py\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)  # our own example code, not generated code
    short = namespace["diffugrpo_reward_functions"]()["short"]
    assert plugins._reward_problem(short) is None
    scores = short(["one two three", " ".join(["word"] * 60)], target_words=50)
    assert scores[0] == 50 / 53
    assert isinstance(scores[1], Explained) and scores[1].value == 50 / 110 and scores[1].reason.kind == "long"
