"""``evalbench explain RUN_DIR ITEM_ID``: one conversation of a run, told turn by turn.

:func:`find_record` streams the run's journal to the item's record; :func:`render_explanation`
turns a record into text: every turn (the user's or the virtual user's message, the virtual
user's action, the agent's reply kind, text, tool calls and SQL), each phase's generated and
golden results side by side (row counts, columns, errors, preview rows as a small table), a
diff of the first golden SQL against the final SQL (:mod:`evalbench.results.render.sqldiff`), the scores
with their details, the timings, and at the end ``Diagnosis: <kind> — <message>`` (see
:mod:`evalbench.results.summary.taxonomy`) or ``Passed``. Everything comes from the record alone.
"""

from __future__ import annotations

import difflib
import json
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path

from evalbench.core.errors import EvalbenchError
from evalbench.core.json_types import maybe_number, maybe_obj, number, obj, objs, seq
from evalbench.core.terminal import escape
from evalbench.results.journal.files import JOURNAL
from evalbench.results.journal.reader import read_journal
from evalbench.results.render.sqldiff import sql_diff
from evalbench.results.summary.cost import usd
from evalbench.results.summary.taxonomy import diagnose

CLOSE_IDS = 5  # close matches named when an item is not in the journal
CELL = 24  # characters of one preview cell
TEXT_LIMIT = 2_000  # characters of one message or SQL shown


class RecordNotFoundError(EvalbenchError):
    """The run directory has no journal, or the journal has no record of the item."""

    exit_code = 2


def find_record(run_dir: Path | str, item_id: str) -> dict[str, object]:
    """The journal record of ``item_id`` in the run at ``run_dir`` (the first, if several).

    Raises :class:`RecordNotFoundError` naming a few close item ids when it is not there."""
    run_dir = Path(run_dir)
    journal = run_dir / JOURNAL
    if not os.path.lexists(journal):  # anything else there is refused, naming it, by read_journal
        raise RecordNotFoundError(f"{journal}: no such journal (is {run_dir} a run directory, results/<run_id>/?)")
    seen: list[str] = []
    records = read_journal(run_dir)  # lines cut short or unreadable are skipped with a warning
    try:
        for record in records:
            if record.get("item_id") == item_id:
                return record
            seen.append(str(record.get("item_id")))
    finally:
        records.close()  # stopping early: close the journal now, not when the generator is collected
    close = difflib.get_close_matches(item_id, seen, n=CLOSE_IDS, cutoff=0.5)
    hint = f"; close ids: {', '.join(close)}" if close else (f"; ids look like: {', '.join(seen[:3])}" if seen else "")
    raise RecordNotFoundError(f"item {item_id!r} is not in {journal} ({len(seen)} conversation(s)){hint}")


def render_explanation(record: dict[str, object], *, width: int = 100, primary: str | None = None) -> str:
    """The conversation of ``record`` as text, about ``width`` characters wide."""
    width = max(width, 40)
    out: list[str] = []
    out.extend(_wrap(f"Item {record.get('item_id')} · run {record.get('run_id')} · {record.get('dialect')}/{record.get('database')}",
                     width, ""))
    facts = [f"category {record.get('category')}", f"difficulty {record.get('difficulty') or '—'}",
             f"ambiguous {'yes' if record.get('ambiguous') else 'no'}", f"follow-up {'yes' if record.get('has_follow_up') else 'no'}"]
    if record.get("source"):
        facts.append(f"source {record['source']}")
    out.extend(_wrap(" · ".join(facts), width, ""))
    outcome = f"Outcome: {record.get('outcome')}" + (f" ({_one_line(record['error'])})" if record.get("error") else "")
    outcome += f" · reward {record.get('reward')} · leaking vuser replies {record.get('leaks', 0)} · seed {record.get('seed')}"
    out.extend(_wrap(outcome, width, ""))
    turns = objs(record.get("turns"))
    for phase in objs(record.get("phases")):
        name = phase.get("phase")
        out.append("")
        out.append(_rule(f" {name} phase ", width))
        out.extend(_wrap(f"Question: {phase.get('question')}", width, "  "))
        phase_turns = [t for t in turns if t.get("phase") == name]
        for position, turn in enumerate(phase_turns):
            following = phase_turns[position + 1] if position + 1 < len(phase_turns) else None
            out.extend(_turn_lines(turn, following, width))
        out.append("")
        out.extend(phase_lines(phase, width=width, sql=False))
        out.extend(_diff_lines(phase, width))
    out.append("")
    out.extend(_wrap(_timings(record), width, ""))
    if isinstance(record.get("usage"), dict):  # journals before it: the tokens above are all there is
        out.extend(_wrap(_cost(record), width, ""))
    out.append("")
    diagnosis = diagnose(record, primary)
    if diagnosis is None:
        out.append("Passed")
    else:
        out.extend(_wrap(f"Diagnosis: {diagnosis.kind.value} — {diagnosis.message}", width, ""))
        flags = f" · flags: {', '.join(f'[{f}]' for f in diagnosis.flags)}" if diagnosis.flags else ""
        out.append(f"Diagnosed phase: {diagnosis.phase}{flags}")
    return "\n".join(out) + "\n"


def phase_lines(phase: Mapping[str, object], *, width: int = 100, preview: bool = True, sql: bool = True) -> list[str]:
    """A phase's outcome, final SQL (``sql``), generated vs golden results (with their preview
    rows when ``preview``) and scores, as text lines (shared with the JUnit report)."""
    out = []
    status = f"Result of the {phase.get('phase')} phase: outcome {phase.get('outcome')}"
    status += f" · clarifications {phase.get('clarifications', 0)} of {phase.get('clarification_budget', '?')}"
    if phase.get("debug_used"):
        status += f" · debugging attempts {phase['debug_used']}"
    out.extend(_wrap(status, width, ""))
    if phase.get("error"):
        out.extend(_wrap(f"error: {_one_line(phase['error'])}", width, "  "))
    for position, attempt in enumerate(objs(phase.get("attempts")), 1):
        verdicts = ", ".join(f"{k} {_verdict(v)}" for k, v in obj(attempt.get("scores")).items())
        out.append(f"  earlier attempt {position}: {verdicts}")
        out.extend(_block(attempt.get("sql") or "(no SQL)", width, "    "))
    if sql and phase.get("sql"):
        out.append("  final SQL:")
        out.extend(_block(phase["sql"], width, "    "))
    if phase.get("answer") and not phase.get("sql"):  # an answer in words, shown next to the golden result
        out.append("  answer in words:")
        out.extend(_wrap(_clip(str(phase["answer"])), width, "    "))
    if phase.get("compared_sql"):
        out.append("  compared as (BIRD-Interact's cleaning):")
        out.extend(_block(phase["compared_sql"], width, "    "))
    generated = maybe_obj(phase.get("generated"))
    out.extend(_wrap("generated: " + _result_head(generated), width, "  ", "      "))
    if preview and generated:
        out.extend(_table(generated, width, "    "))
    goldens = [maybe_obj(golden) for golden in seq(phase.get("golden"))]
    for index, golden in enumerate(goldens, 1):
        label = "golden" if len(goldens) == 1 else f"golden {index}"
        out.extend(_wrap(f"{label}: " + _result_head(golden), width, "  ", "      "))
        if preview and golden:
            out.extend(_table(golden, width, "    "))
    if not goldens:
        out.append("  golden: not executed")
    scores = {name: obj(score) for name, score in obj(phase.get("scores")).items()}
    if scores:
        out.append("  scores:")
        name_width = max(len(n) for n in scores)
        for name, score in scores.items():
            if not score.get("applicable", True):
                value = "n/a"
            elif score.get("passed") is not None:
                value = "pass" if score["passed"] else "FAIL"
            else:
                value = _number(score.get("value"))
            flags = f" [{', '.join(map(str, seq(score['flags'])))}]" if score.get("flags") else ""
            line = f"{name.ljust(name_width)}  {value:<5} {_one_line(str(score.get('detail') or ''))}{flags}"
            out.extend(_wrap(line, width, "    ", " " * (name_width + 12)))
    return out


# --------------------------------------------------------------------------- pieces


def _diff_lines(phase: Mapping[str, object], width: int) -> list[str]:
    """The first golden SQL against the final SQL, wdiff style: ``[-golden only-]{+generated only+}``."""
    golden = seq(phase.get("golden_sql"))
    sql = phase.get("sql")
    diff = sql_diff(golden[0] if golden and isinstance(golden[0], str) else None, sql if isinstance(sql, str) else None)
    if diff is None:
        return []
    text = "".join(t if op == "=" else f"[-{t}-]" if op == "-" else f"{{+{t}+}}" for op, t in diff)
    return ["  SQL diff (golden → final; [-golden only-] {+generated only+}):", *_block(text, width, "    ")]



def _turn_lines(turn: dict[str, object], following: dict[str, object] | None, width: int) -> list[str]:
    index = turn.get("index", 0)
    out = [f"  Turn {int(index if isinstance(index, (int, float, str)) else 0) + 1} · {turn.get('user_role')}:"]
    out.extend(_wrap(_clip(str(turn.get("user_text") or "")), width, "    "))
    reply = maybe_obj(turn.get("reply"))
    if reply is None:
        out.append("    agent: no reply (the conversation ended first)")
    else:
        head = f"    agent → {reply.get('kind')} ({_seconds(reply.get('latency_s'))}"
        usage = obj(reply.get("usage"))
        if usage.get("total"):
            head += f", {usage['total']} tokens"
        out.append(head + ")")
        if reply.get("text"):
            out.extend(_wrap(_clip(str(reply["text"])), width, "      "))
        for call in objs(reply.get("tool_calls")):
            args = json.dumps(call.get("args") or {}, ensure_ascii=False, default=str)
            line = f"tool call {call.get('name')}({args})"
            if call.get("outcome"):  # run by the harness: how it went, how long, how much it returned
                line += f" [{call['outcome']}, {call.get('latency_s') or 0:.3f} s, {call.get('result_bytes') or 0} B]"
            if call.get("response") is not None:
                line += " → " + json.dumps(call["response"], ensure_ascii=False, default=str)
            out.extend(_wrap(_clip(line, 500), width, "      "))
        if reply.get("sql"):
            out.append("      SQL:")
            out.extend(_block(reply["sql"], width, "        "))
        if reply.get("error"):
            kind = f" [{reply['error_kind']}]" if reply.get("error_kind") else ""
            out.extend(_wrap(f"error{kind}: {_one_line(reply['error'])}", width, "      "))
    vuser = obj(turn.get("vuser"))
    if vuser:
        action = vuser.get("action") or "no action"
        out.append(f"    virtual user → {action}")
        if vuser.get("error"):
            out.extend(_wrap(f"error: {_one_line(vuser['error'])}", width, "      "))
        answered = following is not None and following.get("user_role") == "vuser"
        if vuser.get("text") and not answered:  # else its text opens the next turn
            out.extend(_wrap(_clip(str(vuser["text"])), width, "      "))
        audit = obj(vuser.get("audit"))
        for leak in seq(audit.get("leaks")):
            out.extend(_wrap(f"LEAK: {leak}", width, "      "))
        if audit.get("regenerated"):
            out.extend(_wrap(f"(regenerated after leaking: {'; '.join(map(str, seq(audit.get('first_leaks'))))})", width, "      "))
    return out


def _result_head(result: Mapping[str, object] | None) -> str:
    if result is None:
        return "not executed"
    head = f"{result.get('row_count')} row(s){'+ (truncated at the row cap)' if result.get('truncated') else ''}"
    columns = seq(result.get("columns"))
    head += f" × {len(columns)} column(s)"
    if columns:
        head += " (" + ", ".join(str(c) for c in columns[:8]) + (", ..." if len(columns) > 8 else "") + ")"
    head += f" in {_seconds(result.get('elapsed_s'))}"
    if result.get("error"):
        kind = f" [{result['error_kind']}]" if result.get("error_kind") else ""
        head += f"; ERROR{kind}: {_one_line(result['error'])}"
    return head


def _table(result: Mapping[str, object], width: int, indent: str) -> list[str]:
    rows = [row for row in seq(result.get("preview")) if isinstance(row, list)]
    if not rows:
        return []
    columns = [str(c) for c in seq(result.get("columns"))]
    count = max(len(columns), *(len(r) for r in rows))
    header = columns + [""] * (count - len(columns))
    cells = [[_cell(v) for v in list(row) + [""] * (count - len(row))] for row in rows]
    widths = [max(len(_clip_cell(escape(header[i]))), *(len(r[i]) for r in cells)) for i in range(count)]
    lines = []
    for values in [[_clip_cell(escape(h)) for h in header], *cells]:
        line = indent + "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=False)) + " |"
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    separator = indent + "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    lines.insert(1, separator if len(separator) <= width else separator[:width])
    more = int(number(result.get("row_count"))) - len(rows)
    if more > 0:
        lines.append(f"{indent}… {more} more row(s) not kept in the journal")
    return lines


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return _clip_cell(" ".join(escape(text).split()))


def _clip_cell(text: str) -> str:
    return text if len(text) <= CELL else text[: CELL - 1] + "…"


def _timings(record: dict[str, object]) -> str:
    parts = [f"Timings: conversation {_seconds(record.get('elapsed_s'))}"]
    stages = obj(record.get("stage_seconds"))
    if stages:
        parts.append("stages " + ", ".join(f"{k} {_seconds(v)}" for k, v in stages.items()))
    replies = [obj(t["reply"]) for t in objs(record.get("turns")) if t.get("reply")]
    if replies:
        total = sum(float(number(r.get("latency_s"))) for r in replies)
        parts.append(f"agent {_seconds(total)} over {len(replies)} call(s)")
    tokens = obj(record.get("tokens"))
    if tokens.get("total") or tokens.get("prompt") or tokens.get("completion"):
        parts.append(f"tokens {tokens.get('prompt', 0)} prompt + {tokens.get('completion', 0)} completion = {tokens.get('total', 0)}")
    return " · ".join(parts)


def _cost(record: dict[str, object]) -> str:
    """The conversation's model calls per role and what they cost (the journal's ``usage``)."""
    parts = [f"Cost: {usd(maybe_number(record.get('cost_usd')))}"]
    for role, entry in obj(record["usage"]).items():
        if isinstance(entry, dict) and (entry.get("calls") or entry.get("total")):
            model = f" {entry['model']}" if entry.get("model") else ""
            parts.append(f"{role}{model} {usd(maybe_number(entry.get('cost_usd')))} ({entry.get('total', 0)} tokens, {entry.get('calls', 0)} "
                         f"call(s){', replayed' if entry.get('replayed') else ''})")
    return " · ".join(parts)


def _seconds(value: object) -> str:
    if not isinstance(value, (int, float, str)):  # null, or not a number: float() would raise TypeError
        return "? s"
    try:
        return f"{float(value):.3f} s"
    except (TypeError, ValueError):
        return "? s"


def _number(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "—" if value is None else str(value)


def _verdict(passed: object) -> str:
    return "pass" if passed is True else "FAIL" if passed is False else "—"


def _rule(title: str, width: int) -> str:
    return "──" + title + "─" * max(0, width - len(title) - 2)


def _one_line(text: object) -> str:
    return _clip(" ".join(str(text).split()), 500)


def _clip(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"


def _wrap(text: str, width: int, indent: str, hanging: str | None = None) -> list[str]:
    """Paragraphs of ``text`` wrapped at ``width``: first lines start with ``indent``,
    continuation lines with ``hanging`` (default: two more spaces than ``indent``)."""
    hanging = indent + "  " if hanging is None else hanging
    lines: list[str] = []
    for paragraph in escape(text.replace("\r\n", "\n")).split("\n"):
        wrapped = textwrap.wrap(paragraph, width=width, initial_indent=indent, subsequent_indent=hanging,
                                break_on_hyphens=False) or [indent.rstrip()]
        lines.extend(wrapped)
    return lines


def _block(text: object, width: int, indent: str) -> list[str]:
    """SQL or other preformatted text: its own line breaks kept, long lines wrapped."""
    lines: list[str] = []
    for line in escape(_clip(str(text)).rstrip().replace("\r\n", "\n")).split("\n"):
        stripped = line.rstrip()
        lead = len(stripped) - len(stripped.lstrip())
        lines.extend(textwrap.wrap(stripped.lstrip(), width=width, initial_indent=indent + " " * lead,
                                   subsequent_indent=indent + " " * (lead + 2), break_on_hyphens=False,
                                   drop_whitespace=True) or [""])
    return lines


__all__ = ["RecordNotFoundError", "find_record", "phase_lines", "render_explanation"]
