"""One small registry for every pluggable kind (agent, virtual user, scorer, backend).

A decorator registers a factory under a name; configs look factories up by name. A name not
registered in-process is looked up among the Python entry points of the registry's group
(``evalbench.agents``, ``evalbench.vusers``, ``evalbench.scorers``, ``evalbench.backends``), so a
third-party package adds one by declaring it in its ``pyproject.toml``. Registering a name twice
is an error, so plugins cannot silently shadow each other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from evalbench.core.errors import EvalbenchError

T = TypeVar("T")


class PluginError(EvalbenchError):
    """An entry point that names a plugin could not be loaded."""

    exit_code = 2


def entry_points(group: str) -> dict[str, object]:
    """The installed entry points of ``group`` by name (importlib.metadata, read when asked)."""
    from importlib.metadata import entry_points as installed

    return {ep.name: ep for ep in installed(group=group)}


class Registry(Generic[T]):
    def __init__(self, kind: str, group: str | None = None) -> None:
        self.kind = kind
        self.group = group
        self._factories: dict[str, T] = {}
        self._lock = threading.Lock()

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(factory: T) -> T:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._factories[name] = factory
            return factory

        return decorator

    def get(self, name: str) -> T:
        factory = self._factories.get(name)
        if factory is None:
            factory = self._plugin(name)
        if factory is None:
            known = ", ".join(self.names()) or "none"
            raise KeyError(f"unknown {self.kind} {name!r} (known: {known})")
        return factory

    def _plugin(self, name: str) -> T | None:
        """Load the entry point ``name`` of this registry's group, once."""
        if self.group is None:
            return None
        point = entry_points(self.group).get(name)
        if point is None:
            return None
        with self._lock:
            if name in self._factories:  # loaded by another thread, or registered by the import itself
                return self._factories[name]
            try:
                loaded = point.load()  # type: ignore[attr-defined]
            except Exception as exc:  # a broken plugin names itself, it does not crash a run
                raise PluginError(f"{self.kind} {name!r}: entry point {point.value!r} of group {self.group} "  # type: ignore[attr-defined]
                                  f"could not be loaded: {type(exc).__name__}: {exc}") from exc
            if name not in self._factories:
                self._factories[name] = loaded
            return self._factories[name]

    def names(self) -> list[str]:
        plugins = set(entry_points(self.group)) if self.group else set()
        return sorted(set(self._factories) | plugins)

    def __contains__(self, name: object) -> bool:
        return name in self._factories or (
            isinstance(name, str) and self.group is not None and name in entry_points(self.group))
