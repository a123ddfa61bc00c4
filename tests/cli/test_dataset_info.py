"""`evalbench datasets` and `evalbench db`: their counts against counts made here independently,
from the JSONL files with json and from the databases with psycopg / sqlite3."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

from evalbench.cli import main
from tests.conftest import DEMO, ROOT, shared_dataset


def _records(path: Path) -> list[dict]:
    """Every JSON object of a JSONL file, several per physical line if need be (db_blog has one)."""
    decoder, out = json.JSONDecoder(), []
    for line in path.read_text().splitlines():
        pos, line = 0, line.strip()
        while pos < len(line):
            value, pos = decoder.raw_decode(line, pos)
            out.append(value)
            while pos < len(line) and line[pos].isspace():
                pos += 1
    return out


def _expected(records: list[dict], kb: Path) -> dict:
    """The counts `datasets` should print, straight from BIRD-Interact's keys."""
    kinds, types = Counter(), Counter()
    for r in records:
        for key, kind in (("critical_ambiguity", "critical"), ("non_critical_ambiguity", "non_critical")):
            for a in r["user_query_ambiguity"].get(key, []):
                kinds[kind] += 1
                types[a.get("type") or kind] += 1
        for a in r.get("knowledge_ambiguity", []):
            kinds["knowledge"] += 1
            types[a.get("type") or "knowledge"] += 1
    follow = [r["follow_up"] for r in records if r.get("follow_up")]
    return {
        "items": len(records),
        "categories": Counter(r["category"] for r in records),
        "difficulties": Counter(r["difficulty_tier"] for r in records),
        "ambiguity_kinds": kinds, "ambiguity_types": types,
        "follow_up": len(follow), "follow_up_types": Counter(f["type"] for f in follow),
        "knowledge_entries": sum(1 for line in kb.read_text().splitlines() if line.strip()),
    }


def _datasets_json(config: Path, capsys, *extra: str) -> dict:
    assert main(["datasets", "--config", str(config), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _check_counts(group: dict, want: dict) -> None:
    assert group["items"] == want["items"]
    assert group["categories"] == dict(want["categories"])
    assert group["difficulties"] == dict(want["difficulties"])
    assert group["ambiguity_kinds"] == dict(want["ambiguity_kinds"])
    assert group["ambiguity_types"] == dict(want["ambiguity_types"])
    assert group["phases"] == {"main": want["items"], "follow_up": want["follow_up"]}
    assert group["follow_up_types"] == dict(want["follow_up_types"])
    assert group["knowledge"]["entries"] == want["knowledge_entries"]


def _blog_config(tmp_path: Path) -> Path:
    root = shared_dataset("db_blog")
    config = tmp_path / "db_blog.yaml"
    config.write_text(f"dataset_config: {root / 'interact_bird_format.jsonl'}\nsetup_directory: {root / 'setup'}\n"
                      "model_config: simulated:oracle\n")
    return config


def test_datasets_counts_on_the_quickstart(capsys, tmp_path):
    info = _datasets_json(ROOT / "configs" / "quickstart.yaml", capsys)
    assert [(g["dialect"], g["database"]) for g in info["groups"]] == [("postgres", "greenleaf")]
    group = info["groups"][0]
    _check_counts(group, _expected(_records(DEMO / "greenleaf.jsonl"), DEMO / "knowledge" / "greenleaf_kb.jsonl"))
    assert group["empty_golden"] is None and group["warnings"] is None  # no validation file given

    assert main(["datasets", "--config", str(ROOT / "configs" / "quickstart.yaml")]) == 0
    text = capsys.readouterr().out
    assert "postgres/greenleaf" in text and "unknown (run evalbench validate --json FILE" in text


def test_datasets_reads_empty_golden_and_warnings_from_a_validation_file(capsys, tmp_path):
    findings = [{"item_id": "greenleaf_1", "source": "x", "level": "warning", "message": "main golden SQL 1: empty result (...)"},
                {"item_id": "greenleaf_1", "source": "x", "level": "warning", "message": "follow_up golden SQL 1: empty result"},
                {"item_id": "greenleaf_2", "source": "x", "level": "error", "message": "main golden SQL 1 failed: boom"},
                {"item_id": "not_in_dataset", "source": "x", "level": "warning", "message": "main golden SQL 1: empty result"}]
    validation = tmp_path / "validate.json"
    validation.write_text(json.dumps({"sorted_findings": findings}))
    group = _datasets_json(ROOT / "configs" / "quickstart.yaml", capsys, "--validation", str(validation))["groups"][0]
    assert group["empty_golden"] == {"main": 1, "follow_up": 1}
    assert [w["item_id"] for w in group["warnings"]] == ["greenleaf_1", "greenleaf_1"]

    validation.write_text(json.dumps({"items": 3}))
    assert main(["datasets", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--validation", str(validation)]) == 2
    assert "validate.json" in capsys.readouterr().err


def test_datasets_counts_on_db_blog(capsys, tmp_path):
    config = _blog_config(tmp_path)
    root = shared_dataset("db_blog")
    group = _datasets_json(config, capsys)["groups"][0]
    assert group["database"] == "db_blog"
    _check_counts(group, _expected(_records(root / "interact_bird_format.jsonl"), root / "knowledge" / "db_blog_kb.jsonl"))


def _pg_tables(pgdata: Path, dbname: str) -> dict[str, tuple[int, list[tuple[str, str]]]]:
    import psycopg

    from evalbench.backends.postgres.embedded import embedded_url

    with psycopg.connect(embedded_url(pgdata, dbname)) as conn:
        names = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        return {t: (conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0],
                    conn.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = "
                                 "'public' AND table_name = %s ORDER BY ordinal_position", (t,)).fetchall())
                for t in names}


def _db_json(config: Path, capsys, *extra: str) -> list[dict]:
    assert main(["db", "--config", str(config), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _as_tables(info: dict) -> dict[str, tuple[int, list[tuple[str, str]]]]:
    return {t["name"]: (t["rows"], [(c["name"], c["type"]) for c in t["columns"]]) for t in info["tables"]}


def test_db_on_the_quickstart_postgres(pgdata, capsys):
    (info,) = _db_json(ROOT / "configs" / "quickstart.yaml", capsys, "--database", "greenleaf")
    assert _as_tables(info) == _pg_tables(pgdata, "greenleaf")
    # knowledge: entry 1 ("Realized Order") defines orders.status, so it belongs to orders
    tables = {t["name"]: t["knowledge_ids"] for t in info["tables"]}
    assert 1 in tables["orders"] and 1 not in tables["stores"]
    assert info["knowledge_entries"] == 10

    assert main(["db", "--config", str(ROOT / "configs" / "quickstart.yaml")]) == 0
    text = capsys.readouterr().out
    assert "postgres/greenleaf: 8 tables" in text and "order_items" in text


def test_db_on_the_quickstart_sqlite(tmp_path, capsys):
    config = tmp_path / "sqlite.yaml"
    config.write_text(f"dataset_config: {DEMO / 'greenleaf_sqlite.jsonl'}\nsetup_directory: {DEMO / 'setup'}\n"
                      f"dialects: [sqlite]\nmodel_config: simulated:oracle\nembedded: {{data_dir: {tmp_path / 'data'}}}\n")
    (info,) = _db_json(config, capsys)
    files = [p for p in tmp_path.rglob("greenleaf.*") if p.suffix not in (".yaml", ".evalbench")]  # beside embedded.data_dir
    assert len(files) == 1, files
    with sqlite3.connect(files[0]) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        want = {n: (conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0],
                    [(r[1], r[2]) for r in conn.execute(f'PRAGMA table_info("{n}")')]) for n in names}
    assert _as_tables(info) == want and len(want) == 8


def test_db_on_db_blog(tmp_path, pgdata, capsys):
    (info,) = _db_json(_blog_config(tmp_path), capsys)
    want = _pg_tables(pgdata, "db_blog")
    assert _as_tables(info) == want and len(want) == 20
    assert info["knowledge_entries"] == 70


def test_db_names_an_unknown_database(capsys):
    assert main(["db", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--database", "nope"]) == 2
    assert "--database 'nope'" in capsys.readouterr().err
