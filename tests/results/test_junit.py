"""junit.xml (evalbench/results/render/junit.py), checked by parsing the XML back."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import evalbench
from evalbench.config import load_run_config
from evalbench.results import read_journal
from evalbench.results.render.junit import render_junit, write_junit
from evalbench.results.summary.taxonomy import diagnose

ROOT = Path(__file__).resolve().parents[2]


def _result(rows: list[list[Any]], columns: list[str], **kw: Any) -> dict[str, Any]:
    return {"columns": columns, "row_count": len(rows), "truncated": False, "elapsed_s": 0.001, "error": None,
            "error_kind": None, "preview": rows} | kw


GOLD = _result([["a", 1], ["b", 2]], ["name", "n"])


def _record(item_id: str, outcome: str = "scored", *, passed: bool = True, phase_outcome: str | None = None,
            error: str | None = None, generated: dict[str, Any] | None = None, database: str = "greenleaf",
            elapsed: float = 0.5, sql: str | None = "SELECT name, n FROM t") -> dict[str, Any]:
    phase_outcome = phase_outcome or ("scored" if outcome in ("scored",) else outcome)
    ended = phase_outcome != "scored"
    phase = {
        "phase": "main", "question": "Which names?", "outcome": None if outcome == "cancelled" else phase_outcome,
        "error": error, "clarifications": 0, "clarification_budget": 3, "debug_used": 0, "attempts": [],
        "sql": None if ended else sql, "conditions": {}, "generated": None if ended else (generated or GOLD),
        "golden": [] if ended else [GOLD],
        "scores": {} if outcome == "cancelled" else {
            "exec_match": {"value": float(passed), "passed": passed and not ended, "applicable": True,
                           "detail": "same rows" if passed and not ended else "row count differs", "flags": []},
            "turn_count": {"value": 1.0, "passed": None, "applicable": True, "detail": "1 turns", "flags": []},
        },
    }
    reply = {"kind": "error" if ended else "sql", "text": "", "sql": phase["sql"], "tool_calls": [], "usage": {},
             "latency_s": 0.1, "error": error if ended else None, "error_kind": "http_500" if ended else None, "raw": None}
    return {"schema_version": 1, "run_id": "r", "item_id": item_id, "dialect": "postgres", "database": database,
            "category": "Query", "ambiguous": False, "has_follow_up": False, "outcome": outcome, "error": error,
            "elapsed_s": elapsed, "leaks": 0, "turns": [{"index": 0, "phase": "main", "user_role": "user",
                                                         "user_text": "Which names?", "reply": reply, "vuser": None}],
            "phases": [phase]}


def _parse(xml: str) -> tuple[ET.Element, ET.Element, dict[str, ET.Element]]:
    assert xml.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ET.fromstring(xml.encode("utf-8"))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    cases = {case.get("name"): case for case in suites[0].findall("testcase")}
    return root, suites[0], cases  # type: ignore[return-value]


def _counts(element: ET.Element) -> dict[str, str | None]:
    return {key: element.get(key) for key in ("tests", "failures", "errors", "skipped")}


def test_outcomes_map_to_failure_error_skipped() -> None:
    records = [
        _record("ok"),
        _record("wrong", passed=False, generated=_result([["a", 1]], ["name", "n"])),
        _record("slow", "timeout", error="conversation timeout"),
        _record("too_many_questions", "max_turns", error="clarification budget of 3 exceeded"),
        _record("crash", "agent_error", error="HTTP 500: boom"),
        _record("golden_broke", "db_error", error="golden SQL failed (sql): relation does not exist"),
        _record("simulator", "vuser_error", error="encode failed"),
        _record("stopped", "cancelled", error="run cancelled"),
        _record("other_db", database="shop", elapsed=1.25),
    ]
    xml = render_junit(iter(records), run_id="run-1", primary="exec_match")
    root, suite, cases = _parse(xml)
    expected = {"tests": "9", "failures": "3", "errors": "3", "skipped": "1"}
    assert _counts(suite) == expected and _counts(root) == expected
    assert float(suite.get("time") or 0) == pytest.approx(0.5 * 8 + 1.25, abs=1e-3)
    assert suite.get("name") == "run-1"
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties == {"run_id": "run-1", "primary_scorer": "exec_match"}
    assert list(cases) == [r["item_id"] for r in records]
    assert cases["other_db"].get("classname") == "evalbench.shop"
    assert cases["ok"].get("classname") == "evalbench.greenleaf" and cases["ok"].get("time") == "0.500"
    assert len(cases["ok"]) == 0 and len(cases["other_db"]) == 0

    kinds = {name: [(child.tag, child.get("type")) for child in case] for name, case in cases.items()}
    assert kinds["wrong"] == [("failure", "wrong_row_count")]
    assert kinds["slow"] == [("failure", "timeout")]
    assert kinds["too_many_questions"] == [("failure", "max_turns")]
    assert kinds["crash"] == [("error", "agent_error")]
    assert kinds["golden_broke"] == [("error", "db_error")]
    assert kinds["simulator"] == [("error", "vuser_error")]
    assert kinds["stopped"] == [("skipped", None)]

    failure = cases["wrong"].find("failure")
    assert failure is not None
    assert failure.get("message") == "scored: wrong_row_count — generated 1 row, golden 2"
    body = failure.text or ""
    assert "Result of the main phase: outcome scored" in body and "SELECT name, n FROM t" in body
    assert "generated: 1 row(s) × 2 column(s) (name, n)" in body and "exec_match  FAIL  row count differs" in body
    error = cases["golden_broke"].find("error")
    assert error is not None and error.get("message", "").startswith("db_error: db_error — golden SQL failed")
    skipped = cases["stopped"].find("skipped")
    assert skipped is not None and skipped.get("message") == "cancelled: run cancelled"


def test_text_is_escaped_and_illegal_characters_are_replaced() -> None:
    nasty = 'boom <tag attr="x"> & \'quotes\' \x1b[31m\x00 \ud800 ünïcødé ✓'
    records = [_record('id<&">', "agent_error", error=nasty, database='db"<>'),
               _record("sql", passed=False, sql="SELECT '<&>\x07' AS x", generated=_result([["<&>", 1]], ["x", "n"]))]
    xml = render_junit(records, run_id='run "<&>"', primary=None)
    _, suite, cases = _parse(xml)
    assert suite.get("name") == 'run "<&>"'
    case = cases['id<&">']
    assert case.get("classname") == 'evalbench.db"<>'
    message = case.find("error").get("message")  # type: ignore[union-attr]
    assert 'boom <tag attr="x"> & \'quotes\' \\u001b[31m\\u0000 \\ud800 ünïcødé ✓' in message
    assert "SELECT '<&>\\u0007' AS x" in (cases["sql"].find("failure").text or "")  # type: ignore[union-attr]
    assert [p.get("name") for p in suite.iter("property")] == ["run_id"]


def test_an_empty_run_is_a_valid_empty_suite() -> None:
    root, suite, cases = _parse(render_junit([], run_id="empty", primary=None))
    assert cases == {}
    assert _counts(suite) == {"tests": "0", "failures": "0", "errors": "0", "skipped": "0"} == _counts(root)
    assert suite.get("time") == "0.000"


def test_a_real_run_agrees_with_the_taxonomy(tmp_path_factory: pytest.TempPathFactory, pgdata: Path) -> None:
    out = tmp_path_factory.mktemp("junit_runs")
    config = load_run_config(ROOT / "configs" / "quickstart.yaml", run_id="junit",
                             reporting={"csv": {"output_directory": str(out)}})
    result = evalbench.run(config, progress=False, out=io.StringIO())
    records = list(read_journal(result.run_dir))
    path = write_junit(result.run_dir, iter(records), run_id="junit", primary=result.summary.get("primary_scorer"))
    assert path == result.run_dir / "junit.xml"
    _, suite, cases = _parse(path.read_text(encoding="utf-8"))
    assert suite.get("tests") == str(len(records)) == str(len(cases))
    problems = sum(1 for r in records if diagnose(r, result.summary.get("primary_scorer")) is not None)
    counted = sum(int(suite.get(key) or 0) for key in ("failures", "errors", "skipped"))
    assert counted == problems > 0
    for record in records:
        case = cases[record["item_id"]]
        assert case.get("time") == f"{record['elapsed_s']:.3f}"
        diagnosis = diagnose(record, result.summary.get("primary_scorer"))
        if diagnosis is None:
            assert len(case) == 0
        else:
            (child,) = list(case)
            assert child.get("type") == diagnosis.kind.value
            assert child.get("message") == f"{record['outcome']}: {diagnosis.kind.value} — {diagnosis.message}"
