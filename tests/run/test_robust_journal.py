"""Reading a run's journal as a crash may leave it (issue 12): a last line cut short is ignored
with a warning, a conversation recorded twice counts once (its last record), and `evalbench
report` marks a run incomplete — fewer conversations than the dataset has items, or no
`finished_at` — in the console, summary.json, summary.md and report.html; the gates fail on an
incomplete run unless `--allow-incomplete`."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.results import journal_stats, read_journal
from evalbench.results.gates import check_gates, parse_threshold
from evalbench.results.render.summary_md import render_summary_markdown
from evalbench.results.summary.rebuild import rebuild_summary
from tests.conftest import DEMO

JOURNAL = "conversations.jsonl"


# ----------------------------------------------------------------- read_journal, no database


def _record(item_id: str, outcome: str = "scored", dialect: str = "postgres", **extra: object) -> str:
    return json.dumps({"schema_version": 1, "item_id": item_id, "dialect": dialect, "outcome": outcome, "phases": [],
                       **extra})


def _journal(tmp_path: Path, *lines: str, end: str = "\n") -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    (run_dir / JOURNAL).write_text("\n".join(lines) + end, encoding="utf-8")
    return run_dir


def test_a_last_line_cut_short_is_ignored_with_a_warning(tmp_path, caplog):
    run_dir = _journal(tmp_path, _record("a"), _record("b"), _record("c")[:25], end="")
    with caplog.at_level(logging.WARNING, logger="evalbench.results"):
        assert [r["item_id"] for r in read_journal(run_dir)] == ["a", "b"]
        assert [r["item_id"] for r in read_journal(run_dir)] == ["a", "b"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "last line is cut short" in warnings[0] and str(run_dir / JOURNAL) in warnings[0]
    stats = journal_stats(run_dir)
    assert (stats.conversations, stats.truncated, stats.duplicates, stats.unreadable) == (2, 1, 0, [])


def test_a_complete_last_record_without_its_newline_is_kept(tmp_path):
    run_dir = _journal(tmp_path, _record("a"), _record("b"), end="")
    assert [r["item_id"] for r in read_journal(run_dir)] == ["a", "b"]
    assert journal_stats(run_dir).truncated == 0


def test_a_duplicated_conversation_counts_once_by_its_last_record(tmp_path, caplog):
    run_dir = _journal(tmp_path, _record("a", "scored", n=1), _record("b"), _record("a", "agent_error", n=2),
                       _record("a", "scored", n=3), _record("b"), "", _record("a", dialect="sqlite"))
    with caplog.at_level(logging.WARNING, logger="evalbench.results"):
        records = list(read_journal(run_dir))
    assert [(r["item_id"], r["dialect"]) for r in records] == [("a", "postgres"), ("b", "postgres"), ("a", "sqlite")]
    assert records[0]["n"] == 3  # the last record of item a
    stats = journal_stats(run_dir)
    assert (stats.conversations, stats.duplicates) == (3, 3)
    [warning] = [r.getMessage() for r in caplog.records]
    assert "3 conversation record(s) are repeated" in warning and "item a, b" in warning


def test_a_line_that_is_not_a_record_is_skipped_and_named(tmp_path, caplog):
    run_dir = _journal(tmp_path, _record("a"), "{not json", '{"item_id": "x"}', "[1, 2]", _record("b"))
    with caplog.at_level(logging.WARNING, logger="evalbench.results"):
        assert [r["item_id"] for r in read_journal(run_dir)] == ["a", "b"]
    assert journal_stats(run_dir).unreadable == [2, 3, 4]
    assert "line 2, 3, 4" in caplog.text


def test_gates_fail_on_an_incomplete_summary_unless_allowed():
    summary = {"success": {"main": {"rate": 0.9, "ci": None, "passed": 9, "total": 10}}, "scorers": {}, "complete": False,
               "completeness": {"expected_items": 10, "conversations": 7, "reasons": ["3 of 10 item(s) have no conversation"]}}
    under = [parse_threshold("success=0.5", "--fail-under")]
    results = check_gates(summary, under, [], None)
    assert [(g.name, g.passed) for g in results] == [("complete", False), ("fail-under success=0.5", True)]
    assert "7 of 10 conversations" in results[0].message and "--allow-incomplete" in results[0].message
    assert all(g.passed for g in check_gates(summary, under, [], None, allow_incomplete=True))
    assert check_gates(summary, [], [], None) == []  # no gate, nothing to fail
    complete = dict(summary, complete=True)
    regression = [parse_threshold("success=0.1", "--max-regression")]
    results = check_gates(complete, [], regression, summary)  # an incomplete baseline
    assert [(g.name, g.passed) for g in results] == [("baseline complete", False), ("max-regression success=0.1", True)]
    markdown = render_summary_markdown(summary, results)
    assert "> **Incomplete run:** 3 of 10 item(s) have no conversation" in markdown


# ------------------------------------------------------------------- a real run, then report


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, pgdata) -> Path:
    tmp = tmp_path_factory.mktemp("robust-journal")
    config = tmp / "run.yaml"
    config.write_text(
        f"dataset_config: {DEMO / 'greenleaf.jsonl'}\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        "model_config: simulated:noisy\n"
        "scorers: {exec_match: {}, test_cases: {}}\n"
        f"reporting: {{csv: {{output_directory: {tmp}}}}}\n",
        encoding="utf-8",
    )
    assert main(["run", "--config", str(config), "--run-id", "base", "--no-progress"]) == 0
    return tmp / "base"


def _copy(run_dir: Path, target: Path) -> Path:
    return Path(shutil.copytree(run_dir, target))


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))


def test_a_finished_run_is_complete(finished_run):
    summary = _summary(finished_run)
    assert summary["complete"] is True
    assert summary["completeness"] | {"reasons": None} == {
        "expected_items": 43, "conversations": 43, "missing": 0, "cancelled": 0, "finished": True,
        "journal": {"truncated_lines": 0, "unreadable_lines": 0, "duplicate_records": 0}, "reasons": None}
    assert "Incomplete" not in (finished_run / "summary.md").read_text() + (finished_run / "report.html").read_text()


def test_a_crashed_run_is_reported_incomplete_and_fails_its_gates(finished_run, tmp_path, capsys, caplog):
    run_dir = _copy(finished_run, tmp_path / "crashed")
    lines = (run_dir / JOURNAL).read_bytes().splitlines(keepends=True)
    (run_dir / JOURNAL).write_bytes(b"".join(lines[:-6]) + lines[-6][:40])  # killed while writing the 38th record
    manifest = json.loads((run_dir / "manifest.json").read_text())
    del manifest["finished_at"], manifest["sessions"][-1]["finished_at"]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))

    with caplog.at_level(logging.WARNING, logger="evalbench.results"):
        assert main(["report", str(run_dir)]) == 0  # no gate: reported, not failed
    out = capsys.readouterr().out
    assert ("incomplete run: the run did not finish (manifest.json has no finished_at); "
            "6 of 43 item(s) have no conversation") in out
    assert "last line is cut short" in caplog.text
    summary = _summary(run_dir)
    assert summary["complete"] is False and summary["total_items"] == 37
    assert (summary["completeness"]["expected_items"], summary["completeness"]["conversations"],
            summary["completeness"]["missing"], summary["completeness"]["finished"]) == (43, 37, 6, False)
    assert summary["completeness"]["journal"]["truncated_lines"] == 1
    assert "**Incomplete run:**" in (run_dir / "summary.md").read_text()
    assert "Incomplete run: the run did not finish" in (run_dir / "report.html").read_text()

    assert main(["report", str(run_dir), "--no-html", "--fail-under", "success=0"]) == 1
    out = capsys.readouterr().out
    assert "gate complete: FAIL (this run is incomplete (37 of 43 conversations" in out
    assert "| complete | **FAIL** |" in (run_dir / "summary.md").read_text()
    assert main(["report", str(run_dir), "--no-html", "--fail-under", "success=0", "--allow-incomplete"]) == 0
    assert "allowed by --allow-incomplete" in capsys.readouterr().out
    assert main(["explain", str(run_dir), "greenleaf_1"]) == 0  # explain reads the same journal


def test_a_run_without_finished_at_is_incomplete_even_with_every_conversation(finished_run, tmp_path, capsys):
    run_dir = _copy(finished_run, tmp_path / "unfinished")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["sessions"].append({"started_at": "2026-01-01T00:00:00+00:00"})  # a resumed session that crashed
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    assert rebuild_summary(run_dir)["completeness"]["reasons"] == ["the run did not finish (manifest.json has no finished_at)"]
    assert main(["report", str(run_dir), "--no-html", "--fail-under", "success=0"]) == 1
    assert "gate complete: FAIL" in capsys.readouterr().out


def test_duplicated_journal_lines_are_counted_once(finished_run, tmp_path, capsys, caplog):
    run_dir = _copy(finished_run, tmp_path / "duplicated")
    original = _summary(finished_run)
    lines = (run_dir / JOURNAL).read_bytes().splitlines(keepends=True)
    (run_dir / JOURNAL).write_bytes(b"".join([*lines, lines[0], lines[7], lines[7]]))
    with caplog.at_level(logging.WARNING, logger="evalbench.results"):
        assert main(["report", str(run_dir), "--no-html", "--fail-under", "success=0"]) == 0
    assert "3 conversation record(s) are repeated later in the journal" in caplog.text
    summary = _summary(run_dir)
    for key in ("total_items", "outcomes", "success", "scorers", "complete"):
        assert summary[key] == original[key], key
    assert summary["completeness"]["journal"]["duplicate_records"] == 3
    assert "incomplete" not in capsys.readouterr().out


def test_an_incomplete_baseline_fails_max_regression_unless_allowed(finished_run, tmp_path, capsys):
    baseline = _copy(finished_run, tmp_path / "baseline")
    lines = (baseline / JOURNAL).read_bytes().splitlines(keepends=True)
    (baseline / JOURNAL).write_bytes(b"".join(lines[:30]))
    assert main(["report", str(baseline), "--no-html"]) == 0
    assert _summary(baseline)["complete"] is False
    candidate = _copy(finished_run, tmp_path / "candidate")
    args = ["report", str(candidate), "--no-html", "--baseline", str(baseline), "--max-regression", "success=100%"]
    assert main(args) == 1
    assert "gate baseline complete: FAIL (the baseline run is incomplete (30 of 43" in capsys.readouterr().out
    assert main([*args, "--allow-incomplete"]) == 0
