"""``evalbench runs [DIR]``: the run directories found in a folder, one line each.

A run directory is a folder holding ``manifest.json``, ``conversations.jsonl`` or
``summary.json``: ``DIR`` itself, or any folder directly in it. Each is read from its manifest
and summary (recomputed from the journal when summary.json is missing: a run that did not finish)
and never raises: a broken or partial run is listed with a status that says what is wrong.

Status: ``complete``; ``cancelled`` (Ctrl-C, SIGTERM); ``incomplete: <first reason>`` (see
summary.json → completeness); ``broken: <what>`` (no journal, unreadable JSON, ...).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evalbench.core.errors import EvalbenchError, RunDirError
from evalbench.core.terminal import escape
from evalbench.results.journal.files import JOURNAL
from evalbench.results.journal.safe_read import open_run_file
from evalbench.results.journal.shapes import read_manifest, read_summary
from evalbench.results.render.html_page import format_stamp

RUN_FILES = ("manifest.json", JOURNAL, "summary.json")
MAX_CELL = 56  # characters of a column of the text table (--json has the whole text)


class RunsError(EvalbenchError):
    """The folder to list does not exist (exit 2)."""

    exit_code = 2


@dataclass
class RunEntry:
    """One run directory as listed by ``evalbench runs`` and ``evalbench view``."""

    path: Path
    run_id: str  # the manifest's (else the folder's name)
    created_at: str | None = None  # ISO 8601, from the manifest (else the folder's modification time)
    config_file: str | None = None
    agent: str | None = None
    dataset: str | None = None
    status: str = "complete"  # complete | cancelled | incomplete: ... | broken: ...
    rate: float | None = None  # the headline: success of the main phase (its primary verdicts)
    ci: list[float] | None = None  # its 95% confidence interval
    passed: int | None = None
    total: int | None = None  # conversations counted in the headline
    problems: list[str] = field(default_factory=list)  # everything found wrong, in order
    manifest: dict[str, object] = field(default_factory=dict, repr=False)
    summary: dict[str, object] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        """The folder's name, with the run id when it differs (a copied or renamed run)."""
        return self.path.name if self.run_id == self.path.name else f"{self.path.name} (run_id {self.run_id})"

    @property
    def broken(self) -> bool:
        return self.status.startswith("broken")

    def headline(self) -> str:
        """``67.4% [53.5–81.4%] 29/43``, or ``—``."""
        if self.rate is None:
            return "—"
        text = f"{100 * self.rate:.1f}%"
        if self.ci and len(self.ci) == 2 and None not in self.ci:
            text += f" [{100 * self.ci[0]:.1f}–{100 * self.ci[1]:.1f}%]"
        if self.total is not None:
            text += f" {self.passed}/{self.total}"
        return text

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data.pop("manifest"), data.pop("summary")
        return data | {"path": str(self.path), "name": self.path.name, "headline": self.headline()}


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in RUN_FILES)


def find_run_dirs(root: Path) -> list[Path]:
    """``root`` when it is a run directory, else the run directories directly in it."""
    root = Path(root)
    if not root.is_dir():
        raise RunsError(f"{root}: no such directory (evalbench runs lists the run directories in a folder, "
                        "by default results/)")
    if is_run_dir(root):
        return [root]
    try:
        children = sorted(p for p in root.iterdir() if not p.name.startswith("."))
    except OSError as exc:
        raise RunsError(f"{root}: cannot list it: {exc.strerror or exc}") from None
    return [p for p in children if is_run_dir(p)]


def list_runs(root: Path) -> list[RunEntry]:
    """Every run directory of ``root`` (:func:`find_run_dirs`), read by :func:`read_entry`, oldest first."""
    entries = [read_entry(path) for path in find_run_dirs(root)]
    entries.sort(key=lambda e: (_sort_time(e.created_at), e.run_id))
    return entries


def read_entry(path: Path) -> RunEntry:
    """One run directory's entry; whatever is wrong with it goes into ``problems`` and the status."""
    path = Path(path)
    entry = RunEntry(path=path, run_id=path.name)
    manifest = _read_object(path / "manifest.json", entry)
    if manifest is not None:
        entry.manifest = manifest
        _from_manifest(entry, manifest)
    if entry.created_at is None:
        entry.created_at = _mtime(path)
    summary = _read_object(path / "summary.json", entry)
    if summary is None and (path / JOURNAL).is_file():
        summary = _rebuilt_summary(path, entry)
    if summary is not None:
        entry.summary = summary
        _from_summary(entry, summary)
    entry.status = _status(path, entry, summary)
    return entry


def _read_object(path: Path, entry: RunEntry) -> dict[str, object] | None:
    """The run's manifest.json or summary.json, checked as every reader checks it (:mod:`~evalbench.results.journal.shapes`);
    None, with the problem noted, when it is missing or wrong."""
    if not os.path.lexists(path):
        if path.name == "manifest.json":
            entry.problems.append("no manifest.json")
        return None
    try:
        return read_manifest(path.parent) if path.name == "manifest.json" else read_summary(path.parent)
    except RunDirError as exc:
        entry.problems.append(f"{path.name} is unreadable ({_short(exc.message if exc.key is None else f'{exc.key}: {exc.message}')})")
        return None


def _rebuilt_summary(path: Path, entry: RunEntry) -> dict[str, object] | None:
    from evalbench.results.summary.rebuild import rebuild_summary

    logger = logging.getLogger("evalbench.results")
    level = logger.level
    logger.setLevel(logging.ERROR)  # the journal's warnings: the status says what is wrong
    try:
        return rebuild_summary(path)
    except Exception as exc:  # noqa: BLE001 - a listing never stops on one broken run
        entry.problems.append(f"{JOURNAL} cannot be summarised ({_short(exc)})")
        return None
    finally:
        logger.setLevel(level)


def _from_manifest(entry: RunEntry, manifest: dict[str, object]) -> None:
    entry.run_id = str(manifest.get("run_id") or entry.run_id)
    entry.created_at = _text(manifest.get("created_at"))
    entry.config_file = _text(manifest.get("config_file"))
    agent = manifest.get("agent")
    if isinstance(agent, dict) and agent.get("agent"):
        entry.agent = str(agent["agent"]) + (f" ({agent['model']})" if agent.get("model") else "")
    dataset = manifest.get("dataset")
    if isinstance(dataset, dict):
        entry.dataset = _text(dataset.get("path"))


def _from_summary(entry: RunEntry, summary: dict[str, object]) -> None:
    success = summary.get("success")
    main = success.get("main") if isinstance(success, dict) else None
    if isinstance(main, dict):
        entry.rate = main.get("rate") if isinstance(main.get("rate"), (int, float)) else None
        ci = main.get("ci")
        entry.ci = list(ci) if isinstance(ci, (list, tuple)) and len(ci) == 2 else None
        entry.passed, entry.total = main.get("passed"), main.get("total")
    total_items = summary.get("total_items")
    if entry.total is None and isinstance(total_items, int):
        entry.total = total_items


def _journal_problem(path: Path) -> str | None:
    """What is wrong with the run's journal as a file (missing, a FIFO, a symlink out of the folder...), or None."""
    if not os.path.lexists(path / JOURNAL):
        return f"no {JOURNAL}"
    try:
        with open_run_file(path, JOURNAL):
            return None
    except RunDirError as exc:
        return f"{JOURNAL}: {exc.message}"


def _status(path: Path, entry: RunEntry, summary: dict[str, object] | None) -> str:
    journal = _journal_problem(path)
    if journal is not None:
        return f"broken: {journal}" + (f"; {entry.problems[0]}" if entry.problems else "")
    if summary is None:
        return "broken: " + (entry.problems[-1] if entry.problems else "no summary")
    completeness = summary.get("completeness")
    completeness = completeness if isinstance(completeness, dict) else {}
    if summary.get("cancelled") or completeness.get("cancelled"):
        return "cancelled"
    reasons = [str(r) for r in completeness.get("reasons") or []] if isinstance(completeness.get("reasons"), list) else []
    if summary.get("complete") is False or reasons:
        return "incomplete: " + (reasons[0] if reasons else "see summary.json completeness")
    if "complete" not in summary:
        return "incomplete: summary.json does not say whether the run is complete"
    if entry.problems:  # e.g. no manifest.json, though the summary says complete
        return "incomplete: " + entry.problems[0]
    return "complete"


def _text(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def _short(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def _mtime(path: Path) -> str | None:
    try:
        return dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc).isoformat()
    except OSError:
        return None


def _sort_time(stamp: str | None) -> float:
    if not stamp:
        return float("inf")
    try:
        parsed = dt.datetime.fromisoformat(stamp)
    except ValueError:
        return float("inf")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.timestamp()


def short_date(stamp: str | None) -> str:
    """``2026-12-03 14:47`` (UTC) of an ISO time stamp."""
    return format_stamp(stamp, "%Y-%m-%d %H:%M")


def render_runs(entries: list[RunEntry], root: Path) -> str:
    """The text table of ``evalbench runs``."""
    if not entries:
        return f"no run directories in {root}\n"
    heads = ["RUN", "DATE (UTC)", "STATUS", "SUCCESS (main) [95% CI] passed/n", "AGENT", "DATASET", "CONFIG"]
    rows = [[escape(cell) for cell in (e.name, short_date(e.created_at), e.status, e.headline(), e.agent or "—",
                                       e.dataset or "—", e.config_file or "—")]
            for e in entries]  # escaped before they are measured (the terminal escapes them anyway)
    widths = [min(max(len(r[i]) for r in [heads, *rows]), MAX_CELL) for i in range(len(heads) - 1)]
    lines = ["  ".join(_fit(cell, w).ljust(w) for cell, w in zip(row[:-1], widths, strict=False)) + "  " + row[-1]
             for row in [heads, *rows]]
    return "\n".join(line.rstrip() for line in lines) + f"\n{len(entries)} run(s) in {root}\n"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def runs_json(entries: list[RunEntry]) -> str:
    return json.dumps([e.as_dict() for e in entries], indent=2) + "\n"


def main_runs(root: Path, *, as_json: bool = False) -> int:
    """``evalbench runs``: print the list; exit 0 (a folder that does not exist: :class:`RunsError`)."""
    entries = list_runs(root)
    print(runs_json(entries) if as_json else render_runs(entries, root), end="")
    return 0


__all__ = [
    "RunEntry",
    "RunsError",
    "find_run_dirs",
    "is_run_dir",
    "list_runs",
    "main_runs",
    "read_entry",
    "render_runs",
    "runs_json",
    "short_date",
]
