"""Shared fixtures: a private embedded PostgreSQL per test session, paths to test data."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adk_server import APPS_DIR, absent_endpoints, adk_executable, start_adk_server, stop_adk_server

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "datasets" / "demo"
SHARED = ROOT.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def pgdata(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory of our own, so tests never touch the user's cached databases."""
    path = tmp_path_factory.mktemp("pg") / "pgdata"
    os.environ["EVALBENCH_PGDATA"] = str(path)
    return path


@pytest.fixture(scope="session")
def embedded_admin_url(pgdata: Path) -> str:
    from evalbench.backends.postgres.embedded import embedded_url

    return embedded_url(pgdata)


@pytest.fixture
def demo_config_path() -> Path:
    return ROOT / "configs" / "quickstart.yaml"


def shared_dataset(name: str) -> Path:
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"../shared/datasets/{name} is not available")
    return path


@pytest.fixture
def external_pg_url() -> str:
    url = os.environ.get("EVALBENCH_TEST_PG_URL")
    if not url:
        pytest.skip("EVALBENCH_TEST_PG_URL is not set")
    return url


@pytest.fixture(scope="session")
def demo_sandbox(pgdata: Path):
    """The demo database provisioned in the private embedded server, behind a sandbox."""
    from evalbench.backends.base import SandboxLimits
    from evalbench.backends.postgres.backend import open_sandbox
    from evalbench.backends.postgres.provision import find_setup, provision
    from evalbench.backends.postgres.target import resolve_target
    from evalbench.config import DatabaseConfig

    target = resolve_target(DatabaseConfig(database_name="greenleaf"), pgdata)
    report = provision(target, find_setup(DEMO / "setup", "greenleaf", "postgres"))
    sandbox = open_sandbox(target, report, SandboxLimits(pool_size=4, statement_timeout_s=5, max_rows=1000))
    yield sandbox
    sandbox.close()


# ----------------------------------------------------------------- a real adk api_server


def _adk_installed() -> bool:
    # find_spec, not import: importing google.adk here could warn (warnings are errors in tests)
    try:
        return importlib.util.find_spec("google.adk") is not None and adk_executable() is not None
    except ModuleNotFoundError:
        return False


@pytest.fixture(scope="session")
def adk_db_url(request: pytest.FixtureRequest, pgdata: Path) -> str:
    """libpq URL of the demo database ``greenleaf`` in the private embedded server."""
    request.getfixturevalue("demo_sandbox")  # provisions greenleaf
    from evalbench.backends.postgres.embedded import embedded_url

    return embedded_url(pgdata, "greenleaf")


@pytest.fixture(scope="session")
def adk_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """Base URL of ``adk api_server tests/adk_apps`` (started once per test session)."""
    if not _adk_installed():
        pytest.skip("google-adk (the `adk` command) is not installed")
    db_url = request.getfixturevalue("adk_db_url")
    env = {
        "EVALBENCH_TEST_AGENT_DB_URL": db_url,
        "EVALBENCH_TEST_AGENT_DATASET": str(DEMO / "greenleaf.jsonl"),
        **absent_endpoints(),
    }
    base_url, process = start_adk_server(APPS_DIR, env)
    yield base_url
    stop_adk_server(process)
