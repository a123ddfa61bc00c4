"""AlloyDB and Cloud SQL through Google's Python connectors, tested up to the connector's
boundary: the connector package is replaced by a double with the same ``Connector`` API
(``connect(instance, "psycopg", user=, password=, db=, enable_iam_auth=, ip_type=, **psycopg
kwargs)``, ``close()``) that opens the connection to the embedded PostgreSQL instead of a TLS
tunnel. Everything on our side of it — provisioning, the sandbox role, the sandbox, a run — is
the real code."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from evalbench.backends.base import SandboxLimits
from evalbench.backends.postgres.connectors import AlloyDBBackend, CloudSQLBackend
from evalbench.backends.postgres.provision import find_setup
from evalbench.cli import main
from evalbench.config import DatabaseConfig
from evalbench.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEMO_SETUP = ROOT / "datasets" / "demo" / "setup"
ALLOYDB = "projects/p/locations/us-central1/clusters/c/instances/i"


class FakeConnector:
    """Google's Connector API, connecting to a local server; records every call."""

    calls: ClassVar[list[dict[str, Any]]] = []
    made: ClassVar[list[FakeConnector]] = []

    def __init__(self, socket_dir: str) -> None:
        self.socket_dir = socket_dir
        self.closed = False
        FakeConnector.made.append(self)

    def connect(self, instance: str, driver: str, **kwargs: Any) -> psycopg.Connection:
        user, password, db = kwargs.pop("user"), kwargs.pop("password", None), kwargs.pop("db")
        FakeConnector.calls.append({"instance": instance, "driver": driver, "user": user, "db": db,
                                    "iam": kwargs.pop("enable_iam_auth"), "ip_type": kwargs.pop("ip_type")})
        return psycopg.connect(host=self.socket_dir, user=user, password=password, dbname=db, **kwargs)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def socket_dir(embedded_admin_url: str) -> str:
    return parse_qs(urlsplit(embedded_admin_url).query)["host"][0]


@pytest.fixture
def fake_connector_modules(socket_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeConnector.calls, FakeConnector.made = [], []
    for name in ("google.cloud.alloydbconnector", "google.cloud.sql.connector"):
        module = types.ModuleType(name)
        module.Connector = lambda: FakeConnector(socket_dir)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)


@pytest.mark.parametrize(("backend", "instance"), [(AlloyDBBackend, ALLOYDB), (CloudSQLBackend, "p:us-central1:i")])
def test_a_database_is_provisioned_and_queried_through_the_connector(backend: Any, instance: str, socket_dir: str,
                                                                     fake_connector_modules: None) -> None:
    chosen = backend()
    config = DatabaseConfig(database_name="greenleaf", dialect="postgres", db_type=chosen.name, instance=instance,
                            user_name="postgres", enable_iam_auth=True, ip_type="private")
    provisioned = chosen.provision(config, find_setup(DEMO_SETUP, "greenleaf", "postgres"), None)
    sandbox = chosen.open_sandbox(config, provisioned, SandboxLimits(pool_size=2, statement_timeout_s=5, max_rows=100), None)
    try:
        assert sandbox.execute("SELECT count(*) FROM stores").rows == [(5,)]
        assert not sandbox.execute("DELETE FROM stores").ok  # still the read-only sandbox role
        assert current_user(sandbox) == "evalbench_sandbox"
        assert sandbox.execute("SELECT current_user", actor="golden").rows == [("evalbench_golden",)]
        assert sandbox.execute("SELECT current_user", mode="write").rows == [("evalbench_sandbox_write",)]
        assert "CREATE TABLE stores" in chosen.describe_schema(sandbox)
        assert not sandbox.runs_test_cases  # a child process cannot use the tunnel
    finally:
        sandbox.close()
    assert {call["driver"] for call in FakeConnector.calls} == {"psycopg"}
    assert {call["instance"] for call in FakeConnector.calls} == {instance}
    assert all(call["iam"] is True and call["ip_type"] == "private" for call in FakeConnector.calls)
    assert {call["user"] for call in FakeConnector.calls} == {"postgres", "evalbench_sandbox", "evalbench_sandbox_write",
                                                               "evalbench_golden"}
    assert FakeConnector.made and all(c.closed for c in FakeConnector.made)  # closed with the sandbox


def current_user(sandbox: Any) -> str:
    return sandbox.execute("SELECT current_user").rows[0][0]


def test_evalbench_database_path_naming_an_instance_selects_the_connector() -> None:
    config = DatabaseConfig(database_name="d", db_type="alloydb", database_path=ALLOYDB)
    assert config.instance == ALLOYDB and not config.is_embedded
    assert DatabaseConfig(database_name="d", db_type="alloydb", database_path="10.0.0.5:5432").host == "10.0.0.5"
    with pytest.raises(ValueError, match="set db_type: alloydb or cloudsql"):
        DatabaseConfig(database_name="d", instance=ALLOYDB)


def test_a_run_through_the_connector(tmp_path: Path, fake_connector_modules: None, pgdata: Path) -> None:
    databases = json.dumps([{"db_type": "alloydb", "database_name": "greenleaf", "instance": ALLOYDB, "user_name": "postgres"}])
    code = main(["run", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--output-dir", str(tmp_path), "--run-id", "r",
                 "--no-progress", "--no-preflight", "--set", "model_config=simulated:oracle", "--set", f"database_configs={databases}",
                 "--limit", "6", "--item-ids", "greenleaf_1", "greenleaf_2", "greenleaf_41"])
    assert code == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["outcomes"]["scored"] == 3 and summary["scorers"]["exec_match"]["main"]["rate"] == 1.0
    # greenleaf_41 has test cases; through the tunnel the state it leaves decides
    assert summary["scorers"]["state_match"]["main"]["passed"] == 1
    assert any(call["instance"] == ALLOYDB for call in FakeConnector.calls)


def test_without_the_connector_package_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.alloydbconnector", None)  # as if not installed
    from evalbench.config import load_run_config
    from evalbench.run import databases
    from evalbench.run.plan import RunPlan

    config = load_run_config(ROOT / "configs" / "quickstart.yaml", database_configs=[
        {"db_type": "alloydb", "database_name": "greenleaf", "instance": ALLOYDB}])
    with pytest.raises(ConfigError, match=r"evalbench\[alloydb\]"):
        databases.database(RunPlan.resolve(config).databases, "postgres", "greenleaf").provision()
