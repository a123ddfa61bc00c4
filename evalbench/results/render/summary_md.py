"""``summary.md``: a run's summary as GitHub-flavoured markdown, for a CI job summary
(``cat results/<run_id>/summary.md >> "$GITHUB_STEP_SUMMARY"``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evalbench.core.json_types import maybe_obj, number, obj, obj_items, seq
from evalbench.results.gates import GateResult
from evalbench.results.summary.aggregate import tools_text, verdict_notes
from evalbench.results.summary.cost import COST_HEADER, cost_lines, cost_rows


def _pct(rate: object) -> str:
    return "—" if rate is None else f"{100 * number(rate):.1f}%"


def _ci(ci: object) -> str:
    bounds = seq(ci)
    return "—" if not bounds else f"{100 * number(bounds[0]):.1f}–{100 * number(bounds[1]):.1f}%"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def incomplete_note(summary: Mapping[str, object]) -> str | None:
    """One line saying why the run is incomplete (summary.json: ``complete``, ``completeness``);
    None when it is complete, or when the summary does not say (older runs)."""
    if summary.get("complete") is not False:
        return None
    info = obj(summary.get("completeness"))
    reasons = "; ".join(map(str, seq(info.get("reasons")))) or "see summary.json: completeness"
    return f"incomplete run: {reasons}"


def render_summary_markdown(summary: dict[str, object], gates: Sequence[GateResult] = ()) -> str:
    lines = [f"## evalbench run `{summary.get('run_id')}`", ""]
    total = summary.get("total_items", 0)
    if gates:
        failed = [g for g in gates if not g.passed]
        lines += [f"**{'FAILED' if failed else 'PASSED'}**: {len(gates) - len(failed)} of {len(gates)} gate(s) passed", ""]
        lines += ["| gate | result | detail |", "|---|---|---|"]
        lines += [f"| {_cell(g.name)} | {'pass' if g.passed else '**FAIL**'} | {_cell(g.message)} |" for g in gates]
        lines.append("")
    incomplete = incomplete_note(summary)
    if incomplete:
        head, _, rest = incomplete.partition(": ")
        lines += [f"> **{head.capitalize()}:** {_cell(rest)}. Its rates cover only the conversations in the journal.", ""]
    lines += [f"{total} conversations" + (" (cancelled before the end)" if summary.get("cancelled") else ""), ""]
    lines += ["| metric | phase | score | 95% CI | passed / applicable | n/a |", "|---|---|---:|---:|---:|---:|"]
    for phase, entry in obj_items(summary.get("success")):
        lines.append(f"| success | {phase} | {_pct(entry['rate'])} | {_ci(entry.get('ci'))} | {entry['passed']} / {entry['total']} | |")
    for name, phases in obj_items(summary.get("scorers")):
        for phase, tally in obj_items(phases):
            if "rate" in tally:
                lines.append(f"| {_cell(name)} | {phase} | {_pct(tally['rate'])} | {_ci(tally.get('ci'))} | "
                             f"{tally['passed']} / {tally['applicable']} | {tally['not_applicable']} |")
            else:
                mean = tally.get("mean")
                lines.append(f"| {_cell(name)} | {phase} | {'—' if mean is None else f'mean {mean:.2f}'} | | "
                             f"{tally['applicable']} | {tally['not_applicable']} |")
    outcomes = ", ".join(f"{k} {v}" for k, v in obj(summary.get("outcomes")).items() if v)
    lines += ["", f"**Outcomes:** {outcomes or 'none'}"]
    for note in verdict_notes(summary, listed=20):
        head, _, rest = note.partition(": ")
        lines += ["", f"**{_cell(head[:1].upper() + head[1:])}:** {_cell(rest)}"]
    from evalbench.results.summary.trials import trials_lines

    for line in trials_lines(summary):
        lines += ["", f"**Trials:** {_cell(line.partition(': ')[2])}"]
    taxonomy = obj(summary.get("taxonomy"))
    if taxonomy:
        lines += ["", "**Failures by kind:** " + ", ".join(f"{k} {v}" for k, v in taxonomy.items())]
    conv = obj(summary.get("conversation"))
    if conv:
        lines += ["", f"**Conversation:** mean turns {conv.get('mean_turns')}, clarifications {conv.get('clarifications')}, "
                      f"mean reward {conv.get('mean_reward')}, virtual-user leaks {conv.get('vuser_leaks', 0)}"]
        if conv.get("tools"):
            lines += ["", f"**Discovery tools:** {tools_text(obj(conv['tools']))}"]
    lines += _cost_markdown(maybe_obj(summary.get("cost")))
    infra = summary.get("infra_errors", 0)
    if infra:
        lines += ["", f"**Infrastructure errors:** {infra} conversation(s) (db_error, vuser_error)"]
    return "\n".join(lines) + "\n"



def _cost_markdown(cost: dict[str, object] | None) -> list[str]:
    """The cost of the run's model calls: one line, a table per role, and its caveats."""
    lines = cost_lines(cost)
    if not lines:
        return []
    out = ["", f"**Cost:** {_cell(lines[0].partition(': ')[2])}", "", "| " + " | ".join(COST_HEADER) + " |",
           "|---|---|---:|---:|---:|---:|---:|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in cost_rows(cost)]
    return out + [f"\n> {_cell(line)}" for line in lines[1:]]
