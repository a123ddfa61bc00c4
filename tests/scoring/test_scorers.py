"""Every result/SQL scorer's verdict, pinned per (generated, golden) pair — including the cases
EvalBench's own scorers get wrong — and the small scorers (evalbench/scoring/result_match.py, sql_text.py, conversation_metrics.py, bird_reward.py)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from evalbench.backends.base import ExecutionResult
from evalbench.core.conversation import (
    AgentReply,
    Conversation,
    Outcome,
    Phase,
    PhaseRecord,
    ReplyKind,
    TokenUsage,
    Turn,
)
from evalbench.core.errors import ConfigError
from evalbench.dataset import Conditions
from evalbench.results.journal.record import reward
from evalbench.run.stages import new_conversation
from evalbench.scoring import SCORERS, Score, build_scorers
from evalbench.scoring.sql_text import normalise_sql
from tests.helpers import make_item

G = "SELECT store_name FROM stores"
G_ORDERED = "SELECT store_name FROM stores ORDER BY store_name"
G2 = "SELECT name FROM shops"


def res(rows: list[tuple[Any, ...]], columns: list[str] | None = None, **kw: Any) -> ExecutionResult:
    if columns is None:
        columns = [f"c{i}" for i in range(len(rows[0]) if rows else 1)]
    return ExecutionResult(columns=columns, rows=rows, **kw)


def col(*values: Any) -> list[tuple[Any, ...]]:
    return [(v,) for v in values]


def conversation(golden_sql: str | list[str] = G, *, order: bool = False, category: str = "Query",
                 ambiguous: bool = False, follow_up: str | None = None) -> Conversation:
    goldens = [golden_sql] if isinstance(golden_sql, str) else golden_sql
    item = make_item(golden=goldens[0], order=order, category=category, ambiguous=ambiguous, follow_up=follow_up)
    item = item.model_copy(update={"golden_sql": goldens})
    return new_conversation(item, seed=0, max_turns=10, patience=0, timeout_s=600)


# The scorers every pair is judged by, in the order of the verdict strings below.
PAIR_SCORERS = ["exec_match", "executable", "set_match", "sql_exact_match", "returned_sql", "recall_match"]
SCORERS_BY_NAME = {name: SCORERS.get(name)({}) for name in PAIR_SCORERS}


def verdict(score: Score) -> str:
    if not score.applicable:
        return "N"
    return "T" if score.passed else "F"


NOT_RUN = object()  # the SQL was returned but never executed: phase.generated stays None

# (id, sql, generated, goldens, golden_sql, conditions, extra, expected)
# expected: one letter per PAIR_SCORERS entry — T passed, F failed, N not applicable.
# extra: {"order": bool, "category": str, "outcome": Outcome}
CASES: list[tuple[str, str | None, Any, list[ExecutionResult], str | list[str], Conditions, dict[str, Any], str]] = [
    ("identical", G, res(col("a", "b")), [res(col("a", "b"))], G, Conditions(), {}, "TTTTTT"),
    ("sql-case-space-semicolon", "select  store_name\nFROM STORES;", res(col("a")), [res(col("a"))], G, Conditions(), {}, "TTTTTT"),
    ("permuted-rows-unordered", "SELECT store_name FROM stores ORDER BY 1 DESC", res(col("b", "a")), [res(col("a", "b"))], G,
     Conditions(), {}, "TTTFTT"),
    # order matters for this item: only exec_match sees it; set/recall ignore order by definition
    ("permuted-rows-ordered", G, res(col("b", "a")), [res(col("a", "b"))], G_ORDERED, Conditions(order=True), {"order": True},
     "FTTFTT"),
    ("extra-duplicate-row", G, res(col(1, 1, 2)), [res(col(1, 2))], G, Conditions(), {}, "FTTTTF"),
    ("multiplicity-differs", G, res(col(1, 1, 2)), [res(col(1, 2, 2))], G, Conditions(), {}, "FTTTTF"),
    # precision and recall, not swapped: a missing row lowers recall, an extra row lowers precision
    ("missing-row", G, res(col(1)), [res(col(1, 2))], G, Conditions(), {}, "FTFTTF"),
    ("extra-row", G, res(col(1, 2, 3)), [res(col(1, 2))], G, Conditions(), {}, "FTFTTF"),
    ("different-values", G, res(col(1, 3)), [res(col(1, 2))], G, Conditions(), {}, "FTFTTF"),
    # an errored result is not executable (EvalBench counts it as executable)
    ("generated-error", "SELECT nope FROM stores", res([], error="column nope does not exist"), [res(col(1))], G, Conditions(), {},
     "FFFFTF"),
    ("generated-error-both-empty", G, res([], error="boom"), [res([])], G, Conditions(), {}, "FFFTTF"),
    ("golden-error", G, res(col(1)), [res([], error="golden broke")], G, Conditions(), {}, "FTFTTF"),
    # truncated results never match, even when the visible rows are equal
    ("generated-truncated", G, res(col(1, 2), truncated=True), [res(col(1, 2))], G, Conditions(), {}, "FTFTTF"),
    ("golden-truncated", G, res(col(1, 2)), [res(col(1, 2), truncated=True)], G, Conditions(), {}, "FTFTTF"),
    ("both-truncated", G, res(col(1, 2), truncated=True), [res(col(1, 2), truncated=True)], G, Conditions(), {}, "FTFTTF"),
    # an empty golden result: exec_match fails it (empty_gold: fail); set/recall keep BIRD's EX rule
    ("both-empty", "SELECT store_name FROM stores WHERE false", res([]), [res([])], G, Conditions(), {}, "FTTFTT"),
    ("generated-empty", G, res([]), [res(col(1))], G, Conditions(), {}, "FTFTTF"),
    ("golden-empty", G, res(col(1)), [res([])], G, Conditions(), {}, "FTFTTF"),
    ("no-sql", None, None, [res(col(1))], G, Conditions(), {}, "FFFFFF"),
    ("blank-sql", "   ", None, [res(col(1))], G, Conditions(), {}, "FFFFFF"),
    ("sql-never-executed", G, NOT_RUN, [res(col(1))], G, Conditions(), {}, "FFFTTF"),
    ("agent-error-outcome", None, None, [res(col(1))], G, Conditions(), {"outcome": Outcome.AGENT_ERROR}, "FFFFFF"),
    # columns by position: duplicate or different names do not matter (EvalBench keys rows by name)
    ("duplicate-column-names-differ", G, res([(1, 2)], ["id", "id"]), [res([(1, 3)], ["id", "id"])], G, Conditions(), {}, "FTFTTF"),
    ("duplicate-column-names-equal", G, res([(1, 2)], ["id", "id"]), [res([(1, 2)], ["id", "other"])], G, Conditions(), {}, "TTTTTT"),
    ("renamed-column", G, res(col("a"), ["n"]), [res(col("a"), ["store_name"])], G, Conditions(), {}, "TTTTTT"),
    ("column-count-differs", G, res([(1, "a")]), [res(col(1))], G, Conditions(), {}, "FTFTTF"),
    ("columns-swapped", G, res([("a", 1)]), [res([(1, "a")])], G, Conditions(), {}, "FTFTTF"),
    ("decimal-2-rounds", G, res(col(1.234)), [res(col(1.23))], G, Conditions(decimal=2), {}, "TTTTTT"),
    # exec_match allows float noise; set_match / recall_match compare normalised values exactly
    ("float-noise", G, res(col(0.1 + 0.2)), [res(col(0.3))], G, Conditions(), {}, "TTFTTF"),
    ("int-vs-numeric", G, res(col(7)), [res(col(Decimal("7.000")))], G, Conditions(), {}, "TTTTTT"),
    ("nulls", G, res(col(None)), [res(col(None))], G, Conditions(), {}, "TTTTTT"),
    ("dates", G, res(col(dt.date(2024, 1, 2))), [res(col(dt.date(2024, 1, 2)))], G, Conditions(), {}, "TTTTTT"),
    ("distinct-condition", G, res(col(1, 1, 2)), [res(col(1, 2))], G, Conditions(distinct=True), {}, "TTTTTF"),
    ("second-golden-matches", G2, res(col("x")), [res(col("a")), res(col("x"))], [G, G2], Conditions(), {}, "TTTTTT"),
    ("aliases-count-by-default", "SELECT s.store_name AS n FROM stores AS s", res(col("a")), [res(col("a"))], G, Conditions(), {},
     "TTTFTT"),
    ("unparsable-sql-equal-text", "SELEC (broken FROM", res([], error="syntax error"), [res(col(1))], "selec  (BROKEN from;",
     Conditions(), {}, "FFFTTF"),
    ("management-task", "UPDATE stores SET store_name = 'x'", res([]), [res([])], "UPDATE stores SET store_name = 'x'",
     Conditions(), {"category": "Management"}, "NTNTTN"),
]


def build(sql: str | None, generated: Any, goldens: list[ExecutionResult], golden_sql: str | list[str], conditions: Conditions,
          extra: dict[str, Any]) -> tuple[Conversation, PhaseRecord]:
    conv = conversation(golden_sql, order=extra.get("order", False), category=extra.get("category", "Query"))
    phase = conv.phase
    phase.conditions = conditions
    phase.sql = sql
    phase.generated = None if generated is NOT_RUN else generated
    phase.golden = goldens
    phase.outcome = extra.get("outcome")
    return conv, phase


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pair_verdicts(case: tuple[Any, ...]) -> None:
    _id, sql, generated, goldens, golden_sql, conditions, extra, expected = case
    conv, phase = build(sql, generated, goldens, golden_sql, conditions, extra)
    scores = {name: scorer.score(conv, phase) for name, scorer in SCORERS_BY_NAME.items()}
    got = "".join(verdict(scores[name]) for name in PAIR_SCORERS)
    assert got == expected, {name: (verdict(s), s.detail) for name, s in scores.items()}
    for score in scores.values():  # pass/fail scorers: value mirrors the verdict
        if score.applicable and score.passed is not None and score is not scores["recall_match"]:
            assert score.value == (1.0 if score.passed else 0.0)


def test_at_least_thirty_pairs() -> None:
    assert len(CASES) >= 30


# --------------------------------------------------------------------------- recall_match values


@pytest.mark.parametrize(
    "generated, golden, value, precision, recall",
    [
        (col(1), col(1, 2), 0.5, "precision 1 (1/1", "recall 0.5 (1/2"),  # a missing row: recall < 1
        (col(1, 2, 3), col(1, 2), 1.0, "precision 0.6667 (2/3", "recall 1 (2/2"),  # an extra row: precision < 1
        (col(1, 1, 2), col(1, 2, 2), 2 / 3, "precision 0.6667 (2/3", "recall 0.6667 (2/3"),
        (col(), col(1), 0.0, "precision 0 (0/0", "recall 0 (0/1"),
        (col(1), col(), 1.0, "precision 0 (0/1", "recall 1 (0/0"),
    ],
)
def test_recall_match_values(generated: list[tuple[Any, ...]], golden: list[tuple[Any, ...]], value: float, precision: str,
                             recall: str) -> None:
    conv, phase = build(G, res(generated), [res(golden)], G, Conditions(), {})
    score = SCORERS_BY_NAME["recall_match"].score(conv, phase)
    assert score.value == pytest.approx(value)
    assert score.passed is False
    assert precision in score.detail and recall in score.detail


def test_recall_match_both_empty_is_flagged() -> None:
    conv, phase = build(G, res([]), [res([])], G, Conditions(), {})
    score = SCORERS_BY_NAME["recall_match"].score(conv, phase)
    assert (score.value, score.passed, score.flags) == (1.0, True, ("both_empty",))


def test_set_match_both_empty_is_flagged() -> None:
    conv, phase = build(G, res([]), [res([])], G, Conditions(), {})
    assert SCORERS_BY_NAME["set_match"].score(conv, phase).flags == ("both_empty",)


def test_recall_match_best_golden_counts() -> None:
    conv, phase = build(G, res(col(1, 2)), [res(col(1)), res(col(1, 2)), res(col(9))], G, Conditions(), {})
    score = SCORERS_BY_NAME["recall_match"].score(conv, phase)
    assert (score.value, score.passed) == (1.0, True)


# --------------------------------------------------------------------------- exact_match (EvalBench's)


def _named(columns: list[str], *rows: tuple[Any, ...]) -> ExecutionResult:
    return res(list(rows), columns)


@pytest.mark.parametrize(
    "generated, golden, match",
    [
        (_named(["a", "b"], (1, "x"), (2, "y")), _named(["a", "b"], (1, "x"), (2, "y")), True),
        (_named(["b", "a"], ("x", 1), ("y", 2)), _named(["a", "b"], (1, "x"), (2, "y")), True),  # by name
        (_named(["a", "b"], (2, "y"), (1, "x")), _named(["a", "b"], (1, "x"), (2, "y")), False),  # order matters
        (_named(["a", "c"], (1, "x"), (2, "y")), _named(["a", "b"], (1, "x"), (2, "y")), False),  # names matter
        (_named(["a"], (1.0,)), _named(["a"], (1.001,)), False),  # exact values
        (_named(["a"], (1,), (1,)), _named(["a"], (1,)), False),  # duplicates count
    ],
)
def test_exact_match_is_evalbench_ordered_result_equality(generated: Any, golden: Any, match: bool) -> None:
    conv, phase = build("SELECT 1", generated, [golden], G, Conditions(), {})
    assert SCORERS.get("exact_match")({}).score(conv, phase).passed is match


def test_exact_match_never_matches_failed_results() -> None:
    conv, phase = build("SELECT 1", res([], error="boom"), [res([], error="boom")], G, Conditions(), {})
    assert SCORERS.get("exact_match")({}).score(conv, phase).passed is False


# --------------------------------------------------------------------------- sql_exact_match


@pytest.mark.parametrize(
    "generated, golden, ignore_aliases, match",
    [
        ("SELECT s.store_name AS n FROM stores AS s", G, True, True),
        ("SELECT s.store_name AS n FROM stores AS s", G, False, False),
        ("select t.a from (select x as a from y) as t", "SELECT a FROM (SELECT x FROM y)", True, True),
        ("SELECT store_name FROM stores;;", G, False, True),
        ("SELECT store_id FROM stores", G, True, False),
        ("SELECT 1; SELECT 2", "select 1 ;  select 2;", False, True),
    ],
)
def test_sql_exact_match_normalisation(generated: str, golden: str, ignore_aliases: bool, match: bool) -> None:
    scorer = SCORERS.get("sql_exact_match")({"ignore_aliases": ignore_aliases})
    conv, phase = build(generated, None, [], golden, Conditions(), {})
    assert scorer.score(conv, phase).passed is match


def test_sql_exact_match_unparsable_falls_back_to_text() -> None:
    assert normalise_sql("  SELECT ((( FROM   x ; ") == normalise_sql("select ((( from x")


@pytest.mark.parametrize("options", [{"ignore_aliases": "yes"}, {"unknown": 1}])
def test_sql_exact_match_bad_options(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SCORERS.get("sql_exact_match")(options)


# --------------------------------------------------------------------------- regexp_matcher


@pytest.mark.parametrize(
    "pattern, sql, passed",
    [
        (r"\bjoin\b", "SELECT * FROM a JOIN b ON a.id = b.id", True),
        (r"\bjoin\b", "SELECT * FROM a", False),
        (r"^select", "  select 1", False),
        (r"order by", "SELECT 1 ORDER BY 1", True),
        (r"anything", None, False),
    ],
)
def test_regexp_matcher(pattern: str, sql: str | None, passed: bool) -> None:
    scorer = SCORERS.get("regexp_matcher")({"pattern": pattern})
    conv, phase = build(sql, None, [], G, Conditions(), {})
    assert scorer.score(conv, phase).passed is passed


@pytest.mark.parametrize("options", [{}, {"pattern": ""}, {"pattern": 3}, {"pattern": "(unclosed"}])
def test_regexp_matcher_config_error_names_pattern(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="pattern"):
        build_scorers({"regexp_matcher": options})


# --------------------------------------------------------------------------- clarification


@pytest.mark.parametrize(
    "ambiguous, asked, passed, detail",
    [
        (True, 1, True, "asked when needed"),
        (True, 0, False, "missing clarification"),
        (False, 2, False, "needless question"),
        (False, 0, True, "no question needed"),
    ],
)
def test_clarification(ambiguous: bool, asked: int, passed: bool, detail: str) -> None:
    conv = conversation(ambiguous=ambiguous)
    conv.phase.clarifications = asked
    score = SCORERS.get("clarification")({}).score(conv, conv.phase)
    assert (score.passed, score.detail) == (passed, detail)


def test_clarification_not_applicable_on_follow_up() -> None:
    conv = conversation(ambiguous=True, follow_up="SELECT 1")
    conv.phases.append(follow_up_phase())
    assert not SCORERS.get("clarification")({}).score(conv, conv.phase).applicable


# --------------------------------------------------------------------------- latency, tokens


def follow_up_phase() -> PhaseRecord:
    return PhaseRecord(phase=Phase.FOLLOW_UP, question="Now only two.", golden_sql=["SELECT 1"], conditions=Conditions(),
                       conditions_explicit=True, is_query=True, clarification_budget=0)


def add_turn(conv: Conversation, phase: Phase, latency: float, usage: TokenUsage | None, reply: bool = True) -> None:
    conv.turns.append(Turn(index=len(conv.turns), phase=phase, user_text="q", user_role="user",
                           reply=AgentReply(ReplyKind.SQL, sql="SELECT 1", usage=usage or TokenUsage(), latency_s=latency)
                           if reply else None))


def timed_conversation() -> Conversation:
    conv = conversation(follow_up="SELECT 1")
    add_turn(conv, Phase.MAIN, 1.5, TokenUsage(prompt=1000, completion=200, total=1200))
    add_turn(conv, Phase.MAIN, 0.25, TokenUsage(prompt=500, completion=100, total=0))  # adapter left total at 0
    add_turn(conv, Phase.MAIN, 0.0, None, reply=False)  # a turn still waiting for its reply
    conv.phases.append(follow_up_phase())
    add_turn(conv, Phase.FOLLOW_UP, 4.0, TokenUsage(prompt=10, completion=5, total=15))
    return conv


def test_latency_sums_the_phase_turns() -> None:
    conv = timed_conversation()
    scorer = SCORERS.get("latency")({})
    assert scorer.is_metric
    assert scorer.score(conv, conv.phases[0]).value == pytest.approx(1.75)
    assert scorer.score(conv, conv.phases[1]).value == pytest.approx(4.0)


def test_tokens_with_prices() -> None:
    conv = timed_conversation()
    scorer = SCORERS.get("tokens")({"prices": {"prompt": 3.0, "completion": 15.0}})
    assert scorer.is_metric
    score = scorer.score(conv, conv.phases[0])
    assert score.value == 1800.0
    # 1500 prompt tokens x $3/1M + 300 completion tokens x $15/1M = $0.009
    assert "1500 prompt, 300 completion" in score.detail and "$0.009000" in score.detail
    assert SCORERS.get("tokens")({}).score(conv, conv.phases[1]).value == 15.0
    assert "$" not in SCORERS.get("tokens")({}).score(conv, conv.phases[1]).detail


@pytest.mark.parametrize("options", [{"prices": 3}, {"prices": {"input": 1}}, {"prices": {"prompt": -1}}, {"price": {}}])
def test_tokens_bad_options(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SCORERS.get("tokens")(options)


# --------------------------------------------------------------------------- bird_interact_reward


def reward_of(phase: PhaseRecord, conv: Conversation) -> float | None:
    return SCORERS.get("bird_interact_reward")({}).score(conv, phase).value


@pytest.mark.parametrize(
    "main_passed, main_debugged, follow_passed, follow_debugged, main_reward, follow_reward",
    [
        (True, False, True, False, 0.7, 0.3),
        (True, True, True, True, 0.5, 0.2),
        (True, False, False, False, 0.7, 0.0),
        (True, True, True, False, 0.5, 0.3),
    ],
)
def test_reward_per_phase_adds_up(main_passed: bool, main_debugged: bool, follow_passed: bool, follow_debugged: bool,
                                  main_reward: float, follow_reward: float) -> None:
    conv = conversation(follow_up="SELECT 1")
    main = conv.phase
    main.scores = {"exec_match": Score(float(main_passed), main_passed)}
    main.primary = "exec_match"  # chosen by the score stage before any metric runs
    main.debug_used = int(main_debugged)
    assert reward_of(main, conv) == main_reward  # at scoring time the outcome is not yet set
    main.outcome = Outcome.SCORED
    follow = follow_up_phase()
    conv.phases.append(follow)
    follow.scores = {"exec_match": Score(float(follow_passed), follow_passed)}
    follow.primary = "exec_match"
    follow.debug_used = int(follow_debugged)
    follow.outcome = Outcome.SCORED
    assert reward_of(follow, conv) == follow_reward
    assert reward_of(main, conv) + reward_of(follow, conv) == pytest.approx(reward(conv))


@pytest.mark.parametrize(
    "scores, outcome, value",
    [
        ({"exec_match": Score(0.0, False)}, None, 0.0),
        ({}, None, 0.0),  # no primary scorer applies: not judged
        ({"turn_count": Score(1.0), "exec_match": Score(1.0, True)}, None, 0.7),  # the declared primary, whatever the order
        ({"exec_match": Score(1.0, True)}, Outcome.TIMEOUT, 0.0),
    ],
)
def test_reward_edge_cases(scores: dict[str, Score], outcome: Outcome | None, value: float) -> None:
    conv = conversation()
    conv.phase.scores = scores
    conv.phase.outcome = outcome
    conv.phase.primary = "exec_match" if "exec_match" in scores else None
    score = SCORERS.get("bird_interact_reward")({}).score(conv, conv.phase)
    assert score.value == value and score.passed is None


# --------------------------------------------------------------------------- robustness


ALL_NEW = ["set_match", "exact_match", "sql_exact_match", "returned_sql", "recall_match", "clarification", "latency", "tokens", "bird_interact_reward"]


@pytest.mark.parametrize("name", [*ALL_NEW, "regexp_matcher"])
def test_never_raises_on_bad_input(name: str) -> None:
    scorer = SCORERS.get(name)({"pattern": "x"} if name == "regexp_matcher" else {})
    for sql, generated, goldens in [(None, None, []), ("", None, [res([])]), ("SELECT", res([], error="e"), []),
                                    ("SELECT 1", res(col(1)), [res([], error="e"), res(col(1), truncated=True)])]:
        conv, phase = build(sql, generated, goldens, G, Conditions(), {})
        phase.golden_sql = []
        assert isinstance(scorer.score(conv, phase), Score)
