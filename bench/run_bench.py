"""Benchmarks of the real pipeline, each figure against what the same machine can do.

    python bench/run_bench.py                       # everything at the default sizes (a few minutes)
    python bench/run_bench.py --full                # full sizes: 10,000 / 2,580 items, 100k memory, 25 s latency runs
    python bench/run_bench.py efficiency --workload http --n 2580 --reps 5
    python bench/run_bench.py latency --latency 0.2 --concurrency 8 32 128
    python bench/run_bench.py memory --n 1000 10000 100000
    python bench/run_bench.py workers --n 4000

efficiency: harness conversations/s against the floor — the same SQL executed by a plain psycopg
    loop and the same HTTP round trips to the same fakes, at the same concurrency, without the
    harness — for the instant workload (in-process oracle agent, rules virtual user) and the http
    workload (ADK agent and llm virtual user at fake servers); median and min–max of R interleaved
    repetitions, efficiency = ratio of the medians.
latency:    an agent that takes L seconds per turn, C generate runners, single-turn items:
    achieved ÷ ideal (C/L) conversations/s, idle and with another process spinning.
memory:     peak RSS of the run process at each N, and its ratio to the first.
workers:    `evalbench run --workers 1` against `--workers 2`, whole command, and the speed-up (each workload).

The machine is described first. Every run happens in a child process; no timing is asserted
anywhere: these are measurements to read, and bench/README.md records what they printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import efficiency
import machine
import scaling
from spread import Spread
from workload import write_config, write_dataset, write_setup

__all__ = ["write_config", "write_dataset", "write_setup"]  # bench/profile_run.py and older scripts import these here

DEFAULTS = {"instant": 1000, "http": 500, "workers": 3000, "workers_http": 1500, "memory": [1000, 10000], "latency_s": 25.0}
FULL = {"instant": 10000, "http": 2580, "workers": 10000, "workers_http": 2580, "memory": [1000, 10000, 100000], "latency_s": 25.0}


def section_efficiency(args: argparse.Namespace, sizes: dict[str, Any], pgdata: Path, out: dict[str, Any]) -> None:
    print(f"\nharness efficiency (median of {args.reps}, min–max; efficiency = harness ÷ floor, medians)")
    print(efficiency.HEADER)
    results = []
    for workload in args.workload:
        n = args.n[0] if args.n else sizes[workload]
        result = efficiency.measure(workload, n, args.reps, pgdata)
        print(efficiency.row(result), flush=True)
        results.append(result)
    for result in results:
        print(efficiency.work_line(result))
    for result in results:
        print(efficiency.cpu_line(result))
    out["efficiency"] = results


def section_latency(args: argparse.Namespace, sizes: dict[str, Any], pgdata: Path, out: dict[str, Any]) -> None:
    print(f"\nlatency efficiency (agent latency L = {args.latency} s per turn, single-turn items; achieved ÷ C/L)")
    print(f"{'C':>5} {'N':>6} {'ideal conv/s':>13} {'idle':>8} {'other core busy':>16}")
    rows = scaling.latency(pgdata, latency_s=args.latency, concurrencies=args.concurrency, seconds=sizes["latency_s"], busy=True)
    for r in rows:
        print(f"{r['c']:>5} {r['n']:>6} {r['ideal']:>13.0f} {r['idle']:>8.1%} {r['busy']:>16.1%}", flush=True)
    out["latency"] = rows


def section_memory(args: argparse.Namespace, sizes: dict[str, Any], pgdata: Path, out: dict[str, Any]) -> None:
    print("\npeak memory (RSS of the run process, instant workload)")
    rows = scaling.memory(pgdata, args.n or sizes["memory"])
    for r in rows:
        print(f"{r['n']:>8} conversations: {r['peak_rss_mb']:5.0f} MB ({r['ratio']:.2f}x the first)", flush=True)
    out["memory"] = rows


def section_workers(args: argparse.Namespace, sizes: dict[str, Any], pgdata: Path, out: dict[str, Any]) -> None:
    print(f"\nworkers (`evalbench run --workers N`, the whole command; median of {args.reps}, min–max)")
    out["workers"] = []
    for workload in args.workload:
        n = args.n[0] if args.n else sizes["workers" if workload == "instant" else "workers_http"]
        r = scaling.workers(pgdata, n, args.reps, workload)
        print(f"{workload:>9} {n:>6}: --workers 1 {r['workers_1'].show():>16} conv/s, --workers 2 {r['workers_2'].show():>16} "
              f"conv/s, speed-up {r['speedup']:.2f}x", flush=True)
        out["workers"].append(r)


SECTIONS = {"efficiency": section_efficiency, "latency": section_latency, "memory": section_memory, "workers": section_workers}


def _plain(value: Any) -> Any:
    if isinstance(value, Spread):
        return value.as_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", nargs="?", choices=["all", *SECTIONS], default="all")
    parser.add_argument("--n", type=int, nargs="+", help="item counts (memory: several; otherwise the first)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of efficiency and workers (default 3)")
    parser.add_argument("--workload", nargs="+", choices=["instant", "http"], default=["instant", "http"], help="efficiency workloads")
    parser.add_argument("--latency", type=float, default=0.2, help="agent latency L in seconds (latency)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 128], help="generate runners C (latency)")
    parser.add_argument("--full", action="store_true", help="full sizes (about 15 minutes)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = FULL if args.full else DEFAULTS
    out: dict[str, Any] = {"machine": machine.describe(), "date": time.strftime("%Y-%m-%d %H:%M")}
    print("\n".join(out["machine"]))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="evalbench-bench-pg-") as pg:
        pgdata = Path(pg) / "pgdata"
        scaling.one_run(10, pgdata)  # warm-up: initdb of the embedded server, once per data directory
        for name, section in SECTIONS.items():
            if args.which in ("all", name):
                section(args, sizes, pgdata, out)
    print(f"\n(benchmarks took {time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(_plain(out), indent=1))


if __name__ == "__main__":
    main()
