"""The run directory: manifest, append-only journal, scores.csv, summary.json and summary.csv.

The journal is appended and flushed as each conversation completes, so a crash loses nothing
that finished. Whole-file outputs are written to a temporary file and renamed into place.
"""

from __future__ import annotations

import csv
import io
import json
import os
import threading
from pathlib import Path
from typing import Any

from evalbench.conversation import Conversation
from evalbench.results.record import conversation_record
from evalbench.results.summary import SummaryBuilder

JOURNAL = "conversations.jsonl"
SCORES_COLUMNS = ["run_id", "item_id", "dialect", "database", "phase", "scorer", "value", "passed", "applicable", "detail", "flags"]


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _json_default(value: Any) -> Any:
    return str(value)


class RunWriter:
    def __init__(self, run_dir: Path, run_id: str, *, preview_rows: int, metric_scorers: set[str],
                 simulator: dict[str, Any] | None = None) -> None:
        self.run_dir = run_dir
        self.run_id = run_id
        self.preview_rows = preview_rows
        # Who played the user (kind, model, prompt hashes): on every record, so conversations
        # from different simulators are never compared unknowingly.
        self.simulator = simulator or {}
        run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._journal = (run_dir / JOURNAL).open("a", encoding="utf-8")
        self._scores_file = (run_dir / "scores.csv").open("w", encoding="utf-8", newline="")
        self._scores = csv.writer(self._scores_file)
        self._scores.writerow(SCORES_COLUMNS)
        self.summary = SummaryBuilder(metric_scorers)

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
            for phase in record["phases"]:
                for name, score in phase["scores"].items():
                    self._scores.writerow(
                        [self.run_id, record["item_id"], record["dialect"], record["database"], phase["phase"], name,
                         score["value"], score["passed"], score["applicable"], score["detail"], ";".join(score["flags"])]
                    )
            self._scores_file.flush()
            self.summary.add(record)
        return record

    def finish(self, **extra: Any) -> dict[str, Any]:
        with self._lock:
            summary = self.summary.result(run_id=self.run_id, **extra)
        write_atomic(self.run_dir / "summary.json", json.dumps(summary, indent=2, default=_json_default) + "\n")
        write_atomic(self.run_dir / "summary.csv", summary_csv(summary))
        return summary

    def close(self) -> None:
        self._journal.close()
        self._scores_file.close()


def summary_csv(summary: dict[str, Any]) -> str:
    """EvalBench-like summary rows: one per (scorer, phase)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["run_id", "metric_name", "phase", "metric_score", "correct_results_count",
                     "total_results_count", "not_applicable_count"])
    for name, phases in summary["scorers"].items():
        for phase, tally in phases.items():
            if "rate" in tally:
                score = None if tally["rate"] is None else round(100 * tally["rate"], 2)
                writer.writerow([summary["run_id"], name, phase, score, tally["passed"], tally["applicable"], tally["not_applicable"]])
            else:
                writer.writerow([summary["run_id"], name, phase, tally["mean"], "", tally["applicable"], tally["not_applicable"]])
    for outcome, count in summary["outcomes"].items():
        writer.writerow([summary["run_id"], f"outcome:{outcome}", "", count, "", summary["total_items"], ""])
    return out.getvalue()
