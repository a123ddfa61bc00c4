"""Every report derived from a run directory's journal and manifest, written at the end of a run
and again, from the journal alone, by ``evalbench report``.

summary.json, summary.csv (ours, with scores_native.csv), summary.md, junit.xml, report.html,
and EvalBench's evals.csv, scores.csv, summary.csv and configs.csv.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TextIO

from evalbench.core.json_types import number, obj, obj_items, seq
from evalbench.results.gates import GateResult
from evalbench.results.journal.csvsafe import safe_row
from evalbench.results.journal.files import write_atomic, write_atomic_with
from evalbench.results.journal.reader import JournalStats, read_journal
from evalbench.results.journal.record import clean_text, clean_value
from evalbench.results.journal.rundir import SCORES_COLUMNS, SCORES_NATIVE, write_score_rows
from evalbench.results.journal.shapes import read_manifest
from evalbench.results.render.summary_md import render_summary_markdown
from evalbench.results.schema import Summary, check_written
from evalbench.results.summary.rebuild import completeness, rebuild_summary


def _json_default(value: object) -> str:
    return clean_text(str(value))


class ReportSet:
    """The derived reports, built as records arrive (during the run, so that little is left to do
    at its end) and committed once with the summary. Not thread-safe: the run writer calls
    :meth:`add` under its lock."""

    def __init__(self, run_dir: Path, manifest: dict[str, object], *, html: bool = True) -> None:
        from evalbench.results.render.evalbench_csv import EvalbenchCsvWriter
        from evalbench.results.render.html_report import ReportBuilder
        from evalbench.results.render.junit import JunitBuilder

        self.run_dir, self.manifest = run_dir, manifest
        metrics = {str(name) for name in seq(manifest["metric_scorers"])} if "metric_scorers" in manifest else None
        self.csvs = EvalbenchCsvWriter(run_dir, manifest, metrics=metrics)
        self.junit = JunitBuilder()
        self.html = ReportBuilder() if html else None
        self.committed = False

    def add(self, record: dict[str, object]) -> None:
        self.csvs.add(record)
        self.junit.add(record)
        if self.html is not None:
            self.html.add(record)

    def commit(self, summary: dict[str, object], gates: Sequence[GateResult] = ()) -> list[Path]:
        """Write every report; the paths written. A file that cannot be written raises
        :class:`~evalbench.results.journal.files.OutputError`. A summary that does not say whether the run
        is complete (the one a run builds as it ends) gets ``complete`` and ``completeness`` here."""
        if "complete" not in summary:  # the end of a run: it finished (or was cancelled), its journal is clean
            summary.update(completeness(summary, self.manifest, finished=True, journal=JournalStats()))
        summary = clean_value(summary)
        summary_json = json.dumps(summary, indent=2, default=_json_default) + "\n"
        check_written(Summary, json.loads(summary_json), str(self.run_dir / "summary.json"))
        written = []
        for name, text in (("summary.json", summary_json),
                           ("summary_native.csv", native_summary_csv(summary)),
                           ("summary.md", render_summary_markdown(summary, gates))):
            write_atomic(self.run_dir / name, text)
            written.append(self.run_dir / name)
        written += self.csvs.commit()
        self.committed = True
        written.append(self.junit.commit(self.run_dir, str(summary["run_id"])))
        if self.html is not None:
            # the manifest's texts (command line, config) cleaned like the records' (lone surrogates)
            written.append(self.html.commit(self.run_dir, clean_value(self.manifest), summary))
        return written

    def close(self) -> None:
        """Release the spooled files (and the unfinished CSV files when not committed)."""
        if not self.committed:
            self.csvs.abort()
        self.junit.close()
        if self.html is not None:
            self.html.close()


def write_reports(run_dir: Path, summary: dict[str, object], gates: Sequence[GateResult] = (), *, html: bool = True) -> list[Path]:
    """Write every report of ``run_dir`` from ``summary`` and the journal; the paths written."""
    reports = ReportSet(run_dir, read_manifest(run_dir), html=html)
    try:
        for record in read_journal(run_dir):
            reports.add(record)
        return reports.commit(summary, gates)
    finally:
        reports.close()


def regenerate(run_dir: Path, *, html: bool = True) -> tuple[dict[str, object], list[Path]]:
    """Every report of ``run_dir`` recomputed from its journal: (the summary, the paths written)."""
    summary = rebuild_summary(run_dir)

    def write_scores(handle: TextIO) -> None:
        writer = csv.writer(handle)
        writer.writerow(SCORES_COLUMNS)
        for record in read_journal(run_dir):
            write_score_rows(writer, record, summary["run_id"])

    path = write_atomic_with(run_dir / SCORES_NATIVE, write_scores)
    return summary, [path, *write_reports(run_dir, summary, html=html)]


def native_summary_csv(summary: Mapping[str, object]) -> str:
    """Our summary rows (one per scorer and phase, and per outcome), with the confidence interval."""
    out = io.StringIO()
    writer = _SafeWriter(csv.writer(out))
    writer.writerow(["run_id", "metric_name", "phase", "metric_score", "ci_low", "ci_high", "correct_results_count",
                     "total_results_count", "not_applicable_count"])
    run_id = summary["run_id"]
    for phase, entry in obj_items(summary.get("success")):
        writer.writerow([run_id, "success", phase, *_score_cells(entry), entry["passed"], entry["total"], ""])
    for name, phases in obj_items(summary["scorers"]):
        for phase, tally in obj_items(phases):
            if "rate" in tally:
                writer.writerow([run_id, name, phase, *_score_cells(tally), tally["passed"], tally["applicable"],
                                 tally["not_applicable"]])
            else:
                writer.writerow([run_id, name, phase, tally["mean"], "", "", "", tally["applicable"], tally["not_applicable"]])
    for outcome, count in obj(summary["outcomes"]).items():
        writer.writerow([run_id, f"outcome:{outcome}", "", count, "", "", "", summary["total_items"], ""])
    for kind, count in obj(summary.get("taxonomy")).items():
        writer.writerow([run_id, f"failure:{kind}", "", count, "", "", "", summary["total_items"], ""])
    return out.getvalue()


class _RowWriter(Protocol):
    """What :class:`_SafeWriter` needs of a ``csv.writer``."""

    def writerow(self, row: Iterable[object], /) -> object: ...


class _SafeWriter:
    """A ``csv.writer`` whose text cells are neutralised for spreadsheets (:func:`safe_row`)."""

    def __init__(self, writer: _RowWriter) -> None:
        self.writer = writer

    def writerow(self, row: Sequence[object]) -> None:
        self.writer.writerow(safe_row(row))



def _score_cells(entry: Mapping[str, object]) -> list[float | None]:
    ci = seq(entry.get("ci")) or [None, None]
    pct = [None if v is None else round(100 * number(v), 2) for v in (entry.get("rate"), *ci)]
    return pct
