"""The confined process that runs a phase's test cases: ``python -m evalbench.scoring.test_case_jail``,
started by the test-case runner, which holds the database connection and answers its requests.

It never holds a database connection nor a secret: its environment is scrubbed, and the helpers
a test case finds in its globals (``execute_queries``, ``perform_query_on_postgresql_databases``,
``ex_base``, ``conn.cursor()``, ...) send each SQL request over a pipe to the runner, which runs
it — so a ``COMMIT`` in test code changes only what the runner allows. Before any test code runs
the process confines itself (:mod:`evalbench.scoring.jail`). Verdicts go back over the same pipe
as framed messages: what test code prints goes to its stderr, which is only shown in a failure's
message, and cannot be mistaken for a verdict.

Frames: 4-byte big-endian length, then the payload — JSON from this process, pickle from the
runner (trusted: this process decodes the runner's data, never the other way round).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import signal
import struct
import sys
import traceback
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from evalbench.scoring.test_case_helpers import Description, Queries, Rows

# Modules test cases commonly use, imported before confinement (nothing else needs the disk then).
PRELOAD = ("collections", "copy", "decimal", "difflib", "fractions", "functools", "hashlib", "itertools", "math",
           "operator", "random", "re", "statistics", "string", "textwrap", "time", "typing", "uuid", "zoneinfo")


class DatabaseError(Exception):
    """What a cursor raises when the runner reports a database error."""


class CaseTimeout(BaseException):
    """A test case ran past its time (not an Exception: test code catching Exception cannot swallow it)."""


class JailSpec(TypedDict):
    """What the runner sends first: the phase's test cases and what they are given."""

    cases: list[str]
    pred_sqls: list[str]
    sol_sqls: list[str]
    db_name: str
    case_timeout_s: float
    pred_query_result: Rows | None


class CaseVerdict(TypedDict):
    """One test case's verdict (``kind``: see :class:`evalbench.scoring.test_case_runner.TestCaseVerdict`)."""

    passed: bool
    kind: str
    message: str


# --------------------------------------------------------------------------- the channel


class Channel:
    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.reader = os.fdopen(read_fd, "rb", buffering=0)
        self.writer = os.fdopen(write_fd, "wb", buffering=0)

    def send(self, message: Mapping[str, object]) -> None:
        payload = json.dumps(message, default=encode).encode("utf-8", "replace")
        self.writer.write(struct.pack(">I", len(payload)) + payload)

    def receive(self) -> Any:  # unpickled: what the runner sent for this request (its shape is the request's)
        head = _read_exactly(self.reader, 4)
        return pickle.loads(_read_exactly(self.reader, struct.unpack(">I", head)[0]))

    def call(self, message: Mapping[str, object]) -> Any:  # the runner's answer, as receive()
        self.send(message)
        answer = self.receive()
        if isinstance(answer, dict) and "error" in answer:
            raise DatabaseError(answer["error"])
        return answer


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("the runner closed the channel")
        data += chunk
    return data


def encode(value: object) -> object:
    """Query parameters as tagged JSON (the runner decodes only these tags)."""
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$interval": value.total_seconds()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


# --------------------------------------------------------------------------- what test cases see


class Cursor:
    """A DB-API-like cursor whose statements the runner executes."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.rows: Rows = []
        self.description: Description | None = None
        self.rowcount = -1

    def execute(self, query: str, params: object = None) -> None:
        answer = self.channel.call({"op": "cursor", "sql": str(query), "params": params})
        self.description, self.rows, self.rowcount = answer["description"], list(answer["rows"] or []), answer["rowcount"]

    def fetchone(self) -> tuple[object, ...] | None:
        return self.rows.pop(0) if self.rows else None

    def fetchmany(self, size: int = 1) -> Rows:
        taken, self.rows = self.rows[:size], self.rows[size:]
        return taken

    def fetchall(self) -> Rows:
        taken, self.rows = self.rows, []
        return taken

    def close(self) -> None:
        pass

    def __iter__(self) -> Iterator[tuple[object, ...]]:
        return iter(self.fetchall())

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class Connection:
    """What a test case gets as ``conn``: cursors, commit and rollback go through the runner."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def cursor(self, *args: object, **kwargs: object) -> Cursor:
        return Cursor(self.channel)

    def commit(self) -> None:
        self.channel.call({"op": "commit"})

    def rollback(self) -> None:
        self.channel.call({"op": "rollback"})

    def close(self) -> None:
        pass


def helpers(channel: Channel, pred_query_result: Rows | None) -> dict[str, object]:
    """BIRD-Interact's helpers (see :mod:`evalbench.scoring.test_case_helpers` for their rules):
    the SQL ones call the runner; the others are pure."""
    from evalbench.scoring.test_case_helpers import check_sql_function_usage, preprocess_results, remove_distinct

    def execute_queries(queries: str | Iterable[object] | None, db_name: str = "", conn: object = None,
                        logger: object = None, section_title: str = "",
                        is_solution: bool = True) -> tuple[Rows | None, bool, bool]:
        items = [queries] if isinstance(queries, str) else [str(q) for q in queries or []]
        return tuple(channel.call({"op": "execute_queries", "queries": items, "is_solution": bool(is_solution)}))

    def perform_query_on_postgresql_databases(query: str, db_name: str = "", conn: object = None) -> tuple[Rows | None, object]:
        return channel.call({"op": "perform_query", "query": str(query)}), conn

    def ex_base(pred_sqls: Queries, sol_sqls: Queries, db_name: str = "", conn: object = None) -> int:
        if not pred_sqls or not sol_sqls:
            return 0
        pred, pred_err, pred_to = execute_queries(pred_sqls, db_name, conn)
        sol, sol_err, sol_to = execute_queries(sol_sqls, db_name, conn)
        if pred_err or pred_to or sol_err or sol_to or not pred or not sol:
            return 0
        return int(set(preprocess_results(pred)) == set(preprocess_results(sol)))

    return {
        "__name__": "evalbench_test_case", "__builtins__": __builtins__,
        "execute_queries": execute_queries, "perform_query_on_postgresql_databases": perform_query_on_postgresql_databases,
        "ex_base": ex_base, "preprocess_results": preprocess_results, "remove_distinct": remove_distinct,
        "check_sql_function_usage": check_sql_function_usage, "pred_query_result": pred_query_result, "date": dt.date,
    }


# --------------------------------------------------------------------------- running them


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_case(source: str, spec: JailSpec, channel: Channel) -> CaseVerdict:
    namespace = helpers(channel, spec.get("pred_query_result"))
    try:
        with deadline(float(spec.get("case_timeout_s") or 30.0)):
            exec(compile(source, "<test_case>", "exec"), namespace)
            test_case = namespace.get("test_case")
            if not callable(test_case):
                return {"passed": False, "kind": "error", "message": "the test case defines no test_case function"}
            test_case(list(spec["pred_sqls"]), list(spec["sol_sqls"]), spec.get("db_name", ""), Connection(channel))
    except AssertionError as exc:
        return {"passed": False, "kind": "assertion", "message": f"assertion failed: {exc}" if str(exc) else "assertion failed"}
    except CaseTimeout:
        return {"passed": False, "kind": "timeout", "message": f"timeout: the test case ran longer than {spec.get('case_timeout_s')} s"}
    except (EOFError, BrokenPipeError) as exc:
        return {"passed": False, "kind": "crash", "message": f"the runner went away: {exc}"}
    except Exception as exc:  # noqa: BLE001
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        where = f" (line {last[0].lineno})" if last and last[0].filename == "<test_case>" else ""
        return {"passed": False, "kind": "error", "message": f"{type(exc).__name__}: {exc}{where}"}
    return {"passed": True, "kind": "passed", "message": ""}


def main() -> None:
    read_fd, write_fd = int(sys.argv[1]), int(sys.argv[2])
    channel = Channel(read_fd, write_fd)
    spec: JailSpec = channel.receive()
    for name in PRELOAD:
        __import__(name)
    from evalbench.scoring import jail, test_case_helpers  # noqa: F401 — loaded before the disk is closed

    applied = jail.confine(float(spec.get("case_timeout_s") or 30.0) * max(1, len(spec["cases"])) + 5)
    sys.stdout = sys.stderr  # what test code prints is not a verdict, whatever it prints
    channel.send({"op": "confined", "applied": applied})
    for index, source in enumerate(spec["cases"]):
        verdict = run_case(source, spec, channel)
        channel.send({"op": "verdict", "index": index, **verdict})
    channel.send({"op": "done"})


if __name__ == "__main__":
    main()
