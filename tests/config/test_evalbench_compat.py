"""EvalBench drop-in: its stock example configs (tests/fixtures/evalbench, copied with only hosts
and endpoints changed) load with EvalBench's meaning and run against local fakes: the embedded
PostgreSQL, a fake ADK api_server speaking EvalBench's GDA tool convention, and the fake Gemini
API for the virtual user and the judge. Also: dialect spellings, path fallback to the working
directory, ``follow_up: false``, EvalBench's virtual-user reply grammar, refused keys.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from evalbench.config import load_run_config
from evalbench.core.errors import ConfigError
from evalbench.dataset import load_items
from evalbench.results import read_journal
from evalbench.run import run as run_evaluation
from evalbench.vuser.llm import InvalidAction, evalbench_unwrap, parse_action
from tests.fake_llm_server import FakeLLMServer, Received, Scripted

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "evalbench"
DEMO = ROOT / "datasets" / "demo"
BAT_INTERACT = "datasets/bat-interact/example_run_config.yaml"
BIRD_INTERACT = "datasets/bird-interact/example_run_config.yaml"
BAT_SQLITE = "datasets/bat/example_run_config.yaml"
DEMO_KEYS = {"dataset_config": str(DEMO / "greenleaf.jsonl"), "dataset_directory": str(DEMO),
             "setup_directory": str(DEMO / "setup")}
GDA_TOOL = "cloud_gda_query_tool_alloydb"


# --------------------------------------------------------------------------- fakes


def gemini_completion(text: str) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 5, "totalTokenCount": 10}}


class FakeGemini:
    """The gemini agent (a request with tools: ``ask_user`` once for an ambiguous item, then
    ``run_sql`` with the golden SQL), the virtual user's encode prompt in EvalBench's grammar
    (``<s>labeled("…")</s>`` for the first listed term), its decode prompt as ``<s>…</s>``, and
    any other prompt (the llmrater judge) with a verdict."""

    def __init__(self, items: dict[str, Any] | None = None) -> None:
        self.by_question = {item.opening_question: item for item in (items or {}).values()}
        self.prompts: list[str] = []
        self.agent_calls = 0

    def _agent(self, body: dict[str, Any]) -> Scripted:
        self.agent_calls += 1
        texts = [part.get("text", "") for content in body["contents"] for part in content.get("parts", [])]
        item = next((self.by_question[t] for t in texts if t in self.by_question), None)
        asked = any("functionCall" in part for content in body["contents"] for part in content.get("parts", []))
        if item is not None and not asked and any(a.kind != "non_critical" for a in item.ambiguities):
            term = next(a.term for a in item.ambiguities if a.kind != "non_critical")
            call = {"name": "ask_user", "args": {"question": f'When you say "{term}", what do you mean?'}}
        else:
            call = {"name": "run_sql", "args": {"sql": item.golden_sql[0] if item is not None else "SELECT 1"}}
        return Scripted(200, {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": call}]},
                                              "finishReason": "STOP", "index": 0}]})

    def __call__(self, request: Received) -> Scripted:
        body = request.json()
        if body.get("tools"):
            return self._agent(body)
        prompt = body["contents"][0]["parts"][0]["text"]
        self.prompts.append(prompt)
        if "Reply with EXACTLY ONE of these actions" in prompt:
            term = re.search(r'^- "(.+?)" ->', prompt, re.MULTILINE)
            text = f'The question is about a labeled term.\n<s>labeled("{term.group(1)}")</s>' if term else "<s>unanswerable()</s>"
        elif "labeled(" in prompt:
            text = "<s>I mean what the shop usually means by it.</s>"
        else:
            text = "EQUIVALENT"
        return Scripted(200, gemini_completion(text))


class FakeAdk:
    """An ADK api_server with EvalBench's GDA convention (generators/models/querydata.py): each
    reply's ``cloud_gda_query_tool_alloydb`` response holds ``disambiguationQuestion`` (once per
    session, for an item with annotated ambiguities) or ``generatedQuery`` (the golden SQL)."""

    def __init__(self, items: dict[str, Any]) -> None:
        self.by_question = {item.opening_question: item for item in items.values()}
        self.sessions: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []

    def __call__(self, request: Received) -> Scripted:
        self.requests.append((request.method, request.path))
        if request.method == "POST" and request.path.endswith("/sessions"):
            session_id = uuid.uuid4().hex
            self.sessions[session_id] = {"asked": False, "item": None}
            return Scripted(200, {"id": session_id})
        if request.method == "DELETE":
            return Scripted(200, {})
        if request.method == "GET":
            return Scripted(200, ["dataagent"])
        body = request.json()
        session = self.sessions[body["sessionId"]]
        text = body["newMessage"]["parts"][0]["text"]
        session["item"] = session["item"] or self.by_question.get(text)
        item = session["item"]
        asks = item is not None and not session["asked"] and any(a.kind != "non_critical" for a in item.ambiguities)
        if asks:
            session["asked"] = True
            term = next(a.term for a in item.ambiguities if a.kind != "non_critical")
            result = {"disambiguationQuestion": [f'When you say "{term}", what do you mean?']}
        else:
            result = {"generatedQuery": item.golden_sql[0] if item is not None else "SELECT 1"}
        events = [
            {"content": {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": GDA_TOOL, "args": {"prompt": text}}}]}},
            {"content": {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": GDA_TOOL,
                                                                          "response": {"result": json.dumps(result)}}}]}},
            {"content": {"role": "model", "parts": [{"text": "Here is what I found."}]}},
        ]
        return Scripted(200, events)


@pytest.fixture
def evalbench_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the fixture tree as EvalBench's working directory (its paths are relative to it)."""
    root = tmp_path / "evalbench"
    shutil.copytree(FIXTURES, root)
    monkeypatch.chdir(root)
    monkeypatch.setenv("EVALBENCH_COMPAT_PG_HOST", "127.0.0.1:5432")
    monkeypatch.setenv("EVALBENCH_COMPAT_ADK_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("EVALBENCH_COMPAT_GEMINI_URL", "http://127.0.0.1:9")
    return root


# --------------------------------------------------------------------------- loading the stock configs


def test_bat_interact_config_loads_with_evalbench_meaning(evalbench_root):
    config = load_run_config(BAT_INTERACT, **DEMO_KEYS)
    assert config.dialects == ["postgres"]  # EvalBench's postgresql
    assert config.orchestrator == "dataagent" and config.follow_up_enabled is False
    assert config.dataset_format == "bird-interact"
    assert "executable" in config.scorers and "executable_sql" not in config.scorers
    assert config.scorers["llmrater"]["vertex_model"] == "gemini-2.5-pro"  # read from its model_config file
    assert config.execution.preview_rows == 250  # reporting.truncate_execution_outputs
    [db] = config.database_configs
    assert (db.host, db.port, db.db_type, db.dialect) == ("127.0.0.1", 5432, "alloydb", "postgres")
    agent = config.agent
    assert (agent.agent, agent.base_url, agent.app_name, agent.execs_per_minute) == ("adk", "http://127.0.0.1:9", "dataagent", 5)
    vuser = config.vuser
    assert (vuser.vuser, vuser.model, vuser.base_url, vuser.vertexai) == ("llm", "gemini-2.5-pro", "http://127.0.0.1:9", False)
    noted = {n["key"] for n in config.compat_notes()}
    assert noted == {"model_config.agent_engine_id", "model_config.location", "model_config.project_id",
                     "database_configs[0].gcp_project_id", "database_configs[0].gcp_region",
                     "database_configs[0].secret_manager_path", "reporting.bigquery"}
    paths = {p["key"]: p["relative_to"] for p in config.snapshot()["evalbench_compat"]["paths"]}
    assert paths["model_config"] == paths["vuser_model_config"] == paths["database_configs[0]"] == "working directory"
    assert paths["scorers.llmrater.model_config"] == "working directory"


def test_bird_interact_config_loads_with_evalbench_meaning(evalbench_root):
    config = load_run_config(BIRD_INTERACT, **DEMO_KEYS)
    assert config.max_turns == 6  # EvalBench's max_turn
    assert config.follow_up_enabled is True  # EvalBench's interact flow
    assert config.agent.agent == "gemini" and config.agent.model == "gemini-2.5-pro" and config.agent.base_prompt == ""
    assert config.scorers["llmrater"]["vertex_model"] == "gemini-1.5-pro-002"
    [_db] = config.database_configs
    # EvalBench's db config names a server serving every database of its dialect (get_database)
    served = config.database_for("postgres", "greenleaf")
    assert (served.database_name, served.host, served.port) == ("greenleaf", "127.0.0.1", 5432)
    assert {n["key"] for n in config.compat_notes()} == {"database_configs[0].secret_manager_path", "prompt_generator"}
    # EvalBench's interact orchestrator simulates the user with model_config's model (evaluator/virtualuser.py)
    assert (config.vuser.vuser, config.vuser.model, config.vuser.base_url) == ("llm", "gemini-2.5-pro", "http://127.0.0.1:9")


def test_the_stock_paths_are_refused_without_the_fallback(evalbench_root, monkeypatch):
    """Run from elsewhere, EvalBench's working-directory paths are found nowhere: a clear error."""
    monkeypatch.chdir(evalbench_root.parent)
    with pytest.raises(ConfigError, match=r"scorers.llmrater.model_config: file not found: .*/bat-interact/datasets/model_configs/"):
        load_run_config(evalbench_root / BAT_INTERACT, **DEMO_KEYS)


# --------------------------------------------------------------------------- a whole run


@pytest.fixture
def socket_host(embedded_admin_url: str) -> str:
    """The embedded server's socket directory: a database_path (a host) as libpq reads it."""
    return parse_qs(urlsplit(embedded_admin_url).query)["host"][0]


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeAdk, FakeGemini]]:
    items = {item.id: item for item in load_items(DEMO / "greenleaf.jsonl")[0]}
    adk, gemini = FakeAdk(items), FakeGemini(items)
    with FakeLLMServer(responder=adk) as adk_server, FakeLLMServer(responder=gemini) as gemini_server:
        monkeypatch.setenv("EVALBENCH_COMPAT_ADK_URL", adk_server.url)
        monkeypatch.setenv("EVALBENCH_COMPAT_GEMINI_URL", gemini_server.url)
        monkeypatch.setenv("GEMINI_API_KEY", "fake-key")
        yield adk, gemini


@pytest.mark.slow  # the stock configs' execs_per_minute throttle every model call
def test_bat_interact_runs_against_local_fakes(evalbench_root, fakes, socket_host, pgdata, monkeypatch):
    adk, gemini = fakes
    monkeypatch.setenv("EVALBENCH_COMPAT_PG_HOST", socket_host)
    # one ambiguous item with a follow-up question: the stock configs' execs_per_minute: 5 make every call slow
    ids = ["greenleaf_21"]
    config = load_run_config(BAT_INTERACT, **DEMO_KEYS, subset={"item_ids": ids}, run_id="bat-interact",
                             runners={"sqlgen_runners": 2})
    result = run_evaluation(config, progress=False)
    records = {r["item_id"]: r for r in read_journal(result.run_dir)}
    assert set(records) == set(ids)
    assert all(r["outcome"] == "scored" for r in records.values())
    # the data-agent flow: no follow-up phase, although the item has one
    assert all([p["phase"] for p in r["phases"]] == ["main"] for r in records.values())
    vuser_turns = [t for r in records.values() for t in r["turns"] if t.get("vuser")]
    assert vuser_turns and all(t["vuser"]["action_kind"] == "labeled" for t in vuser_turns)
    assert all("<s>" not in t["vuser"]["text"] and "</s>" not in t["vuser"]["text"] for t in vuser_turns)
    assert any("labeled(" in p for p in gemini.prompts)  # the decode step saw the parsed action
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    compat = manifest["config"]["evalbench_compat"]
    assert compat["follow_up"] is False and any(n["key"] == "reporting.bigquery" for n in compat["not_applied"])
    assert any(p["relative_to"] == "working directory" for p in compat["paths"])
    assert ("POST", "/run") in adk.requests


@pytest.mark.slow
def test_bird_interact_runs_against_local_fakes(evalbench_root, fakes, socket_host, pgdata, monkeypatch):
    """EvalBench's interact flow: the gemini agent (model_config) also simulates the user (no
    vuser_model_config), and the follow-up phase is asked."""
    _, gemini = fakes
    monkeypatch.setenv("EVALBENCH_COMPAT_PG_HOST", socket_host)
    config = load_run_config(BIRD_INTERACT, **DEMO_KEYS, subset={"item_ids": ["greenleaf_21"]}, run_id="bird-interact")
    result = run_evaluation(config, progress=False)
    [record] = list(read_journal(result.run_dir))
    assert record["outcome"] == "scored"
    assert [p["phase"] for p in record["phases"]] == ["main", "follow_up"]
    assert [t["vuser"]["action_kind"] for t in record["turns"] if t.get("vuser")] == ["labeled"]
    assert gemini.agent_calls == 3  # the question, the SQL, the follow-up's SQL


@pytest.mark.slow
def test_bat_sqlite_stock_config_runs_with_only_paths_changed(evalbench_root, monkeypatch):
    """EvalBench's stock SQLite example (datasets/bat) on db_blog's SQLite setup: the database
    file is built at the db config's database_path, the gemini agent answers through the fake
    Gemini API, and EvalBench's scorers run."""
    from tests.conftest import shared_dataset

    shared = shared_dataset("db_blog")
    bat = evalbench_root / "datasets" / "bat"
    shutil.copy(shared / "nl2sql_evalbench_format.json", bat / "prompts.json")
    (bat / "setup").symlink_to(shared / "setup")
    items = {item.id: item for item in load_items(bat / "prompts.json", dialects=["sqlite"])[0]}
    ids = sorted(items)[:2]  # the stock execs_per_minute: 5 make every model call slow
    gemini = FakeGemini(items)
    with FakeLLMServer(responder=gemini) as server:
        monkeypatch.setenv("EVALBENCH_COMPAT_GEMINI_URL", server.url)
        monkeypatch.setenv("GEMINI_API_KEY", "fake-key")
        config = load_run_config(BAT_SQLITE, subset={"item_ids": ids}, run_id="bat-sqlite")
        result = run_evaluation(config, progress=False)
    records = {r["item_id"]: r for r in read_journal(result.run_dir)}
    assert set(records) == set(ids) and all(r["dialect"] == "sqlite" for r in records.values())
    # item 100 asks for "the" most active hour over tied counts (LIMIT 1 through ties): invalid, in
    # no rate, yet judged, as an answer may still pass there
    assert all(r["outcome"] == "scored" or (r["outcome"] == "invalid_item" and "cuts through rows tied" in r["error"])
               for r in records.values()), [r["error"] for r in records.values()]
    for record in records.values():
        scores = record["phases"][0]["scores"]
        assert scores["executable"]["passed"] and scores["exact_match"]["passed"] and scores["set_match"]["passed"]
    assert (evalbench_root / "db_connections" / "bat" / "db_blog.db").is_file()
    databases = json.loads((result.run_dir / "summary.json").read_text())["databases"]
    assert databases["sqlite/db_blog"]["action"] == "created"


# --------------------------------------------------------------------------- dialects


def test_postgresql_spelling_matches_postgres_items(tmp_path):
    data = tmp_path / "ds.json"
    data.write_text(json.dumps([{"id": "1", "nl_prompt": "How many?", "database": "d", "dialects": ["postgresql"],
                                 "query_type": "DQL", "golden_sql": {"postgresql": ["SELECT 1"]},
                                 "setup_sql": {"postgresql": []}, "eval_query": {}, "cleanup_sql": {}, "tags": [], "other": {}}]))
    config_path = tmp_path / "run.yaml"
    config_path.write_text(f"dataset_config: {data}\ndialects: [PostgreSQL]\nmodel_config: simulated:oracle\n"
                           "database_configs: [{database_name: d, dialect: postgresql}]\n")
    config = load_run_config(config_path)
    assert config.dialects == ["postgres"] and config.database_configs[0].dialect == "postgres"
    items, errors = load_items(data, dialects=config.dialects)
    assert not errors and [(i.id, i.dialect, i.golden_sql) for i in items] == [("1", "postgres", ["SELECT 1"])]


# --------------------------------------------------------------------------- paths


def test_path_beside_the_config_wins_over_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "ds.jsonl").write_text("")
    (tmp_path / "ds.jsonl").write_text("")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg" / "run.yaml").write_text("dataset_config: ds.jsonl\nmodel_config: simulated:oracle\n")
    config = load_run_config(tmp_path / "cfg" / "run.yaml")
    assert config.dataset_config == tmp_path / "cfg" / "ds.jsonl"
    (tmp_path / "cfg" / "ds.jsonl").unlink()
    config = load_run_config(tmp_path / "cfg" / "run.yaml")
    assert config.dataset_config == tmp_path / "ds.jsonl"
    [record] = [p for p in config.snapshot()["evalbench_compat"]["paths"] if p["key"] == "dataset_config"]
    assert record["relative_to"] == "working directory"


def test_dataset_directory_holds_the_knowledge_files(tmp_path):
    """EvalBench's <dataset_directory>/<db>/<db>_kb.jsonl (dataset/dataset.py::load_knowledge)."""
    from evalbench.dataset.knowledge import load_knowledge

    (tmp_path / "data" / "shop").mkdir(parents=True)
    (tmp_path / "data" / "shop" / "shop_kb.jsonl").write_text(
        json.dumps({"id": 3, "knowledge": "Realized Order", "description": "paid", "definition": ["status = 'done'"]}) + "\n")
    path = tmp_path / "run.yaml"
    path.write_text(f"dataset_config: {DEMO / 'greenleaf.jsonl'}\nmodel_config: simulated:oracle\ndataset_directory: data\n")
    config = load_run_config(path)
    assert config.knowledge_path == tmp_path / "data"
    assert load_knowledge(config.knowledge_path)["shop"][3].name == "Realized Order"


# --------------------------------------------------------------------------- follow_up


@pytest.mark.parametrize(("extra", "expected"), [("", True), ("orchestrator: dataagent\n", False),
                                                 ("follow_up: false\n", False),
                                                 ("orchestrator: dataagent\nfollow_up: true\n", True)])
def test_follow_up_setting(tmp_path, extra, expected):
    path = tmp_path / "run.yaml"
    path.write_text(f"dataset_config: {DEMO / 'greenleaf.jsonl'}\nmodel_config: simulated:oracle\n{extra}")
    assert load_run_config(path).follow_up_enabled is expected


def test_follow_up_false_skips_the_follow_up_phase(tmp_path, pgdata):
    path = tmp_path / "run.yaml"
    path.write_text(f"dataset_config: {DEMO / 'greenleaf.jsonl'}\nsetup_directory: {DEMO / 'setup'}\n"
                    f"model_config: simulated:oracle\nfollow_up: false\nrun_id: no-follow-up\n"
                    f"subset: {{item_ids: [greenleaf_1]}}\nreporting: {{csv: {{output_directory: {tmp_path}}}}}\n")
    result = run_evaluation(load_run_config(path), progress=False)
    [record] = list(read_journal(result.run_dir))
    assert record["outcome"] == "scored" and [p["phase"] for p in record["phases"]] == ["main"]
    assert len(record["turns"]) == 1


# --------------------------------------------------------------------------- the virtual user's grammar


@pytest.mark.parametrize(("text", "expected"), [
    ('<s>labeled("a")</s>', 'labeled("a")'),
    ('labeled("a")</s>', 'labeled("a")'),  # EvalBench's encode prompt ends with <s>
    ('It is about the labeled point.\n<s>labeled("downtime score")</s>', 'labeled("downtime score")'),
    ("<think>which one?</think>\n<s>unanswerable()</s>", "unanswerable()"),
    ('**labeled("a")**', 'labeled("a")'),  # EvalBench's data-agent encode prompt's format
    ('**labeled("a")**, **labeled("b")**', 'labeled("a", "b")'),  # "as many as detected ambiguities"
    ('<s>unlabeled("x > 1")</s>', 'unlabeled("x > 1")'),
])
def test_evalbench_action_grammar(text, expected):
    assert str(parse_action(text)) == expected


@pytest.mark.parametrize("text", ['<s>labeled("a"), unlabeled("b")</s>', "<s>the user means spring</s>", "<s></s>"])
def test_evalbench_grammar_still_needs_one_valid_action(text):
    with pytest.raises(InvalidAction):
        parse_action(text)


def test_base_prompt_goes_before_every_vuser_prompt(monkeypatch):
    """EvalBench's Gemini generator sends base_prompt + prompt (generators/models/gemini.py)."""
    from evalbench.config import LlmVUserConfig
    from evalbench.run.stages import new_conversation
    from evalbench.vuser import build_vuser

    items = {item.id: item for item in load_items(DEMO / "greenleaf.jsonl")[0]}
    gemini = FakeGemini()
    monkeypatch.setenv("GEMINI_API_KEY", "fake-key")
    with FakeLLMServer(responder=gemini) as server:
        config = LlmVUserConfig(vuser="llm", model="m", base_url=server.url, base_prompt="BASE PROMPT\n")
        vuser = build_vuser(config, 1)
        try:
            conv = new_conversation(items["greenleaf_21"], seed=1, max_turns=10, patience=3, timeout_s=60)
            reply = vuser.answer(conv, "What do you mean?")
        finally:
            vuser.close()
    assert reply.error is None and reply.action is not None and reply.action.kind == "labeled"
    assert len(gemini.prompts) == 2 and all(p.startswith("BASE PROMPT\n") for p in gemini.prompts)
    assert reply.text == "I mean what the shop usually means by it."


def test_decode_reply_is_taken_out_of_its_tags():
    assert evalbench_unwrap("<s>Sorry, this question is out of scope.</s>") == "Sorry, this question is out of scope."
    assert evalbench_unwrap("Use the 2023 data.</s>") == "Use the 2023 data."


# --------------------------------------------------------------------------- refused keys


@pytest.mark.parametrize(("line", "message"), [
    ("databases: [db_blog]", "EvalBench key 'databases' is not supported: EvalBench's filter by database"),
    ("scenarios: [a]", "EvalBench key 'scenarios' is not supported"),
    ("orchestrator: geminicli", "unknown orchestrator 'geminicli'"),
    ("model_config: {generator: query_data_api}", "generator 'query_data_api' is not supported"),
    ("model_config: {generator: gemini_cli}", "generator 'gemini_cli' is not a data agent here"),
    ("database_configs: [{database_name: d, db_type: oracle}]", "unknown db_type 'oracle'"),
    ("vuser_model_config: {generator: gcp_vertex_claude}", "the virtual user is a Gemini model"),
    ("scorers: {executable_sql: null, executable: null}", "EvalBench's name of 'executable'"),
    ("max_turn: 3\nmax_turns: 4", "max_turn is EvalBench's name of max_turns"),
    ("database_configs: [{database_name: d, database_path: 'p:r:i'}]", "names a cloud instance"),
    ("database_configs: [{database_name: d, db_type: mysql, dialect: mysql, database_path: /run/mysqld}]",
     "a MySQL server is reached at host or host:port"),
    ("database_configs: [{database_name: d, database_path: 'h:5432', host: h}]", "cannot be combined with host"),
])
def test_refused_keys_say_what_to_use(tmp_path, line, message):
    path = tmp_path / "run.yaml"
    body = f"dataset_config: {DEMO / 'greenleaf.jsonl'}\n{line}\n"
    if "model_config:" not in line or "vuser_model_config" in line:
        body += "model_config: simulated:oracle\n"
    path.write_text(body)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_run_config(path)


def test_evalbench_aliases(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(f"dataset_config: {DEMO / 'greenleaf.jsonl'}\nmodel_config: simulated:oracle\nnum_trials: 2\n"
                    "num_evals_to_run: 5\nsimulated_user_model_config: rules\nreporting: {truncate_execution_outputs: 7}\n"
                    "execution: {preview_rows: 3}\ndatabase_configs: [{database_name: d, database_path: 'db.example:6543', "
                    "db_name_suffix: _ci}]\n")
    config = load_run_config(path)
    assert config.trials == 2 and config.subset is not None and config.subset.limit == 5
    assert config.vuser.vuser == "rules"
    assert config.execution.preview_rows == 3  # given explicitly: truncate_execution_outputs does not override it
    served = config.database_for("postgres", "d")
    assert (served.database_name, served.host, served.port) == ("d_ci", "db.example", 6543)


def test_env_tag_and_pyaml_env_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EvalBench reads its configs with pyaml_env (`!ENV ${VAR}`, `${VAR:default}`): both load."""
    from evalbench.config.yamlfile import load_yaml

    monkeypatch.setenv("EVALBENCH_COMPAT_HOST", "127.0.0.1")
    monkeypatch.delenv("EVALBENCH_COMPAT_UNSET", raising=False)
    path = tmp_path / "db.yaml"
    path.write_text("host: !ENV ${EVALBENCH_COMPAT_HOST}\nuser: !ENV 'u-${EVALBENCH_COMPAT_UNSET:postgres}'\n"
                    "password: ${EVALBENCH_COMPAT_UNSET:-}\n", encoding="utf-8")
    assert load_yaml(path).data == {"host": "127.0.0.1", "user": "u-postgres", "password": ""}
    path.write_text("host: !ENV [a, b]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="!ENV applies to a single value"):
        load_yaml(path)
