"""Reading JSON / JSON Lines / parquet input with provenance, and checking its fields.

The one reader of row input in diffugrpo: the data sources, ``diffugrpo eval --completions``,
``diffugrpo rewards score`` and ``diffugrpo generate --prompts-file`` all read through
:func:`read_records`. Every error is one line naming the file, the line (or row) and the field
at fault, and the fix (``mbpp.jsonl line 3: missing field 'test_list'``). No torch.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator


class DataError(ValueError):
    """An input file or option cannot be turned into training rows; the message names the fix."""


@dataclass(frozen=True)
class Record:
    """One input object and where it came from, for error messages (``mbpp.jsonl line 12``).

    ``line``: the line the object starts on (JSON), or its 1-based row number (parquet, hub)."""

    data: dict[str, Any]
    where: str
    line: int | None = None


STDIN = "-"
PARQUET_MAGIC = b"PAR1"
INPUT_FORMATS = "JSON Lines (.jsonl), a JSON array (.json) or a parquet file"


def input_name(path: str | os.PathLike) -> str:
    """How errors name an input: its file name, or ``stdin`` for ``-``."""
    return "stdin" if str(path) == STDIN else Path(path).name


def read_records(path: str | os.PathLike) -> list[Record]:
    """Objects of a ``.jsonl[.gz]`` file, a ``.json`` file holding an array (or JSON lines), or
    the rows of a parquet file (recognised by its ``.parquet`` suffix or its magic bytes);
    ``-`` reads standard input. Binary, non-UTF-8 or empty input is an error naming the fix."""
    name = input_name(path)
    data = _raw_bytes(path)
    if str(path).endswith(".parquet") or data.startswith(PARQUET_MAGIC):
        return _parquet_records(data, name)
    return _text_records(data, name)


def _parquet_records(data: bytes, name: str) -> list[Record]:
    records = [
        Record(row, f"{name} row {number}", number) for number, row in enumerate(parquet_rows(data, name), start=1)
    ]
    if not records:
        raise DataError(f"{name} holds no rows; write the parquet file with at least one row")
    return records


def _text_records(data: bytes, name: str) -> list[Record]:
    text = _decoded(data, name)
    records = list(_array_records(text, name) if text.lstrip().startswith("[") else _line_records(text, name))
    if not records:
        nothing = "nothing was piped in" if name == "stdin" else "the file is empty"
        raise DataError(f"{name} holds no JSON object ({nothing}); give one JSON object per line")
    return records


def parquet_rows(data: bytes, name: str) -> list[dict[str, Any]]:
    """The rows of parquet bytes as plain Python objects; an unreadable file is a one-line error."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(io.BytesIO(data)).to_pylist()
    except Exception as error:  # noqa: BLE001 - pyarrow raises many types for unreadable files
        raise DataError(
            f"{name} is not a readable parquet file ({one_line(error)}); write it again "
            f"with `diffugrpo data prepare` or pyarrow"
        ) from error


def one_line(error: BaseException | str) -> str:
    """An error message on one line (third-party messages may span several)."""
    return " ".join(str(error).split())


@functools.cache
def _stdin_bytes(stream: BinaryIO) -> bytes:
    """All of standard input, read once: a command reading its input per split sees it every time."""
    return stream.read()


def _raw_bytes(path: str | os.PathLike) -> bytes:
    if str(path) == STDIN:
        return _stdin_bytes(sys.stdin.buffer)
    path = Path(path)
    if not path.is_file():
        raise DataError(f"input file {path} does not exist")
    try:
        return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as error:
        raise DataError(f"cannot read {path}: {one_line(error)}") from error


def _decoded(data: bytes, name: str) -> str:
    """UTF-8 text (a byte-order mark is dropped); binary data is refused before any JSON is parsed."""
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise DataError(f"{name} line {line}: binary data (a NUL byte), not text; give {INPUT_FORMATS}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataError(
            f"{name} line {line}: not UTF-8 text (byte {error.start} of the input); "
            f"save it as UTF-8 text (e.g. `iconv -t UTF-8`)"
        ) from error


def _as_record(value: Any, where: str, line: int) -> Record:
    if not isinstance(value, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return Record(value, where, line)


def _line_records(text: str, name: str) -> Iterator[Record]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{name} line {number}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        yield _as_record(value, f"{name} line {number}", number)


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
        yield _as_record(value, f"{name} line {line} (item {item})", line)
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
