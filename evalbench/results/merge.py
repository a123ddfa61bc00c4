"""Shards of one run (``--shard i/n``) joined into one run directory, as if the run had not been
split: one journal, one manifest (every shard's sessions), scores_native.csv, the summary and
every report. ``evalbench merge`` joins finished shards (:func:`merge_shards`); ``run --workers``
feeds :class:`MergedRun` the shards' records while they run (:mod:`evalbench.run.parallel.processes`), so little
is left to do when they end. Either way each record is parsed once and goes to every output.

The shards must be shards of the same run: the same config fingerprint (the settings that make
two runs comparable; the subset is not one of them), the same dataset (its SHA-256), each a
different shard of the same count, and no conversation in two of them.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from evalbench.core.errors import ConfigError
from evalbench.results.journal.files import JOURNAL, OutputError, create_new, write_atomic
from evalbench.results.journal.lines import conversation_key
from evalbench.results.journal.reader import JournalStats, read_journal
from evalbench.results.journal.rundir import SCORES_COLUMNS, SCORES_NATIVE, write_score_rows
from evalbench.results.journal.shapes import read_manifest, summary_extra
from evalbench.results.render.reports import ReportSet
from evalbench.results.summary.aggregate import SummaryBuilder
from evalbench.results.summary.rebuild import completeness


def merge_shards(out: Path, shards: list[Path], *, replace: bool = False, html: bool = True) -> dict[str, object]:
    """Write the merged run directory ``out`` from finished shards; its summary. ``out`` must not
    hold a journal, unless ``replace`` and it was merged before (``--workers`` merges again after
    a resume)."""
    clear_merged(out, replace=replace)
    manifests = [read_manifest(shard) for shard in shards]
    merged = MergedRun(out, shards, manifests, html=html)
    try:
        for shard in shards:
            for record in read_journal(shard):
                merged.add(record, shard)
    except BaseException:
        merged.abort()
        raise
    return merged.finish(manifests)


def clear_merged(out: Path, *, replace: bool) -> None:
    """Make room for a merge into ``out``: refuse a run directory that holds a journal, unless
    ``replace`` and it holds an earlier merge (whose journal is removed)."""
    if not (out / JOURNAL).exists():
        return
    merged_before = "merged_from" in read_manifest(out, missing_ok=True)
    if not (replace and merged_before):
        raise ConfigError(f"{out} already holds a journal: merge into a new directory")
    (out / JOURNAL).unlink()


class MergedRun:
    """The merged run directory being written. :meth:`add` takes each record once (with its
    journal line when it has it, written as it was); :meth:`finish` writes the manifest, the
    summary and the reports from what was added."""

    def __init__(self, out: Path, shards: list[Path], manifests: list[dict[str, Any]], *, html: bool = True) -> None:
        check_same_run(shards, manifests)
        self.out, self.sources = out, [str(s) for s in shards]
        # one dict for the whole merge: the reports read it when they are committed, after finish() updated it
        self.manifest = merged_manifest(out.name, manifests, self.sources, conversations=0)
        trials = self.manifest["dataset"].get("trials")
        self.summary = SummaryBuilder(set(self.manifest.get("metric_scorers") or ()),
                                      trials if isinstance(trials, int) and trials > 1 else 1)
        self.seen: dict[tuple[object, str, int], Path] = {}
        try:
            out.mkdir(parents=True, exist_ok=True)
            write_atomic(out / "manifest.json", _manifest_text(self.manifest))  # unfinished: a merge under way
            self._journal: TextIO = os.fdopen(create_new(out / JOURNAL), "w", encoding="utf-8")
        except OSError as exc:
            raise OutputError(out / JOURNAL, exc) from None
        self._scores_tmp = out / f".{SCORES_NATIVE}.tmp"
        self._scores_file = os.fdopen(create_new(self._scores_tmp), "w", encoding="utf-8", newline="")
        self._scores = csv.writer(self._scores_file)
        self._scores.writerow(SCORES_COLUMNS)
        self.reports = ReportSet(out, self.manifest, html=html)

    def add(self, record: dict[str, Any], shard: Path, line: str | None = None) -> None:
        key = conversation_key(record)
        if key in self.seen:
            raise ConfigError(f"conversation {key} is in {self.seen[key]} and in {shard}: not shards of one run")
        self.seen[key] = shard
        try:
            self._journal.write(line if line is not None else json.dumps(record, ensure_ascii=False) + "\n")
            write_score_rows(self._scores, record, self.manifest["run_id"])
        except OSError as exc:
            raise OutputError(self.out / JOURNAL, exc) from None
        self.summary.add(record)
        self.reports.add(record)

    def finish(self, manifests: list[dict[str, Any]]) -> dict[str, object]:
        """The shards' final manifests in: write the merged manifest, scores_native.csv, the
        summary and every report; the summary."""
        final = merged_manifest(self.out.name, manifests, self.sources, conversations=len(self.seen))
        self.manifest.clear()
        self.manifest.update(final)
        try:
            self._journal.close()
            self._scores_file.close()
            os.replace(self._scores_tmp, self.out / SCORES_NATIVE)
            write_atomic(self.out / "manifest.json", _manifest_text(final))
            summary = self.summary.result(run_id=final["run_id"], **summary_extra(final))
            summary.update(completeness(summary, final, journal=JournalStats(conversations=len(self.seen))))
            self.reports.commit(summary)
        except OSError as exc:
            raise OutputError(self.out, exc) from None
        finally:
            self.reports.close()
        return summary

    def abort(self) -> None:
        """A merge that cannot complete leaves no journal (the run directory can be merged again)."""
        with contextlib.suppress(OSError):
            self._journal.close()
            self._scores_file.close()
        self.reports.close()
        for path in (self.out / JOURNAL, self._scores_tmp):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)


def _manifest_text(manifest: Mapping[str, object]) -> str:
    return json.dumps(manifest, indent=2, ensure_ascii=False, default=str) + "\n"


def check_same_run(shards: list[Path], manifests: list[dict[str, Any]]) -> None:
    """A :class:`ConfigError` naming the problem unless ``shards`` are every shard of one run."""
    first = manifests[0]
    split: str | None = None  # the "n" of every shard's "i/n"
    indexes: dict[str, Path] = {}
    for shard, manifest in zip(shards, manifests, strict=True):
        if manifest.get("config_fingerprint") != first.get("config_fingerprint"):
            raise ConfigError(f"{shard}: another config than {shards[0]} (config_fingerprint differs): not shards of one run")
        if (manifest.get("dataset") or {}).get("sha256") != (first.get("dataset") or {}).get("sha256"):
            raise ConfigError(f"{shard}: another dataset than {shards[0]}: not shards of one run")
        shard_of = ((manifest.get("dataset") or {}).get("subset") or {}).get("shard")
        if not shard_of:
            raise ConfigError(f"{shard} is not a shard (run with --shard i/n)")
        if not isinstance(manifest["dataset"].get("items"), int) or not isinstance(manifest.get("sessions", []), list):
            raise ConfigError(f"{shard}/manifest.json does not say how many items the shard has (dataset.items): "
                              "not a run directory evalbench wrote")
        count = shard_of.split("/")[1]
        split = split or count
        if count != split:
            raise ConfigError(f"{shard} is shard {shard_of}, {shards[0]} one of {split}: not shards of one split")
        if shard_of in indexes:
            raise ConfigError(f"{shard} and {indexes[shard_of]} are both shard {shard_of}")
        indexes[shard_of] = shard
    # the manifests' shards are i/n with n <= shapes.MAX_SHARDS: this loop is bounded
    missing = [f"{i}/{split}" for i in range(1, int(split or 0) + 1) if f"{i}/{split}" not in indexes]
    if missing:
        listed = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ConfigError(f"shard(s) {listed} missing: give every shard's run directory")


def merged_manifest(run_id: str, manifests: list[dict[str, Any]], sources: list[str], *, conversations: int) -> dict[str, Any]:
    """The first shard's manifest with every shard's sessions, items and databases; the shards
    ran side by side, so the run took as long as the slowest."""
    first = manifests[0]
    sessions = [dict(s, shard=m["dataset"]["subset"]["shard"]) for m in manifests for s in m.get("sessions", [])]
    dataset = dict(first["dataset"])
    dataset["items"] = sum(m["dataset"]["items"] for m in manifests)
    dataset["groups"] = {k: v for m in manifests for k, v in (m["dataset"].get("groups") or {}).items()}
    dataset["subset"] = {"shards": len(manifests), "merged_from": sources, "of": first["dataset"]["subset"].get("of")}
    extras = [m.get("summary_extra") or {} for m in manifests]
    elapsed = max((e.get("elapsed_s") or 0.0 for e in extras), default=0.0)
    total = sum(len(m.get("sessions", [])) for m in manifests)
    extra = dict(extras[0]) | {
        "elapsed_s": elapsed,
        "conversations_per_s": round(conversations / elapsed, 2) if elapsed > 0 else None,
        "databases": {k: v for e in extras for k, v in (e.get("databases") or {}).items()},
        "dataset": dict(extras[0].get("dataset") or {}) | {"items": dataset["items"]},
        "sessions": total,
        "cancelled": any(e.get("cancelled") for e in extras),
    }
    finished = [str(m["finished_at"]) for m in manifests if m.get("finished_at")]
    return first | {"run_id": run_id, "dataset": dataset, "sessions": sessions, "summary_extra": extra,
                    "databases": extra["databases"], "merged_from": sources,
                    "finished_at": max(finished) if len(finished) == len(manifests) else None}
