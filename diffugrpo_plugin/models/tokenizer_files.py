"""A local checkpoint's tokenizer files without the code they name (an ``auto_map``), copied once into the cache.

verl's reward workers load the tokenizer with ``trust_remote_code=True`` whatever the job says; pointed at the copy
they load it as the rest of the job does, without running (or needing) the checkpoint's ``tokenization_*.py``.
"""

from __future__ import annotations

import os
import re

TOKENIZER_CODE_FILES = ("tokenizer_config.json", "config.json")  # where an auto_map can send AutoTokenizer
TOKENIZER_FILES = re.compile(
    r"(tokenizer.*|vocab.*|merges\.txt|special_tokens_map\.json|added_tokens\.json|"
    r"chat_template\..*|additional_chat_templates|.*\.model|.*\.tiktoken|config\.json|"
    r"generation_config\.json|(pre)?processor_config\.json)"
)


def tokenizer_without_remote_code(path: str) -> str:
    """A directory holding the tokenizer at ``path`` whose files name no code to run: ``path`` itself when it is
    not a local directory or when neither its ``tokenizer_config.json`` nor its ``config.json`` has an
    ``auto_map``; else a copy of its tokenizer files (:data:`TOKENIZER_FILES`) without one, built once in the
    cache, keyed by their contents.

    verl's reward workers load the tokenizer with ``trust_remote_code=True`` whatever the job says; pointed at
    this directory they load it as the rest of the job does, without running (or needing) the checkpoint's
    ``tokenization_*.py``. The cache must be on storage every node sees (``$DIFFUGRPO_HOME``) for a
    multi-node job.
    """
    import hashlib
    import json
    import shutil

    from diffugrpo_plugin.data.cache import build_once, diffugrpo_home

    source = os.path.expanduser(path)
    if not os.path.isdir(source):
        return path
    names = sorted(name for name in os.listdir(source) if TOKENIZER_FILES.fullmatch(name))

    def settings(name: str) -> dict:
        with open(os.path.join(source, name)) as handle:
            return json.load(handle)

    if not any("auto_map" in settings(name) for name in TOKENIZER_CODE_FILES if name in names):
        return path
    digest = hashlib.sha256()
    for name in names:
        top = os.path.join(source, name)
        files = (
            [top]
            if os.path.isfile(top)
            else sorted(os.path.join(root, file) for root, _, found in os.walk(top) for file in found)
        )
        for file in files:
            with open(file, "rb") as handle:
                digest.update(os.path.relpath(file, source).encode() + b"\0" + hashlib.sha256(handle.read()).digest())

    def copy(staging) -> None:
        for name in names:
            if name in TOKENIZER_CODE_FILES:
                kept = {key: value for key, value in settings(name).items() if key != "auto_map"}
                (staging / name).write_text(json.dumps(kept, indent=2) + "\n")
            elif os.path.isdir(os.path.join(source, name)):
                shutil.copytree(os.path.join(source, name), staging / name)
            else:
                shutil.copy(os.path.join(source, name), staging / name)

    return str(build_once(diffugrpo_home() / "tokenizers" / digest.hexdigest()[:16], copy))
