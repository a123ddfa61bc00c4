"""A run's summary recomputed from its journal and manifest (``evalbench report``, report.html of
an interrupted run, ``evalbench runs``), and whether the run is complete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalbench.results.journal.reader import JournalStats, journal_stats, read_journal
from evalbench.results.journal.shapes import read_manifest, summary_extra
from evalbench.results.summary.aggregate import SummaryBuilder


def rebuild_summary(run_dir: Path) -> dict[str, Any]:
    """The summary of ``run_dir`` recomputed from its journal (and the manifest's run facts, when
    there is a manifest)."""
    manifest = read_manifest(run_dir, missing_ok=True)
    metric_scorers = set(manifest.get("metric_scorers") or ())
    if "metric_scorers" not in manifest:  # older manifests: a metric has applicable scores without a verdict
        metric_scorers = _infer_metrics(run_dir)
    trials = (manifest.get("dataset") or {}).get("trials")
    builder = SummaryBuilder.from_records(read_journal(run_dir), metric_scorers,
                                          trials if isinstance(trials, int) and trials > 1 else 1)
    extra = summary_extra(manifest)
    summary = builder.result(run_id=manifest.get("run_id", run_dir.name), **extra)
    summary.update(completeness(summary, manifest, journal=journal_stats(run_dir)))
    return summary


def completeness(summary: dict[str, Any], manifest: dict[str, Any], *, finished: bool | None = None,
                 journal: JournalStats | None = None) -> dict[str, object]:
    """``complete`` and ``completeness`` for a summary: a run is incomplete when its journal holds
    fewer conversations than the dataset has items (``manifest.json → dataset.items``, which
    counts neither malformed records nor items filtered out by ``query_types`` or left out by a
    ``subset``; times ``dataset.trials``), when some were
    cancelled, or when it did not finish (no ``finished_at`` in the manifest, for the run or its
    last session). ``finished`` overrides the manifest (the run itself knows it is ending)."""
    dataset = manifest.get("dataset") or summary.get("dataset") or {}
    expected = dataset.get("items") if isinstance(dataset.get("items"), int) else None
    trials = dataset.get("trials")
    if expected is not None and isinstance(trials, int) and trials > 1:
        expected *= trials  # each item's conversation is repeated
    cancelled = (summary.get("outcomes") or {}).get("cancelled", 0)
    conversations = summary.get("total_items", 0) - cancelled
    if finished is None:
        sessions = manifest.get("sessions")
        last = sessions[-1] if isinstance(sessions, list) and sessions and isinstance(sessions[-1], dict) else None
        finished = bool(manifest.get("finished_at")) and (last is None or bool(last.get("finished_at")))
    reasons = []
    if not manifest:
        reasons.append("there is no manifest.json")
    elif not finished:
        reasons.append("the run did not finish (manifest.json has no finished_at)")
    if summary.get("cancelled"):
        reasons.append("the run was cancelled")
    if manifest and expected is None:
        reasons.append("manifest.json does not give the number of dataset items")
    missing = max(expected - conversations, 0) if expected is not None else None
    unit = "conversation(s) (items x trials)" if isinstance(trials, int) and trials > 1 else "item(s)"
    if missing:
        reasons.append(f"{missing} of {expected} {unit} have no conversation in the journal")
    if cancelled:
        reasons.append(f"{cancelled} conversation(s) were cancelled")
    if journal is not None and journal.truncated:
        reasons.append("the journal's last line is cut short")
    return {"complete": not reasons,
            "completeness": {"expected_items": expected, "conversations": conversations, "missing": missing,
                             "cancelled": cancelled, "finished": finished,
                             "journal": (journal or JournalStats()).as_dict(), "reasons": reasons}}


def _infer_metrics(run_dir: Path) -> set[str]:
    metrics: set[str] = set()
    verdicts: set[str] = set()
    for record in read_journal(run_dir):
        for phase in record["phases"]:
            for name, score in phase["scores"].items():
                if score["applicable"]:
                    (verdicts if score["passed"] is not None else metrics).add(name)
    return metrics - verdicts
