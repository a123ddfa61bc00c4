"""Bad input gives a clear error naming file, line and key, or an item outcome — never a
traceback, a hang or an item dropped silently: knowledge files, a malformed --baseline summary,
resuming a run of several dialects, database names that would leave the setup directory, and
failure diagnoses from previews that do not hold the whole result."""

from __future__ import annotations

import codecs
import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalbench.backends.postgres.provision import find_setup
from evalbench.cli import main
from evalbench.core.errors import ProvisioningError
from evalbench.dataset import Dataset
from evalbench.dataset.knowledge import load_knowledge
from evalbench.results import read_journal
from evalbench.results.journal.files import JOURNAL, OutputError
from evalbench.results.summary.taxonomy import FailureKind, diagnose
from evalbench.run.resume import repair_journal
from tests.conftest import DEMO, ROOT

DIALECTS = ("postgres", "alloydb")
QUESTIONS = {
    "q1": ("How many stores are there?", "SELECT count(*) FROM stores"),
    "q2": ("List the store names.", "SELECT store_name FROM stores ORDER BY 1"),
    "q3": ("How many customers are there?", "SELECT count(*) FROM customers"),
}


def _dataset(folder: Path) -> Path:
    """An EvalBench-format dataset whose every item runs in two dialects (the same item ids twice)."""
    path = folder / "multi.json"
    path.write_text(json.dumps([
        {"id": item_id, "nl_prompt": question, "query_type": "dql", "database": "greenleaf",
         "golden_sql": {dialect: [sql] for dialect in DIALECTS}}
        for item_id, (question, sql) in QUESTIONS.items()
    ]), encoding="utf-8")
    return path


def _config(folder: Path, *, dataset: Path | None = None, extra: str = "") -> Path:
    config = folder / "run.yaml"
    config.write_text(
        f"dataset_config: {dataset or _dataset(folder)}\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        f"dialects: [{', '.join(DIALECTS)}]\n"
        "model_config: {agent: simulated:oracle, latency_s: 0}\n"
        "scorers: {exec_match: {}}\n"
        f"reporting: {{csv: {{output_directory: {folder / 'out'}}}}}\n" + extra,
        encoding="utf-8",
    )
    return config


def _keys(run_dir: Path) -> list[tuple[str, str]]:
    return [(r["dialect"], r["item_id"]) for r in read_journal(run_dir)]


def _lines(run_dir: Path) -> list[bytes]:
    return (run_dir / JOURNAL).read_bytes().splitlines(keepends=True)


@pytest.fixture(scope="module")
def multi_run(tmp_path_factory: pytest.TempPathFactory, pgdata: Path) -> Path:
    """A finished run of 3 items x 2 dialects (the oracle agent), by the real command line."""
    folder = tmp_path_factory.mktemp("multi")
    config = _config(folder)
    assert main(["run", "--config", str(config), "--run-id", "m", "--no-progress"]) == 0
    run_dir = folder / "out" / "m"
    assert sorted(_keys(run_dir)) == sorted((d, i) for d in DIALECTS for i in QUESTIONS)
    return run_dir


def _copy_run(run_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the finished run (and of its config, so --resume finds the same settings)."""
    folder = run_dir.parent.parent
    copy = tmp_path / "out" / run_dir.name
    shutil.copytree(run_dir, copy)
    config = _config(tmp_path, dataset=folder / "multi.json")
    return copy, config


# --------------------------------------------------------------------------- 1. knowledge files


def _knowledge_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "knowledge"
    folder.mkdir()
    entry = {"id": 1, "knowledge": "Realized Order", "description": "d", "definition": ["x"], "type": "domain_knowledge"}
    (folder / "greenleaf_kb.jsonl").write_bytes(
        codecs.BOM_UTF8 + json.dumps(entry).encode() + b"\n"  # line 1: a byte-order mark before the first entry
        + b'{"id": 2, "knowledge": "caf\xe9"}\n'  # line 2: Latin-1, not UTF-8
        + b"[1, 2]\n"  # line 3: not an object
        + b'"just text"\n'  # line 4: not an object
        + b'{"knowledge": "no id"}\n'  # line 5: no id
        + b'{"id": "seven", "knowledge": "bad id"}\n'  # line 6: an id that is not a number
        + b'{"id": 3, "knowledge": oops}\n'  # line 7: invalid JSON
        + b"\n"
        + b'{"id": 4, "knowledge": "Kept", "definition": "one text"}\n'  # line 9
    )
    return folder


def test_a_knowledge_file_with_bad_lines_loads_its_good_entries_and_names_the_others(tmp_path, caplog):
    folder = _knowledge_dir(tmp_path)
    knowledge = load_knowledge(folder)
    entries = knowledge["greenleaf"]
    assert sorted(entries) == [1, 4]  # the entry after the byte-order mark is kept
    assert entries[1].name == "Realized Order" and entries[4].definition == ("one text",)
    path = folder / "greenleaf_kb.jsonl"
    for line, why in ((2, "not valid UTF-8"), (3, "expected a JSON object, got list"), (4, "expected a JSON object, got str"),
                      (5, "key 'id' is missing"), (6, "key 'id': expected an integer")):
        assert f"{path}:{line}: knowledge entry skipped: {why}" in caplog.text
    assert "Traceback" not in caplog.text


def test_a_run_with_a_bad_knowledge_file_warns_and_finishes(tmp_path, pgdata, caplog, capsys):
    """By the command line: the run finishes (no traceback), each bad line is named file:line."""
    folder = _knowledge_dir(tmp_path)
    config = _config(tmp_path, extra=f"knowledge_directory: {folder}\n")
    assert main(["run", "--config", str(config), "--run-id", "k", "--no-progress"]) == 0
    assert len(_keys(tmp_path / "out" / "k")) == len(DIALECTS) * len(QUESTIONS)
    assert f"{folder / 'greenleaf_kb.jsonl'}:3: knowledge entry skipped" in caplog.text
    assert "Traceback" not in capsys.readouterr().err


def test_an_unreadable_knowledge_file_is_an_error_naming_it(tmp_path, pgdata, capsys):
    folder = tmp_path / "knowledge"
    (folder / "greenleaf_kb.jsonl").mkdir(parents=True)  # a folder with a knowledge file's name
    config = _config(tmp_path, extra=f"knowledge_directory: {folder}\n")
    assert main(["run", "--config", str(config), "--run-id", "u", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'greenleaf_kb.jsonl'}: is a directory" in err and "Traceback" not in err


# --------------------------------------------------------------------------- 2. a malformed --baseline


BAD_BASELINES = [
    ("not json", b'{"scorers": {', "summary.json:1: --baseline", "not valid JSON"),
    ("not utf-8", b'{"run_id": "caf\xe9"}', "summary.json", "not UTF-8"),
    ("an array", b"[1, 2]", "summary.json", "expected a JSON object (a run summary), got an array"),
    ("a number", b"42", "summary.json", "got a number"),
    ("scorers not an object", b'{"scorers": []}', "summary.json: scorers", "expected an object"),
    ("a phase not an object", b'{"scorers": {"exec_match": {"main": 3}}}', "scorers.exec_match.main", "expected an object"),
    ("a rate as text", b'{"scorers": {"exec_match": {"main": {"rate": "high"}}}}', "scorers.exec_match.main.rate",
     "expected a finite number or null, got a string"),
    ("a boolean rate", b'{"success": {"main": {"rate": true}}}', "success.main.rate", "got a boolean"),
    ("NaN", b'{"success": {"main": {"rate": NaN}}}', "success.main.rate", "expected a finite number"),
    ("mean_reward", b'{"conversation": {"mean_reward": [1]}}', "conversation.mean_reward", "got an array"),
    ("scoring", b'{"scoring": "bird"}', "summary.json: scoring", "expected an object or null"),
    ("completeness reasons", b'{"complete": false, "completeness": {"reasons": [1]}}', "completeness.reasons",
     "an array of strings"),
]


@pytest.mark.parametrize(("content", "where", "what"), [c[1:] for c in BAD_BASELINES], ids=[c[0] for c in BAD_BASELINES])
def test_a_malformed_baseline_summary_is_a_config_error_naming_the_file(multi_run, tmp_path, capsys, content, where, what):
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    (baseline / "summary.json").write_bytes(content)
    code = main(["report", str(multi_run), "--no-html", "--baseline", str(baseline), "--max-regression", "success=1%"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert str(baseline / "summary.json") in err and where in err and what in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err  # one line


def test_a_malformed_baseline_fails_a_run_before_it_starts(multi_run, tmp_path, capsys):
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    (baseline / "summary.json").write_text("{oops", encoding="utf-8")
    config = _config(tmp_path)
    code = main(["run", "--config", str(config), "--run-id", "never", "--no-progress", "--baseline", str(baseline),
                 "--max-regression", "success=1%"])
    assert code == 2
    assert f"{baseline / 'summary.json'}:1: --baseline: not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "out" / "never").exists()


def test_a_well_formed_baseline_still_gates(multi_run, capsys):
    code = main(["report", str(multi_run), "--no-html", "--baseline", str(multi_run), "--max-regression", "success=1%"])
    assert code == 0
    assert "gate max-regression success=1%: pass" in capsys.readouterr().out


# --------------------------------------------------------------------------- 3. resume: (dialect, item id), the last record


def test_resume_of_several_dialects_runs_what_one_dialect_lacks(multi_run, tmp_path, pgdata, caplog):
    """An item id done in one dialect is not done in the other: before the fix, the journal lacking
    (alloydb, q2) resumed as complete and the conversation was silently never run."""
    run_dir, config = _copy_run(multi_run, tmp_path)
    lines = _lines(run_dir)
    kept = [raw for raw in lines if (json.loads(raw)["dialect"], json.loads(raw)["item_id"]) != ("alloydb", "q2")]
    assert len(kept) == len(lines) - 1
    (run_dir / JOURNAL).write_bytes(b"".join(kept))
    assert main(["run", "--config", str(config), "--resume", str(run_dir), "--no-progress"]) == 0
    keys = _keys(run_dir)
    assert sorted(keys) == sorted((d, i) for d in DIALECTS for i in QUESTIONS) and len(keys) == len(set(keys))
    assert keys[-1] == ("alloydb", "q2")  # the one conversation run again
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert [s["resumed_with"] for s in manifest["sessions"]] == [0, 5]
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["total_items"] == 6 and summary["success"]["main"]["passed"] == 6


def test_resume_keeps_the_last_record_of_a_conversation_as_read_journal_does(multi_run, tmp_path, pgdata):
    """(postgres, q1) recorded twice: scored first, cancelled last. read_journal counts the last,
    so resume must run it again (before the fix it kept the first and never ran it)."""
    run_dir, config = _copy_run(multi_run, tmp_path)
    lines = _lines(run_dir)
    index = next(i for i, raw in enumerate(lines) if (json.loads(raw)["dialect"], json.loads(raw)["item_id"]) == ("postgres", "q1"))
    cancelled = json.loads(lines[index]) | {"outcome": "cancelled"}
    (run_dir / JOURNAL).write_bytes(b"".join(lines) + (json.dumps(cancelled) + "\n").encode())
    last = {(r["dialect"], r["item_id"]): r["outcome"] for r in read_journal(run_dir)}
    assert last[("postgres", "q1")] == "cancelled"
    assert main(["run", "--config", str(config), "--resume", str(run_dir), "--no-progress"]) == 0
    records = list(read_journal(run_dir))
    assert len(records) == 6 and {r["outcome"] for r in records} == {"scored"}
    assert (records[-1]["dialect"], records[-1]["item_id"]) == ("postgres", "q1")  # run again
    assert len(_lines(run_dir)) == 6  # the journal was rewritten: no duplicate left


def _record(item_id: str, dialect: str = "postgres", outcome: str = "scored", **extra: Any) -> bytes:
    return (json.dumps({"item_id": item_id, "dialect": dialect, "outcome": outcome, "phases": []} | extra) + "\n").encode()


def test_repair_journal_keys_on_dialect_and_item_and_keeps_the_last(tmp_path):
    journal = tmp_path / JOURNAL
    journal.write_bytes(
        _record("a", note="first")
        + _record("a", "alloydb")
        + b"[1, 2]\n"  # valid JSON, not a record: was a TypeError
        + b'"text"\n'
        + b"\n"
        + _record("b", outcome="db_error")
        + _record("a", note="last")
        + _record("c")
        + b'{"item_id": "d", "dialect": "postgres", "outc'  # cut short by a crash
    )
    before = [(r["dialect"], r["item_id"], r.get("note")) for r in read_journal(tmp_path)]
    seen: list[dict[str, Any]] = []
    state = repair_journal(tmp_path, seen.append)
    assert state.done == {("alloydb", "a", 1), ("postgres", "a", 1), ("postgres", "c", 1)}
    assert (state.kept, state.dropped_duplicates, state.dropped_cancelled, state.dropped_partial) == (3, 1, 1, 3)
    assert [(r["dialect"], r["item_id"], r.get("note")) for r in seen] == [
        ("alloydb", "a", None), ("postgres", "a", "last"), ("postgres", "c", None)]
    # the same conversations, by the same (last) records, as read_journal — less the one that runs again
    assert [x for x in before if x[1] != "b"] == [(r["dialect"], r["item_id"], r.get("note")) for r in read_journal(tmp_path)]
    assert not (tmp_path / f".{JOURNAL}.resume").exists()


def test_repair_journal_on_a_full_disk_is_an_output_error_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    journal = tmp_path / JOURNAL
    content = _record("a") + _record("b")
    journal.write_bytes(content)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("evalbench.results.journal.repair.os.fsync", full)
    with pytest.raises(OutputError, match=r"cannot write .*conversations\.jsonl: No space left on device \(ENOSPC\)"):
        repair_journal(tmp_path, lambda record: None)
    assert journal.read_bytes() == content
    assert not (tmp_path / f".{JOURNAL}.resume").exists()


def _file_size_limit(limit: int) -> Any:
    def apply() -> None:  # in the child: writing past `limit` bytes fails with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_resume_when_the_journal_cannot_be_rewritten_exits_3_and_leaves_it_whole(multi_run, tmp_path):
    """By the real command line, in a process that cannot write files past half the journal's size."""
    run_dir, config = _copy_run(multi_run, tmp_path)
    before = (run_dir / JOURNAL).read_bytes()
    process = subprocess.run(
        [sys.executable, "-m", "evalbench", "run", "--config", str(config), "--resume", str(run_dir), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, env=os.environ.copy(), timeout=120,
        preexec_fn=_file_size_limit(len(before) // 2),
    )
    assert process.returncode == 3, process.stderr
    assert f"error: cannot write {run_dir / JOURNAL}: File too large (EFBIG)" in process.stderr
    assert "Traceback" not in process.stderr
    assert (run_dir / JOURNAL).read_bytes() == before
    assert not (run_dir / f".{JOURNAL}.resume").exists()


# --------------------------------------------------------------------------- 4. database names and the setup directory


@pytest.mark.parametrize("name", ["..", ".", "../outside", "a/b", "/etc", "a\\b", "x\x00y", ""])
def test_a_database_name_cannot_leave_the_setup_directory(tmp_path, name):
    with pytest.raises(ProvisioningError, match="selected_database / database key") as info:
        find_setup(tmp_path / "setup", name, "postgres")
    assert repr(name) in str(info.value)


def test_a_plain_database_name_still_finds_its_setup():
    setup = find_setup(DEMO / "setup", "greenleaf", "postgres")
    assert setup is not None and setup.setup == DEMO / "setup" / "greenleaf" / "postgres" / "setup.sql"


def test_a_run_whose_items_name_a_database_outside_the_setup_directory(tmp_path, pgdata, capsys):
    """By the command line: such records are record errors naming the key (exit 2: the dataset's
    fault), and the setup SQL beside the setup directory is never read."""
    outside = tmp_path / "outside" / "postgres"
    outside.mkdir(parents=True)
    (outside / "setup.sql").write_text("CREATE TABLE leaked (x int);\n", encoding="utf-8")
    setup = tmp_path / "setup"
    setup.mkdir()
    dataset = tmp_path / "escape.jsonl"
    dataset.write_text("".join(json.dumps({
        "instance_id": f"e{n}", "selected_database": "../outside", "query": "How many?", "sol_sql": ["SELECT 1"],
        "category": "Query"}) + "\n" for n in (1, 2)), encoding="utf-8")
    config = tmp_path / "run.yaml"
    config.write_text(
        f"dataset_config: {dataset}\nsetup_directory: {setup}\nmodel_config: simulated:oracle\n"
        f"reporting: {{csv: {{output_directory: {tmp_path / 'out'}}}}}\n", encoding="utf-8")
    assert main(["run", "--config", str(config), "--run-id", "e", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no items to run" in err and "Traceback" not in err
    scan = Dataset(dataset, "bird-interact", ["postgres"], None).scan()
    assert [e.item_id for e in scan.errors] == ["e1", "e2"]
    assert all("selected_database" in str(e) and "'../outside'" in str(e) for e in scan.errors)
    with pytest.raises(ProvisioningError, match="not a single folder name"):
        find_setup(setup, "../outside", "postgres")  # and provisioning refuses it too


# --------------------------------------------------------------------------- 5. diagnoses from hashes, not partial previews


def _result(rows: list[list[Any]], *, row_count: int | None = None, sha: str | None = None,
            cut: bool | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"columns": ["name", "n"], "row_count": len(rows) if row_count is None else row_count,
                              "truncated": False, "elapsed_s": 0.001, "error": None, "error_kind": None, "preview": rows}
    if sha is not None:
        result["rows_sha256"] = sha
    if cut is not None:
        result["preview_truncated"] = cut
    return result


def _diagnose(generated: dict[str, Any], golden: dict[str, Any], scores: dict[str, Any] | None = None) -> Any:
    scores = scores or {"exec_match": {"value": 0.0, "passed": False, "applicable": True, "detail": "results differ",
                                       "flags": []}}
    phase = {"phase": "main", "question": "q", "outcome": "scored", "error": None, "clarifications": 0, "sql": "SELECT 1",
             "generated": generated, "golden": [golden], "scores": scores}
    return diagnose({"item_id": "i", "dialect": "postgres", "outcome": "scored", "ambiguous": False,
                     "phases": [phase], "turns": []})


ROWS = [["a", 1], ["b", 2], ["c", 3]]


def test_equal_row_hashes_mean_the_results_agree_even_with_partial_previews():
    failing_sql = {"exact_match": {"value": 0.0, "passed": False, "applicable": True, "detail": "SQL differs", "flags": []}}
    generated = _result(ROWS[:1], row_count=3, sha="same")
    golden = _result(ROWS[1:], row_count=3, sha="same")  # other preview rows; the very same results
    diagnosis = _diagnose(generated, golden, failing_sql)
    assert diagnosis.kind is FailureKind.OTHER and diagnosis.message == "exact_match: SQL differs"


def test_a_cut_preview_is_not_taken_for_the_whole_result():
    # the cells were cut by the byte caps: the previews agree as shown, the rows do not
    diagnosis = _diagnose(_result(ROWS, sha="g", cut=True), _result(ROWS, sha="o", cut=False))
    assert diagnosis.kind is FailureKind.WRONG_VALUES and "the previews are cut: no example" in diagnosis.message
    # the same rows in another order, as far as cut previews show: not "ordering only"
    diagnosis = _diagnose(_result(ROWS[::-1], sha="g", cut=True), _result(ROWS, sha="o", cut=False))
    assert diagnosis.kind is FailureKind.WRONG_VALUES and "e.g." not in diagnosis.message


def test_partial_previews_give_no_example_that_may_be_further_on():
    # an old record (no hashes): 10 rows each, 3 shown; a row shown for one may be the other's 8th
    diagnosis = _diagnose(_result(ROWS, row_count=10), _result(ROWS[::-1], row_count=10))
    assert diagnosis.kind is FailureKind.WRONG_VALUES
    assert "the previews hold only some rows: no example" in diagnosis.message


def test_complete_previews_still_give_an_example_and_detect_the_order():
    other = [["a", 1], ["b", 2], ["c", 4]]
    diagnosis = _diagnose(_result(other, sha="g", cut=False), _result(ROWS, sha="o", cut=False))
    assert diagnosis.kind is FailureKind.WRONG_VALUES and 'e.g. generated ["c", 4] vs golden ["c", 3]' in diagnosis.message
    diagnosis = _diagnose(_result(ROWS[::-1], sha="g", cut=False), _result(ROWS, sha="o", cut=False))
    assert diagnosis.kind is FailureKind.ORDERING_ONLY


def test_different_hashes_behind_identical_complete_previews_are_wrong_values():
    # e.g. numeric 2.50 vs 2.5: both previewed as 2.5
    diagnosis = _diagnose(_result(ROWS, sha="g", cut=False), _result(ROWS, sha="o", cut=False))
    assert diagnosis.kind is FailureKind.WRONG_VALUES and "precision or type" in diagnosis.message
