"""Benchmarks of the real pipeline (embedded PostgreSQL, stage pools, journal, reports).

    python bench/run_bench.py                       # all three, default sizes
    python bench/run_bench.py throughput --n 1000 10000 100000
    python bench/run_bench.py latency --latency 0.1 --concurrency 8 32
    python bench/run_bench.py memory --n 1000 100000

throughput: conversations/s end to end with an instant simulated agent (the oracle), on a
    synthetic dataset where a third of the items are ambiguous (one clarification round) and a
    fifth have a follow-up; the figure includes provisioning, journal and reports.
latency:    an agent that takes L seconds per turn, C generate runners, single-turn items:
    the ideal is C/L conversations/s; prints the achieved fraction.
memory:     peak RSS of the whole run process at each N (each run in its own process).

Every run happens in a child process so its peak RSS is its own. No timing asserts anywhere:
these are measurements to read, and bench/README.md records what they printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = 200


def write_setup(root: Path) -> Path:
    """A tiny database `benchdb` with one table of ROWS rows."""
    setup = root / "setup"
    (setup / "benchdb" / "postgres").mkdir(parents=True)
    (setup / "benchdb" / "data").mkdir(parents=True)
    (setup / "benchdb" / "postgres" / "setup.sql").write_text(
        "CREATE TABLE readings (id integer PRIMARY KEY, station text, value numeric(8,2), taken date);\n"
    )
    with (setup / "benchdb" / "data" / "readings.csv").open("w") as handle:
        for i in range(ROWS):
            handle.write(f"{i},'station_{i % 7}',{(i * 37) % 1000 / 10:.2f},'2025-01-{1 + i % 28:02d}'\n")
    return setup


def write_dataset(path: Path, n: int, *, single_turn: bool) -> None:
    """N BIRD-Interact items; golden SQL varies per item so nothing is cached across items."""
    with path.open("w") as handle:
        for i in range(n):
            station = f"station_{i % 7}"
            sql = f"SELECT id, value FROM readings WHERE station = '{station}' AND id > {i % 150} ORDER BY id"
            item = {
                "instance_id": f"bench_{i}",
                "selected_database": "benchdb",
                "query": f"List id and value of readings from {station} with id above {i % 150}, by id.",
                "amb_user_query": f"List readings from the station with id above {i % 150}.",
                "user_query_ambiguity": {"critical_ambiguity": [], "non_critical_ambiguity": []},
                "knowledge_ambiguity": [],
                "sol_sql": [sql],
                "conditions": {"decimal": 2, "distinct": False, "order": True},
                "category": "Query",
                "difficulty_tier": "Simple",
            }
            if not single_turn and i % 3 == 0:
                item["user_query_ambiguity"]["critical_ambiguity"] = [
                    {"term": "the station", "sql_snippet": f"station = '{station}'", "is_mask": True, "type": "semantic_ambiguity"}
                ]
            if not single_turn and i % 5 == 0:
                item["follow_up"] = {"query": "Now only the count.", "sol_sql": [f"SELECT count(*) FROM readings WHERE station = '{station}'"],
                                     "conditions": {"decimal": -1, "distinct": False, "order": False}, "category": "Query"}
            handle.write(json.dumps(item) + "\n")


def write_config(root: Path, dataset: Path, setup: Path, *, latency: float, concurrency: int, in_flight: int) -> Path:
    config = root / "bench.yaml"
    config.write_text(
        f"""dataset_config: {dataset}
setup_directory: {setup}
model_config: {{agent: simulated:oracle, latency_s: {latency}}}
vuser_model_config: rules
scorers: {{exec_match: {{}}, executable: {{}}, turn_count: {{}}}}
runners: {{promptgen_runners: 1, sqlgen_runners: {concurrency}, vuser_runners: 2, sqlexec_runners: 4, scoring_runners: 1}}
max_in_flight: {in_flight}
seed: 1
reporting: {{csv: {{output_directory: {root / 'results'}}}}}
"""
    )
    return config


CHILD = """
import json, resource, sys, time
from evalbench.config import load_run_config
from evalbench.orchestrator import run
t = time.perf_counter()
result = run(load_run_config(sys.argv[1]), progress=False)
elapsed = time.perf_counter() - t
s = result.summary
print(json.dumps({"elapsed_s": elapsed, "conversations": s["total_items"], "agent_calls": s["conversation"]["agent_calls"],
                  "outcomes": s["outcomes"], "rate": s["scorers"]["exec_match"]["main"]["rate"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_child(config: Path, pgdata: Path) -> dict:
    """One run in a fresh process; ``wall_s`` counts from process start (imports, starting the
    embedded server, provisioning) to exit."""
    env = dict(os.environ, EVALBENCH_PGDATA=str(pgdata))
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, str(config)], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"benchmark run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"wall_s": wall}


def one_run(n: int, *, latency: float = 0.0, concurrency: int = 8, in_flight: int = 64, single_turn: bool = False,
            pgdata: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="evalbench-bench-") as tmp:
        root = Path(tmp)
        setup = write_setup(root)
        dataset = root / "items.jsonl"
        write_dataset(dataset, n, single_turn=single_turn)
        config = write_config(root, dataset, setup, latency=latency, concurrency=concurrency, in_flight=in_flight)
        return run_child(config, pgdata)


def bench_throughput(sizes: list[int], pgdata: Path) -> None:
    print("throughput (instant oracle agent, rules vuser, 1/3 ambiguous, 1/5 follow-ups)")
    print("  run: evalbench.run() alone; process: whole `python` process incl. imports and server start")
    print(f"{'N':>8} {'run s':>7} {'conv/s':>7} {'process s':>10} {'conv/s':>7} {'agent calls':>12} {'peak RSS MB':>12}")
    for n in sizes:
        r = one_run(n, pgdata=pgdata)
        assert r["rate"] == 1.0, r  # the oracle must stay correct while fast
        print(f"{n:>8} {r['elapsed_s']:>7.2f} {n / r['elapsed_s']:>7.0f} {r['wall_s']:>10.2f} {n / r['wall_s']:>7.0f} "
              f"{r['agent_calls']:>12} {r['peak_rss_mb']:>12.0f}")


def bench_latency(n: int | None, latency: float, concurrencies: list[int], pgdata: Path) -> None:
    print(f"latency efficiency (agent latency L={latency}s, single-turn items; run time includes start-up)")
    print(f"{'C':>5} {'N':>7} {'ideal conv/s':>13} {'achieved':>9} {'fraction':>9}")
    for c in concurrencies:
        count = n or int(25 * c / latency)  # about 25 s of ideal work, so start-up is amortised
        r = one_run(count, latency=latency, concurrency=c, in_flight=max(64, 2 * c), single_turn=True, pgdata=pgdata)
        ideal = c / latency
        achieved = count / r["elapsed_s"]
        print(f"{c:>5} {count:>7} {ideal:>13.1f} {achieved:>9.1f} {achieved / ideal:>9.1%}")


def bench_memory(sizes: list[int], pgdata: Path) -> None:
    print("peak memory (RSS of the run process)")
    base = None
    for n in sizes:
        r = one_run(n, pgdata=pgdata)
        base = base or r["peak_rss_mb"]
        print(f"{n:>8} conversations: {r['peak_rss_mb']:.0f} MB ({r['peak_rss_mb'] / base:.2f}x the first)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", nargs="?", choices=["all", "throughput", "latency", "memory"], default="all")
    parser.add_argument("--n", type=int, nargs="+", help="item counts")
    parser.add_argument("--latency", type=float, default=0.1, help="agent latency L in seconds (latency bench)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32], help="generate runners C (latency bench)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evalbench-bench-pg-") as pg:
        pgdata = Path(pg) / "pgdata"
        started = time.perf_counter()
        one_run(10, pgdata=pgdata)  # warm-up: initdb of the embedded server happens once per machine
        if args.which in ("all", "throughput"):
            bench_throughput(args.n or [1000, 10000], pgdata)
        if args.which in ("all", "latency"):
            bench_latency(args.n[0] if args.n else None, args.latency, args.concurrency, pgdata)
        if args.which in ("all", "memory"):
            bench_memory(args.n or [1000, 100000], pgdata)
        print(f"(benchmarks took {time.perf_counter() - started:.0f} s; {os.cpu_count()} cores; "
              f"max RSS of this driver {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")


if __name__ == "__main__":
    main()
