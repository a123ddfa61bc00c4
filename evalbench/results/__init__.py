"""The run directory: journal, summaries and the readers other tools use.

The package is split by job:

- :mod:`evalbench.results.journal`: what a run directory's journal is, how it is written as a run
  goes (:class:`~evalbench.results.journal.rundir.RunWriter`) and how it is read back;
- :mod:`evalbench.results.summary`: aggregating verdicts — the streaming summary, pass-rate
  statistics, trials, the failure taxonomy and the comparison of two runs;
- :mod:`evalbench.results.render`: turning results into files and views — report.html,
  junit.xml, summary.md, EvalBench's CSVs, ``evalbench explain``, ``runs`` and ``view``.

This module is the public API other tools use: the typed run record (:mod:`evalbench.results.schema`)
read by :func:`load_manifest`, :func:`load_summary` and :func:`read_records`; :func:`read_journal`
(the same records as dicts, as a crash may leave the journal: see
:mod:`evalbench.results.journal.reader`), :func:`journal_stats` and :func:`read_run` (a run as
pandas DataFrames).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalbench.results.journal.reader import JournalStats, journal_stats, read_journal
from evalbench.results.journal.typed import load_manifest, load_summary, read_records
from evalbench.results.schema import SCHEMA_VERSION, JournalRecord, Manifest, Summary

if TYPE_CHECKING:  # imported on first use (below): it needs pandas
    from evalbench.results.journal.dataframes import Run, read_run


def __getattr__(name: str) -> object:
    """``read_run`` (evalbench.results.journal.dataframes), imported on first use: it needs pandas."""
    if name in ("read_run", "Run"):
        import importlib

        return getattr(importlib.import_module("evalbench.results.journal.dataframes"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SCHEMA_VERSION", "JournalRecord", "JournalStats", "Manifest", "Run", "Summary", "journal_stats", "load_manifest",
           "load_summary", "read_journal", "read_records", "read_run"]
