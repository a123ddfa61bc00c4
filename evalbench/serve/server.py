"""The run's server for the agents under test: one per run process, started before the first
conversation and stopped after the last (uvicorn in a daemon thread).

Routes: ``/mcp`` (the MCP tools, :mod:`evalbench.serve.mcp_tools`), ``/c/<token>/mcp`` (the same,
the token in the path, for clients that cannot set a header), and BIRD-Interact's user-simulator
routes (:mod:`evalbench.serve.user_simulator`). Each conversation has a token of its own
(``secrets.token_urlsafe``), valid from its agent session's opening until it ends.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from evalbench.agents.tools import ToolKit
from evalbench.config.serve import ServeConfig
from evalbench.core.errors import ConfigError
from evalbench.serve.mcp_tools import build_mcp
from evalbench.serve.port import SUBMIT_SQL, ConversationPort
from evalbench.serve.user_simulator import routes

log = logging.getLogger(__name__)

_START_S = 10.0


class Served:
    def __init__(self, config: ServeConfig, kit: ToolKit) -> None:
        self.config, self.kit = config, kit  # kit: the database tools, their caps and knowledge indexes
        self._ports: dict[str, ConversationPort] = {}
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    @property
    def tools(self) -> frozenset[str]:
        extra = {SUBMIT_SQL} if self.config.user_simulator else set()
        return frozenset(self.config.tools) | extra

    # ------------------------------------------------------------------ conversations

    def new_token(self) -> str:
        return secrets.token_urlsafe(24)

    def add(self, port: ConversationPort) -> dict[str, str]:
        """Open ``port``; the names its conversation's session state may use (SERVED_NAMES)."""
        with self._lock:
            self._ports[port.token] = port
        facts = {"served_url": self.base_url, "task_id": port.token, "mcp_token": port.token}
        if self.config.mcp:
            facts["mcp_url"] = f"{self.base_url}/c/{port.token}/mcp"
        return facts

    def remove(self, port: ConversationPort) -> None:
        port.close()
        with self._lock:
            self._ports.pop(port.token, None)

    def lookup(self, token: str) -> ConversationPort | None:
        with self._lock:
            return self._ports.get(token)

    # ------------------------------------------------------------------ the server

    def start(self) -> None:
        """Listen on the configured address; a ConfigError when it cannot."""
        sock = self._bind()
        server = uvicorn.Server(uvicorn.Config(self._app(), log_level="warning", lifespan="on", access_log=False))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="evalbench-serve", daemon=True)
        thread.start()
        end = time.monotonic() + _START_S
        while not server.started and thread.is_alive() and time.monotonic() < end:
            time.sleep(0.02)
        if not server.started:
            server.should_exit = True
            sock.close()
            raise ConfigError(f"the server for the agent's tools did not start on {self.config.address}", key="serve.address")
        host, port = sock.getsockname()[:2]
        self.base_url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        self._server, self._thread = server, thread
        log.info("serving the agent under test at %s", self.base_url)

    def _bind(self) -> socket.socket:
        """The listening socket (bound here, so that an address in use is our error, not the thread's)."""
        host, port = self.config.host, self.config.port
        sock: socket.socket | None = None
        try:
            family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
        except OSError as exc:
            if sock is not None:
                sock.close()
            raise ConfigError(f"cannot serve the agent's tools on {self.config.address} ({exc.strerror or exc}: in use, "
                              "or not an address of this machine)", key="serve.address") from None
        return sock

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        with self._lock:
            for port in self._ports.values():
                port.close()
            self._ports.clear()
        if server is not None and thread is not None:
            server.should_exit = True
            thread.join(timeout=5)
        self.kit.close()

    def _app(self) -> ASGIApp:
        mcp = build_mcp(self.lookup, self.tools if self.config.mcp else ())
        app = mcp.streamable_http_app(stateless_http=True, json_response=True, host=self.config.host)
        if self.config.user_simulator:
            app.router.routes.extend(routes(self.lookup))
        return _token_in_path(app)


def _token_in_path(app: ASGIApp) -> ASGIApp:
    """``/c/<token>/<rest>`` is ``/<rest>`` with ``Authorization: Bearer <token>``."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope.get("type") == "http" and path.startswith("/c/"):
            _, _, token, *rest = path.split("/", 3)
            headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"authorization"]
            scope = dict(scope, path="/" + (rest[0] if rest else ""), raw_path=None,
                         headers=[*headers, (b"authorization", b"Bearer " + token.encode("latin-1", "replace"))])
        await app(scope, receive, send)
    return wrapped
