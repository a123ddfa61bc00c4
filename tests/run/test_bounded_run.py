"""Issue 12, end to end through ``evalbench run``: a hostile agent (lone surrogates, NUL,
undecodable bytes, megabytes of raw events and tool calls) and spreadsheet formulas as item ids,
answers and SQL give a bounded run directory of valid UTF-8 that ``evalbench report`` and
``--resume`` read back; CSV cells are never formulas; secrets given on the command line or
through ``${ENV}`` are nowhere in the run directory."""

from __future__ import annotations

import csv
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.core.conversation import AgentReply, ReplyKind, ToolCall
from evalbench.results.journal.record import CAPS
from evalbench.results.render.evalbench_csv import cell, safe_cell
from tests.conftest import DEMO

INVALID_UTF8 = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")
HOSTILE = "lone \ud800, NUL \x00, " + INVALID_UTF8
FORMULAS = ['=HYPERLINK("http://x")', "+1+1", "@SUM(A1)", "-2+3"]
ITEMS = 8
NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _dataset(tmp_path: Path) -> Path:
    """The first demo items, four with formulas as ids. (The dataset reader refuses records with
    a NUL or a lone surrogate; dataset fields holding them are tested in test_bounded_record.py.)"""
    text = (DEMO / "greenleaf.jsonl").read_text(encoding="utf-8")
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    items = lines[:ITEMS]
    for item, formula in zip(items, FORMULAS, strict=False):
        item["instance_id"] = formula
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    return path


def _config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "run.yaml"
    config.write_text(
        f"dataset_config: {_dataset(tmp_path)}\n"
        "dataset_format: bird-interact\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        "model_config: {agent: simulated:noisy, latency_s: 0}\n"
        "vuser_model_config: {vuser: rules, patience: 3}\n"
        "scorers: {exec_match: {}, test_cases: {}, answer_match: {}, executable: {}, turn_count: {}}\n"
        "accept_nl_answers: true\n"
        "seed: 42\n" + extra,
        encoding="utf-8",
    )
    return config


class _HostileSession:
    def __init__(self, inner, item_id: str) -> None:
        self.inner, self.item_id = inner, item_id

    def send(self, text: str) -> AgentReply:
        reply = self.inner.send(text)
        if self.item_id == "@SUM(A1)" and reply.kind is ReplyKind.SQL:
            reply.sql = '=HYPERLINK("http://x")'  # the agent's SQL is a formula (and a SQL error)
        if self.item_id == "-2+3":
            reply = AgentReply(ReplyKind.ANSWER, text="+1+1 @SUM(A1) " + HOSTILE)  # an answer in words
        reply.text = (reply.text or "") + " " + HOSTILE
        reply.raw = {"events": [HOSTILE, "e" * 200_000], HOSTILE: b"\xff\x00"}
        reply.tool_calls = [ToolCall(name="lookup\ud800", args={"sql": '=HYPERLINK("http://x")', "blob": "b" * 100_000},
                                     response=[[HOSTILE] * 10] * 1000) for _ in range(100)]
        return reply

    def close(self) -> None:
        self.inner.close()


class _HostileAgent:
    def __init__(self, inner) -> None:
        self.inner, self.name, self.sticky = inner, inner.name, inner.sticky

    def open_session(self, conversation):
        return _HostileSession(self.inner.open_session(conversation), conversation.item.id)

    def describe(self):
        return self.inner.describe()

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def hostile_agent(monkeypatch):
    import evalbench.agents.simulated  # noqa: F401 - registers simulated:noisy
    from evalbench.agents import AGENTS

    real = AGENTS.get("simulated:noisy")
    monkeypatch.setitem(AGENTS._factories, "simulated:noisy", lambda config, context: _HostileAgent(real(config, context)))


def _cli(monkeypatch, args: list[str]) -> int:
    monkeypatch.setattr(sys, "argv", ["evalbench", *args])  # the manifest records sys.argv
    return main(args)


def _formula_cells(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as handle:
        return [c for row in csv.reader(handle) for c in row
                if c[:1] in ("=", "+", "-", "@", "\t", "\r") and not NUMBER.fullmatch(c)]


def test_a_hostile_agent_gives_a_bounded_readable_run_directory(tmp_path, pgdata, hostile_agent, monkeypatch):
    config = _config(tmp_path)
    args = ["run", "--config", str(config), "--no-progress", "--output-dir", str(tmp_path / "out"), "--run-id", "hostile"]
    assert _cli(monkeypatch, args) in (0, 1)  # a verdict, never an infrastructure error
    run_dir = tmp_path / "out" / "hostile"

    # every file is valid UTF-8; every journal line is a whole record within the record cap
    for path in run_dir.iterdir():
        path.read_bytes().decode("utf-8")
    lines = (run_dir / "conversations.jsonl").read_bytes().splitlines()
    assert len(lines) == ITEMS
    records = [json.loads(line) for line in lines]
    assert all(len(line) <= CAPS.record for line in lines)
    assert all(r.get("record_truncated") for r in records)  # the agent produced megabytes per turn
    assert sum(p.stat().st_size for p in run_dir.iterdir()) < 2 * 1024 * 1024  # not hundreds of megabytes
    for record in records:
        reply = record["turns"][0]["reply"]
        assert reply["text"].endswith(" lone \ufffd, NUL \x00, caf\ufffd \ufffd")
        assert reply["tool_calls"][0]["name"] == "lookup\ufffd"
    ET.parse(run_dir / "junit.xml")

    # no CSV cell is a formula; the formulas are kept, quoted
    for name in ("evals.csv", "scores.csv", "summary.csv", "configs.csv", "scores_native.csv", "summary_native.csv"):
        assert _formula_cells(run_dir / name) == [], name
    with (run_dir / "evals.csv").open(encoding="utf-8", newline="") as handle:
        evals = list(csv.DictReader(handle))
    by_item = {row["item_id"]: row for row in evals if row["phase"] == "main"}
    assert set(by_item) >= {"'" + f for f in FORMULAS}
    assert by_item["'=HYPERLINK(\"http://x\")"]["id"] == "'=HYPERLINK(\"http://x\")"
    assert by_item["'@SUM(A1)"]["generated_sql"] == "'=HYPERLINK(\"http://x\")"
    assert by_item["'-2+3"]["explanation"].startswith("'+1+1 @SUM(A1) lone \ufffd, NUL \\u0000")
    native = (run_dir / "scores_native.csv").read_text(encoding="utf-8")
    assert "\n" + "hostile,'+1+1,postgres" in native

    # evalbench report rebuilds everything from the journal; --resume reads it back and finishes
    assert _cli(monkeypatch, ["report", str(run_dir)]) in (0, 1)
    for name in ("evals.csv", "scores.csv", "scores_native.csv", "summary_native.csv"):
        assert _formula_cells(run_dir / name) == [], name
    resume = ["run", "--config", str(config), "--no-progress", "--resume", str(run_dir)]
    assert _cli(monkeypatch, resume) in (0, 1)
    ids = [json.loads(line)["item_id"] for line in (run_dir / "conversations.jsonl").read_bytes().splitlines()]
    assert len(ids) == len(set(ids)) == ITEMS


def test_csv_cells_are_neutralised_but_numbers_stay_numbers():
    assert safe_cell('=HYPERLINK("http://x")') == '\'=HYPERLINK("http://x")'
    assert safe_cell("+1+1") == "'+1+1" and safe_cell("@SUM(A1)") == "'@SUM(A1)" and safe_cell("-2+3") == "'-2+3"
    assert safe_cell("\t=1") == "'\t=1" and safe_cell("\r=1") == "'\r=1" and safe_cell("-- a SQL comment") == "'-- a SQL comment"
    assert safe_cell("-0.5") == "-0.5" and safe_cell("+3") == "+3" and safe_cell("-1e-05") == "-1e-05"
    assert cell(-0.5) == "-0.5" and cell(float("-inf")) == "-inf" and cell(-3) == "-3"
    assert cell(True) == "True"
    assert safe_cell("a = b") == "a = b" and safe_cell("") == "" and cell(None) == ""
    assert safe_cell("a\x00b\ud800") == "a\\u0000b\ufffd"


SECRET_SET = "hunter2-set-secret"
SECRET_URL = "hunter3-url-secret"
SECRET_ENV = "hunter4-env-secret"


def _assert_secret_free(run_dir: Path, *secrets: str) -> None:
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"manifest.json", "conversations.jsonl", "configs.csv", "report.html", "summary.json"}
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{secret} in {path.name}"


def test_secrets_on_the_command_line_are_not_in_the_run_directory(tmp_path, pgdata, monkeypatch, capsys):
    databases = (f"database_configs=[{{database_name: greenleaf, password: {SECRET_SET}}}, "
                 f"{{database_name: not_used, url: 'postgresql://someone:{SECRET_URL}@localhost:1/x'}}]")
    args = ["run", "--config", str(_config(tmp_path)), "--no-progress", "--output-dir", str(tmp_path / "out"),
            "--run-id", "secret", "--set", databases, "--set=vuser_model_config={vuser: rules, patience: 3}"]
    assert _cli(monkeypatch, args) in (0, 1)
    run_dir = tmp_path / "out" / "secret"
    _assert_secret_free(run_dir, SECRET_SET, SECRET_URL)
    command = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["command"]
    assert any("password" in a and "***" in a for a in command)  # recorded, redacted
    assert any("postgresql://someone:***@localhost:1/x" in a for a in command)
    out = capsys.readouterr()
    assert SECRET_SET not in out.out + out.err and SECRET_URL not in out.out + out.err


def test_secrets_from_the_environment_are_not_in_the_run_directory(tmp_path, pgdata, monkeypatch, capsys):
    monkeypatch.setenv("EVALBENCH_TEST_DB_PASSWORD", SECRET_ENV)
    monkeypatch.setenv("EVALBENCH_TEST_DB_URL", f"postgresql://someone:{SECRET_URL}@localhost:1/x")
    extra = ("database_configs:\n"
             "  - {database_name: greenleaf, password: '${EVALBENCH_TEST_DB_PASSWORD}'}\n"
             "  - {database_name: not_used, url: '${EVALBENCH_TEST_DB_URL}'}\n")
    args = ["run", "--config", str(_config(tmp_path, extra)), "--no-progress", "--output-dir", str(tmp_path / "out"),
            "--run-id", "env", "--set", "vuser_model_config={vuser: rules, patience: 3}", "--set", "seed=42"]
    assert _cli(monkeypatch, args) in (0, 1)
    _assert_secret_free(tmp_path / "out" / "env", SECRET_ENV, SECRET_URL)
    out = capsys.readouterr()
    assert SECRET_ENV not in out.out + out.err


@pytest.mark.parametrize(("arg", "expected"), [
    ("password=hunter2", "password=***"),
    ("--set=password=hunter2", "--set=password=***"),
    ("model_config={agent: gemini, api_key: hunter2}", 'model_config={"agent": "gemini", "api_key": "***"}'),
    ("model_config={api_key: hunter2", "model_config={api_key: ***"),  # not even valid YAML
    ("database_configs=[{database_name: x, url: 'postgresql://u:hunter2@h/db'}]",
     'database_configs=[{"database_name": "x", "url": "postgresql://u:***@h/db"}]'),
    ("url=host=h password=hunter2 dbname=d", "url=host=h password=*** dbname=d"),
    ("postgresql://u:hunter2@h/db?password=hunter2", "postgresql://u:***@h/db?password=***"),
    ("seed=7", "seed=7"),
    ("vuser_model_config={vuser: rules, patience: 3}", "vuser_model_config={vuser: rules, patience: 3}"),
    ("x=\udcff", "x=\ufffd"),
    # issue 24: at any depth, headers whatever their name, tokens in query strings; no false positive
    ('model_config={agent: openai_compat, headers: {X-Api-Key: hunter2, Cookie: "sid=abc"}}',
     'model_config={"agent": "openai_compat", "headers": {"X-Api-Key": "***", "Cookie": "***"}}'),
    ("model_config={agent: gemini, max_output_tokens: 64}", "model_config={agent: gemini, max_output_tokens: 64}"),
    ("--set=model_config={base_url: 'http://h/v1?access_token=t0k'}", '--set=model_config={"base_url": "http://h/v1?access_token=***"}'),
    ("scorers={llmrater: {options: [{token: abc}]}}", 'scorers={"llmrater": {"options": [{"token": "***"}]}}'),
])
def test_command_line_arguments_are_redacted(arg, expected):
    from evalbench.core.redaction import redact_arg

    assert redact_arg(arg) == expected
