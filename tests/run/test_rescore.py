"""`evalbench rescore` and `agent: predictions`, end to end on the quickstart (embedded PostgreSQL).

The source run's agent is a real HTTP server (an OpenAI-compatible fake, :class:`StubAgent`)
that counts every request it gets. It answers each question with its golden SQL — except that,
for the questions whose rows are compared unordered and without ``distinct``, it returns every
row twice (``UNION ALL``): BIRD-Interact's semantics compares such rows as sets (pass), ours as
multisets (fail). So rescoring with the other semantics must flip exactly those verdicts, while
the agent gets no request at all and the source directory stays byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from evalbench.cli import main
from tests.attack_agent import completion
from tests.fake_llm_server import FakeLLMServer, Received, Scripted

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
DATASET = ROOT / "datasets" / "demo" / "greenleaf.jsonl"
SCORERS = "scorers={exec_match: {semantics: %s}, test_cases: {}, answer_match: {}, executable: {}, turn_count: {}}"
BROKEN = "greenleaf_3"  # the stub answers HTTP 500: agent_error, in the source and in every rescore


def _items() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATASET.read_text().splitlines() if line.strip()]


def _statement(sql: list[str] | str) -> str:
    return (sql[0] if isinstance(sql, list) else sql).strip().rstrip(";")


def _doubled(item: dict[str, Any]) -> bool:
    """Rows compared as a set by bird_interact and as a multiset by evalbench."""
    conditions = item.get("conditions") or {}
    return item["category"] == "Query" and not conditions.get("order") and not conditions.get("distinct")


class StubAgent:
    """An OpenAI-compatible chat server answering the quickstart's questions; ``requests``
    counts every HTTP request it received (chat completions, model listings, anything)."""

    def __init__(self) -> None:
        self.items = {}
        for item in _items():
            self.items[item["amb_user_query"]] = item
            self.items[item["query"]] = item
        self.server = FakeLLMServer(self._respond)

    @property
    def requests(self) -> int:
        return len(self.server.requests)

    def _respond(self, request: Received) -> Scripted:
        if request.path.endswith("/models"):
            return Scripted(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
        messages = request.json().get("messages") or []
        users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
        item = self.items.get(users[0]) if users else None
        if item is None:
            return Scripted(200, completion(None, text="OK"))
        if item["instance_id"] == BROKEN:
            return Scripted(500, {"error": {"message": "stub agent: internal error"}})
        follow_up = item.get("follow_up") or {}
        if follow_up and users[-1] == follow_up.get("query"):
            return Scripted(200, completion(_statement(follow_up["sol_sql"])))
        asked = any(m.get("role") == "assistant" for m in messages)
        if item["user_query_ambiguity"]["critical_ambiguity"] and not asked:
            return Scripted(200, completion(None, question="Which exact definition do you mean?"))
        if item["category"] != "Query":
            return Scripted(200, completion(";\n".join(_statement(s) for s in item["sol_sql"])))
        golden = _statement(item["sol_sql"])
        sql = f"SELECT * FROM ({golden}) AS a UNION ALL SELECT * FROM ({golden}) AS b" if _doubled(item) else golden
        return Scripted(200, completion(sql))

    def close(self) -> None:
        self.server.close()


@pytest.fixture(scope="module")
def stub() -> Any:
    agent = StubAgent()
    yield agent
    agent.close()


def _tree_digest(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _records(run_dir: Path) -> dict[str, dict[str, Any]]:
    lines = (run_dir / "conversations.jsonl").read_text().splitlines()
    return {r["item_id"]: r for r in map(json.loads, lines)}


def _main_verdicts(run_dir: Path) -> dict[str, Any]:
    return {item_id: r["phases"][0]["passed"] for item_id, r in _records(run_dir).items()}


def _turns(run_dir: Path) -> dict[str, list[Any]]:
    return {item_id: [(t["phase"], t["user_text"], (t["reply"] or {}).get("kind"), (t["reply"] or {}).get("sql"),
                       (t["vuser"] or {}).get("text")) for t in r["turns"]]
            for item_id, r in _records(run_dir).items()}


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def source_run(stub: StubAgent, tmp_path_factory: pytest.TempPathFactory, pgdata: Path) -> Path:
    out = tmp_path_factory.mktemp("rescore-runs")
    model = f"model_config={{agent: openai_compat, base_url: '{stub.server.url}/v1', model: stub}}"
    code = main(["run", "--config", str(QUICKSTART), "--output-dir", str(out), "--run-id", "source", "--no-progress",
                 "--set", model, "--max-infra-errors", "5"])
    assert code == 0
    assert stub.requests > 43  # every item asked, and the ambiguous ones twice
    return out / "source"


def test_rescore_with_other_semantics_flips_verdicts_without_the_agent(stub: StubAgent, source_run: Path) -> None:
    before = _tree_digest(source_run)
    requests = stub.requests
    code = main(["rescore", str(source_run), "--run-id", "strict", "--no-progress", "--set", SCORERS % "evalbench",
                 "--max-infra-errors", "5"])
    assert code == 0
    rescored = source_run.parent / "strict"
    assert stub.requests == requests, "rescore called the agent"
    assert _tree_digest(source_run) == before, "rescore changed the source run directory"

    items = {item["instance_id"]: item for item in _items()}
    old, new = _main_verdicts(source_run), _main_verdicts(rescored)
    flipped = sorted(i for i in old if old[i] != new[i])
    doubled = sorted(i for i in old if _doubled(items[i]) and i != BROKEN)
    assert flipped and flipped == doubled  # every doubled answer passed as a set and fails as a multiset
    assert all(old[i] is True and new[i] is False for i in flipped)
    # the same conversations, replayed turn by turn, except that a main phase that now fails is
    # not followed by its follow-up
    lost = sorted(i for i in flipped if items[i].get("follow_up"))
    assert lost
    source_turns = _turns(source_run)
    for item_id, turns in _turns(rescored).items():
        assert turns == [t for t in source_turns[item_id] if item_id not in lost or t[0] == "main"], item_id
    assert _records(rescored)[BROKEN]["outcome"] == "agent_error" == _records(source_run)[BROKEN]["outcome"]

    a, b = _summary(source_run), _summary(rescored)
    assert a["total_items"] == b["total_items"] == 43
    assert b["scorers"]["exec_match"]["main"]["passed"] == a["scorers"]["exec_match"]["main"]["passed"] - len(flipped)
    assert (a["scoring"]["semantics"], b["scoring"]["semantics"]) == ("bird_interact", "evalbench")
    manifest = json.loads((rescored / "manifest.json").read_text())
    source_manifest = json.loads((source_run / "manifest.json").read_text())
    assert manifest["rescored_from"]["run_id"] == "source"
    assert manifest["rescored_from"]["config_fingerprint"] == source_manifest["config_fingerprint"]
    assert manifest["rescored_from"]["scoring"]["semantics"] == "bird_interact"
    assert manifest["scoring"]["semantics"] == "evalbench"
    assert manifest["agent"]["recorded"]["agent"] == "openai_compat"
    for name in ("summary.json", "summary.md", "scores.csv", "evals.csv", "summary.csv", "report.html", "junit.xml"):
        assert (rescored / name).is_file(), name

    # a rescored run rescores again: with the source's semantics (from its config file), the
    # source's main verdicts come back; the follow-ups the strict run never asked cannot be
    # replayed and say so (agent_error); neither earlier directory changes
    before_strict = _tree_digest(rescored)
    code = main(["rescore", str(rescored), "--config", str(QUICKSTART), "--run-id", "back", "--no-progress",
                 "--max-infra-errors", "5"])
    assert code == 0
    back = source_run.parent / "back"
    assert stub.requests == requests
    assert _tree_digest(rescored) == before_strict and _tree_digest(source_run) == before
    assert _main_verdicts(back) == old
    back_records, back_turns = _records(back), _turns(back)
    for item_id in lost:
        assert back_records[item_id]["outcome"] == "agent_error"
        assert "never asked this follow_up question" in back_records[item_id]["error"]
    assert all(back_turns[i] == source_turns[i] for i in source_turns if i not in lost)
    assert _summary(back)["success"]["main"] == a["success"]["main"]
    assert json.loads((back / "manifest.json").read_text())["agent"]["recorded"]["agent"] == "openai_compat"


def test_rescore_refuses_what_it_cannot_do(source_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rescore", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err
    assert main(["rescore", str(source_run), "--set", "model_config=simulated:oracle"]) == 2
    assert "model_config cannot be set" in capsys.readouterr().err
    assert main(["rescore", str(source_run), "--run-id", "source", "--output-dir", str(source_run.parent)]) == 2
    assert "overwrite its source" in capsys.readouterr().err


# --------------------------------------------------------------------------- predictions


SMALL = ("greenleaf_1", "greenleaf_2", "greenleaf_4", "greenleaf_41")  # follow-ups, a management task
MISSING = "greenleaf_4"


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("small") / "greenleaf_small.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in _items() if i["instance_id"] in SMALL))
    return path


def _golden(item_id: str) -> tuple[list[str], list[str] | None]:
    item = next(i for i in _items() if i["instance_id"] == item_id)
    return item["sol_sql"], (item.get("follow_up") or {}).get("sol_sql")


def _score_predictions(small_dataset: Path, out: Path, run_id: str, agent: str) -> dict[str, Any]:
    code = main(["run", "--config", str(QUICKSTART), "--output-dir", str(out), "--run-id", run_id, "--no-progress",
                 "--set", f"dataset_config={small_dataset}", "--set", f"model_config={agent}"])
    assert code == 0
    return _records(out / run_id)


def _check_predictions(records: dict[str, dict[str, Any]]) -> None:
    assert sorted(records) == sorted(SMALL)  # the item without a prediction is not dropped
    missing = records[MISSING]
    assert missing["outcome"] == "agent_error" and f"no prediction for item {MISSING}" in missing["error"]
    assert missing["phases"][0]["passed"] is False
    for item_id in ("greenleaf_1", "greenleaf_2", "greenleaf_41"):
        assert records[item_id]["outcome"] == "scored", item_id
        assert all(p["passed"] for p in records[item_id]["phases"]), item_id
        assert all((t["reply"] or {}).get("kind") == "sql" for t in records[item_id]["turns"])  # never a question
    assert [p["phase"] for p in records["greenleaf_1"]["phases"]] == ["main", "follow_up"]


def test_predictions_json_object_and_evalbench_list(small_dataset: Path, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    g1, g1_fu = _golden("greenleaf_1")
    predictions = {"greenleaf_1": [g1[0], g1_fu[0]], "greenleaf_2": _golden("greenleaf_2")[0][0],
                   "greenleaf_41": {"sql": _golden("greenleaf_41")[0][0]}, "no_such_item": "SELECT 1"}
    path = tmp_path / "predictions.json"
    path.write_text(json.dumps(predictions))
    with caplog.at_level(logging.WARNING):
        records = _score_predictions(small_dataset, tmp_path, "object", f"{{agent: predictions, predictions_file: '{path}'}}")
    _check_predictions(records)
    assert any("no_such_item" in r.getMessage() for r in caplog.records)  # an unknown id is warned about

    # EvalBench's eval outputs (oneshotorchestrator.py::process dumps them): id + generated_sql,
    # a later phase as <id>:follow_up (our evals.csv)
    evalbench = [{"id": "greenleaf_1", "generated_sql": g1[0]}, {"id": "greenleaf_1:follow_up", "generated_sql": g1_fu[0]},
                 {"id": "greenleaf_2", "generated_sql": _golden("greenleaf_2")[0][0], "database": "greenleaf"},
                 {"id": "greenleaf_41", "generated_sql": _golden("greenleaf_41")[0][0]}]
    path = tmp_path / "evals.json"
    path.write_text(json.dumps(evalbench))
    records = _score_predictions(small_dataset, tmp_path, "evalbench",
                                 f"{{agent: predictions, predictions_file: '{path}', format: evalbench}}")
    _check_predictions(records)


def test_predictions_bird_interact_jsonl_with_follow_up_file(small_dataset: Path, tmp_path: Path) -> None:
    """BIRD-Interact's batch evaluator reads ``instance_id`` and ``pred_sqls`` (a list run as one
    script), main and follow-up (``_fu``) in two files."""
    main_file, fu_file = tmp_path / "sql_results.jsonl", tmp_path / "sql_results_fu.jsonl"
    rows = [{"instance_id": i, "selected_database": "greenleaf", "pred_sqls": _golden(i)[0]}
            for i in SMALL if i != MISSING]
    rows[1]["pred_sqls"] = json.dumps(rows[1]["pred_sqls"])  # a string holding a JSON list (ensure_list)
    main_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fu_file.write_text(json.dumps({"instance_id": "greenleaf_1", "pred_sqls": _golden("greenleaf_1")[1]}) + "\n")
    agent = (f"{{agent: predictions, predictions_file: '{main_file}', follow_up_file: '{fu_file}', "
             "format: bird_interact}")
    _check_predictions(_score_predictions(small_dataset, tmp_path, "bird", agent))


def test_predictions_file_errors_name_file_and_line(small_dataset: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "greenleaf_1", "sql": "SELECT 1"}\n{"sql": "SELECT 2"}\n')
    code = main(["run", "--config", str(QUICKSTART), "--output-dir", str(tmp_path), "--no-progress", "--no-preflight",
                 "--set", f"dataset_config={small_dataset}", "--set", f"model_config={{agent: predictions, predictions_file: '{bad}'}}"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{bad}:2" in err and "item id" in err
    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"id": "greenleaf_1", "sql": "SELECT 1"}\n{"id": "greenleaf_1", "sql": "SELECT 2"}\n')
    code = main(["run", "--config", str(QUICKSTART), "--output-dir", str(tmp_path), "--no-progress", "--no-preflight",
                 "--set", f"dataset_config={small_dataset}", "--set", f"model_config={{agent: predictions, predictions_file: '{twice}'}}"])
    assert code == 2
    assert "second main prediction for item 'greenleaf_1'" in capsys.readouterr().err


def test_recorded_errors_keep_their_outcome(source_run: Path, tmp_path: Path, stub: StubAgent) -> None:
    """A conversation that ended in an infrastructure error or was cancelled stays so when rescored
    (here written into a copy of a real journal: a database lost at execution, a cancelled run, a
    virtual user that failed on the first question), even though its recorded SQL would now run."""
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree(source_run, copy)
    records = [json.loads(line) for line in (copy / "conversations.jsonl").read_text().splitlines()]
    items = {item["instance_id"]: item for item in _items()}
    ambiguous = next(r for r in records if r["turns"][0]["reply"]["kind"] == "clarification"
                     and not _doubled(items[r["item_id"]]))
    edits = {"greenleaf_2": ("db_error", "connection lost while executing"), "greenleaf_5": ("cancelled", "run cancelled"),
             ambiguous["item_id"]: ("vuser_error", "the virtual user's model is down")}
    for record in records:
        if record["item_id"] not in edits:
            continue
        outcome, error = edits[record["item_id"]]
        record["outcome"], record["error"] = outcome, error
        record["phases"] = record["phases"][:1]
        if outcome != "cancelled":  # a cancelled conversation carries its outcome on no phase
            record["phases"][0] |= {"outcome": outcome, "error": error}
        if outcome == "vuser_error":
            record["turns"] = record["turns"][:1]
            record["turns"][0]["vuser"] |= {"error": error, "text": ""}
        else:
            record["turns"] = [t for t in record["turns"] if t["phase"] == "main"]
    (copy / "conversations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    requests = stub.requests
    code = main(["rescore", str(copy), "--run-id", "kept", "--no-progress", "--max-infra-errors", "5"])
    assert code == 0
    assert stub.requests == requests
    rescored = _records(tmp_path / "kept")
    for item_id, (outcome, error) in edits.items():
        assert (rescored[item_id]["outcome"], rescored[item_id]["error"]) == (outcome, error), item_id
        if outcome != "cancelled":
            assert rescored[item_id]["phases"][0]["outcome"] == outcome
    assert rescored["greenleaf_1"]["outcome"] == "scored"
    assert _summary(tmp_path / "kept")["outcomes"]["db_error"] == 1


def test_predictions_file_shapes(tmp_path: Path) -> None:
    from evalbench.agents.predictions_file import read_predictions
    from evalbench.core.errors import ConfigError

    csv_file = tmp_path / "evals.csv"  # EvalBench's evals.csv columns (and ours: a later phase as <id>:follow_up)
    csv_file.write_text('database,generated_sql,id\ngreenleaf,"SELECT 1",7\ngreenleaf,"SELECT 2",7:follow_up\n')
    read = read_predictions(csv_file, "evalbench")
    assert (read.main, read.follow_up) == ({"7": "SELECT 1"}, {"7": "SELECT 2"})

    one_record = tmp_path / "one.json"  # a one-line JSONL file is a record, not an {id: sql} object
    one_record.write_text(json.dumps({"instance_id": "a", "pred_sqls": "[\"CREATE TEMP TABLE t AS SELECT 1 AS x -- why\", \"SELECT x FROM t;\"]"}))
    script = read_predictions(one_record).main["a"]
    assert script == "CREATE TEMP TABLE t AS SELECT 1 AS x -- why\n;\nSELECT x FROM t"

    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"a": "", "b": None, "c": ["SELECT 1"], "d": {"sql": "SELECT 4", "follow_up_sql": "SELECT 5"}}))
    read = read_predictions(mapping)
    assert read.main == {"a": None, "b": None, "c": "SELECT 1", "d": "SELECT 4"} and read.follow_up == {"d": "SELECT 5"}

    for text, fmt, message in (("", "auto", "holds no prediction"), ('{"a": 3}', "auto", "expected an SQL text"),
                               ('{"a": "SELECT 1"}', "bird_interact", "expects records with 'instance_id'"),
                               ('[{"id": "a", "sql": "SELECT 1"}]', "evalbench", "under generated_sql"),
                               ('{"id": "a", "sql": "SELECT 1"}\nnot json\n', "auto", r"bad\.json:2: not valid JSON")):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(ConfigError, match=message):
            read_predictions(bad, fmt)
    only_follow_up = tmp_path / "fu.jsonl"  # a record with the follow-up's SQL alone predicts no main phase
    only_follow_up.write_text('{"item_id": "a", "follow_up_sql": "SELECT 2"}\n{"item_id": "b", "sql": "SELECT 3"}\n')
    read = read_predictions(only_follow_up)
    assert (read.main, read.follow_up) == ({"b": "SELECT 3"}, {"a": "SELECT 2"})
