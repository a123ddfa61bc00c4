"""Run-config loading: every error names the file, the line and the key path; secrets never leak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.config import DatabaseConfig, RunConfig, load_run_config
from evalbench.core.errors import ConfigError
from evalbench.core.redaction import redact, redact_url
from tests.conftest import DEMO

DEMO_DATASET = DEMO / "greenleaf.jsonl"

HEAD = "dataset_config: ds.jsonl\nmodel_config: simulated:oracle\n"  # lines 1-2 of most configs below
RECORD = '{"instance_id": "a_1", "selected_database": "d", "query": "q", "sol_sql": ["SELECT 1"]}\n'


@pytest.fixture
def cfg_dir(tmp_path: Path) -> Path:
    (tmp_path / "ds.jsonl").write_text(RECORD)
    return tmp_path


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def load_error(path: Path) -> ConfigError:
    """The ConfigError that loading ``path`` raises (any other outcome fails the test)."""
    try:
        config = load_run_config(path)
    except RecursionError:
        pytest.fail(f"loading {path.name} raised RecursionError instead of a ConfigError")
    except ConfigError as exc:
        return exc
    pytest.fail(f"{path.name} loaded without error: {config!r}")


# --------------------------------------------------------------------------- location of errors


def test_unknown_top_level_key(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "scorerz:\n  exec_match: {}\n")
    err = load_error(path)
    assert str(err) == f"{path}:3: scorerz: unknown key"
    assert (err.file, err.line, err.key) == (str(path), 3, "scorerz")


def test_unknown_nested_key(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "seed: 1\nrunners: {sqlgen_runner: 3}\n")
    err = load_error(path)
    assert str(err) == f"{path}:4: runners.sqlgen_runner: unknown key"
    assert err.key == "runners.sqlgen_runner"


def test_wrong_type_nested_value(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "runners:\n  promptgen_runners: 1\n  sqlgen_runners: eight\n")
    err = load_error(path)
    assert str(err).startswith(f"{path}:5: runners.sqlgen_runners: ")
    assert "valid integer" in str(err)
    assert "(got 'eight')" in str(err)
    assert (err.line, err.key) == (5, "runners.sqlgen_runners")


def test_wrong_type_list_for_int(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "seed: [1]\n")
    err = load_error(path)
    assert str(err) == f"{path}:3: seed: Input should be a valid integer"


def test_out_of_range_value(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "max_turns: 0\n")
    err = load_error(path)
    assert str(err).startswith(f"{path}:3: max_turns: ")
    assert "greater than or equal to 1" in str(err)


def test_several_errors_are_all_reported(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "scorerz: {}\nseed: [1]\n")
    message = str(load_error(path))
    assert f"{path}:3: scorerz: unknown key" in message
    assert f"{path}:4: seed: Input should be a valid integer" in message
    assert len(message.splitlines()) == 2


def test_missing_dataset_file(cfg_dir):
    path = write(cfg_dir, "run.yaml", "model_config: simulated:oracle\ndataset_config: nope.jsonl\n")
    err = load_error(path)
    assert str(err).startswith(f"{path}:2: dataset_config: path does not exist: {cfg_dir / 'nope.jsonl'}")
    assert (err.line, err.key) == (2, "dataset_config")


def test_missing_setup_directory(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "setup_directory: no/such/dir\n")
    err = load_error(path)
    assert str(err).startswith(f"{path}:3: setup_directory: path does not exist: {cfg_dir / 'no/such/dir'}")


def test_missing_database_config_file(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs:\n  - missing.yaml\n")
    err = load_error(path)
    assert str(err) == f"{path}:4: database_configs[0]: file not found: {cfg_dir / 'missing.yaml'}"
    assert (err.line, err.key) == (4, "database_configs[0]")


def test_database_configs_must_be_a_list(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs: db.yaml\n")
    err = load_error(path)
    assert str(err) == f"{path}:3: database_configs: expected a list of database config files or mappings"


def test_error_inside_nested_database_config_names_that_file(cfg_dir):
    db = write(
        cfg_dir,
        "dbs/blog.yaml",
        "db_type: postgres\ndialect: postgres\ndatabase_name: db_blog\nuser_name: u\nmax_executions_per_minute: lots\n",
    )
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs:\n  - dbs/blog.yaml\n")
    err = load_error(path)
    assert err.file == str(db)
    assert str(err).startswith(f"{db}:5: max_executions_per_minute: ")
    assert "(got 'lots')" in str(err)
    assert str(path) not in str(err)


def test_unknown_key_inside_nested_database_config(cfg_dir):
    db = write(cfg_dir, "db.yaml", "database_name: x\nhostname: localhost\n")
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs: [db.yaml]\n")
    assert str(load_error(path)) == f"{db}:2: hostname: unknown key"


def test_error_inside_inline_database_config(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs:\n  - database_name: a\n  - database_name: b\n    db_typo: 1\n")
    assert str(load_error(path)) == f"{path}:6: database_configs[1].db_typo: unknown key"


def test_duplicate_database(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs:\n  - database_name: a\n  - database_name: a\n")
    err = load_error(path)
    assert str(err) == f"{path}:3: database_configs: database configured more than once: postgres/a"


def test_unknown_scorer(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "scorers:\n  exec_match: {}\n  exec_matchh: {}\n")
    err = load_error(path)
    assert str(err).startswith(f"{path}:5: scorers.exec_matchh: unknown scorer 'exec_matchh' (known: ")
    known = str(err).split("(known: ", 1)[1]
    for name in ("exec_match", "executable", "turn_count"):
        assert name in known


def test_no_scorer(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "scorers: {}\n")
    assert str(load_error(path)) == f"{path}:3: scorers: at least one scorer is needed"


def test_unknown_agent(cfg_dir):
    path = write(cfg_dir, "run.yaml", "dataset_config: ds.jsonl\nseed: 3\nmodel_config: simulated:wizard\n")
    err = load_error(path)
    assert str(err).startswith(f"{path}:3: model_config.agent: ")
    assert "'simulated:wizard'" in str(err)
    assert "simulated:oracle" in str(err) and "simulated:noisy" in str(err)  # the known names are listed


def test_missing_agent(cfg_dir):
    path = write(cfg_dir, "run.yaml", "dataset_config: ds.jsonl\n")
    err = load_error(path)
    assert "model_config: required key is missing" in str(err)
    assert err.file == str(path)


def test_error_inside_inline_agent_mapping(cfg_dir):
    path = write(cfg_dir, "run.yaml", "dataset_config: ds.jsonl\nmodel_config:\n  agent: simulated:noisy\n  latency_s: -1\n")
    err = load_error(path)
    assert str(err).startswith(f"{path}:4: model_config.latency_s: ")
    assert "greater than or equal to 0" in str(err)


@pytest.mark.parametrize(
    ("key", "nested_text", "expected_line", "expected_key"),
    [
        ("model_config", "agent: simulated:noisy\nlatency_s: -1\n", 2, "latency_s"),
        ("model_config", "agent: simulated:noisy\nfailure_rates:\n  bogus: 0.1\n", 2, "failure_rates"),
        ("model_config", "agent: simulated:noisy\nlatncy_s: 1\n", 2, "latncy_s"),
        ("vuser_model_config", "vuser: rules\npatience: -2\n", 2, "patience"),
    ],
    ids=["agent-bad-value", "agent-bad-failure-kind", "agent-unknown-key", "vuser-bad-value"],
)
def test_error_inside_nested_agent_or_vuser_file_names_that_file(cfg_dir, key, nested_text, expected_line, expected_key):
    nested = write(cfg_dir, "nested.yaml", nested_text)
    text = "dataset_config: ds.jsonl\n" + ("model_config: simulated:oracle\n" if key != "model_config" else "")
    path = write(cfg_dir, "run.yaml", text + f"{key}: nested.yaml\n")
    err = load_error(path)
    assert (err.file, err.line, err.key) == (str(nested), expected_line, expected_key)
    assert str(err).startswith(f"{nested}:{expected_line}: {expected_key}: ")


def test_unknown_agent_in_nested_agent_file_names_line_and_key(cfg_dir):
    nested = write(cfg_dir, "agent.yaml", "agent: simulated:wizard\n")
    path = write(cfg_dir, "run.yaml", "dataset_config: ds.jsonl\nmodel_config: agent.yaml\n")
    err = load_error(path)
    assert "'simulated:wizard'" in str(err)
    assert (err.file, err.line, err.key) == (str(nested), 1, "agent")


def test_nested_agent_file_loads(cfg_dir):
    write(cfg_dir, "agents/noisy.yaml", "agent: simulated:noisy\nseed: 5\nfailure_rates:\n  sql_error: 0.25\n")
    path = write(cfg_dir, "run.yaml", "dataset_config: ds.jsonl\nmodel_config: agents/noisy.yaml\n")
    config = load_run_config(path)
    assert config.agent.agent == "simulated:noisy"
    assert config.agent.seed == 5
    assert config.agent.failure_rates == {"sql_error": 0.25}


def test_invalid_yaml(cfg_dir):
    path = write(cfg_dir, "run.yaml", HEAD + "runners: [1, 2\nseed: 1\n")
    err = load_error(path)
    assert err.file == str(path)
    assert err.line == 4
    assert str(err).startswith(f"{path}:4: invalid YAML: ")


def test_top_level_must_be_a_mapping(cfg_dir):
    path = write(cfg_dir, "run.yaml", "- a\n- b\n")
    assert str(load_error(path)) == f"{path}:1: expected a mapping of keys at the top level, got list"


def test_missing_config_file(tmp_path):
    path = tmp_path / "absent.yaml"
    assert str(load_error(path)) == f"{path}: file not found"


# --------------------------------------------------------------------------- environment variables


def test_env_substitution(cfg_dir, monkeypatch):
    monkeypatch.setenv("EB_TEST_DATASET", "ds.jsonl")
    monkeypatch.setenv("EB_TEST_SEED", "17")
    monkeypatch.setenv("EB_TEST_RUN", "nightly")
    path = write(
        cfg_dir,
        "run.yaml",
        "dataset_config: ${EB_TEST_DATASET}\nmodel_config: simulated:oracle\nseed: ${EB_TEST_SEED}\n"
        "run_id: run-${EB_TEST_RUN}-x\n",
    )
    config = load_run_config(path)
    assert config.dataset_config == cfg_dir / "ds.jsonl"
    assert config.seed == 17
    assert config.run_id == "run-nightly-x"


def test_env_default(cfg_dir, monkeypatch):
    monkeypatch.delenv("EB_TEST_UNSET", raising=False)
    monkeypatch.setenv("EB_TEST_SET", "given")
    path = write(
        cfg_dir,
        "run.yaml",
        HEAD + "run_id: ${EB_TEST_UNSET:-fallback}\ndialects: ['${EB_TEST_SET:-ignored}', '${EB_TEST_UNSET:-}']\n",
    )
    config = load_run_config(path)
    assert config.run_id == "fallback"
    assert config.dialects == ["given", ""]


def test_env_unset_variable_is_an_error(cfg_dir, monkeypatch):
    monkeypatch.delenv("EB_TEST_UNSET", raising=False)
    path = write(cfg_dir, "run.yaml", HEAD + "seed: 1\nrun_id: ${EB_TEST_UNSET}\n")
    err = load_error(path)
    assert (err.file, err.line, err.key) == (str(path), 4, "run_id")
    assert "environment variable EB_TEST_UNSET is not set" in str(err)
    assert str(err).startswith(f"{path}:4: run_id: ")


def test_env_unset_variable_in_nested_file(cfg_dir, monkeypatch):
    monkeypatch.delenv("EB_TEST_UNSET", raising=False)
    db = write(cfg_dir, "db.yaml", "database_name: x\nuser_name: u\npassword: ${EB_TEST_UNSET}\n")
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs: [db.yaml]\n")
    err = load_error(path)
    assert (err.file, err.line, err.key) == (str(db), 3, "password")


# --------------------------------------------------------------------------- paths


def test_relative_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    write(conf, "data/ds.jsonl", RECORD)
    (conf / "setup").mkdir()
    write(conf, "dbs/db.yaml", "database_name: d\n")
    path = write(
        conf,
        "run.yaml",
        "dataset_config: data/ds.jsonl\nmodel_config: simulated:oracle\nsetup_directory: setup\n"
        "database_configs: [dbs/db.yaml]\nembedded: {data_dir: pgdata}\nreporting: {csv: {output_directory: out}}\n",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_run_config(Path("../conf/run.yaml"))
    base = Path("../conf")
    assert config.dataset_config == base / "data/ds.jsonl"
    assert config.dataset_config.resolve() == (conf / "data/ds.jsonl").resolve()
    assert config.setup_directory.resolve() == (conf / "setup").resolve()
    assert config.embedded.data_dir.resolve() == (conf / "pgdata").resolve()
    assert config.reporting.csv.output_directory.resolve() == (conf / "out").resolve()
    assert config.database_configs[0].database_name == "d"
    assert config.source == Path("../conf/run.yaml")
    assert path.exists()


def test_absolute_paths_are_kept(cfg_dir, tmp_path_factory):
    other = tmp_path_factory.mktemp("other")
    dataset = write(other, "x.jsonl", RECORD)
    path = write(cfg_dir, "run.yaml", f"dataset_config: {dataset}\nmodel_config: simulated:oracle\nsetup_directory: {other}\n")
    config = load_run_config(path)
    assert config.dataset_config == dataset
    assert config.setup_directory == other


def test_default_output_directory_is_resolved(cfg_dir):
    config = load_run_config(write(cfg_dir, "run.yaml", HEAD))
    assert config.reporting.csv.output_directory == Path("results")  # default, not a path from the file
    assert config.scorers == {"exec_match": {}, "executable": {}, "turn_count": {}}
    assert config.agent.agent == "simulated:oracle"
    assert config.vuser.vuser == "rules"


# --------------------------------------------------------------------------- databases and secrets


def test_evalbench_style_database_config(cfg_dir):
    write(
        cfg_dir,
        "db_blog.yaml",
        "db_type: postgresql\ndialect: postgres\ndatabase_name: db_blog\nuser_name: blogger\n"
        "password: s3cr3t-pw\nmax_executions_per_minute: 120\n",
    )
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs:\n  - db_blog.yaml\n")
    config = load_run_config(path)
    [db] = config.database_configs
    assert db.db_type == "postgres"
    assert db.dialect == "postgres"
    assert db.database_name == "db_blog"
    assert db.user_name == "blogger"
    assert db.password is not None and db.password.get_secret_value() == "s3cr3t-pw"
    assert db.max_executions_per_minute == 120
    assert db.is_embedded is True
    assert config.database_for("postgres", "db_blog") is db
    fallback = config.database_for("postgres", "other")
    assert (fallback.database_name, fallback.is_embedded, fallback.password) == ("other", True, None)


def test_cloud_instance_database_path_is_refused(cfg_dir):
    """EvalBench's database_path is the server's host[:port]; a Cloud SQL instance name needs a connector."""
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs:\n  - database_name: x\n    database_path: p:us-central1:i\n")
    err = load_error(path)
    assert str(err).startswith(f"{path}:4: database_configs[0]: database_path 'p:us-central1:i' names a cloud instance")
    assert "Cloud SQL Auth Proxy" in str(err)


def test_snapshot_redacts_every_password(cfg_dir, monkeypatch):
    monkeypatch.setenv("EB_TEST_PW", "env-pw-4711")
    write(cfg_dir, "db.yaml", "database_name: b\nuser_name: u\npassword: file-pw-0815\n")
    path = write(
        cfg_dir,
        "run.yaml",
        HEAD
        + "database_configs:\n"
        + "  - database_name: a\n    url: postgresql://alice:url-pw-1234@db.example:5432/a\n"
        + "  - db.yaml\n"
        + "  - database_name: c\n    password: ${EB_TEST_PW}\n",
    )
    config = load_run_config(path)
    snapshot = config.snapshot()
    text = json.dumps(snapshot)
    for secret in ("url-pw-1234", "file-pw-0815", "env-pw-4711"):
        assert secret not in text
        assert secret not in repr(config)
        assert secret not in str(config.model_dump())
    dbs = snapshot["database_configs"]
    assert [d["database_name"] for d in dbs] == ["a", "b", "c"]
    assert dbs[1]["password"] == "***"
    assert dbs[2]["password"] == "***"
    assert dbs[0]["password"] is None
    assert dbs[0]["url"] and "url-pw-1234" not in dbs[0]["url"]
    assert snapshot["model_config"]["agent"] == "simulated:oracle"  # aliases in the snapshot
    assert "source" not in snapshot
    # the secrets are still usable by the harness
    assert config.database_configs[2].password.get_secret_value() == "env-pw-4711"
    assert config.database_configs[0].url.get_secret_value() == "postgresql://alice:url-pw-1234@db.example:5432/a"


def test_fingerprint_ignores_volatile_keys_but_not_seed(cfg_dir):
    a = load_run_config(write(cfg_dir, "a.yaml", HEAD + "seed: 1\nrun_id: first\nrunners: {sqlgen_runners: 2}\n"))
    b = load_run_config(write(cfg_dir, "b.yaml", HEAD + "seed: 1\nrun_id: second\n"))
    c = load_run_config(write(cfg_dir, "c.yaml", HEAD + "seed: 2\n"))
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != c.fingerprint()
    assert len(a.fingerprint()) == 16


@pytest.mark.parametrize("bad_password", ["[hunter2-list]", "{p: hunter2-map}", "987654321"])
def test_wrong_type_password_is_not_echoed(cfg_dir, bad_password):
    path = write(cfg_dir, "run.yaml", HEAD + f"database_configs:\n  - database_name: x\n    password: {bad_password}\n")
    err = load_error(path)
    message = str(err)
    assert message.startswith(f"{path}:5: database_configs[0].password: ")
    for secret in ("hunter2", "987654321"):
        assert secret not in message


def test_wrong_type_password_in_nested_file_is_not_echoed(cfg_dir):
    db = write(cfg_dir, "db.yaml", "database_name: x\npassword: 24681357\n")
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs: [db.yaml]\n")
    err = load_error(path)
    assert str(err).startswith(f"{db}:2: password: ")
    assert "24681357" not in str(err)


def test_other_error_next_to_password_does_not_leak_it(cfg_dir):
    path = write(
        cfg_dir,
        "run.yaml",
        HEAD + "database_configs:\n  - database_name: x\n    password: hunter2-pw\n    port: not-a-port\n"
        "    url: postgresql://u:url-secret-99@h/x\n    embedded: true\n",
    )
    message = str(load_error(path))
    assert "database_configs[0].port" in message
    assert "hunter2-pw" not in message
    assert "url-secret-99" not in message


def test_url_with_password_combined_with_embedded_does_not_leak(cfg_dir):
    path = write(
        cfg_dir,
        "run.yaml",
        HEAD + "database_configs:\n  - database_name: x\n    url: postgresql://u:url-secret-77@h/x\n    embedded: true\n",
    )
    err = load_error(path)
    assert str(err) == f"{path}:4: database_configs[0]: embedded: true cannot be combined with url, host or instance"


def test_url_given_where_a_database_config_file_is_expected_does_not_leak(cfg_dir):
    # EvalBench lists db-config *files* under database_configs; a URL put there is read as a path.
    path = write(cfg_dir, "run.yaml", HEAD + "database_configs:\n  - postgresql://alice:url-secret-55@db.example/x\n")
    err = load_error(path)
    assert (err.line, err.key) == (4, "database_configs[0]")
    assert "got a URL" in str(err) and "url:" in str(err)
    assert "url-secret-55" not in str(err)


def test_redact_url():
    assert redact_url("postgresql://alice:pw123@db.example:5432/x") == "postgresql://alice:***@db.example:5432/x"
    assert redact_url("postgresql://:pw123@h/x") == "postgresql://:***@h/x"
    assert redact_url("postgresql://pw123:pw123@h/x") == "postgresql://pw123:***@h/x"
    assert redact_url("postgresql://u:p%40ss@[::1]:5/x?sslmode=require") == "postgresql://u:***@[::1]:5/x?sslmode=require"
    for unchanged in ("postgresql://alice@h/x", "postgresql://h/x", "postgresql:///x?host=/tmp", "not a url"):
        assert redact_url(unchanged) == unchanged


def test_redact_url_password_query_parameter():
    # libpq accepts the password as a URI query parameter too
    redacted = redact_url("postgresql://alice@db.example/x?sslmode=require&password=qp-secret-31")
    assert "qp-secret-31" not in redacted
    assert redacted.startswith("postgresql://alice@db.example/x?")


def test_redact():
    value = {
        "db": {"password": "a1", "url": "postgresql://u:b2@h/x", "api_key": "c3", "token": None, "user_name": "u"},
        "list": [{"Authorization": "Bearer d4"}, {"uri": "postgresql://u:e5@h/y"}],
        "seed": 3,
    }
    out = redact(value)
    assert out == {
        "db": {"password": "***", "url": "postgresql://u:***@h/x", "api_key": "***", "token": None, "user_name": "u"},
        "list": [{"Authorization": "***"}, {"uri": "postgresql://u:***@h/y"}],
        "seed": 3,
    }
    assert value["db"]["password"] == "a1"  # the input is not modified


def test_database_config_model_directly():
    db = DatabaseConfig(database_name="x", db_type="pg", host="db.example", port=5433, password="zq-secret")
    assert db.db_type == "postgres"
    assert db.is_embedded is False
    assert "zq-secret" not in repr(db)
    assert db.password.get_secret_value() == "zq-secret"


def test_run_config_forbids_unknown_keys_directly(cfg_dir):
    with pytest.raises(ValueError, match="bogus"):
        RunConfig.model_validate({"dataset_config": str(cfg_dir / "ds.jsonl"), "model_config": "simulated:oracle", "bogus": 1})


# --------------------------------------------------------------------------- command line


def test_cli_bad_config_exits_2_with_error_line(cfg_dir, capsys):
    path = write(cfg_dir, "run.yaml", HEAD + "runners: {sqlgen_runner: 3}\n")
    code = main(["run", "--config", str(path), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("error: ")
    assert f"error: {path}:3: runners.sqlgen_runner: unknown key" in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_cli_missing_config_exits_2(tmp_path, capsys):
    code = main(["run", "--config", str(tmp_path / "absent.yaml"), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2
    assert f"error: {tmp_path / 'absent.yaml'}: file not found" in captured.err


def test_cli_bad_set_override_exits_2(cfg_dir, capsys):
    path = write(cfg_dir, "run.yaml", HEAD)
    code = main(["run", "--config", str(path), "--set", "seed", "--no-progress"])
    assert code == 2
    assert "error: <config>: --set expects KEY=VALUE, got 'seed'" in capsys.readouterr().err


def test_cli_set_override_is_validated(cfg_dir, capsys):
    path = write(cfg_dir, "run.yaml", HEAD)
    code = main(["run", "--config", str(path), "--set", "seed=[1]", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: {path}")
    assert "seed: Input should be a valid integer" in err


def test_scorer_option_files_are_relative_to_the_config(tmp_path):
    (tmp_path / "conf").mkdir()
    config = tmp_path / "conf" / "run.yaml"
    config.write_text(
        f"dataset_config: {DEMO_DATASET}\n"
        "model_config: simulated:oracle\n"
        "scorers: {exec_match: {}, llmrater: {model: m, prompt_file: prompts/judge.txt}}\n"
    )
    options = load_run_config(config).scorers["llmrater"]
    assert options["prompt_file"] == str(tmp_path / "conf" / "prompts" / "judge.txt")


def test_a_knowledge_directory_without_the_datasets_knowledge_is_an_error(tmp_path, pgdata):
    """A configured knowledge directory that does not exist, is not a folder, or holds no
    knowledge of the dataset's databases is an error naming the key (never silently ignored)."""
    import io

    from evalbench.core.errors import ConfigError
    from evalbench.run import run

    quickstart = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
    with pytest.raises(ConfigError, match=r"knowledge_directory.*path does not exist"):
        load_run_config(quickstart, knowledge_directory=str(tmp_path / "missing"))
    (tmp_path / "other_kb.jsonl").write_text("")
    for wrong in (tmp_path, tmp_path / "other_kb.jsonl"):
        config = load_run_config(quickstart, knowledge_directory=str(wrong), reporting={"csv": {"output_directory": str(tmp_path)}})
        with pytest.raises(ConfigError) as info:
            run(config, progress=False, out=io.StringIO())
        assert info.value.key == "knowledge_directory" and ("greenleaf_kb.jsonl" in str(info.value) or "not a directory" in str(info.value))
