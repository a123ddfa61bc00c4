"""The run directory: manifest, append-only journal and scores_native.csv, written as the run goes
(the other reports are derived from them: :mod:`evalbench.results.render.reports`).

The journal is appended and flushed as each conversation completes, so a crash loses nothing
that finished. Whole-file outputs are written to a temporary file and renamed into place.

Records are cleaned and bounded where they are built (:mod:`evalbench.results.journal.record`), so the
journal is always valid UTF-8 JSON. A file that cannot be written (disk full, permissions, a
read-only file system) raises :class:`OutputError`, which names it and stops the run (exit 3);
a journal line that could not be written whole is cut off again, so the journal ends with its
last complete line (a half line that could not be cut off is dropped by ``--resume``).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from evalbench.config.prices import PriceTable, RunPricing
from evalbench.core.conversation import Conversation
from evalbench.results.journal.csvsafe import safe_row
from evalbench.results.journal.files import JOURNAL, OutputError, create_new, open_append, write_atomic
from evalbench.results.journal.record import CAPS, Caps, bounded_record, clean_text, clean_value
from evalbench.results.journal.usage import usage_fields
from evalbench.results.schema import JournalRecord, Manifest, RecordRefused, check_written
from evalbench.results.summary.aggregate import SummaryBuilder
from evalbench.results.summary.taxonomy import record_diagnosis

if TYPE_CHECKING:
    from evalbench.results.journal.repair import JournalState

_T = TypeVar("_T")
log = logging.getLogger(__name__)

SCORES_NATIVE = "scores_native.csv"  # ours, streamed; scores.csv is EvalBench's (render/evalbench_csv.py)
SCORES_COLUMNS = ["run_id", "item_id", "dialect", "database", "phase", "scorer", "value", "passed", "applicable", "detail", "flags",
                  "diagnosis"]


class RowWriter(Protocol):
    """What :func:`write_score_rows` writes to (a ``csv.writer``)."""

    def writerow(self, row: Iterable[object], /) -> object: ...


def write_score_rows(writer: RowWriter, record: dict[str, Any], run_id: str) -> None:
    """The scores_native.csv rows of one record: one per (phase, scorer); text cells that a
    spreadsheet would run as a formula are neutralised (:func:`~evalbench.results.render.evalbench_csv.safe_cell`).
    ``diagnosis``: the failure kind of the conversation, on the rows of the phase it is about."""
    found = record_diagnosis(record) or {}
    for phase in record["phases"]:
        kind = found.get("kind") if found.get("phase", "main") == phase["phase"] else None
        for name, score in phase["scores"].items():
            writer.writerow(safe_row([run_id, record["item_id"], record["dialect"], record["database"], phase["phase"], name,
                                      score["value"], score["passed"], score["applicable"], score["detail"],
                                      ";".join(score["flags"]), kind]))


def _json_default(value: object) -> str:
    return clean_text(str(value))


class RunWriter:
    def __init__(self, run_dir: Path, run_id: str, *, preview_rows: int, metric_scorers: set[str],
                 simulator: dict[str, object] | None = None, resume: bool = False, run_again: frozenset[str] | None = None,
                 trials: int = 1, pricing: RunPricing | None = None,
                 on_record: Callable[[dict[str, object]], None] | None = None, caps: Caps = CAPS) -> None:
        self.run_dir = run_dir
        self.run_id = run_id
        self.preview_rows = preview_rows
        self.caps = caps
        # Who played the user (kind, model, prompt hashes): on every record, so conversations
        # from different simulators are never compared unknowingly.
        self.simulator = simulator or {}
        self.pricing = pricing or RunPricing(PriceTable())  # each record's usage per role, priced
        self._lock = threading.Lock()
        self.summary = SummaryBuilder(metric_scorers, trials)
        self.on_record = on_record  # the reports built as records arrive (called under the lock)
        self.failure: OutputError | None = None  # the first write that failed: nothing is written after it
        self._journal_path = run_dir / JOURNAL
        self._scores_path = run_dir / SCORES_NATIVE
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(run_dir, exc) from None
        self._scores_file = self._open(self._scores_path, lambda: os.fdopen(create_new(self._scores_path), "w", encoding="utf-8",
                                                                      newline=""))
        self._scores = csv.writer(self._scores_file)
        self._scores_write(lambda: self._scores.writerow(SCORES_COLUMNS))
        self.resumed = None
        try:
            if resume:
                self.resumed = self._repair(run_again)
            # unbuffered: each record is written by os.write as one whole line (or cut off again, see _append)
            self._journal_fd: int | None = self._open(self._journal_path, lambda: open_append(self._journal_path))
        except BaseException:  # a journal that cannot be read or written (RunDirError, OutputError): nothing left open
            self._scores_file.close()
            raise
        self._journal_size = os.fstat(self._journal_fd).st_size

    def _repair(self, run_again: frozenset[str] | None) -> JournalState:
        """Resume: the journal repaired; its finished conversations count as if this process had run them."""
        from evalbench.results.journal.repair import RUN_AGAIN, repair_journal

        try:
            return repair_journal(self.run_dir, self._replay, run_again or RUN_AGAIN)
        except OSError as exc:
            raise OutputError(self._journal_path, exc) from None

    @staticmethod
    def _open(path: Path, opener: Callable[[], _T]) -> _T:
        try:
            return opener()
        except OSError as exc:
            raise OutputError(path, exc) from None

    def _replay(self, record: dict[str, Any]) -> None:
        self._write_scores(record)
        self.summary.add(record)
        if self.on_record is not None:
            self.on_record(record)

    def write_manifest(self, manifest: Mapping[str, object]) -> None:
        text = json.dumps(clean_value(manifest), indent=2, default=_json_default) + "\n"
        check_written(Manifest, json.loads(text), str(self.run_dir / "manifest.json"))
        write_atomic(self.run_dir / "manifest.json", text)

    def record(self, conv: Conversation) -> dict[str, object]:
        """Journal one completed conversation (thread-safe). Raises :class:`OutputError` when the
        journal or a report cannot be written; after that, nothing more is written."""
        extra = {"simulator": self.simulator} | usage_fields(conv, self.pricing)
        record, line = bounded_record(conv, self.run_id, self.preview_rows, extra=extra, caps=self.caps)
        try:
            check_written(JournalRecord, record, str(self._journal_path))
        except RecordRefused as exc:  # a bug; stopping would stop every resume at this conversation too
            log.error("%s (item %s: journaled as it is; readers will skip it and call the run incomplete)", exc,
                      record.get("item_id"))
        data = (line + "\n").encode("utf-8")
        with self._lock:
            if self.failure is not None:
                return record  # the run is stopping: this conversation runs again on --resume
            self._append(data)
            try:
                self._write_scores(record)
                self._scores_write(self._scores_file.flush)
                self.summary.add(record)
                if self.on_record is not None:
                    self.on_record(record)
            except OutputError as exc:
                self.failure = exc
                raise
            except OSError as exc:  # a report's spooled temporary file
                self.failure = OutputError(exc.filename or f"a temporary file in {tempfile.gettempdir()}", exc)
                raise self.failure from None
        return record

    def _append(self, data: bytes) -> None:
        """Append one whole line to the journal; on an OS error, cut off what was written of it."""
        fd = self._journal_fd
        assert fd is not None, "the run writer is closed"
        start = self._journal_size
        view = memoryview(data)
        try:
            while view:
                written = os.write(fd, view)
                if not written:
                    raise OSError(errno.EIO, "nothing written")
                view = view[written:]
        except OSError as exc:
            with contextlib.suppress(OSError):  # the half line has no newline: --resume drops it
                os.ftruncate(fd, start)
            self.failure = OutputError(self._journal_path, exc)
            raise self.failure from None
        self._journal_size = start + len(data)

    def _write_scores(self, record: dict[str, Any]) -> None:
        self._scores_write(lambda: write_score_rows(self._scores, record, self.run_id))

    def _scores_write(self, write: Callable[[], object]) -> None:
        try:
            write()
        except OSError as exc:
            raise OutputError(self._scores_path, exc) from None

    def finish(self, **extra: object) -> dict[str, Any]:
        """The run's summary (the reports are written from it by :mod:`evalbench.results.render.reports`)."""
        with self._lock:
            summary: dict[str, Any] = clean_value(self.summary.result(run_id=self.run_id, **extra))
            return summary

    def close(self) -> None:
        """Close the files; an error flushing scores_native.csv raises :class:`OutputError` (unless
        the run is already stopping on one)."""
        if self._journal_fd is not None:
            fd, self._journal_fd = self._journal_fd, None
            with contextlib.suppress(OSError):  # unbuffered: every line was written (or cut off) by _append
                os.close(fd)
        try:
            self._scores_file.close()
        except OSError as exc:
            if self.failure is None:
                raise OutputError(self._scores_path, exc) from None
