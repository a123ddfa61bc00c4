"""Statement splitting and classification: one tokenization gives both, remembered by (text,
dialect), and agrees with classifying each statement on its own."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from evalbench.sql import statements
from evalbench.sql.statements import classify_statements, split_statements, statement_kind

PIECES = ["SELECT 1", "select a from t", "WITH x AS (SELECT 1) UPDATE t SET a = 1", "INSERT INTO t VALUES (';')",
          "SELECT 'a;b'", "DELETE FROM t", "ALTER ROLE me SET x = 1", "COMMENT ON TABLE t IS 'x'", "$$a;b$$",
          "SELECT * FROM t FOR UPDATE", "(SELECT 2)", "-- note ;\nSELECT 3", "/* ; */ SELECT 4", ";", " ", "\n"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=6), st.sampled_from(["postgres", "sqlite", "duckdb", "mysql"]))
def test_one_tokenization_agrees_with_classifying_each_statement(pieces: list[str], dialect: str) -> None:
    text = ";".join(pieces)
    classified = classify_statements(text, dialect)
    assert [s for s, _, _ in classified] == split_statements(text, dialect)
    for statement, verb, modifies in classified:
        assert (verb, modifies) == statements._uncached_kind(statement, dialect)
        assert statement_kind(statement, dialect) == (verb, modifies)


def test_a_text_is_tokenized_once_however_often_it_is_asked() -> None:
    statements._classified.cache_clear()
    sql = "SELECT id FROM readings WHERE station = 'station_1' ORDER BY id; SELECT 2"
    for _ in range(5):
        split_statements(sql, "postgres")
        classify_statements(sql, "postgres")
    info = statements._classified.cache_info()
    assert info.misses == 1 and info.hits == 9
    assert split_statements(sql, "mysql") == ["SELECT id FROM readings WHERE station = 'station_1' ORDER BY id", "SELECT 2"]
    assert statements._classified.cache_info().misses == 2  # another dialect is another entry


def test_a_huge_text_is_not_remembered() -> None:
    statements._classified.cache_clear()
    statements._statement_kind.cache_clear()
    huge = "SELECT " + " + ".join(["1"] * 40_000)
    assert classify_statements(huge)[0][1] == "SELECT"
    assert statements._classified.cache_info().currsize == 0
    assert split_statements(huge) == [huge]
    assert statement_kind(huge) == ("SELECT", False)
    assert statements._classified.cache_info().currsize == 0  # splitting it did not remember it either
    assert statements._statement_kind.cache_info().currsize == 0
