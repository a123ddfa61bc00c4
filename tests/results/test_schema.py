"""The typed run record (evalbench/results/schema.py): a real run's files are what the models
say (every key named, no extras), the typed readers return them and read version 1, a newer
version is refused, writers refuse what the schema refuses, and `evalbench results schema`
prints a JSON Schema that a real run's files validate against."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import BaseModel

from evalbench.cli import main
from evalbench.core.conversation import MAX_TOKENS
from evalbench.core.errors import RunDirError
from evalbench.results import JournalRecord, Manifest, Summary, load_manifest, load_summary, read_journal, read_records
from evalbench.results.schema import SCHEMA_VERSION, ConfigSnapshot, RecordRefused, check_written, upgrade
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SQLite quickstart (noisy agent, rules virtual user, follow-ups, trials): a real run."""
    out = tmp_path_factory.mktemp("schema")
    code = main(["run", "--config", str(ROOT / "configs" / "quickstart_sqlite.yaml"), "--output-dir", str(out),
                 "--run-id", "r", "--no-progress", "--trials", "2"])
    assert code in (0, 1)
    return out / "r"


def extras(model: BaseModel, where: str = "") -> list[str]:
    """Every key of ``model`` (nested models and lists of them included) that no field names; the
    config snapshot is the run config (docs/configuration.md), of which the schema names the keys read."""
    found = [] if isinstance(model, ConfigSnapshot) else [f"{where}{key}" for key in model.model_extra or {}]
    for name in type(model).model_fields:
        value = getattr(model, name)
        parts = dict(enumerate(value)) if isinstance(value, list) else value if isinstance(value, dict) else {None: value}
        for key, part in parts.items():
            if isinstance(part, BaseModel):
                found += extras(part, f"{where}{name}." if key is None else f"{where}{name}[{key}].")
    return found


def test_a_real_run_writes_only_keys_the_schema_names(run_dir):
    manifest, summary = load_manifest(run_dir), load_summary(run_dir)
    records = list(read_records(run_dir))
    assert isinstance(manifest, Manifest) and isinstance(summary, Summary) and records
    assert all(isinstance(record, JournalRecord) for record in records)
    unnamed = extras(manifest) + extras(summary) + [key for record in records for key in extras(record)]
    assert not unnamed, f"keys the run schema does not name: {sorted(set(unnamed))}"


def test_the_files_written_carry_the_current_version(run_dir):
    assert json.loads((run_dir / "manifest.json").read_text())["schema_version"] == SCHEMA_VERSION == 2
    assert json.loads((run_dir / "summary.json").read_text())["schema_version"] == SCHEMA_VERSION
    assert {record["schema_version"] for record in read_journal(run_dir)} == {SCHEMA_VERSION}


def test_the_typed_readers_give_what_the_files_hold(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    typed = load_summary(run_dir)
    assert typed is not None and typed.total_items == summary["total_items"]
    assert typed.success is not None and typed.success["main"] is not None
    assert typed.success["main"].rate == summary["success"]["main"]["rate"]
    records = list(read_journal(run_dir))
    assert [(r.item_id, r.trial, r.outcome) for r in read_records(run_dir)] == [
        (r["item_id"], r.get("trial"), r["outcome"]) for r in records]
    assert load_manifest(run_dir).dataset.items == json.loads((run_dir / "manifest.json").read_text())["dataset"]["items"]


def _rewrite(path: Path, change) -> None:
    if path.suffix == ".jsonl":
        lines = [json.dumps(change(json.loads(line))) for line in path.read_text().splitlines() if line.strip()]
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text(json.dumps(change(json.loads(path.read_text()))))


def test_a_version_1_run_reads_as_version_2(run_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    _rewrite(old / "manifest.json", lambda d: {**d, "schema_version": 1})
    _rewrite(old / "summary.json", lambda d: {k: v for k, v in d.items() if k != "schema_version"})
    _rewrite(old / "conversations.jsonl", lambda d: {**d, "schema_version": 1})
    assert load_manifest(old).schema_version == 2
    summary = load_summary(old)
    assert summary is not None and summary.schema_version == 2
    assert {r.schema_version for r in read_records(old)} == {2}
    assert len(list(read_records(old))) == len(list(read_records(run_dir)))


@pytest.mark.parametrize("name, read", [("manifest.json", load_manifest), ("summary.json", load_summary),
                                        ("conversations.jsonl", lambda d: list(read_records(d)))])
def test_a_newer_version_is_refused_naming_the_file(run_dir, tmp_path, name, read):
    new = tmp_path / "new"
    shutil.copytree(run_dir, new)
    _rewrite(new / name, lambda d: {**d, "schema_version": 3})
    with pytest.raises(RunDirError, match=rf"{name}: schema_version: schema_version 3: this evalbench reads versions 1, 2"):
        read(new)


def test_upgrade_reads_1_and_2_and_nothing_else():
    assert upgrade({"a": 1}) == {"a": 1, "schema_version": 2}
    assert upgrade({"schema_version": 1})["schema_version"] == 2
    assert upgrade({"schema_version": None})["schema_version"] == 2
    for version in (0, 3, "2", True, 2.0):
        with pytest.raises(ValueError, match="this evalbench reads versions"):
            upgrade({"schema_version": version})


def test_a_writer_refuses_what_the_schema_refuses(run_dir):
    record = next(iter(read_journal(run_dir)))
    check_written(JournalRecord, record, "conversations.jsonl")  # what was written passes
    bad = {**record, "phases": [{**record["phases"][0], "clarifications": -1}]}
    with pytest.raises(RecordRefused, match=r"conversations.jsonl: .*JournalRecord.* at phases\.0\.clarifications: "):
        check_written(JournalRecord, bad, "conversations.jsonl")
    assert RecordRefused("x").exit_code == 3


def test_the_largest_token_counts_an_agent_may_report_fit_the_schema(run_dir):
    """An agent's server reports its own usage (core.conversation.token_count caps each count at
    MAX_TOKENS): whatever it reports over a long conversation, the record stays readable."""
    record = next(iter(read_journal(run_dir)))
    turns = [{**turn, "reply": {**(turn.get("reply") or {}), "usage": dict.fromkeys(("prompt", "completion", "total"), MAX_TOKENS)}}
             for turn in record["turns"]] * 50
    huge = {**record, "turns": turns, "tokens": dict.fromkeys(("prompt", "completion", "total"), MAX_TOKENS * len(turns))}
    check_written(JournalRecord, huge, "conversations.jsonl")


@pytest.mark.parametrize("kind, name", [("manifest", "manifest.json"), ("summary", "summary.json"), ("journal", None)])
def test_the_printed_json_schema_validates_a_real_run(run_dir, capsys, kind, name):
    jsonschema = pytest.importorskip("jsonschema")
    assert main(["results", "schema", kind]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    documents = [json.loads((run_dir / name).read_text())] if name else list(read_journal(run_dir))[:12]
    for document in documents:
        jsonschema.validate(document, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**documents[0], "schema_version": "two"}, schema)


def test_results_schema_with_no_kind_prints_the_three(capsys):
    assert main(["results", "schema"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"manifest", "journal", "summary"}


def test_a_reader_that_leaves_early_is_no_error():
    """`evalbench results schema | head -c 10` (80 kB, more than a pipe holds): the pipe closes under the command, which
    exits 0 without a traceback."""
    import subprocess
    import sys

    shell = f"'{sys.executable}' -m evalbench results schema | head -c 10; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stdout == '{\n  "manif'
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
