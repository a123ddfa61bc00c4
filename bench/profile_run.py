"""Where a run spends its time: a benchmark workload's run (bench/workload.py) under cProfile,
its time split by package and the top functions by own time.

    python bench/profile_run.py [--n 1000] [--top 15] [--workload instant|http]

instant: the in-process oracle agent and the rules virtual user; http: the adk agent and the llm
virtual user at the fake servers (bench/fakes.py, started here as processes of their own, so
their CPU is not in the profile). Both on the embedded PostgreSQL.

Each thread is profiled with its own CPU clock (``time.thread_time``), so waiting — for the
database, a lock, a queue — counts for nothing: the shares are of CPU. cProfile slows every
Python call alike, so read the shares, not the absolute times; the conversations/s line is
measured without the profiler, in the same process, first.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fakes
from workload import write_config, write_dataset, write_setup

from evalbench.config import load_run_config
from evalbench.run import run

GROUPS = ("sqlglot", "psycopg", "sqlalchemy", "pydantic", "google/genai", "httpx", "httpcore", "h11", "ssl", "json", "threading",
          "queue", "evalbench/results",
          "evalbench/scoring", "evalbench/backends", "evalbench/vuser", "evalbench/agents", "evalbench")


def _group(filename: str) -> str:
    for name in GROUPS:
        if f"/{name}/" in filename or filename.endswith(f"/{name}.py"):
            return name
    return "other (stdlib, builtins)"


def _profile_every_thread() -> list[cProfile.Profile]:
    """A profiler in this thread and in every thread started from now on (the stage pools)."""
    profilers = [cProfile.Profile(time.thread_time)]

    def start(_frame: object, _event: str, _arg: object) -> None:
        profiler = cProfile.Profile(time.thread_time)
        profilers.append(profiler)
        sys.setprofile(None)
        profiler.enable()

    threading.setprofile(start)  # type: ignore[arg-type]
    profilers[0].enable()
    return profilers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="conversations")
    parser.add_argument("--top", type=int, default=15, help="functions listed by own time")
    parser.add_argument("--workload", choices=["instant", "http"], default="instant")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evalbench-profile-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        dataset = root / "items.jsonl"
        write_dataset(dataset, args.n, single_turn=False)
        urls = {}
        if args.workload == "http":
            os.environ.setdefault("GEMINI_API_KEY", "fake")
            for kind in ("adk", "gemini"):
                server = fakes.start(kind, dataset if kind == "adk" else None)
                stack.callback(server.stop)
                urls[f"{kind}_url"] = server.url
        config = write_config(root, dataset, write_setup(root), concurrency=8, in_flight=64, workload=args.workload, **urls)
        run(load_run_config(config, run_id="warm"), progress=False)  # provisioning, imports, caches
        started = time.perf_counter()
        run(load_run_config(config, run_id="plain"), progress=False)
        plain = time.perf_counter() - started
        profilers = _profile_every_thread()
        run(load_run_config(config, run_id="profiled"), progress=False)
        profilers[0].disable()
        threading.setprofile(None)  # type: ignore[arg-type]
    stats = pstats.Stats(profilers[0])
    for profiler in profilers[1:]:
        stats.add(profiler)
    by_group: dict[str, float] = defaultdict(float)
    total = 0.0
    for (filename, _line, _name), (_cc, _nc, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        by_group[_group(filename)] += own
        total += own
    print(f"{args.n} conversations in {plain:.2f} s without the profiler ({args.n / plain:.0f} conversations/s)")
    print("CPU time by package (all threads):")
    for name, seconds in sorted(by_group.items(), key=lambda kv: -kv[1]):
        print(f"  {name:28} {100 * seconds / total:5.1f} %")
    print(f"top {args.top} functions by own CPU time:")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
