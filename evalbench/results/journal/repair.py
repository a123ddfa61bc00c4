"""Repairing a run's journal before a resume (``evalbench run --resume``).

A line cut short by a crash (SIGKILL, power loss) and the conversations recorded as ``cancelled``
or ``db_error`` (the run was interrupted, or its database was unreachable: nothing was learnt
about the agent) are dropped, so they run again; every other conversation — keyed by (dialect,
item id), as :func:`evalbench.results.read_journal` keys it — is kept exactly once, by its last
record. Whether a config may continue a run is the run's policy: :mod:`evalbench.run.resume`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from evalbench.results.journal.files import JOURNAL, OutputError, create_new
from evalbench.results.journal.lines import conversation_key, decode_record
from evalbench.results.journal.safe_read import journal_lines, open_run_file

# Outcomes that say nothing about the agent: their conversations run again on resume.
RUN_AGAIN = frozenset({"cancelled", "db_error"})


@dataclass
class JournalState:
    # (dialect, item id) of every conversation whose record is kept: the key of
    # :func:`evalbench.results.read_journal` (an item id may recur in another dialect)
    done: set[tuple[Any, str, int]] = field(default_factory=set)
    kept: int = 0
    dropped_cancelled: int = 0
    dropped_partial: int = 0  # lines cut short by a crash, or not a conversation record
    dropped_duplicates: int = 0  # records superseded by a later record of the same conversation


def _decode(raw: bytes | None) -> dict[str, Any] | None:
    """The conversation record of a complete journal line, or None (too long, cut short, not JSON, not a record)."""
    if raw is None or not raw.endswith(b"\n"):
        return None  # the last line, cut short by a crash
    return decode_record(raw)

def repair_journal(run_dir: Path, on_record: Callable[[dict[str, Any]], None],
                   run_again: frozenset[str] = RUN_AGAIN) -> JournalState:
    """Rewrite the journal without partial lines, cancelled conversations and duplicates, calling
    ``on_record`` for each record kept (streaming: the records are not held in memory).

    A conversation is keyed as :func:`evalbench.results.read_journal` keys it — (dialect, item
    id) — and, recorded more than once, is its **last** record, as read_journal counts it; when that
    last record is ``cancelled`` or ``db_error`` the conversation runs again. The journal is written
    to a temporary file renamed into place: an OS error (a full disk) raises
    :class:`~evalbench.results.journal.files.OutputError`, removes the temporary file and leaves the
    journal as it was."""
    path = run_dir / JOURNAL
    state = JournalState()
    tmp = path.with_name(f".{JOURNAL}.resume")
    try:
        with open_run_file(run_dir, JOURNAL, missing_ok=True) as source:
            if source is None:
                return state
            kept_offsets = _last_records(source, state)
            # Second pass: copy the kept records, in journal order.
            with os.fdopen(create_new(tmp), "wb") as target:
                for here, raw in journal_lines(source):
                    if here not in kept_offsets:
                        continue
                    record = _decode(raw)
                    if record is None:  # the journal changed under us: treat as cut short
                        state.dropped_partial += 1
                        continue
                    if record.get("outcome") in run_again:
                        state.dropped_cancelled += 1
                        continue
                    state.done.add(conversation_key(record))
                    state.kept += 1
                    assert raw is not None  # it decoded
                    target.write(raw)
                    try:
                        on_record(record)
                    except OSError as exc:  # not the journal's: passed on as it is, below
                        raise _CallbackError(exc) from exc
                target.flush()
                os.fsync(target.fileno())
        os.replace(tmp, path)
    except _CallbackError as wrapped:
        _remove(tmp)
        raise wrapped.error from None
    except OSError as exc:
        _remove(tmp)
        raise OutputError(path, exc, temporary=tmp) from None
    except BaseException:
        _remove(tmp)
        raise
    return state


def _last_records(source: BinaryIO, state: JournalState) -> set[int]:
    """First pass: the offset of each conversation's last record (the others are counted as dropped)."""
    last: dict[tuple[object, str, int], int] = {}
    records = 0
    for here, raw in journal_lines(source):
        if raw is not None and not raw.strip():
            continue
        record = _decode(raw)
        if record is None:
            state.dropped_partial += 1
            continue
        records += 1
        last[conversation_key(record)] = here
    state.dropped_duplicates = records - len(last)
    return set(last.values())


class _CallbackError(Exception):
    """An OS error raised by ``on_record`` (a report's file), not by the journal's repair."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _remove(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)
