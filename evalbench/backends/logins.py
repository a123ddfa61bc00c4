"""Per-conversation database logins, for agents under test that connect to the database
themselves with a plain connection string (docs/security.md, "Per-conversation credentials").

:func:`lend_login` asks the sandbox's engine for a short-lived login with the rights agent SQL
has in the sandbox (read-only, this database only) and returns a :class:`LentLogin`; its
:meth:`~LentLogin.revoke` (when the conversation ends, or by itself at ``expires_at``) makes sure
it cannot connect any more. Each engine's part is its sandbox's ``lender`` (a :class:`Lender`):
``postgres/lending.py``, ``mysql/lending.py``, and :mod:`evalbench.backends.file_logins` for
SQLite and DuckDB (a read-only copy of the file). A sandbox without one cannot lend.

What a lent login runs is not the harness's: it is neither journaled nor bounded by the
conversation's tool budgets.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from evalbench.backends import login_expiry
from evalbench.core.errors import LendingError

log = logging.getLogger(__name__)

REVOKE_TIMEOUT_S = 15.0  # revoke() returns within this, whatever the server does
MAX_TTL_S = 24 * 3600.0


@dataclass(frozen=True)
class Lent:
    """What an engine's lender hands back; ``revoke`` may raise and is called at most once."""

    name: str  # the login's user (or the copy's folder): for log lines
    url: str = field(repr=False)
    fields: dict[str, str] = field(repr=False)
    expires_at: float
    revoke: Callable[[], None] = field(repr=False)


class Lender(Protocol):
    """An engine's way of lending logins on one sandbox's database (the sandbox's ``lender``)."""

    def lend(self, ttl_s: float, label: str) -> Lent:
        """A new login valid for ``ttl_s`` seconds; ``label`` (safe characters only) names the
        conversation in the server's catalog where it has comments. Raises on failure."""
        ...


class _Once:
    """Runs an engine's revoke once, in a thread, waiting for it at most REVOKE_TIMEOUT_S."""

    def __init__(self, name: str, action: Callable[[], None]) -> None:
        self.name, self.action = name, action
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def __call__(self) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="evalbench-login-revoke", daemon=True)
                self.thread.start()
        self.thread.join(REVOKE_TIMEOUT_S)
        if self.thread.is_alive():
            log.warning("revoking the lent login %s takes more than %.0f s; left to finish in the background",
                        self.name, REVOKE_TIMEOUT_S)

    def _run(self) -> None:
        try:
            self.action()
        except Exception as exc:  # noqa: BLE001 - revoke() never raises: the conversation is over either way
            log.warning("could not fully revoke the lent login %s: %s", self.name, exc)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one login per lend
class LentLogin:
    """A login lent to one conversation: ``url`` to connect with, its parts in ``fields`` (host,
    port, user, password, database, path — those that apply), valid until ``expires_at`` (wall
    clock, ``time.time()``). The password is in ``url`` and ``fields``: never log them."""

    url: str = field(repr=False)
    fields: dict[str, str] = field(repr=False)
    expires_at: float
    name: str
    _revoke: _Once = field(repr=False, compare=False)

    def revoke(self) -> None:
        """End the login: it cannot connect afterwards and its open sessions end. Idempotent,
        returns within REVOKE_TIMEOUT_S, never raises (failures are logged as warnings)."""
        self._revoke()


def lend_login(sandbox: object, *, ttl_s: float, label: str) -> LentLogin:
    """A login on ``sandbox``'s database with the rights agent SQL has there, for ``ttl_s``
    seconds (revoked by itself then, if not before). Raises LendingError when the sandbox's
    engine cannot lend one, or lending failed (the run goes on: record it)."""
    if not 0 < ttl_s <= MAX_TTL_S:
        raise LendingError(f"a lent login's ttl_s must be in (0, {MAX_TTL_S:.0f}] seconds, got {ttl_s}")
    lender: Lender | None = getattr(sandbox, "lender", None)
    if lender is None:
        raise LendingError(f"{type(sandbox).__name__} cannot lend per-conversation logins")
    try:
        lent = lender.lend(ttl_s, safe_label(label))
    except LendingError:
        raise
    except Exception as exc:
        raise LendingError(f"could not lend a login: {type(exc).__name__}: {exc}") from exc
    login = LentLogin(lent.url, dict(lent.fields), lent.expires_at, lent.name, _Once(lent.name, lent.revoke))
    login_expiry.at(lent.expires_at, login.revoke)
    log.debug("lent login %s for %r until %.0f", lent.name, label, lent.expires_at)
    return login


def safe_label(label: str) -> str:
    """``label`` as it may go into a catalog comment: letters, digits and ``._:-``, 60 at most."""
    return re.sub(r"[^A-Za-z0-9._:-]", "_", label)[:60]


def expiry(ttl_s: float) -> float:
    """The wall-clock time a login lent now for ``ttl_s`` expires."""
    return time.time() + ttl_s
