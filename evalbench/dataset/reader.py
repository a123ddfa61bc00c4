"""Reading JSON records with their line numbers, robust to real-world files.

BIRD-format JSONL files sometimes hold two objects on one physical line; a malformed line must
be reported with its line number while the other records still load.

Dataset files are untrusted input: every problem is a :class:`MalformedRecord` with its line
(the loader reports it as a record error) or a :class:`~evalbench.core.errors.DatasetError` — never a
traceback, never a record dropped silently. A UTF-8 byte-order mark is accepted; bytes that are
not UTF-8, a NUL character or a lone surrogate (``"\\ud800"``) in a string, a number out of range
(``1e999``, ``NaN``, an integer of more than :data:`MAX_INT_DIGITS` digits) and values nested
more than :data:`MAX_DEPTH` levels deep make their record malformed.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from evalbench.core.errors import DatasetError

MAX_DEPTH = 100  # levels of nested objects and arrays in one record
MAX_INT_DIGITS = 1000  # an integer with more digits is out of range


class _BadNumber:
    """What a number out of range decodes to, so the rest of its record (and file) still parses."""

    def __init__(self, text: str, why: str) -> None:
        self.text, self.why = text, why

    def describe(self) -> str:
        shown = self.text if len(self.text) <= 24 else self.text[:20] + "..."
        return f"number {shown} {self.why}"


def _parse_float(text: str) -> object:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return _BadNumber(text, "is out of range")
    return value


def _parse_int(text: str) -> object:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return _BadNumber(text, f"has more than {MAX_INT_DIGITS} digits")
    return int(text)


def _parse_constant(text: str) -> object:
    return _BadNumber(text, "is not valid JSON")


_DECODER = json.JSONDecoder(parse_float=_parse_float, parse_int=_parse_int, parse_constant=_parse_constant)
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")  # NUL, or a lone surrogate (a valid pair decodes to one character)
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that are not UTF-8, as decoded with surrogateescape


@dataclass(frozen=True)
class RawRecord:
    line: int
    data: object


@dataclass(frozen=True)
class MalformedRecord:
    line: int
    message: str


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except IsADirectoryError:
        raise DatasetError("is a directory, not a dataset file", file=str(path)) from None
    except OSError as exc:
        raise DatasetError(f"cannot read file: {exc.strerror or exc}", file=str(path)) from None


def iter_jsonl(path: Path) -> Iterator[RawRecord | MalformedRecord]:
    """Every JSON value of a JSON-lines file, several per physical line if need be."""
    with _open(path) as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                column = len(raw[: exc.start].decode("utf-8", "replace")) + 1
                yield MalformedRecord(number, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {column}); "
                                              "the line was not read")
                continue
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
                except RecursionError:
                    yield MalformedRecord(number, "invalid JSON: nested too deeply")
                    break
                problem = check_value(value)
                yield MalformedRecord(number, problem) if problem else RawRecord(number, value)


def iter_json_array(path: Path) -> Iterator[RawRecord | MalformedRecord]:
    """Elements of a file holding one JSON array (EvalBench's format), each with its line."""
    with _open(path) as handle:
        raw = handle.read()
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    # Bytes that are not UTF-8 become lone surrogates here: the element holding them is malformed,
    # the others still load.
    text = raw.decode("utf-8", "surrogateescape")
    del raw
    lines = _LineCounter(text)
    pos = _skip_ws(text, 0)
    if pos >= len(text) or text[pos] != "[":
        # Not an array: one (possibly pretty-printed) object, or JSON lines with a .json name.
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            value, end = None, -1
        if end != -1 and _skip_ws(text, end) == len(text):
            line = lines.at(pos)
            problem = _undecodable(text, pos, end) or check_value(value)
            yield MalformedRecord(line, problem) if problem else RawRecord(line, value)
        else:
            yield from iter_jsonl(path)
        return
    pos = _skip_ws(text, pos + 1)
    if pos < len(text) and text[pos] == "]":
        return
    while pos < len(text):
        line = lines.at(pos)
        start = pos
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            # Inside an array we cannot find where the next element starts: stop here.
            bad = _UNDECODABLE.search(text, start, exc.pos + 1)
            if bad is not None:
                yield MalformedRecord(lines.at(bad.start()), "not valid UTF-8; the rest of the file was not read")
            else:
                yield MalformedRecord(exc.lineno,
                                      f"invalid JSON at column {exc.colno}: {exc.msg}; the rest of the file was not read")
            return
        except RecursionError:
            yield MalformedRecord(line, "invalid JSON: nested too deeply; the rest of the file was not read")
            return
        problem = _undecodable(text, start, pos) or check_value(value)
        yield MalformedRecord(line, problem) if problem else RawRecord(line, value)
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        elif pos < len(text) and text[pos] == "]":
            return
        else:
            yield MalformedRecord(lines.at(pos), "expected ',' or ']' after an array element")  # and the rest is not read
            return


class _LineCounter:
    """The line of a position, counted incrementally (positions only grow), so that a large
    array is not rescanned from its start for every element."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1

    def at(self, pos: int) -> int:
        if pos < self.pos:
            return self.text.count("\n", 0, pos) + 1
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def _undecodable(text: str, start: int, end: int) -> str | None:
    bad = _UNDECODABLE.search(text, start, end)
    if bad is None:
        return None
    return f"not valid UTF-8 (byte 0x{ord(bad.group()) - 0xDC00:02x})"


def check_value(value: object) -> str | None:
    """Why a decoded record cannot be used (a string with a NUL or a lone surrogate, a number
    out of range, nesting deeper than :data:`MAX_DEPTH`), naming the key; None when it is fine."""
    stack: list[tuple[object, str, int]] = [(value, "", 0)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, str):
            bad = _BAD_CHAR.search(node)
            if bad is not None:
                char = bad.group()
                what = ("a NUL character (\\u0000)" if char == "\x00"
                        else f"a lone surrogate (\\u{ord(char):04x}), not Unicode text")
                return f"{_key(where)}contains {what}"
        elif isinstance(node, _BadNumber):
            return f"{_key(where)}{node.describe()}"
        elif isinstance(node, (dict, list)):
            if depth >= MAX_DEPTH:
                return f"{_key(where)}nested more than {MAX_DEPTH} levels deep"
            if isinstance(node, dict):
                for key, child in node.items():
                    path = f"{where}.{key}" if where else str(key)
                    if _BAD_CHAR.search(key):
                        return f"{_key(where)}a key contains a NUL character or a lone surrogate"
                    stack.append((child, path, depth + 1))
            else:
                stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(node))
    return None


def _key(where: str) -> str:
    return f"key {where!r}: " if where else ""


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos
