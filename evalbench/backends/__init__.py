"""Database backends by name: the built-in ones, and those other packages declare under the
``evalbench.backends`` entry point group (each a class or factory returning a
:class:`~evalbench.backends.base.Backend`).

A database config's ``db_type`` names its backend; without one, the backend is the one named
like the database's dialect. The built-in backends are imported only when a run uses them, so
the core never imports a backend module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalbench.backends.names import ALIASES as ALIASES
from evalbench.backends.names import BACKENDS as BACKENDS
from evalbench.backends.names import backend_name as backend_name

if TYPE_CHECKING:
    from evalbench.backends.base import Backend

_instances: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """The backend registered as ``name`` (one instance per process). KeyError names the known ones."""
    name = ALIASES.get(name, name)
    if name not in _instances:
        _instances[name] = BACKENDS.get(name)()
    return _instances[name]


__all__ = ["ALIASES", "BACKENDS", "backend_name", "get_backend"]
