"""Issue 24: a UTF-8 byte-order mark is accepted at the start of every file the harness reads.

Editors on Windows save one. Through the public interface: a setup directory whose every SQL and
CSV file starts with one provisions the same database on SQLite, DuckDB and PostgreSQL; a run whose
config, nested config files, dataset, knowledge, predictions and ``--item-ids`` file all start
with one runs every item; a run directory whose manifest, summary and journal start with one is
read by report, runs, explain, compare, ``--resume`` and ``--baseline``. Then the readers that
need a model (prompt files), EvalBench's JSON format, column meanings and ``--validation``. And a
guard: no reader in the package opens text as plain ``utf-8``."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from evalbench.cli import main
from tests.conftest import DEMO, ROOT

BOM = "\ufeff"
DATABASE = "bomleaf"  # a database of its own: the demo's greenleaf of other tests is left alone


def _with_bom(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BOM + text, encoding="utf-8")
    return path


def _setup(tmp: Path, dialect: str) -> Path:
    """The demo's setup for ``dialect``, every file starting with a BOM, as database ``bomleaf``."""
    source = DEMO / "setup" / "greenleaf"
    for sub in (dialect, "data"):
        for path in sorted((source / sub).iterdir()):
            _with_bom(tmp / "setup" / DATABASE / sub / path.name, path.read_text(encoding="utf-8"))
    return tmp / "setup"


def _items(dialect: str, count: int) -> list[dict]:
    name = "greenleaf.jsonl" if dialect == "postgres" else f"greenleaf_{dialect}.jsonl"
    records = [json.loads(line) for line in (DEMO / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    chosen = [r for r in records if r["category"] == "Query" and not r.get("follow_up")][:count]
    return [r | {"selected_database": DATABASE} for r in chosen]


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["evalbench", *args])
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb", "postgres"])
def test_a_setup_directory_with_boms_provisions_the_same_database(tmp_path, pgdata, monkeypatch, capsys, dialect):
    if dialect == "duckdb":
        pytest.importorskip("duckdb")
    items = _items(dialect, 2)
    dataset = _with_bom(tmp_path / "items.jsonl", "".join(json.dumps(i) + "\n" for i in items))
    config = _with_bom(tmp_path / "run.yaml", f"dataset_config: {dataset}\nsetup_directory: {_setup(tmp_path, dialect)}\n"
                                              f"dialects: [{dialect}]\nmodel_config: simulated:oracle\n")
    code, out = _cli(monkeypatch, capsys, "db", "--config", str(config), "--json")
    assert code == 0, out
    tables = {t["name"]: t["rows"] for t in json.loads(out)[0]["tables"]}
    for csv_file in (DEMO / "setup" / "greenleaf" / "data").glob("*.csv"):
        lines = [line for line in csv_file.read_text(encoding="utf-8").splitlines() if line.strip()]
        assert tables[csv_file.stem] == len(lines), csv_file.name


def test_a_run_reads_every_input_and_every_run_file_with_a_bom(tmp_path, pgdata, monkeypatch, capsys):
    items = _items("sqlite", 4)
    ids = [i["instance_id"] for i in items]
    dataset = _with_bom(tmp_path / "items.jsonl", "".join(json.dumps(i) + "\n" for i in items))
    knowledge = DEMO / "knowledge"
    _with_bom(tmp_path / "kb" / f"{DATABASE}_kb.jsonl", (knowledge / "greenleaf_kb.jsonl").read_text(encoding="utf-8"))
    _with_bom(tmp_path / "kb" / f"{DATABASE}_column_meaning_base.json",
              (knowledge / "greenleaf_column_meaning_base.json").read_text(encoding="utf-8"))
    predictions = _with_bom(tmp_path / "predictions.json", json.dumps({i["instance_id"]: i["sol_sql"] for i in items}))
    _with_bom(tmp_path / "agent.yaml", f"agent: predictions\npredictions_file: {predictions}\n")
    _with_bom(tmp_path / "db.yaml", f"database_name: {DATABASE}\ndialect: sqlite\n")
    id_file = _with_bom(tmp_path / "ids.txt", "\n".join(ids) + "\n")
    config = _with_bom(tmp_path / "run.yaml",
                       f"dataset_config: {dataset}\ndataset_format: bird-interact\nknowledge_directory: {tmp_path / 'kb'}\n"
                       f"setup_directory: {_setup(tmp_path, 'sqlite')}\ndialects: [sqlite]\nmodel_config: agent.yaml\n"
                       "database_configs: [db.yaml]\nvuser_model_config: {vuser: rules}\n"
                       "scorers: {exec_match: {}}\nseed: 3\n")
    out_dir = tmp_path / "out"
    run = ["run", "--config", str(config), "--no-progress", "--output-dir", str(out_dir), "--item-ids", f"@{id_file}"]
    code, out = _cli(monkeypatch, capsys, *run, "--run-id", "first")
    assert code == 0, out
    run_dir = out_dir / "first"
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["total_items"] == len(ids) and summary["success"]["main"]["passed"] == len(ids)
    assert not summary["dataset"].get("record_errors")

    for name in ("manifest.json", "summary.json", "conversations.jsonl"):  # a run directory edited in Notepad
        path = run_dir / name
        path.write_text(BOM + path.read_text(encoding="utf-8"), encoding="utf-8")
    for args in (["report", str(run_dir)], ["runs", str(out_dir)], ["explain", str(run_dir), ids[0]],
                 ["compare", str(run_dir), str(run_dir), "--output-dir", str(tmp_path / "cmp")],
                 [*run, "--resume", str(run_dir)],
                 [*run, "--run-id", "second", "--baseline", str(run_dir), "--max-regression", "success=0.01"]):
        code, out = _cli(monkeypatch, capsys, *args)
        assert code == 0 and "error:" not in out and "warning" not in out.lower(), (args, out)
    assert "first" in _cli(monkeypatch, capsys, "runs", str(out_dir))[1]
    journal = (run_dir / "conversations.jsonl").read_bytes().splitlines()
    assert len(journal) == len(ids)  # --resume found every conversation, the first line's too: none ran again


def test_an_evalbench_json_dataset_and_a_validation_file_with_a_bom(tmp_path, monkeypatch, capsys):
    dataset = _with_bom(tmp_path / "ds.json", json.dumps([{
        "id": "1", "nl_prompt": "How many?", "database": "d", "dialects": ["postgres"], "query_type": "DQL",
        "golden_sql": {"postgres": ["SELECT 1"]}, "setup_sql": {}, "eval_query": {}, "cleanup_sql": {}, "tags": [],
        "other": {}}]))
    config = _with_bom(tmp_path / "run.yaml", f"dataset_config: {dataset}\nmodel_config: simulated:oracle\n")
    finding = {"item_id": "1", "level": "warning", "message": "main golden SQL: empty result"}
    validation = _with_bom(tmp_path / "validate.json", json.dumps({"sorted_findings": [finding]}))
    code, out = _cli(monkeypatch, capsys, "datasets", "--config", str(config), "--json", "--validation", str(validation))
    assert code == 0, out
    [group] = json.loads(out)["groups"]
    assert group["items"] == 1 and group["empty_golden"] == {"main": 1, "follow_up": 0}


def test_prompt_files_with_a_bom_are_read_without_it(tmp_path):
    from evalbench.agents.chat import load_template
    from evalbench.config.agents import OpenAICompatAgentConfig
    from evalbench.scoring.llmrater import load_prompt
    from evalbench.vuser.llm import ENCODE_PROMPT, _load_prompt

    agent_prompt = _with_bom(tmp_path / "system.txt", "You write SQL.\n{schema}\n")
    config = OpenAICompatAgentConfig(agent="openai_compat", base_url="http://127.0.0.1:1/v1", model="m",
                                     system_prompt=agent_prompt)
    assert load_template(config)[1].startswith("You write SQL.")
    judge = _with_bom(tmp_path / "judge.txt", "Rate {{ANSWER}} please\n")
    assert load_prompt(judge, required="{{ANSWER}}")[1].startswith("Rate")
    vuser = _with_bom(tmp_path / "encode.txt", "Encode {question}\n")
    assert _load_prompt(vuser, ENCODE_PROMPT, "encode_prompt", "{question}")[1].startswith("Encode")


def test_column_meanings_with_a_bom(tmp_path):
    from evalbench.dataset.column_meanings import load_column_meanings

    _with_bom(tmp_path / "d_column_meaning_base.json", json.dumps({"d|t|c": "the c of t"}))
    assert load_column_meanings(tmp_path) == {"d": {("t", "c"): "the c of t"}}


def _text_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls that read a text file as plain ``utf-8``: ``read_text(encoding="utf-8")``,
    ``open(..., encoding="utf-8")`` in a reading mode."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        keywords = {k.arg: k.value for k in node.keywords}
        encoding = keywords.get("encoding")
        if not (isinstance(encoding, ast.Constant) and str(encoding.value).lower().replace("_", "-") in ("utf-8", "utf8")):
            continue
        mode_node = keywords.get("mode") or next((a for a in node.args if isinstance(a, ast.Constant)
                                                  and isinstance(a.value, str)), None)
        mode = mode_node.value if isinstance(mode_node, ast.Constant) else "r"
        if name == "read_text" or (name in ("open", "fdopen") and not any(c in str(mode) for c in "wax+")):
            found.append((node.lineno, name))
    return found


def test_no_reader_opens_text_without_accepting_a_bom():
    offenders = []
    for path in sorted((ROOT / "evalbench").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{path.relative_to(ROOT)}:{line} {name}" for line, name in _text_reads(tree)]
    assert offenders == [], "read text as utf-8-sig (a BOM is accepted): " + ", ".join(offenders)


def test_the_guard_finds_a_plain_utf8_reader():
    tree = ast.parse('p.read_text(encoding="utf-8")\nopen(p, encoding="utf-8")\nopen(p, "w", encoding="utf-8")\n'
                     'p.open("a", encoding="utf-8")\np.read_text(encoding="utf-8-sig")\n')
    assert _text_reads(tree) == [(1, "read_text"), (2, "open")]
