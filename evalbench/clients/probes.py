"""What the adapters' preflight probes share (``probe(timeout_s)`` on each agent and virtual
user, called by :mod:`evalbench.run.preflight`): bounded requests whose failures become one line
naming the address and the fix. Imports nothing of the adapters, so they may import it."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from evalbench.core import deadline
from evalbench.core.errors import ConfigError, EvalbenchError

if TYPE_CHECKING:
    import httpx

    from evalbench.clients.genai import GenaiSettings


class Unreachable(EvalbenchError):
    """Nothing answered at an address: the connection was refused or timed out (exit 3)."""


class NoAnswer(EvalbenchError):
    """A server accepted the connection but gave no usable HTTP answer in time (exit 3)."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def excerpt(text: str, limit: int = 200) -> str:
    """A response body on one short line, for a check's message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def http_probe(send: Callable[[], httpx.Response], where: str, fix: str, timeout_s: float) -> httpx.Response:
    """``send()`` (one request, ending within ``timeout_s`` however slowly the reply comes when
    its client has a deadline transport), with a failure to connect raised as
    :class:`Unreachable` and any other transport failure as :class:`NoAnswer`, both one line
    naming ``where`` and ending with ``fix``."""
    import httpx

    try:
        with deadline.capped(timeout_s):
            return send()
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise Unreachable(f"cannot connect to {where} ({first_line(exc)}); {fix}") from None
    except httpx.TimeoutException:
        raise NoAnswer(f"{where} accepted the connection but did not answer within {timeout_s:g} s; {fix}") from None
    except httpx.HTTPError as exc:
        raise NoAnswer(f"{where} gave no usable answer ({type(exc).__name__}: {first_line(exc)}); {fix}") from None


def tcp_probe(url: str, where: str, fix: str, timeout_s: float) -> None:
    """Something accepts TCP connections at ``url``'s host and port. No request is sent, so a
    server that answers from a script (a test's fake) sees nothing; :class:`Unreachable` otherwise."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"{where}: not a valid URL") from None
    started = time.monotonic()
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = "connect timeout" if time.monotonic() - started >= timeout_s else (exc.strerror or str(exc))
        raise Unreachable(f"cannot connect to {where} ({reason}); {fix}") from None


def genai_probe(config: GenaiSettings, project: str | None, where: str | None, config_key: str, timeout_s: float) -> str:
    """The probe of a google-genai client (the gemini agent, the llm virtual user): credentials
    are present — the client was made, so the API key's variable is set, or Vertex AI has a
    project — and a ``base_url`` (``where``: redacted), when set, accepts connections. No model
    is called: a call would cost tokens, and a test's scripted fake would answer it."""
    if config.vertexai:
        found = f"Vertex AI, project {project!r}"
    else:
        found = f"an API key in ${config.api_key_env}"
    if not config.base_url:
        return f"credentials present ({found}); the API is not called before the run"
    tcp_probe(config.base_url, where or "base_url", f"start it, or fix {config_key} base_url", timeout_s)
    return f"credentials present ({found}); {where} accepts connections"
