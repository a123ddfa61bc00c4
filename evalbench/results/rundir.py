"""The run directory: manifest, append-only journal and scores_native.csv, written as the run goes
(the other reports are derived from them: :mod:`evalbench.results.reports`).

The journal is appended and flushed as each conversation completes, so a crash loses nothing
that finished. Whole-file outputs are written to a temporary file and renamed into place.
"""

from __future__ import annotations

import csv
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, TextIO

from evalbench.conversation import Conversation
from evalbench.results.record import conversation_record
from evalbench.results.summary import SummaryBuilder

JOURNAL = "conversations.jsonl"
SCORES_NATIVE = "scores_native.csv"  # ours, streamed; scores.csv is EvalBench's (evalbench_csv.py)
SCORES_COLUMNS = ["run_id", "item_id", "dialect", "database", "phase", "scorer", "value", "passed", "applicable", "detail", "flags"]


def write_score_rows(writer: Any, record: dict[str, Any], run_id: str) -> None:
    """The scores_native.csv rows of one record: one per (phase, scorer)."""
    for phase in record["phases"]:
        for name, score in phase["scores"].items():
            writer.writerow([run_id, record["item_id"], record["dialect"], record["database"], phase["phase"], name,
                             score["value"], score["passed"], score["applicable"], score["detail"], ";".join(score["flags"])])


def write_atomic_with(path: Path, write: Callable[[TextIO], None]) -> Path:
    """Stream a file through ``write`` into a temporary file renamed into place; its path."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="") as out:
            write(out)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _json_default(value: Any) -> Any:
    return str(value)


class RunWriter:
    def __init__(self, run_dir: Path, run_id: str, *, preview_rows: int, metric_scorers: set[str],
                 simulator: dict[str, Any] | None = None, resume: bool = False,
                 on_record: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.run_dir = run_dir
        self.run_id = run_id
        self.preview_rows = preview_rows
        # Who played the user (kind, model, prompt hashes): on every record, so conversations
        # from different simulators are never compared unknowingly.
        self.simulator = simulator or {}
        run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.summary = SummaryBuilder(metric_scorers)
        self.on_record = on_record  # the reports built as records arrive (called under the lock)
        self._scores_file = (run_dir / SCORES_NATIVE).open("w", encoding="utf-8", newline="")
        self._scores = csv.writer(self._scores_file)
        self._scores.writerow(SCORES_COLUMNS)
        self.resumed = None
        if resume:  # the finished conversations count as if this process had run them
            from evalbench.resume import repair_journal

            self.resumed = repair_journal(run_dir, self._replay)
        self._journal = (run_dir / JOURNAL).open("a", encoding="utf-8")

    def _replay(self, record: dict[str, Any]) -> None:
        self._write_scores(record)
        self.summary.add(record)
        if self.on_record is not None:
            self.on_record(record)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_atomic(self.run_dir / "manifest.json", json.dumps(manifest, indent=2, default=_json_default) + "\n")

    def record(self, conv: Conversation) -> dict[str, Any]:
        """Journal one completed conversation (thread-safe)."""
        record = conversation_record(conv, self.run_id, self.preview_rows)
        record["simulator"] = self.simulator
        line = json.dumps(record, default=_json_default, ensure_ascii=False)
        with self._lock:
            self._journal.write(line + "\n")
            self._journal.flush()
            self._write_scores(record)
            self._scores_file.flush()
            self.summary.add(record)
            if self.on_record is not None:
                self.on_record(record)
        return record

    def _write_scores(self, record: dict[str, Any]) -> None:
        write_score_rows(self._scores, record, self.run_id)

    def finish(self, **extra: Any) -> dict[str, Any]:
        """The run's summary (the reports are written from it by :mod:`evalbench.results.reports`)."""
        with self._lock:
            return self.summary.result(run_id=self.run_id, **extra)

    def close(self) -> None:
        self._journal.close()
        self._scores_file.close()
