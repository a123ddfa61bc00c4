"""Stage pools: bounded thread pools that move conversations from stage to stage.

Each stage (prompt, generate, vuser, execute, score) has its own pool sized from ``runners``;
a semaphore caps the conversations in flight so memory stays flat however many items there are.
When a stage finishes, the conversation is handed to the pool of its next stage; at COMPLETE
it is passed to ``on_complete`` (the journal) exactly once and its slot is freed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from evalbench.core.conversation import Conversation, Outcome, Stage
from evalbench.run.stages import StageWork

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, sizes: dict[Stage, int], max_in_flight: int, on_complete: Callable[[Conversation], None]) -> None:
        self._pools = {
            stage: ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"evalbench-{stage.value}")
            for stage, n in sizes.items()
        }
        self._slots = threading.Semaphore(max_in_flight)
        self._lock = threading.Condition()
        self._in_flight = 0
        self._on_complete = on_complete
        self.cancelled = threading.Event()
        self.failure: BaseException | None = None

    def admit(self, conv: Conversation, work: StageWork) -> bool:
        """Start ``conv`` (blocks while the in-flight cap is reached). False once cancelled."""
        while not self._slots.acquire(timeout=0.5):
            if self.cancelled.is_set():
                return False
        if self.cancelled.is_set():
            self._slots.release()
            return False
        with self._lock:
            self._in_flight += 1
        conv.admit()  # its deadline starts now, not while it waited for a slot
        self._submit(conv.stage, conv, work)
        return True

    def _submit(self, stage: Stage, conv: Conversation, work: StageWork) -> None:
        self._pools[stage].submit(self._step, stage, conv, work)

    def _step(self, stage: Stage, conv: Conversation, work: StageWork) -> None:
        if self.cancelled.is_set():
            self._cancel(conv, work)
            return
        started = time.perf_counter()
        nxt = work.run(stage, conv)
        conv.stage_seconds[stage.value] = conv.stage_seconds.get(stage.value, 0.0) + time.perf_counter() - started
        if self.cancelled.is_set():  # cancelled while the stage ran: its result may be the cancellation's
            self._cancel(conv, work)  # doing (a killed test case, an interrupted call), never a verdict
        elif nxt is Stage.COMPLETE:
            self._complete(conv)
        else:
            self._submit(nxt, conv, work)

    def _cancel(self, conv: Conversation, work: StageWork) -> None:
        """Record ``conv`` as cancelled (``--resume`` runs it again)."""
        conv.outcome, conv.error = Outcome.CANCELLED, "run cancelled"
        conv.stage = Stage.COMPLETE
        conv.elapsed_s = time.monotonic() - conv.started
        work.finish(conv)
        self._complete(conv)

    def _complete(self, conv: Conversation) -> None:
        try:
            self._on_complete(conv)
        except BaseException as exc:  # noqa: BLE001 (the journal cannot be written: stop the run, lose nothing silently)
            log.error("could not record item %s: %s", conv.item.id, exc)
            self.failure = self.failure or exc
            self.cancelled.set()
        finally:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()
            self._slots.release()

    def wait(self) -> None:
        """Block until every admitted conversation is complete."""
        with self._lock:
            while self._in_flight:
                self._lock.wait(timeout=0.5)

    def cancel(self) -> None:
        self.cancelled.set()

    def shutdown(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=True)
