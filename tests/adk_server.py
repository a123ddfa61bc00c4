"""Start a real ``adk api_server`` (Google ADK) as a subprocess, for tests of ADK-served agents.

``start_adk_server(apps_dir, env)`` starts ``<venv>/bin/adk api_server --host 127.0.0.1
--port <free port> --no-reload --no_use_local_storage <apps_dir>`` (in-memory sessions, nothing
written next to the apps), waits until ``GET /list-apps`` answers and returns
``(base_url, process)``; ``stop_adk_server(process)`` ends it. ``adk_server(...)`` is the same as
a context manager. The server's stdout/stderr go to a log file (shown when start-up fails).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx

APPS_DIR = Path(__file__).resolve().parent / "adk_apps"
START_TIMEOUT_S = 30.0


def adk_executable() -> str | None:
    """The ``adk`` script next to the running interpreter (the venv's), else the one on PATH."""
    candidate = Path(sys.executable).parent / "adk"
    if candidate.exists():
        return str(candidate)
    return shutil.which("adk")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def absent_endpoints() -> dict[str, str]:
    """The environment of the apps that bring their own tools (mcp_agent, bird_like_agent) with
    every endpoint at a port where nothing listens: their tools fail as they do when the harness
    serves nothing (a test that serves them passes its own)."""
    port = str(free_port())
    return {"EVALBENCH_TEST_MCP_URL": f"http://127.0.0.1:{port}/mcp", "USER_SIM_PORT": port, "DB_ENV_PORT": port}


def _log_tail(process: subprocess.Popen, limit: int = 6000) -> str:
    path = getattr(process, "log_path", None)
    if not path or not os.path.exists(path):
        return ""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return text[-limit:]


def start_adk_server(
    apps_dir: Path | str = APPS_DIR, env: Mapping[str, str] | None = None, timeout_s: float = START_TIMEOUT_S
) -> tuple[str, subprocess.Popen]:
    """Start ``adk api_server`` for ``apps_dir``; ``env`` is added to a copy of ``os.environ``."""
    adk = adk_executable()
    if adk is None:
        raise RuntimeError("the `adk` command (google-adk) is not installed")
    port = free_port()
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("PYTHONDONTWRITEBYTECODE", "1")  # no __pycache__ inside tests/adk_apps
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    log = tempfile.NamedTemporaryFile(prefix="adk-api-server-", suffix=".log", delete=False)  # noqa: SIM115 (outlives this function: the server writes to it)
    cmd = [
        adk, "api_server", "--host", "127.0.0.1", "--port", str(port),
        "--no-reload", "--no_use_local_storage", "--log_level", "info", str(Path(apps_dir).resolve()),
    ]  # fmt: skip
    process = subprocess.Popen(
        cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        cwd=tempfile.gettempdir(), start_new_session=True,
    )  # fmt: skip
    log.close()
    process.log_path = log.name  # type: ignore[attr-defined]
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            tail = _log_tail(process)
            raise RuntimeError(f"adk api_server exited with {process.returncode} during start-up:\n{tail}")
        try:
            if httpx.get(f"{base_url}/list-apps", timeout=2.0).status_code == 200:
                return base_url, process
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            stop_adk_server(process)
            raise RuntimeError(f"adk api_server did not answer within {timeout_s:.0f} s:\n{_log_tail(process)}")
        time.sleep(0.2)


def stop_adk_server(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Terminate the server (SIGTERM, then SIGKILL after ``grace_s``) and remove its log file."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=grace_s)
    path = getattr(process, "log_path", None)
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.contextmanager
def adk_server(apps_dir: Path | str = APPS_DIR, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """``with adk_server(apps_dir, env) as base_url: ...``"""
    base_url, process = start_adk_server(apps_dir, env)
    try:
        yield base_url
    finally:
        stop_adk_server(process)
