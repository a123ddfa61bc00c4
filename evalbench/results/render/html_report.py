"""``report.html``: one self-contained page for a run directory (no network, works from file://).

Python renders the header, the summary tables and the charts (inline SVG); the conversations
are embedded as JSON in a ``<script type="application/json">`` tag and rendered by a small
vanilla script with ``textContent`` only, so record data is never parsed as HTML. A
Content-Security-Policy allows only the page's own script (by hash) and no network at all.

Records are streamed from the journal. Every conversation gets a compact row in the table; the
full record (turns, SQL, result previews, scores, timings) is embedded for the first
``max_details`` conversations and while the embedded details stay under ``max_detail_bytes``;
with each embedded record goes its phases' golden/generated SQL diff (``diffs``, see
:mod:`evalbench.results.render.sqldiff`). A conversation opens from the address ``#<item id>``
(:mod:`evalbench.results.render.links`).
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import math
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from evalbench.core.conversation import Outcome
from evalbench.core.json_types import maybe_obj, number, obj, obj_items, objs, seq
from evalbench.results.journal.files import JOURNAL, write_atomic_with
from evalbench.results.journal.lines import trial_of
from evalbench.results.journal.reader import read_journal
from evalbench.results.journal.shapes import read_manifest, read_summary
from evalbench.results.render.html_assets import CSS, JS
from evalbench.results.render.html_page import format_stamp, page_shell
from evalbench.results.render.sqldiff import Segment, sql_diff
from evalbench.results.render.summary_md import incomplete_note
from evalbench.results.summary.aggregate import tools_text, verdict_notes
from evalbench.results.summary.cost import COST_HEADER, cost_lines, cost_rows
from evalbench.results.summary.rebuild import rebuild_summary

if TYPE_CHECKING:
    from evalbench.results.summary.taxonomy import Diagnosis

REPORT = "report.html"
MAX_DETAILS = 20_000  # conversations whose full record is embedded
MAX_DETAIL_BYTES = 48 * 1024 * 1024  # ... and at most this much JSON of full records (about the page size)
ROW_TEXT_CHARS = 300  # search text kept for a row whose full record is not embedded
MAX_SLICE_BARS = 25  # bars per slice chart (the largest values by n)

Diagnose = Callable[[dict[str, object], "str | None"], "Diagnosis | None"]  # evalbench.results.summary.taxonomy.diagnose


def render_report(run_dir: Path, *, max_details: int = MAX_DETAILS, max_detail_bytes: int = MAX_DETAIL_BYTES) -> str:
    """The HTML of ``report.html`` for a run directory (manifest, summary and journal)."""
    run_dir = Path(run_dir)
    with _from_run_dir(run_dir, max_details, max_detail_bytes) as (builder, manifest, summary, recomputed):
        out = io.StringIO()
        builder.write(out, run_dir, manifest, summary, recomputed=recomputed)
        return out.getvalue()


def write_report(run_dir: Path, *, max_details: int = MAX_DETAILS, max_detail_bytes: int = MAX_DETAIL_BYTES) -> Path:
    """Write ``run_dir/report.html`` atomically (temporary file, then rename) and return its path."""
    run_dir = Path(run_dir)
    with _from_run_dir(run_dir, max_details, max_detail_bytes) as (builder, manifest, summary, recomputed):
        return builder.commit(run_dir, manifest, summary, recomputed=recomputed)


@contextlib.contextmanager
def _from_run_dir(run_dir: Path, max_details: int, max_detail_bytes: int) -> Iterator[tuple[ReportBuilder, dict[str, object], dict[str, object], bool]]:
    if not (run_dir / JOURNAL).is_file():
        raise FileNotFoundError(f"{run_dir} has no {JOURNAL}: not a run directory")
    manifest = read_manifest(run_dir, missing_ok=True)
    summary = read_summary(run_dir)
    recomputed = summary is None
    if summary is None:
        summary = rebuild_summary(run_dir)  # summary.json is written at the end: an interrupted run
    builder = ReportBuilder(max_details=max_details, max_detail_bytes=max_detail_bytes)
    try:
        for record in read_journal(run_dir):
            builder.add(record)
        yield builder, manifest, summary, recomputed
    finally:
        builder.close()


class ReportBuilder:
    """report.html built incrementally: :meth:`add` each journal record (in journal order, as the
    run completes conversations), then :meth:`commit` with the summary. Rows and records are
    spooled to temporary files (on disk when large) and copied into the page at the end, so
    memory does not grow with the number of conversations."""

    def __init__(self, *, max_details: int = MAX_DETAILS, max_detail_bytes: int = MAX_DETAIL_BYTES) -> None:
        self.max_details, self.max_detail_bytes = max_details, max_detail_bytes
        self.diagnose = _load_diagnose()
        self.detail_bytes = self.embedded = self.total = 0
        self.diagnosed: Counter[str] = Counter()
        # the spools live as long as the builder, which closes them
        self.rows = tempfile.SpooledTemporaryFile(max_size=1 << 22, mode="w+", encoding="utf-8")  # noqa: SIM115
        self.details = tempfile.SpooledTemporaryFile(max_size=1 << 22, mode="w+", encoding="utf-8")  # noqa: SIM115
        # per embedded conversation, each phase's golden/generated SQL diff (sqldiff.py), or null
        self.diffs = tempfile.SpooledTemporaryFile(max_size=1 << 22, mode="w+", encoding="utf-8")  # noqa: SIM115

    def add(self, record: dict[str, object]) -> None:
        diagnosis = _diagnosis(record, self.diagnose)
        kind = diagnosis.get("dk")
        if kind:
            self.diagnosed[str(kind)] += 1
        row = _row(record, self.total + 1, diagnosis)  # its line in the journal
        detail = diffs = "null"
        if self.embedded < self.max_details and self.detail_bytes < self.max_detail_bytes:
            detail = _dumps(_detail(record))
            diffs = _dumps(_sql_diffs(record))
            self.detail_bytes += len(detail) + len(diffs)
            self.embedded += 1
        else:
            row["text"] = _search_text(record)[:ROW_TEXT_CHARS]
        separator = "," if self.total else ""
        self.rows.write(separator + _dumps(row))
        self.details.write(separator + detail)
        self.diffs.write(separator + diffs)
        self.total += 1

    def write(self, out: TextIO, run_dir: Path, manifest: Mapping[str, object], summary: dict[str, object], *,
              recomputed: bool = False) -> None:
        primary_scorer = summary.get("primary_scorer")
        primary = primary_scorer if isinstance(primary_scorer, str) else None  # a scorer's name, or null
        detail_note = (
            f"the report embeds the full record of the first {self.embedded:,} of {self.total:,} conversations "
            f"(limits: {self.max_details:,} conversations, {self.max_detail_bytes // (1024 * 1024):,} MiB of records)."
        )
        meta: dict[str, object] = {"run_id": summary.get("run_id") or manifest.get("run_id") or run_dir.name, "primary": primary,
                "total": self.total, "embedded": self.embedded, "detail_note": detail_note}
        taxonomy = obj(summary.get("taxonomy")) or dict(self.diagnosed)
        notices = _notices(summary, recomputed, self.total, self.embedded, detail_note)
        body = "\n".join([
            _header(manifest, summary, run_dir),
            '<main class="wrap">',
            *notices,
            _summary_section(summary, primary, taxonomy, from_summary="taxonomy" in summary),
            _slices_section(summary),
            _conversations_section(bool(self.diagnosed) or self.diagnose is not None),
            "</main>",
            _DIALOG,
        ])
        head, tail = _page(str(meta["run_id"]), body)
        out.write(head)
        out.write('{"meta":' + _dumps(meta) + ',"rows":[')
        self.rows.seek(0)
        shutil.copyfileobj(self.rows, out)
        out.write('],"details":[')
        self.details.seek(0)
        shutil.copyfileobj(self.details, out)
        out.write('],"diffs":[')
        self.diffs.seek(0)
        shutil.copyfileobj(self.diffs, out)
        out.write("]}")
        out.write(tail)

    def commit(self, run_dir: Path, manifest: Mapping[str, object], summary: dict[str, object], *, recomputed: bool = False) -> Path:
        """Write ``run_dir/report.html`` atomically; its path."""
        return write_atomic_with(run_dir / REPORT, lambda out: self.write(out, run_dir, manifest, summary, recomputed=recomputed))

    def close(self) -> None:
        self.rows.close()
        self.details.close()
        self.diffs.close()


# --------------------------------------------------------------------------- data


def _load_diagnose() -> Diagnose | None:
    try:
        from evalbench.results.summary.taxonomy import diagnose
    except ImportError:  # the failure taxonomy is optional for the report
        return None
    return diagnose


def _enum_value(value: object) -> object:
    return getattr(value, "value", value)


def _diagnosis(record: dict[str, object], diagnose: Diagnose | None) -> dict[str, object]:
    """``dk`` (kind), ``dp`` (phase), ``dm`` (message) of a conversation that did not pass."""
    if diagnose is not None:
        # the record's own verdicts (each phase's primary scorer), as summary.json's taxonomy
        found = diagnose(record, None)
        if found is None:
            return {}
        return {"dk": _enum_value(found.kind), "dp": _enum_value(found.phase), "dm": found.message}
    # Without the taxonomy: the conversation's error, else the first failed verdict's detail.
    if record.get("error"):
        return {"dm": record["error"]}
    for phase in objs(record["phases"]):
        scorer, verdict = _phase_verdict(phase)
        if verdict is False:
            score = obj(obj(phase["scores"]).get(scorer or ""))
            return {"dp": phase["phase"], "dm": phase.get("error") or score.get("detail") or "failed"}
    return {}


def _phase_verdict(phase: Mapping[str, object]) -> tuple[str | None, bool | None]:
    """(scorer, verdict) of a phase: its primary scorer's verdict (recorded since the phase
    records carry ``primary``; else the first applicable pass/fail score). A phase that ended
    early fails; None: no verdict applies."""
    if "primary" in phase:
        primary = phase["primary"]
        scorer: str | None = primary if isinstance(primary, str) else None  # a scorer's name, or null
        verdict = bool(phase.get("passed")) if scorer else None
    else:
        scorer, verdict = None, None
        for name, score in obj_items(phase.get("scores")):
            if score.get("applicable", True) and score.get("passed") is not None:
                scorer, verdict = name, bool(score["passed"])
                break
    if phase.get("outcome") not in (None, Outcome.SCORED.value):
        verdict = False
    return scorer, verdict


def _row(record: dict[str, object], line: int, diagnosis: dict[str, object]) -> dict[str, object]:
    verdicts = [[phase["phase"], *_phase_verdict(phase)] for phase in objs(record["phases"])]
    judged = [v for _, _, v in verdicts if v is not None]
    # pass: scored and every phase's verdict passed (the taxonomy's "passed"); n/a: no verdict applied
    failed = bool(diagnosis) or record.get("outcome") != Outcome.SCORED.value or False in judged
    row: dict[str, object] = {
        "id": record["item_id"], "db": record.get("database"), "dialect": record.get("dialect"),
        "cat": record.get("category"), "diff": record.get("difficulty"), "amb": record.get("ambiguous"),
        "fu": record.get("has_follow_up", False), "outcome": record.get("outcome"), "v": verdicts,
        "pass": "fail" if failed else "pass" if judged else "n/a", "turns": len(seq(record.get("turns"))),
        "reward": record.get("reward"), "elapsed": record.get("elapsed_s"), "line": line,
    }
    return row | ({"trial": trial_of(record)} if trial_of(record) > 1 else {}) | diagnosis


def _search_text(record: dict[str, object]) -> str:
    """What the search box matches: item id, the phases' questions and every SQL (as the page's script)."""
    parts = [str(record["item_id"])]  # texts, all of them (str() of a text is the text)
    for phase in objs(record["phases"]):
        parts += [str(phase.get("question") or ""), str(phase.get("sql") or "")]
    for turn in objs(record["turns"]):
        reply = obj(turn.get("reply"))
        if reply.get("sql"):
            parts.append(str(reply["sql"]))
    return "\n".join(parts)


def _detail(record: dict[str, object]) -> dict[str, object]:
    """The record as embedded: raw agent events stay in the journal (they can be large)."""
    turns = []
    for turn in objs(record.get("turns")):
        reply = turn.get("reply")
        if isinstance(reply, dict) and "raw" in reply:
            turn = turn | {"reply": {k: v for k, v in reply.items() if k != "raw"}}
        turns.append(turn)
    return record | {"turns": turns}


def _sql_diffs(record: dict[str, object]) -> list[list[Segment] | None] | None:
    """Per phase, its first golden SQL against the agent's final SQL as diff segments
    (:func:`~evalbench.results.render.sqldiff.sql_diff`), or None; None when no phase has one."""
    diffs = []
    for phase in objs(record.get("phases")):
        golden = seq(phase.get("golden_sql"))
        sql = phase.get("sql")
        diffs.append(sql_diff(golden[0] if golden and isinstance(golden[0], str) else None,
                              sql if isinstance(sql, str) else None))
    return diffs if any(d is not None for d in diffs) else None


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _dumps(value: object) -> str:
    """JSON safe inside a <script> element: no ``<`` at all (so no ``</script`` or ``<!--``), no NaN."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str)
    except ValueError:
        text = json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"), default=str)
    return text.replace("<", "\\u003c")


# --------------------------------------------------------------------------- formatting


def _e(value: object) -> str:
    return html.escape("—" if value is None or value == "" else str(value), quote=True)


def _pct(rate: object) -> str:
    return "—" if rate is None else f"{100 * number(rate):.1f}%"


def _secs(value: object) -> str:
    if value is None:
        return "—"
    seconds = number(value)
    if seconds < 1:
        return f"{1000 * seconds:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def _when(stamp: object) -> str:
    return format_stamp(stamp if isinstance(stamp, str) else None, "%Y-%m-%d %H:%M:%S", " UTC")


def _ci(tally: Mapping[str, object]) -> str:
    ci = tally.get("ci")
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or None in ci:
        return ""
    return f'<span class="ci">95% CI {_pct(ci[0])} – {_pct(ci[1])}</span>'


def _participant(value: object, key: str) -> str:
    described = obj(value)
    if not described:
        return "—"
    name = str(described.get(key) or "—")
    model = described.get("model")
    return f"{name} ({model})" if model else name


# --------------------------------------------------------------------------- sections


def _page(run_id: str, body: str) -> tuple[str, str]:
    """The page before and after its embedded data."""
    head, tail = page_shell(f"evalbench · run {_e(run_id)}", CSS, JS, body)
    return head + '<script type="application/json" id="evalbench-data">', "</script>\n" + tail


def _header(manifest: Mapping[str, object], summary: Mapping[str, object], run_dir: Path) -> str:
    run_id = summary.get("run_id") or manifest.get("run_id") or run_dir.name
    dataset = obj(manifest.get("dataset") or summary.get("dataset"))
    dataset_text = str(dataset.get("path") or "—")
    if dataset.get("items") is not None:
        dataset_text += f" ({dataset['items']} items"
        dataset_text += f", {dataset['format']})" if dataset.get("format") else ")"
    rate = summary.get("conversations_per_s")
    git_sha = manifest.get("git_sha")
    fields = [
        ("Created", _when(manifest.get("created_at"))),
        ("Agent", _participant(manifest.get("agent"), "agent")),
        ("Virtual user", _participant(manifest.get("vuser"), "vuser")),
        ("Dataset", dataset_text),
        ("Config fingerprint", manifest.get("config_fingerprint")),
        ("Elapsed", _secs(summary.get("elapsed_s"))),
        ("Conversations / s", f"{rate:,.1f}" if isinstance(rate, (int, float)) else None),
        ("Conversations", f"{summary.get('total_items', 0):,}"),
        ("Seed", manifest.get("seed")),
        ("evalbench", str(manifest.get("evalbench_version") or "—") + (f" · {str(git_sha)[:10]}" if git_sha else "")),
    ]
    meta = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in fields)
    return (
        '<header class="top"><div class="wrap">'
        '<div class="eyebrow">evalbench run report</div>'
        f"<h1>Run <code>{_e(run_id)}</code></h1>"
        f'<dl class="meta">{meta}</dl>'
        '<nav class="toc" aria-label="Sections"><a href="#summary">Summary</a><a href="#slices">Slices</a>'
        '<a href="#conversations">Conversations</a></nav>'
        "</div></header>"
    )


def _notices(summary: dict[str, object], recomputed: bool, total: int, embedded: int, detail_note: str) -> list[str]:
    out = []
    if recomputed:
        out.append('<div class="notice">summary.json is missing (the run did not finish): '
                   "the summary below is recomputed from the journal.</div>")
    if summary.get("cancelled"):
        out.append('<div class="notice">This run was cancelled before every conversation completed.</div>')
    incomplete = incomplete_note(summary)
    if incomplete:
        out.append(f'<div class="notice bad">{_e(incomplete[0].upper() + incomplete[1:])}. '
                   "Its rates cover only the conversations in the journal (summary.json: completeness).</div>")
    errors = seq(summary.get("record_errors"))
    if errors or obj(summary.get("dataset")).get("record_errors"):
        count = len(errors) or obj(summary["dataset"])["record_errors"]
        out.append(f'<div class="notice bad">{count} dataset record(s) could not be loaded and were not run '
                   "(summary.json: record_errors).</div>")
    for key, info in obj(summary.get("databases")).items():
        if isinstance(info, dict) and info.get("error"):
            out.append(f'<div class="notice bad">Database {_e(key)}: setup failed: {_e(info["error"])}</div>')
        elif isinstance(info, dict) and info.get("warning"):
            out.append(f'<div class="notice">Database {_e(key)}: {_e(info["warning"])}</div>')
    if embedded < total:
        out.append(f'<div class="notice">Large run: {_e(detail_note)} Every conversation is in the table; '
                   "the others open without their turns (see conversations.jsonl).</div>")
    for note in verdict_notes(summary, listed=20):
        tone = " bad" if note.startswith("invalid items") else " info"
        out.append(f'<div class="notice{tone}">{_e(note)}</div>')
    return out


def _card(label: str, value: str, sub: str = "") -> str:
    return f'<div class="card"><div class="k">{_e(label)}</div><div class="v">{_e(value)}</div><div class="s">{sub}</div></div>'


def _summary_section(summary: dict[str, object], primary: str | None, taxonomy: Mapping[str, object], from_summary: bool) -> str:
    total_items = summary.get("total_items", 0)
    total = total_items if isinstance(total_items, int) else 0  # a count
    outcomes = {name: count for name, count in obj(summary.get("outcomes")).items() if isinstance(count, int)}  # counts
    conv = obj(summary.get("conversation"))
    cards = []
    success = obj_items(summary.get("success"))  # each phase's own verdict, over every conversation
    if success:
        rates = [(f"Success · {phase.replace('_', '-')}", tally, tally.get("total", 0)) for phase, tally in success]
    else:
        rates = [(f"{primary} · {phase.replace('_', '-')}", tally, tally.get("applicable", 0))
                 for phase, tally in obj_items(obj(summary.get("scorers")).get(primary or "")) if "rate" in tally]
    for label, tally, denominator in rates:
        ci = _ci(tally)
        cards.append(_card(label, _pct(tally.get("rate")), _e(f"{tally.get('passed', 0):,}/{denominator:,} passed")
                           + (f"<br>{ci}" if ci else "")))
    scored = outcomes.get(Outcome.SCORED.value, 0)
    cards.append(_card("Conversations", f"{total:,}", _e(f"{scored:,} scored, {total - scored:,} ended early")))
    if conv.get("mean_reward") is not None:
        cards.append(_card("Mean reward", f"{conv['mean_reward']:.3f}", "BIRD-Interact, max 1.0"))
    if conv.get("mean_turns") is not None:
        cards.append(_card("Mean turns", f"{conv['mean_turns']:.2f}", _e(f"{conv.get('clarifications', 0):,} clarifications")))

    return (
        '<section id="summary" aria-labelledby="summary-h"><div class="section-head"><h2 id="summary-h">Summary</h2>'
        '<span class="hint">every conversation counts in every denominator (invalid items, whose golden SQL fails, '
        "are listed apart); success is each phase\'s verdict (its declared primary scorer)</span></div>"
        f'<div class="cards">{"".join(cards)}</div>'
        '<div class="grid">'
        f'<div class="panel wide"><h3>Scorers</h3>{_scorer_table(summary)}</div>'
        f'<div class="panel"><h3>Outcomes</h3>{_outcome_chart(outcomes, total)}</div>'
        f'<div class="panel"><h3>Conversation statistics</h3>{_conversation_stats(conv, summary.get("infra_errors"))}</div>'
        + _cost_panel(maybe_obj(summary.get("cost")))
        + (f'<div class="panel"><h3>Failure taxonomy</h3>{_taxonomy_chart(taxonomy, from_summary)}</div>' if taxonomy else "")
        + "</div></section>"
    )


def _scorer_table(summary: Mapping[str, object]) -> str:
    rows = []
    for name, phases in obj_items(summary.get("scorers")):
        for phase, tally in obj_items(phases):
            flags = ", ".join(f"{k} {v}" for k, v in obj(tally.get("flags")).items())
            if "rate" in tally:
                rate = tally["rate"]
                meter = (f'<span class="meter" aria-hidden="true"><span style="width:{100 * number(rate):.1f}%"></span></span>'
                         if rate is not None else "")
                score = f"{meter}{_pct(rate)}"
                ci = _ci(tally)
                if ci:
                    score += f"<br>{ci}"
                counts = f"{tally['passed']:,} / {tally['applicable']:,}"
            else:
                mean = tally.get("mean")
                score = "—" if mean is None else f"mean {mean:,.3g}"
                counts = f"{tally['applicable']:,}"
            rows.append(f"<tr><td><code>{_e(name)}</code></td><td>{_e(phase.replace('_', '-'))}</td>"
                        f'<td class="num">{score}</td><td class="num">{counts}</td>'
                        f'<td class="num">{tally.get("not_applicable", 0):,}</td><td>{_e(flags) if flags else ""}</td></tr>')
    if not rows:
        return '<p class="empty">No scores.</p>'
    return ('<table class="plain"><thead><tr><th scope="col">Scorer</th><th scope="col">Phase</th>'
            '<th scope="col" class="num">Score</th><th scope="col" class="num">Passed / applicable</th>'
            '<th scope="col" class="num">N/A</th><th scope="col">Flags</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def _cost_panel(cost: dict[str, object] | None) -> str:
    """Tokens and USD per role (the agent, the virtual user, each judge), with the caveats
    (unknown prices, unreported usage, replayed roles); nothing for a summary without a cost."""
    rows = cost_rows(cost)
    if not rows:
        return ""

    def cell(tag: str, index: int, text: str) -> str:
        num = ' class="num"' if index > 1 else ""  # the counts and the cost
        scope = ' scope="col"' if tag == "th" else ""
        return f"<{tag}{scope}{num}>{_e(text)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(COST_HEADER))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    notes = "".join(f'<p class="hint">{_e(line)}</p>' for line in cost_lines(cost)[1:])
    return (f'<div class="panel wide"><h3>Cost of model calls</h3><table class="plain"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>{notes}</div>")


def _conversation_stats(conv: Mapping[str, object], infra: object) -> str:
    if not conv:
        return '<p class="empty">No statistics.</p>'
    tokens = obj(conv.get("tokens"))
    actions = ", ".join(f"{k} {v:,}" for k, v in sorted(obj(conv.get("vuser_actions")).items()))
    latency = conv.get("mean_agent_latency_s")
    stats = [
        ("Turns", f"{conv.get('turns', 0):,} (mean {conv.get('mean_turns')})"),
        ("Clarifications", f"{conv.get('clarifications', 0):,}"),
        ("Follow-up phases", f"{conv.get('follow_up_phases', 0):,}"),
        ("Agent sessions", f"{conv.get('sessions_opened', 0):,}"),
        ("Agent calls", f"{conv.get('agent_calls', 0):,}, mean latency {_secs(latency)}"),
        ("Tokens", f"{tokens.get('total', 0):,} (prompt {tokens.get('prompt', 0):,}, completion {tokens.get('completion', 0):,})"),
        ("Virtual user", f"{conv.get('vuser_replies', 0):,} replies" + (f" ({actions})" if actions else "")),
        ("Leaking replies", f"{conv.get('vuser_leaks', 0):,}"),
        ("Virtual user errors", f"{conv.get('vuser_errors', 0):,}"),
        ("Mean reward", conv.get("mean_reward")),
    ]
    if conv.get("tools"):
        stats.insert(5, ("Discovery tools", tools_text(obj(conv["tools"]))))
    if infra is not None:  # db_error + vuser_error outcomes
        stats.insert(-1, ("Infrastructure errors", f"{infra:,}"))
    return '<dl class="stats">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in stats) + "</dl>"


# --------------------------------------------------------------------------- charts (inline SVG)


@dataclass
class _Bar:
    label: str
    fraction: float  # of the full bar width
    text: str  # right of the bar
    tone: str = ""  # "", ok, bad, warn, na
    tooltip: str = ""
    ci: tuple[float, float] | None = None


def _svg_bars(bars: list[_Bar], label: str) -> str:
    """A horizontal bar chart; scales with its container (viewBox), styled by the page's CSS."""
    width, label_w, text_w, bar_h, gap, pad = 460, 150, 100, 16, 7, 2
    track_w = width - label_w - text_w - 8
    height = pad * 2 + len(bars) * (bar_h + gap) - gap
    out = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{_e(label)}">']
    for i, bar in enumerate(bars):
        y = pad + i * (bar_h + gap)
        mid = y + bar_h / 2
        shown = bar.label if len(bar.label) <= 20 else bar.label[:19] + "…"
        out.append(f"<g><title>{_e(bar.tooltip or f'{bar.label}: {bar.text}')}</title>")
        out.append(f'<text x="{label_w - 10}" y="{mid:.1f}" text-anchor="end" dominant-baseline="central">{_e(shown)}</text>')
        out.append(f'<rect class="track" x="{label_w}" y="{y}" width="{track_w}" height="{bar_h}" rx="3"/>')
        filled = max(0.0, min(1.0, bar.fraction)) * track_w
        if filled > 0:
            out.append(f'<rect class="bar {bar.tone}" x="{label_w}" y="{y}" width="{max(filled, 2):.1f}" height="{bar_h}" rx="3"/>')
        if bar.ci is not None:
            lo, hi = (label_w + max(0.0, min(1.0, v)) * track_w for v in bar.ci)
            out.append(f'<path class="whisker" d="M{lo:.1f} {mid:.1f}H{hi:.1f}M{lo:.1f} {mid - 4:.1f}V{mid + 4:.1f}'
                       f'M{hi:.1f} {mid - 4:.1f}V{mid + 4:.1f}"/>')
        out.append(f'<text class="val" x="{label_w + track_w + 8}" y="{mid:.1f}" dominant-baseline="central">{_e(bar.text)}</text></g>')
    out.append("</svg>")
    return "".join(out)


_OUTCOME_TONE = {"scored": "ok", "max_turns": "warn", "timeout": "warn", "cancelled": "na"}


def _outcome_chart(outcomes: dict[str, int], total: int) -> str:
    if not outcomes:
        return '<p class="empty">No conversations.</p>'
    biggest = max(outcomes.values()) or 1
    bars = [_Bar(name, count / biggest, f"{count:,}" + (f" ({100 * count / total:.1f}%)" if total else ""),
                 _OUTCOME_TONE.get(name, "bad")) for name, count in outcomes.items()]
    return _svg_bars(bars, "Conversations by outcome")


def _taxonomy_chart(taxonomy: Mapping[str, object], from_summary: bool) -> str:
    counts: list[tuple[str, int]] = []
    for kind, value in taxonomy.items():
        count = value.get("count") if isinstance(value, dict) else value
        if isinstance(count, (int, float)):
            counts.append((str(kind), int(count)))
    counts.sort(key=lambda kv: -kv[1])
    if not counts:
        return '<p class="empty">No failures.</p>'
    biggest = max(c for _, c in counts) or 1
    total = sum(c for _, c in counts)
    bars = [_Bar(kind, count / biggest, f"{count:,} ({100 * count / total:.0f}%)" if total else f"{count:,}", "bad")
            for kind, count in counts]
    source = "summary.json" if from_summary else "diagnoses of the conversations below"
    return _svg_bars(bars, "Failures by kind") + f'<p class="hint">{total:,} diagnosed failures, from {_e(source)}.</p>'


_DIFFICULTY_RANK = {name: i for i, name in enumerate(["simple", "easy", "moderate", "medium", "challenging", "hard", "extra"])}


def _slice_values(key: str, values: Mapping[str, object]) -> Iterable[tuple[str, dict[str, object]]]:
    items = obj_items(values)
    if key == "difficulty":
        items.sort(key=lambda kv: (_DIFFICULTY_RANK.get(kv[0].lower(), 99), kv[0]))
    if len(items) > MAX_SLICE_BARS:
        items = sorted(items, key=lambda kv: -number(kv[1].get("total", 0)))[:MAX_SLICE_BARS]
    return items


def _slice_label(key: str, value: str) -> str:
    if value == "None":
        return "(none)"
    if key == "ambiguous":
        return {"True": "ambiguous", "False": "clear"}.get(value, value)
    return value


def _slices_section(summary: Mapping[str, object]) -> str:
    panels = []
    for key, values in obj_items(summary.get("slices")):
        bars = []
        for value, tally in _slice_values(key, values):
            rate = tally.get("rate")
            ci = tally.get("ci")
            ci_pair = (float(ci[0]), float(ci[1])) if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci else None
            text = f"{_pct(rate)}  n={tally.get('total', 0):,}"
            tip = f"{_slice_label(key, value)}: {_pct(rate)} ({tally.get('passed', 0):,}/{tally.get('total', 0):,} passed)"
            if ci_pair:
                tip += f", 95% CI {_pct(ci_pair[0])} – {_pct(ci_pair[1])}"
            bars.append(_Bar(_slice_label(key, value), number(rate) or 0.0, text, tooltip=tip, ci=ci_pair))
        more = len(values) - len(bars)
        note = f'<p class="hint">{more:,} more values with fewer conversations are not drawn.</p>' if more > 0 else ""
        panels.append(f'<div class="panel"><h3>By {_e(key.replace("_", " "))}</h3>'
                      f"{_svg_bars(bars, f'Success rate by {key}')}{note}</div>")
    content = f'<div class="slices">{"".join(panels)}</div>' if panels else '<p class="empty">No slices.</p>'
    return (
        '<section id="slices" aria-labelledby="slices-h"><div class="section-head"><h2 id="slices-h">Success rate by slice</h2>'
        '<span class="hint">the main phase\'s verdict (the phase slice: each phase\'s); n = conversations counted; '
        "whiskers: 95% CI when summary.json has it</span></div>" + content + "</section>"
    )


# --------------------------------------------------------------------------- conversations


_COLUMNS = [("id", "Item", ""), ("db", "Database", ""), ("cat", "Category", ""), ("diff", "Difficulty", ""),
            ("amb", "Ambiguous", ""), ("outcome", "Outcome", ""), ("v", "Primary verdict", ""),
            ("turns", "Turns", "num"), ("reward", "Reward", "num"), ("elapsed", "Elapsed", "num"), ("diag", "Diagnosis", "")]


def _select(ident: str, label: str, options: str = "") -> str:
    return f'<label for="{ident}">{_e(label)}<select id="{ident}"><option value="">All</option>{options}</select></label>'


def _conversations_section(with_diagnosis_filter: bool) -> str:
    heads = "".join(f'<th scope="col" data-sort="{key}" class="{cls}"><button type="button">{_e(title)}</button></th>'
                    for key, title, cls in _COLUMNS)
    verdicts = ('<option value="pass">pass</option><option value="fail">fail</option>'
                '<option value="n/a">n/a</option>')
    filters = "".join([
        '<label for="q">Search<input type="search" id="q" placeholder="item id, question or SQL" autocomplete="off"></label>',
        _select("f-outcome", "Outcome"),
        _select("f-verdict", "Pass / fail", verdicts),
        _select("f-database", "Database"),
        _select("f-category", "Category"),
        _select("f-difficulty", "Difficulty"),
        _select("f-diagnosis", "Diagnosis") if with_diagnosis_filter else "",
        '<button type="button" id="reset">Reset</button>',
        '<p class="count" aria-live="polite"><strong id="visible-count">0</strong> conversations match'
        '<span id="visible-note"></span></p>',
    ])
    return (
        '<section id="conversations" aria-labelledby="conv-h"><div class="section-head"><h2 id="conv-h">Conversations</h2>'
        '<span class="hint">click a row, or focus it and press Enter, to see the turns, SQL, results and scores</span></div>'
        f'<div class="filters" role="search">{filters}</div>'
        '<div class="table-wrap"><table id="conv-table" aria-label="Conversations of this run">'
        f"<thead><tr>{heads}</tr></thead><tbody id=\"conv-body\"></tbody></table>"
        '<p id="no-rows" class="empty" style="padding:12px" hidden>No conversation matches.</p>'
        '<div class="more"><button type="button" id="more" hidden>Show more</button></div></div>'
        "<noscript><p>The conversations table needs JavaScript.</p></noscript>"
        "</section>"
    )


_DIALOG = (
    '<dialog id="detail" aria-labelledby="detail-title">'
    '<div class="dlg-head"><h2 id="detail-title"></h2><span class="pos" id="detail-pos"></span>'
    '<button type="button" id="prev" aria-label="Previous conversation">‹ Previous</button>'
    '<button type="button" id="next" aria-label="Next conversation">Next ›</button>'
    '<button type="button" id="close" aria-label="Close" autofocus>Close</button></div>'
    '<div class="dlg-body" id="detail-body"></div></dialog>'
)


__all__ = ["MAX_DETAILS", "MAX_DETAIL_BYTES", "REPORT", "render_report", "write_report"]
