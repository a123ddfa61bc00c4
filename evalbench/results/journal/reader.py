"""Reading a run's journal back: :func:`read_journal` and what it found (:class:`JournalStats`).

:func:`read_journal` reads a journal as it may be left by a crash: a last line cut short
(killed mid-write) is ignored with a warning, a line that is not a conversation record is
skipped with a warning naming its line, and a conversation recorded twice counts once — its
last complete record — with a warning. It does not rewrite the journal (``evalbench run
--resume`` repairs it: :func:`evalbench.results.journal.repair.repair_journal`).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from evalbench.results.journal.files import JOURNAL
from evalbench.results.journal.lines import conversation_key, decode_record
from evalbench.results.journal.safe_read import MAX_LINE_BYTES, journal_lines, open_run_file

log = logging.getLogger(__name__)

MAX_LISTED = 5  # line numbers and item ids named in a warning


@dataclass
class JournalStats:
    """What reading a journal found besides the records it yields."""

    conversations: int = 0  # distinct conversations (records yielded)
    truncated: int = 0  # a last line cut short (a crash while writing it)
    unreadable: list[int] = field(default_factory=list)  # line numbers that are not a conversation record
    duplicates: int = 0  # records superseded by a later record of the same conversation
    duplicated_items: list[str] = field(default_factory=list)  # some of their item ids

    def as_dict(self) -> dict[str, int]:
        return {"truncated_lines": self.truncated, "unreadable_lines": len(self.unreadable),
                "duplicate_records": self.duplicates}

    def warnings(self, path: Path) -> list[str]:
        out = []
        if self.truncated:
            out.append(f"{path}: the last line is cut short (the run was killed while writing it?); it is ignored "
                       "(`evalbench run --resume` runs that conversation again)")
        if self.unreadable:
            lines = ", ".join(map(str, self.unreadable[:MAX_LISTED])) + (", ..." if len(self.unreadable) > MAX_LISTED else "")
            out.append(f"{path}: {len(self.unreadable)} line(s) are not a conversation record and are ignored "
                       f"(line {lines})")
        if self.duplicates:
            items = ", ".join(self.duplicated_items[:MAX_LISTED]) + (", ..." if len(self.duplicated_items) > MAX_LISTED else "")
            out.append(f"{path}: {self.duplicates} conversation record(s) are repeated later in the journal and "
                       f"counted once, by their last record (item {items})")
        return out


@dataclass
class _Index:
    size: int  # bytes of the journal the index covers
    kept: set[int] | None  # offsets of the lines to yield; None: every non-blank line
    stats: JournalStats


_CACHE: dict[str, tuple[tuple[int, ...], _Index]] = {}  # path -> (its stat when indexed, the index)
_CACHE_LOCK = threading.Lock()


def _build_index(handle: BinaryIO) -> _Index:
    stats = JournalStats()
    last: dict[tuple[object, str, int], int] = {}  # conversation -> offset of its last record
    duplicated: set[tuple[object, str, int]] = set()
    end = 0
    bad = False
    for number, (here, raw) in enumerate(journal_lines(handle), start=1):
        end = handle.tell()
        if raw is not None and not raw.strip():
            continue
        record = decode_record(raw)
        if record is None:
            bad = True
            if raw is not None and not raw.endswith(b"\n"):
                stats.truncated += 1  # the last line, cut short by a crash
            else:
                stats.unreadable.append(number)
            continue
        key = conversation_key(record)
        if key in last:
            stats.duplicates += 1
            if key not in duplicated and len(stats.duplicated_items) < MAX_LISTED + 1:
                stats.duplicated_items.append(key[1])
            duplicated.add(key)
        last[key] = here
    stats.conversations = len(last)
    kept = set(last.values()) if bad or stats.duplicates else None
    return _Index(end, kept, stats)


def _index(run_dir: Path, handle: BinaryIO) -> _Index:
    """The journal's index, built once per state of the file (a report reads it several times);
    its warnings are logged when it is built."""
    path = run_dir / JOURNAL
    st = os.fstat(handle.fileno())
    signature = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    name = str(path.resolve())
    with _CACHE_LOCK:
        cached = _CACHE.get(name)
        if cached is not None and cached[0] == signature:
            return cached[1]
    index = _build_index(handle)
    for message in index.stats.warnings(path):
        log.warning("%s", message)
    with _CACHE_LOCK:
        if len(_CACHE) >= 8:
            _CACHE.clear()
        _CACHE[name] = (signature, index)
    return index


def journal_stats(run_dir: Path | str) -> JournalStats:
    """What :func:`read_journal` finds in ``run_dir``'s journal: conversations, cut-short,
    unreadable and duplicate lines. A journal that cannot be read (missing, not a regular file
    inside the run directory) is a :class:`~evalbench.core.errors.RunDirError`."""
    with open_run_file(Path(run_dir), JOURNAL) as handle:
        assert handle is not None
        return _index(Path(run_dir), handle).stats


def read_journal(run_dir: Path | str) -> Generator[dict[str, Any], None, None]:
    """The conversation records of a run, in completion order, each conversation once (its last
    complete record); lines cut short or unreadable are skipped with a warning. A journal that
    cannot be read (missing, not a regular file inside the run directory) is a
    :class:`~evalbench.core.errors.RunDirError`, raised on the first ``next()``."""
    run_dir = Path(run_dir)
    with open_run_file(run_dir, JOURNAL) as handle:
        assert handle is not None
        index = _index(run_dir, handle)
        if index.kept is None:  # every line is a record: read them in order
            indexed = itertools.takewhile(lambda line: line[0] < index.size, journal_lines(handle))  # not what came after
            lines: Iterator[bytes | None] = (raw for _, raw in indexed)
        else:  # only the kept lines, each read where it starts (what is skipped may be huge)
            lines = (_line_at(handle, offset) for offset in sorted(index.kept))
        for raw in lines:
            if raw is None or not raw.strip():
                continue
            record = decode_record(raw)  # checked again: the file may have changed under us
            if record is not None:
                yield record


def _line_at(handle: BinaryIO, offset: int) -> bytes | None:
    handle.seek(offset)
    raw = handle.readline(MAX_LINE_BYTES + 1)
    return raw if len(raw) <= MAX_LINE_BYTES else None
