"""The inside of an engine process (see :mod:`evalbench.backends.engine_process`): it hardens
itself, builds the engine object named on its command line from the first frame it reads, then
answers one request at a time until its pipe closes.

A request is ``{"op": name, **arguments}``; the engine's method ``op_<name>(**arguments)``
answers it. The reply is ``{"ok": value}``, or ``{"failed": message}`` when the engine raised
:class:`EngineFailure` (the database failed, not the SQL: the harness raises DatabaseUnavailable).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import resource
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from evalbench.backends.frames import FrameError, read_frame, write_frame
from evalbench.backends.result_cap import MAX_ERROR_CHARS, ResultCap, RowSource
from evalbench.core.execution_result import ExecutionResult

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_MAX_REQUEST = 1 << 30  # the harness's own requests (SQL texts): far under this


class EngineFailure(Exception):
    """The database failed (not the SQL): cannot open, cannot roll back, ..."""


class Cursor(RowSource, Protocol):
    """A DB-API cursor of an engine (sqlite3, DuckDB) after a statement ran."""

    @property
    def description(self) -> Sequence[tuple[str, object, object, object, object, object, object]] | None: ...


def main(argv: list[str]) -> None:
    """``argv``: the harness's pid, ``module:Class`` of the engine, the address space limit (bytes)."""
    parent, target, limit = int(argv[0]), argv[1], int(argv[2])
    requests, replies = _own_pipes()
    _harden(parent, limit)
    module, _, name = target.partition(":")
    engine_class = getattr(importlib.import_module(module), name)
    try:
        engine = engine_class(**pickle.loads(read_frame(requests, _MAX_REQUEST)))
    except EngineFailure as exc:
        write_frame(replies, {"failed": str(exc)})
        return
    write_frame(replies, {"ok": "ready"})
    _serve(engine, requests, replies)


def _serve(engine: object, requests: int, replies: int) -> None:
    while True:
        try:
            request = pickle.loads(read_frame(requests, _MAX_REQUEST))
        except FrameError:
            return  # the harness closed the pipe: done
        op = request.pop("op")
        try:
            reply = {"ok": getattr(engine, f"op_{op}")(**request)}
        except EngineFailure as exc:
            reply = {"failed": str(exc)}
        write_frame(replies, reply)


def collect(cursor: Cursor, result: ExecutionResult, max_rows: int, max_bytes: int) -> None:
    """The rows of the statement ``cursor`` ran, within the caps, onto ``result``."""
    if cursor.description is None:
        result.columns, result.rows = [], []
        return
    cap = ResultCap(max_rows, max_bytes)
    cap.read(cursor)
    cap.fill(result)
    result.columns = [c[0] for c in cursor.description]


def reply_of(result: ExecutionResult) -> dict[str, object]:
    """What crosses the pipe of an execution (the harness measures the time)."""
    error = None if result.error is None else result.error[:MAX_ERROR_CHARS]
    return {"columns": result.columns, "rows": result.rows, "truncated": result.truncated,
            "truncated_at_bytes": result.truncated_at_bytes, "error": error, "error_kind": result.error_kind}


def _own_pipes() -> tuple[int, int]:
    """The request and reply pipes on descriptors of their own; stdin and stdout become /dev/null
    so that nothing the engine prints can corrupt a frame."""
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return requests, replies


def _harden(parent: int, limit: int) -> None:
    """Die with the harness, never gain privileges, dump no core, and allocate at most ``limit``
    bytes of address space (what bounds memory a function call takes, which the engine's own
    limit does not see). Ctrl-C on the terminal is the harness's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    else:
        threading.Thread(target=_orphan_watch, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the harness died before the death signal was armed
        os._exit(1)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _orphan_watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


if __name__ == "__main__":  # pragma: no cover  (started by the bootstrap of engine_process)
    main(sys.argv[1:])
