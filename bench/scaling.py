"""How the harness scales: latency efficiency at C conversations in flight, peak memory against
the number of items, and conversations/s with one worker process against two."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import fakes
from spread import Spread
from workload import run_cli, run_harness, write_config, write_dataset, write_setup


def one_run(n: int, pgdata: Path, *, latency: float = 0.0, concurrency: int = 8, in_flight: int = 64,
            single_turn: bool = False) -> dict[str, Any]:
    """The instant workload on ``n`` items, in a child process."""
    with tempfile.TemporaryDirectory(prefix="evalbench-bench-") as tmp:
        root = Path(tmp)
        dataset = root / "items.jsonl"
        write_dataset(dataset, n, single_turn=single_turn)
        config = write_config(root, dataset, write_setup(root), latency=latency, concurrency=concurrency, in_flight=in_flight)
        return run_harness(config, pgdata)


@contextmanager
def busy_core() -> Iterator[None]:
    """A child process that spins for as long as the block runs: the other core is busy."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def latency(pgdata: Path, *, latency_s: float, concurrencies: list[int], seconds: float, busy: bool) -> list[dict[str, Any]]:
    """An agent that takes ``latency_s`` per turn, single-turn items, C generate runners: the ideal
    is C/L conversations/s; N is ``seconds`` of ideal work. With ``busy``, each C is measured a
    second time while another process spins."""
    rows = []
    for c in concurrencies:
        ideal = c / latency_s
        n = max(50, int(ideal * seconds))
        row: dict[str, Any] = {"c": c, "n": n, "ideal": ideal}
        for label in ("idle", "busy") if busy else ("idle",):
            with busy_core() if label == "busy" else _nothing():
                r = one_run(n, pgdata, latency=latency_s, concurrency=c, in_flight=max(64, 2 * c), single_turn=True)
            row[label] = (n / r["elapsed_s"]) / ideal
        rows.append(row)
    return rows


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def memory(pgdata: Path, sizes: list[int]) -> list[dict[str, Any]]:
    """Peak RSS of the whole run process at each N (the instant workload)."""
    rows: list[dict[str, Any]] = []
    for n in sizes:
        r = one_run(n, pgdata)
        rows.append({"n": n, "peak_rss_mb": r["peak_rss_mb"], "ratio": r["peak_rss_mb"] / (rows[0]["peak_rss_mb"] if rows else r["peak_rss_mb"])})
    return rows


def workers(pgdata: Path, n: int, reps: int, workload: str = "instant") -> dict[str, Any]:
    """``evalbench run --workers 1`` against ``--workers 2`` on ``workload`` (the http one at the
    fakes), alternating; conversations/s of the whole command (start-up, the workers, the merge)."""
    rates: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="evalbench-bench-workers-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        dataset = root / "items.jsonl"
        write_dataset(dataset, n, single_turn=False)
        urls = {}
        if workload == "http":
            adk, gemini = fakes.start("adk", dataset), fakes.start("gemini")
            stack.callback(adk.stop)
            stack.callback(gemini.stop)
            urls = {"adk_url": adk.url, "gemini_url": gemini.url}
        config = write_config(root, dataset, write_setup(root), workload=workload, **urls)
        for rep in range(reps):
            for count in (1, 2):
                rates[count].append(n / run_cli(config, pgdata, workers=count, run_id=f"w{count}-{rep}"))
    one, two = Spread(tuple(rates[1])), Spread(tuple(rates[2]))
    return {"workload": workload, "n": n, "reps": reps, "workers_1": one, "workers_2": two, "speedup": two.median / one.median}
