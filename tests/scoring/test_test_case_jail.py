"""Hostile test-case code (a dataset from elsewhere): what it can reach once confined.

Each test case below is the attack; it "passes" only if the attack failed, so a passing verdict
is the assertion. The harness's environment holds a secret; nothing may leak, persist, or forge
a verdict.
"""

from __future__ import annotations

import os
import sys

import psycopg
import pytest

from evalbench.scoring.test_case_runner import run_test_case, run_test_cases

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="confinement is Linux-only")

SECRET = "s3cr3t-token-do-not-leak"


@pytest.fixture(autouse=True)
def secret_in_the_environment(monkeypatch):
    monkeypatch.setenv("EVALBENCH_TEST_SECRET", SECRET)


@pytest.fixture(scope="module")
def conninfo(pgdata) -> str:
    from evalbench.backends.postgres.provision import find_setup, provision
    from evalbench.backends.postgres.target import libpq_conninfo, resolve_target
    from evalbench.config import DatabaseConfig
    from tests.conftest import DEMO

    target = resolve_target(DatabaseConfig(database_name="greenleaf"), pgdata)
    report = provision(target, find_setup(DEMO / "setup", "greenleaf", "postgres"))
    writer = report.logins.writer  # test cases run as the role agent SQL that writes runs as
    return libpq_conninfo(target.url(user=writer.user, password=writer.password))


@pytest.fixture(scope="module")
def admin_conninfo(pgdata) -> str:
    from evalbench.backends.postgres.embedded import embedded_url

    return embedded_url(pgdata, "greenleaf")


def case(body: str) -> str:
    return "def test_case(pred_sqls, sol_sqls, db_name, conn):\n" + "\n".join("    " + line for line in body.splitlines())


def judged(conninfo: str, body: str, **options) -> tuple[bool, str]:
    verdict = run_test_case(conninfo, case(body), ["SELECT 1"], ["SELECT 1"], db_name="greenleaf", timeout_s=10, **options)
    return verdict.passed, verdict.message


def test_no_secret_in_its_environment_nor_in_the_harness_environment(conninfo):
    body = f"""
import os
assert not any('{SECRET}' in v for v in os.environ.values()), 'secret in env'
for path in (f'/proc/{{os.getppid()}}/environ', '/proc/{os.getpid()}/environ', '/proc/{os.getpid()}/mem',
             '/etc/hostname', '{os.path.expanduser("~")}'):
    try:
        open(path, 'rb').read(1)
    except OSError:
        continue
    raise AssertionError(f'{{path}} is readable')
"""
    assert judged(conninfo, body) == (True, "")


def test_it_cannot_write_files(conninfo, tmp_path):
    target = tmp_path / "written_by_the_test_case"
    body = f"""
for attempt in (lambda: open('{target}', 'w').write('x'), lambda: open('/tmp/evalbench_jail_probe', 'a'),
                lambda: __import__('os').mkdir('{tmp_path}/d'), lambda: __import__('os').unlink('{tmp_path}')):
    try:
        attempt()
    except OSError:
        continue
    raise AssertionError('a file system change went through')
"""
    assert judged(conninfo, body) == (True, "")
    assert not target.exists() and not os.path.exists("/tmp/evalbench_jail_probe")


def test_no_network_and_no_database_connection_of_its_own(conninfo, admin_conninfo):
    body = f"""
import socket
for make in (lambda: socket.create_connection(('127.0.0.1', 5432), timeout=2), lambda: socket.socket(socket.AF_UNIX)):
    try:
        make()
    except OSError:
        continue
    raise AssertionError('a socket was opened')
import psycopg
try:
    psycopg.connect({admin_conninfo!r}, connect_timeout=2).execute("CREATE TABLE jail_escape (x int)")
except Exception:
    pass
else:
    raise AssertionError('connected as the superuser')
"""
    assert judged(conninfo, body) == (True, "")
    with psycopg.connect(admin_conninfo) as conn:
        assert conn.execute("SELECT to_regclass('jail_escape')").fetchone()[0] is None


def test_it_cannot_start_processes_or_signal_the_harness(conninfo):
    body = f"""
import os, signal, subprocess
for attempt in (lambda: subprocess.run(['true']), os.fork, lambda: os.kill({os.getpid()}, signal.SIGTERM),
                lambda: os.kill(os.getppid(), signal.SIGKILL)):
    try:
        attempt()
    except OSError:
        continue
    raise AssertionError('a process was started or signalled')
"""
    assert judged(conninfo, body) == (True, "")


@pytest.mark.parametrize("forge", [
    "print('\\nevalbench-test-case-verdict {\"passed\": true, \"kind\": \"passed\", \"message\": \"\"}')",
    "import sys; sys.__stdout__.write('\\nevalbench-test-case-verdict {\"passed\": true, \"kind\": \"passed\"}\\n')",
    "import os; os.write(1, b'\\nevalbench-test-case-verdict {\"passed\": true, \"kind\": \"passed\"}\\n')",
    "import os; os.write(2, b'\\nevalbench-test-case-verdict {\"passed\": true, \"kind\": \"passed\"}\\n')",
])
def test_printing_cannot_forge_a_pass(conninfo, forge):
    passed, message = judged(conninfo, forge + "\nassert False, 'the real verdict'")
    assert not passed and "the real verdict" in message


def test_commit_in_test_code_changes_nothing_later_items_see(conninfo, admin_conninfo):
    body = """
cur = conn.cursor()
cur.execute("UPDATE stores SET manager_name = 'persisted?' WHERE store_id = 3")
conn.commit()
rows, err, _ = execute_queries(["COMMIT", "UPDATE stores SET city = 'persisted?' WHERE store_id = 3"], db_name, conn)
"""
    assert judged(conninfo, body)[0]
    with psycopg.connect(admin_conninfo) as conn:
        assert conn.execute("SELECT manager_name, city FROM stores WHERE store_id = 3").fetchone() != ("persisted?", "persisted?")
        assert "persisted?" not in conn.execute("SELECT manager_name || city FROM stores WHERE store_id = 3").fetchone()[0]


def test_runaway_code_is_stopped_and_the_rest_still_judged(conninfo):
    loop = case("while True:\n    pass")
    memory = case("x = bytearray(8 << 30)")
    fine = case("rows, err, _ = execute_queries('SELECT count(*) FROM stores', db_name, conn)\nassert rows[0][0] > 0")
    verdicts = run_test_cases(conninfo, [loop, memory, fine], ["SELECT 1"], ["SELECT 1"], db_name="greenleaf", timeout_s=3)
    assert [v.kind for v in verdicts] == ["timeout", "error", "passed"], verdicts
