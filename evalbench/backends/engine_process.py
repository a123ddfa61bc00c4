"""An in-process database engine (SQLite, DuckDB) run in a child process of its own, so that a
budget holds whatever a statement calls.

Both engines look at their interrupt only between steps: one call of an expensive built-in
function (``instr`` over 16 MiB strings, ``damerau_levenshtein``, ``repeat`` with a huge count)
runs past any timer, and DuckDB's ``memory_limit`` does not see what such a call allocates. In a
child process the engine keeps its cooperative stop (progress handler, interrupt), and the
harness kills the process at the budget and a grace (:func:`kill_after`) and starts another; an
address-space limit turns a runaway allocation into an out-of-memory error inside the child.

A child is started with ``python -I`` (no environment variables, no user site), an environment
of its own (``PATH``, a locale, ``HOME`` and ``TMPDIR`` in the sandbox's scratch folder), in a
session and process group of its own (Ctrl-C on the terminal is the harness's; a kill reaches
the whole group), from one long-lived thread (its death signal follows the thread that forked:
:mod:`evalbench.backends.engine_server` arms it). It speaks length-prefixed frames
(:mod:`evalbench.backends.frames`) on its stdin and stdout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from evalbench.backends.base import DatabaseUnavailable
from evalbench.backends.frames import FrameError, FrameTimeout, loads_reply, read_frame, write_frame
from evalbench.core import deadline

STARTUP_S = 60.0  # to start and open the database (a working copy of a large file takes a while)
HARNESS_S = 600.0  # the harness's own requests (a fingerprint, a rollback): a backstop, not a budget
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from evalbench.backends.engine_server import main; "
         "main(sys.argv[2:])")
_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds the evalbench package
_spawner = ThreadPoolExecutor(1, thread_name_prefix="evalbench-engine-spawner")  # never exits before the process

Stop = Literal["timeout", "interrupted", "died"]


class EngineStopped(Exception):
    """The child did not answer: killed at its budget (``timeout``), by ``interrupt()`` or a
    cancelled run (``interrupted``), or it ended on its own (``died``: a crash, a signal)."""

    def __init__(self, reason: Stop, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def kill_after(budget_s: float) -> float:
    """When the harness kills a child whose statement has ``budget_s``: the engine's own stop
    nearly always comes first; this is for a call that never looks at it."""
    return budget_s + max(1.0, budget_s / 4)


class EngineProcess:
    """One child running ``engine`` (``module:Class``, built from ``init``); started on first use
    and again after it was killed. One thread at a time calls it; any thread may kill it."""

    def __init__(self, engine: str, init: Mapping[str, object], *, scratch: Path, memory_bytes: int, max_reply_bytes: int) -> None:
        self.engine, self.init = engine, init
        self.scratch, self.memory_bytes, self.max_reply_bytes = scratch, memory_bytes, max_reply_bytes
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()  # between a kill (any thread) and the reaping (the caller's)
        self._killed: Stop | None = None
        self.starts = 0  # how many children were started (a replaced one counts again)

    @property
    def running(self) -> bool:
        return self._proc is not None

    def ensure(self) -> None:
        """Start the child unless it runs; DatabaseUnavailable when the engine cannot open the file."""
        if self._proc is not None:
            return
        proc = _spawner.submit(self._spawn).result()
        with self._lock:
            self._proc, self._killed = proc, None
        self.starts += 1
        try:
            self._exchange(self.init, STARTUP_S)
        except EngineStopped as exc:
            raise DatabaseUnavailable(f"the {self._name()} engine process did not start: {exc}") from None
        except DatabaseUnavailable:
            self._discard()
            raise

    def call(self, request: Mapping[str, object], budget_s: float) -> object:
        """Send ``request`` and return the engine's answer; the child is killed (and
        EngineStopped raised) when none comes within :func:`kill_after` of ``budget_s``."""
        self.ensure()
        return self._exchange(request, kill_after(budget_s))

    def _exchange(self, request: Mapping[str, object], within_s: float) -> object:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            write_frame(proc.stdin.fileno(), request)
            body = read_frame(proc.stdout.fileno(), self.max_reply_bytes, time.monotonic() + within_s,
                              deadline.cancelled)
            reply = loads_reply(body)
        except FrameTimeout:
            self.kill("interrupted" if deadline.cancelled() else "timeout")
            raise self._discard() from None
        except FrameError as exc:
            self.kill("died")
            raise self._discard(str(exc)) from None
        if isinstance(reply, dict) and "ok" in reply:
            return reply["ok"]
        if isinstance(reply, dict) and isinstance(reply.get("failed"), str):
            raise DatabaseUnavailable(reply["failed"])
        self.kill("died")
        raise self._discard("a malformed reply")

    def kill(self, reason: Stop = "interrupted") -> None:
        """Kill the child and its process group; the thread calling it sees the pipe close.
        Safe from any thread: only a signal, the caller's thread reaps."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.returncode is not None:
                return
            self._killed = self._killed or reason
            with contextlib.suppress(ProcessLookupError):  # its own group, not yet reaped: the id is still its
                os.killpg(proc.pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop an idle child (the sandbox is closing)."""
        if self._proc is not None:
            self.kill("interrupted")
            self._discard()

    def _discard(self, detail: str = "") -> EngineStopped:
        """Reap the killed child, forget it, and say why it stopped."""
        with self._lock:
            proc, self._proc = self._proc, None
            assert proc is not None
            _reap(proc)
        reason = self._killed or "died"
        if reason == "died":
            return EngineStopped("died", f"the {self._name()} engine process ended ({_status(proc.returncode)}"
                                         f"{': ' + detail if detail else ''})")
        return EngineStopped(reason, "killed at the end of its budget" if reason == "timeout" else "interrupted")

    def _name(self) -> str:
        return self.engine.split(".")[2] if self.engine.count(".") >= 2 else self.engine

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = {"PATH": os.defpath, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "HOME": str(self.scratch),
               "TMPDIR": str(self.scratch), "MALLOC_ARENA_MAX": "2"}  # few malloc arenas: less address space
        argv = [sys.executable, "-I", "-c", _BOOT, _ROOT, str(os.getpid()), self.engine, str(self.memory_bytes)]
        with open(self.scratch / "engine.log", "ab") as log:  # a crash's traceback, for whoever debugs it
            try:
                return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env,
                                        cwd=self.scratch, start_new_session=True, close_fds=True, bufsize=0)
            except OSError as exc:
                raise DatabaseUnavailable(f"cannot start an engine process: {exc}") from None


def _reap(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):  # the kernel has not let go of it yet
        proc.wait(timeout=10)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def _status(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
