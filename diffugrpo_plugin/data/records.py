"""Reading JSON / JSON Lines input with provenance, and checking its fields.

The one reader of JSON input in diffugrpo: the data sources, ``diffugrpo eval --completions``,
``diffugrpo rewards score`` and ``diffugrpo generate --prompts-file`` all read through
:func:`read_records`. Every error names the file, the line and the field at fault
(``mbpp.jsonl line 3: missing field 'test_list'``). No torch.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator


class DataError(ValueError):
    """An input file or option cannot be turned into training rows; the message names the fix."""


@dataclass(frozen=True)
class Record:
    """One input object and where it came from, for error messages (``mbpp.jsonl line 12``)."""

    data: dict[str, Any]
    where: str


STDIN = "-"


def read_records(path: str | os.PathLike) -> list[Record]:
    """Objects of a ``.jsonl[.gz]`` file, or of a ``.json`` file holding an array (or JSON lines);
    ``-`` reads standard input. A file that is not UTF-8 text or holds no object is an error."""
    name = "stdin" if str(path) == STDIN else Path(path).name
    text = _decoded(_raw_bytes(path), name)
    records = list(_array_records(text, name) if text.lstrip().startswith("[") else _line_records(text, name))
    if not records:
        raise DataError(f"{name} holds no JSON object (the file is empty)")
    return records


def _raw_bytes(path: str | os.PathLike) -> bytes:
    if str(path) == STDIN:
        return sys.stdin.buffer.read()
    path = Path(path)
    if not path.is_file():
        raise DataError(f"input file {path} does not exist")
    try:
        return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as error:
        raise DataError(f"cannot read {path}: {error}") from error


def _decoded(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataError(f"{name} line {line}: not UTF-8 text (byte {error.start}); give a JSON Lines file "
                        f"encoded in UTF-8") from error


def _as_record(value: Any, where: str) -> Record:
    if not isinstance(value, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return Record(value, where)


def _line_records(text: str, name: str) -> Iterator[Record]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{name} line {number}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        yield _as_record(value, f"{name} line {number}")


def _array_records(text: str, name: str) -> Iterator[Record]:
    """Elements of a JSON array, each tagged with the line it starts on."""
    decoder = json.JSONDecoder()
    position = text.index("[") + 1
    line = 1 + text.count("\n", 0, position)
    item = 0
    while True:
        start = position
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        line += text.count("\n", start, position)
        if position >= len(text):
            raise DataError(f"{name} line {line}: the JSON array is not closed with ']'")
        if text[position] == "]":
            return
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise DataError(f"{name} line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        item += 1
        yield _as_record(value, f"{name} line {line} (item {item})")
        line += text.count("\n", position, end)
        position = end


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


FIELD_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("a string", lambda value: isinstance(value, str)),
    "id": ("a string or an integer", lambda value: isinstance(value, (str, int)) and not isinstance(value, bool)),
    "list": ("a list", lambda value: isinstance(value, list)),
    "str_list": ("a list of strings", _is_str_list),
    "nonempty_str_list": ("a non-empty list of strings", lambda value: bool(value) and _is_str_list(value)),
}
"""Field kinds :func:`checked_field` accepts: kind -> (what the error says is expected, check)."""


def checked_field(record: Record, name: str, kind: str = "str", optional: bool = False) -> Any:
    """``record.data[name]`` checked against one of :data:`FIELD_KINDS`.

    A missing (or null) required field raises ``DataError("<file> line N: missing field 'name'")``.
    ``id`` accepts a string or an integer and returns a string.
    """
    value = record.data.get(name)
    if value is None:
        if optional:
            return None
        raise DataError(f"{record.where}: missing field '{name}'")
    expected, check = FIELD_KINDS[kind]
    if not check(value):
        got = "an empty list" if value == [] else type(value).__name__
        raise DataError(f"{record.where}: field '{name}' must be {expected}, got {got}")
    return str(value) if kind == "id" else value


def check_choice(value: str, known: Iterable[str], what: str, kinds: str) -> None:
    """An error listing the known values when ``value`` is not one of them:
    ``unknown MBPP split 'dev'. Known splits: prompt, test, ...`` for ``what="MBPP split", kinds="splits"``."""
    known = list(known)
    if value not in known:
        raise DataError(f"unknown {what} '{value}'. Known {kinds}: {', '.join(known)}.")
