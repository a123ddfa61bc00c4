"""How results are loaded into Python: as psycopg does, except that PostgreSQL's infinite dates
and timestamps load as the largest and smallest Python values (as psycopg2 loads them, which
BIRD-Interact's evaluator relies on) instead of failing the query, and a JSON document nested
deeper than Python's parser goes (SQL can build one thousands of levels deep) loads as its text
instead of raising out of the driver."""

from __future__ import annotations

import datetime as dt
from typing import TypeVar

from psycopg.abc import AdaptContext, Buffer
from psycopg.types import datetime as pgdt
from psycopg.types import json as pgjson

_INFINITE = {
    "date": (dt.date.max, dt.date.min),
    "timestamp": (dt.datetime.max, dt.datetime.min),
    "timestamptz": (dt.datetime.max.replace(tzinfo=dt.timezone.utc), dt.datetime.min.replace(tzinfo=dt.timezone.utc)),
}
# binary forms of +/- infinity: int32 / int64 extremes
_BINARY = {"date": (b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00"),
           "timestamp": (b"\x7f\xff\xff\xff\xff\xff\xff\xff", b"\x80\x00\x00\x00\x00\x00\x00\x00")}
_BINARY["timestamptz"] = _BINARY["timestamp"]
C = TypeVar("C", bound=AdaptContext)  # a connection (anything with adapters)


def _loader(base: type, name: str, binary: bool) -> type:
    plus, minus = _INFINITE[name]
    tokens = _BINARY[name] if binary else (b"infinity", b"-infinity")

    class Loader(base):  # type: ignore[misc]  # base is psycopg's text or binary loader, chosen at run time
        def load(self, data: Buffer) -> object:
            raw = bytes(data)
            if raw == tokens[0]:
                return plus
            if raw == tokens[1]:
                return minus
            return super().load(data)

    Loader.__name__ = f"Infinite{base.__name__}"
    return Loader


_LOADERS = [
    ("date", pgdt.DateLoader, False), ("date", pgdt.DateBinaryLoader, True),
    ("timestamp", pgdt.TimestampLoader, False), ("timestamp", pgdt.TimestampBinaryLoader, True),
    ("timestamptz", pgdt.TimestamptzLoader, False), ("timestamptz", pgdt.TimestamptzBinaryLoader, True),
]
LOADERS: list[tuple[str, type]] = [(name, _loader(base, name, binary)) for name, base, binary in _LOADERS]


def _json_loader(base: type) -> type:
    class Loader(base):  # type: ignore[misc]  # base is psycopg's text or binary loader, chosen at run time
        def load(self, data: Buffer) -> object:
            try:
                return super().load(data)
            except RecursionError:  # the text as the server sent it (jsonb's binary form: a version byte first)
                raw = bytes(data)
                return (raw[1:] if base is pgjson.JsonbBinaryLoader else raw).decode("utf-8", "replace")

    Loader.__name__ = f"Deep{base.__name__}"
    return Loader


LOADERS += [("json", _json_loader(pgjson.JsonLoader)), ("json", _json_loader(pgjson.JsonBinaryLoader)),
            ("jsonb", _json_loader(pgjson.JsonbLoader)), ("jsonb", _json_loader(pgjson.JsonbBinaryLoader))]


def register_loaders(conn: C) -> C:
    """Register the loaders on a connection (returns it, for use in a connect factory)."""
    for name, loader in LOADERS:
        conn.adapters.register_loader(name, loader)
    return conn
