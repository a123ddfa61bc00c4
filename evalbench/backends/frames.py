"""Length-prefixed frames over pipes, between the harness and its engine processes
(:mod:`evalbench.backends.engine_process`, :mod:`evalbench.backends.engine_server`).

A frame is an 8-byte big-endian length and a pickle. The harness reads what an engine process
sends with :func:`loads_reply`, which builds only plain data and the value types a database
driver returns (decimals, dates and times, UUIDs, time zones): an engine process runs hostile
SQL, so its replies are read as data that could have been forged, never as code to run.
"""

from __future__ import annotations

import datetime
import decimal
import io
import os
import pickle
import select
import struct
import time
import uuid
import zoneinfo
from collections.abc import Callable

_HEADER = struct.Struct(">Q")
_CHUNK = 1 << 20
# (module, name) -> what a reply may build; nothing else can be named in it
_ALLOWED: dict[tuple[str, str], type] = {
    ("decimal", "Decimal"): decimal.Decimal,
    ("datetime", "date"): datetime.date,
    ("datetime", "time"): datetime.time,
    ("datetime", "datetime"): datetime.datetime,
    ("datetime", "timedelta"): datetime.timedelta,
    ("datetime", "timezone"): datetime.timezone,
    ("uuid", "UUID"): uuid.UUID,
    ("zoneinfo", "ZoneInfo"): zoneinfo.ZoneInfo,
}


class FrameError(Exception):
    """The other end closed the pipe, sent a malformed or oversized frame, or took too long."""


class FrameTimeout(FrameError):
    """No whole frame arrived before the deadline."""


def _zoneinfo_getattr(owner: object, name: str) -> Callable[..., zoneinfo.ZoneInfo]:
    # a ZoneInfo pickles as getattr(ZoneInfo, "_unpickle")(key, from_cache): that one attribute only
    if owner is zoneinfo.ZoneInfo and name == "_unpickle":
        hook: Callable[..., zoneinfo.ZoneInfo] = zoneinfo.ZoneInfo._unpickle  # type: ignore[attr-defined]  # a private unpickling hook of zoneinfo, not in its stubs
        return hook
    raise pickle.UnpicklingError(f"a reply may not read {name!r} of {owner!r}")


class _ReplyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Callable[..., object]:
        if (module, name) == ("builtins", "getattr"):
            return _zoneinfo_getattr
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"a reply may not build {module}.{name}") from None


def dumps(message: object) -> bytes:
    body = pickle.dumps(message, protocol=5)
    return _HEADER.pack(len(body)) + body


def loads_reply(body: bytes | bytearray) -> object:
    """A reply of an engine process: plain data and driver value types only."""
    try:
        return _ReplyUnpickler(io.BytesIO(body)).load()
    except Exception as exc:  # noqa: BLE001  # whatever a forged pickle raises
        raise FrameError(f"unreadable reply: {type(exc).__name__}: {exc}") from None


def write_frame(fd: int, message: object) -> None:
    """Send ``message`` whole (blocking)."""
    data = memoryview(dumps(message))
    while data:
        try:
            written = os.write(fd, data)
        except OSError as exc:
            raise FrameError(f"the other end is gone ({exc.strerror})") from None
        data = data[written:]


def read_frame(fd: int, max_bytes: int, until: float | None = None, stop: Callable[[], bool] | None = None) -> bytearray:
    """The body of the next frame on ``fd``. Raises FrameTimeout at ``until`` (a
    ``time.monotonic()`` value) or when ``stop()`` turns true (looked at every 0.2 s), and
    FrameError on end of file or a frame over ``max_bytes`` (its body is never read)."""
    header = _read_exactly(fd, _HEADER.size, until, stop)
    (size,) = _HEADER.unpack(header)
    if size > max_bytes:
        raise FrameError(f"a frame of {size} bytes is over the limit of {max_bytes}")
    return _read_exactly(fd, size, until, stop)


def _read_exactly(fd: int, size: int, until: float | None, stop: Callable[[], bool] | None) -> bytearray:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    poller = select.poll()  # not select(): a harness may hold more than FD_SETSIZE descriptors
    poller.register(fd, select.POLLIN)
    while got < size:
        wait = 0.2 if until is None else min(0.2, until - time.monotonic())
        if wait <= 0:
            raise FrameTimeout("no reply in time")
        if not poller.poll(wait * 1000):
            if stop is not None and stop():
                raise FrameTimeout("stopped")
            continue
        chunk = os.read(fd, min(_CHUNK, size - got))
        if not chunk:
            raise FrameError("the other end closed the pipe")
        view[got:got + len(chunk)] = chunk
        got += len(chunk)
    return buffer
