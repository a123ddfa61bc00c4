"""The failure taxonomy (evalbench/results/summary/taxonomy.py) and `evalbench explain` (explain.py).

The table-driven test runs real conversations: the quickstart config once, through the library,
with the noisy agent's failure rates raised so that every failure kind it has shows up, on the
embedded PostgreSQL. Each record's agent SQL is matched against the noisy agent's own mutations
of the golden SQL (``mutate``), and the diagnosis must be the kind that mutation surfaces as.
Kinds the noisy agent cannot produce are tested on small hand-built records.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import evalbench
from evalbench.agents.simulated import FAILURE_KINDS, mutate
from evalbench.config import load_run_config
from evalbench.core.errors import EvalbenchError
from evalbench.dataset import Dataset, Item
from evalbench.results import read_journal
from evalbench.results.render.explain import RecordNotFoundError, find_record, render_explanation
from evalbench.results.summary.taxonomy import Diagnosis, FailureKind, diagnose, passed, phase_failed, taxonomy_counts

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
# Every failure kind of the noisy agent at 10 % per phase (90 % of phases fail somehow).
RATES = {kind: 0.1 for kind in FAILURE_KINDS}
OUTCOME_KINDS = {FailureKind.AGENT_ERROR, FailureKind.TIMEOUT}


# --------------------------------------------------------------------------- a real run


class Run(NamedTuple):
    run_dir: Path
    records: list[dict[str, Any]]
    items: dict[str, Item]


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory: pytest.TempPathFactory, pgdata: Path) -> Run:
    out = tmp_path_factory.mktemp("taxonomy_runs")
    config = load_run_config(
        QUICKSTART,
        run_id="taxonomy",
        reporting={"csv": {"output_directory": str(out)}},
        model_config={"agent": "simulated:noisy", "failure_rates": RATES},
    )
    result = evalbench.run(config, progress=False, out=io.StringIO())
    dataset = Dataset(config.dataset_config, config.dataset_format, config.dialects, config.query_types)
    items = {item.id: item for item in dataset.iter_records() if isinstance(item, Item)}
    return Run(result.run_dir, list(read_journal(result.run_dir)), items)


def surfaced_mutation(record: dict[str, Any], phase: dict[str, Any], item: Item) -> str:
    """Which of the noisy agent's failure kinds the phase's transcript shows ("none": the golden
    SQL, "unrecognised": something else)."""
    name = phase["phase"]
    replies = [t["reply"] for t in record["turns"] if t["phase"] == name and t["reply"]]
    last = replies[-1]
    if last["kind"] == "error":
        return "timeout" if last["error_kind"] == "timeout" else "agent_error"
    if last["kind"] == "answer":  # a refusal, or the right answer in words
        return "no_answer" if last["text"].startswith("I could not") else "nl_answer"
    clear = name == "follow_up" or not record["ambiguous"]
    if phase["clarifications"] and clear:
        return "needless_question"
    follow_up = item.follow_up
    golden = item.golden_sql[0] if name == "main" else (follow_up.golden_sql[0] if follow_up else "")
    sql = phase["sql"]
    if sql == golden:
        return "none"
    if name == "main" and record["ambiguous"] and phase["clarifications"] == 0:
        return "skip_clarification"  # the noisy agent asks on ambiguous items unless it skips
    for kind in ("empty_result", "sql_error", "missing_column", "wrong_filter"):
        if sql == mutate(golden, kind):
            return kind
    return "unrecognised"


def _gen(phase: dict[str, Any]) -> dict[str, Any]:
    return phase["generated"] or {}


def _gold_rows(phase: dict[str, Any]) -> int:
    return phase["golden"][0]["row_count"] if phase["golden"] else 0


def _is_query(record: dict[str, Any]) -> bool:
    return record["category"] == "Query"


class Surface(NamedTuple):
    mutations: tuple[str, ...]  # the noisy agent's failure kinds (as surfaced_mutation names them)
    how: str  # how they surface, for the test id
    when: Callable[[dict[str, Any], dict[str, Any]], bool]
    expected: FailureKind | None  # None: the phase passes
    evidence: Callable[[dict[str, Any]], str] | None  # text the message must contain
    required: bool  # the run must have such a conversation (else the row is skipped: how a negated
    # filter or a dropped column surfaces depends on the data)


SQL_MUTATIONS = ("wrong_filter", "missing_column", "sql_error", "empty_result")


def _ran(record: dict[str, Any], phase: dict[str, Any]) -> bool:
    return _is_query(record) and not _gen(phase).get("error")


SURFACES = [
    Surface(("agent_error",), "HTTP 500", lambda r, p: True, FailureKind.AGENT_ERROR, lambda p: "http_500", True),
    Surface(("timeout",), "no answer in time", lambda r, p: True, FailureKind.TIMEOUT, lambda p: "in time", True),
    # the quickstart accepts answers in words (accept_nl_answers): answer_match judges them
    Surface(("no_answer",), "a refusal in words", lambda r, p: True, FailureKind.WRONG_ANSWER, lambda p: "refusal", True),
    Surface(("nl_answer",), "the right answer in words", lambda r, p: True, None, None, False),
    Surface(("sql_error",), "misspelt column", lambda r, p: _is_query(r), FailureKind.SQL_ERROR,
            lambda p: _gen(p)["error"], True),
    Surface(("missing_column",), "fewer columns", lambda r, p: _ran(r, p) and _gen(p)["row_count"] > 0,
            FailureKind.WRONG_COLUMNS, lambda p: f"generated {len(_gen(p)['columns'])} column", True),
    Surface(("missing_column",), "ORDER BY the dropped alias", lambda r, p: _is_query(r) and bool(_gen(p).get("error")),
            FailureKind.SQL_ERROR, lambda p: "does not exist", True),
    Surface(("empty_result",), "golden has rows", lambda r, p: _is_query(r) and _gold_rows(p) > 0, FailureKind.EMPTY_RESULT,
            lambda p: f"generated 0 rows, golden {_gold_rows(p)}", True),
    Surface(("wrong_filter",), "other row count", lambda r, p: _ran(r, p) and 0 < _gen(p)["row_count"] != _gold_rows(p),
            FailureKind.WRONG_ROW_COUNT, lambda p: f"golden {_gold_rows(p)}", False),
    Surface(("wrong_filter",), "same row count", lambda r, p: _ran(r, p) and 0 < _gen(p)["row_count"] == _gold_rows(p),
            FailureKind.WRONG_VALUES, lambda p: "different values", False),
    # an empty golden result: every answer fails (the demo dataset has none)
    Surface(SQL_MUTATIONS, "golden empty too", lambda r, p: _ran(r, p) and _gen(p)["row_count"] == 0 == _gold_rows(p),
            FailureKind.EMPTY_GOLD, None, False),
    Surface(("skip_clarification",), "guessed, ran", lambda r, p: _ran(r, p), FailureKind.MISSING_CLARIFICATION,
            lambda p: "without asking", True),
    Surface(("needless_question",), "then the right SQL", lambda r, p: p["outcome"] == "scored" and not phase_failed(p),
            None, None, True),
    Surface(SQL_MUTATIONS, "on a management task, ran", lambda r, p: not _is_query(r) and bool(p["generated"])
            and not p["generated"]["error"], FailureKind.TEST_CASE_FAILED, lambda p: "test case", False),
]


def _leaked(record: dict[str, Any], phase: str) -> bool:
    return any(t["phase"] == phase and t["vuser"] and t["vuser"]["audit"].get("leaks") for t in record["turns"])


def _cases(run: Run, surface: Surface) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    cases = []
    for record in run.records:
        for phase in record["phases"]:
            if surfaced_mutation(record, phase, run.items[record["item_id"]]) in surface.mutations and surface.when(record, phase):
                cases.append((record, phase))
    return cases


@pytest.mark.parametrize("surface", SURFACES, ids=lambda s: f"{'|'.join(s.mutations)}: {s.how}")
def test_noisy_failures_are_diagnosed_as_they_surface(noisy_run: Run, surface: Surface) -> None:
    cases = _cases(noisy_run, surface)
    if not cases:
        assert not surface.required, f"no conversation of the run shows {surface.mutations} ({surface.how})"
        pytest.skip(f"no conversation of this run shows {surface.mutations} ({surface.how})")
    for record, phase in cases:
        diagnosis = diagnose(record)
        text = render_explanation(record)
        if surface.expected is None:  # the phase passed (a later phase may still fail)
            assert not phase_failed(phase), (record["item_id"], diagnosis)
            assert diagnosis is None or diagnosis.phase != phase["phase"], (record["item_id"], diagnosis)
            assert text.rstrip().endswith("Passed") == (diagnosis is None)
            continue
        assert diagnosis is not None, record["item_id"]
        assert diagnosis.phase == phase["phase"], (record["item_id"], diagnosis)
        expected = surface.expected
        # the agent's own failure is the diagnosis; a leaking virtual-user reply is a flag beside it
        assert diagnosis.kind is expected, (record["item_id"], diagnosis)
        if _leaked(record, phase["phase"]) and expected not in OUTCOME_KINDS:
            assert diagnosis.flags == ("vuser_leak",) and "leaked the answer" in diagnosis.message, diagnosis
        if surface.evidence is not None:
            assert surface.evidence(phase) in diagnosis.message, (record["item_id"], diagnosis)
        assert f"Diagnosis: {diagnosis.kind.value} — " in text
        assert "\n" not in diagnosis.message


def test_every_noisy_failure_kind_surfaces_in_the_run(noisy_run: Run) -> None:
    seen = {surfaced_mutation(r, p, noisy_run.items[r["item_id"]]) for r in noisy_run.records for p in r["phases"]}
    assert set(FAILURE_KINDS) <= seen, set(FAILURE_KINDS) - seen


def test_diagnosis_is_none_exactly_when_the_reward_is_full(noisy_run: Run) -> None:
    """An independent oracle: the journal's reward adds up each phase's primary verdict."""
    for record in noisy_run.records:
        full = 1.0 if record["has_follow_up"] else 0.7
        ok = record["outcome"] == "scored" and record["reward"] == pytest.approx(full)
        assert (diagnose(record) is None) == ok, (record["item_id"], diagnose(record))
        assert passed(record) == ok


def test_counts_of_the_run_add_up(noisy_run: Run) -> None:
    counts = taxonomy_counts(noisy_run.records)
    assert list(counts) == [k.value for k in FailureKind]
    failed = sum(1 for r in noisy_run.records if diagnose(r) is not None)
    assert sum(counts.values()) == failed > 0
    assert counts["agent_error"] == sum(1 for r in noisy_run.records if r["outcome"] == "agent_error")


def test_explain_finds_and_renders_every_record_of_the_run(noisy_run: Run) -> None:
    for record in noisy_run.records[:10]:
        found = find_record(noisy_run.run_dir, record["item_id"])
        assert found == record
        text = render_explanation(found, width=90)
        assert f"Item {record['item_id']}" in text
        assert all(len(line) <= 90 for line in text.splitlines()), max(text.splitlines(), key=len)


# --------------------------------------------------------------------------- hand-built records


def res(rows: list[list[Any]], columns: list[str] | None = None, *, row_count: int | None = None, error: str | None = None,
        error_kind: str | None = None, truncated: bool = False) -> dict[str, Any]:
    if columns is None:
        columns = [f"c{i}" for i in range(len(rows[0]))] if rows else []
    return {"columns": columns, "row_count": len(rows) if row_count is None else row_count, "truncated": truncated,
            "elapsed_s": 0.002, "error": error, "error_kind": error_kind, "preview": rows[:5]}


def sc(passed: bool | None, detail: str = "", *, flags: tuple[str, ...] = (), applicable: bool = True,
       value: float | None = None) -> dict[str, Any]:
    if value is None and passed is not None:
        value = 1.0 if passed else 0.0
    return {"value": value, "passed": passed, "applicable": applicable, "detail": detail, "flags": list(flags)}


GOLD = res([["a", 1], ["b", 2], ["c", 3]], ["name", "n"])


def ph(name: str = "main", *, outcome: str | None = "scored", error: str | None = None, sql: str | None = "SELECT x",
       generated: dict[str, Any] | None = None, golden: list[dict[str, Any]] | None = None,
       scores: dict[str, Any] | None = None, clarifications: int = 0) -> dict[str, Any]:
    if generated is None and sql is not None and outcome == "scored":
        generated = GOLD
    return {"phase": name, "question": "How many?", "outcome": outcome, "error": error, "clarifications": clarifications,
            "clarification_budget": 4, "debug_used": 0, "attempts": [], "sql": sql,
            "conditions": {"order": False, "distinct": False, "decimal": -1}, "generated": generated,
            "golden": [GOLD] if golden is None else golden,
            "scores": {"exec_match": sc(True), "turn_count": sc(None, "1 turns", value=1.0)} if scores is None else scores}


def reply(kind: str = "sql", *, text: str = "", sql: str | None = None, error: str | None = None,
          error_kind: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "text": text, "sql": sql, "tool_calls": [], "usage": {"prompt": 0, "completion": 0, "total": 0},
            "latency_s": 0.01, "error": error, "error_kind": error_kind, "raw": None}


def tn(index: int, reply_: dict[str, Any] | None, *, phase: str = "main", role: str = "user", text: str = "How many?",
       vuser: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": index, "phase": phase, "user_role": role, "user_text": text, "reply": reply_, "vuser": vuser}


def vu(text: str = "I mean the shops.", *, leaks: tuple[str, ...] = (), error: str | None = None) -> dict[str, Any]:
    return {"action": 'labeled("shops")', "action_kind": "labeled", "text": text, "error": error, "audit": {"leaks": list(leaks)}}


def rec(*phases: dict[str, Any], outcome: str = "scored", error: str | None = None, ambiguous: bool = False,
        turns: list[dict[str, Any]] | None = None, item_id: str = "t1") -> dict[str, Any]:
    phases = phases or (ph(),)
    if turns is None:
        turns = [tn(i, reply(sql=p["sql"]) if p["sql"] else reply("answer", text="No idea."), phase=p["phase"])
                 for i, p in enumerate(phases)]
    return {"schema_version": 1, "run_id": "r", "item_id": item_id, "dialect": "postgres", "database": "greenleaf",
            "category": "Query", "query_type": "dql", "difficulty": "Simple", "ambiguous": ambiguous,
            "has_follow_up": len(phases) > 1, "source": "x.jsonl:1", "seed": 1, "outcome": outcome, "error": error,
            "elapsed_s": 0.25, "sessions_opened": 1, "stage_seconds": {"generate": 0.01, "execute": 0.02},
            "tokens": {"prompt": 10, "completion": 5, "total": 15}, "reward": 0.0,
            "leaks": sum(1 for t in turns if t["vuser"] and t["vuser"]["audit"]["leaks"]), "turns": turns, "phases": list(phases)}


def failing(generated: dict[str, Any], detail: str = "", flags: tuple[str, ...] = (), **kw: Any) -> dict[str, Any]:
    return ph(generated=generated, scores={"exec_match": sc(False, detail, flags=flags), "executable": sc(True)}, **kw)


ASKED = [tn(0, reply("clarification", text="Which shops do you mean?"), vuser=vu()),
         tn(1, reply(sql="SELECT x"), role="vuser", text="I mean the shops.")]

HAND_BUILT: list[tuple[str, dict[str, Any], FailureKind | None, str]] = [
    ("passed", rec(), None, ""),
    ("needless question, then right", rec(ph(clarifications=1), turns=ASKED), None, ""),
    ("cancelled mid-phase", rec(ph(outcome=None, sql=None, scores={}), outcome="cancelled", error="run cancelled"),
     FailureKind.CANCELLED, "run cancelled after 1 turn(s)"),
    ("golden SQL failed", rec(ph(outcome="db_error", error="golden SQL failed (sql): relation \"x\" does not exist",
                                 scores={"exec_match": sc(False, "no answer to score: db_error")}), outcome="db_error"),
     FailureKind.DB_ERROR, 'golden SQL failed (sql): relation "x" does not exist'),
    ("database setup failed", rec(ph(outcome="db_error", error="database setup failed: boom", sql=None,
                                     scores={"exec_match": sc(False)}), outcome="db_error", turns=[]),
     FailureKind.DB_ERROR, "database setup failed: boom"),
    ("vuser error", rec(ph(outcome="vuser_error", error="encode: no valid action after 2 retries", sql=None,
                           scores={"exec_match": sc(False)}), outcome="vuser_error",
                        turns=[tn(0, reply("clarification", text="Which?"), vuser=vu("", error="encode failed"))]),
     FailureKind.VUSER_ERROR, "the virtual user failed: encode: no valid action"),
    ("agent crash", rec(ph(outcome="agent_error", error="HTTP 500: upstream 429", sql=None, scores={"exec_match": sc(False)}),
                        outcome="agent_error", turns=[tn(0, reply("error", error="HTTP 500: upstream 429", error_kind="http_500"))]),
     FailureKind.AGENT_ERROR, "HTTP 500: upstream 429 [http_500]"),
    ("conversation timeout", rec(ph(outcome="timeout", error="conversation timeout", sql=None, scores={"exec_match": sc(False)}),
                                 outcome="timeout", turns=[tn(0, reply("clarification", text="Which?"), vuser=vu())]),
     FailureKind.TIMEOUT, "conversation timeout"),
    ("clarification budget", rec(ph(outcome="max_turns", error="clarification budget of 4 exceeded", sql=None, clarifications=5,
                                    scores={"exec_match": sc(False)}), outcome="max_turns", ambiguous=True),
     FailureKind.MAX_TURNS, "clarification budget of 4 exceeded after 5 clarification(s)"),
    ("leak, then wrong rows", rec(failing(res([["a", 1]], ["name", "n"]), "row count differs", clarifications=1), ambiguous=True,
                                  turns=[tn(0, reply("clarification", text="Which?"), vuser=vu(leaks=("golden SQL: where x = 1",))),
                                         tn(1, reply(sql="SELECT x"), role="vuser")]),
     FailureKind.WRONG_ROW_COUNT, "generated 1 row, golden 3 (the virtual user's reply leaked the answer (turn 1: golden SQL: where x = 1))"),
    ("words, no SQL", rec(ph(sql=None, generated=None, scores={"exec_match": sc(False, "the agent returned no SQL")})),
     FailureKind.NO_SQL, "the agent answered in words, without SQL: 'No idea.'"),
    ("SQL error", rec(failing(res([], error='column "nme" does not exist', error_kind="sql"))),
     FailureKind.SQL_ERROR, 'column "nme" does not exist'),
    ("statement timeout", rec(failing(res([], error="canceling statement due to statement timeout", error_kind="timeout"))),
     FailureKind.SQL_ERROR, "statement timeout: canceling statement"),
    ("ambiguous, never asked", rec(failing(res([["a", 1]], ["name", "n"])), ambiguous=True),
     FailureKind.MISSING_CLARIFICATION, "without asking anything; generated 1 row, golden 3"),
    ("clear, asked, wrong", rec(failing(res([["a", 1]], ["name", "n"]), clarifications=1), turns=ASKED),
     FailureKind.NEEDLESS_CLARIFICATION, "asked 1 clarification(s) about a clear question ('Which shops do you mean?')"),
    ("empty result", rec(failing(res([], ["name", "n"]), "generated result is empty", ("empty_generated",))),
     FailureKind.EMPTY_RESULT, "generated 0 rows, golden 3"),
    # an empty result may come back without column names: still "empty", not "wrong columns"
    ("empty result, no columns", rec(failing(res([]), "column count differs: 0 generated vs 2 golden")),
     FailureKind.EMPTY_RESULT, "generated 0 rows, golden 3"),
    ("wrong columns", rec(failing(res([["a"], ["b"], ["c"]], ["tier"]), "column count differs: 1 generated vs 2 golden")),
     FailureKind.WRONG_COLUMNS, "generated 1 column (tier), golden 2 columns (name, n)"),
    ("wrong row count", rec(failing(res([["a", 1], ["b", 2]], ["name", "n"]), "row count differs")),
     FailureKind.WRONG_ROW_COUNT, "generated 2 rows, golden 3"),
    ("truncated", rec(failing(res([["a", 1]] * 5, ["name", "n"], row_count=10000, truncated=True), "truncated")),
     FailureKind.WRONG_ROW_COUNT, "generated more than 10000 rows (truncated at the row cap), golden 3"),
    ("order only (flag)", rec(failing(res([["c", 3], ["b", 2], ["a", 1]], ["name", "n"]), "same rows, different order",
                                      ("order_only",))),
     FailureKind.ORDERING_ONLY, "the same 3 rows in another order"),
    ("wrong values", rec(failing(res([["a", 1], ["b", 2], ["c", 4]], ["name", "n"]), "same row count, different values")),
     FailureKind.WRONG_VALUES, 'same shape (3 rows x 2 columns), different values; e.g. generated ["c", 4] vs golden ["c", 3]'),
    ("scorer crashed", rec(ph(scores={"exec_match": sc(False, "scorer error: boom")})),
     FailureKind.OTHER, "exec_match scorer error: boom"),
    ("test cases failed", rec(ph(generated=res([]), golden=[res([])],
                                 scores={"exec_match": sc(None, "management task", applicable=False),
                                         "test_cases": sc(False, "test case 1/1 failed (assertion): rows left")})),
     FailureKind.TEST_CASE_FAILED, "test case 1/1 failed (assertion): rows left"),
    ("score stage failed", rec(outcome="agent_error", error="score failed: RuntimeError: x"),
     FailureKind.AGENT_ERROR, "score failed: RuntimeError: x"),
    ("follow-up failed", rec(ph(), ph("follow_up", outcome="timeout", error="conversation timeout", sql=None,
                                      scores={"exec_match": sc(False)}), outcome="timeout"),
     FailureKind.TIMEOUT, "conversation timeout"),
    ("no verdict at all", rec(ph(scores={"turn_count": sc(None, value=1.0)})), None, ""),
]


@pytest.mark.parametrize(("record", "kind", "evidence"), [c[1:] for c in HAND_BUILT], ids=[c[0] for c in HAND_BUILT])
def test_hand_built_records(record: dict[str, Any], kind: FailureKind | None, evidence: str) -> None:
    diagnosis = diagnose(record)
    if kind is None:
        assert diagnosis is None
        assert render_explanation(record).rstrip().endswith("Passed")
        return
    assert diagnosis is not None
    assert diagnosis.kind is kind, diagnosis
    assert evidence in diagnosis.message, diagnosis.message
    assert "\n" not in diagnosis.message
    text = render_explanation(record)
    assert f"Diagnosis: {kind.value} — " in text


def test_the_diagnosed_phase_is_the_failing_one() -> None:
    record = rec(ph(), ph("follow_up", outcome="agent_error", error="boom", sql=None, scores={"exec_match": sc(False)}),
                 outcome="agent_error")
    assert diagnose(record) == Diagnosis(FailureKind.AGENT_ERROR, "follow_up", "boom")


def test_a_leak_in_a_passed_phase_does_not_explain_a_later_failure() -> None:
    main = ph(clarifications=1)
    follow = failing(res([], error="syntax error", error_kind="sql"), name="follow_up")
    turns = [tn(0, reply("clarification", text="Which?"), vuser=vu(leaks=("the clear question verbatim",))),
             tn(1, reply(sql="SELECT x"), role="vuser"), tn(2, reply(sql="SELECT y"), phase="follow_up")]
    diagnosis = diagnose(rec(main, follow, ambiguous=True, turns=turns))
    assert diagnosis == Diagnosis(FailureKind.SQL_ERROR, "follow_up", "syntax error")


def test_ordering_only_from_complete_previews_without_a_flag() -> None:
    generated = res([["c", 3], ["a", 1], ["b", 2]], ["name", "n"])
    record = rec(ph(generated=generated, scores={"set_match": sc(True), "exact_match": sc(False, "SQL differs")}))
    assert diagnose(record, primary="exact_match").kind is FailureKind.ORDERING_ONLY  # type: ignore[union-attr]


def test_identical_results_with_a_failing_verdict_are_other() -> None:
    record = rec(ph(scores={"exact_match": sc(False, "SQL differs after normalization")}))
    assert diagnose(record) == Diagnosis(FailureKind.OTHER, "main", "exact_match: SQL differs after normalization")


def test_primary_scorer_decides_and_falls_back_when_not_applicable() -> None:
    generated = res([["c", 3], ["b", 2], ["a", 1]], ["name", "n"])
    record = rec(ph(generated=generated, scores={"exec_match": sc(False, "same rows, different order", flags=("order_only",)),
                                                  "set_match": sc(True)}))
    assert diagnose(record).kind is FailureKind.ORDERING_ONLY  # type: ignore[union-attr]
    assert diagnose(record, primary="set_match") is None
    # a primary scorer that does not apply to the phase leaves the decision to the phase's first verdict
    assert diagnose(record, primary="test_cases") == diagnose(record)
    management = rec(ph(scores={"exec_match": sc(None, applicable=False), "test_cases": sc(False, "test case 1/1 failed")}))
    assert diagnose(management, primary="exec_match").kind is FailureKind.TEST_CASE_FAILED  # type: ignore[union-attr]


def test_taxonomy_counts_every_kind() -> None:
    records = [rec(), rec(failing(res([], ["name", "n"]))), rec(failing(res([], ["name", "n"]))),
               rec(ph(outcome=None, sql=None, scores={}), outcome="cancelled")]
    counts = taxonomy_counts(iter(records))
    assert list(counts) == [k.value for k in FailureKind]
    assert {k: v for k, v in counts.items() if v} == {"empty_result": 2, "cancelled": 1}


def test_the_kinds_are_the_closed_set() -> None:
    assert [k.value for k in FailureKind] == [
        "agent_error", "no_sql", "sql_error", "timeout", "empty_result", "wrong_row_count", "wrong_columns", "wrong_values",
        "ordering_only", "max_turns", "needless_clarification", "missing_clarification", "vuser_error",
        "test_case_failed", "wrong_state", "wrong_answer", "empty_gold", "db_error", "invalid_item", "cancelled", "other",
    ]
    diagnosis = Diagnosis(FailureKind.OTHER, "main", "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        diagnosis.kind = FailureKind.NO_SQL  # type: ignore[misc]
    assert str(diagnosis) == "other — x"
    assert diagnosis.as_dict() == {"kind": "other", "phase": "main", "message": "x", "flags": []}
    flagged = Diagnosis(FailureKind.WRONG_VALUES, "main", "x", ("vuser_leak",))
    assert str(flagged) == "wrong_values — x [vuser_leak]"


# --------------------------------------------------------------------------- explain


def _journal(tmp_path: Path, records: list[dict[str, Any]], tail: str = "") -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "conversations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")
    return run_dir


def test_find_record_names_close_ids(tmp_path: Path) -> None:
    run_dir = _journal(tmp_path, [rec(item_id=f"greenleaf_{i}") for i in range(1, 30)])
    assert find_record(run_dir, "greenleaf_7")["item_id"] == "greenleaf_7"
    with pytest.raises(RecordNotFoundError) as info:
        find_record(run_dir, "greenleaf_70")
    message = str(info.value)
    assert "'greenleaf_70' is not in" in message and "29 conversation(s)" in message
    assert "close ids: greenleaf_7" in message
    assert isinstance(info.value, EvalbenchError) and info.value.exit_code == 2


def test_find_record_without_a_journal_or_with_a_broken_line(tmp_path: Path) -> None:
    with pytest.raises(RecordNotFoundError, match="no such journal"):
        find_record(tmp_path / "nowhere", "x")
    run_dir = _journal(tmp_path, [rec(item_id="a")], tail='{"item_id": "b", "tur')
    assert find_record(run_dir, "a")["item_id"] == "a"
    with pytest.raises(RecordNotFoundError, match=r"item 'b' is not in .* \(1 conversation"):
        find_record(run_dir, "b")  # the line cut short is skipped (read_journal warns)


def test_render_explanation_tells_the_conversation() -> None:
    turns = [
        tn(0, reply("clarification", text="Which shops do you mean?"), vuser=vu("I mean the open ones.", leaks=("golden SQL: x = 1",))),
        tn(1, dict(reply(sql="SELECT name, n\nFROM shops\nWHERE open"),
                   tool_calls=[{"name": "run_sql", "args": {"sql": "SELECT 1"}, "response": {"rows": 1}, "id": "c1"}]),
           role="vuser", text="I mean the open ones."),
    ]
    generated = res([["a", 1], ["b" * 60, None]], ["name", "n"])
    record = rec(failing(generated, "row count differs: 2 generated vs 3 golden", ("row_count",), clarifications=1,
                         sql="SELECT name, n\nFROM shops\nWHERE open"), ambiguous=True, turns=turns)
    text = render_explanation(record, width=80)
    for expected in ("Turn 1 · user:", "agent → clarification", "Which shops do you mean?", 'virtual user → labeled("shops")',
                     "LEAK: golden SQL: x = 1", "Turn 2 · vuser:", "I mean the open ones.", "tool call run_sql(",
                     "FROM shops", "generated: 2 row(s) × 2 column(s) (name, n)", "| name", "NULL", "golden: 3 row(s)",
                     "exec_match  FAIL  row count differs", "[row_count]", "executable  pass",
                     "Timings: conversation 0.250 s", "tokens 10 prompt + 5 completion = 15",
                     "Diagnosis: wrong_row_count — ", "[vuser_leak]", "Diagnosed phase: main"):
        assert expected in text, expected
    assert text.count("I mean the open ones.") == 1  # the vuser's answer is shown once, as the next turn's message
    assert all(len(line) <= 80 for line in text.splitlines()), max(text.splitlines(), key=len)
