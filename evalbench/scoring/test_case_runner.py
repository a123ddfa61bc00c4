"""Running a phase's BIRD-Interact test cases, harness side: one child process per phase
(``python -m evalbench.scoring.test_case_server``), which holds the database connection and
starts the confined process that runs the test code (:mod:`evalbench.scoring.test_case_jail`).

The child gets a scrubbed environment (no secrets: the connection string travels on its stdin),
its own session and process group (Ctrl-C and SIGTERM reach only the harness, which then kills
the children of the conversations it cancels: :func:`cancel_all`), and a backstop timeout. Its
stdout carries one verdict line per test case; nothing the test code prints can reach it.

Two ways of running them, both leaving nothing behind (see test_case_server):

- **on a copy** (``clone``, see :mod:`evalbench.backends.postgres.clones`) — as BIRD-Interact's harness does:
  every statement committed on its own, a failing one rolled back alone;
- **in one transaction** (no copy could be made): always rolled back, sequences restored, every
  statement under a savepoint, transaction control refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from evalbench.core import deadline

if TYPE_CHECKING:
    from typing_extensions import Unpack

VERDICT_PREFIX = "evalbench-test-case-verdict "  # what the child writes, one line per test case
OUTPUT_KEPT = 4_000  # characters of the child's stderr kept for a crash message
BACKSTOP_S = 20.0  # start-up and confinement, on top of the cases' own time


@dataclass(frozen=True)
class TestCaseVerdict:
    passed: bool
    kind: str  # "passed", "assertion", "error", "timeout", "preprocess", "execution" (the agent's SQL failed), "connection", "crash"
    message: str = ""


class TestCaseOptions(TypedDict, total=False):
    """The keyword options of :func:`run_test_cases` (but ``clone``)."""

    db_name: str
    preprocess_sql: Sequence[str]
    clean_up_sqls: Sequence[str]
    timeout_s: float
    statement_timeout_s: float
    run_pred_first: bool
    preprocess_errors: str


# ----------------------------------------------------------------------------- parent side


def run_test_cases(
    conninfo: str,
    cases: Sequence[str],
    pred_sqls: Sequence[str],
    sol_sqls: Sequence[str],
    *,
    db_name: str = "",
    preprocess_sql: Sequence[str] = (),
    clean_up_sqls: Sequence[str] = (),
    timeout_s: float = 30.0,
    statement_timeout_s: float = 10.0,
    run_pred_first: bool = True,
    clone: str | None = None,
    preprocess_errors: str = "fail",
) -> list[TestCaseVerdict]:
    """Run a phase's test cases in one child process: one verdict per case; never raises.
    ``clone``: the conninfo of a throwaway copy to run them on, each statement committed."""
    if not cases:
        return []
    total = timeout_s * len(cases) + BACKSTOP_S  # each case is timed in the child; this is the backstop
    left = deadline.remaining()
    if left is not None:  # the conversation's deadline bounds its scoring too
        if left <= 0:
            return [TestCaseVerdict(False, "timeout", "timeout: the conversation deadline had passed")] * len(cases)
        timeout_s, statement_timeout_s, total = min(timeout_s, left), min(statement_timeout_s, left), min(total, left)
    spec = {
        "conninfo": clone or conninfo,
        "commit_each": clone is not None,
        "test_cases": list(cases),
        "pred_sqls": list(pred_sqls),
        "sol_sqls": list(sol_sqls),
        "db_name": db_name,
        "preprocess_sql": list(preprocess_sql),
        "clean_up_sqls": list(clean_up_sqls),
        "statement_timeout_ms": max(1, int(statement_timeout_s * 1000)),
        "case_timeout_s": timeout_s,
        "run_pred_first": run_pred_first,
        "preprocess_errors": preprocess_errors,
    }
    out, err, code = _spawn(json.dumps(spec), total)
    verdicts = _read_verdicts(out)
    if len(verdicts) < len(cases):
        tail = " | ".join((err or "").strip().splitlines()[-3:])
        if deadline.cancelled():
            why = TestCaseVerdict(False, "cancelled", "the run was cancelled")
        elif code is None:
            why = TestCaseVerdict(False, "timeout", f"timeout: the test cases ran longer than {total:.3g} s")
        else:
            why = TestCaseVerdict(False, "crash", f"test case runner exited with {code}: {tail}")
        verdicts += [why] * (len(cases) - len(verdicts))
    return verdicts


_live: set[subprocess.Popen[str]] = set()
_live_lock = threading.Lock()


def cancel_all() -> None:
    """Kill every running test-case process group; none starts after :func:`evalbench.core.deadline.cancel`."""
    with _live_lock:
        for proc in list(_live):
            _kill(proc)


def _spawn(spec: str, timeout_s: float) -> tuple[str, str, int | None]:
    """Run the child with ``spec`` on stdin: (stdout, stderr, exit code or None on timeout)."""
    if deadline.cancelled():
        return "", "cancelled", None
    proc = subprocess.Popen([sys.executable, "-m", "evalbench.scoring.test_case_server"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                            errors="replace", start_new_session=True, env=scrubbed_environment(), close_fds=True)
    with _live_lock:
        _live.add(proc)
    if deadline.cancelled():  # cancelled while it was starting: cancel_all may have missed it
        _kill(proc)
    try:
        out, err = proc.communicate(spec, timeout=timeout_s)
        return out, err[-OUTPUT_KEPT:], proc.returncode
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, err = proc.communicate()
        return out, err[-OUTPUT_KEPT:], None
    finally:
        with _live_lock:
            _live.discard(proc)


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the runner and the confined process with it


def scrubbed_environment() -> dict[str, str]:
    """What the child inherits: enough to start Python and import evalbench, no secret."""
    package_root = Path(__file__).resolve().parents[2]  # evalbench/scoring/this file -> the dir holding evalbench
    return {"PATH": os.defpath, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1", "PYTHONPATH": str(package_root)}


def run_test_case(conninfo: str, test_case: str, pred_sqls: Sequence[str], sol_sqls: Sequence[str],
                  **options: Unpack[TestCaseOptions]) -> TestCaseVerdict:
    """One test case (see :func:`run_test_cases`)."""
    return run_test_cases(conninfo, [test_case], pred_sqls, sol_sqls, **options)[0]


def _read_verdicts(out: str) -> list[TestCaseVerdict]:
    verdicts = []
    for line in out.splitlines():
        if not line.startswith(VERDICT_PREFIX):
            continue
        try:
            data = json.loads(line[len(VERDICT_PREFIX):])
            verdicts.append(TestCaseVerdict(bool(data["passed"]), str(data["kind"]), str(data.get("message", ""))))
        except (ValueError, KeyError, TypeError):
            continue
    return verdicts


