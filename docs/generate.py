"""The reference pages of the docs site, generated from the code.

``python docs/generate.py`` writes (``tests/test_docs.py`` fails, naming this command, when one is stale):

* ``docs/reference/hooks.md`` from :mod:`diffugrpo_plugin.hookspecs` (its docstring and every hook's);
* ``docs/reference/cli.md`` from the ``diffugrpo`` command's parsers (every sub-command's ``--help``);
* ``docs/reference/config.md`` from the packaged YAML configs, comments and all;
* ``docs/index.md``, the site's home page, from the README (its links made relative to ``docs/``).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def text_block(text: str) -> str:
    return f"```text\n{text.rstrip()}\n```\n"


def hooks_page() -> str:
    from diffugrpo_plugin import hookspecs

    parts = [
        "# Plugin hooks\n",
        "Generated from `diffugrpo_plugin/hookspecs.py`.\n",
        text_block(inspect.getdoc(hookspecs)),
    ]
    for name, hook in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("diffugrpo_"):
            parts += [
                f"## `{name}`\n",
                f"```python\ndef {name}{inspect.signature(hook)}\n```\n",
                text_block(inspect.getdoc(hook)),
            ]
    return "\n".join(parts)


def subcommands(parser: argparse.ArgumentParser, prefix: str):
    yield prefix, parser
    for action in parser._actions:  # argparse keeps sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from subcommands(child, f"{prefix} {name}")


def cli_page() -> str:
    from diffugrpo_plugin.cli import build_parser

    parts = ["# CLI\n", "Generated from the parsers of the `diffugrpo` command (`diffugrpo_plugin/cli/`).\n"]
    for command, parser in subcommands(build_parser(), "diffugrpo"):
        parts += [f"## `{command}`\n", text_block(parser.format_help())]
    return "\n".join(parts)


def config_page() -> str:
    config = REPO / "diffugrpo_plugin" / "config"
    parts = [
        "# Config\n",
        "The packaged Hydra configs, verbatim: `algorithm=coupled_grpo` composes "
        "`algorithm/coupled_grpo.yaml` over verl's `ppo_trainer`; its comments document each key.\n",
    ]
    parts += [diffusion_defaults_table()]
    for path in sorted(config.rglob("*.yaml")):
        parts += [f"## `{path.relative_to(config).as_posix()}`\n", f"```yaml\n{path.read_text().rstrip()}\n```\n"]
    return "\n".join(parts)


def diffusion_defaults_table() -> str:
    """``config/defaults.py``'s ``DiffusionDefaults``: each key, its value and the comment beside it."""
    from diffugrpo_plugin.config.defaults import DiffusionDefaults

    source = REPO / "diffugrpo_plugin" / "config" / "defaults.py"
    lines = source.read_text().splitlines()
    rows = ["| key | default | |", "|---|---|---|"]
    for field in dataclasses.fields(DiffusionDefaults):
        line = next(text for text in lines if text.strip().startswith(f"{field.name}:"))
        note = line.split("#", 1)[1].strip() if "#" in line else ""
        rows.append(f"| `{field.name}` | `{json.dumps(field.default)}` | {note} |")
    return (
        "## `actor_rollout_ref.model.diffusion` defaults\n\n"
        "Written once, in `diffugrpo_plugin/config/defaults.py`; the yaml below reads them as "
        "`${diffugrpo.default:KEY}`.\n\n" + "\n".join(rows) + "\n"
    )


def home_page() -> str:
    """The README, its links into ``docs/`` made relative to it and its links to other files shown as paths."""
    text = (REPO / "README.md").read_text().replace("](docs/", "](")
    return re.sub(r"\[([^]]+)\]\((?!https?:|[a-z-]+/[^)]*\.md|[a-z-]+\.md)([^)]+)\)", r"\1 (`\2`)", text)


def generated_pages() -> dict[str, str]:
    """Path under ``docs/`` -> its generated text."""
    return {
        "index.md": home_page(),
        "reference/hooks.md": hooks_page(),
        "reference/cli.md": cli_page(),
        "reference/config.md": config_page(),
    }


if __name__ == "__main__":
    for name, text in generated_pages().items():
        (REPO / "docs" / name).parent.mkdir(exist_ok=True)
        (REPO / "docs" / name).write_text(text)
        print(f"wrote docs/{name}")
