"""EvalBench-compatible CSVs from a real quickstart run (noisy agent, embedded PostgreSQL)."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbench.results import read_journal
from evalbench.results.render.evalbench_csv import (
    EVALBENCH_CONFIGS_COLUMNS,
    EVALBENCH_EVALS_COLUMNS,
    EVALBENCH_SCORES_COLUMNS,
    EVALBENCH_SUMMARY_COLUMNS,
    EXTRA_EVALS_COLUMNS,
    EXTRA_SCORES_COLUMNS,
    EXTRA_SUMMARY_COLUMNS,
    evalbench_config,
    evalbench_id,
    flatten_config,
    metric_name,
    write_evalbench_csvs,
)
from tests.conftest import ROOT

RUN_ID = "ebcsv"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, pgdata: Path) -> Path:
    """One real run of the quickstart config (the seeded noisy agent), then its EvalBench CSVs."""
    from evalbench import run
    from evalbench.config import load_run_config

    out = tmp_path_factory.mktemp("runs")
    config = load_run_config(ROOT / "configs" / "quickstart.yaml", run_id=RUN_ID,
                             reporting={"csv": {"output_directory": str(out)}})
    result = run(config, progress=False, out=io.StringIO())
    assert result.summary["total_items"] > 0
    paths = write_evalbench_csvs(result.run_dir)
    assert paths == [result.run_dir / name for name in ("evals.csv", "scores.csv", "summary.csv", "configs.csv")]
    return result.run_dir


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def journal(run_dir: Path) -> list[dict[str, Any]]:
    return list(read_journal(run_dir))


# --------------------------------------------------------------------------- headers


def test_evalbench_column_constants_follow_evalbench_conventions():
    # EvalBench dumps eval outputs and scores with json.dump(sort_keys=True) before building frames.
    assert sorted(EVALBENCH_EVALS_COLUMNS) == EVALBENCH_EVALS_COLUMNS
    assert sorted(EVALBENCH_SCORES_COLUMNS) == EVALBENCH_SCORES_COLUMNS
    assert len(set(EVALBENCH_EVALS_COLUMNS)) == len(EVALBENCH_EVALS_COLUMNS) == 29
    assert EVALBENCH_SUMMARY_COLUMNS == ["metric_name", "metric_score", "correct_results_count", "total_results_count",
                                         "job_id", "run_time"]
    assert EVALBENCH_CONFIGS_COLUMNS == ["job_id", "run_time", "config", "value"]
    for base, extra in ((EVALBENCH_EVALS_COLUMNS, EXTRA_EVALS_COLUMNS), (EVALBENCH_SCORES_COLUMNS, EXTRA_SCORES_COLUMNS),
                        (EVALBENCH_SUMMARY_COLUMNS, EXTRA_SUMMARY_COLUMNS)):
        assert not set(base) & set(extra)


@pytest.mark.parametrize("name, base, extra", [
    ("evals.csv", EVALBENCH_EVALS_COLUMNS, EXTRA_EVALS_COLUMNS),
    ("scores.csv", EVALBENCH_SCORES_COLUMNS, EXTRA_SCORES_COLUMNS),
    ("summary.csv", EVALBENCH_SUMMARY_COLUMNS, EXTRA_SUMMARY_COLUMNS),
    ("configs.csv", EVALBENCH_CONFIGS_COLUMNS, []),
])
def test_headers_are_evalbench_columns_then_ours(run_dir, name, base, extra):
    header, _ = read_rows(run_dir / name)
    assert header[: len(base)] == base
    assert header == base + extra


def test_extensions_off_gives_exactly_evalbench_headers(run_dir, tmp_path):
    paths = write_evalbench_csvs(run_dir, out_dir=tmp_path, extensions=False)
    expected = [EVALBENCH_EVALS_COLUMNS, EVALBENCH_SCORES_COLUMNS, EVALBENCH_SUMMARY_COLUMNS, EVALBENCH_CONFIGS_COLUMNS]
    for path, columns in zip(paths, expected, strict=True):
        assert read_rows(path)[0] == columns, path.name
    assert not any(row["config"].startswith("run.") for row in read_rows(paths[3])[1])


# --------------------------------------------------------------------------- rows


def test_one_evals_row_per_item_and_phase(run_dir):
    records = journal(run_dir)
    _, rows = read_rows(run_dir / "evals.csv")
    expected = sorted((r["item_id"], p["phase"]) for r in records for p in r["phases"])
    assert sorted((row["item_id"], row["phase"]) for row in rows) == expected
    assert any(phase == "follow_up" for _, phase in expected)
    ids = [row["id"] for row in rows]
    assert len(set(ids)) == len(ids)  # evals join scores one-to-one on (job_id, id)
    for row in rows:
        assert row["id"] == evalbench_id(row["item_id"], row["phase"])
        assert row["job_id"] == RUN_ID
        assert row["dialects"] == "['postgres']" and row["database"] == "greenleaf"


def test_evals_rows_carry_the_phase_sql_results_and_errors(run_dir):
    by_key = {(r["item_id"], p["phase"]): (r, p) for r in journal(run_dir) for p in r["phases"]}
    _, rows = read_rows(run_dir / "evals.csv")
    outcomes = set()
    for row in rows:
        _record, phase = by_key[(row["item_id"], row["phase"])]
        assert row["nl_prompt"] == phase["question"]
        assert row["generated_sql"] == (phase["sql"] or "")
        assert row["outcome"] == phase["outcome"]
        outcomes.add(phase["outcome"])
        generated = phase["generated"]
        if generated is None:
            assert row["generated_result"] == "" and row["generated_error"] == ""
        else:
            assert row["generated_error"] == (generated["error"] or "")
            text = row["generated_result"]
            rows_json, _, more = text.partition("...and ")
            preview = json.loads(rows_json)
            assert preview == [dict(zip(generated["columns"], values, strict=True)) for values in generated["preview"]]
            if generated["row_count"] > len(generated["preview"]):
                assert more == f"{generated['row_count'] - len(generated['preview'])} more items truncated"
            else:
                assert more == ""
        if phase["outcome"] == "scored":
            assert row["sql_generator_error"] == ""
        else:
            assert row["sql_generator_error"].startswith(phase["outcome"])
        assert row["golden_sql"] == str(phase.get("golden_sql", []))  # journals before golden_sql was kept: []
    assert "scored" in outcomes and len(outcomes) > 1  # the noisy agent fails in some phases


def test_one_scores_row_per_item_phase_and_applicable_scorer(run_dir):
    records = journal(run_dir)
    _, rows = read_rows(run_dir / "scores.csv")
    expected = sorted((r["item_id"], p["phase"], name) for r in records for p in r["phases"]
                      for name, s in p["scores"].items() if s["applicable"])
    assert sorted((row["item_id"], row["phase"], row["comparator"]) for row in rows) == expected
    scores = {(r["item_id"], p["phase"], name): s for r in records for p in r["phases"] for name, s in p["scores"].items()}
    for row in rows:
        score = scores[(row["item_id"], row["phase"], row["comparator"])]
        if score["passed"] is None:
            assert float(row["score"]) == score["value"]  # metrics keep their value
        else:
            assert row["score"] == ("100" if score["passed"] else "0")  # EvalBench's 0 / 100
        assert row["id"] == evalbench_id(row["item_id"], row["phase"])


def test_summary_totals_equal_summary_json(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    _, rows = read_rows(run_dir / "summary.csv")
    by_name = {row["metric_name"]: row for row in rows}
    assert len(by_name) == len(rows)
    for scorer, phases in summary["scorers"].items():
        for phase, tally in phases.items():
            row = by_name[metric_name(scorer, phase)]
            assert row["phase"] == phase and row["job_id"] == RUN_ID
            assert int(row["total_results_count"]) == tally["applicable"]
            assert int(row["not_applicable_count"]) == tally["not_applicable"]
            if "mean" in tally:  # non-binary metric: EvalBench reports the average and the sum
                assert float(row["metric_score"]) == pytest.approx(tally["mean"], abs=1e-4)
                assert float(row["correct_results_count"]) == pytest.approx(tally["mean"] * tally["applicable"], abs=1e-2)
            else:
                assert int(row["correct_results_count"]) == tally["passed"]
                assert row["metric_score"] == ("1" if scorer == "executable" else "100")
    # EvalBench's order: configured scorers, executable last.
    assert [row["metric_name"] for row in rows][-2:] == ["executable", "executable:follow_up"]
    assert rows[0]["metric_name"] == "exec_match"


def test_configs_are_the_flattened_redacted_config(run_dir):
    import pandas as pd

    manifest = json.loads((run_dir / "manifest.json").read_text())
    _, rows = read_rows(run_dir / "configs.csv")
    assert {row["job_id"] for row in rows} == {RUN_ID}
    assert {row["run_time"] for row in rows} == {str(pd.Timestamp(manifest["created_at"]).to_pydatetime())}
    flat = pd.json_normalize(evalbench_config(manifest), sep=".").to_dict(orient="records")[0]
    evalbench_rows = [(row["config"], row["value"]) for row in rows if not row["config"].startswith("run.")]
    assert evalbench_rows == [(key, "" if value is None else str(value)) for key, value in flat.items()]
    values = dict(evalbench_rows)
    assert values["experiment_config.dialects"] == "['postgres']"
    assert values["model_config.agent"] == "simulated:noisy"
    assert values["experiment_config.seed"] == "42"
    assert dict((row["config"], row["value"]) for row in rows)["run.scorers"] == str(manifest["scorers"])


def test_pandas_reads_every_file(run_dir):
    import pandas as pd

    records = journal(run_dir)
    evals = pd.read_csv(run_dir / "evals.csv", keep_default_na=False, dtype=str)
    assert len(evals) == sum(len(r["phases"]) for r in records)
    assert list(evals.columns[: len(EVALBENCH_EVALS_COLUMNS)]) == EVALBENCH_EVALS_COLUMNS
    scores = pd.read_csv(run_dir / "scores.csv")
    assert set(scores["score"].unique()) >= {0, 100}
    summary = pd.read_csv(run_dir / "summary.csv")
    main = summary.set_index("metric_name").loc["exec_match"]
    expected = json.loads((run_dir / "summary.json").read_text())["scorers"]["exec_match"]["main"]["applicable"]
    assert 0 < main["correct_results_count"] < main["total_results_count"] == expected
    # The join EvalBench's dashboard makes (bqstore.py): every score row finds its eval row.
    joined = scores.astype({"id": str}).merge(evals[["job_id", "id", "nl_prompt"]], on=["job_id", "id"], how="left")
    assert len(joined) == len(scores) and joined["nl_prompt"].notna().all()


def test_our_own_scores_and_summary_are_kept_under_native_names(tmp_path):
    from evalbench.results.journal.rundir import SCORES_COLUMNS

    native_scores = ",".join(SCORES_COLUMNS) + "\r\nsyn,q1,postgres,db,main,exec_match,1.0,True,True,ok,\r\n"
    native_summary = "run_id,metric_name,phase,metric_score\r\nsyn,exec_match,main,100.0\r\n"
    (tmp_path / "scores.csv").write_text(native_scores, encoding="utf-8", newline="")
    (tmp_path / "summary.csv").write_text(native_summary, encoding="utf-8", newline="")
    write_evalbench_csvs(tmp_path, [synthetic_record("q1", "SELECT 1", "q?")])
    assert (tmp_path / "scores_native.csv").read_bytes().decode() == native_scores
    assert (tmp_path / "summary_native.csv").read_bytes().decode() == native_summary
    assert read_rows(tmp_path / "scores.csv")[0][0] == "comparator"
    assert read_rows(tmp_path / "summary.csv")[0][0] == "metric_name"
    write_evalbench_csvs(tmp_path, [synthetic_record("q1", "SELECT 1", "q?")])  # again: ours untouched
    assert (tmp_path / "scores_native.csv").read_bytes().decode() == native_scores
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_run_directory_holds_evalbench_files_at_the_top(run_dir):
    for name, first in (("evals.csv", "cleanup_sql"), ("scores.csv", "comparator"), ("summary.csv", "metric_name"),
                        ("configs.csv", "job_id")):
        assert read_rows(run_dir / name)[0][0] == first, name
    for name in ("scores_native.csv", "summary_native.csv"):
        if (run_dir / name).exists():
            assert read_rows(run_dir / name)[0][0] == "run_id", name
    assert not list(run_dir.glob(".*.tmp"))


# --------------------------------------------------------------------------- synthetic records


def synthetic_record(item_id: str, sql: str, question: str, *, passed: bool = True) -> dict[str, Any]:
    execution = {"columns": ["name", "note"], "row_count": 7, "truncated": False, "elapsed_s": 0.01, "error": None,
                 "error_kind": None, "preview": [["a, \"b\"", "line1\nline2"], ["ünï", None]]}
    return {
        "schema_version": 1, "run_id": "syn", "item_id": item_id, "dialect": "postgres", "database": "db",
        "category": "Query", "query_type": "dql", "difficulty": "Simple", "outcome": "scored", "error": None,
        "turns": [{"index": 0, "phase": "main", "user_role": "user", "user_text": question,
                   "reply": {"kind": "sql", "text": "", "sql": sql, "latency_s": 0.25, "error": None}, "vuser": None}],
        "phases": [{"phase": "main", "question": question, "outcome": "scored", "error": None, "clarifications": 0,
                    "sql": sql, "golden_sql": [sql], "generated": execution, "golden": [execution],
                    "scores": {"exec_match": {"value": 1.0 if passed else 0.0, "passed": passed, "applicable": True,
                                              "detail": 'rows differ: "x", y\nz', "flags": ["both_empty"]}}}],
    }


def test_sql_with_commas_quotes_and_newlines_round_trips(tmp_path):
    import pandas as pd

    sql = 'SELECT "a, b", \'it\'\'s\'\r\nFROM t -- comment, "quoted"\nWHERE x = \'1,2\';'
    question = 'Which "stores", in "Paris, FR"?\nAll of them.'
    paths = write_evalbench_csvs(tmp_path, [synthetic_record("q1", sql, question)], out_dir=tmp_path / "out")
    _, evals = read_rows(paths[0])
    assert evals[0]["generated_sql"] == sql and evals[0]["nl_prompt"] == question
    assert evals[0]["golden_sql"] == str([sql])
    result = evals[0]["generated_result"]
    assert result.endswith("...and 5 more items truncated")
    assert json.loads(result.split("...and ")[0]) == [{"name": "a, \"b\"", "note": "line1\nline2"}, {"name": "ünï", "note": None}]
    _, scores = read_rows(paths[1])
    assert scores[0]["generated_sql"] == sql and scores[0]["comparison_logs"] == 'rows differ: "x", y\nz'
    frame = pd.read_csv(paths[0], keep_default_na=False, dtype=str)
    assert frame.loc[0, "generated_sql"] == sql and frame.loc[0, "nl_prompt"] == question
    assert frame.loc[0, "sql_generator_time"] == "0.25"
    _, summary = read_rows(paths[2])
    assert [(r["metric_name"], r["correct_results_count"], r["total_results_count"]) for r in summary] == [
        ("exec_match", "1", "1"), ("executable", "1", "1")]
    assert read_rows(paths[3]) == (EVALBENCH_CONFIGS_COLUMNS, [])  # no manifest: no config rows


def test_flatten_config_matches_pandas_json_normalize():
    import pandas as pd

    data = {"experiment_config": {"a": {"b": 1, "c": [1, {"d": 2}]}, "empty": {}, "n": None, "f": 1.5, "t": True},
            "model_config": {"agent": "x", "nested": {"deep": {"k": "v"}}}, "db_configs": {"postgres": [{"password": "***"}]},
            "top": "level"}
    assert flatten_config(data) == pd.json_normalize(data, sep=".").to_dict(orient="records")[0]
    assert list(flatten_config(data)) == list(pd.json_normalize(data, sep=".").columns)


def test_database_configs_are_grouped_by_dialect_like_evalbench():
    manifest = {"config": {"model_config": {"agent": "a"}, "seed": 1,
                           "database_configs": [{"dialect": "postgres", "database_name": "x", "password": "***"}]}}
    shaped = evalbench_config(manifest)
    assert shaped == {"experiment_config": {"seed": 1}, "model_config": {"agent": "a"},
                      "db_configs": {"postgres": [{"dialect": "postgres", "database_name": "x", "password": "***"}]}}


def test_memory_stays_flat_in_the_number_of_records(tmp_path):
    def records(n: int) -> Iterator[dict[str, Any]]:
        for i in range(n):
            yield synthetic_record(f"q{i}", f"SELECT {i}, 'x'\nFROM t", f"question {i}?", passed=i % 3 == 0)

    def peak(n: int) -> int:
        tracemalloc.start()
        write_evalbench_csvs(tmp_path, records(n), out_dir=tmp_path / f"out{n}")
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(500), peak(4000)
    assert large < small * 1.5 + 200_000
    _, rows = read_rows(tmp_path / "out4000" / "summary.csv")
    assert rows[0]["correct_results_count"] == str(len(range(0, 4000, 3))) and rows[0]["total_results_count"] == "4000"
