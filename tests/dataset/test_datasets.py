"""Dataset loaders: BIRD-Interact JSONL, EvalBench standard JSON, format detection, scans, and how
invalid records are reported (never silently dropped)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.core.errors import DatasetError
from evalbench.dataset import Dataset, Item, RecordError, load_items
from tests.conftest import DEMO, shared_dataset


def bird(n: int, **changes) -> dict:
    record = {
        "instance_id": f"x_{n}",
        "selected_database": "db",
        "query": f"question {n}?",
        "sol_sql": [f"SELECT {n}"],
        "category": "Query",
    }
    record.update(changes)
    return record


def evalbench(n: int, **changes) -> dict:
    record = {
        "id": n,
        "nl_prompt": f"prompt {n}",
        "query_type": "dql",
        "database": "db",
        "dialects": ["postgres", "mysql"],
        "golden_sql": {"postgres": [f"SELECT {n}"], "mysql": [f"SELECT {n} -- mysql"]},
    }
    record.update(changes)
    return record


def jsonl(tmp_path: Path, *lines: str, name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def dumps(*records: dict) -> list[str]:
    return [json.dumps(r) for r in records]


def ids(items: list[Item]) -> list[str]:
    return [i.id for i in items]


# --------------------------------------------------------------------------- BIRD-Interact JSONL


def test_two_objects_on_one_physical_line(tmp_path):
    a, b, c, d = dumps(bird(1), bird(2), bird(3), bird(4))
    path = jsonl(tmp_path, a, b + c, d)  # line 2 holds two objects, with no space between them
    items, errors = load_items(path)
    assert errors == []
    assert ids(items) == ["x_1", "x_2", "x_3", "x_4"]
    assert [i.source for i in items] == ["data.jsonl:1", "data.jsonl:2", "data.jsonl:2", "data.jsonl:3"]


def test_two_objects_on_one_line_separated_by_whitespace(tmp_path):
    a, b = dumps(bird(1), bird(2))
    items, errors = load_items(jsonl(tmp_path, "  " + a + " \t " + b + "  ", "", "   "))
    assert (ids(items), errors) == (["x_1", "x_2"], [])


def test_malformed_line_is_reported_and_other_items_load(tmp_path):
    a, c, d = dumps(bird(1), bird(3), bird(4))
    path = jsonl(tmp_path, a, '{"instance_id": "x_2", "sol_sql": [}', "", c, d)
    items, errors = load_items(path)
    assert ids(items) == ["x_1", "x_3", "x_4"]
    [error] = errors
    assert isinstance(error, RecordError)
    assert (error.file, error.line) == (str(path), 2)
    assert error.message.startswith("invalid JSON at column ")
    assert str(error).startswith(f"{path}:2: invalid JSON")


def test_malformed_json_column_is_where_the_problem_is(tmp_path):
    path = jsonl(tmp_path, '{"instance_id": x}')
    [error] = load_items(path)[1]
    assert error.message == "invalid JSON at column 17: Expecting value"


def test_truncated_line_column_points_at_the_end_of_the_text(tmp_path):
    # The object is cut off after 35 characters: the error is just past them, at column 36, not at column 1
    # (the line's newline made the decoder count columns from the next, empty line).
    text = '{"instance_id": "x_1", "sol_sql": ['
    assert len(text) == 35
    [error] = load_items(jsonl(tmp_path, text, *dumps(bird(2))))[1]
    assert error.line == 1
    assert error.message == "invalid JSON at column 36: Expecting value"


def test_garbage_after_an_object_on_the_same_line(tmp_path):
    path = jsonl(tmp_path, dumps(bird(1))[0] + " trailing", *dumps(bird(2)))
    items, errors = load_items(path)
    assert ids(items) == ["x_1", "x_2"]
    assert [(e.line, e.message) for e in errors] == [(1, "invalid JSON at column " + str(len(dumps(bird(1))[0]) + 2) + ": Expecting value")]


def test_record_missing_sol_sql(tmp_path):
    broken = bird(2)
    del broken["sol_sql"]
    path = jsonl(tmp_path, *dumps(bird(1), broken, bird(3)))
    items, errors = load_items(path)
    assert ids(items) == ["x_1", "x_3"]
    [error] = errors
    assert (error.file, error.line, error.item_id) == (str(path), 2, "x_2")
    assert "'sol_sql'" in error.message
    assert str(error) == f"{path}:2 (item x_2): key 'sol_sql' is missing or empty"


def test_record_with_empty_sol_sql(tmp_path):
    [error] = load_items(jsonl(tmp_path, *dumps(bird(1, sol_sql=[]))))[1]
    assert (error.item_id, error.message) == ("x_1", "key 'sol_sql' is missing or empty")


def test_sol_sql_as_a_single_string(tmp_path):
    [item] = load_items(jsonl(tmp_path, *dumps(bird(1, sol_sql="SELECT 42"))))[0]
    assert item.golden_sql == ["SELECT 42"]


def test_record_with_wrong_sol_sql_type(tmp_path):
    [error] = load_items(jsonl(tmp_path, *dumps(bird(1, sol_sql=[1, 2]))))[1]
    assert (error.item_id, error.message) == ("x_1", "key 'sol_sql': expected a list of strings")


def test_record_missing_instance_id(tmp_path):
    record = bird(1)
    del record["instance_id"]
    [error] = load_items(jsonl(tmp_path, *dumps(record)))[1]
    assert (error.line, error.item_id, error.message) == (1, None, "key 'instance_id' is missing")


def test_record_missing_database(tmp_path):
    [error] = load_items(jsonl(tmp_path, *dumps(bird(7, selected_database=None))))[1]
    assert (error.item_id, error.message) == ("x_7", "key 'selected_database' is missing")


def test_duplicate_instance_ids(tmp_path):
    path = jsonl(tmp_path, *dumps(bird(1), bird(2), bird(1, query="again")))
    items, errors = load_items(path)
    assert ids(items) == ["x_1", "x_2"]
    assert items[0].question == "question 1?"  # the first one wins
    [error] = errors
    assert (error.line, error.item_id, error.message) == (3, "x_1", "duplicate item id 'x_1'")


def test_bird_fields(tmp_path):
    record = bird(
        1,
        amb_user_query="the big ones?",
        difficulty_tier="Simple",
        preprocess_sql=["SET x = 1"],
        clean_up_sqls="RESET x",
        high_level=True,
        external_knowledge=[3],
        user_query_ambiguity={
            "critical_ambiguity": [{"term": "big", "sql_snippet": "size > 10", "type": "semantic", "is_mask": True}],
            "non_critical_ambiguity": [{"term": "ones"}],
        },
        knowledge_ambiguity=[{"term": "KPI", "deleted_knowledge": 4}],
    )
    [item] = load_items(jsonl(tmp_path, *dumps(record)))[0]
    assert item.question == "question 1?"
    assert item.opening_question == "the big ones?"
    assert item.database == "db"
    assert item.dialect == "postgres"
    assert item.difficulty == "Simple"
    assert item.preprocess_sql == ["SET x = 1"]
    assert item.clean_up_sqls == ["RESET x"]
    assert item.other == {"high_level": True}
    assert item.external_knowledge == [3]
    assert [(a.kind, a.term, a.sql_snippet, a.is_mask, a.knowledge_id) for a in item.ambiguities] == [
        ("critical", "big", "size > 10", True, None),
        ("non_critical", "ones", None, False, None),
        ("knowledge", "KPI", None, False, 4),
    ]
    assert item.needs_clarification is True
    assert item.is_query is True


def test_bad_ambiguity_entry(tmp_path):
    record = bird(1, user_query_ambiguity={"critical_ambiguity": [{"sql_snippet": "x"}]})
    [error] = load_items(jsonl(tmp_path, *dumps(record)))[1]
    assert error.message == "key user_query_ambiguity.critical_ambiguity[0]: expected a mapping with a 'term' string"


def test_management_item(tmp_path):
    [item] = load_items(jsonl(tmp_path, *dumps(bird(1, category="Management", sol_sql=["UPDATE t SET a = 1"]))))[0]
    assert (item.category, item.query_type, item.is_query) == ("Management", "dml", False)


def test_bird_items_are_postgres_only(tmp_path):
    path = jsonl(tmp_path, *dumps(bird(1)))
    assert load_items(path, dialects=["mysql"]) == ([], [])
    assert [i.dialect for i in load_items(path, dialects=["mysql", "postgres"])[0]] == ["postgres"]


# --------------------------------------------------------------------------- follow_up


def test_follow_up_parsing(tmp_path):
    follow_up = {
        "query": "and per city?",
        "sol_sql": ["SELECT 2", "SELECT 2.0"],
        "conditions": {"order": True, "distinct": False, "decimal": 2},
        "type": "attribute_change",
        "category": "Query",
        "test_cases": ["assert True"],
        "external_knowledge": [1],
    }
    [item] = load_items(jsonl(tmp_path, *dumps(bird(1, follow_up=follow_up))))[0]
    fu = item.follow_up
    assert fu is not None
    assert fu.question == "and per city?"
    assert fu.golden_sql == ["SELECT 2", "SELECT 2.0"]
    assert (fu.conditions.order, fu.conditions.distinct, fu.conditions.decimal) == (True, False, 2)
    assert (fu.type, fu.category) == ("attribute_change", "Query")
    assert fu.test_cases == ["assert True"]
    assert fu.external_knowledge == [1]


def test_follow_up_defaults(tmp_path):
    [item] = load_items(jsonl(tmp_path, *dumps(bird(1, follow_up={"query": "more?", "sol_sql": "SELECT 3"}))))[0]
    fu = item.follow_up
    assert (fu.golden_sql, fu.category, fu.type, fu.conditions.order, fu.conditions.decimal) == (["SELECT 3"], "Query", None, False, -1)


@pytest.mark.parametrize("empty", [None, {}])
def test_no_follow_up(tmp_path, empty):
    [item] = load_items(jsonl(tmp_path, *dumps(bird(1, follow_up=empty))))[0]
    assert item.follow_up is None


@pytest.mark.parametrize(
    ("follow_up", "message"),
    [
        ({"query": "more?"}, "key 'follow_up.sol_sql' is missing or empty"),
        ("more?", "key 'follow_up': expected a mapping"),
        ({"query": "more?", "sol_sql": ["S"], "conditions": {"order": "yes"}}, "key follow_up.conditions.order: expected true or false, got 'yes'"),
    ],
)
def test_bad_follow_up(tmp_path, follow_up, message):
    path = jsonl(tmp_path, *dumps(bird(1, follow_up=follow_up), bird(2)))
    items, errors = load_items(path)
    assert ids(items) == ["x_2"]
    assert [(e.line, e.item_id, e.message) for e in errors] == [(1, "x_1", message)]


# --------------------------------------------------------------------------- conditions


def test_conditions_parsing(tmp_path):
    path = jsonl(
        tmp_path,
        *dumps(
            bird(1, conditions={"order": True, "distinct": True, "decimal": 2}),
            bird(2),
            bird(3, conditions={"decimal": None}),
            bird(4, conditions={}),
            bird(5, conditions=None),
        ),
    )
    items, errors = load_items(path)
    assert errors == []
    got = {i.id: (i.conditions.order, i.conditions.distinct, i.conditions.decimal, i.conditions_explicit) for i in items}
    assert got == {
        "x_1": (True, True, 2, True),
        "x_2": (False, False, -1, False),
        "x_3": (False, False, -1, True),
        "x_4": (False, False, -1, True),
        "x_5": (False, False, -1, True),
    }


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ({"order": "yes"}, "key conditions.order: expected true or false, got 'yes'"),
        ({"distinct": 1}, "key conditions.distinct: expected true or false, got 1"),
        ({"decimal": 1.5}, "key conditions.decimal: expected an integer, got 1.5"),
        ({"decimal": True}, "key conditions.decimal: expected an integer, got True"),
        ({"decimal": "2"}, "key conditions.decimal: expected an integer, got '2'"),
        ({"limit": 3, "order": True}, "key 'conditions': unknown condition(s) limit"),
        ([True, False], "key 'conditions': expected a mapping with order, distinct, decimal"),
    ],
)
def test_bad_conditions(tmp_path, conditions, message):
    path = jsonl(tmp_path, *dumps(bird(1), bird(2, conditions=conditions), bird(3)))
    items, errors = load_items(path)
    assert ids(items) == ["x_1", "x_3"]
    assert [(e.line, e.item_id, e.message) for e in errors] == [(2, "x_2", message)]


# --------------------------------------------------------------------------- EvalBench standard JSON


def test_evalbench_array_one_item_per_requested_dialect(tmp_path):
    path = tmp_path / "eb.json"
    records = [
        evalbench(1),
        evalbench(2, query_type="dml", dialects=["postgres"], golden_sql={"postgres": ["UPDATE t SET a = 1"]}),
        evalbench(3, query_type="DDL"),
        evalbench(4, dialects=["mysql"], golden_sql={"mysql": ["SELECT 4"]}),
    ]
    path.write_text(json.dumps(records, indent=2))
    items, errors = load_items(path, dialects=["postgres", "mysql"])
    assert errors == []
    got = [(i.id, i.dialect, i.golden_sql, i.category, i.query_type) for i in items]
    assert got == [
        ("1", "postgres", ["SELECT 1"], "Query", "dql"),
        ("1", "mysql", ["SELECT 1 -- mysql"], "Query", "dql"),
        ("2", "postgres", ["UPDATE t SET a = 1"], "Management", "dml"),
        ("3", "postgres", ["SELECT 3"], "Management", "ddl"),
        ("3", "mysql", ["SELECT 3 -- mysql"], "Management", "ddl"),
        ("4", "mysql", ["SELECT 4"], "Query", "dql"),
    ]
    assert items[0].question == "prompt 1"
    assert items[0].source == "eb.json:2"
    assert items[2].is_query is False
    # only the requested dialects
    assert [(i.id, i.dialect) for i in load_items(path)[0]] == [("1", "postgres"), ("2", "postgres"), ("3", "postgres")]


def test_evalbench_per_dialect_fields(tmp_path):
    path = tmp_path / "eb.json"
    record = evalbench(
        1,
        setup_sql={"postgres": ["CREATE TEMP TABLE x (a int)"]},
        cleanup_sql={"postgres": ["DROP TABLE x"], "mysql": []},
        eval_query={"postgres": [None, "SELECT count(*) FROM x"]},
        tags=["JOIN", 3],
        other={"Comment": "LGTM"},
    )
    path.write_text(json.dumps([record]))
    [item] = load_items(path)[0]
    assert item.preprocess_sql == ["CREATE TEMP TABLE x (a int)"]
    assert item.clean_up_sqls == ["DROP TABLE x"]
    assert item.eval_query == ["SELECT count(*) FROM x"]
    assert item.tags == ["JOIN", "3"]
    assert item.other == {"Comment": "LGTM"}
    assert item.conditions_explicit is False


def test_evalbench_dialects_default_to_golden_keys(tmp_path):
    path = tmp_path / "eb.json"
    path.write_text(json.dumps([evalbench(1, dialects=None)]))
    assert [(i.dialect, i.golden_sql) for i in load_items(path, dialects=["mysql"])[0]] == [("mysql", ["SELECT 1 -- mysql"])]


def test_evalbench_golden_missing_for_a_listed_dialect(tmp_path):
    path = tmp_path / "eb.json"
    path.write_text(json.dumps([evalbench(1, golden_sql={"mysql": ["SELECT 1"]})], indent=2))
    [error] = load_items(path)[1]
    assert (error.line, error.item_id, error.message) == (2, "1", "key 'golden_sql.postgres' is missing or empty")


def test_evalbench_invalid_element_is_reported_with_its_line(tmp_path):
    path = tmp_path / "eb.json"
    bad = {"id": 2, "nl_prompt": "x", "database": "db", "golden_sql": "SELECT 1"}
    text = "[\n" + ",\n".join(json.dumps(r, indent=2) for r in (evalbench(1), bad, evalbench(3))) + "\n]\n"
    path.write_text(text)
    second_line = text.count("\n", 0, text.index('{\n  "id": 2,')) + 1  # the line of the element's "{"
    items, errors = load_items(path)
    assert ids(items) == ["1", "3"]
    [error] = errors
    assert (error.file, error.line, error.item_id) == (str(path), second_line, "2")
    assert error.message == "key 'golden_sql': expected a mapping of dialect to SQL list"
    assert text.split("\n")[second_line - 1] == "{"


def test_evalbench_malformed_element_gives_record_error_with_line(tmp_path):
    path = tmp_path / "eb.json"
    path.write_text("[\n" + json.dumps(evalbench(1)) + ",\n" + '{"id": 2, "nl_prompt": oops},\n' + json.dumps(evalbench(3)) + "\n]\n")
    items, errors = load_items(path)
    assert ids(items) == ["1"]  # inside an array the rest cannot be re-synchronised
    [error] = errors
    assert (error.file, error.line) == (str(path), 3)
    assert error.message == "invalid JSON at column 24: Expecting value; the rest of the file was not read"


def test_evalbench_missing_comma(tmp_path):
    path = tmp_path / "eb.json"
    path.write_text("[\n" + json.dumps(evalbench(1)) + "\n" + json.dumps(evalbench(2)) + "\n]")
    items, errors = load_items(path)
    assert ids(items) == ["1"]
    assert [(e.line, e.message) for e in errors] == [(3, "expected ',' or ']' after an array element")]


def test_evalbench_empty_array(tmp_path):
    path = tmp_path / "eb.json"
    path.write_text(" [ ] ")
    assert load_items(path) == ([], [])


def test_evalbench_single_pretty_printed_object(tmp_path):
    # reader.iter_json_array: "Not an array: a single object, or JSON lines with a .json name."
    path = tmp_path / "one.json"
    path.write_text(json.dumps(evalbench(1), indent=2))
    items, errors = load_items(path)
    assert [str(e) for e in errors] == []
    assert [(i.id, i.dialect) for i in items] == [("1", "postgres")]


def test_evalbench_duplicate_ids(tmp_path):
    path = tmp_path / "eb.json"
    path.write_text(json.dumps([evalbench(1), evalbench(1)], indent=2))
    items, errors = load_items(path, dialects=["postgres", "mysql"])
    assert [(i.id, i.dialect) for i in items] == [("1", "postgres"), ("1", "mysql")]
    assert [(e.item_id, e.message) for e in errors] == [("1", "duplicate item id '1'"), ("1", "duplicate item id '1'")]


# --------------------------------------------------------------------------- format detection


def test_auto_detects_bird_interact(tmp_path):
    dataset = Dataset(jsonl(tmp_path, *dumps(bird(1))))
    assert dataset.scan().format == "bird-interact"


def test_auto_detects_evalbench(tmp_path):
    path = tmp_path / "eb.json"
    path.write_text(json.dumps([evalbench(1)]))
    assert Dataset(path).scan().format == "evalbench"


def test_auto_detects_bird_interact_lines_in_a_json_file(tmp_path):
    path = jsonl(tmp_path, *dumps(bird(1), bird(2)), name="bird.json")
    scan = Dataset(path).scan()
    assert (scan.format, scan.total, scan.errors) == ("bird-interact", 2, [])


def test_undetectable_record_is_an_error_and_detection_continues(tmp_path):
    path = jsonl(tmp_path, '{"question": "?"}', "[1, 2]", *dumps(bird(1)))
    items, errors = load_items(path)
    assert ids(items) == ["x_1"]
    assert [(e.line, e.message) for e in errors] == [
        (1, "cannot tell the dataset format of this record"),
        (2, "cannot tell the dataset format of this record"),
    ]


def test_explicit_format_is_not_second_guessed(tmp_path):
    path = jsonl(tmp_path, *dumps(bird(1), bird(2)))
    items, errors = load_items(path, format="evalbench")
    assert items == []
    assert [(e.line, e.message) for e in errors] == [(1, "key 'id' is missing"), (2, "key 'id' is missing")]


def test_missing_dataset_file(tmp_path):
    with pytest.raises(DatasetError) as info:
        Dataset(tmp_path / "absent.jsonl")
    assert str(info.value) == f"{tmp_path / 'absent.jsonl'}: dataset file not found"
    assert info.value.exit_code == 2


# --------------------------------------------------------------------------- scan and filtering


def test_scan_group_counts(tmp_path):
    path = tmp_path / "eb.json"
    records = [
        evalbench(1),
        evalbench(2, database="shop"),
        evalbench(3, database="shop", query_type="dml"),
        evalbench(4, dialects=["postgres"]),
        {"id": 5, "nl_prompt": "bad", "database": "db", "golden_sql": []},
    ]
    path.write_text(json.dumps(records, indent=1))
    scan = Dataset(path, dialects=["postgres", "mysql"]).scan()
    assert scan.groups == Counter({("postgres", "db"): 2, ("mysql", "db"): 1, ("postgres", "shop"): 2, ("mysql", "shop"): 2})
    assert scan.total == 7
    assert [(e.item_id, e.message) for e in scan.errors] == [("5", "key 'golden_sql': expected a mapping of dialect to SQL list")]
    assert scan.filtered_out == 0
    assert scan.format == "evalbench"


def test_query_types_filter(tmp_path):
    path = jsonl(
        tmp_path,
        *dumps(bird(1), bird(2, category="Management"), bird(3, selected_database="other"), bird(4, category="Management")),
    )
    scan = Dataset(path, query_types=["DQL"]).scan()
    assert scan.groups == Counter({("postgres", "db"): 1, ("postgres", "other"): 1})
    assert scan.filtered_out == 2
    assert scan.errors == []
    assert ids(list(Dataset(path, query_types=["dml"]).items())) == ["x_2", "x_4"]
    assert ids(list(Dataset(path, query_types=["dql", "dml"]).items())) == ["x_1", "x_2", "x_3", "x_4"]
    assert ids(list(Dataset(path).items())) == ["x_1", "x_2", "x_3", "x_4"]


def test_items_streams_one_group(tmp_path):
    path = jsonl(tmp_path, *dumps(bird(1), bird(2, selected_database="other"), bird(3)), "{broken")
    dataset = Dataset(path)
    assert ids(list(dataset.items(("postgres", "db")))) == ["x_1", "x_3"]
    assert ids(list(dataset.items(("postgres", "other")))) == ["x_2"]
    assert list(dataset.items(("mysql", "db"))) == []
    records = list(dataset.iter_records())
    assert [type(r).__name__ for r in records] == ["Item", "Item", "Item", "RecordError"]


# --------------------------------------------------------------------------- the real db_blog files


def test_real_bird_interact_file():
    path = shared_dataset("db_blog/interact_bird_format.jsonl")
    items, errors = load_items(path)
    assert errors == []
    assert len(items) == 201
    assert Counter(i.category for i in items) == Counter({"Query": 121, "Management": 80})
    assert sum(i.is_query for i in items) == 121
    assert len({i.id for i in items}) == 201
    line5 = [i.id for i in items if i.source == "interact_bird_format.jsonl:5"]
    assert len(line5) == 2
    with path.open(encoding="utf-8") as handle:
        physical_lines = sum(1 for line in handle if line.strip())
    assert physical_lines == 200
    scan = Dataset(path).scan()
    assert (scan.format, scan.total, dict(scan.groups)) == ("bird-interact", 201, {("postgres", "db_blog"): 201})
    queries = Dataset(path, query_types=["dql"]).scan()
    assert (queries.total, queries.filtered_out) == (121, 80)
    assert sum(1 for i in items if i.follow_up is not None) > 0


def test_real_evalbench_file():
    path = shared_dataset("db_blog/nl2sql_evalbench_format.json")
    items, errors = load_items(path)
    assert errors == []
    assert len(items) == 23
    assert {i.dialect for i in items} == {"postgres"}
    assert {i.database for i in items} == {"db_blog"}
    assert len({i.id for i in items}) == 23
    raw = json.loads(path.read_text())
    by_id = {str(r["id"]): r for r in raw}
    for item in items:
        assert item.golden_sql == by_id[item.id]["golden_sql"]["postgres"]
        assert item.query_type == by_id[item.id]["query_type"].lower()
        assert item.category == ("Query" if item.query_type == "dql" else "Management")
    assert Dataset(path).scan().format == "evalbench"
    two = load_items(path, dialects=["postgres", "mysql"])[0]
    assert Counter(i.dialect for i in two) == Counter({"postgres": 23, "mysql": 23})


# --------------------------------------------------------------------------- evalbench run --strict


@pytest.fixture
def run_with_bad_line(tmp_path: Path, pgdata: Path) -> tuple[Path, Path]:
    demo_lines = (DEMO / "greenleaf.jsonl").read_text().splitlines()[:3]
    dataset = jsonl(tmp_path, demo_lines[0], '{"instance_id": "greenleaf_broken", "sol_sql": [', *demo_lines[1:])
    config = tmp_path / "run.yaml"
    config.write_text(
        f"dataset_config: {dataset.name}\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        "model_config: simulated:oracle\n"
        "scorers: {exec_match: {}, executable: {}}\n"
        "reporting: {csv: {output_directory: out}}\n"
    )
    return config, dataset


def test_run_strict_fails_on_a_malformed_line(run_with_bad_line, capsys):
    config, dataset = run_with_bad_line
    code = main(["run", "--config", str(config), "--strict", "--run-id", "strict", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("error: ")
    assert "(--strict)" in captured.err
    assert f"{dataset}:2: invalid JSON" in captured.err
    assert not (config.parent / "out" / "strict").exists()


def test_run_without_strict_skips_and_reports_the_bad_line(run_with_bad_line, capsys):
    config, dataset = run_with_bad_line
    code = main(["run", "--config", str(config), "--run-id", "lenient", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "1 dataset record" in out  # the console summary mentions the skipped record
    summary = json.loads((config.parent / "out" / "lenient" / "summary.json").read_text())
    assert summary["total_items"] == 3
    assert summary["dataset"]["items"] == 3
    assert summary["dataset"]["record_errors"] == 1
    assert len(summary["record_errors"]) == 1
    assert summary["record_errors"][0].startswith(f"{dataset}:2: invalid JSON")
    assert summary["scorers"]["exec_match"]["main"]["passed"] == 3
    assert summary["outcomes"]["scored"] == 3
    conversations = (config.parent / "out" / "lenient" / "conversations.jsonl").read_text().splitlines()
    assert len(conversations) == 3


def test_bird_interact_sol_sql_given_as_a_json_string_is_read_as_its_list():
    """BIRD-Interact's evaluator reads a string sol_sql that is a JSON list as that list (ensure_list)."""
    from evalbench.dataset.formats import bird_interact_items

    raw = {"instance_id": "x", "selected_database": "db", "query": "q", "sol_sql": '["SELECT 1", "SELECT 2"]'}
    assert bird_interact_items(raw, "f:1", ["postgres"])[0].golden_sql == ["SELECT 1", "SELECT 2"]
    raw["sol_sql"] = "SELECT [1] FROM t"  # not JSON: one SQL text
    assert bird_interact_items(raw, "f:1", ["postgres"])[0].golden_sql == ["SELECT [1] FROM t"]


def test_bird_interact_record_names_its_dialect(tmp_path):
    """A BIRD-Interact record's optional "dialect" key (normalised; PostgreSQL when absent) decides
    which requested dialect yields its item."""
    from evalbench.dataset.formats import bird_interact_items

    assert bird_interact_items(bird(1), "f:1", ["postgres"])[0].dialect == "postgres"
    assert bird_interact_items(bird(1, dialect="SQLite"), "f:1", ["postgres"]) == []
    assert bird_interact_items(bird(1, dialect="SQLite"), "f:1", ["sqlite"])[0].dialect == "sqlite"
    assert bird_interact_items(bird(1, dialect="postgresql"), "f:1", ["postgres"])[0].dialect == "postgres"
    assert bird_interact_items(bird(1), "f:1", ["sqlite"]) == []

    items, errors = load_items(DEMO / "greenleaf_sqlite.jsonl", dialects=["sqlite"])
    assert not errors and len(items) == 43 and {i.dialect for i in items} == {"sqlite"}
    assert load_items(DEMO / "greenleaf_sqlite.jsonl", dialects=["postgres"])[0] == []


def test_a_run_with_no_item_of_its_dialects_says_which_the_file_has(tmp_path):
    from evalbench.dataset import Dataset

    demo = Path(__file__).resolve().parents[2] / "datasets" / "demo"
    message = Dataset(demo / "greenleaf.jsonl", "auto", ["sqlite"]).nothing_to_run()
    assert message.startswith("no items to run for dialects ['sqlite']") and "dialect(s) postgres" in message
    assert Dataset(demo / "greenleaf_sqlite.jsonl", "auto", ["postgres"]).dialects_present() == ["sqlite"]
