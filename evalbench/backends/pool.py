"""The connections of a sandbox: a pool of readers, one writer, and which of them run now
(so ``interrupt()`` reaches exactly the executions in progress). Shared by the file and server
backends whose driver has no pool of its own."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class Checkout(Generic[T]):
    def __init__(self, make_reader: Callable[[], T], readers: int, writer: T) -> None:
        self._readers: queue.LifoQueue[T] = queue.LifoQueue()
        for _ in range(max(1, readers)):
            self._readers.put(make_reader())
        self.writer = writer
        self._busy: list[T] = []
        self._lock = threading.Lock()

    @contextmanager
    def __call__(self, write: bool) -> Iterator[T]:
        """A reader (waiting for a free one), or the writer (its caller holds the write lock)."""
        item = self.writer if write else self._readers.get()
        with self._lock:
            self._busy.append(item)
        try:
            yield item
        finally:
            with self._lock:
                self._busy.remove(item)
            if not write:
                self._readers.put(item)

    def busy(self) -> list[T]:
        """What runs an execution now."""
        with self._lock:
            return list(self._busy)

    def drain(self) -> list[T]:
        """Every idle reader, and the writer: for closing them."""
        items = []
        while not self._readers.empty():
            items.append(self._readers.get_nowait())
        return [*items, self.writer]
