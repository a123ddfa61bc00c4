"""Tool-call arguments as the model sent them — a JSON text (OpenAI), a mapping (Gemini, Ollama,
ADK events) or anything else — read into a dict the harness can use, and checked against a
tool's parameters. Nothing a model sends here raises: what cannot be used becomes a message for
the model (a tool error), never an agent error.

:func:`decode` keeps arguments that are not a JSON object within the limits (invalid JSON,
another JSON value, integers Python will not convert, nesting deeper than :data:`MAX_DEPTH`,
text over :data:`MAX_BYTES`) as ``{"_raw": <clipped text>, "_problem": <why>}``, so the call is
recorded and answered with :func:`problem`. :func:`check` reads the arguments one tool takes,
each of the JSON Schema type its spec declares.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import TypedDict

from evalbench.core.json_types import json_type

RAW, PROBLEM = "_raw", "_problem"
MAX_BYTES = 256 * 1024  # of the arguments' JSON text: a run_sql statement (64 KiB of UTF-8) escaped fits
MAX_DEPTH = 32  # nesting of arrays and objects; no tool takes more than one level
RAW_KEPT = 2_000  # characters of unusable arguments kept on the call
MAX_INTEGER_DIGITS = 100
_INTEGER_TEXT = re.compile(r"\s*[+-]?\d{1,18}\s*")


class SchemaSpec(TypedDict, total=False):
    """The JSON Schema of a tool's parameters, as far as the tools use it: an object of string and
    integer properties."""

    type: str
    description: str
    maxLength: int
    properties: dict[str, SchemaSpec]
    required: list[str]


class _ToolSpecBase(TypedDict):
    name: str
    parameters: SchemaSpec


class ToolSpec(_ToolSpecBase, total=False):
    """A tool offered to a model, in the neutral form each backend converts."""

    description: str


class ArgumentError(ValueError):
    """The arguments do not fit the tool; the message says why, for the model."""


class _HugeInteger(Exception):
    pass


def _parse_int(text: str) -> int:
    """A JSON integer; one of thousands of digits (slow to convert, refused by Python) is refused."""
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise _HugeInteger(f"the arguments hold an integer of {len(text.lstrip('-'))} digits, over the limit of "
                           f"{MAX_INTEGER_DIGITS}")
    return int(text)


def decode(arguments: object) -> dict[str, object]:
    """``arguments`` as a dict of JSON values; unusable ones as ``{_raw, _problem}``."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, (str, bytes, bytearray)):
        text = arguments if isinstance(arguments, str) else bytes(arguments).decode("utf-8", "replace")
        if len(text) > MAX_BYTES:  # characters: at least as many bytes
            return _unusable(text, f"the arguments are {len(text)} characters long, over the limit of {MAX_BYTES}")
        try:
            value = json.loads(text, parse_int=_parse_int)
        except _HugeInteger as exc:
            return _unusable(text, str(exc))
        except RecursionError:
            return _unusable(text, f"the arguments are nested deeper than {MAX_DEPTH} levels")
        except ValueError as exc:  # not JSON, or an integer of thousands of digits
            return _unusable(text, f"the arguments are not valid JSON ({_first_line(exc)})")
    else:
        value, text = arguments, None
    if not isinstance(value, Mapping):
        return _unusable(text if text is not None else _text(value),
                         f"the arguments must be a JSON object, not {json_type(value)}")
    why = _too_big(value)
    if why is not None:
        return _unusable(text if text is not None else _text(value), why)
    return {str(key): item for key, item in value.items()}


def problem(args: object) -> str | None:
    """Why :func:`decode` could not use these arguments, or None."""
    if not isinstance(args, Mapping):
        return f"the arguments must be a JSON object, not {json_type(args)}"
    why = args.get(PROBLEM) if RAW in args else None
    return str(why) if why is not None else None


def check(parameters: SchemaSpec, args: Mapping[str, object]) -> dict[str, str | int]:
    """The arguments a tool with these JSON Schema ``parameters`` takes, each of its declared
    type (``string``, within its ``maxLength``, or ``integer``: an integral number or a short
    integer text counts); others are left out. :class:`ArgumentError` for a missing required one or a
    value of the wrong type."""
    why = problem(args)
    if why is not None:
        raise ArgumentError(why)
    properties: Mapping[str, SchemaSpec] = parameters.get("properties") or {}
    for name in parameters.get("required") or ():
        if args.get(name) is None:
            raise ArgumentError(f"{name} is required")
    checked: dict[str, str | int] = {}
    for name, spec in properties.items():
        value = args.get(name)
        if value is None:
            continue  # absent (or null): the tool's default
        kind = spec.get("type", "string")
        checked[name] = _integer(name, value) if kind == "integer" else _string(name, value, spec.get("maxLength"))
    return checked


def _integer(name: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        return int(value)
    raise ArgumentError(f"{name} must be a whole number, not {_shown(value)}")


def _string(name: str, value: object, max_length: int | None) -> str:
    if not isinstance(value, str):
        raise ArgumentError(f"{name} must be a string, not {_shown(value)}")
    if max_length is not None and len(value) > max_length:
        raise ArgumentError(f"{name} is {len(value)} characters long, over the limit of {max_length}")
    return value


def kept(value: object, what: str = "the tool response is") -> object:
    """A JSON value a server sent (an ADK tool response), as is when it nests at most
    :data:`MAX_DEPTH` levels, else as ``{_raw, _problem}``: nothing later (the journal, the
    reports) walks a value nested thousands of levels deep. Its size is the reply's business."""
    why = _too_big(value, what, max_bytes=None)
    return value if why is None else _unusable(_text(value), why)


def _too_big(value: object, what: str = "the arguments are", max_bytes: int | None = MAX_BYTES) -> str | None:
    """Why ``value`` is too deep or too large to keep ("<what> larger than ..."), or None.
    Iterative: never recurses."""
    stack: list[tuple[object, int]] = [(value, 1)]
    size = 0
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children = [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            size += len(item) if isinstance(item, str) else 8
            if max_bytes is not None and size > max_bytes:
                return f"{what} larger than {max_bytes} bytes"
            continue
        if depth > MAX_DEPTH:
            return f"{what} nested deeper than {MAX_DEPTH} levels"
        size += 2 + len(children)
        stack.extend((child, depth + 1) for child in children)
    return None


def _unusable(text: str, why: str) -> dict[str, object]:
    kept = text if len(text) <= RAW_KEPT else text[:RAW_KEPT] + f"... [{len(text) - RAW_KEPT} more characters]"
    return {RAW: kept, PROBLEM: why}


def _text(value: object) -> str:
    """Some text for a value that is not usable as it is (never raises, never walks it deeply)."""
    return f"<{json_type(value)}>" if isinstance(value, (Mapping, list, tuple)) else _shown(value, RAW_KEPT)


def _shown(value: object, limit: int = 80) -> str:
    """A short, safe description of a value for a message (a huge integer is not converted)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return "an integer too large to use"
    if isinstance(value, (str, int, float, bool)) or value is None:
        text = repr(value)
        return text if len(text) <= limit else text[:limit] + "..."
    return json_type(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
