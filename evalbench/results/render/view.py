"""``evalbench view DIR [-o OUT]``: one self-contained ``index.html`` over every run in a folder.

The page lists the runs (:mod:`evalbench.results.render.runs_index`: date, status, headline with its
confidence interval, agent, dataset, config), each linking to its own ``report.html``, and an
N-way comparison matrix: one row per conversation (item, dialect and trial, as
:func:`~evalbench.results.journal.lines.conversation_key` names it) and one column per run, each
cell pass / fail / error / n/a linking to that conversation in the run's report.html
(``report.html#<item id>``: :mod:`evalbench.results.render.links`). Filters by slice (database,
dialect, category, difficulty, query type, ambiguity, follow-up), by phase (the conversation,
the main or the follow-up phase) and by agreement; the header shows each run's rate over the
rows shown.

Like report.html it loads nothing (a Content-Security-Policy allows only its own script), and the
matrix is embedded as JSON and drawn by a small script with ``textContent`` only, a page of rows
at a time, so a dataset of thousands of items stays usable. Links are relative: the folder can be
moved or served as it is. A run that cannot be read is listed with its status and has no column.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from evalbench.core.errors import RunDirError
from evalbench.core.json_types import seq
from evalbench.results.journal.files import OutputError, write_atomic
from evalbench.results.journal.lines import conversation_key, trial_of
from evalbench.results.journal.reader import read_journal
from evalbench.results.render.html_assets import CSS
from evalbench.results.render.html_page import page_shell
from evalbench.results.render.links import report_href
from evalbench.results.render.runs_index import RunEntry, list_runs, short_date
from evalbench.results.render.view_assets import VIEW_CSS, VIEW_JS
from evalbench.results.summary.taxonomy import passed, record_diagnosis

INDEX = "index.html"
ERROR_OUTCOMES = frozenset({"agent_error", "timeout", "db_error", "vuser_error", "cancelled"})
SLICES = [("db", "Database"), ("dialect", "Dialect"), ("cat", "Category"), ("diff", "Difficulty"),
          ("qt", "Query type"), ("amb", "Ambiguous"), ("fu", "Follow-up")]


_Key = tuple[object, str, int]  # a conversation: (dialect, item id, trial), as conversation_key makes it


class _RunData(TypedDict):
    """One run of index.html (its list, and a matrix column when ``column``)."""

    id: str
    run_id: str
    href: str | None
    date: str
    status: str
    headline: str
    rate: float | None
    agent: str | None
    dataset: str | None
    config: str | None
    path: str
    column: bool
    col: int | None


class _ViewData(TypedDict):
    """The data of index.html (:func:`build_view`)."""

    runs: list[_RunData]
    columns: list[int | None]
    rows: list[dict[str, object]]
    slices: list[list[str]]


@dataclass
class _Matrix:
    """Rows keyed by conversation; ``cells[key][run index]`` is a cell or absent."""

    rows: dict[_Key, dict[str, object]] = field(default_factory=dict)
    cells: dict[_Key, dict[int, list[object]]] = field(default_factory=dict)

    def add(self, run: int, record: dict[str, object]) -> None:
        key = conversation_key(record)
        code, row = cell(record), _row(record)  # first: a malformed record raises before anything is kept
        self.rows.setdefault(key, row)
        self.cells.setdefault(key, {})[run] = code


def verdict_code(phase: Mapping[str, object] | None) -> str:
    """A phase's cell code: ``p`` pass, ``f`` fail, ``e`` error (ended by an agent, database,
    virtual-user error, a timeout or a cancellation), ``i`` invalid item, ``n`` no verdict, ``-`` absent."""
    if phase is None:
        return "-"
    outcome = phase.get("outcome")
    if outcome in ERROR_OUTCOMES:
        return "e"
    if outcome == "invalid_item":
        return "i"
    if outcome not in (None, "scored"):
        return "f"  # max_turns: the agent ran out of clarifications
    verdict = phase.get("passed")
    return "n" if verdict is None else "p" if verdict else "f"


def cell(record: dict[str, object]) -> list[object]:
    """``[conversation, main, follow_up, diagnosis kind]`` codes of one record (:func:`verdict_code`)."""
    phases = {p.get("phase"): p for p in seq(record.get("phases")) if isinstance(p, dict)}
    main, follow = verdict_code(phases.get("main")), verdict_code(phases.get("follow_up"))
    outcome = record.get("outcome")
    if outcome in ERROR_OUTCOMES:
        whole = "e"
    elif outcome == "invalid_item":
        whole = "i"
    elif passed(record):
        whole = "n" if all(c in ("n", "-") for c in (main, follow)) else "p"
    else:
        whole = "f"
    diagnosis = record_diagnosis(record) or {}
    return [whole, main, follow, diagnosis.get("kind")]


def _row(record: dict[str, object]) -> dict[str, object]:
    row: dict[str, object] = {"id": record["item_id"], "dialect": record.get("dialect"), "db": record.get("database"),
           "cat": record.get("category"), "diff": record.get("difficulty"), "qt": record.get("query_type"),
           "amb": None if record.get("ambiguous") is None else ("ambiguous" if record.get("ambiguous") else "clear"),
           "fu": "has follow-up" if record.get("has_follow_up") else "no follow-up"}
    trial = trial_of(record)
    return row | ({"trial": trial} if trial > 1 else {})


def _natural(text: str) -> list[tuple[int, int, str]]:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p]


def build_view(root: Path, out: Path) -> _ViewData:
    """The data of ``index.html`` (runs and matrix) for the runs in ``root``, links relative to ``out``'s folder."""
    entries = list_runs(root)
    matrix = _Matrix()
    runs: list[_RunData] = []
    for entry in entries:
        runs.append(_run_data(entry, out.parent))
        if entry.broken:  # a journal that is missing or not a regular file of the run directory among them
            continue
        index = len([r for r in runs if r["column"]])
        runs[-1]["column"] = True
        runs[-1]["col"] = index
        runs[-1]["status"] += _add_journal(matrix, index, entry.path)
    columns = [r for r in runs if r["column"]]
    keys = sorted(matrix.rows, key=lambda k: (_natural(str(k[1])), str(k[0]), k[2:]))
    rows = [matrix.rows[k] | {"c": [matrix.cells[k].get(i) for i in range(len(columns))]} for k in keys]
    return {"runs": runs, "columns": [r["col"] for r in columns], "rows": rows,
            "slices": [[key, label] for key, label in SLICES]}


def _add_journal(matrix: _Matrix, column: int, run_dir: Path) -> str:
    """Add a run's records to the matrix; what went wrong, as a note for its status ("" if nothing)."""
    skipped = 0
    try:
        for record in read_journal(run_dir):
            try:
                matrix.add(column, record)
            except (AttributeError, KeyError, TypeError, ValueError):  # a record of an unexpected shape
                skipped += 1
    except (OSError, ValueError, RunDirError) as exc:  # unreadable mid-way: the rows read so far stay
        return f" (journal unreadable: {exc})"
    return f" ({skipped} malformed record(s) not shown)" if skipped else ""


def _run_data(entry: RunEntry, page_dir: Path) -> _RunData:
    return {"id": entry.name, "run_id": entry.run_id, "href": report_href(entry.path, page_dir), "date": short_date(entry.created_at),
            "status": entry.status, "headline": entry.headline(), "rate": entry.rate, "agent": entry.agent,
            "dataset": entry.dataset, "config": entry.config_file, "path": str(entry.path), "column": False,
            "col": None}


def write_view(root: Path, out: Path | None = None) -> Path:
    """Write ``index.html`` (default ``root/index.html``) atomically; its path."""
    return _write(Path(root), out)[0]


def _write(root: Path, out: Path | None) -> tuple[Path, _ViewData]:
    out = Path(out) if out is not None else root / INDEX
    if out.is_dir():
        out = out / INDEX
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(out.parent, exc) from None
    data = build_view(root, out)
    write_atomic(out, render_view(data, root))
    return out, data


def render_view(data: _ViewData, root: Path) -> str:
    """The HTML of index.html for :func:`build_view`'s data."""
    body = "\n".join([_header(data, root), '<main class="wrap">', _runs_section(data["runs"]), _matrix_section(), "</main>"])
    head, tail = page_shell(f"evalbench · runs in {_e(root.name or str(root))}", CSS + VIEW_CSS, VIEW_JS, body)
    return head + f'<script type="application/json" id="evalbench-view">{_dumps(data)}</script>\n' + tail


def _e(value: object) -> str:
    return html.escape("—" if value is None or value == "" else str(value), quote=True)


def _dumps(value: object) -> str:
    """JSON safe inside a <script> element (no ``<`` at all)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).replace("<", "\\u003c")


def _header(data: _ViewData, root: Path) -> str:
    runs, columns = data["runs"], data["columns"]
    return ('<header class="top"><div class="wrap"><div class="eyebrow">evalbench runs</div>'
            f"<h1>Runs in <code>{_e(root)}</code></h1>"
            f'<p class="hint">{len(runs)} run(s), {len(columns)} in the matrix, {len(data["rows"]):,} conversations. '
            "Generated by <code>evalbench view</code>; links are relative to this page.</p>"
            '<nav class="toc" aria-label="Sections"><a href="#runs">Runs</a><a href="#matrix">Matrix</a></nav>'
            "</div></header>")


def _runs_section(runs: list[_RunData]) -> str:
    rows = []
    for run in runs:
        name = f'<a class="run-link" href="{_e(run["href"])}">{_e(run["id"])}</a>' if run["href"] else _e(run["id"])
        if run["column"] and not run["href"]:
            name += f' <span class="hint">(no report.html: <code>evalbench report {_e(run["path"])}</code> writes it)</span>'

        tone = "ok" if run["status"] == "complete" else "bad" if run["status"].startswith("broken") else "warn"
        rows.append(f"<tr><td class=\"run-name\">{name}</td><td class=\"date\">{_e(run['date'])}</td><td class=\"status\"><span class=\"badge {tone}\">{_e(run['status'])}</span></td>"
                    f'<td class="num">{_e(run["headline"])}</td><td>{_e(run["agent"])}</td><td>{_e(run["dataset"])}</td>'
                    f"<td>{_e(run['config'])}</td></tr>")
    table = ('<table class="plain" id="runs-table"><thead><tr><th scope="col">Run</th><th scope="col">Date (UTC)</th>'
             '<th scope="col">Status</th><th scope="col" class="num">Success, main [95% CI] passed/n</th>'
             '<th scope="col">Agent</th><th scope="col">Dataset</th><th scope="col">Config</th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>') if rows else '<p class="empty">No run directories.</p>'
    return ('<section id="runs" aria-labelledby="runs-h"><div class="section-head"><h2 id="runs-h">Runs</h2>'
            '<span class="hint">oldest first; each links to its report.html</span></div>'
            f'<div class="panel">{table}</div></section>')


def _matrix_section() -> str:
    return (
        '<section id="matrix" aria-labelledby="matrix-h"><div class="section-head"><h2 id="matrix-h">Conversations × runs</h2>'
        '<span class="hint">✓ pass · ✗ fail · ! error (agent, database, virtual user, timeout, cancelled) · '
        'n/a no verdict · blank: not in that run; a cell opens the conversation in that run\'s report</span></div>'
        '<div class="filters" role="search" id="view-filters">'
        '<label for="v-q">Item<input type="search" id="v-q" placeholder="item id" autocomplete="off"></label>'
        '<label for="v-phase">Verdict of<select id="v-phase"><option value="0">the conversation</option>'
        '<option value="1">the main phase</option><option value="2">the follow-up phase</option></select></label>'
        '<label for="v-rows">Rows<select id="v-rows"><option value="">All</option>'
        '<option value="differ">Runs disagree</option><option value="anyfail">Some run fails</option>'
        '<option value="allfail">Every run fails</option></select></label>'
        '<button type="button" id="v-reset">Reset</button>'
        '<p class="count" aria-live="polite"><strong id="v-count">0</strong> rows match</p></div>'
        '<div class="table-wrap"><table id="matrix-table" aria-label="Verdicts per conversation and run">'
        '<thead id="matrix-head"></thead><tbody id="matrix-body"></tbody></table>'
        '<p id="v-none" class="empty" style="padding:12px" hidden>No conversation matches.</p>'
        '<div class="more"><button type="button" id="v-more" hidden>Show more</button></div></div>'
        "<noscript><p>The matrix needs JavaScript.</p></noscript></section>"
    )


def main_view(root: Path, out: Path | None = None) -> int:
    """``evalbench view``: write index.html and say where it is, and which runs have no column."""
    from evalbench.results.render.runs_index import find_run_dirs

    find_run_dirs(root)  # a folder that does not exist: RunsError, exit 2
    path, data = _write(Path(root), out)
    for run in data["runs"]:
        if not run["column"]:
            print(f"{run['id']}: {run['status']} (listed, not in the matrix)")
        elif not run["href"]:
            print(f"{run['id']}: no report.html (its cells do not link; evalbench report {run['path']} writes it)")
    print(f"wrote {path} ({len(data['runs'])} run(s), {len(data['rows']):,} conversations)")
    return 0


__all__ = ["INDEX", "build_view", "cell", "main_view", "render_view", "verdict_code", "write_view"]
