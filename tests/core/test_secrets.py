"""Issue 24: secrets are redacted at any depth of the config and of ``--set``, in every file of the
run directory, on the console and in the logs — also when the agent echoes them back.

End to end: a real ``evalbench run`` (a subprocess, so the console and the log are the real ones)
of the ``openai_compat`` agent against a local fake model server that echoes every header and the
path it received into its reply text and SQL; secrets given in a config file (nested headers, URLs
with a password and tokens in the query string, passwords, ``${ENV}`` expansion, ``api_key_env``)
and on the command line (nested ``--set`` JSON and YAML values). Every file of the run directory,
stdout and stderr (``-v``: the log) are searched for each secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalbench.config import RunConfig
from evalbench.core.redaction import is_secret_key, redact, redact_text, redact_url
from tests.attack_agent import completion, item
from tests.conftest import DEMO, ROOT
from tests.fake_llm_server import FakeLLMServer, Received, Scripted

# each one distinct, so a leak names its way out
SECRETS = {
    "file_header": "sk-file-hdr-5511", "file_team": "team-file-7342",
    "file_query": "qtok-file-9134", "file_db_pw": "dbpw-file-2218", "file_db_url_pw": "dburl-file-4407",
    "file_db_url_query": "sslpw-file-3381", "env_bearer": "envbearer-8871", "env_db_pw": "envdbpw-1207",
    "env_api_key": "envapikey-5563", "set_header": "sk-set-hdr-1994", "set_cookie": "cookie-set-4480",
    "set_base_pw": "basepw-set-7719", "set_query": "qtok-set-2250", "set_db_pw": "dbpw-set-8816",
    "set_db_url_pw": "dburl-set-6023", "set_sig": "sigset-3317",
}


def _echo(request: Received) -> Scripted:
    """A hostile model: whatever it received (headers, path) comes back as its text and inside its SQL."""
    echoed = " ".join(f"{k}={v}" for k, v in request.headers.items()) + " path=" + request.path
    body = completion(f"SELECT 1 AS one -- {echoed}", text=f"I was sent {echoed}")
    return Scripted(200, body)


def _dataset(tmp_path: Path) -> Path:
    path = tmp_path / "items.jsonl"
    items = [dict(item(f"s{i}", "SELECT 1 AS one"), dialect="sqlite") for i in range(2)]
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def _run(tmp_path: Path, config: dict, *extra: str) -> tuple[Path, str]:
    (tmp_path / "run.yaml").write_text(json.dumps(config), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT), EVALBENCH_PGDATA=str(tmp_path / "pg"),
               EB_TEST_BEARER=SECRETS["env_bearer"], EB_TEST_DB_PW=SECRETS["env_db_pw"],
               EB_TEST_LLM_KEY=SECRETS["env_api_key"])
    command = [sys.executable, "-m", "evalbench", "-v", "run", "--config", str(tmp_path / "run.yaml"), "--no-progress",
               "--output-dir", str(tmp_path / "out"), "--run-id", "r", *extra]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    return tmp_path / "out" / "r", done.stdout + done.stderr


def _base_config(tmp_path: Path, server: FakeLLMServer) -> dict:
    return {"dataset_config": str(_dataset(tmp_path)), "dataset_format": "bird-interact",
            "setup_directory": str(DEMO / "setup"), "dialects": ["sqlite"],
            "vuser_model_config": {"vuser": "rules"}, "scorers": {"exec_match": {}, "executable": {}}, "seed": 1}


def _assert_absent(run_dir: Path, console: str, names: list[str]) -> None:
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"manifest.json", "conversations.jsonl", "configs.csv", "report.html",
                                       "summary.json", "summary.md", "junit.xml", "evals.csv", "scores.csv"}
    journal = (run_dir / "conversations.jsonl").read_text(encoding="utf-8")
    assert "I was sent" in journal and "***" in journal  # the agent did echo what it was sent, scrubbed
    assert "HTTP Request: POST" in console  # -v: httpx logs every request with its URL
    for name in names:
        secret = SECRETS[name]
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"{name} ({secret}) in {path.name}"
        assert secret not in console, f"{name} ({secret}) on the console"


def test_secrets_of_a_config_file_are_nowhere(tmp_path, pgdata):
    s = SECRETS
    with FakeLLMServer(_echo) as server:
        host = server.url.removeprefix("http://")
        config = _base_config(tmp_path, server) | {
            "model_config": {
                "agent": "openai_compat", "model": "m", "api_key_env": "EB_TEST_LLM_KEY",
                "base_url": f"http://{host}/v1?api_key={s['file_query']}",
                "headers": {"X-Api-Key": s["file_header"], "X-Team": s["file_team"],
                            "Proxy-Authorization": "Bearer ${EB_TEST_BEARER}"},
                "retry": {"max_retries": 0}},
            "database_configs": [
                {"database_name": "unused_a", "dialect": "postgres", "password": s["file_db_pw"]},
                {"database_name": "unused_b", "dialect": "postgres", "password": "${EB_TEST_DB_PW}"},
                {"database_name": "unused_c", "dialect": "postgres",
                 "url": f"postgresql://bob:{s['file_db_url_pw']}@localhost:1/x?sslpassword={s['file_db_url_query']}"}],
        }
        run_dir, console = _run(tmp_path, config)
        sent = server.requests[-1].headers
    assert sent["x-api-key"] == s["file_header"] and sent["authorization"] == f"Bearer {s['env_api_key']}"
    _assert_absent(run_dir, console, [n for n in SECRETS if n.startswith(("file_", "env_"))])
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    agent = manifest["config"]["model_config"]
    assert agent["headers"] == {"X-Api-Key": "***", "X-Team": "***", "Proxy-Authorization": "***"}
    assert agent["base_url"] == f"http://{host}/v1?api_key=***"
    assert agent["api_key_env"] == "EB_TEST_LLM_KEY"  # the variable's name is kept: it is not the secret


def test_secrets_of_nested_set_values_are_nowhere(tmp_path, pgdata):
    s = SECRETS
    with FakeLLMServer(_echo) as server:
        host = server.url.removeprefix("http://")
        agent = {"agent": "openai_compat", "model": "m", "retry": {"max_retries": 0},
                 "base_url": f"http://carol:{s['set_base_pw']}@{host}/v1?access_token={s['set_query']}&sig={s['set_sig']}",
                 "headers": {"x-api-key": s["set_header"], "Cookie": f"sid={s['set_cookie']}"}}
        databases = (f"database_configs=[{{database_name: unused, dialect: postgres, password: {s['set_db_pw']}}}, "
                     f"{{database_name: unused_b, dialect: postgres, url: 'postgresql://d:{s['set_db_url_pw']}@h:1/x'}}]")
        run_dir, console = _run(tmp_path, _base_config(tmp_path, server), "--set", "model_config=" + json.dumps(agent),
                                "--set", databases)
        sent = server.requests[-1].headers
    assert sent["cookie"] == f"sid={s['set_cookie']}"
    assert sent["authorization"].startswith("Basic ")  # httpx sends the URL's user and password: echoed in base64
    _assert_absent(run_dir, console, [n for n in SECRETS if n.startswith("set_")])
    command = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["command"]
    recorded = json.loads(next(a for a in command if a.startswith("model_config=")).partition("=")[2])
    assert recorded["headers"] == {"x-api-key": "***", "Cookie": "***"}  # recorded, redacted, still JSON
    assert recorded["base_url"] == f"http://carol:***@{host}/v1?access_token=***&sig=***"


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads other processes' command lines in /proc")
def test_workers_get_the_secrets_of_the_command_line_without_showing_them_to_ps(tmp_path, pgdata):
    """Any user of the machine reads a process's command line: ``run --workers`` starts its
    workers with the secret arguments redacted there, and their real values in the environment."""
    secret = "sk-worker-hdr-6620"
    command_lines: list[bytes] = []

    def spy(request: Received) -> Scripted:  # while a worker waits for this reply, it is alive
        for proc in Path("/proc").iterdir():
            try:
                line = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
            except OSError:
                continue
            if b"evalbench.run.parallel.lifeline" in line:
                command_lines.append(line)
        return _echo(request)

    with FakeLLMServer(spy) as server:
        agent = {"agent": "openai_compat", "model": "m", "retry": {"max_retries": 0}, "base_url": f"{server.url}/v1",
                 "headers": {"x-api-key": secret}}
        config = dict(_base_config(tmp_path, server), dialects=["postgres"])  # a file database has one worker
        (tmp_path / "items.jsonl").write_text("".join(json.dumps(item(f"w{i}", "SELECT 1 AS one")) + "\n" for i in range(4)),
                                              encoding="utf-8")
        _run(tmp_path, config, "--set", "model_config=" + json.dumps(agent), "--workers", "2")
        sent = [r.headers.get("x-api-key") for r in server.requests]
    assert sent and set(sent) == {secret}  # the workers called the agent with the real key
    assert command_lines and all(b"evalbench.run.parallel.lifeline" in line and secret.encode() not in line for line in command_lines)
    assert any(b"***" in line for line in command_lines)


def test_a_config_error_does_not_echo_a_secret(tmp_path):
    """A value that fails validation is quoted in the error, with its secrets redacted."""
    config = tmp_path / "run.yaml"
    config.write_text(f"dataset_config: {DEMO / 'greenleaf.jsonl'}\nmodel_config: simulated:oracle\n", encoding="utf-8")
    bad = ('model_config={agent: adk, base_url: "http://u:errpw-4471@h/x?token=errtok-8812", app_name: a, '
           'headers: {Authorization: [not, a, string, errhdr-3390]}}')
    done = subprocess.run([sys.executable, "-m", "evalbench", "run", "--config", str(config), "--set", bad,
                           "--set", "seed=not-a-seed password=errkv-5528"],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 2 and "error:" in done.stderr
    for secret in ("errpw-4471", "errtok-8812", "errhdr-3390", "errkv-5528"):
        assert secret not in done.stdout + done.stderr


# --------------------------------------------------------------------------- the policy


def test_no_config_key_of_ours_is_taken_for_a_secret_but_the_passwords():
    """rescore refuses a manifest that redacts a value it needs: a false positive would break it."""
    names: set[str] = set()

    def collect(model: type) -> None:
        for name, field in model.model_fields.items():
            names.update({name, field.alias or name})
            for arg in (*getattr(field.annotation, "__args__", ()), field.annotation):
                if isinstance(arg, type) and hasattr(arg, "model_fields") and arg not in seen:
                    seen.add(arg)
                    collect(arg)

    seen: set[type] = set()
    collect(RunConfig)
    from evalbench.config.agents import AdkAgentConfig, GeminiAgentConfig, OpenAICompatAgentConfig

    for model in (AdkAgentConfig, GeminiAgentConfig, OpenAICompatAgentConfig):
        collect(model)
    assert {"max_output_tokens", "api_key_env", "base_url", "session"} <= names
    # enable_iam_auth holds a boolean, which redact() never replaces
    assert sorted(n for n in names if is_secret_key(n)) == ["enable_iam_auth", "password"]


@pytest.mark.parametrize("key", ["password", "PASSWORD", "db_password", "passwd", "pwd", "api_key", "apiKey", "X-Api-Key",
                                 "x_api_key", "Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "token",
                                 "access_token", "accessToken", "refresh-token", "X-Auth-Token", "id_token", "client_secret",
                                 "clientSecret", "secret", "aws_secret_access_key", "private_key", "privateKey", "secret_key",
                                 "credentials", "sig", "sas_token", "auth", "bearer", "passphrase", "openai_api_key"])
def test_secret_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["api_key_env", "password_env", "secret_manager_path", "key_file", "max_output_tokens",
                                 "max_tokens", "tokens", "prompt_tokens", "key", "keys", "sort_key_count", "session",
                                 "header_names", "model", "base_url", "user_name", "monkey", "tokenizer", "passed",
                                 "bypass", "author"])
def test_not_secret_keys(key):
    assert not is_secret_key(key)


def test_redact_walks_every_depth_and_list():
    value = {"model_config": {"headers": {"X-Team": "t", "Authorization": "Bearer b"}, "max_output_tokens": 5,
                              "base_url": "https://u:p4ss@h/v1?key=k1&model=m#access_token=t1",
                              "nested": [{"extra": [{"client_secret": "c"}]}, {"cookie": {"a": "b"}}]},
             "bearer_token": False, "password": None, "dsn": "host=h password=p dbname=d", "pin": 1234,
             "sas_token": 987}
    assert redact(value) == {
        "model_config": {"headers": {"X-Team": "***", "Authorization": "***"}, "max_output_tokens": 5,
                         "base_url": "https://u:***@h/v1?key=***&model=m#access_token=***",
                         "nested": [{"extra": [{"client_secret": "***"}]}, {"cookie": {"a": "***"}}]},
        "bearer_token": False, "password": None, "dsn": "host=h password=*** dbname=d", "pin": 1234, "sas_token": "***"}


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql://u:p%40ss@[::1]:5/x?sslmode=require", "postgresql://u:***@[::1]:5/x?sslmode=require"),
    ("https://h/v1?api_key=a&x=1&X-Amz-Signature=s", "https://h/v1?api_key=***&x=1&X-Amz-Signature=***"),
    ("https://h/v1?key=AIza-secret", "https://h/v1?key=***"),
    ("https://h/cb#access_token=t&state=s", "https://h/cb#access_token=***&state=s"),
    ("mysql://root:p@ss@h:3306/db", "mysql://root:***@h:3306/db"),
    ("https://h/v1?model=m&max_tokens=5", "https://h/v1?model=m&max_tokens=5"),
    ("postgresql://alice@h/x", "postgresql://alice@h/x"),
    ("not a url", "not a url"),
])
def test_redact_url(url, expected):
    assert redact_url(url) == expected


def test_redact_text_finds_secrets_inside_prose():
    text = ('failed: GET https://u:pw1@h/x?token=tk1 said 401; conninfo "host=h password=pw2 user=u"; '
            'header Authorization: Bearer abcdefgh; {"api_key": "k3", "model": "m"}; x-api-key=k4')
    out = redact_text(text)
    for secret in ("pw1", "tk1", "pw2", "abcdefgh", "k3", "k4"):
        assert secret not in out
    assert '"model": "m"' in out and "user=u" in out
