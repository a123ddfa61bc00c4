"""One small registry for every pluggable kind (agent, virtual user, scorer, backend).

A registry knows its built-ins as ``"module:attr"`` strings and finds other packages' factories
among the Python entry points of its group (``evalbench.agents``, ``evalbench.vusers``,
``evalbench.scorers``, ``evalbench.backends``), which are ``"module:attr"`` strings too. Both are
imported on first use, by :meth:`Registry.get`: listing or checking names (:meth:`Registry.names`,
``in``) imports nothing, so the config schema can check the names it is given without importing
an adapter. A built-in name always wins over an entry point of the same name; registering a name
in-process that is already taken is an error, so nothing silently shadows a factory.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar, cast

from evalbench.core.errors import EvalbenchError

T = TypeVar("T")


class PluginError(EvalbenchError):
    """An entry point that names a plugin could not be loaded."""

    exit_code = 2


def entry_points(group: str) -> dict[str, object]:
    """The installed entry points of ``group`` by name (importlib.metadata, read when asked)."""
    from importlib.metadata import entry_points as installed

    return {ep.name: ep for ep in installed(group=group)}


def resolve(target: str) -> object:
    """The object a ``"package.module:attr"`` string names, its module imported."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


class Registry(Generic[T]):
    """Factories of one kind by name: ``builtins`` (name -> ``"module:attr"``), entry points of
    ``group``, and any registered in-process; each resolved once, when first asked for."""

    def __init__(self, kind: str, group: str | None = None, builtins: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self.group = group
        self.builtins: Mapping[str, str] = dict(builtins or {})
        self._factories: dict[str, T] = {}  # resolved or registered; looked up first
        self._lock = threading.RLock()  # an entry point's import may look up another name

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator registering a factory in-process (a notebook, a test) under a new name."""
        def decorator(factory: T) -> T:
            if name in self._factories or name in self.builtins:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._factories[name] = factory
            return factory

        return decorator

    def get(self, name: str) -> T:
        factory = self._factories.get(name)
        if factory is None:
            factory = self._builtin(name) if name in self.builtins else self._plugin(name)
        if factory is None:
            known = ", ".join(self.names()) or "none"
            raise KeyError(f"unknown {self.kind} {name!r} (known: {known})")
        return factory

    def _builtin(self, name: str) -> T:
        """Import the built-in ``name``, once; its import errors are evalbench's own and propagate
        as they are (an adapter names the extra to install when it needs one)."""
        with self._lock:
            if name not in self._factories:
                self._factories[name] = cast(T, resolve(self.builtins[name]))
            return self._factories[name]

    def _plugin(self, name: str) -> T | None:
        """Load the entry point ``name`` of this registry's group, once."""
        if self.group is None:
            return None
        point = entry_points(self.group).get(name)
        if point is None:
            return None
        with self._lock:
            if name in self._factories:  # loaded by another thread meanwhile
                return self._factories[name]
            try:
                loaded = point.load()  # type: ignore[attr-defined]  # importlib.metadata's EntryPoint differs across Python versions
            except Exception as exc:  # a broken plugin names itself, it does not crash a run
                raise PluginError(f"{self.kind} {name!r}: entry point {point.value!r} of group {self.group} "  # type: ignore[attr-defined]  # importlib.metadata's EntryPoint differs across Python versions
                                  f"could not be loaded: {type(exc).__name__}: {exc}") from exc
            return self._factories.setdefault(name, loaded)

    def names(self) -> list[str]:
        """Built-in, registered and installed names, sorted; nothing is imported."""
        plugins = set(entry_points(self.group)) if self.group else set()
        return sorted(set(self.builtins) | set(self._factories) | plugins)

    def __contains__(self, name: object) -> bool:
        return name in self._factories or name in self.builtins or (
            isinstance(name, str) and self.group is not None and name in entry_points(self.group))
