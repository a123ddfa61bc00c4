"""Reading JSON records with their line numbers, robust to real-world files.

BIRD-format JSONL files sometimes hold two objects on one physical line; a malformed line must
be reported with its line number while the other records still load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class RawRecord:
    line: int
    data: Any


@dataclass(frozen=True)
class MalformedRecord:
    line: int
    message: str


def iter_jsonl(path: Path) -> Iterator[RawRecord | MalformedRecord]:
    """Every JSON value of a JSON-lines file, several per physical line if need be."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")  # so error columns count within this line
            pos, end = 0, len(line)
            while True:
                while pos < end and line[pos].isspace():
                    pos += 1
                if pos >= end:
                    break
                try:
                    value, pos = _DECODER.raw_decode(line, pos)
                except json.JSONDecodeError as exc:
                    yield MalformedRecord(number, f"invalid JSON at column {exc.colno}: {exc.msg}")
                    break
                yield RawRecord(number, value)


def iter_json_array(path: Path) -> Iterator[RawRecord | MalformedRecord]:
    """Elements of a file holding one JSON array (EvalBench's format), each with its line."""
    text = path.read_text(encoding="utf-8")
    pos = _skip_ws(text, 0)
    if pos >= len(text) or text[pos] != "[":
        # Not an array: one (possibly pretty-printed) object, or JSON lines with a .json name.
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            value, end = None, -1
        if end != -1 and _skip_ws(text, end) == len(text):
            yield RawRecord(text.count("\n", 0, pos) + 1, value)
        else:
            yield from iter_jsonl(path)
        return
    pos = _skip_ws(text, pos + 1)
    if pos < len(text) and text[pos] == "]":
        return
    while pos < len(text):
        line = text.count("\n", 0, pos) + 1
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            # Inside an array we cannot find where the next element starts: stop here.
            yield MalformedRecord(exc.lineno, f"invalid JSON at column {exc.colno}: {exc.msg}; the rest of the file was not read")
            return
        yield RawRecord(line, value)
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        elif pos < len(text) and text[pos] == "]":
            return
        else:
            yield MalformedRecord(text.count("\n", 0, pos) + 1, "expected ',' or ']' after an array element")
            return


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos
