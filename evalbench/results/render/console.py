"""The summary table printed at the end of a run."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from evalbench.core.json_types import maybe_obj, number, obj, obj_items, seq


def _pct(rate: object) -> str:
    return "—" if rate is None else f"{100 * number(rate):.1f}%"


def _ci(ci: object) -> str:
    bounds = seq(ci)
    return "" if not bounds else f"{100 * number(bounds[0]):.1f}–{100 * number(bounds[1]):.1f}"



def print_summary(summary: dict[str, object], run_dir: Path, out: TextIO) -> None:
    total = summary["total_items"]
    dataset = obj(summary.get("dataset", {}))
    errors = dataset.get("record_errors", 0)
    rate = summary.get("conversations_per_s")
    print(file=out)
    print(f"Run {summary['run_id']}: {total} conversations in {summary.get('elapsed_s', 0):.1f} s"
          + (f" ({rate:.0f}/s)" if rate else ""), file=out)
    if errors:
        print(f"  {errors} dataset record(s) could not be loaded and were not run (see summary.json: record_errors)", file=out)
    rows = [("scorer", "phase", "score", "95% CI", "passed/applicable", "n/a")]
    for phase, entry in obj_items(summary.get("success")):
        rows.append(("success", phase, _pct(entry["rate"]), _ci(entry.get("ci")), f"{entry['passed']}/{entry['total']}",
                     str(entry.get("not_judged", 0))))
    for name, phases in obj_items(summary["scorers"]):
        tallies = obj_items(phases)
        for phase, tally in tallies:
            if not tally["applicable"] and not any(t["applicable"] for _, t in tallies):
                continue  # a scorer that applies to nothing in this run (e.g. state_match on questions only)
            if "rate" in tally:
                rows.append((name, phase, _pct(tally["rate"]), _ci(tally.get("ci")), f"{tally['passed']}/{tally['applicable']}",
                             str(tally["not_applicable"])))
            else:
                mean = tally["mean"]
                rows.append((name, phase, "—" if mean is None else f"mean {mean:.2f}", "", f"{tally['applicable']}",
                             str(tally["not_applicable"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  " + "  ".join(cell.ljust(w) if j < 2 else cell.rjust(w) for j, (cell, w) in enumerate(zip(row, widths, strict=False))), file=out)
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths), file=out)
    outcomes = ", ".join(f"{k} {v}" for k, v in obj(summary["outcomes"]).items() if v)
    print(f"  outcomes: {outcomes}", file=out)
    _print_verdict_notes(summary, out)
    from evalbench.results.summary.trials import trials_lines

    for line in trials_lines(summary):
        print(f"  {line}", file=out)
    taxonomy = obj(summary.get("taxonomy"))
    if taxonomy:
        print(f"  failures: {', '.join(f'{k} {v}' for k, v in taxonomy.items())} (evalbench explain {run_dir} <item_id>)", file=out)
    conv = obj(summary.get("conversation", {}))
    if conv:
        print(f"  turns: {conv.get('turns')} (mean {conv.get('mean_turns')}), clarifications: {conv.get('clarifications')}, "
              f"follow-up phases: {conv.get('follow_up_phases')}, mean reward: {conv.get('mean_reward')}", file=out)
        if conv.get("tools"):
            from evalbench.results.summary.aggregate import tools_text

            print(f"  tools: {tools_text(obj(conv['tools']))}", file=out)
        actions = ", ".join(f"{k} {v}" for k, v in sorted(obj(conv.get("vuser_actions")).items()))
        print(f"  virtual user: {conv.get('vuser_replies', 0)} replies ({actions or 'none'}), "
              f"leaks {conv.get('vuser_leaks', 0)}, errors {conv.get('vuser_errors', 0)}", file=out)
    from evalbench.results.summary.cost import cost_lines

    for line in cost_lines(maybe_obj(summary.get("cost"))):
        print(f"  {line}", file=out)
    for key, info in obj_items(summary.get("databases")):
        if info.get("error"):
            print(f"  database {key}: setup FAILED: {info['error']}", file=out)
        elif info.get("warning"):
            print(f"  database {key}: {info['warning']}", file=out)
    print(f"  results: {run_dir}/ (open report.html; summary.md for a CI job summary)", file=out)


def _print_verdict_notes(summary: dict[str, object], out: TextIO) -> None:
    from evalbench.results.summary.aggregate import verdict_notes

    for line in verdict_notes(summary):
        print(f"  {line}", file=out)
